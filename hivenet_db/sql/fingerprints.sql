-- Fingerprints of a keyed request by its namespace's policy (policies.sql,
-- set_namespace_policy): what makes two requests under one key "the same request".
--   NULL ('bytes')  sha256 of the jsonb text (_fingerprint): key order and whitespace do not
--                   matter, the form of a number does (1.0 is not 1);
--   'json'          sha256 of the RFC 8785 canonical form (JCS): numbers are IEEE 754 doubles
--                   written as ECMAScript writes them, so 1, 1.0 and 1e0 are one number;
--   '["$.a", ...]'  sha256 of the canonical form of {"paths": the paths, "values": the
--                   array of what each path selects} (jsonb_path_query_array, errors
--                   silenced): the rest may differ.
-- The default fingerprint is the finest: two requests it calls the same are the same under
-- every policy. So a key matches a request whose fingerprint by the policy, or whose default
-- one, is the key's (_begin_attempt): a key begun before a change of policy still matches
-- the very same request. And a policy's fingerprint is never the default one of a request
-- the policy calls another: under 'json' a canonical text that is some request's jsonb text
-- is that request's own canonical form, and under paths the canonical form is an object,
-- which jsonb's text never writes alike (it writes ": " after a name). So begin_step's
-- replay, which compares the default fingerprint only (steps.sql), decides as the policy.

-- The UTF-16 code units of p_text: RFC 8785 orders an object's members by them (a character
-- above U+FFFF sorts as its surrogates, before U+E000..U+FFFF; code point order would not).
CREATE FUNCTION hivenet._utf16_units(p_text text) RETURNS integer[]
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT coalesce(array_agg(u.unit ORDER BY c.position, u.half), '{}')
    FROM unnest(string_to_array(p_text, NULL)) WITH ORDINALITY AS c (ch, position)
    CROSS JOIN LATERAL (VALUES
        (1, CASE WHEN ascii(c.ch) > 65535 THEN 55296 + ((ascii(c.ch) - 65536) >> 10)
                 ELSE ascii(c.ch) END),
        (2, CASE WHEN ascii(c.ch) > 65535 THEN 56320 + ((ascii(c.ch) - 65536) & 1023) END))
        AS u (half, unit)
    WHERE u.unit IS NOT NULL;
END;

-- A JSON number as RFC 8785 writes it: the nearest IEEE 754 double, in the shortest digits
-- that round-trip, laid out as ECMAScript's Number::toString: plain from 1e-6 to below 1e21,
-- else d.ddde±n. The digits are float8's output (extra_float_digits 1, set here so a
-- session's setting cannot round them), shortened where fewer digits still give the same
-- double: float8 output does not take a value on the edge of the double's interval (1e23
-- comes out 9.999999999999999e+22). HN001 for a number no double holds.
CREATE FUNCTION hivenet._canonical_number(p_number numeric) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp SET extra_float_digits = 1 AS $$
DECLARE
    v_double double precision;
    v_text text;
    v_mantissa text;
    v_digits text;
    v_exponent integer := 0;  -- the value is 0.<v_digits> × 10^v_exponent
    v_count integer;
    v_shorter numeric;
BEGIN
    BEGIN
        v_double := p_number::double precision;
    EXCEPTION WHEN numeric_value_out_of_range THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('number %s is outside what an IEEE 754 double holds (RFC 8785)',
                             left(p_number::text, 40));
    END;
    IF v_double = 0 THEN
        RETURN '0';  -- also -0
    END IF;
    v_text := abs(v_double)::text;
    v_mantissa := split_part(v_text, 'e', 1);
    IF position('e' IN v_text) > 0 THEN
        v_exponent := split_part(v_text, 'e', 2)::integer;
    END IF;
    v_exponent := v_exponent + length(split_part(v_mantissa, '.', 1));
    v_digits := replace(v_mantissa, '.', '');
    v_exponent := v_exponent - (length(v_digits) - length(ltrim(v_digits, '0')));
    v_digits := rtrim(ltrim(v_digits, '0'), '0');
    FOR v_length IN 1 .. length(v_digits) - 1 LOOP
        v_shorter := round(('0.' || v_digits)::numeric, v_length);
        -- (the largest double rounded up is no double)
        IF (v_shorter::text || 'e' || v_exponent)::numeric <= 1.7976931348623157e308
           AND (v_shorter::text || 'e' || v_exponent)::double precision = abs(v_double) THEN
            v_digits := CASE WHEN v_shorter = 1 THEN '1'
                             ELSE rtrim(substr(v_shorter::text, 3), '0') END;
            v_exponent := v_exponent + CASE WHEN v_shorter = 1 THEN 1 ELSE 0 END;
            EXIT;
        END IF;
    END LOOP;
    v_count := length(v_digits);
    RETURN CASE WHEN v_double < 0 THEN '-' ELSE '' END || CASE
        WHEN v_count <= v_exponent AND v_exponent <= 21
            THEN v_digits || repeat('0', v_exponent - v_count)
        WHEN 0 < v_exponent AND v_exponent <= 21
            THEN left(v_digits, v_exponent) || '.' || substr(v_digits, v_exponent + 1)
        WHEN -6 < v_exponent AND v_exponent <= 0
            THEN '0.' || repeat('0', -v_exponent) || v_digits
        ELSE left(v_digits, 1) || CASE WHEN v_count > 1 THEN '.' || substr(v_digits, 2) ELSE '' END
             || 'e' || CASE WHEN v_exponent - 1 < 0 THEN '-' ELSE '+' END
             || abs(v_exponent - 1)::text END;
END $$;

-- The RFC 8785 canonical form of p_value: members ordered by the UTF-16 units of their names,
-- no whitespace, numbers by _canonical_number; strings as jsonb writes them, which escapes
-- exactly what RFC 8785 escapes (\b \t \n \f \r \" \\, other controls as \u00xx).
CREATE FUNCTION hivenet._canonical_json(p_value jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_out text;
BEGIN
    CASE jsonb_typeof(p_value)
    WHEN 'object' THEN
        SELECT '{' || coalesce(string_agg(to_json(m.key)::text || ':'
                                          || hivenet._canonical_json(m.value), ','
                                          ORDER BY hivenet._utf16_units(m.key)), '') || '}'
        INTO v_out FROM jsonb_each(p_value) AS m;
    WHEN 'array' THEN
        SELECT '[' || coalesce(string_agg(hivenet._canonical_json(e.value), ','
                                          ORDER BY e.position), '') || ']'
        INTO v_out FROM jsonb_array_elements(p_value) WITH ORDINALITY AS e (value, position);
    WHEN 'number' THEN
        v_out := hivenet._canonical_number((p_value #>> '{}')::numeric);
    ELSE
        v_out := p_value::text;  -- string, true, false, null
    END CASE;
    RETURN v_out;
END $$;

-- HN001 unless p_fingerprint is a fingerprint policy: 'bytes', 'json' or a non-empty JSON array
-- of JSON paths (strings jsonpath accepts).
CREATE FUNCTION hivenet._check_fingerprint(p_fingerprint text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_paths jsonb;
    v_path jsonb;
BEGIN
    IF p_fingerprint IN ('bytes', 'json') THEN
        RETURN;
    END IF;
    BEGIN
        v_paths := p_fingerprint::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        v_paths := NULL;
    END;
    IF jsonb_typeof(v_paths) IS DISTINCT FROM 'array' OR jsonb_array_length(v_paths) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('fingerprint %s is neither ''bytes'', ''json'' nor a JSON array of '
                             'JSON paths', hivenet._shown(p_fingerprint));
    END IF;
    FOR v_path IN SELECT jsonb_array_elements(v_paths) LOOP
        BEGIN
            IF jsonb_typeof(v_path) = 'string' THEN
                PERFORM (v_path #>> '{}')::jsonpath;
                CONTINUE;
            END IF;
        EXCEPTION WHEN syntax_error OR invalid_text_representation THEN
            NULL;  -- refused below
        END;
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('fingerprint path %s is not a JSON path',
                             hivenet._shown(v_path::text));
    END LOOP;
END $$;

-- The fingerprint of p_request under policy p_fingerprint (checked by _check_fingerprint;
-- NULL or 'bytes': _fingerprint, the steps' and the default).
CREATE FUNCTION hivenet._policy_fingerprint(p_fingerprint text, p_request jsonb) RETURNS bytea
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_request jsonb := coalesce(p_request, 'null'::jsonb);
BEGIN
    IF p_fingerprint IS NULL OR p_fingerprint = 'bytes' THEN
        RETURN hivenet._fingerprint(p_request);
    ELSIF p_fingerprint <> 'json' THEN
        -- silent: a strict path that finds nothing selects nothing, as a lax one
        SELECT jsonb_build_object('paths', p_fingerprint::jsonb, 'values', coalesce(jsonb_agg(
                   jsonb_path_query_array(v_request, (p.path #>> '{}')::jsonpath, '{}', true)
                   ORDER BY p.position), '[]'))
        INTO v_request
        FROM jsonb_array_elements(p_fingerprint::jsonb) WITH ORDINALITY AS p (path, position);
    END IF;
    RETURN sha256(convert_to(hivenet._canonical_json(v_request), 'UTF8'));
END $$;
