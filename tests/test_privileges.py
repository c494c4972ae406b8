"""Least privilege: nothing for PUBLIC; hivenet_app runs the application API and no more,
hivenet_reporting reads the reporting views and no more, hivenet_admin administers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from hivenet_db import cli
from tests.helpers import role_in, scalar, usage_only_role

ROLE = "hivenet_app_test"
BOOTSTRAP_ROLES = ("hivenet_app", "hivenet_reporting", "hivenet_admin")


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
    """The test's connection acting as an application login: a role granted hivenet_app."""
    with role_in(db, ROLE, "hivenet_app") as app:
        yield app


def test_the_application_api_works_as_a_login_granted_hivenet_app(
        app: psycopg.Connection) -> None:
    unified = scalar(app, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    system = scalar(app, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    interface = scalar(
        app, "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0001')")
    assert scalar(app, """SELECT count(*) FROM hivenet.next_serials('id_service',
                          '{"merchant": "123456789012",
                            "shard": "05"}', 3)""") == 3
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
    assert app.execute("SELECT outcome FROM hivenet.begin_requests('orders', "
                       "ARRAY['k1', 'k2'], ARRAY['{}', '{}']::jsonb[])").fetchall() == [
        ("replayed",), ("started",)]
    assert isinstance(scalar(app, "SELECT hivenet.now()"), dt.datetime)
    time_id = scalar(app, "SELECT hivenet.next_time_id()")
    assert scalar(app, "SELECT count(*) FROM hivenet.next_time_ids('time_id', 3)") == 3
    assert scalar(app, "SELECT hivenet.parse_time_id(%s)", (time_id,))["format"] == "time_id"


@pytest.mark.parametrize("sql", [
    """SELECT hivenet._promote_scope(f, 'X', '{}', false) FROM hivenet.format f LIMIT 1""",
    """SELECT hivenet.prepare_scope('unified', '{"system": "C0001", "module": "A01",
       "instance": "09"}')""",
    "SELECT hivenet._allocate('unified', NULL, ARRAY['C0001', 'A01', '01'], 1)",
    "SELECT hivenet.define_format('mine', '[{\"seq\": 3, \"reset\": \"never\"}]')",
    "SELECT hivenet.register_system('C0001')",
    "SELECT hivenet.maintain()",
    "SELECT hivenet.own_instances('01-09')",
    "SELECT hivenet.set_clock_policy('time_id', 'refuse')",
    "SELECT hivenet.set_claim_expiry('q', '1 day')",
    "SELECT hivenet.set_request_retention('orders', '1 day')",
    "SELECT hivenet.set_namespace_policy('orders', fingerprint => 'json')",
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
                f"SELECT * FROM hivenet._begin_attempt('hivenet.steps', NULL, '{running}', "
                "NULL, 'replay', NULL, NULL, NULL)"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
            app.execute(sql)


def test_the_application_role_starts_no_key_without_counting_its_decision(
        app: psycopg.Connection, db: psycopg.Connection) -> None:
    """One writer of attempts, the owner's (view _new_attempt): hivenet_app may neither write
    it nor the table, so its only ways to start a key or a step are the functions that count
    the decision (decisions.sql): begin_request, begin_step, their batches, and what their
    statements call, _start_key and _begin_key. Each start below is counted, and a write
    around them is refused (it once was not: an INSERT into a start view of its own)."""
    def as_owner(sql: str, params: tuple[Any, ...]) -> Any:  # app is db acting as the role
        db.execute("RESET ROLE")
        value = scalar(db, sql, params)
        db.execute(f"SET ROLE {ROLE}")
        return value

    serial, other = (scalar(app, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
                     for _ in range(2))
    app.execute("SELECT * FROM hivenet.begin_request('counted', 'first')")  # the counters
    counted = ("SELECT sum(decisions) FROM hivenet.request_decisions "
               "WHERE namespace = %s AND decision = 'started'")
    starts: list[tuple[str, str, tuple[Any, ...], int]] = [
        ("counted", "SELECT * FROM hivenet.begin_request('counted', 'k1')", (), 1),
        ("counted", "SELECT hivenet._start_key(false, 'counted', 'k2', NULL, 'replay', NULL, "
                    "NULL, false, NULL)", (), 1),
        ("counted", "SELECT * FROM hivenet._begin_key(false, 'counted', 'k3', NULL, 'replay', "
                    "NULL, NULL, false, NULL, NULL)", (), 1),
        ("counted", "SELECT * FROM hivenet.begin_requests('counted', ARRAY['k4', 'k5'], "
                    "ARRAY[NULL, NULL]::jsonb[])", (), 2),
        ("hivenet.steps", "SELECT * FROM hivenet.begin_step(%s)", (serial,), 1),
        ("hivenet.steps", "SELECT * FROM hivenet.begin_steps(ARRAY[%s], ARRAY[NULL]::jsonb[])",
         (other,), 1),
    ]
    for namespace, statement, params, started in starts:
        before = as_owner(counted, (namespace,))
        app.execute(statement, params)
        assert as_owner(counted, (namespace,)) == before + started, statement
    for statement in ["INSERT INTO hivenet._new_attempt VALUES ('counted', 'k6', 1, '', NULL, "
                      "NULL)",
                      "INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, "
                      "fingerprint) VALUES ('counted', 'k6', 1, 'processing', '')",
                      "SELECT hivenet._start_attempt('counted', 'k6', 1, '', NULL, NULL, false, "
                      "NULL)"]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
            app.execute(statement)
    assert as_owner("SELECT count(*) FROM hivenet.request_attempt WHERE key = 'k6'", ()) == 0


APP, REPORTING, ADMIN = "hivenet_app", "hivenet_reporting", "hivenet_admin"
ALL = (APP, REPORTING, ADMIN)
VIEW_READERS = (REPORTING, ADMIN)

# Who may EXECUTE each function of schema hivenet (privileges.sql says why). Nobody else:
# not PUBLIC, not a role that only has USAGE on the schema. A function not listed here, or
# in OWNER_ONLY, fails the test: a new function is a decision about who may run it.
FUNCTIONS: dict[str, tuple[str, ...]] = {
    # The application API.
    "next_unified_serial": (APP,), "next_system_serial": (APP,),
    "next_interface_serial": (APP,), "next_serial": (APP,), "next_serials": (APP,),
    "claim_interface_serial": (APP,), "claim": (APP,), "begin_step": (APP,),
    "finish_step": (APP,), "begin_request": (APP,), "finish_request": (APP,),
    "begin_requests": (APP,), "finish_requests": (APP,), "begin_steps": (APP,),
    "finish_steps": (APP,),
    "watch_request": (APP,),  # a client waiting for an outcome registers (requests.sql)
    "next_time_id": (APP,), "next_time_ids": (APP,), "parse_time_id": (APP,),
    "ownership": (APP, ADMIN), "call_chain": ALL, "parse_serial": ALL,
    "flush_at_commit": (APP,),  # makes a durable allocation's commit flush
    # now() and its fake clock, inlined into the callers and the views stuck_*.
    "now": ALL, "_fake_now": ALL,
    # Inlined into next_unified_serial / next_system_serial (allocate.sql).
    "_fast_unified": (APP,), "_fast_system": (APP,), "_format_constant": (APP,),
    "_setting_constant": (APP,),
    "_scope_sequence_name": ALL,  # and in view clock_lead, run as its reader
    # Inlined into next_time_id and next_time_ids, and what they call (time_ids.sql).
    "_fast_time_id": (APP,), "_time_id_batch": (APP,),
    "_next_time_id": (APP,), "_time_id_count": (APP,),
    # Called by begin_step and begin_request, inlined into the caller's statement: the fast
    # path and the full path of every key, SECURITY DEFINER (requests.sql).
    "_start_key": (APP,), "_begin_key": (APP,),
    # begin_step's replay, inlined and run as the caller (steps.sql), and what it inlines:
    # the callers' clock, the bound on intervals (clock.sql).
    "_step_in_window": (APP,), "_fingerprint": (APP,), "_caller_now": (APP,),
    "_longest_interval": (APP,), "_interval_allowed": (APP,),
    "_serial_time": VIEW_READERS,  # in view interface_calls, run as its reader
    # In the reporting views, run as their reader.
    "_serial_field": VIEW_READERS, "_step_lease": VIEW_READERS,
    "_reporting_local_now": VIEW_READERS, "_period_index": VIEW_READERS,
    "_period_start": VIEW_READERS, "_scope_counter_value": VIEW_READERS,
    "_clock_sequence_name": VIEW_READERS,
    # Administration.
    "maintain": (ADMIN,), "fence_failover": (ADMIN,), "_timeline": (ADMIN,),
    "replication_warning": (ADMIN,), "define_format": (ADMIN,), "prepare_scope": (ADMIN,),
    "register_system": (ADMIN,), "register_module": (ADMIN,), "own_instances": (ADMIN,),
    "resolve_step": (ADMIN,), "resolve_request": (ADMIN,), "set_claim_expiry": (ADMIN,),
    "set_request_retention": (ADMIN,), "set_namespace_policy": (ADMIN,),
    "verify_audit_chain": (ADMIN,), "set_clock_policy": (ADMIN,),
}
OWNER_ONLY = set("""
    _advance _allocate _attempt_subject _batch_limit _begin_attempt _begin_attempt_within
    _begin_batch _begin_batch_key _check_batch _check_step _count_decision _finish_batch
    _key_allowed _name_valid _new_decision_counter _plain_options _policy_checked
    _request_start_valid _serial_valid _set_policy _start_attempt _start_valid _starts_apart
    _step_start_valid
    _canonical_instances _canonical_json _chain_append _chain_link _canonical_number
    _check_begin_options _check_fields
    _check_fingerprint _check_interval _check_name _check_policy
    _check_owned _check_owned_serial _check_registry _claim_checked
    _claim_interface_serial_checked _claim_interface_serial_nowait _claim_nowait _clock_behind
    _clock_sequence _cold_lock_space _cold_sequence_name _committed_sequence
    _compile_format _constants_lock_space _create_clock _create_scope_counter _format_counters
    _make_format_counters _one_scope _has_issued _serials_issued _fallback_formats_check
    _fallback_drawn _fallback_lock_space _fallback_gate_space _refuse_unprepared _shown_time
    _create_decision_counters _grant_decision_counters
    _create_interface_partition _drop_interface_partition
    _check_timeline _counted_apart _failover_gap _fenced _fence_counter _fenced_value _fence_floor
    _sample_allocation_rates
    _fast_path_expression _fence _field_problem _field_values _format_error _grant_counter
    _grant_roles _instance_in _interface_partition_name _interval_conflict _issue
    _issue_unprepared
    _latest_issued _layout_sql _lock_constants _maintain_claims _maintain_failover
    _maintain_interface_calls _maintain_requests _maintain_scopes _maintain_steps
    _max_period_index _node_field _not_owned _ownership_check _ownership_setting _park_scope
    _period_last_instant _policy_fingerprint _promote_scope _purge_chained _purge_requests
    _raise_clock
    _raise_key_refused _raise_stale_attempt
    _expire_attempts _maintain_request_expiry
    _raise_step_outside_window _raise_unfinished _recompile _recompile_trigger
    _refuse_outside_window _reject_serial _replace_function _reset_lock_space _resolve_attempt
    _scope_fields _scope_of _scopes_by_node _serial_scope _serial_shaped _setting_check
    _setting_value _shown _start_chain _step_days_from _step_days_to _step_issued_here
    _wake_waiters _waited_for_row
    _step_window_expression _time_pattern _unit_rank _utf16_units
    _printed_time _time_id_digits _time_id_fields _time_id_parts
    _time_number_max _unseen_characters
    _timeout_left
""".split())  # noqa: SIM905 (a list of words reads best)

# Views and what each role may do with them; SELECT on the reporting views for their
# readers. Tables: SELECT for hivenet_admin only. Sequences: USAGE (nextval) for hivenet_app
# on the counters the fast paths draw from (scopes', decisions'), nothing on the others.
REPORTING_VIEWS = ("interface_calls", "interface_calls_per_day", "step_states", "stuck_steps",
                   "scope_usage", "business_time_zone", "request_states", "stuck_requests",
                   "request_attempts", "request_decisions", "clock_lead")
VIEWS: dict[str, dict[str, str]] = {
    **{view: {REPORTING: "SELECT", ADMIN: "SELECT"} for view in REPORTING_VIEWS},
    "_step_replay": {APP: "SELECT", ADMIN: "SELECT"},  # begin_step's replay, as the caller
    "_new_attempt": {ADMIN: "SELECT"},  # the one writer of attempts: the owner's (requests.sql)
    "_decision_counters": {APP: "SELECT", ADMIN: "SELECT"},  # the replay counts (decisions.sql)
    "step_attempt": {ADMIN: "SELECT"},
    "raw_requests": {ADMIN: "SELECT"},  # clients' bytes, a payload: not for reporting
}
TABLE_RIGHTS = "SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"


def _expected_relation(name: str, kind: str) -> dict[str, str]:
    if kind == "v":
        return VIEWS[name]
    if kind == "S":
        return {APP: "USAGE"} if name.startswith(("seq_", "decisions_")) else {}
    return {ADMIN: "SELECT, UPDATE" if name == "setting" else "SELECT"}


def test_the_catalog_grants_exactly_the_table(db: psycopg.Connection) -> None:
    """Every function, view, table and sequence of schema hivenet, read from the catalog:
    which of PUBLIC, the three roles and a role with only USAGE on the schema may use it."""
    db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0001')")
    db.execute("SELECT hivenet.maintain()")  # a scope's own sequence, made at run time
    db.execute("CREATE ROLE hivenet_usage_test")
    try:
        db.execute("GRANT USAGE ON SCHEMA hivenet TO hivenet_usage_test")
        who = ("public", "hivenet_usage_test", *ALL)
        functions: dict[str, set[str]] = {}
        for name, role in db.execute("""
                SELECT p.proname, r FROM pg_proc p CROSS JOIN unnest(%s::text[]) AS r
                WHERE p.pronamespace = 'hivenet'::regnamespace
                  AND has_function_privilege(r, p.oid, 'EXECUTE')""", (list(who),)):
            functions.setdefault(name, set()).add(role)
        names = {row[0] for row in db.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'hivenet'::regnamespace")}
        assert names - FUNCTIONS.keys() - OWNER_ONLY == set(), "unlisted functions"
        assert functions == {name: set(roles) for name, roles in FUNCTIONS.items()}
        relations = db.execute("""
            SELECT c.relname, c.relkind::text, r, string_agg(p, ', ' ORDER BY o)
            FROM pg_class c CROSS JOIN unnest(%s::text[]) AS r
            CROSS JOIN unnest(string_to_array(CASE WHEN c.relkind = 'S'
                              THEN 'USAGE, SELECT, UPDATE' ELSE %s END, ', '))
                       WITH ORDINALITY AS x(p, o)
            WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
              AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege(r, c.oid, p)
                       ELSE has_table_privilege(r, c.oid, p) END
            GROUP BY c.relname, c.relkind, r""", (list(who), TABLE_RIGHTS)).fetchall()
        kinds: dict[str, str] = dict(db.execute(
            "SELECT relname, relkind::text FROM pg_class WHERE relnamespace = "
            "'hivenet'::regnamespace AND relkind IN ('r', 'p', 'v', 'S')").fetchall())
        assert any(name.startswith("seq_") for name in kinds)
        granted: dict[str, dict[str, str]] = {name: {} for name in kinds}
        for name, _, role, rights in relations:
            granted[name][role] = rights
        assert granted == {name: _expected_relation(name, kind) for name, kind in kinds.items()}
    finally:
        db.execute("DROP OWNED BY hivenet_usage_test")
        db.execute("DROP ROLE hivenet_usage_test")


FORGING = [
    "SELECT hivenet.next_system_serial('R0001', 'A01', '01')",
    "SELECT outcome FROM hivenet.begin_step(%(serial)s, '{\"amount\": 100}')",
    "SELECT hivenet.finish_step(%(serial)s, 1, true, '{\"posted\": \"forged\"}')",
    "SELECT hivenet.finish_request('orders', 'k1', 1, true, '{\"posted\": \"forged\"}')",
    "INSERT INTO hivenet._new_attempt VALUES ('hivenet.steps', %(other)s, 1, '', NULL, NULL)",
    "INSERT INTO hivenet._new_attempt VALUES ('orders', 'k2', 1, '', NULL, NULL)",
    "SELECT hivenet._start_key(true, 'hivenet.steps', %(other)s, '{}', 'replay', NULL, NULL, "
    "false, NULL)",
    "SELECT count(*) FROM hivenet._step_replay",
    "SELECT count(*) FROM hivenet.step_attempt",
    "SELECT count(*) FROM hivenet.request_attempt",
    "SELECT hivenet.claim('inventory.purchase', 'order-1')",
    "SELECT hivenet.claim_interface_serial(%(interface)s)",
    "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')",
    "SELECT hivenet.next_serial('unified', "
    "'{\"system\": \"C0001\", \"module\": \"A01\", \"instance\": \"01\"}')",
    "SELECT hivenet.next_serials('id_service', '{\"recon_type\": \"01\", "
    "\"merchant\": \"123456789012\", \"shard\": \"01\"}', 3)",
    "SELECT hivenet._begin_key(true, 'hivenet.steps', %(other)s, '{}', 'replay', NULL, NULL, "
    "false, NULL, NULL)",
    "SELECT hivenet._fast_unified('C0001', 'A01', '01')",
]


def _state(owner: psycopg.Connection) -> tuple[Any, ...]:
    """What forging would change: every attempt, claim and call, and every counter."""
    return (owner.execute("SELECT namespace, key, attempt, state::text, response "
                          "FROM hivenet.request_attempt ORDER BY 1, 2, 3").fetchall(),
            owner.execute("SELECT namespace, key FROM hivenet.claim_record ORDER BY 1, 2"
                          ).fetchall(),
            scalar(owner, "SELECT count(*) FROM hivenet.interface_call"),
            owner.execute("SELECT c.relname, pg_sequence_last_value(c.oid) FROM pg_class c "
                          "WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind = 'S' "
                          "ORDER BY 1").fetchall())


@pytest.mark.parametrize("granted", ["only USAGE on the schema", "hivenet_reporting"])
def test_a_reader_forges_nothing(db: psycopg.Connection, connect: Any, granted: str) -> None:
    """Issue 26's forging sequence, and every other way into allocation, steps, requests,
    claims and stored responses: 42501 at every statement, and nothing changes."""
    owner = connect()
    serial, other = (scalar(owner, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
                     for _ in range(2))
    owner.execute("SELECT * FROM hivenet.begin_step(%s, '{\"amount\": 100}')", (serial,))
    owner.execute("SELECT * FROM hivenet.begin_request('orders', 'k1')")
    interface = scalar(owner,
                       "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0001')")
    before = _state(owner)
    params = {"serial": serial, "other": other, "interface": interface}
    role = "hivenet_reader_test"
    with (usage_only_role(db, role) if granted.startswith("only")
          else role_in(db, role, REPORTING)) as reader:
        for sql in FORGING:
            assert refused_code(reader, sql, params) == "42501", sql
    assert _state(owner) == before


def test_a_login_without_any_grant_draws_from_no_sequence_by_oid(
        db: psycopg.Connection, connect: Any) -> None:
    """nextval(oid) needs no USAGE on the schema: every sequence of schema hivenet (scopes',
    lanes', fallback counters, clocks) refuses a role that holds no grant at all."""
    owner = connect()
    scalar(owner, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    owner.execute("SELECT hivenet.maintain()")
    oids = [row[0] for row in owner.execute(
        "SELECT c.oid::int FROM pg_class c WHERE c.relnamespace = 'hivenet'::regnamespace "
        "AND c.relkind = 'S' ORDER BY 1")]
    assert len(oids) > 10
    before = _state(owner)
    with role_in(db, "hivenet_nobody_test") as nobody:
        for oid in oids:
            for sql in ("SELECT nextval(%s::oid::regclass)", "SELECT setval(%s::oid::regclass, 1)",
                        "SELECT currval(%s::oid::regclass)"):
                assert refused_code(nobody, sql, (oid,)) == "42501", (sql, oid)
            # Refused before PostgreSQL 18; from 18 on, NULL to a role without the privilege.
            try:
                last_value = scalar(nobody, "SELECT pg_sequence_last_value(%s::oid::regclass)",
                                    (oid,))
            except psycopg.errors.InsufficientPrivilege:
                last_value = None
            assert last_value is None, oid
    assert _state(owner) == before


def test_hivenet_reporting_reads_the_reporting_views_and_call_chain(
        db: psycopg.Connection, connect: Any) -> None:
    owner = connect()
    unified = scalar(owner, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    interface = scalar(owner,
                       "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'D0001')")
    owner.execute("SELECT hivenet.claim_interface_serial(%s, %s)", (interface, unified))
    with role_in(db, "hivenet_reporting_test", REPORTING) as reader:
        for view in REPORTING_VIEWS:
            reader.execute(f"SELECT * FROM hivenet.{view}").fetchall()
        assert scalar(reader, "SELECT count(*) FROM hivenet.call_chain(%s)", (unified,)) == 1
        assert scalar(reader, "SELECT count(*) FROM hivenet.scope_usage") > 0


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
    assert readable == {"hivenet._step_replay",  # SELECT only: begin_step's replay (steps.sql)
                        "hivenet._decision_counters"}  # SELECT only: its count (decisions.sql)
    writable = hivenet_app.execute("""
        SELECT c.oid::regclass::text FROM pg_class c
        WHERE c.relnamespace = 'hivenet'::regnamespace
          AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')""").fetchall()
    assert writable == []


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
                "SELECT hivenet._replace_function('_setting_constant(p_name text)', 'text', "
                "'STABLE', 'CASE p_name WHEN ''allow_fake_clock'' THEN ''true'' END')",
                "SELECT hivenet._recompile()",
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


def test_no_argument_reaches_another_relation(db: psycopg.Connection) -> None:
    """_scope_counter_value (in view scope_usage, so executable by its readers) takes a
    sequence name: a table's name, qualified names and other schemas' relations give NULL."""
    db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')")
    with role_in(db, "hivenet_reporting_test", REPORTING) as reader:
        assert scalar(reader, "SELECT hivenet._scope_counter_value('seq_interface_C0001A0101')"
                      ) > 0
        for name in ["setting", "claim_record", "pg_authid", "pg_catalog.pg_authid",
                     "hivenet.cold_unified", "../cold_unified", "cold_unified'; --"]:
            assert scalar(reader, "SELECT hivenet._scope_counter_value(%s)", (name,)) is None


# --- hivenet_admin: every command and function documented for it, as a login granted only it --

def test_every_administrative_command_runs_as_a_login_granted_only_hivenet_admin(
        hivenet_admin_url: str, db: psycopg.Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, point 3: `failover-fence` failed for hivenet_admin (`permission denied for
    function _timeline`); and a refused setting must explain itself (HN001), not fail on a
    private function (42501)."""
    serial = scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    db.execute("SELECT * FROM hivenet.begin_step(%s, '{}', lease => '1 second')", (serial,))
    db.execute("SELECT * FROM hivenet.begin_request('orders', 'k1', lease => '1 second')")
    for command in (["maintain"], ["failover-fence", "--force"], ["report"], ["metrics"]):
        assert cli.main([*command, "--url", hivenet_admin_url]) == 0, command
    assert "hivenet_scope_capacity" in capsys.readouterr().out
    with psycopg.connect(hivenet_admin_url, autocommit=True) as admin:
        assert scalar(admin, "SELECT current_user") == "hivenet_test_admin"
        for sql in [
            "SELECT hivenet.maintain()",
            "SELECT count(*) FROM hivenet.fence_failover(10, true)",
            "SELECT hivenet.replication_warning()",
            "SELECT hivenet.define_format('ops', '[{\"literal\": \"O\"}, "
            "{\"seq\": 3, \"reset\": \"never\"}]')",
            "SELECT hivenet.prepare_scope('unified', '{\"system\": \"C0001\", "
            "\"module\": \"A01\", \"instance\": \"09\"}')",
            "SELECT hivenet.register_system('C0001')",
            "SELECT hivenet.register_module('C0001', 'A01')",
            "SELECT hivenet.own_instances('all')",
            "SELECT * FROM hivenet.ownership()",
            "SELECT hivenet.set_claim_expiry('q', '1 day')",
            "SELECT hivenet.set_request_retention('orders', '2 days')",
            "SELECT hivenet.set_namespace_policy('orders', key_min_length => 2)",
            "SELECT pg_sleep(1.1)",
            f"SELECT hivenet.resolve_step('{serial}', 1, true, 'settled by hand')",
            "SELECT hivenet.resolve_request('orders', 'k1', 1, false, 'not sent')",
            "UPDATE hivenet.setting SET value = '2 days' WHERE name = 'interface_window'",
            "UPDATE hivenet.setting SET value = '500' WHERE name = 'max_serials_per_call'",
            "SELECT count(*) FROM hivenet.setting",
            "SELECT count(*) FROM hivenet.request_attempt",
            *(f"SELECT count(*) FROM hivenet.{view}" for view in REPORTING_VIEWS),
        ]:
            assert refused_code(admin, sql) is None, sql
        db.execute("UPDATE hivenet.setting SET value = 'Asia/Tokyo' WHERE name = 'time_zone'")
        for setting, value in [("max_serials_per_call", "0"), ("time_zone", "UTC"),
                               ("step_retention", "-1 day"), ("step_lease", "0")]:
            with pytest.raises(psycopg.Error) as refused:
                admin.execute("UPDATE hivenet.setting SET value = %s WHERE name = %s",
                              (value, setting))
            assert refused.value.diag.sqlstate == "HN001", refused.value
            assert f"setting {setting}: '{value}'" in str(refused.value)
    assert scalar(db, "SELECT state::text FROM hivenet.step_attempt WHERE system_serial = %s",
                  (serial,)) == "success"
