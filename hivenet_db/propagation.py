"""The unified serial of the current business transaction, carried in a context variable.

Set it once where a request enters (from its headers, or a new serial at the channel);
repositories that record a unified serial use it when the caller passes none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_unified_serial: ContextVar[str | None] = ContextVar("hivenet_unified_serial", default=None)


def current_unified_serial() -> str | None:
    """The unified serial bound to this context, or None."""
    return _unified_serial.get()


@contextmanager
def unified_serial_context(serial: str | None) -> Iterator[None]:
    """Bind ``serial`` as the current unified serial inside the ``with`` block."""
    token = _unified_serial.set(serial)
    try:
        yield
    finally:
        _unified_serial.reset(token)
