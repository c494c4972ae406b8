"""System-serial step state machine: guard a processing step so it runs at most once.

The rules live in SQL (``hivenet.begin_step`` / ``finish_step`` / ``resolve_step``); this
module calls them on the caller's connection, one statement per call (SQLAlchemy
``Connection`` or ``Session``, or psycopg 3 ``Connection``; ``AsyncStepRepository`` their
async counterparts) and never commits. The common case::

    with StepRepository(conn).step(system_serial, request) as step:
        if step.started:
            step.response = transfer(request)   # runs once; a retry gets the same response
    return step.response
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal, TypeVar

from sqlalchemy import text

from hivenet_db._execute import AsyncDB, Rows, SyncDB, json_text, rows, rows_async
from hivenet_db.decisions import OnDecision, reported, reported_async
from hivenet_db.propagation import current_unified_serial

#: ``replayed_failure`` only for keyed requests of a namespace whose failures are final
#: (``hivenet.set_namespace_policy(..., on_failure => 'final')``); never for steps.
Outcome = Literal["started", "replayed", "replayed_failure"]
OnSuccess = Literal["replay", "reject"]

#: The namespace of steps among keyed requests (their key: the system serial).
STEPS_NAMESPACE = "hivenet.steps"

_BEGIN = text(
    "SELECT outcome, attempt, response FROM hivenet.begin_step("
    ":serial, CAST(:request AS jsonb), :on_success, :unified, :lease, :nowait)"
)
_FINISH = text(
    "SELECT hivenet.finish_step(:serial, :attempt, :succeeded, CAST(:response AS jsonb))"
)
_RESOLVE = text(
    "SELECT hivenet.resolve_step(:serial, :attempt, :succeeded, :note, CAST(:response AS jsonb))"
)


@dataclass(frozen=True)
class StepStart:
    """What ``begin`` found: ``started`` (run the step, then finish ``attempt``) or
    ``replayed`` (it already succeeded; ``response`` is the stored original). A keyed request
    whose namespace's failures are final is also ``replayed`` after a failure, and then
    ``failed`` too: ``response`` is the failed attempt's stored error (None when it expired)."""

    outcome: Outcome
    attempt: int
    response: Any = None

    @property
    def started(self) -> bool:
        return self.outcome == "started"

    @property
    def replayed(self) -> bool:
        """Not run again: the first outcome is replayed (a success, or a failure if ``failed``)."""
        return self.outcome != "started"

    @property
    def failed(self) -> bool:
        """The replayed outcome is a failure (outcome ``replayed_failure``)."""
        return self.outcome == "replayed_failure"


class Guarded:
    """What a guarded body sees (``StepRun``, ``RequestRun``): set ``response`` when
    ``started``; when ``replayed`` it already holds the original response (the stored error
    when ``failed``)."""

    start: StepStart
    response: Any

    @property
    def started(self) -> bool:
        return self.start.started

    @property
    def replayed(self) -> bool:
        return self.start.replayed

    @property
    def failed(self) -> bool:
        return self.start.failed

    @property
    def attempt(self) -> int:
        return self.start.attempt


@dataclass
class StepRun(Guarded):
    """The step inside ``StepRepository.step``: set ``response`` when ``started``; when
    ``replayed`` it already holds the original response."""

    system_serial: str
    start: StepStart
    response: Any = None

    @classmethod
    def of(cls, system_serial: str, start: StepStart) -> StepRun:
        return cls(system_serial, start, start.response)


def as_json(value: Any) -> str | None:
    return None if value is None else json_text("request or response", value)


def _begin_params(system_serial: str, request: Any, on_success: OnSuccess,
                  unified_serial: str | None, lease: timedelta | None,
                  nowait: bool) -> dict[str, Any]:
    return {"serial": system_serial, "request": as_json(request), "on_success": on_success,
            "unified": unified_serial if unified_serial is not None else current_unified_serial(),
            "lease": lease, "nowait": nowait}


def _finish_params(system_serial: str, attempt: int, succeeded: bool,
                   response: Any) -> dict[str, Any]:
    return {"serial": system_serial, "attempt": attempt, "succeeded": succeeded,
            "response": as_json(response)}


def start_of(result: Rows) -> StepStart:
    outcome, attempt, response = result[0]
    return StepStart(outcome, attempt, response)


def error_report(error: BaseException) -> dict[str, str]:
    """What a failed step records as its error: the exception's type and message."""
    return {"type": type(error).__name__, "message": str(error)}


def _note_unrecorded(error: BaseException, failure: BaseException) -> None:
    # The body's error is what the caller must see; say why no failure was recorded (usually
    # an aborted transaction, whose rollback removes the attempt anyway).
    error.add_note(f"hivenet: the step's failure was not recorded: {failure!r}")


G = TypeVar("G", bound=Guarded)


@contextmanager
def guarded(run: G, finish: Callable[[int, bool, Any], object]) -> Iterator[G]:
    """Run the body around an attempt begun as ``run``, then ``finish(attempt, succeeded,
    response)``: success with ``run.response``, or failure with ``error_report(exception)``
    and the exception re-raised. When replayed nothing is recorded. Only ``Exception``s are
    recorded: an interrupt or cancellation leaves the transaction to its rollback."""
    try:
        yield run
    except Exception as error:
        if run.started:
            try:
                finish(run.attempt, False, error_report(error))
            except Exception as failure:
                _note_unrecorded(error, failure)
        raise
    if run.started:
        finish(run.attempt, True, run.response)


@asynccontextmanager
async def guarded_async(run: G,
                        finish: Callable[[int, bool, Any], Awaitable[object]]) -> AsyncIterator[G]:
    """``guarded`` with an async ``finish``."""
    try:
        yield run
    except Exception as error:
        if run.started:
            try:
                await finish(run.attempt, False, error_report(error))
            except Exception as failure:
                _note_unrecorded(error, failure)
        raise
    if run.started:
        await finish(run.attempt, True, run.response)


class StepRepository:
    """Step state machine on the caller's SQLAlchemy ``Connection`` or ``Session``, or psycopg 3
    ``Connection``.

    ``begin`` raises ``StepInProgress`` (HN030), ``StepAlreadySucceeded`` (HN031),
    ``RequestMismatch`` (HN032) or ``InvalidInput`` (HN001); ``finish`` and ``resolve`` raise
    ``StaleAttempt`` (HN033). Nothing is committed here: the caller's transaction decides.
    ``on_decision(namespace, key, decision, attempt)`` is told what each ``begin`` decided,
    with the namespace ``STEPS_NAMESPACE`` and the system serial as key
    (``hivenet_db.decisions``).
    """

    def __init__(self, db: SyncDB, *, on_decision: OnDecision | None = None) -> None:
        self.db = db
        self.on_decision = on_decision

    def begin(self, system_serial: str, request: Any = None, *,
              on_success: OnSuccess = "replay", unified_serial: str | None = None,
              lease: timedelta | None = None, nowait: bool = False) -> StepStart:
        """Receive the step; the unified serial defaults to ``current_unified_serial()``."""
        return reported(self.on_decision, STEPS_NAMESPACE, system_serial, lambda: start_of(
            rows(self.db, _BEGIN, _begin_params(
                system_serial, request, on_success, unified_serial, lease, nowait))))

    def finish(self, system_serial: str, attempt: int, succeeded: bool,
               response: Any = None) -> None:
        """End ``attempt``: success with the response to replay, or failure with the error."""
        rows(self.db, _FINISH, _finish_params(system_serial, attempt, succeeded, response))

    def resolve(self, system_serial: str, attempt: int, succeeded: bool, note: str,
                response: Any = None) -> None:
        """Operator: record the real outcome of a stuck ``processing`` attempt."""
        params = _finish_params(system_serial, attempt, succeeded, response) | {"note": note}
        rows(self.db, _RESOLVE, params)

    @contextmanager
    def step(self, system_serial: str, request: Any = None, *,
             on_success: OnSuccess = "replay", unified_serial: str | None = None,
             lease: timedelta | None = None, nowait: bool = False) -> Iterator[StepRun]:
        """Begin the step, run the body, finish it: success with ``run.response``, or failure
        with ``error_report(exception)`` and the exception re-raised. When replayed the body
        must do nothing (check ``run.started``); nothing is recorded. Only ``Exception``s
        are recorded: an interrupt or cancellation leaves the transaction to its rollback."""
        run = StepRun.of(system_serial, self.begin(
            system_serial, request, on_success=on_success, unified_serial=unified_serial,
            lease=lease, nowait=nowait))
        with guarded(run, partial(self.finish, system_serial)) as inside:
            yield inside

    def run(self, system_serial: str, request: Any, body: Callable[[], Any], *,
            on_success: OnSuccess = "replay", unified_serial: str | None = None,
            lease: timedelta | None = None, nowait: bool = False) -> Any:
        """``step`` for a callable: call ``body()`` once if the step starts, return its
        response, or the original response when the step is replayed."""
        with self.step(system_serial, request, on_success=on_success,
                       unified_serial=unified_serial, lease=lease, nowait=nowait) as run:
            if run.started:
                run.response = body()
        return run.response


class AsyncStepRepository:
    """``StepRepository`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB, *, on_decision: OnDecision | None = None) -> None:
        self.db = db
        self.on_decision = on_decision

    async def begin(self, system_serial: str, request: Any = None, *,
                    on_success: OnSuccess = "replay", unified_serial: str | None = None,
                    lease: timedelta | None = None, nowait: bool = False) -> StepStart:
        return await reported_async(self.on_decision, STEPS_NAMESPACE, system_serial,
                                    self._begin(system_serial, request, on_success,
                                                unified_serial, lease, nowait))

    async def _begin(self, system_serial: str, request: Any, on_success: OnSuccess,
                     unified_serial: str | None, lease: timedelta | None,
                     nowait: bool) -> StepStart:
        return start_of(await rows_async(self.db, _BEGIN, _begin_params(
            system_serial, request, on_success, unified_serial, lease, nowait)))

    async def finish(self, system_serial: str, attempt: int, succeeded: bool,
                     response: Any = None) -> None:
        await rows_async(self.db, _FINISH,
                         _finish_params(system_serial, attempt, succeeded, response))

    async def resolve(self, system_serial: str, attempt: int, succeeded: bool, note: str,
                      response: Any = None) -> None:
        params = _finish_params(system_serial, attempt, succeeded, response) | {"note": note}
        await rows_async(self.db, _RESOLVE, params)

    @asynccontextmanager
    async def step(self, system_serial: str, request: Any = None, *,
                   on_success: OnSuccess = "replay", unified_serial: str | None = None,
                   lease: timedelta | None = None,
                   nowait: bool = False) -> AsyncIterator[StepRun]:
        run = StepRun.of(system_serial, await self.begin(
            system_serial, request, on_success=on_success, unified_serial=unified_serial,
            lease=lease, nowait=nowait))
        async with guarded_async(run, partial(self.finish, system_serial)) as inside:
            yield inside

    async def run(self, system_serial: str, request: Any, body: Callable[[], Awaitable[Any]],
                  *, on_success: OnSuccess = "replay", unified_serial: str | None = None,
                  lease: timedelta | None = None, nowait: bool = False) -> Any:
        async with self.step(system_serial, request, on_success=on_success,
                             unified_serial=unified_serial, lease=lease, nowait=nowait) as run:
            if run.started:
                run.response = await body()
        return run.response


__all__ = ["STEPS_NAMESPACE", "AsyncStepRepository", "Guarded", "StepRepository", "StepRun",
           "StepStart", "as_json", "error_report", "guarded", "guarded_async", "start_of"]
