-- Revision 0025: the test of views _step_start and _request_start becomes a function of its
-- own (_step_start_valid, _request_start_valid: inlined, so the rules cost what they did),
-- which _begin_step and begin_request apply again after the view wrote nothing. Input it
-- vouches for met a step or key that has an attempt (a retry of a failed step, a step in
-- progress, another request): the state machine decides at once, as before 0023, instead of
-- running every check first (parse_serial, ~200 µs a serial). PUBLIC may execute both
-- functions, as the rules' other checks.

-- hivenet_db/sql/steps.sql
-- What view _step_start vouches for (below), and _begin_step after the view wrote nothing: both
-- serials valid (the layouts generated from the formats, parse.sql), the system serial surely
-- inside the window (_step_in_window) and a positive lease or none. Inlined where it is called:
-- no function runs. VOLATILE (hivenet.now()).
CREATE FUNCTION hivenet._step_start_valid(p_system_serial text, p_unified_serial text,
                                          p_lease interval) RETURNS boolean
LANGUAGE sql
BEGIN ATOMIC
    SELECT hivenet._serial_valid('system', p_system_serial)
       AND hivenet._step_in_window(p_system_serial)
       AND (p_unified_serial IS NULL OR hivenet._serial_valid('unified', p_unified_serial))
       AND (p_lease IS NULL OR p_lease > interval '0');
END;

-- hivenet_db/sql/requests.sql
-- What view _request_start vouches for (below), and begin_request after the view wrote nothing:
-- what _check_request_name and _check_begin_options accept, for plain options. Inlined where
-- it is called: no function runs.
CREATE FUNCTION hivenet._request_start_valid(p_namespace text, p_key text, p_lease interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT length(p_namespace) BETWEEN 1 AND 255 AND length(p_key) BETWEEN 1 AND 255
       -- one search for a control character (an anchored {1,255} repetition measured dearer)
       AND p_namespace || p_key !~ '[\x01-\x1f\x7f-\x9f]'
       AND left(p_namespace, 8) <> 'hivenet.'
       AND (p_lease IS NULL OR p_lease > interval '0');
END;

-- The rules of the start views: their test is now the function (steps.sql, requests.sql).
CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

-- hivenet._begin_step: see steps.sql.
CREATE OR REPLACE FUNCTION hivenet._begin_step(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- The options view _step_start serves (they start a new step alike).
    v_plain boolean := coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false);
    v_day date;
    v_day_start timestamptz;
BEGIN
    IF v_plain THEN
        INSERT INTO hivenet._step_start
        VALUES (p_system_serial, p_request, p_unified_serial, p_lease);
        IF FOUND THEN
            outcome := 'started';
            attempt := 1;
            RETURN;
        END IF;
    END IF;
    -- Nothing written. Input the view vouches for met a step that has an attempt: the state
    -- machine decides, without parse_serial (~200 µs a serial). Anything else first.
    IF NOT (v_plain AND coalesce(hivenet._step_start_valid(p_system_serial, p_unified_serial,
                                                           p_lease), false)) THEN
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
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease) b;
        RETURN;
    END IF;
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                p_unified_serial, p_lease) b;
END $$;

-- hivenet.begin_request: see requests.sql.
CREATE OR REPLACE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- The options view _request_start serves (they start a new key alike).
    v_plain boolean := coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false);
BEGIN
    -- A new key with plain options: attempt 1 through view _request_start.
    IF v_plain THEN
        INSERT INTO hivenet._request_start VALUES (p_namespace, p_key, p_request, p_lease);
        IF FOUND THEN
            outcome := 'started';
            attempt := 1;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- Nothing written. Input the view vouches for met a key that has an attempt: the state
    -- machine decides. Anything else (bad input, nowait) gets every check with its exact
    -- error first.
    IF NOT (v_plain AND coalesce(hivenet._request_start_valid(p_namespace, p_key, p_lease),
                                 false)) THEN
        PERFORM hivenet._check_request_name('namespace', p_namespace);
        PERFORM hivenet._check_request_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success, NULL,
                                           p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
    RETURN NEXT;
END $$;

-- As privileges.sql leaves them on a fresh install: revoked from PUBLIC, then granted.
REVOKE EXECUTE ON FUNCTION
    hivenet._step_start_valid(text, text, interval),
    hivenet._request_start_valid(text, text, interval)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    hivenet._step_start_valid(text, text, interval),
    hivenet._request_start_valid(text, text, interval)
TO PUBLIC;
