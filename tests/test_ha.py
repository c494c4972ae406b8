"""Failover under a real HA manager, pg_auto_failover (tests/pg_auto_failover.py): load from
the Python API on the primary, its walsender stopped, the primary killed, the standby
promoted by the monitor (SPEC §6; docs/guarantees.md, "Failover").

- Asynchronous replication (the standby out of the write quorum, as `pg_autoctl set node
  replication-quorum false` makes it): the promoted standby lacks the last commits, and
  issues none of the committed serials again with no fence command run by anyone: its first
  allocation fenced it. What the lost commits held (interface claims, keyed requests) is gone
  and accepted again: counted, and printed.
- Synchronous replication (pg_auto_failover's default): nothing committed is lost; the
  listener of docs/operations.md runs `hivenet-db failover-fence` on the new primary before
  any allocation.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from markdown_it import MarkdownIt
from sqlalchemy import Engine, create_engine

from hivenet_db import DurablePoolExhausted, InterfaceDedup, RequestRepository, SerialRepository
from hivenet_db.tools import migrate
from hivenet_db.urls import sqlalchemy_url
from tests import pg_auto_failover
from tests.helpers import scalar, share_fallback
from tests.pg_auto_failover import Formation, formation
from tests.replication import exposed

pytestmark = [pytest.mark.slow, pytest.mark.ha]

PREPARED = ("01", "02", "03")  # scopes with a sequence of their own
COLD = "09"  # an unprepared scope: the formats' shared fallback counters
WORKERS = 8
NAMESPACE = "payments"
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _installed() -> None:
    if (why := pg_auto_failover.missing()) is not None:
        pytest.skip(why)


def fields(instance: str) -> dict[str, str]:
    return {"system": "C0001", "module": "A01", "instance": instance}


def prepare(url: str) -> None:
    migrate.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        share_fallback(conn, "unified", "interface")  # for COLD
        for instance in PREPARED:
            conn.execute("SELECT hivenet.prepare_scope('unified', %s)",
                         (psycopg.types.json.Jsonb(fields(instance)),))
            conn.execute("SELECT hivenet.prepare_scope('interface', %s)",
                         (psycopg.types.json.Jsonb({**fields(instance), "target": "T0001"}),))


def engine_of(url: str) -> Engine:
    return create_engine(sqlalchemy_url(url), pool_size=WORKERS, max_overflow=0,
                         pool_pre_ping=False, connect_args={"connect_timeout": 5})


@dataclass
class Load:
    """WORKERS threads, each a business transaction after another through the Python API
    (a serial, a batch, an interface serial and its claim, a keyed request begun and
    finished, every tenth a durable serial) until the primary dies; what COMMIT confirmed
    is recorded."""

    engine: Engine
    serials: set[str] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    unexpected: list[BaseException] = field(default_factory=list)

    def _work(self, n: int) -> None:
        instance = (*PREPARED, COLD)[n % (len(PREPARED) + 1)]
        i = 0
        try:
            while not self.stop.is_set():
                i += 1
                key = f"{n}-{i}"
                with self.engine.begin() as conn:
                    repo = SerialRepository(conn)
                    unified = repo.next_unified("C0001", "A01", instance)
                    batch = repo.next_many("unified", 3, **fields(instance))
                    interface = repo.next_interface("C0001", "A01", instance, "T0001")
                    extra = [repo.next_durable("unified", **fields(instance))] if i % 10 == 0 \
                        else []
                    InterfaceDedup(conn).claim(interface, unified)
                    requests = RequestRepository(conn)
                    start = requests.begin(NAMESPACE, key, {"key": key})
                    assert start.attempt is not None
                    requests.finish(NAMESPACE, key, start.attempt, True, {"paid": unified})
                with self.lock:  # committed
                    self.serials.update([unified, *batch, interface, *extra])
                    self.claims.add(interface)
                    self.keys.add(key)
        except Exception as error:
            if not _died(error):  # else the last transaction's fate is unknown: not recorded
                self.unexpected.append(error)

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._work, args=(n,), daemon=True)
                        for n in range(WORKERS)]
        for thread in self.threads:
            thread.start()

    def committed(self) -> int:
        with self.lock:
            return len(self.serials)

    def until(self, serials: int, timeout: float = 60) -> None:
        """Until ``serials`` are committed (however slow the machine)."""
        deadline = time.monotonic() + timeout
        while self.committed() < serials and time.monotonic() < deadline:
            assert not self.unexpected, self.unexpected
            time.sleep(0.05)

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        self.engine.dispose()
        assert not self.unexpected, self.unexpected


def _died(error: BaseException | None) -> bool:
    """Whether ``error`` is the server going away, however the layers above wrapped it."""
    while error is not None:
        if isinstance(error, psycopg.OperationalError | OSError | DurablePoolExhausted):
            return True
        error = error.__cause__ or error.__context__
    return False


def issued_after(url: str, per_scope: int) -> set[str]:
    """``per_scope`` new serials of every scope the load used, through the Python API."""
    engine = engine_of(url)
    out: set[str] = set()
    with engine.begin() as conn:
        repo = SerialRepository(conn)
        for instance in (*PREPARED, COLD):
            out.update(repo.next_many("unified", per_scope, **fields(instance)))
            out.update(repo.next_many("interface", per_scope,
                                      **fields(instance), target="T0001"))
    engine.dispose()
    return out


def lost(url: str, load: Load) -> tuple[int, int]:
    """How many committed interface claims and keyed requests the new primary lacks: each
    is accepted again (begun anew in a transaction rolled back)."""
    with psycopg.connect(url) as conn:
        claims = len(load.claims) - int(scalar(
            conn, "SELECT count(*) FROM hivenet.interface_call WHERE interface_serial = ANY(%s)",
            (sorted(load.claims),)))
        keys = sorted(load.keys)
        starts = RequestRepository(conn).begin_many(NAMESPACE, keys, [{"key": k} for k in keys])
        conn.rollback()
    assert {s.outcome for s in starts} <= {"started", "replayed"}
    return claims, sum(s.started for s in starts)


def fenced_by(url: str) -> str | None:
    """Who fenced the current timeline of ``url`` (read only: a draw would fence it)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT applied_by FROM hivenet.failover_fence "
                           "WHERE timeline = hivenet._timeline()").fetchone()
    return None if row is None else str(row[0])


def failover(ha: Formation, *, asynchronous: bool) -> tuple[Load, int]:
    """Load on node1; once 300 serials are committed its walsenders stopped (its later WAL
    reaches no standby); then, once 300 more are (asynchronous: nothing waits for the
    standby) or after a second (synchronous: every commit waits), node1 killed and node2
    promoted by the monitor. Returns the load and how many serials were committed before
    the walsenders stopped."""
    load = Load(engine_of(ha.url("node1")))
    load.start()
    load.until(300)
    ha.pause_replication("node1")
    shipped = load.committed()
    if asynchronous:
        load.until(shipped + 300)
    else:
        time.sleep(1.0)
    ha.kill("node1")
    load.join()
    ha.wait_state("node2", "wait_primary", "primary", timeout=120)
    ha.wait_for(lambda: ha.setting("node2", "transaction_read_only") == "off",
                "node2 writable")
    return load, shipped


LISTENER_FIRST_LINE = '"""Run `hivenet-db failover-fence` on each node pg_auto_failover makes'


def listener_of_the_docs() -> str:
    """The pg_auto_failover listener of docs/operations.md, as written there."""
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    blocks = [t.content for t in MarkdownIt("commonmark").parse(page)
              if t.type == "fence" and t.content.startswith(LISTENER_FIRST_LINE)]
    assert len(blocks) == 1, "docs/operations.md: the pg_auto_failover listener"
    return blocks[0]


@contextlib.contextmanager
def listening(ha: Formation, tmp_path: Path) -> Iterator[Path]:
    """The listener of the docs, running against the formation's monitor; its log."""
    script, log = tmp_path / "listener.py", tmp_path / "listener.log"
    script.write_text(listener_of_the_docs())
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "PG_AUTOCTL_MONITOR": ha.monitor_url,
           "HIVENET_ADMIN_URL": "postgresql://postgres@{host}:{port}/" + pg_auto_failover.DBNAME}
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, str(script)], stdout=out,
                                   stderr=subprocess.STDOUT, env=env)
    try:
        yield log
    finally:
        process.terminate()
        process.wait(timeout=30)


def aftermath(url: str, load: Load, shipped: int, kind: str) -> tuple[int, int, int, int]:
    """On the new primary at ``url``: how many committed serials stand above its counters
    (read before anything is drawn), how many it issues again, how many committed claims
    and keyed requests it lacks; printed."""
    unfenced = exposed(url, load.serials, PREPARED)
    reissued = len(issued_after(url, 2000) & load.serials)
    claims, keys = lost(url, load)
    print(f"{kind}: {load.committed()} committed serials ({shipped} before the walsender "
          f"stopped), {unfenced} above the promoted standby's counters, {reissued} issued "
          f"again; {claims} of {len(load.claims)} committed claims and {keys} of "
          f"{len(load.keys)} committed keyed requests lost and accepted again")
    return unfenced, reissued, claims, keys


def test_asynchronous_failover_issues_no_committed_serial_again_with_no_fence_command() -> None:
    with formation(prepare) as ha:
        ha.asynchronous("node2", "node1")
        load, shipped = failover(ha, asynchronous=True)
        new = ha.url("node2")
        assert load.committed() - shipped >= 300, "too little committed after the cut-off"
        assert fenced_by(new) is None  # nobody fenced this timeline
        unfenced, reissued, claims, keys = aftermath(new, load, shipped, "asynchronous")
        assert unfenced > 0, "the standby was not behind: the test proves nothing"
        assert claims > 0 and keys > 0
        assert not reissued, f"{reissued} committed serials issued again"
        assert fenced_by(new) == "allocation"


def test_synchronous_failover_loses_nothing_and_the_listener_fences_first(
        tmp_path: Path) -> None:
    with formation(prepare) as ha, listening(ha, tmp_path) as log:
        ha.wait_for(lambda: ha.setting("node1", "synchronous_standby_names") != "",
                    "the primary waiting for its standby")
        load, shipped = failover(ha, asynchronous=False)
        new = ha.url("node2")
        ha.wait_for(lambda: fenced_by(new) == "command", "the listener's fence", timeout=60)
        assert load.committed() >= 300, "the load committed too little"
        assert aftermath(new, load, shipped, "synchronous") == (0, 0, 0, 0), log.read_text()
