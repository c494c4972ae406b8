"""Alembic migrations are history per release (CONTRIBUTING.md): a released revision never
changes (migrations/RELEASES records each one's hash); a database at every released revision,
with data in it, upgrades to the catalog of a fresh install from the schema files and goes on
working; replaying the revisions gives exactly that catalog; going down to base removes
everything."""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command
from sqlalchemy.exc import DBAPIError

import hivenet_db
from hivenet_db.schema import PARTS, full_schema_sql
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres, find_bin_dir
from hivenet_db.tools.revision import stale as stale_scripts
from hivenet_db.tools.revision import written_alike
from tests.helpers import share_fallback

MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"
# 0.1.0's revision: what 0.2.0's revision (0002) upgrades, keeping an application's column
# defaults, stopping at its views, preparing the one-scope formats.
FROM_0_1_0 = "0001"
AT_0_2_0 = "0002"
VERSIONS = MIGRATIONS / "versions"


def _releases() -> list[tuple[str, str, str]]:
    """(version, revision, sha256) of every release, oldest first, from migrations/RELEASES."""
    lines = (MIGRATIONS / "RELEASES").read_text(encoding="utf-8").splitlines()
    return [(fields[0], fields[1], fields[2]) for fields in
            (line.split() for line in lines if line.strip() and not line.startswith("#"))]


def revision_digest(revision: str) -> str:
    """sha256 over the revision's Python file and its frozen SQL, as RELEASES records it."""
    digest = hashlib.sha256()
    for path in sorted(VERSIONS.glob(f"{revision}_*")):
        if path.suffix in (".py", ".sql"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def new_db(hivenet_server: EmbeddedPostgres) -> Iterator[Callable[[], str]]:
    """Makes empty databases (nothing of hivenet in them); all dropped after the test."""
    made: list[str] = []

    def _make() -> str:
        name = f"hivenet_empty_{len(made)}"
        with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return hivenet_server.url(name)

    yield _make
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def empty_db(new_db: Callable[[], str]) -> str:
    return new_db()


def _catalog(url: str) -> list[str]:
    """Schema hivenet as pg_dump sees it (tables, columns, constraints, indexes, functions
    with their bodies, security and settings, views, triggers, grants), one entry per object,
    sorted; plus the rows of the settings and formats, which the schema defines. Counter
    sequences of scopes and their clocks, and the counters of decisions, are data (made by
    use), and the day partitions of
    interface_call follow the clock at install (two installs on either side of the moment a
    new day comes into reach differ by one), so they are left out."""
    dump = subprocess.run(
        [find_bin_dir() / "pg_dump", "--schema-only", "--schema=hivenet", url],
        capture_output=True, text=True, check=True).stdout
    entries = re.split(r"^--\n-- Name: ", dump, flags=re.M)[1:]
    kept = []
    for entry in entries:
        if re.match(r'(SEQUENCE )?"?(seq|clk|decisions)_', entry):  # a counter or clock, a grant
            continue
        if re.match(r"interface_call_[0-9]{8}(?![0-9])", entry):  # a day's partition, its indexes
            continue
        lines = [line for line in entry.splitlines() if line.strip()
                 and not line.startswith(("--", "SET ", "SELECT pg_catalog.", "\\"))]
        kept.append(entry.splitlines()[0] + "\n" + "\n".join(lines))
    with psycopg.connect(url) as conn:
        for table in ("hivenet.setting", "hivenet.format"):
            kept += [f"{table}: {row}" for row in conn.execute(
                f"SELECT to_jsonb(t) FROM {table} t ORDER BY 1::text")]
    return sorted(kept)


def _assert_same_catalog(url: str, expected_url: str, what: str) -> None:
    got, expected = _catalog(url), _catalog(expected_url)
    assert got == expected, "\n".join(difflib.unified_diff(
        expected, got, "fresh install", what, lineterm=""))


def replay(url: str, revision: str = "head") -> None:
    """Run the revisions themselves (migrate.upgrade installs an empty database from the
    schema files instead)."""
    command.upgrade(migrate._config(url), revision)


def test_replaying_the_revisions_gives_the_schema_files(new_db: Callable[[], str]) -> None:
    """The catalog, not only the text: what alembic runs equals what `hivenet-db sql` gives."""
    replayed, from_files = new_db(), new_db()
    command.upgrade(migrate._config(replayed), "head")
    assert migrate.current(replayed) == migrate.head()
    with psycopg.connect(from_files, autocommit=True) as conn:
        conn.execute(full_schema_sql())
    assert any("next_unified_serial" in entry for entry in _catalog(from_files))
    _assert_same_catalog(replayed, from_files, "replayed revisions")


def test_upgrade_twice_is_a_no_op_and_downgrade_removes_everything(empty_db: str) -> None:
    migrate.upgrade(empty_db)
    head = migrate.current(empty_db)
    migrate.upgrade(empty_db)  # safe to run again
    assert migrate.current(empty_db) == head
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("""SELECT hivenet.prepare_scope('unified',
                        '{"system": "C0001", "module": "A01", "instance": "01"}')""")
        conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    migrate.downgrade(empty_db, "base")
    assert migrate.current(empty_db) is None
    with psycopg.connect(empty_db) as conn:
        leftovers = conn.execute("""
            SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname LIKE 'hivenet%'
            UNION ALL SELECT 'relation ' || relname FROM pg_class WHERE relname ~ 'hivenet'
        """).fetchall()
    assert leftovers == []


def test_every_schema_file_is_applied() -> None:
    """A file of hivenet_db/sql/ missing from schema.PARTS would never be installed; the
    roles' bootstrap is the one file run on its own (by `hivenet-db bootstrap`)."""
    files = {path.stem for path in (Path(hivenet_db.__file__).parent / "sql").glob("*.sql")}
    assert sorted(files - {"bootstrap"}) == sorted(PARTS)


def test_sql_files_have_no_bare_raise() -> None:
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


def test_released_revisions_never_change() -> None:
    """What databases in the field ran stays as it was; a change goes into the next release's
    revision (CONTRIBUTING.md, "Changing SQL")."""
    releases = _releases()
    assert releases, "migrations/RELEASES names no release"
    for version, revision, recorded in releases:
        assert revision_digest(revision) == recorded, (
            f"revision {revision} of release {version} changed; released revisions never "
            "change: put the change into the next release's revision instead")


def test_each_revision_commits_on_its_own(empty_db: str, tmp_path: Path) -> None:
    """env.py runs each revision in a transaction of its own (so a revision may use a value an
    earlier one added to an enum): a later revision that fails leaves the earlier ones in."""
    shutil.copytree(MIGRATIONS, tmp_path / "migrations",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "migrations" / "versions" / "9999_fails.py").write_text(
        f"from alembic import op\nrevision = '9999'\ndown_revision = {migrate.head()!r}\n"
        "branch_labels = None\ndepends_on = None\n\n\n"
        "def upgrade() -> None:\n    op.execute('SELECT 1 / 0')\n")
    config = migrate._config(empty_db)
    config.set_main_option("script_location", str(tmp_path / "migrations"))
    with pytest.raises(DBAPIError, match="division by zero"):
        command.upgrade(config, "head")
    assert migrate.current(empty_db) == migrate.head()


def test_the_unreleased_revision_is_written_from_the_schema_files(
        hivenet_server: EmbeddedPostgres) -> None:
    """Its scripts are what the generator writes from the schema files and the hand-written
    parts beside them (CONTRIBUTING.md, "Changing SQL"), not edited by hand."""
    stale = stale_scripts(hivenet_server.url())
    assert not stale, (f"{[path.name for path in stale]} stale: run "
                       "`python -m hivenet_db.tools.revision`")


def test_scripts_written_on_another_major_differ_only_in_how_it_prints_views() -> None:
    """PostgreSQL 16 prints a one-table view without qualifiers: between majors the views'
    bodies are left to the replaying tests, and anything else must still be the same."""
    def script(major: int, view: str, function: str) -> str:
        return (f"-- Release x.\n-- Views as PostgreSQL {major} prints them.\n\n"
                f"CREATE VIEW hivenet.v AS\n SELECT {view}\n   FROM hivenet.t a;\n"
                f"COMMENT ON VIEW hivenet.v IS 'v';\n\nCREATE FUNCTION hivenet.f() {function};\n")

    pg15 = script(15, "a.key AS k,\n    a.n", "AS 'x'")
    assert written_alike(script(18, "key AS k,\n    n", "AS 'x'"), pg15)
    assert not written_alike(script(18, "key AS k,\n    n", "AS 'y'"), pg15)
    assert not written_alike(script(15, "key AS k,\n    n", "AS 'x'"), pg15)


def test_unreleased_changes_collect_in_one_revision() -> None:
    """After the newest release there is at most one revision more: the next release's."""
    released = {revision for _, revision, _ in _releases()}
    unreleased = [r for r in migrate.revisions() if r not in released]
    assert len(unreleased) <= 1, f"unreleased revisions {unreleased}: collect them in one"


#: Each public function's input types in order and how many of them have defaults.
_PUBLIC_ARGUMENTS = """
    SELECT p.proname, p.proargtypes::regtype[]::text[], p.pronargdefaults
    FROM pg_proc p WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname !~ '^_'
    ORDER BY 1"""


@pytest.mark.parametrize("release", [r[:2] for r in _releases()], ids=lambda r: r[0])
def test_every_released_function_is_called_by_position_as_before(
        release: tuple[str, str], new_db: Callable[[], str]) -> None:
    """SPEC §8: a later version may rename nothing a positional caller sees, and may only add
    optional parameters at the end. Each public function of the release is called on a fresh
    install by position with the release's argument types, with every argument and with the
    required ones only (prepared: resolved by the server, not run)."""
    _, revision = release
    released = new_db()
    replay(released, revision)
    with psycopg.connect(released) as conn:
        functions = conn.execute(_PUBLIC_ARGUMENTS).fetchall()
    assert len(functions) > 10, functions
    with psycopg.connect(new_db(), autocommit=True) as conn:
        conn.execute(full_schema_sql())
        for name, types, defaults in functions:
            for count in {len(types), len(types) - defaults}:
                arguments = ", ".join(f"${i}::{t}" for i, t in enumerate(types[:count], 1))
                conn.execute(f"PREPARE positional AS SELECT * FROM hivenet.{name}({arguments})")
                conn.execute("DEALLOCATE positional")


# What a database holds after use: serials of a scope, a claim, an interface call, a finished
# step with its response, a finished keyed request. Kept to the API of the first release.
_USE = (
    "SELECT hivenet.claim('orders', 'order-1')",
    "SELECT hivenet.finish_step(%(step)s, 1, true, '{\"paid\": 100}')",
    "SELECT hivenet.finish_request('http', 'key-1', 1, true, '{\"status\": 201}')",
)


def _set_as_upgraded(conn: psycopg.Connection) -> None:
    """A release that refuses unprepared scopes (0.2.0 on) set as an upgrade from 0.1.0 leaves
    it: the standard's formats drawing unprepared scopes from their shared fallback."""
    if conn.execute("SELECT FROM hivenet.setting WHERE name = 'shared_fallback'").rowcount:
        share_fallback(conn, "interface", "system", "unified", promote=True)


def _use(url: str) -> str:
    """Puts data of every kind in (the release _set_as_upgraded); returns the newest unified
    serial issued."""
    with psycopg.connect(url, autocommit=True) as conn:
        _set_as_upgraded(conn)
        serial = conn.execute(
            "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')").fetchone()[0]
        step = conn.execute("SELECT hivenet.next_system_serial('C0001', 'A01', '01')"
                            ).fetchone()[0]
        conn.execute("SELECT * FROM hivenet.begin_step(%s)", [step])
        conn.execute("SELECT * FROM hivenet.begin_request('http', 'key-1', '{\"n\": 1}')")
        conn.execute("SELECT hivenet.claim_interface_serial("
                     "hivenet.next_interface_serial('C0001', 'A01', '01', 'C0002'))")
        for statement in _USE:
            conn.execute(statement, {"step": step})
        conn.execute("CREATE TABLE public.used_step AS SELECT %s::text AS serial", [step])
    return str(serial)


def _still_works(url: str, last_serial: str) -> None:
    """After the upgrade the data goes on meaning what it meant: the scope counts on, a scope
    never used before is not refused (the release drew it from the format's cold counter),
    the finished step and request replay, the claim still refuses its key."""
    with psycopg.connect(url, autocommit=True) as conn:
        step = conn.execute("SELECT serial FROM public.used_step").fetchone()[0]
        serial = conn.execute(
            "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')").fetchone()[0]
        assert serial > last_serial
        for sql in ("SELECT hivenet.next_unified_serial('C0009', 'A01', '01')",
                    "SELECT hivenet.next_interface_serial('C0009', 'A01', '01', 'C0002')"):
            assert conn.execute(sql).fetchone()[0].startswith("C0009A0101")
        assert conn.execute("SELECT outcome, response FROM hivenet.begin_step(%s)",
                            [step]).fetchone() == ("replayed", {"paid": 100})
        assert conn.execute(
            "SELECT outcome, response FROM hivenet.begin_request('http', 'key-1', '{\"n\": 1}')"
        ).fetchone() == ("replayed", {"status": 201})
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT hivenet.claim('orders', 'order-1')")
        assert refused.value.sqlstate == "HN040"


@pytest.mark.parametrize("release", [r[:2] for r in _releases()], ids=lambda r: r[0])
def test_every_release_upgrades_with_its_data_to_a_fresh_install(
        release: tuple[str, str], new_db: Callable[[], str]) -> None:
    _, revision = release
    upgraded, fresh = new_db(), new_db()
    replay(upgraded, revision)
    last_serial = _use(upgraded)
    replay(upgraded, "head")
    assert migrate.current(upgraded) == migrate.head()
    with psycopg.connect(fresh, autocommit=True) as conn:
        conn.execute(full_schema_sql())
    # The formats whose cold counter the release drew from go on drawing from it: so
    # configured, a fresh install has the same catalog.
    with psycopg.connect(upgraded, autocommit=True) as conn:
        assert dict(conn.execute(
            "SELECT name, value FROM hivenet.setting "
            "WHERE name IN ('shared_fallback', 'promote_fallback_scopes')").fetchall()) == {
            "shared_fallback": "interface,system,unified",
            "promote_fallback_scopes": "interface,system,unified"}
    with psycopg.connect(fresh, autocommit=True) as conn:
        share_fallback(conn, "interface", "system", "unified", promote=True)
    _assert_same_catalog(upgraded, fresh, f"release {release[0]} upgraded")
    _still_works(upgraded, last_serial)


def test_an_upgrade_prepares_the_one_scope_formats_after_what_they_drew(
        new_db: Callable[[], str]) -> None:
    """per_second, drawn from its cold counter by the release, gets its one scope prepared by
    the upgrade, counting on after every value the release issued (guarantee 2)."""
    released = FROM_0_1_0
    url = new_db()
    replay(url, released)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        conn.execute("SET hivenet.fake_now = '2026-11-23 10:00:00+00'")
        issued = [conn.execute("SELECT hivenet.next_serial('per_second', '{}')").fetchone()[0]
                  for _ in range(3)]
    replay(url, "head")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET hivenet.fake_now = '2026-11-23 10:00:00+00'")
        assert conn.execute("SELECT scope FROM hivenet.scope WHERE format = 'per_second'"
                            ).fetchall() == [("",)]
        after = conn.execute("SELECT hivenet.next_serial('per_second', '{}')").fetchone()[0]
    assert after > max(issued)


def test_an_applications_serial_default_survives_the_upgrade(new_db: Callable[[], str]) -> None:
    """A table of the application's whose column default calls a function the upgrade makes
    again (new parameter names need a DROP) keeps its default, now calling the new function."""
    released = FROM_0_1_0
    db = new_db()
    replay(db, released)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.payment (id int, serial text NOT NULL "
                     "DEFAULT hivenet.next_unified_serial('C0001', 'A01', '01'))")
        conn.execute("SELECT hivenet.prepare_scope('unified', "
                     "'{\"system\": \"C0001\", \"module\": \"A01\", \"instance\": \"01\"}')")
        conn.execute("INSERT INTO public.payment (id) VALUES (1)")
    replay(db, "head")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO public.payment (id) VALUES (2)")
        serials = [s for (s,) in conn.execute("SELECT serial FROM public.payment ORDER BY id")]
        default = conn.execute(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
            "WHERE adrelid = 'public.payment'::regclass").fetchone()[0]
    assert [s[-10:] for s in serials] == ["0000000001", "0000000002"]
    assert "hivenet.next_unified_serial('C0001'" in default


def test_an_applications_view_on_a_function_made_again_stops_the_upgrade_naming_it(
        new_db: Callable[[], str]) -> None:
    """Anything else of the application's that calls such a function would be dropped with it:
    the upgrade stops before changing anything, and says what to do."""
    released = FROM_0_1_0
    db = new_db()
    replay(db, released)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.parsed AS "
                     "SELECT hivenet.parse_serial('C0001A0101201507100123456789') AS fields")
    with pytest.raises(psycopg.Error, match=r"and view parsed calls .*drop it before the "
                       r"upgrade") as stopped:
        replay(db, "head")
    assert stopped.value.sqlstate == "2BP01"
    assert migrate.current(db) == released


def _policies(conn: psycopg.Connection) -> None:
    """A namespace's policy of 0.1.0's fields and one of 0.2.0's (a key rule)."""
    conn.execute("SELECT hivenet.set_namespace_policy('http', '2 days', 'json')")
    conn.execute("SELECT hivenet.set_namespace_policy('strict', key_min_length => 32)")


def _downgrade(revision: str, released: str, new_db: Callable[[], str],
               newest_data: Callable[[psycopg.Connection], None]) -> str:
    """A database at ``released`` with data, upgraded to ``revision``, given ``newest_data``,
    then downgraded: the catalog of ``released`` again, and the data still works."""
    downgraded, at_release = new_db(), new_db()
    replay(downgraded, released)
    last_serial = _use(downgraded)
    replay(downgraded, revision)
    with psycopg.connect(downgraded, autocommit=True) as conn:
        newest_data(conn)
    command.downgrade(migrate._config(downgraded), released)
    assert migrate.current(downgraded) == released
    replay(at_release, released)
    with psycopg.connect(at_release, autocommit=True) as conn:
        _set_as_upgraded(conn)  # as _use set the downgraded database: the settings are rows
    _assert_same_catalog(downgraded, at_release, f"downgraded to {released}")
    _still_works(downgraded, last_serial)
    return downgraded


def test_the_newest_revision_downgrades_to_the_one_before(
        new_db: Callable[[], str]) -> None:
    """The unreleased revision goes back down to the last release, with namespaces' policies
    set."""
    _downgrade("head", migrate.revisions()[-2], new_db, _policies)


def test_0_2_0_downgrades_to_0_1_0(new_db: Callable[[], str]) -> None:
    """0.2.0's revision goes back down to 0.1.0 with what only 0.2.0 has (a key rule of a
    namespace's policy): the rule's row goes, the retention that 0.1.0 had stays."""
    downgraded = _downgrade(AT_0_2_0, FROM_0_1_0, new_db, _policies)
    with psycopg.connect(downgraded, autocommit=True) as conn:
        assert conn.execute("SELECT namespace, retention FROM hivenet.request_namespace"
                            ).fetchall() == [("http", dt.timedelta(days=2))]
