"""One definition per serial layout (issue 15 part 1): every check and every field read of a
serial comes from its format's definition (parse.sql: the generated functions), so changing a
layout changes validation and parsing everywhere: parse_serial, the Python layer, the interface
claim, begin_step and the views."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import InvalidInput
from hivenet_db.serial import parse_serial
from tests.helpers import role_in, scalar

Connect = Callable[..., psycopg.Connection]
SetClock = Callable[[psycopg.Connection, str], None]

SCOPE = [{"field": "system", "width": 5, "charset": "alnum"},
         {"field": "module", "width": 3, "charset": "alnum"},
         {"field": "instance", "width": 2, "charset": "digit", "min": 1}]


@pytest.fixture
def tx(connect: Connect) -> Iterator[psycopg.Connection]:
    """A connection in a transaction that the test never commits: built-in formats changed
    here vanish with it."""
    conn = connect(autocommit=False)
    yield conn
    conn.rollback()


def redefine(conn: psycopg.Connection, name: str, segments: list[dict[str, Any]]) -> None:
    """Give format name (built-in or not) the layout segments, compiled as define_format
    compiles it (define_format itself refuses to change a format)."""
    columns = [row[0] for row in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'hivenet.format'::regclass "
        "AND attnum > 0 AND NOT attisdropped AND attname NOT IN ('name', 'builtin') "
        "ORDER BY attnum")]
    conn.execute(f"UPDATE hivenet.format f SET ({', '.join(columns)}) = "
                 f"(SELECT {', '.join('c.' + c for c in columns)} "
                 f"FROM hivenet._compile_format(%s, %s, false, NULL) c) WHERE f.name = %s",
                 (name, Jsonb(segments), name))


def sql_parse(conn: psycopg.Connection, serial: str, format: str) -> Any:
    return scalar(conn, "SELECT hivenet.parse_serial(%s, %s)", (serial, format))


def generated(conn: psycopg.Connection, format: str, serial: str) -> tuple[Any, ...]:
    """What the generated functions read in serial: (valid, shaped, time, scope)."""
    row = conn.execute("SELECT hivenet._serial_valid(%s, %s), hivenet._serial_shaped(%s, %s), "
                       "hivenet._serial_time(%s, %s), hivenet._serial_scope(%s, %s)",
                       (format, serial) * 4).fetchone()
    assert row is not None
    return tuple(row)


def state(conn: psycopg.Connection, sql: str, params: Any = None) -> str | None:
    """None when sql succeeds, else its SQLSTATE (in a savepoint: the transaction goes on)."""
    try:
        with conn.transaction():
            conn.execute(sql, params)
    except psycopg.Error as error:
        return error.sqlstate
    return None


@pytest.mark.parametrize("format, serial", [
    ("unified", "C0001A0101202611240000000001"),
    ("system", "C0001A010120261121000000000013"),
    ("interface", "C0001A0101T0001202611210930150000000042"),
])
def test_the_shape_checks_the_length_exactly(tx: psycopg.Connection, format: str,
                                             serial: str) -> None:
    """The generated shape check is the length, then a regex whose last run is unbounded (a
    bounded run is three times slower): a digit more or less is no shape, and no valid serial
    (fails when the length check is left out)."""
    checks = "SELECT hivenet._serial_valid(%s, %s), hivenet._serial_shaped(%s, %s)"
    assert tx.execute(checks, (format, serial) * 2).fetchone() == (True, True)
    for bad in (serial + "0", serial[:-1], serial + "00000"):
        assert tx.execute(checks, (format, bad) * 2).fetchone() == (False, False), bad


@pytest.mark.parametrize("format, serial", [
    ("unified", "C0001A0101999999990000000001"),   # month 99: shaped, not valid
    ("system", "C0001A010120261131000000000013"),  # 31 November
    ("interface", "C0001A0101T0001202611219961150000000042"),  # hour 99
    ("id_service", "9999999999999999999999999999"),
    ("unified", "C0001A0101"),                      # too short: empty substrings
])
def test_the_time_of_a_serial_that_is_not_valid_is_null_never_an_error(
        tx: psycopg.Connection, format: str, serial: str) -> None:
    """_serial_time is public (the reporting views call it as their reader): a serial that
    only looks right gets NULL, not 22008 / 22P02 (found by test_hostile_input)."""
    assert tx.execute("SELECT hivenet._serial_time(%s, %s)", (format, serial)).fetchone() == (
        None,)


def test_a_custom_format_is_read_by_its_layout_and_a_new_layout_changes_every_reader(
        tx: psycopg.Connection) -> None:
    """Define a format, read a serial of it; after a rollback define the same name with other
    widths, order, a literal and a bound: SQL parse_serial, the generated checks and reads,
    and Python's parse_serial follow the new layout, and refuse the old one."""
    tx.execute("""SELECT hivenet.define_format('probe', '[
        {"field": "shop", "width": 4, "charset": "alnum"}, {"time": "YYYYMMDD"},
        {"seq": 6, "reset": "day"}]')""")
    old = "S001" + "20261123" + "000007"
    assert sql_parse(tx, old, "probe") == {"format": "probe", "shop": "S001",
                                           "date": "2026-11-23", "seq": 7}
    assert generated(tx, "probe", old) == (True, True, dt.datetime(2026, 11, 23), "S001")
    assert parse_serial(old, "probe", db=tx).shop == "S001"
    tx.rollback()

    tx.execute("""SELECT hivenet.define_format('probe', '[
        {"time": "YYMMDD"}, {"seq": 4, "reset": "day"}, {"literal": "X"},
        {"field": "shop", "width": 6, "charset": "digit", "min": 100}]')""")
    new = "261123" + "0007" + "X" + "000123"
    assert sql_parse(tx, new, "probe") == {"format": "probe", "shop": "000123",
                                           "date": "2026-11-23", "seq": 7}
    assert generated(tx, "probe", new) == (True, True, dt.datetime(2026, 11, 23), "000123")
    assert scalar(tx, "SELECT hivenet._serial_field('probe', %s, 'shop')", (new,)) == "000123"
    serial = parse_serial(new, "probe", db=tx)
    assert (serial.shop, serial.date, serial.seq) == ("000123", dt.date(2026, 11, 23), 7)
    # The old layout and a value under the new bound are refused by every reader.
    for bad in (old, new[:-3] + "099"):
        assert scalar(tx, "SELECT hivenet._serial_valid('probe', %s)", (bad,)) is False
        assert state(tx, "SELECT hivenet.parse_serial(%s, 'probe')", (bad,)) == "HN001"
        with pytest.raises(InvalidInput), tx.transaction():
            parse_serial(bad, "probe", db=tx)


def test_the_generated_check_agrees_with_parse_serial_on_a_custom_layout(
        tx: psycopg.Connection) -> None:
    """_serial_valid only vouches for serials parse_serial accepts, and for nearly all of them
    (a two-digit year, a literal, a bounded field, a leap day): over many near-valid serials."""
    tx.execute("""SELECT hivenet.define_format('probe', '[
        {"field": "branch", "width": 3, "charset": "upper_alnum"}, {"literal": "-"},
        {"time": "YYMMDDHHMISS"}, {"field": "desk", "width": 2, "charset": "digit",
         "min": 5, "max": 42}, {"seq": 5, "reset": "day"}]')""")
    tx.execute("""
        CREATE FUNCTION pg_temp.parses(p text) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN PERFORM hivenet.parse_serial(p, 'probe'); RETURN true;
        EXCEPTION WHEN sqlstate 'HN001' THEN RETURN false; END $$""")
    rng = random.Random(15)
    times = ["240229235959", "230229120000", "000229000000", "261131000000", "261231235959",
             "261301000000", "260001000000", "260100000000", "260431000000", "261123240000",
             "261123236000", "261123235960", "991231235959", "700101000000"]
    alphabet = "0123456789" * 3 + "AZaz-_ \uff10"

    def mutant() -> str:
        chars = list("B7Q-" + rng.choice(times) + f"{rng.randrange(0, 60):02d}"
                     + f"{rng.randrange(0, 10**5) if rng.random() > 0.05 else 0:05d}")
        for _ in range(rng.choice([0, 0, 0, 1, 2])):
            chars[rng.randrange(len(chars))] = rng.choice(alphabet)
        return "".join(chars)

    serials = list({mutant() for _ in range(3000)})
    wrong, missed, accepted = tx.execute("""
        SELECT count(*) FILTER (WHERE v AND NOT p), count(*) FILTER (WHERE p AND NOT v),
               count(*) FILTER (WHERE p)
        FROM (SELECT hivenet._serial_valid('probe', s) AS v, pg_temp.parses(s) AS p
              FROM unnest(%s::text[]) AS s) t""", (serials,)).fetchall()[0]
    assert wrong == 0
    assert missed == 0
    assert 300 < accepted < len(serials) - 300


def test_the_interface_claim_and_its_views_follow_a_changed_interface_layout(
        tx: psycopg.Connection, fake_clock: SetClock) -> None:
    """The interface format given another order and widths: claim_interface_serial checks
    the new layout, reads the date for its window and partition from its new place, and the
    views read source and target there; a serial of the old layout is refused (HN001)."""
    fake_clock(tx, "2031-03-01 12:00:00+00")
    redefine(tx, "interface", [{"field": "target", "width": 5, "charset": "alnum"},
                               {"time": "YYYYMMDDHHMISS"}, *SCOPE,
                               {"seq": 8, "reset": "day"}])
    serial = "T0001" + "20310301115900" + "C0001A0101" + "00000007"
    assert state(tx, "SELECT hivenet.claim_interface_serial(%s)", (serial,)) is None
    assert tx.execute("""SELECT source_system, source_module, source_instance, target_system,
                         serial_day, serial_time FROM hivenet.interface_calls""").fetchall() \
        == [("C0001", "A01", "01", "T0001", dt.date(2031, 3, 1),
             dt.datetime(2031, 3, 1, 11, 59))]
    assert state(tx, "SELECT hivenet.claim_interface_serial(%s)", (serial,)) == "HN020"
    old_layout = "C0001A0101T0001" + "20310301115900" + "0000000008"
    assert state(tx, "SELECT hivenet.claim_interface_serial(%s)", (old_layout,)) == "HN001"
    too_old = "T0001" + "20310227115900" + "C0001A0101" + "00000009"
    assert state(tx, "SELECT hivenet.claim_interface_serial(%s)", (too_old,)) == "HN021"
    assert generated(tx, "interface", serial)[3] == "T0001C0001A0101"  # the counter scope


def test_begin_step_and_the_carried_serials_follow_a_changed_system_layout(
        tx: psycopg.Connection, fake_clock: SetClock) -> None:
    """The system format given a literal, another seq width and the date first: begin_step
    takes serials of the new layout, reads their date there for its window, and refuses the
    old layout; the system serial a claim carries is checked against the new shape."""
    fake_clock(tx, "2031-03-01 12:00:00+00")
    redefine(tx, "system", [{"literal": "S"}, {"time": "YYYYMMDD"}, *SCOPE,
                            {"seq": 9, "reset": "day"}])
    serial = "S" + "20310301" + "C0001A0101" + "000000001"
    assert tx.execute("SELECT outcome FROM hivenet.begin_step(%s)", (serial,)).fetchall() \
        == [("started",)]
    assert state(tx, "SELECT hivenet.begin_step(%s)",
                 ("C0001A0101" + "20310301" + "000000000002",)) == "HN001"
    assert state(tx, "SELECT hivenet.begin_step(%s)",
                 ("S" + "20300301" + "C0001A0101" + "000000003",)) == "HN021"
    interface = "C0001A0101T0001" + "20310301115900" + "0000000001"
    assert state(tx, "SELECT hivenet.claim_interface_serial(%s, NULL, %s)",
                 (interface, serial)) is None
    assert state(tx, "SELECT hivenet.claim_interface_serial(%s, NULL, %s)",
                 (interface[:-1] + "2", "C0001A0101" + "20310301" + "000000000002")) == "HN001"


def test_a_system_layout_dated_otherwise_still_starts_steps_on_the_fast_path(
        tx: psycopg.Connection, fake_clock: SetClock) -> None:
    """_step_in_window is generated for any printed time: a system format dated YYMMDD gets
    the exact window of its date, so a new step starts on the fast path (_start_key); one
    dated outside is left to begin_step's full path, and a serial that is not valid is
    outside, never an error."""
    fake_clock(tx, "2031-03-01 12:00:00+00")
    redefine(tx, "system", [*SCOPE, {"time": "YYMMDD"}, {"seq": 12, "reset": "day"}])
    start = ("SELECT hivenet._start_key(true, 'hivenet.steps', %s, NULL, 'replay', NULL, NULL, "
             "false, NULL)")
    serial, old = "C0001A0101" + "310301" + "000000000001", "C0001A0101" + "300301" + "000000000002"
    assert scalar(tx, start, (serial,)) is True
    assert scalar(tx, start, (old,)) is False
    assert state(tx, "SELECT hivenet.begin_step(%s)", (old,)) == "HN021"
    assert scalar(tx, "SELECT hivenet._step_in_window(%s)", (serial,)) is True
    assert scalar(tx, "SELECT hivenet._step_in_window(%s)", ("C0001A0101" + "311301" + "1",)) \
        is False  # not a valid serial (month 13): false, never an error


def test_the_hot_paths_call_no_generated_function(db: psycopg.Connection) -> None:
    """Plan guard: the generated reads are inlined into claim_interface_serial, begin_step
    and its fast path (a function call costs; fails when one stops being inlinable, e.g. SET
    or a FROM clause in a generated body)."""
    today = str(scalar(db, "SELECT to_char(hivenet.now() AT TIME ZONE 'UTC', 'YYYYMMDD')"))
    hhmiss = str(scalar(db, "SELECT to_char(hivenet.now() AT TIME ZONE 'UTC', 'HH24MISS')"))
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'all'")
        db.execute("SELECT hivenet.claim_interface_serial(%s, %s, %s)",
                   (f"C0001A0101T0001{today}{hhmiss}0000000001", f"C0001A0101{today}0000000001",
                    f"C0001A0101{today}000000000001"))
        db.execute("SELECT hivenet.begin_step(%s, NULL, 'replay', %s)",
                   (f"C0001A0101{today}000000000001", f"C0001A0101{today}0000000001"))
        db.execute("SELECT * FROM hivenet.interface_calls")
        called = {row[0] for row in db.execute(
            "SELECT funcname FROM pg_stat_xact_user_functions WHERE schemaname = 'hivenet'")}
    assert {"claim_interface_serial", "begin_step"} <= called
    assert not called & {"_serial_valid", "_serial_shaped", "_serial_time", "_serial_field",
                         "_serial_scope", "parse_serial"}, called


def test_a_reporting_reader_reads_the_interface_calls_through_the_generated_functions(
        db: psycopg.Connection) -> None:
    """The view interface_calls calls the generated reads as its reader: a role granted
    hivenet_reporting reads it (fails with 42501 when privileges.sql does not grant them)."""
    today = str(scalar(db, "SELECT to_char(hivenet.now() AT TIME ZONE 'UTC', 'YYYYMMDD')"))
    db.execute("SELECT hivenet.claim_interface_serial(%s)",
               (f"C0001A0101T0001{today}0000000000000001",))
    with role_in(db, "hivenet_layout_reader", "hivenet_reporting") as reader:
        assert reader.execute("SELECT source_system, target_system, serial_time::date::text "
                              "FROM hivenet.interface_calls").fetchall() \
            == [("C0001", "T0001", f"{today[:4]}-{today[4:6]}-{today[6:]}")]
