"""hivenet_db.django against a real PostgreSQL: the repositories on Django's connection, a
serial allocated in the INSERT, IdempotencyMiddleware under WSGI (Django's test client, and a
threaded WSGI server with concurrent duplicates) and ASGI, the schema's migration both ways
(Django's ``migrate`` and ``hivenet-db migrate``), the checks and the commands.

Django is configured once for the session here (tests/django_site is the app under test);
each test points the ``default`` database at its own copy of the template."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from io import StringIO
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
import pytest
from psycopg import sql

django = pytest.importorskip("django", reason="hivenet_db.django needs the extra [django]")

from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unset",
                               "ATOMIC_REQUESTS": True}},
        INSTALLED_APPS=["hivenet_db.django", "tests.django_site"],
        MIDDLEWARE=["hivenet_db.django.IdempotencyMiddleware"],
        ROOT_URLCONF="tests.django_site.urls",
        HIVENET={"IDEMPOTENCY": {"namespace": "http"}, "PREPARE": ["C0001 A01 01"]},
        REST_FRAMEWORK={"UNAUTHENTICATED_USER": None},  # without django.contrib.auth
        ALLOWED_HOSTS=["*"], SECRET_KEY="tests", USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField")
    django.setup()

from django.core.checks import run_checks  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection as django_connection  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, override_settings  # noqa: E402

from hivenet_db import (  # noqa: E402
    ClaimRepository,
    DuplicateClaim,
    RequestRepository,
    SerialRepository,
    StaleAttempt,
    StepRepository,
    parse_serial,
)
from hivenet_db.django import (  # noqa: E402
    NextInterfaceSerial,
    NextSerial,
    NextSystemSerial,
    connection,
    idempotent,
)
from hivenet_db.http_idempotency import EVERY_STATUS  # noqa: E402
from hivenet_db.tools import migrate  # noqa: E402
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres  # noqa: E402
from tests.django_site import views  # noqa: E402
from tests.django_site.models import Order  # noqa: E402
from tests.helpers import eventually, scalar  # noqa: E402

KEY = {"Idempotency-Key": '"order-1"'}
JSON = "application/json"
BIN = Path(sys.executable).parent


def use(url: str) -> None:
    """Point Django's ``default`` database at ``url`` (every thread's connection reads the
    same settings dict); connections of the previous database are closed."""
    connections.close_all()
    parts = urllib.parse.urlsplit(url)
    connections["default"].settings_dict.update(
        NAME=parts.path.lstrip("/"), USER=urllib.parse.unquote(parts.username or ""),
        PASSWORD=urllib.parse.unquote(parts.password or ""), HOST=parts.hostname,
        PORT=str(parts.port))


@pytest.fixture
def owner(hivenet_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def app_db(hivenet_url: str, hivenet_app_url: str, owner: psycopg.Connection) -> Iterator[str]:
    """Django on the test's database as the application login (granted only hivenet_app),
    after the owner created the app's table; the views' counters and gate reset."""
    use(hivenet_url)
    with django_connection.schema_editor() as editor:
        editor.create_model(Order)
    owner.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON django_site_order TO hivenet_app")
    owner.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO hivenet_app")
    use(hivenet_app_url)
    views.RUNS["count"] = 0
    views.GATE.set()
    views.ENTERED.clear()
    try:
        yield hivenet_app_url
    finally:
        views.GATE.set()
        connections.close_all()


def orders(owner: psycopg.Connection) -> int:
    return int(scalar(owner, "SELECT count(*) FROM django_site_order"))


def states(owner: psycopg.Connection) -> list[str]:
    return [row[0] for row in owner.execute(
        "SELECT state::text FROM hivenet.request_attempt WHERE namespace = 'http' "
        "ORDER BY key, attempt")]


# --- the repositories on Django's connection ------------------------------------------------

def test_repositories_commit_with_the_atomic_block(app_db: str,
                                                   owner: psycopg.Connection) -> None:
    with transaction.atomic():
        serial = SerialRepository(connection()).next_system("C0001", "A01", "01")
        with StepRepository(connection()).step(serial, {"amount": 100}) as run:
            Order.objects.create(sku="debit")
            run.response = {"debited": 100}
    assert orders(owner) == 1
    with transaction.atomic():  # durable: on a connection of its own, as Django's login
        durable = SerialRepository(connection()).next_durable("unified", system="C0001",
                                                              module="A01", instance="01")
        transaction.set_rollback(True)
    assert parse_serial(durable).format == "unified"
    with transaction.atomic():  # replayed: the response as a JSON value, not Django's text
        assert StepRepository(connection()).begin(serial, {"amount": 100}).response == \
            {"debited": 100}


def test_repositories_roll_back_with_the_atomic_block(app_db: str,
                                                      owner: psycopg.Connection) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        RequestRepository(connection()).begin("payments", "pay-1", {"amount": 5})
        Order.objects.create(sku="debit")
        raise RuntimeError("after the effect")
    assert orders(owner) == 0
    assert scalar(owner, "SELECT count(*) FROM hivenet.request_attempt") == 0


def test_a_library_error_caught_in_a_savepoint_leaves_the_transaction_usable(
        app_db: str, owner: psycopg.Connection) -> None:
    with transaction.atomic():
        ClaimRepository(connection()).claim("coupons", "WELCOME")
        with pytest.raises(DuplicateClaim), transaction.atomic():
            ClaimRepository(connection()).claim("coupons", "WELCOME")
        Order.objects.create(sku="tea")
    assert orders(owner) == 1
    assert scalar(owner, "SELECT count(*) FROM hivenet.claim_record") == 1


def test_a_field_default_allocates_the_serial_in_the_insert(app_db: str,
                                                            owner: psycopg.Connection) -> None:
    with CaptureQueriesContext(django_connection) as queries, transaction.atomic():
        order = Order.objects.create(sku="tea")
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1 and "RETURNING" in inserts[0], queries.captured_queries
    assert parse_serial(order.serial).system == "C0001"
    assert scalar(owner, "SELECT serial FROM django_site_order") == order.serial
    default = scalar(owner, "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                            "WHERE adrelid = 'django_site_order'::regclass")
    assert "hivenet.next_unified_serial('C0001'" in default


@pytest.mark.parametrize(("expression", "kind"), [
    (NextSerial("unified", system="C0001", module="A01", instance="01"), "unified"),
    (NextSystemSerial("C0001", "A01", "01"), "system"),
    (NextInterfaceSerial("C0001", "A01", "01", "C0002"), "interface"),
])
def test_each_serial_expression_allocates_its_kind(app_db: str, expression: Any,
                                                   kind: str) -> None:
    with transaction.atomic():
        order = Order.objects.create(sku="tea", serial=expression)
        order.refresh_from_db()
    assert parse_serial(order.serial).format == kind


# --- the middleware, through Django's test client ---------------------------------------------

def test_an_unknown_setting_is_refused_when_the_middleware_loads(app_db: str) -> None:
    with override_settings(HIVENET={"IDEMPOTENCY": {"namespaces": "shop"}}), \
            pytest.raises(ImproperlyConfigured, match="unknown keys \\['namespaces'\\]"):
        Client().post("/orders", b"{}", content_type=JSON, headers=KEY)


def test_retention_is_set_once_and_a_login_that_may_not_set_it_fails_loudly(
        app_db: str, hivenet_url: str, owner: psycopg.Connection) -> None:
    week = {"IDEMPOTENCY": {"retention": timedelta(days=7)}}
    with override_settings(HIVENET=week):
        refused = Client(raise_request_exception=False).post(
            "/orders", b"{}", content_type=JSON, headers=KEY)
        assert refused.status_code == 500 and views.RUNS["count"] == 0  # hivenet_app may not
        use(hivenet_url)  # the owner may
        assert Client().post("/orders", b"{}", content_type=JSON, headers=KEY).status_code \
            == 201
    assert scalar(owner, "SELECT retention FROM hivenet.request_namespace "
                         "WHERE namespace = 'http'") == timedelta(days=7)


def test_missing_or_malformed_key_is_400_and_safe_methods_pass(app_db: str) -> None:
    client = Client()
    missing = client.post("/orders", b"{}", content_type=JSON)
    assert missing.status_code == 400
    assert missing.json()["idempotency"] == "missing"
    assert missing["Content-Type"] == "application/problem+json"
    bad = client.post("/orders", b"{}", content_type=JSON,
                      HTTP_IDEMPOTENCY_KEY='"a", "b"')
    assert bad.status_code == 400 and bad.json()["idempotency"] == "invalid"
    assert views.RUNS["count"] == 0
    assert client.get("/orders").status_code == 201  # not covered: the view runs, keyless
    assert views.RUNS["count"] == 1


def test_finished_request_is_replayed_byte_for_byte(app_db: str,
                                                    owner: psycopg.Connection) -> None:
    client = Client()
    first = client.post("/orders", b'{"sku": "tea"}', content_type=JSON, headers=KEY)
    again = client.post("/orders", b'{"sku": "tea"}', content_type=JSON, headers=KEY)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Location"] == first["Location"]
    assert again["Content-Type"] == first["Content-Type"] == "application/json"
    assert again["Idempotent-Replayed"] == "true" and first["Idempotent-Replayed"] == "false"
    assert "X-Trace" not in again  # not a replayed header
    assert views.RUNS["count"] == 1 and orders(owner) == 1
    assert states(owner) == ["success"]


def test_a_django_rest_framework_view_is_replayed_as_it_rendered(
        app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    first = client.post("/api/orders", b'{"sku": "tea"}', content_type=JSON, headers=KEY)
    again = client.post("/api/orders", b'{"sku": "tea"}', content_type=JSON, headers=KEY)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content and first.json()["serial"]
    assert again["Content-Type"] == first["Content-Type"] == "application/json"
    assert again["Location"] == first["Location"]
    assert again["Idempotent-Replayed"] == "true"
    assert views.RUNS["count"] == 1 and orders(owner) == 1


def test_same_key_with_another_body_is_422(app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    client.post("/orders", b'{"sku": "tea"}', content_type=JSON, headers=KEY)
    other = client.post("/orders", b'{"sku": "gin"}', content_type=JSON, headers=KEY)
    assert other.status_code == 422 and other.json()["idempotency"] == "mismatch"
    assert views.RUNS["count"] == 1 and orders(owner) == 1


@pytest.mark.parametrize("path", ["/unavailable", "/crash"])
def test_5xx_or_exception_rolls_the_effect_back_and_the_retry_runs(
        app_db: str, owner: psycopg.Connection, path: str) -> None:
    client = Client(raise_request_exception=False)
    assert client.post(path, b"{}", content_type=JSON, headers=KEY).status_code >= 500
    assert orders(owner) == 0  # ATOMIC_REQUESTS: the insert went with the failed attempt
    assert states(owner) == ["failed"]
    assert client.post(path, b"{}", content_type=JSON, headers=KEY).status_code >= 500
    assert views.RUNS["count"] == 2 and states(owner) == ["failed", "failed"]


@pytest.mark.parametrize("path", ["/unavailable", "/crash"])
def test_a_final_failure_is_replayed_and_the_view_does_not_run_again(
        app_db: str, owner: psycopg.Connection, path: str) -> None:
    """In a namespace whose failures are final (set_namespace_policy), the recorded 5xx is
    replayed byte for byte: also a raising view's, which Django turned into its 500 page
    before the middleware saw it."""
    owner.execute("SELECT hivenet.set_namespace_policy('http', on_failure => 'final')")
    client = Client(raise_request_exception=False)
    first = client.post(path, b"{}", content_type=JSON, headers=KEY)
    again = client.post(path, b"{}", content_type=JSON, headers=KEY)
    assert again.status_code == first.status_code >= 500
    assert again.headers["Idempotent-Replayed"] == "true" and again.content == first.content
    assert views.RUNS["count"] == 1 and states(owner) == ["failed"]


def test_without_atomic_requests_the_record_follows_the_committed_effect(
        app_db: str, owner: psycopg.Connection) -> None:
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    try:
        assert Client(raise_request_exception=False).post(
            "/unavailable", b"{}", content_type=JSON, headers=KEY).status_code == 503
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    assert orders(owner) == 1  # the view's insert committed on its own
    assert states(owner) == ["failed"]


def test_a_non_atomic_view_keeps_its_own_transactions(app_db: str,
                                                      owner: psycopg.Connection) -> None:
    assert Client().post("/unavailable-on-its-own", b"{}", content_type=JSON,
                         headers=KEY).status_code == 503
    assert orders(owner) == 1  # marked non_atomic_requests: not in the middleware's either
    assert states(owner) == ["failed"]


def test_namespace_and_scope_come_from_settings(app_db: str, owner: psycopg.Connection) -> None:
    with override_settings(HIVENET={"IDEMPOTENCY": {
            "namespace": "shop", "scope": lambda request: request.headers["X-Client"]}}):
        client = Client()
        for who in ("alice", "bob"):
            response = client.post("/orders", b"{}", content_type=JSON,
                                   headers={"X-Client": who, **KEY})
            assert response.status_code == 201
    keys = [row[0] for row in owner.execute(
        "SELECT key FROM hivenet.request_attempt WHERE namespace = 'shop' ORDER BY key")]
    assert keys == ["alice:order-1", "bob:order-1"]
    assert views.RUNS["count"] == 2


def test_on_decision_is_a_dotted_path_in_settings(app_db: str) -> None:
    from tests.django_site import decisions

    decisions.TOLD.clear()
    with override_settings(HIVENET={"IDEMPOTENCY": {
            "on_decision": "tests.django_site.decisions.record"}}):
        client = Client()
        assert client.post("/orders", b'{"sku": "tea"}', content_type=JSON,
                           headers=KEY).status_code == 201
        assert client.post("/orders", b'{"sku": "tea"}', content_type=JSON,
                           headers=KEY)["Idempotent-Replayed"] == "true"
        assert client.post("/orders", b'{"sku": "gin"}', content_type=JSON,
                           headers=KEY).status_code == 422
    assert decisions.TOLD == [("http", "order-1", "started", 1),
                              ("http", "order-1", "replayed", 1),
                              ("http", "order-1", "mismatch", None)]


def test_under_atomic_requests_an_attempt_in_flight_is_not_committed(
        app_db: str, hivenet_admin_url: str, owner: psycopg.Connection) -> None:
    """The attempt is begun in the request's transaction: while the view runs there is nothing
    for another session to see, resolve or find stuck; it commits with the view's writes."""
    views.GATE.clear()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_post_in_thread, "/orders")
        assert views.ENTERED.wait(10)
        assert states(owner) == []
        with psycopg.connect(hivenet_admin_url, autocommit=True) as admin, \
                pytest.raises(StaleAttempt, match="has no attempt 1"):
            RequestRepository(admin).resolve("http", "order-1", 1, True, "done by hand")
        views.GATE.set()
        status, _ = pending.result(timeout=30)
    assert status == 201 and orders(owner) == 1 and states(owner) == ["success"]


def test_operator_resolving_the_attempt_meanwhile_is_409_without_atomic_requests(
        app_db: str, hivenet_admin_url: str, owner: psycopg.Connection) -> None:
    """Without ATOMIC_REQUESTS `processing` is committed before the view: an operator may
    resolve it meanwhile, and the view's late response is not recorded (409 resolved)."""
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    views.GATE.clear()
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(_post_in_thread, "/orders")
            assert views.ENTERED.wait(10)
            with psycopg.connect(hivenet_admin_url, autocommit=True) as admin:
                RequestRepository(admin).resolve("http", "order-1", 1, True, "done by hand",
                                                 {"order": "by hand"})
            views.GATE.set()
            status, body = pending.result(timeout=30)
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    assert status == 409 and json.loads(body)["idempotency"] == "resolved"
    assert orders(owner) == 1  # the view's insert committed on its own
    assert states(owner) == ["success"]  # the operator's record stands


def test_commit_processing_first_leaves_a_crash_to_an_operator(
        app_db: str, hivenet_admin_url: str, owner: psycopg.Connection) -> None:
    """A view whose effects leave the database (commit_processing_first): `processing` is
    committed before it runs, so an operator sees it in flight and may resolve it; the view's
    writes and the record are still one transaction, refused when the operator came first."""
    views.GATE.clear()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_post_in_thread, "/provider")
        assert views.ENTERED.wait(10)
        assert states(owner) == ["processing"]
        with psycopg.connect(hivenet_admin_url, autocommit=True) as admin:
            RequestRepository(admin).resolve("http", "order-1", 1, True, "paid by hand",
                                             {"order": "by hand"})
        views.GATE.set()
        status, body = pending.result(timeout=30)
    assert status == 409 and json.loads(body)["idempotency"] == "resolved"
    assert orders(owner) == 0  # the view's insert went: the record it belonged to was refused
    with override_settings(HIVENET={"IDEMPOTENCY": {"commit_processing_first": True}}):
        refused = Client().post("/refused", b"{}", content_type=JSON,
                                headers={"Idempotency-Key": '"order-2"'})
    assert refused.status_code == 400 and orders(owner) == 0
    assert states(owner) == ["success", "failed"]  # committed `processing` ends failed


def test_the_connection_dying_between_effect_and_record_leaves_neither(
        app_db: str, owner: psycopg.Connection) -> None:
    views.GATE.clear()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_post_in_thread, "/orders")
        assert views.ENTERED.wait(10)
        killed = owner.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
            "current_database() AND usename = 'hivenet_test_app' AND state = "
            "'idle in transaction'").fetchall()
        assert killed == [(True,)]
        views.GATE.set()
        status, _ = pending.result(timeout=30)
    assert status == 500
    assert orders(owner) == 0 and states(owner) == []  # the attempt went with the effect
    retry, _ = _post_in_thread("/orders")
    assert retry == 201 and orders(owner) == 1


def _post_in_thread(path: str) -> tuple[int, bytes]:
    try:
        response = Client(raise_request_exception=False).post(
            path, b"{}", content_type=JSON, headers=KEY)
        return response.status_code, response.content
    finally:
        connections.close_all()


# --- concurrent duplicates on real servers ------------------------------------------------

class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 64  # every client connects at once


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _hold_then_release(send: Any, n: int) -> list[tuple[int, dict[str, str], bytes]]:
    """``n`` concurrent requests with one key while the first view is held after its insert:
    every other one is answered before the first is let go."""
    views.GATE.clear()
    with ThreadPoolExecutor(n) as pool:
        pending = [pool.submit(send) for _ in range(n)]
        assert views.ENTERED.wait(10)
        done = 0
        while done < n - 1:  # all but the held one answer at once
            done = sum(future.done() for future in pending)
            threading.Event().wait(0.02)
        views.GATE.set()
        return [future.result(timeout=30) for future in pending]


@contextmanager
def _threaded_server(hivenet: dict[str, Any] | None = None) -> Iterator[str]:
    """A threaded WSGI server of the Django site (a thread, a Django connection per request),
    its handler made under setting HIVENET ``hivenet`` when given (the handler reads it once);
    yields the URL of its orders view."""
    with override_settings(HIVENET=hivenet) if hivenet else nullcontext():
        server = make_server("127.0.0.1", 0, WSGIHandler(), server_class=_ThreadingWSGIServer,
                             handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/orders"
    finally:
        server.shutdown()
        server.server_close()


def _order(url: str) -> urllib.request.Request:
    """The one order every concurrent client sends, under one key."""
    return urllib.request.Request(url, b'{"sku": "tea"}', method="POST", headers={
        "Idempotency-Key": '"order-1"', "Content-Type": "application/json"})


def test_16_concurrent_duplicates_on_a_threaded_wsgi_server_run_the_view_once(
        app_db: str, owner: psycopg.Connection) -> None:
    def send() -> tuple[int, dict[str, str], bytes]:
        try:
            with urllib.request.urlopen(_order(url), timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    with _threaded_server() as url:
        answers = _hold_then_release(send, 16)
        replay = send()
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [201] + [409] * 15, statuses
    assert views.RUNS["count"] == 1 and orders(owner) == 1
    first = next(body for status, _, body in answers if status == 201)
    assert replay[0] == 201 and replay[2] == first
    assert replay[1]["idempotent-replayed"] == "true"


def test_16_concurrent_duplicates_under_asgi_run_the_view_once(
        app_db: str, owner: psycopg.Connection) -> None:
    httpx = pytest.importorskip("httpx")
    handler = ASGIHandler()

    async def scenario() -> list[tuple[int, bytes]]:
        transport = httpx.ASGITransport(app=handler)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            async def send() -> tuple[int, bytes]:
                response = await client.post("/orders", content=b'{"sku": "tea"}', headers={
                    "Idempotency-Key": '"order-1"', "Content-Type": "application/json"})
                return response.status_code, response.content

            views.GATE.clear()
            tasks = [asyncio.create_task(send()) for _ in range(16)]
            while sum(task.done() for task in tasks) < 15:
                await asyncio.sleep(0.02)
            views.GATE.set()
            answers = await asyncio.gather(*tasks)
            replay = await client.post("/orders", content=b'{"sku": "tea"}', headers={
                "Idempotency-Key": '"order-1"', "Content-Type": "application/json"})
            assert replay.headers["idempotent-replayed"] == "true"
            return [*answers, (replay.status_code, replay.content)]

    answers = asyncio.run(scenario())
    assert sorted(status for status, _ in answers[:16]) == [201] + [409] * 15
    assert answers[16] == next(a for a in answers[:16] if a[0] == 201)
    assert views.RUNS["count"] == 1 and orders(owner) == 1


# --- migrations both ways, checks, commands ---------------------------------------------------

@pytest.fixture
def empty_url(hivenet_server: EmbeddedPostgres) -> Iterator[str]:
    """An empty database (no schema hivenet) on the test server; Django pointed at it as the
    superuser, who may create the schema (the roles exist on the server already)."""
    name = f"django_empty_{threading.get_ident()}_{id(hivenet_server) % 1000}"
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = hivenet_server.url(name)
    use(url)
    try:
        yield url
    finally:
        connections.close_all()
        with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _hivenet_db_migrate(url: str) -> str:
    done = subprocess.run([str(BIN / "hivenet-db"), "migrate", "--url", url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _recorded_by_django() -> list[str]:
    with django_connection.cursor() as cursor:
        cursor.execute("SELECT name FROM django_migrations WHERE app = 'hivenet'")
        return [row[0] for row in cursor.fetchall()]


def test_django_migrate_installs_the_schema_and_hivenet_db_migrate_finds_it_done(
        empty_url: str) -> None:
    assert [m.id for m in run_checks(databases=["default"])] == ["hivenet.W002"]
    call_command("migrate", "hivenet", verbosity=0)
    assert migrate.status(empty_url).state is migrate.State.HEAD
    assert _recorded_by_django() == ["0001_schema"]
    assert run_checks(databases=["default"]) == []
    _hivenet_db_migrate(empty_url)  # nothing to do, no conflict
    assert migrate.status(empty_url).state is migrate.State.HEAD
    with transaction.atomic():  # the channel of HIVENET["PREPARE"], prepared by migrate
        assert SerialRepository(connection()).next_unified("C0001", "A01", "01").seq == 1


def test_hivenet_db_migrate_first_then_django_migrate_records_it(empty_url: str) -> None:
    _hivenet_db_migrate(empty_url)
    call_command("migrate", "hivenet", verbosity=0)  # upgrade finds head: nothing to do
    assert _recorded_by_django() == ["0001_schema"]
    assert migrate.status(empty_url).state is migrate.State.HEAD
    call_command("migrate", "hivenet", "zero", verbosity=0)  # the schema stays: not Django's
    assert migrate.status(empty_url).state is migrate.State.HEAD


def test_checks_name_what_is_missing(app_db: str, hivenet_url: str, owner: psycopg.Connection,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_checks(databases=["default"]) == []  # the app login, granted hivenet_app
    owner.execute("CREATE ROLE django_no_grant LOGIN PASSWORD 'x'")
    try:
        parts = urllib.parse.urlsplit(hivenet_url)
        use(parts._replace(netloc=f"django_no_grant:x@{parts.hostname}:{parts.port}").geturl())
        messages = run_checks(databases=["default"])
        assert [m.id for m in messages] == ["hivenet.W003"]
        assert "django_no_grant is not granted hivenet_app" in messages[0].msg
        monkeypatch.setattr("hivenet_db.django.checks.ROLES", ("hivenet_app", "hivenet_absent"))
        assert [m.id for m in run_checks(databases=["default"])] == ["hivenet.W001",
                                                                      "hivenet.W003"]
    finally:
        connections.close_all()
        owner.execute("DROP ROLE django_no_grant")


def test_management_commands_maintain_and_metrics(app_db: str, hivenet_admin_url: str) -> None:
    use(hivenet_admin_url)
    out = StringIO()
    call_command("hivenet_maintain", stdout=out)
    assert out.getvalue().startswith("maintain: done at ")
    out = StringIO()
    call_command("hivenet_metrics", stdout=out)
    assert "# TYPE hivenet_" in out.getvalue()
    out = StringIO()
    call_command("hivenet_metrics", "--json", stdout=out)
    assert {metric["name"] for metric in json.loads(out.getvalue())}


def test_the_fingerprint_option_and_the_key_rules(app_db: str, owner: psycopg.Connection) -> None:
    """HIVENET["IDEMPOTENCY"]["fingerprint"] = "json": the same JSON written otherwise is
    replayed, a body that is not JSON is 400; a key breaking the namespace's rules is 400
    naming the rule; an option not understood is refused when the middleware loads."""
    with override_settings(HIVENET={"IDEMPOTENCY": {"fingerprint": "json"}}):
        client = Client()
        assert client.post("/orders", b'{"sku": "tea", "n": 2}', content_type=JSON,
                           headers=KEY).status_code == 201
        again = client.post("/orders", b'{"n":2.0,"sku":"tea"}', content_type=JSON,
                            headers=KEY)
        assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
        not_json = client.post("/orders", b"sku=tea", content_type=JSON,
                               headers={"Idempotency-Key": '"other"'})
        assert not_json.status_code == 400 and not_json.json()["idempotency"] == "invalid"
    assert views.RUNS["count"] == 1 and orders(owner) == 1
    owner.execute("SELECT hivenet.set_namespace_policy('http', key_min_length => 32)")
    short = Client().post("/orders", b"{}", content_type=JSON,
                          headers={"Idempotency-Key": '"short"'})
    assert short.status_code == 400 and "key_min_length 32" in short.json()["detail"]
    with override_settings(HIVENET={"IDEMPOTENCY": {"fingerprint": "sha1"}}), \
            pytest.raises(ImproperlyConfigured, match="fingerprint 'sha1'"):
        Client().post("/orders", b"{}", content_type=JSON, headers=KEY)


def test_with_wait_concurrent_duplicates_get_the_first_response(
        app_db: str, owner: psycopg.Connection) -> None:
    """``wait``: the duplicates of a request in flight wait in the database for its
    transaction (each thread with its own Django connection) and replay its response."""
    def send() -> tuple[int, dict[str, str], bytes]:
        with urllib.request.urlopen(_order(url), timeout=30) as response:
            return response.status, _lower(response.headers), response.read()

    views.GATE.clear()
    with _threaded_server({"IDEMPOTENCY": {"wait": 30}}) as url, ThreadPoolExecutor(4) as pool:
        try:
            pending = [pool.submit(send) for _ in range(4)]
            assert views.ENTERED.wait(10)
            assert eventually(lambda: scalar(
                owner, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                       "current_database() AND wait_event_type = 'Lock'") >= 3, 10), \
                "the duplicates never waited"
            views.GATE.set()
            answers = [future.result(timeout=30) for future in pending]
        finally:
            views.GATE.set()
    assert [status for status, _, _ in answers] == [201] * 4
    assert len({body for _, _, body in answers}) == 1
    assert sorted(headers.get("idempotent-replayed", "") for _, headers, _ in answers) == [
        "false", "true", "true", "true"]
    assert views.RUNS["count"] == 1 and orders(owner) == 1


def test_the_body_is_kept_as_sent_where_the_namespace_keeps_clients_bytes(
        app_db: str, owner: psycopg.Connection) -> None:
    """The middleware passes the body; the database keeps it beside the fingerprint of the
    parsed document, which a repeat written otherwise matches."""
    owner.execute("SELECT hivenet.set_namespace_policy('http', keep_raw_request => true)")
    sent = b'{"sku": "tea",  "qty": 1}'
    with override_settings(HIVENET={"IDEMPOTENCY": {"fingerprint": "json"}}):
        client = Client()
        first = client.post("/orders", sent, content_type=JSON, headers=KEY)
        again = client.post("/orders", b'{"qty":1.0,"sku":"tea"}', content_type=JSON,
                            headers=KEY)
    assert first.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert owner.execute("SELECT raw_request FROM hivenet.raw_requests "
                         "WHERE namespace = 'http'").fetchall() == [(sent,)]


# --- what is recorded: a 4xx binds no key; stored_statuses ---------------------------------

def test_a_serializer_400_binds_no_key_and_the_corrected_request_runs(
        app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    invalid = client.post("/api/validated", b"{}", content_type=JSON, headers=KEY)
    assert invalid.status_code == 400 and "sku" in invalid.json()
    assert invalid["Idempotent-Replayed"] == "false"
    assert states(owner) == []  # nothing recorded, nothing left processing
    corrected = client.post("/api/validated", b'{"sku": "tea"}', content_type=JSON,
                            headers=KEY)
    assert corrected.status_code == 201 and corrected["Idempotent-Replayed"] == "false"
    again = client.post("/api/validated", b'{"sku": "tea"}', content_type=JSON, headers=KEY)
    assert again["Idempotent-Replayed"] == "true" and again.content == corrected.content
    assert views.RUNS["count"] == 1 and orders(owner) == 1 and states(owner) == ["success"]


def test_a_4xx_rolls_back_what_the_view_wrote(app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    assert client.post("/refused", b"{}", content_type=JSON, headers=KEY).status_code == 400
    assert client.post("/refused", b"{}", content_type=JSON, headers=KEY).status_code == 400
    assert views.RUNS["count"] == 2  # it ran again: nothing bound the key
    assert orders(owner) == 0 and states(owner) == []


def test_stored_statuses_with_every_status_records_a_4xx_as_the_outcome(
        app_db: str, owner: psycopg.Connection) -> None:
    with override_settings(HIVENET={"IDEMPOTENCY": {"stored_statuses": EVERY_STATUS}}):
        client = Client()
        first = client.post("/api/validated", b"{}", content_type=JSON, headers=KEY)
        again = client.post("/api/validated", b"{}", content_type=JSON, headers=KEY)
        corrected = client.post("/api/validated", b'{"sku": "tea"}', content_type=JSON,
                                headers=KEY)
    assert first.status_code == again.status_code == 400
    assert again["Idempotent-Replayed"] == "true" and again.content == first.content
    assert corrected.status_code == 422  # the key is bound to the first request
    assert states(owner) == ["success"] and orders(owner) == 0


def test_stored_statuses_without_5xx_records_no_failure(app_db: str,
                                                        owner: psycopg.Connection) -> None:
    with override_settings(HIVENET={"IDEMPOTENCY": {"stored_statuses": range(200, 300)}}):
        client = Client()
        assert client.post("/unavailable", b"{}", content_type=JSON,
                           headers=KEY).status_code == 503
    assert orders(owner) == 0 and states(owner) == []
    with override_settings(HIVENET={"IDEMPOTENCY": {"stored_statuses": [200, 600]}}), \
            pytest.raises(ImproperlyConfigured, match="600 is not an HTTP status"):
        Client().post("/orders", b"{}", content_type=JSON, headers=KEY)


def test_without_atomic_requests_a_4xx_ends_the_attempt_as_failed(
        app_db: str, owner: psycopg.Connection) -> None:
    """`processing` was committed before the view: it cannot vanish, it ends failed, so the
    same request runs again (its writes had committed on their own)."""
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    try:
        client = Client()
        assert client.post("/refused", b"{}", content_type=JSON, headers=KEY).status_code == 400
        assert client.post("/refused", b"{}", content_type=JSON, headers=KEY).status_code == 400
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    assert views.RUNS["count"] == 2 and orders(owner) == 2
    assert states(owner) == ["failed", "failed"]


# --- per view: @idempotent, @idempotency_exempt -------------------------------------------

def test_an_exempt_view_runs_without_a_key(app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    assert client.post("/exempt", b"{}", content_type=JSON).status_code == 201
    twice = client.post("/exempt", b"{}", content_type=JSON, headers=KEY)
    assert twice.status_code == 201 and "Idempotent-Replayed" not in twice
    assert orders(owner) == 2
    assert scalar(owner, "SELECT count(*) FROM hivenet.request_attempt") == 0


def test_a_decorated_view_has_its_own_options(app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    assert client.post("/payments", b'{"sku": "tea"}', content_type=JSON).status_code == 201
    first = client.post("/payments", b'{"sku": "tea", "n": 1}', content_type=JSON,
                        headers=KEY)
    again = client.post("/payments", b'{"n": 1.0, "sku": "tea"}', content_type=JSON,
                        headers=KEY)  # the same JSON: fingerprint "json"
    assert again["Idempotent-Replayed"] == "true" and again.content == first.content
    assert views.RUNS["count"] == 2
    assert owner.execute("SELECT namespace, key FROM hivenet.request_attempt").fetchall() == [
        ("payments", "order-1")]


def test_with_every_view_false_only_decorated_views_are_covered(
        app_db: str, owner: psycopg.Connection) -> None:
    with override_settings(HIVENET={"IDEMPOTENCY": {"every_view": False}}):
        client = Client()
        assert client.post("/orders", b"{}", content_type=JSON).status_code == 201
        assert client.post("/payments", b"{}", content_type=JSON, headers=KEY)[
            "Idempotent-Replayed"] == "false"
        assert client.post("/api/viewset/", b"{}", content_type=JSON).status_code == 400
    assert views.RUNS["count"] == 2


def test_viewset_actions_are_covered_or_exempt_by_their_decorators(
        app_db: str, owner: psycopg.Connection) -> None:
    client = Client()
    missing = client.post("/api/viewset/", b"{}", content_type=JSON)
    assert missing.status_code == 400 and missing.json()["idempotency"] == "missing"
    first = client.post("/api/viewset/", b"{}", content_type=JSON, headers=KEY)
    again = client.post("/api/viewset/", b"{}", content_type=JSON, headers=KEY)
    assert first.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert client.post("/api/viewset/note/", b"{}", content_type=JSON).status_code == 201
    assert views.RUNS["count"] == 2
    assert owner.execute("SELECT namespace FROM hivenet.request_attempt").fetchall() == [
        ("viewset",)]


def test_the_guide_quotes_the_test_site() -> None:
    """The decorators' example of docs/guides/django.md is an excerpt of the views the tests
    above run (tests/django_site/views.py)."""
    guide = (Path(__file__).parent.parent / "docs" / "guides" / "django.md").read_text()
    block = guide[guide.index("    @idempotency_exempt\n"):guide.index("\nThey mark the view")]
    excerpt = textwrap.dedent(block)
    assert "@idempotent(namespace=\"payments\"" in excerpt
    assert excerpt in (Path(views.__file__)).read_text(), excerpt


def test_a_fingerprint_not_understood_fails_at_decoration() -> None:
    with pytest.raises(ValueError, match="fingerprint 'sha1'"):
        idempotent(fingerprint="sha1")


# --- the latency of the check -------------------------------------------------------------

def test_each_check_is_observed_in_the_histogram(app_db: str) -> None:
    from prometheus_client import REGISTRY

    def count(namespace: str) -> float:
        return REGISTRY.get_sample_value("hivenet_request_check_seconds_count",
                                         {"namespace": namespace}) or 0.0

    before = count("http"), count("payments")
    client = Client()
    client.post("/orders", b"{}", content_type=JSON, headers=KEY)  # started
    client.post("/orders", b"{}", content_type=JSON, headers=KEY)  # replayed
    client.post("/orders", b'{"sku": "gin"}', content_type=JSON, headers=KEY)  # 422
    client.post("/payments", b"{}", content_type=JSON, headers=KEY)
    assert (count("http"), count("payments")) == (before[0] + 3, before[1] + 1)
    assert REGISTRY.get_sample_value("hivenet_request_check_seconds_bucket",
                                     {"namespace": "http", "le": "+Inf"}) == before[0] + 3


# An app whose label sorts before "hivenet", with a column defaulting to a serial and no
# dependency on ("hivenet", "0001_schema"): Django's plan runs its migration first.
ACCOUNTS_MIGRATION = '''
from django.db import migrations, models
import hivenet_db.django.fields

class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [migrations.CreateModel(name="Account", fields=[
        ("id", models.BigAutoField(primary_key=True)),
        ("serial", models.CharField(max_length=40, db_default=
            hivenet_db.django.fields.NextUnifiedSerial("C0001", "A01", "07")))])]
'''
ACCOUNTS_SETTINGS = '''
import os
from urllib.parse import urlsplit
_url = urlsplit(os.environ["ACCOUNTS_DATABASE_URL"])
SECRET_KEY = "tests"
USE_TZ = True
INSTALLED_APPS = ["hivenet_db.django", "accounts"]
HIVENET = {"PREPARE": ["C0001 A01 07"]}
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql",
    "NAME": _url.path.lstrip("/"), "USER": _url.username, "PASSWORD": _url.password or "",
    "HOST": _url.hostname, "PORT": str(_url.port)}}
'''


def test_a_migration_needs_no_dependency_on_the_schema_and_the_scopes_are_prepared(
        empty_url: str, tmp_path: Path) -> None:
    """`manage.py migrate` on an empty database: the plan runs the app's migration before
    hivenet's, yet the schema is there when it runs; then HIVENET["PREPARE"]'s channel counts
    from 1."""
    (tmp_path / "accounts" / "migrations").mkdir(parents=True)
    for name in ("accounts/__init__.py", "accounts/migrations/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "accounts" / "migrations" / "0001_initial.py").write_text(ACCOUNTS_MIGRATION)
    (tmp_path / "accounts_settings.py").write_text(ACCOUNTS_SETTINGS)

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "django", *args, "--settings", "accounts_settings"],
            cwd=tmp_path, text=True, capture_output=True, timeout=120,
            env={**os.environ, "ACCOUNTS_DATABASE_URL": empty_url,
                 "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
        assert done.returncode == 0, done.stderr
        return done.stdout

    plan = manage("migrate", "--plan")
    assert plan.index("accounts.0001_initial") < plan.index("hivenet.0001_schema"), plan
    manage("migrate", "--verbosity", "0")
    with psycopg.connect(empty_url, autocommit=True) as conn:
        serial = scalar(conn, "INSERT INTO accounts_account DEFAULT VALUES RETURNING serial")
    assert serial.startswith("C0001A0107") and serial.endswith("0000000001")
    assert _recorded_by_django() == ["0001_schema"]
