"""The ``hivenet-db`` command: bootstrap, migrate, allocate, parse, report, maintain, demo, bench.

With no ``--url`` and no ``HIVENET_DATABASE_URL`` every command that needs a database uses
the embedded local PostgreSQL (see ``hivenet_db.embedded``), initialised on first use,
started on demand and migrated to head. Output is a readable table, or JSON with ``--json``.

A failure prints exactly one line on stderr, ``hivenet-db: PROBLEM: WHAT TO DO``, never a
password; ``--debug`` prints the traceback before it. ``explain`` is the one place that turns
an exception into that line and an exit status:

- 0 done;
- 1 the database refused with a hivenet error (``HNxxx ClassName: message``);
- 2 usage or environment: a malformed URL, no server, no such database or role, a refused
  password or privilege, schema hivenet not installed, newer than this package or with a
  conflicting version table, a revision that does not exist, no local PostgreSQL;
- 70 an internal error (a bug: run again with ``--debug`` and report the traceback);
- 130 interrupted.

``migrate --check`` changes nothing and exits 0 at the package's head, 3 behind it, 4 ahead of
it (a revision this package does not know: the schema is newer than the package), 5 not
installed, 6 untracked (schema hivenet exists but its version table records no revision).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import getpass
import importlib.metadata
import io
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import psycopg
from psycopg.conninfo import conninfo_to_dict
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
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from hivenet_db import migrate
from hivenet_db.dburl import ENV_VAR, engine_for, from_env, libpq_url, sqlalchemy_url
from hivenet_db.embedded import DEFAULT_DATABASE, EmbeddedError, EmbeddedPostgres
from hivenet_db.errors import HivenetError, from_database
from hivenet_db.migrate import MigrationStatus, State
from hivenet_db.schema import full_schema_sql
from hivenet_db.serial import parse_serial
from hivenet_db.serials import SerialRepository

PROG = "hivenet-db"
# Options that name a serial field directly; any other field goes through --field NAME=VALUE.
FIELD_OPTIONS = ("system", "module", "instance", "target", "merchant", "shard", "recon_type")
URL_FORM = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
# Exit status of `migrate --check` for each state.
CHECK_EXIT = {State.HEAD: 0, State.BEHIND: 3, State.AHEAD: 4, State.NOT_INSTALLED: 5,
              State.UNTRACKED: 6}
INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE
INTERRUPTED = 130
NEXT_CHUNK = 10_000  # serials per round trip of `next -n N`
SCOPE_EXAMPLE = "--system C0001 --module A01 --instance 01"
# Shown at the end of each subcommand's --help.
EXAMPLES = {
    "bootstrap": ["bootstrap --owner hivenet_owner --url postgresql://postgres@db/app"],
    "migrate": ["migrate --time-zone Asia/Shanghai",
                "migrate --check --url postgresql://owner@db/app"],
    "downgrade": ["downgrade -1"],
    "sql": ["sql > hivenet.sql"],
    "next": [f"next unified {SCOPE_EXAMPLE}",
             f"next interface {SCOPE_EXAMPLE} --target B0001 -n 100 --json"],
    "parse": ["parse C0001A0101201507100123456789"],
    "report": ["report --unified C0001A0101201507100123456789 --limit 20"],
    "maintain": ["maintain --url postgresql://owner@db/app"],
    "failover-fence": ["failover-fence --gap 1000000 --url postgresql://admin@new-primary/app"],
    "demo": ["demo --json"],
    "bench": ["bench --list", "bench --quick", "bench --rounds 3 --python --json"],
    "metrics": ["metrics > /var/lib/node_exporter/textfile/hivenet.prom"],
    "embedded": ["embedded status --json"],
}


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
        table.add_row(*(Text(_cell(row.get(c))) for c in rows[0]))
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


# ---------------------------------------------------------------- database


LOCAL_SOCKET = "the local socket"  # libpq's host when the URL names none


@dataclass(frozen=True)
class Target:
    """Where a command connects, for messages: never the password."""

    host: str
    port: str
    dbname: str
    user: str

    @property
    def where(self) -> str:
        if not self.port:
            return self.host
        if self.host.startswith("/") or self.host == LOCAL_SOCKET:
            return f"{self.host} (port {self.port})"
        return f"{self.host}:{self.port}"


# Before any URL is known (the embedded server failing to start, say).
UNKNOWN_TARGET = Target("the database server", "", "the database", "the connecting role")


def _malformed(reason: str) -> CommandError:
    return CommandError(f"malformed database URL ({one_line(reason)}): expected {URL_FORM}")


def parse_target(url: str) -> Target:
    """The connection parameters of libpq URL ``url``, checked the way libpq and SQLAlchemy
    will read it; CommandError when it is not a PostgreSQL URL."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme not in ("postgresql", "postgres"):
        raise CommandError(f"database URL scheme {scheme!r} is not PostgreSQL: expected "
                           f"{URL_FORM}")
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise _malformed(str(error)) from None
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    if not all(p.isdigit() for p in port.split(",")):  # else SQLAlchemy says int() failed
        raise _malformed(f"port {port!r} is not a number")
    try:
        make_url(sqlalchemy_url(url))
    except ArgumentError as error:
        raise _malformed(str(error)) from None
    # libpq's defaults, for messages only: libpq applies them itself.
    user = str(params.get("user") or os.environ.get("PGUSER") or getpass.getuser())
    return Target(host=str(params.get("host") or os.environ.get("PGHOST") or LOCAL_SOCKET),
                  port=port,
                  dbname=str(params.get("dbname") or os.environ.get("PGDATABASE") or user),
                  user=user)


def embedded_url(out: Output, dbname: str = DEFAULT_DATABASE, to_head: bool = True) -> str:
    """URL of database ``dbname`` on the embedded server: initialised, started and (unless
    ``to_head`` is false: migrate and downgrade choose their revision) migrated to head."""
    started = time.monotonic()
    server = EmbeddedPostgres(progress=out.note)
    with server.lock(), out.progress("local PostgreSQL"):
        first = not server.initialized
        server.start()
        url = server.ensure_database(dbname)
        if to_head and migrate.status(url).state in (State.BEHIND, State.NOT_INSTALLED):
            out.note(f"migrating schema hivenet in {dbname}")
            migrate.upgrade(url)
    if first:
        out.note(f"local PostgreSQL ready in {time.monotonic() - started:.1f}s "
                 f"(data in {server.root}; `{PROG} embedded stop` stops it)")
    return url


def database_url(args: argparse.Namespace, out: Output, to_head: bool = True) -> str:
    """The URL the command uses; its parameters go to ``args.target`` for messages."""
    given = from_env(args.url)
    url = libpq_url(given) if given else embedded_url(out, to_head=to_head)
    args.target = parse_target(url)
    return url


# States in which a command may go on: the ones using the schema, and migrate or downgrade.
USABLE = frozenset({State.HEAD, State.BEHIND, State.UNTRACKED})
MIGRATABLE = frozenset({State.HEAD, State.BEHIND, State.NOT_INSTALLED})


def require(conn: Connection, allowed: frozenset[State]) -> None:
    """CommandError unless schema hivenet is in one of the ``allowed`` states: a command must
    not run on a schema that is missing or newer than this package. A role that may not read
    the version table (an application role) goes on: its statements say what is wrong."""
    try:
        status = migrate.status_of(conn)
    except migrate.VersionUnreadable:
        return
    if status.state not in allowed:
        raise CommandError(status_line(status))


def require_url(url: str, allowed: frozenset[State]) -> None:
    with engine_for(url) as engine, engine.connect() as conn:
        require(conn, allowed)


@contextmanager
def transaction(args: argparse.Namespace, out: Output) -> Iterator[Connection]:
    """One transaction, committed when the block ends: the command is the caller here, so a
    serial it prints is committed before anyone sees it (SPEC §6)."""
    with engine_for(database_url(args, out)) as engine, engine.begin() as conn:
        require(conn, USABLE)
        yield conn


def _exists(conn: Connection, kind: str, name: str) -> bool:
    query = "SELECT to_regclass(:n) IS NOT NULL" if kind == "relation" else \
        "SELECT to_regproc(:n) IS NOT NULL"
    return bool(conn.execute(text(query), {"n": name}).scalar())


def _dicts(conn: Connection, query: str, params: dict[str, Any] | None = None
           ) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(text(query), params or {})]


def _package_version() -> str:
    try:
        return importlib.metadata.version("hivenet-db")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "(source tree)"


def status_line(status: MigrationStatus) -> str:
    """Where the database stands, in one sentence, with what to do about it."""
    database, current, head = status.database, status.current, status.head
    if status.state is State.HEAD:
        return f"database {database} is at head {head}"
    if status.state is State.BEHIND:
        return f"database {database} is at revision {current}, behind head {head}: run " \
               f"`{PROG} migrate`"
    if status.state is State.AHEAD:
        return (f"database {database} is at revision {current}, which hivenet-db "
                f"{_package_version()} does not know (its head is {head}): the schema is newer "
                f"than the package; upgrade the package (pip install -U hivenet-db)")
    if status.state is State.NOT_INSTALLED:
        return f"schema hivenet is not installed in {database}: run `{PROG} migrate`"
    return (f"schema hivenet exists in {database} but {migrate.VERSION_TABLE} records no "
            f"revision: it was installed with `{PROG} sql` or by the application's own alembic "
            f"tree; upgrade it the same way")


# ---------------------------------------------------------------- commands


def _alembic(action: str, args: argparse.Namespace, out: Output) -> None:
    """Run migrate's upgrade or downgrade to ``args.revision``, unless the schema is newer
    than this package or untracked (alembic would fail half-way or install it twice)."""
    url = database_url(args, out, to_head=False)
    require_url(url, MIGRATABLE)
    with out.progress(f"{action} schema hivenet to {args.revision}"):
        getattr(migrate, action)(url, args.revision)
    row = {"database": redact(url), "revision": migrate.current(url)}
    if getattr(args, "time_zone", None) is not None:  # migrate --time-zone, once upgraded
        row["time_zone"] = set_time_zone(url, args.time_zone)
    out.rows([row])


def migrate_check(args: argparse.Namespace, out: Output) -> int:
    """``migrate --check``: where the database stands; the exit status says it too."""
    if args.revision != "head":
        raise CommandError("--check compares the database with the package's head: drop "
                           "--revision")
    status = migrate.status(database_url(args, out, to_head=False))
    print(dump_json(status.as_dict()) if out.as_json else status_line(status))
    return CHECK_EXIT[status.state]


def set_time_zone(url: str, zone: str) -> str:
    """Set the business time zone (setting ``time_zone``) in a transaction of its own; the
    database checks it (HN001: not a zone, or behind the current one once serials exist)."""
    with engine_for(url) as engine, engine.begin() as conn:
        return str(conn.execute(text("UPDATE hivenet.setting SET value = :zone "
                                     "WHERE name = 'time_zone' RETURNING value"),
                                {"zone": zone}).scalar_one())


def cmd_migrate(args: argparse.Namespace, out: Output) -> int | None:
    if args.check:
        if args.time_zone is not None:
            raise CommandError("--check changes nothing: drop --time-zone")
        return migrate_check(args, out)
    _alembic("upgrade", args, out)
    return None


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
    serials: list[str] = []
    # In chunks inside the one transaction, so that the bar can advance; a chunk is large
    # enough that its round trip costs little next to its work.
    with transaction(args, out) as conn, \
            out.progress(f"issuing {args.format} serials", total=args.count) as step:
        repository = SerialRepository(conn)
        while len(serials) < args.count:
            chunk = repository.next_many(args.format, min(NEXT_CHUNK, args.count - len(serials)),
                                         **fields)
            serials += chunk
            step(len(chunk))
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
        out.table([{"field": k, "value": _cell(v)} for k, v in row.items()])


def report_sections(conn: Connection, unified: str | None, limit: int
                    ) -> dict[str, list[dict[str, Any]] | str]:
    """Each section of ``report`` whose view or function exists in this database."""
    sections: dict[str, list[dict[str, Any]] | str] = {}
    if conn.execute(text("SELECT has_table_privilege('hivenet.setting', 'SELECT')")).scalar():
        sections["business time zone"] = _dicts(
            conn, "SELECT value AS time_zone, (hivenet.now() AT TIME ZONE value)::timestamp(0)"
                  "::text AS local_time FROM hivenet.setting WHERE name = 'time_zone'")
    else:
        sections["business time zone"] = "(this role may not read hivenet.setting)"
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
    if _exists(conn, "function", "hivenet.replication_warning") and conn.execute(text(
            "SELECT has_function_privilege('hivenet.replication_warning()', 'EXECUTE')")
            ).scalar():
        warning = conn.execute(text("SELECT hivenet.replication_warning()")).scalar()
        sections["replication"] = f"WARNING: {warning}" if warning else \
            "(no standby without synchronous replication)"
    return sections


def cmd_report(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        sections = report_sections(conn, args.unified, args.limit)
    out.sections(sections)


def cmd_maintain(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn, out.progress("hivenet.maintain()"):
        conn.execute(text("SELECT hivenet.maintain()"))
    out.rows([{"maintain": "done", "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}])


def cmd_failover_fence(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        moved = _dicts(conn, "SELECT * FROM hivenet.fence_failover(:gap, :force)",
                       {"gap": args.gap, "force": args.force})
        done = _dicts(conn, "SELECT timeline, gap, counters, applied_by, fenced_at "
                            "FROM hivenet.failover_fence WHERE timeline = hivenet._timeline()")
    row = {"fenced": "now" if moved else "already", **(done[0] if done else {}),
           "parked": ", ".join(r["counter"] for r in moved if r["parked"]) or "none"}
    out.rows([row])


def cmd_demo(args: argparse.Namespace, out: Output) -> None:
    from hivenet_db import demo

    url = database_url(args, out)
    require_url(url, USABLE)
    if args.url or from_env(None):
        out.note(f"running the demo in {redact(url)}: it commits its rows there")
    try:
        with out.progress("demo"):
            demo.run(url, as_json=out.as_json)
    except demo.Unavailable as error:
        raise CommandError(str(error)) from None


def cmd_bench(args: argparse.Namespace, out: Output) -> int:
    from hivenet_db import bench  # the package's own subpackage; imported only when used

    if args.url and "--url" not in args.bench_args:  # `hivenet-db --url X bench`: run on X
        args.bench_args += ["--url", args.url]
    if out.as_json and "--json" not in args.bench_args:  # `bench --json` went to our parser
        args.bench_args.append("--json")
    return int(bench.main(list(args.bench_args)))


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
        out.table([{"property": k, "value": _cell(v)} for k, v in info.items()])


def cmd_metrics(args: argparse.Namespace, out: Output) -> None:
    from hivenet_db import metrics

    with transaction(args, out) as conn:
        read = metrics.read(conn)
    if out.as_json:
        print(dump_json([m.as_dict() for m in read]))
    else:
        print(metrics.exposition(read), end="")


# ---------------------------------------------------------------- parser


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage mistakes are one line too (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=(
        f"database URL (postgresql://...); default ${ENV_VAR}, else the embedded local "
        "PostgreSQL"))
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON instead of tables")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="on failure, print the traceback before the one-line message")
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
    parser.add_argument("--version", action="version", version=f"{PROG} {_package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace, Output], int | None], help: str,
            description: str | None = None) -> argparse.ArgumentParser:
        examples = "; ".join(f"`{PROG} {example}`" for example in EXAMPLES[name])
        p = sub.add_parser(name, parents=[common], help=help, description=description or help,
                           epilog=f"Example: {examples}.")
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
            "hivenet_alembic_version); --check tells where it stands",
            "Create or upgrade schema hivenet to --revision (alembic, version table "
            "hivenet_alembic_version). With --check, change nothing: print whether the database "
            "is at the package's head, behind it, ahead of it (a revision this package does not "
            "know: upgrade the package) or not installed, and exit 0 at head, 3 behind, 4 ahead, "
            "5 not installed, 6 untracked (schema hivenet whose revision is not recorded).")
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.add_argument("--check", action="store_true",
                   help="only tell where the database stands (exit status above)")
    p.add_argument("--time-zone", metavar="ZONE", help=(
        "then set the business time zone of the serials' dates (setting time_zone, e.g. "
        "Asia/Shanghai; default UTC); choose it before the first serial: once serials exist "
        "the database refuses a zone behind the current one (HN001)"))

    p = add("downgrade", cmd_downgrade, "go back to an older revision",
            "Go back to REVISION. `base` removes schema hivenet and all its data.")
    p.add_argument("revision", help="target revision: 0003, -1, base ...")

    add("sql", cmd_sql, "print the full schema SQL (for teams that do not use alembic)")

    p = add("next", cmd_next, "issue serials (committed before they are printed)",
            "Issue COUNT serials of FORMAT: unified, system, interface, id_service, "
            "merchant_trade, per_second or a custom format. Prints one serial per line "
            "(--json: the parsed fields too). With a terminal on stderr, a progress bar shows "
            "how many are issued.")
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
            "Print the business time zone and each reporting section this database has: "
            "the call chain of --unified, "
            "per-scope usage and headroom of the current period, interface calls per day, "
            "steps per state and stuck steps.")
    p.add_argument("--unified", metavar="SERIAL", help="list the call chain of this unified "
                   "serial")
    p.add_argument("--limit", type=int, default=50, help="rows per section (default 50)")

    add("maintain", cmd_maintain, "run hivenet.maintain() (partitions, retention); run it "
        "every few minutes")

    p = add("failover-fence", cmd_failover_fence, "on a promoted standby, before it takes "
            "traffic: move every counter past what the old primary may have issued",
            "Run hivenet.fence_failover(): move every counter (scope sequences and cold "
            "counters) forward by --gap, so that a standby promoted after an asynchronous "
            "failover never issues a serial its old primary issued in the WAL it never got. "
            "Choose the gap >= peak serials per second of one format x maximum replication "
            "lag in seconds (docs/operations.md, Failover). Does nothing when this timeline was "
            "fenced already (--force fences again). Counters whose period cannot hold the gap "
            "are parked (HN010 until their next period) and listed.")
    p.add_argument("--gap", type=int, default=None,
                   help="how far to move each counter (default 100000)")
    p.add_argument("--force", action="store_true",
                   help="fence again although this timeline was fenced already")

    add("demo", cmd_demo, "replay the standard's two examples end to end",
        "Replay the HiveNet Sequence Standards' examples: a transaction crossing three "
        "systems, then a failed step retried with the same system serial; shows a duplicate "
        "call rejected, a retry replayed and the call chain. Its rows stay in the database, "
        "so `hivenet-db report` shows them afterwards.")

    p = add("bench", cmd_bench, "run the benchmarks (arguments go to the benchmark runner)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="benchmark options")

    add("metrics", cmd_metrics, "print Prometheus metrics: usage and headroom, stuck steps, "
        "steps, claims, interface calls and partitions",
        "Print the metrics of hivenet_db.metrics in the Prometheus text exposition format "
        "(--json: as a list of metrics), for a textfile collector or a quick look; an "
        "application serves them on its own endpoint with hivenet_db.metrics.HivenetCollector "
        "(pip install 'hivenet-db[metrics]'). Alert rules: docs/operations.md.")

    p = add("embedded", cmd_embedded, "status, start or stop the embedded local PostgreSQL",
            "Manage the local PostgreSQL used when no URL is given. Its directory: "
            "$HIVENET_EMBEDDED_DIR, else /var/lib/hivenet-db/embedded as root, else "
            "~/.local/share/hivenet-db/embedded.")
    p.add_argument("action", choices=("status", "start", "stop"))
    return parser


# ---------------------------------------------------------------- failures


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


@dataclass(frozen=True)
class Failure:
    """What ``main`` prints (one line) and returns for an exception."""

    status: int
    message: str


# libpq reports a refused connection with no SQLSTATE: its text (English unless the server's
# lc_messages says otherwise) is all there is to tell the causes apart. Anything unmatched
# is shown as is.
_CONNECT_TEXT = (
    ("password", re.compile(r"password authentication failed|no password supplied")),
    ("role", re.compile(r'role "[^"]*" does not exist')),
    ("database", re.compile(r'database "[^"]*" does not exist')),
    ("hba", re.compile(r"no pg_hba\.conf entry")),
    ("url", re.compile(r"invalid \w+ value|invalid URI|invalid connection option")),
    ("unreachable", re.compile(r"Connection refused|could not translate host name|failed to "
                               r"resolve host|timeout expired|No route to host|Network is "
                               r"unreachable|No such file or directory")),
)
# When the text says nothing known (another language): 28000 is also a pg_hba.conf refusal.
_CONNECT_SQLSTATE = {"28P01": "password", "28000": "role", "3D000": "database"}
_CONNECT_MESSAGES = {
    "password": "authentication failed for role {user} at {where}: correct the password in the "
                "URL (or PGPASSWORD, ~/.pgpass)",
    "role": "authentication failed: role {user} does not exist at {where}: correct the user "
            "in the URL, or create the role",
    "database": "database {dbname} does not exist at {where}: create it (createdb {dbname}) "
                "or correct the database name in the URL",
    "hba": "the server at {where} does not admit role {user} to database {dbname} from this "
           "host ({reason}): ask its administrator for a pg_hba.conf entry",
    "url": "malformed database URL ({reason}): expected " + URL_FORM,
    "unreachable": "cannot reach PostgreSQL at {where} ({reason}): check the host and port in "
                   "the URL and that the server is running",
    None: "cannot use the database at {where}: {reason}",
}
# Invalid schema name, undefined function, undefined table.
_OLDER_SCHEMA = {"3F000", "42883", "42P01"}


def _reason(error: psycopg.Error) -> str:
    """libpq's own words, without its preamble: 'connection to server at ... failed: FATAL:'."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"^FATAL:\s+", "", re.split(r"\bfailed:\s+", first)[-1])


def _connection_failure(error: psycopg.Error, target: Target) -> str:
    state = error.sqlstate or ""
    kind = next((kind for kind, pattern in _CONNECT_TEXT if pattern.search(str(error))),
                _CONNECT_SQLSTATE.get(state, "unreachable" if state.startswith("08") else None))
    return _CONNECT_MESSAGES[kind].format(where=target.where, user=target.user,
                                          dbname=target.dbname, reason=_reason(error))


def _database_failure(error: psycopg.Error, args: argparse.Namespace) -> Failure:
    """A refusal of the server other than a hivenet error, told apart by SQLSTATE (by text
    for libpq's refused connections, which carry none)."""
    target: Target = getattr(args, "target", None) or UNKNOWN_TARGET
    state = error.sqlstate or ""
    if not state or state.startswith("08") or state in _CONNECT_SQLSTATE:
        return Failure(2, _connection_failure(error, target))
    primary = error.diag.message_primary or _reason(error)
    if state == "42501" and args.command in ("migrate", "downgrade"):
        return Failure(2, f"{primary}: role {target.user} may not create or change schema "
                          f"hivenet in {target.dbname}; a superuser must run `{PROG} bootstrap "
                          f"--owner {target.user}` once for this database, then run `{PROG} "
                          f"migrate` as {target.user}")
    if state == "42501":
        return Failure(2, f"{primary}: role {target.user} lacks a privilege that `{PROG} "
                          f"{args.command}` needs in {target.dbname}: connect as the schema's "
                          f"owner or a role granted it (docs/operations.md, Privileges)")
    if state in _OLDER_SCHEMA:
        return Failure(2, f"schema hivenet in {target.dbname} is older than this command or "
                          f"incomplete ({primary}): run `{PROG} migrate`")
    return Failure(2, f"the database refused `{PROG} {args.command}` with {state} ({primary}): "
                      f"see the server's log, or run again with --debug")


def _alembic_failure(error: Exception, args: argparse.Namespace) -> Failure:
    """alembic refused the target revision (unknown, or not reachable from the current one)."""
    return Failure(2, f"{args.command} to {args.revision!r}: {error}; this package's "
                      f"revisions are {', '.join(migrate.revisions())} (head {migrate.head()})")


def explain(error: Exception, args: argparse.Namespace) -> Failure:
    """The one line and the exit status for an exception that ended a command."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    typed = error if isinstance(error, HivenetError) else from_database(orig)
    if typed is not None:
        return Failure(1, f"{typed.sqlstate} {type(typed).__name__}: {typed.message}")
    if isinstance(error, CommandError | EmbeddedError):
        return Failure(2, str(error))
    if isinstance(error, migrate.VersionConflict):
        return Failure(2, f"{error}: delete the rows of the revisions the schema is not at, "
                          f"then run `{PROG} migrate --check`")
    if isinstance(error, migrate.VersionUnreadable):
        return Failure(2, f"{error}: run `{PROG} migrate --check` as the schema's owner")
    if isinstance(orig, psycopg.Error):
        return _database_failure(orig, args)
    if args.command in ("migrate", "downgrade"):
        from alembic.util import CommandError as AlembicError

        if isinstance(error, AlembicError):
            return _alembic_failure(error, args)
    return Failure(INTERNAL_ERROR, f"internal error ({type(error).__name__}: {error}): run "
                                   f"again with --debug and report the traceback")


def _split_bench(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Everything after the ``bench`` command is the runner's (argparse's REMAINDER would
    take ``bench --list`` for an option of ours)."""
    for i, arg in enumerate(argv):
        if arg == "bench" and (i == 0 or argv[i - 1] != "--url"):
            return argv[:i + 1], argv[i + 1:]
        if not arg.startswith("-") and (i == 0 or argv[i - 1] != "--url"):
            break  # another command
    return argv, None


def main(argv: list[str] | None = None) -> int:
    argv, bench_args = _split_bench(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(argv)
    if bench_args is not None:
        args.bench_args = bench_args
    args.url = getattr(args, "url", None)
    out = Output(getattr(args, "json", False))
    try:
        return args.handler(args, out) or 0
    except BrokenPipeError:  # `hivenet-db sql | head`
        return 0
    except KeyboardInterrupt:
        out.note("interrupted")
        return INTERRUPTED
    except Exception as error:
        failure = explain(error, args)
        if getattr(args, "debug", False):
            print(redact("".join(traceback.format_exception(error))), end="", file=sys.stderr)
        out.note(redact(one_line(failure.message)))
        return failure.status


if __name__ == "__main__":
    sys.exit(main())
