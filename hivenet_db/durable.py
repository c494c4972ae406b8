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

A child of ``fork()`` (gunicorn ``--preload``, multiprocessing) starts with no pool: the
parent's connections are the parent's sessions, whose sockets the child shares, so it
neither uses nor closes them (``os.register_at_fork``, as psycopg_pool and SQLAlchemy advise
for their pools) and connects anew; the configuration is kept.

Configure a database's pool before its first durable allocation with
``configure_durable_pool(database_url, size=..., timeout=..., url=...)``; ``url`` sends the
pool's connections elsewhere than the caller's (behind PgBouncer: a pool of its own). Or give
it a ``psycopg_pool.ConnectionPool`` / ``AsyncConnectionPool`` of the application's
(``pool=`` / ``async_pool=``, extra ``[pool]``): its connections are then borrowed for each
durable allocation and given back, with the same bounded waits, never from the pool the
caller's own connection came from (docs/guides/psycopg-pool.md).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import math
import os
import select
import threading
import time
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from hivenet_db._execute import AsyncDB, SyncDB, conninfo_of, driver_of, driver_of_async
from hivenet_db.errors import DurablePoolExhausted
from hivenet_db.poolers import UNPREPARED

if TYPE_CHECKING:  # psycopg_pool: the optional extra "pool"
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

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
    # The application's psycopg_pool pools to borrow from instead (None: connections of its own)
    pool: ConnectionPool[Any] | None = None
    async_pool: AsyncConnectionPool[Any] | None = None


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

    def exhausted(self, waited_for: str,
                  lender: ConnectionPool[Any] | AsyncConnectionPool[Any] | None = None,
                  ) -> DurablePoolExhausted:
        """The error of a wait that ran out: for a connection of its own pool, or of the
        application's psycopg_pool pool it borrows from (``lender``)."""
        if lender is None:
            return DurablePoolExhausted(
                f"durable allocation waited {self.config.timeout:g} s for {waited_for} of its "
                f"pool for {self.name} ({self.config.size} connections): raise its size with "
                f"hivenet_db.configure_durable_pool(..., size=...) to the durable allocations "
                f"that run at once, and behind PgBouncer give it a pool of its own, or size "
                f"default_pool_size to the business transactions plus this pool "
                f"(docs/operations.md)")
        return DurablePoolExhausted(
            f"durable allocation waited up to {self.config.timeout:g} s for {waited_for} of "
            f"psycopg_pool {lender.name!r} ({lender.max_size} connections at most), its pool "
            f"for {self.name}: raise that pool's max_size to the durable allocations that run "
            f"at once, and behind PgBouncer give it a pool of its own, or size "
            f"default_pool_size to the business transactions plus this pool "
            f"(docs/guides/psycopg-pool.md)")

    @contextmanager
    def transaction(self, caller: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
        """A transaction on a connection of the pool (of the application's psycopg_pool pool
        when configured), committed when the block ends, rolled back when it raises."""
        lender = self.config.pool
        with self._borrowed(lender, caller) if lender is not None else self._kept() as conn:
            yield conn
            conn.execute("COMMIT")

    @contextmanager
    def _kept(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own, begun: an idle one, else a new one; kept idle after the
        block, closed (which rolls back) when the block raises."""
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
            try:
                yield conn
            except BaseException:
                conn.close()
                raise
            with self.lock:
                self.idle.append(conn)
        finally:
            self.slots.release()

    @contextmanager
    def _borrowed(self, lender: ConnectionPool[Any],
                  caller: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
        """A connection of the application's psycopg_pool pool, begun (in either autocommit
        mode: psycopg sends no BEGIN of its own inside a transaction), given back after the
        block, rolled back first when the block raises."""
        with _borrowing(self, lender, caller):
            conn = lender.getconn(timeout=self.config.timeout)
        try:
            self._begin(conn)
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(psycopg.Error):  # a closed connection has nothing
                    conn.rollback()
                raise
        finally:
            lender.putconn(conn)  # a closed one is replaced by the pool

    def _connect(self) -> psycopg.Connection[Any]:
        # Never prepared: behind PgBouncer in transaction pooling the next transaction may run
        # in another server session.
        return psycopg.Connection.connect(
            self.conninfo, autocommit=True, **UNPREPARED,
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
                    raise self.exhausted("a server session", self.config.pool)
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


@contextmanager
def _borrowing(pool: _Pool, lender: ConnectionPool[Any] | AsyncConnectionPool[Any],
               caller: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> Iterator[None]:
    """Around taking a connection from ``lender``: its waits that ran out become
    ``DurablePoolExhausted``; and never the pool the caller's connection came from, of which
    a saturated application holds every connection (SPEC §6)."""
    from psycopg_pool import PoolTimeout, TooManyRequests

    if getattr(caller, "_pool", None) is lender:  # psycopg_pool marks the connections it lends
        raise ValueError(
            f"durable allocation would borrow from psycopg_pool {lender.name!r}, the pool your "
            f"connection came from: under load every connection of it waits for a second one; "
            f"give durable allocation a pool of its own (docs/guides/psycopg-pool.md)")
    try:
        yield
    except PoolTimeout:
        raise pool.exhausted("a free connection", lender) from None
    except TooManyRequests as error:
        raise pool.exhausted(f"a free connection ({error})", lender) from None


_configs: dict[Target, _Config] = {}
_pools: dict[Target, _Pool] = {}
_registry_lock = threading.Lock()
# In a forked child, the parent's idle connections: never used, never closed (closing one
# would end the parent's session), and kept referenced so that none is collected with a
# warning; psycopg itself never ends a session from a process that did not open it.
_inherited: list[psycopg.Connection[Any]] = []


@atexit.register
def _close_all() -> None:
    """The idle connections, closed at exit (not left to the garbage collector)."""
    for pool in list(_pools.values()):
        pool.close()


def _forget_after_fork() -> None:
    """In a child of fork(): no pool, and the locks made anew (a thread of the parent may
    have held one when it forked, and no thread of the child would ever release it)."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for pool in _pools.values():
        _inherited.extend(pool.idle)
    _pools.clear()
    _loop_slots.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_after_fork)


def configure_durable_pool(database_url: str, *, size: int = DEFAULT_SIZE,
                           timeout: float = DEFAULT_TIMEOUT, url: str | None = None,
                           pool: ConnectionPool[Any] | None = None,
                           async_pool: AsyncConnectionPool[Any] | None = None) -> None:
    """Set the pool durable allocation uses for the database of ``database_url`` (the URL or
    conninfo your application connects with: its server, port, database and user name the
    pool): at most ``size`` connections, a wait of at most ``timeout`` seconds, connections to
    ``url`` (default: the caller's connection's own conninfo). Replaces a pool already made
    for it (its idle connections are closed; those in use finish their call).

    ``pool`` / ``async_pool``: a ``psycopg_pool.ConnectionPool`` / ``AsyncConnectionPool`` of
    your application, opened and closed by it, to borrow the connections of the sync / async
    repositories' durable allocations from instead (its ``max_size`` bounds them; ``size``
    and ``url`` then apply to the other kind only); never the pool your business connections
    come from. ``timeout`` bounds the wait for its connections and their server sessions."""
    if size < 1 or not 0 < timeout <= 60:
        raise ValueError(f"size {size} must be at least 1 and timeout {timeout} between 0 "
                         f"(excluded) and 60 seconds")
    target = _target_of_conninfo(_libpq(database_url))
    with _registry_lock:
        _configs[target] = _Config(size, timeout, None if url is None else _libpq(url), pool,
                                   async_pool)
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
    the block ends (rolled back when it raises)."""
    caller = driver_of(db)
    with _pool_for(caller).transaction(caller) as own:
        yield own


@asynccontextmanager
async def durable_transaction_async(db: AsyncDB) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """``durable_transaction`` for asyncio: a connection borrowed from the configured
    ``AsyncConnectionPool``, else one of its own for the call (connected, used and closed);
    never one from the caller's pool. The wait for a server session is bounded by the pool's
    timeout."""
    caller = await driver_of_async(db)
    pool = _pool_for(caller)
    lender = pool.config.async_pool
    connection = (_borrowed_async(pool, lender, caller) if lender is not None
                  else _connected_async(pool))
    async with connection as own, AsyncExitStack() as transaction:
        try:
            await asyncio.wait_for(transaction.enter_async_context(own.transaction()),
                                   pool.config.timeout)
        except TimeoutError:
            await own.close()
            raise pool.exhausted("a server session", lender) from None
        yield own


@asynccontextmanager
async def _connected_async(pool: _Pool) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of its own for one call; the pool's size bounds the calls of this event
    loop at once."""
    slots = _async_slots(pool)
    try:
        await asyncio.wait_for(slots.acquire(), pool.config.timeout)
    except TimeoutError:
        raise pool.exhausted("a free connection") from None
    try:
        try:
            own = await asyncio.wait_for(psycopg.AsyncConnection.connect(
                pool.conninfo, autocommit=True, **UNPREPARED), pool.config.timeout)
        except TimeoutError:
            raise pool.exhausted("a connection") from None
        async with own:
            yield own
    finally:
        slots.release()


@asynccontextmanager
async def _borrowed_async(pool: _Pool, lender: AsyncConnectionPool[Any],
                          caller: psycopg.AsyncConnection[Any],
                          ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the application's ``AsyncConnectionPool``, given back after the
    block (a closed one is replaced by the pool)."""
    with _borrowing(pool, lender, caller):
        conn = await lender.getconn(timeout=pool.config.timeout)
    try:
        yield conn
    finally:
        await lender.putconn(conn)


# A semaphore belongs to one event loop: per loop (forgotten with it), per pool.
_loop_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


def _async_slots(pool: _Pool) -> asyncio.Semaphore:
    with _registry_lock:
        per_pool = _loop_slots.setdefault(asyncio.get_running_loop(), {})
        return per_pool.setdefault(id(pool), asyncio.Semaphore(pool.config.size))


__all__ = ["configure_durable_pool", "durable_transaction",
           "durable_transaction_async"]
