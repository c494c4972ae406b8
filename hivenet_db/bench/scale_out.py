"""Scale-out: one primary, two shards routed by the application, two shards
behind PL/Proxy, on three servers started here (fsync on), in the same run.

Two workloads, each transaction one statement for a random instance (01-98): ``claim``
allocates an interface serial and records it with ``claim_interface_serial`` (the dedup
service's work: two calls), ``alloc`` takes a unified serial (durable allocation: one call).
Each is run three ways:

- **one primary**: every client on one database that owns every instance;
- **application map**: the clients split in two, each half on the shard that owns its instances
  (01-49, 50-98), as a ShardMap routes by tenant: two pgbench runs at once, tps summed;
- **PL/Proxy**: every client on the proxy database (``hivenet-db proxy install``), which routes
  both calls of the statement to the owner, each committing on its own there.

Per workload, two ``Result`` rows share the one-primary runs as their baseline:
``scale_out_<workload>_app_map`` and ``scale_out_<workload>_plproxy`` (candidate / one
primary). The three ways alternate within a round, the order rotating between rounds. Every
scope gets its own sequence first (prepare_scope), as ``maintain()`` gives a scope in
production. On one machine the shards share its CPUs, so the ratios show the routing's
overhead, not the scale gained from more machines. Needs PL/Proxy on the machine
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
from psycopg.types.json import Jsonb

from hivenet_db.bench import BenchError, Result, pgbench
from hivenet_db.tools import migrate, plproxy
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

NAME = "scale_out"
DESCRIPTION = ("interface serial + claim, and unified serial alone, for random instances: two "
               "shards by application routing, and by PL/Proxy, vs one primary")
OWNS = ("01-49", "50-98")
_WORKLOADS = {
    "claim": "SELECT hivenet.claim_interface_serial(hivenet.next_interface_serial("
             "'B0001', 'A01', lpad(:i::text, 2, '0'), 'T0001'));",
    "alloc": "SELECT hivenet.next_unified_serial('B0002', 'A01', lpad(:i::text, 2, '0'));",
}


def _script(folder: Path, workload: str, low: int, high: int) -> Path:
    path = folder / f"{workload}_{low}_{high}.sql"
    path.write_text(f"\\set i random({low}, {high})\n{_WORKLOADS[workload]}\n")
    return path


def _own(url: str, owned: str, single: bool) -> bool:
    """Declare ownership on a shard whose schema has it."""
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
        for url, (low, high) in ((primary, (1, 98)), (shard0, (1, 49)), (shard1, (50, 98))):
            _prepare(url, low, high)
        try:
            plproxy.install(servers[3].ensure_database("proxy"), [shard0, shard1],
                          owns=None if all(declared) else list(OWNS),
                          progress=lambda m: say(f"  proxy: {m}"))
        except plproxy.ProxyError as error:
            raise BenchError(f"{NAME}: {error}") from error
        return [r for workload in _WORKLOADS
                for r in _rounds(root, workload, rounds, seconds, clients, say, primary,
                                 (shard0, shard1), servers[3].url("proxy"))]
    finally:
        for server in servers:
            server.remove()
        shutil.rmtree(root, ignore_errors=True)


def _prepare(url: str, low: int, high: int) -> None:
    """Every scope of the workloads for instances low..high with a sequence of its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(low, high + 1):
            node = {"module": "A01", "instance": f"{i:02d}"}
            conn.execute("SELECT hivenet.prepare_scope('interface', %s)",
                         (Jsonb({**node, "system": "B0001", "target": "T0001"}),))
            conn.execute("SELECT hivenet.prepare_scope('unified', %s)",
                         (Jsonb({**node, "system": "B0002"}),))
        conn.execute("SELECT hivenet.maintain()")


def _rounds(root: Path, workload: str, rounds: int, seconds: int, clients: int,
            say: Callable[[str], None], primary: str, shards: tuple[str, str],
            proxy_url: str) -> list[Result]:
    every = _script(root, workload, 1, 98)
    halves = (_script(root, workload, 1, 49), _script(root, workload, 50, 98))
    name = f"{NAME}_{workload}"
    app = Result(f"{name}_app_map", f"{workload}: two shards routed by the application vs "
                 f"one primary", clients, seconds)
    via_proxy = Result(f"{name}_plproxy", f"{workload}: two shards behind PL/Proxy vs one "
                       f"primary", clients, seconds)

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
            say(f"  {name} round {i + 1}/{rounds} {kind:<11} {tps:10.1f} tps")
    via_proxy.baseline_tps = app.baseline_tps
    return [app, via_proxy]
