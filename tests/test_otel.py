"""OpenTelemetry (hivenet_db.otel, issue 31 point 3): spans for claims, steps, keyed requests
and durable allocation, the idempotency decisions as attributes and events, the unified serial
in W3C baggage; read back from the SDK's in-memory exporter, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import baggage, context
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from hivenet_db import (
    AsyncClaimRepository,
    AsyncInterfaceDedup,
    AsyncRequestRepository,
    AsyncSerialRepository,
    AsyncStepRepository,
    ClaimRepository,
    DuplicateClaim,
    DuplicateInterfaceSerial,
    InterfaceDedup,
    InvalidInput,
    RequestMismatch,
    RequestRepository,
    SerialRepository,
    StepAlreadySucceeded,
    StepInProgress,
    StepRepository,
    otel,
)
from hivenet_db.propagation import (
    BAGGAGE_HEADER,
    UNIFIED_HEADER,
    bind_from_headers,
    current_unified_serial,
    outgoing_headers,
    read_headers,
    unified_serial_context,
)
from tests.helpers import ASYNC_KINDS, async_connection, race, scalar, sync_connection

REQUEST = {"to": "6222020000000002", "amount": "100.00"}
Connect = Callable[..., psycopg.Connection]  # the ``connect`` fixture


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """hivenet-db instrumented with a provider of the test's own (the global one can be set
    once a process), its finished spans in memory; uninstrumented after the test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        otel.uninstrument()
        provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = named(exporter, name)
    return span


def decisions(span: ReadableSpan) -> list[Any]:
    """The decisions of the span's events (one event per decision)."""
    return [dict(event.attributes or {}).get(otel.DECISION) for event in span.events
            if event.name == otel.DECISION_EVENT]


def new_serial(db: psycopg.Connection, kind: str) -> str:
    return str(scalar(db, f"SELECT hivenet.next_{kind}_serial('C0001', 'A01', '01')"))


# --- the library without OpenTelemetry --------------------------------------------------------

def test_the_library_imports_no_opentelemetry_until_instrumented() -> None:
    modules = ("hivenet_db", "hivenet_db.allocation", "hivenet_db.dedup", "hivenet_db.steps",
               "hivenet_db.requests", "hivenet_db.durable", "hivenet_db.propagation",
               "hivenet_db.asgi")
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_uninstrument_puts_the_methods_back(hivenet_app_url: str) -> None:
    originals = {name: StepRepository.__dict__[name] for name in ("begin", "finish", "step")}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(tracer_provider=provider)
    otel.instrument(tracer_provider=provider)  # again: wraps the originals, not the wrappers
    wrapped = StepRepository.__dict__["begin"]
    assert wrapped is not originals["begin"] and wrapped.__wrapped__ is originals["begin"]
    otel.uninstrument()
    assert {name: StepRepository.__dict__[name] for name in originals} == originals
    with sync_connection("psycopg", hivenet_app_url) as conn:
        ClaimRepository(conn).claim("otel.off", "k-1")
    assert exporter.get_finished_spans() == ()
    with unified_serial_context("C0001A0101202611210000000007"):
        assert BAGGAGE_HEADER not in outgoing_headers()
        assert baggage.get_baggage(otel.UNIFIED) is None


# --- steps ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy-session"])
def test_a_step_is_a_span_around_its_begin_and_finish(
        spans: InMemorySpanExporter, db: psycopg.Connection, hivenet_app_url: str,
        kind: str) -> None:
    system, unified = new_serial(db, "system"), new_serial(db, "unified")
    with sync_connection(kind, hivenet_app_url) as conn, unified_serial_context(unified):
        steps = StepRepository(conn)
        assert steps.run(system, REQUEST, lambda: {"posted": 100}) == {"posted": 100}
        assert steps.run(system, REQUEST, lambda: {"posted": 200}) == {"posted": 100}

    blocks = named(spans, "hivenet.step")
    begins = named(spans, "hivenet.step.begin")
    (finish,) = named(spans, "hivenet.step.finish")
    assert [span.attributes[otel.DECISION] for span in blocks] == ["started", "replayed"]
    assert [decisions(span) for span in begins] == [["started"], ["replayed"]]
    for span in [*blocks, *begins, finish]:
        assert span.attributes[otel.SYSTEM] == system
        assert span.attributes[otel.UNIFIED] == unified
        assert span.attributes[otel.NAMESPACE] == otel.STEPS_NAMESPACE
    # begin and finish inside the block's span: one trace, the block their parent
    assert begins[0].parent is not None and begins[0].parent.span_id == blocks[0].context.span_id
    assert finish.parent is not None and finish.parent.span_id == blocks[0].context.span_id
    assert finish.attributes[otel.ATTEMPT] == 1 and finish.attributes[otel.SUCCEEDED] is True


def test_every_refusal_of_a_step_is_a_decision(spans: InMemorySpanExporter,
                                               db: psycopg.Connection,
                                               hivenet_app_url: str) -> None:
    system = new_serial(db, "system")
    with sync_connection("psycopg", hivenet_app_url) as first, \
            sync_connection("psycopg", hivenet_app_url) as second:
        StepRepository(first).begin(system, REQUEST)  # processing, not committed
        with pytest.raises(StepInProgress):  # a duplicate on another connection
            StepRepository(second).begin(system, REQUEST, nowait=True)
        StepRepository(first).finish(system, 1, True, {"posted": 100})
        first.commit()
        second.rollback()
        with pytest.raises(RequestMismatch):
            StepRepository(second).begin(system, {**REQUEST, "amount": "999.00"})
        second.rollback()
        with pytest.raises(StepAlreadySucceeded):
            StepRepository(second).begin(system, REQUEST, on_success="reject")
        second.rollback()
        with pytest.raises(InvalidInput):
            StepRepository(second).begin("C0001", REQUEST)

    begins = named(spans, "hivenet.step.begin")
    assert [decisions(span) for span in begins] == [
        ["started"], ["in_progress"], ["mismatch"], ["rejected"], ["rejected"]]
    assert [span.status.status_code for span in begins] == [StatusCode.UNSET] + [
        StatusCode.ERROR] * 4
    assert [event.name for event in begins[1].events] == [otel.DECISION_EVENT, "exception"]


def test_a_failed_body_is_a_failed_finish_under_an_error_span(
        spans: InMemorySpanExporter, db: psycopg.Connection, hivenet_app_url: str) -> None:
    system = new_serial(db, "system")
    with sync_connection("psycopg", hivenet_app_url) as conn, pytest.raises(RuntimeError), \
            StepRepository(conn).step(system, REQUEST) as run:
        assert run.started
        raise RuntimeError("the ledger is down")
    block = only(spans, "hivenet.step")
    assert block.status.status_code is StatusCode.ERROR
    assert only(spans, "hivenet.step.finish").attributes[otel.SUCCEEDED] is False


def test_a_step_refused_at_begin_has_the_decision_on_its_block(
        spans: InMemorySpanExporter, db: psycopg.Connection, hivenet_app_url: str) -> None:
    system = new_serial(db, "system")
    with sync_connection("psycopg", hivenet_app_url) as conn:
        StepRepository(conn).run(system, REQUEST, lambda: {"posted": 100})
        with pytest.raises(RequestMismatch):
            StepRepository(conn).run(system, {"amount": "1.00"}, lambda: None)
    assert [span.attributes[otel.DECISION] for span in named(spans, "hivenet.step")] == [
        "started", "mismatch"]


# --- keyed requests and claims ----------------------------------------------------------------

def test_keyed_requests_have_their_namespace_key_and_decision(
        spans: InMemorySpanExporter, hivenet_app_url: str) -> None:
    with sync_connection("sqlalchemy-connection", hivenet_app_url) as conn:
        requests = RequestRepository(conn)
        for _ in range(2):
            requests.run("orders", "req-7f3a", {"sku": "P1"}, lambda: {"order": 1})
        with pytest.raises(RequestMismatch):
            requests.begin("orders", "req-7f3a", {"sku": "P2"})
    begins = named(spans, "hivenet.request.begin")
    assert [decisions(span) for span in begins] == [["started"], ["replayed"], ["mismatch"]]
    assert {(span.attributes[otel.NAMESPACE], span.attributes[otel.KEY]) for span in [
        *begins, *named(spans, "hivenet.request"), *named(spans, "hivenet.request.finish")]} \
        == {("orders", "req-7f3a")}
    assert begins[0].attributes[otel.ATTEMPT] == 1
    assert otel.UNIFIED not in dict(begins[0].attributes or {})  # none bound


def test_concurrent_duplicates_each_get_the_span_of_their_own_decision(
        spans: InMemorySpanExporter, connect: Connect) -> None:
    """Four connections begin one key at once: one starts, the others find it in progress;
    each thread's span holds its own decision, in a trace of its own."""
    conns = [connect(autocommit=False) for _ in range(4)]

    def begin(i: int, conn: psycopg.Connection) -> str:
        with unified_serial_context(f"U{i}"):
            try:
                return RequestRepository(conn).begin("orders", "k-1", {"sku": "P1"},
                                                     nowait=True).outcome
            except StepInProgress:
                return "in_progress"

    outcomes = race(conns, begin)
    for conn in conns:
        conn.rollback()
    assert outcomes.count("started") == 1 and outcomes.count("in_progress") == 3, outcomes
    begins = named(spans, "hivenet.request.begin")
    assert sorted((str(span.attributes[otel.UNIFIED]), decisions(span)[0]) for span in begins) \
        == sorted((f"U{i}", outcome) for i, outcome in enumerate(outcomes))
    assert len({span.context.trace_id for span in begins}) == 4
    assert all(span.parent is None for span in begins)


def test_claims_say_claimed_or_duplicate(spans: InMemorySpanExporter, db: psycopg.Connection,
                                         hivenet_app_url: str) -> None:
    unified, system = new_serial(db, "unified"), new_serial(db, "system")
    interface = str(scalar(db, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', "
                               "'T0001')"))
    with sync_connection("psycopg", hivenet_app_url) as conn:
        claims, calls = ClaimRepository(conn), InterfaceDedup(conn)
        claims.claim("inventory.purchase_input_finished", "PO-1")
        with pytest.raises(DuplicateClaim):
            claims.claim("inventory.purchase_input_finished", "PO-1")
        conn.rollback()
        with unified_serial_context(unified):
            calls.claim(interface, system_serial=system)
            with pytest.raises(DuplicateInterfaceSerial):
                calls.claim(interface, system_serial=system)
    assert [decisions(span) for span in named(spans, "hivenet.claim")] == [
        ["claimed"], ["duplicate"]]
    interface_claims = named(spans, "hivenet.interface.claim")
    assert [decisions(span) for span in interface_claims] == [["claimed"], ["duplicate"]]
    assert dict(interface_claims[0].attributes or {}) == {
        otel.INTERFACE: interface, otel.UNIFIED: unified, otel.SYSTEM: system,
        otel.DECISION: "claimed"}


# --- durable allocation -------------------------------------------------------------------

def test_durable_allocation_is_a_span_with_the_serial_it_issued(
        spans: InMemorySpanExporter, hivenet_app_url: str) -> None:
    unified = "C0001A0101202611210000000007"
    with sync_connection("psycopg", hivenet_app_url) as conn, unified_serial_context(unified):
        serial = SerialRepository(conn).next_durable("system", system="C0001", module="A01",
                                                     instance="01")
    span = only(spans, "hivenet.serial.durable")
    assert dict(span.attributes or {}) == {otel.FORMAT: "system", otel.ISSUED: serial,
                                           otel.UNIFIED: unified}


# --- async -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ASYNC_KINDS)
def test_the_async_repositories_have_the_same_spans(
        spans: InMemorySpanExporter, db: psycopg.Connection, hivenet_app_url: str,
        kind: str) -> None:
    if kind.startswith("sqlalchemy"):
        pytest.importorskip("greenlet")
    system, unified = new_serial(db, "system"), new_serial(db, "unified")
    interface = str(scalar(db, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', "
                               "'T0001')"))

    async def scenario() -> None:
        async with async_connection(kind, hivenet_app_url) as conn:
            with unified_serial_context(unified):
                steps = AsyncStepRepository(conn)
                for amount in (100, 200):
                    async with steps.step(system, REQUEST) as run:
                        if run.started:
                            run.response = {"posted": amount}
                requests = AsyncRequestRepository(conn)
                await requests.begin("orders", "req-1", {"sku": "P1"})
                with pytest.raises(StepInProgress):  # the same transaction: still processing
                    await requests.begin("orders", "req-1", {"sku": "P1"}, nowait=True)
            async with async_connection(kind, hivenet_app_url) as other:
                await AsyncClaimRepository(other).claim("queue", "m-1")
                await AsyncInterfaceDedup(other).claim(interface)
                await AsyncSerialRepository(other).next_durable("unified", system="C0001",
                                                                module="A01", instance="01")

    asyncio.run(scenario())
    blocks = named(spans, "hivenet.step")
    assert [span.attributes[otel.DECISION] for span in blocks] == ["started", "replayed"]
    assert {span.attributes[otel.UNIFIED] for span in blocks} == {unified}
    begin = named(spans, "hivenet.step.begin")[0]
    assert begin.parent is not None and begin.parent.span_id == blocks[0].context.span_id
    assert [decisions(span) for span in named(spans, "hivenet.request.begin")] == [
        ["started"], ["in_progress"]]
    assert decisions(only(spans, "hivenet.claim")) == ["claimed"]
    assert decisions(only(spans, "hivenet.interface.claim")) == ["claimed"]
    assert str(only(spans, "hivenet.serial.durable").attributes[otel.ISSUED]).startswith("C0001A01")


# --- the unified serial in W3C baggage ------------------------------------------------------

def test_a_bound_serial_is_in_the_baggage_and_the_outgoing_baggage_header(
        spans: InMemorySpanExporter) -> None:
    unified = "C0001A0101202611210000000007"
    token = context.attach(baggage.set_baggage("tenant", "t-42"))  # the application's own
    try:
        with unified_serial_context(unified):
            assert baggage.get_baggage(otel.UNIFIED) == unified
            headers = outgoing_headers(system_serial="C0001A010120261121000000000013")
        assert baggage.get_baggage(otel.UNIFIED) is None  # only inside the block
    finally:
        context.detach(token)
    assert headers[UNIFIED_HEADER] == unified
    assert sorted(headers[BAGGAGE_HEADER].split(",")) == [
        f"{otel.UNIFIED}={unified}", "tenant=t-42"]


def test_the_serial_is_read_from_a_baggage_header_or_the_current_baggage(
        spans: InMemorySpanExporter) -> None:
    unified = "C0001A0101202611210000000007"
    assert read_headers({"Baggage": f"tenant=t-42, {otel.UNIFIED}={unified};p=1"}) \
        .unified_serial == unified
    # several baggage headers are one list; a hivenet header wins over the baggage
    assert read_headers([("baggage", "tenant=t-42"), ("baggage", f"{otel.UNIFIED}={unified}")]) \
        .unified_serial == unified
    assert read_headers({UNIFIED_HEADER: "X" * 28, "baggage": f"{otel.UNIFIED}={unified}"}) \
        .unified_serial == "X" * 28
    with pytest.raises(InvalidInput, match=r"baggage hivenet.serial.unified: '<script>'"):
        read_headers({"baggage": f"{otel.UNIFIED}=%3Cscript%3E"})
    # what an instrumented server extracted: the current context's baggage (OpenTelemetry's
    # propagator leaves an entry's properties in its value)
    token = context.attach(baggage.set_baggage(otel.UNIFIED, f"{unified};p=1"))
    try:
        assert current_unified_serial() == unified
        with unified_serial_context(None):  # bound to none: none, in the baggage too
            assert current_unified_serial() is None
    finally:
        context.detach(token)


def test_the_serial_travels_in_baggage_alone_to_the_next_service(
        spans: InMemorySpanExporter, db: psycopg.Connection, hivenet_app_url: str) -> None:
    """Caller and provider as two services: only the baggage header crosses (an OpenTelemetry
    proxy in between keeps baggage and drops headers it does not know), and the provider's
    step records the caller's unified serial."""
    unified, system = new_serial(db, "unified"), new_serial(db, "system")
    with unified_serial_context(unified):
        sent = {BAGGAGE_HEADER: outgoing_headers()[BAGGAGE_HEADER]}

    def provider() -> None:  # a fresh context: nothing bound, no baggage
        assert current_unified_serial() is None
        with bind_from_headers(sent), sync_connection("psycopg", hivenet_app_url) as conn:
            StepRepository(conn).run(system, REQUEST, lambda: {"posted": 100})
            conn.commit()

    contextvars.Context().run(provider)
    assert scalar(db, "SELECT unified_serial FROM hivenet.step_attempt WHERE system_serial = %s",
                  (system,)) == unified
    assert only(spans, "hivenet.step").attributes[otel.UNIFIED] == unified


def test_a_step_records_the_serial_an_instrumented_server_extracted(
        spans: InMemorySpanExporter, db: psycopg.Connection, hivenet_app_url: str) -> None:
    """No binding at all: the incoming baggage, as OpenTelemetry's server instrumentation
    extracts it into the current context, is the unified serial the step records."""
    unified, system = new_serial(db, "unified"), new_serial(db, "system")
    extracted = W3CBaggagePropagator().extract({"baggage": f"{otel.UNIFIED}={unified}"})
    token = context.attach(extracted)
    try:
        with sync_connection("psycopg", hivenet_app_url) as conn:
            StepRepository(conn).run(system, REQUEST, lambda: {"posted": 100})
            conn.commit()
    finally:
        context.detach(token)
    assert scalar(db, "SELECT unified_serial FROM hivenet.step_attempt WHERE system_serial = %s",
                  (system,)) == unified


# --- the HTTP middleware ------------------------------------------------------------------

def test_the_asgi_middleware_decisions_are_spans(spans: InMemorySpanExporter,
                                                 hivenet_app_url: str) -> None:
    pytest.importorskip("greenlet")
    import httpx
    from sqlalchemy.ext.asyncio import create_async_engine
    from sqlalchemy.pool import NullPool
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from hivenet_db.asgi import IdempotencyMiddleware
    from hivenet_db.urls import sqlalchemy_url

    async def order(_: Any) -> JSONResponse:
        return JSONResponse({"order": 1}, status_code=201)

    engine = create_async_engine(sqlalchemy_url(hivenet_app_url), poolclass=NullPool)
    app = IdempotencyMiddleware(Starlette(routes=[Route("/orders", order, methods=["POST"])]),
                                engine)

    async def twice() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [(await client.post("/orders", json={"sku": "P1"},
                                       headers={"Idempotency-Key": '"k-1"'})).status_code
                    for _ in range(2)]

    try:
        assert asyncio.run(twice()) == [201, 201]
    finally:
        asyncio.run(engine.dispose())
    begins = named(spans, "hivenet.request.begin")
    assert [decisions(span) for span in begins] == [["started"], ["replayed"]]
    assert {span.attributes[otel.NAMESPACE] for span in begins} == {"http"}
