"""The argument parser: global options, and the ``Commands`` through which each command module
adds its sub-command."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from hivenet_db.cli.output import Output
from hivenet_db.dburl import ENV_VAR

Handler = Callable[[argparse.Namespace, Output], "int | None"]


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage mistakes are one line too (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def common_options() -> Parser:
    """The options every command takes, before or after its name."""
    common = Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=(
        f"database URL (postgresql://...); default ${ENV_VAR}, else the embedded local "
        "PostgreSQL"))
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of tables")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on failure, print the traceback before the one-line message")
    return common


class Commands:
    """The sub-commands of one parser; a command module's ``register`` calls ``add``."""

    def __init__(self, parser: argparse.ArgumentParser, common: Parser, prog: str) -> None:
        self._sub: Any = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
        self._common = common
        self._prog = prog

    def add(self, name: str, handler: Handler, help: str, *, examples: Sequence[str],
            description: str | None = None) -> argparse.ArgumentParser:
        """Sub-command ``name`` run by ``handler``; ``examples`` (arguments after the program
        name) end its --help."""
        shown = "; ".join(f"`{self._prog} {example}`" for example in examples)
        p: argparse.ArgumentParser = self._sub.add_parser(
            name, parents=[self._common], help=help, description=description or help,
            epilog=f"Example: {shown}.")
        p.set_defaults(handler=handler)
        return p
