-- The time printed as p_part by time segment p_seg, as parse_serial and parse_time_id report
-- it: {"date": ...} for a segment showing a day or coarser, else {"datetime": ...}; NULL when
-- p_part is no valid time of the segment's pattern. The round trip rejects what to_timestamp
-- forgives (spaces, signs, 2-digit years, day 32 of a month).
CREATE FUNCTION hivenet._printed_time(p_seg jsonb, p_part text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_time timestamp;
BEGIN
    IF p_part !~ '^[0-9]+$' THEN
        RETURN NULL;
    END IF;
    BEGIN
        v_time := to_timestamp(p_part, p_seg ->> 'to_char')::timestamp;
    EXCEPTION WHEN data_exception THEN
        RETURN NULL;
    END;
    IF to_char(v_time, p_seg ->> 'to_char') <> p_part THEN
        RETURN NULL;
    ELSIF hivenet._unit_rank(p_seg ->> 'resolution') >= hivenet._unit_rank('day') THEN
        RETURN jsonb_build_object('date', to_char(v_time, 'YYYY-MM-DD'));
    END IF;
    RETURN jsonb_build_object('datetime', to_char(v_time, 'YYYY-MM-DD"T"HH24:MI:SS'));
END $$;

-- hivenet.parse_serial(serial, format default null) → jsonb
--   {"format": ..., <one key per field>, "date" or "datetime": ..., "seq": n}. With no format,
--   the standard's kinds (unified, system, interface) are told apart by their lengths.
--   HN001 when the serial is no valid serial of that format (length, characters, an
--   impossible date, seq 0) or the format is unknown or numeric (parse_time_id). IMMUTABLE in
--   effect; never blocks. hivenet_db.parse_serial does the same in Python for the built-in formats
--   (same results, same messages; tests/test_parsing.py compares them).
CREATE FUNCTION hivenet.parse_serial(serial text, format text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_serial ALIAS FOR serial; p_format ALIAS FOR format;
    v_kinds constant text[] := ARRAY['unified', 'system', 'interface'];
    v_format hivenet.format;
    v_seg jsonb;
    v_pos integer := 1;
    v_part text;
    v_problem text;
    v_time jsonb;  -- the printed time, as reported
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
    ELSIF v_format.time_shift IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s is numeric (a bigint): parse_time_id parses its ids',
                             v_format.name);
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
            v_time := hivenet._printed_time(v_seg, v_part);
            IF v_time IS NULL THEN
                v_problem := format('time %L is no valid %s', v_part, v_seg ->> 'time');
            END IF;
            v_result := v_result || v_time;
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
