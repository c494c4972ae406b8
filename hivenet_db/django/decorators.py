"""Per-view control of ``IdempotencyMiddleware``: ``@idempotent`` covers a view (with options of
its own), ``@idempotency_exempt`` leaves it out.

    @idempotent(namespace="payments", fingerprint="json")
    def pay(request): ...

    @idempotency_exempt
    def webhook(request): ...

They mark the view in place, as Django's ``non_atomic_requests`` does, and go on a function
view, a class-based view's class, or a method of one: a Django REST framework ``APIView``'s
handler (``post``) or a viewset's action (``create``, or an ``@action``), where the method's
mark wins over its class's. The middleware reads the mark of the view a request resolves to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from hivenet_db.http_idempotency import Fingerprint, check_fingerprint

View = TypeVar("View", bound=Callable[..., Any])

#: The attribute holding a view's ``Mark``.
MARK = "hivenet_idempotency"


@dataclass(frozen=True)
class Mark:
    """What a decorator said of a view: covered or not, and the options it overrides."""

    covered: bool
    options: dict[str, Any] = field(default_factory=dict)


@overload
def idempotent(view: View, /) -> View: ...
@overload
def idempotent(*, namespace: str | None = None, required: bool | None = None,
               fingerprint: Fingerprint | None = None,
               commit_processing_first: bool | None = None) -> Callable[[View], View]: ...


def idempotent(view: Any = None, /, *, namespace: str | None = None,
               required: bool | None = None, fingerprint: Fingerprint | None = None,
               commit_processing_first: bool | None = None) -> Any:
    """Cover this view with the middleware (also where ``every_view`` is False), with the
    namespace, ``required``, ``fingerprint`` and ``commit_processing_first`` given here
    instead of the settings' (the others stay the settings'). ``@idempotent`` alone takes the
    settings' options. A ``fingerprint`` not understood raises ``ValueError`` when the module
    is imported."""
    if fingerprint is not None:
        check_fingerprint(fingerprint)
    given = {"namespace": namespace, "required": required, "fingerprint": fingerprint,
             "commit_processing_first": commit_processing_first}
    mark = Mark(True, {name: value for name, value in given.items() if value is not None})

    def marked(view: View) -> View:
        setattr(view, MARK, mark)
        return view

    return marked if view is None else marked(view)


def idempotency_exempt(view: View) -> View:
    """Leave this view out of the middleware: its requests run as if it were not installed."""
    setattr(view, MARK, Mark(False))
    return view


def mark_of(view: Callable[..., Any], method: str) -> Mark | None:
    """The mark of the view a request of ``method`` resolved to: the handler's (a class-based
    view's method for it, a viewset's action), else its class's, else the function's."""
    cls = getattr(view, "cls", None) or getattr(view, "view_class", None)
    if cls is not None:
        actions = getattr(view, "actions", None)  # a viewset: method -> action name
        name = actions.get(method.lower()) if actions else method.lower()
        for holder in (getattr(cls, name, None) if name else None, cls):
            mark = getattr(holder, MARK, None)
            if isinstance(mark, Mark):
                return mark
    mark = getattr(view, MARK, None)
    return mark if isinstance(mark, Mark) else None


__all__ = ["Mark", "idempotency_exempt", "idempotent", "mark_of"]
