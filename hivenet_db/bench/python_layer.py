"""What the Python layer adds to an allocation: ``SerialRepository.next_unified`` against the
same connection sending ``text("SELECT nextval(..)")``, both through SQLAlchemy and psycopg.

Calls run in open transactions committed every ``COMMIT_EVERY`` calls (an application takes a
serial inside its own transaction), for ``seconds`` per run, baseline and candidate
alternating. The result is a ``Result`` whose "tps" are calls per second, so its ratio reads
like the pgbench scenarios'; ``us_per_call`` gives the microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Connection, text

from hivenet_db.bench import Result
from hivenet_db.dburl import engine_for
from hivenet_db.serials import SerialRepository

NAME = "python_next_unified"
DESCRIPTION = ("SerialRepository.next_unified through SQLAlchemy vs text('SELECT nextval(..)') "
               "on the same connection (goal: ratio >= 0.8)")
COMMIT_EVERY = 100
WARM_UP = 200

_NEXTVAL = text("SELECT nextval('public.bench_python_seq')")


def _rate(conn: Connection, call: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``call`` over ``seconds``."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(COMMIT_EVERY):
            call()
        conn.commit()
        done += COMMIT_EVERY
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def measure(url: str, rounds: int, seconds: float, say: Callable[[str], None]) -> Result:
    result = Result(scenario=NAME, description=DESCRIPTION, clients=1, seconds=int(seconds))
    with engine_for(url) as engine, engine.connect() as conn:
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
        order = [("baseline", baseline, result.baseline_tps),
                 ("candidate", candidate, result.candidate_tps)]
        for i in range(rounds):
            for kind, call, sink in order if i % 2 == 0 else reversed(order):
                rate = _rate(conn, call, seconds)
                sink.append(rate)
                say(f"  {NAME} round {i + 1}/{rounds} {kind:<9} {1e6 / rate:8.1f} us/call")
    return result


def us_per_call(result: Result) -> tuple[float, float]:
    """Median microseconds per call of baseline and candidate."""
    return 1e6 / result.baseline_median, 1e6 / result.candidate_median
