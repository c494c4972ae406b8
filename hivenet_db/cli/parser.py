"""The argument parser: global options, and the ``Commands`` through which ``commands.py``
adds each sub-command. Cheap to import: nothing here loads SQLAlchemy, psycopg or rich."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

if TYPE_CHECKING:
    from hivenet_db.cli.output import Output

Handler = Callable[[argparse.Namespace, "Output"], "int | None"]


def package_version() -> str:
    try:
        return importlib.metadata.version("hivenet-db")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "(source tree)"


def handler_of(reference: str) -> Handler:
    """The function ``"module:function"`` of this package names, imported now."""
    module, _, name = reference.partition(":")
    return cast(Handler, getattr(importlib.import_module(f"hivenet_db.cli.{module}"), name))


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage mistakes are one line too (exit status 2), pointing to
    the help of the command they were made in."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def common_options() -> Parser:
    """The options every command takes, before or after its name."""
    common = Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=(
        "database URL (postgresql://...); default $HIVENET_DATABASE_URL, else the embedded "
        "local PostgreSQL"))
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of tables")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on failure, print the traceback before the one-line message")
    return common


class Commands:
    """The sub-commands of one parser; ``commands.py`` calls ``add`` for each."""

    def __init__(self, parser: argparse.ArgumentParser, common: Parser, prog: str) -> None:
        self._sub: Any = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        self._common = common
        self._prog = prog

    def add(self, name: str, handler: str, help: str, *, examples: Sequence[str],
            description: str | None = None) -> argparse.ArgumentParser:
        """Sub-command ``name`` run by the function ``handler`` names (``"module:function"``,
        imported when the command runs); ``examples`` (arguments after the program name) end
        its --help."""
        shown = "; ".join(f"`{self._prog} {example}`" for example in examples)
        p: argparse.ArgumentParser = self._sub.add_parser(
            name, parents=[self._common], help=help, description=description or help,
            epilog=f"Example: {shown}.")
        p.set_defaults(handler=handler)
        return p
