"""The allocation fast path (allocate.sql, _fast_unified / _fast_system): next_unified_serial and
next_system_serial are inlined into the caller's statement, call no PL/pgSQL function in the
plain case, and hand everything else to the full path with the same results and errors.

Also the regression guards of issue 13 that are not timed: plan and statistics checks."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.helpers import functions_run, role_in, scalar, share_fallback

UNIFIED = "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"
SCOPE = '{"system": "C0001", "module": "A01", "instance": "01"}'
STRIDE = 10 ** 14
ROLE = "hivenet_fast_test"


def failure(conn: psycopg.Connection, sql: str, params: Any = None) -> tuple[str, str]:
    """The SQLSTATE and message of the error sql raises (it must raise)."""
    with pytest.raises(psycopg.Error) as error, conn.transaction():
        conn.execute(sql, params)
    return str(error.value.sqlstate), str(error.value.diag.message_primary)


def _prepare(db: psycopg.Connection, scope: str = SCOPE) -> None:
    """Prepare the scope of unified and system (their counters start in today's period)."""
    for kind in ("unified", "system"):
        db.execute("SELECT hivenet.prepare_scope(%s, %s)", (kind, scope))


# The counter of scope C0001A0101 of format unified.
COUNTER = 'hivenet."seq_unified_C0001A0101"'


def _today_period(db: psycopg.Connection) -> int:
    return int(scalar(db, "SELECT hivenet._period_index(hivenet.now() AT TIME ZONE "
                          "hivenet._setting_value('time_zone'), 'day')"))


def _plpgsql_calls(db: psycopg.Connection, sql: str, times: int = 3) -> dict[str, int]:
    """Calls of each function of schema hivenet (but IMMUTABLE ones) while sql runs times."""
    return functions_run(db, lambda: [db.execute(sql) for _ in range(times)])


def _today(db: psycopg.Connection) -> str:
    return str(scalar(db, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')"))


@pytest.fixture
def app(db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """The connection acting as a role granted hivenet_app, as the application's login."""
    with role_in(db, ROLE, "hivenet_app") as app:
        yield app


def test_a_prepared_statement_runs_no_plpgsql_function(db: psycopg.Connection) -> None:
    """The guard of issue 13's goal: the plain case is one inlined expression (fails when
    next_unified_serial is PL/pgSQL, SECURITY DEFINER, has SET, or the fast path stops being
    inlinable, e.g. a FROM clause or nextval used twice)."""
    _prepare(db)
    scalar(db, UNIFIED)  # a prepared scope starts empty: its period's first is the full path's
    db.execute("PREPARE alloc(text, text, text) AS "
               "SELECT hivenet.next_unified_serial($1, $2, $3)")
    db.execute("SET plan_cache_mode = force_generic_plan")
    plan = "\n".join(row[0] for row in db.execute(
        "EXPLAIN (VERBOSE) EXECUTE alloc('C0001', 'A01', '01')"))
    assert "next_unified_serial" not in plan and "_fast_unified" not in plan, plan
    assert "hivenet._" not in plan, plan
    # The scope's own sequence by its qualified name.
    assert """nextval(to_regclass((((('hivenet."seq_unified_'""" in plan, plan
    assert "next_serial('unified'" in plan, plan
    calls = _plpgsql_calls(db, "EXECUTE alloc('C0001', 'A01', '01')")
    assert calls == {}, calls
    # A scope prepared since the statement was planned too, once its period has begun.
    _prepare(db, SCOPE.replace('"01"', '"07"'))
    assert _plpgsql_calls(db, "EXECUTE alloc('C0001', 'A01', '07')", times=1).get(
        "_advance") == 1
    assert _plpgsql_calls(db, "EXECUTE alloc('C0001', 'A01', '07')") == {}
    scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '07')")
    for kind in ("unified", "system"):
        calls = _plpgsql_calls(db, f"SELECT hivenet.next_{kind}_serial('C0001', 'A01', '07')")
        assert calls == {}, calls


def _fast_path_body(db: psycopg.Connection, kind: str) -> str:
    return str(scalar(db, f"SELECT pg_get_functiondef('hivenet._fast_{kind}'::regproc)"))


def test_the_fast_paths_are_generated_with_their_constants_written_in(
        db: psycopg.Connection) -> None:
    """The guard of unprepared callers (psql, PgBouncer in transaction pooling, PL/Proxy):
    planning inlines each fast path, so it must read no format or setting through a function
    (folding ~30 reads of _format_constant cost ~5 ms a call); fails when the body reads
    _format_constant or _setting_constant again."""
    _prepare(db)
    for kind, seq_width in (("unified", 10), ("system", 12)):
        body = _fast_path_body(db, kind)
        assert "_format_constant" not in body and "_setting_constant" not in body, body
        assert f"""to_regclass((((('hivenet."seq_{kind}_'""" in body, body  # by name
        assert "[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}" in body      # its field pattern
        assert f"'FM{'0' * seq_width}'" in body and "'UTC'" in body  # seq width, time zone


def test_preparing_scopes_leaves_the_fast_paths_as_they_are(db: psycopg.Connection) -> None:
    """The guard of unprepared callers with many scopes: nothing of a scope is written into
    the inlined fast path (a map of 10,000 scopes there cost 7.7 ms of planning a call); a
    scope's sequence is found by its name, and a parked one is not found."""
    bodies = {kind: _fast_path_body(db, kind) for kind in ("unified", "system")}
    db.execute("SELECT hivenet.prepare_scope('unified', %s)", (json.dumps(
        [{"system": f"M{n:04d}", "module": "A01", "instance": "01"} for n in range(50)]),))
    assert {kind: _fast_path_body(db, kind) for kind in bodies} == bodies
    unified = "SELECT hivenet.next_unified_serial('M0049', 'A01', '01')"
    assert scalar(db, unified).endswith("0000000001")
    assert _plpgsql_calls(db, unified, times=1) == {}
    db.execute("SELECT hivenet.own_instances('02-99', NULL, true)")  # parks the 01 scopes
    assert failure(db, unified)[0] == "HN002"


def test_the_fast_paths_follow_a_change_of_setting(db: psycopg.Connection) -> None:
    """Rewritten in the transaction that changes a setting they are built from: the registry
    check turns the fast path off, the time zone is written in."""
    with db.transaction(force_rollback=True):
        db.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
        assert "nextval" not in _fast_path_body(db, "unified")
    assert "nextval" in _fast_path_body(db, "unified")
    with db.transaction(force_rollback=True):
        db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
        assert "'Asia/Shanghai'" in _fast_path_body(db, "system")
    assert "'UTC'" in _fast_path_body(db, "system")


def test_fast_path_continues_the_scope_counter_in_order(db: psycopg.Connection) -> None:
    share_fallback(db, "unified")
    unified = "SELECT hivenet.next_unified_serial('C0001', 'A01', '09')"
    first = scalar(db, unified)  # unprepared: the shared fallback
    _prepare(db, SCOPE.replace('"01"', '"09"'))
    serials = [scalar(db, unified) for _ in range(5)]
    assert first < serials[0] and serials == sorted(set(serials))
    assert all(s[:10] == "C0001A0109" and s[10:18] == _today(db) and len(s) == 28
               for s in serials)
    assert [int(s[18:]) for s in serials] == list(range(int(serials[0][18:]),
                                                        int(serials[0][18:]) + 5))
    system = scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '09')")
    assert len(system) == 30


def test_a_counter_of_an_older_period_is_reset_by_the_slow_path(db: psycopg.Connection) -> None:
    _prepare(db)
    db.execute("SELECT setval(%s, %s)", (COUNTER, (_today_period(db) - 1) * STRIDE + 500))
    calls = _plpgsql_calls(db, UNIFIED, times=1)
    assert calls.get("_advance") == 1, calls
    assert scalar(db, UNIFIED) == f"C0001A0101{_today(db)}0000000002"
    assert _plpgsql_calls(db, UNIFIED) == {}


def test_a_counter_ahead_of_the_clock_prints_its_own_period(db: psycopg.Connection) -> None:
    """Clock stepped back (or a day borrowed): the value's period is newer than the clock's;
    the fast path must not print today's date with it."""
    _prepare(db)
    scalar(db, UNIFIED)  # the session's first allocation checks its timeline: the full path's
    db.execute("SELECT setval(%s, %s)", (COUNTER, (_today_period(db) + 1) * STRIDE + 7))
    serial = scalar(db, UNIFIED)
    tomorrow = (dt.datetime.strptime(_today(db), "%Y%m%d") + dt.timedelta(days=1))
    # 8 was taken by the fast path and left as a gap (as _issue does before _advance).
    assert serial == f"C0001A0101{tomorrow:%Y%m%d}0000000009"


def test_exhaustion_still_raises_hn010(db: psycopg.Connection) -> None:
    _prepare(db)
    db.execute("SELECT setval(%s, %s)", (COUNTER, _today_period(db) * STRIDE + 9999999998))
    assert scalar(db, UNIFIED).endswith("9999999999")
    for _ in range(2):
        code, message = failure(db, UNIFIED)
        assert code == "HN010" and "9999999999" in message and "'C0001A0101'" in message


@pytest.mark.parametrize("args, code", [
    (("C0001", "A01", "00"), "HN001"), (("C0001", "A01", "1x"), "HN001"),
    (("C0001", "A01", None), "HN001"), (("C0001 A01", "", "01"), "HN001"),
    (("C'001", "A01", "01"), "HN001"),
])
def test_bad_values_get_the_full_paths_errors(db: psycopg.Connection,
                                              args: tuple[str | None, ...], code: str) -> None:
    _prepare(db)
    for sql in ("SELECT hivenet.next_unified_serial(%s, %s, %s)",
                "SELECT hivenet.next_unified_serial(%s::text, %s::text, %s::text)"):
        assert failure(db, sql, args)[0] == code
    # Literals too: folded when planned, so the fast path's casts must not run on them.
    literal = ", ".join("NULL" if a is None else "'" + a.replace("'", "''") + "'"
                        for a in args)
    assert failure(db, f"SELECT hivenet.next_unified_serial({literal})")[0] == code


def test_the_fake_clock_and_the_registry_take_the_full_path(
        db: psycopg.Connection, fake_clock: object) -> None:
    _prepare(db)
    scalar(db, UNIFIED)
    db.execute("SELECT set_config('hivenet.fake_now', '2031-05-06 10:00+00', false)")
    assert scalar(db, UNIFIED)[10:18] == "20310506"
    db.execute("SELECT set_config('hivenet.fake_now', '', false)")
    db.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
    assert failure(db, UNIFIED)[0] == "HN002"


def test_where_no_fake_clock_is_allowed_the_fast_path_does_not_read_one(
        db: psycopg.Connection) -> None:
    """Reading hivenet.fake_now cost ~7% of a call: only a database that allows a fake clock
    pays for it. Elsewhere a session's fake clock moves no serial (the fast path issues by
    the real clock), and every function that reads the clock refuses it (HN001), as does the
    full path of allocation (a period's first serial, and every other case)."""
    _prepare(db)
    db.execute("""SELECT hivenet.prepare_scope('merchant_trade', '{"merchant": "600000000001"}')""")
    for kind in ("unified", "system"):
        assert "fake_now" not in _fast_path_body(db, kind)
    with db.transaction(force_rollback=True):
        db.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        assert all("fake_now" in _fast_path_body(db, kind) for kind in ("unified", "system"))
    system = "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"
    scalar(db, UNIFIED), scalar(db, system)  # today's period begun: the fast path's case
    db.execute("SELECT set_config('hivenet.fake_now', '2031-05-06 10:00+00', false)")
    assert scalar(db, UNIFIED)[10:18] == _today(db)
    assert scalar(db, system)[10:18] == _today(db)
    for sql in ("SELECT hivenet.now()", f"SELECT hivenet.next_serials('unified', '{SCOPE}', 1)",
                "SELECT hivenet.next_serial('merchant_trade', "
                "'{\"merchant\": \"600000000001\"}')"):
        assert failure(db, sql)[0] == "HN001", sql


def test_a_role_with_schema_usage_takes_values_but_never_sets_them(
        db: psycopg.Connection, app: psycopg.Connection) -> None:
    app.execute("RESET ROLE")
    _prepare(app)
    app.execute(f"SET ROLE {ROLE}")
    # Through the fast path: without USAGE on the scope's sequence, nextval would fail here.
    assert scalar(app, UNIFIED)[10:18] == _today(app)
    for sql in (f"SELECT setval('{COUNTER}', 1)", f"ALTER SEQUENCE {COUNTER} RESTART",
                "SELECT nextval('hivenet.cold_unified')"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
            app.execute(sql)


def test_the_interface_claim_uses_its_index(db: psycopg.Connection) -> None:
    """Issue 13's plan guard for claims: the look-up by which claim_interface_serial names the
    earlier record (HN020) is an index scan of the day's partition, with 5000 calls recorded
    and statistics. (Its INSERT ... ON CONFLICT DO NOTHING has no target: every unique index
    of the partition, i.e. the primary key, arbitrates, which EXPLAIN does not show for a
    partitioned table.)"""
    db.execute("SELECT hivenet.maintain()")  # today's partition
    db.execute("""INSERT INTO hivenet.interface_call (interface_serial, serial_day, recorded_at)
                  SELECT 'C0001A0101D0001' || to_char(now(), 'YYYYMMDD') || lpad(g::text, 16, '0'),
                         now()::date, now()
                  FROM generate_series(1, 5000) g""")
    db.execute("ANALYZE hivenet.interface_call")
    # The day as a literal: the plan of today's partition (the function's generic plan prunes
    # the others when it starts; an empty partition may well be read sequentially).
    today = scalar(db, "SELECT now()::date")
    db.execute("SET plan_cache_mode = force_generic_plan")
    db.execute(f"PREPARE earlier(text) AS SELECT c.recorded_at FROM hivenet.interface_call c "
               f"WHERE c.serial_day = '{today}' AND c.interface_serial = $1")
    plan = "\n".join(row[0] for row in db.execute(
        "EXPLAIN EXECUTE earlier('C0001A0101D000120300101000000000001')"))
    assert "Index" in plan and "Seq Scan" not in plan, plan


@pytest.mark.parametrize("format, value", [
    ("unified", "C0001A0101202611230000000001"),
    ("system", "C0001A010120261123000000000001"),
    ("interface", "C0001A0101D0001202611232359590000000007"),
    ("id_service", "1234567890122026112301000007"),
    ("per_second", "26112323595900001"),
    ("merchant_trade", "12345678901220261123235959000007"),
])
def test_issued_serials_are_cut_like_parse_serial(format: str, value: str) -> None:
    """serial.issued (the repositories' parser of what the database just issued) gives the
    same attributes as parse_serial, and pickles the same."""
    import pickle

    from hivenet_db.serial import issued, parse_serial

    parsed, cut = parse_serial(value, format), issued(value, format)
    assert cut == parsed and cut.__dict__ == parsed.__dict__
    assert pickle.loads(pickle.dumps(cut)).__dict__ == parsed.__dict__


def test_null_and_empty_literals_are_planned_without_casting(db: psycopg.Connection) -> None:
    """Found by tests/test_errors.py: with NULL among literal values, the regex check folds
    to NULL, which must not let the planner fold the digit casts of '' (22P02)."""
    _prepare(db)
    assert failure(db, "SELECT hivenet.next_unified_serial(NULL, NULL, '')")[0] == "HN001"
    assert failure(db, "SELECT hivenet.next_system_serial(NULL, 'A01', 'x')")[0] == "HN001"
