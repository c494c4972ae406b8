"""Command ``embedded``: status, start or stop the local PostgreSQL used without a URL."""

from __future__ import annotations

import argparse

from hivenet_db.cli.database import embedded_url
from hivenet_db.cli.output import Output, cell, dump_json
from hivenet_db.cli.parser import Commands
from hivenet_db.embedded import EmbeddedPostgres


def cmd_embedded(args: argparse.Namespace, out: Output) -> None:
    server = EmbeddedPostgres(progress=out.note)
    if args.action == "stop":
        was_running = server.running
        server.stop()
        out.rows([{"directory": str(server.root),
                   "stopped": "yes" if was_running else "was not running"}])
        return
    if args.action == "start":
        embedded_url(out)
    info = server.status()
    if out.as_json:
        print(dump_json(info))
    else:
        out.table([{"property": k, "value": cell(v)} for k, v in info.items()])


def register(commands: Commands) -> None:
    p = commands.add(
        "embedded", cmd_embedded, "status, start or stop the embedded local PostgreSQL",
        examples=["embedded status --json"],
        description="Manage the local PostgreSQL used when no URL is given. Its directory: "
        "$HIVENET_EMBEDDED_DIR, else /var/lib/hivenet-db/embedded as root, else "
        "~/.local/share/hivenet-db/embedded.")
    p.add_argument("action", choices=("status", "start", "stop"))
