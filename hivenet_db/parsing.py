"""Parsing serials of the built-in formats in Python, without a database.

The layouts are not written here: ``hivenet_db/sql/builtin_formats.json`` holds the built-in
formats as the database stores them (the rows of ``hivenet.format``: segments with widths,
charsets, regexes and to_char patterns; the numeric time_id with its bits), the one copy,
which the schema installs too (sql/formats.sql). This module interprets those segments the
way ``hivenet.parse_serial`` (sql/parse.sql) and ``hivenet.parse_time_id``
(sql/time_ids.sql) do, with the same results and the same HN001 messages.
tests/test_parsing.py proves a fresh install holds what the file says, and compares the
parsers on random valid and invalid serials and ids.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from decimal import Decimal
from typing import Any

from hivenet_db.errors import InvalidInput
from hivenet_db.schema import builtin_formats_json

# The standard's kinds, told apart by their lengths (from their definitions) when no format
# is named.
_STANDARD_KINDS = ("unified", "system", "interface")

# to_char tokens of the time patterns (formats.sql _time_pattern), longest first.
_TIME_TOKENS = (("YYYY", 4), ("HH24", 2), ("YY", 2), ("MM", 2), ("DD", 2), ("MI", 2),
                ("SS", 2))
_UNITS = ("second", "minute", "hour", "day", "month", "year", "never")
_DIGITS = re.compile(r"[0-9]+")


@functools.cache
def builtin_formats() -> dict[str, dict[str, Any]]:
    """The built-in formats by name: ``length``, ``seq_width``, ``capacity``, ``reset``,
    ``segments`` (as compiled by the database), ``description``; ``time_shift`` for a numeric
    format (time_id)."""
    # Decimal keeps numbers as jsonb prints them ("min": 1 stays 1, 1.0 stays 1.0).
    return json.loads(builtin_formats_json(), parse_float=Decimal)  # type: ignore[no-any-return]


def quote_literal(value: str) -> str:
    """PostgreSQL's quote_literal (and format's %L) of a non-NULL string."""
    quoted = "'" + value.replace("'", "''").replace("\\", "\\\\") + "'"
    return "E" + quoted if "\\" in value else quoted


# The characters messages show escaped (SQL hivenet._unseen_characters): control characters
# and Unicode's format and separator characters (Cf, Zl, Zp, as of Unicode 15).
UNSEEN = re.compile(
    "[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _code(character: str) -> str:
    code = ord(character)
    return (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
            else f"\\U{code:08x}")


def shown(value: str | None) -> str:
    """A value as messages echo it (SQL ``hivenet._shown``): quoted, cut to 32 characters
    plus its length when longer than 40, each control or invisible character (``UNSEEN``)
    shown as its code: ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``."""
    if value is None:
        return "NULL"
    quoted = quote_literal(value if len(value) <= 40 else value[:32])
    quoted = UNSEEN.sub(lambda c: _code(c.group()), quoted)
    return quoted if len(value) <= 40 else f"{quoted}... ({len(value)} characters)"


def field_problem(segment: dict[str, Any], value: str) -> str | None:
    """What is wrong with ``value`` as a value of a field segment (SQL ``_field_problem``)."""
    width = int(segment["width"])
    if not re.fullmatch(segment["regex"], value) or len(value.encode()) != width:
        return f"{shown(value)} must be {width} {segment['charset']} characters"
    if segment["charset"] == "digit" and ("min" in segment or "max" in segment):
        low = segment.get("min")
        high = segment.get("max")
        number = Decimal(value)
        if not (Decimal(low if low is not None else 0) <= number
                <= Decimal(high if high is not None else number)):
            low_text = str(low) if low is not None else "0"
            low_text = low_text.rjust(len(value), "0")[:len(value)]  # lpad
            high_text = str(high) if high is not None else "9" * len(value)
            return f"{shown(value)} must be from {low_text} to {high_text}"
    return None


@functools.cache
def time_slices(to_char: str) -> tuple[tuple[str, int, int], ...]:
    """(token, start, end) of each part of a time printed with to_char pattern ``to_char``
    (a segment's ``to_char``, formats.sql _time_pattern): where its year, month... are."""
    slices: list[tuple[str, int, int]] = []
    pos = i = 0
    while i < len(to_char):
        token, width = next((t, w) for t, w in _TIME_TOKENS if to_char.startswith(t, i))
        slices.append((token, pos, pos + width))
        pos += width
        i += len(token)
    return tuple(slices)


def time_of(part: str, slices: tuple[tuple[str, int, int], ...]) -> dt.datetime:
    """The time the digits ``part`` show, cut by ``time_slices``; ValueError when none."""
    values = {token: int(part[start:end]) for token, start, end in slices}
    if "YYYY" in values:
        year = values["YYYY"]
    else:  # to_timestamp's YY: the year nearest to 2020
        year = values["YY"] + (2000 if values["YY"] < 70 else 1900)
    return dt.datetime(year, values.get("MM", 1), values.get("DD", 1),
                       values.get("HH24", 0), values.get("MI", 0), values.get("SS", 0))


def _read_time(part: str, to_char: str) -> dt.datetime | None:
    """The time ``part`` shows in to_char pattern ``to_char``, or None when it is none."""
    if not _DIGITS.fullmatch(part):
        return None
    try:
        return time_of(part, time_slices(to_char))
    except ValueError:
        return None


def shows_date_only(segment: dict[str, Any]) -> bool:
    """Whether a time segment is reported as a ``date`` (a day or coarser), not a
    ``datetime``, as SQL parse_serial does."""
    return _UNITS.index(segment["resolution"]) >= _UNITS.index("day")


def printed_time(segment: dict[str, Any], part: str) -> dict[str, str] | None:
    """The time ``part`` shows by time segment ``segment``, as the parsers report it
    (``{"date": ...}`` or ``{"datetime": ...}``; SQL ``_printed_time``), or None when it is
    no valid time of the segment's pattern."""
    when = _read_time(part, segment["to_char"]) if len(part) == int(segment["width"]) else None
    if when is None:
        return None
    day = f"{when.year:04d}-{when.month:02d}-{when.day:02d}"
    if shows_date_only(segment):
        return {"date": day}
    return {"datetime": f"{day}T{when.hour:02d}:{when.minute:02d}:{when.second:02d}"}


def parse_builtin(serial: str | None, format: str | None = None) -> dict[str, Any]:
    """``hivenet.parse_serial(serial, format)`` for the built-in formats, in Python: the same
    JSON object, or InvalidInput (HN001) with the same message."""
    if serial is None:
        raise InvalidInput("serial is NULL")
    formats = builtin_formats()
    kinds = {formats[kind]["length"]: kind for kind in _STANDARD_KINDS}
    name = format if format is not None else kinds.get(len(serial.encode()))
    if name not in formats:
        if format is None:
            listed = [f"{kind} ({formats[kind]['length']})" for kind in _STANDARD_KINDS]
            raise InvalidInput(f"serial {shown(serial)} is no {', '.join(listed[:-1])} or "
                               f"{listed[-1]} serial; name its format")
        raise InvalidInput(f"unknown format {shown(format)} (not built in: "
                           "parse_serial(serial, format, db=connection) asks the database)")
    definition = formats[name]
    if "time_shift" in definition:
        raise InvalidInput(f"format {name} is numeric (a bigint): parse_time_id parses its ids")
    result: dict[str, Any] = {"format": name}
    problem: str | None = None
    if len(serial.encode()) != definition["length"] or len(serial) != definition["length"]:
        problem = f"length {len(serial)}, not {definition['length']}"
    pos = 0
    for segment in definition["segments"]:
        if problem is not None:
            break
        if "field" in segment:
            if segment.get("printed") is False:
                continue
            part = serial[pos:pos + int(segment["width"])]
            field = field_problem(segment, part)
            if field is not None:
                problem = f"field {segment['field']} {field}"
            result[segment["field"]] = part
        elif "literal" in segment:
            part = serial[pos:pos + len(segment["literal"])]
            if part != segment["literal"]:
                problem = f"{quote_literal(part)} where {quote_literal(segment['literal'])} belongs"
        elif "time" in segment:
            part = serial[pos:pos + int(segment["width"])]
            when = printed_time(segment, part)
            if when is None:
                problem = f"time {quote_literal(part)} is no valid {segment['time']}"
            else:
                result.update(when)
        else:
            part = serial[pos:pos + int(definition["seq_width"])]
            if not _DIGITS.fullmatch(part) or int(part) == 0:
                problem = f"seq {quote_literal(part)} is not 1 to {definition['capacity']}"
            else:
                result["seq"] = int(part)
        pos += len(part)
    if problem is not None:
        raise InvalidInput(f"serial {shown(serial)} is no valid {name} serial: {problem}")
    return result


def _id_digits(number: int, width: int) -> str:
    """``number``'s digits padded with zeros to ``width``, never cut (SQL _time_id_digits)."""
    digits = str(number)
    return digits if len(digits) > width else digits.rjust(width, "0")


def parse_builtin_time_id(value: int | None, format: str = "time_id") -> dict[str, Any]:
    """``hivenet.parse_time_id(id, format)`` for the built-in numeric formats (time_id), in
    Python: the same JSON object, or InvalidInput (HN001) with the same message."""
    if value is None:
        raise InvalidInput("time id is NULL")
    definition = builtin_formats().get(format)
    if definition is None:
        raise InvalidInput(f"unknown format {shown(format)} (not built in: "
                           "parse_time_id(id, format, db=connection) asks the database)")
    if "time_shift" not in definition:
        raise InvalidInput(f"format {format} is a text format: parse_serial parses its serials")
    result: dict[str, Any] = {"format": format}
    problem = "it is not positive" if value < 1 else None
    for segment in definition["segments"]:
        if problem is not None:
            break
        if "time" in segment:
            number = value >> int(definition["time_shift"])
            when = printed_time(segment, _id_digits(number, int(segment["width"])))
            if when is None:
                problem = f"time {number} is no valid {segment['time']}"
            else:
                result.update(when)
        elif "field" in segment:
            number = (value >> int(segment["shift"])) & ((1 << int(segment["bits"])) - 1)
            part = _id_digits(number, int(segment["width"]))
            field = field_problem(segment, part)
            if field is not None:
                problem = f"field {segment['field']} {field}"
            result[segment["field"]] = part
        else:
            result["seq"] = value & int(definition["capacity"])
            if result["seq"] == 0:
                problem = f"seq 0 is not 1 to {definition['capacity']}"
    if problem is not None:
        raise InvalidInput(f"time id {value} is no valid id of format {format}: {problem}")
    return result
