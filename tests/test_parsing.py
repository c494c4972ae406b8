"""Parsing without a database: hivenet_db.parse_serial in Python agrees with SQL
hivenet.parse_serial (results and HN001 messages), from one definition of the formats."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from hivenet_db import InvalidInput, Serial, parse_serial
from hivenet_db.parsing import builtin_formats, parse_builtin, shown
from tests.helpers import scalar

_BUILTIN_ROWS = """
    SELECT jsonb_object_agg(name, jsonb_build_object(
        'length', length, 'seq_width', seq_width, 'capacity', capacity, 'reset', reset,
        'segments', segments, 'description', description)
        || jsonb_strip_nulls(jsonb_build_object('time_shift', time_shift)))::text
    FROM hivenet.format WHERE builtin"""


def test_a_fresh_install_holds_the_builtin_formats_of_the_data_file(
        db: psycopg.Connection) -> None:
    """hivenet_db/sql/builtin_formats.json is the built-in formats' one copy: the schema
    compiles them again from their definitions in it (formats.sql), and the Python parser
    reads it as it is, so it must say what the compiler says."""
    installed = json.loads(scalar(db, _BUILTIN_ROWS), parse_float=Decimal)
    assert builtin_formats() == installed
    assert sorted(builtin_formats()) == ["id_service", "interface", "merchant_trade",
                                         "per_second", "system", "time_id", "unified"]


def test_parse_serial_needs_no_database() -> None:
    serial = parse_serial("C0001A0101201507100123456789")
    assert isinstance(serial, Serial)
    assert (serial.format, serial.system, serial.module, serial.instance, serial.seq) == (
        "unified", "C0001", "A01", "01", 123456789)
    assert str(serial.date) == "2015-07-10"
    interface = parse_serial("C0001A0103D000120150710230110" "0000000001")
    assert (interface.target, str(interface.datetime)) == ("D0001", "2015-07-10 23:01:10")
    assert parse_serial("15071023011000001", "per_second").seq == 1
    with pytest.raises(InvalidInput, match="20150230"):
        parse_serial("C0001A0101201502300123456789")
    with pytest.raises(InvalidInput, match="db=connection"):
        parse_serial("OR-0042", "order_no")


def test_custom_formats_are_parsed_by_the_database_when_asked(hivenet_engine: Engine) -> None:
    with hivenet_engine.begin() as conn:
        conn.execute(text("""SELECT hivenet.define_format('order_no', '[{"literal": "OR-"},
            {"field": "shop", "width": 4, "charset": "digit"}, {"time": "YYMMDD"},
            {"seq": 3, "reset": "day"}]')"""))
        parsed = parse_serial("OR-0042260502001", "order_no", db=conn)
        assert (parsed.shop, parsed.seq, str(parsed.date)) == ("0042", 1, "2026-05-02")
        # The older form, connection first, still asks the database.
        assert parse_serial("OR-0042260502001", "order_no", db=conn) == parsed


def test_messages_cut_long_values(db: psycopg.Connection) -> None:
    huge = "C" * 1_000_000
    with pytest.raises(InvalidInput) as python_error:
        parse_serial(huge)
    with pytest.raises(psycopg.Error) as sql_error:
        db.execute("SELECT hivenet.parse_serial(%s)", (huge,))
    assert python_error.value.message == sql_error.value.diag.message_primary
    assert len(python_error.value.message) < 200
    assert "'CCCCCCCC" in python_error.value.message
    assert "(1000000 characters)" in python_error.value.message
    assert shown("it's") == "'it''s'" and shown("a\\b") == "E'a\\\\b'" and shown(None) == "NULL"


_CHARSETS = {"digit": "0123456789", "alnum": "0123456789ABCXYZabcxyz",
             "upper_alnum": "0123456789ABCXYZ", "alpha": "ABCXYZabcxyz"}
_NOISE = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])


@st.composite
def _serials(draw: st.DrawFn) -> tuple[str, str | None]:
    """A serial of a built-in format, valid or broken in one place, or random text."""
    name = draw(st.sampled_from(sorted(builtin_formats())))
    definition = builtin_formats()[name]
    parts = []
    for segment in definition["segments"]:
        if "field" in segment:
            parts.append(draw(st.text(st.sampled_from(_CHARSETS[segment["charset"]]),
                                      min_size=segment["width"], max_size=segment["width"])))
        elif "literal" in segment:
            parts.append(segment["literal"])
        elif "time" in segment:
            digits = st.text(st.sampled_from("0123456789"), min_size=segment["width"],
                             max_size=segment["width"])
            # Mostly real times (1970-2069 suits YY patterns too), sometimes any digits.
            when = draw(st.datetimes(min_value=dt.datetime(1970, 1, 1),
                                     max_value=dt.datetime(2069, 12, 31)))
            real = when.strftime(segment["to_char"].replace("YYYY", "%Y").replace("YY", "%y")
                                 .replace("MM", "%m").replace("DD", "%d").replace("HH24", "%H")
                                 .replace("MI", "%M").replace("SS", "%S"))
            parts.append(draw(st.sampled_from([real, real, real, draw(digits)])))
        else:
            parts.append(draw(st.text(st.sampled_from("0000123456789"),
                                      min_size=definition["seq_width"],
                                      max_size=definition["seq_width"])))
    serial = "".join(parts)
    how = draw(st.sampled_from(["valid"] * 5 + ["replace"] * 3 + ["insert", "drop", "noise",
                                                                    "long"]))
    at = draw(st.integers(0, len(serial) - 1))
    char = draw(st.one_of(_NOISE, st.sampled_from("0aZ9-'\\ ")))
    if how == "replace":
        serial = serial[:at] + char + serial[at + 1:]
    elif how == "insert":
        serial = serial[:at] + char + serial[at:]
    elif how == "drop":
        serial = serial[:at] + serial[at + 1:]
    elif how == "noise":
        serial = draw(st.text(_NOISE, max_size=45))
    elif how == "long":
        serial = serial * draw(st.integers(2, 5))
    named = draw(st.sampled_from([name, name, name, None, "unified"]))
    return serial, named


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_serials())
def test_python_and_sql_parse_alike(db: psycopg.Connection, case: tuple[str, str | None]) -> None:
    serial, format_name = case
    try:
        expected = scalar(db, "SELECT hivenet.parse_serial(%s, %s)", (serial, format_name))
    except psycopg.Error as error:
        assert error.diag.sqlstate == "HN001"
        event((error.diag.message_primary or "").split(": ")[-1].split(" ")[0])
        with pytest.raises(InvalidInput) as python_error:
            parse_serial(serial, format_name)
        assert python_error.value.message == error.diag.message_primary
    else:
        event("valid")
        assert parse_builtin(serial, format_name) == expected
        assert parse_serial(serial, format_name).seq == expected["seq"]


@pytest.mark.parametrize("format_name", ["nope", "X" * 100])
def test_unknown_format_message_starts_as_sqls(db: psycopg.Connection, format_name: str) -> None:
    with pytest.raises(psycopg.Error) as sql_error:
        db.execute("SELECT hivenet.parse_serial('x', %s)", (format_name,))
    with pytest.raises(InvalidInput) as python_error:
        parse_serial("x", format_name)
    assert python_error.value.message.startswith(sql_error.value.diag.message_primary or "?")
