"""Connection poolers: whether a connection reaches PostgreSQL through one, and the arguments
of a connection that never prepares a statement, for one in transaction pooling.

A pooler such as PgBouncer answers a client's connection itself: the process id it reports
at start-up (psycopg's ``info.backend_pid``, the key a cancel request names) is its own, not
that of the server process running the client's statements (``pg_backend_pid()``), which
may change at every transaction. Connected to PostgreSQL itself, they are the same. Whether
the pooler keeps one server session per client (session pooling) or hands it to another
client after each transaction cannot be told from the client.
"""

from __future__ import annotations

from typing import Any

import psycopg

#: The psycopg connection arguments of a connection that never prepares a statement: behind a
#: pooler in transaction pooling (PgBouncer before 1.21 tracks none), the server session a
#: statement was prepared on serves another client next, and the next transaction may get
#: another (``prepared statement "_pg3_0" already exists``, or does not exist).
UNPREPARED: dict[str, Any] = {"prepare_threshold": None}


def through_pooler(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` goes through a pooler (one statement, in its transaction if any)."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is None or row[0] != conn.info.backend_pid


__all__ = ["UNPREPARED", "through_pooler"]
