"""The decision hook (hivenet_db.decisions): ``on_decision(namespace, key, decision, attempt)``
on the repositories and the ASGI middleware, against a real PostgreSQL; concurrent duplicates
on real parallel connections, each caller's hook seeing its own decision. (The Django
middleware's hook is tested in tests/test_django.py, where Django is configured.)"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from hivenet_db import (
    AsyncRequestRepository,
    InvalidInput,
    RequestMismatch,
    RequestRepository,
    StepAlreadySucceeded,
    StepInProgress,
    StepRepository,
)
from hivenet_db._execute import SyncDB
from hivenet_db.attempts import STEPS_NAMESPACE, OnSuccess
from hivenet_db.decisions import Decision, decision_of
from hivenet_db.steps import StepStart
from tests.helpers import async_connection, wait_until_blocked
from tests.test_steps import new_serial

ORDER = {"sku": "tea", "quantity": 2}
Told = tuple[str, str, Decision, "int | None"]


class Recorder:
    """An ``on_decision`` hook keeping what it was told (thread-safe)."""

    def __init__(self) -> None:
        self.told: list[Told] = []
        self._lock = threading.Lock()

    def __call__(self, namespace: str, key: str, decision: Decision,
                 attempt: int | None) -> None:
        with self._lock:
            self.told.append((namespace, key, decision, attempt))


def key() -> str:
    return str(uuid.uuid4())


def test_each_decision_of_a_keyed_request_is_told(any_conn: SyncDB) -> None:
    hook = Recorder()
    repo = RequestRepository(any_conn, on_decision=hook)
    k, in_flight = key(), key()
    start = repo.begin("orders", k, ORDER)
    repo.finish("orders", k, start.attempt, True, {"order": 1})
    repo.begin("orders", in_flight, ORDER)
    any_conn.commit()
    assert repo.begin("orders", k, ORDER).replayed
    refusals: list[tuple[tuple[str, Any], type[Exception], OnSuccess]] = [
            ((k, {"sku": "gin"}), RequestMismatch, "replay"),
            ((in_flight, ORDER), StepInProgress, "replay"),
            ((k, ORDER), StepAlreadySucceeded, "reject"),
            (("", ORDER), InvalidInput, "replay")]
    for refused, error, on_success in refusals:
        with pytest.raises(error):
            repo.begin("orders", *refused, on_success=on_success)
        any_conn.rollback()
    assert hook.told == [("orders", k, "started", 1), ("orders", in_flight, "started", 1),
                         ("orders", k, "replayed", 1), ("orders", k, "mismatch", None),
                         ("orders", in_flight, "in_progress", None),
                         ("orders", k, "rejected", None), ("orders", "", "rejected", None)]


def test_the_context_manager_and_run_tell_through_begin(any_conn: SyncDB) -> None:
    hook = Recorder()
    repo = RequestRepository(any_conn, on_decision=hook)
    k = key()
    assert repo.run("orders", k, ORDER, lambda: {"order": 1}) == {"order": 1}
    with repo.request("orders", k, ORDER) as run:
        assert run.replayed
    any_conn.rollback()
    assert [told[2] for told in hook.told] == ["started", "replayed"]


def test_a_failing_hook_is_logged_and_changes_no_outcome(
        any_conn: SyncDB, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A logging configuration run earlier in the session (alembic's, Django's) may have
    # disabled the loggers that existed then; what is tested here is that it is logged.
    monkeypatch.setattr(logging.getLogger("hivenet_db.decisions"), "disabled", False)
    def broken(namespace: str, key: str, decision: Decision, attempt: int | None) -> None:
        raise RuntimeError(f"tracer down ({decision})")

    repo = RequestRepository(any_conn, on_decision=broken)
    k = key()
    with caplog.at_level(logging.ERROR, logger="hivenet_db.decisions"):
        start = repo.begin("orders", k, ORDER)
        assert start.started and start.attempt == 1
        repo.finish("orders", k, start.attempt, True, {"order": 1})
        with pytest.raises(RequestMismatch):  # the database's error, not the hook's
            repo.begin("orders", k, {"sku": "gin"})
    any_conn.rollback()
    failures = [r for r in caplog.records if r.name == "hivenet_db.decisions"]
    assert [r.exc_info[1].args[0] for r in failures if r.exc_info and r.exc_info[1]] == [
        "tracer down (started)", "tracer down (mismatch)"]
    assert k in failures[0].getMessage() and "orders" in failures[0].getMessage()


def test_an_error_that_is_no_decision_is_not_told() -> None:
    assert decision_of(psycopg.OperationalError("connection lost")) is None
    assert decision_of(StepStart("replayed", 3, {"order": 1})) == "replayed"


def test_concurrent_duplicates_each_hook_sees_its_own_decision(
        hivenet_app_url: str, db: psycopg.Connection) -> None:
    """One caller holds a new key uncommitted; eight others arrive on their own connections
    at once: four with the same request wait and get the replay, two with nowait get
    in_progress at once, two with another request wait and get mismatch."""
    k = key()
    shared = Recorder()  # every caller's hook also tells this one
    kinds = ["same"] * 4 + ["nowait"] * 2 + ["other"] * 2
    conns = [psycopg.connect(hivenet_app_url) for _ in range(len(kinds) + 1)]
    holder, callers = conns[0], conns[1:]
    try:
        holder_repo = RequestRepository(holder, on_decision=shared)
        first = holder_repo.begin("orders", k, ORDER)
        hooks = [Recorder() for _ in kinds]

        def call(i: int) -> StepStart | Exception:
            def both(*told: Any) -> None:
                hooks[i](*told)
                shared(*told)

            repo = RequestRepository(callers[i], on_decision=both)
            request = {"sku": "gin"} if kinds[i] == "other" else ORDER
            try:
                return repo.begin("orders", k, request, nowait=kinds[i] == "nowait")
            except (StepInProgress, RequestMismatch) as error:
                return error
            finally:
                callers[i].rollback()

        pids = [c.info.backend_pid for c, kind in zip(callers, kinds, strict=True)
                if kind != "nowait"]
        with ThreadPoolExecutor(len(kinds)) as pool:
            pending = [pool.submit(call, i) for i in range(len(kinds))]
            for pid in pids:  # every waiting caller waits for the holder's row
                wait_until_blocked(db, pid)
            for i, kind in enumerate(kinds):  # and every nowait one was refused at once
                if kind == "nowait":
                    pending[i].result(timeout=60)
            holder_repo.finish("orders", k, first.attempt, True, {"order": 1})
            holder.commit()
            results = [p.result(timeout=60) for p in pending]
    finally:
        for conn in conns:
            conn.close()

    for i, result in enumerate(results):
        assert hooks[i].told == [("orders", k, decision_of(result),
                                  result.attempt if isinstance(result, StepStart) else None)]
    assert [hook.told[0][2] for hook in hooks] == (
        ["replayed"] * 4 + ["in_progress"] * 2 + ["mismatch"] * 2)
    assert Counter(told[2] for told in shared.told) == Counter(
        started=1, replayed=4, in_progress=2, mismatch=2)


def test_steps_are_told_in_their_namespace_with_the_system_serial(
        any_conn: SyncDB, db: psycopg.Connection) -> None:
    hook = Recorder()
    repo = StepRepository(any_conn, on_decision=hook)
    serial = new_serial(db)
    start = repo.begin(serial, ORDER)
    repo.finish(serial, start.attempt, True, {"paid": True})
    assert repo.begin(serial, ORDER).replayed
    with pytest.raises(RequestMismatch):
        repo.begin(serial, {"sku": "gin"})
    any_conn.rollback()
    assert hook.told == [(STEPS_NAMESPACE, serial, "started", 1),
                         (STEPS_NAMESPACE, serial, "replayed", 1),
                         (STEPS_NAMESPACE, serial, "mismatch", None)]


def test_the_async_repository_tells_its_decisions(hivenet_app_url: str,
                                                  async_kind: str) -> None:
    hook = Recorder()
    k = key()

    async def scenario() -> None:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            repo = AsyncRequestRepository(conn, on_decision=hook)
            assert await repo.run("orders", k, ORDER, _order) == {"order": 1}
            await conn.commit()
            assert (await repo.begin("orders", k, ORDER)).replayed
            with pytest.raises(RequestMismatch):
                await repo.begin("orders", k, {"sku": "gin"})
            await conn.rollback()

    asyncio.run(scenario())
    assert hook.told == [("orders", k, "started", 1), ("orders", k, "replayed", 1),
                         ("orders", k, "mismatch", None)]


async def _order() -> dict[str, int]:
    return {"order": 1}


# --- the ASGI middleware -----------------------------------------------------------------------

def test_the_asgi_middleware_tells_each_request_its_decision(hivenet_url: str) -> None:
    """Sixteen concurrent duplicates while the first is in flight: one started, fifteen
    in_progress (409); then a replay and a mismatch (422). The key told is the stored one."""
    pytest.importorskip("starlette", reason="the middleware needs the extra hivenet-db[asgi]")
    pytest.importorskip("httpx", reason="the tests need httpx (extra test)")
    pytest.importorskip("greenlet", reason="async SQLAlchemy needs the extra hivenet-db[async]")
    from tests.test_asgi import KEY, Calls, client, created, make_app, run

    hook = Recorder()
    calls = Calls()
    calls.release.clear()

    async def scenario(engine: Any) -> None:
        async with client(make_app(engine, created(calls), namespace="shop",
                                   scope=lambda request: "alice", on_decision=hook)) as http:
            first = asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
            await calls.entered.wait()
            duplicates = await asyncio.gather(*(
                http.post("/orders", content=b"x", headers=KEY) for _ in range(15)))
            assert {answer.status_code for answer in duplicates} == {409}
            calls.release.set()
            assert (await first).status_code == 201
            assert (await http.post("/orders", content=b"x", headers=KEY)).headers[
                "idempotent-replayed"] == "true"
            assert (await http.post("/orders", content=b"y", headers=KEY)).status_code == 422

    run(hivenet_url, scenario)
    stored = "alice:" + KEY["Idempotency-Key"].strip('"')
    assert hook.told[0] == ("shop", stored, "started", 1)
    assert hook.told[1:16] == [("shop", stored, "in_progress", None)] * 15
    assert hook.told[16:] == [("shop", stored, "replayed", 1), ("shop", stored, "mismatch", None)]
