-- Downgrade of revision 0007, frozen: the functions, columns and views as revision 0006
-- left them.

DROP FUNCTION hivenet._shown(text);

CREATE OR REPLACE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
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
    WHERE name = coalesce(p_format, CASE octet_length(p_serial)
        WHEN 28 THEN 'unified' WHEN 30 THEN 'system' WHEN 39 THEN 'interface' END);
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = CASE WHEN p_format IS NULL
            THEN format('serial %L is no unified (28), system (30) or interface (39) serial; '
                        'name its format', p_serial)
            ELSE format('unknown format %L', p_format) END;
    END IF;
    v_result := jsonb_build_object('format', v_format.name);
    IF octet_length(p_serial) <> v_format.length OR length(p_serial) <> v_format.length THEN
        v_problem := format('length %s, not %s', length(p_serial), v_format.length);
    END IF;
    FOR v_seg IN SELECT jsonb_array_elements(v_format.segments) LOOP
        EXIT WHEN v_problem IS NOT NULL;
        IF v_seg ? 'field' THEN
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
            MESSAGE = format('serial %L is no valid %s serial: %s', p_serial, v_format.name,
                             v_problem);
    END IF;
    RETURN v_result;
END $$;

CREATE OR REPLACE FUNCTION hivenet._field_problem(p_seg jsonb, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_value IS NULL THEN
        RETURN 'is missing';
    END IF;
    -- octet_length: full-width and other non-ASCII characters never pass.
    IF p_value !~ (p_seg ->> 'regex') OR octet_length(p_value) <> (p_seg ->> 'width')::integer
    THEN
        RETURN format('%L must be %s %s characters', p_value, p_seg ->> 'width',
                      p_seg ->> 'charset');
    END IF;
    -- Nested IF: the cast is safe only once the value is known to be digits.
    IF p_seg ->> 'charset' = 'digit' AND (p_seg ? 'min' OR p_seg ? 'max') THEN
        IF p_value::numeric NOT BETWEEN coalesce((p_seg ->> 'min')::numeric, 0)
                                    AND coalesce((p_seg ->> 'max')::numeric, p_value::numeric)
        THEN
            RETURN format('%L must be from %s to %s', p_value,
                          lpad(coalesce(p_seg ->> 'min', '0'), length(p_value), '0'),
                          coalesce(p_seg ->> 'max', repeat('9', length(p_value))));
        END IF;
    END IF;
    RETURN NULL;
END $$;
