"""What a command prints: tables or JSON on stdout, notes and progress bars on stderr, and
the text rules every message follows (one line, never a password)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

PROG = "hivenet-db"


class CommandError(Exception):
    """A problem of usage or environment: printed as is, exit status 2."""


class UsageError(CommandError):
    """Arguments that do not go together: printed with a pointer to the command's --help."""


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(_plain(value))


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=_plain)


def json_line(value: Any) -> str:
    """``value`` as one line of JSON Lines."""
    return json.dumps(value, ensure_ascii=False, default=_plain)


ProgressStep = Callable[[int], None]


class Output:
    """Where a command writes: a table or a JSON document on stdout, notes and progress bars
    on stderr. Tables get rich's boxes and colours only when stdout is a terminal; progress
    bars are drawn only when stderr is one, so a pipe or a test reads plain text."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.fancy = sys.stdout.isatty() and not as_json
        self.live = sys.stderr.isatty()

    def note(self, message: str) -> None:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    def table(self, rows: Sequence[dict[str, Any]], empty: str = "(none)") -> None:
        from hivenet_db.cli import render

        if rows and self.fancy:
            render.print_table(rows)
        else:
            print(render.format_table(rows, empty))

    def rows(self, rows: Sequence[dict[str, Any]]) -> None:
        if self.as_json:
            print(dump_json(list(rows)))
        else:
            self.table(rows)

    def sections(self, sections: dict[str, list[dict[str, Any]] | str]) -> None:
        """Titled tables (a str value explains why a section is empty)."""
        if self.as_json:
            print(dump_json(sections))
            return
        for title, body in sections.items():
            if self.fancy:
                from hivenet_db.cli import render

                render.print_rule(title)
            else:
                print(f"== {title}")
            if isinstance(body, str):
                print(body)
            else:
                self.table(body)
            print()

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[ProgressStep]:
        """A progress bar (a spinner without ``total``) on stderr while the block runs, when
        stderr is a terminal; yields the function that advances it by n."""
        if not self.live:
            yield lambda n: None
            return
        from hivenet_db.cli import render

        with render.progress_bar(description, total) as step:
            yield step


# A password in a URL (scheme://user:PASSWORD@) or as a keyword (password=PASSWORD, in a
# conninfo string or a URL's query): libpq quotes a malformed URL back in its message.
_SECRETS = (re.compile(r"(?P<keep>\w[\w+.-]*://[^/@\s:'\"]*:)[^/\s'\"]*(?=@)"),
            re.compile(r"(?P<keep>\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.I))


def _hide(match: re.Match[str]) -> str:
    # URL_FORM's placeholder is not a secret.
    return match[0] if match[0].endswith(":PASSWORD") else f"{match['keep']}***"


def redact(text: str) -> str:
    """``text`` with every password it quotes replaced by ``***``."""
    for pattern in _SECRETS:
        text = pattern.sub(_hide, text)
    return text


def one_line(text: str) -> str:
    return " ".join(text.split())

