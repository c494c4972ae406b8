"""Backend CPU per execution of prepared statements: what one statement costs the server.

    python experiments/probe_cpu.py --url URL [--rounds 4] [--executions 20000] STATEMENT...

Each STATEMENT runs --executions times per round on one connection, prepared, each execution
a transaction of its own (autocommit, synchronous_commit off: the flush is no CPU); the order
of the statements alternates per round. It may use three parameters, fresh for every
execution: %(serial)s an interface serial of this minute (instance 01 to 99, random seq),
%(unified)s a unified serial of today, %(time)s the serial's time ('YYYY-MM-DD HH:MM:SS').
Prints, per statement, the backend's CPU time (user + system, read from /proc/self/stat
through pg_read_file: superuser or pg_read_server_files; 10 ms ticks) per execution in µs,
each round and the median. The server should run nothing else. Used for the prototypes in
docs/benchmarks.md; speed goals are measured by `hivenet-db bench`, not here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
from collections.abc import Iterator

import psycopg

# utime + stime (fields 14 and 15 of /proc/self/stat, after the command name) in µs, at
# 100 ticks per second.
_CPU = ("SELECT (split_part(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ', 12)::int"
        " + split_part(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ', 13)::int)"
        " * 10000")
_WARM_UP = 50  # executions before the clock starts: the plan is cached (generic) by then


def _parameters(count: int) -> Iterator[dict[str, str]]:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    for _ in range(count):
        seq = random.randrange(1, 10**10)
        yield {"serial": f"C0001A01{random.randrange(1, 100):02d}T0001"
                         f"{now:%Y%m%d%H%M%S}{seq:010d}",
               "unified": f"C0001A0101{now:%Y%m%d}{seq:010d}",
               "time": f"{now:%Y-%m-%d %H:%M:%S}"}


def _cpu(conn: psycopg.Connection) -> int:
    row = conn.execute(_CPU).fetchone()
    assert row is not None
    return int(row[0])


def probe(url: str, statements: list[str], rounds: int, executions: int
          ) -> dict[str, list[float]]:
    """µs of backend CPU per execution, per statement, one figure per round."""
    result: dict[str, list[float]] = {s: [] for s in statements}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        for r in range(rounds):
            for statement in statements if r % 2 == 0 else statements[::-1]:
                parameters = list(_parameters(_WARM_UP + executions))
                for p in parameters[:_WARM_UP]:
                    conn.execute(statement, p, prepare=True)
                before = _cpu(conn)
                for p in parameters[_WARM_UP:]:
                    conn.execute(statement, p, prepare=True)
                result[statement].append((_cpu(conn) - before) / executions)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--executions", type=int, default=20000)
    parser.add_argument("statements", nargs="+", metavar="STATEMENT")
    args = parser.parse_args()
    for statement, figures in probe(args.url, args.statements, args.rounds,
                                    args.executions).items():
        print(f"{statistics.median(figures):7.1f} µs  ({' '.join(f'{f:.1f}' for f in figures)})"
              f"  {' '.join(statement.split())}")


if __name__ == "__main__":
    main()
