"""Times as the commands show them: in the business time zone (view
hivenet.business_time_zone), each with its offset from UTC, the zone named once, as the
database's messages show them (hivenet._shown_time)."""

from __future__ import annotations

from hivenet_db._execute import SyncDB, rows

_READABLE = ("SELECT CASE WHEN to_regclass('hivenet.business_time_zone') IS NULL THEN false "
             "ELSE has_table_privilege('hivenet.business_time_zone', 'SELECT') END")
_SET = "SELECT set_config('TimeZone', time_zone, true) FROM hivenet.business_time_zone"
_NOW = "SELECT to_char(clock_timestamp(), 'YYYY-MM-DD HH24:MI:SSTZH:TZM')"


def in_business_time(db: SyncDB) -> str | None:
    """Show every time of ``db``'s transaction in the business time zone (its TimeZone, set
    for the transaction only), when this role may read it (not ``hivenet_app``); returns the
    zone, else None."""
    if not rows(db, _READABLE, {})[0][0]:
        return None
    return str(rows(db, _SET, {})[0][0])


def business_now(db: SyncDB) -> str:
    """The time now, in ``db``'s business time zone with its offset and the zone named:
    ``2026-11-28 23:31:04+08:00 (Asia/Shanghai)``; UTC where the zone is not readable."""
    zone = in_business_time(db) or "UTC"
    if zone == "UTC":
        rows(db, "SELECT set_config('TimeZone', 'UTC', true)", {})
    return f"{rows(db, _NOW, {})[0][0]} ({zone})"
