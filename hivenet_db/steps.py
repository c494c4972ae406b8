"""System-serial step state machine: guard a processing step so it runs at most once.

A step is the keyed request of namespace ``hivenet.steps`` whose key is its system serial
(``hivenet.begin_step`` / ``finish_step`` / ``resolve_step``, and the batches ``begin_steps``
/ ``finish_steps``): the same core as keyed requests (``hivenet_db.attempts``), called on the
caller's connection, one statement per call (SQLAlchemy ``Connection`` or ``Session``, or
psycopg 3 ``Connection``; ``AsyncStepRepository`` their async counterparts), never
committing. The common case::

    with StepRepository(conn).step(system_serial, request) as step:
        if step.started:
            step.response = transfer(request)   # runs once; a retry gets the same response
    return step.response
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from hivenet_db._execute import AsyncDB, SyncDB
from hivenet_db.attempts import (
    STEPS,
    STEPS_NAMESPACE,
    AsyncAttempts,
    Attempts,
    AttemptStart,
    Finish,
    Guarded,
    KeyStart,
    OnSuccess,
    error_report,
    guarded,
    guarded_async,
)
from hivenet_db.decisions import OnDecision
from hivenet_db.propagation import current_unified_serial
from hivenet_db.waiting import FinishListener, Wait

#: What ``begin`` found: ``AttemptStart`` (steps and keyed requests share it).
StepStart = AttemptStart


@dataclass
class StepRun(Guarded):
    """The step inside ``StepRepository.step``: set ``response`` when ``started``; when
    ``replayed`` it already holds the original response (the stored error when ``failed``)."""

    system_serial: str
    start: AttemptStart
    response: Any = None

    @classmethod
    def of(cls, system_serial: str, start: AttemptStart) -> StepRun:
        return cls(system_serial, start, start.response)


def _unified(unified_serial: str | None) -> str | None:
    return unified_serial if unified_serial is not None else current_unified_serial()


class StepRepository:
    """Step state machine on the caller's SQLAlchemy ``Connection`` or ``Session``, or psycopg 3
    ``Connection``.

    ``begin`` raises ``AttemptInProgress`` (HN030, alias ``StepInProgress``),
    ``AlreadySucceeded`` (HN031, alias ``StepAlreadySucceeded``), ``RequestMismatch`` (HN032),
    ``InvalidInput`` (HN001), ``SerialOutsideWindow`` (HN021) or ``UnknownScope`` (HN002);
    ``finish`` and ``resolve`` raise ``StaleAttempt`` (HN033). Nothing is committed here: the
    caller's transaction decides, except while ``begin`` waits (``wait``: as
    ``RequestRepository.begin``, whose ``listener`` it takes too).
    ``on_decision(namespace, key, decision, attempt)`` is told what each ``begin`` decided,
    with the namespace ``STEPS_NAMESPACE`` and the system serial as key
    (``hivenet_db.decisions``). The unified serial defaults to ``current_unified_serial()``.
    """

    def __init__(self, db: SyncDB, *, on_decision: OnDecision | None = None,
                 listener: FinishListener | None = None) -> None:
        self.db = db
        self._core = Attempts(db, STEPS, on_decision, listener)

    def begin(self, system_serial: str, request: Any = None, *,
              on_success: OnSuccess = "replay", unified_serial: str | None = None,
              lease: timedelta | None = None, nowait: bool = False,
              wait: Wait | None = None) -> AttemptStart:
        """Receive the step."""
        return self._core.begin(STEPS_NAMESPACE, system_serial, request, on_success,
                                _unified(unified_serial), lease, nowait, wait)

    def finish(self, system_serial: str, attempt: int, succeeded: bool,
               response: Any = None) -> None:
        """End ``attempt``: success with the response to replay, or failure with the error."""
        self._core.finish(STEPS_NAMESPACE, system_serial, attempt, succeeded, response)

    def begin_many(self, system_serials: Sequence[str], requests: Sequence[Any], *,
                   unified_serial: str | None = None,
                   lease: timedelta | None = None) -> list[KeyStart]:
        """Receive a batch of steps in one round trip (``hivenet.begin_steps``):
        ``system_serials[i]`` with ``requests[i]``, one ``KeyStart`` per step in their order
        (``key``: the system serial), a refused step's error in it instead of raised.
        ``InvalidInput`` (HN001) for the batch as a whole. Finish every started step
        (``finish``, ``finish_many``)."""
        return self._core.begin_many(STEPS_NAMESPACE, system_serials, requests,
                                     _unified(unified_serial), lease)

    def finish_many(self, finishes: Iterable[Finish]) -> None:
        """``finish`` of each ``(system_serial, attempt, succeeded, response)`` in one
        statement (``hivenet.finish_steps``); the first that cannot be finished raises
        (``StaleAttempt``) and nothing is finished."""
        self._core.finish_many(STEPS_NAMESPACE, finishes)

    def resolve(self, system_serial: str, attempt: int, succeeded: bool, note: str,
                response: Any = None) -> None:
        """Operator: record the real outcome of a stuck ``processing`` attempt."""
        self._core.resolve(STEPS_NAMESPACE, system_serial, attempt, succeeded, note, response)

    @contextmanager
    def step(self, system_serial: str, request: Any = None, *,
             on_success: OnSuccess = "replay", unified_serial: str | None = None,
             lease: timedelta | None = None, nowait: bool = False,
             wait: Wait | None = None) -> Iterator[StepRun]:
        """Begin the step, run the body, finish it: success with ``run.response``, or failure
        with ``error_report(exception)`` and the exception re-raised. When replayed the body
        must do nothing (check ``run.started``); nothing is recorded. Only ``Exception``s
        are recorded: an interrupt or cancellation leaves the transaction to its rollback."""
        run = StepRun.of(system_serial, self.begin(
            system_serial, request, on_success=on_success, unified_serial=unified_serial,
            lease=lease, nowait=nowait, wait=wait))
        with guarded(run, partial(self.finish, system_serial)) as inside:
            yield inside

    def run(self, system_serial: str, request: Any, body: Callable[[], Any], *,
            on_success: OnSuccess = "replay", unified_serial: str | None = None,
            lease: timedelta | None = None, nowait: bool = False,
            wait: Wait | None = None) -> Any:
        """``step`` for a callable: call ``body()`` once if the step starts, return its
        response, or the original response when the step is replayed."""
        with self.step(system_serial, request, on_success=on_success,
                       unified_serial=unified_serial, lease=lease, nowait=nowait,
                       wait=wait) as run:
            if run.started:
                run.response = body()
        return run.response


class AsyncStepRepository:
    """``StepRepository`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB, *, on_decision: OnDecision | None = None,
                 listener: FinishListener | None = None) -> None:
        self.db = db
        self._core = AsyncAttempts(db, STEPS, on_decision, listener)

    async def begin(self, system_serial: str, request: Any = None, *,
                    on_success: OnSuccess = "replay", unified_serial: str | None = None,
                    lease: timedelta | None = None, nowait: bool = False,
                    wait: Wait | None = None) -> AttemptStart:
        return await self._core.begin(STEPS_NAMESPACE, system_serial, request, on_success,
                                      _unified(unified_serial), lease, nowait, wait)

    async def finish(self, system_serial: str, attempt: int, succeeded: bool,
                     response: Any = None) -> None:
        await self._core.finish(STEPS_NAMESPACE, system_serial, attempt, succeeded, response)

    async def begin_many(self, system_serials: Sequence[str], requests: Sequence[Any], *,
                         unified_serial: str | None = None,
                         lease: timedelta | None = None) -> list[KeyStart]:
        return await self._core.begin_many(STEPS_NAMESPACE, system_serials, requests,
                                           _unified(unified_serial), lease)

    async def finish_many(self, finishes: Iterable[Finish]) -> None:
        await self._core.finish_many(STEPS_NAMESPACE, finishes)

    async def resolve(self, system_serial: str, attempt: int, succeeded: bool, note: str,
                      response: Any = None) -> None:
        await self._core.resolve(STEPS_NAMESPACE, system_serial, attempt, succeeded, note,
                                 response)

    @asynccontextmanager
    async def step(self, system_serial: str, request: Any = None, *,
                   on_success: OnSuccess = "replay", unified_serial: str | None = None,
                   lease: timedelta | None = None, nowait: bool = False,
                   wait: Wait | None = None) -> AsyncIterator[StepRun]:
        run = StepRun.of(system_serial, await self.begin(
            system_serial, request, on_success=on_success, unified_serial=unified_serial,
            lease=lease, nowait=nowait, wait=wait))
        async with guarded_async(run, partial(self.finish, system_serial)) as inside:
            yield inside

    async def run(self, system_serial: str, request: Any, body: Callable[[], Awaitable[Any]],
                  *, on_success: OnSuccess = "replay", unified_serial: str | None = None,
                  lease: timedelta | None = None, nowait: bool = False,
                  wait: Wait | None = None) -> Any:
        async with self.step(system_serial, request, on_success=on_success,
                             unified_serial=unified_serial, lease=lease, nowait=nowait,
                             wait=wait) as run:
            if run.started:
                run.response = await body()
        return run.response


__all__ = ["STEPS_NAMESPACE", "AsyncStepRepository", "StepRepository", "StepRun", "StepStart",
           "error_report"]
