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
