"""The business time zone (issue 11 part 1, the database side): free to choose before the
first serial; once serials exist, never moved behind (their dates would go backwards)."""

from __future__ import annotations

import psycopg
import pytest

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
