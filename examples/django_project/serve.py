"""``python serve.py PORT``: the shop on a threaded WSGI server of the standard library, as
the application's login (a server such as gunicorn in production). ``manage.py runserver``
would need the application's login to read ``django_migrations``."""

import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

from shop.wsgi import application


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 64


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    with make_server("127.0.0.1", port, application, ThreadingWSGIServer) as server:
        server.serve_forever()
