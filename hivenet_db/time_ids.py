"""Numeric time ids (seed 004's order number: ``(yyMMddHHmmss << 14) | seq``): the ``TimeId``
value type and ``parse_time_id``. They are issued by ``SerialRepository.next_time_id``
(hivenet_db/allocation.py) as plain ``int``s, for ``BigInteger`` columns."""

from __future__ import annotations

from typing import Any

from hivenet_db._execute import SyncDB, rows
from hivenet_db.parsing import parse_builtin_time_id
from hivenet_db.serial import Parts
from hivenet_db.statements import API


class TimeId(Parts, int):
    """A time id with its parts as attributes: ``format``, ``seq``, ``datetime`` (a naive
    ``datetime`` in the business time zone) or ``date``, and each field of the format
    (``instance``, ...; time_id has none)."""

    _called = "time id"

    def __new__(cls, value: int, parsed: dict[str, Any]) -> TimeId:
        time_id = super().__new__(cls, value)
        time_id._take(parsed)
        return time_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (TimeId, (int(self), self._parsed()))


def parse_time_id(value: Any, format: str = "time_id", *, db: SyncDB | None = None) -> TimeId:
    """The parts of time id ``value``: ``parse_time_id(4102768558080001).datetime``.

    Without ``db``, in Python, for the built-in format time_id: no database involved, the
    same results and messages as SQL ``hivenet.parse_time_id``. With ``db`` (a Connection or
    Session), the database parses it: needed for numeric formats of your own
    (``define_format``). Raises ``InvalidInput`` (HN001) when no call can have issued it.
    """
    if db is None:
        return TimeId(value, parse_builtin_time_id(value, format))
    (row,) = rows(db, API["parse_time_id"],
                  {"id": None if value is None else str(value), "format": format})
    return TimeId(value, row[0])
