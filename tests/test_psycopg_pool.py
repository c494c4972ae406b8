"""Durable allocation on a psycopg_pool pool of the application (issue 31 point 4):
``configure_durable_pool(url, pool=...)`` / ``async_pool=...``. The plain-psycopg application
of docs/guides/psycopg-pool.md: business transactions from one pool, durable allocation borrowing
from a second one, never from the first (SPEC §6), and a pool at its limit waits at most the
timeout, then raises ``DurablePoolExhausted`` naming it. Against a real PostgreSQL, with real
threads and tasks sharing the pools."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import pq
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from hivenet_db import (
    AsyncSerialRepository,
    DurablePoolExhausted,
    SerialRepository,
    configure_durable_pool,
)
from hivenet_db.durable import durable_transaction
from tests.helpers import eventually
from tests.test_durable_pool import _via, bouncer_port

__all__ = ["bouncer_port"]  # the fixture, PgBouncer in front of the suite's server

SCOPE = {"system": "C0001", "module": "A01", "instance": "01"}


def pool(url: str, name: str, size: int, **options: Any) -> ConnectionPool:
    """A pool as an application makes one: opened by its ``with`` block."""
    return ConnectionPool(url, min_size=1, max_size=size, name=name, open=False, **options)


def async_pool(url: str, name: str, size: int) -> AsyncConnectionPool:
    return AsyncConnectionPool(url, min_size=1, max_size=size, name=name, open=False)


@pytest.fixture(autouse=True)
def forget_the_pool(hivenet_app_url: str) -> Iterator[None]:
    """Durable allocation back to its own connections after the test (the pools close)."""
    yield
    configure_durable_pool(hivenet_app_url)


@pytest.mark.parametrize("autocommit", [False, True])
def test_durable_allocation_commits_on_a_connection_of_the_given_pool(
        hivenet_app_url: str, db: psycopg.Connection, autocommit: bool) -> None:
    db.execute("CREATE TABLE sent (serial text); GRANT INSERT ON sent TO hivenet_app")
    with pool(hivenet_app_url, "app", 2) as app, \
            pool(hivenet_app_url, "durable", 1, kwargs={"autocommit": autocommit}) as durable:
        configure_durable_pool(hivenet_app_url, pool=durable)
        with app.connection() as conn:
            serial = SerialRepository(conn).next_durable("unified", **SCOPE)
            with durable_transaction(conn) as own:
                own.execute("INSERT INTO sent VALUES (%s)", (serial,))
                pid = own.info.backend_pid
            conn.rollback()  # the business transaction rolls back; the durable ones stay
        assert durable.get_stats()["requests_num"] == 2
        with durable.connection() as again:  # given back as it was lent
            assert again.info.backend_pid == pid
            assert again.autocommit is autocommit
            assert again.info.transaction_status == pq.TransactionStatus.IDLE
    assert db.execute("SELECT serial FROM sent").fetchall() == [(serial,)]


def test_a_failed_durable_transaction_is_rolled_back_and_its_connection_given_back(
        hivenet_app_url: str, db: psycopg.Connection) -> None:
    db.execute("CREATE TABLE sent (serial text); GRANT INSERT ON sent TO hivenet_app")
    with pool(hivenet_app_url, "app", 1) as app, pool(hivenet_app_url, "durable", 1) as durable:
        configure_durable_pool(hivenet_app_url, pool=durable)
        with app.connection() as conn, pytest.raises(RuntimeError), \
                durable_transaction(conn) as own:
            own.execute("INSERT INTO sent VALUES ('lost')")
            raise RuntimeError("the remote call failed")
        with app.connection() as conn:  # the only connection of the durable pool serves again
            SerialRepository(conn).next_durable("unified", **SCOPE)
        assert durable.get_stats()["requests_num"] == 2
    assert db.execute("SELECT count(*) FROM sent").fetchone() == (0,)


def test_threads_share_the_pool_within_its_size(hivenet_app_url: str) -> None:
    threads, rounds = 8, 10
    serials: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)
    with pool(hivenet_app_url, "app", threads) as app, \
            pool(hivenet_app_url, "durable", 2) as durable:
        configure_durable_pool(hivenet_app_url, pool=durable, timeout=30)

        def client(t: int) -> None:
            try:
                barrier.wait(timeout=60)
                for _ in range(rounds):
                    with app.connection() as conn:  # each thread holds one to the end
                        repo = SerialRepository(conn)
                        serials.append(repo.next_unified("D0001", "A01", f"{t + 1:02d}"))
                        serials.append(repo.next_durable("unified", system="D0001",
                                                         module="A01", instance=f"{t + 1:02d}"))
            except BaseException as error:
                errors.append(error)
                barrier.abort()

        running = [threading.Thread(target=client, args=(t,)) for t in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join(timeout=120)
        lent, made = durable.get_stats(), app.get_stats()
    assert errors == [], errors[:3]
    assert len(serials) == len(set(serials)) == threads * rounds * 2
    assert lent["requests_num"] == made["requests_num"] == threads * rounds
    assert lent.get("connections_num", 0) <= 2  # 8 threads on 2 connections, none made beyond


def test_a_pool_at_its_limit_waits_up_to_the_timeout_then_fails_naming_it(
        hivenet_app_url: str) -> None:
    with pool(hivenet_app_url, "app", 1) as app, \
            pool(hivenet_app_url, "hivenet-durable", 1) as durable:
        configure_durable_pool(hivenet_app_url, pool=durable, timeout=0.5)
        held = durable.getconn()  # its only connection, busy
        with app.connection() as conn:
            started = time.monotonic()
            with pytest.raises(DurablePoolExhausted, match=(
                    r"0.5 s for a free connection of psycopg_pool 'hivenet-durable' "
                    r"\(1 connections at most\).* max_size")):
                SerialRepository(conn).next_durable("unified", **SCOPE)
            assert 0.4 < time.monotonic() - started < 5
            # given back within the timeout, the waiting call gets it
            configure_durable_pool(hivenet_app_url, pool=durable, timeout=30)
            returned = threading.Timer(0.5, durable.putconn, (held,))
            returned.start()
            started = time.monotonic()
            assert SerialRepository(conn).next_durable("unified", **SCOPE)
            assert time.monotonic() - started >= 0.4
            returned.join()
        assert durable.get_stats()["requests_queued"] >= 2


def test_a_full_queue_fails_at_once(hivenet_app_url: str) -> None:
    with pool(hivenet_app_url, "app", 1) as app, \
            pool(hivenet_app_url, "durable", 1, max_waiting=1) as durable:
        configure_durable_pool(hivenet_app_url, pool=durable, timeout=30)
        held = durable.getconn()
        waiter = threading.Thread(target=lambda: durable.putconn(durable.getconn(timeout=30)))
        waiter.start()
        assert eventually(lambda: durable.get_stats().get("requests_waiting", 0) >= 1, 10), \
            "the waiter never queued"
        with app.connection() as conn:
            started = time.monotonic()
            with pytest.raises(DurablePoolExhausted, match="already 1 requests waiting"):
                SerialRepository(conn).next_durable("unified", **SCOPE)
            assert time.monotonic() - started < 5
        durable.putconn(held)
        waiter.join(30)


def test_the_pool_the_callers_connection_came_from_is_refused(hivenet_app_url: str) -> None:
    with pool(hivenet_app_url, "app", 2) as app:
        configure_durable_pool(hivenet_app_url, pool=app)
        with app.connection() as conn, pytest.raises(
                ValueError, match="'app', the pool your connection came from"):
            SerialRepository(conn).next_durable("unified", **SCOPE)
        assert app.get_stats()["requests_num"] == 1  # never a second connection of it


def test_behind_a_shared_pgbouncer_pool_the_server_session_wait_is_bounded(
        hivenet_url: str, bouncer_port: int) -> None:
    """The durable pool's connections share PgBouncer's server sessions with business
    transactions that hold them all: its BEGIN gets no session, and the call fails after the
    timeout naming the pool, instead of waiting for PgBouncer's query_wait_timeout."""
    bounced = _via(hivenet_url, bouncer_port)
    options = {"kwargs": {"prepare_threshold": None}}
    with pool(bounced, "app", 4, **options) as app, \
            pool(bounced, "durable", 1, **options) as durable:
        durable.wait()
        configure_durable_pool(bounced, pool=durable, timeout=1)
        holders = [app.getconn() for _ in range(4)]  # PgBouncer's 4 server sessions
        try:
            for conn in holders:
                SerialRepository(conn).next_unified("D0001", "A01", "01")
            started = time.monotonic()
            with pytest.raises(DurablePoolExhausted,
                               match=r"server session of psycopg_pool 'durable'.*pool_size"):
                SerialRepository(holders[0]).next_durable("unified", **SCOPE)
            assert time.monotonic() - started < 5
        finally:
            for conn in holders:
                conn.rollback()
                app.putconn(conn)
        with app.connection() as conn:  # the sessions free, the pool serves again
            assert SerialRepository(conn).next_durable("unified", **SCOPE)


def test_async_tasks_share_an_async_pool_and_its_limit_fails_naming_it(
        hivenet_app_url: str) -> None:
    tasks = 8

    async def scenario() -> tuple[list[str], dict[str, int]]:
        async with async_pool(hivenet_app_url, "app", tasks) as app, \
                async_pool(hivenet_app_url, "durable", 2) as durable:
            configure_durable_pool(hivenet_app_url, async_pool=durable, timeout=30)

            async def client(t: int) -> str:
                async with app.connection() as conn:
                    return await AsyncSerialRepository(conn).next_durable(
                        "unified", system="D0001", module="A01", instance=f"{t + 1:02d}")

            serials = await asyncio.gather(*(client(t) for t in range(tasks)))
            lent = durable.get_stats()
            configure_durable_pool(hivenet_app_url, async_pool=durable, timeout=0.5)
            held = [await durable.getconn() for _ in range(2)]
            try:
                async with app.connection() as conn:
                    with pytest.raises(DurablePoolExhausted,
                                       match=r"free connection of psycopg_pool 'durable'"):
                        await AsyncSerialRepository(conn).next_durable("unified", **SCOPE)
            finally:
                for conn in held:
                    await durable.putconn(conn)
            return list(serials), lent

    serials, lent = asyncio.run(scenario())
    assert len(set(serials)) == tasks
    assert lent["requests_num"] == tasks and lent.get("connections_num", 0) <= 2
