-- Revision 0022: one definition each for two rules that were written out several times, and
-- a leaner check in begin_step's full path.
-- * hivenet._fingerprint(request): the request's fingerprint, until now spelled out in
--   _begin_attempt, begin_request, _begin_step and begin_step.
-- * hivenet._lane_sequence(format, lane): a lane's sequence as a regclass, until now built from
--   its name in _lane, _create_lanes and _fast_path_expression (trigger _setting_check keeps
--   its own: it runs as the setting's writer, and this helper is the owner's).
-- * _begin_step no longer tests the system serial with _serial_valid before _serial_time,
--   which checks the same layout and is NULL for a serial that fails it.
-- Redefines those functions; behaviour unchanged.

-- hivenet_db/sql/allocate.sql
-- That lane sequence itself (which must exist).
CREATE OR REPLACE FUNCTION hivenet._lane_sequence(p_format text, p_lane integer) RETURNS regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('hivenet.' || quote_ident(hivenet._lane_sequence_name(p_format, p_lane)))::regclass
$$;


-- The lane sequence of counter scope p_scope of laned format p_format.
CREATE OR REPLACE FUNCTION hivenet._lane(p_format hivenet.format, p_scope text) RETURNS regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet._lane_sequence(p_format.name, hivenet._lane_of(p_scope, p_format.lanes))
$$;


-- Creates the lanes of format p_format that do not exist yet, and moves every lane to at
-- least p_floor (a value every scope of the format has passed: revision 0017).
CREATE OR REPLACE FUNCTION hivenet._create_lanes(p_format hivenet.format, p_floor bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_lane regclass;
BEGIN
    FOR i IN 0 .. coalesce(p_format.lanes, 0) - 1 LOOP
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                       hivenet._lane_sequence_name(p_format.name, i));
        -- For the fast path, which runs as the caller (privileges.sql): nextval only.
        EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO PUBLIC',
                       hivenet._lane_sequence_name(p_format.name, i));
        v_lane := hivenet._lane_sequence(p_format.name, i);
        IF coalesce(pg_sequence_last_value(v_lane), 0) < p_floor THEN
            PERFORM setval(v_lane, p_floor, true);
        END IF;
    END LOOP;
END $$;


-- The expression of the fast path of format p_format (see above), or 'NULL::text' when the
-- format or the settings leave every call to the full path.
CREATE OR REPLACE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text,
    p_enforce_registry boolean) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    v_bounds text[] := ARRAY[]::text[];
    v_printed text;
    v_field text;
    v_counter text;
    v_owned text;
    v_node integer;
    v_fake_clock text := '';
BEGIN
    IF p_format IS NULL OR p_enforce_registry OR p_format.reset IS DISTINCT FROM 'day'
       OR p_format.lanes IS NULL
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
    -- The counter: the scope's lane, by a constant (the lanes' OIDs written in: no name
    -- look-up, which cost ~3%).
    v_counter := format('(%L::regclass[])[hivenet._lane_of(p_a || p_b || p_c, %s) + 1]',
        (SELECT array_agg(hivenet._lane_sequence(p_format.name, l)::oid ORDER BY l)
         FROM generate_series(0, p_format.lanes - 1) AS l),
        p_format.lanes);
    -- No first use to check ownership at (ownership.sql): the owned instances are written in,
    -- and an unowned one goes to the full path (HN002). (No setting yet while the schema's
    -- first files are installed.)
    v_owned := (SELECT value FROM hivenet.setting WHERE name = 'owned_instances');
    IF v_owned IS DISTINCT FROM 'all' AND v_owned IS NOT NULL THEN
        v_node := array_position(p_format.field_names, hivenet._node_field(p_format));
        IF v_node IS NULL THEN
            RETURN 'NULL::text';
        END IF;
        v_bounds := v_bounds || format('%s = ANY (%L::text[])',
            (ARRAY['p_a', 'p_b', 'p_c'])[v_node],
            ARRAY(SELECT to_char(i, 'FM00') FROM generate_series(0, 99) AS i
                  WHERE hivenet._instance_in(to_char(i, 'FM00'), v_owned) ORDER BY i));
    END IF;
    IF (SELECT value FROM hivenet.setting WHERE name = 'allow_fake_clock')::boolean THEN
        v_fake_clock := $f$coalesce(current_setting('hivenet.fake_now', true), '') = '' AND $f$;
    END IF;
    -- The values then the date (the built-in layouts): no format() at run time.
    v_printed := CASE WHEN starts_with(p_format.head_pattern, '"%1$s""%2$s""%3$s"')
        THEN format('p_a || p_b || p_c || to_char(%s, %L)', v_local,
                    substr(p_format.head_pattern, 19))
        ELSE format('to_char(%s, format(%L, p_a, p_b, p_c))', v_local, p_format.head_pattern)
        END;
    -- Nested CASE: the casts of the bounds are safe only once the values matched. Each node
    -- is built again for every statement, so the fewest: the period is _period_index(local,
    -- 'day') as days since the day before its first (two nodes fewer), and the clamp maps 0
    -- and capacity + 1 both to 0, then NULL (one comparison fewer than two nullif).
    RETURN format(
        $f$CASE WHEN (p_a || ' ' || p_b || ' ' || p_c) ~ %L THEN CASE
    WHEN %s%s
    THEN %s || to_char(nullif(least(greatest(
             nextval(%s)
             - (%s::date - %L::date) * %s::bigint,
             0), %s) %% %s, 0), %L)
    END END$f$,
        p_format.field_pattern, v_fake_clock,
        coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local,
        date '2000-01-01' - hivenet._period_index(timestamp '2000-01-01', 'day')::integer,
        p_format.stride, p_format.capacity + 1, p_format.capacity + 1,
        'FM' || repeat('0', p_format.seq_width));
END $$;


-- hivenet_db/sql/requests.sql
-- The request's fingerprint, kept with every attempt and compared on every later begin: sha256
-- of the jsonb text (jsonb normalises key order and whitespace); no request counts as JSON
-- null. The one definition, for begin_request, begin_step and their full paths. Inlined (a
-- SQL-standard body without SET), so PUBLIC may execute it: begin_step's replay runs with the
-- caller's rights (privileges.sql).
CREATE OR REPLACE FUNCTION hivenet._fingerprint(p_request jsonb) RETURNS bytea
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'));
END;


-- The state machine: begin an attempt of key p_key in namespace p_namespace, the arguments
-- already checked by the caller (begin_request, begin_step). See begin_request for what it
-- does. Not set-returning (OUT parameters): the callers read its one row without a tuplestore.
-- No SET clause, on purpose: it runs only inside its callers, whose SET search_path is in
-- force, and a SET on a nested call costs a tenth of a begin (measured, docs/benchmarks.md).
CREATE OR REPLACE FUNCTION hivenet._begin_attempt(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_fingerprint bytea := hivenet._fingerprint(p_request);
    v_attempt integer := 1;
    v_last hivenet.request_attempt;
BEGIN
    -- Optimistic: most keys are new, so insert the attempt first; a conflict (after waiting
    -- for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        INSERT INTO hivenet.request_attempt
            (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
        VALUES (p_namespace, p_key, v_attempt, 'processing', v_fingerprint, p_unified_serial,
                p_lease, hivenet.now())
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            outcome := 'started';
            attempt := v_attempt;
            RETURN;
        END IF;
        SELECT * INTO v_last FROM hivenet.request_attempt a
        WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
        IF NOT FOUND THEN
            v_attempt := 1;  -- removed by maintain() in between: the key is new again
        ELSIF v_last.fingerprint <> v_fingerprint THEN
            RAISE EXCEPTION USING ERRCODE = 'HN032',
                MESSAGE = format('%s was begun with another request (fingerprint %s, this one '
                                 '%s)', hivenet._attempt_subject(p_namespace, p_key),
                                 encode(v_last.fingerprint, 'hex'), encode(v_fingerprint, 'hex'));
        ELSIF v_last.state = 'processing' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN030',
                MESSAGE = format('%s is processing (attempt %s started at %s, lease until %s): '
                                 'its outcome is unknown',
                                 hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                                 v_last.started_at,
                                 v_last.started_at + hivenet._step_lease(v_last.lease));
        ELSIF v_last.state = 'success' THEN
            IF p_on_success = 'reject' THEN
                RAISE EXCEPTION USING ERRCODE = 'HN031',
                    MESSAGE = format('%s already succeeded (attempt %s at %s)',
                                     hivenet._attempt_subject(p_namespace, p_key),
                                     v_last.attempt, v_last.finished_at);
            END IF;
            outcome := 'replayed';
            attempt := v_last.attempt;
            response := v_last.response;
            RETURN;
        ELSE
            v_attempt := v_last.attempt + 1;  -- the latest failed: proceed
        END IF;
        -- Next round: insert that attempt (waiting again if someone is starting it too).
    END LOOP;
END $$;


-- hivenet.begin_request(namespace, key, request default null, on_success default 'replay',
--                       lease default null, nowait default false)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one keyed request (a client's Idempotency-Key, a message id, a pay id ...) in the
--   caller's transaction:
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the effect, then call
--     finish_request with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck request with resolve_request; nothing takes it over).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: its fingerprint (sha256 of the jsonb text, which jsonb normalises: key order and
--   whitespace do not matter) is kept, and a different request under the same key raises
--   HN032 RequestMismatch in every state. No request counts as JSON null.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: namespace or key NULL, empty, longer than 255 characters or with a control
--   character, a namespace starting 'hivenet.' (the library's own), on_success not
--   'replay'/'reject', lease not positive, nowait NULL.
--   A key is never accepted twice while its record is kept: finished requests are removed by
--   maintain() once their last attempt ended longer ago than the namespace's retention
--   (set_request_retention; default the setting request_retention, 24 hours).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again); with nowait it raises HN030 at once instead. In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
CREATE OR REPLACE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- The common case in one expression (plpgsql prepares each expression once per
    -- transaction); whatever fails it is explained by the checks.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND length(p_namespace) BETWEEN 1 AND 255 AND length(p_key) BETWEEN 1 AND 255
        -- one search for a control character (an anchored {1,255} repetition measured dearer)
        AND p_namespace || p_key !~ '[\x01-\x1f\x7f-\x9f]'
        AND left(p_namespace, 8) <> 'hivenet.',
        false) THEN
        PERFORM hivenet._check_request_name('namespace', p_namespace);
        PERFORM hivenet._check_request_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        IF p_nowait THEN
            SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
            FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success,
                                               NULL, p_lease) b;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- _begin_attempt's first move, for a new key, without its call (a layer less on the hot
    -- path, as _begin_step in steps.sql); a conflict hands over to _begin_attempt.
    INSERT INTO hivenet.request_attempt
        (namespace, key, attempt, state, fingerprint, lease, started_at)
    VALUES (p_namespace, p_key, 1, 'processing', hivenet._fingerprint(p_request), p_lease,
            hivenet.now())
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        outcome := 'started';
        attempt := 1;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
    RETURN NEXT;
END $$;


-- hivenet_db/sql/steps.sql
-- begin_step's full path, in the step owner's rights: every check with its exact error, then
-- the state machine (requests.sql). The new step, the common case, is inserted here without
-- a call of _begin_attempt; a conflict (an attempt already there, maybe being started right
-- now) hands over to _begin_attempt, which inserts again or explains. Not set-returning (OUT
-- parameters): no tuplestore of its own.
CREATE OR REPLACE FUNCTION hivenet._begin_step(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
    v_day_start timestamptz;
BEGIN
    -- The common case is decided by one expression: plpgsql prepares every expression once
    -- per transaction, a good part of this function's cost. The layouts of formats 'system'
    -- and 'unified' are checked by expressions generated from their definitions (parse.sql,
    -- _serial_valid: inlined, constants folded), the settings read from the generated
    -- constants (settings.sql): no query. Whatever they do not vouch for (bad input, nowait,
    -- instances to check, a serial outside the window) takes the slow path below, where
    -- parse_serial decides and names the problem: the accepted set is exactly parse_serial's
    -- (a test checks it), at a fraction of its cost.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND hivenet._setting_constant('owned_instances') = 'all'
        AND (p_unified_serial IS NULL OR hivenet._serial_valid('unified', p_unified_serial))
        -- NULL for a system serial that is not valid (_serial_time checks it): the slow path
        AND hivenet._serial_time('system', p_system_serial)::date::timestamp
                AT TIME ZONE hivenet._setting_constant('time_zone')
            BETWEEN hivenet.now() - hivenet._setting_constant('step_retention')::interval
                AND hivenet.now() + hivenet._setting_constant('step_future_tolerance')::interval,
        false) THEN
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        PERFORM hivenet.parse_serial(p_system_serial, 'system');
        IF p_unified_serial IS NOT NULL THEN
            PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
        END IF;
        -- Several primaries: a serial of an instance another shard owns (ownership.sql).
        IF hivenet._setting_constant('owned_instances') <> 'all' THEN
            PERFORM hivenet._check_owned_serial('system', p_system_serial);
        END IF;
        -- Old serials are refused, not run again: their record may be purged (HN021).
        v_day := hivenet._serial_time('system', p_system_serial)::date;
        v_day_start := v_day::timestamp AT TIME ZONE hivenet._setting_constant('time_zone');
        IF v_day_start < hivenet.now() - hivenet._setting_constant('step_retention')::interval
           OR v_day_start > hivenet.now()
                            + hivenet._setting_constant('step_future_tolerance')::interval THEN
            PERFORM hivenet._raise_step_outside_window(p_system_serial, v_day);
        END IF;
        IF p_nowait THEN
            SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
            FROM hivenet._begin_attempt_nowait('hivenet.steps', p_system_serial, p_request,
                                               p_on_success, p_unified_serial, p_lease) b;
            RETURN;
        END IF;
    END IF;
    -- _begin_attempt's first move, for a new step (see there).
    INSERT INTO hivenet.request_attempt
        (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
    VALUES ('hivenet.steps', p_system_serial, 1, 'processing', hivenet._fingerprint(p_request),
            p_unified_serial, p_lease, hivenet.now())
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        outcome := 'started';
        attempt := 1;
        RETURN;
    END IF;
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                p_unified_serial, p_lease) b;
END $$;


-- hivenet.begin_step(system_serial, request default null, on_success default 'replay',
--                    unified_serial default null, lease default null, nowait default false)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one processing step, identified by its 30-character system serial, in the
--   caller's transaction (SPEC §4):
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the business effect, then call
--     finish_step with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck step with resolve_step; nothing takes it over silently).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: the business request; its fingerprint (sha256 of the jsonb text, which jsonb
--   normalises: key order and whitespace do not matter) is kept, and a different request
--   under the same serial raises HN032 RequestMismatch in every state. No request counts as
--   JSON null.
--   unified_serial: the business transaction's unified serial, kept for audit.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: system serial no valid system serial (as parse_serial(serial, 'system')), unified
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive.
--   HN021 SerialOutsideWindow: the serial's date (business time zone) starts before now -
--   step_retention (the step's record may already be purged: it must not run again) or
--   after now + step_future_tolerance.
--   HN002 UnknownScope: a database that declared owned instances does not own the serial's
--   instance (a retry sent to the wrong shard; ownership.sql, check_received_instances).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
--   Fast path (issue 13): begin_step is a set-returning LANGUAGE sql function that the planner
--   inlines into the caller's statement (STABLE, not STRICT, no SECURITY DEFINER, no SET,
--   one SELECT; called in FROM). A replay of a step that succeeded with the same request,
--   plain options, no unified serial or the one it was begun with, and a serial in the window
--   is one read of view _step_replay by primary key, with no PL/pgSQL call: the stored serials
--   were checked when the step began (a format is never redefined), so no serial is parsed
--   again (a regular expression alone cost a fifth of a replay). Everything else (a new step,
--   failed, processing, another request or unified serial, reject, nowait, bad input, an
--   instance other shards own) goes to _begin_step, which decides exactly as before. The full path is the second branch of a UNION ALL under LIMIT
--   1: an Append runs its branches in order (this plan is never parallel: _begin_step is
--   parallel unsafe), so it is called only when the replay found nothing (a test checks the
--   plan). One probe, planned once: a NOT EXISTS guard on the second branch instead doubled
--   both the planning and the execution of a replay.
CREATE OR REPLACE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    (SELECT 'replayed'::text, r.attempt, r.response
     FROM hivenet._step_replay r
     WHERE r.system_serial = p_system_serial
       AND r.fingerprint = hivenet._fingerprint(p_request)
       -- Plain options; the unified serial the step was begun with (so a valid one) or none.
       AND p_on_success = 'replay' AND p_nowait IS NOT NULL
       AND (p_lease IS NULL OR p_lease > interval '0')
       AND (p_unified_serial IS NULL OR p_unified_serial = r.unified_serial)
       AND hivenet._step_replay_window(r.system_serial)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_step(p_system_serial, p_request, p_on_success, p_unified_serial,
                              p_lease, p_nowait) b)
    LIMIT 1;
END;


-- hivenet_db/sql/privileges.sql (the new functions: _lane_sequence is the owner's,
-- _fingerprint is inlined into begin_step and runs as its caller)
REVOKE EXECUTE ON FUNCTION hivenet._lane_sequence(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hivenet._fingerprint(jsonb) TO PUBLIC;
