"""Failover (SPEC §6, docs/operations.md "Failover"): a promoted standby never issues a
serial its old primary committed: with a synchronous standby by itself, with an asynchronous
one because the fence moved every counter past what the old primary may have issued in the
WAL the standby never got, before anything was issued on the new timeline: by itself (the
first allocation on it), or `hivenet-db failover-fence`, or maintain().

The fence's own behaviour is tested on the suite's server (no standby needed: a new timeline
is played by setting back the sequence that holds the last one fenced); the failovers start a
primary and a standby of their own (tests/replication.py) and are marked slow; a failover
under pg_auto_failover is tests/test_ha.py.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import metrics
from hivenet_db.cli import main as cli
from tests.helpers import in_parallel, scalar, share_fallback, sqlstate_of, wait_until_blocked
from tests.replication import Pair, exposed, primary_and_standby

PREPARED = ("01", "02", "03", "04")  # scopes with their own sequence before the load
COLD = "09"  # a scope that draws from the format's shared fallback throughout
LOST = "07"  # a scope prepared, and drawn from, only in the WAL an asynchronous standby lacks


def fields(instance: str) -> dict[str, str]:
    return {"system": "C0001", "module": "A01", "instance": instance}


# ---------------------------------------------------------------- the fence itself


def counters(db: psycopg.Connection) -> dict[str, int]:
    return {name: value for name, value in db.execute(
        "SELECT sequencename, coalesce(last_value, 0) FROM pg_sequences "
        "WHERE schemaname = 'hivenet' AND (sequencename LIKE 'seq\\_%' "
        "OR sequencename LIKE 'cold\\_%')").fetchall()}


def test_the_fence_moves_every_counter_past_a_gap_once_per_timeline(
        db: psycopg.Connection) -> None:
    """Every scope's own sequence (interface, unified) and every shared fallback counter."""
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', %s, 'B0001')"
    share_fallback(db, "interface")
    db.execute("SELECT hivenet.prepare_scope('interface', %s)",
               (Jsonb({**fields("01"), "target": "B0001"}),))
    before = [scalar(db, interface, (i,)) for i in ("01", COLD)]
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields("01")),))
    unified = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    # The install recorded this timeline: nothing to fence without force.
    assert db.execute("SELECT * FROM hivenet.fence_failover(1000)").fetchall() == []
    old = counters(db)
    rows = db.execute("SELECT counter, from_value, to_value, parked "
                      "FROM hivenet.fence_failover(1000, true)").fetchall()
    moved = {counter: (start, end, parked) for counter, start, end, parked in rows}
    assert set(moved) == set(old)  # every scope sequence and fallback counter
    own = "seq_interface_C0001A0101"
    assert moved[own][:2] == (old[own], old[own] + 1000)
    assert counters(db)["cold_interface"] == old["cold_interface"] + 1000
    assert moved["seq_unified_C0001A0101"][:2] == (old["seq_unified_C0001A0101"],
                                                   old["seq_unified_C0001A0101"] + 1000)
    after = [scalar(db, interface, (i,)) for i in ("01", COLD)]
    for earlier, later in zip(before, after, strict=True):
        assert int(later[-10:]) - int(earlier[-10:]) == 1001
    later = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    assert int(later[-10:]) - int(unified[-10:]) == 1001
    recorded = db.execute("SELECT gap, applied_by FROM hivenet.failover_fence "
                          "WHERE timeline = hivenet._timeline()").fetchone()
    assert recorded == (1000, "command")


def test_the_fence_moves_a_scope_prepared_after_the_fallback_forward(
        db: psycopg.Connection, connect: Callable[..., psycopg.Connection]) -> None:
    """A scope prepared in a period with a rolled-back draw from the fallback starts after
    the fallback's count, its sequence showing nothing issued yet: the fence moves it past
    that start, never back to the start of the period."""
    share_fallback(db, "unified")
    app = connect(autocommit=False)
    drawn = [scalar(app, "SELECT hivenet.next_unified_serial('C0001', 'A01', '11')")
             for _ in range(5)]
    app.rollback()
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields("12")),))
    assert scalar(db, "SELECT pg_sequence_last_value('hivenet.\"seq_unified_C0001A0112\"')") \
        is None
    db.execute("SELECT * FROM hivenet.fence_failover(1000, true)")
    first = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '12')")
    assert int(first[-10:]) == int(drawn[-1][-10:]) + 1 + 1000 + 1


def test_a_counter_whose_period_cannot_hold_the_gap_is_parked_at_its_capacity(
        db: psycopg.Connection) -> None:
    id_fields = Jsonb({"merchant": "123456789012", "shard": "01"})
    db.execute("SELECT hivenet.prepare_scope('id_service', %s)", (id_fields,))
    db.execute("SELECT hivenet.next_serial('id_service', %s)", (id_fields,))
    rows = db.execute("SELECT counter, parked FROM hivenet.fence_failover(2000000, true) "
                      "WHERE format IN ('id_service', 'unified')").fetchall()
    assert ("seq_id_service_12345678901201", True) in rows  # merchant + shard
    assert all(not parked for counter, parked in rows if counter.startswith("cold_unified"))
    with pytest.raises(psycopg.Error) as refused:  # every number of today may have been issued
        db.execute("SELECT hivenet.next_serial('id_service', %s)", (id_fields,))
    assert sqlstate_of(refused.value) == "HN010"


def test_a_gap_below_one_is_refused(db: psycopg.Connection) -> None:
    for gap in (0, -5):
        with pytest.raises(psycopg.Error) as refused:
            db.execute("SELECT * FROM hivenet.fence_failover(%s, true)", (gap,))
        assert sqlstate_of(refused.value) == "HN001"
        assert str(gap) in str(refused.value)


def new_timeline(db: psycopg.Connection) -> None:
    """Play a promotion: the last timeline fenced is not this one (a sequence, so no
    transaction undoes it). Sessions marked checked keep their mark, as no session outlives
    a real promotion but a standby's, which allocated nothing."""
    db.execute("SELECT setval('hivenet.fenced_timeline', 0)")


def seq_of(serial: str) -> int:
    return int(serial[-10:])


UNIFIED = "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"


def test_maintain_fences_a_timeline_nobody_fenced(db: psycopg.Connection) -> None:
    """As after a promotion with no allocation since: maintain() fences it, once."""
    share_fallback(db, "unified")
    db.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '05')")
    new_timeline(db)
    old = counters(db)["cold_unified"]
    notices: list[str] = []
    db.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    db.execute("SELECT hivenet.maintain()")
    gap = scalar(db, "SELECT hivenet._failover_gap()")
    assert gap == 100000  # the setting failover_gap's default
    assert counters(db)["cold_unified"] >= old + gap
    assert any("is new" in n for n in notices), notices
    assert scalar(db, "SELECT applied_by FROM hivenet.failover_fence "
                      "WHERE timeline = hivenet._timeline()") == "maintain"
    notices.clear()
    moved = counters(db)["cold_unified"]
    db.execute("SELECT hivenet.maintain()")  # fenced once: never again on this timeline
    assert counters(db)["cold_unified"] == moved
    assert not any("is new" in n for n in notices)


@pytest.fixture
def gap_1000(db: psycopg.Connection) -> int:
    """A prepared unified scope (instance 01) with one serial issued, failover_gap 1000."""
    db.execute("UPDATE hivenet.setting SET value = '1000' WHERE name = 'failover_gap'")
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields("01")),))
    db.execute(UNIFIED)
    return 1000


def test_the_first_allocation_on_a_new_timeline_fences_it_once(
        db: psycopg.Connection, gap_1000: int, hivenet_app_url: str) -> None:
    """Whatever path the application takes first (the fast path, next_serial, a batch, the
    interface serial), every counter jumps by failover_gap, once, with no command run."""
    before = seq_of(scalar(db, UNIFIED))
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'T0001')"
    interface_before = seq_of(scalar(db, interface))
    # Each first statement, and how many unified serials it takes.
    firsts = [(UNIFIED, 1), ("SELECT hivenet.next_serial('unified', %s)", 1),
              ("SELECT hivenet.next_serials('unified', %s, 3)", 3), (interface, 0)]
    for first, drawn in firsts:
        new_timeline(db)
        with psycopg.connect(hivenet_app_url, autocommit=True) as app:
            app.execute(first, (Jsonb(fields("01")),) if "%s" in first else None)
            after = seq_of(scalar(app, UNIFIED))
            assert seq_of(scalar(app, UNIFIED)) == after + 1  # fenced once
        assert after == before + gap_1000 + drawn + 1, first
        assert scalar(db, "SELECT applied_by FROM hivenet.failover_fence "
                          "WHERE timeline = hivenet._timeline()") == "allocation"
        before = after + 1
    # The interface counter moved with each of the four fences.
    assert seq_of(scalar(db, interface)) == interface_before + 4 * gap_1000 + 2
    # On the same timeline, a new session fences nothing.
    with psycopg.connect(hivenet_app_url, autocommit=True) as app:
        assert seq_of(scalar(app, UNIFIED)) == before + 1


def test_the_fast_path_waits_for_its_sessions_check(db: psycopg.Connection,
                                                    gap_1000: int) -> None:
    """Per session, not per call: the fast path hands a session's first allocation to the
    full path, which checks the timeline and marks the session; from then on it serves."""
    with psycopg.connect(db.info.dsn, autocommit=True) as fresh:
        fast = "SELECT hivenet._fast_unified('C0001', 'A01', '01')"
        assert scalar(fresh, fast) is None
        assert scalar(fresh, "SELECT current_setting('hivenet.timeline_checked', true)") in (
            None, "")
        scalar(fresh, UNIFIED)
        assert scalar(fresh, "SELECT current_setting('hivenet.timeline_checked')") == "true"
        assert scalar(fresh, fast) is not None
        # A rollback undoes the mark (set_config in that transaction): checked again.
        fresh.execute("RESET hivenet.timeline_checked")
        with fresh.transaction(force_rollback=True):
            scalar(fresh, UNIFIED)
        assert scalar(fresh, "SELECT current_setting('hivenet.timeline_checked')") == ""


def test_the_fence_outlives_the_callers_rollback(db: psycopg.Connection, gap_1000: int,
                                                 hivenet_app_url: str) -> None:
    """The fence's moves and its mark are sequences: the rollback of the transaction that
    fenced keeps them (only its row in failover_fence goes), and nobody fences again."""
    before = seq_of(scalar(db, UNIFIED))
    new_timeline(db)
    with psycopg.connect(hivenet_app_url) as app:
        fenced = seq_of(scalar(app, UNIFIED))
        app.rollback()
    assert fenced == before + gap_1000 + 1
    assert scalar(db, "SELECT count(*) FROM hivenet.failover_fence "
                      "WHERE timeline = hivenet._timeline() AND applied_by = 'allocation'") == 0
    with psycopg.connect(hivenet_app_url, autocommit=True) as app:
        assert seq_of(scalar(app, UNIFIED)) == fenced + 1
    assert db.execute("SELECT * FROM hivenet.fence_failover()").fetchall() == []


def test_first_allocations_at_once_fence_once(connect: Callable[..., psycopg.Connection],
                                              db: psycopg.Connection, gap_1000: int) -> None:
    """Eight sessions allocate first on a new timeline at once: one fences, the others wait
    for it and find it done: the counter moved by one gap and eight serials."""
    before = seq_of(scalar(db, UNIFIED))
    new_timeline(db)
    conns = [connect() for _ in range(8)]

    def first(conn: psycopg.Connection, barrier: threading.Barrier) -> int:
        barrier.wait()
        return seq_of(scalar(conn, UNIFIED))

    seqs = in_parallel(conns, first)
    assert sorted(seqs) == list(range(before + gap_1000 + 1, before + gap_1000 + 9))
    assert scalar(db, "SELECT count(*) FROM hivenet.failover_fence "
                      "WHERE applied_by = 'allocation'") == 1


def test_a_first_allocation_waits_for_the_fence_in_progress(
        connect: Callable[..., psycopg.Connection], db: psycopg.Connection,
        gap_1000: int) -> None:
    """While a fence runs (here: its lock held by a session that then fences), a first
    allocation waits for it and does not fence again."""
    before = seq_of(scalar(db, UNIFIED))
    new_timeline(db)
    fencer, first = connect(), connect()
    fencer.execute("SELECT pg_advisory_lock(hivenet._reset_lock_space(), 1)")
    result: list[int] = []
    waiter = threading.Thread(target=lambda: result.append(seq_of(scalar(first, UNIFIED))))
    waiter.start()
    wait_until_blocked(db, first.info.backend_pid)
    moved = fencer.execute("SELECT * FROM hivenet.fence_failover(%s)", (gap_1000,)).fetchall()
    assert moved  # the fence ran, in the session holding the lock
    fencer.execute("SELECT pg_advisory_unlock(hivenet._reset_lock_space(), 1)")
    waiter.join(timeout=30)
    assert result == [before + gap_1000 + 1]


def test_a_scope_prepared_on_a_new_timeline_starts_after_the_fence(
        db: psycopg.Connection, gap_1000: int) -> None:
    """Preparing a scope fences first: a scope that drew from the shared fallback starts
    after the fenced fallback counter."""
    share_fallback(db, "unified")
    drawn = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', %s)", (COLD,))
    cold = counters(db)["cold_unified"]
    new_timeline(db)
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields(COLD)),))
    assert counters(db)["cold_unified"] == cold + gap_1000
    first = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', %s)", (COLD,))
    assert seq_of(first) > seq_of(drawn) + gap_1000


def test_a_counter_first_made_in_the_period_of_a_fence_starts_after_its_gap(
        db: psycopg.Connection, gap_1000: int,
        fake_clock: Callable[[psycopg.Connection, str], None]) -> None:
    """The old primary may have made a counter and issued from it in the WAL the promoted
    standby lacks, where the fence cannot move it: a scope prepared, or a format (its one
    scope) defined again in the fence's period (the day) starts after the gap, showing nothing
    issued until it issues; the next day, from 1."""

    def first_of_new_format(name: str) -> int:
        db.execute("SELECT hivenet.define_format(%s, '[{\"literal\": \"BK\"}, "
                   "{\"time\": \"YYYYMMDD\"}, {\"seq\": 6, \"reset\": \"day\"}]')", (name,))
        return int(scalar(db, "SELECT hivenet.next_serial(%s, '{}')", (name,))[-6:])

    new_timeline(db)
    scalar(db, UNIFIED)  # fences
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields("05")),))
    assert scalar(db, "SELECT hivenet._has_issued('seq_unified_C0001A0105')") is False
    assert seq_of(scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '05')")
                  ) == gap_1000 + 1
    assert first_of_new_format("batch_slip") == gap_1000 + 1
    fake_clock(db, scalar(db, "SELECT (now() + interval '1 day')::text"))
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields("06")),))
    assert seq_of(scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '06')")) == 1
    assert first_of_new_format("batch_note") == 1


def test_maintain_samples_allocation_rates_and_warns_when_the_gap_is_too_small(
        db: psycopg.Connection, hivenet_admin_url: str) -> None:
    """The peak rate of each format (between two runs of maintain(), today or yesterday)
    times failover_loss_window against failover_gap: replication_warning(), maintain() and
    the metrics say when the gap is too small. A fence's jump is no allocation."""
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields("01")),))
    db.execute(UNIFIED)
    db.execute("SELECT hivenet.maintain()")  # the first sample: no rate yet

    def ten_seconds_later(serials: int) -> float:
        db.execute("SELECT hivenet.next_serials('unified', %s, %s)",
                   (Jsonb(fields("01")), serials))
        db.execute("UPDATE hivenet.allocation_rate SET sampled_at = sampled_at - interval '10s'")
        db.execute("SELECT hivenet.maintain()")
        return float(scalar(db, "SELECT peak FROM hivenet.allocation_rate "
                                "WHERE format = 'unified'"))

    peak = ten_seconds_later(5000)
    assert 5000 / 30 < peak <= 500  # 5,000 in ten seconds and however long maintain() took
    assert scalar(db, "SELECT hivenet.replication_warning()") is None  # 500 x 30 s < 100,000
    assert ten_seconds_later(1000) == peak  # a slower stretch keeps the peak
    db.execute("SELECT * FROM hivenet.fence_failover(1000000, true)")
    assert ten_seconds_later(10) == peak  # the fence's jump counts as no allocation
    db.execute("UPDATE hivenet.setting SET value = '1000' WHERE name = 'failover_gap'")
    warning = scalar(db, "SELECT hivenet.replication_warning()")
    assert warning.startswith(f"format unified peaked at {round(peak, 1)} serials a second"), \
        warning
    assert f"{math.ceil(peak * 30)} in failover_loss_window 30 seconds, more than " \
           "failover_gap 1000" in warning
    notices: list[str] = []
    db.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    db.execute("SELECT hivenet.maintain()")
    assert any("format unified peaked at" in n for n in notices), notices
    with psycopg.connect(hivenet_admin_url) as admin:
        read = {m.name: m.samples for m in metrics.read(admin)}
    assert read["hivenet_failover_gap"][0].value == 1000
    assert read["hivenet_failover_loss_window_seconds"][0].value == 30
    rates = {s.labels["format"]: s.value for s in read["hivenet_allocation_peak_per_second"]}
    assert rates["unified"] == peak
    # A new business day: today's peak becomes yesterday's, still the day's peak.
    db.execute("UPDATE hivenet.allocation_rate SET day = day - 1")
    db.execute("SELECT hivenet.maintain()")
    assert db.execute("SELECT peak < previous_peak, previous_peak FROM hivenet.allocation_rate "
                      "WHERE format = 'unified'").fetchone() == (True, peak)


def test_the_application_role_may_not_fence(db: psycopg.Connection) -> None:
    db.execute("CREATE ROLE hivenet_fence_app")
    db.execute("GRANT USAGE ON SCHEMA hivenet TO hivenet_fence_app")
    try:
        db.execute("SET ROLE hivenet_fence_app")
        with pytest.raises(psycopg.Error) as refused:
            db.execute("SELECT * FROM hivenet.fence_failover(1, true)")
        assert sqlstate_of(refused.value) == "42501"
    finally:
        db.execute("RESET ROLE")
        db.execute("DROP OWNED BY hivenet_fence_app")
        db.execute("DROP ROLE hivenet_fence_app")


def test_failover_fence_command(hivenet_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["failover-fence", "--url", hivenet_url, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first[0]["fenced"] == "already" and first[0]["gap"] is None
    assert cli(["failover-fence", "--url", hivenet_url, "--gap", "500", "--force",
                "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second[0]["fenced"] == "now" and second[0]["gap"] == 500
    assert second[0]["counters"] >= 6  # one fallback counter per built-in format at least
    assert cli(["failover-fence", "--url", hivenet_url, "--gap", "0", "--force"]) == 1


# ---------------------------------------------------------------- failovers


@dataclass
class Load:
    """Workers allocating (plain and batch) and claiming interface serials in committed
    transactions on the primary until it dies; what COMMIT confirmed is recorded."""

    url: str
    workers: int = 8
    serials: set[str] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    unexpected: list[BaseException] = field(default_factory=list)

    def _work(self, n: int) -> None:
        try:
            conn = psycopg.connect(self.url)
        except psycopg.OperationalError:
            return
        instance = (*PREPARED, COLD)[n % (len(PREPARED) + 1)]
        try:
            while not self.stop.is_set():
                plain = scalar(conn, "SELECT hivenet.next_unified_serial('C0001', 'A01', %s)",
                               (instance,))
                batch = [r[0] for r in conn.execute(
                    "SELECT hivenet.next_serials('unified', %s, 5)",
                    (Jsonb(fields(instance)),)).fetchall()]
                interface = scalar(conn, "SELECT hivenet.next_interface_serial("
                                   "'C0001', 'A01', %s, 'T0001')", (instance,))
                conn.execute("SELECT hivenet.claim_interface_serial(%s, %s)",
                             (interface, plain))
                conn.commit()  # only now is it committed
                with self.lock:
                    self.serials.update([plain, *batch, interface])
                    self.claims.add(interface)
        except psycopg.OperationalError:
            return  # the server died: the last transaction's fate is unknown, not recorded
        except BaseException as error:
            self.unexpected.append(error)
        finally:
            conn.close()

    def start(self) -> None:
        self.threads = [threading.Thread(target=self._work, args=(n,), daemon=True)
                        for n in range(self.workers)]
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        assert not self.unexpected, self.unexpected


def prepare(pair: Pair) -> None:
    with psycopg.connect(pair.primary_url, autocommit=True) as conn:
        share_fallback(conn, "unified", "interface")  # for COLD
        for instance in PREPARED:
            conn.execute("SELECT hivenet.prepare_scope('unified', %s)",
                         (Jsonb(fields(instance)),))
            conn.execute("SELECT hivenet.prepare_scope('interface', %s)",
                         (Jsonb({**fields(instance), "target": "T0001"}),))


def issue_from_a_new_scope(load: Load) -> None:
    """Prepare scope LOST on the primary and commit serials of it (with the standby cut off,
    the promoted one never has them nor the scope's counter)."""
    with psycopg.connect(load.url) as conn:
        conn.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields(LOST)),))
        conn.commit()
        serials = [r[0] for r in conn.execute("SELECT hivenet.next_serials('unified', %s, 5)",
                                              (Jsonb(fields(LOST)),)).fetchall()]
        conn.commit()
    with load.lock:
        load.serials.update(serials)


def issued_after(url: str, per_scope: int) -> set[str]:
    """``per_scope`` new serials of every scope the load used, on the (new) primary; scope
    LOST prepared there first."""
    out: set[str] = set()
    with psycopg.connect(url) as conn:
        conn.execute("SELECT hivenet.prepare_scope('unified', %s)", (Jsonb(fields(LOST)),))
        out.update(r[0] for r in conn.execute("SELECT hivenet.next_serials('unified', %s, %s)",
                                              (Jsonb(fields(LOST)), per_scope)).fetchall())
        for instance in (*PREPARED, COLD):
            out.update(r[0] for r in conn.execute(
                "SELECT hivenet.next_serials('unified', %s, %s)",
                (Jsonb(fields(instance)), per_scope)).fetchall())
            out.update(r[0] for r in conn.execute(
                "SELECT hivenet.next_serials('interface', %s, %s)",
                (Jsonb({**fields(instance), "target": "T0001"}), per_scope)).fetchall())
        conn.commit()
    return out


def claims_present(url: str, claims: set[str]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(scalar(conn, "SELECT count(*) FROM hivenet.interface_call "
                                "WHERE interface_serial = ANY(%s)", (sorted(claims),)))


def reclaim(url: str, claims: Iterator[str] | list[str]) -> int:
    """How many of ``claims`` the (new) primary accepts again."""
    accepted = 0
    with psycopg.connect(url) as conn:
        for serial in claims:
            try:
                conn.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))
                accepted += 1
            except psycopg.Error as error:
                assert sqlstate_of(error) == "HN020", error
            conn.rollback()
    return accepted


def failover(pair: Pair, *, cut_off: bool, new_scope: bool = False) -> tuple[Load, int]:
    """Load on the primary; with ``cut_off`` the standby stopped for the last second (as by
    a network partition: from then on the primary's WAL never reaches it), and with
    ``new_scope`` scope LOST prepared and drawn from then (an asynchronous standby only:
    a synchronous one would hold the commits); the primary killed with SIGKILL, the standby
    promoted. Returns the load and how many serials were committed before the cut-off."""
    prepare(pair)
    pair.wait_caught_up()
    load = Load(pair.primary_url)
    load.start()
    time.sleep(1.0)
    shipped = len(load.serials)
    if cut_off:
        pair.standby.stop("fast")
        with load.lock:
            shipped = len(load.serials)
        if new_scope:
            issue_from_a_new_scope(load)
        time.sleep(1.0)
    pair.primary.kill()
    load.join()
    if cut_off:
        pair.standby.start()
    # On a standby the timeline's check does nothing: drawing fails as read only.
    with psycopg.connect(pair.standby_url) as standby, \
            pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        standby.execute(UNIFIED)
    pair.promote()
    return load, shipped


@pytest.mark.slow
def test_synchronous_failover_reissues_nothing_and_re_accepts_nothing() -> None:
    """Three runs: the primary killed under load, its synchronous standby promoted; in the
    last two the standby is cut off for the last second first (commits then wait for it, so
    none is confirmed that it lacks; an asynchronous standby loses them, next test)."""
    for run in range(3):
        with primary_and_standby(synchronous=True) as pair:
            load, _ = failover(pair, cut_off=run > 0)
            assert len(load.serials) > 100, f"run {run}: the load committed too little"
            assert claims_present(pair.standby_url, load.claims) == len(load.claims)
            assert reclaim(pair.standby_url, sorted(load.claims)[-50:]) == 0
            reissued = issued_after(pair.standby_url, 500) & load.serials
            assert not reissued, f"run {run}: {len(reissued)} committed serials issued again"


def async_failover(pair: Pair, fence: Callable[[str], None]) -> tuple[Load, int, int]:
    """``failover`` with the standby cut off, then ``fence``. Returns the load, how many
    committed serials the unfenced standby would have issued again, and how many committed
    claims it lacks."""
    load, shipped = failover(pair, cut_off=True, new_scope=True)
    assert len(load.serials) - shipped > 100, "too little committed after the cut-off"
    unfenced = exposed(pair.standby_url, load.serials, (*PREPARED, LOST))
    missing = len(load.claims) - claims_present(pair.standby_url, load.claims)
    fence(pair.standby_url)
    return load, unfenced, missing


@pytest.mark.slow
def test_asynchronous_failover_with_the_fence_reissues_no_serial(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The hazard, measured (committed serials above where the promoted standby's counters
    stand, committed claims it lacks), then the fence three ways: by itself, at the first
    allocation (no command run by anyone), `hivenet-db failover-fence` before traffic, and
    maintain() before traffic: 0 committed serials issued again."""

    def nothing(url: str) -> None:
        pass

    def command(url: str) -> None:
        capsys.readouterr()
        assert cli(["failover-fence", "--url", url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["fenced"] == "now"

    def maintain(url: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT hivenet.maintain()")

    measured: list[str] = []
    for fence in (nothing, command, maintain):
        with primary_and_standby(synchronous=False) as pair:
            load, unfenced, missing = async_failover(pair, fence)
            measured.append(f"{fence.__name__}: {len(load.serials)} committed serials, "
                            f"{unfenced} above the promoted standby's counters, {missing} "
                            f"committed claims lost")
            assert unfenced > 0, "the standby was not behind: the test proves nothing"
            assert missing > 0
            # The guarantee's condition: no format issued more than the gap in the lost WAL.
            assert len(load.serials) < 100000
            reissued = issued_after(pair.standby_url, 2000) & load.serials
            assert not reissued, f"{len(reissued)} committed serials issued again"
            with psycopg.connect(pair.standby_url, autocommit=True) as conn:
                assert scalar(conn, "SELECT applied_by FROM hivenet.failover_fence WHERE "
                                    "timeline = hivenet._timeline()") == {
                    "nothing": "allocation"}.get(fence.__name__, fence.__name__)
    print("\n".join(measured))


@pytest.mark.slow
def test_maintain_and_report_warn_about_an_asynchronous_standby(
        capsys: pytest.CaptureFixture[str]) -> None:
    for synchronous in (False, True):
        with primary_and_standby(synchronous=synchronous) as pair, \
                psycopg.connect(pair.primary_url, autocommit=True) as conn:
            warnings: list[str] = []

            def notice(diagnostic: psycopg.errors.Diagnostic, into: list[str] = warnings
                       ) -> None:
                into.append(diagnostic.message_primary or "")

            conn.add_notice_handler(notice)
            conn.execute("SELECT hivenet.maintain()")
            warned = [w for w in warnings if "synchronous_standby_names is empty" in w]
            assert bool(warned) == (not synchronous), warnings
            # An administrator without pg_read_all_stats sees it too.
            conn.execute("CREATE ROLE fence_admin_test IN ROLE hivenet_admin") if scalar(
                conn, "SELECT to_regrole('hivenet_admin') IS NOT NULL") else conn.execute(
                "CREATE ROLE fence_admin_test")
            conn.execute("GRANT USAGE ON SCHEMA hivenet TO fence_admin_test")
            conn.execute("GRANT EXECUTE ON FUNCTION hivenet.replication_warning() "
                         "TO fence_admin_test")
            conn.execute("SET ROLE fence_admin_test")
            warning = scalar(conn, "SELECT hivenet.replication_warning()")
            conn.execute("RESET ROLE")
            assert (warning is not None) == (not synchronous), warning
            assert cli(["report", "--url", pair.primary_url, "--json"]) == 0
            report = capsys.readouterr().out
            assert ("synchronous_standby_names is empty" in report) == (not synchronous)
