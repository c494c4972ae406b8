"""Least privilege: a role with USAGE on the schema runs the application API and no more."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.helpers import scalar

ROLE = "hivenet_app_test"


@pytest.fixture
def app(db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """The test's connection acting as an application role granted only USAGE."""
    db.execute(f"CREATE ROLE {ROLE}")
    db.execute(f"GRANT USAGE ON SCHEMA hivenet TO {ROLE}")
    db.execute(f"SET ROLE {ROLE}")
    try:
        yield db
    finally:
        db.execute("RESET ROLE")
        db.execute(f"DROP OWNED BY {ROLE}")
        db.execute(f"DROP ROLE {ROLE}")


def test_the_application_api_works_with_usage_only(app: psycopg.Connection) -> None:
    unified = scalar(app, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    system = scalar(app, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    interface = scalar(
        app, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0001')")
    assert scalar(app, """SELECT count(*) FROM hivenet.next_serials('id_service',
                          '{"recon_type": "01", "merchant": "123456789012",
                            "shard": "01"}', 3)""") == 3
    assert scalar(app, "SELECT hivenet.parse_serial(%s)", (unified,))["format"] == "unified"
    app.execute("SELECT hivenet.claim_interface_serial(%s, %s, %s)", (interface, unified, system))
    assert scalar(app, "SELECT count(*) FROM hivenet.call_chain(%s)", (unified,)) == 1
    app.execute("SELECT hivenet.claim('inventory.purchase', 'order-1')")
    attempt = scalar(app, "SELECT attempt FROM hivenet.begin_step(%s, '{}')", (system,))
    app.execute("SELECT hivenet.finish_step(%s, %s, true, '{}')", (system, attempt))
    assert isinstance(scalar(app, "SELECT hivenet.now()"), dt.datetime)


@pytest.mark.parametrize("sql", [
    """SELECT hivenet._promote_scope(f, 'X', '{}') FROM hivenet.format f LIMIT 1""",
    """SELECT hivenet.prepare_scope('unified', '{"system": "C0001", "module": "A01",
       "instance": "09"}')""",
    "SELECT hivenet._allocate('unified', NULL, ARRAY['C0001', 'A01', '01'], 1)",
    "SELECT hivenet.define_format('mine', '[{\"seq\": 3, \"reset\": \"never\"}]')",
    "SELECT hivenet.register_system('C0001')",
    "SELECT hivenet.maintain()",
    "SELECT hivenet.set_claim_expiry('q', '1 day')",
    "SELECT * FROM hivenet.setting",
    "UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'",
])
def test_private_and_administrative_parts_are_refused(app: psycopg.Connection, sql: Any) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app.execute(sql)


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
        "hivenet._period_index", "hivenet._period_start", "hivenet._scope_counter_value",
        "hivenet._reporting_local_now",
        # Inlined into next_unified_serial / next_system_serial, run as the caller (allocate.sql).
        "hivenet._fast_serial", "hivenet._format_constant", "hivenet._setting_constant",
        "hivenet._scope_sequence_name"}


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
