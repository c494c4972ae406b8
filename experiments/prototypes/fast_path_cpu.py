"""The server's CPU per statement of named single statements (a JSON object name → SQL), one
connection sending N of each pipelined, prepared, each its own transaction, reading its
backend's /proc/<pid>/schedstat; 5 rounds alternating, medians, each against the first.
On a scratch database migrated to head (as a superuser, on the server's machine), with the
scope the statements use prepared (fast_path_cpu/unified.json: unified C0001 A01 01, and a
sequence public.bench_formatted_seq):

    python experiments/prototypes/fast_path_cpu.py URL \
        experiments/prototypes/fast_path_cpu/unified.json [N]

The variants of unified.json are the inlined fast path of next_unified_serial written out
with one part left out each (docs/benchmarks.md, "Current results: the 0.2.0 paths").
"""

from __future__ import annotations

import json
import statistics
import sys

import psycopg

_ROUNDS = 5


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
        return int(stat.read().split()[0]) / 1e9


def main(url: str, statements: dict[str, str], n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET hivenet.timeline_checked = 'true'")  # as the first allocation would
        pid = conn.info.backend_pid
        spent: dict[str, list[float]] = {name: [] for name in statements}
        for _ in range(_ROUNDS):
            for name, sql in statements.items():
                cur = conn.cursor()
                cur.execute(sql, prepare=True)
                before = _cpu_seconds(pid)
                with conn.pipeline():
                    for _ in range(n):
                        cur.execute(sql, prepare=True)
                spent[name].append((_cpu_seconds(pid) - before) / n * 1e6)
    first = statistics.median(next(iter(spent.values())))
    for name, values in spent.items():
        median = statistics.median(values)
        print(f"{name:12} {median:6.2f} µs a statement  ratio {first / median:.3f}  "
              f"extra {median - first:+.2f} µs")


if __name__ == "__main__":
    with open(sys.argv[2], encoding="utf-8") as file:
        main(sys.argv[1], json.load(file), int(sys.argv[3]) if len(sys.argv) > 3 else 60_000)
