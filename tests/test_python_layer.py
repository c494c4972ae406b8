"""The lean path of the repositories' hot calls (``next_unified``, ``next_system``,
``next_interface``): the driver's SQL on the caller's connection (straight to psycopg when
nothing listens to SQLAlchemy's statements), psycopg preparing it when the connection lets
it, a Session's own connection and transaction, the ORM's execution path skipped; and what
does not change: SQLAlchemy's events, errors as SQLAlchemy raises them, async. Every call of
the step and request repositories is one statement, a call of the public SQL API."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, create_engine, event, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from hivenet_db import (
    AsyncRequestRepository,
    AsyncSerialRepository,
    AsyncStepRepository,
    InvalidInput,
    RequestRepository,
    SerialRepository,
    StaleAttempt,
    StepAlreadySucceeded,
    StepInProgress,
    StepRepository,
)
from hivenet_db.urls import sqlalchemy_url
from tests.helpers import async_connection, scalar

CALLS = 8  # more than psycopg's prepare_threshold (5)


def _prepared(conn: Any) -> list[str]:
    """Statements the server holds prepared for this session."""
    return [r[0] for r in conn.execute(text(
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%next_%serial%'"))]


def test_a_session_allocates_in_its_own_transaction_without_the_orm_path(
        hivenet_url: str) -> None:
    engine = create_engine(sqlalchemy_url(hivenet_url))
    orm_executions: list[object] = []
    try:
        with Session(engine) as session:
            event.listen(session, "do_orm_execute", orm_executions.append)
            session.execute(text("CREATE TABLE paid (serial text PRIMARY KEY)"))
            session.commit()
            repo = SerialRepository(session)
            first = repo.next_unified("C0001", "A01", "01")
            session.execute(text("INSERT INTO paid VALUES (:s)"), {"s": first})
            orm_executions.clear()
            serials = [repo.next_unified("C0001", "A01", "01") for _ in range(CALLS)]
            system = repo.next_system("C0001", "A01", "01")
            interface = repo.next_interface("C0001", "A01", "01", "D0001")
            # The ORM's per-statement machinery (and its events) is not on the hot path.
            assert orm_executions == []
            # Same transaction as the session's own statements: gone with its rollback.
            session.rollback()
            assert session.execute(text("SELECT count(*) FROM paid")).scalar_one() == 0
            again = repo.next_unified("C0001", "A01", "01")
            session.commit()
        assert [s.seq for s in serials] == list(range(first.seq + 1, first.seq + CALLS + 1))
        assert again.seq == serials[-1].seq + 1  # rolled-back numbers are gaps
        assert (system.format, interface.format, interface.target) == \
            ("system", "interface", "D0001")
    finally:
        engine.dispose()


def test_sqlalchemy_events_and_error_mapping_still_apply(hivenet_url: str) -> None:
    engine = create_engine(sqlalchemy_url(hivenet_url))
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: seen.append(statement))
    try:
        with engine.connect() as conn:
            serial = SerialRepository(conn).next_unified("C0001", "A01", "01")
            with pytest.raises(InvalidInput, match="C001"):
                SerialRepository(conn).next_unified("C001", "A01", "01")
            conn.rollback()
            with pytest.raises(InvalidInput, match="system holds a NUL"):
                SerialRepository(conn).next_unified("C0\x0001", "A01", "01")
        assert serial.seq >= 1
        assert sum("next_unified_serial" in s for s in seen) == 2
    finally:
        engine.dispose()


@pytest.mark.parametrize("threshold", [5, None])
def test_the_driver_prepares_the_hot_statement_unless_told_not_to(
        hivenet_url: str, threshold: int | None) -> None:
    """psycopg prepares a statement run often (one parse and plan per session); with
    prepare_threshold=None, as behind PgBouncer in transaction pooling, it never does."""
    engine = create_engine(sqlalchemy_url(hivenet_url),
                           connect_args={"prepare_threshold": threshold})
    try:
        with engine.connect() as conn:
            repo = SerialRepository(conn)
            for _ in range(CALLS):
                repo.next_unified("C0001", "A01", "01")
            prepared = _prepared(conn)
            conn.commit()
        if threshold is None:
            assert prepared == []
        else:
            assert any("next_unified_serial" in s for s in prepared), prepared
        with psycopg.connect(hivenet_url, prepare_threshold=threshold) as raw:
            for _ in range(CALLS):
                SerialRepository(raw).next_system("C0001", "A01", "01")
            held = [r[0] for r in raw.execute("SELECT statement FROM pg_prepared_statements")]
        assert any("next_system_serial" in s for s in held) == (threshold is not None)
    finally:
        engine.dispose()


def test_async_session_and_connection_take_the_same_path(hivenet_app_url: str,
                                                         async_kind: str) -> None:
    async def main() -> list[int]:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            repo = AsyncSerialRepository(conn)
            seqs = [(await repo.next_unified("C0002", "A01", "01")).seq for _ in range(CALLS)]
            await repo.next_interface("C0002", "A01", "01", "D0001")
            with pytest.raises(InvalidInput):
                await repo.next_system("C002", "A01", "01")
            await conn.rollback()
            return seqs

    assert asyncio.run(main()) == list(range(1, CALLS + 1))


def test_with_nothing_listening_the_hot_call_goes_straight_to_the_driver(
        hivenet_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cursor listeners, no echo: the psycopg connection under the SQLAlchemy one, in
    SQLAlchemy's transaction (begun as autobegin would), committed and rolled back by it."""
    engine = create_engine(sqlalchemy_url(hivenet_url))
    try:
        with engine.connect() as conn:
            conn.execute(text("CREATE TABLE paid (serial text PRIMARY KEY)"))
            conn.commit()

            def refused(*args: object, **kwargs: object) -> None:
                raise AssertionError("exec_driver_sql used with nothing listening")

            monkeypatch.setattr(Connection, "exec_driver_sql", refused)
            assert not conn.in_transaction()
            first = SerialRepository(conn).next_unified("C0001", "A01", "01")
            assert conn.in_transaction()
            conn.execute(text("INSERT INTO paid VALUES (:s)"), {"s": first})
            conn.rollback()
            second = SerialRepository(conn).next_unified("C0001", "A01", "01")
            conn.execute(text("INSERT INTO paid VALUES (:s)"), {"s": second})
            conn.commit()
            assert conn.execute(text("SELECT serial FROM paid")).scalar_one() == second
            assert second.seq == first.seq + 1  # the rolled-back one is a gap
    finally:
        engine.dispose()


def test_driver_errors_are_raised_as_sqlalchemy_raises_them(hivenet_url: str) -> None:
    """An error that is not one of ours comes wrapped in SQLAlchemy's DBAPIError, as through
    SQLAlchemy; a lost connection is invalidated, so the pool never hands it out again."""
    engine = create_engine(sqlalchemy_url(hivenet_url))
    try:
        with engine.connect() as conn:
            conn.execute(text("SET TRANSACTION READ ONLY"))
            with pytest.raises(DBAPIError) as caught:
                SerialRepository(conn).next_unified("C0001", "A01", "01")
            assert isinstance(caught.value.orig, psycopg.errors.ReadOnlySqlTransaction)
            conn.rollback()
            with pytest.raises(InvalidInput):  # ours still mapped
                SerialRepository(conn).next_unified("C001", "A01", "01")
            conn.rollback()
            driver = conn.connection.driver_connection
            assert driver is not None
            driver.close()  # the server connection is lost
            with pytest.raises(DBAPIError) as lost:
                SerialRepository(conn).next_unified("C0001", "A01", "01")
            assert lost.value.connection_invalidated and conn.invalidated
    finally:
        engine.dispose()


def test_every_step_and_request_call_is_one_statement_of_the_public_api(
        hivenet_url: str, db: psycopg.Connection) -> None:
    """Counted by SQLAlchemy's before_cursor_execute, for every call of StepRepository and
    RequestRepository and every outcome of begin (new, retried after a failure, replayed,
    refused, nowait): one statement, a call of a public function, no probe and no second
    try."""
    serial, other = (scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
                     for _ in range(2))
    engine = create_engine(sqlalchemy_url(hivenet_url))
    sent: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: sent.append(statement))
    public = ("hivenet.begin_step(", "hivenet.finish_step(", "hivenet.resolve_step(",
              "hivenet.begin_request(", "hivenet.finish_request(", "hivenet.resolve_request(",
              "hivenet.set_request_retention(")

    def one(call: Any, *, raises: type[Exception] | None = None) -> Any:
        sent.clear()
        if raises is None:
            result = call()
        else:
            with pytest.raises(raises):
                call()
            conn.rollback()
            result = None
        assert len(sent) == 1 and sent[0].startswith("SELECT") and sum(
            name in sent[0] for name in public) == 1, sent
        return result

    try:
        with engine.connect() as conn:
            steps, requests = StepRepository(conn), RequestRepository(conn)
            assert one(lambda: steps.begin(serial, {"n": 1})).attempt == 1
            one(lambda: steps.finish(serial, 1, False, {"error": "timeout"}))
            assert one(lambda: steps.begin(serial, {"n": 1})).attempt == 2
            one(lambda: steps.finish(serial, 2, True, {"ok": 1}))
            assert one(lambda: steps.begin(serial, {"n": 1})).replayed
            conn.commit()
            one(lambda: steps.begin(serial, {"n": 1}, on_success="reject"),
                raises=StepAlreadySucceeded)
            assert one(lambda: steps.begin(other, nowait=True)).started
            conn.commit()
            one(lambda: steps.begin(other, nowait=True), raises=StepInProgress)
            one(lambda: steps.resolve(other, 1, True, "checked by phone"))
            assert one(lambda: requests.begin("orders", "k1")).started
            one(lambda: requests.finish("orders", "k1", 1, False))
            assert one(lambda: requests.begin("orders", "k1")).attempt == 2
            one(lambda: requests.finish("orders", "k1", 2, True, {"order": 1}))
            assert one(lambda: requests.begin("orders", "k1")).replayed
            conn.commit()
            one(lambda: requests.resolve("orders", "k1", 2, True, "again"), raises=StaleAttempt)
            one(lambda: requests.set_retention("orders", None))
            conn.commit()
    finally:
        engine.dispose()


def test_async_step_and_request_calls_are_one_statement_each(hivenet_url: str,
                                                             db: psycopg.Connection) -> None:
    pytest.importorskip("greenlet", reason="async SQLAlchemy needs the extra hivenet-db[async]")
    from sqlalchemy.ext.asyncio import create_async_engine

    serial = scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    engine = create_async_engine(sqlalchemy_url(hivenet_url))
    sent: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *rest: sent.append(statement))

    async def main() -> list[int]:
        async with engine.connect() as conn:
            steps, requests = AsyncStepRepository(conn), AsyncRequestRepository(conn)
            counts = []
            for call in (lambda: steps.begin(serial), lambda: steps.finish(serial, 1, True),
                         lambda: steps.begin(serial), lambda: requests.begin("orders", "k1"),
                         lambda: requests.finish("orders", "k1", 1, True)):
                sent.clear()
                await call()
                counts.append(len(sent))
            await conn.commit()
        await engine.dispose()
        return counts

    assert asyncio.run(main()) == [1] * 5
