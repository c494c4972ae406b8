"""Measured cases that are not a pair of pgbench scripts: each compares a baseline with a
candidate in the same run, rounds alternating, and gives a ``Result`` like the scenarios'
(its ``unit`` says what its "tps" count).

- ``serials_vs_redis``: ``hivenet.next_serials(.., 1000)`` (pgbench, serials per second)
  against 1000 Redis ``INCR``s pipelined per round trip (``redis-benchmark -P 1000``), on a
  Redis server of the runner's own (loopback, a port of its own, no persistence, stopped by
  its pid). Debian: the package redis-tools holds the server (``redis-check-rdb``, which is
  the server when called as redis-server) and redis-benchmark.
- ``partition_drop``: dropping the day partition of one million recorded interface calls
  (``hivenet._drop_interface_partition``, what maintain() does) against ``DELETE`` of the same
  day's rows from an unpartitioned copy of the table (same columns and indexes).
- ``first_use``: the first allocation of an unprepared scope from its format's shared
  fallback (the opt-in: setting ``shared_fallback``, set for the case and put back) against
  an allocation of a prepared one, each in its own committed transaction (milliseconds per
  call). With the defaults an unprepared scope is refused; the prepared scope's path is
  ``alloc_formatted``'s.
- ``requests_batch_100``: 100 new keys begun and finished in one transaction with
  ``RequestRepository.begin_many`` + ``finish_many`` against ``begin`` + ``finish`` of each
  key, on the same connections (keys per second).
- ``time_id_vs_uuidv7`` (PostgreSQL 18): ``next_time_id`` against ``uuidv7()``, for reference.
- ``prepare_scopes``: preparing 10,000 scopes (``hivenet.prepare_scope``, 500 a transaction,
  as ``hivenet-db prepare``) against creating 10,000 bare sequences in the same transactions
  (seconds for all).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from hivenet_db.bench import BenchError, CpuMeter, Result, Scenario, pgbench, run_scenario
from hivenet_db.bench.handwritten_keys import _rate
from hivenet_db.requests import RequestRepository
from hivenet_db.tools.embedded_postgres import find_bin_dir
from hivenet_db.tools.proc_stat import cpu_seconds

Say = Callable[[str], None]


@dataclass(frozen=True)
class CaseRun:
    """What a case is run with: the database, the runner's options and its server's meter."""

    url: str
    rounds: int
    seconds: int | None
    clients: int | None
    quick: bool
    say: Say
    meter: CpuMeter | None = None


# --- serials_vs_redis -------------------------------------------------------------------

BATCH = 1000
_FIELDS = '{"system": "C0001", "module": "A01", "instance": "01"}'


def redis_server() -> tuple[str, str] | None:
    """(executable, argv[0]) of a Redis server, or None. Debian's redis-tools ships the server
    as redis-check-rdb (the same binary; it acts as the server when called redis-server)."""
    if found := shutil.which("redis-server"):
        return found, "redis-server"
    if found := shutil.which("redis-check-rdb"):
        return found, "redis-server"
    return None


def _cpu_of(pid: int) -> float:
    seconds = cpu_seconds(pid)
    if seconds is None:
        raise RuntimeError(f"process {pid} is gone")
    return seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def own_redis(say: Say) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A throwaway Redis on 127.0.0.1 (persistence off), stopped by its pid afterwards."""
    server = redis_server()
    if server is None:
        raise BenchError("redis-server not found: install Redis (Debian: apt-get install "
                         "redis-tools, which holds the server as redis-check-rdb)")
    executable, argv0 = server
    port = _free_port()
    workdir = Path(tempfile.mkdtemp(prefix="hivenet-bench-redis-"))
    log = (workdir / "redis.log").open("wb")
    proc = subprocess.Popen(
        [argv0, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--dir", str(workdir), "--protected-mode", "yes"],
        executable=executable, stdout=log, stderr=subprocess.STDOUT)
    try:
        say(f"  started Redis on 127.0.0.1:{port} (pid {proc.pid}, persistence off)")
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"Redis did not start: {(workdir / 'redis.log').read_text()}")
            time.sleep(0.1)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _redis_benchmark(port: int, clients: int, requests: int) -> float:
    """INCRs per second of redis-benchmark, BATCH pipelined per round trip."""
    tool = shutil.which("redis-benchmark")
    if tool is None:
        raise BenchError("redis-benchmark not found (Debian: redis-tools)")
    proc = subprocess.run([tool, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
                           "-n", str(requests), "-P", str(BATCH), "-t", "incr", "--csv"],
                          capture_output=True, text=True, check=False)
    for row in csv.reader(io.StringIO(proc.stdout)):
        if row and row[0] == "INCR":
            return float(row[1])
    raise BenchError(f"no INCR rate in redis-benchmark output: {proc.stdout} {proc.stderr}")


def serials_vs_redis(run: CaseRun) -> Result:
    seconds = run.seconds or 10
    clients = run.clients or 16
    result = Result(scenario="serials_vs_redis", description=SERIALS_VS_REDIS,
                    clients=clients, seconds=seconds, unit="serials/s")
    with psycopg.connect(run.url, autocommit=True) as conn:
        conn.execute("SELECT hivenet.prepare_scope('unified', %s::jsonb)", (_FIELDS,))
    with tempfile.TemporaryDirectory(prefix="hivenet-bench-") as tmp, own_redis(run.say) as (
            port, redis):
        script = Path(tmp) / "next_serials.sql"
        script.write_text(f"SELECT count(*) FROM hivenet.next_serials('unified', "
                          f"'{_FIELDS}', {BATCH});\n")
        os.chmod(tmp, 0o755)
        # Sized from a first short run, so a round of redis-benchmark lasts about `seconds`.
        rate = _redis_benchmark(port, clients, 100 * BATCH)
        for i in range(run.rounds):
            order = ["baseline", "candidate"] if i % 2 == 0 else ["candidate", "baseline"]
            for kind in order:
                cpu_us: float | None
                if kind == "baseline":
                    before = _cpu_of(redis.pid)
                    usage = os.times()
                    started = time.perf_counter()
                    requests = max(BATCH * clients, int(rate * seconds) // BATCH * BATCH)
                    rate = _redis_benchmark(port, clients, requests)
                    elapsed = time.perf_counter() - started
                    after = os.times()
                    cpu = (_cpu_of(redis.pid) - before + after.children_user
                           - usage.children_user + after.children_system - usage.children_system)
                    result.baseline_tps.append(rate)
                    result.baseline_cpu_us.append(cpu / (rate * elapsed) * 1e6)
                    value, cpu_us = rate, result.baseline_cpu_us[-1]
                else:
                    tps, tx_cpu = pgbench(run.url, script, clients, seconds=seconds,
                                          meter=run.meter)
                    value = tps * BATCH
                    result.candidate_tps.append(value)
                    cpu_us = None if tx_cpu is None else tx_cpu / BATCH
                    if cpu_us is not None:
                        result.candidate_cpu_us.append(cpu_us)
                run.say(f"  serials_vs_redis round {i + 1}/{run.rounds} {kind:<9} "
                        f"{value:12.0f} serials/s"
                        + ("" if cpu_us is None else f"  {cpu_us:6.2f} cpu us/serial"))
    if not result.candidate_cpu_us:
        result.baseline_cpu_us.clear()
    return result


SERIALS_VS_REDIS = (f"hivenet.next_serials(.., {BATCH}) in pgbench vs {BATCH} Redis INCRs "
                    "pipelined (redis-benchmark -P), serials per second, own Redis server")


# --- partition_drop ---------------------------------------------------------------------

ROWS = 1_000_000
QUICK_ROWS = 100_000
PARTITION_DROP = ("dropping the day partition of 1,000,000 interface calls (what maintain() "
                  "does) vs DELETE of that day from an unpartitioned copy; per second")

_FLAT = """
CREATE TABLE IF NOT EXISTS public.bench_flat_call
    (LIKE hivenet.interface_call INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE INDEX IF NOT EXISTS bench_flat_call_unified ON public.bench_flat_call (unified_serial)
    WHERE unified_serial IS NOT NULL;
"""
# Calls of day %(day)s (and, in the flat copy, a tenth as many of the day before): the same
# rows as the claims would record.
_FILL = """
INSERT INTO {table} (interface_serial, serial_day, unified_serial, recorded_at)
SELECT 'C0001A01' || lpad((g %% 16 + 1)::text, 2, '0') || 'T0001'
           || to_char(%(day)s::date + g * interval '80 ms', 'YYYYMMDDHH24MISS')
           || lpad(g::text, 10, '0'),
       %(day)s::date,
       'C0001A0101' || to_char(%(day)s::date, 'YYYYMMDD') || lpad((g / 4)::text, 10, '0'),
       %(day)s::date + g * interval '80 ms'
FROM generate_series(1, %(rows)s) g
"""


def _timed(conn: psycopg.Connection[tuple[object, ...]], sql: str,
           params: tuple[object, ...] | None = None) -> float:
    started = time.perf_counter()
    conn.execute(sql, params)
    return time.perf_counter() - started


def partition_drop(run: CaseRun) -> Result:
    rows = QUICK_ROWS if run.quick else ROWS
    result = Result(scenario="partition_drop",
                    description=PARTITION_DROP.replace("1,000,000", f"{rows:,}"),
                    clients=1, seconds=0, unit="per s")
    with psycopg.connect(run.url, autocommit=True) as conn:
        conn.execute(_FLAT)
        for i in range(run.rounds):
            day = f"{2001 + i}-01-02"
            conn.execute("SELECT hivenet._create_interface_partition(%s)", (day,))
            conn.execute("TRUNCATE public.bench_flat_call")
            conn.execute(_FILL.format(table="hivenet.interface_call"),
                         {"day": day, "rows": rows})
            conn.execute(_FILL.format(table="public.bench_flat_call"),
                         {"day": day, "rows": rows})
            conn.execute(_FILL.format(table="public.bench_flat_call"),
                         {"day": f"{2001 + i}-01-01", "rows": rows // 10})
            conn.execute("VACUUM ANALYZE public.bench_flat_call")
            conn.execute("VACUUM ANALYZE hivenet.interface_call")
            conn.execute("CHECKPOINT")
            order = ["baseline", "candidate"] if i % 2 == 0 else ["candidate", "baseline"]
            for kind in order:
                if kind == "baseline":
                    took = _timed(conn, "DELETE FROM public.bench_flat_call WHERE serial_day = %s",
                                  (day,))
                    result.baseline_tps.append(1 / took)
                else:
                    took = _timed(conn, "SELECT hivenet._drop_interface_partition(%s::regclass)",
                                  (f"hivenet.interface_call_{day.replace('-', '')}",))
                    result.candidate_tps.append(1 / took)
                run.say(f"  partition_drop round {i + 1}/{run.rounds} {kind:<9} "
                        f"{took * 1000:10.1f} ms ({rows:,} rows)")
    return result


# --- first_use --------------------------------------------------------------------------

FIRST_USE = ("first allocation of an unprepared scope (next_unified_serial: the opt-in "
             "shared fallback) vs one of a prepared scope, each in a transaction of its own, "
             "the statement "
             "timed (not the commit: a business transaction pays its commit anyway); per "
             "second (ms per call in the progress lines; goal <= 0.5 ms)")
FIRST_USES = 100
QUICK_FIRST_USES = 20


def first_use(run: CaseRun) -> Result:
    n = QUICK_FIRST_USES if run.quick else FIRST_USES
    result = Result(scenario="first_use", description=FIRST_USE, clients=1, seconds=0,
                    unit="per s")
    call = "SELECT hivenet.next_unified_serial(%s, 'A01', '01')"
    with psycopg.connect(run.url) as conn, _sharing_fallback(conn, "unified"):
        conn.execute("SELECT hivenet.prepare_scope('unified', %s::jsonb)", (_FIELDS,))
        conn.commit()

        def timed(system: str) -> float:
            took = _timed(conn, call, (system,))
            conn.commit()
            return took

        for k in range(20):  # warm: plans, caches, the fallback's first of the day
            timed("C0001")
            timed(f"W{k:04d}")
        for i in range(run.rounds):
            order = ["baseline", "candidate"] if i % 2 == 0 else ["candidate", "baseline"]
            for kind in order:
                if kind == "baseline":
                    took = [timed("C0001") for _ in range(n)]
                    sink = result.baseline_tps
                else:
                    # Systems F<round><k>: never used before in this database.
                    took = [timed(f"F{i % 10}{k:03d}") for k in range(n)]
                    sink = result.candidate_tps
                median = statistics.median(took)
                sink.append(1 / median)
                run.say(f"  first_use round {i + 1}/{run.rounds} {kind:<9} "
                        f"{median * 1000:8.3f} ms per call (median of {n})")
    return result


@contextlib.contextmanager
def _sharing_fallback(conn: psycopg.Connection[tuple[object, ...]], format: str
                      ) -> Iterator[None]:
    """Format ``format``'s unprepared scopes draw from its shared fallback while the block
    runs (setting shared_fallback); the setting is put back after."""
    before = conn.execute("SELECT value FROM hivenet.setting WHERE name = 'shared_fallback'"
                          ).fetchone()
    conn.execute("UPDATE hivenet.setting SET value = value || ',' || %s "
                 "WHERE name = 'shared_fallback'", (format,))
    conn.commit()
    try:
        yield
    finally:
        conn.rollback()
        conn.execute("UPDATE hivenet.setting SET value = %s WHERE name = 'shared_fallback'",
                     (before[0] if before else "",))
        conn.commit()


# --- prepare_scopes ---------------------------------------------------------------------

PREPARE_SCOPES = ("preparing 10,000 unified scopes (prepare_scope, 500 a transaction, as "
                  "`hivenet-db prepare`) vs creating 10,000 bare sequences in the same "
                  "transactions; per second (seconds for all in the progress lines; goal: "
                  "<= 30 s)")
SCOPES_PREPARED = 10_000
QUICK_SCOPES_PREPARED = 1_000
PREPARE_BATCH = 500


def prepare_scopes(run: CaseRun) -> Result:
    n = QUICK_SCOPES_PREPARED if run.quick else SCOPES_PREPARED
    result = Result(scenario="prepare_scopes", description=PREPARE_SCOPES, clients=1,
                    seconds=0, unit="per s")
    with psycopg.connect(run.url, autocommit=True) as conn:
        for i in range(run.rounds):
            order = ["baseline", "candidate"] if i % 2 == 0 else ["candidate", "baseline"]
            for kind in order:
                started = time.perf_counter()
                for start in range(0, n, PREPARE_BATCH):
                    with conn.transaction():
                        if kind == "baseline":  # one statement a batch, as prepare_scope
                            conn.execute(
                                f"DO $$ BEGIN FOR k IN {start} .. {start + PREPARE_BATCH - 1} "
                                f"LOOP EXECUTE format('CREATE SEQUENCE public.%I AS bigint "
                                f"MINVALUE 0 START 0', 'bench_p{i}_' || k); END LOOP; END $$")
                        else:
                            conn.execute(
                                "SELECT hivenet.prepare_scope('unified', jsonb_agg("
                                "jsonb_build_object('system', 'P' || lpad((k / 10)::text, 4,"
                                " '0'), 'module', 'B' || %s || 'A', 'instance', "
                                "lpad((k %% 10 + 1)::text, 2, '0')))) "
                                "FROM generate_series(%s::integer, %s::integer) AS k",
                                (i % 10, start, start + PREPARE_BATCH - 1))
                took = time.perf_counter() - started
                (result.baseline_tps if kind == "baseline" else result.candidate_tps).append(
                    n / took)
                run.say(f"  prepare_scopes round {i + 1}/{run.rounds} {kind:<9} "
                        f"{took:8.1f} s for {n:,}")
    return result



# --- requests_batch_100 -----------------------------------------------------------------

REQUESTS_BATCH = ("100 new keys begun and finished in one committed transaction: "
                  "RequestRepository.begin_many + finish_many (hivenet.begin_requests + "
                  "hivenet.finish_requests: 2 statements) vs begin + finish of each key (200 "
                  "statements), 4 threads on the same 4 connections, keys per second (goal: "
                  "ratio >= 5)")
BATCH_KEYS = 100
BATCH_THREADS = 4
BATCH_NAMESPACE = "bench.batch"


def _batch_keys(prefix: str) -> list[str]:
    return [f"{prefix}-{i}" for i in range(BATCH_KEYS)]


def _one_by_one(conn: psycopg.Connection[Any], prefix: str, request: Any,
                response: Any) -> None:
    repo = RequestRepository(conn)
    with conn.transaction():
        for key in _batch_keys(prefix):
            start = repo.begin(BATCH_NAMESPACE, key, request)
            repo.finish(BATCH_NAMESPACE, key, start.attempt, True, response)


def _batched(conn: psycopg.Connection[Any], prefix: str, request: Any, response: Any) -> None:
    repo = RequestRepository(conn)
    with conn.transaction():
        starts = repo.begin_many(BATCH_NAMESPACE, _batch_keys(prefix), [request] * BATCH_KEYS)
        repo.finish_many(BATCH_NAMESPACE, [s.finished(True, response)
                                           for s in starts if s.started])


def requests_batch(run: CaseRun) -> Result:
    """Both ways on the same connections, rounds alternating; each call is a transaction of
    ``BATCH_KEYS`` keys (``handwritten_keys._rate`` times calls, so its rates and CPU per call
    are scaled to keys)."""
    seconds = run.seconds or 5
    result = Result(scenario="requests_batch_100", description=REQUESTS_BATCH,
                    clients=BATCH_THREADS, seconds=seconds, unit="keys/s")
    conns = [psycopg.connect(run.url, autocommit=True) for _ in range(BATCH_THREADS)]
    try:
        for call in (_one_by_one, _batched):  # psycopg prepares a statement after 5 runs
            _rate(conns, call, 1, None)
        order = [("baseline", _one_by_one, result.baseline_tps, result.baseline_cpu_us),
                 ("candidate", _batched, result.candidate_tps, result.candidate_cpu_us)]
        for i in range(run.rounds):
            for kind, call, sink, cpu_sink in order if i % 2 == 0 else reversed(order):
                rate, client, server = _rate(conns, call, seconds, run.meter)
                sink.append(rate * BATCH_KEYS)
                if server is not None:
                    cpu_sink.append((client + server) / BATCH_KEYS)
                run.say(f"  requests_batch_100 round {i + 1}/{run.rounds} {kind:<9} "
                        f"{rate * BATCH_KEYS:8.0f} keys/s  client {client / BATCH_KEYS:6.1f} "
                        "cpu us/key" + ("" if server is None
                                        else f"  server {server / BATCH_KEYS:6.1f} cpu us/key"))
    finally:
        for conn in conns:
            conn.close()
    return result


# --- time_id_vs_uuidv7 ------------------------------------------------------------------

TIME_ID_VS_UUIDV7 = ("next_time_id (bench_time_id, as scenario time_id_nextval) vs PostgreSQL "
                     "18's uuidv7(), one per transaction, 16 clients: for reference, no goal "
                     "(a uuid takes 128 bits and prints no readable time); PostgreSQL 18 only")
_UUIDV7 = Path(__file__).with_name("scenarios") / "_time_id_vs_uuidv7"


def _major_version() -> int:
    """The major version of the PostgreSQL binaries the runner's server would use."""
    out = subprocess.run([str(find_bin_dir() / "postgres"), "--version"], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[-1].split(".")[0])


def uuidv7_missing() -> str | None:
    major = _major_version()
    return None if major >= 18 else f"uuidv7() is PostgreSQL 18's; these binaries are {major}"


def time_id_vs_uuidv7(run: CaseRun) -> Result:
    with psycopg.connect(run.url) as conn:
        if conn.info.server_version < 180000:
            raise BenchError(f"time_id_vs_uuidv7: uuidv7() is PostgreSQL 18's; the server is "
                             f"{conn.info.server_version // 10000}")
    scenario = Scenario(name="time_id_vs_uuidv7", folder=_UUIDV7,
                        description=TIME_ID_VS_UUIDV7)
    return run_scenario(run.url, scenario, run.rounds, run.clients, run.seconds, run.say,
                        run.meter, small=run.quick)
