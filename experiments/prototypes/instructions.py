"""Instructions per statement, counted by Valgrind: the same on a quiet machine and a busy
one, where CPU time and throughput are not (docs/benchmarks.md, "Instructions").

For each named SQL script of a JSON object (name → script), pgbench runs it in one prepared
connection N1 and then N2 times; the server runs under callgrind, which writes one file per
backend, so (instructions of the N2 run - those of the N1 run) / (N2 - N1) is the script's
cost in the backend, connection and first executions left out. Start the server (a scratch
cluster of your own, as the postgres user, databases set up beforehand without Valgrind) as:

    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file=DIR/cg.%p \\
        postgres -D DATA -p PORT -k SOCKET_DIR -c autovacuum=off

then, as any user that can read DIR:

    python experiments/prototypes/instructions.py URL DIR SCRIPTS.json [N1 N2]

`callgrind_annotate --inclusive=yes DIR/cg.<pid>` then says where a script's instructions go.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _instructions(path: Path) -> int:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"{path}: no summary line")


def _backend_instructions(out_dir: Path, before: set[Path]) -> int:
    """The instructions of the run's backend: the largest of the callgrind files that appeared
    (pgbench's first, short connection writes one too; a file is written when its backend
    exits, which may be after pgbench returned), once no new file came for a second."""
    seen: set[Path] = set()
    for _ in range(300):
        time.sleep(1)
        new = set(out_dir.glob("cg.*")) - before
        if new and new == seen:
            return max(_instructions(path) for path in new)
        seen = new
    raise RuntimeError(f"no new callgrind file in {out_dir}: is the server under callgrind?")


def _run(url: str, out_dir: Path, script: Path, times: int) -> int:
    before = set(out_dir.glob("cg.*"))
    subprocess.run(["pgbench", "-n", "-M", "prepared", "-c", "1", "-t", str(times),
                    "-f", str(script), url], check=True, capture_output=True)
    return _backend_instructions(out_dir, before)


def main(url: str, out_dir: Path, scripts: dict[str, str], n1: int, n2: int) -> None:
    first: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for name, sql in scripts.items():
            script = Path(tmp) / f"{name}.sql"
            script.write_text(sql.rstrip().rstrip(";") + ";\n", encoding="utf-8")
            os.chmod(script, 0o644)
            per = (_run(url, out_dir, script, n2) - _run(url, out_dir, script, n1)) / (n2 - n1)
            first = first or per
            print(f"{name:12} {per:9.0f} instructions a statement  ratio {first / per:.3f}  "
                  f"extra {per - first:+8.0f}", flush=True)


if __name__ == "__main__":
    with open(sys.argv[3], encoding="utf-8") as file:
        named = json.load(file)
    rest = [int(a) for a in sys.argv[4:6]] or [1000, 3000]
    main(sys.argv[1], Path(sys.argv[2]), named, rest[0], rest[1])
