"""Numeric time ids (seed 004's order number: ``(yyMMddHHmmss << 14) | seq``): the ``TimeId``
value type and ``parse_time_id``. They are issued by ``SerialRepository.next_time_id``
(hivenet_db/allocation.py) as plain ``int``s, for ``BigInteger`` columns."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import text

from hivenet_db._execute import SyncDB, rows
from hivenet_db.parsing import parse_builtin_time_id


class TimeId(int):
    """A time id with its parts as attributes: ``format``, ``seq``, ``datetime`` (a naive
    ``datetime`` in the business time zone) or ``date``, and each field of the format
    (``instance``, ...; time_id has none)."""

    format: str
    fields: dict[str, str]
    seq: int
    date: dt.date | None
    datetime: dt.datetime | None

    def __new__(cls, value: int, parsed: dict[str, Any]) -> TimeId:
        time_id = super().__new__(cls, value)
        time_id.format = parsed["format"]
        time_id.seq = int(parsed["seq"])
        time_id.datetime = (dt.datetime.fromisoformat(parsed["datetime"])
                            if "datetime" in parsed else None)
        time_id.date = (dt.date.fromisoformat(parsed["date"]) if "date" in parsed
                        else time_id.datetime.date() if time_id.datetime else None)
        time_id.fields = {k: v for k, v in parsed.items()
                          if k not in ("format", "seq", "date", "datetime")}
        return time_id

    def __getattr__(self, name: str) -> str:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return str(fields[name])
        raise AttributeError(f"{self.format!r} time id has no field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        when = ({"datetime": self.datetime.isoformat()} if self.datetime
                else {"date": self.date.isoformat()} if self.date else {})
        return (TimeId, (int(self), {"format": self.format, "seq": self.seq, **self.fields,
                                     **when}))


# The id as text: a bigint, where the library's other parameters are integers (_execute).
_PARSE = text("SELECT hivenet.parse_time_id(CAST(:id AS bigint), :format)")


def parse_time_id(value: Any, format: str = "time_id", *, db: SyncDB | None = None) -> TimeId:
    """The parts of time id ``value``: ``parse_time_id(4102768558080001).datetime``.

    Without ``db``, in Python, for the built-in format time_id: no database involved, the
    same results and messages as SQL ``hivenet.parse_time_id``. With ``db`` (a Connection or
    Session), the database parses it: needed for numeric formats of your own
    (``define_format``). Raises ``InvalidInput`` (HN001) when no call can have issued it.
    """
    if db is None:
        return TimeId(value, parse_builtin_time_id(value, format))
    (row,) = rows(db, _PARSE, {"id": None if value is None else str(value), "format": format})
    return TimeId(value, row[0])
