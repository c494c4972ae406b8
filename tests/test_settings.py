"""Settings (settings.sql): checked when written, and a committed change reaches every
session, including those whose cached plans already used the old value."""

from __future__ import annotations

import psycopg

from tests.helpers import Connect, SetClock, failure, scalar


def unified(conn: psycopg.Connection) -> str:
    return str(scalar(conn, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"))


def test_setting_change_reaches_sessions_that_already_allocated(
        connect: Connect, fake_clock: SetClock) -> None:
    """Settings are generated constants in allocation's cached plans: a change must reach a
    session that has used them already, when (and only when) the change commits."""
    worker, admin = connect(), connect(autocommit=False)
    fake_clock(worker, "2026-03-01 20:00:00+00")
    assert unified(worker)[10:18] == "20260301"
    admin.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    assert unified(worker)[10:18] == "20260301"  # not committed yet
    admin.commit()
    assert unified(worker)[10:18] == "20260302"
    admin.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
    admin.commit()
    state, _ = failure(worker, "SELECT hivenet.next_unified_serial('C0001','A01','01')")
    assert state == "HN002"


def test_settings_change_needs_read_committed(connect: Connect) -> None:
    conn = connect(autocommit=False)
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    state, message = failure(conn, "UPDATE hivenet.setting SET value = 'UTC' "
                                   "WHERE name = 'time_zone'")
    assert state == "HN001" and "READ COMMITTED" in message
    conn.rollback()
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # new formats: allowed
    conn.execute("""SELECT hivenet.define_format('plain', '[{"seq": 4, "reset": "never"}]')""")
    conn.commit()


def test_bad_settings_are_refused(db: psycopg.Connection) -> None:
    for name, value in [("time_zone", "Mars/Olympus"), ("allow_fake_clock", "maybe")]:
        state, message = failure(db, "UPDATE hivenet.setting SET value = %s WHERE name = %s",
                                 (value, name))
        assert state == "HN001" and value in message


def test_unsafe_intervals_are_refused_naming_the_setting_value_and_bound(
        db: psycopg.Connection) -> None:
    """No negative or zero interval, none beyond 10 years, no retention
    shorter than the lease it must outlive (a retry after the purge would run the money step
    again), nor a lease longer than a retention; a tolerance may be 0."""
    before = db.execute("SELECT name, value FROM hivenet.setting ORDER BY 1").fetchall()
    for name, value, bound in [
            ("interface_window", "-5 hours", "positive"),
            ("step_retention", "-1 day", "positive"),
            ("request_retention", "-1 hour", "positive"),
            ("interface_retention", "0", "positive"),
            ("step_lease", "0 seconds", "positive"),
            ("step_lease", "1000000 years", "at most 10 years"),
            ("interface_future_tolerance", "-1 minute", "from 0 to 10 years"),
            ("request_retention", "1 minute", "at least step_lease 00:05:00"),
            ("step_retention", "4 minutes", "at least step_lease 00:05:00"),
            ("step_lease", "25 hours", "must not exceed request_retention 24:00:00")]:
        state, message = failure(db, "UPDATE hivenet.setting SET value = %s WHERE name = %s",
                                 (value, name))
        assert state == "HN001", (name, value, message)
        assert f"setting {name}: '{value}' " in message and bound in message, message
    assert db.execute("SELECT name, value FROM hivenet.setting ORDER BY 1").fetchall() == before
    db.execute("UPDATE hivenet.setting SET value = '0' WHERE name = 'step_future_tolerance'")
    db.execute("UPDATE hivenet.setting SET value = '1 hour' WHERE name = 'step_lease'")
    db.execute("SELECT hivenet.set_request_retention('pay.notify', '1 hour')")
    state, message = failure(db, "UPDATE hivenet.setting SET value = '2 hours' "
                                 "WHERE name = 'step_lease'")
    assert state == "HN001" and "the retention of namespace 'pay.notify' 01:00:00" in message
    for retention in ("1 second", "-1 day", "0"):
        state, message = failure(db, "SELECT hivenet.set_request_retention('pay.notify', %s)",
                                 (retention,))
        assert state == "HN001" and "namespace 'pay.notify'" in message, message
    state, message = failure(db, "SELECT hivenet.set_request_retention('pay.notify', "
                                 "'1000 years')")
    assert state == "HN001" and "1000 years is not between 0 (excluded) and 10 years" in message


def test_own_instances_honours_force_when_it_gives_up_single_primary_formats(
        db: psycopg.Connection) -> None:
    """own_instances('all', false, true) raised HN001 (its single_primary_formats update was
    checked against the old instance list) instead of parking what it gives up."""
    db.execute("SELECT hivenet.own_instances('01-09', true)")
    db.execute("""SELECT hivenet.next_serial('merchant_trade', '{"merchant": "123456789012"}')""")
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, "SELECT hivenet.own_instances('all', false, true)") == "all"
    assert db.execute("SELECT * FROM hivenet.ownership()").fetchall() == [("all", False, True)]
