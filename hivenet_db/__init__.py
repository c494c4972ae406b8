"""hivenet-db: serial numbers (HiveNet Sequence Standards) and idempotency inside PostgreSQL.

The names below are imported on first use (PEP 562), so that the command and the tools that
need none of them (``hivenet-db --version``) do not pay for SQLAlchemy and psycopg.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hivenet_db.allocation import (
        AsyncSerialRepository,
        SerialRepository,
        flush_at_commit,
        flush_at_commit_async,
    )
    from hivenet_db.attempts import AttemptStart, KeyStart
    from hivenet_db.dedup import (
        AsyncClaimRepository,
        AsyncInterfaceDedup,
        Call,
        ClaimRepository,
        InterfaceDedup,
    )
    from hivenet_db.durable import configure_durable_pool
    from hivenet_db.errors import (
        AlreadySucceeded,
        AttemptInProgress,
        ClockBehind,
        DuplicateClaim,
        DuplicateInterfaceSerial,
        DurablePoolExhausted,
        HivenetError,
        InvalidInput,
        RequestMismatch,
        SequenceExhausted,
        SerialOutsideWindow,
        StaleAttempt,
        StepAlreadySucceeded,
        StepInProgress,
        UnknownScope,
    )
    from hivenet_db.requests import (
        AsyncRequestRepository,
        RequestRepository,
        RequestRun,
        RequestStart,
    )
    from hivenet_db.serial import Serial, parse_serial
    from hivenet_db.steps import AsyncStepRepository, StepRepository, StepRun, StepStart
    from hivenet_db.time_ids import TimeId, parse_time_id

# Each public name → the module that defines it.
_HOMES: dict[str, str] = {
    "AsyncSerialRepository": "hivenet_db.allocation",
    "SerialRepository": "hivenet_db.allocation",
    "flush_at_commit": "hivenet_db.allocation",
    "flush_at_commit_async": "hivenet_db.allocation",
    "AttemptStart": "hivenet_db.attempts",
    "KeyStart": "hivenet_db.attempts",
    "AsyncClaimRepository": "hivenet_db.dedup",
    "AsyncInterfaceDedup": "hivenet_db.dedup",
    "Call": "hivenet_db.dedup",
    "ClaimRepository": "hivenet_db.dedup",
    "InterfaceDedup": "hivenet_db.dedup",
    "AlreadySucceeded": "hivenet_db.errors",
    "AttemptInProgress": "hivenet_db.errors",
    "ClockBehind": "hivenet_db.errors",
    "DuplicateClaim": "hivenet_db.errors",
    "DuplicateInterfaceSerial": "hivenet_db.errors",
    "DurablePoolExhausted": "hivenet_db.errors",
    "configure_durable_pool": "hivenet_db.durable",
    "HivenetError": "hivenet_db.errors",
    "InvalidInput": "hivenet_db.errors",
    "RequestMismatch": "hivenet_db.errors",
    "SequenceExhausted": "hivenet_db.errors",
    "SerialOutsideWindow": "hivenet_db.errors",
    "StaleAttempt": "hivenet_db.errors",
    "StepAlreadySucceeded": "hivenet_db.errors",
    "StepInProgress": "hivenet_db.errors",
    "UnknownScope": "hivenet_db.errors",
    "AsyncRequestRepository": "hivenet_db.requests",
    "RequestRepository": "hivenet_db.requests",
    "RequestRun": "hivenet_db.requests",
    "RequestStart": "hivenet_db.requests",
    "Serial": "hivenet_db.serial",
    "parse_serial": "hivenet_db.serial",
    "AsyncStepRepository": "hivenet_db.steps",
    "StepRepository": "hivenet_db.steps",
    "StepRun": "hivenet_db.steps",
    "StepStart": "hivenet_db.steps",
    "TimeId": "hivenet_db.time_ids",
    "parse_time_id": "hivenet_db.time_ids",
}

__all__ = [
    "AlreadySucceeded",
    "AsyncClaimRepository",
    "AsyncInterfaceDedup",
    "AsyncRequestRepository",
    "AsyncSerialRepository",
    "AsyncStepRepository",
    "AttemptInProgress",
    "AttemptStart",
    "Call",
    "ClaimRepository",
    "ClockBehind",
    "DuplicateClaim",
    "DuplicateInterfaceSerial",
    "DurablePoolExhausted",
    "HivenetError",
    "InterfaceDedup",
    "InvalidInput",
    "KeyStart",
    "RequestMismatch",
    "RequestRepository",
    "RequestRun",
    "RequestStart",
    "SequenceExhausted",
    "Serial",
    "SerialOutsideWindow",
    "SerialRepository",
    "StaleAttempt",
    "StepAlreadySucceeded",
    "StepInProgress",
    "StepRepository",
    "StepRun",
    "StepStart",
    "TimeId",
    "UnknownScope",
    "configure_durable_pool",
    "flush_at_commit",
    "flush_at_commit_async",
    "parse_serial",
    "parse_time_id",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'hivenet_db' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
