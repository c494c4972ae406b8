"""The unreleased revision, written from the schema files (CONTRIBUTING.md, "Changing SQL").

Released revisions are history and never change. The next release's revision is written by
this module, not by hand, so that a change of SQL is made once, in ``hivenet_db/sql/``:

* its **code** (functions, views with their rules, triggers, their comments) is the
  difference between two catalogs on a scratch server: the last release's (its revisions
  replayed) and the schema files' (a fresh install). A function whose body changed is
  replaced; one whose arguments or result changed, a changed view or trigger, and whatever
  depends on something that must go, on a table's row type or type whose shape changed, or
  on a column that goes or changes, is dropped first and made again, in dependency order,
  closed to PUBLIC as the catalog has it. Grants end it as they end a fresh install
  (``_grant_roles``), and the generated functions are written again from the database's own
  settings and formats (``_recompile``);
* what is **not code** (tables, columns, types, sequences, rows) is written by hand, once,
  in the revision's ``.tables.sql`` (run between the drops and the creates) and
  ``.data.sql`` (after the creates); the way down in ``.downgrade.tables.sql`` and
  ``.downgrade.data.sql``.

``python -m hivenet_db.tools.revision`` writes the revision's ``.sql`` and
``.downgrade.sql`` (on a throwaway local server, or on the server of ``--url``, a
superuser's URL); tests/test_migrations.py fails while they are not what it writes, and
proves that replaying them gives the schema files' catalog. When the release is cut they are
frozen with the rest (migrations/RELEASES).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import sys
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import psycopg

from hivenet_db.schema import full_schema_sql
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

# The packaged migrations (hivenet_db.migrations: migrations/ of the source tree).
VERSIONS = Path(str(files("hivenet_db.migrations"))) / "versions"
RELEASES = VERSIONS.parent / "RELEASES"

# Counters and clocks of scopes, and the counters of decisions, are data made by use.
_DATA_SEQUENCE = re.compile(r"(seq|clk|decisions)_")

# One row per code object of schema hivenet: its key, what makes it, what CREATE OR REPLACE
# cannot change (functions: arguments and result; views and triggers: all of it), and how
# to drop it. Read with search_path = pg_catalog, so every name is schema-qualified.
_CODE = """
SELECT 'function ' || p.oid::regprocedure AS key,
       rtrim(pg_get_functiondef(p.oid), E'\\n') || ';'
       || coalesce(E'\\nCOMMENT ON FUNCTION ' || p.oid::regprocedure || ' IS '
                   || quote_literal(obj_description(p.oid, 'pg_proc')) || ';', '')
       -- PostgreSQL lets PUBLIC execute a new function: as the catalog has it, never.
       || CASE WHEN p.proacl IS NOT NULL AND NOT EXISTS (
                   SELECT FROM aclexplode(p.proacl) a WHERE a.grantee = 0)
               THEN format(E'\\nREVOKE EXECUTE ON FUNCTION %s FROM PUBLIC;', p.oid::regprocedure)
               ELSE '' END AS create,
       format('%s %s %s', pg_get_function_identity_arguments(p.oid),
              pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)) AS head,
       format('DROP FUNCTION %s;', p.oid::regprocedure) AS drop
FROM pg_proc p
WHERE p.pronamespace = 'hivenet'::regnamespace
UNION ALL
SELECT 'view ' || c.oid::regclass,
       format(E'CREATE VIEW %s%s AS\\n%s', c.oid::regclass,
              coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', ''),
              pg_get_viewdef(c.oid))
       || coalesce((SELECT string_agg(E'\\n' || pg_get_ruledef(r.oid), '' ORDER BY r.rulename)
                    FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN'), '')
       || coalesce((SELECT string_agg(CASE WHEN d.objsubid = 0
                        THEN format(E'\\nCOMMENT ON VIEW %s IS %L;', c.oid::regclass,
                                    d.description)
                        ELSE format(E'\\nCOMMENT ON COLUMN %s.%I IS %L;', c.oid::regclass,
                                    a.attname, d.description) END, '' ORDER BY d.objsubid)
                    FROM pg_description d
                    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.objsubid
                    WHERE d.classoid = 'pg_class'::regclass AND d.objoid = c.oid), ''),
       NULL, format('DROP VIEW %s;', c.oid::regclass)
FROM pg_class c
WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind = 'v'
UNION ALL
SELECT format('trigger %I ON %s', t.tgname, t.tgrelid::regclass),
       pg_get_triggerdef(t.oid) || ';', NULL,
       format('DROP TRIGGER %I ON %s;', t.tgname, t.tgrelid::regclass)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'hivenet'::regnamespace AND NOT t.tgisinternal
"""

# Every object of schema hivenet by its OID, as a key: code objects as _CODE names them,
# tables and types as what code depends on, and what pins code (a column default, a
# constraint, an index), which no revision may drop without writing it by hand.
_OBJECTS = """
SELECT 'pg_proc'::regclass::oid AS class, p.oid, 'function ' || p.oid::regprocedure AS key
FROM pg_proc p WHERE p.pronamespace = 'hivenet'::regnamespace
UNION ALL
SELECT 'pg_rewrite'::regclass::oid, r.oid, CASE c.relkind WHEN 'v' THEN 'view '
       ELSE 'relation ' END || c.oid::regclass
FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
WHERE c.relnamespace = 'hivenet'::regnamespace
UNION ALL
SELECT 'pg_class'::regclass::oid, c.oid, CASE c.relkind WHEN 'v' THEN 'view '
       WHEN 'i' THEN 'pin index ' ELSE 'relation ' END || c.oid::regclass
FROM pg_class c WHERE c.relnamespace = 'hivenet'::regnamespace
UNION ALL
SELECT 'pg_type'::regclass::oid, t.oid, CASE WHEN c.relkind = 'v' THEN 'view ' || c.oid::regclass
       WHEN c.oid IS NOT NULL THEN 'rowtype ' || c.oid::regclass
       ELSE 'type ' || coalesce(e.oid, t.oid)::regtype END
FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.typnamespace = 'hivenet'::regnamespace
UNION ALL
SELECT 'pg_trigger'::regclass::oid, t.oid, format('trigger %I ON %s', t.tgname, t.tgrelid::regclass)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = 'hivenet'::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'pg_attrdef'::regclass::oid, d.oid, format('pin default of %s', d.adrelid::regclass)
FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
WHERE c.relnamespace = 'hivenet'::regnamespace
UNION ALL
SELECT 'pg_constraint'::regclass::oid, k.oid, format('pin constraint %I', k.conname)
FROM pg_constraint k WHERE k.connamespace = 'hivenet'::regnamespace
"""

# What depends on a column of a table (a view or a SQL-standard body that reads it) depends on
# that column: a column added or dropped elsewhere in the table leaves it be, as PostgreSQL
# does. (A view's columns are the view's: what reads one depends on the view.)
_DEPENDS = """
SELECT d.classid, d.objid, d.refclassid, d.refobjid,
       CASE WHEN a.attname IS NOT NULL
            THEN format('column %s.%I', d.refobjid::regclass, a.attname) END AS column_key
FROM pg_depend d
LEFT JOIN (pg_attribute a JOIN pg_class t ON t.oid = a.attrelid AND t.relkind IN ('r', 'p'))
       ON d.refclassid = 'pg_class'::regclass AND a.attrelid = d.refobjid
          AND a.attnum = d.refobjsubid AND d.refobjsubid > 0
WHERE d.deptype = 'n'
"""

# The shape of every table's row type, column and type: a change of it makes its dependents
# again (code taking the row type makes it again whatever column changed).
_SHAPES = """
SELECT 'rowtype ' || c.oid::regclass, string_agg(format('%I %s %s', a.attname,
           format_type(a.atttypid, a.atttypmod), a.attnotnull), ', ' ORDER BY a.attnum)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                     AND NOT a.attisdropped
WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind IN ('r', 'p')
GROUP BY c.oid
UNION ALL
SELECT format('column %s.%I', c.oid::regclass, a.attname),
       format('%s %s', format_type(a.atttypid, a.atttypmod), a.attnotnull)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                     AND NOT a.attisdropped
WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind IN ('r', 'p')
UNION ALL
SELECT 'type ' || t.oid::regtype, string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder)
FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid
WHERE t.typnamespace = 'hivenet'::regnamespace
GROUP BY t.oid
"""

# Grants on what outlives the revision (tables, sequences, the schema, unchanged code).
_GRANTS = """
SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE ' ELSE 'TABLE ' END || c.oid::regclass,
       a.grantee::regrole::text, a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.relnamespace = 'hivenet'::regnamespace AND a.grantee <> c.relowner AND a.grantee <> 0
UNION ALL
SELECT 'FUNCTION ' || p.oid::regprocedure, a.grantee::regrole::text, a.privilege_type
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.pronamespace = 'hivenet'::regnamespace AND a.grantee <> p.proowner AND a.grantee <> 0
UNION ALL
SELECT 'SCHEMA hivenet', a.grantee::regrole::text, a.privilege_type
FROM pg_namespace n, aclexplode(n.nspacl) a
WHERE n.nspname = 'hivenet' AND a.grantee <> n.nspowner AND a.grantee <> 0
"""


class RevisionError(RuntimeError):
    """What the generator cannot write by itself; the message says what to write by hand."""


@dataclass(frozen=True)
class Code:
    """One function, view (with its rules and comments) or trigger."""

    key: str
    create: str
    head: str | None  # None: it cannot be replaced in place (views, triggers)
    drop: str


@dataclass
class Catalog:
    code: dict[str, Code]
    depends: dict[str, set[str]]           # key → the keys it references
    shapes: dict[str, str]                 # "rowtype x" / "column x.c" / "type x" → its shape
    grants: set[tuple[str, str, str]]      # (object, grantee, privilege)
    dependents: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, targets in self.depends.items():
            for target in targets:
                self.dependents.setdefault(target, set()).add(key)


def read_catalog(url: str) -> Catalog:
    """The code, dependencies, shapes and grants of schema hivenet in the database at url."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path = pg_catalog")
        code = {key: Code(key, create, head, drop)
                for key, create, head, drop in conn.execute(_CODE)}
        names = {(cls, oid): key for cls, oid, key in conn.execute(_OBJECTS)}
        depends: dict[str, set[str]] = {}
        for cls, oid, refcls, refoid, column_key in conn.execute(_DEPENDS):
            key, target = names.get((cls, oid)), column_key or names.get((refcls, refoid))
            if key is not None and target is not None and key != target:
                depends.setdefault(key, set()).add(target)
        shapes: dict[str, str] = dict(conn.execute(_SHAPES).fetchall())
        grants = {(obj, grantee, privilege) for obj, grantee, privilege
                  in conn.execute(_GRANTS) if not _DATA_SEQUENCE.search(obj)}
    return Catalog(code, depends, shapes, grants)


def _in_order(keys: Iterable[str], catalog: Catalog) -> list[str]:
    """``keys`` with every key after the keys of the set it depends on (in ``catalog``), ties
    by name: the order to create them in; reversed, to drop them."""
    wanted, done, ordered = set(keys), set[str](), list[str]()

    def visit(key: str, path: tuple[str, ...]) -> None:
        if key in done:
            return
        if key in path:
            raise RevisionError(f"dependency cycle: {' -> '.join((*path, key))}")
        for target in sorted(catalog.depends.get(key, set()) & wanted):
            visit(target, (*path, key))
        done.add(key)
        ordered.append(key)

    for key in sorted(wanted):
        visit(key, ())
    return ordered


@dataclass(frozen=True)
class Change:
    """The code part of going from catalog ``old`` to catalog ``new``."""

    drops: list[str]       # statements, dependents first
    creates: list[str]     # statements, dependencies first
    revokes: list[tuple[str, str, str]]  # grants ``old`` has and ``new`` has not, kept objects
    functions: list[str]   # the functions dropped, as regprocedure names them


def diff(old: Catalog, new: Catalog) -> Change:
    reshaped = {key for key in old.shapes.keys() | new.shapes.keys()
                if old.shapes.get(key) != new.shapes.get(key)}
    gone = set()
    for key, code in old.code.items():
        now = new.code.get(key)
        if now is None or (now.create != code.create and (code.head is None
                                                          or now.head != code.head)):
            gone.add(key)
    gone |= {key for shape in reshaped for key in old.dependents.get(shape, ())
             if key in old.code}
    # Whatever depends on something that goes must go first (DROP without CASCADE).
    pending = list(gone)
    while pending:
        for dependent in old.dependents.get(pending.pop(), ()):
            if dependent.startswith("pin "):
                raise RevisionError(
                    f"{dependent} depends on code the revision must drop and make again: "
                    "drop and make it again by hand in the revision's .tables.sql / .data.sql")
            if dependent in old.code and dependent not in gone:
                gone.add(dependent)
                pending.append(dependent)
    made = {key for key, code in new.code.items()
            if key in gone or key not in old.code or old.code[key].create != code.create}
    # What outlives the revision: what the new release grants on, and its code not made
    # again (a grant the new release no longer gives on it is revoked, also its last one).
    kept_objects = ({obj for obj, _, _ in new.grants}
                    | {_grant_object(key) for key in new.code}) - {
        _grant_object(key) for key in gone}
    return Change(
        functions=sorted(key.split(" ", 1)[1] for key in gone if key.startswith("function ")),
        drops=[old.code[key].drop for key in reversed(_in_order(gone, old))],
        creates=[new.code[key].create for key in _in_order(made, new)],
        revokes=sorted(grant for grant in old.grants - new.grants
                       if grant[0] in kept_objects or grant[0] == "SCHEMA hivenet"))


def _grant_object(key: str) -> str:
    kind, name = key.split(" ", 1)
    return f"{'TABLE' if kind == 'view' else kind.upper()} {name}"


def render(change: Change, title: str, tables: str, data: str, major: int) -> str:
    """The revision's script: drops, the hand-written tables part, creates, the hand-written
    data part, revokes, then grants and the generated functions as a fresh install makes
    them. ``major`` is the server's, which printed the views."""
    parts = [f"-- {title}\n-- Written by `python -m hivenet_db.tools.revision` from the schema "
             "files and the\n-- hand-written .tables.sql and .data.sql beside this file: do "
             "not edit it.\n"
             f"-- Views as PostgreSQL {major} prints them.\n"
             "-- Bodies are checked when they run, as pg_dump's scripts do.\n"
             "SET LOCAL check_function_bodies = off;"]
    if change.functions:
        parts.append(_dependents_sql("keep_dependents", change.functions))
    if change.drops:
        parts.append("-- Code that goes, or changes what CREATE OR REPLACE cannot.\n"
                     + "\n".join(change.drops))
    if tables.strip():
        parts.append("-- Tables, types and sequences (the .tables.sql beside this file).\n"
                     + tables.strip())
    if change.creates:
        parts.append("-- Code, in dependency order.\n" + "\n\n".join(change.creates))
    if change.functions:
        parts.append(_dependents_sql("restore_dependents", change.functions))
    if data.strip():
        parts.append("-- Rows (the .data.sql beside this file).\n" + data.strip())
    if change.revokes:
        rows = ",\n        ".join(f"({_literal(obj)}, {_literal(grantee)}, {_literal(priv)})"
                                  for obj, grantee, priv in change.revokes)
        parts.append(
            "-- Grants that only the old release had.\n"
            "DO $$\nDECLARE\n    v record;\nBEGIN\n    FOR v IN SELECT * FROM (VALUES\n"
            f"        {rows}) AS g (object, grantee, privilege)\n"
            "        WHERE to_regrole(g.grantee) IS NOT NULL LOOP\n"
            "        EXECUTE format('REVOKE %s ON %s FROM %I', v.privilege, v.object, "
            "v.grantee);\n    END LOOP;\nEND $$;")
    parts.append("-- Grants as a fresh install makes them (privileges.sql), and the generated\n"
                 "-- functions from this database's settings and formats (compile.sql).\n"
                 "SELECT hivenet._grant_roles();\nSELECT hivenet._recompile();")
    return "\n\n".join(parts) + "\n"


def _dependents_sql(name: str, functions: list[str]) -> str:
    """revision_sql/<name>.sql with the dropped functions written in where it says
    :'functions' (as psql writes in a variable)."""
    array = "ARRAY[\n" + ",\n".join(f"            {_literal(f)}" for f in functions) + "]"
    sql = files("hivenet_db.tools").joinpath("revision_sql", f"{name}.sql").read_text(
        encoding="utf-8")
    return sql.strip().replace(":'functions'", array)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _releases() -> list[tuple[str, str]]:
    """(version, revision) of every release, oldest first (migrations/RELEASES)."""
    return [(fields[0], fields[1]) for fields in (
        line.split() for line in RELEASES.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#"))]


def unreleased() -> Path | None:
    """The Python file of the revision after the last release, None when there is none."""
    released = {revision for _, revision in _releases()}
    pending = [r for r in migrate.revisions() if r not in released]
    if not pending:
        return None
    (path,) = VERSIONS.glob(f"{pending[-1]}_*.py")
    return path


def _part(revision: Path, suffix: str) -> str:
    path = revision.with_suffix(suffix)
    return path.read_text(encoding="utf-8") if path.exists() else ""


@contextlib.contextmanager
def _scratch(server_url: str, name: str) -> Iterator[str]:
    """An empty database ``name`` on the server of ``server_url``, dropped afterwards."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urllib.parse.urlsplit(server_url)._replace(path=f"/{name}").geturl()
    try:
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scripts(server_url: str) -> dict[Path, str]:
    """The unreleased revision's scripts (path → text), written from the catalogs of the last
    release and of the schema files on the server of ``server_url`` (a superuser's URL)."""
    from alembic import command

    revision = unreleased()
    if revision is None:
        return {}
    version, released = _releases()[-1]
    with _scratch(server_url, "hivenet_revision_old") as old_url, \
            _scratch(server_url, "hivenet_revision_new") as new_url:
        command.upgrade(migrate._config(old_url), released)
        with psycopg.connect(new_url, autocommit=True) as conn:
            conn.execute(full_schema_sql())
            major = conn.info.server_version // 10000  # the views are printed as it prints
        old, new = read_catalog(old_url), read_catalog(new_url)
    name = revision.stem.split("_", 1)[1].replace("_", ".")
    return {
        revision.with_suffix(".sql"): render(
            diff(old, new), f"Release {name} from {version}.",
            _part(revision, ".tables.sql"), _part(revision, ".data.sql"), major),
        revision.with_suffix(".downgrade.sql"): render(
            diff(new, old), f"Back from release {name} to {version}.",
            _part(revision, ".downgrade.tables.sql"), _part(revision, ".downgrade.data.sql"),
            major),
    }


# A view's body as the script prints it, and the major of the server that printed it.
_VIEW_BODY = re.compile(r"^(CREATE VIEW [^\n]* AS\n).*?;$", re.MULTILINE | re.DOTALL)
_PRINTED_BY = re.compile(r"^-- Views as PostgreSQL (\d+) prints them\.$", re.MULTILINE)


def written_alike(written: str, committed: str) -> bool:
    """Whether ``committed`` is what the generator wrote as ``written``. PostgreSQL 16 and
    later print a one-table view without its columns' qualifiers: between scripts written on
    servers of different majors the views' bodies are not compared (replaying the scripts,
    tests/test_migrations.py compares what they make)."""
    majors = {m.group(1) for m in map(_PRINTED_BY.search, (written, committed)) if m}
    if len(majors) == 2:
        written, committed = (_VIEW_BODY.sub(r"\1…;", _PRINTED_BY.sub("", text))
                              for text in (written, committed))
    return written == committed


def _stale(written: dict[Path, str]) -> list[Path]:
    return [path for path, text in written.items()
            if not path.exists() or not written_alike(text, path.read_text(encoding="utf-8"))]


def stale(server_url: str) -> list[Path]:
    """The unreleased revision's scripts that are not what ``scripts`` writes."""
    return _stale(scripts(server_url))


@contextlib.contextmanager
def _local_server() -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="hivenet-revision-"))
    root.chmod(0o755)  # the server's user must reach its directory below
    server = EmbeddedPostgres(root=root / "pg", fsync=False)
    server.start()
    try:
        yield server.url()
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hivenet_db.tools.revision",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a superuser's URL on a server to make scratch "
                        "databases on (default: a throwaway local server)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit status 1 when the scripts are stale")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(_local_server())
        written = scripts(url)
    stale_paths = _stale(written)
    for path in stale_paths:
        if args.check:
            print(f"stale: {path.name}")
        else:
            path.write_text(written[path], encoding="utf-8")
            print(f"wrote {path.name}")
    if not written:
        print("no unreleased revision")
    return 1 if args.check and stale_paths else 0


if __name__ == "__main__":
    sys.exit(main())
