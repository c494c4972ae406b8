"""Helpers shared by the tests: real connections in threads started by a barrier, and
waiting for a real lock wait (pg_stat_activity) instead of sleeping."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, closing, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from hivenet_db._execute import AsyncDB, Rows, SyncDB, rows, rows_async
from hivenet_db.urls import sqlalchemy_url

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


@dataclass(frozen=True)
class Issued:
    """A serial (or time id) as a client saw it issued."""

    serial: Any    # str, or int for a time id
    client: int
    started: int   # time.monotonic_ns() before the call was sent
    ended: int     # ... and after its result came back


def assert_never_backwards(issued: list[Issued]) -> None:
    """Unique; each client's serials strictly increasing in its issue order (``issued``
    holds each client's in its own order); and a serial is greater than every serial whose
    call had returned before its own call started (guarantee 3)."""
    serials = [i.serial for i in issued]
    assert len(serials) == len(set(serials)), "a serial was issued twice"
    by_client: dict[int, list[Any]] = {}
    for item in issued:
        by_client.setdefault(item.client, []).append(item.serial)
    for client, own in by_client.items():
        backwards = [(a, b) for a, b in itertools.pairwise(own) if b <= a]
        assert not backwards, f"client {client} went backwards: {backwards[:3]}"
    by_end = sorted(issued, key=lambda i: i.ended)
    done = 0
    highest = None
    for item in sorted(issued, key=lambda i: i.started):
        while done < len(by_end) and by_end[done].ended < item.started:
            serial = by_end[done].serial
            highest = serial if highest is None else max(highest, serial)
            done += 1
        assert highest is None or item.serial > highest, (
            f"{item.serial} issued after {highest} had been returned, and is not greater")


def scalar(conn: psycopg.Connection, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def functions_run(db: psycopg.Connection, call: Callable[[], object]) -> dict[str, int]:
    """Calls of each function of schema hivenet run while ``call()`` runs on ``db`` (in a
    transaction of its own, committed), but for IMMUTABLE ones (folded when a statement with
    constants is planned: not a cost of each call). The difference of the session's pending
    counts, which may hold earlier transactions'."""
    count = ("SELECT f.funcname, f.calls FROM pg_stat_xact_user_functions f "
             "JOIN pg_proc p ON p.oid = f.funcid "
             "WHERE f.schemaname = 'hivenet' AND p.provolatile <> 'i'")
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'all'")
        before: dict[str, int] = dict(db.execute(count).fetchall())
        call()
        after: dict[str, int] = dict(db.execute(count).fetchall())
    return {name: n - before.get(name, 0) for name, n in after.items()
            if n != before.get(name, 0)}


def policy_call(namespace: str, **values: Any) -> tuple[str, dict[str, Any]]:
    """``hivenet.set_namespace_policy(namespace, <option> => value, ...)`` and its
    parameters, for ``execute`` or ``failure``."""
    named = "".join(f", {option} => %({option})s" for option in values)
    return f"SELECT hivenet.set_namespace_policy(%(ns)s{named})", {"ns": namespace, **values}


def policy(db: psycopg.Connection, namespace: str, **values: Any) -> None:
    """Set options of the policy of ``namespace`` (as its owner or hivenet_admin)."""
    db.execute(*policy_call(namespace, **values))


def share_fallback(db: psycopg.Connection, *formats: str, promote: bool = False) -> None:
    """Let ``formats`` draw the serials of their unprepared scopes from their shared fallback
    counter (setting shared_fallback), and with ``promote`` have maintain() give each scope
    that drew its own counter (promote_fallback_scopes); no format when none is named."""
    for name, value in (("shared_fallback", formats), ("promote_fallback_scopes",
                                                       formats if promote else ())):
        db.execute("UPDATE hivenet.setting SET value = %s WHERE name = %s",
                   (",".join(value), name))


def sqlstate_of(error: BaseException) -> str | None:
    """The SQLSTATE of an exception caught elsewhere (None when it is not a database error)."""
    return getattr(getattr(error, "diag", None), "sqlstate", None)


def failure(conn: psycopg.Connection, sql: str, params: Any = None) -> tuple[str, str]:
    """The SQLSTATE and primary message of a statement that must fail."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(sql, params)
    return caught.value.diag.sqlstate or "", caught.value.diag.message_primary or ""


@contextmanager
def usage_only_role(db: psycopg.Connection, role: str) -> Iterator[psycopg.Connection]:
    """The connection acting as a new role granted only USAGE on schema hivenet (what a
    role that can see the schema, but holds no hivenet role, may do); the role and its
    grants are dropped afterwards."""
    with role_in(db, role) as conn:
        db.execute("RESET ROLE")
        db.execute(f"GRANT USAGE ON SCHEMA hivenet TO {role}")
        db.execute(f"SET ROLE {role}")
        yield conn


@contextmanager
def role_in(db: psycopg.Connection, role: str, *granted: str) -> Iterator[psycopg.Connection]:
    """The connection (a superuser's) acting as a new role that is granted exactly the roles
    ``granted`` (none: no right at all), as a login of production would be; dropped
    afterwards."""
    db.execute(f"CREATE ROLE {role}" + (f" IN ROLE {', '.join(granted)}" if granted else ""))
    db.execute(f"SET ROLE {role}")
    try:
        yield db
    finally:
        db.execute("RESET ROLE")
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


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


def eventually(done: Callable[[], bool], timeout: float) -> bool:
    """Whether ``done()`` comes true within ``timeout`` seconds, asked every 5 ms: what a test
    waits for in another session, never by sleeping blind."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def wait_until_blocked(db: psycopg.Connection, pid: int, timeout: float = 10.0) -> None:
    """Return once backend pid waits for a lock (pg_stat_activity)."""
    assert eventually(lambda: db.execute("SELECT wait_event_type FROM pg_stat_activity "
                                         "WHERE pid = %s", (pid,)).fetchone() == ("Lock",),
                      timeout), f"backend {pid} never waited for a lock"


def behind_a_table_lock(holder: psycopg.Connection, claimer: psycopg.Connection, table: str,
                        claim: Callable[[], str | None]) -> str | None:
    """``claim()`` on ``claimer`` while ``holder`` keeps an ACCESS EXCLUSIVE lock on ``table``
    (as a maintain() creating a partition does) until the claim waits for it: the claim's
    refusal (its SQLSTATE), or None once it went through."""
    result: dict[str, str | None] = {}
    thread = threading.Thread(target=lambda: result.update(state=claim()))
    with holder.transaction():
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        thread.start()
        wait_until_blocked(holder, claimer.info.backend_pid)
    thread.join(10)
    return result["state"]


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


# --- the caller's connection, of every kind the repositories accept -------------------------

SYNC_KINDS = ["sqlalchemy-connection", "sqlalchemy-session", "psycopg"]
ASYNC_KINDS = ["sqlalchemy-async-connection", "sqlalchemy-async-session", "psycopg-async"]


@contextmanager
def sync_connection(kind: str, url: str) -> Iterator[SyncDB]:
    """A connection of ``kind`` to ``url``; closed (uncommitted work rolled back) at the end."""
    if kind == "psycopg":
        with closing(psycopg.connect(url)) as conn:
            yield conn
        return
    engine = create_engine(sqlalchemy_url(url))
    try:
        if kind == "sqlalchemy-session":
            with Session(engine) as session:
                yield session
        else:
            with engine.connect() as connection:
                yield connection
    finally:
        engine.dispose()


@asynccontextmanager
async def async_connection(kind: str, url: str) -> AsyncIterator[AsyncDB]:
    """``sync_connection`` for the async kinds."""
    if kind == "psycopg-async":
        conn = await psycopg.AsyncConnection.connect(url)
        try:
            yield conn
        finally:
            await conn.close()
        return
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(sqlalchemy_url(url))
    try:
        if kind == "sqlalchemy-async-session":
            async with AsyncSession(engine) as session:
                yield session
        else:
            async with engine.connect() as connection:
                yield connection
    finally:
        await engine.dispose()


def run_sql(db: SyncDB, sql: str, **params: Any) -> Rows:
    """Run ``sql`` (``%(name)s`` parameters) on a connection of any kind, as the library does."""
    return rows(db, sql, params)


async def run_sql_async(db: AsyncDB, sql: str, **params: Any) -> Rows:
    return await rows_async(db, sql, params)


Connect = Callable[..., psycopg.Connection]  # the ``connect`` fixture
SetClock = Callable[[psycopg.Connection, str], None]  # the ``fake_clock`` fixture


def explain_to_notices(conn: psycopg.Connection, analyze: bool = False) -> None:
    """Load auto_explain on conn to send the plan of every statement, those run inside
    functions included, as a notice (with row counts when analyze). Nothing is logged until
    the caller sets auto_explain.log_min_duration (to 0)."""
    conn.execute("LOAD 'auto_explain'")
    for name, value in (("log_nested_statements", "on"), ("log_level", "notice"),
                        *((("log_analyze", "on"), ("log_timing", "off")) if analyze else ())):
        conn.execute(f"SET auto_explain.{name} = {value}")


def statements_of(conn: psycopg.Connection, sql: str, params: Any = None
                  ) -> tuple[list[str], int]:
    """The plans of every statement sql runs, its functions' included (auto_explain), and the
    number of advisory locks its transaction holds at its end. Runs sql in a transaction of
    its own on conn (autocommit)."""
    plans: list[str] = []

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith("duration:"):
            plans.append(diag.message_primary or "")

    conn.add_notice_handler(collect)
    explain_to_notices(conn, analyze=True)
    try:
        with conn.transaction():
            conn.execute("SET auto_explain.log_min_duration = 0")
            conn.execute(sql, params)
            conn.execute("SET auto_explain.log_min_duration = -1")
            advisory = int(scalar(conn, "SELECT count(*) FROM pg_locks WHERE pid = "
                                        "pg_backend_pid() AND locktype = 'advisory'"))
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
        conn.remove_notice_handler(collect)
    return plans, advisory
