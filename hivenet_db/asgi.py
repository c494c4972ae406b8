"""HTTP ``Idempotency-Key`` for ASGI applications (Starlette, FastAPI), on keyed requests.

Follows draft-ietf-httpapi-idempotency-key-header-07: a ``POST`` or ``PATCH`` carrying
``Idempotency-Key: "<key>"`` runs its handler at most once per key; a retry gets the first
response again, byte for byte, with ``Idempotent-Replayed: true``. The state machine is
``hivenet.begin_request`` / ``finish_request`` (``AsyncRequestRepository``)::

    app.add_middleware(IdempotencyMiddleware, engine=engine)

A handler that wants its writes to commit together with the recorded response (or not at
all) does them on the middleware's connection::

    @app.post("/orders")
    async def create(conn: AsyncConnection = Depends(idempotency_connection)) -> ...:
        await conn.execute(insert(orders).values(...))   # committed with the response

See docs/asgi.md for the statuses, what is replayed, and the limits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import HTTPConnection, Request

from hivenet_db import AsyncRequestRepository
from hivenet_db.errors import InvalidInput, RequestMismatch, StaleAttempt, StepInProgress
from hivenet_db.steps import error_report

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ScopeOf = Callable[[Request], "str | Awaitable[str]"]

#: The longest key stored (``hivenet.begin_request`` refuses longer ones): the client's key,
#: prefixed by the percent-encoded scope and ``:`` when ``scope`` is given.
MAX_KEY_LENGTH = 255

#: Response headers recorded and replayed with the status and the body. Others (date, server,
#: set-cookie, caching headers...) belong to one response only and are never replayed.
REPLAYED_HEADERS = frozenset({
    "content-type", "content-encoding", "content-language", "content-location", "location",
    "link",
})

# ASGI extensions that would send a response around the buffer (a file by path, trailers)
_UNBUFFERED_EXTENSIONS = ("http.response.pathsend", "http.response.zerocopysend",
                          "http.response.trailers")


class _Refused(Exception):
    """A covered request answered with a problem before (or instead of) its handler."""

    def __init__(self, status: int, detail: str, problem: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.problem = problem


def parse_key(value: bytes) -> str:
    """The key of an ``Idempotency-Key`` field value: an sf-string (RFC 8941 §3.3.3, the
    draft's syntax), or, leniently, a bare token of visible ASCII without quotes (what many
    clients send). Raises ``ValueError`` naming the problem."""
    raw = value.strip(b" \t")
    if raw.startswith(b'"'):
        out = bytearray()
        i = 1
        while i < len(raw):
            char = raw[i]
            if char == 0x5C:  # backslash: only \" and \\ are escapes
                if i + 1 >= len(raw) or raw[i + 1] not in (0x22, 0x5C):
                    raise ValueError("a backslash in the key escapes neither \" nor \\")
                out.append(raw[i + 1])
                i += 2
            elif char == 0x22:
                if i != len(raw) - 1:
                    raise ValueError("characters after the closing quote (one key only)")
                return out.decode("ascii")
            elif 0x20 <= char <= 0x7E:
                out.append(char)
                i += 1
            else:
                raise ValueError(f"character 0x{char:02x} is not printable ASCII")
        raise ValueError("the opening quote is never closed")
    if not all(0x21 <= char <= 0x7E and char != 0x22 for char in raw):
        raise ValueError("a bare key must be visible ASCII (quote it as an sf-string)")
    return raw.decode("ascii")


def fingerprint(method: str, target: str, body: bytes) -> dict[str, str]:
    """What identifies a request under its key: method, request target (path and query) and
    the SHA-256 of the body. ``begin_request`` keeps its hash and refuses another (HN032)."""
    return {"method": method, "target": target,
            "body_sha256": hashlib.sha256(body).hexdigest()}


def recorded_response(status: int, body: bytes = b"",
                      headers: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """A response as the middleware records it (and as an operator passes it to
    ``hivenet.resolve_request`` to have it replayed): status, the replayed headers (names in
    lower case, in order) and the body in base64."""
    kept = [[name.lower(), value] for name, value in headers
            if name.lower() in REPLAYED_HEADERS]
    return {"status": status, "headers": kept, "body": base64.b64encode(body).decode("ascii")}


def _replayable(response: Any) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers and body to replay from a recorded response. Any other JSON value (an
    operator resolved the request with a plain document) is replayed as 200 with that
    document as ``application/json``; JSON null as 204 without a body."""
    if isinstance(response, dict) and set(response) == {"status", "headers", "body"}:
        try:
            status, headers = int(response["status"]), response["headers"]
            body = base64.b64decode(response["body"], validate=True)
            pairs = [(str(name).lower().encode("latin-1"), str(value).encode("latin-1"))
                     for name, value in headers]
            return status, pairs, body
        except (TypeError, ValueError, binascii.Error):
            pass
    if response is None:
        return 204, [], b""
    return (200, [(b"content-type", b"application/json")],
            json.dumps(response, separators=(",", ":")).encode())


def problem(status: int, detail: str, kind: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """An RFC 9457 problem document: ``about:blank`` with the status's phrase as title, the
    detail, and the member ``idempotency`` naming the case (missing, invalid, in-flight,
    mismatch, resolved) for clients that act on it."""
    body = json.dumps({"type": "about:blank", "title": HTTPStatus(status).phrase,
                       "status": status, "detail": detail, "idempotency": kind}).encode()
    return status, [(b"content-type", b"application/problem+json")], body


@dataclass
class IdempotentRequest:
    """The covered request, in ``request.state.idempotency``: its namespace, stored key and
    attempt; ``connection()`` opens (once) the connection and transaction the response will
    be recorded in, for handler writes that must commit with it."""

    engine: AsyncEngine
    namespace: str
    key: str
    attempt: int
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)
    _connection: AsyncConnection | None = field(default=None, repr=False)

    async def connection(self) -> AsyncConnection:
        if self._connection is None:
            conn = await self._stack.enter_async_context(self.engine.connect())
            await conn.begin()
            self._connection = conn
        return self._connection


async def idempotency_connection(request: HTTPConnection) -> AsyncConnection:
    """FastAPI dependency (``Depends(idempotency_connection)``; any Starlette handler can call
    it too): the connection, inside a transaction, on which the middleware records this
    request's response. Writes done on it commit together with the response, or not at all
    (handler raising, answering 5xx, or the attempt resolved meanwhile). Never commit it."""
    found = request.scope.get("state", {}).get("idempotency")
    if not isinstance(found, IdempotentRequest):
        raise RuntimeError("this request is not covered by IdempotencyMiddleware "
                           "(method not covered, or no Idempotency-Key when not required)")
    return await found.connection()


class IdempotencyMiddleware:
    """Pure ASGI middleware: requests of ``methods`` carrying the ``header`` run their handler
    at most once per key and namespace (per ``scope(request)`` when given); see the module.

    ``retention`` (a ``timedelta``): set once, on the first covered request, as the
    namespace's retention (``hivenet.set_request_retention``); a key may run again after it.
    """

    #: how long an attempt is trusted as ``processing`` before listed in
    #: ``hivenet.stuck_requests`` (None: the database's default).
    lease: timedelta | None = None

    def __init__(self, app: ASGIApp, engine: AsyncEngine, *, header: str = "Idempotency-Key",
                 methods: Iterable[str] = ("POST", "PATCH"), required: bool = True,
                 namespace: str = "http", scope: ScopeOf | None = None,
                 retention: timedelta | None = None) -> None:
        self.app = app
        self.engine = engine
        self.header = header.lower().encode("latin-1")
        self.methods = frozenset(method.upper() for method in methods)
        self.required = required
        self.namespace = namespace
        self.scope = scope
        self.retention = retention
        self._retention_set = retention is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" and not self._retention_set:
            await self.app(scope, receive, self._setting_retention_at_startup(send))
            return
        if scope["type"] != "http" or scope["method"] not in self.methods:
            await self.app(scope, receive, send)
            return
        values = [value for name, value in scope["headers"] if name.lower() == self.header]
        if not values and not self.required:
            await self.app(scope, receive, send)
            return
        try:
            key = await self._key(scope, values)
        except _Refused as refused:
            await _send(send, *problem(refused.status, refused.detail, refused.problem))
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before sending its body: nothing was begun
        await self._covered(scope, receive, send, key, body)

    async def _key(self, scope: Scope, values: list[bytes]) -> str:
        name = self.header.decode("latin-1")
        if not values:
            raise _Refused(400, f"this operation requires the {name} header", "missing")
        if len(values) > 1:
            raise _Refused(400, f"more than one {name} header", "invalid")
        try:
            key = parse_key(values[0])
        except ValueError as error:
            raise _Refused(400, f"{name} is not a valid key: {error}", "invalid") from None
        if not key:
            raise _Refused(400, f"{name} is empty", "invalid")
        if self.scope is not None:
            qualifier = self.scope(Request(scope))
            if inspect.isawaitable(qualifier):
                qualifier = await qualifier
            key = f"{quote(qualifier, safe='')}:{key}"
        if len(key) > MAX_KEY_LENGTH:
            raise _Refused(400, f"{name} is longer than {MAX_KEY_LENGTH} characters", "invalid")
        return key

    def _setting_retention_at_startup(self, send: Send) -> Send:
        # Where the server runs the lifespan protocol, the retention is set once the app has
        # started: an error (no right to set it, a retention refused) fails the startup
        # (the server stops), not every request.
        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                try:
                    await self._ensure_retention()
                except Exception as error:
                    notes = "; ".join(getattr(error, "__notes__", []))
                    message = {"type": "lifespan.startup.failed",
                               "message": f"{error!r}; {notes}"}
            await send(message)

        return sending

    async def _ensure_retention(self) -> None:
        if self._retention_set:
            return
        try:
            async with self.engine.begin() as conn:
                await AsyncRequestRepository(conn).set_retention(self.namespace, self.retention)
        except Exception as error:
            # Loud, not skipped: a shorter retention than intended would run a retried
            # request twice. Tried again on the next covered request.
            error.add_note(f"hivenet: IdempotencyMiddleware could not set the retention of "
                           f"namespace {self.namespace!r} to {self.retention} (the role needs "
                           "EXECUTE on hivenet.set_request_retention, granted to "
                           "hivenet_admin); leave retention unset and have an administrator "
                           "set it")
            raise
        self._retention_set = True

    async def _covered(self, scope: Scope, receive: Receive, send: Send, key: str,
                       body: bytes) -> None:
        await self._ensure_retention()
        target = scope.get("raw_path") or scope["path"].encode()
        if isinstance(target, bytes):
            target = target.decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        request = fingerprint(scope["method"], target, body)
        try:
            async with self.engine.begin() as conn:  # commits `processing` before the handler
                start = await AsyncRequestRepository(conn).begin(
                    self.namespace, key, request, lease=self.lease, nowait=True)
        except StepInProgress:
            await _send(send, *problem(409, "a request with this key is being processed; "
                                       "retry later", "in-flight"))
            return
        except RequestMismatch:
            await _send(send, *problem(422, "this key was used with another request (method, "
                                       "target or body differ)", "mismatch"))
            return
        except InvalidInput as error:
            await _send(send, *problem(400, f"the key is refused: {error.message}", "invalid"))
            return
        if start.replayed:
            status, headers, replayed = _replayable(start.response)
            await _send(send, status, [*headers, (b"idempotent-replayed", b"true")], replayed)
            return
        await self._run(scope, receive, send, key, body, start.attempt)

    async def _run(self, scope: Scope, receive: Receive, send: Send, key: str, body: bytes,
                   attempt: int) -> None:
        handle = IdempotentRequest(self.engine, self.namespace, key, attempt)
        inner = dict(scope)
        inner["state"] = {**scope.get("state", {}), "idempotency": handle}
        extensions = {name: value for name, value in (scope.get("extensions") or {}).items()
                      if name not in _UNBUFFERED_EXTENSIONS}
        inner["extensions"] = extensions
        captured = _Captured()
        async with handle._stack:
            try:
                await self.app(inner, _replay_body(body, receive), captured.send)
            except Exception as error:
                # A raising handler: its writes on the connection are rolled back, the
                # attempt recorded as failed (a retry runs again), the error passed on.
                try:
                    await self._fail(handle, {"status": 500, "error": error_report(error)})
                except Exception as failure:
                    error.add_note(f"hivenet: the failed attempt was not recorded: {failure!r}")
                raise
            status = captured.status
            if status is None:
                silent = RuntimeError("the application returned without a response")
                await self._fail(handle, {"status": 500, "error": error_report(silent)})
                raise silent
            recorded = recorded_response(status, bytes(captured.body), [
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in captured.headers])
            if status >= 500:
                await self._fail(handle, recorded)
            else:
                try:
                    await self._finish(handle, True, recorded)
                except StaleAttempt:
                    await _send(send, *problem(
                        409, "an operator resolved this request while it ran; its outcome "
                        "was not recorded (retry to get the resolved outcome)", "resolved"))
                    return
        await _send(send, status, captured.headers, bytes(captured.body))

    async def _finish(self, handle: IdempotentRequest, succeeded: bool,
                      response: Any) -> None:
        conn = handle._connection
        if conn is not None:  # the handler's transaction: its writes commit with the response
            await AsyncRequestRepository(conn).finish(
                handle.namespace, handle.key, handle.attempt, succeeded, response)
            await conn.commit()
            return
        async with self.engine.begin() as own:
            await AsyncRequestRepository(own).finish(
                handle.namespace, handle.key, handle.attempt, succeeded, response)

    async def _fail(self, handle: IdempotentRequest, response: Any) -> None:
        if handle._connection is not None:
            await handle._connection.rollback()  # the handler's writes go
            handle._connection = None  # record the failure on a connection of its own
        with suppress(StaleAttempt):  # an operator resolved it meanwhile: their record stands
            await self._finish(handle, False, response)


class _Captured:
    """The handler's response, held until its outcome is recorded."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = [(bytes(name), bytes(value)) for name, value in message["headers"]]
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


async def _read_body(receive: Receive) -> bytes | None:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(body)


def _replay_body(body: bytes, receive: Receive) -> Receive:
    """The request body for the handler, read already; after it, the client's own messages
    (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]],
                body: bytes) -> None:
    headers = [(name, value) for name, value in headers if name.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["MAX_KEY_LENGTH", "REPLAYED_HEADERS", "IdempotencyMiddleware", "IdempotentRequest",
           "fingerprint", "idempotency_connection", "parse_key", "problem",
           "recorded_response"]
