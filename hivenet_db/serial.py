"""The ``Serial`` value type: a ``str`` whose parsed fields are attributes."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import text

from hivenet_db._execute import SyncDB, rows


class Serial(str):
    """A serial number as issued or parsed by the database.

    ``serial.format`` names its format; every field is an attribute (``serial.system``,
    ``serial.module``, ``serial.instance``, ``serial.target``, ``serial.merchant``,
    ``serial.shard`` as the format has them), as are ``serial.seq`` and ``serial.date``
    (a ``date``) or ``serial.datetime`` (a naive ``datetime`` in the business time zone).
    """

    # Shadows str.format on purpose: the format's name is the documented attribute (SPEC,
    # docs, every test); str.format(serial, ...) still formats when anyone needs it.
    format: str  # type: ignore[assignment]
    fields: dict[str, str]
    seq: int
    date: dt.date | None
    datetime: dt.datetime | None

    def __new__(cls, value: str, parsed: dict[str, Any]) -> Serial:
        serial = super().__new__(cls, value)
        serial.format = parsed["format"]
        serial.seq = int(parsed["seq"])
        serial.datetime = (dt.datetime.fromisoformat(parsed["datetime"])
                           if "datetime" in parsed else None)
        serial.date = (dt.date.fromisoformat(parsed["date"]) if "date" in parsed
                       else serial.datetime.date() if serial.datetime else None)
        serial.fields = {k: v for k, v in parsed.items()
                         if k not in ("format", "seq", "date", "datetime")}
        return serial

    def __getattr__(self, name: str) -> str:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return str(fields[name])
        raise AttributeError(f"{self.format!r} serial has no field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Serial, (str(self), {"format": self.format, "seq": self.seq, **self.fields,
                                     **({"datetime": self.datetime.isoformat()}
                                        if self.datetime else
                                        {"date": self.date.isoformat()} if self.date else {})}))


_PARSE = text("SELECT hivenet.parse_serial(:serial, :format)")


def parse_serial(db: SyncDB, serial: str, format: str | None = None) -> Serial:
    """Parse ``serial`` with the database's ``hivenet.parse_serial``.

    With no format, the standard's kinds are told apart by length (28/30/39).
    Raises ``InvalidInput`` (HN001) when it is no valid serial of that format.
    """
    (row,) = rows(db, _PARSE, {"serial": serial, "format": format})
    return Serial(serial, row[0])
