"""``hivenet-db bootstrap``: the one step of an install that needs more than the owner's rights.

Run once by a superuser or a managed server's administrator; it creates roles ``hivenet_app``,
``hivenet_reporting`` and ``hivenet_admin`` and lets the schema owner create schema ``hivenet``
and grant those roles (see ``hivenet_db/sql/bootstrap.sql``). Everything after it
(``hivenet-db migrate``, grants to login roles) is done by the owner, no superuser at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files

import psycopg

from hivenet_db.tools.dburl import connect

APP_ROLE = "hivenet_app"
REPORTING_ROLE = "hivenet_reporting"
ADMIN_ROLE = "hivenet_admin"
ROLES = (APP_ROLE, REPORTING_ROLE, ADMIN_ROLE)


class BootstrapError(Exception):
    """The database refused the bootstrap; a one-line message saying what to do."""


@dataclass(frozen=True)
class Action:
    """One step of the bootstrap: the statement, and its outcome: ``ran``, ``already done``,
    or ``for the owner`` (the current user may not run it; the schema owner runs it)."""

    statement: str
    outcome: str


@dataclass(frozen=True)
class Result:
    database: str
    owner: str
    actions: tuple[Action, ...]

    @property
    def changed(self) -> bool:
        return any(action.outcome == "ran" for action in self.actions)

    @property
    def complete(self) -> bool:
        """Nothing is left for the owner to run."""
        return all(action.outcome != "for the owner" for action in self.actions)


# The temporary functions bootstrap.sql defines.
_DROP_FUNCTIONS = ("DROP FUNCTION pg_temp.hivenet_bootstrap(text), "
                   "pg_temp._hivenet_step(text, text, oid)")


def _script() -> str:
    return files("hivenet_db.sql").joinpath("bootstrap.sql").read_text(encoding="utf-8")


def _one_line(error: psycopg.Error) -> str:
    diag = error.diag
    message = diag.message_primary or str(error).strip().splitlines()[0]
    return f"{message}; {diag.message_hint}" if diag.message_hint else message


def bootstrap(url: str, owner: str) -> Result:
    """Create what ``owner`` cannot create itself, in one transaction committed here (this is
    an administrator's command, not part of a caller's transaction). ``url`` is a libpq URL of
    the database where schema hivenet will live, as a superuser or administrator.

    Raises ``BootstrapError`` when the database refuses (no such owner, not allowed); a failed
    connection is psycopg's own ``OperationalError``, as everywhere else."""
    try:
        with connect(url) as conn:
            conn.execute(_script())  # no parameters: the script's quotes and % stay as written
            rows = conn.execute(
                "SELECT statement, outcome FROM pg_temp.hivenet_bootstrap(%s)", (owner,)
            ).fetchall()
            # In the same transaction: the session may be a pooler's, serving others next.
            conn.execute(_DROP_FUNCTIONS)
            database = conn.info.dbname
    except (psycopg.errors.UndefinedObject, psycopg.errors.InvalidParameterValue,
            psycopg.errors.InsufficientPrivilege) as error:
        raise BootstrapError(f"bootstrap for owner {owner!r}: {_one_line(error)}") from None
    return Result(database, owner, tuple(Action(*row) for row in rows))
