-- hivenet.parse_serial(serial, format default null) → jsonb
--   {"format": ..., <one key per field>, "date" or "datetime": ..., "seq": n}. With no format,
--   the standard's kinds (unified, system, interface) are told apart by their lengths.
--   HN001 when the serial is no valid serial of that format (length, characters, an
--   impossible date, seq 0) or the format is unknown. IMMUTABLE in effect; never blocks.
--   hivenet_db.parse_serial does the same in Python for the built-in formats (same results,
--   same messages; tests/test_parsing.py compares them).
CREATE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_kinds constant text[] := ARRAY['unified', 'system', 'interface'];
    v_format hivenet.format;
    v_seg jsonb;
    v_pos integer := 1;
    v_part text;
    v_problem text;
    v_time timestamp;
    v_result jsonb;
BEGIN
    IF p_serial IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'serial is NULL';
    END IF;
    SELECT * INTO v_format FROM hivenet.format
    WHERE name = coalesce(p_format, (SELECT k.name FROM hivenet.format k
                                     WHERE k.name = ANY (v_kinds)
                                       AND k.length = octet_length(p_serial)));
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = CASE WHEN p_format IS NULL
            -- 'unified (28), system (30) or interface (39)', lengths from the definitions.
            THEN format('serial %s is no %s serial; name its format', hivenet._shown(p_serial),
                        (SELECT regexp_replace(string_agg(format('%s (%s)', k.name, k.length),
                                                          ', ' ORDER BY array_position(v_kinds,
                                                                                       k.name)),
                                               ', ([^,]*)$', ' or \1')
                         FROM hivenet.format k WHERE k.name = ANY (v_kinds)))
            ELSE format('unknown format %s', hivenet._shown(p_format)) END;
    END IF;
    v_result := jsonb_build_object('format', v_format.name);
    IF octet_length(p_serial) <> v_format.length OR length(p_serial) <> v_format.length THEN
        v_problem := format('length %s, not %s', length(p_serial), v_format.length);
    END IF;
    FOR v_seg IN SELECT jsonb_array_elements(v_format.segments) LOOP
        EXIT WHEN v_problem IS NOT NULL;
        IF v_seg -> 'printed' = 'false' THEN
            v_part := '';  -- a field of the counter key that is not printed
        ELSIF v_seg ? 'field' THEN
            v_part := substr(p_serial, v_pos, (v_seg ->> 'width')::integer);
            v_problem := 'field ' || (v_seg ->> 'field') || ' '
                         || hivenet._field_problem(v_seg, v_part);
            v_result := v_result || jsonb_build_object(v_seg ->> 'field', v_part);
        ELSIF v_seg ? 'literal' THEN
            v_part := substr(p_serial, v_pos, length(v_seg ->> 'literal'));
            IF v_part <> v_seg ->> 'literal' THEN
                v_problem := format('%L where %L belongs', v_part, v_seg ->> 'literal');
            END IF;
        ELSIF v_seg ? 'time' THEN
            v_part := substr(p_serial, v_pos, (v_seg ->> 'width')::integer);
            BEGIN
                v_time := to_timestamp(v_part, v_seg ->> 'to_char')::timestamp;
            EXCEPTION WHEN data_exception THEN
                v_time := NULL;
            END;
            -- The round trip rejects what to_timestamp forgives (spaces, signs, 2-digit years).
            IF v_part !~ '^[0-9]+$' OR v_time IS NULL
               OR to_char(v_time, v_seg ->> 'to_char') <> v_part THEN
                v_problem := format('time %L is no valid %s', v_part, v_seg ->> 'time');
            ELSIF hivenet._unit_rank(v_seg ->> 'resolution') >= hivenet._unit_rank('day') THEN
                v_result := v_result || jsonb_build_object('date', to_char(v_time, 'YYYY-MM-DD'));
            ELSE
                v_result := v_result || jsonb_build_object(
                    'datetime', to_char(v_time, 'YYYY-MM-DD"T"HH24:MI:SS'));
            END IF;
        ELSE
            v_part := substr(p_serial, v_pos, v_format.seq_width);
            IF v_part !~ '^[0-9]+$' OR v_part::numeric = 0 THEN
                v_problem := format('seq %L is not 1 to %s', v_part, v_format.capacity);
            ELSE
                v_result := v_result || jsonb_build_object('seq', v_part::bigint);
            END IF;
        END IF;
        v_pos := v_pos + length(v_part);
    END LOOP;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('serial %s is no valid %s serial: %s', hivenet._shown(p_serial),
                             v_format.name, v_problem);
    END IF;
    RETURN v_result;
END $$;

-- Layouts compiled into code. A format's layout is written once, in its definition (formats.sql:
-- the segments of hivenet.format). Whenever the formats change, a trigger writes the generated
-- functions below (as _format_constant, settings.sql) with one branch per format: its checks
-- and field positions as constants, so the hot paths (claim_interface_serial, begin_step) and
-- the views read a serial with one inlined expression, and no layout is written by hand
-- anywhere else. Each takes the format's name first: with a constant name the planner folds
-- the CASE to that format's branch. A format missing from them (its definition committed
-- while the rewrite that would add it lost a race) gets the ELSE branch: NULL for the
-- checks (the caller asks parse_serial), parse_serial itself for the values.

-- The SQL expressions (on a text p_serial) that read serials of format p_format: the
-- generators of the functions below. Positions and checks come from the segments only.
--   shape: a boolean expression, true when p_serial has the characters of every printed
--     segment (charset of each field, digits for time and seq, literals as they are); every
--     valid serial has them. Its length, then one regex whose last run is unbounded: a
--     bounded run ({24}) makes PostgreSQL's regex three times slower (measured, issue 13).
--   valid: true when p_serial is valid, false when it may not be (parse_serial decides then):
--     the shape, digit bounds, months, days of the month (leap years included), hours,
--     minutes, seconds, a seq other than 0. The casts sit behind the shape, in a CASE.
--   time_of: the time printed in a valid serial (midnight for a date), NULL when none.
--   fields: field name → the expression of its printed value.
--   scope: the counter scope of a valid serial (its counter-key fields, allocate.sql), NULL
--     when one of them is not printed.
CREATE FUNCTION hivenet._layout_sql(p_format hivenet.format, OUT shape text, OUT valid text,
    OUT time_of text, OUT fields jsonb, OUT scope text)
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
            v_pattern := v_seg ->> 'to_char';
            v_at := v_pos;
            WHILE v_pattern <> '' LOOP
                SELECT t.token, t.digits INTO v_token
                FROM (VALUES ('YYYY', 4, 1), ('HH24', 2, 2), ('YY', 2, 3), ('MM', 2, 4),
                             ('DD', 2, 5), ('MI', 2, 6), ('SS', 2, 7)) AS t(token, digits, o)
                WHERE starts_with(v_pattern, t.token) ORDER BY t.o LIMIT 1;
                v_time := v_time || jsonb_build_object(v_token.token,
                    format('substr(p_serial, %s, %s)::integer', v_at, v_token.digits));
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

-- The generated functions, as they are before any format exists (the trigger below rewrites
-- them; settings.sql explains why generated code). STABLE: their bodies change with formats.
-- _serial_valid(format, serial): true when serial is surely a valid serial of format, false
-- when parse_serial must decide (it raises HN001 naming the problem), NULL for an unknown
-- format. Never raises.
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

-- _serial_scope(format, serial): the counter scope of a valid serial (allocate.sql), NULL
-- when the format does not print its whole counter key.
CREATE FUNCTION hivenet._serial_scope(p_format text, p_serial text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- Rewrites the generated functions from hivenet.format (under the constants' lock, settings.sql
-- _lock_constants, after a change of kind p_op).
CREATE FUNCTION hivenet._compile_layouts(p_op text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_valid text := '';
    v_shaped text := '';
    v_time text := '';
    v_field text := '';
    v_scope text := '';
    v_format record;
BEGIN
    PERFORM hivenet._lock_constants('hivenet.format', p_op);
    FOR v_format IN
        SELECT f.name, l.* FROM hivenet.format f, hivenet._layout_sql(f) l ORDER BY f.name
    LOOP
        v_valid := v_valid || format(' WHEN %L THEN %s', v_format.name, v_format.valid);
        v_shaped := v_shaped || format(' WHEN %L THEN %s', v_format.name, v_format.shape);
        -- NULL unless valid: the function is public (views), and casts of a serial that only
        -- looks right (month 99) would fail.
        v_time := v_time || format(' WHEN %L THEN %s', v_format.name,
            CASE WHEN v_format.time_of IS NULL THEN 'NULL::timestamp'
                 ELSE format('CASE WHEN %s THEN %s END', v_format.valid, v_format.time_of)
                 END);
        v_field := v_field || format(' WHEN %L THEN CASE p_field%s ELSE NULL::text END',
            v_format.name, (SELECT coalesce(string_agg(format(' WHEN %L THEN %s', f.key,
                                                              f.value), '' ORDER BY f.key),
                                            ' WHEN NULL THEN NULL')
                            FROM jsonb_each_text(v_format.fields) f));
        v_scope := v_scope || format(' WHEN %L THEN %s', v_format.name,
                                     coalesce(v_format.scope, 'NULL::text'));
    END LOOP;
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_valid(p_format text, '
                   'p_serial text) RETURNS boolean LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE NULL::boolean END; END', v_valid);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_shaped(p_format text, '
                   'p_serial text) RETURNS boolean LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE NULL::boolean END; END', v_shaped);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_time(p_format text, '
                   'p_serial text) RETURNS timestamp LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE coalesce(hivenet.parse_serial(p_serial, p_format) '
                   '->> ''datetime'', hivenet.parse_serial(p_serial, p_format) ->> ''date'')'
                   '::timestamp END; END', v_time);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_field(p_format text, '
                   'p_serial text, p_field text) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC '
                   'SELECT CASE p_format%s ELSE hivenet.parse_serial(p_serial, p_format) '
                   '->> p_field END; END', v_field);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_scope(p_format text, '
                   'p_serial text) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE NULL::text END; END', v_scope);
END $$;

-- Trigger: rewrite the generated functions from the table.
CREATE FUNCTION hivenet._compile_layouts_trigger() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._compile_layouts(TG_OP);
    RETURN NULL;
END $$;

CREATE TRIGGER format_layouts AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.format
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._compile_layouts_trigger();

SELECT hivenet._compile_layouts('INSERT');
