"""Whether a connection reaches PostgreSQL through a connection pooler.

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


def through_pooler(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` goes through a pooler (one statement, in its transaction if any)."""
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return row is None or row[0] != conn.info.backend_pid


__all__ = ["through_pooler"]
