"""How a command reaches its database: the URL (given, from the environment, or the embedded
local PostgreSQL), the parameters shown in messages, and the schema's state it requires."""

from __future__ import annotations

import argparse
import getpass
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from hivenet_db.cli.output import PROG, CommandError, Output, one_line
from hivenet_db.cli.parser import package_version
from hivenet_db.tools import migrate
from hivenet_db.tools.business_time import in_business_time
from hivenet_db.tools.dburl import engine_for, from_env
from hivenet_db.tools.embedded_postgres import DEFAULT_DATABASE, EmbeddedPostgres
from hivenet_db.tools.migrate import MigrationStatus, State
from hivenet_db.urls import libpq_url, sqlalchemy_url

URL_FORM = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"

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


def embedded_url(out: Output, dbname: str = DEFAULT_DATABASE, to_head: bool = True,
                 port: int | None = None) -> str:
    """URL of database ``dbname`` on the embedded server: initialised, started (on ``port``
    when given) and (unless ``to_head`` is false: migrate and downgrade choose their revision)
    migrated to head."""
    started = time.monotonic()
    server = EmbeddedPostgres(progress=out.note)
    with server.lock(), out.progress("local PostgreSQL"):
        first = not server.initialized
        server.start(port)
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
def usable_engine(args: argparse.Namespace, out: Output) -> Iterator[Engine]:
    """An engine on the command's database, whose schema hivenet is checked usable."""
    with engine_for(database_url(args, out)) as engine:
        with engine.connect() as conn:
            require(conn, USABLE)
        yield engine


@contextmanager
def transaction(args: argparse.Namespace, out: Output) -> Iterator[Connection]:
    """One transaction, committed when the block ends: the command is the caller here, so a
    serial it prints is committed before anyone sees it (SPEC §6). Its times are shown in
    the business time zone, where the role may read it."""
    with engine_for(database_url(args, out)) as engine, engine.begin() as conn:
        require(conn, USABLE)
        in_business_time(conn)
        yield conn


def exists(conn: Connection, kind: str, name: str) -> bool:
    query = "SELECT to_regclass(:n) IS NOT NULL" if kind == "relation" else \
        "SELECT to_regproc(:n) IS NOT NULL"
    return bool(conn.execute(text(query), {"n": name}).scalar())


def dicts(conn: Connection, query: str, params: dict[str, Any] | None = None
           ) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(text(query), params or {})]


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
                f"{package_version()} does not know (its head is {head}): the schema is newer "
                f"than the package; upgrade the package (pip install -U hivenet-db)")
    if status.state is State.NOT_INSTALLED:
        return f"schema hivenet is not installed in {database}: run `{PROG} migrate`"
    return (f"schema hivenet exists in {database} but {migrate.VERSION_TABLE} records no "
            f"revision: it was installed with `{PROG} sql` or by the application's own alembic "
            f"tree; upgrade it the same way")

