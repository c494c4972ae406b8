"""``prepare``: give counter scopes their own sequences at deployment, so that each counts
from 1 from its first serial (hivenet.prepare_scope; docs/guides/formats.md, "Scopes")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sqlalchemy import text

from hivenet_db.cli.database import usable_engine
from hivenet_db.cli.formats import hinting_formats
from hivenet_db.cli.output import CommandError, Output, UsageError
from hivenet_db.errors import translated

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
            raise UsageError(f"scope {item!r}: not a JSON object ({error.msg})") from None
        if not isinstance(fields, dict):
            raise UsageError(f"scope {item!r}: not a JSON object")
        return {str(k): str(v) for k, v in fields.items()}
    pairs = [part.partition("=") for part in item.split(",")]
    if not all(name.strip() and sep for name, sep, _ in pairs):
        raise UsageError(f"scope {item!r}: expected NAME=VALUE,NAME=VALUE or a JSON object")
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
        raise UsageError("no scope given: name scopes or --file")
    return [parse_scope(item) for item in items]


def cmd_prepare(args: argparse.Namespace, out: Output) -> None:
    scopes = scopes_of(args)
    formats: list[str] = args.format or list(CHANNEL_FORMATS)
    done: list[dict[str, Any]] = []
    with usable_engine(args, out) as engine, hinting_formats(engine, formats), \
            out.progress("preparing scopes", total=len(scopes) * len(formats)) as step:
        for format in formats:
            for start in range(0, len(scopes), BATCH):
                batch = scopes[start:start + BATCH]
                with engine.begin() as conn, translated():  # each batch commits on its own
                    conn.execute(text("SELECT hivenet.prepare_scope(:f, CAST(:s AS jsonb))"),
                                 {"f": format, "s": json.dumps(batch)})
                step(len(batch))
            done.append({"format": format, "scopes": len(scopes)})
    out.rows(done)
