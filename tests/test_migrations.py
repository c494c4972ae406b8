"""Alembic migrations are history: every revision carries its own frozen SQL, replaying them
gives exactly the schema files, a database installed at any earlier revision upgrades to the
same catalog as a fresh install (its data still behaving), and each step can go down and up."""

from __future__ import annotations

import difflib
import re
import subprocess
from collections.abc import Callable, Iterator

import psycopg
import pytest
from alembic import command
from alembic.script import ScriptDirectory

from hivenet_db import migrate
from hivenet_db.embedded import EmbeddedPostgres, find_bin_dir
from hivenet_db.schema import full_schema_sql
from tests.helpers import scalar

REVISIONS = [script.revision for script in reversed(list(
    ScriptDirectory.from_config(migrate._config("")).walk_revisions()))]


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
    sequences of scopes and their clocks are data (made by use), and the day partitions of
    interface_call follow the clock at install (two installs on either side of the moment a
    new day comes into reach differ by one), so they are left out."""
    dump = subprocess.run(
        [find_bin_dir() / "pg_dump", "--schema-only", "--schema=hivenet", url],
        capture_output=True, text=True, check=True).stdout
    entries = re.split(r"^--\n-- Name: ", dump, flags=re.M)[1:]
    kept = []
    for entry in entries:
        if re.match(r'(SEQUENCE )?"?(seq|clk)_', entry):  # a scope's counter or clock, or a grant
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


def test_replaying_the_revisions_gives_the_schema_files(hivenet_url: str, empty_db: str) -> None:
    """Fails when a .sql file of hivenet_db/sql changed without a new revision that carries
    the change (or a revision changed without the file): see CONTRIBUTING.md."""
    # hivenet_url was installed from the schema files; empty_db replays every revision.
    replay(empty_db)
    assert migrate.current(empty_db) == REVISIONS[-1]
    assert any("next_unified_serial" in entry for entry in _catalog(hivenet_url))
    _assert_same_catalog(empty_db, hivenet_url, "replayed revisions")


def test_a_fresh_install_is_the_schema_files_stamped_at_head(empty_db: str) -> None:
    migrate.upgrade(empty_db)
    assert migrate.status(empty_db).state is migrate.State.HEAD
    with psycopg.connect(empty_db) as conn:
        assert scalar(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'dblink'") == 0
        assert scalar(conn, "SELECT to_regproc('hivenet.prepare_scope') IS NOT NULL")


UNIFIED = "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"
INTERFACE = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
SYSTEM = "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"


def _use(url: str, revision: str) -> dict[str, str]:
    """Serials, an interface claim and a finished step, as far as revision has them."""
    made: dict[str, str] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        made["unified"] = max(scalar(conn, UNIFIED) for _ in range(3))
        if revision >= "0002":
            made["interface"] = scalar(conn, INTERFACE)
            conn.execute("SELECT hivenet.claim_interface_serial(%s)", (made["interface"],))
        if revision >= "0003":
            made["system"] = scalar(conn, SYSTEM)
            attempt = scalar(conn, "SELECT attempt FROM hivenet.begin_step(%s, '{\"a\": 1}')",
                             (made["system"],))
            conn.execute("SELECT hivenet.finish_step(%s, %s, true, '{\"ok\": true}')",
                         (made["system"], attempt))
    return made


# The revision that brought each kind of record (a downgrade below it drops its table).
SINCE = {"unified": "0001", "interface": "0002", "system": "0003"}


def _still_behaves(url: str, made: dict[str, str], kept_since: str = REVISIONS[-1]) -> None:
    made = {kind: value for kind, value in made.items() if SINCE[kind] <= kept_since}
    with psycopg.connect(url, autocommit=True) as conn:
        assert scalar(conn, UNIFIED) > made["unified"], "a serial was issued again"
        if "interface" in made:
            with pytest.raises(psycopg.Error) as refused:
                conn.execute("SELECT hivenet.claim_interface_serial(%s)", (made["interface"],))
            assert refused.value.sqlstate == "HN020"
        if "system" in made:
            row = conn.execute("SELECT outcome, response FROM hivenet.begin_step(%s, "
                               "'{\"a\": 1}')", (made["system"],)).fetchone()
            assert row == ("replayed", {"ok": True})


@pytest.mark.parametrize("revision", REVISIONS[:-1])
def test_a_database_at_an_earlier_revision_upgrades_to_a_fresh_install(revision: str,
                                                                       hivenet_url: str,
                                                                       new_db: Callable[[], str]
        ) -> None:
    old = new_db()
    replay(old, revision)
    made = _use(old, revision)
    migrate.upgrade(old)
    assert migrate.current(old) == REVISIONS[-1]
    _assert_same_catalog(old, hivenet_url, f"installed at {revision}, upgraded")
    _still_behaves(old, made)


def test_upgrade_twice_is_a_no_op_and_downgrade_removes_everything(empty_db: str) -> None:
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


@pytest.mark.parametrize("revision", REVISIONS[:-1])
def test_each_revision_goes_down_one_step_and_up_again(revision: str, hivenet_url: str,
                                                       new_db: Callable[[], str]) -> None:
    """From the revision after ``revision``, with data: down to ``revision``, then back up to
    head gives the fresh catalog again."""
    db = new_db()
    following = REVISIONS[REVISIONS.index(revision) + 1]
    replay(db, following)
    made = _use(db, following)
    migrate.downgrade(db, revision)
    assert migrate.current(db) == revision
    migrate.upgrade(db)
    _assert_same_catalog(db, hivenet_url, f"down to {revision} and up again")
    _still_behaves(db, made, kept_since=revision)


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


def test_id_service_serials_of_the_old_counter_key_are_never_printed_again(
        new_db: Callable[[], str]) -> None:
    """Revision 0007 counts id_service per reconciliation type and shard instead of per
    merchant and shard: the new counters continue above every value the old ones issued, so
    the same merchant, shard and day never gets a seq again, and back on a downgrade."""
    db = new_db()
    replay(db, "0006")
    old_fields = '{"merchant": "123456789012", "shard": "05"}'
    new_fields = '{"recon_type": "01", "merchant": "123456789012", "shard": "05"}'
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT hivenet.prepare_scope('id_service', %s)", (old_fields,))
        issued = [scalar(conn, "SELECT hivenet.next_serial('id_service', %s)", (old_fields,))
                  for _ in range(3)]
    assert issued[-1].endswith("05000003")
    replay(db, "0007")
    with psycopg.connect(db, autocommit=True) as conn:
        for _ in range(2):  # from the cold counter, then from the scope's own sequence
            serial = scalar(conn, "SELECT hivenet.next_serial('id_service', %s)", (new_fields,))
            assert serial[:22] == issued[-1][:22] and serial > max(issued)
            issued.append(serial)
            conn.execute("SELECT hivenet.maintain()")
    migrate.downgrade(db, "0006")
    with psycopg.connect(db, autocommit=True) as conn:
        serial = scalar(conn, "SELECT hivenet.next_serial('id_service', %s)", (old_fields,))
        assert serial > max(issued)


def test_after_the_upgrade_to_0009_time_of_day_serials_do_not_go_back(
        new_db: Callable[[], str]) -> None:
    """Revision 0009 gives every existing counter of interface and merchant_trade a clock at
    the upgrade's instant: a step back right after the upgrade prints no earlier time, from a
    scope's own sequence and from the cold counter alike."""
    db = new_db()
    replay(db, "0008")
    own = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
    cold = "SELECT hivenet.next_serial('merchant_trade', '{\"merchant\": \"123456789012\"}')"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT hivenet.prepare_scope('interface', %s)",
                     ('{"system": "C0001", "module": "A01", "instance": "01", '
                      '"target": "B0001"}',))
        before = [scalar(conn, own), scalar(conn, cold)]
    replay(db, "0009")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        conn.execute("SELECT set_config('hivenet.fake_now', "
                     "(clock_timestamp() - interval '1 hour')::text, false)")
        after = [scalar(conn, own), scalar(conn, cold)]
    assert after[0] > before[0] and after[1] > before[1]


def test_scopes_used_before_the_lanes_continue_above_their_old_values(
        new_db: Callable[[], str]) -> None:
    """Revision 0017 starts every lane of unified and system above every value their counters
    reached (scope sequences, parked or not, and the cold counter), so no scope goes back
    when it moves to its lane; its downgrade restarts those counters above the lanes."""
    db = new_db()
    replay(db, "0016")
    unified = "SELECT hivenet.next_unified_serial(%s, 'A01', %s)"
    scopes = [("C0001", "01"), ("C0001", "02"), ("C0002", "01")]
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT hivenet.prepare_scope('unified', %s)",
                     ('{"system": "C0001", "module": "A01", "instance": "01"}',))
        conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01') "
                     "FROM generate_series(1, 500)")
        conn.execute("SELECT hivenet.next_system_serial('C0003', 'A01', '01') "
                     "FROM generate_series(1, 300)")  # the cold counter of system
        before = {s: scalar(conn, unified, s) for s in scopes}  # C0001/02, C0002: cold
        before_system = scalar(conn, "SELECT hivenet.next_system_serial('C0003', 'A01', '01')")
        assert scalar(conn, "SELECT count(*) FROM hivenet.scope_pending") > 0
    migrate.upgrade(db)
    with psycopg.connect(db, autocommit=True) as conn:
        assert scalar(conn, "SELECT count(*) FROM hivenet.scope_pending") == 0
        after = {s: scalar(conn, unified, s) for s in scopes}
        for scope in scopes:
            assert after[scope] > before[scope] and after[scope][:18] == before[scope][:18]
        after_system = scalar(conn, "SELECT hivenet.next_system_serial('C0003', 'A01', '01')")
        assert after_system > before_system
        conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01') "
                     "FROM generate_series(1, 700)")  # its lane beyond its old sequence
        laned = {s: scalar(conn, unified, s) for s in scopes}
    migrate.downgrade(db, "0016")
    with psycopg.connect(db, autocommit=True) as conn:
        for scope in scopes:
            assert scalar(conn, unified, scope) > laned[scope]
