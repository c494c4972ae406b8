"""HTTP ``Idempotency-Key`` for Django: the ASGI middleware's behaviour (hivenet_db.asgi) on
Django's request cycle, under WSGI and ASGI.

    MIDDLEWARE = [..., "hivenet_db.django.IdempotencyMiddleware", ...]
    HIVENET = {"IDEMPOTENCY": {"namespace": "http"}}

A ``POST`` or ``PATCH`` with ``Idempotency-Key`` runs its view at most once per key; a retry
gets the first response again, byte for byte, with ``Idempotent-Replayed: true`` (the first
carries ``false``); 400 for a missing or bad key, 409 while the key is in flight, 422 for the
key of another request; a 5xx or an exception is a failed attempt (a retry runs again); a 4xx
is not recorded (``stored_statuses``): the corrected request with the same key runs. The
protocol is hivenet_db.http_idempotency's; this module moves it in and out of Django and
places the transaction. ``@idempotent`` and ``@idempotency_exempt``
(hivenet_db.django.decorators) cover or leave out a view, with options of its own.

Under ``ATOMIC_REQUESTS`` the key's attempt, the view's writes and the recorded response are
one transaction: the middleware opens it, begins the attempt in it, runs the view (whose own
atomic block becomes a savepoint) and records the response before it commits. A concurrent
duplicate meets the uncommitted attempt: 409 at once (or, with ``wait``, it waits in the
database for the first to commit, then replays it). A response that is not recorded rolls the
whole transaction back, and so does a crash: nothing is left ``processing``. With
``commit_processing_first`` (for views whose effects leave the database) the attempt is
committed ``processing`` before the view, whose writes and record are then one transaction.
Without ``ATOMIC_REQUESTS`` (or for a view marked ``non_atomic_requests``), the attempt is
committed ``processing`` first, the view's writes commit as the view does, and the response
is recorded after them in a transaction of its own. Where ``processing`` was committed, a
response that is not recorded ends the attempt as failed.

Under ASGI Django runs this synchronous middleware in the request's thread-sensitive executor
(``async_capable = False``), where the view's database work runs too: one connection, one
transaction, as under WSGI.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import nullcontext, suppress
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cached_property
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.urls import Resolver404, ResolverMatch, resolve
from django.utils.module_loading import import_string

from hivenet_db.attempts import REQUESTS, Attempts, AttemptStart, error_report
from hivenet_db.decisions import OnDecision, reported
from hivenet_db.django.db import connection, database_url
from hivenet_db.django.decorators import mark_of
from hivenet_db.errors import InvalidInput, StaleAttempt
from hivenet_db.http_idempotency import (
    FRESH,
    RESOLVED_MEANWHILE,
    STORED_STATUSES,
    Answer,
    Fingerprint,
    Refused,
    check_fingerprint,
    check_stored_statuses,
    client_key,
    fingerprint,
    recorded_as,
    recorded_response,
    refusal,
    replay,
    stored_key,
)
from hivenet_db.metrics import timed_check
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
    #: the statuses whose responses are recorded (a 5xx as a failed attempt); any other is
    #: not, and the key stays free: by default every status but 4xx
    stored_statuses: Collection[int] = STORED_STATUSES
    #: False: only views decorated with ``@idempotent`` are covered
    every_view: bool = True
    #: True: the attempt is committed ``processing`` before the view runs, also under
    #: ATOMIC_REQUESTS, for views whose effects leave the database (a provider's API): a
    #: crash after them leaves the key ``processing`` for an operator, never free for a retry
    commit_processing_first: bool = False

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
            if "stored_statuses" in given:
                given["stored_statuses"] = check_stored_statuses(given["stored_statuses"])
        except (ValueError, InvalidInput) as error:
            raise ImproperlyConfigured(f"HIVENET['IDEMPOTENCY']: {error}") from None
        return cls(**given)

    @property
    def meta_name(self) -> str:
        return "HTTP_" + self.header.upper().replace("-", "_")

    @cached_property
    def fingerprint_mode(self) -> tuple[str, list[list[str | int]]]:
        return check_fingerprint(self.fingerprint)


class IdempotencyMiddleware:
    """See the module. Configured by ``settings.HIVENET["IDEMPOTENCY"]`` (``Options``), and per
    view by ``@idempotent`` / ``@idempotency_exempt``."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.options = Options.from_settings()
        self._views: dict[tuple[Any, str], Options | None] = {}
        self._retention_set: set[str] = set()

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.method not in self.options.methods:
            return self.get_response(request)
        match = _resolved(request)
        options = self._covering(match, request.method or "")
        if options is None:
            return self.get_response(request)
        value = request.META.get(options.meta_name)
        if value is None and not options.required:
            return self.get_response(request)
        try:
            key = client_key(options.header, [] if value is None else [value.encode("latin-1")])
            key = stored_key(options.header, key,
                             None if options.scope is None else options.scope(request))
            self._ensure_retention(options)
            described = fingerprint(request.method or "", request.get_full_path(), request.body,
                                    options.fingerprint_mode)
        except Refused as refused:
            return _response(refused.answer())
        atomic = self._atomic(match, options)
        if atomic and not options.commit_processing_first:
            return self._run_together(request, options, key, described)
        return self._run_apart(request, options, key, described, together=atomic)

    def _covering(self, match: ResolverMatch | None, method: str) -> Options | None:
        """The options of the view ``match`` names for ``method``, None when not covered (the
        decorators' marks, read once per view)."""
        view = None if match is None else match.func
        found = self._views.get((view, method), _UNSEEN)
        if found is not _UNSEEN:
            return found  # type: ignore[return-value]
        mark = None if view is None else mark_of(view, method)
        if mark is None:
            found = self.options if self.options.every_view else None
        elif not mark.covered:
            found = None
        else:
            found = replace(self.options, **mark.options)
        self._views[(view, method)] = found
        return found

    def _atomic(self, match: ResolverMatch | None, options: Options) -> bool:
        """Whether Django runs the view in a transaction on the middleware's database:
        ``ATOMIC_REQUESTS``, unless the view is marked ``non_atomic_requests`` (as Django's own
        ``make_view_atomic`` decides)."""
        database = options.database
        if not connections[database].settings_dict.get("ATOMIC_REQUESTS", False):
            return False
        return match is None or database not in getattr(match.func, "_non_atomic_requests",
                                                        set())

    # --- under ATOMIC_REQUESTS: the attempt, the view's writes and the record, one commit ---

    def _run_together(self, request: HttpRequest, options: Options, key: str,
                      described: Any) -> HttpResponseBase:
        database = options.database
        raised: Exception | None = None
        try:
            with transaction.atomic(using=database):
                try:
                    start = self._begin_here(options, key, described, request.body)
                except Exception as error:
                    decided = refusal(error)
                    if decided is None:
                        raise
                    transaction.set_rollback(True, using=database)
                    return _response(decided.answer())
                if start.replayed:
                    return _response(replay(start))
                before_view = transaction.savepoint(using=database)
                try:
                    response = self.get_response(request)
                except Exception as error:  # where Django lets it propagate: a failed attempt
                    transaction.savepoint_rollback(before_view, using=database)
                    self._finish(options, key, start.attempt, False,
                                 {"status": 500, "error": error_report(error)})
                    raised = error
                else:
                    outcome = recorded_as(response.status_code, options.stored_statuses)
                    if outcome is None:  # not recorded: the attempt goes with the writes
                        transaction.set_rollback(True, using=database)
                        return _fresh(response)
                    recorded = recorded_response(response.status_code, _content(response),
                                                 response.items())
                    if not outcome:  # the failed attempt is recorded, the view's writes go
                        transaction.savepoint_rollback(before_view, using=database)
                    self._finish(options, key, start.attempt, outcome, recorded)
        except StaleAttempt:
            return _response(RESOLVED_MEANWHILE.answer())
        if raised is not None:
            raise raised
        return _fresh(response)

    def _begin_here(self, options: Options, key: str, described: Any,
                    body: bytes) -> AttemptStart:
        """The check, in the request's transaction: nowait (409 at once), or waiting in the
        database up to ``wait`` for a concurrent first attempt's transaction to end. The body
        goes along: kept where the namespace keeps clients' bytes."""
        repository = RequestRepository(connection(options.database),
                                       on_decision=options.on_decision)
        with timed_check(options.namespace):
            if options.wait is None:
                return repository.begin(options.namespace, key, described, lease=options.lease,
                                        nowait=True, raw_request=body)
            wait = as_timedelta(options.wait)
            return reported(options.on_decision, options.namespace, key, lambda: Attempts(
                connection(options.database), REQUESTS, None, None).once(
                options.namespace, key, described, "replay", None, options.lease, False, wait,
                body))

    # --- without it: `processing` committed first, the record after the view's commits ----

    def _run_apart(self, request: HttpRequest, options: Options, key: str, described: Any,
                   together: bool) -> HttpResponseBase:
        """``processing`` committed first; then, ``together`` (``ATOMIC_REQUESTS`` with
        ``commit_processing_first``), the view's writes and the record in one transaction,
        else the record after the view's own commits."""
        database = options.database
        try:
            with timed_check(options.namespace):
                start = self._begin_apart(options, key, described, request.body)
        except Exception as error:
            decided = refusal(error)
            if decided is None:
                raise
            return _response(decided.answer())
        if start.replayed:
            return _response(replay(start))
        try:
            with transaction.atomic(using=database) if together else nullcontext():
                response = self.get_response(request)
                recorded = recorded_response(response.status_code, _content(response),
                                             response.items())
                if not recorded_as(response.status_code, options.stored_statuses):
                    # a failure, or not recorded: committed `processing` can only end failed
                    raise _Failed(recorded)
                with transaction.atomic(using=database):  # a savepoint when together
                    self._finish(options, key, start.attempt, True, recorded)
        except _Failed as failed:  # the view's writes went with the block, when together
            self._fail(options, key, start.attempt, failed.response)
        except StaleAttempt:
            return _response(RESOLVED_MEANWHILE.answer())
        except Exception as error:
            try:
                self._fail(options, key, start.attempt,
                           {"status": 500, "error": error_report(error)})
            except Exception as failure:
                error.add_note(f"hivenet: the failed attempt was not recorded: {failure!r}")
            raise
        return _fresh(response)

    def _begin_apart(self, options: Options, key: str, described: Any,
                     body: bytes) -> AttemptStart:
        wait = options.wait
        if wait is None:
            with transaction.atomic(using=options.database):  # `processing`, committed first
                return RequestRepository(connection(options.database),
                                         on_decision=options.on_decision).begin(
                    options.namespace, key, described, lease=options.lease, nowait=True,
                    raw_request=body)
        # Each look, and the registration, in a transaction of its own: while waiting for
        # the first attempt's outcome, no transaction is open.
        return reported(options.on_decision, options.namespace, key, lambda: waited(
            lambda: self._listener(options), options.namespace, key, as_timedelta(wait),
            lambda left: self._begin_once(options, key, described, body, left),
            lambda: self._watch(options, key), lambda: None))

    def _begin_once(self, options: Options, key: str, described: Any, body: bytes,
                    wait: timedelta) -> AttemptStart:
        with transaction.atomic(using=options.database):
            return Attempts(connection(options.database), REQUESTS, None, None).once(
                options.namespace, key, described, "replay", None, options.lease, False, wait,
                body)

    def _watch(self, options: Options, key: str) -> None:
        with transaction.atomic(using=options.database):
            Attempts(connection(options.database), REQUESTS, None, None).watch(
                options.namespace, key)

    def _listener(self, options: Options) -> FinishListener:
        if options.listen_url is not None:
            return FinishListener.shared(options.listen_url)
        return FinishListener.shared(libpq_url(database_url(options.database)),
                                     direct_only=True)

    def _finish(self, options: Options, key: str, attempt: int, succeeded: bool,
                response: Any) -> None:
        RequestRepository(connection(options.database)).finish(
            options.namespace, key, attempt, succeeded, response)

    def _fail(self, options: Options, key: str, attempt: int, response: Any) -> None:
        # an operator resolved it meanwhile: their record stands
        with suppress(StaleAttempt), transaction.atomic(using=options.database):
            self._finish(options, key, attempt, False, response)

    def _ensure_retention(self, options: Options) -> None:
        if options.retention is None or options.namespace in self._retention_set:
            return
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
        self._retention_set.add(options.namespace)


_UNSEEN = object()


class _Failed(Exception):
    """The view's response ends its attempt as failed: its writes roll back with the block."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__(response["status"])
        self.response = response


def _resolved(request: HttpRequest) -> ResolverMatch | None:
    try:
        return resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return None


def _fresh(response: HttpResponseBase) -> HttpResponseBase:
    """A response of a view that ran under its key: ``Idempotent-Replayed: false``."""
    name, value = FRESH
    response.headers[name.decode("latin-1")] = value.decode("latin-1")
    return response


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
