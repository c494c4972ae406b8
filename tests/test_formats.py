"""Layouts of the six built-in formats, custom formats, batches, and parse_serial."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import Connect, SetClock, failure, scalar, wait_until_blocked

WHEN = "2015-07-10 23:01:10+00"


def unified(conn: psycopg.Connection) -> str:
    return str(scalar(conn, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"))


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
        '{"merchant":"123456789012","shard":"05"}')""",
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
    """Every scope has a counter of its own (tests/test_counting.py for every format)."""
    scopes = [("C0001", "A01", "01"), ("C0001", "A01", "02"), ("C0001", "A02", "01")]
    for system, module, instance in scopes:
        db.execute("SELECT hivenet.prepare_scope('interface', jsonb_build_object('system', "
                   "%s::text, 'module', %s::text, 'instance', %s::text, 'target', 'B0001'))",
                   (system, module, instance))
    a, b, c = (scalar(db, "SELECT hivenet.next_interface_serial(%s, %s, %s, 'B0001')", scope)
               for scope in scopes)
    assert a[-10:] == b[-10:] == c[-10:] == "0000000001"  # own counters, different prefixes
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE format = 'interface' "
                      "AND scope IN ('C0001A0101', 'C0001A0102', 'C0001A0201')") == 3


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


def test_fields_by_name_and_by_position_share_the_counter(db: psycopg.Connection) -> None:
    a = unified(db)
    b = scalar(db, "SELECT hivenet.next_serial('unified', %s)",
               (Jsonb({"instance": "01", "module": "A01", "system": "C0001"}),))
    assert isinstance(b, str) and b[:10] == a[:10] and int(b[-10:]) == int(a[-10:]) + 1


def test_custom_format_with_literal_and_seq_in_the_middle(db: psycopg.Connection,
                                                          fake_clock: SetClock) -> None:
    db.execute("""SELECT hivenet.define_format('order_no', '[
        {"literal": "OR-"}, {"field": "shop", "width": 4, "charset": "digit", "max": 5000},
        {"time": "YYMMDD"}, {"seq": 3, "reset": "day"}, {"literal": "_x"},
        {"field": "kind", "width": 1, "charset": "upper_alnum"}]', false, 'order numbers')""")
    fake_clock(db, "2026-05-02 10:00:00+00")
    fields = Jsonb({"shop": "0042", "kind": "Q"})
    db.execute("SELECT hivenet.prepare_scope('order_no', %s)", (fields,))
    assert scalar(db, "SELECT hivenet.next_serial('order_no', %s)", (fields,)) == \
        "OR-0042260502001_xQ"
    state, message = failure(db, "SELECT hivenet.next_serial('order_no', %s)",
                             (Jsonb({"shop": "5001", "kind": "Q"}),))
    assert state == "HN001" and "field shop '5001' must be from 0000 to 5000" in message
    parsed = scalar(db, "SELECT hivenet.parse_serial('OR-0042260502001_xQ', 'order_no')")
    assert parsed == {"format": "order_no", "shop": "0042", "kind": "Q", "date": "2026-05-02",
                      "seq": 1}


def test_format_defined_elsewhere_is_usable_at_once(connect: Connect) -> None:
    a, b = connect(), connect()
    unified(a)
    b.execute("""SELECT hivenet.define_format('plain', '[{"seq": 4, "reset": "never"}]')""")
    assert scalar(a, "SELECT hivenet.next_serial('plain', '{}')") == "0001"


def test_format_missing_from_the_constants_is_read_from_its_table(db: psycopg.Connection) -> None:
    # As after a define_format whose rewrite of the constants lost to a concurrent one.
    db.execute("""SELECT hivenet.define_format('plain', '[{"seq": 4, "reset": "never"}]')""")
    db.execute("ALTER TABLE hivenet.format DISABLE TRIGGER format_recompile")
    db.execute("""SELECT hivenet.define_format('plain2', '[{"seq": 3, "reset": "never"}]')""")
    assert scalar(db, "SELECT hivenet._format_constant('plain2')") is None
    assert scalar(db, "SELECT hivenet.next_serial('plain2', '{}')") == "001"


def test_concurrent_define_format_waits_instead_of_failing(connect: Connect) -> None:
    """Two transactions defining formats: the second waits for the first (the rewrite of the
    constants is serialised), then both formats work."""
    first, second, watcher = connect(autocommit=False), connect(autocommit=False), connect()
    first.execute("""SELECT hivenet.define_format('one', '[{"seq": 4, "reset": "never"}]')""")
    pid = second.info.backend_pid
    done = threading.Event()

    def define_second() -> None:
        second.execute("""SELECT hivenet.define_format('two', '[{"seq": 5, "reset": "never"}]')""")
        second.commit()
        done.set()

    t = threading.Thread(target=define_second)
    t.start()
    wait_until_blocked(watcher, pid)
    assert not done.is_set()
    first.commit()
    t.join(10)
    assert done.is_set()
    assert scalar(watcher, "SELECT hivenet.next_serial('one', '{}')") == "0001"
    assert scalar(watcher, "SELECT hivenet.next_serial('two', '{}')") == "00001"
