"""Load (issue 10, part 6): 32 connections of mixed work (allocation, batches, claims, steps
finished in the same or a later transaction, commits and rollbacks) against a server of the
test's own, with maintain() every few seconds. Proves: no error, every committed serial
unique, every committed claim and step there, and dead rows of the tables every call writes
bounded (the autovacuum storage parameters of revision 0010), not growing with the table.

In the suite the run lasts HIVENET_LOAD_SECONDS (60 by default; .ci/run runs it), on a
server whose autovacuum wakes every 5 s so that a minute sees several rounds. The figures in
docs/benchmarks.md come from a longer run with the server's default autovacuum (1 min):

    HIVENET_LOAD_SECONDS=600 HIVENET_LOAD_NAPTIME=60s \\
        .venv/bin/python -m pytest tests/test_load.py -s -p no:randomly

HIVENET_LOAD_DEFAULT_AUTOVACUUM=1 resets the tables' autovacuum parameters first, for the
comparison (the test then fails on dead rows). Throughput and latency are printed, never
asserted (they are the machine's, not the code's).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hivenet_db.tools import migrate, scopes
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("HIVENET_LOAD_SECONDS", "60"))
NAPTIME = os.environ.get("HIVENET_LOAD_NAPTIME", "5s")
CONNECTIONS = 32
# Finished steps already recorded (request_attempt, namespace hivenet.steps): the default
# autovacuum (20 % of the table) would let dead rows grow to 60,000 before cleaning; the
# table's own parameters do not wait.
PREFILL = 300_000
# request_attempt's autovacuum_vacuum_threshold (step_attempt's before revision 0012): dead rows
# may exceed it by what the load adds until autovacuum next wakes and finishes (two
# naptimes, to be safe).
THRESHOLD = 2_000
WATCHED = ("request_attempt", "claim_record")


@dataclass
class Worker:
    """What one connection did: latencies per kind, what it committed, its errors."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    serials: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    root = Path(tempfile.mkdtemp(prefix="hivenet-load-"))
    os.chmod(root, 0o755)
    server = EmbeddedPostgres(root=root / "pg", fsync=False)
    try:
        server.init()
        with (server.data_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"autovacuum_naptime = '{NAPTIME}'\n")
        server.start()
        server.ensure_database("load")
        migrate.upgrade(server.url("load"))
        scopes.prepare_url(server.url("load"), ["C0001 A01 01-18"])  # what the workers use
        yield server
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


FIELDS = '{"system": "C0001", "module": "A01", "instance": "%02d"}'


def one_operation(conn: psycopg.Connection, rng: random.Random, worker: Worker,
                  number: int) -> str:
    """One transaction of a kind drawn at random; returns the kind. Records what committed."""
    draw = rng.random()
    instance = rng.randint(1, 8)
    if draw < 0.35:
        with conn.transaction():
            serial = conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', %s)",
                                  (f"{instance:02d}",)).fetchone()[0]
        worker.serials.append(serial)
        return "allocate"
    if draw < 0.45:
        with conn.transaction():
            batch = [r[0] for r in conn.execute(
                "SELECT * FROM hivenet.next_serials('unified', %s, 20)",
                (FIELDS % (instance + 10),))]
        worker.serials.extend(batch)
        return "batch"
    if draw < 0.65:
        key = f"{id(worker)}-{number}"
        roll_back = rng.random() < 0.2
        with conn.transaction() as tx:
            conn.execute("SELECT hivenet.claim('load', %s)", (key,))
            if roll_back:
                raise psycopg.Rollback(tx)
        if not roll_back:
            worker.claims.append(key)
        return "claim"
    # A step: finished in its own transaction, rolled back, or finished in a later one.
    how = rng.random()
    with conn.transaction() as tx:
        system = conn.execute("SELECT hivenet.next_system_serial('C0001', 'A01', %s)",
                              (f"{instance:02d}",)).fetchone()[0]
        attempt = conn.execute("SELECT attempt FROM hivenet.begin_step(%s, %s)",
                               (system, f'{{"n": {number}}}')).fetchone()[0]
        if how < 0.6:
            conn.execute("SELECT hivenet.finish_step(%s, %s, true, '{\"ok\": true}')",
                         (system, attempt))
        elif how < 0.75:
            raise psycopg.Rollback(tx)
    if how < 0.6:
        worker.steps.append(system)
    elif how >= 0.75:
        with conn.transaction():
            conn.execute("SELECT hivenet.finish_step(%s, %s, true, '{\"ok\": true}')",
                         (system, attempt))
        worker.steps.append(system)
    return "step"


def work(url: str, deadline: float, seed: int, worker: Worker) -> None:
    rng = random.Random(seed)
    with psycopg.connect(url) as conn:
        number = 0
        while time.monotonic() < deadline:
            number += 1
            started = time.perf_counter()
            try:
                kind = one_operation(conn, rng, worker, number)
            except psycopg.Error as error:
                if len(worker.errors) < 5:
                    worker.errors.append(f"{error.diag.sqlstate}: {error}")
                else:
                    worker.errors.append("")
                continue
            worker.latencies[kind].append(time.perf_counter() - started)


def watch(url: str, stop: threading.Event, samples: list[dict[str, Any]]) -> None:
    """Every 2 s: dead and live rows of the watched tables; maintain() every 10 s."""
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        last_maintain = started
        while not stop.wait(2):
            if time.monotonic() - last_maintain >= 10:
                conn.execute("SELECT hivenet.maintain()")
                last_maintain = time.monotonic()
            row: dict[str, Any] = {"t": round(time.monotonic() - started)}
            for table, dead, live, vacuums in conn.execute("""
                    SELECT relname, n_dead_tup, n_live_tup, autovacuum_count
                    FROM pg_stat_user_tables WHERE schemaname = 'hivenet' AND relname = ANY(%s)
                    """, (list(WATCHED),)):
                row[table] = (dead, live, vacuums)
            samples.append(row)


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def _sizes(conn: psycopg.Connection) -> dict[str, int]:
    return dict(conn.execute("""SELECT relname, pg_total_relation_size(c.oid)::bigint
        FROM pg_class c WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind = 'r'
          AND relname = ANY(%s)""", (list(WATCHED),)).fetchall())


def test_32_connections_of_mixed_work_keep_every_guarantee_and_dead_rows_flat(
        server: EmbeddedPostgres) -> None:
    url = server.url("load")
    with psycopg.connect(url, autocommit=True) as conn:
        # Finished steps of earlier days, as a table in service holds.
        conn.execute("""
            INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint,
                started_at, finished_at, response)
            SELECT 'hivenet.steps', 'P0001A0101' || to_char(now() - interval '2 days', 'YYYYMMDD')
                   || lpad(i::text, 12, '0'), 1, 'success', '\\x00',
                   now() - interval '2 days', now() - interval '2 days', '{}'
            FROM generate_series(1, %s) AS i""", (PREFILL,))
        conn.execute("VACUUM ANALYZE hivenet.request_attempt")
        if os.environ.get("HIVENET_LOAD_DEFAULT_AUTOVACUUM"):  # the comparison: as before 0010
            for table in WATCHED:
                conn.execute(f"ALTER TABLE hivenet.{table} RESET "
                             "(autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold)")
        sizes_before = _sizes(conn)
    workers = [Worker() for _ in range(CONNECTIONS)]
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(url, stop, samples))
    watcher.start()
    deadline = time.monotonic() + SECONDS
    threads = [threading.Thread(target=work, args=(url, deadline, seed, worker))
               for seed, worker in enumerate(workers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 120)
    elapsed = time.monotonic() - started
    stop.set()
    watcher.join(30)

    latencies: dict[str, list[float]] = defaultdict(list)
    for worker in workers:
        for kind, values in worker.latencies.items():
            latencies[kind].extend(values)
    errors = [e for worker in workers for e in worker.errors]
    serials = [s for worker in workers for s in worker.serials]
    claims = [c for worker in workers for c in worker.claims]
    steps = [s for worker in workers for s in worker.steps]
    total = sum(len(v) for v in latencies.values())
    with psycopg.connect(url, autocommit=True) as conn:
        sizes_after = _sizes(conn)
        found_claims = conn.execute("SELECT count(*) FROM hivenet.claim_record "
                                    "WHERE namespace = 'load' AND key = ANY(%s)",
                                    (claims,)).fetchone()[0]
        found_steps = conn.execute("SELECT count(DISTINCT system_serial) FROM "
                                   "hivenet.step_attempt WHERE state = 'success' AND "
                                   "system_serial = ANY(%s)", (steps,)).fetchone()[0]

    print(f"\nload: {CONNECTIONS} connections, {elapsed:.0f} s, autovacuum_naptime {NAPTIME}: "
          f"{total} transactions, {total / elapsed:.0f}/s, {len(errors)} errors")
    for kind, values in sorted(latencies.items()):
        print(f"  {kind:9} {len(values):7} tx  p50 {_percentile(values, 50) * 1000:6.1f} ms"
              f"  p99 {_percentile(values, 99) * 1000:6.1f} ms")
    for table in WATCHED:
        print(f"  {table}: {sizes_before.get(table, 0) // 1024} kB -> "
              f"{sizes_after.get(table, 0) // 1024} kB; dead rows every 10 s: " + " ".join(
                  str(s[table][0]) for s in samples[4::5] if table in s)
              + f"; autovacuums {samples[-1][table][2] if samples else '?'}")

    assert errors == [], errors[:5]
    assert total > CONNECTIONS
    assert len(set(serials)) == len(serials)
    assert found_claims == len(claims)
    assert found_steps == len(set(steps)) == len(steps)
    # Dead rows stay under the table's own threshold plus one naptime's worth, from the
    # second half of the run on (the first has no dead rows to speak of yet).
    naptime = float(NAPTIME.removesuffix("s")) if NAPTIME.endswith("s") else 60.0
    bound = THRESHOLD + len(latencies["step"]) / elapsed * 2 * naptime
    late = [s["request_attempt"][0] for s in samples[len(samples) // 2:]
            if "request_attempt" in s]
    print(f"  request_attempt dead rows, second half: max {max(late, default=0)}, "
          f"bound {bound:.0f}")
    assert late and max(late) <= bound, late
