"""docs/reference/ is complete: every public SQL function and view (from the catalog of a
migrated database, with who may call it), every error class and SQLSTATE (from
hivenet_db.errors and the RAISEs of the SQL files), every setting with its default (from
table hivenet.setting) and every `hivenet-db` command with its options (from the command's
parser) has its entry. A new one fails here until it is documented."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import psycopg
import pytest

from hivenet_db import errors
from hivenet_db.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"


def _sections(page: str, level: str) -> dict[str, str]:
    """The page's sections of heading ``level`` (``##``, ``###``) by their title in
    backquotes: ``### `name` `` → its text up to the next heading of that level or above."""
    text = (REFERENCE / page).read_text(encoding="utf-8")
    parts = re.split(rf"^(#{{1,{len(level)}}} .*)$", text, flags=re.MULTILINE)
    sections = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        if heading.startswith(f"{level} `"):
            sections[heading.split("`")[1]] = body
    return sections


def _rows(page: str) -> dict[str, list[str]]:
    """The table rows of a page by their first cell (without backquotes): their cells."""
    rows = {}
    for line in (REFERENCE / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_public_function_is_in_the_sql_reference_with_who_may_call_it(
        hivenet_url: str) -> None:
    with psycopg.connect(hivenet_url) as conn:
        granted: dict[str, str] = dict(conn.execute("""
            SELECT p.proname, coalesce(string_agg(DISTINCT a.grantee::regrole::text, ','), '')
            FROM pg_proc p LEFT JOIN aclexplode(p.proacl) a
              ON a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE'
            WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname !~ '^_'
            GROUP BY p.proname""").fetchall())
    documented = _sections("sql.md", "###")
    missing = sorted(set(granted) - set(documented))
    assert not missing, f"not in sql.md: {missing}"
    for name, roles in granted.items():
        who = re.search(r"\*\*Who\*\*: (.*)", documented[name])
        assert who is not None, f"sql.md: {name} says not who may call it"
        assert set(re.findall(r"`(\w+)`", who[1])) == set(roles.split(",")), (name, roles)


#: A public function's signature as the catalog prints it, defaults without their casts, as
#: sql.md prints it: ``hivenet.name(arg type DEFAULT value, ...) → result``.
SIGNATURES = """
    SELECT p.proname, format('hivenet.%s(%s) → %s', p.proname,
           regexp_replace(pg_get_function_arguments(p.oid),
                          '(DEFAULT [^,]*?)::[a-z][a-z ]*(,|$)', '\\1\\2', 'g'),
           pg_get_function_result(p.oid))
    FROM pg_proc p WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname !~ '^_'"""


def _printed_signature(section: str) -> str:
    """The signature a function's section prints: its first line in backquotes."""
    found = re.search(r"^`(hivenet\.[^`]*)`$", section, flags=re.MULTILINE)
    assert found is not None, section[:200]
    return found[1]


def test_every_public_function_has_the_signature_the_sql_reference_prints(
        hivenet_url: str) -> None:
    """Names, types, defaults and result: the parameter names are the contract of named
    notation (SPEC §8), so a rename in the catalog or in sql.md fails here. Each printed
    signature is then called in named notation (prepared, not run): every name resolves."""
    documented = _sections("sql.md", "###")
    with psycopg.connect(hivenet_url) as conn:
        signatures: dict[str, str] = dict(conn.execute(SIGNATURES).fetchall())
        assert len(signatures) > 25, signatures
        for name, signature in sorted(signatures.items()):
            assert _printed_signature(documented[name]) == signature, name
            arguments = signature[len(f"hivenet.{name}("):signature.index(") → ")]
            named = ", ".join(f"{arg} => ${i}::{type_}" for i, (arg, type_) in enumerate(
                (argument.split(" DEFAULT ")[0].split(" ", 1)
                 for argument in arguments.split(", ") if argument), 1))
            conn.execute(f"PREPARE named_call AS SELECT * FROM hivenet.{name}({named})")
            conn.execute("DEALLOCATE named_call")


def test_every_public_view_is_in_the_sql_reference(hivenet_url: str) -> None:
    with psycopg.connect(hivenet_url) as conn:
        views = {name for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'hivenet'::regnamespace "
            "AND relkind = 'v' AND relname !~ '^_'")}
    assert views, "no view in the catalog"
    assert views <= set(_rows("sql.md")), f"not in sql.md: {sorted(views - set(_rows('sql.md')))}"


def test_every_error_is_in_the_error_reference() -> None:
    rows = _rows("errors.md")
    text = (REFERENCE / "errors.md").read_text(encoding="utf-8")
    classes = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, errors.HivenetError) and cls is not errors.HivenetError]
    for cls in classes:
        if cls.sqlstate:
            assert cls.sqlstate in rows, f"errors.md: no row for {cls.sqlstate}"
            assert rows[cls.sqlstate][1] == f"`{cls.__name__}`", (cls.sqlstate, rows[cls.sqlstate])
        else:
            assert f"`{cls.__name__}`" in text, f"errors.md: {cls.__name__}"
    raised = {code for sql in (ROOT / "hivenet_db" / "sql").glob("*.sql")
              for code in re.findall(r"ERRCODE = '(HN\d+)'", sql.read_text(encoding="utf-8"))}
    assert raised, "no ERRCODE in the SQL files"
    mapped = set(errors.BY_SQLSTATE)
    assert raised <= mapped, f"raised, no exception in hivenet_db.errors: {raised - mapped}"
    assert mapped <= set(rows), f"not in errors.md: {mapped - set(rows)}"


def test_every_setting_is_in_the_settings_reference_with_its_default(hivenet_url: str) -> None:
    with psycopg.connect(hivenet_url) as conn:
        settings = conn.execute("SELECT name, value FROM hivenet.setting").fetchall()
    rows = _rows("settings.md")
    assert settings
    for name, default in settings:
        assert name in rows, f"settings.md: no row for {name}"
        assert rows[name][2] == f"`{default}`", (name, default, rows[name])


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(action for action in build_parser()._actions
               if isinstance(action, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_command_and_option_is_in_the_cli_reference(command: str) -> None:
    documented = _sections("cli.md", "##")
    assert command in documented, f"cli.md: no section for {command}"
    for action in _commands()[command]._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help", "--url", "--json", "--debug"):
                assert f"`{option}`" in documented[command], f"cli.md, {command}: {option}"
