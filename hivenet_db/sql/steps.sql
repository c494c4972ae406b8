-- System-serial step state machine (SPEC §4, seed 000 "业务层查重", seeds 002/003).
--
-- A step is the keyed request (requests.sql) of namespace 'hivenet.steps' whose key is its
-- 30-character system serial: the same table, the same state machine, the same errors. What
-- steps add: the serial is checked (HN001), must be dated inside the window whose records are
-- kept (HN021), and the business transaction's unified serial is recorded for audit.

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('step_retention', '30 days', 'interval',
     'finished steps whose last attempt ended longer ago are purged by maintain(); begin_step '
     'refuses system serials dated before then (HN021), so keep it longer than any caller '
     'retries'),
    ('step_future_tolerance', '5 minutes', 'interval',
     'begin_step refuses system serials dated later than now plus this (HN021): clock skew '
     'between systems');

-- The steps as they were stored before requests.sql: one row per attempt of a system serial.
CREATE VIEW hivenet.step_attempt AS
SELECT a.key AS system_serial, a.attempt, a.state, a.fingerprint, a.unified_serial, a.lease,
       a.started_at, a.finished_at, a.response, a.error, a.resolved_by, a.note
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps';
COMMENT ON VIEW hivenet.step_attempt IS
    'every attempt of every processing step (system serial); the latest attempt is the step''s state';

-- HN021 naming the window: the system serial p_system_serial is dated p_day, outside it.
CREATE FUNCTION hivenet._raise_step_outside_window(p_system_serial text, p_day date)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_zone text := hivenet._setting_value('time_zone');
    v_from timestamp := (hivenet.now() - hivenet._setting_value('step_retention')::interval)
                        AT TIME ZONE v_zone;
    v_to timestamp := (hivenet.now() + hivenet._setting_value('step_future_tolerance')::interval)
                      AT TIME ZONE v_zone;
BEGIN
    -- The first and last days whose start lies inside the window.
    RAISE EXCEPTION USING ERRCODE = 'HN021',
        MESSAGE = format('system serial %s is dated %s, outside the window of steps from %s to '
                         '%s: a step dated earlier may already be purged (step_retention %s), '
                         'one dated later is beyond the clock tolerance (step_future_tolerance '
                         '%s)', p_system_serial, p_day,
                         v_from::date + CASE WHEN v_from = v_from::date THEN 0 ELSE 1 END,
                         v_to::date, hivenet._setting_value('step_retention'),
                         hivenet._setting_value('step_future_tolerance'));
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
CREATE FUNCTION hivenet.begin_step(
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
CREATE FUNCTION hivenet.finish_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._finish_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                    p_response);
END $$;

-- hivenet.resolve_step(system_serial, attempt, succeeded, note, response default null) → void
--   Operator action for a stuck step (hivenet.stuck_steps): once the real outcome of attempt
--   `attempt` is known (e.g. from the remote system's reconciliation), record it as
--   `success` (response replayed later) or `failed` (the next begin_step proceeds), with a
--   note and the operator's session user. The original attempt's late finish_step then gets
--   HN033. Works on any processing attempt, also before its lease ran out.
--   HN033 as finish_step; HN001 when note is empty or succeeded NULL. Blocks like finish_step.
CREATE FUNCTION hivenet.resolve_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._resolve_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                     p_note, p_response);
END $$;

-- hivenet.stuck_steps: steps still `processing` after their lease ran out, oldest first. Their
-- outcome is unknown (the remote call may or may not have happened): find it out, then
-- hivenet.resolve_step(system_serial, attempt, succeeded, note).
-- A scan of the steps' attempts (an index on state would make every finish a non-HOT update).
CREATE VIEW hivenet.stuck_steps AS
SELECT a.key AS system_serial, a.attempt, a.unified_serial, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_steps IS
    'processing steps past their lease (unknown outcome): resolve with hivenet.resolve_step';

-- hivenet.step_states: how many steps (system serials) are in each state, every state listed.
CREATE VIEW hivenet.step_states AS
SELECT s.state::text AS state, count(l.key) AS steps
FROM unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.key) a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace = 'hivenet.steps'
           ORDER BY a.key, a.attempt DESC) AS l
       ON l.state = s.state
GROUP BY s.state
ORDER BY s.state;
COMMENT ON VIEW hivenet.step_states IS 'number of steps per state (the state of their latest attempt)';

-- Retention of steps (run by hivenet.maintain()): purge every attempt of the steps whose
-- attempts all ended before now() - step_retention; a processing step is never purged.
CREATE FUNCTION hivenet._maintain_steps() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._purge_requests('hivenet.steps', hivenet.now()
                                    - hivenet._setting_value('step_retention')::interval);
END $$;
