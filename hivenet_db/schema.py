"""The packaged SQL of schema ``hivenet``: one file per concern, applied in this order."""

from __future__ import annotations

from importlib.resources import files

from sqlalchemy import Connection

# The full current schema, in dependency order. Alembic revisions apply these same files
# (each revision names its own); tests/test_migrations.py proves the two never drift.
PARTS: tuple[str, ...] = (
    "settings", "clock", "formats", "registry", "loopback", "allocate", "parse", "maintain",  # 0001
    "dedup", "claims",  # 0002
    "steps",  # 0003
    "reporting",  # 0004
    "privileges",  # 0005
)


def part_sql(name: str) -> str:
    return files("hivenet_db.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")


def full_schema_sql() -> str:
    """The whole schema as one SQL script, for teams that do not use alembic."""
    return "\n".join(f"-- hivenet_db/sql/{name}.sql\n{part_sql(name)}" for name in PARTS)


def execute_script(conn: Connection, sql: str) -> None:
    """Run a multi-statement script on the caller's connection, inside its transaction.

    Goes to psycopg without parameters, so ``%`` and ``:name`` in the SQL stay as written.
    """
    conn.connection.driver_connection.execute(sql)  # type: ignore[union-attr]


def apply_parts(conn: Connection, *names: str) -> None:
    for name in names:
        execute_script(conn, part_sql(name))
