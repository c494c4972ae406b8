-- Least privilege. Two roles, created once by `hivenet-db bootstrap` (the owner may not create
-- roles): hivenet_app may call the application API and read the reporting views; hivenet_admin
-- also runs the administrative functions and changes settings. The public functions are
-- SECURITY DEFINER, so neither needs any right on a table, and the private helpers
-- (hivenet._*) stay the owner's, but for the allocation fast path, the step replay and a
-- new step's start (below): those run with the caller's rights. Nothing here opens a
-- connection, and no setting holds a secret. Applied last; a revision that adds functions
-- applies it again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's.
CREATE OR REPLACE FUNCTION hivenet._set_public_execute(p_grant boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
        ORDER BY p.oid::regprocedure::text
    LOOP
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

-- The application API: executable by every role, usable by those with USAGE on the schema.
GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
    hivenet.next_unified_serial(text, text, text),
    hivenet.next_system_serial(text, text, text),
    hivenet.next_interface_serial(text, text, text, text),
    hivenet.next_serial(text, jsonb),
    hivenet.next_serials(text, jsonb, integer),
    hivenet.parse_serial(text, text),
    hivenet.claim_interface_serial(text, text, text, boolean),
    hivenet.call_chain(text),
    hivenet.claim(text, text, boolean),
    hivenet.begin_step(text, jsonb, text, text, interval, boolean),
    hivenet.finish_step(text, integer, boolean, jsonb),
    hivenet._step_lease(interval),       -- in views stuck_steps/_requests, as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now(),
    hivenet._serial_field(text, text, text),  -- in view interface_calls, likewise
    hivenet._serial_time(text, text)
TO PUBLIC;
-- Keyed requests (requests.sql).
GRANT EXECUTE ON FUNCTION
    hivenet.begin_request(text, text, jsonb, text, interval, boolean),
    hivenet.finish_request(text, text, integer, boolean, jsonb)
TO PUBLIC;
-- What this database owns among several primaries (ownership.sql).
GRANT EXECUTE ON FUNCTION hivenet.ownership() TO PUBLIC;

-- The replay fast path of begin_step (steps.sql) is inlined into the caller's statement and
-- runs with the caller's rights: it calls _step_in_window and, for everything but a plain
-- replay, _begin_step (SECURITY DEFINER, every check of begin_step: calling it directly can do
-- nothing begin_step cannot), and reads view _step_replay. So any role that may call
-- begin_step may read, of every succeeded step, its serial, attempt, request fingerprint,
-- unified serial and stored response: what begin_step replays to whoever presents the same
-- request. Not the requests, errors, notes, leases or times, not other namespaces (keyed
-- requests), and no write: the view is granted SELECT only, the table nothing.
GRANT EXECUTE ON FUNCTION
    hivenet._begin_step(text, jsonb, text, text, interval, boolean),
    hivenet._step_in_window(text),
    hivenet._fingerprint(jsonb)
TO PUBLIC;
GRANT SELECT ON hivenet._step_replay TO PUBLIC;

-- A new step's first attempt (steps.sql, view _step_start: the Python layer's begin) is one
-- INSERT into a view whose rule writes with the owner's rights: PUBLIC may insert, not read.
-- PostgreSQL runs a view's functions as its user, so the rule's checks must be executable by
-- the caller too: _step_start_valid and the generated layout check _serial_valid it calls join
-- _serial_time (above), as public (they say whether a text is a valid serial of a format, or
-- a valid start; no secret).
GRANT INSERT ON hivenet._step_start TO PUBLIC;
-- The same for a new keyed request (requests.sql, view _request_start): its checks
-- (_request_start_valid) call no function of the schema but the fingerprint and the clock,
-- both public.
GRANT INSERT ON hivenet._request_start TO PUBLIC;
GRANT EXECUTE ON FUNCTION
    hivenet._serial_valid(text, text),
    hivenet._step_start_valid(text, text, interval),
    hivenet._request_start_valid(text, text, interval)
TO PUBLIC;
-- The rules those checks and _step_in_window inline (clock.sql, claims.sql): the callers'
-- clock, the bound on intervals, the rule for names and keys.
GRANT EXECUTE ON FUNCTION
    hivenet._caller_now(timestamptz, text),
    hivenet._longest_interval(),
    hivenet._interval_allowed(interval),
    hivenet._name_valid(text)
TO PUBLIC;

-- The allocation fast path (allocate.sql, _fast_unified and _fast_system) is inlined into the
-- caller's statement and runs with the caller's rights, so every function in it must be
-- executable by the caller, and the caller may take values of the counter sequences of scopes: USAGE (nextval,
-- currval), never UPDATE (setval, which only the owner's slow path runs) nor ALTER. Granted to
-- PUBLIC like the allocation functions: taking a value is what any caller of next_serial
-- does. The constants say what the formats and settings are (no secret: settings.sql). A
-- scope's sequence gets its grant when made (_promote_scope); this covers older scopes.
GRANT EXECUTE ON FUNCTION
    hivenet._fast_unified(text, text, text),
    hivenet._fast_system(text, text, text),
    hivenet._format_constant(text),
    hivenet._setting_constant(text),
    hivenet._scope_sequence_name(text, text)
TO PUBLIC;
DO $$
DECLARE
    v_name text;
BEGIN
    FOR v_name IN SELECT sequence_name FROM hivenet.scope ORDER BY sequence_name LOOP
        IF to_regclass('hivenet.' || quote_ident(v_name)) IS NOT NULL THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO PUBLIC', v_name);
        END IF;
    END LOOP;
END $$;

-- Grants to hivenet_app and hivenet_admin, for those of them that exist (bootstrap creates
-- them; called again by bootstrap when it runs after the schema was installed).
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        GRANT SELECT ON hivenet.interface_calls, hivenet.interface_calls_per_day,
            hivenet.step_states, hivenet.stuck_steps, hivenet.scope_usage TO hivenet_app;
        GRANT SELECT ON hivenet.request_states, hivenet.stuck_requests TO hivenet_app;
    END IF;
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_admin;
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.maintain(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.register_system(text, text), hivenet.register_module(text, text, text),
            hivenet.set_claim_expiry(text, interval), hivenet.prepare_scope(text, jsonb),
            hivenet.fence_failover(bigint, boolean), hivenet.replication_warning()
        TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.own_instances(text, boolean, boolean)
        TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

SELECT hivenet._grant_roles();
