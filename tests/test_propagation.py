"""Propagation of the unified serial: context variable, HTTP / gRPC / message headers."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import Engine, text

from hivenet_db import SerialRepository, dedup, steps
from hivenet_db.errors import InvalidInput
from hivenet_db.propagation import (
    INTERFACE_HEADER,
    SYSTEM_HEADER,
    UNIFIED_HEADER,
    CallSerials,
    bind_from_headers,
    current_unified_serial,
    outgoing_grpc_metadata,
    outgoing_headers,
    outgoing_message_headers,
    read_headers,
    resolve_unified_serial,
    unified_serial_context,
)

U = "C0001A0101201507100123456789"
S = "B0001P010120150710000000000001"
I = "C0001A0101B0001201507102301100000000001"  # noqa: E741


def test_context_binds_and_restores() -> None:
    assert current_unified_serial() is None
    with unified_serial_context(U):
        assert current_unified_serial() == U
        with unified_serial_context("X" * 28):
            assert current_unified_serial() == "X" * 28
        assert current_unified_serial() == U
    assert current_unified_serial() is None


def test_explicit_serial_wins_over_the_bound_one() -> None:
    assert resolve_unified_serial(None) is None
    with unified_serial_context(U):
        assert resolve_unified_serial(None) == U
        assert resolve_unified_serial("Y" * 28) == "Y" * 28


def test_each_thread_and_task_has_its_own_serial() -> None:
    barrier = threading.Barrier(2)
    seen: dict[str, str | None] = {}

    def worker(name: str) -> None:
        with unified_serial_context(name * 28):
            barrier.wait()  # both bound at the same time
            seen[name] = current_unified_serial()

    threads = [threading.Thread(target=worker, args=(n,)) for n in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"A": "A" * 28, "B": "B" * 28}

    async def task(name: str, ready: asyncio.Event, go: asyncio.Event) -> str | None:
        with unified_serial_context(name * 28):
            ready.set()
            await go.wait()
            return current_unified_serial()

    async def both() -> list[str | None]:
        ready_a, ready_b, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(task("C", ready_a, go)),
                 asyncio.create_task(task("D", ready_b, go))]
        await ready_a.wait()
        await ready_b.wait()
        go.set()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(both()) == ["C" * 28, "D" * 28]


def test_outgoing_headers_in_every_shape() -> None:
    with unified_serial_context(U):
        assert outgoing_headers(system_serial=S, interface_serial=I) == {
            UNIFIED_HEADER: U, SYSTEM_HEADER: S, INTERFACE_HEADER: I}
        assert outgoing_message_headers() == [(UNIFIED_HEADER, U.encode())]
        assert outgoing_grpc_metadata(interface_serial=I) == [
            ("x-hivenet-unified-serial", U), ("x-hivenet-interface-serial", I)]
    assert outgoing_headers() == {}  # nothing bound, nothing passed: no header at all


def test_read_headers_from_mappings_pairs_and_bytes() -> None:
    assert read_headers({"x-hivenet-unified-serial": U, "Content-Type": "json"}) == \
        CallSerials(unified_serial=U)
    kafka = [("X-HIVENET-SYSTEM-SERIAL", S.encode()), ("x-hivenet-interface-serial", I.encode())]
    assert read_headers(kafka) == CallSerials(system_serial=S, interface_serial=I)
    assert read_headers([]) == CallSerials()


@pytest.mark.parametrize("bad", ["", "C0001\r\nSet-Cookie: x=1", "有中文", "x" * 65])
def test_values_that_are_no_serial_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidInput) as error:
        read_headers({UNIFIED_HEADER: bad})
    assert UNIFIED_HEADER in str(error.value)
    with pytest.raises(InvalidInput):
        outgoing_headers(bad)


def test_bind_from_headers_keeps_the_bound_serial_when_the_call_has_none() -> None:
    with bind_from_headers({SYSTEM_HEADER: S}) as serials:
        assert serials.system_serial == S and current_unified_serial() is None
    with unified_serial_context(U), bind_from_headers({}):
        assert current_unified_serial() == U
    with unified_serial_context("Z" * 28), bind_from_headers({UNIFIED_HEADER: U}):
        assert current_unified_serial() == U


class _Provider(BaseHTTPRequestHandler):
    """A provider system: binds the incoming unified serial and reports what it sees."""

    def do_GET(self) -> None:
        with bind_from_headers(self.headers.items()) as serials:
            body = json.dumps({"bound": current_unified_serial(),
                               "interface": serials.interface_serial}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_serials_issued_by_the_database_cross_a_real_http_call(
        hivenet_engine: Engine, provider: str) -> None:
    with hivenet_engine.begin() as conn:
        repo = SerialRepository(conn)
        unified = repo.next_unified("C0001", "A01", "01")  # created at the channel
        interface = repo.next_interface("C0001", "A01", "01", "B0001")
    with unified_serial_context(unified):
        request = urllib.request.Request(
            provider, headers=outgoing_headers(interface_serial=interface))
        with urllib.request.urlopen(request, timeout=10) as response:
            seen = json.loads(response.read())
    assert seen == {"bound": unified, "interface": interface}


def test_repositories_record_the_bound_unified_serial(hivenet_engine: Engine) -> None:
    """Requirement: repositories record the current unified serial when given none."""
    with hivenet_engine.begin() as conn:
        conn.execute(text("""SELECT hivenet.prepare_scope(format, '{"system": "P0001",
                             "module": "B01", "instance": "01"}') FROM unnest(ARRAY['system',
                             'interface']) AS format"""))
        repo = SerialRepository(conn)
        unified = repo.next_unified("C0001", "A01", "01")
        system = repo.next_system("P0001", "B01", "01")
        interface = repo.next_interface("P0001", "B01", "01", "K0001")
    with hivenet_engine.begin() as conn, unified_serial_context(unified):
        dedup.InterfaceDedup(conn).claim(interface, system_serial=system)
        steps.StepRepository(conn).begin(system, {"amount": 1})
    with hivenet_engine.begin() as conn:
        (call,) = dedup.InterfaceDedup(conn).call_chain(unified)
        assert (call.interface_serial, call.system_serial) == (interface, system)
        recorded = conn.exec_driver_sql(
            "SELECT unified_serial FROM hivenet.step_attempt WHERE system_serial = %(s)s",
            {"s": system}).scalar()
    assert recorded == unified
