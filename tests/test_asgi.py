"""IdempotencyMiddleware (hivenet_db.asgi) against a real PostgreSQL, through httpx's ASGI
transport: every status, byte-for-byte replay, concurrency, both transaction shapes, and a
server that dies between begin and finish.

The middleware's engine is the application login's (``hivenet_app_url``, granted only
hivenet_app), as in production; the owner's URL (``hivenet_url``) only for what an operator or
administrator does: creating the handlers' table and its grants, setting a namespace's policy,
resolving an attempt, reading ``hivenet.request_attempt``."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Annotated, Any

import psycopg
import pytest

pytest.importorskip("starlette", reason="the middleware needs the extra hivenet-db[asgi]")
pytest.importorskip("httpx", reason="the tests need httpx (extra test)")
pytest.importorskip("greenlet", reason="async SQLAlchemy needs the extra hivenet-db[async]")
pytest.importorskip("fastapi", reason="the FastAPI case needs fastapi (extra test)")

import httpx
from fastapi import Depends, FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from hivenet_db.asgi import (
    IdempotencyMiddleware,
    fingerprint,
    idempotency_connection,
    parse_key,
    recorded_response,
)
from hivenet_db.http_idempotency import EVERY_STATUS
from hivenet_db.urls import sqlalchemy_url
from tests.helpers import scalar

Handler = Callable[[Request], Awaitable[Response]]


class Calls:
    """How often the handler ran, and a gate it can wait at."""

    def __init__(self) -> None:
        self.count = 0
        # waited for with a timeout: a handler that raised before it entered must fail the test
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()


def make_app(engine: AsyncEngine, handler: Handler, **options: Any) -> Starlette:
    app = Starlette(routes=[Route("/orders", handler, methods=["GET", "POST", "PATCH", "PUT"]),
                            Route("/other", handler, methods=["POST"])])
    app.add_middleware(IdempotencyMiddleware, engine=engine, **options)
    return app


def client(app: Starlette) -> httpx.AsyncClient:
    # raise_app_exceptions=False: a raising handler gives the client Starlette's 500
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://test")


def run(url: str, scenario: Callable[[AsyncEngine], Awaitable[None]]) -> None:
    async def main() -> None:
        engine = create_async_engine(sqlalchemy_url(url))
        try:
            await scenario(engine)
        finally:
            await engine.dispose()

    asyncio.run(main())


def created(calls: Calls) -> Handler:
    """A handler creating order n (n = the how-many-th run), answering a body whose bytes a
    re-serialisation would change, with a location, a cookie and a date."""

    async def handler(request: Request) -> Response:
        calls.count += 1
        calls.entered.set()
        await calls.release.wait()
        body = await request.body()
        content = b'{"order": %d,  "echo": %s, "note": "\\u00e9t\xc3\xa9"}' % (
            calls.count, json.dumps(body.decode()).encode())
        return Response(content, status_code=201, media_type="application/json",
                        headers={"Location": f"/orders/{calls.count}",
                                 "Set-Cookie": "session=secret", "X-Run": str(calls.count)})

    return handler


def state_of(url: str, namespace: str, key: str) -> list[tuple[int, str]]:
    """The attempts of a key: (attempt, state), oldest first (read as the owner: no
    application role may read hivenet.request_attempt)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [(row[0], str(row[1])) for row in conn.execute(
            "SELECT attempt, state::text FROM hivenet.request_attempt "
            "WHERE namespace = %s AND key = %s ORDER BY attempt", (namespace, key))]


KEY = {"Idempotency-Key": '"8e03978e-40d5-43e8-bc93-6894a57f9324"'}


# --- the key ---------------------------------------------------------------------------------

def test_parse_key_sf_string_and_bare_token() -> None:
    assert parse_key(b'"abc"') == "abc"
    assert parse_key(b' "a \\"b\\" \\\\c" ') == 'a "b" \\c'
    assert parse_key(b"8e03978e-40d5") == "8e03978e-40d5"
    assert parse_key(b'""') == ""
    for bad in (b'"abc', b'"a"b"', b'"a\\nb"', b'"caf\xc3\xa9"', b"a b", b'a"b', b"\x01"):
        with pytest.raises(ValueError):
            parse_key(bad)


def test_missing_empty_long_or_malformed_key_is_400(hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            cases: list[tuple[list[tuple[str, str]], str]] = [
                ([], "missing"),
                ([("Idempotency-Key", '""')], "invalid"),
                ([("Idempotency-Key", "")], "invalid"),
                ([("Idempotency-Key", '"' + "k" * 256 + '"')], "invalid"),
                ([("Idempotency-Key", '"unterminated')], "invalid"),
                ([("Idempotency-Key", '"a"'), ("Idempotency-Key", '"b"')], "invalid"),
            ]
            for headers, kind in cases:
                answer = await http.post("/orders", content=b"{}", headers=headers)
                assert answer.status_code == 400, headers
                assert answer.headers["content-type"] == "application/problem+json"
                document = answer.json()
                assert document["status"] == 400 and document["idempotency"] == kind
                assert document["title"] == "Bad Request" and document["detail"]
            # 255 characters is the longest key
            longest = await http.post("/orders", headers={"Idempotency-Key": "k" * 255})
            assert longest.status_code == 201

    run(hivenet_app_url, scenario)
    assert calls.count == 1


def test_not_required_or_not_covered_runs_the_handler_each_time(hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls), required=False)) as http:
            assert (await http.post("/orders")).status_code == 201
            assert (await http.post("/orders")).status_code == 201
            assert (await http.put("/orders", headers=KEY)).status_code == 201  # not covered
            assert (await http.put("/orders", headers=KEY)).status_code == 201
            covered = await http.post("/orders", headers=KEY)
            again = await http.post("/orders", headers=KEY)
            assert covered.status_code == again.status_code == 201
            assert again.headers["idempotent-replayed"] == "true"

    run(hivenet_app_url, scenario)
    assert calls.count == 5


# --- replay ----------------------------------------------------------------------------------

def test_finished_request_is_replayed_byte_for_byte(hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            first = await http.post("/orders", content=b'{"sku": 7}', headers=KEY)
            second = await http.post("/orders", content=b'{"sku": 7}', headers=KEY)
        assert first.status_code == second.status_code == 201
        assert second.content == first.content
        assert b'"order": 1,  "echo"' in first.content  # not re-serialised
        assert second.headers["content-type"] == first.headers["content-type"]
        assert second.headers["location"] == "/orders/1"
        assert second.headers["idempotent-replayed"] == "true"
        assert first.headers["idempotent-replayed"] == "false"
        assert first.headers["set-cookie"] == "session=secret"
        assert "set-cookie" not in second.headers and "x-run" not in second.headers

    run(hivenet_app_url, scenario)
    assert calls.count == 1
    assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
        (1, "success")]


def refusing(calls: Calls) -> Handler:
    async def handler(request: Request) -> Response:
        calls.count += 1
        return JSONResponse({"error": "out of stock"}, status_code=409)

    return handler


def test_a_4xx_is_not_the_key_s_outcome_and_the_request_runs_again(
        hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, refusing(calls))) as http:
            first = await http.post("/orders", headers=KEY)
            second = await http.post("/orders", headers=KEY)
        assert first.status_code == second.status_code == 409
        assert second.content == first.content == b'{"error":"out of stock"}'
        assert first.headers["idempotent-replayed"] == "false"
        assert second.headers["idempotent-replayed"] == "false"

    run(hivenet_app_url, scenario)
    assert calls.count == 2
    assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
        (1, "failed"), (2, "failed")]  # never left processing


def test_stored_statuses_every_status_records_and_replays_a_4xx(hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        app = make_app(engine, refusing(calls), stored_statuses=EVERY_STATUS)
        async with client(app) as http:
            first = await http.post("/orders", headers=KEY)
            second = await http.post("/orders", headers=KEY)
        assert first.status_code == second.status_code == 409
        assert second.content == first.content
        assert second.headers["idempotent-replayed"] == "true"

    run(hivenet_app_url, scenario)
    assert calls.count == 1
    with pytest.raises(ValueError, match="'201' is not an HTTP status"):
        IdempotencyMiddleware(make_app, engine=None, stored_statuses=["201"])  # type: ignore


def test_same_key_with_another_request_is_422(hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            assert (await http.post("/orders", content=b"a", headers=KEY)).status_code == 201
            for other in (http.post("/orders", content=b"b", headers=KEY),
                          http.post("/other", content=b"a", headers=KEY),
                          http.post("/orders?x=1", content=b"a", headers=KEY),
                          http.patch("/orders", content=b"a", headers=KEY)):
                answer = await other
                assert answer.status_code == 422
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["idempotency"] == "mismatch"
            assert (await http.post("/orders", content=b"a", headers=KEY)).status_code == 201

    run(hivenet_app_url, scenario)
    assert calls.count == 1


def test_operator_plain_json_response_is_replayed_as_200(
        hivenet_url: str, hivenet_app_url: str) -> None:
    # An operator who resolves with a document that is not a recorded response (or none), as
    # the owner: resolve_request is an administrator's, not the application's
    request = json.dumps(fingerprint("POST", "/orders", b""))
    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        for key, response in (("k1", '{"order": 5}'), ("k2", None)):
            attempt = scalar(conn, "SELECT attempt FROM hivenet.begin_request('http', %s, %s)",
                             (key, request))
            conn.execute("SELECT hivenet.resolve_request('http', %s, %s, true, 'by hand', %s)",
                         (key, attempt, response))
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            plain = await http.post("/orders", headers={"Idempotency-Key": "k1"})
            assert plain.status_code == 200 and plain.content == b'{"order":5}'
            assert plain.headers["content-type"] == "application/json"
            assert plain.headers["idempotent-replayed"] == "true"
            empty = await http.post("/orders", headers={"Idempotency-Key": "k2"})
            assert empty.status_code == 204 and empty.content == b""
            # another request under the key is refused as for any other
            other = await http.post("/orders", content=b"x", headers={"Idempotency-Key": "k1"})
            assert other.status_code == 422

    run(hivenet_app_url, scenario)
    assert calls.count == 0


# --- in flight and concurrency ---------------------------------------------------------------

def test_same_key_while_in_flight_is_409_at_once(hivenet_app_url: str) -> None:
    calls = Calls()
    calls.release.clear()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            first = asyncio.create_task(http.post("/orders", headers=KEY))
            await asyncio.wait_for(calls.entered.wait(), 60)
            second = await http.post("/orders", headers=KEY)
            assert second.status_code == 409
            assert second.headers["content-type"] == "application/problem+json"
            assert second.json()["idempotency"] == "in-flight"
            calls.release.set()
            assert (await first).status_code == 201

    run(hivenet_app_url, scenario)
    assert calls.count == 1


def test_16_concurrent_requests_with_one_key_run_the_handler_once(hivenet_app_url: str) -> None:
    calls = Calls()
    calls.release.clear()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            tasks = [asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
                     for _ in range(16)]
            # the handler stays in flight until every other request was answered
            done, pending = await asyncio.wait(tasks, timeout=60,
                                               return_when=asyncio.FIRST_COMPLETED)
            while len(done) < 15:
                more, pending = await asyncio.wait(pending, timeout=60,
                                                   return_when=asyncio.FIRST_COMPLETED)
                assert more, "requests hang while the first is in flight"
                done |= more
            calls.release.set()
            answers = [await task for task in tasks]
        statuses = sorted(answer.status_code for answer in answers)
        assert statuses == [201] + [409] * 15

    run(hivenet_app_url, scenario)
    assert calls.count == 1


def test_16_concurrent_requests_free_running_run_the_handler_once(hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            answers = await asyncio.gather(*(http.post("/orders", content=b"x", headers=KEY)
                                             for _ in range(16)))
        ran = [answer for answer in answers
               if answer.status_code == 201 and answer.headers["idempotent-replayed"] == "false"]
        assert len(ran) == 1
        for answer in answers:
            if answer.status_code == 201:
                assert answer.content == ran[0].content
            else:
                assert answer.status_code == 409

    run(hivenet_app_url, scenario)
    assert calls.count == 1


# --- failures --------------------------------------------------------------------------------

def test_raising_handler_records_a_failed_attempt_and_the_retry_runs(
        hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()

    async def handler(request: Request) -> Response:
        calls.count += 1
        if calls.count == 1:
            raise RuntimeError("boom")
        return PlainTextResponse("made", status_code=201)

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, handler)) as http:
            assert (await http.post("/orders", headers=KEY)).status_code == 500
            retry = await http.post("/orders", headers=KEY)
            assert retry.status_code == 201 and retry.text == "made"
            again = await http.post("/orders", headers=KEY)
            assert again.headers["idempotent-replayed"] == "true" and again.text == "made"

    run(hivenet_app_url, scenario)
    assert calls.count == 2
    assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
        (1, "failed"), (2, "success")]


def test_5xx_records_a_failed_attempt_and_the_retry_runs(
        hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()

    async def handler(request: Request) -> Response:
        calls.count += 1
        if calls.count == 1:
            return PlainTextResponse("upstream down", status_code=503)
        return PlainTextResponse("made", status_code=201)

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, handler)) as http:
            failed = await http.post("/orders", headers=KEY)
            assert failed.status_code == 503 and failed.text == "upstream down"
            assert (await http.post("/orders", headers=KEY)).status_code == 201
            assert (await http.post("/orders", headers=KEY)).headers["idempotent-replayed"]

    run(hivenet_app_url, scenario)
    assert calls.count == 2
    assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
        (1, "failed"), (2, "success")]


# --- scope -----------------------------------------------------------------------------------

def test_scope_keeps_two_clients_keys_apart(hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()

    def client_of(request: Request) -> str:
        return request.headers["x-client"]

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls), scope=client_of)) as http:
            async def post(who: str, key: str) -> httpx.Response:
                return await http.post("/orders", headers={"x-client": who,
                                                           "Idempotency-Key": key})
            assert (await post("alice", "k")).status_code == 201
            assert (await post("bob", "k")).status_code == 201
            assert (await post("alice", "k")).headers["idempotent-replayed"] == "true"
            # the scope is encoded: "a:b" + "c" and "a" + "b:c" stay apart
            assert (await post("a:b", "c")).headers["idempotent-replayed"] == "false"
            assert (await post("a", "b:c")).headers["idempotent-replayed"] == "false"
            # the scope counts toward the longest key
            assert (await post("alice", "k" * 250)).status_code == 400

    run(hivenet_app_url, scenario)
    assert calls.count == 4
    assert state_of(hivenet_url, "http", "alice:k") == [(1, "success")]
    assert state_of(hivenet_url, "http", "a%3Ab:c") == [(1, "success")]


# --- shape (b): the handler's writes commit with the recorded response -----------------------

def create_orders(owner_url: str) -> None:
    """The handlers' table, made by the owner, who grants the application role what the
    handlers do (insert, and read back the id): hivenet grants nothing on an application's
    tables."""
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL)")
        conn.execute("GRANT SELECT, INSERT ON orders TO hivenet_app")
        conn.execute("GRANT USAGE ON SEQUENCE orders_id_seq TO hivenet_app")


def orders(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [row[0] for row in conn.execute("SELECT sku FROM orders ORDER BY id")]


def writing(calls: Calls, outcomes: list[str]) -> Handler:
    """Writes an order on the middleware's connection, then answers as outcomes[n] says:
    'ok' 201, '5xx' 503, '4xx' 400, 'raise' an exception, 'wait' 201 after the gate opens."""

    async def handler(request: Request) -> Response:
        calls.count += 1
        conn: AsyncConnection = await idempotency_connection(request)
        sku = (await request.body()).decode()
        await conn.execute(text("INSERT INTO orders (sku) VALUES (:sku)"), {"sku": sku})
        outcome = outcomes[calls.count - 1]
        calls.entered.set()
        await calls.release.wait()
        if outcome == "raise":
            raise RuntimeError("after the write")
        if outcome == "5xx":
            return PlainTextResponse("failed", status_code=503)
        if outcome == "4xx":
            return PlainTextResponse(f"sku {sku} refused", status_code=400)
        return PlainTextResponse(f"order {sku}", status_code=201)

    return handler


def test_shape_b_writes_commit_with_the_response(hivenet_url: str, hivenet_app_url: str) -> None:
    create_orders(hivenet_url)
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, writing(calls, ["raise", "5xx", "ok"]))) as http:
            assert (await http.post("/orders", content=b"A", headers=KEY)).status_code == 500
            assert orders(hivenet_url) == []
            assert (await http.post("/orders", content=b"A", headers=KEY)).status_code == 503
            assert orders(hivenet_url) == []
            made = await http.post("/orders", content=b"A", headers=KEY)
            assert made.status_code == 201 and made.text == "order A"
            replay = await http.post("/orders", content=b"A", headers=KEY)
            assert replay.text == "order A" and replay.headers["idempotent-replayed"] == "true"

    run(hivenet_app_url, scenario)
    assert calls.count == 3
    assert orders(hivenet_url) == ["A"]
    assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
        (1, "failed"), (2, "failed"), (3, "success")]


def test_shape_b_writes_are_invisible_until_the_response_is_recorded(
        hivenet_url: str, hivenet_app_url: str) -> None:
    create_orders(hivenet_url)
    calls = Calls()
    calls.release.clear()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, writing(calls, ["ok"]))) as http:
            first = asyncio.create_task(http.post("/orders", content=b"A", headers=KEY))
            await asyncio.wait_for(calls.entered.wait(), 60)
            assert orders(hivenet_url) == []  # written, not committed
            assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
                (1, "processing")]  # but begin committed: a retry now is 409
            assert (await http.post("/orders", content=b"A", headers=KEY)).status_code == 409
            calls.release.set()
            assert (await first).status_code == 201
            assert orders(hivenet_url) == ["A"]

    run(hivenet_app_url, scenario)


def test_in_one_transaction_a_4xx_binds_no_key_and_the_corrected_request_runs(
        hivenet_url: str, hivenet_app_url: str) -> None:
    """commit_processing_first=False: the attempt is begun in the transaction of
    idempotency_connection, so a 4xx rolls it back with the handler's writes; a 5xx or a
    raise records the failed attempt without them."""
    create_orders(hivenet_url)
    calls = Calls()
    key = "8e03978e-40d5-43e8-bc93-6894a57f9324"

    async def scenario(engine: AsyncEngine) -> None:
        app = make_app(engine, writing(calls, ["4xx", "raise", "5xx", "ok"]),
                       commit_processing_first=False)
        async with client(app) as http:
            refused = await http.post("/orders", content=b"bad", headers=KEY)
            assert refused.status_code == 400
            assert refused.headers["idempotent-replayed"] == "false"
            assert state_of(hivenet_url, "http", key) == [] and orders(hivenet_url) == []
            assert (await http.post("/orders", content=b"A", headers=KEY)).status_code == 500
            assert (await http.post("/orders", content=b"A", headers=KEY)).status_code == 503
            made = await http.post("/orders", content=b"A", headers=KEY)
            again = await http.post("/orders", content=b"A", headers=KEY)
            assert made.status_code == 201 and again.headers["idempotent-replayed"] == "true"

    run(hivenet_app_url, scenario)
    assert calls.count == 4 and orders(hivenet_url) == ["A"]
    assert state_of(hivenet_url, "http", key) == [(1, "failed"), (2, "failed"), (3, "success")]


def test_in_one_transaction_the_attempt_in_flight_is_not_committed(
        hivenet_url: str, hivenet_app_url: str) -> None:
    """Duplicates meet the uncommitted attempt: 409 at once, or with wait the first one's
    response once its transaction commits; a cancelled handler leaves nothing processing."""
    create_orders(hivenet_url)
    calls = Calls()
    calls.release.clear()
    key = "8e03978e-40d5-43e8-bc93-6894a57f9324"

    async def scenario(engine: AsyncEngine) -> None:
        handler = writing(calls, ["wait"] * 3)
        async with client(make_app(engine, handler, commit_processing_first=False)) as http, \
                client(make_app(engine, handler, commit_processing_first=False,
                                wait=30)) as waiting:
            first = asyncio.create_task(http.post("/orders", content=b"A", headers=KEY))
            await asyncio.wait_for(calls.entered.wait(), 60)
            assert state_of(hivenet_url, "http", key) == []  # not committed
            busy = await http.post("/orders", content=b"A", headers=KEY)
            assert busy.status_code == 409 and busy.json()["idempotency"] == "in-flight"
            waiter = asyncio.create_task(waiting.post("/orders", content=b"A", headers=KEY))
            with psycopg.connect(hivenet_url, autocommit=True) as owner:
                deadline = time.monotonic() + 30
                while scalar(owner, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                    "current_database() AND wait_event_type = 'Lock'") < 1:
                    assert time.monotonic() < deadline, "the waiter never waited"
                    await asyncio.sleep(0.01)
            calls.release.set()
            assert (await first).status_code == 201
            replayed = await waiter
            assert replayed.status_code == 201
            assert replayed.headers["idempotent-replayed"] == "true"
            calls.release.clear()
            other = {"Idempotency-Key": '"cancelled-1"'}
            cancelled = asyncio.create_task(http.post("/orders", content=b"B", headers=other))
            while calls.count < 2:
                await asyncio.sleep(0.01)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            calls.release.set()

    run(hivenet_app_url, scenario)
    assert calls.count == 2 and orders(hivenet_url) == ["A"]
    assert state_of(hivenet_url, "http", key) == [(1, "success")]
    assert state_of(hivenet_url, "http", "cancelled-1") == []  # rolled back, not processing


def test_shape_b_attempt_resolved_meanwhile_commits_nothing(
        hivenet_url: str, hivenet_app_url: str) -> None:
    create_orders(hivenet_url)
    calls = Calls()
    calls.release.clear()
    key = "8e03978e-40d5-43e8-bc93-6894a57f9324"

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, writing(calls, ["ok", "ok"]))) as http:
            first = asyncio.create_task(http.post("/orders", content=b"A", headers=KEY))
            await asyncio.wait_for(calls.entered.wait(), 60)
            with psycopg.connect(hivenet_url, autocommit=True) as conn:  # an operator
                conn.execute("SELECT hivenet.resolve_request('http', %s, 1, false, "
                             "'declared failed by the operator')", (key,))
            calls.release.set()
            lost = await first
            assert lost.status_code == 409 and lost.json()["idempotency"] == "resolved"
            assert orders(hivenet_url) == []
            retry = await http.post("/orders", content=b"A", headers=KEY)
            assert retry.status_code == 201

    run(hivenet_app_url, scenario)
    assert orders(hivenet_url) == ["A"]
    assert state_of(hivenet_url, "http", key) == [(1, "failed"), (2, "success")]


def test_idempotency_connection_outside_a_covered_request_raises(hivenet_app_url: str) -> None:
    async def handler(request: Request) -> Response:
        with pytest.raises(RuntimeError, match="not covered"):
            await idempotency_connection(request)
        return PlainTextResponse("fine")

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, handler, required=False)) as http:
            assert (await http.post("/orders")).text == "fine"
            assert (await http.get("/orders")).text == "fine"

    run(hivenet_app_url, scenario)


# --- FastAPI ---------------------------------------------------------------------------------

def test_fastapi_dependency_and_replay(hivenet_url: str, hivenet_app_url: str) -> None:
    create_orders(hivenet_url)
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        app = FastAPI()
        app.add_middleware(IdempotencyMiddleware, engine=engine)

        @app.post("/orders", status_code=201)
        async def create(payload: dict[str, str],
                         conn: Annotated[AsyncConnection, Depends(idempotency_connection)],
                         ) -> dict[str, Any]:
            calls.count += 1
            order = (await conn.execute(text("INSERT INTO orders (sku) VALUES (:sku) "
                                             "RETURNING id"), payload)).scalar_one()
            return {"order": order}

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            first = await http.post("/orders", json={"sku": "A"}, headers=KEY)
            second = await http.post("/orders", json={"sku": "A"}, headers=KEY)
            missing = await http.post("/orders", json={"sku": "A"})
        assert first.status_code == second.status_code == 201
        assert first.json() == second.json() == {"order": 1}
        assert second.headers["idempotent-replayed"] == "true"
        assert missing.status_code == 400

    run(hivenet_app_url, scenario)
    assert calls.count == 1
    assert orders(hivenet_url) == ["A"]


# --- retention -------------------------------------------------------------------------------

# The retention option calls hivenet.set_request_retention, an administrator's function (not
# hivenet_app's): a middleware that sets it runs as the owner here; the application role's
# refusal is tested below.

def test_retention_is_set_once_for_the_namespace(hivenet_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        app = make_app(engine, created(calls), namespace="shop", retention=timedelta(days=3))
        async with client(app) as http:
            assert (await http.post("/orders", headers={"Idempotency-Key": "a"})
                    ).status_code == 201
            with psycopg.connect(hivenet_url, autocommit=True) as conn:
                # an operator changes it afterwards: the middleware does not set it again
                conn.execute("SELECT hivenet.set_request_retention('shop', '5 days')")
            assert (await http.post("/orders", headers={"Idempotency-Key": "b"})
                    ).status_code == 201

    run(hivenet_url, scenario)  # an administrator's role: see above
    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        assert scalar(conn, "SELECT retention FROM hivenet.request_namespace "
                      "WHERE namespace = 'shop'") == timedelta(days=5)


# --- a server that dies between begin and finish ---------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DYING_SERVER = textwrap.dedent("""
    import asyncio, os, sys
    import httpx
    from sqlalchemy.ext.asyncio import create_async_engine
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from hivenet_db.asgi import IdempotencyMiddleware

    async def handler(request):
        os._exit(9)  # the process dies inside the handler: begin committed, no finish

    async def main():
        engine = create_async_engine(sys.argv[1])
        app = Starlette(routes=[Route("/orders", handler, methods=["POST"])])
        app.add_middleware(IdempotencyMiddleware, engine=engine)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            await http.post("/orders", content=b"A", headers={"Idempotency-Key": sys.argv[2]})

    asyncio.run(main())
""")


def die_in_handler(url: str, key: str) -> None:
    done = subprocess.run([sys.executable, "-c", DYING_SERVER, sqlalchemy_url(url), key],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 9, done.stderr


@pytest.mark.parametrize("operator_says", ["succeeded", "failed"])
def test_server_dying_after_begin_leaves_a_stuck_request_an_operator_resolves(
        hivenet_url: str, hivenet_app_url: str, operator_says: str) -> None:
    key = "crash-1"
    die_in_handler(hivenet_app_url, key)
    assert state_of(hivenet_url, "http", key) == [(1, "processing")]
    calls = Calls()

    async def retry(engine: AsyncEngine) -> httpx.Response:
        async with client(make_app(engine, created(calls))) as http:
            return await http.post("/orders", content=b"A", headers={"Idempotency-Key": key})

    async def before(engine: AsyncEngine) -> None:
        answer = await retry(engine)
        assert answer.status_code == 409 and answer.json()["idempotency"] == "in-flight"

    run(hivenet_app_url, before)
    with psycopg.connect(hivenet_url, autocommit=True) as conn:  # the operator's part
        # past its lease it is listed for the operator
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        conn.execute("SELECT set_config('hivenet.fake_now', "
                     "(now() + interval '1 day')::text, false)")
        assert [tuple(row) for row in conn.execute(
            "SELECT namespace, key, attempt FROM hivenet.stuck_requests")] == [
            ("http", key, 1)]
        conn.execute("SELECT set_config('hivenet.fake_now', '', false)")
        if operator_says == "succeeded":
            recorded = recorded_response(201, b'{"order": 77}',
                                         [("Content-Type", "application/json"),
                                          ("Location", "/orders/77")])
            conn.execute("SELECT hivenet.resolve_request('http', %s, 1, true, "
                         "'order 77 exists', %s)", (key, json.dumps(recorded)))
        else:
            conn.execute("SELECT hivenet.resolve_request('http', %s, 1, false, "
                         "'no order was made')", (key,))

    async def after(engine: AsyncEngine) -> None:
        answer = await retry(engine)
        if operator_says == "succeeded":
            assert answer.status_code == 201 and answer.content == b'{"order": 77}'
            assert answer.headers["location"] == "/orders/77"
            assert answer.headers["idempotent-replayed"] == "true"
        else:
            assert answer.status_code == 201
            assert answer.headers["idempotent-replayed"] == "false"

    run(hivenet_app_url, after)
    assert calls.count == (0 if operator_says == "succeeded" else 1)


def test_cancelled_handler_leaves_the_request_processing(
        hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()
    calls.release.clear()

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls))) as http:
            first = asyncio.create_task(http.post("/orders", headers=KEY))
            await asyncio.wait_for(calls.entered.wait(), 60)
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            assert (await http.post("/orders", headers=KEY)).status_code == 409

    run(hivenet_app_url, scenario)
    assert state_of(hivenet_url, "http", "8e03978e-40d5-43e8-bc93-6894a57f9324") == [
        (1, "processing")]


# --- examples/asgi_app.py --------------------------------------------------------------------

def load_example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "asgi_app", os.path.join(ROOT, "examples", "asgi_app.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_app(hivenet_url: str, hivenet_app_url: str) -> None:
    example = load_example()
    create_orders(hivenet_url)

    async def scenario(engine: AsyncEngine) -> None:
        transport = httpx.ASGITransport(app=example.create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            async def post(path: str, who: str, key: str, payload: Any) -> httpx.Response:
                return await http.post(path, json=payload,
                                       headers={"x-client": who, "Idempotency-Key": key})

            first = await post("/orders", "alice", "o-1", {"sku": "A"})
            again = await post("/orders", "alice", "o-1", {"sku": "A"})
            bob = await post("/orders", "bob", "o-1", {"sku": "A"})
            other = await post("/orders", "alice", "o-1", {"sku": "B"})
            assert first.status_code == again.status_code == bob.status_code == 201
            assert again.content == first.content and again.headers["location"] == "/orders/1"
            assert bob.json()["order"] == 2 and other.status_code == 422
            for _ in range(3):
                assert (await post("/notify", "alice", "n-1", {"text": "hi"})).status_code == 202
            assert (await http.post("/notify", json={"text": "hi"})).status_code == 400

    run(hivenet_app_url, scenario)
    assert orders(hivenet_url) == ["A", "A"]
    assert example.sent == ["alice: hi"]


async def lifespan_startup(app: Starlette) -> dict[str, Any]:
    """Run the lifespan protocol's startup on app as a server does; the server's answer."""
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await incoming.put({"type": "lifespan.startup"})

    async def receive() -> dict[str, Any]:
        return await incoming.get()

    async def send(message: Any) -> None:
        await answers.put(dict(message))

    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                   receive, send))
    answer = await asyncio.wait_for(answers.get(), 60)
    await incoming.put({"type": "lifespan.shutdown"})  # a server stops after startup.failed too
    assert (await asyncio.wait_for(answers.get(), 60))["type"] == "lifespan.shutdown.complete"
    await asyncio.wait_for(task, 60)
    return answer


def test_retention_is_set_at_startup_and_a_refused_one_fails_the_startup(
        hivenet_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        good = make_app(engine, created(calls), namespace="shop", retention=timedelta(hours=5))
        assert (await lifespan_startup(good))["type"] == "lifespan.startup.complete"
        with psycopg.connect(hivenet_url, autocommit=True) as conn:
            assert scalar(conn, "SELECT retention FROM hivenet.request_namespace "
                          "WHERE namespace = 'shop'") == timedelta(hours=5)
        bad = make_app(engine, created(calls), namespace="shop", retention=timedelta(0))
        failed = await lifespan_startup(bad)
        assert failed["type"] == "lifespan.startup.failed"
        assert "could not set the retention of namespace 'shop'" in failed["message"]
        # without the lifespan protocol, the first covered request fails the same way
        async with client(bad) as http:
            assert (await http.post("/orders", headers=KEY)).status_code == 500

    run(hivenet_url, scenario)  # an administrator's role, which may set it (see above)
    assert calls.count == 0


def test_the_application_role_may_not_set_the_retention_and_its_startup_says_so(
        hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()

    async def scenario(engine: AsyncEngine) -> None:
        app = make_app(engine, created(calls), namespace="shop", retention=timedelta(days=3))
        failed = await lifespan_startup(app)
        assert failed["type"] == "lifespan.startup.failed"
        assert "permission denied for function set_request_retention" in failed["message"]
        assert "granted to hivenet_admin" in failed["message"]
        async with client(app) as http:
            assert (await http.post("/orders", headers=KEY)).status_code == 500

    run(hivenet_app_url, scenario)
    assert calls.count == 0
    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        assert scalar(conn, "SELECT count(*) FROM hivenet.request_namespace "
                      "WHERE namespace = 'shop'") == 0


# --- fingerprint and key policy ----------------------------------------------------------------

def test_json_fingerprint_ignores_whitespace_key_order_and_number_form(
        hivenet_url: str, hivenet_app_url: str) -> None:
    """fingerprint="json": the same JSON written otherwise is the same request (replayed);
    another value is 422; a body that is not JSON is 400 and begins nothing."""
    calls = Calls()
    key = {"Idempotency-Key": '"json-fingerprint-key"'}

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls), fingerprint="json")) as http:
            first = await http.post("/orders", content=b'{"amount": 1.0, "currency": "EUR"}',
                                    headers=key)
            assert first.status_code == 201
            again = await http.post("/orders", headers=key,
                                    content=b'{ "currency":"EUR",\n "amount":1e0 }')
            assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
            assert again.content == first.content
            other = await http.post("/orders", content=b'{"amount": 2, "currency": "EUR"}',
                                    headers=key)
            assert other.status_code == 422
            for not_json in (b"amount=1", b'{"amount": NaN}', b"[1e400]", b"\xff"):
                refused = await http.post("/orders", content=not_json,
                                          headers={"Idempotency-Key": '"not-json"'})
                assert refused.status_code == 400, not_json
                assert refused.json()["idempotency"] == "invalid"
                assert refused.json()["detail"].startswith("the body is not JSON")

    run(hivenet_app_url, scenario)
    assert calls.count == 1
    assert state_of(hivenet_url, "http", "not-json") == []


def test_json_path_fingerprint_only_what_the_paths_select(hivenet_app_url: str) -> None:
    calls = Calls()
    key = {"Idempotency-Key": '"path-fingerprint-key"'}
    paths = ["$.amount", '$["currency"]', "$.items[0].sku"]

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls), fingerprint=paths)) as http:
            body = b'{"amount": 5, "currency": "EUR", "items": [{"sku": "A"}], "note": "x"}'
            assert (await http.post("/orders", content=body, headers=key)).status_code == 201
            same = (b'{"note": "retry", "amount": 5.0, "currency": "EUR",'
                    b' "items": [{"sku": "A", "qty": 9}, {"sku": "B"}]}')
            replay = await http.post("/orders", content=same, headers=key)
            assert replay.headers["idempotent-replayed"] == "true"
            for other in (b'{"amount": 5, "currency": "USD", "items": [{"sku": "A"}]}',
                          b'{"amount": 5, "currency": "EUR", "items": []}',
                          b'{"amount": 5, "currency": "EUR", "items": [{"sku": null}]}'):
                assert (await http.post("/orders", content=other, headers=key)
                        ).status_code == 422, other

    run(hivenet_app_url, scenario)
    assert calls.count == 1


@pytest.mark.parametrize("given", ["sha256", [], ["amount"], ["$.a.*"], ["$..a"]])
def test_a_fingerprint_option_not_understood_is_refused_at_once(given: Any) -> None:
    with pytest.raises(ValueError, match="fingerprint"):
        IdempotencyMiddleware(Starlette(), engine=None, fingerprint=given)  # type: ignore[arg-type]


def test_a_key_breaking_the_namespace_key_rules_is_400_with_the_rule(
        hivenet_url: str, hivenet_app_url: str) -> None:
    calls = Calls()
    with psycopg.connect(hivenet_url, autocommit=True) as conn:  # an administrator's call
        conn.execute("SELECT hivenet.set_namespace_policy('strict', key_min_length => 36, "
                     "key_pattern => '^[0-9a-f-]+$')")

    async def scenario(engine: AsyncEngine) -> None:
        async with client(make_app(engine, created(calls), namespace="strict")) as http:
            for key, rule in (('"too-short"', "key_min_length 36"),
                              ('"' + "x" * 36 + '"', "key_pattern '^[0-9a-f-]+$'")):
                answer = await http.post("/orders", content=b"a",
                                         headers={"Idempotency-Key": key})
                assert answer.status_code == 400
                assert answer.json()["idempotency"] == "invalid"
                assert rule in answer.json()["detail"], answer.json()
            assert (await http.post("/orders", content=b"a", headers=KEY)).status_code == 201

    run(hivenet_app_url, scenario)
    assert calls.count == 1
