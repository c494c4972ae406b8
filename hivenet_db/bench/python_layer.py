"""What the Python layer adds to an allocation: ``SerialRepository.next_unified`` against the
same connection sending ``text("SELECT nextval(..)")``, both through SQLAlchemy and psycopg.

Calls run in open transactions committed every ``COMMIT_EVERY`` calls (an application takes a
serial inside its own transaction), for ``seconds`` per run, baseline and candidate
alternating. The result is a ``Result`` whose "tps" are calls per second, so its ratio reads
like the pgbench scenarios'; ``us_per_call`` gives the microseconds. Its "cpu us/tx" are the
CPU microseconds per call of the Python process and its server process (read from /proc when
the server is local), which a busy machine hardly moves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Connection, text

from hivenet_db.allocation import SerialRepository
from hivenet_db.bench import Result
from hivenet_db.tools.dburl import engine_for
from hivenet_db.tools.proc_stat import cpu_seconds

NAME = "python_next_unified"
DESCRIPTION = ("SerialRepository.next_unified through SQLAlchemy vs text('SELECT nextval(..)') "
               "on the same connection (goal: ratio >= 0.8)")
COMMIT_EVERY = 100
WARM_UP = 200

_NEXTVAL = text("SELECT nextval('public.bench_python_seq')")


def _rate(conn: Connection, call: Callable[[], object], seconds: float,
          backend: int) -> tuple[float, float | None]:
    """Calls per second of ``call`` over ``seconds``, and the CPU microseconds per call of
    this process plus its server process (None when the server's is not readable): on a
    busy machine the wall clock mostly measures waiting for a CPU."""
    done = 0
    start, cpu, server = time.perf_counter(), time.process_time(), cpu_seconds(backend)
    deadline = start + seconds
    while True:
        for _ in range(COMMIT_EVERY):
            call()
        conn.commit()
        done += COMMIT_EVERY
        now = time.perf_counter()
        if now >= deadline:
            server_after = cpu_seconds(backend)
            used = (None if server is None or server_after is None
                    else time.process_time() - cpu + server_after - server)
            return done / (now - start), (None if used is None else used / done * 1e6)


def measure(url: str, rounds: int, seconds: float, say: Callable[[str], None]) -> Result:
    result = Result(scenario=NAME, description=DESCRIPTION, clients=1, seconds=int(seconds))
    # psycopg prepares what runs often, as on an application's connection to PostgreSQL itself
    with engine_for(url, prepared=True) as engine, engine.connect() as conn:
        conn.execute(text("CREATE SEQUENCE IF NOT EXISTS public.bench_python_seq"))
        conn.execute(text("SELECT hivenet.prepare_scope('unified', '{\"system\": \"C0001\", "
                          "\"module\": \"A01\", \"instance\": \"01\"}')"))
        conn.commit()
        repo = SerialRepository(conn)

        def baseline() -> object:
            return conn.execute(_NEXTVAL).scalar_one()

        def candidate() -> object:
            return repo.next_unified("C0001", "A01", "01")

        for call in (baseline, candidate):  # psycopg prepares a statement after 5 runs
            for _ in range(WARM_UP):
                call()
            conn.commit()
        backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        order = [("baseline", baseline, result.baseline_tps, result.baseline_cpu_us),
                 ("candidate", candidate, result.candidate_tps, result.candidate_cpu_us)]
        for i in range(rounds):
            for kind, call, sink, cpu_sink in order if i % 2 == 0 else reversed(order):
                rate, cpu = _rate(conn, call, seconds, backend)
                sink.append(rate)
                if cpu is not None:
                    cpu_sink.append(cpu)
                say(f"  {NAME} round {i + 1}/{rounds} {kind:<9} {1e6 / rate:8.1f} us/call"
                    + ("" if cpu is None else f"  {cpu:8.1f} cpu us/call"))
    return result


def us_per_call(result: Result) -> tuple[float, float]:
    """Median microseconds per call of baseline and candidate."""
    return 1e6 / result.baseline_median, 1e6 / result.candidate_median
