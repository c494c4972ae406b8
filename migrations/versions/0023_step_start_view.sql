-- Revision 0023: a new step starts through view _step_start. One INSERT into the view, whose
-- rule checks the common case and writes attempt 1 with the owner's rights: no PL/pgSQL call,
-- no SECURITY DEFINER, no SET. The Python layer's begin inserts there first and calls
-- begin_step only when nothing was written; _begin_step inserts there too, so the new step's
-- row is written in one place.
-- * The rule's window test is the replay's, renamed _step_in_window (it serves both), and
--   generated for every layout: one that does not print its date as YYYYMMDD gets the exact
--   window of its printed time (until now: none, every replay by the full path).
-- * PUBLIC may insert into the view (not read it) and run _serial_valid, which the rule calls
--   with the caller's rights.

-- hivenet_db/sql/steps.sql
ALTER FUNCTION hivenet._step_replay_window(text) RENAME TO _step_in_window;

-- _step_in_window(system serial): the serial, if valid, is surely dated inside the window whose
-- steps are kept (HN021, see _begin_step), and no instance needs a check (setting
-- owned_instances 'all'). Then begin_step may replay a stored step without _begin_step, and
-- view _step_start may start a new one (its layout checked there). When the layout prints
-- the date as YYYYMMDD, that date compared as text, so no input makes it raise: from two
-- days after the day of now() - step_retention to today (business time zone). That is inside
-- the window whatever the time zone's daylight saving does at midnight; a step dated on the
-- window's first days or after today (step_future_tolerance) goes to _begin_step, which
-- decides exactly. Generated (_compile_step_paths) from the layout of format 'system'
-- (parse.sql, _layout_sql) and the settings, written in as literals: reading them through
-- _serial_time and _setting_constant was folded to the same plan but cost ~5 ms of planning
-- (their bodies hold every format and setting), paid by every caller that does not prepare
-- its statement. VOLATILE (hivenet.now()), inlined.
-- (its body: _compile_step_paths, below)

-- Rewrite _step_in_window from the tables (the triggers below, on any change of a format or a
-- setting, under the constants' lock of settings.sql). A layout that prints its date
-- otherwise gets the exact window of its printed time, behind its validity check (dearer: the
-- casts); 'false' (every call to the full path) when it prints no time or instances are
-- checked.
CREATE OR REPLACE FUNCTION hivenet._compile_step_paths() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_setting jsonb := (SELECT jsonb_object_agg(s.name, s.value) FROM hivenet.setting s);
    v_valid text;
    v_time text;
    v_at integer[];
    v_window text;
BEGIN
    SELECT l.valid, l.time_of INTO v_valid, v_time
    FROM hivenet.format f, hivenet._layout_sql(f) l WHERE f.name = 'system';
    -- The date's position, when the layout prints year, month and day one after another.
    v_at := regexp_match(v_time, '^make_timestamp\(substr\(p_serial, (\d+), 4\)::integer, '
        'substr\(p_serial, (\d+), 2\)::integer, substr\(p_serial, (\d+), 2\)::integer, '
        '0, 0, 0\)$')::integer[];
    IF v_setting ->> 'owned_instances' IS DISTINCT FROM 'all' OR v_time IS NULL THEN
        v_window := 'false';
    ELSIF v_at[2] = v_at[1] + 4 AND v_at[3] = v_at[1] + 6 THEN
        v_window := format(
            'substr(p_serial, %s, 8) BETWEEN to_char(((hivenet.now() - %L::interval) '
            'AT TIME ZONE %L)::date + 2, ''YYYYMMDD'') AND to_char((hivenet.now() '
            'AT TIME ZONE %3$L)::date, ''YYYYMMDD'')',
            v_at[1], v_setting ->> 'step_retention', v_setting ->> 'time_zone');
    ELSE
        v_window := format(
            'CASE WHEN %s THEN (%s)::date::timestamp AT TIME ZONE %L BETWEEN hivenet.now() - '
            '%L::interval AND hivenet.now() + %L::interval ELSE false END',
            v_valid, v_time, v_setting ->> 'time_zone',
            v_setting ->> 'step_retention', v_setting ->> 'step_future_tolerance');
    END IF;
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION hivenet._step_in_window(p_serial text) RETURNS boolean '
        'LANGUAGE sql VOLATILE BEGIN ATOMIC SELECT %s; END', v_window);
END $$;

SELECT hivenet._compile_step_paths();

-- The first attempt of a new step, written by one INSERT into this view (its rule runs with the
-- owner's rights): the Python layer's begin (steps.py) and _begin_step's common case. The rule
-- checks what a new step with plain options needs and inserts attempt 1; it writes nothing
-- for a step that has an attempt, or for input it does not vouch for, and then begin_step
-- decides and names the problem. No function call: a new step through begin_step cost 170 µs
-- of server CPU, through this view 118, the bare INSERT 65 (issue 13, docs/benchmarks.md).
-- Insert-only, for PUBLIC (privileges.sql): the row it writes is the one begin_step would
-- write, and reading the view shows nothing.
--   The checks are generated from the definitions of formats 'system' and 'unified' and from
--   the settings (parse.sql, _serial_valid; _step_in_window above): inlined, no query. A
--   serial dated on the window's first two days or after today, or instances to check, take
--   the full path. Options are not columns: the callers take this path only for on_success
--   'replay' or 'reject' without nowait, which start a new step alike.
--   The VALUES list evaluates each inserted expression once. A rule puts the expression in
--   place of every NEW, so a volatile one (a fresh serial) would be checked as one value and
--   stored as another; for parameters and constants the planner folds the list away.
CREATE VIEW hivenet._step_start AS
SELECT NULL::text AS system_serial, NULL::jsonb AS request, NULL::text AS unified_serial,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
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

-- begin_step's full path, in the step owner's rights. A new step with plain options is
-- started through view _step_start; whatever that does not write (bad input, nowait,
-- instances to check, a serial outside the window, a step that has an attempt) gets every
-- check with its exact error (parse_serial names the problem), then the state machine
-- (requests.sql). Not set-returning (OUT parameters): no tuplestore of its own.
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

-- hivenet_db/sql/privileges.sql
-- A new step's first attempt (steps.sql, view _step_start: the Python layer's begin) is one
-- INSERT into a view whose rule writes with the owner's rights: PUBLIC may insert, not read.
-- PostgreSQL runs a view's functions as its user, so the rule's checks must be executable by
-- the caller too: the generated layout check _serial_valid joins _serial_time (above), as
-- public (it says whether a text is a valid serial of a format; no secret).
GRANT INSERT ON hivenet._step_start TO PUBLIC;
GRANT EXECUTE ON FUNCTION hivenet._serial_valid(text, text) TO PUBLIC;
