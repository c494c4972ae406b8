"""Interface-serial duplicate check, its window, partitions, call chain (SPEC §3, §8)."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable

import psycopg
import psycopg.sql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hivenet_db import (
    AsyncInterfaceDedup,
    DuplicateInterfaceSerial,
    InterfaceDedup,
    InvalidInput,
    SerialOutsideWindow,
)
from hivenet_db._execute import SyncDB
from hivenet_db.propagation import unified_serial_context
from tests.helpers import (
    async_connection,
    behind_a_table_lock,
    claim_and_end,
    explain_to_notices,
    race,
    run_sql,
    run_sql_async,
    scalar,
    statements_of,
    wait_until_blocked,
)

NOW = "2031-03-01 12:00:00+00"
UNIFIED = "C0001A0101203103010000000001"
SetClock = Callable[[psycopg.Connection, str], None]


def iserial(when: str = "20310301115900", seq: int = 1, source: str = "C0001A0101",
            target: str = "T0001") -> str:
    return f"{source}{target}{when}{seq:010d}"


def claim(conn: psycopg.Connection, serial: str, unified: str | None = None,
          system: str | None = None, nowait: bool = False) -> None:
    conn.execute("SELECT hivenet.claim_interface_serial(%s, %s, %s, %s)",
                 (serial, unified, system, nowait))


def claim_state(conn: psycopg.Connection, *args: object, **kwargs: object) -> str | None:
    """None when the claim succeeded, else the SQLSTATE it raised."""
    try:
        claim(conn, *args, **kwargs)  # type: ignore[arg-type]
    except psycopg.Error as error:
        return error.sqlstate
    return None


def recorded(db: psycopg.Connection, serial: str) -> int:
    return int(scalar(db, "SELECT count(*) FROM hivenet.interface_call "
                          "WHERE interface_serial = %s", (serial,)))


@pytest.fixture
def clocked(db: psycopg.Connection, fake_clock: SetClock) -> psycopg.Connection:
    fake_clock(db, NOW)
    return db


@pytest.fixture
def clocked_conns(connect: Callable[..., psycopg.Connection],
                  fake_clock: SetClock) -> Callable[[int], list[psycopg.Connection]]:
    def _open(n: int) -> list[psycopg.Connection]:
        conns = [connect() for _ in range(n)]
        for conn in conns:
            fake_clock(conn, NOW)
        return conns
    return _open


# --- the rules ---------------------------------------------------------------------------

def test_second_claim_of_a_serial_is_a_duplicate(clocked: psycopg.Connection) -> None:
    serial = iserial()
    claim(clocked, serial)
    with pytest.raises(psycopg.Error) as raised:
        claim(clocked, serial)
    assert raised.value.sqlstate == "HN020"
    assert serial in str(raised.value.diag.message_primary)
    assert recorded(clocked, serial) == 1


def test_other_serials_of_the_same_second_are_not_duplicates(clocked: psycopg.Connection) -> None:
    for serial in (iserial(seq=1), iserial(seq=2), iserial(target="T0002"),
                   iserial(source="C0001A0102")):
        claim(clocked, serial)


@pytest.mark.parametrize("serial", [
    iserial()[:-1],                               # 38 characters
    iserial() + "1",                              # 40
    iserial(source="C0001A0100"),                 # instance 00
    iserial(source="C0001A01-1"),                 # not a digit
    iserial(target="T000_"),                      # target charset
    iserial(source="C\uff10001A0101")[:39],      # full-width digit
    iserial(when="20310230115900"),               # 30 February
    iserial(when="20300229115900"),               # 29 February of a common year
    iserial(when="20310431115900"),               # 31 April
    iserial(when="20311301115900"),               # month 13
    iserial(when="20310301245900"),               # hour 24
    iserial(when="20310301116000"),               # minute 60
    iserial(seq=0),                               # seq starts at 1
    " " + iserial()[1:],
    "",
])
def test_malformed_serial_is_invalid_input(clocked: psycopg.Connection, serial: str) -> None:
    with pytest.raises(psycopg.Error) as raised:
        claim(clocked, serial)
    assert raised.value.sqlstate == "HN001"
    assert repr(serial)[1:-1][:10] in str(raised.value.diag.message_primary)


def test_null_serial_is_invalid_input(clocked: psycopg.Connection) -> None:
    assert claim_state(clocked, None) == "HN001"


def test_leap_day_is_a_date(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, "2032-02-29 12:00:00+00")
    claim(db, iserial(when="20320229115900"))


_CHARS = st.sampled_from("0123456789AZaz0_ ")


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_validation_agrees_with_parse_serial(clocked: psycopg.Connection, data: st.DataObject
                                             ) -> None:
    """The hot path's own check accepts exactly what parse_serial accepts."""
    serial = list(iserial(seq=7))
    for _ in range(data.draw(st.integers(0, 3))):
        serial[data.draw(st.integers(0, 38))] = data.draw(_CHARS)
    candidate = "".join(serial)
    try:
        clocked.execute("SELECT hivenet.parse_serial(%s, 'interface')", (candidate,))
        parses = True
    except psycopg.Error:
        parses = False
    state = claim_state(clocked, candidate)
    assert (state != "HN001") == parses, (candidate, state)
    clocked.execute("DELETE FROM hivenet.interface_call")


# --- the window --------------------------------------------------------------------------

# The clock is 12:00 UTC: a caller at UTC-12 reads 00:00, one at UTC+14 reads 02:00 next day.
@pytest.mark.parametrize(("when", "state"), [
    ("20310228000000", None),       # exactly one day old, for a caller at UTC-12
    ("20310227235959", "HN021"),    # older than the window in every zone: an old replay
    ("20300301120000", "HN021"),
    ("20310302020500", None),       # 5 minutes ahead at UTC+14: within the tolerance
    ("20310302020501", "HN021"),    # further into the future than any zone
])
def test_window(clocked: psycopg.Connection, when: str, state: str | None) -> None:
    assert claim_state(clocked, iserial(when=when)) == state


def test_window_message_names_the_serial(clocked: psycopg.Connection) -> None:
    serial = iserial(when="20300301120000")
    with pytest.raises(psycopg.Error) as raised:
        claim(clocked, serial)
    assert serial in str(raised.value.diag.message_primary)


def test_window_follows_the_settings(clocked: psycopg.Connection) -> None:
    clocked.execute("UPDATE hivenet.setting SET value = '1 hour' WHERE name = 'interface_window'")
    clocked.execute("UPDATE hivenet.setting SET value = '0' "
                    "WHERE name = 'interface_future_tolerance'")
    assert claim_state(clocked, iserial(when="20310228225959")) == "HN021"
    assert claim_state(clocked, iserial(when="20310228230000")) is None
    assert claim_state(clocked, iserial(when="20310302020001")) == "HN021"


def test_the_window_is_the_same_in_every_business_zone(clocked: psycopg.Connection) -> None:
    """A serial names no zone: its time is its caller's, anywhere from UTC-12 to UTC+14."""
    clocked.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    assert claim_state(clocked, iserial(when="20310302020000")) is None
    assert claim_state(clocked, iserial(when="20310302020501")) == "HN021"
    clocked.execute("UPDATE hivenet.setting SET value = '1 hour' WHERE name = 'interface_window'")
    assert claim_state(clocked, iserial(when="20310228225959")) == "HN021"


def test_old_replay_is_refused_even_after_its_record_is_gone(clocked: psycopg.Connection,
                                                            fake_clock: SetClock) -> None:
    serial = iserial()
    claim(clocked, serial)
    fake_clock(clocked, "2031-03-20 12:00:00+00")
    clocked.execute("SELECT hivenet.maintain()")
    assert recorded(clocked, serial) == 0
    assert claim_state(clocked, serial) == "HN021"


# --- transactions ------------------------------------------------------------------------

def test_rolled_back_claim_disappears(clocked: psycopg.Connection) -> None:
    serial = iserial()
    with clocked.transaction() as tx:
        claim(clocked, serial)
        raise psycopg.Rollback(tx)
    assert recorded(clocked, serial) == 0
    claim(clocked, serial)
    assert recorded(clocked, serial) == 1


def test_duplicate_within_one_transaction(clocked: psycopg.Connection) -> None:
    serial = iserial()
    with pytest.raises(psycopg.Error) as raised, clocked.transaction():
        claim(clocked, serial)
        claim(clocked, serial)
    assert raised.value.sqlstate == "HN020"


def _blocked_claim(conn: psycopg.Connection, serial: str,
                   out: dict[str, str | None]) -> threading.Thread:
    def run() -> None:
        out["state"] = claim_state(conn, serial)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize(("winner_commits", "expected"), [(True, "HN020"), (False, None)])
def test_concurrent_claim_waits_for_the_winner(
        clocked_conns: Callable[[int], list[psycopg.Connection]], winner_commits: bool,
        expected: str | None) -> None:
    winner, loser, observer = clocked_conns(3)
    serial = iserial()
    out: dict[str, str | None] = {}
    with winner.transaction() as tx:
        claim(winner, serial)
        thread = _blocked_claim(loser, serial, out)
        wait_until_blocked(observer, loser.info.backend_pid)
        assert "state" not in out
        if not winner_commits:
            raise psycopg.Rollback(tx)
    thread.join(10)
    assert out == {"state": expected}
    assert recorded(observer, serial) == 1


def test_nowait_claim_fails_at_once(clocked_conns: Callable[[int], list[psycopg.Connection]]
                                    ) -> None:
    winner, loser = clocked_conns(2)
    serial = iserial()
    with winner.transaction() as tx:
        claim(winner, serial)
        loser.execute("SET lock_timeout = '5s'")  # a wait would fail with 55P03, not HN020
        with pytest.raises(psycopg.Error) as raised:
            claim(loser, serial, nowait=True)
        assert raised.value.sqlstate == "HN020"
        assert "in progress" in str(raised.value.diag.message_primary)
        claim(loser, iserial(seq=2), nowait=True)  # other serials go through
        raise psycopg.Rollback(tx)
    claim(loser, serial, nowait=True)
    assert scalar(loser, "SHOW lock_timeout") == "5s"  # the nowait timeout was its own


def test_a_nowait_claim_waits_for_a_lock_on_the_whole_table_and_is_no_false_duplicate(
        clocked_conns: Callable[[int], list[psycopg.Connection]]) -> None:
    """A maintain() creating a partition locks the table a moment: under the nowait path's
    1 ms lock_timeout that wait raised HN020, a duplicate, for a serial nobody had claimed."""
    holder, claimer = clocked_conns(2)
    assert behind_a_table_lock(holder, claimer, "hivenet.interface_call", lambda: claim_state(
        claimer, iserial(seq=7), nowait=True)) is None
    assert recorded(holder, iserial(seq=7)) == 1


def test_repeatable_read_sees_a_later_duplicate_as_serialization_failure(
        clocked_conns: Callable[[int], list[psycopg.Connection]]) -> None:
    first, late = clocked_conns(2)
    late.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    late.execute("SELECT 1")  # the snapshot is taken
    claim(first, iserial())
    assert claim_state(late, iserial()) == "40001"
    late.execute("ROLLBACK")
    assert claim_state(late, iserial()) == "HN020"


@pytest.mark.parametrize("nowait", [False, True])
def test_exactly_one_winner_over_many_trials(
        clocked_conns: Callable[[int], list[psycopg.Connection]], nowait: bool) -> None:
    conns = clocked_conns(6)
    observer = conns[0]
    rng = random.Random(20311)
    for trial in range(40):
        serial = iserial(seq=trial + 1)
        # Some winners roll back (default mode): a waiting claimant must then win instead.
        rolls_back = {i for i in range(len(conns)) if not nowait and rng.random() < 0.4}

        def attempt(i: int, conn: psycopg.Connection, serial: str = serial,
                    rolls_back: set[int] = rolls_back) -> str:
            return claim_and_end(conn, lambda: claim_state(conn, serial, nowait=nowait),
                                 i in rolls_back)

        outcomes = race(conns, attempt)
        assert set(outcomes) <= {"committed", "rolled back", "HN020"}, outcomes
        committed = outcomes.count("committed")
        assert recorded(observer, serial) == committed
        # Someone who would commit either did or saw a committed duplicate: one winner.
        expect = 1 if len(rolls_back) < len(conns) else 0
        assert committed == expect, (trial, outcomes, rolls_back)
        if nowait:
            assert outcomes.count("HN020") == len(conns) - 1


# --- unified and system serials, call chain ----------------------------------------------

def test_unified_serial_is_recorded_never_checked(clocked: psycopg.Connection) -> None:
    claim(clocked, iserial(seq=1), UNIFIED, "C0001A010120310301000000000001")
    claim(clocked, iserial(seq=2), UNIFIED)  # same unified serial: fine
    claim(clocked, iserial(seq=3, source="D0001B0201", target="E0001"), UNIFIED,
          "D0001B020120310301000000000007")
    rows = clocked.execute("SELECT * FROM hivenet.call_chain(%s)", (UNIFIED,)).fetchall()
    assert [r[0] for r in rows] == [iserial(seq=1), iserial(seq=2),
                                    iserial(seq=3, source="D0001B0201", target="E0001")]
    third = rows[2]
    assert third[1:6] == ("D0001B020120310301000000000007", "D0001", "B02", "01", "E0001")
    assert str(third[6]) == "2031-03-01 11:59:00"
    assert str(third[7]) == "2031-03-01 12:00:00+00:00"
    assert rows[1][1] is None


def test_serial_time_ignores_the_session_time_zone(clocked: psycopg.Connection,
                                                   fake_clock: SetClock) -> None:
    # 02:30 on 9 March 2031 does not exist in New York (DST starts): still 02:30 here.
    fake_clock(clocked, "2031-03-09 02:31:00+00")
    claim(clocked, iserial(when="20310309023000"), UNIFIED)
    clocked.execute("SET TimeZone = 'America/New_York'")
    assert str(clocked.execute("SELECT serial_time FROM hivenet.call_chain(%s)", (UNIFIED,)
                               ).fetchone()[0]) == "2031-03-09 02:30:00"


def test_call_chain_is_in_recorded_order(clocked: psycopg.Connection, fake_clock: SetClock
                                         ) -> None:
    # Recorded later, issued earlier: the chain follows the recording.
    fake_clock(clocked, "2031-03-01 12:00:01+00")
    claim(clocked, iserial(seq=9), UNIFIED)
    fake_clock(clocked, "2031-03-01 12:00:02+00")
    claim(clocked, iserial(when="20310301115800", seq=1), UNIFIED)
    chain = clocked.execute("SELECT interface_serial FROM hivenet.call_chain(%s)",
                            (UNIFIED,)).fetchall()
    assert [r[0] for r in chain] == [iserial(seq=9), iserial(when="20310301115800", seq=1)]
    assert clocked.execute("SELECT count(*) FROM hivenet.call_chain('C0001A0101203103010000000002')"
                           ).fetchone()[0] == 0


def test_call_chain_is_exactly_the_recording_order_across_partitions(
        clocked: psycopg.Connection) -> None:
    """Calls recorded at one instant (one clock reading) come back in the order recorded, not
    by serial, whether they sit in a day's partition or in the default partition."""
    # Before maintain(): 1 March has no partition, so its calls go to the default partition
    # (and stay there); maintain() then makes the partition of 28 February.
    claim(clocked, iserial(target="Z0001"), UNIFIED)
    clocked.execute("SELECT hivenet.maintain()")
    order = [iserial(when="20310228235959", target="Y0001"), iserial(target="X0001"),
             iserial(when="20310228120000", target="W0001"), iserial(target="A0001"),
             iserial(when="20310228120000", target="B0001")]
    for serial in order:
        claim(clocked, serial, UNIFIED)
    places = clocked.execute(
        "SELECT DISTINCT tableoid::regclass::text FROM hivenet.interface_call").fetchall()
    assert sorted(p[0] for p in places) == ["hivenet.interface_call_20310228",
                                            "hivenet.interface_call_default"]
    chain = clocked.execute("SELECT interface_serial FROM hivenet.call_chain(%s)",
                            (UNIFIED,)).fetchall()
    assert [r[0] for r in chain] == [iserial(target="Z0001"), *order]


@pytest.mark.parametrize(("unified", "system"), [
    ("C0001A01012031030100000000011", None),      # 29 characters
    ("C0001A0101203103010000000A01", None),
    (None, "C0001A010120310301000000000001X"),
    (None, "C0001A0101203103010000000000"),      # a unified serial where a system one belongs
])
def test_malformed_unified_or_system_serial(clocked: psycopg.Connection, unified: str | None,
                                            system: str | None) -> None:
    assert claim_state(clocked, iserial(), unified, system) == "HN001"
    assert recorded(clocked, iserial()) == 0


def test_calls_per_day_view(clocked: psycopg.Connection) -> None:
    claim(clocked, iserial(seq=1))
    claim(clocked, iserial(seq=2))
    claim(clocked, iserial(seq=3, target="T0002"))
    claim(clocked, iserial(when="20310228235959", seq=1))
    rows = clocked.execute("SELECT day::text, source_system, target_system, calls "
                           "FROM hivenet.interface_calls_per_day ORDER BY 1, 3").fetchall()
    assert rows == [("2031-02-28", "C0001", "T0001", 1), ("2031-03-01", "C0001", "T0001", 2),
                    ("2031-03-01", "C0001", "T0002", 1)]


# --- partitions --------------------------------------------------------------------------

def partitions(db: psycopg.Connection) -> list[str]:
    return [r[0] for r in db.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'hivenet.interface_call'::regclass ORDER BY 1")]


def test_a_day_without_partition_goes_to_the_default_partition(clocked: psycopg.Connection
                                                               ) -> None:
    """A claim never creates a table (DDL in the caller's transaction would make every other
    caller of the day wait, and vanish with a rollback): the default partition takes it, and
    the check stays exact there."""
    assert "interface_call_20310301" not in partitions(clocked)
    with clocked.transaction() as tx:
        claim(clocked, iserial())
        raise psycopg.Rollback(tx)
    assert recorded(clocked, iserial()) == 0
    claim(clocked, iserial())
    assert claim_state(clocked, iserial()) == "HN020"
    assert scalar(clocked, "SELECT count(*) FROM hivenet.interface_call_default") == 1
    # maintain() leaves that day in the default partition (ATTACH would refuse) and
    # creates the others.
    clocked.execute("SELECT hivenet.maintain()")
    assert "interface_call_20310301" not in partitions(clocked)
    assert "interface_call_20310302" in partitions(clocked)
    assert claim_state(clocked, iserial()) == "HN020"


def test_new_day_after_a_claim_in_the_same_transaction(clocked: psycopg.Connection) -> None:
    with clocked.transaction():
        claim(clocked, iserial(when="20310228235959"))
        claim(clocked, iserial(when="20310301000001"))
    assert recorded(clocked, iserial(when="20310301000001")) == 1


def test_new_day_created_by_maintain_during_this_transaction(
        clocked_conns: Callable[[int], list[psycopg.Connection]]) -> None:
    # This transaction holds its lock on the parent from an earlier claim while maintain()
    # attaches the next days: ATTACH must not wait for it, and its view of the partitions
    # must follow.
    mine, other = clocked_conns(2)
    other.execute("SELECT hivenet.maintain()")
    other.execute("DROP TABLE hivenet.interface_call_20310301")  # empty: made again below
    with mine.transaction():
        claim(mine, iserial(when="20310228235959"))
        other.execute("SELECT hivenet.maintain()")
        claim(mine, iserial(when="20310301000001"))
    assert "interface_call_20310301" in partitions(other)
    assert recorded(other, iserial(when="20310301000001")) == 1
    assert scalar(other, "SELECT count(*) FROM hivenet.interface_call_20310301") == 1


def test_concurrent_first_claims_of_a_day(clocked_conns: Callable[[int], list[psycopg.Connection]]
                                          ) -> None:
    conns = clocked_conns(6)
    for when in ("20310228120000", "20310301000000"):  # two new days, two races
        def first_claim(i: int, conn: psycopg.Connection, when: str = when) -> str | None:
            return claim_state(conn, iserial(when=when, seq=i + 1))
        outcomes = race(conns, first_claim)
        assert outcomes == [None] * 6, (when, outcomes)
    assert scalar(conns[0], "SELECT count(*) FROM hivenet.interface_call_default") == 12
    assert [p for p in partitions(conns[0]) if p.startswith("interface_call_2031")] == []


def test_maintain_creates_coming_days_and_drops_past_retention(clocked: psycopg.Connection,
                                                               fake_clock: SetClock) -> None:
    clocked.execute("SELECT hivenet.maintain()")
    days = partitions(clocked)
    for day in ("20310228", "20310301", "20310302", "20310303"):
        assert f"interface_call_{day}" in days
    claim(clocked, iserial())
    # Day 1 March ended 8 days ago, at UTC-12 7.5 days ago: past the 7 days' retention.
    fake_clock(clocked, "2031-03-10 00:00:00+00")
    clocked.execute("SELECT hivenet.maintain()")
    days = partitions(clocked)
    assert "interface_call_20310301" not in days
    assert "interface_call_20310302" in days  # at UTC-12 ended 6.5 days ago: kept
    assert "interface_call_20310311" in days


def test_retention_never_undercuts_the_window(clocked: psycopg.Connection, fake_clock: SetClock
                                              ) -> None:
    clocked.execute("UPDATE hivenet.setting SET value = '1 second' "
                    "WHERE name = 'interface_retention'")
    serial = iserial(when="20310301000001")
    claim(clocked, serial)
    fake_clock(clocked, "2031-03-02 00:00:00+00")
    clocked.execute("SELECT hivenet.maintain()")
    assert claim_state(clocked, serial) == "HN020"


def test_maintain_skips_a_drop_while_claims_are_in_flight(
        clocked_conns: Callable[[int], list[psycopg.Connection]], fake_clock: SetClock) -> None:
    claimer, admin = clocked_conns(2)
    admin.execute("SELECT hivenet.maintain()")  # the day's partition, before its first claim
    claim(admin, iserial())
    fake_clock(admin, "2031-03-20 12:00:00+00")
    with claimer.transaction():
        claim(claimer, iserial(seq=2))  # holds ROW EXCLUSIVE on the parent until commit
        notices: list[str] = []
        admin.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        admin.execute("SELECT hivenet.maintain()")  # gives up after lock_timeout, no error
        assert "interface_call_20310301" in partitions(admin)
        assert any("not dropped" in n for n in notices)
    admin.execute("SELECT hivenet.maintain()")
    assert "interface_call_20310301" not in partitions(admin)


def test_duplicate_check_touches_one_partition_through_its_unique_index(
        clocked: psycopg.Connection) -> None:
    clocked.execute("SELECT hivenet.maintain()")
    serial = iserial()
    claim(clocked, serial)
    assert len(partitions(clocked)) >= 4
    # The claim's own statements, as run inside the function (auto_explain).
    plans: list[str] = []
    clocked.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
    explain_to_notices(clocked, analyze=True)
    clocked.execute("SET auto_explain.log_min_duration = 0")
    assert claim_state(clocked, serial) == "HN020"
    # The fast path's insert finds the conflict, then the full path's (for the exact error).
    inserts = [p for p in plans if "Insert on interface_call" in p]
    assert len(inserts) == 2
    assert all("Conflicting Tuples: 1" in insert for insert in inserts)
    # Nothing else of the claim reads the calls: the conflict is found by the insert, in the
    # unique index of the one partition its row is routed to (the primary key, the only one).
    # Past the inserts, only the HN020 message's lookup of when the serial was recorded.
    (lookup,) = [p for p in plans if "interface_call" in p and p not in inserts]
    assert "Index Scan using interface_call_20310301_pkey on interface_call_20310301" in lookup
    assert lookup.count(" on interface_call_") == 1
    assert clocked.execute(
        "SELECT count(*) FROM pg_index WHERE indisunique AND indrelid = "
        "'hivenet.interface_call_20310301'::regclass").fetchone()[0] == 1
    clocked.execute("SET auto_explain.log_min_duration = -1")
    # The same key looked up with a generic plan: every other day is pruned.
    clocked.execute("SET plan_cache_mode = force_generic_plan")
    clocked.execute("PREPARE look(text, date) AS SELECT 1 FROM hivenet.interface_call "
                    "WHERE interface_serial = $1 AND serial_day = $2")
    plan = "\n".join(r[0] for r in clocked.execute(psycopg.sql.SQL(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE look({}, '2031-03-01')"
    ).format(serial)))
    assert "Index Only Scan using interface_call_20310301_pkey" in plan
    assert plan.count("Index Only Scan") == 1
    assert "Subplans Removed" in plan


def test_a_plain_claim_is_one_insert_and_takes_no_advisory_lock(db: psycopg.Connection) -> None:
    """Issue 13's guard of the claim (not timed): a claim of a fresh serial runs one statement
    in the function, the insert (no check statement, no advisory lock, no other function),
    and nothing of it scans a table: the duplicate check is the insert's own, in the primary
    key of the one partition the row is routed to (the test above). On the real clock: a fake
    one runs statements of its own (_fake_now)."""
    db.execute("SELECT hivenet.maintain()")
    now = str(scalar(db, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS')"))
    for seq in range(1, 7):  # a session plans a statement for good after its fifth run
        claim(db, iserial(when=now, seq=seq), UNIFIED)
    plans, advisory = statements_of(
        db, "SELECT hivenet.claim_interface_serial(%s, %s)", (iserial(when=now, seq=9), UNIFIED))
    assert advisory == 0
    insert, caller = plans  # the function's one statement, then the caller's SELECT
    assert "Insert on interface_call" in insert
    assert "Conflict Resolution: NOTHING" in insert
    assert "Seq Scan" not in insert and "Index" not in insert  # no table read
    assert "claim_interface_serial" in caller
    assert recorded(db, iserial(when=now, seq=9)) == 1


def inserts(plans: list[str]) -> int:
    return sum("Insert on interface_call" in plan for plan in plans)


def test_a_second_claim_of_a_transaction_takes_the_full_path_with_the_same_result(
        clocked: psycopg.Connection) -> None:
    # The fast path runs only for a transaction's first claim (other writes do not matter);
    # the full path records the call, refuses its duplicate and its bad input the same way.
    clocked.execute("SELECT hivenet.maintain()")  # the day's partition (else: the full path)
    with clocked.transaction():
        clocked.execute("SELECT hivenet.claim('q', 'written first')")
        plans, _ = statements_of(clocked, "SELECT hivenet.claim_interface_serial(%s, %s)",
                                 (iserial(seq=1), UNIFIED))
        assert inserts(plans) == 1  # the fast path's
        plans, _ = statements_of(clocked, "SELECT hivenet.claim_interface_serial(%s, %s)",
                                 (iserial(seq=2), UNIFIED))
        assert inserts(plans) == 2  # the fast path's, recording nothing, then the full path's
    assert recorded(clocked, iserial(seq=1)) == 1
    assert recorded(clocked, iserial(seq=2)) == 1
    for refused, state in ((iserial(seq=1), "HN020"), (iserial(when="20310227115900"), "HN021"),
                           ("C0001A0101T0001203103011159000000000000", "HN001")):
        with clocked.transaction() as tx:
            claim(clocked, iserial(seq=3))
            assert claim_state(clocked, refused) == state
            raise psycopg.Rollback(tx)
    # A rolled-back savepoint takes its claim's lock and mark away: the fast path again.
    with clocked.transaction():
        with clocked.transaction() as savepoint:
            claim(clocked, iserial(seq=4))
            raise psycopg.Rollback(savepoint)
        plans, _ = statements_of(clocked, "SELECT hivenet.claim_interface_serial(%s)",
                                 (iserial(seq=5),))
        assert inserts(plans) == 1
    assert scalar(clocked, "SELECT current_setting('hivenet.interface_claimed', true)") != "on"


# --- Python ------------------------------------------------------------------------------

@pytest.fixture
def clocked_any(any_conn: SyncDB, fake_clock: SetClock) -> SyncDB:
    """The caller's connection of each kind, its clock at NOW for the session."""
    run_sql(any_conn, "SELECT set_config('hivenet.fake_now', %(t)s, false)", t=NOW)
    any_conn.commit()
    return any_conn


def test_python_interface_dedup(clocked_any: SyncDB) -> None:
    conn = clocked_any
    dedup = InterfaceDedup(conn)
    with unified_serial_context(UNIFIED):
        dedup.claim(iserial(seq=1), system_serial="C0001A010120310301000000000001")
    dedup.claim(iserial(seq=2), UNIFIED)
    dedup.claim(iserial(seq=3))
    with pytest.raises(DuplicateInterfaceSerial) as raised:
        dedup.claim(iserial(seq=1))
    assert raised.value.sqlstate == "HN020" and iserial(seq=1) in raised.value.message
    conn.rollback()
    dedup.claim(iserial(seq=1), UNIFIED)
    conn.commit()
    with pytest.raises(SerialOutsideWindow):
        dedup.claim(iserial(when="20300101000000"))
    conn.rollback()
    with pytest.raises(InvalidInput):
        dedup.claim("C0001")
    conn.rollback()
    with unified_serial_context(UNIFIED):
        dedup.claim(iserial(seq=4))
        dedup.claim(iserial(seq=5), system_serial="C0001A010120310301000000000005")
    conn.commit()
    chain = dedup.call_chain(UNIFIED)
    assert [c.interface_serial for c in chain] == [iserial(seq=1), iserial(seq=4),
                                                   iserial(seq=5)]
    assert chain[2].system_serial == "C0001A010120310301000000000005"
    assert (chain[0].source_system, chain[0].target_system) == ("C0001", "T0001")


def test_python_async_interface_dedup(hivenet_app_url: str, fake_clock: SetClock,
                                      async_kind: str) -> None:
    async def main() -> None:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            # a transaction-local clock: set again after each rollback
            clock = "SELECT set_config('hivenet.fake_now', %(t)s, true)"
            await run_sql_async(conn, clock, t=NOW)
            dedup = AsyncInterfaceDedup(conn)
            await dedup.claim(iserial(), UNIFIED)
            with pytest.raises(DuplicateInterfaceSerial):
                await dedup.claim(iserial())
            await conn.rollback()
            await run_sql_async(conn, clock, t=NOW)
            await dedup.claim(iserial(), UNIFIED)
            assert [c.interface_serial for c in await dedup.call_chain(UNIFIED)] == [
                iserial()]
    asyncio.run(main())
