"""The library (what an application imports: repositories, errors, Serial, the schema) never
imports the tools (hivenet_db.tools: the migration runner, the local PostgreSQL, ...; the
command, the benchmarks, the pytest plugin), so an application pulls in none of them, and the
tools' modules import each other only in one direction."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hivenet_db

PACKAGE = Path(hivenet_db.__file__).parent
TOOLS = ("hivenet_db.tools", "hivenet_db.cli", "hivenet_db.bench", "hivenet_db.testing",
         # the Django app's side for operators: its migration runs the migration runner, its
         # checks and commands are the command's counterparts (the middleware, the fields and
         # the connection are library)
         "hivenet_db.django.apps", "hivenet_db.django.checks", "hivenet_db.django.migrations",
         "hivenet_db.django.migrating", "hivenet_db.django.management")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_tool(name: str) -> bool:
    return any(name == tool or name.startswith(tool + ".") for tool in TOOLS)


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module ``from ... import`` names, a relative one (``from .urls``) resolved."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imported(path: Path) -> set[str]:
    """Every hivenet_db module ``path`` imports, at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = absolute(node, path)
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.startswith("hivenet_db")}


def library_modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if not is_tool(module_name(p))]


def test_the_library_never_imports_the_tools() -> None:
    offending = {module_name(p): sorted(filter(is_tool, imported(p)))
                 for p in library_modules()}
    assert {m: tools for m, tools in offending.items() if tools} == {}


def test_the_check_sees_the_library_and_a_tool_import() -> None:
    # Guards the test above against passing vacuously: it does read the library's modules,
    # and it does see the imports of a tool.
    names = {module_name(p) for p in library_modules()}
    assert {"hivenet_db", "hivenet_db.allocation", "hivenet_db.steps", "hivenet_db.errors"} <= names
    assert not any(is_tool(n) for n in names)
    assert "hivenet_db.tools.migrate" in imported(PACKAGE / "cli" / "database.py")
    assert "hivenet_db.urls.sqlalchemy_url" in imported(PACKAGE / "shards.py")  # relative


def test_every_command_function_runs_a_command() -> None:
    """Each ``cmd_`` function of the command's modules is the handler of a command, and each
    command's handler (a name, imported when it runs) names one."""
    import argparse

    from hivenet_db import cli
    from hivenet_db.cli.parser import handler_of

    parser = cli.build_parser()
    choices: dict[str, argparse.ArgumentParser] = \
        parser._subparsers._group_actions[0].choices  # type: ignore[union-attr,assignment]
    named = {p.get_default("handler") for p in choices.values()}
    defined = {f"{p.stem}:{name}" for p in (PACKAGE / "cli").glob("*.py")
               for name in re.findall(r"^def (cmd_\w+)\(", p.read_text(), re.M)}
    assert named == defined
    assert all(callable(handler_of(reference)) for reference in named)
