"""The SQL examples of docs/guides/formats.md run as written, and print what the comments say."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

from tests.helpers import SetClock

DOC = Path(__file__).resolve().parent.parent / "docs" / "guides" / "formats.md"


def test_every_sql_example_runs(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, "2026-11-23 18:42:10+00")
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 8
    results = {}
    for block in blocks:
        for statement in (s.strip() for s in re.sub(r"--[^\n]*", "", block).split(";")):
            if statement:
                cursor = db.execute(statement)  # an UPDATE of a setting returns no rows
                results[statement] = cursor.fetchall() if cursor.description else []
    printed = {str(value) for rows in results.values() for row in rows for value in row}
    for expected in ("C0001A0101202611230000000001", "123456789012202611230500000" "1",
                     "999999999999202611230500000" "1", "12345678901220261123184210000001",
                     "26112318421000001", "OR-0042261123001", "001-0001", "002-0002",
                     "B202611241", "555555555555202611230500000" "1", "4278242250096641",
                     "4278242250096643", "547615008012419073"):
        assert expected in printed, expected
