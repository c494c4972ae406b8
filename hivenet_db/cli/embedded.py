"""Command ``embedded``: status, start or stop the local PostgreSQL used without a URL."""

from __future__ import annotations

import argparse
import socket

from hivenet_db.cli.database import embedded_url
from hivenet_db.cli.output import CommandError, Output, UsageError, cell, dump_json
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres


def check_free(port: int) -> None:
    """CommandError when 127.0.0.1:``port`` is taken, before the server is set to listen
    there: it would not start, now or on its own later."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise CommandError(f"--port {port}: 127.0.0.1:{port} is taken ({error.strerror}); "
                               "choose another") from None


def cmd_embedded(args: argparse.Namespace, out: Output) -> None:
    if args.port is not None and args.action != "start":
        raise UsageError(f"--port goes with start, not {args.action}")
    server = EmbeddedPostgres(progress=out.note)
    if server.os_user is not None:  # root: the data is not in the caller's home
        out.note(f"as root: data in {server.data_dir}, server run by user {server.os_user} "
                 "($HIVENET_EMBEDDED_DIR, $HIVENET_EMBEDDED_USER to change)")
    if args.action == "stop":
        was_running = server.running
        server.stop()
        out.rows([{"directory": str(server.root),
                   "stopped": "yes" if was_running else "was not running"}])
        return
    if args.action == "start":
        if args.port is not None and not (server.initialized and server.port == args.port):
            check_free(args.port)
        embedded_url(out, port=args.port)
    info = server.status()
    if out.as_json:
        print(dump_json(info))
    else:
        out.table([{"property": k, "value": cell(v)} for k, v in info.items()])
