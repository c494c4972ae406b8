"""The ``hivenet-db`` command: bootstrap, migrate, allocate, parse, report, maintain, demo, bench.

With no ``--url`` and no ``HIVENET_DATABASE_URL`` every command that needs a database uses
the embedded local PostgreSQL (see ``hivenet_db.tools.embedded_postgres``), initialised on
first use, started on demand and migrated to head. Output is a readable table, or JSON with
``--json``.

A failure prints exactly one line on stderr, ``hivenet-db: PROBLEM: WHAT TO DO``, never a
password; ``--debug`` prints the traceback before it. ``failures.explain`` is the one place
that turns an exception into that line and an exit status:

- 0 done;
- 1 the database refused with a hivenet error (``HNxxx ClassName: message``);
- 2 usage or environment: a malformed URL, no server, no such database or role, a refused
  password or privilege, schema hivenet not installed, newer than this package or with a
  conflicting version table, a revision that does not exist, no local PostgreSQL;
- 3 ``audit verify``: the namespace's audit chain is broken (the line names where);
- 70 an internal error (a bug: run again with ``--debug`` and report the traceback);
- 130 interrupted.

What each command accepts is in ``commands`` (cheap to import, so that ``--help`` and
``--version`` load neither SQLAlchemy nor psycopg nor rich); what it does is in the module of
its group (``install``, ``prepare``, ``serials``, ``report``, ``maintain``, ``audit``,
``proxy``, ``demo``, ``bench``, ``embedded``), imported only when it runs. A new command is its
function in such a module and its arguments in ``commands``.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from hivenet_db.cli.bench import split_argv
from hivenet_db.cli.commands import GROUPS
from hivenet_db.cli.output import PROG, Output, one_line, redact
from hivenet_db.cli.parser import Commands, Parser, common_options, handler_of, package_version

INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = Parser(
        prog=PROG, parents=[common],
        description="Serial numbers (HiveNet Sequence Standards) and idempotency inside "
                    "PostgreSQL. With no --url and no $HIVENET_DATABASE_URL, commands use a "
                    "local PostgreSQL that hivenet-db initialises, starts and migrates itself.",
        epilog=f"Start with `{PROG} demo`. `{PROG} COMMAND --help` explains each command. "
               "Exit status: 0 done, 1 the database refused with a hivenet error (HNxxx), 2 "
               "usage or environment (URL, connection, privileges, schema missing or newer "
               "than the package), 70 internal error (run again with --debug); a failure is "
               "one line on stderr.")
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    commands = Commands(parser, common, PROG)
    for group in GROUPS:
        group(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv, bench_args = split_argv(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(argv)
    if bench_args is not None:
        args.bench_args = bench_args
    args.url = getattr(args, "url", None)
    out = Output(getattr(args, "json", False))
    try:
        return handler_of(args.handler)(args, out) or 0
    except BrokenPipeError:  # `hivenet-db sql | head`
        return 0
    except KeyboardInterrupt:
        out.note("interrupted")
        return INTERRUPTED
    except Exception as error:
        from hivenet_db.cli.failures import explain

        failure = explain(error, args)
        if getattr(args, "debug", False):
            print(redact("".join(traceback.format_exception(error))), end="", file=sys.stderr)
        out.note(redact(one_line(failure.message)))
        return failure.status

