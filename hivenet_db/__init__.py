"""hivenet-db: serial numbers (HiveNet Sequence Standards) and idempotency inside PostgreSQL."""

from hivenet_db.allocation import (
    AsyncSerialRepository,
    SerialRepository,
    flush_at_commit,
    flush_at_commit_async,
)
from hivenet_db.dedup import (
    AsyncClaimRepository,
    AsyncInterfaceDedup,
    Call,
    ClaimRepository,
    InterfaceDedup,
)
from hivenet_db.durable import configure_durable_pool
from hivenet_db.errors import (
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

__all__ = [
    "AsyncClaimRepository",
    "AsyncInterfaceDedup",
    "AsyncRequestRepository",
    "AsyncSerialRepository",
    "AsyncStepRepository",
    "Call",
    "ClaimRepository",
    "DuplicateClaim",
    "DuplicateInterfaceSerial",
    "DurablePoolExhausted",
    "HivenetError",
    "InterfaceDedup",
    "InvalidInput",
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
    "UnknownScope",
    "configure_durable_pool",
    "flush_at_commit",
    "flush_at_commit_async",
    "parse_serial",
]
