"""Helpers shared by the tests: real connections in threads started by a barrier, and
waiting for a real lock wait (pg_stat_activity) instead of sleeping."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")


def in_parallel(connections: list[psycopg.Connection],
                work: Callable[[psycopg.Connection, threading.Barrier], T]) -> list[T]:
    """Run ``work(conn, barrier)`` in one thread per connection; re-raise the first error."""
    barrier = threading.Barrier(len(connections))
    results: list[Any] = [None] * len(connections)
    errors: list[BaseException] = []

    def run(i: int, conn: psycopg.Connection) -> None:
        try:
            results[i] = work(conn, barrier)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    if errors:
        raise errors[0]
    return results


def scalar(conn: psycopg.Connection, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def sqlstate_of(error: BaseException) -> str | None:
    return getattr(getattr(error, "diag", None), "sqlstate", None)


def race(conns: Sequence[psycopg.Connection],
         action: Callable[[int, psycopg.Connection], T]) -> list[T | BaseException]:
    """Run action(i, conns[i]) in one thread per connection, all released together."""
    barrier = threading.Barrier(len(conns))
    results: list[T | BaseException] = [RuntimeError("did not finish")] * len(conns)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = action(i, conns[i])
        except BaseException as error:
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(conns))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def wait_until_blocked(db: psycopg.Connection, pid: int, timeout: float = 10.0) -> None:
    """Return once backend pid waits for a lock (pg_stat_activity), never by sleeping blind."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                         (pid,)).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.005)
    raise AssertionError(f"backend {pid} never waited for a lock")



def claim_and_end(conn: psycopg.Connection, claim: Callable[[], str | None],
                  roll_back: bool) -> str:
    """Claim in a transaction of its own, then commit or roll it back. Returns the claim's
    refusal (its SQLSTATE), "committed" or "rolled back"."""
    with conn.transaction() as tx:
        refused = claim()
        if refused is not None:
            return refused
        if roll_back:
            raise psycopg.Rollback(tx)
    return "rolled back" if roll_back else "committed"
