"""Bad input always gets HN001 naming the bad value, changes nothing; registry gets HN002."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import failure, scalar

GOOD = {"system": "C0001", "module": "A01", "instance": "01", "target": "D0001"}


@pytest.mark.parametrize(("field", "bad"), [
    ("system", "C001"), ("system", "C00011"), ("system", "C00-1"), ("system", "\uff230001"),
    ("system", "C000é"), ("system", None), ("system", ""), ("system", " C001"),
    ("module", "A1"), ("module", "A_1"), ("module", "\uff2101"),
    ("instance", "00"), ("instance", "100"), ("instance", "1"), ("instance", "0a"),
    ("instance", "\uff11\uff12"), ("instance", None),
    ("target", "D001"), ("target", "D0001\n"),
])
def test_bad_field_is_hn001_naming_the_value(db: psycopg.Connection, field: Any, bad: Any) -> None:
    fields = dict(GOOD, **{field: bad})
    scopes = scalar(db, "SELECT count(*) FROM hivenet.scope")
    for sql, args in [
        ("SELECT hivenet.next_interface_serial(%s, %s, %s, %s)",
         (fields["system"], fields["module"], fields["instance"], fields["target"])),
        ("SELECT hivenet.next_serial('interface', %s)", (json.dumps(fields),)),
    ]:
        state, message = failure(db, sql, args)
        assert state == "HN001"
        assert field in message
        if bad:  # a control character shown escaped (\xNN)
            assert bad.replace("\n", "\\x0a") in message
    assert scalar(db, "SELECT count(*) FROM hivenet.scope") == scopes  # nothing changed


def test_a_value_with_spaces_cannot_stand_for_two_fields(db: psycopg.Connection) -> None:
    # The one-match check joins the values with spaces; a space inside a value must not
    # make a missing value look present.
    state, message = failure(db, "SELECT hivenet.next_unified_serial(%s, %s, %s)",
                             ("C0001", "A01 01", None))
    assert state == "HN001" and "module 'A01 01'" in message


@pytest.mark.parametrize(("sql", "named"), [
    ("SELECT hivenet.next_serial('nope', '{}')", "nope"),
    ("SELECT hivenet.next_serial(NULL, '{}')", "NULL"),
    ("SELECT hivenet.next_serial('unified', '[1]')", "[1]"),
    ("SELECT hivenet.next_serial('unified', NULL)", "NULL"),
    ("""SELECT hivenet.next_serial('unified',
        '{"system":"C0001","module":"A01","instance":"01","colour":"red"}')""", "colour"),
    ("""SELECT hivenet.next_serial('unified', '{"system":"C0001","module":"A01"}')""",
     "instance"),
    ("""SELECT hivenet.next_serial('unified',
        '{"system":"C0001","module":"A01","instance":1}')""", "instance"),
    ("""SELECT hivenet.next_serials('unified',
        '{"system":"C0001","module":"A01","instance":"01"}', 0)""", "0"),
    ("SELECT hivenet.parse_serial('C0001A0101201507100123456789X')",
     "C0001A0101201507100123456789X"),
    ("SELECT hivenet.parse_serial(NULL)", "NULL"),
    ("SELECT hivenet.parse_serial('C0001A0101201502300123456789')", "20150230"),
    ("SELECT hivenet.parse_serial('C0001A0101201507100000000000')", "seq"),
    ("SELECT hivenet.parse_serial('C0001A0101201507100123456789', 'nope')", "nope"),
    ("SELECT hivenet.parse_serial('C0001A0101201507100123456789', 'system')", "28"),
])
def test_bad_call_is_hn001(db: psycopg.Connection, sql: Any, named: Any) -> None:
    state, message = failure(db, sql)
    assert state == "HN001", message
    assert named in message


@pytest.mark.parametrize(("segments", "problem"), [
    ('[{"time": "YYYYMMDD"}]', "seq"),
    ('[{"seq": 3}, {"seq": 3}]', "exactly one seq"),
    ('[{"seq": 18, "reset": "never"}]', "seq width"),
    ('[{"time": "YYYYMMDD"}, {"seq": 14, "reset": "day"}]', "too wide"),
    ('[{"seq": 9, "reset": "second"}, {"time": "YYYYMMDDHHMISS"}]', "too wide"),
    ('[{"time": "YYYYMMDD"}, {"seq": 3, "reset": "hour"}]', "collide"),
    ('[{"seq": 3, "reset": "day"}]', "collide"),
    ('[{"time": "DDMMYYYY"}, {"seq": 3}]', "DDMMYYYY"),
    ('[{"field": "x", "width": 0}, {"seq": 3, "reset": "never"}]', "width"),
    ('[{"field": "x", "width": 2}, {"field": "x", "width": 2}, {"seq": 3, "reset": "never"}]',
     "x"),
    ('[{"field": "x", "width": 40}, {"field": "y", "width": 40}, {"seq": 3, "reset": "never"}]',
     "64"),
    ('[{"literal": "a b"}, {"seq": 3, "reset": "never"}]', "a b"),
    ('[{"field": "x", "width": 2, "charset": "emoji"}, {"seq": 3, "reset": "never"}]',
     "charset"),
    ('{"seq": 3}', "array"),
])
def test_invalid_format_definition_is_hn001(db: psycopg.Connection, segments: Any, problem: Any
        ) -> None:
    state, message = failure(db, "SELECT hivenet.define_format('custom', %s)", (segments,))
    assert state == "HN001" and problem in message, message


def test_redefining_a_format_differently_is_refused(db: psycopg.Connection) -> None:
    seg = '[{"literal": "X"}, {"seq": 3, "reset": "never"}]'
    db.execute("SELECT hivenet.define_format('custom', %s)", (seg,))
    db.execute("SELECT hivenet.define_format('custom', %s)", (seg,))  # same: no-op
    state, message = failure(db, "SELECT hivenet.define_format('custom', %s)",
                               ('[{"literal": "Y"}, {"seq": 3, "reset": "never"}]',))
    assert state == "HN001" and "custom" in message
    state, _ = failure(db, "SELECT hivenet.define_format('unified', %s)", (seg,))
    assert state == "HN001"


def test_registry_enforced_rejects_unknown_system_and_module_with_hn002(db: psycopg.Connection
        ) -> None:
    db.execute("SELECT hivenet.register_system('C0001', 'channel')")
    db.execute("SELECT hivenet.register_module('C0001', 'A01')")
    unified = "SELECT hivenet.next_unified_serial(%s, %s, '01')"
    scalar(db, unified, ("C0002", "A01"))  # not enforced yet
    db.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
    assert len(scalar(db, unified, ("C0001", "A01"))) == 28
    for system, module, named in [("C0002", "A01", "C0002"), ("C0001", "B02", "B02")]:
        state, message = failure(db, unified, (system, module))
        assert state == "HN002" and named in message
    state, message = failure(
        db, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0009')")
    assert state == "HN002" and "D0009" in message
    state, message = failure(db, "SELECT hivenet.register_module('X0001', 'A01')")
    assert state == "HN002" and "X0001" in message
    state, message = failure(db, "SELECT hivenet.register_system('X01')")
    assert state == "HN001" and "X01" in message


def test_fake_clock_is_refused_unless_allowed(db: psycopg.Connection) -> None:
    db.execute("SET hivenet.fake_now = '2030-01-01 00:00:00+00'")
    state, message = failure(db, "SELECT hivenet.now()")
    assert state == "HN001" and "2030-01-01" in message


def test_clock_is_real_by_default(db: psycopg.Connection) -> None:
    assert scalar(db, "SELECT abs(extract(epoch FROM hivenet.now() - clock_timestamp())) < 5")


# Random text (any Unicode, any length) to every entry point: HN001 or a valid serial, never
# another error. Valid-looking values are mixed in so some calls do succeed.
# NUL and lone surrogates are left out: psycopg cannot send them, so they never reach SQL.
_any = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
_text = st.one_of(st.none(), st.text(_any, max_size=8),
                  st.text(alphabet="C0A1", min_size=1, max_size=6),
                  st.sampled_from(["C0001", "A01", "01", "99", "00", "D0001"]))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=_text, b=_text, c=_text, d=_text, fmt=st.one_of(
    st.text(_any, max_size=12), st.sampled_from(
    ["unified", "system", "interface", "id_service", "merchant_trade", "per_second"])))
def test_random_text_gets_hn001_or_a_serial(db: psycopg.Connection, a: Any, b: Any, c: Any, d: Any,
                                            fmt: Any) -> None:
    calls = [
        ("SELECT hivenet.next_unified_serial(%s, %s, %s)", (a, b, c)),
        ("SELECT hivenet.next_system_serial(%s, %s, %s)", (a, b, c)),
        ("SELECT hivenet.next_interface_serial(%s, %s, %s, %s)", (a, b, c, d)),
        ("SELECT hivenet.next_serial(%s, %s)", (fmt, json.dumps(
            {"system": a, "module": b, "instance": c, "merchant": d}))),
        ("SELECT hivenet.parse_serial(%s)", (a,)),
        ("SELECT hivenet.parse_serial(%s, %s)", ((a or "") + (b or ""), fmt)),
    ]
    for sql, args in calls:
        try:
            result = scalar(db, sql, args)
        except psycopg.Error as error:
            # Valid values of a scope nobody prepared: HN002 naming it.
            assert error.diag.sqlstate == "HN001" or (
                error.diag.sqlstate == "HN002"
                and "has no counter for" in (error.diag.message_primary or "")), (sql, args, error)
        else:
            assert result is not None
