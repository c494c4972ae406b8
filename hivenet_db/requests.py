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

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from sqlalchemy import text

from hivenet_db._execute import (
    AsyncDB,
    SyncDB,
    driver_rows,
    driver_rows_async,
    rows,
    rows_async,
)
from hivenet_db.decisions import OnDecision, reported, reported_async
from hivenet_db.steps import (
    Guarded,
    OnSuccess,
    StepStart,
    as_json,
    guarded,
    guarded_async,
    start_of,
)

# What begin found: the same object as for steps (outcome, attempt, response).
RequestStart = StepStart

# begin and finish, every keyed request's two calls, are sent as the driver's own SQL
# (driver_rows: positional parameters, no text() compiled), as allocations are; the
# parameters in the order of the _begin_params / _finish_params dicts.
_BEGIN = ("SELECT outcome, attempt, response FROM hivenet.begin_request("
          "%s, %s, %s::jsonb, %s, %s, %s)")
_FINISH = "SELECT FROM hivenet.finish_request(%s, %s, %s, %s, %s::jsonb)"
_RESOLVE = text(
    "SELECT hivenet.resolve_request(:namespace, :key, :attempt, :succeeded, :note, "
    "CAST(:response AS jsonb))"
)
_RETENTION = text("SELECT hivenet.set_request_retention(:namespace, :retention)")


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
                  lease: timedelta | None, nowait: bool) -> dict[str, Any]:
    return {"namespace": namespace, "key": key, "request": as_json(request),
            "on_success": on_success, "lease": lease, "nowait": nowait}


def _finish_params(namespace: str, key: str, attempt: int, succeeded: bool,
                   response: Any) -> dict[str, Any]:
    return {"namespace": namespace, "key": key, "attempt": attempt, "succeeded": succeeded,
            "response": as_json(response)}


class RequestRepository:
    """Keyed-request state machine on the caller's SQLAlchemy ``Connection`` or ``Session``, or
    psycopg 3 ``Connection``.

    ``begin`` raises ``StepInProgress`` (HN030), ``StepAlreadySucceeded`` (HN031),
    ``RequestMismatch`` (HN032) or ``InvalidInput`` (HN001); ``finish`` and ``resolve`` raise
    ``StaleAttempt`` (HN033). Nothing is committed here: the caller's transaction decides.
    ``on_decision(namespace, key, decision, attempt)`` is told what each ``begin`` decided
    (``hivenet_db.decisions``).
    """

    def __init__(self, db: SyncDB, *, on_decision: OnDecision | None = None) -> None:
        self.db = db
        self.on_decision = on_decision

    def begin(self, namespace: str, key: str, request: Any = None, *,
              on_success: OnSuccess = "replay", lease: timedelta | None = None,
              nowait: bool = False) -> StepStart:
        """Receive the request keyed ``key`` in ``namespace``."""
        return reported(self.on_decision, namespace, key, lambda: start_of(driver_rows(
            self.db, _BEGIN, _begin_params(namespace, key, request, on_success, lease, nowait))))

    def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
               response: Any = None) -> None:
        """End ``attempt``: success with the response to replay, or failure with the error."""
        driver_rows(self.db, _FINISH, _finish_params(namespace, key, attempt, succeeded, response))

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
                nowait: bool = False) -> Iterator[RequestRun]:
        """Begin the request, run the body, finish it: success with ``run.response``, or
        failure with ``error_report(exception)`` and the exception re-raised. When replayed
        the body must do nothing (check ``run.started``); nothing is recorded."""
        run = RequestRun.of(namespace, key, self.begin(
            namespace, key, request, on_success=on_success, lease=lease, nowait=nowait))
        with guarded(run, partial(self.finish, namespace, key)) as inside:
            yield inside

    def run(self, namespace: str, key: str, request: Any, body: Callable[[], Any], *,
            on_success: OnSuccess = "replay", lease: timedelta | None = None,
            nowait: bool = False) -> Any:
        """``request`` for a callable: call ``body()`` once if the request starts, return its
        response, or the original response when it is replayed."""
        with self.request(namespace, key, request, on_success=on_success, lease=lease,
                          nowait=nowait) as run:
            if run.started:
                run.response = body()
        return run.response


class AsyncRequestRepository:
    """``RequestRepository`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB, *, on_decision: OnDecision | None = None) -> None:
        self.db = db
        self.on_decision = on_decision

    async def begin(self, namespace: str, key: str, request: Any = None, *,
                    on_success: OnSuccess = "replay", lease: timedelta | None = None,
                    nowait: bool = False) -> StepStart:
        return await reported_async(self.on_decision, namespace, key, self._begin(
            namespace, key, request, on_success, lease, nowait))

    async def _begin(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
                     lease: timedelta | None, nowait: bool) -> StepStart:
        return start_of(await driver_rows_async(self.db, _BEGIN, _begin_params(
            namespace, key, request, on_success, lease, nowait)))

    async def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
                     response: Any = None) -> None:
        await driver_rows_async(self.db, _FINISH,
                         _finish_params(namespace, key, attempt, succeeded, response))

    async def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool, note: str,
                      response: Any = None) -> None:
        params = _finish_params(namespace, key, attempt, succeeded, response) | {"note": note}
        await rows_async(self.db, _RESOLVE, params)

    async def set_retention(self, namespace: str, retention: timedelta | None) -> None:
        await rows_async(self.db, _RETENTION, {"namespace": namespace, "retention": retention})

    @asynccontextmanager
    async def request(self, namespace: str, key: str, request: Any = None, *,
                      on_success: OnSuccess = "replay", lease: timedelta | None = None,
                      nowait: bool = False) -> AsyncIterator[RequestRun]:
        run = RequestRun.of(namespace, key, await self.begin(
            namespace, key, request, on_success=on_success, lease=lease, nowait=nowait))
        async with guarded_async(run, partial(self.finish, namespace, key)) as inside:
            yield inside

    async def run(self, namespace: str, key: str, request: Any,
                  body: Callable[[], Awaitable[Any]], *, on_success: OnSuccess = "replay",
                  lease: timedelta | None = None, nowait: bool = False) -> Any:
        async with self.request(namespace, key, request, on_success=on_success, lease=lease,
                                nowait=nowait) as run:
            if run.started:
                run.response = await body()
        return run.response


__all__ = ["AsyncRequestRepository", "RequestRepository", "RequestRun", "RequestStart"]
