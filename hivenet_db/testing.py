"""Pytest fixtures for testing code that uses hivenet-db against a real PostgreSQL.

Enable with ``pytest_plugins = ["hivenet_db.testing"]``. A throwaway server is started once
per test session (as an unprivileged user when running as root), a template database is
migrated once, and every test gets its own copy (``CREATE DATABASE ... TEMPLATE``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import Engine, create_engine

from hivenet_db import migrate
from hivenet_db.dburl import sqlalchemy_url
from hivenet_db.embedded import SUPERUSER, EmbeddedPostgres

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
