"""Small helpers shared by the tests: run callables in parallel on their own connections."""

from __future__ import annotations

import threading
from collections.abc import Callable
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
