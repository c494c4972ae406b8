"""Every HN code the SQL raises, triggered for real: its message names the bad value and the
format, scope, period and capacity involved; long values are echoed as a short prefix plus
their length."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from hivenet_db.schema import full_schema_sql
from tests.helpers import SetClock, scalar, share_fallback

NOW = "2015-07-10 12:00:00+00"
SYSTEM = "C0001A0101" "20150710" "000000000042"


def _raised(conn: psycopg.Connection, sql: str, params: Any = None) -> tuple[str, str]:
    with pytest.raises(psycopg.Error) as error:
        conn.execute(sql, params)
    return error.value.diag.sqlstate or "", error.value.diag.message_primary or ""


@pytest.fixture
def clocked(db: psycopg.Connection, fake_clock: SetClock) -> psycopg.Connection:
    fake_clock(db, NOW)
    return db


def _tiny(db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.define_format('tiny', '[
        {"field": "k", "width": 2, "charset": "digit"}, {"time": "YYYYMMDD"},
        {"seq": 1, "reset": "day"}]')""")


def _exhaust(db: psycopg.Connection) -> tuple[str, str]:
    for _ in range(9):
        db.execute("""SELECT hivenet.next_serial('tiny', '{"k": "42"}')""")
    return _raised(db, """SELECT hivenet.next_serial('tiny', '{"k": "42"}')""")


def test_hn010_names_format_scope_period_and_capacity_of_a_scope_of_its_own(
        clocked: psycopg.Connection) -> None:
    _tiny(clocked)
    clocked.execute("""SELECT hivenet.prepare_scope('tiny', '{"k": "42"}')""")
    code, message = _exhaust(clocked)
    assert code == "HN010"
    for part in ("tiny", "all 9 serials", "scope '42'", "day starting 2015-07-10 00:00:00"):
        assert part in message, message
    assert "NULL" not in message


def test_hn010_of_an_unprepared_scope_names_the_shared_fallback(clocked: psycopg.Connection
                                                               ) -> None:
    _tiny(clocked)
    share_fallback(clocked, "tiny")
    code, message = _exhaust(clocked)
    assert code == "HN010"
    for part in ("tiny", "all 9 serials", "'42'", "shared fallback counter", "2015-07-10"):
        assert part in message, message


def test_hn002_names_the_unprepared_scope_and_how_to_prepare_it(clocked: psycopg.Connection
                                                                ) -> None:
    _tiny(clocked)
    code, message = _raised(clocked, """SELECT hivenet.next_serial('tiny', '{"k": "42"}')""")
    assert code == "HN002"
    for part in ("format tiny has no counter for k '42'", "`hivenet-db prepare tiny k=42`",
                 """SELECT hivenet.prepare_scope('tiny', '{"k": "42"}')"""):
        assert part in message, message


def test_hn010_of_a_counter_that_never_resets(clocked: psycopg.Connection) -> None:
    clocked.execute("""SELECT hivenet.define_format('once', '[{"literal": "A"},
        {"seq": 1, "reset": "never"}]')""")
    clocked.execute("SELECT hivenet.prepare_scope('once', '{}')")
    for _ in range(9):
        clocked.execute("SELECT hivenet.next_serial('once', '{}')")
    code, message = _raised(clocked, "SELECT hivenet.next_serial('once', '{}')")
    assert code == "HN010" and "once" in message and "never resets" in message, message


@pytest.mark.parametrize(("policy", "says"), [
    ("'refuse'", "its clock policy is 'refuse'"),
    ("'wait', interval '1 second'", "its clock policy is 'wait', at most 00:00:01 (its max_wait)"),
])
def test_hn011_says_how_far_behind_the_clock_is_and_which_policy_refused(
        clocked: psycopg.Connection, fake_clock: SetClock, policy: str, says: str) -> None:
    clocked.execute(f"SELECT hivenet.set_clock_policy('time_id', {policy})")
    clocked.execute("SELECT hivenet.next_time_id()")
    fake_clock(clocked, "2015-07-10 11:00:00+00")
    code, message = _raised(clocked, "SELECT hivenet.next_time_id()")
    assert code == "HN011"
    for part in ("format time_id", "the clock (2015-07-10 11:00:00) is 01:00:00 behind",
                 "(2015-07-10 12:00:00)", says, "hivenet.set_clock_policy"):
        assert part in message, message


def test_hn002_names_the_unregistered_value(clocked: psycopg.Connection) -> None:
    clocked.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
    code, message = _raised(clocked,
                            "SELECT hivenet.next_unified_serial('C0009', 'A01', '01')")
    assert code == "HN002" and "C0009" in message


def test_hn020_and_hn021_name_the_serial_and_the_window(clocked: psycopg.Connection) -> None:
    serial = "C0001A0101D0001" "20150710115900" "0000000001"
    clocked.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))
    code, message = _raised(clocked, "SELECT hivenet.claim_interface_serial(%s)", (serial,))
    assert code == "HN020" and serial in message
    old = "C0001A0101D0001" "20150701115900" "0000000001"
    code, message = _raised(clocked, "SELECT hivenet.claim_interface_serial(%s)", (old,))
    assert code == "HN021" and old in message and "2015-07-09" in message, message


def test_step_codes_name_the_step_and_the_attempt(clocked: psycopg.Connection) -> None:
    begin = "SELECT attempt FROM hivenet.begin_step(%s, %s, %s)"
    attempt = scalar(clocked, begin, (SYSTEM, '{"a": 1}', "reject"))
    code, message = _raised(clocked, begin, (SYSTEM, '{"a": 1}', "reject"))
    assert code == "HN030" and SYSTEM in message and f"attempt {attempt}" in message
    code, message = _raised(clocked, "SELECT hivenet.finish_step(%s, %s, true, '{}')",
                            (SYSTEM, attempt + 5))
    assert code == "HN033" and SYSTEM in message and str(attempt + 5) in message
    clocked.execute("SELECT hivenet.finish_step(%s, %s, true, '{}')", (SYSTEM, attempt))
    code, message = _raised(clocked, begin, (SYSTEM, '{"a": 2}', "reject"))
    assert code == "HN032" and SYSTEM in message
    code, message = _raised(clocked, begin, (SYSTEM, '{"a": 1}', "reject"))
    assert code == "HN031" and SYSTEM in message and f"attempt {attempt}" in message


def test_hn040_names_the_claim(clocked: psycopg.Connection) -> None:
    clocked.execute("SELECT hivenet.claim('inventory', 'PO-7')")
    code, message = _raised(clocked, "SELECT hivenet.claim('inventory', 'PO-7')")
    assert code == "HN040" and message == \
        "claim 'inventory' / 'PO-7' is already taken (for good: its namespace has no expiry)"


def test_times_in_messages_are_in_the_business_time_zone_named(
        clocked: psycopg.Connection) -> None:
    """Whatever the session's TimeZone: the business zone's local time, its offset, its name
    (HN030's start and lease, HN040's expiry: the claim that holds the key)."""
    clocked.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    clocked.execute("SET TimeZone = 'America/New_York'")
    clocked.execute("SELECT hivenet.set_claim_expiry('orders', '1 hour')")
    clocked.execute("SELECT hivenet.claim('orders', 'PO-8')")
    clocked.execute("SELECT hivenet.set_claim_expiry('orders', '3 hours')")
    code, message = _raised(clocked, "SELECT hivenet.claim('orders', 'PO-8')")
    assert code == "HN040" and message == \
        "claim 'orders' / 'PO-8' is already taken (until 2015-07-10 21:00:00+08:00 (Asia/Shanghai))"
    system = "C0001A0101" "20150710" "000000000043"
    clocked.execute("SELECT * FROM hivenet.begin_step(%s, NULL, 'replay', NULL, '2 minutes')",
                    (system,))
    code, message = _raised(clocked, "SELECT * FROM hivenet.begin_step(%s)", (system,))
    assert code == "HN030" and "(attempt 1 started at 2015-07-10 20:00:00+08:00 " \
        "(Asia/Shanghai), lease until 2015-07-10 20:02:00+08:00 (Asia/Shanghai))" in message, \
        message


HUGE = "Q" * 100_000


@pytest.mark.parametrize(("sql", "params"), [
    ("SELECT hivenet.next_serial('unified', %s)",
     (json.dumps({"system": HUGE, "module": "A01", "instance": "01"}),)),
    ("SELECT hivenet.next_serial('unified', %s)",
     (json.dumps({"system": "C0001", "module": "A01", "instance": "01", HUGE: 1}),)),
    ("SELECT hivenet.next_serial(%s, '{}')", (HUGE,)),
    ("SELECT hivenet.next_serials(%s, '{}', 0)", (HUGE,)),
    ("SELECT hivenet.next_serial('unified', %s)", (json.dumps([HUGE]),)),
    ("SELECT hivenet.parse_serial(%s)", (HUGE,)),
    ("SELECT hivenet.parse_serial('x', %s)", (HUGE,)),
    ("SELECT hivenet.define_format(%s, '[{\"seq\": 3, \"reset\": \"never\"}]')", (HUGE,)),
    ("SELECT hivenet.define_format('custom', %s)", (json.dumps([HUGE]),)),
    ("SELECT hivenet.define_format('custom', %s)", (json.dumps([{"literal": "A", HUGE: 1}]),)),
    ("SELECT hivenet.prepare_scope(%s, '{}')", (HUGE,)),
    ("SELECT hivenet.register_system(%s)", (HUGE,)),
    ("SELECT hivenet.register_module('C0001', %s)", (HUGE,)),
    ("SELECT hivenet.claim('inventory', %s)", (HUGE,)),
    ("SELECT hivenet.claim(%s, 'k')", (HUGE,)),
    ("SELECT hivenet.claim_interface_serial(%s)", (HUGE,)),
    ("SELECT hivenet.claim_interface_serial(%s, %s)",
     ("C0001A0101D0001" "20150710115900" "0000000001", HUGE)),
    ("SELECT * FROM hivenet.begin_step(%s, '{}')", (HUGE,)),
    ("SELECT * FROM hivenet.begin_step(%s, '{}', %s)", (SYSTEM, HUGE)),
    ("UPDATE hivenet.setting SET value = %s WHERE name = 'interface_window'", (HUGE,)),
])
def test_long_values_are_echoed_as_a_prefix_and_their_length(
        clocked: psycopg.Connection, sql: str, params: Any) -> None:
    code, message = _raised(clocked, sql, params)
    assert code == "HN001", message
    assert len(message) < 400, message[:500]
    assert "QQQQ" in message and re.search(r"\(1000\d\d characters\)", message), message


def test_a_long_fake_clock_is_echoed_short(db: psycopg.Connection) -> None:
    db.execute("SELECT set_config('hivenet.fake_now', %s, false)", (HUGE,))
    code, message = _raised(db, "SELECT hivenet.now()")
    assert code == "HN001" and len(message) < 400 and "100000 characters" in message


def test_every_code_the_sql_raises_is_triggered_here() -> None:
    """A new HN code needs its trigger in this file (or in test_errors.py for HN001)."""
    raised = set(re.findall(r"ERRCODE\s*=\s*'(HN\d{3})'", full_schema_sql()))
    with open(__file__, encoding="utf-8") as source:
        tested = set(re.findall(r'code == "(HN\d{3})"', source.read()))
    assert raised - tested == set()
