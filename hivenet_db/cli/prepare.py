"""``prepare``: give counter scopes their own sequences at deployment, so that each counts
from 1 from its first serial (hivenet.prepare_scope; docs/formats.md, "Scopes")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sqlalchemy import text

from hivenet_db.cli.database import USABLE, database_url, require
from hivenet_db.cli.output import CommandError, Output
from hivenet_db.cli.parser import Commands
from hivenet_db.dburl import engine_for

# The formats counted per system, module and instance: one channel's scope prepared in each.
CHANNEL_FORMATS = ("unified", "system", "interface")
# Scopes per transaction: each new sequence holds a lock until commit (a few thousand would
# fill the lock table), and unprepared scopes of the format wait for that commit.
BATCH = 500


def parse_scope(item: str) -> dict[str, str]:
    """A scope given as NAME=VALUE,NAME=VALUE or as a JSON object of field values."""
    item = item.strip()
    if item.startswith("{"):
        try:
            fields = json.loads(item)
        except json.JSONDecodeError as error:
            raise CommandError(f"scope {item!r}: not a JSON object ({error.msg})") from None
        if not isinstance(fields, dict):
            raise CommandError(f"scope {item!r}: not a JSON object")
        return {str(k): str(v) for k, v in fields.items()}
    pairs = [part.partition("=") for part in item.split(",")]
    if not all(name.strip() and sep for name, sep, _ in pairs):
        raise CommandError(f"scope {item!r}: expected NAME=VALUE,NAME=VALUE or a JSON object")
    return {name.strip(): value.strip() for name, _, value in pairs}


def scopes_of(args: argparse.Namespace) -> list[dict[str, str]]:
    """The scopes of the arguments, then of --file (one a line; # comments, blank lines)."""
    items = list(args.scope)
    if args.file is not None:
        try:
            lines = Path(args.file).read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise CommandError(f"--file {args.file}: {error.strerror}") from None
        items += [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not items:
        raise CommandError("no scope given: name scopes or --file")
    return [parse_scope(item) for item in items]


def cmd_prepare(args: argparse.Namespace, out: Output) -> None:
    scopes = scopes_of(args)
    formats: list[str] = args.format or list(CHANNEL_FORMATS)
    done: list[dict[str, Any]] = []
    with engine_for(database_url(args, out)) as engine, \
            out.progress("preparing scopes", total=len(scopes) * len(formats)) as step:
        with engine.connect() as conn:
            require(conn, USABLE)
        for format in formats:
            for start in range(0, len(scopes), BATCH):
                batch = scopes[start:start + BATCH]
                with engine.begin() as conn:  # each batch commits on its own
                    conn.execute(text("SELECT hivenet.prepare_scope(:f, CAST(:s AS jsonb))"),
                                 {"f": format, "s": json.dumps(batch)})
                step(len(batch))
            done.append({"format": format, "scopes": len(scopes)})
    out.rows(done)


def register(commands: Commands) -> None:
    p = commands.add(
        "prepare", cmd_prepare, "give counter scopes their own sequences before their first "
        "use, so that each counts from 1",
        examples=["prepare system=C0001,module=A01,instance=01",
                  "prepare --file scopes.txt",
                  "prepare --format id_service merchant=123456789012,shard=07"],
        description="Prepare each SCOPE (NAME=VALUE,... or a JSON object of the fields that "
        "form the counter) in each --format (default: unified, system and interface, which "
        "count per system, module and instance), in transactions of 500 scopes, with a "
        "progress bar on stderr. A scope prepared already is left as it is. A scope used "
        "before it is prepared shares its format's cold counter until maintain() promotes "
        "it (docs/guarantees.md). register_module prepares the instances this database owns.")
    p.add_argument("scope", nargs="*", help="NAME=VALUE,NAME=VALUE or a JSON object")
    p.add_argument("--file", metavar="PATH", help="scopes, one a line (# comments)")
    p.add_argument("--format", action="append", metavar="NAME",
                   help="format to prepare the scopes in (repeatable; default: unified, "
                   "system, interface)")
