"""Layouts of the six built-in formats, custom formats, batches, and parse_serial."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.helpers import Connect, SetClock, scalar

WHEN = "2015-07-10 23:01:10+00"


@pytest.fixture
def at_example_time(db: psycopg.Connection, fake_clock: SetClock) -> psycopg.Connection:
    fake_clock(db, WHEN)
    return db


def test_the_standards_example(at_example_time: psycopg.Connection) -> None:
    db = at_example_time
    serial = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    assert serial == "C0001A0101201507100000000001"
    # The standard's own example, seq 123456789 of 2015-07-10:
    assert scalar(db, "SELECT hivenet.parse_serial('C0001A0101201507100123456789')") == {
        "format": "unified", "system": "C0001", "module": "A01", "instance": "01",
        "date": "2015-07-10", "seq": 123456789}


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT hivenet.next_system_serial('C0001', 'A01', '02')",
     "C0001A0102" "20150710" "000000000001"),
    ("SELECT hivenet.next_interface_serial('C0001', 'A01', '03', 'D0001')",
     "C0001A0103D0001" "20150710230110" "0000000001"),
    ("""SELECT hivenet.next_serial('id_service',
        '{"recon_type":"01","merchant":"123456789012","shard":"05"}')""",
     "123456789012" "20150710" "05" "000001"),
    ("""SELECT hivenet.next_serial('merchant_trade', '{"merchant":"123456789012"}')""",
     "123456789012" "20150710230110" "000001"),
    ("SELECT hivenet.next_serial('per_second', '{}')", "150710230110" "00001"),
])
def test_builtin_layouts(at_example_time: psycopg.Connection, sql: Any, expected: Any) -> None:
    serial = scalar(at_example_time, sql)
    assert serial == expected
    parsed = scalar(at_example_time, "SELECT hivenet.parse_serial(%s, %s)",
                    (serial, sql.split("'")[1] if "next_serial(" in sql else None))
    assert parsed["seq"] == 1


@pytest.mark.parametrize(("serial", "expected"), [
    ("C0001A0102" "20150710" "000000000042",
     {"format": "system", "system": "C0001", "module": "A01", "instance": "02",
      "date": "2015-07-10", "seq": 42}),
    ("C0001A0103D0001" "20150710230110" "0000000007",
     {"format": "interface", "system": "C0001", "module": "A01", "instance": "03",
      "target": "D0001", "datetime": "2015-07-10T23:01:10", "seq": 7}),
])
def test_parse_tells_the_standard_kinds_apart_by_length(db: psycopg.Connection, serial: Any,
                                                        expected: Any) -> None:
    assert scalar(db, "SELECT hivenet.parse_serial(%s)", (serial,)) == expected


def test_batch_is_ordered_and_unique(db: psycopg.Connection) -> None:
    serials = [r[0] for r in db.execute(
        "SELECT hivenet.next_serials('system', %s, 500)",
        (json.dumps({"system": "C0001", "module": "A01", "instance": "01"}),))]
    assert serials == sorted(serials) and len(set(serials)) == 500
    assert [int(s[-12:]) for s in serials] == list(range(1, 501))


def test_scopes_never_share_numbers(db: psycopg.Connection) -> None:
    scopes = [("C0001", "A01", "01"), ("C0001", "A01", "02"), ("C0001", "A02", "01")]
    for system, module, instance in scopes:
        db.execute("SELECT hivenet.prepare_scope('unified', jsonb_build_object('system', "
                   "%s::text, 'module', %s::text, 'instance', %s::text))",
                   (system, module, instance))
    a, b, c = (scalar(db, "SELECT hivenet.next_unified_serial(%s, %s, %s)", scope)
               for scope in scopes)
    assert a[-10:] == b[-10:] == c[-10:] == "0000000001"  # own counters, different prefixes
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE format = 'unified'") == 3


def test_custom_format_round_trip(db: psycopg.Connection, fake_clock: SetClock) -> None:
    db.execute("""SELECT hivenet.define_format('order_no', '[
        {"literal": "ORD"}, {"field": "region", "width": 2, "charset": "upper_alnum"},
        {"time": "YYMMDD"}, {"field": "channel", "width": 1, "charset": "digit", "max": 5},
        {"seq": 7, "reset": "day"}]', false, 'order numbers')""")
    fake_clock(db, WHEN)
    serial = scalar(db, """SELECT hivenet.next_serial('order_no',
                           '{"region": "SH", "channel": "3"}')""")
    assert serial == "ORDSH15071030000001"
    assert scalar(db, "SELECT hivenet.parse_serial(%s, 'order_no')", (serial,)) == {
        "format": "order_no", "region": "SH", "channel": "3", "date": "2015-07-10", "seq": 1}
    with pytest.raises(Exception, match="from 0 to 5"):
        db.execute("""SELECT hivenet.next_serial('order_no', '{"region": "SH", "channel": "7"}')""")


def test_reset_never_counts_on(db: psycopg.Connection, fake_clock: SetClock) -> None:
    db.execute("""SELECT hivenet.define_format('ticket', '[{"literal": "T"},
                  {"seq": 6, "reset": "never"}]')""")
    fake_clock(db, "2020-01-01 00:00:00+00")
    assert scalar(db, "SELECT hivenet.next_serial('ticket', '{}')") == "T000001"
    fake_clock(db, "2024-06-01 00:00:00+00")
    assert scalar(db, "SELECT hivenet.next_serial('ticket', '{}')") == "T000002"


def test_format_defined_in_the_callers_transaction(connect: Connect) -> None:
    """Define and use a format in one transaction; after a rollback, a different definition
    of the same name starts clean (its first counter did not survive in a wrong layout)."""
    conn = connect(autocommit=False)
    conn.execute("""SELECT hivenet.define_format('batch', '[{"literal": "B"},
                    {"seq": 3, "reset": "never"}]')""")
    assert scalar(conn, "SELECT hivenet.next_serial('batch', '{}')") == "B001"
    conn.rollback()
    conn.execute("""SELECT hivenet.define_format('batch', '[{"literal": "B"},
                    {"seq": 5, "reset": "never"}]')""")
    assert scalar(conn, "SELECT hivenet.next_serial('batch', '{}')") == "B00001"
    conn.commit()
    conn.execute("SELECT hivenet.maintain()")  # gives the scope its own counter
    conn.commit()
    assert scalar(conn, "SELECT count(*) FROM hivenet.scope WHERE format = 'batch'") == 1
    assert scalar(conn, "SELECT hivenet.next_serial('batch', '{}')") == "B00002"
