-- Allocation: the next_* functions, and the issuing of serials from a scope's counter
-- (counters.sql) at the clock's period (periods.sql). The fast paths of next_unified_serial and
-- next_system_serial are generated (compile.sql).

-- p_count serials of format p_format for field values p_values from counter p_seq (the
-- scope's own sequence, or the format's fallback counter; p_scope names it in messages), printed
-- at the clock's time in the business time zone, never before the latest instant the counter
-- has issued (its clock sequence, formats with a clock_unit, else the counter's period). A
-- numeric format's serials are its bigints' digits (time_ids.sql). HN010 when the period is
-- exhausted; a clock behind that latest instant follows the format's clock policy
-- (_clock_behind: it may wait, or refuse with HN011).
CREATE FUNCTION hivenet._issue(p_seq regclass, p_format hivenet.format, p_values text[],
    p_count integer, p_scope text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_local timestamp := hivenet.now() AT TIME ZONE hivenet._setting_constant('time_zone');
    v_period bigint := hivenet._period_index(v_local, p_format.reset);
    v_head text := format(p_format.head_pattern, VARIADIC p_values);
    v_tail text := format(p_format.tail_pattern, VARIADIC p_values);
    v_raw bigint;
    v_print timestamp;
    v_out text[] := '{}';
    v_clock regclass;
    v_latest bigint;  -- the latest instant issued by the counter, in p_format.clock_unit
    v_read bigint;    -- ... as read from its clock sequence when this call started
    v_instant bigint;
    v_behind_asked boolean := false;
    v_fields bigint;  -- a numeric format's fields, in their bits
BEGIN
    IF p_format.time_shift IS NOT NULL THEN
        v_fields := hivenet._time_id_fields(p_format, p_values);
    END IF;
    IF p_format.clock_unit IS NOT NULL THEN
        -- Read once, before any value is drawn: every call that returned before this one
        -- started has raised it to what it printed.
        v_clock := hivenet._clock_sequence(p_seq);
        v_read := coalesce(pg_sequence_last_value(v_clock), 0);
        v_latest := v_read;
        IF v_read > hivenet._period_index(v_local, p_format.clock_unit) THEN
            v_local := hivenet._clock_behind(p_format.name,
                hivenet._period_start(v_read, p_format.clock_unit), v_local);
            v_period := hivenet._period_index(v_local, p_format.reset);
            v_behind_asked := true;
        END IF;
    END IF;
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(p_seq);
        IF i = 1 AND v_raw / p_format.stride > v_period AND NOT v_behind_asked THEN
            -- The counter is in a later period than the clock: the clock went back (or the
            -- format borrowed). Asked for the counter as the call found it, not for what the
            -- call's own values borrow.
            v_local := hivenet._clock_behind(p_format.name,
                hivenet._period_start(v_raw / p_format.stride, p_format.reset), v_local);
            v_period := hivenet._period_index(v_local, p_format.reset);
        END IF;
        IF v_raw / p_format.stride < v_period
           OR v_raw % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            v_raw := hivenet._advance(p_seq, p_format, v_period, p_scope);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / p_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / p_format.stride, p_format.reset) END;
        IF v_clock IS NOT NULL THEN
            v_instant := hivenet._period_index(v_print, p_format.clock_unit);
            IF v_instant < v_latest THEN
                -- The clock is behind an instant already issued: print that one, but never
                -- past the value's own period (its date must stay the period's).
                v_instant := least(v_latest, hivenet._period_last_instant(
                    v_raw / p_format.stride, p_format.reset, p_format.clock_unit));
                v_print := greatest(v_print,
                                    hivenet._period_start(v_instant, p_format.clock_unit));
            END IF;
            v_latest := greatest(v_latest, v_instant);
        END IF;
        IF p_format.time_shift IS NOT NULL THEN
            v_out := v_out || ((to_char(v_print, v_head)::bigint << p_format.time_shift)
                               | v_fields | v_raw % p_format.stride)::text;
        ELSE
            -- concat, not ||: to_char of an empty pattern is NULL.
            v_out := v_out || concat(to_char(v_print, v_head),
                                     lpad((v_raw % p_format.stride)::text, p_format.seq_width,
                                          '0'),
                                     to_char(v_print, v_tail));
        END IF;
    END LOOP;
    IF v_latest > v_read THEN
        PERFORM hivenet._raise_clock(v_clock, v_latest);
    END IF;
    RETURN v_out;
END $$;

-- The core of every next_* function: p_count serials of format p_format, the field values
-- given by name in p_fields (a JSON object), or, when p_values is not NULL, in p_values in the
-- format's field order (the next_<kind>_serial functions: no JSON on their path); of a
-- numeric format (time_ids.sql) when p_numeric, of a text one when not.
-- Raises HN001 (bad format, field or count), HN002 (registry; a scope not prepared, unless
-- its format shares a fallback counter: fallback.sql), HN010 (period exhausted), HN011 (the
-- clock is behind and the format's clock policy refuses).
-- Never waits for another transaction; may wait a moment for another allocation's period
-- reset (the advisory lock is held for one setval, never until commit), and an unprepared
-- scope's allocation waits for a prepare_scope() or maintain() preparing scopes of the format
-- to commit. A server session's first allocation checks the timeline first (_check_timeline,
-- failover.sql): the first on a new one fences it, or waits for the session fencing it.
-- The common case is one query, one regex match, no loop over segments; the slow paths (bad
-- input, an unprepared scope, period reset) are helpers (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
    p_count integer, p_numeric boolean DEFAULT false) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- Settings and format from generated constants (compile.sql): no query on the hot path.
    v_format hivenet.format := hivenet._format_constant(p_format);
    v_values text[] := p_values;
    v_field integer;
    v_scope text;
    v_seq regclass;
BEGIN
    IF current_setting('hivenet.timeline_checked', true) IS DISTINCT FROM 'true' THEN
        PERFORM hivenet._check_timeline();
    END IF;
    IF p_count IS NULL OR p_count NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s must be from 1 to 1000000',
                             hivenet._shown(p_format), coalesce(p_count::text, 'NULL'));
    END IF;
    IF v_format.name IS NULL THEN
        -- Not in the constants: defined by a transaction whose rewrite was superseded.
        SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('unknown format %s', hivenet._shown(p_format));
        END IF;
    END IF;
    IF (v_format.time_shift IS NOT NULL) <> p_numeric THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format(CASE WHEN p_numeric
            THEN 'format %s is a text format: next_serial issues it'
            ELSE 'format %s is numeric (a bigint): next_time_id issues it' END, v_format.name);
    END IF;
    IF v_values IS NULL THEN
        v_values := hivenet._field_values(v_format, p_fields);
    END IF;
    IF array_to_string(v_values, ' ', '?') !~ v_format.field_pattern THEN
        PERFORM hivenet._check_fields(v_format, v_values);
    END IF;
    IF v_format.bounded_fields <> '{}' THEN
        -- Digits only (the pattern matched), so the casts are safe.
        FOREACH v_field IN ARRAY v_format.bounded_fields LOOP
            IF v_values[v_field]::numeric < v_format.field_min[v_field]
               OR v_values[v_field]::numeric > v_format.field_max[v_field] THEN
                PERFORM hivenet._check_fields(v_format, v_values);
            END IF;
        END LOOP;
    END IF;
    IF hivenet._setting_constant('enforce_registry')::boolean THEN
        PERFORM hivenet._check_registry(jsonb_object(v_format.field_names, v_values));
    END IF;
    -- Formats whose every field is in the counter key skip _scope_of's subquery, which
    -- would take the expression off PL/pgSQL's fast path for simple expressions.
    IF v_format.key_fields IS NULL THEN
        v_scope := array_to_string(v_values, '');
    ELSE
        v_scope := hivenet._scope_of(v_format, v_values);
    END IF;
    v_seq := to_regclass(
        'hivenet.' || quote_ident(hivenet._scope_sequence_name(p_format, v_scope)));
    IF v_seq IS NULL THEN
        RETURN hivenet._issue_unprepared(v_format, v_values, p_count);
    END IF;
    RETURN hivenet._issue(v_seq, v_format, v_values, p_count, format('scope %L', v_scope));
END $$;

-- hivenet.next_serial(format, fields) → text: one serial of any format, fields by name,
--   e.g. next_serial('unified', '{"system":"C0001","module":"A01","instance":"01"}').
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_serial(format text, fields jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields;
BEGIN
    RETURN (hivenet._allocate(p_format, p_fields, NULL, 1))[1];
END $$;

-- hivenet.next_serials(format, fields, n) → setof text: n serials in one call (bulk work),
--   in increasing order. HN001 unless 1 <= n <= the setting max_serials_per_call (10,000 by
--   default): one call for a million would hold its backend for many seconds and take a
--   million of the scope's capacity for the period. Larger batches take several calls.
CREATE FUNCTION hivenet.next_serials(format text, fields jsonb, n integer)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields; p_n ALIAS FOR n;
    v_limit integer := hivenet._setting_constant('max_serials_per_call')::integer;
BEGIN
    IF p_n > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s is more than the %s serials one call may take '
                             '(setting max_serials_per_call); take them in several calls',
                             hivenet._shown(p_format), p_n, v_limit);
    END IF;
    RETURN QUERY SELECT unnest(hivenet._allocate(p_format, p_fields, NULL, p_n));
END $$;
-- hivenet.next_unified_serial(system, module, instance) → text (28 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction. Inlined (see
--   _fast_unified): the fast path, else next_serial (_allocate: the checks, the exact errors,
--   the slow paths), which the caller may run without the right to call _allocate. Its
--   fields by jsonb_object, immutable: a constant for literal values, where the planner folds
--   it (the statement sets up one node at each execution, not seven).
CREATE FUNCTION hivenet.next_unified_serial(system text, module text, instance text)
RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_unified(system, module, instance),
                    hivenet.next_serial('unified', jsonb_object(
                        ARRAY['system', system, 'module', module, 'instance', instance])));
END;

-- hivenet.next_system_serial(system, module, instance) → text (30 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction. Inlined, as
--   next_unified_serial.
CREATE FUNCTION hivenet.next_system_serial(system text, module text, instance text)
RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_system(system, module, instance),
                    hivenet.next_serial('system', jsonb_object(
                        ARRAY['system', system, 'module', module, 'instance', instance])));
END;

-- The next_interface_serial function is plpgsql, not sql: its serial prints the time of day,
-- which the fast path leaves to _issue.

-- hivenet.next_interface_serial(system, module, instance, target) → text (39 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_interface_serial(system text, module text, instance text,
    target text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_system ALIAS FOR system; p_module ALIAS FOR module; p_instance ALIAS FOR instance;
    p_target ALIAS FOR target;
BEGIN
    RETURN (hivenet._allocate('interface', NULL,
                              ARRAY[p_system, p_module, p_instance, p_target], 1))[1];
END $$;

-- hivenet.flush_at_commit() → void: makes the caller's commit wait until it, and every serial
--   drawn in its transaction, is on disk: for a transaction that sends serials out after it
--   commits and writes nothing else (durable allocation; Python flush_at_commit). PostgreSQL
--   flushes a commit only with synchronous_commit on, in a transaction that has an id AND
--   wrote WAL itself; the nextval that logged a serial's range may be another, uncommitted
--   transaction's, so drawing is not enough, nor is an id alone. This sets synchronous_commit
--   on for the transaction, takes an id and writes one small WAL record (a setval of sequence
--   durable_mark, whose value means nothing). Never waits for another transaction.
CREATE SEQUENCE hivenet.durable_mark;
CREATE FUNCTION hivenet.flush_at_commit() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM pg_current_xact_id();
    PERFORM setval('hivenet.durable_mark', 1);
END $$;
