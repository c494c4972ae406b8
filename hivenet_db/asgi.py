"""HTTP ``Idempotency-Key`` for ASGI applications (Starlette, FastAPI), on keyed requests.

Follows draft-ietf-httpapi-idempotency-key-header-07: a ``POST`` or ``PATCH`` carrying
``Idempotency-Key: "<key>"`` runs its handler at most once per key; a retry gets the first
response again, byte for byte, with ``Idempotent-Replayed: true`` (the first carries
``false``). A 4xx is not recorded as the key's outcome (``stored_statuses``): the attempt ends
failed and the same request runs again. The state machine is
``hivenet.begin_request`` / ``finish_request`` (``AsyncRequestRepository``)::

    app.add_middleware(IdempotencyMiddleware, engine=engine)

A handler that wants its writes to commit together with the recorded response (or not at
all) does them on the middleware's connection::

    @app.post("/orders")
    async def create(conn: AsyncConnection = Depends(idempotency_connection)) -> ...:
        await conn.execute(insert(orders).values(...))   # committed with the response

See docs/guides/asgi.md for the statuses, what is replayed, and the limits.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection, Request

from hivenet_db import AsyncRequestRepository
from hivenet_db.attempts import REQUESTS, AsyncAttempts, AttemptStart, error_report
from hivenet_db.decisions import OnDecision, reported_async
from hivenet_db.errors import StaleAttempt
from hivenet_db.http_idempotency import (
    FRESH,
    MAX_KEY_LENGTH,
    REPLAYED_HEADERS,
    RESOLVED_MEANWHILE,
    STORED_STATUSES,
    Fingerprint,
    Refused,
    check_fingerprint,
    check_stored_statuses,
    client_key,
    fingerprint,
    parse_key,
    problem,
    recorded_as,
    recorded_response,
    refusal,
    replay,
    stored_key,
)
from hivenet_db.metrics import timed_check
from hivenet_db.urls import libpq_url
from hivenet_db.waiting import FinishListener, Wait, as_timedelta, waited_async

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ScopeOf = Callable[[Request], "str | Awaitable[str]"]

# ASGI extensions that would send a response around the buffer (a file by path, trailers)
_UNBUFFERED_EXTENSIONS = ("http.response.pathsend", "http.response.zerocopysend",
                          "http.response.trailers")


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
    ``on_decision(namespace, key, decision, attempt)``: told what the database decided about
    each covered request's key (``hivenet_db.decisions``; the key as stored, with its scope).

    ``stored_statuses``: the statuses whose responses are recorded, a 5xx as a failed attempt
    (default ``http_idempotency.STORED_STATUSES``: every status but 4xx); a response of any
    other status is not the key's outcome (``http_idempotency.EVERY_STATUS`` records a 4xx as
    the key's outcome, replayed).

    ``commit_processing_first`` (default True): the attempt is committed ``processing``
    before the handler runs, so a crash after an effect outside the database (a provider's
    API) leaves the key for an operator; a response not recorded then ends the attempt as
    failed (the same request runs again; another body under the key is 422). False: the
    attempt is begun in the transaction of ``idempotency_connection``, held from the check to
    the record: the attempt, the handler's writes on it and the record are one commit, a
    response not recorded rolls them all back (the corrected request with the key runs), a
    crash leaves nothing ``processing``, and a concurrent duplicate is 409 at once or, with
    ``wait``, waits in the database for the first transaction (holding a connection).

    ``fingerprint``: what of the body makes two requests under one key the same (besides
    method and target): ``"bytes"`` (the body byte for byte), ``"json"`` (the body as JSON:
    whitespace, key order and the form of numbers do not matter; 400 when not JSON) or a list
    of JSON paths (``["$.amount", "$.currency"]``: only what they select; ``$`` followed by
    ``.name``, ``["name"]`` and ``[index]``).

    ``wait`` (seconds or a ``timedelta``): a request whose key is in flight waits up to that
    long for the first one's outcome and gets its response replayed (or runs, when the first
    failed), instead of 409 at once; 409 when it does not finish in time. While waiting it
    holds no connection; it listens on ``listener`` (``hivenet_db.waiting``; default: one per
    process on the engine's database, which listens only where the engine reaches PostgreSQL
    itself: through a pooler it logs a warning and the wait looks again at intervals of up
    to a second; pass one reaching PostgreSQL directly, or through a session pooler, when
    the engine goes through a transaction pooler).
    """

    #: how long an attempt is trusted as ``processing`` before listed in
    #: ``hivenet.stuck_requests`` (None: the database's default).
    lease: timedelta | None = None

    def __init__(self, app: ASGIApp, engine: AsyncEngine, *, header: str = "Idempotency-Key",
                 methods: Iterable[str] = ("POST", "PATCH"), required: bool = True,
                 namespace: str = "http", scope: ScopeOf | None = None,
                 retention: timedelta | None = None, fingerprint: Fingerprint = "bytes",
                 wait: Wait | None = None, on_decision: OnDecision | None = None,
                 listener: FinishListener | None = None,
                 stored_statuses: Iterable[int] = STORED_STATUSES,
                 commit_processing_first: bool = True) -> None:
        self.app = app
        self.engine = engine
        self.header = header.lower().encode("latin-1")
        self.methods = frozenset(method.upper() for method in methods)
        self.required = required
        self.namespace = namespace
        self.scope = scope
        self.retention = retention
        self.on_decision = on_decision
        self._retention_set = retention is None
        self.fingerprint = check_fingerprint(fingerprint)
        self.wait = None if wait is None else as_timedelta(wait)
        self.listener = listener
        self.stored_statuses = check_stored_statuses(stored_statuses)
        self.commit_processing_first = commit_processing_first

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
        except Refused as refused:
            await _send(send, *refused.answer())
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before sending its body: nothing was begun
        await self._covered(scope, receive, send, key, body)

    async def _key(self, scope: Scope, values: list[bytes]) -> str:
        header = self.header.decode("latin-1")
        key = client_key(header, values)
        if self.scope is None:
            return stored_key(header, key)
        qualifier = self.scope(Request(scope))
        if inspect.isawaitable(qualifier):
            qualifier = await qualifier
        return stored_key(header, key, qualifier)

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
        try:
            request = fingerprint(scope["method"], target, body, self.fingerprint)
        except Refused as not_json:
            await _send(send, *not_json.answer())
            return
        if not self.commit_processing_first:
            await self._run_together(scope, receive, send, key, body, request)
            return
        start = await self._decided(send, self._begin(key, request, body))
        if start is not None:
            await self._run(scope, receive, send, key, body, start.attempt)

    async def _decided(self, send: Send, begin: Awaitable[AttemptStart]) -> AttemptStart | None:
        """The check (timed): the attempt started, or None once the request is answered (a
        refusal of the key, or the replay)."""
        try:
            with timed_check(self.namespace):
                start = await begin
        except Exception as error:
            refused = refusal(error)
            if refused is None:
                raise
            await _send(send, *refused.answer())
            return None
        if start.replayed:
            await _send(send, *replay(start))
            return None
        return start

    async def _begin(self, key: str, request: Any, body: bytes) -> AttemptStart:
        """The check; the body goes along, kept where the namespace keeps clients' bytes."""
        if self.wait is None:
            async with self.engine.begin() as conn:  # commits `processing` before the handler
                return await AsyncRequestRepository(conn, on_decision=self.on_decision).begin(
                    self.namespace, key, request, lease=self.lease, nowait=True,
                    raw_request=body)
        # Each look, and the registration, in a transaction of its own: while waiting for
        # the first attempt's outcome, no connection is held.
        return await reported_async(self.on_decision, self.namespace, key, waited_async(
            self._listener, self.namespace, key, self.wait,
            lambda left: self._begin_once(key, request, body, left), lambda: self._watch(key),
            _nothing))

    async def _begin_once(self, key: str, request: Any, body: bytes,
                          wait: timedelta) -> AttemptStart:
        async with self.engine.begin() as conn:
            return await AsyncAttempts(conn, REQUESTS, None, None).once(
                self.namespace, key, request, "replay", None, self.lease, False, wait, body)

    async def _watch(self, key: str) -> None:
        async with self.engine.begin() as conn:
            await AsyncAttempts(conn, REQUESTS, None, None).watch(self.namespace, key)

    def _listener(self) -> FinishListener:
        if self.listener is None:
            self.listener = FinishListener.shared(
                libpq_url(self.engine.url.render_as_string(hide_password=False)),
                direct_only=True)
        return self.listener

    async def _call(self, scope: Scope, receive: Receive, body: bytes,
                    handle: IdempotentRequest) -> _Captured:
        """The handler's response, held; the handler sees ``handle`` in its state."""
        inner = dict(scope)
        inner["state"] = {**scope.get("state", {}), "idempotency": handle}
        extensions = {name: value for name, value in (scope.get("extensions") or {}).items()
                      if name not in _UNBUFFERED_EXTENSIONS}
        inner["extensions"] = extensions
        captured = _Captured()
        await self.app(inner, _replay_body(body, receive), captured.send)
        return captured

    async def _run_together(self, scope: Scope, receive: Receive, send: Send, key: str,
                            body: bytes, request: Any) -> None:
        """``commit_processing_first=False``: the attempt, the handler's writes on
        ``idempotency_connection`` and the record, one transaction on one connection."""
        async with self.engine.connect() as conn:
            await conn.begin()
            start = await self._decided(send, self._begin_here(conn, key, request, body))
            if start is None:  # answered: the transaction wrote nothing to keep
                await conn.rollback()
                return
            before_handler = await conn.begin_nested()
            handle = IdempotentRequest(self.engine, self.namespace, key, start.attempt,
                                       _connection=conn)
            try:
                captured = await self._call(scope, receive, body, handle)
                status = captured.status
                if status is None:
                    raise RuntimeError("the application returned without a response")
            except Exception as error:  # a failed attempt, the handler's writes undone
                await before_handler.rollback()
                await AsyncRequestRepository(conn).finish(
                    self.namespace, key, start.attempt, False,
                    {"status": 500, "error": error_report(error)})
                await conn.commit()
                raise
            outcome = recorded_as(status, self.stored_statuses)
            if outcome is None:  # not recorded: the attempt goes with the handler's writes
                await conn.rollback()
            else:
                if not outcome:
                    await before_handler.rollback()
                await AsyncRequestRepository(conn).finish(
                    self.namespace, key, start.attempt, outcome, recorded_response(
                        status, bytes(captured.body), [
                            (name.decode("latin-1"), value.decode("latin-1"))
                            for name, value in captured.headers]))
                await conn.commit()
        await _send(send, status, [*captured.headers, FRESH], bytes(captured.body))

    async def _begin_here(self, conn: AsyncConnection, key: str, request: Any,
                          body: bytes) -> AttemptStart:
        """The check in the transaction of ``conn``: nowait (409 at once), or waiting in the
        database up to ``wait`` for a concurrent first attempt's transaction to end."""
        repository = AsyncRequestRepository(conn, on_decision=self.on_decision)
        if self.wait is None:
            return await repository.begin(self.namespace, key, request, lease=self.lease,
                                          nowait=True, raw_request=body)
        return await reported_async(self.on_decision, self.namespace, key, AsyncAttempts(
            conn, REQUESTS, None, None).once(self.namespace, key, request, "replay", None,
                                             self.lease, False, self.wait, body))

    async def _run(self, scope: Scope, receive: Receive, send: Send, key: str, body: bytes,
                   attempt: int) -> None:
        handle = IdempotentRequest(self.engine, self.namespace, key, attempt)
        async with handle._stack:
            try:
                captured = await self._call(scope, receive, body, handle)
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
            if recorded_as(status, self.stored_statuses):
                try:
                    await self._finish(handle, True, recorded)
                except StaleAttempt:
                    await _send(send, *RESOLVED_MEANWHILE.answer())
                    return
            else:  # a failure, or not recorded: committed `processing` can only end as failed
                await self._fail(handle, recorded)
        await _send(send, status, [*captured.headers, FRESH], bytes(captured.body))

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


async def _nothing() -> None:
    """Ending a look's transaction: its ``engine.begin()`` block did."""


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
