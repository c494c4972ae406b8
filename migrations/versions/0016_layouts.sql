-- Revision 0016: one definition per serial layout (issue 15 part 1).
--   * parse.sql: the generated functions _serial_valid, _serial_shaped, _serial_time,
--     _serial_field, _serial_scope, written from hivenet.format by the trigger
--     format_layouts (_compile_layouts, from _layout_sql); parse_serial tells the standard's
--     kinds apart by the lengths of their definitions.
--   * dedup.sql: claim_interface_serial, _refuse_outside_window and view interface_calls read
--     interface serials through them; steps.sql: begin_step likewise (both keep 0014's
--     ownership check); ownership.sql: _check_owned_serial cuts the instance by the layout.
--   * privileges: the new private functions are the owner's, but for the two the view
--     interface_calls calls as its reader.

-- hivenet_db/sql/parse.sql
-- hivenet.parse_serial(serial, format default null) → jsonb
--   {"format": ..., <one key per field>, "date" or "datetime": ..., "seq": n}. With no format,
--   the standard's kinds (unified, system, interface) are told apart by their lengths.
--   HN001 when the serial is no valid serial of that format (length, characters, an
--   impossible date, seq 0) or the format is unknown. IMMUTABLE in effect; never blocks.
--   hivenet_db.parse_serial does the same in Python for the built-in formats (same results,
--   same messages; tests/test_parsing.py compares them).
CREATE OR REPLACE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
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
--   shape: a regex of the characters of every printed segment (charset of each field, digits
--     for time and seq, literals as they are); every valid serial matches it.
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
    shape := '^' || (SELECT string_agg(CASE WHEN c LIKE '[%' THEN format('%s{%s}', c, n)
                                            ELSE c END, '' ORDER BY o)
                     FROM unnest(v_classes, v_counts) WITH ORDINALITY AS u(c, n, o)) || '$';
    valid := format('CASE WHEN p_serial ~ %L THEN %s ELSE false END', shape,
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
-- for a date), NULL when the format prints none. Only for valid serials (casts may fail).
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
        v_shaped := v_shaped || format(' WHEN %L THEN p_serial ~ %L', v_format.name,
                                       v_format.shape);
        v_time := v_time || format(' WHEN %L THEN %s', v_format.name,
                                   coalesce(v_format.time_of, 'NULL::timestamp'));
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

-- hivenet_db/sql/dedup.sql
-- Slow path of claim_interface_serial: raises HN021 for interface serial p_serial, dated
-- p_local (its caller's local time), outside the window from p_from to p_to, unless this
-- database issued it: after the clock stepped back, its own fresh serials carry a time up to
-- the latest instant already issued in their scope (allocate.sql), maybe past p_to.
CREATE OR REPLACE FUNCTION hivenet._refuse_outside_window(p_serial text, p_local timestamp,
    p_from timestamp, p_to timestamp) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_issued timestamp;
BEGIN
    IF p_local > p_to THEN
        v_issued := hivenet._latest_issued('interface',
                                           hivenet._serial_scope('interface', p_serial));
        IF p_local <= v_issued THEN
            RETURN;
        END IF;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'HN021',
        MESSAGE = format('interface serial %s was issued at %s (its caller''s local time), '
                         'outside the duplicate-check window from %s to %s (local times from '
                         'UTC-12 to UTC+14)%s', p_serial, p_local, p_from, p_to,
                         CASE WHEN v_issued IS NOT NULL
                              THEN format('; the latest serial of its scope issued here is of %s',
                                          v_issued) ELSE '' END);
END $$;

-- hivenet.claim_interface_serial(serial, unified_serial default null,
--                                system_serial default null, nowait default false) → void
--   Records an incoming interface call in the caller's transaction: its claim commits or
--   vanishes with that transaction. The unified and system serials are recorded for the call
--   chain, never checked for duplicates (HiveNet rule 1).
--   Raises HN001 when serial is no valid interface serial (as parse_serial), or
--   unified_serial / system_serial is given but not shaped as its format's layout says (the
--   characters of each field, digits for the date and seq: only their shape is checked;
--   parse.sql _serial_shaped); HN021 when the serial's own
--   time (its caller's local time, in any zone from UTC-12 to UTC+14) is older than the
--   setting interface_window or later than now + interface_future_tolerance in every such
--   zone, unless this database issued it (its clock stepped back: allocate.sql); HN020 when
--   it is already recorded.
--   Blocks while another transaction holds an uncommitted claim of the same serial, then
--   raises HN020 if that one committed, or records the call if it rolled back. With nowait
--   it raises HN020 at once instead of waiting (also, once in about 4 billion, for another
--   serial claimed at that moment whose 32-bit hash is the same). Under REPEATABLE READ a
--   duplicate committed after the transaction's snapshot raises 40001 (retry) instead.
--   Never fails for a missing partition: a day without one is recorded in the default
--   partition.
CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL,
    p_system_serial text DEFAULT NULL, p_nowait boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_local timestamp;
    v_day date;
    v_from timestamp;
    v_to timestamp;
    v_window interval;
    v_tolerance interval;
    v_recorded timestamptz;
BEGIN
    -- This runs on every incoming call: the layout of format 'interface' checked by one
    -- inlined expression generated from its definition (parse.sql, _serial_valid; a call of
    -- a function with SET search_path costs). What it does not vouch for, parse_serial
    -- decides, naming the problem (HN001): the accepted set is exactly parse_serial's.
    IF NOT coalesce(hivenet._serial_valid('interface', p_serial), false) THEN
        PERFORM hivenet.parse_serial(p_serial, 'interface');
    END IF;
    -- The serials carried for the call chain: only their shape is checked.
    IF NOT hivenet._serial_shaped('unified', p_unified_serial) THEN
        PERFORM hivenet._reject_serial(p_unified_serial, 'unified');
    END IF;
    IF NOT hivenet._serial_shaped('system', p_system_serial) THEN
        PERFORM hivenet._reject_serial(p_system_serial, 'system');
    END IF;
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('interface', p_serial);
    END IF;
    v_local := hivenet._serial_time('interface', p_serial);
    v_day := v_local::date;
    -- Settings from the generated constants (settings.sql): no query on the hot path.
    v_window := hivenet._setting_constant('interface_window')::interval;
    v_tolerance := hivenet._setting_constant('interface_future_tolerance')::interval;
    -- The serial's time is its caller's local time, in a zone it does not name: compared
    -- with the UTC clock, widened to every zone a caller may be in (_caller_zones).
    v_from := (v_now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[1] - v_window;
    v_to := (v_now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[2] + v_tolerance;
    IF v_local < v_from OR v_local > v_to THEN
        PERFORM hivenet._refuse_outside_window(p_serial, v_local, v_from, v_to);
    END IF;
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial));
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial)) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is being claimed by another transaction '
                             'in progress (nowait)', p_serial);
    END IF;
    -- The name of _interface_partition_name(v_day), spelled out to save a call.
    IF to_regclass('hivenet.interface_call_' || to_char(v_local, 'YYYYMMDD')) IS NULL THEN
        -- To the default partition, unless the day's partition was attached since this
        -- session last looked (this session's list of partitions can be stale, and the
        -- default partition then refuses the row). The first lock on the default partition
        -- in a transaction refreshes that list, and while held no ATTACH can complete.
        LOCK TABLE hivenet.interface_call_default IN ROW EXCLUSIVE MODE;
    END IF;
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    VALUES (p_serial, v_day, p_unified_serial, p_system_serial, v_now)
    -- No conflict target: the primary key is the only unique index, and a target makes every
    -- insert look up which index of the partition matches it in the catalog (measured).
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.recorded_at INTO v_recorded FROM hivenet.interface_call c
        WHERE c.serial_day = v_day AND c.interface_serial = p_serial;
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is already recorded (at %s)', p_serial,
                             coalesce(v_recorded::text, 'an earlier step of this transaction'));
    END IF;
END $$;

-- hivenet.interface_calls: every recorded call with the fields of its interface serial.
--   serial_time is the time printed in the serial (business-local, as issued).
CREATE OR REPLACE VIEW hivenet.interface_calls AS
SELECT c.interface_serial,
       c.unified_serial,
       c.system_serial,
       -- Read by the layout of format 'interface' (parse.sql: generated functions).
       hivenet._serial_field('interface', c.interface_serial, 'system') AS source_system,
       hivenet._serial_field('interface', c.interface_serial, 'module') AS source_module,
       hivenet._serial_field('interface', c.interface_serial, 'instance') AS source_instance,
       hivenet._serial_field('interface', c.interface_serial, 'target') AS target_system,
       c.serial_day,
       -- make_timestamp: no session time zone involved (to_timestamp would shift a local time
       -- that the session's zone skips at a DST change).
       hivenet._serial_time('interface', c.interface_serial) AS serial_time,
       c.recorded_at,
       c.call_order
FROM hivenet.interface_call c;
COMMENT ON VIEW hivenet.interface_calls IS
    'recorded interface calls with the source and target of each serial (reporting)';

-- hivenet_db/sql/steps.sql
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

-- hivenet_db/sql/ownership.sql
-- HN002 when serial p_serial of format p_format (system: a step; interface: a claim), valid,
-- was received by a database that does not own the instance printed in it (docs/scale-out.md:
-- a retry on the wrong shard). Callers test owned_instances <> 'all' first (no call at all on
-- one primary); nothing is checked when check_received_instances is off.
CREATE OR REPLACE FUNCTION hivenet._check_owned_serial(p_format text, p_serial text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text := hivenet._ownership_setting('owned_instances');
    v_instance text;
BEGIN
    IF v_owned = 'all' OR NOT hivenet._ownership_setting('check_received_instances')::boolean
    THEN
        RETURN;
    END IF;
    -- Cut by the format's layout (parse.sql); parse_serial for a format not yet generated.
    v_instance := coalesce(hivenet._serial_field(p_format, p_serial, 'instance'),
                           hivenet.parse_serial(p_serial, p_format) ->> 'instance');
    IF NOT hivenet._instance_in(v_instance, v_owned) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('%s serial %s carries instance %s, which this database does not '
                             'own (it owns %s): send it, and every retry of it, to the shard '
                             'that owns that instance (docs/scale-out.md; setting '
                             'check_received_instances)', p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $$;

-- hivenet_db/sql/privileges.sql (the new functions)
REVOKE EXECUTE ON FUNCTION
    hivenet._layout_sql(hivenet.format),
    hivenet._serial_valid(text, text),
    hivenet._serial_shaped(text, text),
    hivenet._serial_scope(text, text),
    hivenet._compile_layouts(text),
    hivenet._compile_layouts_trigger()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    hivenet._serial_field(text, text, text),  -- in view interface_calls, as the reader
    hivenet._serial_time(text, text)
TO PUBLIC;
