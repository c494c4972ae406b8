"""OpenTelemetry for hivenet-db (extra ``[otel]``: ``opentelemetry-api`` only).

``instrument()`` wraps the public methods of the repositories, the way the
opentelemetry-instrumentation-* packages wrap a library's, so that the library itself never
imports OpenTelemetry and costs nothing more when it is not instrumented; ``uninstrument()``
puts the originals back. Instrumented:

- a span per claim, interface-serial claim, step and keyed request (``begin``, ``finish``,
  ``resolve``, and the guarded block of ``step`` / ``request`` / ``run`` around them), and per
  durable allocation (``next_durable``), with the attributes below when known;
- on the span of each idempotency decision (``begin``, ``claim``) the attribute
  ``hivenet.decision`` and an event ``hivenet.idempotency.decision``, from what the
  repository returned or raised. A begin's are those of the ``on_decision`` hook and of
  the metric ``hivenet_request_decisions_total`` (``hivenet_db.decisions``): ``started``,
  ``replayed``, ``in_progress``, ``mismatch``, ``rejected``; a claim's: ``claimed``,
  ``duplicate``, ``outside_window``, ``unknown_scope``, ``rejected``;
- the unified serial in W3C baggage (``hivenet_db.propagation``).

The spans are ``INTERNAL``; the SQL under them is the database instrumentation's (SQLAlchemy,
psycopg), whose spans become their children.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import wraps
from importlib.metadata import version
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace import Span, SpanKind, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from hivenet_db import propagation
from hivenet_db.allocation import AsyncSerialRepository, SerialRepository
from hivenet_db.attempts import STEPS_NAMESPACE, AttemptStart
from hivenet_db.decisions import REFUSALS
from hivenet_db.dedup import (
    AsyncClaimRepository,
    AsyncInterfaceDedup,
    ClaimRepository,
    InterfaceDedup,
)
from hivenet_db.errors import (
    DuplicateClaim,
    DuplicateInterfaceSerial,
    InvalidInput,
    SerialOutsideWindow,
    UnknownScope,
)
from hivenet_db.requests import AsyncRequestRepository, RequestRepository
from hivenet_db.steps import AsyncStepRepository, StepRepository

UNIFIED = propagation.BAGGAGE_KEY  # "hivenet.serial.unified"
SYSTEM = "hivenet.serial.system"
INTERFACE = "hivenet.serial.interface"
FORMAT = "hivenet.serial.format"
ISSUED = "hivenet.serial.issued"
NAMESPACE = "hivenet.namespace"
KEY = "hivenet.key"
ATTEMPT = "hivenet.attempt"
SUCCEEDED = "hivenet.succeeded"
DECISION = "hivenet.decision"
DECISION_EVENT = "hivenet.idempotency.decision"

Refusals = tuple[tuple[type[Exception], str], ...]
#: The decision a claim's refusal stands for (the first class the error is an instance of);
#: a begin's are hivenet_db.decisions.REFUSALS.
_CLAIM_REFUSALS: Refusals = (
    (DuplicateClaim, "duplicate"),
    (DuplicateInterfaceSerial, "duplicate"),
    (SerialOutsideWindow, "outside_window"),
    (UnknownScope, "unknown_scope"),
    (InvalidInput, "rejected"),
)

Arguments = Mapping[str, Any]
Attributes = dict[str, AttributeValue]


def _unified(explicit: str | None = None) -> str | None:
    """The unified serial of the span: the one passed, else the current one (junk in the
    baggage is the repository's to refuse, not the span's)."""
    try:
        return propagation.resolve_unified_serial(explicit)
    except InvalidInput:
        return None


def _claim(a: Arguments) -> Attributes:
    return _present({NAMESPACE: a["namespace"], KEY: a["key"], UNIFIED: _unified()})


def _interface_claim(a: Arguments) -> Attributes:
    return _present({INTERFACE: a["serial"], UNIFIED: _unified(a["unified_serial"]),
                     SYSTEM: a["system_serial"]})


def _step(a: Arguments) -> Attributes:
    return _present({NAMESPACE: STEPS_NAMESPACE, SYSTEM: a["system_serial"],
                     UNIFIED: _unified(a.get("unified_serial")),
                     ATTEMPT: a.get("attempt"), SUCCEEDED: a.get("succeeded")})


def _request(a: Arguments) -> Attributes:
    return _present({NAMESPACE: a["namespace"], KEY: a["key"], UNIFIED: _unified(),
                     ATTEMPT: a.get("attempt"), SUCCEEDED: a.get("succeeded")})


def _durable(a: Arguments) -> Attributes:
    return _present({FORMAT: a["format"], UNIFIED: _unified()})


def _present(attributes: Mapping[str, AttributeValue | None]) -> Attributes:
    return {name: value for name, value in attributes.items() if value is not None}


def _decided(span: Span, decision: str, attempt: int | None = None) -> None:
    span.set_attribute(DECISION, decision)
    event = _present({DECISION: decision, ATTEMPT: attempt})
    span.add_event(DECISION_EVENT, event)


def _refused(span: Span, error: Exception, refusals: Refusals, *, event: bool) -> None:
    for refusal, decision in refusals:
        if isinstance(error, refusal):
            if event:
                _decided(span, decision)
            else:
                span.set_attribute(DECISION, decision)
            return


def _began(span: Span, start: object) -> None:
    if isinstance(start, AttemptStart):
        span.set_attribute(ATTEMPT, start.attempt)
        _decided(span, start.outcome, start.attempt)


def _claimed(span: Span, _: object) -> None:
    _decided(span, "claimed")


def _issued(span: Span, serial: object) -> None:
    span.set_attribute(ISSUED, str(serial))


def _nothing(span: Span, result: object) -> None:
    pass


@dataclass(frozen=True)
class _Traced:
    """A method wrapped by ``instrument``: its span's name, the attributes taken from its
    arguments, what its result adds, whether it decides (a refusal is a decision) and which
    decision each refusal is."""

    name: str
    attributes: Callable[[Arguments], Attributes]
    result: Callable[[Span, object], None] = _nothing
    decides: bool = False
    refusals: Refusals = REFUSALS


_BEGIN_STEP = _Traced("hivenet.step.begin", _step, _began, decides=True)
_FINISH_STEP = _Traced("hivenet.step.finish", _step)
_RESOLVE_STEP = _Traced("hivenet.step.resolve", _step)
_BEGIN_REQUEST = _Traced("hivenet.request.begin", _request, _began, decides=True)
_FINISH_REQUEST = _Traced("hivenet.request.finish", _request)
_RESOLVE_REQUEST = _Traced("hivenet.request.resolve", _request)
_CLAIM = _Traced("hivenet.claim", _claim, _claimed, decides=True, refusals=_CLAIM_REFUSALS)
_INTERFACE_CLAIM = _Traced("hivenet.interface.claim", _interface_claim, _claimed, decides=True,
                           refusals=_CLAIM_REFUSALS)
_DURABLE = _Traced("hivenet.serial.durable", _durable, _issued)
# The guarded blocks: begin (its own span, a child) decides; the block's span says what.
_STEP = _Traced("hivenet.step", _step)
_REQUEST = _Traced("hivenet.request", _request)

#: Methods that return (sync or async), by class.
_CALLS: dict[type[Any], dict[str, _Traced]] = {
    **{cls: {"claim": _CLAIM} for cls in (ClaimRepository, AsyncClaimRepository)},
    **{cls: {"claim": _INTERFACE_CLAIM} for cls in (InterfaceDedup, AsyncInterfaceDedup)},
    **{cls: {"begin": _BEGIN_STEP, "finish": _FINISH_STEP, "resolve": _RESOLVE_STEP}
       for cls in (StepRepository, AsyncStepRepository)},
    **{cls: {"begin": _BEGIN_REQUEST, "finish": _FINISH_REQUEST, "resolve": _RESOLVE_REQUEST}
       for cls in (RequestRepository, AsyncRequestRepository)},
    **{cls: {"next_durable": _DURABLE} for cls in (SerialRepository, AsyncSerialRepository)},
}
#: Methods that are context managers around the guarded body (``run`` goes through them).
_BLOCKS: dict[type[Any], dict[str, _Traced]] = {
    StepRepository: {"step": _STEP}, RequestRepository: {"request": _REQUEST}}
_ASYNC_BLOCKS: dict[type[Any], dict[str, _Traced]] = {
    AsyncStepRepository: {"step": _STEP}, AsyncRequestRepository: {"request": _REQUEST}}


def _arguments(method: Callable[..., Any]) -> Callable[[tuple[Any, ...], dict[str, Any]],
                                                       Arguments]:
    """The arguments of a call of ``method`` by name, defaults included."""
    signature = inspect.signature(method)

    def named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Arguments:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    return named


def _call(method: Callable[..., Any], traced: _Traced, tracer: Tracer) -> Callable[..., Any]:
    named = _arguments(method)

    def spanned(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return tracer.start_as_current_span(traced.name, kind=SpanKind.INTERNAL,
                                            attributes=traced.attributes(named(args, kwargs)))

    if inspect.iscoroutinefunction(method):
        @wraps(method)
        async def wrapper_async(*args: Any, **kwargs: Any) -> Any:
            with spanned(args, kwargs) as span:
                try:
                    result = await method(*args, **kwargs)
                except Exception as error:
                    _refused(span, error, traced.refusals, event=traced.decides)
                    raise
                traced.result(span, result)
                return result

        return wrapper_async

    @wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with spanned(args, kwargs) as span:
            try:
                result = method(*args, **kwargs)
            except Exception as error:
                _refused(span, error, traced.refusals, event=traced.decides)
                raise
            traced.result(span, result)
            return result

    return wrapper


def _block(method: Callable[..., Any], traced: _Traced, tracer: Tracer) -> Callable[..., Any]:
    named = _arguments(method)

    @wraps(method)
    @contextmanager
    def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with tracer.start_as_current_span(
                traced.name, kind=SpanKind.INTERNAL,
                attributes=traced.attributes(named(args, kwargs))) as span, ExitStack() as block:
            try:
                run = block.enter_context(method(*args, **kwargs))
            except Exception as error:
                _refused(span, error, REFUSALS, event=False)
                raise
            span.set_attributes({DECISION: run.start.outcome, ATTEMPT: run.attempt})
            yield run

    return wrapper


def _async_block(method: Callable[..., Any], traced: _Traced,
                 tracer: Tracer) -> Callable[..., Any]:
    named = _arguments(method)

    @wraps(method)
    @asynccontextmanager
    async def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        with tracer.start_as_current_span(
                traced.name, kind=SpanKind.INTERNAL,
                attributes=traced.attributes(named(args, kwargs))) as span:
            async with AsyncExitStack() as block:
                try:
                    run = await block.enter_async_context(method(*args, **kwargs))
                except Exception as error:
                    _refused(span, error, REFUSALS, event=False)
                    raise
                span.set_attributes({DECISION: run.start.outcome, ATTEMPT: run.attempt})
                yield run

    return wrapper


def _serial_in(value: object) -> str | None:
    """The value of a baggage entry without its properties (``;name=value``), which
    OpenTelemetry's propagator leaves in the value."""
    return value.partition(";")[0].strip() if isinstance(value, str) else None


class _W3CBaggage:
    """The unified serial in OpenTelemetry's baggage (``propagation.Baggage``)."""

    propagator = W3CBaggagePropagator()

    def current(self) -> str | None:
        return _serial_in(baggage.get_baggage(UNIFIED))

    @contextmanager
    def carrying(self, serial: str | None) -> Iterator[None]:
        token = context.attach(baggage.remove_baggage(UNIFIED) if serial is None
                               else baggage.set_baggage(UNIFIED, serial))
        try:
            yield
        finally:
            context.detach(token)

    def read(self, header: str) -> str | None:
        return _serial_in(baggage.get_baggage(UNIFIED, self.propagator.extract(
            {propagation.BAGGAGE_HEADER: header}, context=context.Context())))

    def header(self, serial: str | None) -> str | None:
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, None if serial is None
                               else baggage.set_baggage(UNIFIED, serial))
        return carrier.get(propagation.BAGGAGE_HEADER)


_originals: dict[tuple[type[Any], str], Callable[..., Any]] = {}
_lock = threading.Lock()


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Trace hivenet-db's repositories with ``tracer_provider`` (default: the global one) and
    carry the unified serial in W3C baggage. Instrumenting again replaces the provider."""
    tracer = trace.get_tracer(__name__, version("hivenet-db"), tracer_provider)
    wrappers = ((_call, _CALLS), (_block, _BLOCKS), (_async_block, _ASYNC_BLOCKS))
    with _lock:
        _restore()
        for wrap, targets in wrappers:
            for owner, methods in targets.items():
                for name, traced in methods.items():
                    original = owner.__dict__[name]
                    _originals[owner, name] = original
                    setattr(owner, name, wrap(original, traced, tracer))
        propagation.carry_in_baggage(_W3CBaggage())


def uninstrument() -> None:
    """Put the repositories' methods back as they were, and the unified serial out of
    baggage."""
    with _lock:
        _restore()


def _restore() -> None:
    propagation.carry_in_baggage(None)
    for (owner, name), original in _originals.items():
        setattr(owner, name, original)
    _originals.clear()


__all__ = ["ATTEMPT", "DECISION", "DECISION_EVENT", "FORMAT", "INTERFACE", "ISSUED", "KEY",
           "NAMESPACE", "STEPS_NAMESPACE", "SUCCEEDED", "SYSTEM", "UNIFIED", "instrument",
           "uninstrument"]
