"""Interface-serial duplicate check, the call chain, and generic idempotency claims.

Every method runs one statement on the caller's connection (SQLAlchemy ``Connection`` or
``Session``, or psycopg 3 ``Connection``; the Async classes their async counterparts) and never
commits: a claim commits or vanishes with the caller's transaction, together with the effect
it guards. The rules live in SQL (``hivenet_db/sql/dedup.sql`` and ``claims.sql``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from hivenet_db._execute import AsyncDB, Rows, SyncDB, rows, rows_async
from hivenet_db.propagation import current_unified_serial
from hivenet_db.statements import API

_CLAIM_INTERFACE = API["claim_interface_serial"]
_CALL_CHAIN = API["call_chain"]
_CLAIM = API["claim"]
_SET_EXPIRY = API["set_claim_expiry"]


@dataclass(frozen=True)
class Call:
    """One recorded interface call (a row of ``hivenet.call_chain``)."""

    interface_serial: str
    system_serial: str | None
    source_system: str
    source_module: str
    source_instance: str
    target_system: str
    serial_time: dt.datetime  # as printed in the serial (business-local, naive)
    recorded_at: dt.datetime


def _claim_params(serial: str, unified_serial: str | None, system_serial: str | None,
                  nowait: bool) -> dict[str, Any]:
    return {"serial": serial,
            "unified_serial": unified_serial if unified_serial is not None
            else current_unified_serial(),
            "system_serial": system_serial, "nowait": nowait}


def _calls(result: Rows) -> list[Call]:
    return [Call(*row) for row in result]


class InterfaceDedup:
    """The provider side of an interface call: record its serial, list a call chain.

    ``claim`` raises ``DuplicateInterfaceSerial`` (HN020), ``SerialOutsideWindow`` (HN021) or
    ``InvalidInput`` (HN001). ``unified_serial`` defaults to
    ``propagation.current_unified_serial()``.
    """

    def __init__(self, db: SyncDB) -> None:
        self.db = db

    def claim(self, serial: str, unified_serial: str | None = None,
              system_serial: str | None = None, *, nowait: bool = False) -> None:
        rows(self.db, _CLAIM_INTERFACE,
             _claim_params(serial, unified_serial, system_serial, nowait))

    def call_chain(self, unified_serial: str) -> list[Call]:
        return _calls(rows(self.db, _CALL_CHAIN, {"unified_serial": unified_serial}))


class AsyncInterfaceDedup:
    """``InterfaceDedup`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB) -> None:
        self.db = db

    async def claim(self, serial: str, unified_serial: str | None = None,
                    system_serial: str | None = None, *, nowait: bool = False) -> None:
        await rows_async(self.db, _CLAIM_INTERFACE,
                         _claim_params(serial, unified_serial, system_serial, nowait))

    async def call_chain(self, unified_serial: str) -> list[Call]:
        return _calls(await rows_async(self.db, _CALL_CHAIN, {"unified_serial": unified_serial}))


class ClaimRepository:
    """Generic "execute once" claims ``(namespace, key)``.

    ``claim`` raises ``DuplicateClaim`` (HN040) when the claim is taken, ``InvalidInput``
    (HN001) for an empty or oversized namespace or key.
    """

    def __init__(self, db: SyncDB) -> None:
        self.db = db

    def claim(self, namespace: str, key: str, *, nowait: bool = False) -> None:
        rows(self.db, _CLAIM, {"namespace": namespace, "key": key, "nowait": nowait})

    def set_expiry(self, namespace: str, expiry: dt.timedelta | None) -> None:
        """Claims of ``namespace`` taken from now on expire after ``expiry`` (None: never)."""
        rows(self.db, _SET_EXPIRY, {"namespace": namespace, "expiry": expiry})


class AsyncClaimRepository:
    """``ClaimRepository`` for an ``AsyncConnection`` or ``AsyncSession`` (or psycopg's)."""

    def __init__(self, db: AsyncDB) -> None:
        self.db = db

    async def claim(self, namespace: str, key: str, *, nowait: bool = False) -> None:
        await rows_async(self.db, _CLAIM, {"namespace": namespace, "key": key, "nowait": nowait})

    async def set_expiry(self, namespace: str, expiry: dt.timedelta | None) -> None:
        await rows_async(self.db, _SET_EXPIRY, {"namespace": namespace, "expiry": expiry})
