"""Least privilege: a role with USAGE on the schema runs the application API and no more."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from tests.helpers import scalar, usage_only_role

ROLE = "hivenet_app_test"
BOOTSTRAP_ROLES = ("hivenet_app", "hivenet_admin")


@contextmanager
def acting_as(db: psycopg.Connection, role: str) -> Iterator[psycopg.Connection]:
    """``db`` (a superuser's connection) acting as ``role``, one of the roles `hivenet-db
    bootstrap` makes, with exactly the grants privileges.sql gives it. The roles are
    cluster-wide: made here when missing and dropped again afterwards, so that no other test's
    database (or the template) is installed while they exist."""
    made = [name for name in BOOTSTRAP_ROLES
            if scalar(db, "SELECT to_regrole(%s) IS NULL", (name,))]
    for name in made:
        db.execute(f"CREATE ROLE {name} NOLOGIN")
    db.execute("SELECT hivenet._grant_roles()")
    db.execute(f"SET ROLE {role}")
    try:
        yield db
    finally:
        db.execute("RESET ROLE")
        for name in made:
            db.execute(f"DROP OWNED BY {name}")
            db.execute(f"DROP ROLE {name}")


@pytest.fixture
def app(db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """The test's connection acting as an application role granted only USAGE."""
    with usage_only_role(db, ROLE) as app:
        yield app


def test_the_application_api_works_with_usage_only(app: psycopg.Connection) -> None:
    unified = scalar(app, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    system = scalar(app, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    interface = scalar(
        app, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0001')")
    assert scalar(app, """SELECT count(*) FROM hivenet.next_serials('id_service',
                          '{"merchant": "123456789012",
                            "shard": "01"}', 3)""") == 3
    assert scalar(app, "SELECT hivenet.parse_serial(%s)", (unified,))["format"] == "unified"
    app.execute("SELECT hivenet.claim_interface_serial(%s, %s, %s)", (interface, unified, system))
    assert scalar(app, "SELECT count(*) FROM hivenet.call_chain(%s)", (unified,)) == 1
    app.execute("SELECT hivenet.claim('inventory.purchase', 'order-1')")
    attempt = scalar(app, "SELECT attempt FROM hivenet.begin_step(%s, '{}')", (system,))
    app.execute("SELECT hivenet.finish_step(%s, %s, true, '{}')", (system, attempt))
    assert app.execute("SELECT * FROM hivenet.begin_step(%s, '{}')", (system,)).fetchone() == (
        "replayed", 1, {})  # the fast path, with the caller's rights (steps.sql)
    attempt = scalar(app, "SELECT attempt FROM hivenet.begin_request('orders', 'k1', '{}')")
    app.execute("SELECT hivenet.finish_request('orders', 'k1', %s, true, '{}')", (attempt,))
    assert isinstance(scalar(app, "SELECT hivenet.now()"), dt.datetime)


@pytest.mark.parametrize("sql", [
    """SELECT hivenet._promote_scope(f, 'X', '{}') FROM hivenet.format f LIMIT 1""",
    """SELECT hivenet.prepare_scope('unified', '{"system": "C0001", "module": "A01",
       "instance": "09"}')""",
    "SELECT hivenet._allocate('unified', NULL, ARRAY['C0001', 'A01', '01'], 1)",
    "SELECT hivenet.define_format('mine', '[{\"seq\": 3, \"reset\": \"never\"}]')",
    "SELECT hivenet.register_system('C0001')",
    "SELECT hivenet.maintain()",
    "SELECT hivenet.own_instances('01-09')",
    "SELECT hivenet.set_claim_expiry('q', '1 day')",
    "SELECT hivenet.set_request_retention('orders', '1 day')",
    "SELECT hivenet.resolve_request('orders', 'k1', 1, true, 'note')",
    "SELECT * FROM hivenet.request_attempt",
    "SELECT * FROM hivenet.setting",
    "UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'",
])
def test_private_and_administrative_parts_are_refused(app: psycopg.Connection, sql: Any) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(sql)


def test_the_application_role_reads_succeeded_steps_only_through_the_replay_view(
        app: psycopg.Connection, db: psycopg.Connection) -> None:
    """The deliberate grant of the replay fast path (privileges.sql): view _step_replay shows
    the succeeded steps' serial, attempt, fingerprint, unified serial and response; nothing of
    other states or namespaces, no write, no other column, no table."""
    done, running = (scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
                     for _ in range(2))
    for serial in (done, running):
        db.execute("SELECT * FROM hivenet.begin_step(%s, '{}')", (serial,))
    db.execute("SELECT hivenet.finish_step(%s, 1, true, '{\"paid\": 1}')", (done,))
    db.execute("SELECT hivenet.finish_request('orders', 'k9', "
               "(SELECT attempt FROM hivenet.begin_request('orders', 'k9')), true, '{}')")
    rows = app.execute("SELECT * FROM hivenet._step_replay").fetchall()
    assert [(r[0], r[1], r[4]) for r in rows] == [(done, 1, {"paid": 1})]
    columns = app.execute("SELECT * FROM hivenet._step_replay LIMIT 0").description or []
    assert [c.name for c in columns] == ["system_serial", "attempt", "fingerprint",
                                         "unified_serial", "response"]
    for sql in ("UPDATE hivenet._step_replay SET response = '{}'",
                "DELETE FROM hivenet._step_replay",
                "SELECT response FROM hivenet.request_attempt",
                f"SELECT * FROM hivenet._begin_attempt('hivenet.steps', '{running}', NULL, "
                "'replay', NULL, NULL)"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
            app.execute(sql)


def test_the_application_role_starts_new_steps_through_the_start_view_and_no_more(
        app: psycopg.Connection, db: psycopg.Connection) -> None:
    """The deliberate grant of a new step's start (privileges.sql): the application role may
    insert into view _step_start, whose rule writes attempt 1 of a new step as begin_step
    would; input begin_step refuses (or sends to its full path) writes nothing, a step that
    has an attempt is left alone, and the view can be neither read nor changed otherwise."""
    serial, other = (scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
                     for _ in range(2))
    start = "INSERT INTO hivenet._step_start VALUES (%s, '{}', %s, %s) RETURNING 1"
    assert app.execute(start, (serial, None, None)).fetchall() == [(1,)]
    assert app.execute(start, (serial, None, None)).fetchall() == []  # it has an attempt
    old = "C0001A0101" + "20200101" + other[18:]  # valid, dated before step_retention
    for refused in [("not a serial", None, None), (other, "not a serial", None),
                    (other, None, dt.timedelta(0)), (old, None, None)]:
        assert app.execute(start, refused).fetchall() == [], refused
    db.execute("RESET ROLE")  # app is db acting as the role: read the table as the owner
    stored = db.execute("SELECT key, attempt, state::text FROM hivenet.request_attempt "
                        "WHERE namespace = 'hivenet.steps' AND key IN (%s, %s, %s, %s) "
                        "ORDER BY key", (serial, other, old, "not a serial")).fetchall()
    db.execute(f"SET ROLE {ROLE}")
    assert stored == [(serial, 1, "processing")]
    with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
        app.execute("SELECT * FROM hivenet._step_start")
    assert scalar(app, "SELECT has_table_privilege('hivenet._step_start', "
                       "'SELECT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')") is False


def test_no_new_function_is_public_by_accident(db: psycopg.Connection) -> None:
    """Every function executable by PUBLIC is one privileges.sql grants on purpose."""
    public = {row[0] for row in db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace
          AND has_function_privilege('public', p.oid, 'EXECUTE')
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')""")}
    assert {name.split("(")[0] for name in public} == {
        "hivenet.now", "hivenet._fake_now", "hivenet.next_unified_serial",
        "hivenet.next_system_serial", "hivenet.next_interface_serial", "hivenet.next_serial",
        "hivenet.next_serials", "hivenet.parse_serial",
        "hivenet.claim_interface_serial", "hivenet.call_chain", "hivenet.claim",
        "hivenet.begin_step", "hivenet.finish_step", "hivenet._step_lease",
        "hivenet.begin_request", "hivenet.finish_request",
        "hivenet._period_index", "hivenet._period_start", "hivenet._scope_counter_value",
        "hivenet._reporting_local_now",
        "hivenet.ownership",  # what this database owns among several primaries (ownership.sql)
        # In view interface_calls, run as its reader (parse.sql: generated from the layouts).
        "hivenet._serial_field", "hivenet._serial_time",
        # Inlined into begin_step, run as the caller (steps.sql).
        "hivenet._begin_step", "hivenet._step_in_window", "hivenet._fingerprint",
        # In the rules of views _step_start and _request_start, run as their inserter
        # (steps.sql, requests.sql).
        "hivenet._serial_valid", "hivenet._step_start_valid", "hivenet._request_start_valid",
        # Inlined into those checks and _step_in_window: the callers' clock, the bound on
        # intervals, the rule for names and keys (clock.sql, claims.sql).
        "hivenet._caller_now", "hivenet._longest_interval", "hivenet._interval_allowed",
        "hivenet._name_valid",
        # Inlined into next_unified_serial / next_system_serial, run as the caller (allocate.sql).
        "hivenet._fast_unified", "hivenet._fast_system", "hivenet._format_constant",
        "hivenet._setting_constant", "hivenet._scope_sequence_name"}


def test_the_application_role_cannot_reach_superuser_through_a_connection(app: psycopg.Connection,
                                                                          db: psycopg.Connection
        ) -> None:
    """Issue 9, part 0: durable allocation used to leave a dblink connection logged in as the
    schema owner in the caller's session, and dblink was executable by PUBLIC in schema
    hivenet. Both statements of the report must fail, and no role may appear."""
    for sql in ["""SELECT hivenet.next_serial_durable('unified',
                   '{"system": "C0001", "module": "A01", "instance": "01"}')""",
                "SELECT hivenet.dblink_exec('hivenet_loopback', 'CREATE ROLE pwned SUPERUSER')",
                "SELECT hivenet.dblink('host=127.0.0.1', 'SELECT 1')"]:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            app.execute(sql)
    assert scalar(db, "SELECT count(*) FROM pg_roles WHERE rolname = 'pwned'") == 0


def test_no_function_the_application_can_run_opens_a_connection(app: psycopg.Connection) -> None:
    """No connecting extension in the database, no dblink-like function the role may run in
    any schema it can use, and no function of ours that it may run mentions one."""
    assert scalar(app, """SELECT count(*) FROM pg_extension
                          WHERE extname IN ('dblink', 'postgres_fdw')""") == 0
    connecting = app.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p
        WHERE has_function_privilege(p.oid, 'EXECUTE')
          AND has_schema_privilege(p.pronamespace, 'USAGE')
          AND (p.proname ~ '^dblink' OR p.pronamespace = 'hivenet'::regnamespace
               AND p.prosrc ~* 'dblink|_connect|loopback')""").fetchall()
    assert connecting == []


def test_no_setting_holds_a_connection_string(db: psycopg.Connection) -> None:
    names = {r[0] for r in db.execute("SELECT name FROM hivenet.setting")}
    assert "loopback_dsn" not in names
    bodies = " ".join(r[0] for r in db.execute(
        "SELECT pg_get_functiondef(p.oid) FROM pg_proc p "
        "WHERE p.pronamespace = 'hivenet'::regnamespace AND p.prokind = 'f'"))
    assert "password" not in bodies and "dblink" not in bodies


def test_the_documented_operator_grants_suffice(db: psycopg.Connection) -> None:
    db.execute("CREATE ROLE hivenet_ops_test")
    try:
        db.execute("GRANT USAGE ON SCHEMA hivenet TO hivenet_ops_test")
        db.execute("""GRANT EXECUTE ON FUNCTION hivenet.maintain(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.define_format(text, jsonb, boolean, text), hivenet.register_system(text, text),
            hivenet.register_module(text, text, text), hivenet.set_claim_expiry(text, interval),
            hivenet.prepare_scope(text, jsonb) TO hivenet_ops_test""")
        db.execute("GRANT SELECT, UPDATE ON hivenet.setting TO hivenet_ops_test")
        db.execute("SET ROLE hivenet_ops_test")
        db.execute("SELECT hivenet.maintain()")
        db.execute("SELECT hivenet.register_system('C0001')")
        db.execute("SELECT hivenet.register_module('C0001', 'A01')")
        db.execute("SELECT hivenet.set_claim_expiry('q', '1 day')")
        db.execute("""SELECT hivenet.define_format('ops', '[{"literal": "O"},
                      {"seq": 3, "reset": "never"}]')""")
        db.execute("UPDATE hivenet.setting SET value = '2 days' WHERE name = 'interface_window'")
        assert scalar(db, "SELECT hivenet.next_serial('ops', '{}')") == "O001"
    finally:
        db.execute("RESET ROLE")
        db.execute("DROP OWNED BY hivenet_ops_test")
        db.execute("DROP ROLE hivenet_ops_test")


# --- hivenet_app, as `hivenet-db bootstrap` makes it (issue 10, part 5) -------------------------

@pytest.fixture
def hivenet_app(db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    with acting_as(db, "hivenet_app") as conn:
        yield conn


@pytest.fixture
def owner(connect: Any) -> psycopg.Connection:
    """Another connection, the owner's (superuser here), to look at what the role did."""
    return connect()  # type: ignore[no-any-return]


def refused_code(conn: psycopg.Connection, sql: str, params: Any = None) -> str | None:
    """The SQLSTATE ``sql`` fails with (None when it succeeds), in a savepoint-free autocommit
    statement."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as error:
        return error.diag.sqlstate
    return None


def test_the_application_role_writes_no_table(hivenet_app: psycopg.Connection,
                                              owner: psycopg.Connection) -> None:
    """Every table and partition of schema hivenet, read from the catalog: no INSERT, UPDATE,
    DELETE, TRUNCATE, nor any right on a table (only SELECT on the reporting views)."""
    tables = [row[0] for row in owner.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = "
        "'hivenet'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1")]
    assert {"hivenet.setting", "hivenet.claim_record", "hivenet.request_attempt",
            "hivenet.interface_call_default"} <= set(tables)
    for table in tables:
        column = scalar(owner, "SELECT quote_ident(attname) FROM pg_attribute "
                               "WHERE attrelid = %s::regclass AND attnum = 1", (table,))
        for sql in [f"INSERT INTO {table} DEFAULT VALUES", f"DELETE FROM {table} WHERE false",
                    f"TRUNCATE {table}", f"SELECT FROM {table} LIMIT 0",
                    f"UPDATE {table} SET {column} = NULL WHERE false"]:
            assert refused_code(hivenet_app, sql) == "42501", sql
    readable = {row[0] for row in hivenet_app.execute("""
        SELECT c.oid::regclass::text FROM pg_class c
        WHERE c.relnamespace = 'hivenet'::regnamespace
          AND has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES,
                                          TRIGGER')""")}
    assert readable == {"hivenet.interface_calls", "hivenet.interface_calls_per_day",
                        "hivenet.step_states", "hivenet.stuck_steps", "hivenet.scope_usage",
                        "hivenet.request_states", "hivenet.stuck_requests",
                        "hivenet._step_replay",  # SELECT only: begin_step's replay (steps.sql)
                        "hivenet._step_start",  # INSERT only: a new step's start (steps.sql)
                        "hivenet._request_start"}  # the same for a key (requests.sql)
    writable = hivenet_app.execute("""
        SELECT c.oid::regclass::text FROM pg_class c
        WHERE c.relnamespace = 'hivenet'::regnamespace
          AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')""").fetchall()
    assert sorted(writable) == [("hivenet._request_start",), ("hivenet._step_start",)]


def test_the_application_role_cannot_move_a_sequence(hivenet_app: psycopg.Connection,
                                                     owner: psycopg.Connection) -> None:
    """Every sequence of schema hivenet (counters of scopes and formats): no setval, no ALTER
    SEQUENCE, no right to update. (Whether it may call nextval is a design choice of the
    allocation path; moving a counter back would reissue serials.)"""
    hivenet_app.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    owner.execute("SELECT hivenet.maintain()")  # the scope gets a sequence of its own
    sequences = [row[0] for row in owner.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = "
        "'hivenet'::regnamespace AND c.relkind = 'S' ORDER BY 1")]
    assert "hivenet.cold_unified" in sequences and len(sequences) > 5
    for sequence in sequences:
        for sql in [f"SELECT setval('{sequence}', 1)", f"SELECT setval('{sequence}', 1, false)",
                    f"ALTER SEQUENCE {sequence} RESTART", f"ALTER SEQUENCE {sequence} MINVALUE 0",
                    f"DROP SEQUENCE {sequence}"]:
            assert refused_code(hivenet_app, sql) == "42501", sql
        assert not scalar(hivenet_app, "SELECT has_sequence_privilege(%s, 'UPDATE')", (sequence,))


def test_the_application_role_runs_no_extension_function_and_makes_no_extension(
        hivenet_app: psycopg.Connection, owner: psycopg.Connection) -> None:
    """No extension function it may execute outside the core's own language handlers, and it
    may not create an extension, the connecting ones first (dblink, postgres_fdw)."""
    runnable = hivenet_app.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_depend d
            ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
        JOIN pg_extension e ON e.oid = d.refobjid
        WHERE e.extname <> 'plpgsql' AND has_function_privilege(p.oid, 'EXECUTE')""").fetchall()
    assert runnable == []
    before = scalar(owner, "SELECT count(*) FROM pg_extension")
    for extension in ["dblink", "postgres_fdw", "file_fdw", "adminpack", "pg_stat_statements"]:
        assert refused_code(hivenet_app, f"CREATE EXTENSION {extension}") in (
            "42501", "0A000", "58P01"), extension  # refused, or not installed on this server
        assert refused_code(hivenet_app,
                            f"CREATE EXTENSION {extension} SCHEMA hivenet") is not None
    assert scalar(owner, "SELECT count(*) FROM pg_extension") == before


def test_the_application_role_opens_no_connection_and_runs_no_program(
        hivenet_app: psycopg.Connection) -> None:
    assert scalar(hivenet_app, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'hivenet_app'"
                  ) is False
    for role in ["pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                 "pg_read_all_settings", "pg_read_all_data", "pg_write_all_data",
                 "pg_signal_backend", "hivenet_admin"]:
        assert not scalar(hivenet_app, "SELECT pg_has_role(%s, 'USAGE')", (role,)), role
    for sql in ["COPY (SELECT 1) TO PROGRAM 'true'", "COPY (SELECT 1) TO '/tmp/hivenet_x'",
                "SELECT lo_import('/etc/passwd')", "SELECT pg_read_file('postgresql.conf')",
                "SELECT pg_ls_dir('.')", "CREATE SCHEMA evil",
                "CREATE FUNCTION hivenet.now() RETURNS timestamptz LANGUAGE sql "
                "AS 'SELECT now()'",
                "CREATE TABLE hivenet.x (i int)"]:
        assert refused_code(hivenet_app, sql) == "42501", sql


def test_the_application_role_reads_no_secret(hivenet_app: psycopg.Connection) -> None:
    """Stored passwords, server files and settings only administrators see."""
    for sql in ["SELECT rolpassword FROM pg_authid", "SELECT passwd FROM pg_shadow",
                "SELECT * FROM pg_hba_file_rules", "SELECT * FROM pg_file_settings",
                "SELECT current_setting('data_directory')",
                "SELECT current_setting('hba_file')", "SELECT current_setting('config_file')",
                "SELECT * FROM hivenet.setting", "SELECT hivenet._setting_value('time_zone')",
                "SELECT * FROM hivenet.claim_record", "SELECT * FROM hivenet.request_attempt",
                "SELECT * FROM hivenet.step_attempt"]:
        assert refused_code(hivenet_app, sql) == "42501", sql
    # Deliberate: the allocation fast path is inlined into the caller's statement, so it reads
    # the settings' constants with the caller's rights (privileges.sql). Settings hold no
    # secret; the table and its descriptions stay the administrators'.
    assert refused_code(hivenet_app, "SELECT hivenet._setting_constant('time_zone')") is None
    assert scalar(hivenet_app, "SELECT count(*) FROM pg_user WHERE passwd <> '********'") == 0
    # Other sessions' statements are hidden from it.
    assert scalar(hivenet_app, """SELECT count(*) FROM pg_stat_activity
        WHERE pid <> pg_backend_pid() AND query <> '<insufficient privilege>'
          AND usename IS DISTINCT FROM 'hivenet_app' AND backend_type = 'client backend'""") == 0


def test_the_application_role_changes_no_setting_and_no_clock(
        hivenet_app: psycopg.Connection, owner: psycopg.Connection) -> None:
    before = owner.execute("SELECT name, value FROM hivenet.setting ORDER BY 1").fetchall()
    for sql in ["UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'",
                "UPDATE hivenet.setting SET value = '1000000' "
                "WHERE name = 'max_serials_per_call'",
                "INSERT INTO hivenet.setting VALUES ('x', 'y', 'text', 'z')",
                "ALTER SYSTEM SET hivenet.fake_now = '2000-01-01'",
                f"ALTER DATABASE {hivenet_app.info.dbname} SET hivenet.fake_now = '2000-01-01'",
                "ALTER FUNCTION hivenet.now() RENAME TO later",
                "ALTER TABLE hivenet.setting DISABLE TRIGGER ALL",
                "SELECT hivenet._rewrite_constants('hivenet.setting', 'INSERT', "
                "'hivenet._setting_constant', 'text', 'WHEN ''allow_fake_clock'' THEN ''true''')",
                "SET session_replication_role = replica"]:
        assert refused_code(hivenet_app, sql) == "42501", sql
    assert owner.execute("SELECT name, value FROM hivenet.setting ORDER BY 1").fetchall() == before
    # Its own session's fake clock moves nothing: fake clocks are not allowed here. The
    # allocation fast path does not read it (tests/test_fast_path.py): it issues by the real
    # clock; everything else refuses it.
    unified = "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"
    owner.execute("""SELECT hivenet.prepare_scope('unified',
                     '{"system": "C0001", "module": "A01", "instance": "01"}')""")
    scalar(hivenet_app, unified)  # a prepared scope, today's period begun: the fast path's case
    hivenet_app.execute("SET hivenet.fake_now = '2000-01-01 00:00+00'")
    for sql in ["SELECT hivenet.now()", "SELECT hivenet.claim('n', 'k')"]:
        assert refused_code(hivenet_app, sql) == "HN001", sql
    today = scalar(owner, "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYYMMDD')")
    assert scalar(hivenet_app, unified)[10:18] == today


EVIL = """
CREATE SCHEMA evil;
CREATE TABLE evil.calls (what text);
GRANT USAGE ON SCHEMA evil TO PUBLIC;
GRANT INSERT ON evil.calls TO PUBLIC;
CREATE FUNCTION evil.called(what text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO evil.calls VALUES (what) $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('clock_timestamp'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('now'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('nextval'); RETURN 1; END $$;
CREATE FUNCTION evil.hashtext(text) RETURNS integer LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('hashtext'); RETURN 1; END $$;
CREATE FUNCTION evil.current_setting(text, boolean) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('current_setting'); RETURN '2000-01-01'; END $$;
CREATE FUNCTION evil.to_regclass(text) RETURNS regclass LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('to_regclass'); RETURN NULL; END $$;
CREATE FUNCTION evil.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('='); RETURN true; END $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
CREATE FUNCTION evil.text_cat(a text, b text) RETURNS text LANGUAGE plpgsql
    AS $$ BEGIN PERFORM evil.called('||'); RETURN 'evil'; END $$;
CREATE OPERATOR evil.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_cat);
CREATE TABLE evil.setting (name text, value text);
INSERT INTO evil.setting VALUES ('allow_fake_clock', 'true');
CREATE TABLE evil.claim_record (namespace text, key text, claimed_at timestamptz,
                                expires_at timestamptz);
GRANT SELECT, INSERT ON evil.setting, evil.claim_record TO PUBLIC;
"""

TEMP = """
CREATE TEMPORARY TABLE claim_record (namespace text, key text, claimed_at timestamptz,
                                     expires_at timestamptz);
CREATE TEMPORARY TABLE setting (name text, value text);
INSERT INTO pg_temp.setting VALUES ('allow_fake_clock', 'true'), ('time_zone', 'Asia/Tokyo');
CREATE TEMPORARY TABLE step_attempt (system_serial text);
CREATE FUNCTION pg_temp._setting_value(text) RETURNS text LANGUAGE sql AS $$ SELECT 'true' $$;
CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE sql
    AS $$ SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION pg_temp.nextval(regclass) RETURNS bigint LANGUAGE sql AS $$ SELECT 1::bigint $$;
"""


@pytest.mark.parametrize("trick", ["a schema earlier in search_path",
                                   "temporary tables and functions named like ours"])
def test_no_search_path_trick_reaches_another_schema(db: psycopg.Connection,
                                                     owner: psycopg.Connection,
                                                     trick: str) -> None:
    """Objects named like ours or like the catalog's (functions, operators, tables) in a
    schema the application role puts first in its search_path, or in its pg_temp: the API
    still reads and writes only schema hivenet and calls only pg_catalog."""
    with acting_as(db, "hivenet_app") as app:
        if trick.startswith("a schema"):
            app.execute("RESET ROLE")
            app.execute(EVIL)  # made by someone else, usable by the role
            app.execute("SET ROLE hivenet_app")
            app.execute("SET search_path = evil, hivenet, pg_temp, pg_catalog")
        else:
            app.execute(TEMP)
            app.execute("SET search_path = pg_temp, hivenet, pg_catalog")
        wall = scalar(owner, "SELECT clock_timestamp()")
        unified = scalar(app, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
        system = scalar(app, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
        serials = [r[0] for r in app.execute("""SELECT * FROM hivenet.next_serials('unified',
            '{"system": "C0001", "module": "A01", "instance": "02"}', 3)""")]
        assert len({unified, *serials}) == 4
        assert unified[10:18] == wall.strftime("%Y%m%d") and unified.endswith("0001")
        assert scalar(app, "SELECT hivenet.now()") >= wall
        assert scalar(app, "SELECT hivenet.parse_serial(%s)", (unified,))["format"] == "unified"
        app.execute("SELECT hivenet.claim('evil.ns', 'key-1')")
        assert refused_code(app, "SELECT hivenet.claim('evil.ns', 'key-1')") == "HN040"
        attempt = scalar(app, "SELECT attempt FROM hivenet.begin_step(%s, '{}')", (system,))
        app.execute("SELECT hivenet.finish_step(%s, %s, true, '{}')", (system, attempt))
        app.execute("SET hivenet.fake_now = '2000-01-01 00:00+00'")
        assert refused_code(app, "SELECT hivenet.now()") == "HN001"  # no fake clock allowed
        app.execute("RESET hivenet.fake_now")
        app.execute("RESET search_path")
    assert scalar(owner, "SELECT count(*) FROM hivenet.claim_record "
                         "WHERE namespace = 'evil.ns'") == 1
    assert scalar(owner, "SELECT state::text FROM hivenet.step_attempt "
                         "WHERE system_serial = %s", (system,)) == "success"
    if trick.startswith("a schema"):
        assert owner.execute("SELECT what FROM evil.calls").fetchall() == []
        assert scalar(owner, "SELECT count(*) FROM evil.claim_record") == 0


def test_no_argument_reaches_another_relation(hivenet_app: psycopg.Connection) -> None:
    """_scope_counter_value (in view scope_usage, so executable by every role) takes a
    sequence name: a table's name, qualified names and other schemas' relations give NULL.
    A table's name raised 42809 before revision 0010."""
    hivenet_app.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')")
    assert scalar(hivenet_app, "SELECT hivenet._scope_counter_value('cold_interface')") > 0
    for name in ["setting", "claim_record", "pg_authid", "pg_catalog.pg_authid",
                 "hivenet.cold_unified", "../cold_unified", "cold_unified'; --"]:
        assert scalar(hivenet_app, "SELECT hivenet._scope_counter_value(%s)", (name,)) is None
