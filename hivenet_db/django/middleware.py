"""HTTP ``Idempotency-Key`` for Django: the ASGI middleware's behaviour (hivenet_db.asgi) on
Django's request cycle, under WSGI and ASGI.

    MIDDLEWARE = [..., "hivenet_db.django.IdempotencyMiddleware", ...]
    HIVENET = {"IDEMPOTENCY": {"namespace": "http"}}

A ``POST`` or ``PATCH`` with ``Idempotency-Key`` runs its view at most once per key; a retry
gets the first response again, byte for byte, with ``Idempotent-Replayed: true``; 400 for a
missing or bad key, 409 while the key is in flight, 422 for the key of another request; a 5xx
or an exception is a failed attempt (a retry runs again). The protocol is
hivenet_db.http_idempotency's; this module moves it in and out of Django and places the
transaction.

Under ``ATOMIC_REQUESTS`` the view's writes and the recorded response are one transaction:
the middleware opens it around the view (whose own atomic block becomes a savepoint) and
records the response in it before it commits. Without it (or for a view marked
``non_atomic_requests``), the view's writes commit as the view does, and the response is
recorded after them in a transaction of its own.

Under ASGI Django runs this synchronous middleware in the request's thread-sensitive executor
(``async_capable = False``), where the view's database work runs too: one connection, one
transaction, as under WSGI.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import Resolver404, resolve
from django.utils.module_loading import import_string

from hivenet_db.attempts import REQUESTS, Attempts, AttemptStart, error_report
from hivenet_db.decisions import OnDecision, reported
from hivenet_db.django.db import connection, database_url
from hivenet_db.errors import InvalidInput, StaleAttempt
from hivenet_db.http_idempotency import (
    RESOLVED_MEANWHILE,
    Answer,
    Fingerprint,
    Refused,
    check_fingerprint,
    client_key,
    fingerprint,
    recorded_response,
    refusal,
    replay,
    stored_key,
)
from hivenet_db.requests import RequestRepository
from hivenet_db.urls import libpq_url
from hivenet_db.waiting import FinishListener, as_timedelta, waited

GetResponse = Callable[[HttpRequest], HttpResponseBase]


@dataclass(frozen=True)
class Options:
    """``settings.HIVENET["IDEMPOTENCY"]``: the ASGI middleware's options, and the database."""

    namespace: str = "http"
    header: str = "Idempotency-Key"
    methods: frozenset[str] = frozenset({"POST", "PATCH"})
    required: bool = True
    #: a callable (or its dotted path) giving the client a request belongs to: keys of two
    #: clients never meet
    scope: Callable[[HttpRequest], str] | None = None
    #: set once, on the first covered request, as the namespace's retention
    retention: timedelta | None = None
    #: how long an attempt is trusted as processing before listed as stuck
    lease: timedelta | None = None
    database: str = DEFAULT_DB_ALIAS
    #: what of the body identifies a request: "bytes", "json" or a list of JSON paths
    fingerprint: Fingerprint = "bytes"
    #: a callable (or its dotted path) told each decision about a key
    #: (``hivenet_db.decisions``)
    on_decision: OnDecision | None = None
    #: seconds (or a timedelta) a request whose key is in flight waits for the first one's
    #: outcome (replayed) before 409; None: 409 at once
    wait: float | timedelta | None = None
    #: where the waiters listen (``hivenet_db.waiting``): a libpq URL reaching PostgreSQL
    #: directly or through a session pooler; None: the database's own URL where it reaches
    #: PostgreSQL itself (through a pooler: a warning, and waits look again at intervals)
    listen_url: str | None = None

    @classmethod
    def from_settings(cls) -> Options:
        given = dict(getattr(settings, "HIVENET", {}).get("IDEMPOTENCY", {}))
        unknown = set(given) - set(cls.__dataclass_fields__)
        if unknown:
            raise ImproperlyConfigured(
                f"HIVENET['IDEMPOTENCY'] has unknown keys {sorted(unknown)}; known: "
                f"{sorted(cls.__dataclass_fields__)}")
        if "methods" in given:
            given["methods"] = frozenset(method.upper() for method in given["methods"])
        for name in ("scope", "on_decision"):
            if isinstance(given.get(name), str):
                given[name] = import_string(given[name])
        try:
            check_fingerprint(given.get("fingerprint", "bytes"))
            if given.get("wait") is not None:
                as_timedelta(given["wait"])
        except (ValueError, InvalidInput) as error:
            raise ImproperlyConfigured(f"HIVENET['IDEMPOTENCY']: {error}") from None
        return cls(**given)

    @property
    def meta_name(self) -> str:
        return "HTTP_" + self.header.upper().replace("-", "_")


class _Failed(Exception):
    """The view answered 5xx: its writes roll back, the attempt is recorded as failed."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["status"])
        self.response = response


class IdempotencyMiddleware:
    """See the module. Configured by ``settings.HIVENET["IDEMPOTENCY"]`` (``Options``)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.options = Options.from_settings()
        self._retention_set = self.options.retention is None
        self._fingerprint = check_fingerprint(self.options.fingerprint)

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        options = self.options
        if request.method not in options.methods:
            return self.get_response(request)
        value = request.META.get(options.meta_name)
        if value is None and not options.required:
            return self.get_response(request)
        try:
            key = client_key(options.header, [] if value is None else [value.encode("latin-1")])
            key = stored_key(options.header, key,
                             None if options.scope is None else options.scope(request))
        except Refused as refused:
            return _response(refused.answer())
        self._ensure_retention()
        try:
            described = fingerprint(request.method or "", request.get_full_path(), request.body,
                                    self._fingerprint)
        except Refused as refused:
            return _response(refused.answer())
        try:
            start = self._begin(key, described)
        except Exception as error:
            decided = refusal(error)
            if decided is None:
                raise
            return _response(decided.answer())
        if start.replayed:
            return _response(replay(start))
        return self._run(request, key, start.attempt)

    def _begin(self, key: str, described: Any) -> AttemptStart:
        options = self.options
        wait = options.wait
        if wait is None:
            with transaction.atomic(using=options.database):  # `processing`, committed first
                return RequestRepository(connection(options.database),
                                         on_decision=options.on_decision).begin(
                    options.namespace, key, described, lease=options.lease, nowait=True)
        # Each look, and the registration, in a transaction of its own: while waiting for
        # the first attempt's outcome, no transaction is open.
        return reported(options.on_decision, options.namespace, key, lambda: waited(
            self._listener, options.namespace, key, as_timedelta(wait),
            lambda left: self._begin_once(key, described, left),
            lambda: self._watch(key), lambda: None))

    def _begin_once(self, key: str, described: Any, wait: timedelta) -> AttemptStart:
        options = self.options
        with transaction.atomic(using=options.database):
            return Attempts(connection(options.database), REQUESTS, None, None).once(
                options.namespace, key, described, "replay", None, options.lease, False, wait)

    def _watch(self, key: str) -> None:
        with transaction.atomic(using=self.options.database):
            Attempts(connection(self.options.database), REQUESTS, None, None).watch(
                self.options.namespace, key)

    def _listener(self) -> FinishListener:
        if self.options.listen_url is not None:
            return FinishListener.shared(self.options.listen_url)
        return FinishListener.shared(libpq_url(database_url(self.options.database)),
                                     direct_only=True)

    def _run(self, request: HttpRequest, key: str, attempt: int) -> HttpResponseBase:
        database = self.options.database
        together = self._atomic(request)
        try:
            with transaction.atomic(using=database) if together else nullcontext():
                response = self.get_response(request)
                recorded = recorded_response(response.status_code, _content(response),
                                             response.items())
                if response.status_code >= 500:
                    raise _Failed(recorded)
                with transaction.atomic(using=database):  # a savepoint when together
                    self._finish(key, attempt, True, recorded)
        except _Failed as failed:
            self._fail(key, attempt, failed.response)
        except StaleAttempt:
            return _response(RESOLVED_MEANWHILE.answer())
        except Exception as error:
            try:
                self._fail(key, attempt, {"status": 500, "error": error_report(error)})
            except Exception as failure:
                error.add_note(f"hivenet: the failed attempt was not recorded: {failure!r}")
            raise
        return response

    def _atomic(self, request: HttpRequest) -> bool:
        """Whether Django runs the view of ``request`` in a transaction on the middleware's
        database: ``ATOMIC_REQUESTS``, unless the view is marked ``non_atomic_requests`` (as
        Django's own ``make_view_atomic`` decides)."""
        database = self.options.database
        if not connections[database].settings_dict.get("ATOMIC_REQUESTS", False):
            return False
        try:
            match = resolve(request.path_info, getattr(request, "urlconf", None))
        except Resolver404:
            return True
        return database not in getattr(match.func, "_non_atomic_requests", set())

    def _finish(self, key: str, attempt: int, succeeded: bool, response: Any) -> None:
        RequestRepository(connection(self.options.database)).finish(
            self.options.namespace, key, attempt, succeeded, response)

    def _fail(self, key: str, attempt: int, response: Any) -> None:
        # an operator resolved it meanwhile: their record stands
        with suppress(StaleAttempt), transaction.atomic(using=self.options.database):
            self._finish(key, attempt, False, response)

    def _ensure_retention(self) -> None:
        if self._retention_set:
            return
        options = self.options
        try:
            with transaction.atomic(using=options.database):
                RequestRepository(connection(options.database)).set_retention(
                    options.namespace, options.retention)
        except Exception as error:
            # Loud, not skipped: a shorter retention than intended would run a retried
            # request twice. Tried again on the next covered request.
            error.add_note(f"hivenet: IdempotencyMiddleware could not set the retention of "
                           f"namespace {options.namespace!r} to {options.retention} (the role "
                           "needs EXECUTE on hivenet.set_request_retention, granted to "
                           "hivenet_admin); leave retention unset and have an administrator "
                           "set it")
            raise
        self._retention_set = True


def _content(response: HttpResponseBase) -> bytes:
    """The body, read whole (a streaming body is read and put back as one chunk)."""
    if isinstance(response, StreamingHttpResponse):
        body = b"".join(response.streaming_content)  # type: ignore[arg-type]
        response.streaming_content = [body]
        return body
    assert isinstance(response, HttpResponse), type(response)
    return response.content


def _response(answer: Answer) -> HttpResponse:
    status, headers, body = answer
    response = HttpResponse(body, status=status)
    del response.headers["Content-Type"]  # only the recorded headers
    for name, value in headers:
        response.headers[name.decode("latin-1")] = value.decode("latin-1")
    response.headers["Content-Length"] = str(len(body))
    return response


__all__ = ["IdempotencyMiddleware", "Options"]
