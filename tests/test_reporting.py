"""Reporting view hivenet.scope_usage: per-scope period, issued, capacity and headroom (of
scopes with a counter of their own, and of each format's shared fallback counter); view
hivenet.business_time_zone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from hivenet_db.errors import SequenceExhausted, translated
from tests.helpers import role_in, share_fallback

SetClock = Callable[[psycopg.Connection, str], None]
UNIFIED = ("SELECT hivenet.next_serial('unified', '{\"system\": \"C0001\", \"module\": \"A01\", "
           "\"instance\": \"01\"}') FROM generate_series(1, %s)")
UNPREPARED = "(unprepared scopes)"


def prepare(db: psycopg.Connection) -> None:
    """Give the scopes these tests use counters of their own (at the clock's time, since a
    counter never goes back to an earlier period) so that seq starts at 1."""
    db.execute("""SELECT hivenet.define_format('tiny', '[{"field": "desk", "width": 2,
        "charset": "digit"}, {"time": "YYYYMMDD"}, {"seq": 2, "reset": "day"}]')""")
    for format, fields in (("unified", '{"system": "C0001", "module": "A01", "instance": "01"}'),
                           ("tiny", '{"desk": "07"}')):
        db.execute("SELECT hivenet.prepare_scope(%s, %s)", (format, fields))


def usage(conn: psycopg.Connection, format: str = "unified",
          scope: str = "C0001A0101") -> dict[str, Any]:
    """The row of scope of format (a fallback counter: '(unprepared scopes)')."""
    with conn.cursor(row_factory=dict_row) as cur:
        (row,) = cur.execute("SELECT * FROM hivenet.scope_usage WHERE format = %s "
                             "AND scope = %s", (format, scope)).fetchall()
    return row


def test_issued_and_headroom_of_the_current_period(db: psycopg.Connection,
                                                   fake_clock: SetClock) -> None:
    fake_clock(db, "2026-03-01 10:00:00+00")
    prepare(db)
    db.execute(UNIFIED, (5,))
    row = usage(db)
    assert row["scope"] == "C0001A0101"
    assert row["fields"] == {"system": "C0001", "module": "A01", "instance": "01"}
    assert row["reset"] == "day" and row["period_start"] == dt.datetime(2026, 3, 1)
    assert (row["issued"], row["capacity"], row["remaining"]) == (5, 9_999_999_999, 9_999_999_994)
    assert row["last_period_start"] == dt.datetime(2026, 3, 1)

    # A new day: nothing issued yet in its period, full headroom, until the first serial.
    fake_clock(db, "2026-03-02 00:00:01+00")
    row = usage(db)
    assert (row["period_start"], row["issued"], row["remaining"]) == (
        dt.datetime(2026, 3, 2), 0, 9_999_999_999)
    assert row["last_period_start"] == dt.datetime(2026, 3, 1)
    db.execute(UNIFIED, (1,))
    assert usage(db)["issued"] == 1


def test_business_time_zone_decides_the_period(db: psycopg.Connection,
                                               fake_clock: SetClock) -> None:
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    fake_clock(db, "2026-03-01 17:00:00+00")  # already 2026-03-02 01:00 in Shanghai
    prepare(db)
    db.execute(UNIFIED, (2,))
    row = usage(db)
    assert (row["period_start"], row["issued"]) == (dt.datetime(2026, 3, 2), 2)


def test_clock_going_back_keeps_the_latest_period(db: psycopg.Connection,
                                                  fake_clock: SetClock) -> None:
    fake_clock(db, "2026-03-02 09:00:00+00")
    prepare(db)
    db.execute(UNIFIED, (3,))
    fake_clock(db, "2026-03-01 23:59:00+00")
    row = usage(db)
    # Issuing continues in 2026-03-02 (guarantee 3): that is the period whose headroom counts.
    assert (row["period_start"], row["issued"]) == (dt.datetime(2026, 3, 2), 3)


def test_exhausted_scope_has_no_headroom(db: psycopg.Connection) -> None:
    prepare(db)
    db.execute("""SELECT hivenet.next_serials('tiny', '{"desk": "07"}', 99)""")
    row = usage(db, "tiny", "07")
    assert (row["issued"], row["capacity"], row["remaining"]) == (99, 99, 0)
    assert row["used_percent"] == 100
    for _ in range(3):  # failing calls move the counter past capacity for a moment
        with pytest.raises(SequenceExhausted), translated():
            db.execute("""SELECT hivenet.next_serial('tiny', '{"desk": "07"}')""")
    assert usage(db, "tiny", "07")["issued"] == 99


def test_unprepared_scopes_used_in_a_rolled_back_transaction_count_in_the_fallback(
        connect: Callable[..., psycopg.Connection], db: psycopg.Connection) -> None:
    prepare(db)
    share_fallback(db, "unified", "system")
    conn = connect(autocommit=False)
    conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '09') "
                 "FROM generate_series(1, 4)")
    conn.execute("SELECT hivenet.next_system_serial('C0001', 'A01', '09') "
                 "FROM generate_series(1, 3)")
    conn.rollback()
    # Counters are not transactional: the gap counts as issued, in each format's shared
    # fallback counter, which the view marks as shared.
    for format, issued in (("unified", 4), ("system", 3)):
        row = usage(db, format, UNPREPARED)
        assert (row["fields"], row["issued"], row["shared"]) == ({}, issued, True)
    assert usage(db)["shared"] is False


def test_hivenet_reporting_reads_the_view_and_not_the_counters(db: psycopg.Connection) -> None:
    prepare(db)
    db.execute(UNIFIED, (2,))
    with role_in(db, "hivenet_reporter_test", "hivenet_reporting") as reader:
        assert usage(reader)["issued"] == 2
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute('SELECT last_value FROM hivenet."seq_unified_C0001A0101"')


def test_the_documented_reporting_grants_read_every_view(db: psycopg.Connection) -> None:
    """docs/guides/reporting.md's grant (hivenet_reporting) is enough for every view and the call
    chain."""
    prepare(db)
    db.execute(UNIFIED, (2,))
    # Processing steps: one past its own lease, one under the default lease (the setting).
    db.execute("SELECT * FROM hivenet.begin_step('C0001A010120261121000000000001', '{}', "
               "'replay', NULL, '1 microsecond')")
    db.execute("SELECT * FROM hivenet.begin_step('C0001A010120261121000000000002', '{}')")
    with role_in(db, "hivenet_reporting_test", "hivenet_reporting") as reader:
        for view in ("scope_usage", "interface_calls_per_day", "step_states", "stuck_steps"):
            assert reader.execute(f"SELECT * FROM hivenet.{view}").fetchall() or view in (
                "interface_calls_per_day",), view
        reader.execute(
            "SELECT * FROM hivenet.call_chain('C0001A0101202611210000000001')").fetchall()


def test_the_reporting_role_reads_the_business_time_zone(db: psycopg.Connection,
                                                        fake_clock: SetClock) -> None:
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Kolkata' WHERE name = 'time_zone'")
    fake_clock(db, "2026-03-01 17:00:00+00")
    with role_in(db, "hivenet_zone_reader", "hivenet_reporting") as reader, \
            reader.cursor(row_factory=dict_row) as cur:
        assert cur.execute("SELECT * FROM hivenet.business_time_zone").fetchall() == [
            {"time_zone": "Asia/Kolkata", "utc_offset": dt.timedelta(hours=5, minutes=30),
             "local_time": dt.datetime(2026, 3, 1, 22, 30)}]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("SELECT value FROM hivenet.setting")
