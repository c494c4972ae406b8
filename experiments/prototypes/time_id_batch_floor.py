"""How close any SQL body of next_time_ids can come to the bench's baseline (time_id_batch:
10,000 nextval over generate_series, every row sent): the same pgbench runs (prepared, one
client, rounds alternating) of

* ``bare``: the baseline, ``nextval`` over ``generate_series``;
* ``floor``: ``nextval`` plus a constant, ids as wide as time ids (19 digits) but no check,
  the least any body that draws a value per row can cost (it is not correct: a value past the
  second's capacity would run into the next second's ids);
* ``check``: the least correct row, the constants of the statement written in (no join, no
  parameter) and the one check a row needs (a value past the second's capacity goes
  elsewhere), ``to_id + nullif(least(nextval(c), bound), bound)``;
* ``next_time_ids``: the function as shipped.

On a database where ``hivenet-db bench``'s format bench_time_id is defined (its setup:
hivenet_db/bench/scenarios/_shared/bench_time_id.sql), whose server runs nothing else:

    python experiments/prototypes/time_id_batch_floor.py URL [rounds]

Prints each variant's median tps and its ratio to ``bare`` (docs/benchmarks.md, "Current
results: the 0.2.0 paths").
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

_ROWS = 10_000
_SECONDS = 3
_FAR = 4_000_000_000_000_000_000  # a bound no counter reaches: the check's constant


def _variants(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        counter = conn.execute("SELECT to_regclass('hivenet.\"seq_bench_time_id_\"')::text"
                               ).fetchone()
    if counter is None or counter[0] is None:
        sys.exit("format bench_time_id is not prepared on this database (see the docstring)")
    rows = f"generate_series(1, {_ROWS})"
    return {
        "bare": f"SELECT nextval('public.bench_time_id_seq') FROM {rows};",
        "floor": f"SELECT nextval('{counter[0]}') + 2190501977077000000 FROM {rows};",
        "check": f"SELECT 2190501977077000000 + nullif(least(nextval('{counter[0]}'), {_FAR}),"
                 f" {_FAR}) FROM {rows};",
        "next_time_ids": f"SELECT * FROM hivenet.next_time_ids('bench_time_id', {_ROWS});",
    }


def _tps(pgbench: str, url: str, script: Path) -> float:
    out = subprocess.run([pgbench, "-n", "-M", "prepared", "-c", "1", "-T", str(_SECONDS),
                          "-f", str(script), url], capture_output=True, text=True, check=True)
    found = re.search(r"tps = ([0-9.]+)", out.stdout)
    assert found, out.stdout + out.stderr
    return float(found.group(1))


def main(url: str, rounds: int) -> None:
    pgbench = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        scripts = {}
        for name, sql in _variants(url).items():
            scripts[name] = Path(folder) / f"{name}.sql"
            scripts[name].write_text(sql + "\n", encoding="utf-8")
        for _ in range(rounds):
            for name, script in scripts.items():
                results.setdefault(name, []).append(_tps(pgbench, url, script))
    bare = statistics.median(results["bare"])
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:14} {median:8.1f} tps  ratio {median / bare:.3f}   "
              + " ".join(f"{v:.0f}" for v in values))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 7)
