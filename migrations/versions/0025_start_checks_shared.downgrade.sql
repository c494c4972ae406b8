-- Revision 0025 undone: the rules test their input inline again, _begin_step and begin_request
-- as revisions 0023 and 0024 left them, then the two functions go.

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._serial_valid('system', n.system_serial)
  AND hivenet._step_in_window(n.system_serial)
  AND (n.unified_serial IS NULL OR hivenet._serial_valid('unified', n.unified_serial))
  AND (n.lease IS NULL OR n.lease > interval '0')
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE length(n.namespace) BETWEEN 1 AND 255 AND length(n.key) BETWEEN 1 AND 255
  -- one search for a control character (an anchored {1,255} repetition measured dearer)
  AND n.namespace || n.key !~ '[\x01-\x1f\x7f-\x9f]'
  AND left(n.namespace, 8) <> 'hivenet.'
  AND (n.lease IS NULL OR n.lease > interval '0')
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

-- hivenet._begin_step as revision 0023 left it.
CREATE OR REPLACE FUNCTION hivenet._begin_step(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
    v_day_start timestamptz;
BEGIN
    IF coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false) THEN
        INSERT INTO hivenet._step_start
        VALUES (p_system_serial, p_request, p_unified_serial, p_lease);
        IF FOUND THEN
            outcome := 'started';
            attempt := 1;
            RETURN;
        END IF;
    END IF;
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
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                p_unified_serial, p_lease) b;
END $$;


-- hivenet.begin_request as revision 0024 left it.
CREATE OR REPLACE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- A new key with plain options: attempt 1 through view _request_start. Whatever that does
    -- not write (bad input, nowait, a key that has an attempt) gets every check with its exact
    -- error, then the state machine.
    IF coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false) THEN
        INSERT INTO hivenet._request_start VALUES (p_namespace, p_key, p_request, p_lease);
        IF FOUND THEN
            outcome := 'started';
            attempt := 1;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    PERFORM hivenet._check_request_name('namespace', p_namespace);
    PERFORM hivenet._check_request_name('key', p_key);
    PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
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


DROP FUNCTION hivenet._step_start_valid(text, text, interval);
DROP FUNCTION hivenet._request_start_valid(text, text, interval);
