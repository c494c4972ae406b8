"""``prepare``: give counter scopes their own sequences at deployment, so that each counts
from 1 from its first serial (hivenet.prepare_scope, run by hivenet_db/tools/scopes.py;
docs/guides/formats.md, "Scopes")."""

from __future__ import annotations

import argparse
from pathlib import Path

from hivenet_db.cli.database import usable_engine
from hivenet_db.cli.formats import hinting_formats
from hivenet_db.cli.output import CommandError, Output, UsageError
from hivenet_db.tools import scopes as scope_lines
from hivenet_db.tools.scopes import ScopeError, Scopes


def file_scopes(path: str, option: str = "--file") -> list[Scopes]:
    """The scopes of the file ``option`` names, one line each (# comments, blank lines)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise CommandError(f"{option} {path}: {error.strerror}") from None
    try:
        return scope_lines.read(lines)
    except ScopeError as error:
        raise UsageError(f"{option} {path}: {error}") from None


def scopes_of(args: argparse.Namespace) -> tuple[list[Scopes], list[str]]:
    """The scopes the arguments name, then those of --file; and the formats they are for
    when a line names none (a format alone before --file, or --format)."""
    formats: list[str] = list(args.format or [])
    words: list[str] = list(args.scope)
    if args.file is not None and len(words) == 1 and "=" not in words[0] \
            and not words[0].startswith("{"):
        formats.append(words.pop())  # `prepare unified --file scopes.txt`
    found: list[Scopes] = []
    if words:
        try:
            found.append(scope_lines.parse(words))
        except ScopeError as error:
            raise UsageError(str(error)) from None
        if found[0].format is not None and args.format:
            raise UsageError(f"format {found[0].format!r} named twice, with --format too: "
                             f"keep one")
    if args.file is not None:
        found += file_scopes(args.file)
    if not found:
        raise UsageError("no scope given: name scopes (such as C0001 A01 01-99) or --file")
    return found, formats


def cmd_prepare(args: argparse.Namespace, out: Output) -> None:
    found, formats = scopes_of(args)
    total = scope_lines.count(found, formats)
    done: dict[str, int] = {}

    def counted(name: str, n: int) -> None:
        done[name] = done.get(name, 0) + n
        step(n)

    named = sorted({name for name, _ in scope_lines.batches(found, formats)})
    with usable_engine(args, out) as engine, hinting_formats(engine, named), \
            out.progress("preparing scopes", total=total) as step:
        scope_lines.prepare(engine, found, formats, counted)
    out.rows([{"format": name, "scopes": n} for name, n in done.items()])
