"""Planning time of one statement on several databases, as an unprepared caller pays it.

    python experiments/prototypes/planning_time.py URL [URL ...] [--statement SQL] [--runs 300]

For each database, runs `EXPLAIN (SUMMARY, COSTS OFF) <statement>` --runs times on one
connection and prints the median "Planning Time" of all but the first fifth (warm caches).
The databases are measured one after another, so repeat the call (and the order) to see the
noise. Used for revision 0028 (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics

import psycopg


def planning_ms(url: str, statement: str, runs: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        times = []
        for _ in range(runs):
            rows = conn.execute(f"EXPLAIN (SUMMARY, COSTS OFF) {statement}").fetchall()
            line = next(r[0] for r in rows if r[0].startswith("Planning Time"))
            times.append(float(line.split()[2]))
    return statistics.median(times[runs // 5:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--statement",
                        default="SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    for url in args.urls:
        print(f"{planning_ms(url, args.statement, args.runs):.4f} ms  {url.rsplit('/', 1)[-1]}")


if __name__ == "__main__":
    main()
