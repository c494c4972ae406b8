"""Durable allocation never stalls a saturated pool (SPEC §6; issue 29 point 5): the shape of
the issue, an engine of 8 connections and 8 threads each inside ``engine.begin()`` calling
``next_durable`` every 10th iteration, directly and through PgBouncer (pool 4). It stalled for
the engine's pool timeout (30 s) at every durable call; it must finish without one, and a
durable call that cannot get a connection fails within its pool's timeout, naming it."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from sqlalchemy import Engine, create_engine

from hivenet_db import DurablePoolExhausted, SerialRepository, configure_durable_pool
from hivenet_db.durable import durable_transaction
from hivenet_db.tools.embedded_postgres import SUPERUSER, EmbeddedPostgres
from hivenet_db.urls import sqlalchemy_url
from tests.servers import pgbouncer

THREADS = 8
ITERATIONS = 60  # per thread; every 10th calls next_durable
BOUNCER_POOL = 4


def saturate(engine: Engine, iterations: int = ITERATIONS) -> tuple[list[str], float]:
    """The issue's shape: THREADS threads, each ``iterations`` transactions of the engine, a
    durable serial in every 10th. The serials, and the seconds it took."""
    serials: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def client(t: int) -> None:
        try:
            barrier.wait(timeout=60)
            for k in range(iterations):
                with engine.begin() as conn:
                    repo = SerialRepository(conn)
                    serials.append(repo.next_unified("D0001", "A01", f"{t + 1:02d}"))
                    if k % 10 == 9:
                        serials.append(repo.next_durable("unified", system="D0001",
                                                         module="A01", instance=f"{t + 1:02d}"))
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == [], errors[:3]
    return serials, time.monotonic() - started


def _engine(url: str, **options: object) -> Engine:
    return create_engine(sqlalchemy_url(url), pool_size=THREADS, max_overflow=0,
                         pool_timeout=30, **options)


def test_the_saturated_pool_of_the_issue_finishes_without_a_pool_timeout(
        hivenet_url: str) -> None:
    engine = _engine(hivenet_url)
    try:
        serials, seconds = saturate(engine)
    finally:
        engine.dispose()
    assert len(serials) == len(set(serials)) == THREADS * ITERATIONS * 11 // 10
    assert seconds < 20, f"{seconds:.1f} s: a durable call waited for the engine's pool"


@pytest.fixture(scope="module")
def bouncer_port(hivenet_server: EmbeddedPostgres) -> Iterator[int]:
    """PgBouncer (transaction pooling, 4 server sessions) in front of the suite's server."""
    try:
        with pgbouncer(hivenet_server.port, pool_size=BOUNCER_POOL, max_clients=64,
                       user=SUPERUSER) as port:
            yield port
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


def _via(url: str, port: int) -> str:
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{urlsplit(url).path.lstrip('/')}"


def test_through_pgbouncer_with_a_pool_of_its_own_it_finishes(hivenet_url: str,
                                                               bouncer_port: int) -> None:
    """8 business connections share PgBouncer's 4 server sessions, each holding one for its
    transaction; durable allocation goes to a pool PgBouncer does not share with them (here
    the server itself: docs/operations.md names both ways)."""
    bounced = _via(hivenet_url, bouncer_port)
    configure_durable_pool(bounced, size=2, timeout=2, url=hivenet_url)
    engine = _engine(bounced, connect_args={"prepare_threshold": None})
    try:
        serials, seconds = saturate(engine)
    finally:
        engine.dispose()
    assert len(serials) == len(set(serials)) == THREADS * ITERATIONS * 11 // 10
    assert seconds < 20, f"{seconds:.1f} s: a durable call waited for a server session"


def test_through_a_shared_pgbouncer_pool_it_fails_within_its_timeout(hivenet_url: str,
                                                                    bouncer_port: int) -> None:
    """Sharing PgBouncer's pool with the business transactions that hold it all, the durable
    connection gets no server session: an error naming what to size after the pool's timeout,
    not a stall for PgBouncer's query_wait_timeout."""
    bounced = _via(hivenet_url, bouncer_port)
    configure_durable_pool(bounced, size=2, timeout=1)
    engine = _engine(bounced, connect_args={"prepare_threshold": None})
    holders = [engine.connect() for _ in range(BOUNCER_POOL)]
    try:
        for conn in holders:  # every server session held by a business transaction
            SerialRepository(conn).next_unified("D0001", "A01", "01")
        started = time.monotonic()
        with pytest.raises(DurablePoolExhausted, match=r"server session .* default_pool_size"):
            SerialRepository(holders[0]).next_durable("unified", system="D0001", module="A01",
                                                      instance="01")
        assert time.monotonic() - started < 5
    finally:
        for conn in holders:
            conn.close()
        engine.dispose()


def test_a_busy_pool_fails_within_its_timeout_naming_itself(hivenet_url: str) -> None:
    configure_durable_pool(hivenet_url, size=1, timeout=0.5)
    engine = _engine(hivenet_url)
    inside = threading.Event()
    release = threading.Event()

    def hold() -> None:  # one durable call that keeps the pool's only connection
        with engine.begin() as conn, durable_transaction(conn):
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(30)
        with engine.begin() as conn, pytest.raises(
                DurablePoolExhausted, match=r"0.5 s for a free connection .* \(1 connections\)"):
            SerialRepository(conn).next_durable("unified", system="D0001", module="A01",
                                                instance="01")
    finally:
        release.set()
        holder.join(30)
        engine.dispose()
        configure_durable_pool(hivenet_url)


def _child(url: str, results: multiprocessing.Queue[tuple[str, int]]) -> None:
    """In a forked child: a durable serial, and the server process of the pool's connection."""
    engine = _engine(url)  # the child's own engine: a forked one is SQLAlchemy's to reset
    with engine.begin() as conn:
        serial = SerialRepository(conn).next_durable("unified", system="D0001", module="A01",
                                                     instance="01")
        with durable_transaction(conn) as own:
            pid = own.execute("SELECT pg_backend_pid()").fetchone()
    engine.dispose()
    assert pid is not None
    results.put((serial, int(pid[0])))


def test_a_forked_child_never_uses_the_parents_pooled_connection(
        hivenet_url: str, hivenet_server: EmbeddedPostgres) -> None:
    """A process that allocated durably, then forked (gunicorn --preload, multiprocessing):
    each child connects anew; the parent's session is neither used nor ended by a child."""
    log = hivenet_server.log_file.read_text(errors="replace")
    engine = _engine(hivenet_url)

    def parents_serial_and_session() -> tuple[str, int]:
        with engine.begin() as conn:
            serial = SerialRepository(conn).next_durable("unified", system="D0001",
                                                         module="A01", instance="01")
            with durable_transaction(conn) as own:
                row = own.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return serial, int(row[0])

    try:
        first, parent = parents_serial_and_session()
        context = multiprocessing.get_context("fork")
        results: multiprocessing.Queue[tuple[str, int]] = context.Queue()
        children = [context.Process(target=_child, args=(hivenet_url, results))
                    for _ in range(3)]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=60)
        assert [child.exitcode for child in children] == [0, 0, 0]
        got = [results.get(timeout=5) for _ in children]
        again, still = parents_serial_and_session()
    finally:
        engine.dispose()
    pids = [pid for _, pid in got]
    assert parent not in pids and len(set(pids)) == 3  # a connection of its own each
    assert still == parent  # the parent's session lives on
    serials = [first, again, *(serial for serial, _ in got)]
    assert len(set(serials)) == 5
    new_log = hivenet_server.log_file.read_text(errors="replace")[len(log):]
    assert "there is already a transaction in progress" not in new_log
    assert "unexpected EOF" not in new_log
