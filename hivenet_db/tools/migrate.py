"""Upgrade and downgrade a database with the packaged alembic migrations, and tell where a
database stands against them.

alembic is imported where it is used: importing it costs about 0.2 s, which the command's
subcommands that never migrate (``sql``, ``embedded``, ``--help``) should not pay.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from hivenet_db.tools.dburl import engine_for

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "hivenet_alembic_version"


class State(enum.StrEnum):
    """Where a database stands against this package's revisions."""

    HEAD = "head"                    # at the package's head
    BEHIND = "behind"                # at an older revision of the package
    AHEAD = "ahead"                  # at a revision the package does not know: a newer package
    NOT_INSTALLED = "not_installed"  # no schema hivenet
    UNTRACKED = "untracked"          # schema hivenet without a revision in VERSION_TABLE


@dataclass(frozen=True)
class MigrationStatus:
    database: str
    current: str | None  # the revision in VERSION_TABLE, None when it records none
    head: str            # the package's head
    state: State

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class MigrationError(Exception):
    """The version table cannot say where the database stands."""


class VersionConflict(MigrationError):
    """VERSION_TABLE holds several revisions (alembic keeps one per branch; hivenet has one)."""

    def __init__(self, database: str, revisions: list[str]) -> None:
        super().__init__(f"{VERSION_TABLE} in database {database} holds {len(revisions)} "
                         f"revisions ({', '.join(revisions)}) instead of one")
        self.database = database
        self.revisions = revisions


class VersionUnreadable(MigrationError):
    """The connected role may not read VERSION_TABLE (an application role, typically)."""

    def __init__(self, database: str, role: str) -> None:
        super().__init__(f"role {role} may not read {VERSION_TABLE} in database {database}")
        self.database = database
        self.role = role


def _config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "hivenet_db.migrations:")
    config.attributes["url"] = url
    return config


@functools.cache
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config(""))


def head() -> str:
    """The newest revision this package ships."""
    found = _script().get_current_head()
    assert found is not None, "the package ships no revision"
    return found


def revisions() -> list[str]:
    """Every revision this package ships, oldest first."""
    return [r.revision for r in reversed(list(_script().walk_revisions()))]


def upgrade(url: str, revision: str = "head") -> None:
    """Bring schema ``hivenet`` to ``revision``; safe to run again (nothing to do).

    A database without schema hivenet going to head gets the current schema files in one
    transaction, stamped at head: history is for upgrades (procrastinate's model;
    tests/test_migrations.py proves that replaying the revisions gives the same catalog).
    Creating the schema comes first, so a role that may not gets that refusal, not one about
    the version table.
    """
    from alembic import command

    if revision in ("head", head()) and status(url).state is State.NOT_INSTALLED:
        _install(url)
    else:
        command.upgrade(_config(url), revision)


def _install(url: str) -> None:
    """The current schema, stamped at head, in one transaction."""
    from alembic.runtime.migration import MigrationContext

    from hivenet_db.schema import execute_script, full_schema_sql

    with engine_for(url) as engine, engine.begin() as conn:
        execute_script(conn, full_schema_sql())
        MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).stamp(
            _script(), "head")


def downgrade(url: str, revision: str = "base") -> None:
    """Go back to ``revision``; ``base`` removes every hivenet object, version table included."""
    from alembic import command

    command.downgrade(_config(url), revision)
    if revision == "base":
        with engine_for(url) as engine, engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))


def current(url: str) -> str | None:
    """The revision the database is at, or None before the first migration."""
    return status(url).current


def _recorded(conn: Connection) -> tuple[str, bool, list[str]]:
    """Database name, whether schema hivenet exists, and the revisions VERSION_TABLE holds.
    Checks the right to read VERSION_TABLE first, so that a refusal does not abort the
    caller's transaction."""
    database, installed, table, readable, role = conn.execute(text(
        "SELECT current_database(), to_regnamespace('hivenet') IS NOT NULL, to_regclass(:t), "
        "has_table_privilege(to_regclass(:t), 'SELECT'), current_user"),
        {"t": VERSION_TABLE}).one()
    if table is None:
        return database, installed, []
    if not readable:
        raise VersionUnreadable(database, role)
    found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE} ORDER BY 1")).scalars()
    return database, installed, list(found)


def status_of(conn: Connection) -> MigrationStatus:
    """Where the database of ``conn`` stands; reads only, in the caller's transaction.
    Raises VersionConflict or VersionUnreadable when the version table cannot tell."""
    database, installed, recorded = _recorded(conn)
    if len(recorded) > 1:
        raise VersionConflict(database, recorded)
    current = recorded[0] if recorded else None
    if current is None:
        state = State.UNTRACKED if installed else State.NOT_INSTALLED
    elif current == head():
        state = State.HEAD
    elif current in revisions():
        state = State.BEHIND
    else:
        state = State.AHEAD
    return MigrationStatus(database, current, head(), state)


def status(url: str) -> MigrationStatus:
    """Where the database at ``url`` stands (see status_of)."""
    with engine_for(url) as engine, engine.connect() as conn:
        return status_of(conn)


def missing_roles(url: str) -> list[str]:
    """The roles schema hivenet grants to (``hivenet-db bootstrap`` creates them) that do not
    exist in the cluster of ``url``: until they do, only the schema's owner may use it. The
    migration creates them itself when the migrating role may (superuser or CREATEROLE)."""
    from hivenet_db.tools.bootstrap import ROLES

    with engine_for(url) as engine, engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT r FROM unnest(CAST(:roles AS text[])) WITH ORDINALITY AS x(r, n) "
            "WHERE to_regrole(r) IS NULL ORDER BY n"), {"roles": list(ROLES)}).scalars())
