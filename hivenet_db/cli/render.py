"""How rows look, drawn by rich: boxes and colours on a terminal, plain aligned text in a
pipe, and progress bars. Imported by ``output.Output`` only when it draws one, so that a
command that prints none (``--help``, ``--version``, ``next``) never loads rich."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator, Sequence
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

from hivenet_db.cli.output import ProgressStep, cell

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


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    """Rows with rich's boxes and colours, on the terminal."""
    Console().print(_table(rows, fancy=True))


def print_rule(title: str) -> None:
    Console().rule(title, align="left", style="bold")


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[ProgressStep]:
    """A progress bar (a spinner without ``total``) on stderr, a terminal, while the block
    runs; yields the function that advances it by n. Notes printed meanwhile go above the
    bar; stdout is drawn through it only when it is the terminal too (else it would end up
    on stderr)."""
    columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True,
                  redirect_stdout=sys.stdout.isatty()) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
