-- Back from release 0.2.1 to 0.2.0.
-- Written by `python -m hivenet_db.tools.revision` from the schema files and the
-- hand-written .tables.sql and .data.sql beside this file: do not edit it.
-- Views as PostgreSQL 15 prints them.
-- Bodies are checked when they run, as pg_dump's scripts do.
SET LOCAL check_function_bodies = off;

-- Objects outside schema hivenet that call a function this revision drops and makes again:
-- an application's column defaults (a serial column's DEFAULT hivenet.next_unified_serial(...))
-- are kept, dropped, and set again after the functions are made (restore_dependents.sql); the
-- migrating role must own their tables. Anything else (a view, a function with an SQL body, a
-- constraint, an index, a trigger) would be dropped with them: the upgrade stops, naming it.
DO $$
DECLARE
    v_functions regprocedure[] := ARRAY(
        SELECT to_regprocedure(f) FROM unnest(ARRAY[
            'hivenet._create_scope_counter(hivenet.format,text,jsonb,text)',
            'hivenet._fence_floor(hivenet.format)',
            'hivenet._fenced_value(bigint,hivenet.format,bigint,bigint)']::text[]) AS f);
    v_blocking text;
    v_kept jsonb;
    v_default record;
BEGIN
    SELECT string_agg(DISTINCT coalesce(  -- a view, rather than its rule
               (SELECT pg_describe_object('pg_class'::regclass, r.ev_class, 0)
                FROM pg_rewrite r WHERE d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid),
               pg_describe_object(d.classid, d.objid, d.objsubid)), '; ')
    INTO v_blocking
    FROM pg_depend d
    WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (v_functions)
      AND d.deptype = 'n' AND d.classid <> 'pg_attrdef'::regclass
      AND (CASE d.classid
               WHEN 'pg_proc'::regclass THEN
                   (SELECT p.pronamespace FROM pg_proc p WHERE p.oid = d.objid)
               WHEN 'pg_rewrite'::regclass THEN
                   (SELECT c.relnamespace FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
                    WHERE r.oid = d.objid)
               WHEN 'pg_trigger'::regclass THEN
                   (SELECT c.relnamespace FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                    WHERE t.oid = d.objid)
               WHEN 'pg_constraint'::regclass THEN
                   (SELECT k.connamespace FROM pg_constraint k WHERE k.oid = d.objid)
               WHEN 'pg_class'::regclass THEN
                   (SELECT c.relnamespace FROM pg_class c WHERE c.oid = d.objid)
           END) IS DISTINCT FROM 'hivenet'::regnamespace;
    IF v_blocking IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'dependent_objects_still_exist',
            MESSAGE = format('this upgrade makes functions of schema hivenet again, and %s '
                             'calls one of them: drop it before the upgrade and make it again '
                             'after', v_blocking);
    END IF;
    FOR v_default IN
        SELECT a.adrelid::regclass AS relation, c.relowner, t.attname,
               pg_get_expr(a.adbin, a.adrelid) AS expression
        FROM pg_depend d
        JOIN pg_attrdef a ON d.classid = 'pg_attrdef'::regclass AND a.oid = d.objid
        JOIN pg_attribute t ON t.attrelid = a.adrelid AND t.attnum = a.adnum
        JOIN pg_class c ON c.oid = a.adrelid
        WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (v_functions)
          AND c.relnamespace <> 'hivenet'::regnamespace
        ORDER BY 1, 3
    LOOP
        IF NOT pg_has_role(v_default.relowner, 'USAGE') THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = format('the default of column %s of table %s calls a function of '
                                 'schema hivenet that this upgrade makes again: run the upgrade '
                                 'as a member of the table''s owner, %s, or drop the default '
                                 'before it and set it again after', v_default.attname,
                                 v_default.relation, v_default.relowner::regrole);
        END IF;
        v_kept := coalesce(v_kept, '[]') || jsonb_build_object('relation', v_default.relation,
            'column', v_default.attname, 'expression', v_default.expression);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', v_default.relation,
                       v_default.attname);
    END LOOP;
    PERFORM set_config('hivenet.revision_kept_defaults', coalesce(v_kept, '[]')::text, true);
END $$;

-- Code that goes, or changes what CREATE OR REPLACE cannot.
DROP FUNCTION hivenet._fenced_value(bigint,hivenet.format,bigint,bigint);
DROP FUNCTION hivenet._fence_floor(hivenet.format);
DROP FUNCTION hivenet._create_scope_counter(hivenet.format,text,jsonb,text);

-- Tables, types and sequences (the .tables.sql beside this file).
-- Back from release 0.2.1 to 0.2.0: tables, types and sequences, written by hand (the code
-- around them is written from the schema files: hivenet_db/tools/revision.py).

DROP SEQUENCE hivenet.fenced_at, hivenet.fenced_gaps;

-- Code, in dependency order.
CREATE OR REPLACE FUNCTION hivenet._begin_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, p_wait interval, p_raw_request bytea, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_policy hivenet.request_namespace;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(hivenet._start_valid(p_step, p_namespace, p_key, p_unified_serial,
                                              p_lease), false)) THEN
        BEGIN
            IF p_step THEN
                PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait, p_wait);
                PERFORM hivenet._check_step(p_namespace, p_key, p_unified_serial);
            ELSE
                PERFORM hivenet._check_name('namespace', p_namespace);
                PERFORM hivenet._check_name('key', p_key);
                PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait, p_wait);
            END IF;
        EXCEPTION WHEN SQLSTATE 'HN001' OR SQLSTATE 'HN002' OR SQLSTATE 'HN021' THEN
            PERFORM hivenet._count_decision(p_namespace, 'rejected');  -- decisions.sql
            RAISE;
        END;
    END IF;
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF NOT hivenet._key_allowed(v_policy, p_key) THEN
        PERFORM hivenet._raise_key_refused(p_namespace, p_key, v_policy.key_min_length,
                                           v_policy.key_pattern);
    END IF;
    IF p_nowait OR p_wait IS NOT NULL THEN  -- nowait: no wait (NULL), whatever p_wait says
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_within(p_namespace, v_policy, p_key, p_request,
                                           p_on_success, p_unified_serial, p_lease,
                                           p_raw_request,
                                           CASE WHEN NOT p_nowait THEN p_wait END) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, v_policy, p_key, p_request, p_on_success,
                                    p_unified_serial, p_lease, p_raw_request) b;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_key(boolean,text,text,jsonb,text,text,interval,boolean,interval,bytea) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._create_scope_counter(p_format hivenet.format, p_scope text, p_fields jsonb, p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    EXECUTE format('CREATE SEQUENCE hivenet.%I AS bigint MINVALUE 0 START 0', p_name);
    PERFORM hivenet._grant_counter(p_name);  -- for the fast path, run as the caller
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._scope_sequence_name(p_format.name, p_scope), 0);
    END IF;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), p_name)
    ON CONFLICT DO NOTHING;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._create_scope_counter(hivenet.format,text,jsonb,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text, p_enforce_registry boolean, p_allow_fake_clock boolean)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    v_bounds text[] := ARRAY[]::text[];
    v_printed text;
    v_field text;
    v_counter text;
    v_fake_clock text := '';
    -- Until the session's first allocation has checked the timeline (failover.sql).
    v_checked text := $f$current_setting('hivenet.timeline_checked', true) = 'true' AND $f$;
BEGIN
    IF p_format IS NULL OR p_enforce_registry OR p_format.reset IS DISTINCT FROM 'day'
       OR p_format.key_fields IS NOT NULL OR p_format.tail_pattern <> ''
       OR cardinality(p_format.field_names) <> 3
       -- Outside the quoted field values, the pattern prints the date only.
       OR regexp_replace(p_format.head_pattern, '"[^"]*"', '', 'g') !~ '^(YYYY|YY|MM|DD)*$'
       OR p_format.capacity <> 10::bigint ^ p_format.seq_width - 1 THEN
        RETURN 'NULL::text';
    END IF;
    FOR i IN 1 .. 3 LOOP
        v_field := (ARRAY['p_a', 'p_b', 'p_c'])[i];
        IF p_format.field_min[i] IS NOT NULL THEN
            v_bounds := v_bounds || format('%s::numeric >= %s', v_field, p_format.field_min[i]);
        END IF;
        IF p_format.field_max[i] IS NOT NULL THEN
            v_bounds := v_bounds || format('%s::numeric <= %s', v_field, p_format.field_max[i]);
        END IF;
    END LOOP;
    -- The counter: the scope's own sequence by its qualified name, NULL for a scope without
    -- one (unprepared, or parked: ownership.sql), which nextval (strict) passes on to the full
    -- path. The values are alnum here (the pattern matched), so the quoted name is theirs.
    -- The session's catalog cache may not see a sequence created since its transaction
    -- began: NULL then too, and the full path finds it (_issue_unprepared).
    v_counter := format('to_regclass(%L || p_a || p_b || p_c || %L)',
                        'hivenet."' || hivenet._scope_sequence_name(p_format.name, ''), '"');
    IF p_allow_fake_clock THEN
        v_fake_clock := $f$coalesce(current_setting('hivenet.fake_now', true), '') = '' AND $f$;
    END IF;
    -- The values then the date (the built-in layouts): no format() at run time.
    v_printed := CASE WHEN starts_with(p_format.head_pattern, '"%1$s""%2$s""%3$s"')
        THEN format('p_a || p_b || p_c || to_char(%s, %L)', v_local,
                    substr(p_format.head_pattern, 19))
        ELSE format('to_char(%s, format(%L, p_a, p_b, p_c))', v_local, p_format.head_pattern)
        END;
    -- Nested CASE: the casts of the bounds are safe only once the values matched. The period
    -- is _period_index(local, 'day') as days since the day before its first, and the clamp
    -- maps 0 and capacity + 1 both to 0, then NULL.
    RETURN format(
        $f$CASE WHEN (p_a || ' ' || p_b || ' ' || p_c) ~ %L THEN CASE
    WHEN %s%s%s
    THEN %s || to_char(nullif(least(greatest(
             nextval(%s)
             - (%s::date - %L::date) * %s::bigint,
             0), %s) %% %s, 0), %L)
    END END$f$,
        p_format.field_pattern, v_checked, v_fake_clock,
        coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local,
        date '2000-01-01' - hivenet._period_index(timestamp '2000-01-01', 'day')::integer,
        p_format.stride, p_format.capacity + 1, p_format.capacity + 1,
        'FM' || repeat('0', p_format.seq_width));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fast_path_expression(hivenet.format,text,boolean,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND ((p_c)::numeric >= (1)::numeric)) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || to_char(NULLIF((LEAST(GREATEST((nextval(to_regclass((((('hivenet."seq_system_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), '1000000000000'::bigint) % '1000000000000'::bigint), 0), 'FM000000000000'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._fast_system(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND ((p_c)::numeric >= (1)::numeric)) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || to_char(NULLIF((LEAST(GREATEST((nextval(to_regclass((((('hivenet."seq_unified_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), '10000000000'::bigint) % '10000000000'::bigint), 0), 'FM0000000000'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._fast_unified(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
 RETURNS TABLE(timeline integer, format text, counter text, from_value bigint, to_value bigint, parked boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_format hivenet.format;
    v_period bigint;
    v_seq regclass;
    v_count integer := 0;
BEGIN
    IF p_gap IS NULL OR p_gap < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failover fence: gap %s must be at least 1',
                             coalesce(p_gap::text, 'NULL'));
    END IF;
    -- The fences' lock: key 1 of the period resets' space, whose other keys are sequence
    -- OIDs (never below 16384) and maintain()'s 0.
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), 1);
    BEGIN
        IF p_force OR NOT hivenet._fenced() THEN
            FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
                PERFORM pg_advisory_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
                BEGIN
                    v_period := hivenet._period_index(hivenet.now() AT TIME ZONE
                        hivenet._setting_value('time_zone'), v_format.reset);
                    FOR counter IN
                        SELECT hivenet._cold_sequence_name(v_format.name)
                        UNION ALL
                        (SELECT s.sequence_name FROM hivenet.scope s
                         WHERE s.format = v_format.name ORDER BY s.sequence_name)
                    LOOP
                        v_seq := to_regclass('hivenet.' || quote_ident(counter));
                        CONTINUE WHEN v_seq IS NULL;
                        SELECT f.from_value, f.to_value, f.parked
                        INTO from_value, to_value, parked
                        FROM hivenet._fence_counter(v_seq, v_format, v_period, p_gap) f;
                        v_count := v_count + 1;
                        timeline := v_timeline;
                        format := v_format.name;
                        RETURN NEXT;
                    END LOOP;
                EXCEPTION WHEN OTHERS OR query_canceled THEN
                    PERFORM pg_advisory_unlock(hivenet._cold_lock_space(),
                                               hashtext(v_format.name));
                    RAISE;
                END;
                PERFORM pg_advisory_unlock(hivenet._cold_lock_space(), hashtext(v_format.name));
            END LOOP;
            PERFORM setval('hivenet.fenced_timeline', v_timeline);
            INSERT INTO hivenet.failover_fence AS f (timeline, gap, counters, applied_by)
            VALUES (v_timeline, p_gap, v_count, p_by)
            ON CONFLICT ON CONSTRAINT failover_fence_pkey DO UPDATE
                SET fenced_at = clock_timestamp(), gap = coalesce(f.gap, 0) + EXCLUDED.gap,
                    counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by;
            RAISE LOG USING MESSAGE = format(
                'hivenet: fenced timeline %s (%s): %s counters moved forward by %s',
                v_timeline, p_by, v_count, p_gap);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), 1);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), 1);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fence(bigint,boolean,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fence_counter(p_seq regclass, p_format hivenet.format, p_period bigint, p_gap bigint, OUT from_value bigint, OUT to_value bigint, OUT parked boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_base bigint;
    v_last bigint;
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_seq::oid::integer);
    BEGIN
        -- Its value, also one set as the next (is_called false: a prepared scope's start,
        -- counters.sql), which pg_sequence_last_value does not show.
        EXECUTE format('SELECT last_value FROM %s', p_seq) INTO from_value;
        v_base := greatest(from_value, p_period * p_format.stride);
        to_value := v_base + p_gap;
        v_last := (v_base / p_format.stride) * p_format.stride + p_format.capacity;
        parked := NOT p_format.borrow_next_period AND to_value > v_last;
        IF parked THEN
            to_value := greatest(v_last, from_value);
        END IF;
        PERFORM setval(p_seq, to_value, true);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fence_counter(regclass,hivenet.format,bigint,bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fenced()
 RETURNS boolean
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT pg_sequence_last_value('hivenet.fenced_timeline') IS NOT DISTINCT FROM hivenet._timeline()
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._fenced() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._grant_roles()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
                       'hivenet.stuck_requests, hivenet.request_attempts, hivenet.request_decisions, '
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._promote_scope(p_format hivenet.format, p_scope text, p_fields jsonb, p_drawn boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, p_scope);
    v_fallback regclass;
    v_issued bigint;  -- the fallback's last value, NULL before its first
BEGIN
    PERFORM hivenet._check_timeline();
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format.name));
    -- Another promotion of the scope may have committed while we waited for the lock.
    IF hivenet._committed_sequence(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM hivenet._create_scope_counter(p_format, p_scope, p_fields, v_name);
    v_fallback := ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass;
    v_issued := pg_sequence_last_value(v_fallback);
    IF v_issued > 0 AND p_drawn THEN
        PERFORM setval(('hivenet.' || quote_ident(v_name))::regclass, v_issued, true);
    ELSIF v_issued > 0 THEN
        PERFORM setval(('hivenet.' || quote_ident(v_name))::regclass, 1 + CASE
            WHEN p_drawn IS NULL THEN v_issued
            ELSE greatest(v_issued / p_format.stride, hivenet._period_index(
                     hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                     p_format.reset)) * p_format.stride END, false);
    END IF;
    IF p_format.clock_unit IS NOT NULL AND p_drawn IS NOT FALSE THEN
        PERFORM hivenet._create_clock(v_name,
            pg_sequence_last_value(hivenet._clock_sequence(v_fallback)));
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._recompile()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_settings jsonb := (SELECT coalesce(jsonb_object_agg(s.name, s.value), '{}')
                         FROM hivenet.setting s);
    v_format hivenet.format;
    v_layout record;
    v_unified hivenet.format;  -- for step 3
    v_system hivenet.format;
    v_system_layout record;    -- for step 4, when format 'system' exists
    v_formats text := '';
    v_valid text := '';
    v_shaped text := '';
    v_time text := '';
    v_field text := '';
    v_scope text := '';
    v_time_ids text[] := ARRAY['', '', '', '', ''];  -- _fast_time_id; _time_id_batch's four
    v_parts record;
BEGIN
    FOR v_format IN SELECT * FROM hivenet.format f ORDER BY f.name LOOP
        v_formats := v_formats || format(' WHEN %L THEN %L::hivenet.format', v_format.name,
                                         v_format::text);
        IF v_format.time_shift IS NOT NULL THEN
            -- A numeric format: a fast path, and no text layout (parse_time_id reads its ids).
            SELECT * INTO v_parts FROM hivenet._time_id_parts(v_format,
                coalesce(v_settings ->> 'time_zone', 'UTC'),
                coalesce((v_settings ->> 'enforce_registry')::boolean, false),
                coalesce((v_settings ->> 'allow_fake_clock')::boolean, false));
            CONTINUE WHEN v_parts.guard IS NULL;
            -- The seq: a value of the statement's period within capacity, else NULL (the
            -- clamp of _fast_path_expression; next_time_ids has the same for its rows).
            v_time_ids := ARRAY[
                v_time_ids[1] || format(' WHEN %L THEN CASE WHEN %s THEN %s | nullif(least('
                                        'greatest(nextval(%s) - %s, 0), %s) %% %s, 0) END',
                                        v_format.name, v_parts.guard, v_parts.high,
                                        v_parts.counter, v_parts.base, v_parts.capacity + 1,
                                        v_parts.capacity + 1),
                v_time_ids[2] || format(' WHEN %L THEN CASE WHEN %s THEN %s END', v_format.name,
                                        v_parts.guard, v_parts.high),
                v_time_ids[3] || format(' WHEN %L THEN CASE WHEN %s THEN %s END', v_format.name,
                                        v_parts.guard, v_parts.counter),
                v_time_ids[4] || format(' WHEN %L THEN %s', v_format.name, v_parts.base),
                v_time_ids[5] || format(' WHEN %L THEN %s', v_format.name,
                                        v_parts.capacity + 1)];
            CONTINUE;
        END IF;
        SELECT * INTO v_layout FROM hivenet._layout_sql(v_format);
        v_valid := v_valid || format(' WHEN %L THEN %s', v_format.name, v_layout.valid);
        v_shaped := v_shaped || format(' WHEN %L THEN %s', v_format.name, v_layout.shape);
        -- NULL unless valid: the function is public (views), and casts of a serial that only
        -- looks right (month 99) would fail.
        v_time := v_time || format(' WHEN %L THEN %s', v_format.name,
            CASE WHEN v_layout.time_of IS NULL THEN 'NULL::timestamp'
                 ELSE format('CASE WHEN %s THEN %s END', v_layout.valid, v_layout.time_of)
                 END);
        v_field := v_field || format(' WHEN %L THEN CASE p_field%s ELSE NULL::text END',
            v_format.name, (SELECT coalesce(string_agg(format(' WHEN %L THEN %s', f.key,
                                                              f.value), '' ORDER BY f.key),
                                            ' WHEN NULL THEN NULL')
                            FROM jsonb_each_text(v_layout.fields) f));
        v_scope := v_scope || format(' WHEN %L THEN %s', v_format.name,
                                     coalesce(v_layout.scope, 'NULL::text'));
        IF v_format.name = 'unified' THEN
            v_unified := v_format;
        ELSIF v_format.name = 'system' THEN
            v_system := v_format;
            v_system_layout := v_layout;
        END IF;
    END LOOP;
    -- 1. The rows, as constants.
    PERFORM hivenet._replace_function('_setting_constant(p_name text)', 'text', 'STABLE',
        format('CASE p_name %s ELSE NULL::text END', coalesce(
            (SELECT string_agg(format('WHEN %L THEN %L', s.key, s.value), ' ' ORDER BY s.key)
             FROM jsonb_each_text(v_settings) s), 'WHEN NULL THEN NULL')));
    PERFORM hivenet._replace_function('_format_constant(p_name text)', 'hivenet.format',
        'STABLE', format('CASE p_name %s ELSE NULL::hivenet.format END',
                         coalesce(nullif(v_formats, ''), 'WHEN NULL THEN NULL')));
    -- 2. The layouts.
    PERFORM hivenet._replace_function('_serial_valid(p_format text, p_serial text)', 'boolean',
        'STABLE', format('CASE p_format%s ELSE NULL::boolean END', v_valid));
    PERFORM hivenet._replace_function('_serial_shaped(p_format text, p_serial text)',
        'boolean', 'STABLE', format('CASE p_format%s ELSE NULL::boolean END', v_shaped));
    PERFORM hivenet._replace_function('_serial_time(p_format text, p_serial text)',
        'timestamp', 'STABLE', format(
            'CASE p_format%s ELSE coalesce(hivenet.parse_serial(p_serial, p_format) '
            '->> ''datetime'', hivenet.parse_serial(p_serial, p_format) ->> ''date'')'
            '::timestamp END', v_time));
    PERFORM hivenet._replace_function(
        '_serial_field(p_format text, p_serial text, p_field text)', 'text', 'STABLE',
        format('CASE p_format%s ELSE hivenet.parse_serial(p_serial, p_format) ->> p_field END',
               v_field));
    PERFORM hivenet._replace_function('_serial_scope(p_format text, p_serial text)', 'text',
        'STABLE', format('CASE p_format%s ELSE NULL::text END', v_scope));
    -- 3. The allocation fast paths.
    PERFORM hivenet._replace_function('_fast_unified(p_a text, p_b text, p_c text)', 'text',
        'VOLATILE', hivenet._fast_path_expression(v_unified,
            coalesce(v_settings ->> 'time_zone', 'UTC'),
            coalesce((v_settings ->> 'enforce_registry')::boolean, false),
            coalesce((v_settings ->> 'allow_fake_clock')::boolean, false)));
    PERFORM hivenet._replace_function('_fast_system(p_a text, p_b text, p_c text)', 'text',
        'VOLATILE', hivenet._fast_path_expression(v_system,
            coalesce(v_settings ->> 'time_zone', 'UTC'),
            coalesce((v_settings ->> 'enforce_registry')::boolean, false),
            coalesce((v_settings ->> 'allow_fake_clock')::boolean, false)));
    -- A CASE needs a branch: none for a database without numeric formats (mid-upgrade).
    v_time_ids := ARRAY(SELECT coalesce(nullif(b, ''), ' WHEN NULL THEN NULL')
                        FROM unnest(v_time_ids) WITH ORDINALITY AS t (b, i) ORDER BY i);
    PERFORM hivenet._replace_function('_fast_time_id(p_format text, p_fields jsonb)', 'bigint',
        'VOLATILE', format('CASE p_format%s ELSE NULL::bigint END', v_time_ids[1]));
    PERFORM hivenet._replace_function('_time_id_batch(p_format text, p_fields jsonb, '
        'OUT high bigint, OUT counter regclass, OUT base bigint, OUT modulus bigint)',
        'record', 'STABLE', format('CASE p_format%s ELSE NULL::bigint END, CASE p_format%s '
        'ELSE NULL::regclass END, CASE p_format%s ELSE NULL::bigint END, CASE p_format%s '
        'ELSE NULL::bigint END', v_time_ids[2], v_time_ids[3], v_time_ids[4],
        v_time_ids[5]));
    -- 4. The window of steps.
    IF v_system.name IS NULL THEN
        SELECT NULL::text AS valid, NULL::text AS time_of, NULL::integer AS date_at
        INTO v_system_layout;
    END IF;
    PERFORM hivenet._replace_function('_step_in_window(p_serial text)', 'boolean', 'VOLATILE',
        hivenet._step_window_expression(v_system_layout.valid, v_system_layout.time_of,
                                        v_system_layout.date_at, v_settings));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._recompile() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, p_wait interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_policy hivenet.request_namespace;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(hivenet._start_valid(p_step, p_namespace, p_key, p_unified_serial,
                                              p_lease), false)) THEN
        RETURN false;
    END IF;
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF hivenet._starts_apart(v_policy) OR NOT hivenet._key_allowed(v_policy, p_key) THEN
        RETURN false;
    END IF;
    RETURN hivenet._start_attempt(p_namespace, p_key, 1, hivenet._fingerprint(p_request),
                                  p_unified_serial, p_lease, false, NULL);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_key(boolean,text,text,jsonb,text,text,interval,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_system_serial(system text, module text, instance text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_system(system, module, instance), hivenet.next_serial('system'::text, jsonb_build_object('system', system, 'module', module, 'instance', instance))) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_system_serial(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_unified_serial(system text, module text, instance text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_unified(system, module, instance), hivenet.next_serial('unified'::text, jsonb_build_object('system', system, 'module', module, 'instance', instance))) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_unified_serial(text,text,text) FROM PUBLIC;

-- The column defaults keep_dependents.sql kept, set again: their expressions, read again,
-- call the functions just made.
DO $$
DECLARE
    v_default record;
BEGIN
    FOR v_default IN
        SELECT * FROM jsonb_to_recordset(
            current_setting('hivenet.revision_kept_defaults')::jsonb)
            AS k (relation text, "column" text, expression text)
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', v_default.relation,
                       v_default."column", v_default.expression);
    END LOOP;
END $$;

-- Grants as a fresh install makes them (privileges.sql), and the generated
-- functions from this database's settings and formats (compile.sql).
SELECT hivenet._grant_roles();
SELECT hivenet._recompile();
