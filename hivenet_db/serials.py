"""Allocation repository: serials issued inside the caller's transaction (never committed here).

Each call is one round trip: the database allocates and parses in the same statement. The one
exception, ``next_durable``, commits on a connection of its own, as its name says.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from hivenet_db._execute import (
    AsyncDB,
    Rows,
    SyncDB,
    json_text,
    own_transaction,
    own_transaction_async,
    rows,
    rows_async,
)
from hivenet_db.serial import Serial

_ALLOCATE = text(
    "SELECT s, hivenet.parse_serial(s, :format) "
    "FROM hivenet.next_serials(:format, CAST(:fields AS jsonb), :count) WITH ORDINALITY AS t(s, i) "
    "ORDER BY i"
)

# On by default, but a server or role may turn it off: the serial must be on disk when the
# commit returns. SET LOCAL: nothing stays on the session (poolers hand it to someone else).
_SYNCHRONOUS_COMMIT = text("SET LOCAL synchronous_commit = on")


def _params(format: str, count: int, fields: dict[str, Any]) -> dict[str, Any]:
    return {"format": format, "count": count, "fields": json_text("fields", fields)}


def _serials(result: Rows) -> list[Serial]:
    return [Serial(value, parsed) for value, parsed in result]


class SerialRepository:
    """Serials for the caller's SQLAlchemy ``Connection`` or ``Session``, or a psycopg 3
    ``Connection``.

    Raises ``InvalidInput`` (HN001), ``UnknownScope`` (HN002) or ``SequenceExhausted`` (HN010).
    The caller's transaction decides: numbers of a rolled-back transaction become gaps.
    """

    def __init__(self, db: SyncDB) -> None:
        self.db = db

    def next(self, format: str, **fields: str) -> Serial:
        return self.next_many(format, 1, **fields)[0]

    def next_many(self, format: str, n: int, **fields: str) -> list[Serial]:
        """``n`` serials of one scope in increasing order, in one round trip. ``InvalidInput``
        unless 1 <= n <= the database setting ``max_serials_per_call`` (10,000 by default):
        take a larger batch in several calls."""
        return _serials(rows(self.db, _ALLOCATE, _params(format, n, fields)))

    def next_durable(self, format: str, **fields: str) -> Serial:
        """A serial committed before it is returned: safe to send out before your commit.

        Allocated and committed in a transaction of its own, on another connection (so it
        costs a connection and a commit, and stays issued whatever your transaction does):
        from the same engine for SQLAlchemy; for a psycopg Connection a new connection with
        the same conninfo and password, opened and closed on every call (use a pool's
        connection and commit it yourself when that is too slow). After a crash PostgreSQL
        may hand out again a value taken by a transaction that never committed; never this
        one (SPEC §6).
        """
        with own_transaction(self.db) as own:
            rows(own, _SYNCHRONOUS_COMMIT, {})
            return _serials(rows(own, _ALLOCATE, _params(format, 1, fields)))[0]

    def next_unified(self, system: str, module: str, instance: str) -> Serial:
        return self.next("unified", system=system, module=module, instance=instance)

    def next_system(self, system: str, module: str, instance: str) -> Serial:
        return self.next("system", system=system, module=module, instance=instance)

    def next_interface(self, system: str, module: str, instance: str, target: str) -> Serial:
        return self.next("interface", system=system, module=module, instance=instance,
                         target=target)


class AsyncSerialRepository:
    """``SerialRepository`` for an ``AsyncConnection`` or ``AsyncSession``, or a psycopg 3
    ``AsyncConnection``."""

    def __init__(self, db: AsyncDB) -> None:
        self.db = db

    async def next(self, format: str, **fields: str) -> Serial:
        return (await self.next_many(format, 1, **fields))[0]

    async def next_many(self, format: str, n: int, **fields: str) -> list[Serial]:
        """``SerialRepository.next_many``: at most ``max_serials_per_call`` (10,000) a call."""
        return _serials(await rows_async(self.db, _ALLOCATE, _params(format, n, fields)))

    async def next_durable(self, format: str, **fields: str) -> Serial:
        """``SerialRepository.next_durable``: committed on a connection of its own."""
        async with own_transaction_async(self.db) as own:
            await rows_async(own, _SYNCHRONOUS_COMMIT, {})
            return _serials(await rows_async(own, _ALLOCATE, _params(format, 1, fields)))[0]

    async def next_unified(self, system: str, module: str, instance: str) -> Serial:
        return await self.next("unified", system=system, module=module, instance=instance)

    async def next_system(self, system: str, module: str, instance: str) -> Serial:
        return await self.next("system", system=system, module=module, instance=instance)

    async def next_interface(self, system: str, module: str, instance: str,
                             target: str) -> Serial:
        return await self.next("interface", system=system, module=module, instance=instance,
                               target=target)
