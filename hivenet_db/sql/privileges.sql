-- Least privilege. Nothing in schema hivenet is granted to PUBLIC: a role that may see the
-- schema may do nothing in it, and a login with no grant at all may not draw from a counter by
-- its OID (nextval(oid) needs no USAGE on the schema). Three roles, granted to logins by the
-- owner (it holds them WITH ADMIN OPTION):
--   hivenet_app        the application API (allocation, claims, steps, keyed requests);
--   hivenet_reporting  SELECT on the reporting views and call_chain(): states, counts, ages
--                      and serials, never a stored request or response;
--   hivenet_admin      administration (maintain, fence, formats, registry, settings) and the
--                      reporting views; SELECT on every table.
-- The public functions are SECURITY DEFINER, so no role needs a right on a table, and none
-- may write one. What runs with the caller's rights is listed below and granted to the role
-- that calls it: the inlined fast paths (an inlined function is inlined only if the caller
-- may EXECUTE it, and what its body reads is checked as the caller) and the functions the
-- views call (PostgreSQL runs a view's functions as its reader). Functions are named without
-- their arguments (each name is one function of the schema), so a new parameter changes
-- nothing here. Nothing here opens a connection, and no setting holds a secret.

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
            hivenet.now,
            hivenet.next_unified_serial,
            hivenet.next_system_serial,
            hivenet.next_interface_serial,
            hivenet.next_serial,
            hivenet.next_serials,
            hivenet.parse_serial,
            hivenet.next_time_id,
            hivenet.next_time_ids,
            hivenet.parse_time_id,
            hivenet.claim_interface_serial,
            hivenet.call_chain,
            hivenet.claim,
            hivenet.begin_step,
            hivenet.finish_step,
            hivenet.begin_request,
            hivenet.watch_request,
            hivenet.finish_request,
            hivenet.begin_requests,
            hivenet.finish_requests,
            hivenet.ownership,
            hivenet.flush_at_commit
        TO hivenet_app;
        -- now() is inlined into the caller: its fake clock (clock.sql) runs as the caller.
        GRANT EXECUTE ON FUNCTION hivenet._fake_now TO hivenet_app;
        -- The allocation fast path (compile.sql, _fast_unified and _fast_system), inlined into
        -- next_unified_serial / next_system_serial: every function in it, and USAGE on the
        -- counters it draws from (_grant_counter). The constants say what the formats and
        -- settings are (no secret).
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_unified,
            hivenet._fast_system,
            hivenet._format_constant,
            hivenet._setting_constant,
            hivenet._scope_sequence_name
        TO hivenet_app;
        -- next_time_id and next_time_ids (time_ids.sql), inlined: their fast paths
        -- (_fast_time_id, _time_id_batch), and what they call when those give NULL:
        -- _next_time_id (SECURITY DEFINER, every check of next_time_id), the count's check.
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_time_id,
            hivenet._time_id_batch,
            hivenet._next_time_id,
            hivenet._time_id_count
        TO hivenet_app;
        FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s ORDER BY 1 LOOP
            IF to_regclass('hivenet.' || quote_ident(v_counter)) IS NOT NULL THEN
                PERFORM hivenet._grant_counter(v_counter);
            END IF;
        END LOOP;
        -- begin_step, begin_request (steps.sql, requests.sql) and their batches: the public
        -- functions are inlined into the caller's statement and call _start_key and
        -- _begin_key, both SECURITY DEFINER with every check: no role writes an attempt but
        -- through them, and they count each decision (decisions.sql), so calling them
        -- directly can do nothing the public functions cannot. No table or view of attempts
        -- is writable by the role.
        GRANT EXECUTE ON FUNCTION
            hivenet.begin_steps, hivenet.finish_steps, hivenet._start_key, hivenet._begin_key
        TO hivenet_app;
        -- The replay of a succeeded step, inlined into begin_step and run as the caller:
        -- _step_in_window and view _step_replay, SELECT only: of every succeeded step its
        -- serial, attempt, request fingerprint, unified serial and stored response, what
        -- begin_step replays to whoever presents the same request. The application's own
        -- replays: no other role reads them. It counts the replay as the caller: a probe of
        -- view _decision_counters and nextval on the steps' counter (USAGE:
        -- _grant_decision_counters). And what they inline: the callers' clock, the bound on
        -- intervals (clock.sql).
        GRANT EXECUTE ON FUNCTION
            hivenet._step_in_window, hivenet._fingerprint, hivenet._caller_now,
            hivenet._longest_interval, hivenet._interval_allowed
        TO hivenet_app;
        GRANT SELECT ON hivenet._step_replay, hivenet._decision_counters TO hivenet_app;
        PERFORM hivenet._grant_decision_counters();
    END IF;

    -- The reporting views and what they call as their reader, for both roles that read them.
    FOREACH v_role IN ARRAY ARRAY['hivenet_reporting', 'hivenet_admin'] LOOP
        CONTINUE WHEN to_regrole(v_role) IS NULL;
        EXECUTE format('GRANT USAGE ON SCHEMA hivenet TO %I', v_role);
        EXECUTE format('GRANT SELECT ON hivenet.interface_calls, '
                       'hivenet.interface_calls_per_day, hivenet.step_states, '
                       'hivenet.stuck_steps, hivenet.scope_usage, hivenet.request_states, '
                       'hivenet.stuck_requests, hivenet.request_attempts, '
                       'hivenet.request_decisions, '
                       'hivenet.clock_lead, hivenet.business_time_zone TO %I', v_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'hivenet.call_chain, '
                       'hivenet.now, hivenet._fake_now, hivenet._step_lease, '  -- stuck_*
                       'hivenet._reporting_local_now, hivenet._period_index, '  -- scope_usage
                       'hivenet._period_start, hivenet._scope_counter_value, '  -- also
                       -- request_decisions; clock_lead:
                       'hivenet._scope_sequence_name, hivenet._clock_sequence_name, '
                       -- interface_calls, and both for other formats:
                       'hivenet._serial_field, hivenet._serial_time, hivenet.parse_serial '
                       'TO %I', v_role);
    END LOOP;

    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.maintain,
            hivenet.fence_failover,
            hivenet._timeline,  -- `hivenet-db failover-fence` reports this timeline's fence
            hivenet.replication_warning,
            hivenet.define_format,
            hivenet.set_clock_policy,
            hivenet.prepare_scope,
            hivenet.register_system,
            hivenet.register_module,
            hivenet.own_instances,
            hivenet.ownership,
            hivenet.resolve_step,
            hivenet.resolve_request,
            hivenet.set_claim_expiry,
            hivenet.set_request_retention,
            hivenet.set_namespace_policy,
            hivenet.verify_audit_chain  -- `hivenet-db audit verify`
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
