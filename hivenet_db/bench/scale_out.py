"""Scale-out (issue 16 part 5): one primary, two shards routed by the application, two shards
behind PL/Proxy, on three servers started here (fsync on), in the same run.

Each transaction allocates an interface serial for a random instance (01-98) and records it
with ``claim_interface_serial`` (the dedup service's work), in one statement:

- **one primary**: every client on one database that owns every instance;
- **application map**: the clients split in two, each half on the shard that owns its instances
  (01-49, 50-98), as a ShardMap routes by tenant: two pgbench runs at once, tps summed;
- **PL/Proxy**: every client on the proxy database (``hivenet-db proxy install``), which routes
  both calls of the statement to the owner, each committing on its own there.

Two ``Result`` rows share the one-primary runs as their baseline: ``scale_out_app_map`` and
``scale_out_plproxy`` (candidate / one primary). The three alternate within a round, the order
rotating between rounds. On one machine the shards share its CPUs, so the ratios show the
routing's overhead, not the scale gained from more machines. Needs PL/Proxy on the machine
(``apt-get install postgresql-15-plproxy``); run with ``hivenet-db bench --scenario scale_out``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg

from hivenet_db import migrate, proxy
from hivenet_db.bench import BenchError, Result, pgbench
from hivenet_db.embedded import EmbeddedPostgres

NAME = "scale_out"
DESCRIPTION = ("next_interface_serial + claim_interface_serial of a random instance: two "
               "shards by application routing, and by PL/Proxy, vs one primary")
OWNS = ("01-49", "50-98")
_SCRIPT = """\
\\set i random({low}, {high})
SELECT hivenet.claim_interface_serial(hivenet.next_interface_serial('B0001', 'A01', \
lpad(:i::text, 2, '0'), 'T0001'));
"""


def _script(folder: Path, name: str, low: int, high: int) -> Path:
    path = folder / f"{name}.sql"
    path.write_text(_SCRIPT.format(low=low, high=high))
    return path


def _own(url: str, owned: str, single: bool) -> bool:
    """Declare ownership on a shard whose schema has it (issue 16 part 1)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regprocedure('hivenet.own_instances(text,boolean,boolean)')"
                           ).fetchone()
        if row is None or row[0] is None:
            return False
        conn.execute("SELECT hivenet.own_instances(%s, %s)", (owned, single))
        return True


def measure(rounds: int, seconds: int, clients: int, say: Callable[[str], None]) -> list[Result]:
    if clients < 2:
        raise BenchError(f"{NAME} splits the clients between two shards: give --clients >= 2")
    root = Path(tempfile.mkdtemp(prefix="hivenet-bench-scale-"))
    os.chmod(root, 0o755)
    servers = [EmbeddedPostgres(root=root / name, fsync=True, progress=say)
               for name in ("primary", "shard0", "shard1", "proxy")]
    try:
        for server in servers:
            server.start()
        primary, shard0, shard1 = (s.ensure_database("hivenet") for s in servers[:3])
        for url in (primary, shard0, shard1):
            migrate.upgrade(url)
        declared = [_own(url, OWNS[i], i == 0) for i, url in enumerate((shard0, shard1))]
        try:
            proxy.install(servers[3].ensure_database("proxy"), [shard0, shard1],
                          owns=None if all(declared) else list(OWNS),
                          progress=lambda m: say(f"  proxy: {m}"))
        except proxy.ProxyError as error:
            raise BenchError(f"{NAME}: {error}") from error
        return _rounds(root, rounds, seconds, clients, say, primary, (shard0, shard1),
                       servers[3].url("proxy"))
    finally:
        for server in servers:
            server.remove()
        shutil.rmtree(root, ignore_errors=True)


def _rounds(root: Path, rounds: int, seconds: int, clients: int, say: Callable[[str], None],
            primary: str, shards: tuple[str, str], proxy_url: str) -> list[Result]:
    every = _script(root, "every", 1, 98)
    halves = (_script(root, "low", 1, 49), _script(root, "high", 50, 98))
    app = Result(f"{NAME}_app_map", "two shards routed by the application vs one primary",
                 clients, seconds)
    via_proxy = Result(f"{NAME}_plproxy", "two shards behind PL/Proxy vs one primary",
                       clients, seconds)

    def one_primary() -> float:
        return pgbench(primary, every, clients, seconds=seconds)[0]

    def app_map() -> float:
        split = (clients // 2, clients - clients // 2)
        found: list[float] = [0.0, 0.0]
        failed: list[BaseException] = []

        def run(i: int) -> None:
            try:
                found[i] = pgbench(shards[i], halves[i], split[i], seconds=seconds)[0]
            except BaseException as error:
                failed.append(error)

        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            raise failed[0]
        return sum(found)

    def plproxy() -> float:
        return pgbench(proxy_url, every, clients, seconds=seconds)[0]

    kinds: list[tuple[str, Callable[[], float], list[float]]] = [
        ("one primary", one_primary, app.baseline_tps),
        ("app map", app_map, app.candidate_tps),
        ("PL/Proxy", plproxy, via_proxy.candidate_tps)]
    for i in range(rounds):
        for kind, run_kind, sink in kinds[i % 3:] + kinds[:i % 3]:
            tps = run_kind()
            sink.append(tps)
            say(f"  {NAME} round {i + 1}/{rounds} {kind:<11} {tps:10.1f} tps")
    via_proxy.baseline_tps = app.baseline_tps
    return [app, via_proxy]
