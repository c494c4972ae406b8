"""The business time zone (issue 11 part 1, the database side): free to choose before the
first serial; once serials exist, never moved behind (their dates would go backwards)."""

from __future__ import annotations

import psycopg
import pytest

from tests.helpers import SetClock

SET_ZONE = "UPDATE hivenet.setting SET value = %s WHERE name = 'time_zone'"


def test_the_zone_is_free_before_the_first_serial(db: psycopg.Connection) -> None:
    for zone in ("America/New_York", "Asia/Shanghai", "Etc/GMT+12", "UTC"):
        db.execute(SET_ZONE, (zone,))


def test_once_serials_exist_the_zone_never_moves_behind(db: psycopg.Connection) -> None:
    db.execute(SET_ZONE, ("Asia/Shanghai",))
    db.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    with pytest.raises(psycopg.Error) as refused:
        db.execute(SET_ZONE, ("UTC",))
    message = refused.value.diag.message_primary or ""
    assert refused.value.diag.sqlstate == "HN001", message
    assert "'UTC'" in message and "'Asia/Shanghai'" in message and "08:00:00" in message
    db.execute(SET_ZONE, ("Asia/Tokyo",))  # ahead: dates only move forward
    assert db.execute("SELECT value FROM hivenet.setting WHERE name = 'time_zone'"
                      ).fetchone()[0] == "Asia/Tokyo"


# --- the interface window tolerates callers in every zone, UTC-12 to UTC+14 -----------------

ZONES = ["UTC", "Asia/Shanghai", "Etc/GMT+12", "Pacific/Kiritimati"]  # business zones


def _claim_state(db: psycopg.Connection, when: str) -> str | None:
    serial = "C0001A0101B0001" + when + "0000000001"
    try:
        db.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))
    except psycopg.Error as refused:
        return refused.diag.sqlstate
    return None


@pytest.mark.parametrize("zone", ZONES)
def test_a_caller_at_utc_plus_14_just_after_its_midnight(db: psycopg.Connection,
                                                         fake_clock: SetClock, zone: str) -> None:
    db.execute(SET_ZONE, (zone,))
    fake_clock(db, "2026-11-23 10:00:30+00")  # 00:00:30 on 24 November at UTC+14
    assert _claim_state(db, "20261124000030") is None
    assert _claim_state(db, "20261124000530") is None  # 5 minutes fast: the tolerance
    assert _claim_state(db, "20261124000531") == "HN021"  # ahead of every zone


@pytest.mark.parametrize("zone", ZONES)
def test_a_caller_at_utc_minus_12_on_its_previous_day(db: psycopg.Connection,
                                                      fake_clock: SetClock, zone: str) -> None:
    db.execute(SET_ZONE, (zone,))
    fake_clock(db, "2026-11-23 12:30:00+00")  # 00:30 on 23 November at UTC-12
    assert _claim_state(db, "20261122233000") is None  # an hour ago, the day before
    assert _claim_state(db, "20261122003000") is None  # a day ago: the window's start
    assert _claim_state(db, "20261122002959") == "HN021"  # older in every zone
