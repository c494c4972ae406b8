"""What ``begin`` decided about a key, told to an optional hook for logging and tracing.

The repositories of keyed requests and steps (and the HTTP middlewares, through them) take
``on_decision=``: a plain function called once per ``begin`` with the namespace, the key, the
decision and the attempt, after the statement and before ``begin`` returns or raises::

    def log_decision(namespace, key, decision, attempt):
        log.info("idempotency %s %s: %s (attempt %s)", namespace, key, decision, attempt)

    RequestRepository(conn, on_decision=log_decision)

Decisions: ``started`` and ``replayed`` (attempt: the one begun or replayed), ``in_progress``
(HN030), ``mismatch`` (HN032) and ``rejected`` (HN001: the key or an option refused; HN002,
HN021: a step's serial another database owns or outside the window; HN031: a repeat of a
success whose policy is ``reject``), these three with attempt None (the error does not say
which). Any other error (a lost connection...) is no decision: the hook is not called. The
same names are the OpenTelemetry attribute ``hivenet.decision`` of a begin (hivenet_db.otel)
and the label ``decision`` of the metric ``hivenet_request_decisions_total``, which the
database counts (hivenet_db/sql/decisions.sql; also ``expired``, which begin does not
return). The hook observes, it never decides: whatever it raises is logged on the logger
``hivenet_db.decisions`` and dropped, so ``begin`` returns or raises exactly as without it.
It runs in the caller's thread, inside the caller's transaction: keep it quick, and leave the
database alone (an async repository calls it synchronously too).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from hivenet_db.errors import (
    AlreadySucceeded,
    AttemptInProgress,
    InvalidInput,
    RequestMismatch,
    SerialOutsideWindow,
    UnknownScope,
)

if TYPE_CHECKING:  # attempts.py reports through this module
    from hivenet_db.attempts import AttemptStart

Decision: TypeAlias = Literal["started", "replayed", "in_progress", "mismatch", "rejected",
                              "expired"]
#: Every decision, as the database counts them (view hivenet.request_decisions).
DECISIONS: tuple[Decision, ...] = get_args(Decision)

#: The decision a begin's refusal stands for (the first class the error is an instance of);
#: the SQL counts the same (decisions.sql).
REFUSALS: tuple[tuple[type[Exception], Decision], ...] = (
    (AttemptInProgress, "in_progress"),
    (RequestMismatch, "mismatch"),
    (AlreadySucceeded, "rejected"),
    (InvalidInput, "rejected"),
    (SerialOutsideWindow, "rejected"),
    (UnknownScope, "rejected"),
)

#: ``on_decision(namespace, key, decision, attempt)``.
OnDecision: TypeAlias = Callable[[str, str, Decision, "int | None"], object]

log = logging.getLogger(__name__)


def decision_of(outcome: AttemptStart | Exception) -> Decision | None:
    """The decision of what ``begin`` returned or raised; None for an error that is not one."""
    if not isinstance(outcome, Exception):
        return "replayed" if outcome.replayed else "started"
    return next((decision for refusal, decision in REFUSALS if isinstance(outcome, refusal)),
                None)


def reported(hook: OnDecision | None, namespace: str, key: str,
             begin: Callable[[], AttemptStart]) -> AttemptStart:
    """``begin()``, its decision told to ``hook``; returns or raises as ``begin()`` does."""
    try:
        start = begin()
    except Exception as error:
        tell(hook, namespace, key, error)
        raise
    tell(hook, namespace, key, start)
    return start


async def reported_async(hook: OnDecision | None, namespace: str, key: str,
                         begin: Awaitable[AttemptStart]) -> AttemptStart:
    """``reported`` for an awaited ``begin``."""
    try:
        start = await begin
    except Exception as error:
        tell(hook, namespace, key, error)
        raise
    tell(hook, namespace, key, start)
    return start


def tell(hook: OnDecision | None, namespace: str, key: str,
         outcome: AttemptStart | Exception) -> None:
    """Call ``hook`` with the decision of ``outcome``, if any; log what it raises."""
    if hook is None or (decision := decision_of(outcome)) is None:
        return
    told(hook, namespace, key, decision,
         None if isinstance(outcome, Exception) else outcome.attempt)


def told(hook: OnDecision | None, namespace: str, key: str, decision: Decision,
         attempt: int | None) -> None:
    """Call ``hook`` with ``decision``, if there is a hook; log what it raises."""
    if hook is None:
        return
    try:
        hook(namespace, key, decision, attempt)
    except Exception:
        log.exception("on_decision hook %r failed on %s of key %r in namespace %r (ignored)",
                      hook, decision, key, namespace)


__all__ = ["DECISIONS", "REFUSALS", "Decision", "OnDecision", "decision_of", "reported",
           "reported_async", "tell", "told"]
