-- Release 0.2.0 from 0.1.0: the policy of a namespace (set_namespace_policy): fingerprints
-- ('bytes', 'json' by RFC 8785, JSON paths) and key rules beside the retention.

ALTER TABLE hivenet.request_namespace
    ALTER COLUMN retention DROP NOT NULL,
    ADD COLUMN fingerprint text,
    ADD COLUMN key_min_length integer,
    ADD COLUMN key_pattern text;
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules; NULL is the default';

-- hivenet_db/sql/fingerprints.sql
-- Fingerprints of a keyed request by its namespace's policy (requests.sql,
-- set_namespace_policy): what makes two requests under one key "the same request".
--   NULL ('bytes')  sha256 of the jsonb text (_fingerprint): key order and whitespace do not
--                   matter, the form of a number does (1.0 is not 1);
--   'json'          sha256 of the RFC 8785 canonical form (JCS): numbers are IEEE 754 doubles
--                   written as ECMAScript writes them, so 1, 1.0 and 1e0 are one number;
--   '["$.a", ...]'  sha256 of the canonical form of the array of what each JSON path selects
--                   (jsonb_path_query_array, errors silenced): the rest may differ.

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
        SELECT coalesce(jsonb_agg(jsonb_path_query_array(v_request, (p.path #>> '{}')::jsonpath,
                                                         '{}', true) ORDER BY p.position), '[]')
        INTO v_request
        FROM jsonb_array_elements(p_fingerprint::jsonb) WITH ORDINALITY AS p (path, position);
    END IF;
    RETURN sha256(convert_to(hivenet._canonical_json(v_request), 'UTF8'));
END $$;

-- hivenet_db/sql/requests.sql
-- HN001 naming the key rule of namespace p_namespace that key p_key breaks (key_min_length
-- p_min_length, key_pattern p_pattern: set_namespace_policy). Off the hot path: its caller
-- tests the rules first.
CREATE FUNCTION hivenet._raise_key_refused(p_namespace text, p_key text, p_min_length integer,
    p_pattern text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF length(p_key) < p_min_length THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('key %s is shorter than key_min_length %s of namespace %s',
                             hivenet._shown(p_key), p_min_length, hivenet._shown(p_namespace));
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('key %s does not match key_pattern %s of namespace %s',
                         hivenet._shown(p_key), hivenet._shown(p_pattern),
                         hivenet._shown(p_namespace));
END $$;

-- The state machine: begin an attempt of key p_key in namespace p_namespace, the arguments
-- already checked by the caller (begin_request, begin_step). See begin_request for what it
-- does. Not set-returning (OUT parameters): the callers read its one row without a tuplestore.
-- No SET clause, on purpose: it runs only inside its callers, whose SET search_path is in
-- force (docs/design/sql-internals.md).
CREATE OR REPLACE FUNCTION hivenet._begin_attempt(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- The namespace's fingerprint policy (fingerprints.sql); NULL, the default, inlined.
    v_policy text := (SELECT n.fingerprint FROM hivenet.request_namespace n
                      WHERE n.namespace = p_namespace);
    v_fingerprint bytea := CASE WHEN v_policy IS NULL THEN hivenet._fingerprint(p_request)
                                ELSE hivenet._policy_fingerprint(v_policy, p_request) END;
    v_attempt integer := 1;
    v_last hivenet.request_attempt;
BEGIN
    -- Optimistic: most keys are new, so insert the attempt first; a conflict (after waiting
    -- for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        INSERT INTO hivenet.request_attempt
            (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
        VALUES (p_namespace, p_key, v_attempt, 'processing', v_fingerprint, p_unified_serial,
                p_lease, hivenet.now())
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            outcome := 'started';
            attempt := v_attempt;
            RETURN;
        END IF;
        SELECT * INTO v_last FROM hivenet.request_attempt a
        WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
        IF NOT FOUND THEN
            v_attempt := 1;  -- removed by maintain() in between: the key is new again
        ELSIF v_last.fingerprint <> v_fingerprint THEN
            RAISE EXCEPTION USING ERRCODE = 'HN032',
                MESSAGE = format('%s was begun with another request (fingerprint %s, this one '
                                 '%s)', hivenet._attempt_subject(p_namespace, p_key),
                                 encode(v_last.fingerprint, 'hex'), encode(v_fingerprint, 'hex'));
        ELSIF v_last.state = 'processing' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN030',
                MESSAGE = format('%s is processing (attempt %s started at %s, lease until %s): '
                                 'its outcome is unknown',
                                 hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                                 v_last.started_at,
                                 v_last.started_at + hivenet._step_lease(v_last.lease));
        ELSIF v_last.state = 'success' THEN
            IF p_on_success = 'reject' THEN
                RAISE EXCEPTION USING ERRCODE = 'HN031',
                    MESSAGE = format('%s already succeeded (attempt %s at %s)',
                                     hivenet._attempt_subject(p_namespace, p_key),
                                     v_last.attempt, v_last.finished_at);
            END IF;
            outcome := 'replayed';
            attempt := v_last.attempt;
            response := v_last.response;
            RETURN;
        ELSE
            v_attempt := v_last.attempt + 1;  -- the latest failed: proceed
        END IF;
        -- Next round: insert that attempt (waiting again if someone is starting it too).
    END LOOP;
END $$;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
  AND NOT EXISTS (SELECT FROM hivenet.request_namespace p
                  WHERE p.namespace = n.namespace
                    AND (p.fingerprint IS NOT NULL OR p.key_min_length IS NOT NULL
                         OR p.key_pattern IS NOT NULL))
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

-- begin_request's full path, in the owner's rights, after _start_request wrote nothing. Input
-- the view vouches for, with plain options, met a key that has an attempt: the state machine
-- decides. Anything else (bad input, nowait) gets every check with its exact error first.
-- Not set-returning (OUT parameters): no tuplestore of its own.
CREATE OR REPLACE FUNCTION hivenet._begin_request(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval,
    p_nowait boolean, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_min_length integer;
    v_pattern text;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._request_start_valid(p_namespace, p_key, p_lease), false)) THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
        PERFORM hivenet._check_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
    END IF;
    SELECT n.key_min_length, n.key_pattern INTO v_min_length, v_pattern
    FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF length(p_key) < v_min_length OR p_key !~ v_pattern THEN
        PERFORM hivenet._raise_key_refused(p_namespace, p_key, v_min_length, v_pattern);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success, NULL,
                                           p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
END $$;

-- hivenet.set_namespace_policy(namespace, retention default null, fingerprint default null,
--     on_failure default null, expire_after default null, key_min_length default null,
--     key_pattern default null) → void
--   The policy of a namespace of keyed requests; a NULL argument leaves that value as it is.
--   retention: finished requests are kept that long after their last attempt ended (then
--   maintain() removes them, and the same key starts afresh); set_request_retention(namespace,
--   NULL) goes back to the setting request_retention. fingerprint: what makes two requests
--   under one key the same (fingerprints.sql): 'bytes' (the default), 'json' (RFC 8785) or a
--   JSON array of JSON paths; keys begun before a change keep their old fingerprint, so their
--   requests mismatch (HN032) until retention removes them. key_min_length (1 = no rule) and
--   key_pattern (a POSIX regular expression; '' = no rule): begin_request refuses a key
--   breaking them with HN001. on_failure and expire_after are not supported yet: HN001 unless
--   NULL.
--   HN001: namespace not valid (as begin_request), retention not positive, longer than 10
--   years or shorter than step_lease, fingerprint none of the three, key_min_length not in
--   1..255, key_pattern not a regular expression.
CREATE FUNCTION hivenet.set_namespace_policy(
    p_namespace text, p_retention interval DEFAULT NULL, p_fingerprint text DEFAULT NULL,
    p_on_failure text DEFAULT NULL, p_expire_after interval DEFAULT NULL,
    p_key_min_length integer DEFAULT NULL, p_key_pattern text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_conflict text;
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    IF p_on_failure IS NOT NULL OR p_expire_after IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s of namespace %s is not supported yet: pass NULL',
                             CASE WHEN p_on_failure IS NOT NULL
                                  THEN 'on_failure ' || hivenet._shown(p_on_failure)
                                  ELSE 'expire_after ' || p_expire_after END,
                             hivenet._shown(p_namespace));
    END IF;
    IF p_retention IS NOT NULL THEN
        PERFORM hivenet._check_interval(format('retention of namespace %s',
                                               hivenet._shown(p_namespace)), p_retention);
        v_conflict := hivenet._interval_conflict('request_retention', p_retention);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('retention %s of namespace %s %s', p_retention,
                                 hivenet._shown(p_namespace), v_conflict);
        END IF;
    END IF;
    IF p_fingerprint IS NOT NULL THEN
        PERFORM hivenet._check_fingerprint(p_fingerprint);
    END IF;
    IF p_key_min_length NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('key_min_length %s of namespace %s is not between 1 and 255',
                             p_key_min_length, hivenet._shown(p_namespace));
    END IF;
    BEGIN
        PERFORM '' ~ p_key_pattern;
    EXCEPTION WHEN invalid_regular_expression THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('key_pattern %s of namespace %s is not a regular expression',
                             hivenet._shown(p_key_pattern), hivenet._shown(p_namespace));
    END;
    -- The defaults are stored as NULL, so that a default policy keeps the fast path.
    INSERT INTO hivenet.request_namespace AS n
        (namespace, retention, fingerprint, key_min_length, key_pattern)
    VALUES (p_namespace, p_retention, nullif(p_fingerprint, 'bytes'),
            nullif(p_key_min_length, 1), nullif(p_key_pattern, ''))
    ON CONFLICT (namespace) DO UPDATE SET
        retention = coalesce(p_retention, n.retention),
        fingerprint = CASE WHEN p_fingerprint IS NULL THEN n.fingerprint
                           ELSE EXCLUDED.fingerprint END,
        key_min_length = CASE WHEN p_key_min_length IS NULL THEN n.key_min_length
                              ELSE EXCLUDED.key_min_length END,
        key_pattern = CASE WHEN p_key_pattern IS NULL THEN n.key_pattern
                           ELSE EXCLUDED.key_pattern END;
    DELETE FROM hivenet.request_namespace n
    WHERE n.namespace = p_namespace AND n.retention IS NULL AND n.fingerprint IS NULL
      AND n.key_min_length IS NULL AND n.key_pattern IS NULL;
END $$;

-- hivenet.set_request_retention(namespace, retention) → void
--   set_namespace_policy(namespace, retention), and NULL: back to the setting
--   request_retention (24 hours). Keep it longer than any client retries.
CREATE OR REPLACE FUNCTION hivenet.set_request_retention(p_namespace text, p_retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_retention IS NULL THEN
        UPDATE hivenet.request_namespace n SET retention = NULL
        WHERE n.namespace = p_namespace;
    END IF;
    PERFORM hivenet.set_namespace_policy(p_namespace, p_retention);  -- checks, tidies
END $$;

-- hivenet_db/sql/privileges.sql
-- Grants to the roles that exist (called here, and by bootstrap when it creates them after the
-- schema was installed). Safe to run again.
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_counter text;
    v_role text;
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        -- The application API.
        GRANT EXECUTE ON FUNCTION
            hivenet.now(),
            hivenet.next_unified_serial(text, text, text),
            hivenet.next_system_serial(text, text, text),
            hivenet.next_interface_serial(text, text, text, text),
            hivenet.next_serial(text, jsonb),
            hivenet.next_serials(text, jsonb, integer),
            hivenet.parse_serial(text, text),
            hivenet.claim_interface_serial(text, text, text, boolean),
            hivenet.call_chain(text),
            hivenet.claim(text, text, boolean),
            hivenet.begin_step(text, jsonb, text, text, interval, boolean),
            hivenet.finish_step(text, integer, boolean, jsonb),
            hivenet.begin_request(text, text, jsonb, text, interval, boolean),
            hivenet.finish_request(text, text, integer, boolean, jsonb),
            hivenet.ownership(),
            hivenet.flush_at_commit()
        TO hivenet_app;
        -- now() is inlined into the caller: its fake clock (clock.sql) runs as the caller.
        GRANT EXECUTE ON FUNCTION hivenet._fake_now() TO hivenet_app;
        -- The allocation fast path (compile.sql, _fast_unified and _fast_system), inlined into
        -- next_unified_serial / next_system_serial: every function in it, and USAGE on the
        -- counters it draws from (_grant_counter). The constants say what the formats and
        -- settings are (no secret).
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_unified(text, text, text),
            hivenet._fast_system(text, text, text),
            hivenet._format_constant(text),
            hivenet._setting_constant(text),
            hivenet._scope_sequence_name(text, text)
        TO hivenet_app;
        FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s ORDER BY 1 LOOP
            IF to_regclass('hivenet.' || quote_ident(v_counter)) IS NOT NULL THEN
                PERFORM hivenet._grant_counter(v_counter);
            END IF;
        END LOOP;
        -- begin_step and begin_request (steps.sql, requests.sql), inlined into the caller's
        -- statement. The replay of a succeeded step: _step_in_window and view _step_replay,
        -- SELECT only: of every succeeded step its serial, attempt, request fingerprint,
        -- unified serial and stored response, what begin_step replays to whoever presents the
        -- same request. The application's own replays: no other role reads them.
        GRANT EXECUTE ON FUNCTION
            hivenet._step_in_window(text),
            hivenet._fingerprint(jsonb)
        TO hivenet_app;
        GRANT SELECT ON hivenet._step_replay TO hivenet_app;
        -- A new step's or key's first attempt: _start_step / _start_request (run as the
        -- caller) insert into view _step_start / _request_start, whose rule writes with the
        -- owner's rights: the role may insert, not read. The rules' checks run as the
        -- inserter: _step_start_valid and the generated layout check _serial_valid with
        -- _serial_time (compile.sql), and _request_start_valid.
        GRANT INSERT ON hivenet._step_start, hivenet._request_start TO hivenet_app;
        GRANT EXECUTE ON FUNCTION
            hivenet._plain_options(text, boolean),
            hivenet._start_step(text, jsonb, text, text, interval, boolean),
            hivenet._start_request(text, text, jsonb, text, interval, boolean),
            hivenet._serial_valid(text, text),
            hivenet._serial_time(text, text),
            hivenet._step_start_valid(text, text, interval),
            hivenet._request_start_valid(text, text, interval)
        TO hivenet_app;
        -- Everything else: _begin_step / _begin_request (SECURITY DEFINER, every check of
        -- begin_step / begin_request: calling them directly can do nothing the public
        -- functions cannot).
        GRANT EXECUTE ON FUNCTION
            hivenet._begin_step(text, jsonb, text, text, interval, boolean),
            hivenet._begin_request(text, text, jsonb, text, interval, boolean)
        TO hivenet_app;
        -- The rules those checks and _step_in_window inline (clock.sql, claims.sql): the
        -- callers' clock, the bound on intervals, the rule for names and keys.
        GRANT EXECUTE ON FUNCTION
            hivenet._caller_now(timestamptz, text),
            hivenet._longest_interval(),
            hivenet._interval_allowed(interval),
            hivenet._name_valid(text)
        TO hivenet_app;
    END IF;

    -- The reporting views and what they call as their reader, for both roles that read them.
    FOREACH v_role IN ARRAY ARRAY['hivenet_reporting', 'hivenet_admin'] LOOP
        CONTINUE WHEN to_regrole(v_role) IS NULL;
        EXECUTE format('GRANT USAGE ON SCHEMA hivenet TO %I', v_role);
        EXECUTE format('GRANT SELECT ON hivenet.interface_calls, '
                       'hivenet.interface_calls_per_day, hivenet.step_states, '
                       'hivenet.stuck_steps, hivenet.scope_usage, hivenet.request_states, '
                       'hivenet.stuck_requests TO %I', v_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'hivenet.call_chain(text), '
                       'hivenet.now(), hivenet._fake_now(), '    -- stuck_steps, stuck_requests
                       'hivenet._step_lease(interval), '         -- likewise
                       'hivenet._reporting_local_now(), '        -- scope_usage
                       'hivenet._period_index(timestamp, text), '
                       'hivenet._period_start(bigint, text), '
                       'hivenet._scope_counter_value(text), '
                       'hivenet._serial_field(text, text, text), '  -- interface_calls
                       'hivenet._serial_time(text, text), '
                       'hivenet.parse_serial(text, text) '          -- in both, for other formats
                       'TO %I', v_role);
    END LOOP;

    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.maintain(),
            hivenet.fence_failover(bigint, boolean),
            hivenet._timeline(),  -- `hivenet-db failover-fence` reports this timeline's fence
            hivenet.replication_warning(),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.prepare_scope(text, jsonb),
            hivenet.register_system(text, text),
            hivenet.register_module(text, text, text),
            hivenet.own_instances(text, boolean, boolean),
            hivenet.ownership(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_claim_expiry(text, interval),
            hivenet.set_request_retention(text, interval),
            hivenet.set_namespace_policy(text, interval, text, text, interval, integer, text)
        TO hivenet_admin;
    END IF;
END $$;

-- Nothing for PUBLIC (privileges.sql).
REVOKE EXECUTE ON FUNCTION hivenet._utf16_units(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._canonical_number(numeric) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._canonical_json(jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._check_fingerprint(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._policy_fingerprint(text, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._raise_key_refused(text, text, integer, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet.set_namespace_policy(text, interval, text, text, interval, integer, text) FROM PUBLIC;
SELECT hivenet._grant_roles();

-- Decision counts per namespace and decision (hivenet_db/sql/decisions.sql, view
-- request_decisions, metric hivenet_request_decisions_total): the counting calls in
-- begin_request's and begin_step's paths.

-- hivenet_db/sql/decisions.sql
-- Decision counts: how many begins of each namespace (steps are namespace 'hivenet.steps')
-- ended in each decision, for metric hivenet_request_decisions_total (view
-- request_decisions, reporting.sql). The decisions, the same strings as the Python hook's and
-- the OpenTelemetry attribute's (hivenet_db/decisions.py):
--   started      a new attempt began (the key was new, or its latest attempt failed)
--   replayed     the stored response of a success was returned
--   in_progress  HN030: the latest attempt is processing
--   mismatch     HN032: the key was begun with another request
--   rejected     the key or an option was refused (HN001, HN002, HN021), or a repeat of a
--                success whose policy is 'reject' (HN031)
--   expired      a processing attempt was found past its namespace's expire_after
--
-- A count is a sequence: nextval survives the caller's rollback, and in_progress, mismatch
-- and rejected raise, which aborts the caller's transaction. So a count is of decisions
-- taken, committed or not: a started key whose transaction rolled back was counted started
-- (and its next begin is counted again). The cost on the hot path is one index probe of
-- decision_counter and one nextval (no row written); the measurements are in
-- docs/benchmarks.md. A sequence writes WAL once per 32 values, so after a crash a count can
-- jump ahead by up to 32 (never back).
--
-- A namespace gets its six counters with its first started key (_new_decision_counter), made in
-- that caller's transaction: a second transaction starting a key of the same new namespace
-- at the same time makes six of its own (each counter's name is unique, so neither waits for
-- the other) and the view sums them. Made in a transaction that rolls back, the counters
-- vanish with what they counted (that transaction's decisions only: no other saw them).
-- Decisions of a namespace without counters that raise (a bad namespace, a bad key in a
-- namespace that never started one, a duplicate of its first key before that commits) cannot
-- make them, as the raise would undo it: they are counted under namespace 'hivenet.other'.

-- Which sequences count which decision of which namespace: six rows (one per decision) per
-- namespace and maker, usually one maker. counter: nextval by OID, no name resolved.
CREATE TABLE hivenet.decision_counter (
    namespace text     NOT NULL,
    decision  text     NOT NULL,
    counter   regclass NOT NULL,
    PRIMARY KEY (namespace, decision, counter)
);
COMMENT ON TABLE hivenet.decision_counter IS
    'the sequences that count the decisions of begin per namespace (view request_decisions)';

-- The counters, for begin's paths that run as hivenet_app (_count_decision), which reads
-- them through this view: the role has no right on a table (privileges.sql).
CREATE VIEW hivenet._decision_counters AS
SELECT c.namespace, c.decision, c.counter FROM hivenet.decision_counter c;

-- The number in each counter's name (decisions_<number>_<decision>): unique, whoever makes it.
CREATE SEQUENCE hivenet.decision_counter_number;

-- Make the six counters of namespace p_namespace, usable by hivenet_app (_grant_counter,
-- privileges.sql) unless p_grant is false: at install, before privileges.sql, whose
-- _grant_roles grants every counter (_grant_decision_counters).
CREATE FUNCTION hivenet._create_decision_counters(p_namespace text, p_grant boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_number bigint := nextval('hivenet.decision_counter_number');
    v_decision text;
    v_name text;
BEGIN
    FOREACH v_decision IN ARRAY ARRAY['started', 'replayed', 'in_progress', 'mismatch',
                                      'rejected', 'expired'] LOOP
        v_name := format('decisions_%s_%s', v_number, v_decision);
        EXECUTE format('CREATE SEQUENCE hivenet.%I', v_name);
        IF p_grant THEN
            PERFORM hivenet._grant_counter(v_name);
        END IF;
        INSERT INTO hivenet.decision_counter (namespace, decision, counter)
        VALUES (p_namespace, v_decision, ('hivenet.' || quote_ident(v_name))::regclass);
    END LOOP;
END $$;

-- The counter of decision p_decision in namespace p_namespace when _count_decision found
-- none: for a started key, the namespace's own, made now (its first start, or another
-- transaction's counters are not committed yet); for anything else, namespace
-- 'hivenet.other' (see above). NULL for no decision of the six. SECURITY DEFINER: it makes
-- sequences for hivenet_app.
CREATE FUNCTION hivenet._new_decision_counter(p_namespace text, p_decision text) RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_namespace text := CASE WHEN p_decision = 'started' AND hivenet._name_valid(p_namespace)
                             THEN p_namespace ELSE 'hivenet.other' END;
    v_counter regclass;
BEGIN
    LOOP
        SELECT c.counter INTO v_counter FROM hivenet.decision_counter c
        WHERE c.namespace = v_namespace AND c.decision = p_decision LIMIT 1;
        IF FOUND OR v_namespace = 'hivenet.other' THEN
            RETURN v_counter;
        END IF;
        PERFORM hivenet._create_decision_counters(v_namespace, true);
    END LOOP;
END $$;

-- Let hivenet_app count on every counter (_grant_counter): run by _grant_roles
-- (privileges.sql), at install and when bootstrap made the roles.
CREATE FUNCTION hivenet._grant_decision_counters() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name name;
BEGIN
    FOR v_name IN SELECT s.relname FROM hivenet.decision_counter c
                  JOIN pg_class s ON s.oid = c.counter ORDER BY 1 LOOP
        PERFORM hivenet._grant_counter(v_name);
    END LOOP;
END $$;

-- Count decision p_decision of a begin in namespace p_namespace; returns p_decision, so a
-- caller can write `outcome := hivenet._count_decision(p_namespace, 'started')`, and calls
-- it just before a RAISE. Runs as the caller (the start paths run as hivenet_app): one probe
-- of view _decision_counters and a nextval on a counter hivenet_app may use; the rare miss
-- goes to _new_decision_counter. No SET clause: a SET costs a tenth of a begin (requests.sql).
CREATE FUNCTION hivenet._count_decision(p_namespace text, p_decision text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- Every name qualified, operators too: the caller's search_path is in force.
    PERFORM pg_catalog.nextval(coalesce(
        (SELECT c.counter FROM hivenet._decision_counters c
         WHERE c.namespace OPERATOR(pg_catalog.=) p_namespace
           AND c.decision OPERATOR(pg_catalog.=) p_decision LIMIT 1),
        hivenet._new_decision_counter(p_namespace, p_decision)));
    RETURN p_decision;
END $$;

-- The counters of the steps and of decisions without a namespace of their own, from the start.
SELECT hivenet._create_decision_counters('hivenet.steps', false);
SELECT hivenet._create_decision_counters('hivenet.other', false);

-- The namespaces that started keys under 0.1.0 get their counters now, so that their
-- refusals are counted under their own name (decisions.sql).
SELECT hivenet._create_decision_counters(n.namespace, false)
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps' ORDER BY 1) AS n;

-- hivenet_db/sql/requests.sql
-- HN001 naming the key rule of namespace p_namespace that key p_key breaks (key_min_length
-- p_min_length, key_pattern p_pattern: set_namespace_policy). Off the hot path: its caller
-- tests the rules first.
CREATE OR REPLACE FUNCTION hivenet._raise_key_refused(p_namespace text, p_key text, p_min_length integer,
    p_pattern text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._count_decision(p_namespace, 'rejected');
    IF length(p_key) < p_min_length THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('key %s is shorter than key_min_length %s of namespace %s',
                             hivenet._shown(p_key), p_min_length, hivenet._shown(p_namespace));
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('key %s does not match key_pattern %s of namespace %s',
                         hivenet._shown(p_key), hivenet._shown(p_pattern),
                         hivenet._shown(p_namespace));
END $$;

-- The state machine: begin an attempt of key p_key in namespace p_namespace, the arguments
-- already checked by the caller (begin_request, begin_step). See begin_request for what it
-- does. Not set-returning (OUT parameters): the callers read its one row without a tuplestore.
-- No SET clause, on purpose: it runs only inside its callers, whose SET search_path is in
-- force (docs/design/sql-internals.md).
CREATE OR REPLACE FUNCTION hivenet._begin_attempt(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- The namespace's fingerprint policy (fingerprints.sql); NULL, the default, inlined.
    v_policy text := (SELECT n.fingerprint FROM hivenet.request_namespace n
                      WHERE n.namespace = p_namespace);
    v_fingerprint bytea := CASE WHEN v_policy IS NULL THEN hivenet._fingerprint(p_request)
                                ELSE hivenet._policy_fingerprint(v_policy, p_request) END;
    v_attempt integer := 1;
    v_last hivenet.request_attempt;
BEGIN
    -- Optimistic: most keys are new, so insert the attempt first; a conflict (after waiting
    -- for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        INSERT INTO hivenet.request_attempt
            (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
        VALUES (p_namespace, p_key, v_attempt, 'processing', v_fingerprint, p_unified_serial,
                p_lease, hivenet.now())
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            outcome := hivenet._count_decision(p_namespace, 'started');
            attempt := v_attempt;
            RETURN;
        END IF;
        SELECT * INTO v_last FROM hivenet.request_attempt a
        WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
        IF NOT FOUND THEN
            v_attempt := 1;  -- removed by maintain() in between: the key is new again
        ELSIF v_last.fingerprint <> v_fingerprint THEN
            PERFORM hivenet._count_decision(p_namespace, 'mismatch');
            RAISE EXCEPTION USING ERRCODE = 'HN032',
                MESSAGE = format('%s was begun with another request (fingerprint %s, this one '
                                 '%s)', hivenet._attempt_subject(p_namespace, p_key),
                                 encode(v_last.fingerprint, 'hex'), encode(v_fingerprint, 'hex'));
        ELSIF v_last.state = 'processing' THEN
            PERFORM hivenet._count_decision(p_namespace, 'in_progress');
            RAISE EXCEPTION USING ERRCODE = 'HN030',
                MESSAGE = format('%s is processing (attempt %s started at %s, lease until %s): '
                                 'its outcome is unknown',
                                 hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                                 v_last.started_at,
                                 v_last.started_at + hivenet._step_lease(v_last.lease));
        ELSIF v_last.state = 'success' THEN
            IF p_on_success = 'reject' THEN
                PERFORM hivenet._count_decision(p_namespace, 'rejected');
                RAISE EXCEPTION USING ERRCODE = 'HN031',
                    MESSAGE = format('%s already succeeded (attempt %s at %s)',
                                     hivenet._attempt_subject(p_namespace, p_key),
                                     v_last.attempt, v_last.finished_at);
            END IF;
            outcome := hivenet._count_decision(p_namespace, 'replayed');
            attempt := v_last.attempt;
            response := v_last.response;
            RETURN;
        ELSE
            v_attempt := v_last.attempt + 1;  -- the latest failed: proceed
        END IF;
        -- Next round: insert that attempt (waiting again if someone is starting it too).
    END LOOP;
END $$;

-- _begin_attempt with nowait: the same, under the shortest lock_timeout, so that where it
-- would wait for a concurrent start of the same attempt it raises HN030 at once. Its own
-- function (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of
-- the EXCEPTION block stays off the default path.
CREATE OR REPLACE FUNCTION hivenet._begin_attempt_nowait(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, p_unified_serial,
                                p_lease) b;
EXCEPTION WHEN lock_not_available THEN
    PERFORM hivenet._count_decision(p_namespace, 'in_progress');
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('%s is being started by another transaction right now (nowait)',
                         hivenet._attempt_subject(p_namespace, p_key));
END $$;

-- Whether a new key with plain options was started: attempt 1 written through view
-- _request_start. begin_request's first branch, run as the caller, as _start_step (steps.sql,
-- where the why is).
CREATE OR REPLACE FUNCTION hivenet._start_request(p_namespace text, p_key text, p_request jsonb,
    p_on_success text, p_lease interval, p_nowait boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT hivenet._plain_options(p_on_success, p_nowait) THEN
        RETURN false;
    END IF;
    INSERT INTO hivenet._request_start VALUES (p_namespace, p_key, p_request, p_lease);
    IF FOUND THEN
        PERFORM hivenet._count_decision(p_namespace, 'started');
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- begin_request's full path, in the owner's rights, after _start_request wrote nothing. Input
-- the view vouches for, with plain options, met a key that has an attempt: the state machine
-- decides. Anything else (bad input, nowait) gets every check with its exact error first.
-- Not set-returning (OUT parameters): no tuplestore of its own.
CREATE OR REPLACE FUNCTION hivenet._begin_request(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval,
    p_nowait boolean, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_min_length integer;
    v_pattern text;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._request_start_valid(p_namespace, p_key, p_lease), false)) THEN
        BEGIN
            PERFORM hivenet._check_name('namespace', p_namespace);
            PERFORM hivenet._check_name('key', p_key);
            PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        EXCEPTION WHEN SQLSTATE 'HN001' THEN
            PERFORM hivenet._count_decision(p_namespace, 'rejected');
            RAISE;
        END;
    END IF;
    SELECT n.key_min_length, n.key_pattern INTO v_min_length, v_pattern
    FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF length(p_key) < v_min_length OR p_key !~ v_pattern THEN
        PERFORM hivenet._raise_key_refused(p_namespace, p_key, v_min_length, v_pattern);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success, NULL,
                                           p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
END $$;

-- hivenet_db/sql/steps.sql
-- Whether a new step with plain options was started: attempt 1 written through view
-- _step_start. begin_step's second branch, run as the caller: the view's rule writes with the
-- owner's rights and its checks are bound when it was created, so no SECURITY DEFINER and no
-- SET clause is needed, and none is paid (a SET costs a tenth of a begin; requests.sql).
-- PL/pgSQL, so its INSERT is planned once per session, not per call.
CREATE OR REPLACE FUNCTION hivenet._start_step(p_system_serial text, p_request jsonb, p_on_success text,
    p_unified_serial text, p_lease interval, p_nowait boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT hivenet._plain_options(p_on_success, p_nowait) THEN
        RETURN false;
    END IF;
    INSERT INTO hivenet._step_start
    VALUES (p_system_serial, p_request, p_unified_serial, p_lease);
    IF FOUND THEN
        PERFORM hivenet._count_decision('hivenet.steps', 'started');
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- begin_step's full path, in the step owner's rights, after _start_step wrote nothing. A step
-- that has an attempt, its input vouched for by the view's test (_step_start_valid) with
-- plain options, goes to the state machine (requests.sql); everything else (bad input,
-- nowait, instances to check, a serial near the window's edges) gets every check with its
-- exact error first (parse_serial names the problem). Not set-returning (OUT parameters): no
-- tuplestore of its own.
CREATE OR REPLACE FUNCTION hivenet._begin_step(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
BEGIN
    -- Without parse_serial (~200 µs a serial) when the view vouches for the input.
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._step_start_valid(p_system_serial, p_unified_serial, p_lease),
                         false)) THEN
        BEGIN
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
            IF v_day < hivenet._step_days_from(hivenet.now())
               OR (v_day > hivenet._step_days_to(hivenet.now())
                   AND NOT hivenet._step_issued_here(p_system_serial, v_day)) THEN
                PERFORM hivenet._raise_step_outside_window(p_system_serial, v_day);
            END IF;
        EXCEPTION WHEN SQLSTATE 'HN001' OR SQLSTATE 'HN002' OR SQLSTATE 'HN021' THEN
            PERFORM hivenet._count_decision('hivenet.steps', 'rejected');
            RAISE;
        END;
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
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive or
--   longer than 10 years.
--   HN021 SerialOutsideWindow: the serial's date, read as its caller's local date in any zone
--   from UTC-12 to UTC+14, starts before now - step_retention in every such zone (the step's
--   record may already be purged: it must not run again), or after now +
--   step_future_tolerance in every such zone, unless this database issued serials of its
--   scope dated that day or later (its clock stepped back).
--   HN002 UnknownScope: a database that declared owned instances does not own the serial's
--   instance (a retry sent to the wrong shard; ownership.sql, check_received_instances).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
--   One statement, three branches: begin_step is a set-returning LANGUAGE sql function that
--   the planner inlines into the caller's statement (called in FROM), a UNION ALL under
--   LIMIT 1 whose branches run in order, each only when the ones before it returned nothing:
--   1. A replay of a step that succeeded with the same request, plain options, no unified
--      serial or the one it was begun with, and a serial in the window is one read of view
--      _step_replay by primary key, with no PL/pgSQL call: the stored serials were checked
--      when the step began (a format is never redefined), so no serial is parsed again.
--   2. A new step with plain options: _start_step, one INSERT into view _step_start.
--   3. Everything else (failed, processing, another request or unified serial, reject,
--      nowait, bad input, an instance other shards own) goes to _begin_step, which decides
--      and names the problem.
--   Why this shape: docs/design/sql-internals.md.
CREATE OR REPLACE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    -- 'replayed', counted (decisions.sql, as _count_decision) with no PL/pgSQL call: the
    -- select list runs only for the row replayed. The subquery names r so that it runs for
    -- every row replayed (uncorrelated, it would run once for a caller's whole statement).
    (SELECT coalesce((SELECT 'replayed'::text FROM hivenet._decision_counters c
                      WHERE c.namespace = 'hivenet.steps' AND c.decision = 'replayed'
                        AND r.system_serial IS NOT NULL AND nextval(c.counter) > 0
                      LIMIT 1), 'replayed'),
            r.attempt, r.response
     FROM hivenet._step_replay r
     WHERE r.system_serial = p_system_serial
       AND r.fingerprint = hivenet._fingerprint(p_request)
       -- Options that replay (nowait or not: a replay never waits); the unified serial the
       -- step was begun with (so a valid one) or none.
       AND p_on_success = 'replay' AND p_nowait IS NOT NULL
       AND (p_lease IS NULL OR p_lease > interval '0')
       AND (p_unified_serial IS NULL OR p_unified_serial = r.unified_serial)
       AND hivenet._step_in_window(r.system_serial)
     UNION ALL
     SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_step(p_system_serial, p_request, p_on_success, p_unified_serial,
                               p_lease, p_nowait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_step(p_system_serial, p_request, p_on_success, p_unified_serial,
                              p_lease, p_nowait) b)
    LIMIT 1;
END;

-- hivenet_db/sql/reporting.sql
-- hivenet.request_decisions: per namespace (steps: 'hivenet.steps'; decisions no namespace
-- could count: 'hivenet.other') and decision, how many begins decided so since install,
-- committed or not (decisions.sql says what each decision is and what a rollback does): what
-- metric hivenet_request_decisions_total exports. Every decision of a namespace is listed
-- once it has counters (its first started key), 0 until it happens.
CREATE VIEW hivenet.request_decisions AS
SELECT d.namespace, d.decision,
       sum(coalesce(hivenet._scope_counter_value(s.relname), 0))::bigint AS decisions
FROM hivenet.decision_counter d
JOIN pg_catalog.pg_class s ON s.oid = d.counter
GROUP BY d.namespace, d.decision
ORDER BY d.namespace, d.decision;
COMMENT ON VIEW hivenet.request_decisions IS
    'number of begins per namespace and decision (started, replayed, in_progress, mismatch, '
    'rejected, expired), committed or not';

-- hivenet_db/sql/privileges.sql
-- Grants to the roles that exist (called here, and by bootstrap when it creates them after the
-- schema was installed). Safe to run again.
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_counter text;
    v_role text;
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        -- The application API.
        GRANT EXECUTE ON FUNCTION
            hivenet.now(),
            hivenet.next_unified_serial(text, text, text),
            hivenet.next_system_serial(text, text, text),
            hivenet.next_interface_serial(text, text, text, text),
            hivenet.next_serial(text, jsonb),
            hivenet.next_serials(text, jsonb, integer),
            hivenet.parse_serial(text, text),
            hivenet.claim_interface_serial(text, text, text, boolean),
            hivenet.call_chain(text),
            hivenet.claim(text, text, boolean),
            hivenet.begin_step(text, jsonb, text, text, interval, boolean),
            hivenet.finish_step(text, integer, boolean, jsonb),
            hivenet.begin_request(text, text, jsonb, text, interval, boolean),
            hivenet.finish_request(text, text, integer, boolean, jsonb),
            hivenet.ownership(),
            hivenet.flush_at_commit()
        TO hivenet_app;
        -- now() is inlined into the caller: its fake clock (clock.sql) runs as the caller.
        GRANT EXECUTE ON FUNCTION hivenet._fake_now() TO hivenet_app;
        -- The allocation fast path (compile.sql, _fast_unified and _fast_system), inlined into
        -- next_unified_serial / next_system_serial: every function in it, and USAGE on the
        -- counters it draws from (_grant_counter). The constants say what the formats and
        -- settings are (no secret).
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_unified(text, text, text),
            hivenet._fast_system(text, text, text),
            hivenet._format_constant(text),
            hivenet._setting_constant(text),
            hivenet._scope_sequence_name(text, text)
        TO hivenet_app;
        FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s ORDER BY 1 LOOP
            IF to_regclass('hivenet.' || quote_ident(v_counter)) IS NOT NULL THEN
                PERFORM hivenet._grant_counter(v_counter);
            END IF;
        END LOOP;
        -- begin_step and begin_request (steps.sql, requests.sql), inlined into the caller's
        -- statement. The replay of a succeeded step: _step_in_window and view _step_replay,
        -- SELECT only: of every succeeded step its serial, attempt, request fingerprint,
        -- unified serial and stored response, what begin_step replays to whoever presents the
        -- same request. The application's own replays: no other role reads them.
        GRANT EXECUTE ON FUNCTION
            hivenet._step_in_window(text),
            hivenet._fingerprint(jsonb)
        TO hivenet_app;
        GRANT SELECT ON hivenet._step_replay TO hivenet_app;
        -- A new step's or key's first attempt: _start_step / _start_request (run as the
        -- caller) insert into view _step_start / _request_start, whose rule writes with the
        -- owner's rights: the role may insert, not read. The rules' checks run as the
        -- inserter: _step_start_valid and the generated layout check _serial_valid with
        -- _serial_time (compile.sql), and _request_start_valid.
        GRANT INSERT ON hivenet._step_start, hivenet._request_start TO hivenet_app;
        -- Both count their decision as the caller (decisions.sql): a probe of view
        -- _decision_counters and nextval on a counter (USAGE: _grant_decision_counters); a
        -- namespace's first start makes its counters through SECURITY DEFINER
        -- _new_decision_counter. So does begin_step's replay.
        GRANT SELECT ON hivenet._decision_counters TO hivenet_app;
        GRANT EXECUTE ON FUNCTION
            hivenet._count_decision(text, text),
            hivenet._new_decision_counter(text, text)
        TO hivenet_app;
        PERFORM hivenet._grant_decision_counters();
        GRANT EXECUTE ON FUNCTION
            hivenet._plain_options(text, boolean),
            hivenet._start_step(text, jsonb, text, text, interval, boolean),
            hivenet._start_request(text, text, jsonb, text, interval, boolean),
            hivenet._serial_valid(text, text),
            hivenet._serial_time(text, text),
            hivenet._step_start_valid(text, text, interval),
            hivenet._request_start_valid(text, text, interval)
        TO hivenet_app;
        -- Everything else: _begin_step / _begin_request (SECURITY DEFINER, every check of
        -- begin_step / begin_request: calling them directly can do nothing the public
        -- functions cannot).
        GRANT EXECUTE ON FUNCTION
            hivenet._begin_step(text, jsonb, text, text, interval, boolean),
            hivenet._begin_request(text, text, jsonb, text, interval, boolean)
        TO hivenet_app;
        -- The rules those checks and _step_in_window inline (clock.sql, claims.sql): the
        -- callers' clock, the bound on intervals, the rule for names and keys.
        GRANT EXECUTE ON FUNCTION
            hivenet._caller_now(timestamptz, text),
            hivenet._longest_interval(),
            hivenet._interval_allowed(interval),
            hivenet._name_valid(text)
        TO hivenet_app;
    END IF;

    -- The reporting views and what they call as their reader, for both roles that read them.
    FOREACH v_role IN ARRAY ARRAY['hivenet_reporting', 'hivenet_admin'] LOOP
        CONTINUE WHEN to_regrole(v_role) IS NULL;
        EXECUTE format('GRANT USAGE ON SCHEMA hivenet TO %I', v_role);
        EXECUTE format('GRANT SELECT ON hivenet.interface_calls, '
                       'hivenet.interface_calls_per_day, hivenet.step_states, '
                       'hivenet.stuck_steps, hivenet.scope_usage, hivenet.request_states, '
                       'hivenet.stuck_requests, hivenet.request_decisions TO %I', v_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'hivenet.call_chain(text), '
                       'hivenet.now(), hivenet._fake_now(), '    -- stuck_steps, stuck_requests
                       'hivenet._step_lease(interval), '         -- likewise
                       'hivenet._reporting_local_now(), '        -- scope_usage
                       'hivenet._period_index(timestamp, text), '
                       'hivenet._period_start(bigint, text), '
                       'hivenet._scope_counter_value(text), '    -- and request_decisions
                       'hivenet._serial_field(text, text, text), '  -- interface_calls
                       'hivenet._serial_time(text, text), '
                       'hivenet.parse_serial(text, text) '          -- in both, for other formats
                       'TO %I', v_role);
    END LOOP;

    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.maintain(),
            hivenet.fence_failover(bigint, boolean),
            hivenet._timeline(),  -- `hivenet-db failover-fence` reports this timeline's fence
            hivenet.replication_warning(),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.prepare_scope(text, jsonb),
            hivenet.register_system(text, text),
            hivenet.register_module(text, text, text),
            hivenet.own_instances(text, boolean, boolean),
            hivenet.ownership(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_claim_expiry(text, interval),
            hivenet.set_request_retention(text, interval),
            hivenet.set_namespace_policy(text, interval, text, text, interval, integer, text)
        TO hivenet_admin;
    END IF;
END $$;

-- Nothing for PUBLIC (privileges.sql).
REVOKE EXECUTE ON FUNCTION hivenet._create_decision_counters(text, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._new_decision_counter(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._grant_decision_counters() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._count_decision(text, text) FROM PUBLIC;
SELECT hivenet._grant_roles();
