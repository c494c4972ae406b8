-- Generated code: the functions whose bodies are written from the rows of hivenet.format
-- and hivenet.setting, and the one place that writes them (_recompile).
--
-- The hot paths read formats and settings on every call; generated functions hold them as
-- constants, so no call queries a table, and a change reaches every session exactly when the
-- transaction that made it commits (a function's body is catalog data). One statement
-- trigger per table calls _recompile() in the changing transaction. Each generated function
-- is written below as it is before any row exists, with its contract; _recompile replaces
-- its body (CREATE OR REPLACE keeps its grants, privileges.sql). What their shapes owe to
-- the planner: docs/design/sql-internals.md.
--
-- _recompile() reads both tables once and writes, in this order:
--   1. _setting_constant, _format_constant: the rows, as constants;
--   2. _serial_valid, _serial_shaped, _serial_time, _serial_field, _serial_scope: every
--      format's layout (_layout_sql);
--   3. _fast_unified, _fast_system: the allocation fast paths (_fast_path_expression);
--      _fast_time_id, _time_id_batch: those of the numeric formats (_time_id_parts);
--   4. _step_in_window: from the layout of format 'system' (step 2's values) and the
--      settings (_step_window_expression).
-- Generators pass values (records, arguments), never SQL text they read back.
-- tests/test_generated.py keeps a snapshot of every generated body.

-- Advisory lock namespace of the rewrites: (this key, 0).
CREATE FUNCTION hivenet._constants_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210102 $$;

-- HN001 unless the transaction may rewrite the generated functions after a change of kind
-- p_op (TG_OP) to table p_table; then takes the rewrites' advisory lock until commit, so
-- rewrites never interleave. Updates, deletes and truncates must run in READ COMMITTED: the
-- rewrite reads the table after waiting for the lock, and a REPEATABLE READ snapshot could
-- miss a change committed meanwhile and write an older value back. Inserts are safe
-- anywhere: a row missing from the generated functions is read from its table instead.
CREATE FUNCTION hivenet._lock_constants(p_table text, p_op text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_op <> 'INSERT' AND current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('change %s in a READ COMMITTED transaction, not %s', p_table,
                             current_setting('transaction_isolation'));
    END IF;
    PERFORM pg_advisory_xact_lock(hivenet._constants_lock_space(), 0);
END $$;

-- 1. The value of setting p_name (NULL when unknown). Never reads a table; never blocks.
CREATE FUNCTION hivenet._setting_constant(p_name text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- 1. The row of format p_name, or NULL when it is not there (a definition whose rewrite lost
-- to a concurrent one: read the table then). Never reads a table; never blocks.
CREATE FUNCTION hivenet._format_constant(p_name text) RETURNS hivenet.format
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::hivenet.format;
END;

-- 2. A format's layout as code, one CASE branch per format, so the hot paths
-- (claim_interface_serial, begin_step) and the views read a serial without parsing its
-- definition. Each takes the format's name first. A format missing from them (its rewrite
-- lost a race) gets NULL from the checks (the caller asks parse_serial) and parse_serial's
-- answer for the values. Never raise.
-- _serial_valid(format, serial): true when serial is surely a valid serial of format, false
-- when parse_serial must decide (it raises HN001 naming the problem), NULL for an unknown
-- format.
CREATE FUNCTION hivenet._serial_valid(p_format text, p_serial text) RETURNS boolean
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::boolean;
END;

-- _serial_shaped(format, serial): serial has the shape of the format (the right characters
-- in the right places; values unchecked); NULL for an unknown format or a NULL serial.
CREATE FUNCTION hivenet._serial_shaped(p_format text, p_serial text) RETURNS boolean
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::boolean;
END;

-- _serial_time(format, serial): the time printed in a valid serial (business-local; midnight
-- for a date), NULL when the serial is not valid (as _serial_valid) or the format prints none.
CREATE FUNCTION hivenet._serial_time(p_format text, p_serial text) RETURNS timestamp
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::timestamp;
END;

-- _serial_field(format, serial, field): the value of a printed field of a serial (NULL for
-- a field the format does not print).
CREATE FUNCTION hivenet._serial_field(p_format text, p_serial text, p_field text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- _serial_scope(format, serial): the counter scope of a valid serial (counters.sql), NULL
-- when the format does not print its whole counter key.
CREATE FUNCTION hivenet._serial_scope(p_format text, p_serial text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- 3. The fast paths of next_unified_serial and next_system_serial (allocate.sql): a serial
-- of format unified (system) for system p_a, module p_b, instance p_c, or NULL for anything
-- but the plain case, which the caller then hands to next_serial (the full checks, the exact
-- errors, the slow paths). The plain case: a format whose printed fields are its values and
-- the date (no time of day, which _issue keeps monotonic), reset daily, every field in the
-- counter key; valid values (one regex, the digit bounds); no registry check; no fake clock
-- (where a database allows one, a session that set hivenet.fake_now goes to the full path;
-- where none is allowed, the fast path does not read the setting and issues by the real
-- clock); a prepared scope, its sequence found by name (every scope sequence belongs to an
-- owned instance, ownership.sql; the full path refuses an unprepared one, or draws from its
-- format's shared fallback: fallback.sql); a value of today's period within capacity (a new
-- period, a clock stepped back, exhaustion: the value taken here is a gap, as when _issue
-- hands over to _advance); a server session whose timeline is checked
-- (hivenet.timeline_checked, set by _allocate's first call: failover.sql). The time is the
-- statement's: one instant for the period check and the printed date. Runs with the caller's
-- rights: the caller needs USAGE on the scopes' sequences (counters.sql, _grant_counter).
-- Never waits for another transaction.
CREATE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::text;
END;

CREATE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- 3. The fast path of next_time_id (time_ids.sql): an id of numeric format p_format for
-- fields p_fields (a JSON object, or NULL for a format without fields), or NULL for anything
-- but the plain case, which the caller hands to _next_time_id. The plain case, as
-- _fast_unified's: fields exactly the format's, valid (one regex, the digit bounds); no
-- registry check; no fake clock; a prepared scope, its sequence found by name; a value of the
-- statement's period within capacity (a new second, a clock behind, exhaustion: the value
-- taken here is a gap). One CASE branch per numeric format, the constant name folding it.
-- Runs with the caller's rights (USAGE on the scopes' sequences). Never waits.
CREATE FUNCTION hivenet._fast_time_id(p_format text, p_fields jsonb) RETURNS bigint
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::bigint;
END;

-- 3. What next_time_ids works out once per call (time_ids.sql), the same plain case as
-- _fast_time_id: high, the id without its seq; counter, the scope's sequence; base, the
-- first value of the statement's period; modulus, capacity + 1 (the clamp's). high and
-- counter are NULL but in the plain case (and for an unknown format), so each row then goes
-- to _next_time_id.
CREATE FUNCTION hivenet._time_id_batch(p_format text, p_fields jsonb, OUT high bigint,
    OUT counter regclass, OUT base bigint, OUT modulus bigint)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::bigint, NULL::regclass, NULL::bigint, NULL::bigint;
END;

-- 4. _step_in_window(system serial): the serial, if valid, is surely dated inside the window
-- whose steps are kept (HN021, see _check_step in steps.sql), and no instance needs a check
-- (setting owned_instances 'all'). Then begin_step may replay a stored step without
-- _begin_key, and _start_key may start a new one (its layout checked there). When the
-- layout prints the date as YYYYMMDD, that date is compared as text, so no input makes it
-- raise: from the day after the day of _step_days_from to the day of _step_days_to (exact at
-- that end); a step dated on the window's first day or later goes to _begin_key, which
-- decides exactly (and accepts this database's own serials past the end). VOLATILE
-- (hivenet.now()).
CREATE FUNCTION hivenet._step_in_window(p_serial text) RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT false;
END;

-- 2. The SQL expressions (on a text p_serial) that read serials of format p_format, from its
-- segments only:
--   shape: a boolean expression, true when p_serial has the characters of every printed
--     segment (charset of each field, digits for time and seq, literals as they are); every
--     valid serial has them: its length, then one regex.
--   valid: true when p_serial is valid, false when it may not be (parse_serial decides then):
--     the shape, digit bounds, months, days of the month (leap years included), hours,
--     minutes, seconds, a seq other than 0. The casts sit behind the shape, in a CASE.
--   time_of: the time printed in a valid serial (midnight for a date), NULL when none.
--   date_at: where time_of's date starts when it is a date only, printed YYYYMMDD; else NULL.
--   fields: field name → the expression of its printed value.
--   scope: the counter scope of a valid serial (its counter-key fields, counters.sql), NULL
--     when one of them is not printed.
CREATE FUNCTION hivenet._layout_sql(p_format hivenet.format, OUT shape text, OUT valid text,
    OUT time_of text, OUT date_at integer, OUT fields jsonb, OUT scope text)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_seg jsonb;
    v_pos integer := 1;
    v_width integer;
    v_part text;
    v_type text;
    v_checks text[] := '{}';
    v_scope text[] := '{}';
    v_unprinted_key boolean := false;
    v_pattern text;
    v_token record;
    v_at integer;
    v_time jsonb;
    v_at_of jsonb;  -- the position of each part of the time segment
    v_classes text[] := '{}';  -- the shape as character classes (or literals) and counts
    v_counts integer[] := '{}';
    v_class text;
BEGIN
    shape := '';
    fields := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_format.segments) LOOP
        IF v_seg ? 'field' AND v_seg -> 'printed' = 'false' THEN
            v_unprinted_key := true;  -- only a counter key: nothing printed to read
            CONTINUE;
        ELSIF v_seg ? 'field' THEN
            v_width := (v_seg ->> 'width')::integer;
            v_part := format('substr(p_serial, %s, %s)', v_pos, v_width);
            -- The class of the field's own compiled regex ('^[0-9]{2}$').
            v_class := substring(v_seg ->> 'regex' FROM '^\^(\[[^]]*\])');
            fields := fields || jsonb_build_object(v_seg ->> 'field', v_part);
            v_type := CASE WHEN v_width <= 9 THEN 'integer' WHEN v_width <= 18 THEN 'bigint'
                           ELSE 'numeric' END;
            -- Bounds that digits alone meet need no check; a minimum of 1 is 'not all 0'.
            IF (v_seg ->> 'min')::numeric = 1 THEN
                v_checks := v_checks || format('%s <> %L', v_part, repeat('0', v_width));
            ELSIF (v_seg ->> 'min')::numeric > 0 THEN
                v_checks := v_checks || format('%s::%s >= %s', v_part, v_type, v_seg ->> 'min');
            END IF;
            IF (v_seg ->> 'max')::numeric < 10::numeric ^ v_width - 1 THEN
                v_checks := v_checks || format('%s::%s <= %s', v_part, v_type, v_seg ->> 'max');
            END IF;
            IF coalesce(v_seg -> 'counter', 'true') = 'true' THEN
                v_scope := v_scope || v_part;
            END IF;
        ELSIF v_seg ? 'literal' THEN
            v_width := length(v_seg ->> 'literal');
            v_class := v_seg ->> 'literal';  -- [0-9A-Za-z_-]: no regex meaning
        ELSIF v_seg ? 'time' THEN
            v_width := (v_seg ->> 'width')::integer;
            v_class := '[0-9]';
            -- The parts of its to_char pattern (formats.sql _time_pattern), as integers.
            v_time := '{}';
            v_at_of := '{}';
            v_pattern := v_seg ->> 'to_char';
            v_at := v_pos;
            WHILE v_pattern <> '' LOOP
                SELECT t.token, t.digits INTO v_token
                FROM (VALUES ('YYYY', 4, 1), ('HH24', 2, 2), ('YY', 2, 3), ('MM', 2, 4),
                             ('DD', 2, 5), ('MI', 2, 6), ('SS', 2, 7)) AS t(token, digits, o)
                WHERE starts_with(v_pattern, t.token) ORDER BY t.o LIMIT 1;
                v_time := v_time || jsonb_build_object(v_token.token,
                    format('substr(p_serial, %s, %s)::integer', v_at, v_token.digits));
                v_at_of := v_at_of || jsonb_build_object(v_token.token, v_at);
                v_at := v_at + v_token.digits;
                v_pattern := substr(v_pattern, length(v_token.token) + 1);
            END LOOP;
            IF v_time ? 'YY' THEN  -- to_timestamp's YY: the year nearest to 2020
                v_time := v_time || jsonb_build_object('YYYY', format(
                    '(%1$s + CASE WHEN %1$s < 70 THEN 2000 ELSE 1900 END)', v_time ->> 'YY'));
            ELSE
                v_checks := v_checks || format('substr(p_serial, %s, 4) <> %L',
                    v_pos + strpos(v_seg ->> 'to_char', 'YYYY') - 1, '0000');
            END IF;
            IF v_time ? 'MM' THEN
                v_checks := v_checks || format('%s BETWEEN 1 AND 12', v_time ->> 'MM');
            END IF;
            IF v_time ? 'DD' THEN
                -- Days in month m: 30 + (m + m / 8) % 2, but February.
                v_checks := v_checks || format(
                    '%1$s >= 1 AND (%1$s <= 28 OR %1$s <= CASE %2$s WHEN 2 THEN 28 + '
                    '(%3$s %% 4 = 0 AND (%3$s %% 100 <> 0 OR %3$s %% 400 = 0))::integer '
                    'ELSE 30 + (%2$s + %2$s / 8) %% 2 END)',
                    v_time ->> 'DD', v_time ->> 'MM', v_time ->> 'YYYY');
            END IF;
            IF v_time ? 'HH24' THEN
                v_checks := v_checks || format('%s < 24', v_time ->> 'HH24');
            END IF;
            IF v_time ? 'MI' THEN
                v_checks := v_checks || format('%s < 60', v_time ->> 'MI');
            END IF;
            IF v_time ? 'SS' THEN
                v_checks := v_checks || format('%s < 60', v_time ->> 'SS');
            END IF;
            -- The last time segment, as parse_serial reports it.
            time_of := format('make_timestamp(%s, %s, %s, %s, %s, %s)', v_time ->> 'YYYY',
                              coalesce(v_time ->> 'MM', '1'), coalesce(v_time ->> 'DD', '1'),
                              coalesce(v_time ->> 'HH24', '0'), coalesce(v_time ->> 'MI', '0'),
                              coalesce(v_time ->> 'SS', '0'));
            -- Where the date is, when the segment prints year, month and day one after another
            -- and no time of day (_step_window_expression compares it as text).
            date_at := CASE WHEN NOT v_at_of ?| ARRAY['HH24', 'MI', 'SS']
                                 AND v_at_of @> jsonb_build_object(
                                     'MM', (v_at_of ->> 'YYYY')::integer + 4,
                                     'DD', (v_at_of ->> 'YYYY')::integer + 6)
                            THEN (v_at_of ->> 'YYYY')::integer END;
        ELSE
            v_width := p_format.seq_width;
            v_class := '[0-9]';
            v_checks := v_checks || format('substr(p_serial, %s, %s) <> %L', v_pos, v_width,
                                           repeat('0', v_width));
        END IF;
        -- Runs of one class are one piece: a shorter regex is a faster one.
        IF v_class LIKE '[%' AND v_class = v_classes[cardinality(v_classes)] THEN
            v_counts[cardinality(v_counts)] := v_counts[cardinality(v_counts)] + v_width;
        ELSE
            v_classes := v_classes || v_class;
            v_counts := v_counts || CASE WHEN v_class LIKE '[%' THEN v_width ELSE 1 END;
        END IF;
        v_pos := v_pos + v_width;
    END LOOP;
    shape := format('length(p_serial) = %s AND p_serial ~ %L', v_pos - 1,
        '^' || (SELECT string_agg(CASE WHEN c NOT LIKE '[%' THEN c
                                       WHEN o = cardinality(v_classes) THEN c || '*'
                                       ELSE format('%s{%s}', c, n) END, '' ORDER BY o)
                FROM unnest(v_classes, v_counts) WITH ORDINALITY AS u(c, n, o)) || '$');
    valid := format('CASE WHEN %s THEN %s ELSE false END', shape,
                    coalesce(array_to_string(v_checks, ' AND '), 'true'));
    scope := CASE WHEN v_unprinted_key THEN NULL WHEN v_scope = '{}' THEN '''''::text'
                  ELSE array_to_string(v_scope, ' || ') END;
END $$;

-- 3. The expression of the fast path of format p_format (see _fast_unified) in business time
-- zone p_zone, or 'NULL::text' when the format or the settings (p_enforce_registry) leave
-- every call to the full path; p_allow_fake_clock: the setting allow_fake_clock.
CREATE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text,
    p_enforce_registry boolean, p_allow_fake_clock boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
    -- is _period_index(local, 'day') as days since the day before its first. The seq is the
    -- value less the period's base: printed, 0 and below (greatest) as zeros, and above the
    -- capacity (10^width - 1) as to_char's #s; both are NULL (three nodes, where a clamp of
    -- the number took four).
    RETURN format(
        $f$CASE WHEN (p_a || ' ' || p_b || ' ' || p_c) ~ %L THEN CASE
    WHEN %s%s%s
    THEN %s || nullif(nullif(to_char(greatest(
             nextval(%s)
             - (%s::date - %L::date) * %s::bigint,
             0), %L), %L), %L)
    END END$f$,
        p_format.field_pattern, v_checked, v_fake_clock,
        coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local,
        date '2000-01-01' - hivenet._period_index(timestamp '2000-01-01', 'day')::integer,
        p_format.stride, 'FM' || repeat('0', p_format.seq_width),
        repeat('0', p_format.seq_width), repeat('#', p_format.seq_width));
END $$;

-- 3. The parts of the fast paths of numeric format p_format (see _fast_time_id and
-- _time_id_batch) in business time zone p_zone, or NULLs when the settings leave every call
-- to the full path (p_enforce_registry, for a format with fields); p_allow_fake_clock: the
-- setting allow_fake_clock. guard: the plain case (a boolean, false when it is not: the
-- casts of the fields' bounds behind their pattern); high: the id without its seq (the
-- printed time's number shifted, the fields' bits); counter: the scope's sequence, by name
-- (a regclass, NULL when there is none); base: the statement's period times the stride, so
-- that a value minus base is a seq of that period; capacity.
CREATE FUNCTION hivenet._time_id_parts(p_format hivenet.format, p_zone text,
    p_enforce_registry boolean, p_allow_fake_clock boolean, OUT guard text, OUT high text,
    OUT counter text, OUT base text, OUT capacity bigint)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    -- Until the session's first allocation has checked the timeline (failover.sql).
    v_checks text[] := ARRAY[$f$current_setting('hivenet.timeline_checked', true) = 'true'$f$];
    v_bounds text[] := '{}';
    v_bits text := '';
    v_scope text[] := '{}';
    v_value text;
    v_seg jsonb;
BEGIN
    IF p_enforce_registry AND p_format.field_names <> '{}' THEN
        RETURN;
    END IF;
    IF p_allow_fake_clock THEN
        v_checks := v_checks
                    || $f$coalesce(current_setting('hivenet.fake_now', true), '') = ''$f$::text;
    END IF;
    FOR v_seg IN SELECT s FROM jsonb_array_elements(p_format.segments) AS s WHERE s ? 'field'
    LOOP
        v_value := format('(p_fields ->> %L)', v_seg ->> 'field');
        v_bits := v_bits || format(' | (%s::bigint << %s)', v_value, v_seg ->> 'shift');
        IF coalesce(v_seg -> 'counter', 'true') = 'true' THEN
            v_scope := v_scope || v_value;
        END IF;
        IF v_seg ? 'min' THEN
            v_bounds := v_bounds || format('%s::numeric >= %s', v_value, v_seg ->> 'min');
        END IF;
        IF v_seg ? 'max' THEN
            v_bounds := v_bounds || format('%s::numeric <= %s', v_value, v_seg ->> 'max');
        END IF;
    END LOOP;
    IF p_format.field_names = '{}' THEN
        v_checks := v_checks || $f$coalesce(p_fields, '{}') = '{}'::jsonb$f$::text;
        counter := quote_literal(
            'hivenet."' || hivenet._scope_sequence_name(p_format.name, '') || '"');
    ELSE
        -- Exactly the format's fields, as strings, matching their pattern; digits, so the
        -- quoted sequence name is theirs.
        v_checks := v_checks || format('p_fields = jsonb_build_object(%s)', (
            SELECT string_agg(format('%L, p_fields ->> %L', n, n), ', ' ORDER BY i)
            FROM unnest(p_format.field_names) WITH ORDINALITY AS f (n, i)));
        v_checks := v_checks || format('(%s) ~ %L', (
            SELECT string_agg(format('(p_fields ->> %L)', n), ' || '' '' || ' ORDER BY i)
            FROM unnest(p_format.field_names) WITH ORDINALITY AS f (n, i)),
            p_format.field_pattern);
        counter := format($f$'hivenet."' || hivenet._scope_sequence_name(%L, %s) || '"'$f$,
                          p_format.name, array_to_string(v_scope, ' || '));
    END IF;
    guard := array_to_string(v_checks, ' AND ');
    IF v_bounds <> '{}' THEN
        guard := format('CASE WHEN %s THEN %s ELSE false END', guard,
                        array_to_string(v_bounds, ' AND '));
    END IF;
    high := format('(to_char(%s, %L)::bigint << %s)%s', v_local, p_format.head_pattern,
                   p_format.time_shift, v_bits);
    counter := format('to_regclass(%s)', counter);
    -- _period_index(local, reset) in double precision: fewer, cheaper nodes, and no call the
    -- caller would need the right to run (tests/test_generated.py compares the two).
    base := format('%s * %s::bigint', CASE p_format.reset
        WHEN 'month' THEN format('(date_part(''year'', %1$s)::bigint * 12 + date_part(''month'', '
                                 '%1$s)::bigint - 24000)', v_local)
        WHEN 'year' THEN format('(date_part(''year'', %s)::bigint - 1999)', v_local)
        ELSE format('(floor(date_part(''epoch'', %s)%s)::bigint - %s)', v_local,
            CASE p_format.reset WHEN 'second' THEN '' ELSE format(' / %s', u.seconds) END,
            extract(epoch FROM timestamp '2000-01-01')::bigint / u.seconds - 1) END,
        p_format.stride)
    FROM (VALUES ('second', 1), ('minute', 60), ('hour', 3600), ('day', 86400),
                 ('month', 1), ('year', 1)) AS u (reset, seconds)
    WHERE u.reset = p_format.reset;
    capacity := p_format.capacity;
END $$;

-- 4. The expression of _step_in_window: from the layout of format 'system' (_layout_sql's
-- valid, time_of and date_at) and the settings p_settings (name → value). A layout that
-- prints its date otherwise than YYYYMMDD gets the exact window of its printed time, behind
-- its validity check; 'false' (every call to the full path) when it prints no time or
-- instances are checked. The edges of the callers' zones come from _caller_now (clock.sql).
CREATE FUNCTION hivenet._step_window_expression(p_valid text, p_time_of text,
    p_date_at integer, p_settings jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_settings ->> 'owned_instances' IS DISTINCT FROM 'all' OR p_time_of IS NULL THEN
        RETURN 'false';
    ELSIF p_date_at IS NOT NULL THEN
        RETURN format(
            'substr(p_serial, %s, 8) BETWEEN to_char((hivenet._caller_now(hivenet.now(), '
            '''earliest'') - %L::interval)::date + 1, ''YYYYMMDD'') AND '
            'to_char((hivenet._caller_now(hivenet.now(), ''latest'') + %L::interval)::date, '
            '''YYYYMMDD'')',
            p_date_at, p_settings ->> 'step_retention', p_settings ->> 'step_future_tolerance');
    END IF;
    RETURN format(
        'CASE WHEN %s THEN (%s)::date::timestamp BETWEEN hivenet._caller_now(hivenet.now(), '
        '''earliest'') - %L::interval AND hivenet._caller_now(hivenet.now(), ''latest'') + '
        '%L::interval ELSE false END',
        p_valid, p_time_of, p_settings ->> 'step_retention',
        p_settings ->> 'step_future_tolerance');
END $$;

-- Replaces generated function hivenet.<p_head> (name and arguments) by a SQL-standard body
-- returning p_returns, of volatility p_volatility, that selects expression p_select.
CREATE FUNCTION hivenet._replace_function(p_head text, p_returns text, p_volatility text,
    p_select text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet.%s RETURNS %s LANGUAGE sql %s '
                   'BEGIN ATOMIC SELECT %s; END', p_head, p_returns, p_volatility, p_select);
END $$;

-- Rewrites every generated function from the tables, in the order stated at the top. The
-- caller holds the rewrites' lock (_lock_constants), as the triggers below do.
CREATE FUNCTION hivenet._recompile() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
            -- The seq: a value of the statement's period within capacity, else NULL (a clamp
            -- that maps 0 and capacity + 1 both to 0, then NULL: the seq is not printed as
            -- text here; next_time_ids has the same for its rows).
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
END $$;

-- Trigger: any change of a format or a setting rewrites the generated functions, in the
-- changing transaction, under the rewrites' lock. SECURITY DEFINER: an administrator
-- changes a setting without owning the functions.
CREATE FUNCTION hivenet._recompile_trigger() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._lock_constants(format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP);
    PERFORM hivenet._recompile();
    RETURN NULL;
END $$;

CREATE TRIGGER format_recompile AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.format
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._recompile_trigger();
CREATE TRIGGER setting_recompile AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.setting
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._recompile_trigger();

SELECT hivenet._recompile();
