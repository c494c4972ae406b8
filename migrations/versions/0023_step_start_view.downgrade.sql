-- Revision 0023 undone: _begin_step as revision 0022 left it (its own check and INSERT), the
-- view and the grant go, and the window test is the replay's again (its old name, its old
-- generator: YYYYMMDD layouts only).

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

DROP VIEW hivenet._step_start;
REVOKE EXECUTE ON FUNCTION hivenet._serial_valid(text, text) FROM PUBLIC;

ALTER FUNCTION hivenet._step_in_window(text) RENAME TO _step_replay_window;
-- Rewrite _step_replay_window from the tables (the triggers below, on any change of a format
-- or a setting, under the constants' lock of settings.sql). 'false' (every call to the full
-- path) when format 'system' prints no YYYYMMDD date or instances are checked.
CREATE OR REPLACE FUNCTION hivenet._compile_step_paths() RETURNS void
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

SELECT hivenet._compile_step_paths();
