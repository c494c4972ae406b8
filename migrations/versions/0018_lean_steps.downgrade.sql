-- Revision 0018 down: begin_step, finish_step, begin_request and finish_request as in revision
-- 0016 (PL/pgSQL, through _begin_attempt and _finish_attempt); the replay fast path dropped.

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
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL, p_lease) b;
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
    PERFORM hivenet._finish_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_response);
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
CREATE OR REPLACE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
    v_day_start timestamptz;
BEGIN
    -- The common case is decided by one expression: plpgsql prepares every expression once
    -- per transaction, a good part of this function's cost. The layouts of formats 'system'
    -- and 'unified' are checked by expressions generated from their definitions (parse.sql,
    -- _serial_valid: inlined, constants folded). Whatever they do not vouch for takes the
    -- slow path, where parse_serial decides and names the problem: the accepted set is
    -- exactly parse_serial's (a test checks it), at a fraction of its cost.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND hivenet._serial_valid('system', p_system_serial)
        AND (p_unified_serial IS NULL OR hivenet._serial_valid('unified', p_unified_serial)),
        false) THEN
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        PERFORM hivenet.parse_serial(p_system_serial, 'system');
        IF p_unified_serial IS NOT NULL THEN
            PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
        END IF;
    END IF;
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('system', p_system_serial);
    END IF;
    -- Old serials are refused, not run again: their record may be purged (HN021). Settings
    -- from the generated constants (settings.sql): no query on the hot path.
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
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                    p_unified_serial, p_lease) b;
    END IF;
    RETURN NEXT;
END $$;

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
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._finish_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                    p_response);
END $$;

DROP TRIGGER step_paths ON hivenet.setting;
DROP TRIGGER step_paths ON hivenet.format;
DROP FUNCTION hivenet._compile_step_paths_trigger();
DROP FUNCTION hivenet._compile_step_paths();
DROP FUNCTION hivenet._begin_step(text, jsonb, text, text, interval, boolean);
DROP FUNCTION hivenet._step_replay_window(text);
DROP VIEW hivenet._step_replay;
