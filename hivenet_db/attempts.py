"""Keyed attempts: the core that steps (``hivenet_db.steps``) and keyed requests
(``hivenet_db.requests``) share, as their SQL does (hivenet_db/sql/requests.sql).

A key of a namespace runs at most once: ``begin`` starts an attempt or replays the first
outcome, the body runs, ``finish`` records its outcome. Steps are the keys of namespace
``hivenet.steps`` (their key: the system serial), so what differs between the two
repositories is only which statements they send (``Kind``) and the arguments of a key (a
step carries a unified serial). Everything else is here, once: what ``begin`` returned
(``AttemptStart``), the guarded body (``guarded``), the wait for a concurrent first attempt
(``hivenet_db.waiting``), the decision hook (``hivenet_db.decisions``), batches
(``KeyStart``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal, TypeVar

from hivenet_db._execute import (
    AsyncDB,
    Rows,
    SyncDB,
    _checked,
    conninfo_of,
    driver_of,
    driver_of_async,
    json_text,
    rows,
    rows_async,
)
from hivenet_db.decisions import Decision, OnDecision, reported, reported_async, told
from hivenet_db.statements import API
from hivenet_db.waiting import FinishListener, Wait, as_timedelta, waited, waited_async

#: ``replayed_failure``: a failed attempt replayed, in a namespace whose failures are final
#: (``hivenet.set_namespace_policy(..., on_failure => 'final')``).
Outcome = Literal["started", "replayed", "replayed_failure"]
OnSuccess = Literal["replay", "reject"]

#: The namespace of steps among keyed requests (their key: the system serial).
STEPS_NAMESPACE = "hivenet.steps"


@dataclass(frozen=True)
class AttemptStart:
    """What ``begin`` found: ``started`` (run the body, then finish ``attempt``) or
    ``replayed`` (it already succeeded; ``response`` is the stored original). In a namespace
    whose failures are final a failed attempt is also ``replayed``, and then ``failed`` too:
    ``response`` is its stored error (None when it expired)."""

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


@dataclass(frozen=True)
class KeyStart:
    """What ``begin_many`` decided about one key of a batch: ``outcome`` ``started`` (run it,
    then finish ``attempt``), ``replayed`` (``response`` is the stored original),
    ``replayed_failure`` (a final failure: ``response`` is its stored error), or, with
    ``attempt`` None and ``error`` the message ``begin`` would raise, ``in_progress``
    (HN030), ``mismatch`` (HN032) or ``rejected`` (HN001, and for steps HN002 and HN021: the
    key is refused)."""

    key: str
    outcome: Decision | Literal["replayed_failure"]
    attempt: int | None
    response: Any = None
    error: str | None = None

    @property
    def started(self) -> bool:
        return self.outcome == "started"

    @property
    def replayed(self) -> bool:
        return self.outcome in ("replayed", "replayed_failure")

    @property
    def failed(self) -> bool:
        """A replayed final failure (outcome ``replayed_failure``)."""
        return self.outcome == "replayed_failure"

    def finished(self, succeeded: bool, response: Any = None) -> Finish:
        """This started key as ``finish_many`` takes it."""
        if not self.started or self.attempt is None:
            raise ValueError(f"key {self.key!r} was not started ({self.outcome})")
        return (self.key, self.attempt, succeeded, response)


#: A key of a batch to finish: ``(key, attempt, succeeded, response)``.
Finish = tuple[str, int, bool, Any]


class Guarded:
    """What a guarded body sees (``StepRun``, ``RequestRun``): set ``response`` when
    ``started``; when ``replayed`` it already holds the original response (the stored error
    when ``failed``)."""

    start: AttemptStart
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


def json_param(value: Any) -> str | None:
    """A request or response as the JSON parameter of a statement (None: SQL NULL)."""
    return None if value is None else json_text("request or response", value)


def start_of(result: Rows) -> AttemptStart:
    outcome, attempt, response = result[0]
    return AttemptStart(outcome, attempt, response)


def error_report(error: BaseException) -> dict[str, str]:
    """What a failed attempt records as its error: the exception's type and message."""
    return {"type": type(error).__name__, "message": str(error)}


def _note_unrecorded(error: BaseException, failure: BaseException) -> None:
    # The body's error is what the caller must see; say why no failure was recorded (usually
    # an aborted transaction, whose rollback removes the attempt anyway).
    error.add_note(f"hivenet: the attempt's failure was not recorded: {failure!r}")


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


@dataclass(frozen=True)
class Kind:
    """The statements (hivenet_db/queries/api.sql) of one kind of key: steps or requests.
    Their parameters have the same names: ``namespace`` (requests), ``key`` (a step's: its
    system serial), ``request``, ``on_success``, ``unified_serial`` (steps), ``lease``,
    ``nowait``, ``wait``; ``attempt``, ``succeeded``, ``response``, ``note``; and a batch's
    ``keys``, ``requests``, ``attempts``, ``succeeded``, ``responses``."""

    begin: str
    finish: str
    resolve: str
    begin_many: str
    finish_many: str


STEPS = Kind(*(API[name] for name in (
    "begin_step", "finish_step", "resolve_step", "begin_steps", "finish_steps")))
REQUESTS = Kind(*(API[name] for name in (
    "begin_request", "finish_request", "resolve_request", "begin_requests", "finish_requests")))


def begin_params(namespace: str, key: str, request: Any, on_success: OnSuccess,
                 unified_serial: str | None, lease: timedelta | None, nowait: bool,
                 wait: timedelta | None, raw_request: bytes | None = None) -> dict[str, Any]:
    return {"namespace": namespace, "key": key, "request": json_param(request),
            "on_success": on_success, "unified_serial": unified_serial, "lease": lease,
            "nowait": nowait, "wait": wait, "raw_request": raw_request}


def finish_params(namespace: str, key: str, attempt: int, succeeded: bool,
                  response: Any) -> dict[str, Any]:
    return {"namespace": namespace, "key": key, "attempt": attempt, "succeeded": succeeded,
            "response": json_param(response)}


def _begin_many_params(namespace: str, keys: Sequence[str], requests: Sequence[Any],
                       unified_serial: str | None, lease: timedelta | None) -> dict[str, Any]:
    for key in keys:  # what rows checks of a single key (a NUL)
        _checked({"key": key})
    return {"namespace": namespace, "keys": list(keys),
            "requests": [json_param(request) for request in requests],
            "unified_serial": unified_serial, "lease": lease}


def _finish_many_params(namespace: str, finishes: Iterable[Finish]) -> dict[str, Any]:
    each = list(finishes)
    for key, attempt, _, _ in each:  # what rows checks of a single finish
        _checked({"key": key, "attempt": attempt})
    return {"namespace": namespace, "keys": [f[0] for f in each],
            "attempts": [f[1] for f in each], "succeeded": [f[2] for f in each],
            "responses": [json_param(f[3]) for f in each]}


def _key_starts(result: Rows) -> list[KeyStart]:
    # a batch puts a refusal's error in response: {"code": ..., "message": ...}
    return [KeyStart(key, outcome, attempt, response)
            if outcome in ("started", "replayed", "replayed_failure")
            else KeyStart(key, outcome, attempt, error=response["message"])
            for key, outcome, attempt, response in result]


def _told(hook: OnDecision | None, namespace: str, starts: list[KeyStart]) -> list[KeyStart]:
    for start in starts:
        told(hook, namespace, start.key,
             "replayed" if start.outcome == "replayed_failure" else start.outcome, start.attempt)
    return starts


class Attempts:
    """The calls of one kind of key on the caller's connection (``StepRepository`` and
    ``RequestRepository`` delegate to it): one statement each, never committing, but while
    ``begin`` waits for the outcome of a concurrent attempt committed as ``processing``
    (``hivenet_db.waiting``: the transaction the error aborted is rolled back, the waiter's
    registration committed)."""

    def __init__(self, db: SyncDB, kind: Kind, on_decision: OnDecision | None,
                 listener: FinishListener | None) -> None:
        self.db = db
        self.kind = kind
        self.on_decision = on_decision
        self.listener = listener

    def begin(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
              unified_serial: str | None, lease: timedelta | None, nowait: bool,
              wait: Wait | None, raw_request: bytes | None = None) -> AttemptStart:
        if wait is None:
            return reported(self.on_decision, namespace, key, lambda: self.once(
                namespace, key, request, on_success, unified_serial, lease, nowait, None,
                raw_request))
        return reported(self.on_decision, namespace, key, lambda: waited(
            self._listener, namespace, key, as_timedelta(wait),
            lambda left: self.once(namespace, key, request, on_success, unified_serial, lease,
                                   nowait, left, raw_request),
            partial(self._watch, namespace, key), self.db.rollback))

    def once(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
             unified_serial: str | None, lease: timedelta | None, nowait: bool,
             wait: timedelta | None, raw_request: bytes | None = None) -> AttemptStart:
        """One begin statement: no hook told, no wait for an attempt committed as
        ``processing`` (the HTTP middlewares wait in transactions of their own)."""
        return start_of(rows(self.db, self.kind.begin, begin_params(
            namespace, key, request, on_success, unified_serial, lease, nowait, wait,
            raw_request)))

    def watch(self, namespace: str, key: str) -> None:
        """Register a waiter for the outcome of the key's processing attempt
        (``hivenet.watch_request``), in the caller's transaction."""
        rows(self.db, API["watch_request"], {"namespace": namespace, "key": key})

    def _watch(self, namespace: str, key: str) -> None:
        self.watch(namespace, key)
        self.db.commit()

    def _listener(self) -> FinishListener:
        if self.listener is None:
            self.listener = FinishListener.shared(conninfo_of(driver_of(self.db)),
                                                  direct_only=True)
        return self.listener

    def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
               response: Any) -> None:
        rows(self.db, self.kind.finish, finish_params(namespace, key, attempt, succeeded,
                                                      response))

    def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool, note: str,
                response: Any) -> None:
        rows(self.db, self.kind.resolve, finish_params(
            namespace, key, attempt, succeeded, response) | {"note": note})

    def begin_many(self, namespace: str, keys: Sequence[str], requests: Sequence[Any],
                   unified_serial: str | None, lease: timedelta | None) -> list[KeyStart]:
        return _told(self.on_decision, namespace, _key_starts(rows(
            self.db, self.kind.begin_many,
            _begin_many_params(namespace, keys, requests, unified_serial, lease))))

    def finish_many(self, namespace: str, finishes: Iterable[Finish]) -> None:
        rows(self.db, self.kind.finish_many, _finish_many_params(namespace, finishes))


class AsyncAttempts:
    """``Attempts`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB, kind: Kind, on_decision: OnDecision | None,
                 listener: FinishListener | None) -> None:
        self.db = db
        self.kind = kind
        self.on_decision = on_decision
        self.listener = listener

    async def begin(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
                    unified_serial: str | None, lease: timedelta | None, nowait: bool,
                    wait: Wait | None, raw_request: bytes | None = None) -> AttemptStart:
        if wait is None:
            return await reported_async(self.on_decision, namespace, key, self.once(
                namespace, key, request, on_success, unified_serial, lease, nowait, None,
                raw_request))
        listener = self.listener or FinishListener.shared(
            conninfo_of(await driver_of_async(self.db)), direct_only=True)
        return await reported_async(self.on_decision, namespace, key, waited_async(
            lambda: listener, namespace, key, as_timedelta(wait),
            lambda left: self.once(namespace, key, request, on_success, unified_serial, lease,
                                   nowait, left, raw_request),
            partial(self._watch, namespace, key), self.db.rollback))

    async def once(self, namespace: str, key: str, request: Any, on_success: OnSuccess,
                   unified_serial: str | None, lease: timedelta | None, nowait: bool,
                   wait: timedelta | None, raw_request: bytes | None = None) -> AttemptStart:
        """``Attempts.once``."""
        return start_of(await rows_async(self.db, self.kind.begin, begin_params(
            namespace, key, request, on_success, unified_serial, lease, nowait, wait,
            raw_request)))

    async def watch(self, namespace: str, key: str) -> None:
        """``Attempts.watch``."""
        await rows_async(self.db, API["watch_request"], {"namespace": namespace, "key": key})

    async def _watch(self, namespace: str, key: str) -> None:
        await self.watch(namespace, key)
        await self.db.commit()

    async def finish(self, namespace: str, key: str, attempt: int, succeeded: bool,
                     response: Any) -> None:
        await rows_async(self.db, self.kind.finish, finish_params(
            namespace, key, attempt, succeeded, response))

    async def resolve(self, namespace: str, key: str, attempt: int, succeeded: bool,
                      note: str, response: Any) -> None:
        await rows_async(self.db, self.kind.resolve, finish_params(
            namespace, key, attempt, succeeded, response) | {"note": note})

    async def begin_many(self, namespace: str, keys: Sequence[str], requests: Sequence[Any],
                         unified_serial: str | None,
                         lease: timedelta | None) -> list[KeyStart]:
        return _told(self.on_decision, namespace, _key_starts(await rows_async(
            self.db, self.kind.begin_many,
            _begin_many_params(namespace, keys, requests, unified_serial, lease))))

    async def finish_many(self, namespace: str, finishes: Iterable[Finish]) -> None:
        await rows_async(self.db, self.kind.finish_many, _finish_many_params(namespace, finishes))


__all__ = [
    "REQUESTS",
    "STEPS",
    "STEPS_NAMESPACE",
    "AsyncAttempts",
    "AttemptStart",
    "Attempts",
    "Finish",
    "Guarded",
    "KeyStart",
    "Kind",
    "OnSuccess",
    "Outcome",
    "error_report",
    "guarded",
    "guarded_async",
    "json_param",
    "start_of",
]
