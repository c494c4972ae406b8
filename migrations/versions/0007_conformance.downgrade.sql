-- Downgrade of revision 0007, frozen: the functions, columns and views as revision 0006
-- left them.

DROP FUNCTION hivenet._shown(text);

DROP VIEW hivenet.interface_calls_per_day, hivenet.interface_calls;
ALTER TABLE hivenet.interface_call DROP COLUMN call_order;
CREATE VIEW hivenet.interface_calls AS
SELECT c.interface_serial,
       c.unified_serial,
       c.system_serial,
       substr(c.interface_serial, 1, 5) AS source_system,
       substr(c.interface_serial, 6, 3) AS source_module,
       substr(c.interface_serial, 9, 2) AS source_instance,
       substr(c.interface_serial, 11, 5) AS target_system,
       c.serial_day,
       -- ISO basic 'YYYYMMDDTHHMISS' to timestamp: no session time zone involved (to_timestamp
       -- would shift a local time that the session's zone skips at a DST change).
       (substr(c.interface_serial, 16, 8) || 'T' || substr(c.interface_serial, 24, 6))::timestamp
           AS serial_time,
       c.recorded_at
FROM hivenet.interface_call c;
COMMENT ON VIEW hivenet.interface_calls IS
    'recorded interface calls with the source and target of each serial (reporting)';
CREATE VIEW hivenet.interface_calls_per_day AS
SELECT serial_day AS day, source_system, target_system, count(*) AS calls
FROM hivenet.interface_calls
GROUP BY serial_day, source_system, target_system;
COMMENT ON VIEW hivenet.interface_calls_per_day IS
    'recorded interface calls per serial day, source system and target system (reporting)';
SELECT hivenet._grant_roles();

CREATE OR REPLACE FUNCTION hivenet.call_chain(p_unified_serial text)
RETURNS TABLE (interface_serial text, system_serial text, source_system text,
               source_module text, source_instance text, target_system text,
               serial_time timestamp, recorded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.interface_serial, c.system_serial, c.source_system, c.source_module,
           c.source_instance, c.target_system, c.serial_time, c.recorded_at
    FROM hivenet.interface_calls c
    WHERE c.unified_serial = p_unified_serial
    ORDER BY c.recorded_at, c.interface_serial
$$;

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
