"""The connections durable allocation commits on (``SerialRepository.next_durable``).

A durable serial is committed before it is returned, so it needs a transaction of its own, on a
second connection, while the caller's business transaction holds the first. Taken from the
caller's own pool, that second connection is the one a saturated pool never frees: every holder
waits for a second connection until the pool's timeout (measured: 8 threads on an engine of 8
fell from 1,744 to 3 transactions a second). So durable allocation has connections of its own:
a small pool per database (server, port, database and user of the caller's connection), made
once, on first use, and never more than ``size`` connections. A call that finds them all busy,
or cannot get a server session for its own within ``timeout`` (behind PgBouncer, whose pool the
business transactions may hold), raises ``DurablePoolExhausted`` naming the pool and what to
size, instead of stalling (docs/operations.md, "Durable allocation").

Configure a database's pool before its first durable allocation with
``configure_durable_pool(database_url, size=..., timeout=..., url=...)``; ``url`` sends the
pool's connections elsewhere than the caller's (behind PgBouncer: a pool of its own).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import math
import select
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from hivenet_db._execute import AsyncDB, SyncDB, conninfo_of, driver_of, driver_of_async
from hivenet_db.errors import DurablePoolExhausted

DEFAULT_SIZE = 2
DEFAULT_TIMEOUT = 2.0  # seconds


# A database as durable allocation tells its pools apart: server, port, database, user.
Target = tuple[str, str, str, str]


def _target_of_conninfo(conninfo: str) -> Target:
    params = conninfo_to_dict(conninfo)
    return (str(params.get("host", "")), str(params.get("port", "5432")),
            str(params.get("dbname", "")), str(params.get("user", "")))


def _target_of(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> Target:
    info = conn.info
    return (info.host, str(info.port), info.dbname, info.user)


@dataclass
class _Config:
    size: int = DEFAULT_SIZE
    timeout: float = DEFAULT_TIMEOUT
    url: str | None = None  # None: the caller's own conninfo


@dataclass
class _Pool:
    """``size`` connections at most, idle ones kept; a slot is waited for ``timeout`` at most."""

    name: str
    conninfo: str
    config: _Config
    slots: threading.BoundedSemaphore = field(init=False)
    idle: list[psycopg.Connection[Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.slots = threading.BoundedSemaphore(self.config.size)

    def exhausted(self, waited_for: str) -> DurablePoolExhausted:
        return DurablePoolExhausted(
            f"durable allocation waited {self.config.timeout:g} s for {waited_for} of its pool "
            f"for {self.name} ({self.config.size} connections): raise its size with "
            f"hivenet_db.configure_durable_pool(..., size=...) to the durable allocations that "
            f"run at once, and behind PgBouncer give it a pool of its own, or size "
            f"default_pool_size to the business transactions plus this pool (docs/operations.md)")

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        if not self.slots.acquire(timeout=self.config.timeout):
            raise self.exhausted("a free connection")
        try:
            with self.lock:
                conn = self.idle.pop() if self.idle else None
            if conn is not None:
                try:
                    self._begin(conn)
                except psycopg.OperationalError:  # the server closed it (a restart): anew
                    conn = None
            if conn is None:
                conn = self._connect()
                self._begin(conn)
            committed = False
            try:
                yield conn
                conn.execute("COMMIT")
                committed = True
            finally:
                if committed:
                    with self.lock:
                        self.idle.append(conn)
                else:
                    conn.close()  # rolls back whatever was left
        finally:
            self.slots.release()

    def _connect(self) -> psycopg.Connection[Any]:
        # Never prepared: behind PgBouncer in transaction pooling the next transaction may run
        # in another server session.
        return psycopg.Connection.connect(
            self.conninfo, autocommit=True, prepare_threshold=None,
            connect_timeout=max(1, math.ceil(self.config.timeout)))

    def _begin(self, conn: psycopg.Connection[Any]) -> None:
        """BEGIN, waited for at most the timeout: behind PgBouncer in transaction pooling, this
        is where the connection waits for a server session, which the business transactions
        may all hold. Sent through libpq's asynchronous calls, since PgBouncer ignores a cancel
        request of a client it has not given a session yet. Closes the connection when it
        fails."""
        pgconn = conn.pgconn
        try:
            pgconn.send_query(b"BEGIN")
            deadline = time.monotonic() + self.config.timeout
            pgconn.consume_input()
            while pgconn.is_busy():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([pgconn.socket], [], [], remaining)[0]:
                    raise self.exhausted("a server session")
                pgconn.consume_input()
            while (result := pgconn.get_result()) is not None:
                if result.status != pq.ExecStatus.COMMAND_OK:
                    raise psycopg.OperationalError(
                        (result.error_message or b"").decode(errors="replace"))
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


_configs: dict[Target, _Config] = {}
_pools: dict[Target, _Pool] = {}
_registry_lock = threading.Lock()


@atexit.register
def _close_all() -> None:
    """The idle connections, closed at exit (not left to the garbage collector)."""
    for pool in list(_pools.values()):
        pool.close()


def configure_durable_pool(database_url: str, *, size: int = DEFAULT_SIZE,
                           timeout: float = DEFAULT_TIMEOUT, url: str | None = None) -> None:
    """Set the pool durable allocation uses for the database of ``database_url`` (the URL or
    conninfo your application connects with: its server, port, database and user name the
    pool): at most ``size`` connections, a wait of at most ``timeout`` seconds, connections to
    ``url`` (default: the caller's connection's own conninfo). Replaces a pool already made
    for it (its idle connections are closed; those in use finish their call)."""
    if size < 1 or not 0 < timeout <= 60:
        raise ValueError(f"size {size} must be at least 1 and timeout {timeout} between 0 "
                         f"(excluded) and 60 seconds")
    target = _target_of_conninfo(_libpq(database_url))
    with _registry_lock:
        _configs[target] = _Config(size, timeout, None if url is None else _libpq(url))
        old = _pools.pop(target, None)
    if old is not None:
        old.close()


def _libpq(url: str) -> str:
    """A URL or conninfo as libpq reads it (SQLAlchemy's driver suffix dropped)."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+')[0]}{sep}{rest}" if sep else url


def _name(target: Target) -> str:
    host, port, dbname, user = target
    return f"database {dbname!r} of user {user!r} at {host}:{port}"


def _pool_for(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> _Pool:
    target = _target_of(conn)
    with _registry_lock:
        pool = _pools.get(target)
        if pool is None:
            config = _configs.get(target, _Config())
            pool = _pools[target] = _Pool(_name(target), config.url or conninfo_of(conn),
                                          config)
        return pool


@contextmanager
def durable_transaction(db: SyncDB) -> Iterator[psycopg.Connection[Any]]:
    """A transaction on a connection of the durable pool of the database ``db`` (the caller's
    SQLAlchemy Connection or Session, or psycopg Connection) is connected to, committed when
    the block ends (rolled back, and the connection closed, when it raises)."""
    with _pool_for(driver_of(db)).transaction() as own:
        yield own


@asynccontextmanager
async def durable_transaction_async(db: AsyncDB) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """``durable_transaction`` for asyncio: a connection of its own for the call (connected,
    used and closed; the wait for a server session bounded by the pool's timeout), never one
    from the caller's pool. The pool's size bounds the calls of this event loop at once."""
    pool = _pool_for(await driver_of_async(db))
    slots = _async_slots(pool)
    try:
        await asyncio.wait_for(slots.acquire(), pool.config.timeout)
    except TimeoutError:
        raise pool.exhausted("a free connection") from None
    try:
        try:
            own = await asyncio.wait_for(psycopg.AsyncConnection.connect(
                pool.conninfo, autocommit=True, prepare_threshold=None), pool.config.timeout)
        except TimeoutError:
            raise pool.exhausted("a connection") from None
        async with own:
            try:
                await asyncio.wait_for(own.execute("BEGIN"), pool.config.timeout)
            except TimeoutError:
                raise pool.exhausted("a server session") from None
            committed = False
            try:
                yield own
                await own.execute("COMMIT")
                committed = True
            finally:
                if not committed:
                    with contextlib.suppress(psycopg.Error):
                        await own.execute("ROLLBACK")
    finally:
        slots.release()


# A semaphore belongs to one event loop: per loop (forgotten with it), per pool.
_loop_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


def _async_slots(pool: _Pool) -> asyncio.Semaphore:
    with _registry_lock:
        per_pool = _loop_slots.setdefault(asyncio.get_running_loop(), {})
        return per_pool.setdefault(id(pool), asyncio.Semaphore(pool.config.size))


__all__ = ["configure_durable_pool", "durable_transaction",
           "durable_transaction_async"]
