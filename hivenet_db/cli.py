"""The ``hivenet-db`` command: migrate, allocate, parse, report, maintain, demo, bench.

With no ``--url`` and no ``HIVENET_DATABASE_URL`` every command that needs a database uses
the embedded local PostgreSQL (see ``hivenet_db.embedded``), initialised on first use,
started on demand and migrated to head. Output is a readable table, or JSON with ``--json``.
Exit status: 0 done, 1 the database refused (a hivenet error, message on stderr), 2 usage or
environment problem (no PostgreSQL, cannot connect, schema missing).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from hivenet_db.dburl import ENV_VAR, engine_for, from_env, libpq_url
from hivenet_db.embedded import DEFAULT_DATABASE, EmbeddedError, EmbeddedPostgres
from hivenet_db.errors import HivenetError, from_database
from hivenet_db.schema import full_schema_sql
from hivenet_db.serial import parse_serial
from hivenet_db.serials import SerialRepository

PROG = "hivenet-db"
# Options that name a serial field directly; any other field goes through --field NAME=VALUE.
FIELD_OPTIONS = ("system", "module", "instance", "target", "merchant", "shard")


class CommandError(Exception):
    """A problem of usage or environment: printed as is, exit status 2."""


# ---------------------------------------------------------------- output


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(_plain(value))


def format_table(rows: Sequence[dict[str, Any]], empty: str = "(none)") -> str:
    """Rows as an aligned text table; column order is the first row's key order."""
    if not rows:
        return empty
    columns = list(rows[0])
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
              for r in cells]
    return "\n".join(lines)


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, default=_plain)


class Output:
    """Where a command writes: a table or a JSON document on stdout, notes on stderr."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def note(self, message: str) -> None:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    def rows(self, rows: Sequence[dict[str, Any]]) -> None:
        print(dump_json(list(rows)) if self.as_json else format_table(rows))

    def sections(self, sections: dict[str, list[dict[str, Any]] | str]) -> None:
        """Titled tables (a str value explains why a section is empty)."""
        if self.as_json:
            print(dump_json(sections))
            return
        for title, body in sections.items():
            print(f"== {title}")
            print(body if isinstance(body, str) else format_table(body))
            print()


# ---------------------------------------------------------------- database


def embedded_url(out: Output, dbname: str = DEFAULT_DATABASE, to_head: bool = True) -> str:
    """URL of database ``dbname`` on the embedded server: initialised, started and (unless
    ``to_head`` is false: migrate and downgrade choose their revision) migrated to head."""
    started = time.monotonic()
    server = EmbeddedPostgres(progress=out.note)
    with server.lock():
        first = not server.initialized
        server.start()
        url = server.ensure_database(dbname)
        if to_head and _migrate().current(url) != _head():
            out.note(f"migrating schema hivenet in {dbname}")
            _migrate().upgrade(url)
    if first:
        out.note(f"local PostgreSQL ready in {time.monotonic() - started:.1f}s "
                 f"(data in {server.root}; `{PROG} embedded stop` stops it)")
    return url


def _head() -> str:
    from alembic.script import ScriptDirectory

    from hivenet_db.migrate import _config

    head = ScriptDirectory.from_config(_config("")).get_current_head()
    assert head is not None
    return head


def _migrate() -> Any:
    """hivenet_db.migrate, imported when needed: alembic is slow to import for a command."""
    from hivenet_db import migrate

    return migrate


def database_url(args: argparse.Namespace, out: Output, to_head: bool = True) -> str:
    url = from_env(getattr(args, "url", None))
    return libpq_url(url) if url else embedded_url(out, to_head=to_head)


@contextmanager
def transaction(args: argparse.Namespace, out: Output) -> Iterator[Connection]:
    """One transaction, committed when the block ends: the command is the caller here, so a
    serial it prints is committed before anyone sees it (SPEC §6)."""
    with engine_for(database_url(args, out)) as engine, engine.begin() as conn:
        yield conn


def _exists(conn: Connection, kind: str, name: str) -> bool:
    query = "SELECT to_regclass(:n) IS NOT NULL" if kind == "relation" else \
        "SELECT to_regproc(:n) IS NOT NULL"
    return bool(conn.execute(text(query), {"n": name}).scalar())


def _dicts(conn: Connection, query: str, params: dict[str, Any] | None = None
           ) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(text(query), params or {})]


# ---------------------------------------------------------------- commands


def _alembic(action: str, args: argparse.Namespace, out: Output) -> None:
    """Run migrate's upgrade or downgrade to ``args.revision``; alembic's refusals (unknown
    revision, not an ancestor) become a one-line message."""
    from alembic.util import CommandError as AlembicError

    url = database_url(args, out, to_head=False)
    try:
        getattr(_migrate(), action)(url, args.revision)
    except AlembicError as error:
        raise CommandError(f"{action} to {args.revision!r}: {error}") from None
    out.rows([{"database": _redacted(url), "revision": _migrate().current(url)}])


def cmd_migrate(args: argparse.Namespace, out: Output) -> None:
    _alembic("upgrade", args, out)


def cmd_downgrade(args: argparse.Namespace, out: Output) -> None:
    _alembic("downgrade", args, out)


def cmd_bootstrap(args: argparse.Namespace, out: Output) -> None:
    from hivenet_db import bootstrap

    try:
        result = bootstrap.bootstrap(database_url(args, out, to_head=False), args.owner)
    except bootstrap.BootstrapError as error:
        raise CommandError(str(error)) from None
    if out.as_json:
        print(dump_json({"database": result.database, "owner": result.owner,
                         "changed": result.changed, "complete": result.complete,
                         "actions": [{"statement": a.statement, "outcome": a.outcome}
                                     for a in result.actions]}))
        return
    for action in result.actions:
        print(f"{action.outcome}: {action.statement}")
    if not result.complete:
        print(f"left for the owner: connect as {result.owner} and run the statements marked "
              f"'for the owner'")
    elif not result.changed:
        print(f"nothing to do: database {result.database} is already bootstrapped for "
              f"owner {result.owner}")


def cmd_sql(args: argparse.Namespace, out: Output) -> None:
    print(full_schema_sql())


def _fields(args: argparse.Namespace) -> dict[str, str]:
    fields = {name: getattr(args, name) for name in FIELD_OPTIONS
              if getattr(args, name) is not None}
    for item in args.field or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--field {item!r}: expected NAME=VALUE")
        fields[name] = value
    return fields


def _serial_row(serial: Any) -> dict[str, Any]:
    # jsonb keeps keys sorted by length: show the standard's fields in layout order instead.
    order = {name: i for i, name in enumerate(FIELD_OPTIONS)}
    fields = dict(sorted(serial.fields.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))
    when = {"datetime": serial.datetime} if serial.datetime else {"date": serial.date}
    return {"serial": str(serial), "format": serial.format, **fields, **when, "seq": serial.seq}


def cmd_next(args: argparse.Namespace, out: Output) -> None:
    if args.count < 1:
        raise CommandError(f"--count {args.count}: must be at least 1")
    fields = _fields(args)
    with transaction(args, out) as conn:
        serials = SerialRepository(conn).next_many(args.format, args.count, **fields)
    # Printed only after the commit above.
    if out.as_json:
        out.rows([_serial_row(s) for s in serials])
    else:
        print("\n".join(serials))


def cmd_parse(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        serial = parse_serial(conn, args.serial, args.format)
    row = _serial_row(serial)
    if out.as_json:
        print(dump_json(row))
    else:
        print(format_table([{"field": k, "value": _cell(v)} for k, v in row.items()]))


def report_sections(conn: Connection, unified: str | None, limit: int
                    ) -> dict[str, list[dict[str, Any]] | str]:
    """Each section of ``report`` whose view or function exists in this database."""
    sections: dict[str, list[dict[str, Any]] | str] = {}
    if unified is not None:
        if _exists(conn, "function", "hivenet.call_chain"):
            sections[f"call chain of {unified}"] = _dicts(
                conn, "SELECT * FROM hivenet.call_chain(:u)", {"u": unified})
        else:
            sections[f"call chain of {unified}"] = "(hivenet.call_chain is not installed)"
    views = (  # title, view, columns, order
        ("usage and headroom of the current period", "hivenet.scope_usage",
         "format, scope, period_start, issued, capacity, remaining, used_percent",
         "ORDER BY used_percent DESC, format, scope"),
        ("interface calls per day", "hivenet.interface_calls_per_day", "*", ""),
        ("steps per state", "hivenet.step_states", "*", ""),
        ("stuck steps", "hivenet.stuck_steps", "*", ""),
    )
    for title, view, columns, order in views:
        if _exists(conn, "relation", view):
            sections[title] = _dicts(conn, f"SELECT {columns} FROM {view} {order} LIMIT :n",
                                     {"n": limit})
    return sections


def cmd_report(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        sections = report_sections(conn, args.unified, args.limit)
    out.sections(sections)


def cmd_maintain(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        conn.execute(text("SELECT hivenet.maintain()"))
    out.rows([{"maintain": "done", "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}])


def cmd_demo(args: argparse.Namespace, out: Output) -> None:
    from hivenet_db import demo

    url = database_url(args, out)
    if args.url or from_env(None):
        out.note(f"running the demo in {_redacted(url)}: it commits its rows there")
    try:
        demo.run(url, as_json=out.as_json)
    except demo.Unavailable as error:
        raise CommandError(str(error)) from None


def cmd_bench(args: argparse.Namespace, out: Output) -> None:
    try:
        bench = importlib.import_module("hivenet_db.bench")
    except ModuleNotFoundError as error:
        if error.name != "hivenet_db.bench":
            raise
        raise CommandError("the benchmark module hivenet_db.bench is not installed in this "
                           "version; see docs/benchmarks.md") from None
    if args.url:  # the benchmark runner reads the URL like every command: from the environment
        os.environ[ENV_VAR] = args.url
    code = bench.main(list(args.bench_args))
    if code:
        raise SystemExit(code)


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
        print(format_table([{"property": k, "value": _cell(v)} for k, v in info.items()]))


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return url


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=(
        f"database URL (postgresql://...); default ${ENV_VAR}, else the embedded local "
        "PostgreSQL"))
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of tables")
    parser = argparse.ArgumentParser(
        prog=PROG, parents=[common],
        description="Serial numbers (HiveNet Sequence Standards) and idempotency inside "
                    "PostgreSQL. With no --url and no $HIVENET_DATABASE_URL, commands use a "
                    "local PostgreSQL that hivenet-db initialises, starts and migrates itself.",
        epilog=f"Start with `{PROG} demo`. `{PROG} COMMAND --help` explains each command.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace, Output], None], help: str,
            description: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=description or help)
        p.set_defaults(handler=handler)
        return p

    p = add("bootstrap", cmd_bootstrap, "once, as a superuser or administrator: roles "
            "hivenet_app and hivenet_admin, and the rights the schema owner needs",
            "Create roles hivenet_app and hivenet_admin (NOLOGIN) if missing, grant OWNER "
            "CREATE on this database (for schema hivenet) and on schema public (for its "
            "version table) and both roles WITH ADMIN OPTION; one line per action. "
            "Safe to run again. Then OWNER runs `hivenet-db migrate` and grants the roles to "
            "login roles. OWNER must exist: CREATE ROLE owner LOGIN PASSWORD '...'.")
    p.add_argument("--owner", required=True, metavar="ROLE",
                   help="the role that will own schema hivenet (runs migrate)")

    p = add("migrate", cmd_migrate, "create or upgrade schema hivenet (alembic, version table "
            "hivenet_alembic_version)")
    p.add_argument("--revision", default="head", help="target revision (default: head)")

    p = add("downgrade", cmd_downgrade, "go back to an older revision",
            "Go back to REVISION. `base` removes schema hivenet and all its data.")
    p.add_argument("revision", help="target revision: 0003, -1, base ...")

    add("sql", cmd_sql, "print the full schema SQL (for teams that do not use alembic)")

    p = add("next", cmd_next, "issue serials (committed before they are printed)",
            "Issue COUNT serials of FORMAT: unified, system, interface, id_service, "
            "merchant_trade, per_second or a custom format. Prints one serial per line "
            "(--json: the parsed fields too). Example: "
            f"`{PROG} next unified --system C0001 --module A01 --instance 01`.")
    p.add_argument("format", help="unified | system | interface | <format name>")
    for name in FIELD_OPTIONS:
        p.add_argument(f"--{name}", help=f"field {name}")
    p.add_argument("--field", action="append", metavar="NAME=VALUE",
                   help="any other field of a custom format (repeatable)")
    p.add_argument("--count", "-n", type=int, default=1, help="how many serials (default 1)")

    p = add("parse", cmd_parse, "show the format and fields of a serial",
            "Parse SERIAL. Without --format the standard's kinds are told apart by length "
            "(28 unified, 30 system, 39 interface).")
    p.add_argument("serial")
    p.add_argument("--format", help="format name (needed for other formats)")

    p = add("report", cmd_report, "call chain, step states, stuck steps, usage and headroom",
            "Print each reporting section this database has: the call chain of --unified, "
            "per-scope usage and headroom of the current period, interface calls per day, "
            "steps per state and stuck steps.")
    p.add_argument("--unified", metavar="SERIAL", help="list the call chain of this unified "
                   "serial")
    p.add_argument("--limit", type=int, default=50, help="rows per section (default 50)")

    add("maintain", cmd_maintain, "run hivenet.maintain() (partitions, retention); run it "
        "every few minutes")

    add("demo", cmd_demo, "replay the standard's two examples end to end",
        "Replay the HiveNet Sequence Standards' examples: a transaction crossing three "
        "systems, then a failed step retried with the same system serial; shows a duplicate "
        "call rejected, a retry replayed and the call chain. Its rows stay in the database, "
        "so `hivenet-db report` shows them afterwards.")

    p = add("bench", cmd_bench, "run the benchmarks (arguments go to the benchmark runner)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="benchmark options")

    p = add("embedded", cmd_embedded, "status, start or stop the embedded local PostgreSQL",
            "Manage the local PostgreSQL used when no URL is given. Its directory: "
            "$HIVENET_EMBEDDED_DIR, else /var/lib/hivenet-db/embedded as root, else "
            "~/.local/share/hivenet-db/embedded.")
    p.add_argument("action", choices=("status", "start", "stop"))
    return parser


def _schema_missing(error: BaseException) -> bool:
    orig = getattr(error, "orig", error)
    return isinstance(orig, psycopg.errors.UndefinedFunction | psycopg.errors.UndefinedTable
                      | psycopg.errors.InvalidSchemaName)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.url = getattr(args, "url", None)
    out = Output(getattr(args, "json", False))
    try:
        args.handler(args, out)
    except HivenetError as error:
        out.note(f"{error.sqlstate} {type(error).__name__}: {error.message}")
        return 1
    except (CommandError, EmbeddedError) as error:
        out.note(str(error))
        return 2
    except OperationalError as error:
        out.note(f"cannot use the database: {str(error.orig).strip()}")
        return 2
    except (ProgrammingError, DBAPIError) as error:
        typed = from_database(error)
        if typed is not None:
            out.note(f"{typed.sqlstate} {type(typed).__name__}: {typed.message}")
            return 1
        if _schema_missing(error):
            out.note(f"schema hivenet is missing or older than this command: run "
                     f"`{PROG} migrate` first ({str(error.orig).strip().splitlines()[0]})")
            return 2
        raise
    except BrokenPipeError:  # `hivenet-db sql | head`
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
