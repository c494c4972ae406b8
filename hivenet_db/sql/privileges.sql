-- Least privilege. Nothing in schema hivenet is granted to PUBLIC: a role that may see the
-- schema may do nothing in it, and a login with no grant at all may not draw from a counter by
-- its OID (nextval(oid) needs no USAGE on the schema). Three roles, granted to logins by the
-- owner (it holds them WITH ADMIN OPTION):
--   hivenet_app        the application API (allocation, claims, steps, keyed requests);
--   hivenet_reporting  SELECT on the reporting views and call_chain(): states, counts, ages
--                      and serials, never a stored request or response;
--   hivenet_admin      administration (maintain, fence, formats, registry, settings) and the
--                      reporting views; SELECT on every table.
-- The public functions are SECURITY DEFINER, so no role needs a right on a table. What runs
-- with the caller's rights is listed below and granted to the role that calls it: the
-- inlined fast paths (an inlined function is inlined only if the caller may EXECUTE it, and
-- what its body reads is checked as the caller), the rules of the start views, and the
-- functions the views call (PostgreSQL runs a view's functions as its reader). Nothing here
-- opens a connection, and no setting holds a secret.

-- The roles, when the migrating role may create them (a superuser, or CREATEROLE: a
-- developer's laptop, the embedded server). Otherwise `hivenet-db bootstrap` creates them and
-- runs _grant_roles(); until then only the owner may use the schema (migrate says so).
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['hivenet_app', 'hivenet_reporting', 'hivenet_admin'] LOOP
        IF to_regrole(v_role) IS NULL
           AND (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
        END IF;
    END LOOP;
END $$;

-- Grants to the roles that exist (called here, and by bootstrap when it creates them after the
-- schema was installed). Safe to run again.
CREATE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_counter text;
    v_role text;
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        -- The application API.
        GRANT EXECUTE ON FUNCTION
            hivenet.now(),
            hivenet.next_unified_serial(text, text, text),
            hivenet.next_system_serial(text, text, text),
            hivenet.next_interface_serial(text, text, text, text),
            hivenet.next_serial(text, jsonb),
            hivenet.next_serials(text, jsonb, integer),
            hivenet.parse_serial(text, text),
            hivenet.next_time_id(text, jsonb),
            hivenet.next_time_ids(text, integer, jsonb),
            hivenet.parse_time_id(bigint, text),
            hivenet.claim_interface_serial(text, text, text, boolean),
            hivenet.call_chain(text),
            hivenet.claim(text, text, boolean),
            hivenet.begin_step(text, jsonb, text, text, interval, boolean),
            hivenet.finish_step(text, integer, boolean, jsonb),
            hivenet.begin_request(text, text, jsonb, text, interval, boolean, interval),
            hivenet.watch_request(text, text),
            hivenet.finish_request(text, text, integer, boolean, jsonb),
            hivenet.begin_requests(text, text[], jsonb[], interval),
            hivenet.finish_requests(text, text[], integer[], boolean[], jsonb[]),
            hivenet.ownership(),
            hivenet.flush_at_commit()
        TO hivenet_app;
        -- now() is inlined into the caller: its fake clock (clock.sql) runs as the caller.
        GRANT EXECUTE ON FUNCTION hivenet._fake_now() TO hivenet_app;
        -- The allocation fast path (compile.sql, _fast_unified and _fast_system), inlined into
        -- next_unified_serial / next_system_serial: every function in it, and USAGE on the
        -- counters it draws from (_grant_counter). The constants say what the formats and
        -- settings are (no secret).
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_unified(text, text, text),
            hivenet._fast_system(text, text, text),
            hivenet._format_constant(text),
            hivenet._setting_constant(text),
            hivenet._scope_sequence_name(text, text)
        TO hivenet_app;
        -- next_time_id and next_time_ids (time_ids.sql), inlined: their fast paths
        -- (_fast_time_id, _time_id_batch), and what they call when those give NULL:
        -- _next_time_id (SECURITY DEFINER, every check of next_time_id), the count's check.
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_time_id(text, jsonb),
            hivenet._time_id_batch(text, jsonb),
            hivenet._next_time_id(text, jsonb),
            hivenet._time_id_count(text, integer)
        TO hivenet_app;
        FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s ORDER BY 1 LOOP
            IF to_regclass('hivenet.' || quote_ident(v_counter)) IS NOT NULL THEN
                PERFORM hivenet._grant_counter(v_counter);
            END IF;
        END LOOP;
        -- begin_step and begin_request (steps.sql, requests.sql), inlined into the caller's
        -- statement. The replay of a succeeded step: _step_in_window and view _step_replay,
        -- SELECT only: of every succeeded step its serial, attempt, request fingerprint,
        -- unified serial and stored response, what begin_step replays to whoever presents the
        -- same request. The application's own replays: no other role reads them.
        GRANT EXECUTE ON FUNCTION
            hivenet._step_in_window(text),
            hivenet._fingerprint(jsonb)
        TO hivenet_app;
        GRANT SELECT ON hivenet._step_replay TO hivenet_app;
        -- A new step's or key's first attempt: _start_step / _start_request (run as the
        -- caller) insert into view _step_start / _request_start, whose rule writes with the
        -- owner's rights: the role may insert, not read. The rules' checks run as the
        -- inserter: _step_start_valid and the generated layout check _serial_valid with
        -- _serial_time (compile.sql), and _request_start_valid.
        GRANT INSERT ON hivenet._step_start, hivenet._request_start TO hivenet_app;
        -- Both count their decision as the caller (decisions.sql): a probe of view
        -- _decision_counters and nextval on a counter (USAGE: _grant_decision_counters); a
        -- namespace's first start makes its counters through SECURITY DEFINER
        -- _new_decision_counter. So does begin_step's replay.
        GRANT SELECT ON hivenet._decision_counters TO hivenet_app;
        GRANT EXECUTE ON FUNCTION
            hivenet._count_decision(text, text),
            hivenet._new_decision_counter(text, text)
        TO hivenet_app;
        PERFORM hivenet._grant_decision_counters();
        GRANT EXECUTE ON FUNCTION
            hivenet._plain_options(text, boolean),
            hivenet._start_step(text, jsonb, text, text, interval, boolean),
            hivenet._start_request(text, text, jsonb, text, interval, boolean),
            hivenet._serial_valid(text, text),
            hivenet._serial_time(text, text),
            hivenet._step_start_valid(text, text, interval),
            hivenet._request_start_valid(text, text, interval)
        TO hivenet_app;
        -- Who begins an attempt (requests.sql), recorded by those rules as the inserter.
        GRANT EXECUTE ON FUNCTION hivenet._called_by() TO hivenet_app;
        -- Everything else: _begin_step / _begin_request (SECURITY DEFINER, every check of
        -- begin_step / begin_request: calling them directly can do nothing the public
        -- functions cannot).
        GRANT EXECUTE ON FUNCTION
            hivenet._begin_step(text, jsonb, text, text, interval, boolean),
            hivenet._begin_request(text, text, jsonb, text, interval, boolean, interval)
        TO hivenet_app;
        -- The rules those checks and _step_in_window inline (clock.sql, claims.sql): the
        -- callers' clock, the bound on intervals, the rule for names and keys and the
        -- characters it refuses (settings.sql).
        GRANT EXECUTE ON FUNCTION
            hivenet._caller_now(timestamptz, text),
            hivenet._longest_interval(),
            hivenet._interval_allowed(interval),
            hivenet._name_valid(text),
            hivenet._unseen_characters()
        TO hivenet_app;
    END IF;

    -- The reporting views and what they call as their reader, for both roles that read them.
    FOREACH v_role IN ARRAY ARRAY['hivenet_reporting', 'hivenet_admin'] LOOP
        CONTINUE WHEN to_regrole(v_role) IS NULL;
        EXECUTE format('GRANT USAGE ON SCHEMA hivenet TO %I', v_role);
        EXECUTE format('GRANT SELECT ON hivenet.interface_calls, '
                       'hivenet.interface_calls_per_day, hivenet.step_states, '
                       'hivenet.stuck_steps, hivenet.scope_usage, hivenet.request_states, '
                       'hivenet.stuck_requests, hivenet.request_attempts, hivenet.request_decisions, '
                       'hivenet.clock_lead, hivenet.business_time_zone TO %I', v_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'hivenet.call_chain(text), '
                       'hivenet.now(), hivenet._fake_now(), '    -- stuck_steps, stuck_requests
                       'hivenet._step_lease(interval), '         -- likewise
                       'hivenet._reporting_local_now(), '        -- scope_usage
                       'hivenet._period_index(timestamp, text), '
                       'hivenet._period_start(bigint, text), '
                       'hivenet._scope_counter_value(text), '    -- and request_decisions
                       'hivenet._scope_sequence_name(text, text), '  -- clock_lead
                       'hivenet._clock_sequence_name(text), '
                       'hivenet._serial_field(text, text, text), '  -- interface_calls
                       'hivenet._serial_time(text, text), '
                       'hivenet.parse_serial(text, text) '          -- in both, for other formats
                       'TO %I', v_role);
    END LOOP;

    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.maintain(),
            hivenet.fence_failover(bigint, boolean),
            hivenet._timeline(),  -- `hivenet-db failover-fence` reports this timeline's fence
            hivenet.replication_warning(),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.set_clock_policy(text, text, interval),
            hivenet.prepare_scope(text, jsonb),
            hivenet.register_system(text, text),
            hivenet.register_module(text, text, text),
            hivenet.own_instances(text, boolean, boolean),
            hivenet.ownership(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_claim_expiry(text, interval),
            hivenet.set_request_retention(text, interval),
            hivenet.set_namespace_policy(text, interval, text, text, interval, integer, text,
                                         boolean),
            hivenet.verify_audit_chain(text)  -- `hivenet-db audit verify`
        TO hivenet_admin;
    END IF;
END $$;

-- Functions are executable by PUBLIC when created: take that back from every function of the
-- schema that is not an extension's. (Generated functions are replaced, never created anew,
-- so they keep their grants.)
DO $$
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
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_function);
    END LOOP;
END $$;

SELECT hivenet._grant_roles();
