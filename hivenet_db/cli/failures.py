"""The one line and the exit status for whatever ended a command (``explain``)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

import psycopg
from sqlalchemy.exc import DBAPIError

from hivenet_db.cli.database import UNKNOWN_TARGET, URL_FORM, Target
from hivenet_db.cli.output import PROG, CommandError, UsageError
from hivenet_db.errors import HivenetError, from_database
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedError

INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE


@dataclass(frozen=True)
class Failure:
    """What ``main`` prints (one line) and returns for an exception."""

    status: int
    message: str


# libpq reports a refused connection with no SQLSTATE: its text (English unless the server's
# lc_messages says otherwise) is all there is to tell the causes apart. Anything unmatched
# is shown as is.
_CONNECT_TEXT = (
    ("password", re.compile(r"password authentication failed|no password supplied")),
    ("role", re.compile(r'role "[^"]*" does not exist')),
    ("database", re.compile(r'database "[^"]*" does not exist')),
    ("hba", re.compile(r"no pg_hba\.conf entry")),
    ("url", re.compile(r"invalid \w+ value|invalid URI|invalid connection option")),
    ("unreachable", re.compile(r"Connection refused|could not translate host name|failed to "
                               r"resolve host|timeout expired|No route to host|Network is "
                               r"unreachable|No such file or directory")),
)
# When the text says nothing known (another language): 28000 is also a pg_hba.conf refusal.
_CONNECT_SQLSTATE = {"28P01": "password", "28000": "role", "3D000": "database"}
_CONNECT_MESSAGES = {
    "password": "authentication failed for role {user} at {where}: correct the password in the "
                "URL (or PGPASSWORD, ~/.pgpass)",
    "role": "authentication failed: role {user} does not exist at {where}: correct the user "
            "in the URL, or create the role",
    "database": "database {dbname} does not exist at {where}: create it (createdb {dbname}) "
                "or correct the database name in the URL",
    "hba": "the server at {where} does not admit role {user} to database {dbname} from this "
           "host ({reason}): ask its administrator for a pg_hba.conf entry",
    "url": "malformed database URL ({reason}): expected " + URL_FORM,
    "unreachable": "cannot reach PostgreSQL at {where} ({reason}): check the host and port in "
                   "the URL and that the server is running",
    None: "cannot use the database at {where}: {reason}",
}
# Invalid schema name, undefined function, undefined table.
_OLDER_SCHEMA = {"3F000", "42883", "42P01"}


def _reason(error: psycopg.Error) -> str:
    """libpq's own words, without its preamble: 'connection to server at ... failed: FATAL:'."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"^FATAL:\s+", "", re.split(r"\bfailed:\s+", first)[-1])


def _connection_failure(error: psycopg.Error, target: Target) -> str:
    state = error.sqlstate or ""
    kind = next((kind for kind, pattern in _CONNECT_TEXT if pattern.search(str(error))),
                _CONNECT_SQLSTATE.get(state, "unreachable" if state.startswith("08") else None))
    return _CONNECT_MESSAGES[kind].format(where=target.where, user=target.user,
                                          dbname=target.dbname, reason=_reason(error))


def _database_failure(error: psycopg.Error, args: argparse.Namespace) -> Failure:
    """A refusal of the server other than a hivenet error, told apart by SQLSTATE (by text
    for libpq's refused connections, which carry none)."""
    target: Target = getattr(args, "target", None) or UNKNOWN_TARGET
    state = error.sqlstate or ""
    if not state or state.startswith("08") or state in _CONNECT_SQLSTATE:
        return Failure(2, _connection_failure(error, target))
    primary = error.diag.message_primary or _reason(error)
    if state == "42501" and args.command in ("migrate", "downgrade"):
        return Failure(2, f"{primary}: role {target.user} may not create or change schema "
                          f"hivenet in {target.dbname}; a superuser must run `{PROG} bootstrap "
                          f"--owner {target.user}` once for this database, then run `{PROG} "
                          f"migrate` as {target.user}")
    if state == "42501":
        return Failure(2, f"{primary}: role {target.user} lacks a privilege that `{PROG} "
                          f"{args.command}` needs in {target.dbname}: connect as the schema's "
                          f"owner or a role granted it (docs/operations.md, Privileges)")
    if state in _OLDER_SCHEMA:
        return Failure(2, f"schema hivenet in {target.dbname} is older than this command or "
                          f"incomplete ({primary}): run `{PROG} migrate`")
    return Failure(2, f"the database refused `{PROG} {args.command}` with {state} ({primary}): "
                      f"see the server's log, or run again with --debug")


def _alembic_failure(error: Exception, args: argparse.Namespace) -> Failure:
    """alembic refused the target revision (unknown, or not reachable from the current one)."""
    return Failure(2, f"{args.command} to {args.revision!r}: {error}; this package's "
                      f"revisions are {', '.join(migrate.revisions())} (head {migrate.head()})")


def explain(error: Exception, args: argparse.Namespace) -> Failure:
    """The one line and the exit status for an exception that ended a command."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    typed = error if isinstance(error, HivenetError) else from_database(orig)
    if typed is not None:
        return Failure(1, f"{typed.sqlstate} {type(typed).__name__}: {typed.message}")
    if isinstance(error, UsageError):
        return Failure(2, f"{error} (see `{PROG} {args.command} --help`)")
    if isinstance(error, CommandError | EmbeddedError):
        return Failure(2, str(error))
    if isinstance(error, migrate.VersionConflict):
        return Failure(2, f"{error}: delete the rows of the revisions the schema is not at, "
                          f"then run `{PROG} migrate --check`")
    if isinstance(error, migrate.VersionUnreadable):
        return Failure(2, f"{error}: run `{PROG} migrate --check` as the schema's owner")
    if isinstance(orig, psycopg.Error):
        return _database_failure(orig, args)
    if args.command in ("migrate", "downgrade"):
        from alembic.util import CommandError as AlembicError

        if isinstance(error, AlembicError):
            return _alembic_failure(error, args)
    return Failure(INTERNAL_ERROR, f"internal error ({type(error).__name__}: {error}): run "
                                   f"again with --debug and report the traceback")
