"""Pytest fixtures for testing code that uses hivenet-db against a real PostgreSQL.

A pytest plugin, registered by the package's ``pytest11`` entry point under the name
``hivenet_db.testing``: installed with ``pip install 'hivenet-db[testing]'``, its fixtures are
there in every test (``-p no:hivenet_db.testing`` turns it off; ``pytest_plugins =
["hivenet_db.testing"]`` still works and loads it once). Fixtures start nothing until a test
asks for one. A throwaway server is started once per test session (as an unprivileged user
when running as root), a template database is migrated once, and every test gets its own
copy (``CREATE DATABASE ... TEMPLATE``). See docs/testing.md.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine, create_engine

from hivenet_db import migrate
from hivenet_db.dburl import sqlalchemy_url
from hivenet_db.embedded import SUPERUSER, EmbeddedPostgres

if TYPE_CHECKING:
    from pytest_postgresql.janitor import DatabaseJanitor

TEMPLATE = "hivenet_template"
_numbers = itertools.count()


@pytest.fixture(scope="session")
def hivenet_server() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of its own for this test session (fsync off: throwaway data)."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-test-"))
    os.chmod(root, 0o755)  # the server's user must reach its directory below
    server = EmbeddedPostgres(root=root / "pg", fsync=False)
    server.start()
    try:
        yield server
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


def _janitor(server: EmbeddedPostgres, dbname: str, **kwargs: object) -> DatabaseJanitor:
    # Imported here: the plugin is loaded by every pytest run where hivenet-db is installed,
    # also without the [testing] extra; only a test that asks for a database needs it.
    try:
        from pytest_postgresql.janitor import DatabaseJanitor
    except ModuleNotFoundError as error:
        raise RuntimeError("hivenet_db.testing needs pytest-postgresql: pip install "
                           "'hivenet-db[testing]'") from error
    return DatabaseJanitor(user=SUPERUSER, host="127.0.0.1", port=server.port, dbname=dbname,
                           **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def hivenet_template(hivenet_server: EmbeddedPostgres) -> str:
    """Name of a database migrated to head, copied for every test."""
    janitor = _janitor(hivenet_server, TEMPLATE)
    janitor.init()
    migrate.upgrade(hivenet_server.url(TEMPLATE))
    return TEMPLATE


@pytest.fixture
def hivenet_url(hivenet_server: EmbeddedPostgres, hivenet_template: str) -> Iterator[str]:
    """libpq URL of a fresh database at head, dropped after the test."""
    dbname = f"hivenet_test_{next(_numbers)}"
    janitor = _janitor(hivenet_server, dbname, template_dbname=hivenet_template)
    janitor.init()
    try:
        yield hivenet_server.url(dbname)
    finally:
        janitor.drop()


@pytest.fixture
def hivenet_engine(hivenet_url: str) -> Iterator[Engine]:
    """SQLAlchemy engine (psycopg 3) on the test's database."""
    engine = create_engine(sqlalchemy_url(hivenet_url))
    try:
        yield engine
    finally:
        engine.dispose()


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
