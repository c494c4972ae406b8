"""Crash behaviour (SPEC §6): kill -9 the whole server, restart, and allocate again."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from hivenet_db import SerialRepository, migrate
from hivenet_db.dburl import engine_for
from hivenet_db.embedded import EmbeddedPostgres
from tests.helpers import scalar

PLAIN = "SELECT hivenet.next_unified_serial('C0001', 'A01', %s)"


@pytest.fixture
def crashable() -> Iterator[EmbeddedPostgres]:
    """A server of its own (the test kills it), fsync on as in production."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-crash-"))
    os.chmod(root, 0o755)
    server = EmbeddedPostgres(root=root / "pg", fsync=True)
    server.start()
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE crash")
    migrate.upgrade(server.url("crash"))
    try:
        yield server
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


def test_committed_and_durable_serials_are_never_reissued_after_a_crash(crashable: EmbeddedPostgres
        ) -> None:
    url = crashable.url("crash")
    with psycopg.connect(url, autocommit=True) as conn:
        committed = [scalar(conn, PLAIN, ("02",)) for _ in range(3)]
    # Durable serials of a fresh counter, taken while the caller's transaction is still open
    # when the server dies: they may already be at a remote system, so they must never come
    # back. (Taken with next_unified_serial in that transaction instead, they can come back:
    # PostgreSQL only promises committed sequence values, SPEC §6.)
    open_tx = psycopg.connect(url)
    open_tx.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '03')")
    with engine_for(url) as engine, engine.connect() as conn:
        durable = [SerialRepository(conn).next_durable(
            "unified", system="C0001", module="A01", instance="01") for _ in range(3)]
    crashable.kill()
    open_tx.close()
    crashable.start()
    with psycopg.connect(url, autocommit=True) as conn:
        after_durable = [scalar(conn, PLAIN, ("01",)) for _ in range(50)]
        after_committed = [scalar(conn, PLAIN, ("02",)) for _ in range(50)]
    assert min(after_durable) > max(durable)
    assert min(after_committed) > max(committed)
