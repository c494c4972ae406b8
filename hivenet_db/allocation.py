"""Allocation repository: serials issued inside the caller's transaction (never committed here).

Each call is one round trip: the database allocates; serials of the built-in formats are
parsed here, in Python (``serial.issued``: cut by the format's layout, the same results as SQL
``parse_serial``, which would cost more than the allocation itself: docs/benchmarks.md), those
of custom formats by the database in the same statement. ``next_unified``, ``next_system``
and ``next_interface`` call their own SQL function, whose plain case is inlined into the
statement (allocate.sql). Every statement is the driver's own SQL (hivenet_db/queries/api.sql,
``_execute.rows``: no SQLAlchemy statement to compile, no ORM execution for a Session;
psycopg prepares them once they run often, unless the connection turned that off for
PgBouncer). The one exception to the
single round trip, ``next_durable``, commits on a connection of its own, as its name says: from
a small pool of its own (hivenet_db/durable.py), never from the caller's pool. Numeric time
ids (``next_time_id``, seed 004) come back as plain ``int``s; ``parse_time_id``
(hivenet_db/time_ids.py) reads their parts.
"""

from __future__ import annotations

from typing import Any

from hivenet_db._execute import AsyncDB, Rows, SyncDB, json_text, rows, rows_async
from hivenet_db.durable import durable_transaction, durable_transaction_async
from hivenet_db.parsing import builtin_formats
from hivenet_db.serial import Serial, issued
from hivenet_db.statements import API


# A commit waits for the disk only in a transaction that has an id and wrote WAL itself, and
# with synchronous_commit on (the default, but a server or role may turn it off; set locally,
# so nothing stays on a pooled session). Drawing serials does neither: nextval WAL-logs 32
# values ahead in whichever transaction draws past the logged range, and the values after it
# are written nowhere by the transactions that take them. If that range's transaction has not
# committed when the server dies, the range is lost and its values are issued again,
# committed or not (tests/test_crash.py). hivenet.flush_at_commit() takes an id and writes a
# WAL record, so the commit flushes the WAL up to itself, the range included.
def flush_at_commit(db: SyncDB) -> None:
    """Make the commit of ``db``'s transaction wait until it, and every serial drawn in it, is
    on disk: for a transaction that draws serials to send out after it commits and writes
    nothing else (``next_durable``, ``hivenet-db next``). A transaction that records its serials
    in a table of its own needs nothing: its commit is flushed anyway."""
    rows(db, API["flush_at_commit"], {})


async def flush_at_commit_async(db: AsyncDB) -> None:
    """``flush_at_commit`` for an AsyncConnection or AsyncSession, or a psycopg
    AsyncConnection."""
    await rows_async(db, API["flush_at_commit"], {})


# Numeric formats (time_id): the fields as JSON, NULL when there are none (time_id's fast path
# then needs no JSON at all).
def _time_id_fields(fields: dict[str, str]) -> str | None:
    return json_text("fields", fields) if fields else None


def _params(format: str, count: int, fields: dict[str, Any]) -> dict[str, Any]:
    return {"format": format, "count": count, "fields": json_text("fields", fields)}


def _statement(format: str) -> str:
    # A custom format is parsed by the database, which alone knows it.
    return API["next_serials" if format in builtin_formats() else "next_serials_parsed"]


def _serials(format: str, result: Rows) -> list[Serial]:
    if format in builtin_formats():
        return [issued(row[0], format) for row in result]
    return [Serial(value, parsed) for value, parsed in result]


def _kind(format: str, result: Rows) -> Serial:
    ((value,),) = result
    return issued(value, format)


class SerialRepository:
    """Serials for the caller's SQLAlchemy ``Connection`` or ``Session``, or a psycopg 3
    ``Connection``.

    Raises ``InvalidInput`` (HN001), ``UnknownScope`` (HN002), ``SequenceExhausted`` (HN010)
    or ``ClockBehind`` (HN011).
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
        return _serials(format, rows(self.db, _statement(format), _params(format, n, fields)))

    def next_durable(self, format: str, **fields: str) -> Serial:
        """A serial committed before it is returned: safe to send out before your commit.

        Allocated and committed in a transaction of its own, on a connection of durable
        allocation's own pool for your database (so it costs a commit, and stays issued
        whatever your transaction does), never one from your engine's pool, which a
        saturated application holds. ``DurablePoolExhausted`` when that pool (2 connections,
        2 s by default: ``configure_durable_pool``) or the server pool behind it gives no
        connection in time. After a crash PostgreSQL may hand out again a value taken by a
        transaction that never committed; never this one (SPEC §6).
        """
        with durable_transaction(self.db) as own:
            flush_at_commit(own)
            return _serials(format, rows(own, _statement(format), _params(format, 1, fields)))[0]

    def next_time_id(self, format: str = "time_id", **fields: str) -> int:
        """One id of numeric format ``format``, time_id by default: ``(yyMMddHHmmss << 14) |
        seq``, a bigint. ``fields`` for a format of your own with fields (an instance, say).
        ``SequenceExhausted`` past 16,383 in one second; ``ClockBehind`` (HN011) when the
        clock is behind the latest id's time and the format's clock policy refuses."""
        ((value,),) = rows(self.db, API["next_time_id"], {
            "format": format, "fields": _time_id_fields(fields)})
        return int(value)

    def next_time_ids(self, n: int, format: str = "time_id", **fields: str) -> list[int]:
        """``n`` ids in increasing order in one round trip (at most ``max_serials_per_call``,
        10,000 by default)."""
        return [int(row[0]) for row in rows(self.db, API["next_time_ids"], {
            "format": format, "count": n, "fields": _time_id_fields(fields)})]

    def next_unified(self, system: str, module: str, instance: str) -> Serial:
        return _kind("unified", rows(self.db, API["next_unified_serial"], {
            "system": system, "module": module, "instance": instance}))

    def next_system(self, system: str, module: str, instance: str) -> Serial:
        return _kind("system", rows(self.db, API["next_system_serial"], {
            "system": system, "module": module, "instance": instance}))

    def next_interface(self, system: str, module: str, instance: str, target: str) -> Serial:
        return _kind("interface", rows(self.db, API["next_interface_serial"], {
            "system": system, "module": module, "instance": instance, "target": target}))


class AsyncSerialRepository:
    """``SerialRepository`` for an ``AsyncConnection`` or ``AsyncSession``, or a psycopg 3
    ``AsyncConnection``."""

    def __init__(self, db: AsyncDB) -> None:
        self.db = db

    async def next(self, format: str, **fields: str) -> Serial:
        return (await self.next_many(format, 1, **fields))[0]

    async def next_many(self, format: str, n: int, **fields: str) -> list[Serial]:
        """``SerialRepository.next_many``: at most ``max_serials_per_call`` (10,000) a call."""
        return _serials(format, await rows_async(self.db, _statement(format),
                                                 _params(format, n, fields)))

    async def next_durable(self, format: str, **fields: str) -> Serial:
        """``SerialRepository.next_durable``: committed on a connection of its own (connected
        for the call, not from your pool; ``configure_durable_pool`` bounds them)."""
        async with durable_transaction_async(self.db) as own:
            await flush_at_commit_async(own)
            return _serials(format, await rows_async(own, _statement(format),
                                                     _params(format, 1, fields)))[0]

    async def next_time_id(self, format: str = "time_id", **fields: str) -> int:
        """``SerialRepository.next_time_id``."""
        ((value,),) = await rows_async(self.db, API["next_time_id"], {
            "format": format, "fields": _time_id_fields(fields)})
        return int(value)

    async def next_time_ids(self, n: int, format: str = "time_id", **fields: str) -> list[int]:
        """``SerialRepository.next_time_ids``."""
        return [int(row[0]) for row in await rows_async(self.db, API["next_time_ids"], {
            "format": format, "count": n, "fields": _time_id_fields(fields)})]

    async def next_unified(self, system: str, module: str, instance: str) -> Serial:
        return _kind("unified", await rows_async(self.db, API["next_unified_serial"], {
            "system": system, "module": module, "instance": instance}))

    async def next_system(self, system: str, module: str, instance: str) -> Serial:
        return _kind("system", await rows_async(self.db, API["next_system_serial"], {
            "system": system, "module": module, "instance": instance}))

    async def next_interface(self, system: str, module: str, instance: str,
                             target: str) -> Serial:
        return _kind("interface", await rows_async(self.db, API["next_interface_serial"], {
            "system": system, "module": module, "instance": instance, "target": target}))
