"""The packaged SQL of schema ``hivenet``: one file per concern, applied in the order of
``PARTS``.

``hivenet_db/sql/*.sql`` is the current schema, for reading and for fresh installs
(``hivenet-db sql`` prints it). Each alembic revision runs its own frozen ``.sql`` file beside
it (migrations/versions/), one revision per release; tests/test_migrations.py checks that
replaying them gives the catalog of this schema.

``builtin_formats.json`` beside them is the built-in formats' one copy: formats.sql reads it
as psql variable ``builtin_formats``, which ``part_sql`` writes in as a literal (so the script
stands alone), and the Python parser reads it too (parsing.py).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from sqlalchemy import Connection

# The full current schema, in the order it is applied, and why. PL/pgSQL bodies are bound when
# they run, so only tables, triggers, SQL-language bodies and what runs at install care.
PARTS: tuple[str, ...] = (
    # The tables every later file reads or inserts into: settings and formats, the clock.
    "settings", "clock", "formats", "registry",
    # What the generated code is written from: counters' names, clocks and their policies,
    # field checks, parse_serial; the shared fallback's settings and draws beside the counters.
    "counters", "fallback", "periods", "clock_policy", "fields", "parse",
    # The generated functions, rewritten from here on by every change of a setting or format;
    # before the files whose SQL bodies and views call them.
    "compile",
    # The concerns, each after what its SQL bodies and views name: ownership reads the
    # settings' constants, allocate the fast paths, time_ids them too, dedup and steps the
    # layouts, requests (the core of keyed attempts) the namespaces' policies, batches and
    # steps the core, audit the attempts; decisions are counted by the core.
    "ownership", "allocate", "time_ids", "maintain", "dedup", "claims", "fingerprints",
    "decisions", "policies", "requests", "expiry", "batches", "steps", "audit",
    # Every reporting view, over the tables of all the concerns above.
    "reporting", "failover",
    # Grants on everything above, and nothing for PUBLIC: last.
    "privileges",
)

# Where formats.sql reads the built-in formats, as psql writes in a variable: a quoted literal.
_BUILTIN_FORMATS = ":'builtin_formats'"


def _packaged(name: str) -> str:
    return files("hivenet_db.sql").joinpath(name).read_text(encoding="utf-8")


def builtin_formats_json() -> str:
    """The built-in formats as hivenet.format stores them (JSON text, name → row)."""
    return _packaged("builtin_formats.json")


def part_sql(name: str) -> str:
    sql = _packaged(f"{name}.sql")
    if _BUILTIN_FORMATS not in sql:
        return sql
    return sql.replace(_BUILTIN_FORMATS, "'" + builtin_formats_json().replace("'", "''") + "'")


def full_schema_sql() -> str:
    """The whole schema as one SQL script, for teams that do not use alembic."""
    return "\n".join(f"-- hivenet_db/sql/{name}.sql\n{part_sql(name)}" for name in PARTS)


def execute_script(conn: Connection, sql: str) -> None:
    """Run a multi-statement script on the caller's connection, inside its transaction.

    Goes to psycopg without parameters, so ``%`` and ``:name`` in the SQL stay as written.
    """
    conn.connection.driver_connection.execute(sql)  # type: ignore[union-attr]


def apply_revision_sql(conn: Connection, revision_file: str, suffix: str = ".sql") -> None:
    """Run the frozen SQL beside an alembic revision (``0006_x.py`` → ``0006_x.sql``, or
    ``0006_x.downgrade.sql`` with that suffix) on the migration's connection."""
    execute_script(conn, Path(revision_file).with_suffix(suffix).read_text(encoding="utf-8"))
