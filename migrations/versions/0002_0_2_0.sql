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

-- Failure policy per namespace: on_failure ('retry', 'final': outcome 'replayed_failure') and
-- expire_after (state expired), in set_namespace_policy and the state machine.
-- ADD VALUE in this transaction: 'expired' may not be used before it commits, so only
-- PL/pgSQL bodies (read when they run) name it, and nothing here runs them.
ALTER TYPE hivenet.step_state ADD VALUE 'expired';
ALTER TABLE hivenet.request_namespace
    ADD COLUMN on_failure text,
    ADD COLUMN expire_after interval;
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules, failure policy; NULL is the default';

-- hivenet_db/sql/requests.sql
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
        ELSIF v_last.state = 'processing'
              AND NOT hivenet._expiry_due(p_namespace, v_last.started_at) THEN
            RAISE EXCEPTION USING ERRCODE = 'HN030',
                MESSAGE = format('%s is processing (attempt %s started at %s, lease until %s): '
                                 'its outcome is unknown',
                                 hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                                 v_last.started_at,
                                 v_last.started_at + hivenet._step_lease(v_last.lease));
        -- Past its namespace's expire_after: expired here (expiry.sql), then a failure like
        -- any other (the branches below); unless another transaction finished or expired it
        -- meanwhile: then look again (attempt v_attempt exists, so the insert conflicts).
        ELSIF v_last.state = 'processing'
              AND hivenet._expire_attempts(p_namespace, ARRAY[p_key],
                                           ARRAY[v_last.attempt]) = 0 THEN
            CONTINUE;
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
        ELSIF (SELECT n.on_failure FROM hivenet.request_namespace n
               WHERE n.namespace = p_namespace) = 'final' THEN
            -- The latest failed or expired (before, or just now) and failures are final: its
            -- error is replayed, told apart from a success by the outcome.
            outcome := 'replayed_failure';
            attempt := v_last.attempt;
            response := v_last.error;
            RETURN;
        ELSE
            v_attempt := v_last.attempt + 1;  -- the latest failed or expired: proceed
        END IF;
        -- Next round: insert that attempt (waiting again if someone is starting it too).
    END LOOP;
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
--   breaking them with HN001. on_failure: 'retry' (the default: a failed attempt may run
--   again) or 'final' (begin_request replays a failed attempt's error: outcome
--   'replayed_failure'). expire_after: a `processing` attempt started longer ago becomes
--   `expired` when a begin_request of its key or maintain() finds it (expiry.sql), then
--   on_failure applies; '0' = never (the default).
--   HN001: namespace not valid (as begin_request), retention not positive, longer than 10
--   years or shorter than step_lease, fingerprint none of the three, key_min_length not in
--   1..255, key_pattern not a regular expression, on_failure neither 'retry' nor 'final',
--   expire_after negative or longer than 10 years.
CREATE OR REPLACE FUNCTION hivenet.set_namespace_policy(
    p_namespace text, p_retention interval DEFAULT NULL, p_fingerprint text DEFAULT NULL,
    p_on_failure text DEFAULT NULL, p_expire_after interval DEFAULT NULL,
    p_key_min_length integer DEFAULT NULL, p_key_pattern text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_conflict text;
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    IF p_on_failure NOT IN ('retry', 'final') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('on_failure %s of namespace %s is neither ''retry'' nor ''final''',
                             hivenet._shown(p_on_failure), hivenet._shown(p_namespace));
    END IF;
    IF p_expire_after <> interval '0' THEN
        PERFORM hivenet._check_interval(format('expire_after of namespace %s',
                                               hivenet._shown(p_namespace)), p_expire_after);
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
        (namespace, retention, fingerprint, key_min_length, key_pattern, on_failure,
         expire_after)
    VALUES (p_namespace, p_retention, nullif(p_fingerprint, 'bytes'),
            nullif(p_key_min_length, 1), nullif(p_key_pattern, ''),
            nullif(p_on_failure, 'retry'), nullif(p_expire_after, interval '0'))
    ON CONFLICT (namespace) DO UPDATE SET
        retention = coalesce(p_retention, n.retention),
        fingerprint = CASE WHEN p_fingerprint IS NULL THEN n.fingerprint
                           ELSE EXCLUDED.fingerprint END,
        key_min_length = CASE WHEN p_key_min_length IS NULL THEN n.key_min_length
                              ELSE EXCLUDED.key_min_length END,
        key_pattern = CASE WHEN p_key_pattern IS NULL THEN n.key_pattern
                           ELSE EXCLUDED.key_pattern END,
        on_failure = CASE WHEN p_on_failure IS NULL THEN n.on_failure
                          ELSE EXCLUDED.on_failure END,
        expire_after = CASE WHEN p_expire_after IS NULL THEN n.expire_after
                            ELSE EXCLUDED.expire_after END;
    DELETE FROM hivenet.request_namespace n
    WHERE n.namespace = p_namespace AND n.retention IS NULL AND n.fingerprint IS NULL
      AND n.key_min_length IS NULL AND n.key_pattern IS NULL AND n.on_failure IS NULL
      AND n.expire_after IS NULL;
END $$;

-- hivenet_db/sql/expiry.sql
-- Expiry of keyed requests left `processing` (set_namespace_policy's expire_after, requests.sql).
--
-- An attempt of a namespace with an expire_after that is still `processing` longer than that
-- after it started becomes `expired`, a failure by policy, when a begin_request of its key
-- (_begin_attempt) or maintain() finds it; the namespace's on_failure then applies as to any
-- failure ('retry': the next begin starts a new attempt; 'final': it is replayed as a failure,
-- with response NULL). Expiring finishes the attempt as an operator's resolution does: its
-- finished_at, resolved_by 'hivenet.expire_after' and a note saying why, so its late
-- finish_request gets HN033 (fencing). A finish that comes before anyone found the attempt
-- expired is accepted: no caller was told otherwise yet. Steps never expire: their namespace
-- has no policy (set_namespace_policy refuses the library's own).

-- How far maintain()'s expiry has come in each namespace with an expire_after: every attempt
-- started before expired_through was left processing by no earlier run (each run reads the
-- index from there on, never the namespace's older attempts again). Written by maintain()
-- only; a row of a namespace without an expire_after is stale and removed by the next run.
CREATE TABLE hivenet.request_expiry (
    namespace       text        PRIMARY KEY,
    expired_through timestamptz NOT NULL
);
COMMENT ON TABLE hivenet.request_expiry IS
    'how far maintain() has expired the processing attempts of each namespace with an '
    'expire_after (expiry.sql)';

-- Whether an attempt of namespace p_namespace started at p_started_at is past the namespace's
-- expire_after; false when it has none (the default). One probe of request_namespace, made
-- only when a begin finds the latest attempt `processing` (HN030's path: a concurrent
-- duplicate). No SET clause, as _begin_attempt, its only caller, whose callers set the search
-- path: a SET would cost more than the probe.
CREATE FUNCTION hivenet._expiry_due(p_namespace text, p_started_at timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT p_started_at + n.expire_after <= hivenet.now()
                     FROM hivenet.request_namespace n WHERE n.namespace = p_namespace), false);
END $$;

-- Expire the attempts (p_keys[i], p_attempts[i]) of namespace p_namespace that are still
-- `processing` past its expire_after; returns how many it expired. Blocks while another
-- transaction finishes, resolves or expires one of them, then leaves it if that one did.
-- 'expired' is named in PL/pgSQL, read when it runs: revision 0002 adds the value in the
-- transaction that creates this function, where it could not be used yet.
CREATE FUNCTION hivenet._expire_attempts(p_namespace text, p_keys text[],
                                         p_attempts integer[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_expired integer;
BEGIN
    UPDATE hivenet.request_attempt a
    SET state = 'expired', finished_at = hivenet.now(), resolved_by = 'hivenet.expire_after',
        note = format('expired by policy: processing for longer than expire_after %s of the '
                      'namespace', n.expire_after)
    FROM hivenet.request_namespace n, unnest(p_keys, p_attempts) AS c (key, attempt)
    WHERE n.namespace = p_namespace AND a.namespace = p_namespace AND a.key = c.key
      AND a.attempt = c.attempt AND a.state = 'processing'
      AND a.started_at + n.expire_after <= hivenet.now();
    GET DIAGNOSTICS v_expired = ROW_COUNT;
    RETURN v_expired;
END $$;

-- Expiry by maintain(), so that the views and metrics show attempts nobody begins again. In
-- each namespace with an expire_after, the attempts started since the last run's mark
-- (request_expiry) and before the namespace's cutoff, read from the index
-- (namespace || '', started_at) in started order: what became due since the last run, not
-- the namespace's retained history again. At most 1,000 processing ones are expired a run
-- (bounded work: the mark stops at the last, and the next run goes on). SKIP LOCKED leaves an
-- attempt a begin or a finish is changing right now to that one. The begin of a key is what
-- enforces expiry; this is housekeeping, so an attempt committed `processing` only after
-- the mark passed its start is left to its key's next begin.
CREATE FUNCTION hivenet._maintain_request_expiry() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_namespace text;
    v_from timestamptz;
    v_cutoff timestamptz;
    v_keys text[];
    v_attempts integer[];
    v_last timestamptz;
BEGIN
    DELETE FROM hivenet.request_expiry e
    WHERE NOT EXISTS (SELECT FROM hivenet.request_namespace n
                      WHERE n.namespace = e.namespace AND n.expire_after IS NOT NULL);
    FOR v_namespace, v_from, v_cutoff IN
        SELECT n.namespace, coalesce(e.expired_through, '-infinity'),
               hivenet.now() - n.expire_after
        FROM hivenet.request_namespace n
        LEFT JOIN hivenet.request_expiry e ON e.namespace = n.namespace
        WHERE n.expire_after IS NOT NULL
    LOOP
        SELECT array_agg(c.key), array_agg(c.attempt), max(c.started_at)
        INTO v_keys, v_attempts, v_last
        FROM (SELECT a.key, a.attempt, a.started_at FROM hivenet.request_attempt a
              WHERE a.namespace || '' = v_namespace  -- the index's expression
                AND a.started_at >= v_from AND a.started_at <= v_cutoff
                AND a.state = 'processing'
              ORDER BY a.namespace || '', a.started_at
              LIMIT 1000
              FOR UPDATE OF a SKIP LOCKED) AS c;
        IF v_keys IS NOT NULL THEN
            PERFORM hivenet._expire_attempts(v_namespace, v_keys, v_attempts);
        END IF;
        INSERT INTO hivenet.request_expiry AS e (namespace, expired_through)
        VALUES (v_namespace, CASE WHEN cardinality(v_keys) = 1000 THEN v_last ELSE v_cutoff END)
        ON CONFLICT (namespace) DO UPDATE SET expired_through = EXCLUDED.expired_through;
    END LOOP;
END $$;

-- Nothing for PUBLIC (privileges.sql).
REVOKE EXECUTE ON FUNCTION hivenet._expiry_due(text, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._expire_attempts(text, text[], integer[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_request_expiry() FROM PUBLIC;
SELECT hivenet._grant_roles();  -- hivenet_admin reads the new table
