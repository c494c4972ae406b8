"""Alembic migrations: equal to the full schema file, idempotent, and fully reversible."""

from __future__ import annotations

import difflib
import re
import subprocess

import psycopg
import pytest

from hivenet_db import migrate
from hivenet_db.embedded import find_bin_dir
from hivenet_db.schema import full_schema_sql


@pytest.fixture
def empty_db(hivenet_server):
    """A database with nothing of hivenet in it."""
    name = "hivenet_empty"
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    yield hivenet_server.url(name)
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _schema_dump(url: str) -> str:
    dump = subprocess.run(
        [find_bin_dir() / "pg_dump", "--schema-only", "--schema=hivenet", "--no-owner",
         "--no-privileges", url], capture_output=True, text=True, check=True).stdout
    lines = [line for line in dump.splitlines()
             if line.strip()
             # \restrict lines carry a random key; SET lines are session settings.
             and not line.startswith(("--", "SET ", "SELECT pg_catalog.", "\\"))]
    return "\n".join(lines)


def test_migrated_schema_equals_the_full_schema_file(hivenet_url, empty_db):
    # hivenet_url was migrated by alembic; empty_db gets the one-file schema.
    with psycopg.connect(empty_db, autocommit=False) as conn:
        conn.execute(full_schema_sql())
    migrated, from_file = _schema_dump(hivenet_url), _schema_dump(empty_db)
    assert "CREATE FUNCTION hivenet.next_unified_serial" in migrated
    assert migrated == from_file, "\n".join(difflib.unified_diff(
        migrated.splitlines(), from_file.splitlines(), "alembic", "schema file", lineterm=""))


def test_upgrade_twice_is_a_no_op_and_downgrade_removes_everything(empty_db):
    migrate.upgrade(empty_db)
    head = migrate.current(empty_db)
    migrate.upgrade(empty_db)  # safe to run again
    assert migrate.current(empty_db) == head
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    migrate.downgrade(empty_db, "base")
    assert migrate.current(empty_db) is None
    with psycopg.connect(empty_db) as conn:
        leftovers = conn.execute("""
            SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname LIKE 'hivenet%'
            UNION ALL SELECT 'relation ' || relname FROM pg_class WHERE relname ~ 'hivenet'
            UNION ALL SELECT 'extension ' || extname FROM pg_extension WHERE extname = 'dblink'
        """).fetchall()
    assert leftovers == []


def test_every_revision_can_go_down_and_up_again(empty_db):
    migrate.upgrade(empty_db)
    head = migrate.current(empty_db)
    revisions = ["0001", "0002", "0003", "0004"]
    for revision in reversed(revisions):
        migrate.downgrade(empty_db, revision)
        assert migrate.current(empty_db) == revision
    migrate.upgrade(empty_db)
    assert migrate.current(empty_db) == head


def test_sql_files_have_no_bare_raise():
    """Every RAISE names its SQLSTATE (SPEC §7): no P0001 ever reaches a caller."""
    sql = full_schema_sql()
    raises = re.findall(r"RAISE\s+(?:EXCEPTION\s+)?[^;]*;", sql)
    assert raises
    for statement in raises:
        # A re-raise inside an exception handler, or a message that is no error.
        if statement.strip() == "RAISE;" or re.match(
                r"RAISE\s+(WARNING|NOTICE|INFO|LOG|DEBUG)\b", statement):
            continue
        assert re.search(r"ERRCODE\s*=\s*'HN\d{3}'", statement), statement
