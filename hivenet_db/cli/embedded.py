"""Command ``embedded``: status, start or stop the local PostgreSQL used without a URL."""

from __future__ import annotations

import argparse
import socket

import psycopg

from hivenet_db.cli.database import embedded_url
from hivenet_db.cli.output import CommandError, Output, UsageError, cell, dump_json
from hivenet_db.embedded import EmbeddedPostgres


def move_to_port(server: EmbeddedPostgres, port: int, out: Output) -> None:
    """Make the running ``server`` listen on ``port``: ALTER SYSTEM, then a restart."""
    if server.port == port:
        return
    with socket.socket() as probe:  # else the server would not start again on its own
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise CommandError(f"--port {port}: 127.0.0.1:{port} is taken ({error.strerror}); "
                               "choose another") from None
    out.note(f"moving the local PostgreSQL from port {server.port} to {port}")
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET port = {port:d}")
    server.stop()
    server.start()


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
        embedded_url(out)
        if args.port is not None:
            move_to_port(server, args.port, out)
    info = server.status()
    if out.as_json:
        print(dump_json(info))
    else:
        out.table([{"property": k, "value": cell(v)} for k, v in info.items()])
