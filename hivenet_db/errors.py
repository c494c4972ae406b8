"""SQLSTATE → exception: every error the SQL layer raises maps to one class here.

The repositories translate for you. Code that calls the SQL functions directly (psycopg,
SQLAlchemy ``text()``, an ORM ``server_default``) gets the driver's error with the SQLSTATE
(``HN020`` ...) and can turn it into the same exception in one of two ways::

    from hivenet_db.errors import DuplicateInterfaceSerial, from_database, translated

    with translated():                  # re-raises HNxxx as its class, the original as cause
        conn.execute("SELECT hivenet.claim_interface_serial(%s, %s, NULL, false)", (s, u))

    try:
        session.flush()
    except DBAPIError as error:         # or psycopg.Error
        typed = from_database(error)    # the HivenetError, or None for any other error
        if typed is None:
            raise
        raise typed from error

Errors that are not hivenet's (a unique violation of your own table, a lost connection) pass
through ``translated()`` unchanged.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType

import psycopg
from sqlalchemy.exc import DBAPIError


class HivenetError(Exception):
    """Base of every hivenet-db error; ``sqlstate`` is the SQLSTATE the database raised."""

    sqlstate: str = ""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if sqlstate:
            self.sqlstate = sqlstate


class InvalidInput(HivenetError):
    """HN001: a field of wrong length, charset or range; an unknown format name."""

    sqlstate = "HN001"


class UnknownScope(HivenetError):
    """HN002: a scope that is not prepared (the message names it and the command that
    prepares it); a system or module not registered while the registry is enforced; an
    instance this database does not own."""

    sqlstate = "HN002"


class SequenceExhausted(HivenetError):
    """HN010: every serial of the current period of the scope is used (for an unprepared
    scope: of its format's shared fallback counter, shared by every unprepared scope)."""

    sqlstate = "HN010"


class ClockBehind(HivenetError):
    """HN011: the clock is behind the latest instant the format issued, and the format's clock
    policy (``hivenet.set_clock_policy``) refuses: 'refuse', or 'wait' when the clock does not
    catch up within its max_wait or the statement's timeout. The message says how far behind
    the clock is and which policy refused."""

    sqlstate = "HN011"


class DuplicateInterfaceSerial(HivenetError):
    """HN020: the interface serial is already recorded."""

    sqlstate = "HN020"


class SerialOutsideWindow(HivenetError):
    """HN021: the serial's own date is outside the window its records are kept for: an
    interface serial outside the duplicate-check window, or a system serial given to
    ``begin_step`` dated before ``step_retention`` or beyond ``step_future_tolerance``."""

    sqlstate = "HN021"


class AttemptInProgress(HivenetError):
    """HN030: the step or keyed request is ``processing`` (the standard's unknown state)."""

    sqlstate = "HN030"


class AlreadySucceeded(HivenetError):
    """HN031: the step or keyed request succeeded and its policy is to reject repeats."""

    sqlstate = "HN031"


#: The names SPEC §7 gives them, from when only steps had them: the same classes.
StepInProgress = AttemptInProgress
StepAlreadySucceeded = AlreadySucceeded


class RequestMismatch(HivenetError):
    """HN032: the same serial or key came with a different request."""

    sqlstate = "HN032"


class StaleAttempt(HivenetError):
    """HN033: finishing an attempt that is not the current one."""

    sqlstate = "HN033"


class DuplicateClaim(HivenetError):
    """HN040: the generic claim is already taken."""

    sqlstate = "HN040"


class DurablePoolExhausted(HivenetError):
    """Durable allocation got no connection of its own pool, or no server session for one,
    within the pool's timeout: size that pool (``hivenet_db.configure_durable_pool``) or the
    server / PgBouncer pool behind it (docs/operations.md). Raised by the Python layer, not
    the database: no SQLSTATE."""


BY_SQLSTATE: dict[str, type[HivenetError]] = {
    cls.sqlstate: cls
    for cls in (InvalidInput, UnknownScope, SequenceExhausted, ClockBehind,
                DuplicateInterfaceSerial, SerialOutsideWindow, AttemptInProgress,
                AlreadySucceeded, RequestMismatch,
                StaleAttempt, DuplicateClaim)
}


def from_database(error: BaseException | None) -> HivenetError | None:
    """The typed error for a psycopg or SQLAlchemy error raised by hivenet SQL, else None."""
    if isinstance(error, DBAPIError):
        error = error.orig
    if not isinstance(error, psycopg.Error) or error.diag.sqlstate is None:
        return None
    cls = BY_SQLSTATE.get(error.diag.sqlstate)
    if cls is None:
        return None
    return cls(error.diag.message_primary or str(error), error.diag.sqlstate)


class _Translated:
    """``translated()``: a class, not a generator (``@contextmanager``), as it is entered twice
    for every keyed request; it holds no state, so one serves every caller."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(error, DBAPIError | psycopg.Error):
            typed = from_database(error)
            if typed is not None:
                raise typed from error


_TRANSLATED = _Translated()


def translated() -> AbstractContextManager[None]:
    """Re-raise hivenet SQLSTATEs as their exception class (the original is the cause)."""
    return _TRANSLATED
