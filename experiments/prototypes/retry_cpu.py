"""Backend CPU of a failed step's retry through _begin_step, as revision 0023 wrote it (every
check first after the start view wrote nothing) against the database's own (since 0025:
the state machine at once for input the view vouches for). On a scratch database migrated to
head whose server runs nothing else, as a superuser (it makes prototype._begin_step_0023 and
reads /proc through experiments/probe_cpu.py):

    python experiments/prototypes/retry_cpu.py postgresql://owner@127.0.0.1:PORT/db [rounds]

Each round fails 2,050 new steps, then retries them (the first 50 unmeasured), each retry a
transaction of its own; the two bodies alternate per round. Prints µs per retry, the median
and each round (docs/guides/steps.md).
"""

from __future__ import annotations

import datetime as dt
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_cpu import _cpu

# Revision 0023 was squashed into the 0.1.0 baseline; its file is read from the last commit
# that had it.
_REVISION = "6e40032^:migrations/versions/0023_step_start_view.sql"
_WARM_UP, _RETRIES = 50, 2000
_REQUEST = Jsonb({"amount": 100, "account": "6222020000000001"})
_BODIES = {"0023": "prototype._begin_step_0023", "head": "hivenet._begin_step"}


def _old_body() -> str:
    """Revision 0023's CREATE OR REPLACE FUNCTION hivenet._begin_step, in schema prototype."""
    found = re.search(r"CREATE OR REPLACE FUNCTION hivenet\._begin_step\(.*?\nEND \$\$;",
                      subprocess.run(["git", "show", _REVISION], capture_output=True, text=True,
                                     check=True, cwd=Path(__file__).parent).stdout, re.S)
    assert found is not None, "no _begin_step in revision 0023"
    return found.group(0).replace("hivenet._begin_step(", "prototype._begin_step_0023(", 1)


def _failed_steps(conn: psycopg.Connection, count: int) -> list[str]:
    day = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    serials = [f"C0001A0101{day}{random.randrange(10**11, 10**12):012d}" for _ in range(count)]
    for serial in serials:
        conn.execute("SELECT * FROM hivenet.begin_step(%s, %s)", (serial, _REQUEST), prepare=True)
        conn.execute("SELECT hivenet.finish_step(%s, 1, false)", (serial,), prepare=True)
    return serials


def main() -> None:
    url, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4
    figures: dict[str, list[float]] = {name: [] for name in _BODIES}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS prototype")
        conn.execute(_old_body())
        conn.execute("SET synchronous_commit = off")
        for r in range(rounds):
            for name in _BODIES if r % 2 == 0 else reversed(_BODIES):
                retry = f"SELECT * FROM {_BODIES[name]}(%s, %s, 'replay', NULL, NULL, false)"
                serials = _failed_steps(conn, _WARM_UP + _RETRIES)
                for serial in serials[:_WARM_UP]:
                    conn.execute(retry, (serial, _REQUEST), prepare=True)
                before = _cpu(conn)
                for serial in serials[_WARM_UP:]:
                    row = conn.execute(retry, (serial, _REQUEST), prepare=True).fetchone()
                    assert row is not None and row[:2] == ("started", 2), row
                figures[name].append((_cpu(conn) - before) / _RETRIES)
    for name, values in figures.items():
        print(f"_begin_step {name}: {statistics.median(values):6.1f} µs a retry "
              f"({' '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
