"""The functions compile.sql writes from the rows of hivenet.format and hivenet.setting, as a
fresh install from the schema files writes them: a checked-in snapshot, so that a change to
generated code shows in review. When the change is intended, rewrite the snapshot with

    HIVENET_REGENERATE=1 .venv/bin/python -m pytest tests/test_generated.py

and commit it with the change."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from hivenet_db.schema import full_schema_sql
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

SNAPSHOT = Path(__file__).with_name("snapshots") / "generated_functions.sql"
REGENERATE = "HIVENET_REGENERATE=1 .venv/bin/python -m pytest tests/test_generated.py"
DATABASE = "hivenet_generated"


@pytest.fixture(scope="module")
def fresh(hivenet_server: EmbeddedPostgres) -> Iterator[psycopg.Connection]:
    """A database installed from the schema files (hivenet-db sql), nothing else done to it."""
    with psycopg.connect(hivenet_server.url(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
        try:
            with psycopg.connect(hivenet_server.url(DATABASE), autocommit=True) as conn:
                conn.execute(full_schema_sql())
                yield conn
        finally:
            admin.execute(f"DROP DATABASE {DATABASE} WITH (FORCE)")


def generated_functions(conn: psycopg.Connection) -> list[str]:
    """The functions hivenet._recompile() writes, found by running it: the rows of pg_proc
    it updates (in a transaction rolled back, so the database keeps its own)."""
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT hivenet._recompile()")
        return [str(row[0]) for row in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p "
            "WHERE p.pronamespace = 'hivenet'::regnamespace "
            "AND p.xmin = pg_current_xact_id()::xid ORDER BY 1")]


def definitions(conn: psycopg.Connection) -> str:
    """pg_get_functiondef of every generated function, in name order."""
    return "\n".join(
        str(conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (name,)).fetchone()[0])
        for name in generated_functions(conn))


def test_recompile_writes_every_generated_function(fresh: psycopg.Connection) -> None:
    assert generated_functions(fresh) == [
        "hivenet._fast_system(text,text,text)",
        "hivenet._fast_time_id(text,jsonb)",
        "hivenet._fast_unified(text,text,text)",
        "hivenet._format_constant(text)",
        "hivenet._serial_field(text,text,text)",
        "hivenet._serial_scope(text,text)",
        "hivenet._serial_shaped(text,text)",
        "hivenet._serial_time(text,text)",
        "hivenet._serial_valid(text,text)",
        "hivenet._setting_constant(text)",
        "hivenet._step_in_window(text)",
        "hivenet._time_id_batch(text,jsonb)",
    ]


def test_generated_functions_match_the_snapshot(fresh: psycopg.Connection) -> None:
    current = definitions(fresh)
    if os.environ.get("HIVENET_REGENERATE"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(current, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    assert current == expected, (
        "the generated functions differ from tests/snapshots/generated_functions.sql; if the "
        f"change is intended, run {REGENERATE} and commit the snapshot:\n"
        + "\n".join(difflib.unified_diff(expected.splitlines(), current.splitlines(),
                                         "snapshot", "fresh install", lineterm="")))


def test_a_numeric_fast_path_counts_periods_as_period_index_does(
        fresh: psycopg.Connection) -> None:
    """_time_id_batch (and _fast_time_id) write the period of the statement's time in double
    precision, not through _period_index (which the caller would need the right to run):
    the same number for every reset a numeric format may have."""
    with fresh.transaction(force_rollback=True):
        for reset, pattern in (("second", "yyMMddHHmmss"), ("minute", "YYYYMMDDHHMI"),
                               ("hour", "YYYYMMDDHH"), ("day", "YYYYMMDD"), ("month", "YYYYMM"),
                               ("year", "YYYY")):
            fresh.execute("SELECT hivenet.define_format(%s, %s)", (
                f"every_{reset}", f'[{{"time": "{pattern}"}}, {{"seq_bits": 14}}]'))
        rows = fresh.execute(
            "SELECT f.reset, b.base / f.stride, "
            "hivenet._period_index(statement_timestamp() AT TIME ZONE 'UTC', f.reset) "
            "FROM hivenet.format f, hivenet._time_id_batch(f.name, NULL) b "
            "WHERE f.time_shift IS NOT NULL ORDER BY f.name").fetchall()
    assert len(rows) == 7 and all(fast == slow for _, fast, slow in rows), rows
