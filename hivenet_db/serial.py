"""The ``Serial`` value type: a ``str`` whose parsed fields are attributes."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from hivenet_db._execute import SyncDB, rows
from hivenet_db.parsing import builtin_formats, parse_builtin, shows_date_only, time_of, time_slices
from hivenet_db.statements import API


class Parts:
    """The parts of a serial or a time id as attributes, from what the parsers return:
    ``format``, ``seq``, ``date`` (a ``date``) or ``datetime`` (a naive ``datetime`` in the
    business time zone), and each field of the format."""

    format: str
    fields: dict[str, str]
    seq: int
    date: dt.date | None
    datetime: dt.datetime | None
    _called = "serial"  # in messages

    def _take(self, parsed: dict[str, Any]) -> None:
        self.format = parsed["format"]
        self.seq = int(parsed["seq"])
        self.datetime = (dt.datetime.fromisoformat(parsed["datetime"])
                         if "datetime" in parsed else None)
        self.date = (dt.date.fromisoformat(parsed["date"]) if "date" in parsed
                     else self.datetime.date() if self.datetime else None)
        self.fields = {k: v for k, v in parsed.items()
                       if k not in ("format", "seq", "date", "datetime")}

    def _parsed(self) -> dict[str, Any]:
        """What the parsers returned: the value again (pickling)."""
        return {"format": self.format, "seq": self.seq, **self.fields,
                **({"datetime": self.datetime.isoformat()} if self.datetime else
                   {"date": self.date.isoformat()} if self.date else {})}

    def __getattr__(self, name: str) -> str:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return str(fields[name])
        raise AttributeError(f"{self.format!r} {self._called} has no field {name!r}")


class Serial(Parts, str):
    """A serial number as issued or parsed by the database.

    ``serial.format`` names its format; every field is an attribute (``serial.system``,
    ``serial.module``, ``serial.instance``, ``serial.target``, ``serial.merchant``,
    ``serial.shard`` as the format has them), as are ``serial.seq`` and ``serial.date``
    (a ``date``) or ``serial.datetime`` (a naive ``datetime`` in the business time zone).
    """

    # Shadows str.format on purpose: the format's name is the documented attribute (SPEC,
    # docs, every test); str.format(serial, ...) still formats when anyone needs it.
    format: str  # type: ignore[assignment]

    def __new__(cls, value: str, parsed: dict[str, Any]) -> Serial:
        serial = super().__new__(cls, value)
        serial._take(parsed)
        return serial

    def __reduce__(self) -> tuple[Any, ...]:
        return (Serial, (str(self), self._parsed()))


# (kind, name, start, end, time slices) of each printed part of a built-in format, kind being
# "field", "date", "datetime" or "seq": read from its definition (segments and widths).
_Layout = tuple[tuple[str, str, int, int, tuple[tuple[str, int, int], ...]], ...]


@functools.cache
def _layout(format: str) -> _Layout:
    definition = builtin_formats()[format]
    parts: list[tuple[str, str, int, int, tuple[tuple[str, int, int], ...]]] = []
    pos = 0
    slices: tuple[tuple[str, int, int], ...]
    for segment in definition["segments"]:
        if "field" in segment:
            if segment.get("printed") is False:
                continue
            width, kind, name, slices = int(segment["width"]), "field", str(segment["field"]), ()
        elif "literal" in segment:
            pos += len(segment["literal"])
            continue
        elif "time" in segment:
            width, name, slices = int(segment["width"]), "", time_slices(segment["to_char"])
            kind = "date" if shows_date_only(segment) else "datetime"
        else:
            width, kind, name, slices = int(definition["seq_width"]), "seq", "", ()
        parts.append((kind, name, pos, pos + width, slices))
        pos += width
    return tuple(parts)


def issued(value: str, format: str) -> Serial:
    """The ``Serial`` of ``value``, a serial of built-in format ``format`` that the database
    has just issued (so valid): cut by the format's layout, the same attributes as
    ``parse_serial`` gives, at a fraction of its cost (the repositories call this on every
    allocation: docs/benchmarks.md). Anything unexpected goes through ``parse_builtin``."""
    if format not in builtin_formats() or len(value) != builtin_formats()[format]["length"]:
        return Serial(value, parse_builtin(value, format))
    serial = str.__new__(Serial, value)
    serial.format = format
    serial.date = serial.datetime = None
    fields: dict[str, str] = {}
    for kind, name, start, end, slices in _layout(format):
        part = value[start:end]
        if kind == "field":
            fields[name] = part
        elif kind == "seq":
            serial.seq = int(part)
        elif kind == "date":
            serial.date = time_of(part, slices).date()
        else:
            serial.datetime = time_of(part, slices)
            serial.date = serial.datetime.date()
    serial.fields = fields
    return serial


def parse_serial(serial: Any, format: Any = None, *, db: SyncDB | None = None) -> Serial:
    """Parse ``serial``: ``parse_serial("C0001A0101201507100123456789")``.

    Without ``db``, in Python, for the three standard kinds (told apart by their lengths,
    when no format is named) and the six built-in formats: no database involved, the same
    results and messages as SQL ``hivenet.parse_serial``. With ``db`` (a Connection or
    Session), the database parses it: needed for custom formats (``define_format``).
    Raises ``InvalidInput`` (HN001) when it is no valid serial of that format.
    """
    if db is None:
        return Serial(serial, parse_builtin(serial, format))
    (row,) = rows(db, API["parse_serial"], {"serial": serial, "format": format})
    return Serial(serial, row[0])
