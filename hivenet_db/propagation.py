"""The serials of the current business transaction, carried across calls (seed 003, 2.5).

The unified serial (统一流水号) is created once at the channel and travels with every call of
the transaction: in a context variable inside a process, in headers between processes.

- HTTP: ``X-Hivenet-Unified-Serial`` (plus the call's ``X-Hivenet-System-Serial`` and
  ``X-Hivenet-Interface-Serial``); gRPC metadata uses the same names in lower case;
  message headers (Kafka, AMQP, ...) carry the same keys with UTF-8 ``bytes`` values.
- Where a request enters: ``with bind_from_headers(request.headers): ...``.
- Where a call leaves: ``headers.update(outgoing_headers(system_serial=s, interface_serial=i))``.
- Repositories that record a unified serial use :func:`resolve_unified_serial`, so the bound
  one is recorded whenever the caller passes none.

Values are checked only for what a header can carry safely (1 to 64 characters of
``[0-9A-Za-z_-]``, so no header injection); the database checks the serial itself.

Once ``hivenet_db.otel.instrument()`` ran, the unified serial also travels in W3C baggage
(key ``hivenet.serial.unified``): a bound serial is put into the baggage of the current
OpenTelemetry context (so OpenTelemetry's own propagation carries it), outgoing headers get a
``baggage`` header holding it, and a serial is read from an incoming ``baggage`` header, or
from the current context's baggage, when no hivenet header or binding gives one. This module
never imports OpenTelemetry: ``hivenet_db.otel`` plugs its baggage in (``carry_in_baggage``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from hivenet_db.errors import InvalidInput

UNIFIED_HEADER = "X-Hivenet-Unified-Serial"
SYSTEM_HEADER = "X-Hivenet-System-Serial"
INTERFACE_HEADER = "X-Hivenet-Interface-Serial"
BAGGAGE_HEADER = "baggage"
#: The unified serial's key in W3C baggage (and its span attribute: hivenet_db.otel).
BAGGAGE_KEY = "hivenet.serial.unified"

_unified_serial: ContextVar[str | None] = ContextVar("hivenet_unified_serial", default=None)
_SAFE = re.compile(r"[0-9A-Za-z_-]{1,64}")

HeaderValue: TypeAlias = "str | bytes"
# A mapping (HTTP frameworks, dict) or (name, value) pairs (Kafka headers, gRPC metadata).
Headers: TypeAlias = "Mapping[str, HeaderValue] | Iterable[tuple[str, HeaderValue]]"


class Baggage(Protocol):
    """W3C baggage as OpenTelemetry keeps it (``hivenet_db.otel`` gives the one in use)."""

    def current(self) -> str | None:
        """The unified serial in the baggage of the current context, unchecked."""

    def carrying(self, serial: str | None) -> AbstractContextManager[object]:
        """A ``with`` block whose context's baggage holds ``serial`` (none when None)."""

    def read(self, header: str) -> str | None:
        """The unified serial in the value of a ``baggage`` header, unchecked."""

    def header(self, serial: str | None) -> str | None:
        """The ``baggage`` header of an outgoing call: the current context's baggage with
        ``serial`` in it; None when there is no baggage at all."""


_baggage: Baggage | None = None


def carry_in_baggage(baggage: Baggage | None) -> None:
    """Carry the unified serial in ``baggage`` too from now on (None: no longer)."""
    global _baggage
    _baggage = baggage


def current_unified_serial() -> str | None:
    """The unified serial bound to this context, else (instrumented) the one in the current
    OpenTelemetry baggage, or None."""
    bound = _unified_serial.get()
    if bound is not None or (baggage := _baggage) is None:
        return bound
    carried = baggage.current()
    return None if carried is None else _checked(f"{BAGGAGE_HEADER} {BAGGAGE_KEY}", carried)


@contextmanager
def unified_serial_context(serial: str | None) -> Iterator[None]:
    """Bind ``serial`` as the current unified serial inside the ``with`` block (and,
    instrumented, put it into the current OpenTelemetry baggage for the block)."""
    token = _unified_serial.set(None if serial is None else _checked(UNIFIED_HEADER, serial))
    try:
        with ExitStack() as stack:
            if (baggage := _baggage) is not None:
                stack.enter_context(baggage.carrying(serial))
            yield
    finally:
        _unified_serial.reset(token)


def resolve_unified_serial(explicit: str | None) -> str | None:
    """The unified serial to record: the one the caller passed, else the current one."""
    return explicit if explicit is not None else current_unified_serial()


@dataclass(frozen=True)
class CallSerials:
    """The serials an incoming call carries (each None when absent)."""

    unified_serial: str | None = None
    system_serial: str | None = None
    interface_serial: str | None = None


def _text(value: HeaderValue) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _checked(name: str, value: HeaderValue) -> str:
    text = _text(value).strip()
    if not _SAFE.fullmatch(text):
        raise InvalidInput(f"header {name}: {text[:80]!r} is no serial "
                           f"(1 to 64 characters of [0-9A-Za-z_-])", "HN001")
    return text


def _pairs(headers: Headers) -> Iterator[tuple[str, HeaderValue]]:
    if isinstance(headers, Mapping):
        yield from headers.items()
    else:
        yield from headers


def read_headers(headers: Headers) -> CallSerials:
    """The serials in HTTP headers, gRPC metadata or message headers (names case-insensitive);
    instrumented, the unified serial of a ``baggage`` header when no hivenet header has one.

    Raises ``InvalidInput`` when a hivenet header (or that baggage) holds something that is no
    serial.
    """
    wanted = {UNIFIED_HEADER.lower(): "unified_serial", SYSTEM_HEADER.lower(): "system_serial",
              INTERFACE_HEADER.lower(): "interface_serial"}
    found: dict[str, str] = {}
    baggage_headers: list[str] = []  # several are one list (W3C baggage)
    for name, value in _pairs(headers):
        if (key := wanted.get(name.lower())) is not None and key not in found:
            found[key] = _checked(name, value)
        elif name.lower() == BAGGAGE_HEADER:
            baggage_headers.append(_text(value))
    if "unified_serial" not in found and baggage_headers and (baggage := _baggage) is not None:
        carried = baggage.read(",".join(baggage_headers))
        if carried is not None:
            found["unified_serial"] = _checked(f"{BAGGAGE_HEADER} {BAGGAGE_KEY}", carried)
    return CallSerials(**found)


def outgoing_headers(unified_serial: str | None = None, *, system_serial: str | None = None,
                     interface_serial: str | None = None) -> dict[str, str]:
    """HTTP headers for an outgoing call: the unified serial (default: the current one) and
    the call's system and interface serials, each only when known; instrumented, also the
    ``baggage`` header of the current context with the unified serial in it."""
    values = {UNIFIED_HEADER: resolve_unified_serial(unified_serial),
              SYSTEM_HEADER: system_serial, INTERFACE_HEADER: interface_serial}
    headers = {name: _checked(name, value) for name, value in values.items() if value is not None}
    if (baggage := _baggage) is not None and (
            carried := baggage.header(headers.get(UNIFIED_HEADER))) is not None:
        headers[BAGGAGE_HEADER] = carried
    return headers


def outgoing_message_headers(unified_serial: str | None = None, *,
                             system_serial: str | None = None,
                             interface_serial: str | None = None) -> list[tuple[str, bytes]]:
    """The same as :func:`outgoing_headers`, as message headers: ``(name, utf-8 bytes)``
    pairs, the shape Kafka clients take."""
    return [(name, value.encode()) for name, value in outgoing_headers(
        unified_serial, system_serial=system_serial, interface_serial=interface_serial).items()]


def outgoing_grpc_metadata(unified_serial: str | None = None, *,
                           system_serial: str | None = None,
                           interface_serial: str | None = None) -> list[tuple[str, str]]:
    """The same as :func:`outgoing_headers`, as gRPC metadata (keys must be lower case)."""
    return [(name.lower(), value) for name, value in outgoing_headers(
        unified_serial, system_serial=system_serial, interface_serial=interface_serial).items()]


@contextmanager
def bind_from_headers(headers: Headers) -> Iterator[CallSerials]:
    """Where a call enters: bind its unified serial for the ``with`` block and give all its
    serials. A call without one keeps the unified serial already bound (None at a channel,
    which then creates one and binds it with :func:`unified_serial_context`)."""
    serials = read_headers(headers)
    with unified_serial_context(resolve_unified_serial(serials.unified_serial)):
        yield serials
