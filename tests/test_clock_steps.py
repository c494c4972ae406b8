"""The database clock steps back (NTP correction, failover to a standby whose clock is behind):
no format issues a serial smaller than one already issued in its scope (SPEC guarantee 3,
seed 004; issue 11 part 2), and the database still accepts its own fresh interface serials
(issue 10 part 3). 16 connections allocate at once, before and after the step."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import (
    Connect,
    Issued,
    SetClock,
    assert_never_backwards,
    in_parallel,
    scalar,
    share_fallback,
)

CLIENTS = 16
CALLS = 12  # per client and phase
PER_PHASE = sum(3 if call % 3 == 2 else 1 for call in range(CALLS))  # serials (see _allocate)

# Field values of one counter scope of every built-in format.
FIELDS: dict[str, dict[str, str]] = {
    "unified": {"system": "C0001", "module": "A01", "instance": "01"},
    "system": {"system": "C0001", "module": "A01", "instance": "01"},
    "interface": {"system": "C0001", "module": "A01", "instance": "01", "target": "B0001"},
    "id_service": {"merchant": "123456789012", "shard": "01"},
    "merchant_trade": {"merchant": "123456789012"},
    "per_second": {},
}

# A scope of every built-in format that is not prepared (per_second's one scope always is).
UNPREPARED: dict[str, dict[str, str]] = {
    **{kind: {**FIELDS[kind], "system": "C0009"} for kind in ("unified", "system", "interface")},
    "id_service": {"merchant": "222222222222", "shard": "01"},
    "merchant_trade": {"merchant": "222222222222"},
    "per_second": {},
}

# (clock before, clock after the step back): business time zone UTC.
STEPS: dict[str, tuple[str, str]] = {
    "one second": ("2026-03-01 12:00:01+00", "2026-03-01 12:00:00+00"),
    "one hour": ("2026-03-01 12:00:00+00", "2026-03-01 11:00:00+00"),
    "across midnight": ("2026-03-02 00:00:30+00", "2026-03-01 23:59:50+00"),
    "one day": ("2026-03-02 12:00:00+00", "2026-03-01 12:00:00+00"),
    # Past what the window of a caller's date (UTC+14) makes up for: 2026-03-02 is more than
    # 14 hours ahead of 2026-03-01 00:30 UTC.
    "a day across midnight": ("2026-03-02 00:30:00+00", "2026-03-01 00:30:00+00"),
}


def test_every_builtin_format_is_covered(db: psycopg.Connection) -> None:
    """The text ones here; the numeric time_id, and every clock policy, in test_time_ids.py."""
    names = {row[0] for row in db.execute(
        "SELECT name FROM hivenet.format WHERE builtin AND time_shift IS NULL")}
    assert names == set(FIELDS)


def _allocate(conn: psycopg.Connection, client: int, fmt: str, fields: Jsonb, call: int
              ) -> list[Issued]:
    """One call: a single serial, or (every third call) a batch of three."""
    started = time.monotonic_ns()
    if call % 3 == 2:
        serials = [r[0] for r in conn.execute(
            "SELECT hivenet.next_serials(%s, %s, 3)", (fmt, fields))]
    else:
        serials = [scalar(conn, "SELECT hivenet.next_serial(%s, %s)", (fmt, fields))]
    ended = time.monotonic_ns()
    return [Issued(s, client, started, ended) for s in serials]


def _run(connect: Connect, fake_clock: SetClock, fmt: str, clocks: list[str],
         between: str | None = None, receive: str | None = None,
         fields: dict[str, str] | None = None) -> list[Issued]:
    """CLIENTS connections allocate CALLS calls at each clock of ``clocks`` in turn (all of
    them at one clock at a time); ``between`` runs on one connection between the phases;
    ``receive`` (SQL taking the serial) runs on every serial right after it is issued, on the
    issuing connection."""
    conns = [connect() for _ in range(CLIENTS)]
    control = connect()
    values = Jsonb(FIELDS[fmt] if fields is None else fields)

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> list[Issued]:
        client = conns.index(conn)
        out: list[Issued] = []
        for phase, clock in enumerate(clocks):
            if barrier.wait() == 0 and phase > 0 and between is not None:
                fake_clock(control, clock)  # maintain() on the real clock would move counters
                control.execute(between)
            barrier.wait()
            fake_clock(conn, clock)
            for call in range(CALLS):
                issued = _allocate(conn, client, fmt, values, call)
                if receive is not None:
                    for item in issued:
                        conn.execute(receive, (item.serial,))
                out += issued
        return out

    results = in_parallel(conns, work)
    # Each client's list is in its own issue order; concatenated per client.
    return [item for chunk in results for item in chunk]


@pytest.mark.parametrize("step", ["one second", "one hour", "across midnight"])
@pytest.mark.parametrize("fmt", sorted(FIELDS))
def test_no_format_goes_back_when_the_clock_steps_back(connect: Connect, fake_clock: SetClock,
                                                      fmt: str, step: str) -> None:
    """From the format's shared fallback before the step, from the scope's own sequence
    (promoted by maintain() in between) after it: the clock it hands over must carry the
    instant too."""
    before, after = STEPS[step]
    share_fallback(connect(), fmt, promote=True)
    issued = _run(connect, fake_clock, fmt, [before, after], between="SELECT hivenet.maintain()",
                  fields=UNPREPARED[fmt])
    assert len(issued) == CLIENTS * 2 * PER_PHASE
    assert_never_backwards(issued)


@pytest.mark.parametrize("step", ["one hour", "across midnight"])
@pytest.mark.parametrize("fmt", ["interface", "merchant_trade"])
def test_a_prepared_scope_does_not_go_back_either(connect: Connect, db: psycopg.Connection,
                                                  fake_clock: SetClock, fmt: str, step: str
                                                  ) -> None:
    before, after = STEPS[step]
    fake_clock(db, before)  # on the real clock the counter would start in a later period
    db.execute("SELECT hivenet.prepare_scope(%s, %s)", (fmt, Jsonb(FIELDS[fmt])))
    assert_never_backwards(_run(connect, fake_clock, fmt, [before, after]))


def test_time_of_day_stays_at_the_latest_instant_until_the_clock_catches_up(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
    fake_clock(db, "2026-03-01 12:00:00+00")
    first = scalar(db, interface)
    fake_clock(db, "2026-03-01 11:00:00+00")
    held = [scalar(db, interface) for _ in range(3)]
    assert [s[15:29] for s in held] == ["20260301120000"] * 3
    assert held == sorted(held) and held[0] > first
    fake_clock(db, "2026-03-01 12:00:05+00")  # the clock has caught up: its time again
    assert scalar(db, interface)[15:29] == "20260301120005"


def test_a_step_back_across_midnight_keeps_the_later_day_and_its_time(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    trade = "SELECT hivenet.next_serial('merchant_trade', '{\"merchant\": \"123456789012\"}')"
    fake_clock(db, "2026-03-02 00:10:00+00")
    first = scalar(db, trade)
    fake_clock(db, "2026-03-01 23:50:00+00")
    after = scalar(db, trade)
    assert after[12:26] == "20260302001000" and after > first


def test_a_rolled_back_serial_still_moves_the_clock(db: psycopg.Connection,
                                                    fake_clock: SetClock) -> None:
    """The clock sequence is not transactional, like the counter: a later serial is never
    smaller than one handed out by a transaction that rolled back either."""
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
    fake_clock(db, "2026-03-01 12:00:00+00")
    with db.transaction() as tx:
        lost = scalar(db, interface)
        raise psycopg.Rollback(tx)
    fake_clock(db, "2026-03-01 11:00:00+00")
    assert scalar(db, interface) > lost


@pytest.mark.parametrize("step", ["one hour", "one day", "across midnight"])
def test_the_database_accepts_its_own_serials_after_a_step_back(connect: Connect,
                                                               fake_clock: SetClock,
                                                               step: str) -> None:
    """Issue 10 part 3: each fresh interface serial is claimed at once by its issuer, before
    and after the step, 16 clients at once; none is refused (HN021) and none is a duplicate."""
    before, after = STEPS[step]
    issued = _run(connect, fake_clock, "interface", [before, after],
                  between="SELECT hivenet.maintain()",
                  receive="SELECT hivenet.claim_interface_serial(%s)")
    assert_never_backwards(issued)


@pytest.mark.parametrize("step", ["one hour", "across midnight", "a day across midnight"])
def test_begin_step_accepts_the_databases_own_serials_after_a_step_back(
        connect: Connect, fake_clock: SetClock, step: str) -> None:
    """Issue 29 point 2: each fresh system serial is begun as a step at once by its issuer,
    before and after the step back, 16 clients at once: none is refused (HN021), none is
    begun twice (a duplicate raises HN030)."""
    before, after = STEPS[step]
    issued = _run(connect, fake_clock, "system", [before, after],
                  between="SELECT hivenet.maintain()",
                  receive="SELECT * FROM hivenet.begin_step(%s)")
    assert_never_backwards(issued)


def test_a_future_system_serial_of_another_scope_is_still_refused(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Only the days this database issued in the serial's own scope widen begin_step's window."""
    before, after = STEPS["a day across midnight"]
    fake_clock(db, before)
    own = scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    fake_clock(db, after)
    other = "C0002" + own[5:]
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT * FROM hivenet.begin_step(%s)", (other,))
    assert refused.value.diag.sqlstate == "HN021"
    assert db.execute("SELECT outcome FROM hivenet.begin_step(%s)", (own,)).fetchone() == (
        "started",)


def test_own_serials_are_accepted_in_any_business_zone(db: psycopg.Connection,
                                                        fake_clock: SetClock) -> None:
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
    fake_clock(db, "2026-03-02 20:00:00+00")  # 04:00 on March 3rd in Shanghai
    db.execute("SELECT hivenet.claim_interface_serial(%s)", (scalar(db, interface),))
    fake_clock(db, "2026-03-01 20:00:00+00")  # a day back
    serial = scalar(db, interface)
    assert serial[15:29] == "20260303040000"
    db.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))


def test_a_future_serial_of_another_scope_is_still_refused(db: psycopg.Connection,
                                                           fake_clock: SetClock) -> None:
    """Only what this database issued in the serial's own scope widens the window."""
    fake_clock(db, "2026-03-02 12:00:00+00")
    db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')")
    fake_clock(db, "2026-03-01 12:00:00+00")
    own = scalar(db, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')")
    other = "C0002" + own[5:]
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT hivenet.claim_interface_serial(%s)", (other,))
    assert refused.value.diag.sqlstate == "HN021"
    assert other in (refused.value.diag.message_primary or "")
    db.execute("SELECT hivenet.claim_interface_serial(%s)", (own,))


def test_a_business_zone_leaving_summer_time_is_a_step_back_too(db: psycopg.Connection,
                                                                 fake_clock: SetClock) -> None:
    """At the end of summer time local clocks go from 01:59 back to 01:00: the same guard."""
    db.execute("UPDATE hivenet.setting SET value = 'America/New_York' WHERE name = 'time_zone'")
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
    fake_clock(db, "2026-11-01 05:30:00+00")  # 01:30 EDT
    summer = scalar(db, interface)
    fake_clock(db, "2026-11-01 06:10:00+00")  # 01:10 EST, forty minutes later
    winter = scalar(db, interface)
    assert summer[15:29] == winter[15:29] == "20261101013000" and winter > summer


@pytest.mark.parametrize("step", ["one hour", "across midnight"])
def test_a_custom_format_printing_minutes_does_not_go_back(connect: Connect,
                                                           db: psycopg.Connection,
                                                           fake_clock: SetClock, step: str
                                                           ) -> None:
    """A format defined by the user gets its clock when defined (minute, counted per day),
    its fallback's too (handed over by maintain() in between)."""
    db.execute("""SELECT hivenet.define_format('order_minute', '[{"literal": "OR"},
        {"field": "shop", "width": 3, "charset": "digit"}, {"time": "YYYYMMDDHHMI"},
        {"seq": 4, "reset": "day"}]')""")
    assert scalar(db, "SELECT clock_unit FROM hivenet.format WHERE name = 'order_minute'"
                  ) == "minute"
    share_fallback(db, "order_minute", promote=True)
    before, after = STEPS[step]
    assert_never_backwards(_run(connect, fake_clock, "order_minute", [before, after],
                                 between="SELECT hivenet.maintain()", fields={"shop": "042"}))
