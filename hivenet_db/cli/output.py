"""What a command prints: tables or JSON on stdout, notes and progress bars on stderr, and
the text rules every message follows (one line, never a password)."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

PROG = "hivenet-db"


class CommandError(Exception):
    """A problem of usage or environment: printed as is, exit status 2."""


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


# Plain output (stdout not a terminal): no colour, no wrapping, ASCII, one row per line, so
# that grep, cut and tests read it; a terminal gets rich's boxes and colours.
PLAIN_BOX = box.Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
PLAIN_WIDTH = 1_000_000  # never wrap or cut a cell: a serial or URL stays whole


def _plain_console(file: IO[str]) -> Console:
    return Console(file=file, width=PLAIN_WIDTH, color_system=None, force_terminal=False,
                   markup=False, emoji=False, highlight=False, soft_wrap=True)


def _table(rows: Sequence[dict[str, Any]], fancy: bool) -> Table:
    """Rows as a rich Table; column order is the first row's key order."""
    table = (Table(header_style="bold cyan", box=box.ROUNDED) if fancy else
             Table(box=PLAIN_BOX, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0)))
    for column in rows[0]:
        table.add_column(column, no_wrap=not fancy, overflow="fold" if fancy else "ignore")
    for row in rows:
        table.add_row(*(Text(cell(row.get(c))) for c in rows[0]))
    return table


def format_table(rows: Sequence[dict[str, Any]], empty: str = "(none)") -> str:
    """Rows as a plain aligned text table (header, dashes, one line per row)."""
    if not rows:
        return empty
    buffer = io.StringIO()
    _plain_console(buffer).print(_table(rows, fancy=False))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=_plain)


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
        if rows and self.fancy:
            Console().print(_table(rows, fancy=True))
        else:
            print(format_table(rows, empty))

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
                Console().rule(title, align="left", style="bold")
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
        stderr is a terminal; yields the function that advances it by n. Notes printed
        meanwhile go above the bar; stdout is drawn through it only when it is the terminal
        too (else it would end up on stderr)."""
        if not self.live:
            yield lambda n: None
            return
        columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
        columns.append(TimeElapsedColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True,
                      redirect_stdout=sys.stdout.isatty()) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)



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

