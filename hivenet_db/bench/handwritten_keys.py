"""``RequestRepository`` against the idempotency check an application would write itself, the
brandur/rocket-rides-atomic way: a key table of its own, plain psycopg, one transaction.

Each call is one new key, begun and finished in one committed transaction with a request:

- baseline: ``INSERT .. ON CONFLICT DO NOTHING RETURNING`` of the key row with the request's
  fingerprint (SHA-256 computed in the application); on conflict ``SELECT .. FOR UPDATE`` and
  compare the fingerprint; ``UPDATE`` of the row with the response at the end; commit.
- candidate: ``RequestRepository.begin`` and ``finish`` on the same psycopg connection; commit.

``THREADS`` threads, one connection each, used by both in turn (rounds alternating). The
result's "tps" are committed keys per second; its "cpu us/tx" the CPU microseconds per key of
the server's processes (when the server is the runner's own) and of this Python process (its
threads included); the progress lines give the two apart.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from hivenet_db.bench import CpuMeter, Result
from hivenet_db.requests import RequestRepository

NAME = "requests_vs_handwritten"
DESCRIPTION = ("RequestRepository begin + finish of a new key vs the same checks written in the "
               "application (key table of its own, INSERT .. ON CONFLICT DO NOTHING RETURNING, "
               "FOR UPDATE on conflict, UPDATE at the end), 8 threads, keys per second "
               "(goal: ratio >= 0.9)")
THREADS = 8
NAMESPACE = "bench.handwritten"
REQUEST = {"method": "POST", "target": "/rides", "body_sha256": "0" * 64}
RESPONSE = {"status": 201, "headers": [["content-type", "application/json"]],
            "body": "eyJpZCI6IDQyfQ=="}

_TABLE = """
CREATE TABLE IF NOT EXISTS public.bench_idempotency_keys (
    key text PRIMARY KEY,
    fingerprint bytea NOT NULL,
    locked_at timestamptz NOT NULL DEFAULT now(),
    response jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
_INSERT = ("INSERT INTO public.bench_idempotency_keys (key, fingerprint) VALUES (%s, %s) "
           "ON CONFLICT DO NOTHING RETURNING key")
_LOCKED = ("SELECT fingerprint, response FROM public.bench_idempotency_keys WHERE key = %s "
           "FOR UPDATE")
_DONE = "UPDATE public.bench_idempotency_keys SET response = %s::jsonb WHERE key = %s"

Conn = psycopg.Connection[Any]


class Mismatch(Exception):
    """The hand-written check's 422: the key came with another request."""


def handwritten(conn: Conn, key: str, request: Any, response: Any) -> Any:
    """One keyed request the hand-written way; the stored response when it is a repeat."""
    request_json = json.dumps(request, sort_keys=True, separators=(",", ":"))
    fingerprint = hashlib.sha256(request_json.encode()).digest()
    with conn.transaction():
        if conn.execute(_INSERT, (key, fingerprint)).fetchone() is None:
            row = conn.execute(_LOCKED, (key,)).fetchone()
            assert row is not None
            if bytes(row[0]) != fingerprint:
                raise Mismatch(key)
            if row[1] is not None:
                return row[1]
            # (A committed row always has its response: insert and update share one
            # transaction, and FOR UPDATE waited for a concurrent one to end.)
        conn.execute(_DONE, (json.dumps(response), key))
    return response


def repository(conn: Conn, key: str, request: Any, response: Any) -> Any:
    """The same keyed request through ``RequestRepository``."""
    repo = RequestRepository(conn)
    with conn.transaction():
        start = repo.begin(NAMESPACE, key, request)
        if start.replayed:
            return start.response
        repo.finish(NAMESPACE, key, start.attempt, True, response)
    return response


Call = Callable[[Conn, str, Any, Any], Any]


def _rate(conns: list[Conn], call: Call, seconds: float,
          meter: CpuMeter | None) -> tuple[float, float, float | None]:
    """Keys per second of ``call`` on every connection at once for ``seconds``; client and
    server CPU microseconds per key (server: None without a meter)."""
    done = [0] * len(conns)
    failed: list[BaseException] = []
    stop = threading.Event()

    def work(i: int, conn: Conn) -> None:
        try:
            while not stop.is_set():
                call(conn, uuid.uuid4().hex, REQUEST, RESPONSE)
                done[i] += 1
        except BaseException as error:  # re-raised by the caller
            failed.append(error)

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(conns)]
    server = meter.seconds() if meter else 0.0
    client, started = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    client_used = time.process_time() - client
    server_used = meter.seconds() - server if meter else None
    if failed:
        raise failed[0]
    n = sum(done)
    return (n / elapsed, client_used / n * 1e6,
            None if server_used is None else server_used / n * 1e6)


def measure(url: str, rounds: int, seconds: float, say: Callable[[str], None],
            meter: CpuMeter | None = None) -> Result:
    result = Result(scenario=NAME, description=DESCRIPTION, clients=THREADS,
                    seconds=int(seconds), unit="keys/s")
    conns = [psycopg.connect(url, autocommit=True) for _ in range(THREADS)]
    try:
        conns[0].execute(_TABLE)
        for call in (handwritten, repository):  # psycopg prepares a statement after 5 runs
            _rate(conns, call, 1, None)
        order = [("baseline", handwritten, result.baseline_tps, result.baseline_cpu_us),
                 ("candidate", repository, result.candidate_tps, result.candidate_cpu_us)]
        for i in range(rounds):
            for kind, call, sink, cpu_sink in order if i % 2 == 0 else reversed(order):
                rate, client, server = _rate(conns, call, seconds, meter)
                sink.append(rate)
                if server is not None:
                    cpu_sink.append(client + server)
                say(f"  {NAME} round {i + 1}/{rounds} {kind:<9} {rate:8.0f} keys/s  "
                    f"client {client:6.1f} cpu us/key"
                    + ("" if server is None else f"  server {server:6.1f} cpu us/key"))
    finally:
        for conn in conns:
            conn.close()
    return result
