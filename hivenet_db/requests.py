"""Keyed requests: any idempotency key (a client's request key, a message id, a pay id) runs
at most once, and a repeat gets the original response.

The core of keyed attempts (``hivenet_db.attempts``: ``hivenet.begin_request`` /
``finish_request`` / ``resolve_request``, the batches ``begin_requests`` /
``finish_requests``; a step is the request of namespace ``hivenet.steps`` keyed by its system
serial). Called on the caller's connection, one statement per call (SQLAlchemy
``Connection`` or ``Session``, or psycopg 3 ``Connection``; ``AsyncRequestRepository`` their
async counterparts), never committing::

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

from hivenet_db._execute import AsyncDB, SyncDB, rows, rows_async
from hivenet_db.attempts import (
    REQUESTS,
    AsyncAttempts,
    Attempts,
    AttemptStart,
    Finish,
    Guarded,
    KeyStart,
    OnSuccess,
    guarded,
    guarded_async,
)
from hivenet_db.decisions import OnDecision
from hivenet_db.statements import API
from hivenet_db.waiting import FinishListener, Wait

#: What ``begin`` found: ``AttemptStart`` (keyed requests and steps share it).
RequestStart = AttemptStart


@dataclass
class RequestRun(Guarded):
    """The request inside ``RequestRepository.request``: set ``response`` when ``started``;
    when ``replayed`` it already holds the original response."""

    namespace: str
    key: str
    start: AttemptStart
    response: Any = None

    @classmethod
    def of(cls, namespace: str, key: str, start: AttemptStart) -> RequestRun:
        return cls(namespace, key, start, start.response)


class RequestRepository:
    """Keyed-request state machine on the caller's SQLAlchemy ``Connection`` or ``Session``, or
    psycopg 3 ``Connection``.

    ``begin`` raises ``AttemptInProgress`` (HN030, alias ``StepInProgress``),
    ``AlreadySucceeded`` (HN031, alias ``StepAlreadySucceeded``), ``RequestMismatch`` (HN032)
    or ``InvalidInput`` (HN001); ``finish`` and ``resolve`` raise ``StaleAttempt`` (HN033).
    Nothing is committed here: the caller's transaction decides, except while ``begin`` waits
    (``wait``, below). ``on_decision(namespace, key, decision, attempt)`` is told what each
    ``begin`` decided (``hivenet_db.decisions``).

    ``begin(..., wait=...)`` (seconds or a timedelta) waits up to that long for the outcome
    of a concurrent attempt of the same key instead of raising ``AttemptInProgress`` at once,
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
        self._core = Attempts(db, REQUESTS, on_decision, listener)

    def begin(self, namespace: str, key: str, request: Any = None, *,
              on_success: OnSuccess = "replay", lease: timedelta | None = None,
              nowait: bool = False, wait: Wait | None = None,
              raw_request: bytes | None = None) -> AttemptStart:
        """Receive the request keyed ``key`` in ``namespace``. ``raw_request``: the exact bytes
        the client sent, kept with the attempt it starts where the namespace keeps them
        (``set_namespace_policy(..., keep_raw_request => true)``), else ignored."""
        return self._core.begin(namespace, key, request, on_success, None, lease, nowait, wait,
                                raw_request)

    def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
               response: Any = None) -> None:
        """End ``attempt``: success with the response to replay, or failure with the error."""
        self._core.finish(namespace, key, attempt, succeeded, response)

    def begin_many(self, namespace: str, keys: Sequence[str], requests: Sequence[Any], *,
                   lease: timedelta | None = None) -> list[KeyStart]:
        """Receive a batch of keyed requests in one round trip (``hivenet.begin_requests``):
        ``keys[i]`` with ``requests[i]``, one ``KeyStart`` per key in their order, a refused
        key's error in it instead of raised. ``InvalidInput`` (HN001) for the batch as a whole
        (lengths differ, a key given twice, more than 1,000 keys...). ``on_decision`` is told
        each key's decision. Finish every started key (``finish``, ``finish_many``)."""
        return self._core.begin_many(namespace, keys, requests, None, lease)

    def finish_many(self, namespace: str, finishes: Iterable[Finish]) -> None:
        """``finish`` of each ``(key, attempt, succeeded, response)`` in one statement
        (``hivenet.finish_requests``); the first that cannot be finished raises
        (``StaleAttempt``) and nothing is finished."""
        self._core.finish_many(namespace, finishes)

    def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool, note: str,
                response: Any = None) -> None:
        """Operator: record the real outcome of a stuck ``processing`` attempt."""
        self._core.resolve(namespace, key, attempt, succeeded, note, response)

    def raw_request(self, namespace: str, key: str, attempt: int = 1) -> bytes | None:
        """Operator: the exact bytes the client sent with ``attempt`` of the key (by default
        its first), where the namespace kept them (view ``hivenet.raw_requests``); else None."""
        found = rows(self.db, API["raw_request"],
                     {"namespace": namespace, "key": key, "attempt": attempt})
        return bytes(found[0][0]) if found else None

    def set_retention(self, namespace: str, retention: timedelta | None) -> None:
        """Operator: keep the namespace's finished requests this long (None: the default)."""
        rows(self.db, API["set_request_retention"],
             {"namespace": namespace, "retention": retention})

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
        self._core = AsyncAttempts(db, REQUESTS, on_decision, listener)

    async def begin(self, namespace: str, key: str, request: Any = None, *,
                    on_success: OnSuccess = "replay", lease: timedelta | None = None,
                    nowait: bool = False, wait: Wait | None = None,
                    raw_request: bytes | None = None) -> AttemptStart:
        return await self._core.begin(namespace, key, request, on_success, None, lease, nowait,
                                      wait, raw_request)

    async def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
                     response: Any = None) -> None:
        await self._core.finish(namespace, key, attempt, succeeded, response)

    async def begin_many(self, namespace: str, keys: Sequence[str], requests: Sequence[Any], *,
                         lease: timedelta | None = None) -> list[KeyStart]:
        return await self._core.begin_many(namespace, keys, requests, None, lease)

    async def finish_many(self, namespace: str, finishes: Iterable[Finish]) -> None:
        await self._core.finish_many(namespace, finishes)

    async def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool, note: str,
                      response: Any = None) -> None:
        await self._core.resolve(namespace, key, attempt, succeeded, note, response)

    async def raw_request(self, namespace: str, key: str, attempt: int = 1) -> bytes | None:
        found = await rows_async(self.db, API["raw_request"],
                                 {"namespace": namespace, "key": key, "attempt": attempt})
        return bytes(found[0][0]) if found else None

    async def set_retention(self, namespace: str, retention: timedelta | None) -> None:
        await rows_async(self.db, API["set_request_retention"],
                         {"namespace": namespace, "retention": retention})

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
