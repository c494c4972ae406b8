"""The WSGI application gunicorn serves (``settings`` by the environment)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hivenet_db.bench.django_peers.settings")
application = get_wsgi_application()
