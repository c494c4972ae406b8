-- Numeric time ids (seed 004): bigints of a numeric format (formats.sql), the built-in
-- time_id being `(yyMMddHHmmss << 14) | seq`, seq from 1 each second of the business time
-- zone, at most 16,383 a second. Counted like every format (one sequence per scope,
-- counters.sql; time_id's one scope is prepared with the format, at install), issued by
-- _issue (allocate.sql) as the digits of the bigint, and never smaller than one issued before
-- in the scope (guarantee 3; a clock behind follows the format's clock policy,
-- clock_policy.sql). The common case is the generated fast path _fast_time_id (compile.sql),
-- inlined into next_time_id; anything else goes to _next_time_id.

-- A numeric format's fields p_values (in its field order: digits, checked) in their bits:
-- each value as a number, shifted left by its segment's shift; 0 without fields.
CREATE FUNCTION hivenet._time_id_fields(p_format hivenet.format, p_values text[]) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(bit_or(p_values[array_position(p_format.field_names, e.s ->> 'field')]
                           ::bigint << (e.s ->> 'shift')::integer), 0)
    FROM jsonb_array_elements(p_format.segments) AS e (s)
    WHERE e.s ? 'field'
$$;

-- One id of numeric format p_format for fields p_fields (a JSON object; NULL for none)
-- through _allocate: every check and its exact error (HN001, HN002, HN010, HN011), the first
-- use of a scope, the reset of a second, the clock policy. Where next_time_id and
-- next_time_ids go when the fast path gives NULL; SECURITY DEFINER, like next_serial.
CREATE FUNCTION hivenet._next_time_id(p_format text, p_fields jsonb) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate(p_format, coalesce(p_fields, '{}'), NULL, 1, true))[1]::bigint;
END $$;

-- p_n when next_time_ids may issue that many ids of format p_format in one call: 1 to the
-- setting max_serials_per_call (10,000 by default), as next_serials; else HN001.
CREATE FUNCTION hivenet._time_id_count(p_format text, p_n integer) RETURNS integer
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_limit integer := hivenet._setting_constant('max_serials_per_call')::integer;
BEGIN
    IF p_n IS NULL OR p_n NOT BETWEEN 1 AND v_limit THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s must be from 1 to %s (setting '
                             'max_serials_per_call); take more in several calls',
                             hivenet._shown(p_format), coalesce(p_n::text, 'NULL'), v_limit);
    END IF;
    RETURN p_n;
END $$;

-- hivenet.next_time_id(format default 'time_id', fields default null) → bigint
--   One id of numeric format `format`: for time_id, (yyMMddHHmmss << 14) | seq, the time of
--   the business time zone on the 24-hour clock, seq from 1 each second. fields: a JSON
--   object of the format's fields (time_id has none). HN001 (unknown or text format, bad
--   fields), HN002 (a scope this database does not own), HN010 (the second's ids are all
--   used), HN011 (the clock is behind the latest id's time and the format's clock policy
--   refuses). Never waits for another transaction; under clock policy 'wait', may wait for
--   the clock (at most its max_wait). Inlined: the generated fast path (_fast_time_id), else
--   _next_time_id; the caller may run it without the right to call _allocate.
CREATE FUNCTION hivenet.next_time_id(format text DEFAULT 'time_id', fields jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_time_id(format, fields),
                    hivenet._next_time_id(format, fields));
END;

-- hivenet.next_time_ids(format, n, fields default null) → setof bigint: n ids in one call
--   (bulk work), in increasing order; errors as next_time_id, and HN001 unless 1 <= n <= the
--   setting max_serials_per_call. One statement: the plain case is worked out once
--   (_time_id_batch, compile.sql: the id without its seq, the counter, its period), each row
--   then draws a value of that period, or goes to _next_time_id (the first id of a second,
--   say), as next_time_id does. Declared STABLE, as begin_step is, so that called in FROM
--   it is inlined into the caller's statement (a volatile one would be run apart and its
--   rows copied); every row still draws its own value (nextval, volatile).
CREATE FUNCTION hivenet.next_time_ids(format text, n integer, fields jsonb DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE sql STABLE
BEGIN ATOMIC
    -- A value of the statement's period within capacity, else NULL: the clamp of
    -- _fast_time_id (compile.sql), written out since no helper may take raw numbers.
    SELECT coalesce(b.high | nullif(least(greatest(nextval(b.counter) - b.base, 0), b.modulus)
                                    % b.modulus, 0),
                    hivenet._next_time_id(format, fields))
    FROM hivenet._time_id_batch(format, fields) AS b,
         generate_series(1, hivenet._time_id_count(format, n));
END;

-- p_number's digits, padded with zeros to p_width (never cut: a number too wide for its
-- segment then fails its check).
CREATE FUNCTION hivenet._time_id_digits(p_number bigint, p_width integer) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN length(p_number::text) > p_width THEN p_number::text
                ELSE lpad(p_number::text, p_width, '0') END
$$;

-- hivenet.parse_time_id(id, format default 'time_id') → jsonb
--   {"format": ..., <one key per field>, "datetime" (or "date"): ..., "seq": n} of an id of
--   numeric format `format`. HN001 for an unknown or text format, and for an id that no call
--   can have issued (not positive, an impossible time, a field out of its range, seq 0),
--   naming the problem. IMMUTABLE in effect; never blocks. hivenet_db.parse_time_id does the
--   same in Python for time_id (same results, same messages).
CREATE FUNCTION hivenet.parse_time_id(id bigint, format text DEFAULT 'time_id') RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format := (SELECT f FROM hivenet.format f
                                WHERE f.name = parse_time_id.format);
    v_seg jsonb;
    v_number bigint;
    v_part text;
    v_time jsonb;  -- the printed time, as reported
    v_problem text;
    v_result jsonb;
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'time id is NULL';
    ELSIF v_format.name IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(parse_time_id.format));
    ELSIF v_format.time_shift IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s is a text format: parse_serial parses its serials',
                             v_format.name);
    END IF;
    v_result := jsonb_build_object('format', v_format.name);
    IF id < 1 THEN
        v_problem := 'it is not positive';
    END IF;
    FOR v_seg IN SELECT jsonb_array_elements(v_format.segments) LOOP
        EXIT WHEN v_problem IS NOT NULL;
        IF v_seg ? 'time' THEN
            v_number := id >> v_format.time_shift;
            v_time := hivenet._printed_time(v_seg, hivenet._time_id_digits(
                v_number, (v_seg ->> 'width')::integer));
            IF v_time IS NULL THEN
                v_problem := format('time %s is no valid %s', v_number, v_seg ->> 'time');
            END IF;
            v_result := v_result || v_time;
        ELSIF v_seg ? 'field' THEN
            v_number := (id >> (v_seg ->> 'shift')::integer)
                        & ((1::bigint << (v_seg ->> 'bits')::integer) - 1);
            v_part := hivenet._time_id_digits(v_number, (v_seg ->> 'width')::integer);
            v_problem := 'field ' || (v_seg ->> 'field') || ' '
                         || hivenet._field_problem(v_seg, v_part);
            v_result := v_result || jsonb_build_object(v_seg ->> 'field', v_part);
        ELSE
            v_number := id & v_format.capacity;
            IF v_number = 0 THEN
                v_problem := format('seq 0 is not 1 to %s', v_format.capacity);
            END IF;
            v_result := v_result || jsonb_build_object('seq', v_number);
        END IF;
    END LOOP;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('time id %s is no valid id of format %s: %s', id, v_format.name,
                             v_problem);
    END IF;
    RETURN v_result;
END $$;
