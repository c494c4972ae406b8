"""Crash behaviour (SPEC §6): kill -9 the whole server, restart, and allocate again."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import SerialRepository
from hivenet_db.tools import migrate
from hivenet_db.tools.dburl import engine_for
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.command import as_process
from tests.helpers import scalar, share_fallback

PLAIN = "SELECT hivenet.next_unified_serial('C0001', 'A01', %s)"


@pytest.fixture
def crashable() -> Iterator[EmbeddedPostgres]:
    """A server of its own (the test kills it), fsync on as in production; unprepared scopes
    draw from the shared fallback."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-crash-"))
    os.chmod(root, 0o755)
    server = EmbeddedPostgres(root=root / "pg", fsync=True)
    server.start()
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE crash")
    migrate.upgrade(server.url("crash"))
    # Scopes the tests have not prepared draw from their format's shared fallback, promoted
    # by maintain(): both paths are crashed.
    with psycopg.connect(server.url("crash"), autocommit=True) as conn:
        share_fallback(conn, "unified", "system", "interface", promote=True)
    try:
        yield server
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


def test_committed_and_durable_serials_are_never_reissued_after_a_crash(crashable: EmbeddedPostgres
        ) -> None:
    url = crashable.url("crash")
    with psycopg.connect(url, autocommit=True) as conn:
        committed = [scalar(conn, PLAIN, ("02",)) for _ in range(3)]
    # Durable serials of a fresh counter, taken while the caller's transaction is still open
    # when the server dies: they may already be at a remote system, so they must never come
    # back. (Taken with next_unified_serial in that transaction instead, they can come back:
    # PostgreSQL only promises committed sequence values, SPEC §6.)
    open_tx = psycopg.connect(url)
    open_tx.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '03')")
    with engine_for(url) as engine, engine.connect() as conn:
        durable = [SerialRepository(conn).next_durable(
            "unified", system="C0001", module="A01", instance="01") for _ in range(3)]
    crashable.kill()
    open_tx.close()
    crashable.start()
    with psycopg.connect(url, autocommit=True) as conn:
        after_durable = [scalar(conn, PLAIN, ("01",)) for _ in range(50)]
        after_committed = [scalar(conn, PLAIN, ("02",)) for _ in range(50)]
    assert min(after_durable) > max(durable)
    assert min(after_committed) > max(committed)


def _durable_by_repository(url: str) -> list[str]:
    with engine_for(url) as engine, engine.connect() as conn:
        return [str(SerialRepository(conn).next_durable(
            "unified", system="C0001", module="A01", instance="01")) for _ in range(3)]


def _durable_by_command(url: str) -> list[str]:
    result = as_process("next", "unified", "--system", "C0001", "--module", "A01",
                        "--instance", "01", "--count", "3", "--url", url)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize("draw", [_durable_by_repository, _durable_by_command])
def test_a_durable_serial_from_a_range_another_transaction_logged_survives_a_crash(
        crashable: EmbeddedPostgres, draw: Callable[[str], list[str]]) -> None:
    """nextval WAL-logs 32 values ahead, in the transaction that happens to draw past the logged
    range; the transactions that take the next values write nothing. Such a transaction has no
    id, so PostgreSQL does not flush its commit: if the transaction that logged the range has
    not committed when the server dies, the range is lost and its values are issued again.
    Durable serials (next_durable, ``hivenet-db next``) take an id so that their commit is
    flushed (both were issued again before they did)."""
    url = crashable.url("crash")
    with psycopg.connect(url, autocommit=True) as conn:
        # The WAL writer flushes within wal_writer_delay (200 ms): too soon for the test to
        # catch the window every time.
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("CHECKPOINT")  # the next nextval of every sequence logs a new range
    holder = psycopg.connect(url)  # logs the range, and never commits
    holder.execute(PLAIN, ("01",))
    durable = draw(url)
    crashable.kill()
    holder.close()
    crashable.start()
    with psycopg.connect(url, autocommit=True) as conn:
        after = [scalar(conn, PLAIN, ("01",)) for _ in range(50)]
    assert len(durable) == 3 and min(after) > max(durable), (durable, after[:3])


# ---------------------------------------------------------------- many workers, many crashes


@dataclass
class Ledger:
    """What the clients saw committed (recorded only after COMMIT returned)."""

    serials: list[str] = field(default_factory=list)  # every committed or durable serial
    durable: set[str] = field(default_factory=set)  # the durable ones, recorded by no row
    interface_claims: set[str] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)
    # system serial -> (attempt, state, response) as last committed
    steps: dict[str, tuple[int, str, Any]] = field(default_factory=dict)
    # steps whose last change's commit failed with the connection: either state is right
    unsure: set[str] = field(default_factory=set)
    commits: int = 0
    rollbacks: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _worker(url: str, n: int, ledger: Ledger, stop: threading.Event,
            errors: list[BaseException]) -> None:
    rng = random.Random(n)
    instance = f"{n % 4 + 1:02d}" if n % 5 else "09"  # 09: the shared fallback (no own sequence)
    pending: dict[str, int] = {}  # steps this worker began and committed, not yet finished
    conn: psycopg.Connection | None = None
    while not stop.is_set():
        finishing: dict[str, int] = {}  # pending steps this transaction finishes
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(url, connect_timeout=3)
            serials: list[str] = []
            interface: list[str] = []
            claims: list[str] = []
            steps: dict[str, tuple[int, str, Any]] = {}
            for _ in range(rng.randint(1, 4)):
                op = rng.choice(("plain", "batch", "durable", "interface", "claim", "step",
                                 "finish"))
                if op == "plain":
                    serials.append(scalar(conn, PLAIN, (instance,)))
                elif op == "batch":
                    serials += [r[0] for r in conn.execute(
                        "SELECT hivenet.next_serials('unified', %s, 3)",
                        (Jsonb({"system": "C0001", "module": "A01", "instance": instance}),))]
                elif op == "durable":
                    # Committed before it returns: recorded at once, whatever comes next.
                    durable = SerialRepository(conn).next_durable(
                        "unified", system="C0001", module="A01", instance=instance)
                    with ledger.lock:
                        ledger.serials.append(str(durable))
                        ledger.durable.add(str(durable))
                elif op == "interface":
                    serial = scalar(conn, "SELECT hivenet.next_interface_serial("
                                    "'C0001', 'A01', %s, 'T0001')", (instance,))
                    conn.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))
                    serials.append(serial)
                    interface.append(serial)
                elif op == "claim":
                    key = f"{n}-{rng.getrandbits(64)}"
                    conn.execute("SELECT hivenet.claim('crash', %s)", (key,))
                    claims.append(key)
                elif op == "step":
                    serial = scalar(conn, "SELECT hivenet.next_system_serial("
                                    "'C0001', 'A01', %s)", (instance,))
                    serials.append(serial)
                    outcome, attempt, _ = conn.execute(
                        "SELECT * FROM hivenet.begin_step(%s, %s)",
                        (serial, Jsonb({"n": serial}))).fetchone() or (None, None, None)
                    assert outcome == "started"
                    if rng.random() < 0.5:  # finish now, or in a later transaction
                        response = {"paid": serial}
                        conn.execute("SELECT hivenet.finish_step(%s, %s, true, %s)",
                                     (serial, attempt, Jsonb(response)))
                        steps[serial] = (attempt, "success", response)
                    else:
                        steps[serial] = (attempt, "processing", None)
                elif op == "finish" and pending:
                    serial, attempt = pending.popitem()
                    finishing[serial] = attempt
                    response = {"later": serial}
                    conn.execute("SELECT hivenet.finish_step(%s, %s, true, %s)",
                                 (serial, attempt, Jsonb(response)))
                    steps[serial] = (attempt, "success", response)
            # As a business transaction does: its serials are in its rows (a transaction that
            # writes nothing is not flushed at its commit: guarantees.md, Limits).
            conn.execute("INSERT INTO business (serial) SELECT unnest(%s::text[])", (serials,))
            if rng.random() < 0.25:
                conn.rollback()
                pending.update(finishing)  # not finished after all: later
                with ledger.lock:
                    ledger.rollbacks += 1
                continue
            try:
                conn.commit()
            except psycopg.OperationalError:
                with ledger.lock:  # committed or not: nobody knows
                    ledger.unsure.update(steps)
                finishing.clear()  # never finished again: it may have been
                raise
            with ledger.lock:
                ledger.commits += 1
                ledger.serials += serials
                ledger.interface_claims.update(interface)
                ledger.claims.update(claims)
                ledger.steps.update(steps)
            pending.update({s: a for s, (a, state, _) in steps.items() if state == "processing"})
        except psycopg.OperationalError:
            # The server died: this transaction is gone (or unsure, above); so is any
            # finish that was in it, so its steps stay pending for a later transaction.
            pending.update(finishing)
            if conn is not None:
                conn.close()
            time.sleep(0.2)
        except BaseException as error:
            errors.append(error)
            return
    if conn is not None:
        conn.close()


@pytest.mark.slow
def test_sixteen_workers_lose_and_duplicate_nothing_over_repeated_kill_9(
        crashable: EmbeddedPostgres) -> None:
    """16 workers allocate (plain, batch, durable), claim and run steps (finished in the same
    transaction or a later one) in transactions that commit or roll back, while the server is
    killed with SIGKILL four times at random moments and restarted."""
    url = crashable.url("crash")
    with psycopg.connect(url, autocommit=True) as conn:
        # the key catches a serial committed twice the moment it is
        conn.execute("CREATE TABLE business (serial text PRIMARY KEY)")
        for instance in ("01", "02", "03", "04"):  # these have their own sequences; 09 not
            conn.execute("SELECT hivenet.prepare_scope('unified', %s)",
                         (Jsonb({"system": "C0001", "module": "A01", "instance": instance}),))
    ledger = Ledger()
    stop = threading.Event()
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_worker, args=(url, n, ledger, stop, errors),
                                daemon=True) for n in range(16)]
    for thread in threads:
        thread.start()
    rng = random.Random(2026)
    kills = 4
    for _ in range(kills):
        time.sleep(rng.uniform(2.0, 6.0))
        crashable.kill()
        time.sleep(rng.uniform(0.1, 1.0))
        crashable.start()
    time.sleep(3)  # work after the last restart too
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    print(f"{ledger.commits} commits, {ledger.rollbacks} rollbacks, {len(ledger.serials)} "
          f"committed serials, {len(ledger.steps)} steps, {kills} kills")
    assert ledger.commits > 200 and len(ledger.steps) > 50

    counts = Counter(ledger.serials)
    assert [s for s, c in counts.items() if c > 1] == []
    with psycopg.connect(url) as conn:
        # Serials issued now, after the last restart, are none of the committed ones.
        after = {r[0] for i in ("01", "02", "03", "04", "09") for r in conn.execute(
            "SELECT hivenet.next_serials('unified', %s, 200)",
            (Jsonb({"system": "C0001", "module": "A01", "instance": i}),))}
        assert after.isdisjoint(counts)
        conn.rollback()
        recorded = {r[0] for r in conn.execute("SELECT serial FROM business")}
        assert set(counts) - ledger.durable <= recorded
        found = {r[0] for r in conn.execute(
            "SELECT interface_serial FROM hivenet.interface_call "
            "WHERE interface_serial = ANY(%s)", (sorted(ledger.interface_claims),))}
        assert ledger.interface_claims <= found
        found = {r[0] for r in conn.execute(
            "SELECT key FROM hivenet.claim_record WHERE namespace = 'crash'")}
        assert ledger.claims <= found
        latest = {s: (a, st, r) for s, a, st, r in conn.execute(
            "SELECT DISTINCT ON (system_serial) system_serial, attempt, state::text, response "
            "FROM hivenet.step_attempt ORDER BY system_serial, attempt DESC")}
        for serial, expected in ledger.steps.items():
            if serial in ledger.unsure:  # a finish whose commit's fate is unknown
                assert latest[serial][:2] in {expected[:2], (expected[0], "success")}, serial
                continue
            assert latest.get(serial) == expected, serial
        # No step the clients never committed exists (unless its commit's fate is unknown).
        assert set(latest) <= set(ledger.steps) | ledger.unsure
        conn.rollback()
        for serial, (_, state, response) in ledger.steps.items():
            if state == "success" and serial not in ledger.unsure:
                replay = conn.execute("SELECT outcome, response FROM hivenet.begin_step(%s, %s)",
                                      (serial, Jsonb({"n": serial}))).fetchone()
                assert replay == ("replayed", response), serial
        conn.rollback()
