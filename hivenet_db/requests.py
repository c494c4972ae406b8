"""Keyed requests: any idempotency key (a client's request key, a message id, a pay id) runs
at most once, and a repeat gets the original response.

The same state machine as steps (``hivenet.begin_request`` / ``finish_request`` /
``resolve_request``; a step is the request of namespace ``hivenet.steps`` keyed by its system
serial). Called on the caller's connection, one statement per call (SQLAlchemy ``Connection``
or ``Session``, or psycopg 3 ``Connection``; ``AsyncRequestRepository`` their async
counterparts), never committing::

    with RequestRepository(conn).request("orders", message_id, message) as run:
        if run.started:
            run.response = handle(message)   # runs once; a redelivery gets the same response
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import text

from hivenet_db._execute import (
    AsyncDB,
    Rows,
    SyncDB,
    _checked,
    conninfo_of,
    driver_of,
    driver_of_async,
    driver_rows,
    driver_rows_async,
    rows,
    rows_async,
)
from hivenet_db.decisions import Decision, OnDecision, reported, reported_async, told
from hivenet_db.steps import (
    Guarded,
    OnSuccess,
    StepStart,
    as_json,
    guarded,
    guarded_async,
    start_of,
)
from hivenet_db.waiting import FinishListener, Wait, as_timedelta, waited, waited_async

# What begin found: the same object as for steps (outcome, attempt, response).
RequestStart = StepStart

# begin and finish, every keyed request's two calls, are sent as the driver's own SQL
# (driver_rows: positional parameters, no text() compiled), as allocations are; the
# parameters in the order of the _begin_params / _finish_params dicts.
_BEGIN = ("SELECT outcome, attempt, response FROM hivenet.begin_request("
          "%s, %s, %s::jsonb, %s, %s, %s, %s::interval)")
_FINISH = "SELECT FROM hivenet.finish_request(%s, %s, %s, %s, %s::jsonb)"
_RESOLVE = text(
    "SELECT hivenet.resolve_request(:namespace, :key, :attempt, :succeeded, :note, "
    "CAST(:response AS jsonb))"
)
_RETENTION = text("SELECT hivenet.set_request_retention(:namespace, :retention)")
_WATCH = "SELECT FROM hivenet.watch_request(%s, %s)"

# A batch: begin_requests and finish_requests. The arrays go in binary (%b), which psycopg
# writes without quoting each element as the text form needs (CPU per key).
_BEGIN_MANY = ("SELECT key, outcome, attempt, response FROM hivenet.begin_requests("
               "%s, %b::text[], %b::text[]::jsonb[], %s)")
_FINISH_MANY = ("SELECT FROM hivenet.finish_requests(%s, %b::text[], %b::integer[], "
                "%b::boolean[], %b::text[]::jsonb[])")

#: A key of a batch to finish: ``(key, attempt, succeeded, response)``.
Finish = tuple[str, int, bool, Any]


@dataclass(frozen=True)
class KeyStart:
    """What ``begin_many`` decided about one key of a batch: ``outcome`` ``started`` (run it,
    then finish ``attempt``), ``replayed`` (``response`` is the stored original), or, with
    ``attempt`` None and ``error`` the message ``begin`` would raise, ``in_progress``
    (HN030), ``mismatch`` (HN032) or ``rejected`` (HN001: the key is refused)."""

    key: str
    outcome: Decision
    attempt: int | None
    response: Any = None
    error: str | None = None

    @property
    def started(self) -> bool:
        return self.outcome == "started"

    @property
    def replayed(self) -> bool:
        return self.outcome == "replayed"

    def finished(self, succeeded: bool, response: Any = None) -> Finish:
        """This started key as ``finish_many`` takes it."""
        if not self.started or self.attempt is None:
            raise ValueError(f"key {self.key!r} was not started ({self.outcome})")
        return (self.key, self.attempt, succeeded, response)


def _key_starts(result: Rows) -> list[KeyStart]:
    # begin_requests puts a refusal's error in response: {"code": ..., "message": ...}
    return [KeyStart(key, outcome, attempt, response)
            if outcome in ("started", "replayed")
            else KeyStart(key, outcome, attempt, error=response["message"])
            for key, outcome, attempt, response in result]


def _begin_many_params(namespace: str, keys: Sequence[str], requests: Sequence[Any],
                       lease: timedelta | None) -> dict[str, Any]:
    for key in keys:  # what driver_rows checks of a single key (a NUL)
        _checked({"key": key})
    return {"namespace": namespace, "keys": list(keys),
            "requests": [as_json(request) for request in requests], "lease": lease}


def _finish_many_params(namespace: str, finishes: Iterable[Finish]) -> dict[str, Any]:
    each = list(finishes)
    for key, attempt, _, _ in each:  # what driver_rows checks of a single finish
        _checked({"key": key, "attempt": attempt})
    return {"namespace": namespace, "keys": [f[0] for f in each],
            "attempts": [f[1] for f in each], "succeeded": [f[2] for f in each],
            "responses": [as_json(f[3]) for f in each]}


def _told(hook: OnDecision | None, namespace: str, starts: list[KeyStart]) -> list[KeyStart]:
    for start in starts:
        told(hook, namespace, start.key, start.outcome, start.attempt)
    return starts


@dataclass
class RequestRun(Guarded):
    """The request inside ``RequestRepository.request``: set ``response`` when ``started``;
    when ``replayed`` it already holds the original response."""

    namespace: str
    key: str
    start: StepStart
    response: Any = None

    @classmethod
    def of(cls, namespace: str, key: str, start: StepStart) -> RequestRun:
        return cls(namespace, key, start, start.response)


def _begin_params(namespace: str, key: str, request: Any, on_success: OnSuccess,
                  lease: timedelta | None, nowait: bool,
                  wait: timedelta | None = None) -> dict[str, Any]:
    return {"namespace": namespace, "key": key, "request": as_json(request),
            "on_success": on_success, "lease": lease, "nowait": nowait, "wait": wait}


def _finish_params(namespace: str, key: str, attempt: int, succeeded: bool,
                   response: Any) -> dict[str, Any]:
    return {"namespace": namespace, "key": key, "attempt": attempt, "succeeded": succeeded,
            "response": as_json(response)}


class RequestRepository:
    """Keyed-request state machine on the caller's SQLAlchemy ``Connection`` or ``Session``, or
    psycopg 3 ``Connection``.

    ``begin`` raises ``StepInProgress`` (HN030), ``StepAlreadySucceeded`` (HN031),
    ``RequestMismatch`` (HN032) or ``InvalidInput`` (HN001); ``finish`` and ``resolve`` raise
    ``StaleAttempt`` (HN033). Nothing is committed here: the caller's transaction decides,
    except while ``begin`` waits (``wait``, below).
    ``on_decision(namespace, key, decision, attempt)`` is told what each ``begin`` decided
    (``hivenet_db.decisions``).

    ``begin(..., wait=...)`` (seconds or a timedelta) waits up to that long for the outcome
    of a concurrent attempt of the same key instead of raising ``StepInProgress`` at once,
    then replays it (or starts a new attempt after a failure). An attempt uncommitted in
    another transaction is waited for in the database; one committed as ``processing`` is
    waited for without a transaction (``hivenet_db.waiting``): the repository rolls back the
    caller's transaction (which the error aborted), commits its registration and listens on
    ``listener`` (default: one per process on the same database as ``db``, which listens
    only where ``db`` reaches PostgreSQL itself: through a pooler it logs a warning and the
    wait looks again at intervals of up to a second; give one that reaches PostgreSQL
    directly, or through a session pooler, when ``db`` goes through a transaction pooler).
    So ``db`` must be a connection whose transaction the repository may
    end: a psycopg connection, a SQLAlchemy ``Session`` or a ``Connection`` used with
    ``commit()`` (not inside ``engine.begin()``).
    """

    def __init__(self, db: SyncDB, *, on_decision: OnDecision | None = None,
                 listener: FinishListener | None = None) -> None:
        self.db = db
        self.on_decision = on_decision
        self.listener = listener

    def begin(self, namespace: str, key: str, request: Any = None, *,
              on_success: OnSuccess = "replay", lease: timedelta | None = None,
              nowait: bool = False, wait: Wait | None = None) -> StepStart:
        """Receive the request keyed ``key`` in ``namespace``."""
        if wait is None:
            return reported(self.on_decision, namespace, key, lambda: self._begin(
                namespace, key, request, on_success, lease, nowait, None))
        return reported(self.on_decision, namespace, key, lambda: waited(
            self._listener, namespace, key, as_timedelta(wait),
            partial(self._begin, namespace, key, request, on_success, lease, nowait),
            partial(self._watch, namespace, key), self.db.rollback))

    def _begin(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
               lease: timedelta | None, nowait: bool, wait: timedelta | None) -> StepStart:
        return start_of(driver_rows(self.db, _BEGIN, _begin_params(
            namespace, key, request, on_success, lease, nowait, wait)))

    def _watch(self, namespace: str, key: str) -> None:
        self._register(namespace, key)
        self.db.commit()

    def _register(self, namespace: str, key: str) -> None:
        driver_rows(self.db, _WATCH, {"namespace": namespace, "key": key})

    def _listener(self) -> FinishListener:
        if self.listener is None:
            self.listener = FinishListener.shared(conninfo_of(driver_of(self.db)),
                                                  direct_only=True)
        return self.listener

    def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
               response: Any = None) -> None:
        """End ``attempt``: success with the response to replay, or failure with the error."""
        driver_rows(self.db, _FINISH, _finish_params(namespace, key, attempt, succeeded, response))

    def begin_many(self, namespace: str, keys: Sequence[str], requests: Sequence[Any], *,
                   lease: timedelta | None = None) -> list[KeyStart]:
        """Receive a batch of keyed requests in one round trip (``hivenet.begin_requests``):
        ``keys[i]`` with ``requests[i]``, one ``KeyStart`` per key in their order, a refused
        key's error in it instead of raised. ``InvalidInput`` (HN001) for the batch as a whole
        (lengths differ, a key given twice, more than 1,000 keys...). ``on_decision`` is told
        each key's decision. Finish every started key (``finish``, ``finish_many``)."""
        return _told(self.on_decision, namespace, _key_starts(driver_rows(
            self.db, _BEGIN_MANY, _begin_many_params(namespace, keys, requests, lease))))

    def finish_many(self, namespace: str, finishes: Iterable[Finish]) -> None:
        """``finish`` of each ``(key, attempt, succeeded, response)`` in one statement
        (``hivenet.finish_requests``); the first that cannot be finished raises
        (``StaleAttempt``) and nothing is finished."""
        driver_rows(self.db, _FINISH_MANY, _finish_many_params(namespace, finishes))

    def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool, note: str,
                response: Any = None) -> None:
        """Operator: record the real outcome of a stuck ``processing`` attempt."""
        params = _finish_params(namespace, key, attempt, succeeded, response) | {"note": note}
        rows(self.db, _RESOLVE, params)

    def set_retention(self, namespace: str, retention: timedelta | None) -> None:
        """Operator: keep the namespace's finished requests this long (None: the default)."""
        rows(self.db, _RETENTION, {"namespace": namespace, "retention": retention})

    @contextmanager
    def request(self, namespace: str, key: str, request: Any = None, *,
                on_success: OnSuccess = "replay", lease: timedelta | None = None,
                nowait: bool = False, wait: Wait | None = None) -> Iterator[RequestRun]:
        """Begin the request, run the body, finish it: success with ``run.response``, or
        failure with ``error_report(exception)`` and the exception re-raised. When replayed
        the body must do nothing (check ``run.started``); nothing is recorded."""
        run = RequestRun.of(namespace, key, self.begin(
            namespace, key, request, on_success=on_success, lease=lease, nowait=nowait,
            wait=wait))
        with guarded(run, partial(self.finish, namespace, key)) as inside:
            yield inside

    def run(self, namespace: str, key: str, request: Any, body: Callable[[], Any], *,
            on_success: OnSuccess = "replay", lease: timedelta | None = None,
            nowait: bool = False, wait: Wait | None = None) -> Any:
        """``request`` for a callable: call ``body()`` once if the request starts, return its
        response, or the original response when it is replayed."""
        with self.request(namespace, key, request, on_success=on_success, lease=lease,
                          nowait=nowait, wait=wait) as run:
            if run.started:
                run.response = body()
        return run.response


class AsyncRequestRepository:
    """``RequestRepository`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB, *, on_decision: OnDecision | None = None,
                 listener: FinishListener | None = None) -> None:
        self.db = db
        self.on_decision = on_decision
        self.listener = listener

    async def begin(self, namespace: str, key: str, request: Any = None, *,
                    on_success: OnSuccess = "replay", lease: timedelta | None = None,
                    nowait: bool = False, wait: Wait | None = None) -> StepStart:
        if wait is None:
            return await reported_async(self.on_decision, namespace, key, self._begin(
                namespace, key, request, on_success, lease, nowait, None))
        listener = self.listener or FinishListener.shared(
            conninfo_of(await driver_of_async(self.db)), direct_only=True)
        return await reported_async(self.on_decision, namespace, key, waited_async(
            lambda: listener, namespace, key, as_timedelta(wait),
            partial(self._begin, namespace, key, request, on_success, lease, nowait),
            partial(self._watch, namespace, key), self.db.rollback))

    async def _begin(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
                     lease: timedelta | None, nowait: bool,
                     wait: timedelta | None) -> StepStart:
        return start_of(await driver_rows_async(self.db, _BEGIN, _begin_params(
            namespace, key, request, on_success, lease, nowait, wait)))

    async def _watch(self, namespace: str, key: str) -> None:
        await self._register(namespace, key)
        await self.db.commit()

    async def _register(self, namespace: str, key: str) -> None:
        await driver_rows_async(self.db, _WATCH, {"namespace": namespace, "key": key})

    async def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
                     response: Any = None) -> None:
        await driver_rows_async(self.db, _FINISH,
                         _finish_params(namespace, key, attempt, succeeded, response))

    async def begin_many(self, namespace: str, keys: Sequence[str], requests: Sequence[Any], *,
                         lease: timedelta | None = None) -> list[KeyStart]:
        return _told(self.on_decision, namespace, _key_starts(await driver_rows_async(
            self.db, _BEGIN_MANY, _begin_many_params(namespace, keys, requests, lease))))

    async def finish_many(self, namespace: str, finishes: Iterable[Finish]) -> None:
        await driver_rows_async(self.db, _FINISH_MANY, _finish_many_params(namespace, finishes))

    async def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool, note: str,
                      response: Any = None) -> None:
        params = _finish_params(namespace, key, attempt, succeeded, response) | {"note": note}
        await rows_async(self.db, _RESOLVE, params)

    async def set_retention(self, namespace: str, retention: timedelta | None) -> None:
        await rows_async(self.db, _RETENTION, {"namespace": namespace, "retention": retention})

    @asynccontextmanager
    async def request(self, namespace: str, key: str, request: Any = None, *,
                      on_success: OnSuccess = "replay", lease: timedelta | None = None,
                      nowait: bool = False,
                      wait: Wait | None = None) -> AsyncIterator[RequestRun]:
        run = RequestRun.of(namespace, key, await self.begin(
            namespace, key, request, on_success=on_success, lease=lease, nowait=nowait,
            wait=wait))
        async with guarded_async(run, partial(self.finish, namespace, key)) as inside:
            yield inside

    async def run(self, namespace: str, key: str, request: Any,
                  body: Callable[[], Awaitable[Any]], *, on_success: OnSuccess = "replay",
                  lease: timedelta | None = None, nowait: bool = False,
                  wait: Wait | None = None) -> Any:
        async with self.request(namespace, key, request, on_success=on_success, lease=lease,
                                nowait=nowait, wait=wait) as run:
            if run.started:
                run.response = await body()
        return run.response


__all__ = ["AsyncRequestRepository", "Finish", "KeyStart", "RequestRepository", "RequestRun",
           "RequestStart"]
