-- Release 0.2.0 from 0.1.0, a section per feature, in this order: the policy of a namespace
-- (set_namespace_policy: fingerprints 'bytes', 'json' by RFC 8785 or JSON paths, and key
-- rules beside the retention); who began each attempt and a namespace's audit chain
-- (audit.sql); batches (batches.sql); the failure policy and expiry (expiry.sql); waiting for
-- the first outcome (watch_request); decision counts (decisions.sql); nowait and wait in one
-- function (0.1.0's _begin_attempt_nowait dropped). A function changed by several features
-- appears once, with its final body: at its first place, or where its final signature is made
-- (set_namespace_policy with the audit chain, begin_request and _begin_request with wait); the
-- grants of everything come last.

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
CREATE OR REPLACE FUNCTION hivenet._utf16_units(p_text text) RETURNS integer[]
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
CREATE OR REPLACE FUNCTION hivenet._canonical_number(p_number numeric) RETURNS text
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
CREATE OR REPLACE FUNCTION hivenet._canonical_json(p_value jsonb) RETURNS text
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
CREATE OR REPLACE FUNCTION hivenet._check_fingerprint(p_fingerprint text) RETURNS void
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
CREATE OR REPLACE FUNCTION hivenet._policy_fingerprint(p_fingerprint text, p_request jsonb) RETURNS bytea
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
    -- The namespace's policy, read once (no row: every value NULL, the defaults).
    v_policy hivenet.request_namespace := (SELECT n FROM hivenet.request_namespace n
                                           WHERE n.namespace = p_namespace);
    v_fingerprint bytea;
    v_attempt integer := 1;
    v_last hivenet.request_attempt;
BEGIN
    -- The fingerprint by the policy (fingerprints.sql); NULL, the default, inlined.
    IF v_policy.fingerprint IS NULL THEN
        v_fingerprint := hivenet._fingerprint(p_request);
    ELSE
        BEGIN
            v_fingerprint := hivenet._policy_fingerprint(v_policy.fingerprint, p_request);
        EXCEPTION WHEN SQLSTATE 'HN001' THEN  -- a number no double holds: the key is refused
            PERFORM hivenet._count_decision(p_namespace, 'rejected');
            RAISE;
        END;
    END IF;
    -- Optimistic: most keys are new, so insert the attempt first; a conflict (after waiting
    -- for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        INSERT INTO hivenet.request_attempt
            (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at,
             called_by, application_name, client_addr)
        VALUES (p_namespace, p_key, v_attempt, 'processing', v_fingerprint, p_unified_serial,
                p_lease, hivenet.now(), hivenet._called_by(),
                nullif(current_setting('application_name'), ''), inet_client_addr())
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            IF v_policy.audit_chain THEN  -- a new attempt is the chain's next link (audit.sql)
                PERFORM hivenet._chain_append(p_namespace, p_key, v_attempt, 'begin');
            END IF;
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
        ELSIF v_last.state = 'processing'
              AND NOT hivenet._expiry_due(p_namespace, v_last.started_at) THEN
            PERFORM hivenet._count_decision(p_namespace, 'in_progress');
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
        ELSIF v_policy.on_failure = 'final' THEN
            -- The latest failed or expired (before, or just now) and failures are final: its
            -- error is replayed, told apart from a success by the outcome (a replay, counted
            -- as one: decisions.sql).
            PERFORM hivenet._count_decision(p_namespace, 'replayed');
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

-- Audit with the caller: every attempt records who began it (called_by, application_name,
-- client_addr; view request_attempts), and a namespace may keep a hash chain of its attempts
-- (set_namespace_policy's audit_chain, audit.sql: verify_audit_chain).

ALTER TABLE hivenet.request_attempt
    ADD COLUMN called_by text,
    ADD COLUMN application_name text,
    ADD COLUMN client_addr inet,
    ADD COLUMN chain_position bigint,
    ADD COLUMN chain_hash bytea,
    ADD COLUMN finish_position bigint,
    ADD COLUMN finish_hash bytea;
ALTER TABLE hivenet.request_namespace ADD COLUMN audit_chain boolean;

-- hivenet_db/sql/requests.sql

-- Who begins an attempt (column called_by): the role the caller acts as. current_user where
-- the caller's own code runs; inside SECURITY DEFINER functions (_begin_attempt's callers)
-- current_user is the owner, so the role is read from the session: the role of SET ROLE (SET
-- LOCAL ROLE: a pooler's or PostgREST's per-request role), else the login. The one
-- definition, for every path that inserts an attempt. Inlined (the rules of views
-- _request_start and _step_start run it as the inserter: privileges.sql).
CREATE OR REPLACE FUNCTION hivenet._called_by() RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text);
END;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at, called_by,
     application_name, client_addr)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now(), hivenet._called_by(), nullif(current_setting('application_name'), ''),
       inet_client_addr()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
  AND NOT EXISTS (SELECT FROM hivenet.request_namespace p
                  WHERE p.namespace = n.namespace
                    AND (p.fingerprint IS NOT NULL OR p.key_min_length IS NOT NULL
                         OR p.key_pattern IS NOT NULL OR p.audit_chain IS NOT NULL))
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

-- hivenet.finish_request(namespace, key, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_request returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_request proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the key's current
--   one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL, or namespace or key is not valid (as begin_request). Blocks
--   only while another transaction is finishing or resolving the same attempt; then raises
--   HN033 if that one committed.
CREATE OR REPLACE FUNCTION hivenet.finish_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_chained boolean;
    v_awaited boolean;
BEGIN
    UPDATE hivenet.request_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL
    RETURNING a.chain_hash IS NOT NULL, a.awaited INTO v_chained, v_awaited;
    IF NOT FOUND THEN
        PERFORM hivenet._raise_unfinished(p_namespace, p_key, p_attempt, p_succeeded);
    END IF;
    -- An attempt whose begin is a link of an audit chain: its end is the next (audit.sql).
    IF v_chained THEN
        PERFORM hivenet._chain_append(p_namespace, p_key, p_attempt, 'finish');
    END IF;
    IF v_awaited THEN
        PERFORM hivenet._wake_waiters(p_namespace, p_key);
    END IF;
END $$;

-- The operator's resolution of a processing attempt (resolve_request, resolve_step).
CREATE OR REPLACE FUNCTION hivenet._resolve_attempt(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(btrim(p_note), '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s attempt %s: resolving needs a note',
                             hivenet._attempt_subject(p_namespace, p_key), p_attempt);
    END IF;
    -- The note first, so that the end of an attempt in an audit chain covers it (audit.sql);
    -- then finish's fencing and state change (HN033 undoes the note with everything else).
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing';
    PERFORM hivenet.finish_request(p_namespace, p_key, p_attempt, p_succeeded, p_response);
END $$;

-- hivenet.set_namespace_policy(namespace, retention default null, fingerprint default null,
--     on_failure default null, expire_after default null, key_min_length default null,
--     key_pattern default null, audit_chain default null) → void
--   The policy of a namespace of keyed requests; a NULL argument leaves that value as it is.
--   retention: finished requests are kept that long after their last attempt ended (then
--   maintain() removes them, and the same key starts afresh); set_request_retention(namespace,
--   NULL) goes back to the setting request_retention. fingerprint: what makes two requests
--   under one key the same (fingerprints.sql): 'bytes' (the default), 'json' (RFC 8785) or a
--   JSON array of JSON paths; keys begun before a change keep their old fingerprint, so their
--   requests mismatch (HN032) until retention removes them. key_min_length (1 = no rule) and
--   key_pattern (a POSIX regular expression; '' = no rule): begin_request refuses a key
--   breaking them with HN001. audit_chain: true chains every attempt begun from then on
--   (begin and end) into the namespace's hash chain, which verify_audit_chain checks; false
--   chains no more, and the chain so far stays verifiable (audit.sql). on_failure: 'retry'
--   (the default: a failed attempt may run again) or 'final' (begin_request replays a failed
--   attempt's error: outcome 'replayed_failure'). expire_after: a `processing` attempt started
--   longer ago becomes `expired` when a begin_request of its key or maintain() finds it
--   (expiry.sql), then on_failure applies; '0' = never (the default).
--   HN001: namespace not valid (as begin_request), retention not positive, longer than 10
--   years or shorter than step_lease, fingerprint none of the three, key_min_length not in
--   1..255, key_pattern not a regular expression, on_failure neither 'retry' nor 'final',
--   expire_after negative or longer than 10 years.
CREATE FUNCTION hivenet.set_namespace_policy(
    p_namespace text, p_retention interval DEFAULT NULL, p_fingerprint text DEFAULT NULL,
    p_on_failure text DEFAULT NULL, p_expire_after interval DEFAULT NULL,
    p_key_min_length integer DEFAULT NULL, p_key_pattern text DEFAULT NULL,
    p_audit_chain boolean DEFAULT NULL)
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
        (namespace, retention, fingerprint, key_min_length, key_pattern, audit_chain,
         on_failure, expire_after)
    VALUES (p_namespace, p_retention, nullif(p_fingerprint, 'bytes'),
            nullif(p_key_min_length, 1), nullif(p_key_pattern, ''), nullif(p_audit_chain, false),
            nullif(p_on_failure, 'retry'), nullif(p_expire_after, interval '0'))
    ON CONFLICT (namespace) DO UPDATE SET
        retention = coalesce(p_retention, n.retention),
        fingerprint = CASE WHEN p_fingerprint IS NULL THEN n.fingerprint
                           ELSE EXCLUDED.fingerprint END,
        key_min_length = CASE WHEN p_key_min_length IS NULL THEN n.key_min_length
                              ELSE EXCLUDED.key_min_length END,
        key_pattern = CASE WHEN p_key_pattern IS NULL THEN n.key_pattern
                           ELSE EXCLUDED.key_pattern END,
        audit_chain = CASE WHEN p_audit_chain IS NULL THEN n.audit_chain
                           ELSE EXCLUDED.audit_chain END,
        on_failure = CASE WHEN p_on_failure IS NULL THEN n.on_failure
                          ELSE EXCLUDED.on_failure END,
        expire_after = CASE WHEN p_expire_after IS NULL THEN n.expire_after
                            ELSE EXCLUDED.expire_after END;
    DELETE FROM hivenet.request_namespace n
    WHERE n.namespace = p_namespace AND n.retention IS NULL AND n.fingerprint IS NULL
      AND n.key_min_length IS NULL AND n.key_pattern IS NULL AND n.audit_chain IS NULL
      AND n.on_failure IS NULL AND n.expire_after IS NULL;
    IF p_audit_chain THEN
        PERFORM hivenet._start_chain(p_namespace);
    END IF;
END $$;

-- Remove every attempt of the keys of namespace p_namespace whose attempts all ended before
-- p_cutoff; for the steps' namespace, only of the keys (system serials) dated before
-- p_dated_before (_maintain_steps: what begin_step refuses). A processing key is never
-- removed. Candidates come from the index (namespace || '', started_at): an attempt that ended before the cutoff also started before it. The keys are
-- collected first and deleted by primary key, so no plan can turn the delete into a scan (a
-- join would be hashed against every row of the namespace).
CREATE OR REPLACE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamptz,
                                        p_dated_before timestamp DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_keys text[];
BEGIN
    SELECT array_agg(DISTINCT o.key) INTO v_keys FROM hivenet.request_attempt o
    WHERE o.namespace || '' = p_namespace AND o.started_at < p_cutoff  -- the index's expression
      AND (p_dated_before IS NULL OR hivenet._serial_time('system', o.key) < p_dated_before)
      AND NOT EXISTS (SELECT 1 FROM hivenet.request_attempt y
                      WHERE y.namespace = p_namespace AND y.key = o.key
                        AND (y.finished_at IS NULL OR y.finished_at >= p_cutoff));
    IF v_keys IS NULL THEN
        RETURN;
    END IF;
    -- A namespace with an audit chain keeps it verifiable (audit.sql).
    IF EXISTS (SELECT FROM hivenet.request_chain c WHERE c.namespace = p_namespace) THEN
        PERFORM hivenet._purge_chained(p_namespace, v_keys);
        RETURN;
    END IF;
    DELETE FROM hivenet.request_attempt d
    WHERE d.namespace = p_namespace AND d.key = ANY (v_keys);
END $$;

-- hivenet_db/sql/steps.sql
CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at, called_by,
     application_name, client_addr)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now(), hivenet._called_by(),
       nullif(current_setting('application_name'), ''), inet_client_addr()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

-- hivenet_db/sql/audit.sql
-- The audit chain of a namespace of keyed requests (set_namespace_policy(..., audit_chain =>
-- true)): tamper evidence for its attempts, checked by verify_audit_chain and `hivenet-db
-- audit verify`. Who began each attempt is recorded in every namespace (requests.sql,
-- _called_by; view request_attempts).
--
-- Every event of an attempt is a link of one chain per namespace, in the order the events
-- happened: its begin (chain_position, chain_hash on the attempt's row) and its end
-- (finish_position, finish_hash: finish_request, resolve_request). A link's hash is sha256 of
-- the previous link's hash followed by the event's content (_chain_link). So a changed row
-- breaks its link, a deleted row leaves a gap in the positions, and hashes written anew after
-- a change give another head: verify_audit_chain returns the head, to keep outside the
-- database (only that finds a chain rewritten from the changed row on by someone who can
-- write the table).
--
-- Links are appended under the lock of the namespace's row of request_chain, held until
-- commit: the begins and ends of attempts of one chained namespace take turns, and "the
-- previous link" is always committed or the transaction's own. Only chained namespaces pay
-- for it: other namespaces never read request_chain on begin or finish. The lock is taken
-- once the attempt's row is written (a begin may first wait for a concurrent start or finish
-- of its key, which waits for the lock in its turn); so a transaction that already appended
-- a link and then begins a key another transaction is starting or finishing deadlocks with
-- it, and PostgreSQL ends one of them (40P01): retry it. With nowait, a begin raises HN030
-- while another transaction holds the chain.
--
-- Retention keeps the chain verifiable: maintain() removes only a prefix of the chain (the
-- oldest links, up to the last one after which no attempt is half removed) and keeps the
-- hash of the last removed link as the anchor the rest starts from (_purge_chained). Keys
-- past their retention that are linked after a key still kept stay until that one goes.

-- The chain of each namespace that ever had audit_chain on: where it starts after retention
-- (anchor) and where it ends (head). Only the functions write it.
CREATE TABLE hivenet.request_chain (
    namespace       text   PRIMARY KEY,
    position        bigint NOT NULL,  -- of the last link (0: none yet)
    head            bytea  NOT NULL,  -- its hash
    anchor_position bigint NOT NULL,  -- of the last link retention removed (0: none)
    anchor          bytea  NOT NULL   -- its hash (the empty string before the first link)
);
COMMENT ON TABLE hivenet.request_chain IS
    'the audit chain of a namespace of keyed requests: its head and the anchor retention left';

-- The chain of namespace p_namespace, made when audit_chain is first turned on
-- (set_namespace_policy); a chain turned on again goes on from its head.
CREATE OR REPLACE FUNCTION hivenet._start_chain(p_namespace text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO hivenet.request_chain (namespace, position, head, anchor_position, anchor)
    VALUES (p_namespace, 0, '', 0, '')
    ON CONFLICT (namespace) DO NOTHING;
END $$;

-- The hash of the link of event p_event ('begin' or 'finish') of attempt p_attempt (its row),
-- after the link whose hash is p_previous. What it covers: of a begin, the namespace, key,
-- attempt, its position, the request's fingerprint, unified serial, lease, start and who
-- began it (role, application, address); of an end, the namespace, key, attempt, its
-- position, the state, end, a sha256 of the response and of the error, and the operator and
-- note of a resolution. Times and intervals as epoch seconds, so no session setting (time
-- zone, IntervalStyle) changes the text hashed.
CREATE OR REPLACE FUNCTION hivenet._chain_link(p_previous bytea, p_attempt hivenet.request_attempt,
                                    p_event text) RETURNS bytea
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT sha256(p_previous || convert_to(CASE p_event
        WHEN 'begin' THEN jsonb_build_array(
            'begin', p_attempt.namespace, p_attempt.key, p_attempt.attempt,
            p_attempt.chain_position, encode(p_attempt.fingerprint, 'hex'),
            p_attempt.unified_serial, extract(epoch FROM p_attempt.lease),
            extract(epoch FROM p_attempt.started_at), p_attempt.called_by,
            p_attempt.application_name, host(p_attempt.client_addr))
        WHEN 'finish' THEN jsonb_build_array(
            'finish', p_attempt.namespace, p_attempt.key, p_attempt.attempt,
            p_attempt.finish_position, p_attempt.state::text,
            extract(epoch FROM p_attempt.finished_at),
            encode(sha256(convert_to(p_attempt.response::text, 'UTF8')), 'hex'),
            encode(sha256(convert_to(p_attempt.error::text, 'UTF8')), 'hex'),
            p_attempt.resolved_by, p_attempt.note) END::text, 'UTF8'));
END;

-- Append the link of event p_event ('begin' or 'finish') of attempt p_attempt of key p_key to
-- the chain of namespace p_namespace, after its head: the attempt's row gets the position and
-- hash, the chain the new head. Locks the chain until commit.
CREATE OR REPLACE FUNCTION hivenet._chain_append(p_namespace text, p_key text, p_attempt integer,
                                      p_event text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_chain hivenet.request_chain;
    v_row hivenet.request_attempt;
    v_hash bytea;
BEGIN
    SELECT * INTO v_chain FROM hivenet.request_chain c
    WHERE c.namespace = p_namespace FOR UPDATE;
    SELECT * INTO v_row FROM hivenet.request_attempt a
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
    IF p_event = 'begin' THEN
        v_row.chain_position := v_chain.position + 1;
        v_hash := hivenet._chain_link(v_chain.head, v_row, p_event);
        UPDATE hivenet.request_attempt a
        SET chain_position = v_row.chain_position, chain_hash = v_hash
        WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
    ELSE
        v_row.finish_position := v_chain.position + 1;
        v_hash := hivenet._chain_link(v_chain.head, v_row, p_event);
        UPDATE hivenet.request_attempt a
        SET finish_position = v_row.finish_position, finish_hash = v_hash
        WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
    END IF;
    UPDATE hivenet.request_chain c SET position = c.position + 1, head = v_hash
    WHERE c.namespace = p_namespace;
END $$;

-- Retention of a namespace with an audit chain (_purge_requests): of the attempts of keys
-- p_keys (all ended before the namespace's cutoff), remove those not in the chain and those
-- whose links lie in the longest prefix of the chain that holds only whole attempts of those
-- keys; the hash of its last link becomes the anchor. The rest waits for a later maintain().
-- Reads the namespace's links.
CREATE OR REPLACE FUNCTION hivenet._purge_chained(p_namespace text, p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_kept bigint;
    v_cut bigint;
BEGIN
    -- No link appended meanwhile.
    PERFORM FROM hivenet.request_chain c WHERE c.namespace = p_namespace FOR UPDATE;
    -- The first link of an attempt that stays.
    SELECT min(a.chain_position) INTO v_kept FROM hivenet.request_attempt a
    WHERE a.namespace = p_namespace AND a.chain_position IS NOT NULL
      AND NOT a.key = ANY (p_keys);
    -- Before it, the last link after which every begun attempt has ended: counting +1 at a
    -- begin and -1 at an end, in the chain's order, where the count is back to 0.
    SELECT max(l.position) INTO v_cut
    FROM (SELECT l.position, sum(l.step) OVER (ORDER BY l.position) AS open
          FROM (SELECT a.chain_position, 1 FROM hivenet.request_attempt a
                WHERE a.namespace = p_namespace AND a.key = ANY (p_keys)
                  AND a.chain_position IS NOT NULL
                UNION ALL
                SELECT a.finish_position, -1 FROM hivenet.request_attempt a
                WHERE a.namespace = p_namespace AND a.key = ANY (p_keys)
                  AND a.finish_position IS NOT NULL) AS l (position, step)
          WHERE l.position < coalesce(v_kept, 9223372036854775807)) AS l
    WHERE l.open = 0;
    IF v_cut IS NOT NULL THEN
        UPDATE hivenet.request_chain c SET anchor_position = v_cut,
            anchor = (SELECT a.finish_hash FROM hivenet.request_attempt a
                      WHERE a.namespace = p_namespace AND a.finish_position = v_cut)
        WHERE c.namespace = p_namespace;
    END IF;
    DELETE FROM hivenet.request_attempt d
    WHERE d.namespace = p_namespace AND d.key = ANY (p_keys)
      AND (d.chain_position IS NULL OR d.finish_position <= v_cut);
END $$;

-- hivenet.verify_audit_chain(namespace) → table(attempts bigint, links bigint, head bytea,
--     position bigint, key text, attempt integer, problem text), exactly one row.
--   Checks the audit chain of a namespace (set_namespace_policy(..., audit_chain => true))
--   from its anchor to its head: every link's hash against the content of its attempt's row
--   and the link before it, and that no position is missing. problem NULL: the chain is
--   intact, attempts (begun in the chain since its anchor) and links counted, head its last
--   hash (keep it outside the database: a chain rewritten from a changed row on gives
--   another). Otherwise the first bad link: its position, key, attempt, and what is wrong
--   (a row changed, or the links of a deleted row missing). Attempts begun while the chain
--   was off are not in it.
--   HN001: the namespace never had an audit chain. Reads the namespace's attempts; blocks
--   nothing (a link appended meanwhile is after the head it read).
CREATE OR REPLACE FUNCTION hivenet.verify_audit_chain(p_namespace text)
RETURNS TABLE (attempts bigint, links bigint, head bytea, "position" bigint, key text,
               attempt integer, problem text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_chain hivenet.request_chain;
    v_link record;
    v_previous bytea;
    v_expected bigint;
BEGIN
    SELECT * INTO v_chain FROM hivenet.request_chain c WHERE c.namespace = p_namespace;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s has no audit chain (set_namespace_policy(namespace, '
                             'p_audit_chain => true) starts one)', hivenet._shown(p_namespace));
    END IF;
    attempts := 0;
    head := v_chain.head;
    v_previous := v_chain.anchor;
    v_expected := v_chain.anchor_position + 1;
    FOR v_link IN
        SELECT l.position, l.event, l.hash, l.attempt_row
        FROM (SELECT a.chain_position, 'begin', a.chain_hash, a FROM hivenet.request_attempt a
              WHERE a.namespace = p_namespace AND a.chain_position IS NOT NULL
              UNION ALL
              SELECT a.finish_position, 'finish', a.finish_hash, a
              FROM hivenet.request_attempt a
              WHERE a.namespace = p_namespace AND a.finish_position IS NOT NULL)
             AS l (position, event, hash, attempt_row)
        WHERE l.position <= v_chain.position
        ORDER BY l.position
    LOOP
        "position" := v_link.position;
        key := (v_link.attempt_row).key;
        attempt := (v_link.attempt_row).attempt;
        IF v_link.position > v_expected THEN
            "position" := v_expected;
            problem := format('links %s to %s are missing (a deleted attempt, or a changed '
                              'position) before the %s of key %s attempt %s', v_expected,
                              v_link.position - 1, v_link.event, hivenet._shown(key), attempt);
        ELSIF v_link.position < v_expected THEN
            problem := format('link %s appears twice (a changed position): %s of key %s '
                              'attempt %s', v_link.position, v_link.event, hivenet._shown(key),
                              attempt);
        ELSIF hivenet._chain_link(v_previous, v_link.attempt_row, v_link.event)
              IS DISTINCT FROM v_link.hash THEN
            problem := format('link %s, the %s of key %s attempt %s, does not match its row '
                              'and the link before it: that row was changed', v_link.position,
                              v_link.event, hivenet._shown(key), attempt);
        END IF;
        IF problem IS NOT NULL THEN
            links := v_expected - 1 - v_chain.anchor_position;
            RETURN NEXT;
            RETURN;
        END IF;
        attempts := attempts + (v_link.event = 'begin')::integer;
        v_previous := v_link.hash;
        v_expected := v_expected + 1;
    END LOOP;
    links := v_expected - 1 - v_chain.anchor_position;
    "position" := NULL;
    key := NULL;
    attempt := NULL;
    IF v_expected <= v_chain.position THEN
        "position" := v_expected;
        problem := format('links %s to %s, the latest, are missing (deleted attempts)',
                          v_expected, v_chain.position);
    ELSIF v_previous IS DISTINCT FROM v_chain.head THEN
        "position" := v_chain.position;
        problem := format('the head of the chain (position %s) is not the hash of its last '
                          'link', v_chain.position);
    END IF;
    RETURN NEXT;
END $$;

-- hivenet_db/sql/reporting.sql
-- hivenet.request_attempts: one row per attempt of every key, keyed requests and steps
-- (namespace 'hivenet.steps', key the system serial), for audit: its state, when it began and
-- ended, who began it (called_by: the role; the client's application_name and address,
-- requests.sql) and who resolved it with what note. No payload: no request fingerprint,
-- response or error. A scan of the attempts: filter by namespace and key.
CREATE VIEW hivenet.request_attempts AS
SELECT a.namespace, a.key, a.attempt, a.state::text AS state, a.started_at, a.finished_at,
       a.called_by, a.application_name, a.client_addr, a.resolved_by, a.note
FROM hivenet.request_attempt a;
COMMENT ON VIEW hivenet.request_attempts IS
    'every attempt of keyed requests and steps with who began it (role, application, client '
    'address), without payloads (audit)';

-- Batches of keyed requests (begin_requests, finish_requests): hivenet_db/sql/batches.sql,
-- their grants to hivenet_app in _grant_roles (privileges.sql).

-- hivenet_db/sql/batches.sql
-- Batches of keyed requests: begin_requests begins many keys of one namespace in one round
-- trip, with one outcome per key (a consumer's batch of messages, a partial batch that reports
-- per item). Nothing of the state machine is written twice: the new keys are started by one
-- INSERT of their first attempts (what begin_request writes for a new key), and every other key
-- goes through _begin_request, begin_request's own full path (its checks, the namespace's
-- policy and _begin_attempt), so each key is decided exactly as begin_request decides it.
-- finish_requests finishes the started keys in one call, each by finish_request.

-- The most keys one call takes: a batch is one statement and one transaction's locks.
CREATE OR REPLACE FUNCTION hivenet._batch_limit() RETURNS integer
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT 1000;
END;

-- HN001 unless the batch's shape is valid: namespace (as begin_request), the keys and the
-- values given with them (p_what names them: 'requests', 'responses') given, one-dimensional,
-- as long as each other, at most _batch_limit() keys, no key NULL or given twice, lease (as
-- begin_request). A key begin_request would refuse is no error of begin_requests: that
-- key's outcome is 'rejected'.
CREATE OR REPLACE FUNCTION hivenet._check_batch(p_namespace text, p_keys text[], p_what text,
    p_values jsonb[], p_lease interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_duplicate text;
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    IF p_keys IS NULL OR p_values IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s of the batch in namespace %s is NULL',
                             CASE WHEN p_keys IS NULL THEN 'keys' ELSE p_what END,
                             hivenet._shown(p_namespace));
    END IF;
    IF array_ndims(p_keys) > 1 OR array_ndims(p_values) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('keys (%s dimensions) and %s (%s dimensions) of the batch in '
                             'namespace %s are not both one-dimensional arrays',
                             array_ndims(p_keys), p_what, array_ndims(p_values),
                             hivenet._shown(p_namespace));
    END IF;
    IF cardinality(p_keys) <> cardinality(p_values) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('the batch in namespace %s has %s keys but %s %s',
                             hivenet._shown(p_namespace), cardinality(p_keys),
                             cardinality(p_values), p_what);
    END IF;
    IF cardinality(p_keys) > hivenet._batch_limit() THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('the batch in namespace %s has %s keys, more than %s',
                             hivenet._shown(p_namespace), cardinality(p_keys),
                             hivenet._batch_limit());
    END IF;
    IF array_position(p_keys, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('key %s of the batch in namespace %s is NULL',
                             array_position(p_keys, NULL), hivenet._shown(p_namespace));
    END IF;
    SELECT k.key INTO v_duplicate FROM unnest(p_keys) AS k (key)
    GROUP BY k.key HAVING count(*) > 1 ORDER BY min(k.key) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('key %s is given more than once in the batch in namespace %s',
                             hivenet._shown(v_duplicate), hivenet._shown(p_namespace));
    END IF;
    PERFORM hivenet._check_interval('lease', p_lease);
END $$;

-- The outcome of key p_key of a batch that the INSERT of new keys did not start: what
-- begin_request (on_success 'replay', no nowait) decides, its refusals caught into outcomes in
-- this key's own subtransaction. response: the stored response when replayed, else for a
-- refusal the error begin_request would raise, {"code": ..., "message": ...}. No SET clause,
-- as _begin_attempt: only begin_requests calls it.
CREATE OR REPLACE FUNCTION hivenet._begin_batch_key(p_namespace text, p_key text, p_request jsonb,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_request(p_namespace, p_key, p_request, 'replay', p_lease, false, NULL) b;
EXCEPTION WHEN SQLSTATE 'HN030' OR SQLSTATE 'HN032' OR SQLSTATE 'HN001' THEN
    outcome := CASE SQLSTATE WHEN 'HN030' THEN 'in_progress' WHEN 'HN032' THEN 'mismatch'
                             ELSE 'rejected' END;
    response := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
END $$;

-- hivenet.begin_requests(namespace, keys text[], requests jsonb[], lease default null)
--   → table(key text, outcome text, attempt int, response jsonb), one row per key, in the
--   order of keys. Begins every key of a batch in namespace `namespace` in the caller's
--   transaction, in one round trip: for keys[i] with requests[i], what begin_request(namespace,
--   keys[i], requests[i], lease => lease) would decide, as an outcome instead of an error:
--   * 'started': a new attempt started (attempt n), response NULL. Finish each started key
--     with finish_request(namespace, key, attempt, ...), as after begin_request.
--   * 'replayed': the key succeeded; attempt and response are the success's.
--   * 'in_progress' (HN030), 'mismatch' (HN032), 'rejected' (HN001: a key begin_request
--     refuses, by the rule for keys or the namespace's key_min_length / key_pattern): attempt
--     NULL, response {"code": "HN0xx", "message": "<the error begin_request raises>"}.
--   The namespace's policy (fingerprint, key rules) applies as to begin_request. A batch is
--   partial by design: the other keys are begun whatever one key's outcome.
--   HN001 for the whole call: namespace not valid (as begin_request), keys or requests NULL,
--   not one-dimensional or not as long as each other, more than 1,000 keys, a key NULL or
--   given twice, lease not positive or longer than 10 years. (A request the namespace's
--   fingerprint cannot read, a number no double holds under 'json', is that key's 'rejected'.)
--   Blocks while another transaction has started one of the keys and not yet committed or
--   rolled back, as begin_request; the keys are taken in their sort order, so two batches
--   never deadlock on each other (a transaction that began some of the keys one by one, in
--   another order, may: PostgreSQL then rolls one back with 40P01).
CREATE OR REPLACE FUNCTION hivenet.begin_requests(
    p_namespace text, p_keys text[], p_requests jsonb[], p_lease interval DEFAULT NULL)
RETURNS TABLE (key text, outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_policy hivenet.request_namespace;
    v_started text[];
    v_outcomes text[];
    v_attempts integer[];
    v_responses jsonb[];
    v_key text;
    v_request jsonb;
    v_position bigint;
    v_decided record;
BEGIN
    PERFORM hivenet._check_batch(p_namespace, p_keys, 'requests', p_requests, p_lease);
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    -- The common case, set-based: the first attempt of every new key the namespace accepts
    -- (the row begin_request writes for it); a key with an attempt conflicts, after waiting
    -- for an uncommitted one as begin_request does. A key refused here is decided below.
    WITH started AS (
        INSERT INTO hivenet.request_attempt AS a
            (namespace, key, attempt, state, fingerprint, lease, started_at, called_by,
             application_name, client_addr)
        SELECT p_namespace, k.key, 1, 'processing', hivenet._fingerprint(k.request),
               p_lease, hivenet.now(), hivenet._called_by(),
               nullif(current_setting('application_name'), ''), inet_client_addr()
        FROM unnest(p_keys, p_requests) AS k (key, request)
        -- One by one, below, in a namespace with an audit chain (it links each key's begin)
        -- or a fingerprint of its own (a request it cannot read is that key's 'rejected').
        WHERE hivenet._name_valid(k.key) AND v_policy.audit_chain IS NULL
          AND v_policy.fingerprint IS NULL
          AND NOT coalesce(length(k.key) < v_policy.key_min_length
                           OR k.key !~ v_policy.key_pattern, false)  -- _begin_request's test
        ORDER BY k.key
        ON CONFLICT DO NOTHING
        RETURNING a.key)
    SELECT coalesce(array_agg(s.key), '{}') INTO v_started FROM started s;
    PERFORM hivenet._count_decision(p_namespace, 'started') FROM unnest(v_started);
    -- Every other key by begin_request's full path, in sort order too; the outcomes by the
    -- keys' positions (arrays of the batch's length: an element set in an empty array would
    -- start the array at that position).
    IF cardinality(v_started) < cardinality(p_keys) THEN
        v_outcomes := array_fill(NULL::text, ARRAY[cardinality(p_keys)]);
        v_attempts := array_fill(NULL::integer, ARRAY[cardinality(p_keys)]);
        v_responses := array_fill(NULL::jsonb, ARRAY[cardinality(p_keys)]);
    END IF;
    FOR v_key, v_request, v_position IN
        SELECT k.key, k.request, k.position
        FROM unnest(p_keys, p_requests) WITH ORDINALITY AS k (key, request, position)
        WHERE NOT EXISTS (SELECT FROM unnest(v_started) AS s (key) WHERE s.key = k.key)
        ORDER BY k.key
    LOOP
        SELECT b.outcome, b.attempt, b.response INTO v_decided
        FROM hivenet._begin_batch_key(p_namespace, v_key, v_request, p_lease) b;
        v_outcomes[v_position] := v_decided.outcome;
        v_attempts[v_position] := v_decided.attempt;
        v_responses[v_position] := v_decided.response;
    END LOOP;
    -- A key without an outcome was started by the INSERT.
    RETURN QUERY
        SELECT k.key, coalesce(k.outcome, 'started'),
               CASE WHEN k.outcome IS NULL THEN 1 ELSE k.attempt END, k.response
        FROM unnest(p_keys, v_outcomes, v_attempts, v_responses) WITH ORDINALITY
             AS k (key, outcome, attempt, response, position)
        ORDER BY k.position;
END $$;

-- hivenet.finish_requests(namespace, keys text[], attempts integer[], succeeded boolean[],
--                         responses jsonb[]) → void
--   finish_request(namespace, keys[i], attempts[i], succeeded[i], responses[i]) of every key
--   of a batch (begin_requests' started keys), in the order of keys, in one call. All or
--   nothing: the first key finish_request refuses raises its error (HN033, HN001) and the
--   call changes nothing.
--   HN001 for the whole call as begin_requests (namespace, keys, responses; NULL, lengths,
--   1,000 keys, a key NULL or given twice), attempts or succeeded NULL or not as long as keys.
CREATE OR REPLACE FUNCTION hivenet.finish_requests(
    p_namespace text, p_keys text[], p_attempts integer[], p_succeeded boolean[],
    p_responses jsonb[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._check_batch(p_namespace, p_keys, 'responses', p_responses, NULL);
    IF cardinality(p_attempts) IS DISTINCT FROM cardinality(p_keys)
       OR cardinality(p_succeeded) IS DISTINCT FROM cardinality(p_keys) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('the batch in namespace %s has %s keys but %s attempts and %s '
                             'succeeded', hivenet._shown(p_namespace), cardinality(p_keys),
                             coalesce(cardinality(p_attempts)::text, 'NULL'),
                             coalesce(cardinality(p_succeeded)::text, 'NULL'));
    END IF;
    -- Key by key, each by the primary key (a join of the arrays with the table is planned
    -- from the table's statistics, and may read every processing row of the namespace).
    FOR i IN 1 .. cardinality(p_keys) LOOP
        PERFORM hivenet.finish_request(p_namespace, p_keys[i], p_attempts[i], p_succeeded[i],
                                       p_responses[i]);
    END LOOP;
END $$;

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
CREATE OR REPLACE FUNCTION hivenet._expiry_due(p_namespace text, p_started_at timestamptz) RETURNS boolean
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
CREATE OR REPLACE FUNCTION hivenet._expire_attempts(p_namespace text, p_keys text[],
                                         p_attempts integer[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_expired integer := 0;
    v_row record;
BEGIN
    FOR v_row IN
        UPDATE hivenet.request_attempt a
        SET state = 'expired', finished_at = hivenet.now(),
            resolved_by = 'hivenet.expire_after',
            note = format('expired by policy: processing for longer than expire_after %s of the '
                          'namespace', n.expire_after)
        FROM hivenet.request_namespace n, unnest(p_keys, p_attempts) AS c (key, attempt)
        WHERE n.namespace = p_namespace AND a.namespace = p_namespace AND a.key = c.key
          AND a.attempt = c.attempt AND a.state = 'processing'
          AND a.started_at + n.expire_after <= hivenet.now()
        RETURNING a.key, a.attempt, a.chain_hash IS NOT NULL AS chained, a.awaited
    LOOP
        v_expired := v_expired + 1;
        PERFORM hivenet._count_decision(p_namespace, 'expired');
        -- An attempt whose begin is a link of an audit chain: its expiry is the next
        -- (audit.sql), as a finish's would be.
        IF v_row.chained THEN
            PERFORM hivenet._chain_append(p_namespace, v_row.key, v_row.attempt, 'finish');
        END IF;
        IF v_row.awaited THEN
            PERFORM hivenet._wake_waiters(p_namespace, v_row.key);
        END IF;
    END LOOP;
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
CREATE OR REPLACE FUNCTION hivenet._maintain_request_expiry() RETURNS void
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

-- Waiting for the first outcome: begin_request(..., wait) bounds the wait for a concurrent
-- start (lock_timeout); finish_request notifies the attempts a client waits for
-- (watch_request marks them: column awaited). begin_request and _begin_request take a new
-- last parameter: dropped and created again (no view or function depends on them).
DROP FUNCTION hivenet.begin_request(text, text, jsonb, text, interval, boolean);
DROP FUNCTION hivenet._begin_request(text, text, jsonb, text, interval, boolean);

-- true: a client waits for this processing attempt's outcome (watch_request), so that
-- finish_request notifies; on the row, so finishing reads it at no cost.
ALTER TABLE hivenet.request_attempt ADD COLUMN awaited boolean;

-- _begin_attempt waiting at most p_wait for a concurrent start of the same attempt (a lock
-- wait), under lock_timeout p_wait, then HN030 naming the wait: the in-transaction shape's
-- bound. A NULL p_wait is nowait: the shortest lock_timeout (the SET clause's), so that where
-- it would wait it raises HN030 at once. Its own function: a lock_timeout set inside a
-- function with a SET clause for it ends with the function, so the caller's is untouched, and
-- the subtransaction of the EXCEPTION block stays off the default path.
CREATE OR REPLACE FUNCTION hivenet._begin_attempt_within(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_wait interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    IF p_wait IS NOT NULL THEN
        -- In whole milliseconds, at least 1 (0 turns the timeout off), at most what it takes.
        PERFORM set_config('lock_timeout',
                           least(greatest(ceil(extract(epoch FROM p_wait) * 1000), 1),
                                 2147483647)::bigint || 'ms', true);
    END IF;
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, p_unified_serial,
                                p_lease) b;
EXCEPTION WHEN lock_not_available THEN
    PERFORM hivenet._count_decision(p_namespace, 'in_progress');
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('%s is being started by another transaction %s',
                         hivenet._attempt_subject(p_namespace, p_key),
                         CASE WHEN p_wait IS NULL THEN 'right now (nowait)'
                              ELSE format('that did not end within wait %s', p_wait) END);
END $$;

-- begin_request's full path, in the owner's rights, after _start_request wrote nothing. Input
-- the view vouches for, with plain options, met a key that has an attempt: the state machine
-- decides. Anything else (bad input, nowait) gets every check with its exact error first.
-- Not set-returning (OUT parameters): no tuplestore of its own.
CREATE OR REPLACE FUNCTION hivenet._begin_request(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval,
    p_nowait boolean, p_wait interval, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_wait_valid boolean := coalesce(p_wait BETWEEN interval '0' AND hivenet._longest_interval(),
                                     true);
    v_min_length integer;
    v_pattern text;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._request_start_valid(p_namespace, p_key, p_lease), false)
            AND v_wait_valid) THEN
        BEGIN
            PERFORM hivenet._check_name('namespace', p_namespace);
            PERFORM hivenet._check_name('key', p_key);
            PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
            IF NOT v_wait_valid THEN
                RAISE EXCEPTION USING ERRCODE = 'HN001',
                    MESSAGE = format('wait %s is not between 0 and %s', p_wait,
                                     hivenet._longest_interval());
            END IF;
        EXCEPTION WHEN SQLSTATE 'HN001' THEN
            PERFORM hivenet._count_decision(p_namespace, 'rejected');  -- decisions.sql
            RAISE;
        END;
    END IF;
    SELECT n.key_min_length, n.key_pattern INTO v_min_length, v_pattern
    FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF length(p_key) < v_min_length OR p_key !~ v_pattern THEN
        PERFORM hivenet._raise_key_refused(p_namespace, p_key, v_min_length, v_pattern);
    END IF;
    IF p_nowait OR p_wait IS NOT NULL THEN  -- nowait: no wait (NULL), whatever p_wait says
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_within(p_namespace, p_key, p_request, p_on_success, NULL,
                                           p_lease, CASE WHEN NOT p_nowait THEN p_wait END) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
END $$;

-- hivenet.begin_request(namespace, key, request default null, on_success default 'replay',
--                       lease default null, nowait default false, wait default null)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one keyed request (a client's Idempotency-Key, a message id, a pay id ...) in the
--   caller's transaction:
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the effect, then call
--     finish_request with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck request with resolve_request; nothing takes it over).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: its fingerprint (by the namespace's policy, set_namespace_policy: by default
--   sha256 of the jsonb text, which jsonb normalises: key order and whitespace do not matter;
--   'json' or JSON paths: fingerprints.sql) is kept, and a different request under the same
--   key raises HN032 RequestMismatch in every state. No request counts as JSON null.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: namespace or key NULL, empty, longer than 255 characters or with a control
--   character, a namespace starting 'hivenet.' (the library's own), on_success not
--   'replay'/'reject', lease not positive or longer than 10 years, nowait NULL, a key
--   breaking the namespace's key_min_length or key_pattern, wait negative or longer than 10
--   years.
--   A key is never accepted twice while its record is kept: finished requests are removed by
--   maintain() once their last attempt ended longer ago than the namespace's retention
--   (set_request_retention; default the setting request_retention, 24 hours).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again); with nowait it raises HN030 at once instead, with wait
--   once it waited that long (wait 0 is nowait). An attempt begun and committed by another
--   transaction holds no lock: begin raises HN030 at once, wait or not; a client waits for its
--   outcome with watch_request and LISTEN, then begins again (see watch_request). In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
--   One statement, inlined into the caller's (a set-returning LANGUAGE sql function, as
--   begin_step): a new key with plain options is started by _start_request, with no SECURITY
--   DEFINER call; anything else (a key that has an attempt, bad input, nowait) goes to
--   _begin_request, run only when the first branch wrote nothing (a UNION ALL under LIMIT 1,
--   as begin_step's).
CREATE OR REPLACE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false, p_wait interval DEFAULT NULL)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    -- With a wait, not the view: its INSERT would wait for a concurrent start unbounded.
    (SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_request(p_namespace, p_key, p_request, p_on_success, p_lease,
                                  p_nowait OR p_wait IS NOT NULL)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_request(p_namespace, p_key, p_request, p_on_success, p_lease,
                                 p_nowait, p_wait) b)
    LIMIT 1;
END;

-- hivenet.watch_request(namespace, key) → text
--   Registers that a client waits for the outcome of the key's processing attempt, so that
--   its finish_request (or resolve_request) notifies channel hivenet_request_finished at
--   commit with payload the JSON array [namespace, key]; returns that channel.
--   begin_request's wait in the two-transaction shape: an attempt begun and committed holds
--   no lock to wait on, and a function cannot receive a notification inside its transaction,
--   so the client waits: LISTEN on the channel (on a session of its own, not through a
--   transaction pooler), watch_request and commit, begin_request again (the attempt may have
--   ended before the registration) and, on HN030, wait for the key's notification for what
--   is left of its wait; then begin again. It marks the processing attempt (column awaited):
--   only marked attempts notify, as NOTIFY serialises every notifying commit of the cluster.
--   A key with no processing attempt is left alone (it ended: begin again). A finish in
--   REPEATABLE READ or SERIALIZABLE whose snapshot predates the mark raises
--   serialization_failure (40001), as for any concurrent update of its row: retry it. Blocks
--   while the attempt is being finished.
--   HN001: namespace or key not valid (as begin_request).
CREATE OR REPLACE FUNCTION hivenet.watch_request(p_namespace text, p_key text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    PERFORM hivenet._check_name('key', p_key);
    UPDATE hivenet.request_attempt a SET awaited = true
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.state = 'processing'
      AND a.awaited IS NOT TRUE;
    RETURN 'hivenet_request_finished';
END $$;

-- Wake the clients waiting for key p_key's outcome (watch_request) at commit: only for an
-- attempt marked awaited, since NOTIFY serialises the notifying commits of the whole cluster.
-- Called where an attempt ends: finish_request (resolve_request through it) and expiry.
CREATE OR REPLACE FUNCTION hivenet._wake_waiters(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('hivenet_request_finished', json_build_array(p_namespace, p_key)::text);
END $$;

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
CREATE OR REPLACE FUNCTION hivenet._create_decision_counters(p_namespace text, p_grant boolean)
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
CREATE OR REPLACE FUNCTION hivenet._new_decision_counter(p_namespace text, p_decision text) RETURNS regclass
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
CREATE OR REPLACE FUNCTION hivenet._grant_decision_counters() RETURNS void
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
CREATE OR REPLACE FUNCTION hivenet._count_decision(p_namespace text, p_decision text) RETURNS text
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
        FROM hivenet._begin_attempt_within('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease, NULL) b;
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

-- nowait and wait in one function: _begin_attempt_within (created above, with waiting) runs
-- nowait too, as a NULL wait; 0.1.0's _begin_attempt_nowait, which nothing calls now, goes.
DROP FUNCTION hivenet._begin_attempt_nowait(text, text, jsonb, text, text, interval);

-- Grants (privileges.sql), once for everything above:
-- every function and view of 0.2.0 granted to the roles, nothing to PUBLIC.
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
            hivenet.begin_request(text, text, jsonb, text, interval, boolean, interval),
            hivenet.watch_request(text, text),
            hivenet.finish_request(text, text, integer, boolean, jsonb),
            hivenet.begin_requests(text, text[], jsonb[], interval),
            hivenet.finish_requests(text, text[], integer[], boolean[], jsonb[]),
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
        -- Who begins an attempt (requests.sql), recorded by those rules as the inserter.
        GRANT EXECUTE ON FUNCTION hivenet._called_by() TO hivenet_app;
        -- Everything else: _begin_step / _begin_request (SECURITY DEFINER, every check of
        -- begin_step / begin_request: calling them directly can do nothing the public
        -- functions cannot).
        GRANT EXECUTE ON FUNCTION
            hivenet._begin_step(text, jsonb, text, text, interval, boolean),
            hivenet._begin_request(text, text, jsonb, text, interval, boolean, interval)
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
                       'hivenet.stuck_requests, hivenet.request_attempts, hivenet.request_decisions TO %I', v_role);
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
            hivenet.set_namespace_policy(text, interval, text, text, interval, integer, text,
                                         boolean),
            hivenet.verify_audit_chain(text)  -- `hivenet-db audit verify`
        TO hivenet_admin;
    END IF;
END $$;

DO $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
        ORDER BY p.oid::regprocedure::text
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_function);
    END LOOP;
END $$;

SELECT hivenet._grant_roles();
