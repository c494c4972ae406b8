-- Revision 0018 (issue 13): lean steps. begin_step becomes an inlinable LANGUAGE sql function
-- whose replay of a succeeded step reads view _step_replay (no PL/pgSQL call); everything else
-- goes to _begin_step (the former begin_step, which inserts a new step itself);
-- begin_request and finish_request run their INSERT / UPDATE themselves, without a call of
-- _begin_attempt / _finish_attempt on the hot path, and finish_step is finish_request on the
-- steps' namespace, inlined. Bodies as in hivenet_db/sql/steps.sql,
-- requests.sql and privileges.sql.

-- hivenet_db/sql/requests.sql (begin_request, finish_request)
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
    VALUES (p_namespace, p_key, 1, 'processing',
            sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8')), p_lease,
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

-- hivenet.finish_request(namespace, key, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_request returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_request proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the key's current
--   one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL, or namespace or key is not valid (as begin_request). Blocks
--   only while another transaction is finishing or resolving the same attempt; then raises
--   HN033 if that one committed.
CREATE OR REPLACE FUNCTION hivenet.finish_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- _finish_attempt's UPDATE, without its call on the hot path; when it finds nothing,
    -- _finish_attempt runs it again (finding nothing) and names the problem.
    UPDATE hivenet.request_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN
        PERFORM hivenet._finish_attempt(p_namespace, p_key, p_attempt, p_succeeded,
                                        p_response);
    END IF;
END $$;

-- hivenet_db/sql/steps.sql (begin_step, finish_step and what they use)
-- The succeeded steps, for begin_step's inlined replay, which runs with the caller's rights:
-- PUBLIC may read this view (privileges.sql), never hivenet.request_attempt. What it shows is
-- what begin_step replays to a caller who presents the same request, and what the replay
-- compares: of each succeeded step, its serial, attempt, the request's fingerprint, the
-- unified serial it was begun with and the stored response; no request, error, note, lease
-- or time, and nothing of other namespaces or states.
CREATE VIEW hivenet._step_replay AS
SELECT a.key AS system_serial, a.attempt, a.fingerprint, a.unified_serial, a.response
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'success';

-- _step_replay_window(system serial): the serial (of a stored step, so a valid one) is surely
-- dated inside the window whose steps are kept (HN021, see _begin_step), and no instance needs
-- a check (setting owned_instances 'all'): then begin_step may replay it without _begin_step.
-- Its printed date (YYYYMMDD) compared as text, so no input makes it raise: from two days
-- after the day of now() - step_retention to today (business time zone). That is inside the
-- window whatever the time zone's daylight saving does at midnight; a step dated on the
-- window's first days or after today (step_future_tolerance) goes to _begin_step, which
-- decides exactly. Generated (_compile_step_paths) from the layout of format 'system'
-- (parse.sql, _layout_sql: where its date is printed) and the settings, written in as
-- literals: reading them through _serial_time and _setting_constant was folded to the same
-- plan but cost ~5 ms of planning (their bodies hold every format and setting), paid by every
-- caller that does not prepare its statement. VOLATILE (hivenet.now()), inlined.
CREATE FUNCTION hivenet._step_replay_window(p_serial text) RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT false;
END;

-- Rewrite _step_replay_window from the tables (the triggers below, on any change of a format
-- or a setting, under the constants' lock of settings.sql). 'false' (every call to the full
-- path) when format 'system' prints no YYYYMMDD date or instances are checked.
CREATE FUNCTION hivenet._compile_step_paths() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_setting jsonb := (SELECT jsonb_object_agg(s.name, s.value) FROM hivenet.setting s);
    v_time text := (SELECT l.time_of FROM hivenet.format f, hivenet._layout_sql(f) l
                    WHERE f.name = 'system');
    -- The date's position, when the layout prints year, month and day one after another.
    v_at integer[] := regexp_match(v_time, '^make_timestamp\(substr\(p_serial, (\d+), 4\)'
        '::integer, substr\(p_serial, (\d+), 2\)::integer, substr\(p_serial, (\d+), 2\)'
        '::integer, 0, 0, 0\)$')::integer[];
    v_window text := 'false';
BEGIN
    IF v_at[2] = v_at[1] + 4 AND v_at[3] = v_at[1] + 6
       AND v_setting ->> 'owned_instances' = 'all' THEN
        v_window := format(
            'substr(p_serial, %s, 8) BETWEEN to_char(((hivenet.now() - %L::interval) '
            'AT TIME ZONE %L)::date + 2, ''YYYYMMDD'') AND to_char((hivenet.now() '
            'AT TIME ZONE %3$L)::date, ''YYYYMMDD'')',
            v_at[1], v_setting ->> 'step_retention', v_setting ->> 'time_zone');
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION hivenet._step_replay_window(p_serial text) RETURNS boolean '
        'LANGUAGE sql VOLATILE BEGIN ATOMIC SELECT %s; END', v_window);
END $$;

CREATE FUNCTION hivenet._compile_step_paths_trigger() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._lock_constants(format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP);
    PERFORM hivenet._compile_step_paths();
    RETURN NULL;
END $$;

CREATE TRIGGER step_paths AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.setting
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._compile_step_paths_trigger();
CREATE TRIGGER step_paths AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.format
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._compile_step_paths_trigger();

SELECT hivenet._compile_step_paths();

-- begin_step's full path, in the step owner's rights: every check with its exact error, then
-- the state machine (requests.sql). The new step, the common case, is inserted here without
-- a call of _begin_attempt; a conflict (an attempt already there, maybe being started right
-- now) hands over to _begin_attempt, which inserts again or explains. Not set-returning (OUT
-- parameters): no tuplestore of its own.
CREATE FUNCTION hivenet._begin_step(
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
        AND CASE WHEN hivenet._serial_valid('system', p_system_serial)
                      AND (p_unified_serial IS NULL
                           OR hivenet._serial_valid('unified', p_unified_serial))
            THEN hivenet._serial_time('system', p_system_serial)::date::timestamp
                     AT TIME ZONE hivenet._setting_constant('time_zone')
                 BETWEEN hivenet.now() - hivenet._setting_constant('step_retention')::interval
                     AND hivenet.now()
                         + hivenet._setting_constant('step_future_tolerance')::interval
            END,
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
    VALUES ('hivenet.steps', p_system_serial, 1, 'processing',
            sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8')),
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
       AND r.fingerprint = sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'))
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

-- hivenet.finish_step(system_serial, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_step returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_step proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the step's
--   current one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL. Blocks only while another transaction is finishing or
--   resolving the same attempt; then raises HN033 if that one committed.
CREATE OR REPLACE FUNCTION hivenet.finish_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL)
RETURNS void
-- finish_request on the steps' namespace (the same UPDATE, the same errors), inlined into the
-- caller's statement: no PL/pgSQL layer of its own.
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT hivenet.finish_request('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                  p_response);
END;


-- hivenet_db/sql/privileges.sql (the new functions and view)
REVOKE EXECUTE ON FUNCTION
    hivenet._compile_step_paths(),
    hivenet._compile_step_paths_trigger()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    hivenet._begin_step(text, jsonb, text, text, interval, boolean),
    hivenet._step_replay_window(text)
TO PUBLIC;
GRANT SELECT ON hivenet._step_replay TO PUBLIC;
SELECT hivenet._grant_roles();
