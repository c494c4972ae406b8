"""Pytest fixtures for testing code that uses hivenet-db against a real PostgreSQL.

A pytest plugin, registered by the package's ``pytest11`` entry point under the name
``hivenet_db.testing``: installed with ``pip install 'hivenet-db[testing]'``, its fixtures are
there in every test (``-p no:hivenet_db.testing`` turns it off; ``pytest_plugins =
["hivenet_db.testing"]`` still works and loads it once). Fixtures start nothing until a test
asks for one. A throwaway server is started once per test session (as an unprivileged user
when running as root), a template database is migrated once, and every test gets its own
copy (``CREATE DATABASE ... TEMPLATE``). See docs/guides/testing.md.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from hivenet_db.tools import migrate, scopes
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from hivenet_db.urls import sqlalchemy_url

TEMPLATE = "hivenet_template"
#: The logins the ``*_app_*`` and ``*_admin_*`` fixtures connect as, granted only that role,
#: as production's application and administrator logins are.
APP_LOGIN = "hivenet_test_app"
ADMIN_LOGIN = "hivenet_test_admin"
_numbers = itertools.count()


def session_bin_dir() -> Path | None:
    """The PostgreSQL the test session runs, named by ``HIVENET_TEST_PG_BIN`` (a bin
    directory), or None: the one the embedded server finds (``find_bin_dir``)."""
    named = os.environ.get("HIVENET_TEST_PG_BIN")
    return Path(named) if named else None


def scratch_dir() -> str | None:
    """Where a throwaway server keeps its data: ``/dev/shm`` when it is a file system in
    memory with room to spare (creating a test's database there takes a tenth of the time
    it takes on a disk), else None: the temporary directory."""
    ram = "/dev/shm"
    try:
        room = os.statvfs(ram)
    except OSError:
        return None
    spare = room.f_bavail * room.f_frsize >= 2 << 30
    return ram if spare and os.access(ram, os.W_OK) else None


@pytest.fixture(scope="session")
def hivenet_server() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of its own for this test session (fsync off: throwaway data, in
    memory when there is room: ``scratch_dir``), run from ``HIVENET_TEST_PG_BIN`` when set."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-test-", dir=scratch_dir()))
    os.chmod(root, 0o755)  # the server's user must reach its directory below
    server = EmbeddedPostgres(root=root / "pg", fsync=False, bin_dir=session_bin_dir())
    server.start()
    try:
        yield server
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


class _Databases:
    """Creates and drops the tests' databases over one connection of the server's superuser,
    kept for the session (reopened if a test ended it)."""

    def __init__(self, server: EmbeddedPostgres) -> None:
        self._server = server
        self._conn: psycopg.Connection | None = None

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self._server.url(), autocommit=True)
        return self._conn

    def create(self, dbname: str, template: str | None = None) -> None:
        conn = self._connection()
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
            return
        # A session left on the template would make the copy wait, then fail.
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = %s", (template,))
        copy = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(dbname), sql.Identifier(template))
        if conn.info.server_version >= 150000:
            # The template's files copied, not every page written to the WAL (15's default):
            # faster with fsync off, and no WAL to keep.
            copy += sql.SQL(" STRATEGY FILE_COPY")
        conn.execute(copy)

    def drop(self, dbname: str) -> None:
        self._connection().execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(dbname)))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


@pytest.fixture(scope="session")
def hivenet_prepare() -> list[str]:
    """The scopes the template database prepares, one line each as for ``hivenet-db prepare
    --file`` (``"C0001 A01 01-03"``: a channel in the three kinds; ``"id_service
    merchant=123456789012,shard=05"``): none. With the defaults an allocation for a scope that
    is not prepared is refused (HN002), as in production: override this fixture in your
    ``conftest.py`` with the scopes your code allocates for."""
    return []


@pytest.fixture(scope="session")
def _hivenet_databases(hivenet_server: EmbeddedPostgres) -> Iterator[_Databases]:
    databases = _Databases(hivenet_server)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture(scope="session")
def hivenet_template(hivenet_server: EmbeddedPostgres, _hivenet_databases: _Databases,
                     hivenet_prepare: list[str]) -> str:
    """Name of a database migrated to head, with the scopes of ``hivenet_prepare`` prepared,
    copied for every test."""
    _hivenet_databases.create(TEMPLATE)
    migrate.upgrade(hivenet_server.url(TEMPLATE))
    scopes.prepare_url(hivenet_server.url(TEMPLATE), hivenet_prepare)
    return TEMPLATE


@pytest.fixture(scope="session")
def hivenet_logins(hivenet_server: EmbeddedPostgres, hivenet_template: str) -> dict[str, str]:
    """Create the logins ``APP_LOGIN`` (granted only ``hivenet_app``) and ``ADMIN_LOGIN``
    (only ``hivenet_admin``) on the test server; returns their names by role. The template's
    migration, run by the server's superuser, created the roles."""
    password = hivenet_server.password
    with psycopg.connect(hivenet_server.url(TEMPLATE), autocommit=True) as conn:
        for login, role in ((APP_LOGIN, "hivenet_app"), (ADMIN_LOGIN, "hivenet_admin")):
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {} PASSWORD {}").format(
                sql.Identifier(login), sql.Identifier(role), sql.Literal(password)))
    return {"hivenet_app": APP_LOGIN, "hivenet_admin": ADMIN_LOGIN}


def _as_login(url: str, login: str, password: str | None) -> str:
    """``url`` with ``login`` (and the server's password, if any) as its user."""
    parts = urllib.parse.urlsplit(url)
    user = login if password is None else f"{login}:{urllib.parse.quote(password, safe='')}"
    return parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}").geturl()


@pytest.fixture
def hivenet_url(hivenet_server: EmbeddedPostgres, hivenet_template: str,
                _hivenet_databases: _Databases) -> Iterator[str]:
    """libpq URL of a fresh database at head, dropped after the test."""
    dbname = f"hivenet_test_{next(_numbers)}"
    _hivenet_databases.create(dbname, template=hivenet_template)
    try:
        yield hivenet_server.url(dbname)
    finally:
        _hivenet_databases.drop(dbname)


@pytest.fixture
def hivenet_app_url(hivenet_url: str, hivenet_server: EmbeddedPostgres,
                    hivenet_logins: dict[str, str]) -> str:
    """The test's database as a login granted only ``hivenet_app``: what the application's
    code connects with in production, so a privilege it lacks fails here too."""
    return _as_login(hivenet_url, hivenet_logins["hivenet_app"], hivenet_server.password)


@pytest.fixture
def hivenet_admin_url(hivenet_url: str, hivenet_server: EmbeddedPostgres,
                      hivenet_logins: dict[str, str]) -> str:
    """The test's database as a login granted only ``hivenet_admin`` (operators' tools)."""
    return _as_login(hivenet_url, hivenet_logins["hivenet_admin"], hivenet_server.password)


@pytest.fixture
def hivenet_engine(hivenet_url: str) -> Iterator[Engine]:
    """SQLAlchemy engine (psycopg 3) on the test's database as its owner (the server's
    superuser): for set-up, such as the application's own tables and their grants."""
    yield from _engine(hivenet_url)


@pytest.fixture
def hivenet_app_engine(hivenet_app_url: str) -> Iterator[Engine]:
    """SQLAlchemy engine on the test's database as the application login (``hivenet_app``)."""
    yield from _engine(hivenet_app_url)


def _engine(url: str) -> Iterator[Engine]:
    """A SQLAlchemy engine (psycopg 3) on ``url``, disposed when the fixture ends."""
    engine = create_engine(sqlalchemy_url(url))
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def hivenet_app_async_engine(hivenet_app_url: str) -> AsyncEngine:
    """Async SQLAlchemy engine (psycopg 3) as the application login, for a test that runs its
    own event loop (``asyncio.run``, or an async plugin); needs ``hivenet-db[async]``. Without
    a pool (``NullPool``): no connection outlives the loop that opened it."""
    return create_async_engine(sqlalchemy_url(hivenet_app_url), poolclass=NullPool)


SetClock = Callable[[str], None]


@pytest.fixture
def hivenet_clock(hivenet_url: str, hivenet_engine: Engine) -> SetClock:
    """``hivenet_clock("2031-03-01 12:00+00")`` moves ``hivenet.now()`` of the test's database
    to that timestamptz for every connection opened afterwards (``hivenet_engine``'s pool is
    emptied), so the application code under test needs no change. Allows the fake clock in
    the test's database only (setting ``allow_fake_clock``, off in production)."""
    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")

    def _set(when: str) -> None:
        with psycopg.connect(hivenet_url, autocommit=True) as conn:
            # a database default, not a session setting: the application opens its own
            # connections; ALTER DATABASE takes no parameters, hence the quoted literal
            conn.execute(sql.SQL("ALTER DATABASE {} SET hivenet.fake_now = {}").format(
                sql.Identifier(conn.info.dbname), sql.Literal(when)))
        hivenet_engine.dispose()

    return _set
