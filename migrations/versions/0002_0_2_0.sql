-- Release 0.2.0 from 0.1.0.
-- Written by `python -m hivenet_db.tools.revision` from the schema files and the
-- hand-written .tables.sql and .data.sql beside this file: do not edit it.
-- Bodies are checked when they run, as pg_dump's scripts do.
SET LOCAL check_function_bodies = off;

-- Code that goes, or changes what CREATE OR REPLACE cannot.
DROP VIEW hivenet.stuck_steps;
DROP VIEW hivenet.stuck_requests;
DROP VIEW hivenet.step_states;
DROP VIEW hivenet.step_attempt;
DROP VIEW hivenet.request_states;
DROP VIEW hivenet._step_start;
DROP VIEW hivenet._request_start;
DROP TRIGGER format_cold_counter ON hivenet.format;
DROP FUNCTION hivenet.begin_step(text,jsonb,text,text,interval,boolean);
DROP VIEW hivenet._step_replay;
DROP FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean);
DROP FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb);
DROP FUNCTION hivenet._issue_cold(hivenet.format,text[],integer);
DROP FUNCTION hivenet._create_cold_counter();
DROP FUNCTION hivenet._begin_request(text,text,jsonb,text,interval,boolean);
DROP FUNCTION hivenet._begin_attempt_nowait(text,text,jsonb,text,text,interval);

-- Tables, types and sequences (the .tables.sql beside this file).
-- Release 0.2.0 from 0.1.0: tables, types and sequences, written by hand (the code around them
-- is written from the schema files: hivenet_db/tools/revision.py).

-- The policy of a namespace (set_namespace_policy): fingerprints, key rules, the audit chain,
-- the failure policy and expiry.
ALTER TABLE hivenet.request_namespace
    ALTER COLUMN retention DROP NOT NULL,
    ADD COLUMN fingerprint text,
    ADD COLUMN key_min_length integer,
    ADD COLUMN key_pattern text,
    ADD COLUMN audit_chain boolean,
    ADD COLUMN on_failure text,
    ADD COLUMN expire_after interval;
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules, failure policy; NULL is the default';

-- Who began each attempt, its links in the namespace's audit chain, and whether a client
-- waits for its outcome (watch_request).
ALTER TABLE hivenet.request_attempt
    ADD COLUMN called_by text,
    ADD COLUMN application_name text,
    ADD COLUMN client_addr inet,
    ADD COLUMN chain_position bigint,
    ADD COLUMN chain_hash bytea,
    ADD COLUMN finish_position bigint,
    ADD COLUMN finish_hash bytea,
    ADD COLUMN awaited boolean;

CREATE TABLE hivenet.request_chain (
    namespace       text   PRIMARY KEY,
    position        bigint NOT NULL,  -- of the last link (0: none yet)
    head            bytea  NOT NULL,  -- its hash
    anchor_position bigint NOT NULL,  -- of the last link retention removed (0: none)
    anchor          bytea  NOT NULL   -- its hash (the empty string before the first link)
);
COMMENT ON TABLE hivenet.request_chain IS
    'the audit chain of a namespace of keyed requests: its head and the anchor retention left';

-- Expiry. ADD VALUE in this transaction: 'expired' may not be used before it commits, so
-- only PL/pgSQL bodies (read when they run) name it, and nothing here runs them.
ALTER TYPE hivenet.step_state ADD VALUE 'expired';
CREATE TABLE hivenet.request_expiry (
    namespace       text        PRIMARY KEY,
    expired_through timestamptz NOT NULL
);
COMMENT ON TABLE hivenet.request_expiry IS
    'how far maintain() has expired the processing attempts of each namespace with an '
    'expire_after (expiry.sql)';

-- Decision counts: which sequences count which decision of which namespace.
CREATE TABLE hivenet.decision_counter (
    namespace text     NOT NULL,
    decision  text     NOT NULL,
    counter   regclass NOT NULL,
    PRIMARY KEY (namespace, decision, counter)
);
COMMENT ON TABLE hivenet.decision_counter IS
    'the sequences that count the decisions of begin per namespace (view request_decisions)';
CREATE SEQUENCE hivenet.decision_counter_number;

-- Unprepared scopes: each draw from a format's shared fallback is recorded (fallback.sql), in
-- place of one pending row per scope. 0.1.0's pending scopes drew at some time: recorded as
-- scopes that drew in the current period (of no known count, so that a scope prepared today
-- starts after the fallback, and maintain() promotes them as before).
CREATE TABLE hivenet.fallback_draw (
    format  text NOT NULL,
    scope   text NOT NULL,
    fields  jsonb NOT NULL,   -- the counter-key fields, as hivenet.scope.fields
    period  bigint NOT NULL,  -- the clock's period of the draw (_period_index)
    serials bigint NOT NULL   -- how many serials it drew
);
COMMENT ON TABLE hivenet.fallback_draw IS
    'draws of unprepared scopes from their format''s shared fallback counter (setting '
    'shared_fallback), per scope and period';
CREATE INDEX fallback_draw_scope ON hivenet.fallback_draw (format, scope);
INSERT INTO hivenet.fallback_draw (format, scope, fields, period, serials)
SELECT DISTINCT ON (p.format, p.scope) p.format, p.scope, p.fields,
       hivenet._period_index(hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                             f.reset), 0
FROM hivenet.scope_pending p JOIN hivenet.format f ON f.name = p.format
ORDER BY p.format, p.scope;
DROP TABLE hivenet.scope_pending;

-- Code, in dependency order.
CREATE OR REPLACE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[], p_count integer)
 RETURNS text[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    -- Settings and format from generated constants (compile.sql): no query on the hot path.
    v_format hivenet.format := hivenet._format_constant(p_format);
    v_values text[] := p_values;
    v_field integer;
    v_scope text;
    v_seq regclass;
BEGIN
    IF p_count IS NULL OR p_count NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s must be from 1 to 1000000',
                             hivenet._shown(p_format), coalesce(p_count::text, 'NULL'));
    END IF;
    IF v_format.name IS NULL THEN
        -- Not in the constants: defined by a transaction whose rewrite was superseded.
        SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('unknown format %s', hivenet._shown(p_format));
        END IF;
    END IF;
    IF v_values IS NULL THEN
        v_values := hivenet._field_values(v_format, p_fields);
    END IF;
    IF array_to_string(v_values, ' ', '?') !~ v_format.field_pattern THEN
        PERFORM hivenet._check_fields(v_format, v_values);
    END IF;
    IF v_format.bounded_fields <> '{}' THEN
        -- Digits only (the pattern matched), so the casts are safe.
        FOREACH v_field IN ARRAY v_format.bounded_fields LOOP
            IF v_values[v_field]::numeric < v_format.field_min[v_field]
               OR v_values[v_field]::numeric > v_format.field_max[v_field] THEN
                PERFORM hivenet._check_fields(v_format, v_values);
            END IF;
        END LOOP;
    END IF;
    IF hivenet._setting_constant('enforce_registry')::boolean THEN
        PERFORM hivenet._check_registry(jsonb_object(v_format.field_names, v_values));
    END IF;
    -- Formats whose every field is in the counter key skip _scope_of's subquery, which
    -- would take the expression off PL/pgSQL's fast path for simple expressions.
    IF v_format.key_fields IS NULL THEN
        v_scope := array_to_string(v_values, '');
    ELSE
        v_scope := hivenet._scope_of(v_format, v_values);
    END IF;
    v_seq := to_regclass(
        'hivenet.' || quote_ident(hivenet._scope_sequence_name(p_format, v_scope)));
    IF v_seq IS NULL THEN
        RETURN hivenet._issue_unprepared(v_format, v_values, p_count);
    END IF;
    RETURN hivenet._issue(v_seq, v_format, v_values, p_count, format('scope %L', v_scope));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._allocate(text,jsonb,text[],integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._batch_limit()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT 1000;
END;
REVOKE EXECUTE ON FUNCTION hivenet._batch_limit() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_attempt(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
                                 hivenet._shown_time(v_last.started_at), hivenet._shown_time(
                                     v_last.started_at + hivenet._step_lease(v_last.lease)));
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
                                     v_last.attempt, hivenet._shown_time(v_last.finished_at));
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt(text,text,jsonb,text,text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_attempt_within(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_wait interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET lock_timeout TO '1ms'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt_within(text,text,jsonb,text,text,interval,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_batch_key(p_namespace text, p_key text, p_request jsonb, p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_request(p_namespace, p_key, p_request, 'replay', p_lease, false, NULL) b;
EXCEPTION WHEN SQLSTATE 'HN030' OR SQLSTATE 'HN032' OR SQLSTATE 'HN001' THEN
    outcome := CASE SQLSTATE WHEN 'HN030' THEN 'in_progress' WHEN 'HN032' THEN 'mismatch'
                             ELSE 'rejected' END;
    response := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_batch_key(text,text,jsonb,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_request(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval, p_nowait boolean, p_wait interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_request(text,text,jsonb,text,interval,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_step(p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_step(text,jsonb,text,text,interval,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._called_by()
 RETURNS text
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT COALESCE(NULLIF(current_setting('role'::text), 'none'::text), (SESSION_USER)::text) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet._called_by() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._canonical_json(p_value jsonb)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._canonical_json(jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._canonical_number(p_number numeric)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET extra_float_digits TO '1'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._canonical_number(numeric) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._chain_append(p_namespace text, p_key text, p_attempt integer, p_event text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._chain_append(text,text,integer,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._chain_link(p_previous bytea, p_attempt hivenet.request_attempt, p_event text)
 RETURNS bytea
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT sha256((p_previous || convert_to((
         CASE p_event
             WHEN 'begin'::text THEN jsonb_build_array('begin', (p_attempt).namespace, (p_attempt).key, (p_attempt).attempt, (p_attempt).chain_position, encode((p_attempt).fingerprint, 'hex'::text), (p_attempt).unified_serial, EXTRACT(epoch FROM (p_attempt).lease), EXTRACT(epoch FROM (p_attempt).started_at), (p_attempt).called_by, (p_attempt).application_name, host((p_attempt).client_addr))
             WHEN 'finish'::text THEN jsonb_build_array('finish', (p_attempt).namespace, (p_attempt).key, (p_attempt).attempt, (p_attempt).finish_position, ((p_attempt).state)::text, EXTRACT(epoch FROM (p_attempt).finished_at), encode(sha256(convert_to(((p_attempt).response)::text, 'UTF8'::name)), 'hex'::text), encode(sha256(convert_to(((p_attempt).error)::text, 'UTF8'::name)), 'hex'::text), (p_attempt).resolved_by, (p_attempt).note)
             ELSE NULL::jsonb
         END)::text, 'UTF8'::name))) AS sha256;
END;
REVOKE EXECUTE ON FUNCTION hivenet._chain_link(bytea,hivenet.request_attempt,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_batch(p_namespace text, p_keys text[], p_what text, p_values jsonb[], p_lease interval)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_batch(text,text[],text,jsonb[],interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_fingerprint(p_fingerprint text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_fingerprint(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._claim_checked(p_namespace text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_now timestamptz := hivenet.now();
    v_expires timestamptz;
BEGIN
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_name('claim key', p_key);
    SELECT v_now + n.expiry INTO v_expires
    FROM hivenet.claim_namespace n WHERE n.namespace = p_namespace;
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    VALUES (p_namespace, p_key, v_now, v_expires)
    ON CONFLICT (namespace, key) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Taken before; free again if it expired. A concurrent retaking holds the row: this waits
    -- for it, then finds the claim unexpired (or, under REPEATABLE READ, raises 40001).
    UPDATE hivenet.claim_record r SET claimed_at = v_now, expires_at = v_expires
    WHERE r.namespace = p_namespace AND r.key = p_key AND r.expires_at <= v_now;
    IF NOT FOUND THEN
        -- Until when the claim that holds the key is taken (not this one's expiry).
        SELECT r.expires_at INTO v_expires
        FROM hivenet.claim_record r WHERE r.namespace = p_namespace AND r.key = p_key;
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken%s',
                             hivenet._shown(p_namespace), hivenet._shown(p_key),
                             CASE WHEN NOT FOUND THEN ''
                                  WHEN v_expires IS NULL THEN ' (for good: its namespace has '
                                                              'no expiry)'
                                  ELSE format(' (until %s)', hivenet._shown_time(v_expires))
                             END);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._claim_checked(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._count_decision(p_namespace text, p_decision text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Every name qualified, operators too: the caller's search_path is in force.
    PERFORM pg_catalog.nextval(coalesce(
        (SELECT c.counter FROM hivenet._decision_counters c
         WHERE c.namespace OPERATOR(pg_catalog.=) p_namespace
           AND c.decision OPERATOR(pg_catalog.=) p_decision LIMIT 1),
        hivenet._new_decision_counter(p_namespace, p_decision)));
    RETURN p_decision;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._count_decision(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._create_decision_counters(p_namespace text, p_grant boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._create_decision_counters(text,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._expire_attempts(p_namespace text, p_keys text[], p_attempts integer[])
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._expire_attempts(text,text[],integer[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._expiry_due(p_namespace text, p_started_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN coalesce((SELECT p_started_at + n.expire_after <= hivenet.now()
                     FROM hivenet.request_namespace n WHERE n.namespace = p_namespace), false);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._expiry_due(text,timestamp with time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fallback_drawn(p_format hivenet.format)
 RETURNS text[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_key integer := hashtext(p_format.name);
    v_period bigint := hivenet._period_index(
        hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), p_format.reset);
    v_fallback regclass :=
        ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass;
    v_value bigint := coalesce(pg_sequence_last_value(v_fallback), 0);
    v_settled boolean := false;
    v_deadline timestamptz := clock_timestamp() + interval '1 second';
BEGIN
    IF v_value / p_format.stride >= v_period AND v_value % p_format.stride > 0 THEN
        PERFORM pg_advisory_xact_lock(hivenet._fallback_gate_space(), v_key);
        LOOP
            v_settled := pg_try_advisory_xact_lock(hivenet._fallback_lock_space(), v_key);
            EXIT WHEN v_settled OR clock_timestamp() > v_deadline;
            PERFORM pg_sleep(0.005);
        END LOOP;
    END IF;
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), v_key);
    v_value := coalesce(pg_sequence_last_value(v_fallback), 0);  -- now it stays
    IF v_value / p_format.stride < v_period OR v_value % p_format.stride = 0 THEN
        RETURN '{}';
    ELSIF v_value / p_format.stride > v_period OR NOT v_settled THEN
        RETURN NULL;
    END IF;
    -- Values past the capacity are never printed (_advance parks the counter there).
    IF least(v_value % p_format.stride, p_format.capacity) IS DISTINCT FROM (
           SELECT sum(d.serials) FROM hivenet.fallback_draw d
           WHERE d.format = p_format.name AND d.period = v_period) THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT DISTINCT d.scope FROM hivenet.fallback_draw d
                 WHERE d.format = p_format.name AND d.period = v_period ORDER BY 1);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fallback_drawn(hivenet.format) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fallback_formats_check()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_names text[] := ARRAY(SELECT DISTINCT btrim(n)
                            FROM unnest(string_to_array(NEW.value, ',')) AS n
                            WHERE btrim(n) <> '' ORDER BY 1);
    v_unknown text;
BEGIN
    SELECT n INTO v_unknown FROM unnest(v_names) AS n
    WHERE NOT EXISTS (SELECT FROM hivenet.format f WHERE f.name = n) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %s is no format (formats: %s)', NEW.name,
                             hivenet._shown(v_unknown),
                             (SELECT string_agg(f.name, ', ' ORDER BY f.name)
                              FROM hivenet.format f));
    END IF;
    NEW.value := array_to_string(v_names, ',');
    RETURN NEW;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fallback_formats_check() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fallback_gate_space()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT 1214210105 $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fallback_gate_space() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fallback_lock_space()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT 1214210104 $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fallback_lock_space() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text, p_enforce_registry boolean, p_allow_fake_clock boolean)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    v_bounds text[] := ARRAY[]::text[];
    v_printed text;
    v_field text;
    v_counter text;
    v_fake_clock text := '';
BEGIN
    IF p_format IS NULL OR p_enforce_registry OR p_format.reset IS DISTINCT FROM 'day'
       OR p_format.key_fields IS NOT NULL OR p_format.tail_pattern <> ''
       OR cardinality(p_format.field_names) <> 3
       -- Outside the quoted field values, the pattern prints the date only.
       OR regexp_replace(p_format.head_pattern, '"[^"]*"', '', 'g') !~ '^(YYYY|YY|MM|DD)*$'
       OR p_format.capacity <> 10::bigint ^ p_format.seq_width - 1 THEN
        RETURN 'NULL::text';
    END IF;
    FOR i IN 1 .. 3 LOOP
        v_field := (ARRAY['p_a', 'p_b', 'p_c'])[i];
        IF p_format.field_min[i] IS NOT NULL THEN
            v_bounds := v_bounds || format('%s::numeric >= %s', v_field, p_format.field_min[i]);
        END IF;
        IF p_format.field_max[i] IS NOT NULL THEN
            v_bounds := v_bounds || format('%s::numeric <= %s', v_field, p_format.field_max[i]);
        END IF;
    END LOOP;
    -- The counter: the scope's own sequence by its qualified name, NULL for a scope without
    -- one (unprepared, or parked: ownership.sql), which nextval (strict) passes on to the full
    -- path. The values are alnum here (the pattern matched), so the quoted name is theirs.
    -- The session's catalog cache may not see a sequence created since its transaction
    -- began: NULL then too, and the full path finds it (_issue_unprepared).
    v_counter := format('to_regclass(%L || p_a || p_b || p_c || %L)',
                        'hivenet."' || hivenet._scope_sequence_name(p_format.name, ''), '"');
    IF p_allow_fake_clock THEN
        v_fake_clock := $f$coalesce(current_setting('hivenet.fake_now', true), '') = '' AND $f$;
    END IF;
    -- The values then the date (the built-in layouts): no format() at run time.
    v_printed := CASE WHEN starts_with(p_format.head_pattern, '"%1$s""%2$s""%3$s"')
        THEN format('p_a || p_b || p_c || to_char(%s, %L)', v_local,
                    substr(p_format.head_pattern, 19))
        ELSE format('to_char(%s, format(%L, p_a, p_b, p_c))', v_local, p_format.head_pattern)
        END;
    -- Nested CASE: the casts of the bounds are safe only once the values matched. The period
    -- is _period_index(local, 'day') as days since the day before its first, and the clamp
    -- maps 0 and capacity + 1 both to 0, then NULL.
    RETURN format(
        $f$CASE WHEN (p_a || ' ' || p_b || ' ' || p_c) ~ %L THEN CASE
    WHEN %s%s
    THEN %s || to_char(nullif(least(greatest(
             nextval(%s)
             - (%s::date - %L::date) * %s::bigint,
             0), %s) %% %s, 0), %L)
    END END$f$,
        p_format.field_pattern, v_fake_clock,
        coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local,
        date '2000-01-01' - hivenet._period_index(timestamp '2000-01-01', 'day')::integer,
        p_format.stride, p_format.capacity + 1, p_format.capacity + 1,
        'FM' || repeat('0', p_format.seq_width));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fast_path_expression(hivenet.format,text,boolean,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
 RETURNS TABLE(timeline integer, format text, counter text, from_value bigint, to_value bigint, parked boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_format hivenet.format;
    v_period bigint;
    v_seq regclass;
    v_from bigint;
    v_base bigint;
    v_to bigint;
    v_last bigint;
    v_count integer := 0;
BEGIN
    IF p_gap IS NULL OR p_gap < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failover fence: gap %s must be at least 1',
                             coalesce(p_gap::text, 'NULL'));
    END IF;
    -- maintain()'s lock: one fence at a time, never beside a maintain() run.
    PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), 0);
    IF NOT p_force AND EXISTS (SELECT FROM hivenet.failover_fence f
                               WHERE f.timeline = v_timeline) THEN
        RETURN;
    END IF;
    FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
        -- Until commit: no scope of the format is promoted from a cold value read before.
        PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
        v_period := hivenet._period_index(
            hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), v_format.reset);
        FOR counter IN
            SELECT hivenet._cold_sequence_name(v_format.name)
            UNION ALL
            (SELECT s.sequence_name FROM hivenet.scope s
             WHERE s.format = v_format.name ORDER BY s.sequence_name)
        LOOP
            v_seq := to_regclass('hivenet.' || quote_ident(counter));
            CONTINUE WHEN v_seq IS NULL;
            -- The period reset's lock (_advance), until commit: no setval of theirs between.
            PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), v_seq::oid::integer);
            -- Its value, also one set as the next (is_called false: a prepared scope's start).
            EXECUTE format('SELECT last_value FROM %s', v_seq) INTO v_from;
            v_base := greatest(v_from, v_period * v_format.stride);
            v_to := v_base + p_gap;
            v_last := (v_base / v_format.stride) * v_format.stride + v_format.capacity;
            parked := NOT v_format.borrow_next_period AND v_to > v_last;
            IF parked THEN
                v_to := greatest(v_last, v_from);
            END IF;
            PERFORM setval(v_seq, v_to, true);
            v_count := v_count + 1;
            timeline := v_timeline;
            format := v_format.name;
            from_value := v_from;
            to_value := v_to;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    INSERT INTO hivenet.failover_fence AS f (timeline, gap, counters, applied_by)
    VALUES (v_timeline, p_gap, v_count, p_by)
    ON CONFLICT ON CONSTRAINT failover_fence_pkey DO UPDATE
        SET fenced_at = clock_timestamp(), gap = coalesce(f.gap, 0) + EXCLUDED.gap,
            counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fence(bigint,boolean,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._format_counters()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM hivenet._make_format_counters(NEW);
    RETURN NULL;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._format_counters() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._grant_decision_counters()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_name name;
BEGIN
    FOR v_name IN SELECT s.relname FROM hivenet.decision_counter c
                  JOIN pg_class s ON s.oid = c.counter ORDER BY 1 LOOP
        PERFORM hivenet._grant_counter(v_name);
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_decision_counters() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._grant_roles()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
                       'hivenet.stuck_requests, hivenet.request_attempts, hivenet.request_decisions, '
                       'hivenet.business_time_zone TO %I', v_role);
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._has_issued(p_sequence_name text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT p_sequence_name IS NULL OR pg_sequence_last_value(
        to_regclass('hivenet.' || quote_ident(p_sequence_name))) IS NOT NULL
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._has_issued(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._issue_unprepared(p_format hivenet.format, p_values text[], p_count integer)
 RETURNS text[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_scope text := hivenet._scope_of(p_format, p_values);
    v_key integer := hashtext(p_format.name);
    -- The setting's generated constant, or its row when the constant is missing.
    v_shared boolean := p_format.name = ANY (string_to_array(coalesce(
        hivenet._setting_constant('shared_fallback'),
        hivenet._setting_value('shared_fallback')), ','));
    v_held text := coalesce(current_setting('hivenet.fallback_drawn', true), '');
    v_seq regclass;
    v_out text[];
BEGIN
    -- A scope's first use (and every use of a parked one): this database must own it
    -- (ownership.sql). Scopes with a sequence of their own passed this when prepared.
    IF hivenet._setting_constant('owned_instances') IS DISTINCT FROM 'all' THEN
        PERFORM hivenet._check_owned(p_format, p_values);
    END IF;
    IF v_shared AND strpos(v_held, ',' || p_format.name || ',') = 0 THEN
        PERFORM pg_advisory_lock_shared(hivenet._fallback_gate_space(), v_key);
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(hivenet._fallback_lock_space(), v_key);
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            PERFORM pg_advisory_unlock_shared(hivenet._fallback_gate_space(), v_key);
            RAISE;
        END;
        PERFORM pg_advisory_unlock_shared(hivenet._fallback_gate_space(), v_key);
        PERFORM set_config('hivenet.fallback_drawn',
                           coalesce(nullif(v_held, ''), ',') || p_format.name || ',', true);
    END IF;
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL AND v_shared THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('the shared fallback counter of the unprepared scopes (scope %L among '
                       'them; a scope prepared before its first use counts on its own, '
                       '`hivenet-db prepare`)', v_scope));
            INSERT INTO hivenet.fallback_draw (format, scope, fields, period, serials)
            VALUES (p_format.name, v_scope, hivenet._scope_fields(p_format, p_values),
                    hivenet._period_index(hivenet.now() AT TIME ZONE
                                          hivenet._setting_constant('time_zone'), p_format.reset),
                    p_count);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
    IF v_seq IS NOT NULL THEN
        RETURN hivenet._issue(v_seq, p_format, p_values, p_count, format('scope %L', v_scope));
    ELSIF v_out IS NULL THEN
        PERFORM hivenet._refuse_unprepared(p_format, p_values);
    END IF;
    RETURN v_out;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._issue_unprepared(hivenet.format,text[],integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._latest_issued(p_format text, p_scope text)
 RETURNS timestamp without time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_format hivenet.format := (SELECT f FROM hivenet.format f WHERE f.name = p_format);
    v_drawn boolean;
    v_counter text := hivenet._scope_sequence_name(p_format, p_scope);
    v_cold text := hivenet._cold_sequence_name(p_format);
    v_value bigint;
BEGIN
    IF v_format IS NULL THEN
        RETURN NULL;
    END IF;
    v_drawn := EXISTS (SELECT FROM hivenet.fallback_draw d
                       WHERE d.format = p_format AND d.scope = p_scope);
    IF v_format.clock_unit IS NOT NULL THEN
        v_value := pg_sequence_last_value(hivenet._committed_sequence(
            hivenet._clock_sequence_name(v_counter)));
        IF v_drawn THEN
            v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(
                hivenet._clock_sequence_name(v_cold))));
        END IF;
        RETURN CASE WHEN v_value > 0 THEN hivenet._period_start(v_value, v_format.clock_unit) END;
    END IF;
    v_value := pg_sequence_last_value(hivenet._committed_sequence(v_counter));
    IF v_drawn THEN
        v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(v_cold)));
    END IF;
    RETURN CASE WHEN v_value > 0
                THEN hivenet._period_start(v_value / v_format.stride, v_format.reset) END;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._latest_issued(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._maintain_request_expiry()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_request_expiry() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._maintain_scopes()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_format hivenet.format;
    v_promoted text[] := string_to_array(hivenet._setting_value('promote_fallback_scopes'), ',');
    v_drawn record;
BEGIN
    FOR v_format IN SELECT f.* FROM hivenet.format f
                    WHERE EXISTS (SELECT FROM hivenet.fallback_draw d WHERE d.format = f.name)
                    ORDER BY f.name LOOP
        PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
        IF v_format.name = ANY (v_promoted) THEN
            FOR v_drawn IN
                SELECT DISTINCT ON (d.scope) d.scope, d.fields FROM hivenet.fallback_draw d
                WHERE d.format = v_format.name
                  AND NOT EXISTS (SELECT FROM hivenet.scope s
                                  WHERE s.format = d.format AND s.scope = d.scope)
                  AND hivenet._not_owned(v_format, d.fields ->> hivenet._node_field(v_format),
                          hivenet._setting_value('owned_instances'),
                          hivenet._setting_value('single_primary_formats')::boolean) IS NULL
                ORDER BY d.scope
            LOOP
                PERFORM hivenet._promote_scope(v_format, v_drawn.scope, v_drawn.fields, true);
            END LOOP;
        END IF;
        WITH taken AS (DELETE FROM hivenet.fallback_draw d WHERE d.format = v_format.name
                       RETURNING d.*)
        INSERT INTO hivenet.fallback_draw (format, scope, fields, period, serials)
        SELECT t.format, t.scope, (array_agg(t.fields))[1], t.period, sum(t.serials)
        FROM taken t
        WHERE t.period >= hivenet._period_index(
                  hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), v_format.reset)
        GROUP BY t.format, t.scope, t.period;
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_scopes() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._make_format_counters(p_format hivenet.format)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(p_format.name));
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._cold_sequence_name(p_format.name), 0);
    END IF;
    IF hivenet._one_scope(p_format) THEN
        -- Nested: _not_owned is not there yet while the schema is installed.
        IF coalesce(hivenet._setting_value('owned_instances'), 'all') <> 'all' THEN
            IF hivenet._not_owned(p_format, NULL, hivenet._setting_value('owned_instances'),
                   hivenet._setting_value('single_primary_formats')::boolean) IS NOT NULL THEN
                RETURN;
            END IF;
        END IF;
        PERFORM hivenet._promote_scope(p_format, '', '{}', false);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._make_format_counters(hivenet.format) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._new_decision_counter(p_namespace text, p_decision text)
 RETURNS regclass
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._new_decision_counter(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._one_scope(p_format hivenet.format)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT coalesce(p_format.key_fields = '{}', cardinality(p_format.field_names) = 0)
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._one_scope(hivenet.format) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._ownership_check()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_owned text;
    v_single boolean;
    v_scope record;
BEGIN
    IF NEW.name = 'owned_instances' THEN
        NEW.value := hivenet._canonical_instances(NEW.value);
    END IF;
    IF TG_OP = 'INSERT' OR to_regclass('hivenet.fallback_draw') IS NULL THEN
        RETURN NEW;
    END IF;
    v_owned := CASE WHEN NEW.name = 'owned_instances' THEN NEW.value
                    ELSE hivenet._setting_value('owned_instances') END;
    v_single := CASE WHEN NEW.name = 'single_primary_formats' THEN NEW.value::boolean
                     ELSE hivenet._setting_value('single_primary_formats')::boolean END;
    SELECT s.format, s.scope, s.node INTO v_scope FROM hivenet._scopes_by_node() s
    WHERE (s.sequence_name IS NULL OR left(s.sequence_name, 4) <> 'off_')
      AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
      AND hivenet._has_issued(s.sequence_name)
    ORDER BY (s.format).name, s.scope LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s %s: this database has issued serials of format %s '
                             'scope %s, which it would no longer own; give it up with '
                             'hivenet.own_instances(..., p_force => true), which parks such '
                             'scopes (docs/guides/scale-out.md)', NEW.name, hivenet._shown(NEW.value),
                             (v_scope.format).name, hivenet._shown(v_scope.scope));
    END IF;
    FOR v_scope IN SELECT s.format, s.scope, s.sequence_name FROM hivenet._scopes_by_node() s
                   WHERE left(s.sequence_name, 4) = 'off_'
                     AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NULL
                   ORDER BY s.sequence_name LOOP
        PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, false);
    END LOOP;
    -- Prepared scopes that issued nothing are parked as they are given up, without force.
    FOR v_scope IN SELECT s.format, s.scope FROM hivenet._scopes_by_node() s
                   WHERE left(s.sequence_name, 4) = 'seq_'
                     AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
                   ORDER BY s.sequence_name LOOP
        PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
    END LOOP;
    RETURN NEW;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._ownership_check() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._policy_fingerprint(p_fingerprint text, p_request jsonb)
 RETURNS bytea
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._policy_fingerprint(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._promote_scope(p_format hivenet.format, p_scope text, p_fields jsonb, p_drawn boolean)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, p_scope);
    v_fallback regclass;
    v_issued bigint;  -- the fallback's last value, NULL before its first
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format.name));
    -- Another promotion of the scope may have committed while we waited for the lock.
    IF hivenet._committed_sequence(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE SEQUENCE hivenet.%I AS bigint MINVALUE 0 START 0', v_name);
    PERFORM hivenet._grant_counter(v_name);  -- for the fast path, run as the caller
    v_fallback := ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass;
    v_issued := pg_sequence_last_value(v_fallback);
    IF v_issued > 0 AND p_drawn THEN
        PERFORM setval(('hivenet.' || quote_ident(v_name))::regclass, v_issued, true);
    ELSIF v_issued > 0 THEN
        PERFORM setval(('hivenet.' || quote_ident(v_name))::regclass, 1 + CASE
            WHEN p_drawn IS NULL THEN v_issued
            ELSE greatest(v_issued / p_format.stride, hivenet._period_index(
                     hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                     p_format.reset)) * p_format.stride END, false);
    END IF;
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(v_name, CASE WHEN p_drawn IS NOT FALSE THEN
            pg_sequence_last_value(hivenet._clock_sequence(v_fallback)) ELSE 0 END);
    END IF;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), v_name)
    ON CONFLICT DO NOTHING;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._purge_chained(p_namespace text, p_keys text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._purge_chained(text,text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamp with time zone, p_dated_before timestamp without time zone DEFAULT NULL::timestamp without time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._raise_key_refused(p_namespace text, p_key text, p_min_length integer, p_pattern text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._raise_key_refused(text,text,integer,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._refuse_unprepared(p_format hivenet.format, p_values text[])
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_key record;
BEGIN
    -- The counter-key fields in the format's order; values are valid, so [0-9A-Za-z] only.
    SELECT coalesce(string_agg(format('%s %L', f.name, p_values[f.i]), ', ' ORDER BY f.i),
                    'its one scope') AS named,
           coalesce(string_agg(format('"%s": "%s"', f.name, p_values[f.i]), ', '
                               ORDER BY f.i), '') AS json,
           coalesce(array_agg(f.name ORDER BY f.i) = ARRAY['system', 'module', 'instance'],
                    false) AS channel,
           string_agg(p_values[f.i], ' ' ORDER BY f.i) AS words,
           string_agg(format('%s=%s', f.name, p_values[f.i]), ',' ORDER BY f.i) AS pairs
    INTO v_key
    FROM unnest(p_format.field_names) WITH ORDINALITY AS f(name, i)
    WHERE p_format.key_fields IS NULL OR f.i = ANY (p_format.key_fields);
    RAISE EXCEPTION USING ERRCODE = 'HN002',
        MESSAGE = format('format %s has no counter for %s: a scope counts on a counter of its '
                         'own, prepared before its first use; prepare it with `hivenet-db '
                         'prepare %s%s` or SELECT hivenet.prepare_scope(%L, %L)',
                         p_format.name, v_key.named, p_format.name,
                         CASE WHEN v_key.channel THEN ' ' || v_key.words
                              WHEN v_key.pairs IS NOT NULL THEN ' ' || v_key.pairs
                              ELSE '' END,
                         p_format.name, '{' || v_key.json || '}');
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._refuse_unprepared(hivenet.format,text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._resolve_attempt(p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text, p_response jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._resolve_attempt(text,text,integer,boolean,text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._scopes_by_node()
 RETURNS TABLE(format hivenet.format, scope text, node text, sequence_name text)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT f, s.scope, s.fields ->> hivenet._node_field(f), s.sequence_name
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name FROM hivenet.scope c
          UNION ALL
          SELECT DISTINCT d.format, d.scope, d.fields, NULL FROM hivenet.fallback_draw d
          WHERE NOT EXISTS (SELECT FROM hivenet.scope c
                            WHERE c.format = d.format AND c.scope = d.scope)) AS s
    JOIN hivenet.format f ON f.name = s.format
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._scopes_by_node() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._serials_issued()
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT EXISTS (SELECT FROM hivenet.scope s WHERE hivenet._has_issued(s.sequence_name))
        OR EXISTS (SELECT FROM hivenet.format f WHERE pg_sequence_last_value(to_regclass(
               'hivenet.' || quote_ident(hivenet._cold_sequence_name(f.name)))) IS NOT NULL)
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._serials_issued() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._setting_check()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_conflict text;
BEGIN
    BEGIN
        CASE NEW.kind
            WHEN 'boolean' THEN PERFORM NEW.value::boolean;
            WHEN 'interval' THEN PERFORM NEW.value::interval;
            WHEN 'time_zone' THEN PERFORM now() AT TIME ZONE NEW.value;
            -- A positive integer: 0 or less divides by zero (division_by_zero is a
            -- data_exception, caught below like a value that is no integer).
            WHEN 'count' THEN PERFORM 1 / (NEW.value::integer > 0)::integer;
            ELSE NULL;
        END CASE;
    EXCEPTION WHEN data_exception OR invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %s is not a valid %s', NEW.name,
                             hivenet._shown(NEW.value), NEW.kind);
    END;
    IF NEW.kind = 'interval' THEN
        v_conflict := hivenet._interval_conflict(NEW.name, NEW.value::interval);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format('setting %s: %s %s',
                NEW.name, hivenet._shown(NEW.value), v_conflict);
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.kind = 'time_zone' AND NEW.value <> OLD.value
       AND now() AT TIME ZONE NEW.value < now() AT TIME ZONE OLD.value
       AND to_regclass('hivenet.fallback_draw') IS NOT NULL THEN
        -- Nested: the counters are looked up only once they exist (not during an install).
        IF hivenet._serials_issued() THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('setting %s: %s is %s behind %s, and serials have been '
                                 'issued: their business dates and times would go backwards '
                                 '(choose the zone before the first serial)', NEW.name,
                                 hivenet._shown(NEW.value),
                                 (now() AT TIME ZONE OLD.value) - (now() AT TIME ZONE NEW.value),
                                 hivenet._shown(OLD.value));
        END IF;
    END IF;
    RETURN NEW;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._setting_check() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._setting_constant(p_name text)
 RETURNS text
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_name
             WHEN 'allow_fake_clock'::text THEN 'false'::text
             WHEN 'check_received_instances'::text THEN 'true'::text
             WHEN 'enforce_registry'::text THEN 'false'::text
             WHEN 'interface_future_tolerance'::text THEN '5 minutes'::text
             WHEN 'interface_partitions_ahead'::text THEN '2 days'::text
             WHEN 'interface_retention'::text THEN '7 days'::text
             WHEN 'interface_window'::text THEN '1 day'::text
             WHEN 'max_serials_per_call'::text THEN '10000'::text
             WHEN 'owned_instances'::text THEN 'all'::text
             WHEN 'promote_fallback_scopes'::text THEN ''::text
             WHEN 'request_retention'::text THEN '24 hours'::text
             WHEN 'shared_fallback'::text THEN ''::text
             WHEN 'single_primary_formats'::text THEN 'false'::text
             WHEN 'step_future_tolerance'::text THEN '5 minutes'::text
             WHEN 'step_lease'::text THEN '5 minutes'::text
             WHEN 'step_retention'::text THEN '30 days'::text
             WHEN 'time_zone'::text THEN 'UTC'::text
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._setting_constant(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._shown_time(p_time timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT to_char(p_time AT TIME ZONE z.zone, 'YYYY-MM-DD HH24:MI:SS')
           || CASE WHEN o.seconds < 0 THEN '-' ELSE '+' END
           || to_char(make_interval(secs => abs(o.seconds)), 'HH24:MI')
           || format(' (%s)', z.zone)
    FROM (SELECT hivenet._setting_value('time_zone') AS zone) AS z,
         LATERAL (SELECT extract(epoch FROM (p_time AT TIME ZONE z.zone)
                                          - (p_time AT TIME ZONE 'UTC')) AS seconds) AS o
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._shown_time(timestamp with time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_chain(p_namespace text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    INSERT INTO hivenet.request_chain (namespace, position, head, anchor_position, anchor)
    VALUES (p_namespace, 0, '', 0, '')
    ON CONFLICT (namespace) DO NOTHING;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_chain(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_request(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval, p_nowait boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_request(text,text,jsonb,text,interval,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_step(p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_step(text,jsonb,text,text,interval,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._utf16_units(p_text text)
 RETURNS integer[]
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT COALESCE(array_agg(u.unit ORDER BY c."position", u.half), '{}'::integer[]) AS "coalesce"
    FROM (unnest(string_to_array(_utf16_units.p_text, NULL::text)) WITH ORDINALITY c(ch, "position")
      CROSS JOIN LATERAL ( VALUES (1,
                 CASE
                     WHEN (ascii(c.ch) > 65535) THEN (55296 + ((ascii(c.ch) - 65536) >> 10))
                     ELSE ascii(c.ch)
                 END), (2,
                 CASE
                     WHEN (ascii(c.ch) > 65535) THEN (56320 + ((ascii(c.ch) - 65536) & 1023))
                     ELSE NULL::integer
                 END)) u(half, unit))
   WHERE (u.unit IS NOT NULL);
END;
REVOKE EXECUTE ON FUNCTION hivenet._utf16_units(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._wake_waiters(p_namespace text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM pg_notify('hivenet_request_finished', json_build_array(p_namespace, p_key)::text);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._wake_waiters(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.begin_request(p_namespace text, p_key text, p_request jsonb DEFAULT NULL::jsonb, p_on_success text DEFAULT 'replay'::text, p_lease interval DEFAULT NULL::interval, p_nowait boolean DEFAULT false, p_wait interval DEFAULT NULL::interval)
 RETURNS TABLE(outcome text, attempt integer, response jsonb)
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT 'started'::text AS text,
     1,
     NULL::jsonb AS jsonb
   WHERE hivenet._start_request(begin_request.p_namespace, begin_request.p_key, begin_request.p_request, begin_request.p_on_success, begin_request.p_lease, (begin_request.p_nowait OR (begin_request.p_wait IS NOT NULL)))
 UNION ALL
  SELECT b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_request(begin_request.p_namespace, begin_request.p_key, begin_request.p_request, begin_request.p_on_success, begin_request.p_lease, begin_request.p_nowait, begin_request.p_wait) b(outcome, attempt, response)
 LIMIT 1;
END;
REVOKE EXECUTE ON FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.begin_requests(p_namespace text, p_keys text[], p_requests jsonb[], p_lease interval DEFAULT NULL::interval)
 RETURNS TABLE(key text, outcome text, attempt integer, response jsonb)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.begin_requests(text,text[],jsonb[],interval) FROM PUBLIC;

CREATE VIEW hivenet._decision_counters AS
 SELECT c.namespace,
    c.decision,
    c.counter
   FROM hivenet.decision_counter c;

CREATE VIEW hivenet._step_replay AS
 SELECT a.key AS system_serial,
    a.attempt,
    a.fingerprint,
    a.unified_serial,
    a.response
   FROM hivenet.request_attempt a
  WHERE ((a.namespace = 'hivenet.steps'::text) AND (a.state = 'success'::hivenet.step_state));

CREATE OR REPLACE FUNCTION hivenet.begin_step(p_system_serial text, p_request jsonb DEFAULT NULL::jsonb, p_on_success text DEFAULT 'replay'::text, p_unified_serial text DEFAULT NULL::text, p_lease interval DEFAULT NULL::interval, p_nowait boolean DEFAULT false)
 RETURNS TABLE(outcome text, attempt integer, response jsonb)
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT COALESCE(( SELECT 'replayed'::text AS text
            FROM hivenet._decision_counters c
           WHERE ((c.namespace = 'hivenet.steps'::text) AND (c.decision = 'replayed'::text) AND (r.system_serial IS NOT NULL) AND (nextval(c.counter) > 0))
          LIMIT 1), 'replayed'::text) AS "coalesce",
     r.attempt,
     r.response
    FROM hivenet._step_replay r
   WHERE ((r.system_serial = begin_step.p_system_serial) AND (r.fingerprint = hivenet._fingerprint(begin_step.p_request)) AND (begin_step.p_on_success = 'replay'::text) AND (begin_step.p_nowait IS NOT NULL) AND ((begin_step.p_lease IS NULL) OR (begin_step.p_lease > '00:00:00'::interval)) AND ((begin_step.p_unified_serial IS NULL) OR (begin_step.p_unified_serial = r.unified_serial)) AND hivenet._step_in_window(r.system_serial))
 UNION ALL
  SELECT 'started'::text AS text,
     1,
     NULL::jsonb AS jsonb
   WHERE hivenet._start_step(begin_step.p_system_serial, begin_step.p_request, begin_step.p_on_success, begin_step.p_unified_serial, begin_step.p_lease, begin_step.p_nowait)
 UNION ALL
  SELECT b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_step(begin_step.p_system_serial, begin_step.p_request, begin_step.p_on_success, begin_step.p_unified_serial, begin_step.p_lease, begin_step.p_nowait) b(outcome, attempt, response)
 LIMIT 1;
END;
REVOKE EXECUTE ON FUNCTION hivenet.begin_step(text,jsonb,text,text,interval,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.finish_request(p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.finish_request(text,text,integer,boolean,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.finish_requests(p_namespace text, p_keys text[], p_attempts integer[], p_succeeded boolean[], p_responses jsonb[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.finish_requests(text,text[],integer[],boolean[],jsonb[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.own_instances(p_instances text, p_single_primary_formats boolean DEFAULT NULL::boolean, p_force boolean DEFAULT false)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_owned text := hivenet._canonical_instances(p_instances);
    v_single boolean := coalesce(p_single_primary_formats,
                                 hivenet._setting_value('single_primary_formats')::boolean);
    v_scope record;
BEGIN
    IF p_force THEN
        FOR v_scope IN SELECT s.format, s.scope, s.sequence_name FROM hivenet._scopes_by_node() s
                       WHERE hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
                       ORDER BY (s.format).name, s.scope LOOP
            IF v_scope.sequence_name IS NULL THEN
                DELETE FROM hivenet.fallback_draw
                WHERE format = (v_scope.format).name AND scope = v_scope.scope;
            ELSE
                PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
            END IF;
        END LOOP;
    END IF;
    -- The trigger checks each update against the other setting's value of the moment: the
    -- update that owns more goes first, so that no state between owns less than the last.
    IF v_single THEN
        UPDATE hivenet.setting SET value = 'true' WHERE name = 'single_primary_formats'
                                                  AND value <> 'true';
    END IF;
    UPDATE hivenet.setting SET value = v_owned WHERE name = 'owned_instances';
    UPDATE hivenet.setting SET value = v_single::text WHERE name = 'single_primary_formats'
                                                        AND value <> v_single::text;
    RETURN v_owned;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.own_instances(text,boolean,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.prepare_scope(p_format text, p_fields jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_format hivenet.format;
    v_fields jsonb;
    v_values text[];
    v_new jsonb := '{}';  -- scope → its fields, for the scopes without a sequence
    v_drawn text[];
BEGIN
    SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(p_format));
    END IF;
    FOR v_fields IN SELECT f FROM jsonb_array_elements(CASE jsonb_typeof(p_fields)
                                  WHEN 'array' THEN p_fields ELSE jsonb_build_array(p_fields)
                                  END) AS f LOOP
        v_values := hivenet._field_values(v_format, v_fields);
        PERFORM hivenet._check_fields(v_format, v_values, true);
        PERFORM hivenet._check_owned(v_format, v_values);
        v_new := v_new || jsonb_build_object(hivenet._scope_of(v_format, v_values),
                                             hivenet._scope_fields(v_format, v_values));
    END LOOP;
    SELECT coalesce(jsonb_object_agg(n.key, n.value), '{}') INTO v_new
    FROM jsonb_each(v_new) AS n
    WHERE NOT EXISTS (SELECT FROM hivenet.scope s WHERE s.format = p_format AND s.scope = n.key);
    IF v_new = '{}' THEN
        RETURN;
    END IF;
    v_drawn := hivenet._fallback_drawn(v_format);
    FOR v_fields IN SELECT jsonb_build_object('scope', n.key, 'fields', n.value)
                    FROM jsonb_each(v_new) AS n ORDER BY n.key LOOP
        PERFORM hivenet._promote_scope(v_format, v_fields ->> 'scope', v_fields -> 'fields',
                                       v_fields ->> 'scope' = ANY (v_drawn));
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.prepare_scope(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_namespace_policy(p_namespace text, p_retention interval DEFAULT NULL::interval, p_fingerprint text DEFAULT NULL::text, p_on_failure text DEFAULT NULL::text, p_expire_after interval DEFAULT NULL::interval, p_key_min_length integer DEFAULT NULL::integer, p_key_pattern text DEFAULT NULL::text, p_audit_chain boolean DEFAULT NULL::boolean)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_namespace_policy(text,interval,text,text,interval,integer,text,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_request_retention(p_namespace text, p_retention interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_retention IS NULL THEN
        UPDATE hivenet.request_namespace n SET retention = NULL
        WHERE n.namespace = p_namespace;
    END IF;
    PERFORM hivenet.set_namespace_policy(p_namespace, p_retention);  -- checks, tidies
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_request_retention(text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.verify_audit_chain(p_namespace text)
 RETURNS TABLE(attempts bigint, links bigint, head bytea, "position" bigint, key text, attempt integer, problem text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.verify_audit_chain(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.watch_request(p_namespace text, p_key text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    PERFORM hivenet._check_name('key', p_key);
    UPDATE hivenet.request_attempt a SET awaited = true
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.state = 'processing'
      AND a.awaited IS NOT TRUE;
    RETURN 'hivenet_request_finished';
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.watch_request(text,text) FROM PUBLIC;

CREATE TRIGGER format_counters AFTER INSERT ON hivenet.format FOR EACH ROW EXECUTE FUNCTION hivenet._format_counters();

CREATE TRIGGER setting_fallback_formats BEFORE INSERT OR UPDATE ON hivenet.setting FOR EACH ROW WHEN ((new.name = ANY (ARRAY['shared_fallback'::text, 'promote_fallback_scopes'::text]))) EXECUTE FUNCTION hivenet._fallback_formats_check();

CREATE VIEW hivenet._request_start AS
 SELECT NULL::text AS namespace,
    NULL::text AS key,
    NULL::jsonb AS request,
    NULL::interval AS lease
  WHERE false;
CREATE RULE start AS
    ON INSERT TO hivenet._request_start DO INSTEAD  INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, lease, started_at, called_by, application_name, client_addr)  SELECT n.namespace,
            n.key,
            1,
            'processing',
            hivenet._fingerprint(n.request) AS _fingerprint,
            n.lease,
            hivenet.now() AS now,
            hivenet._called_by() AS _called_by,
            NULLIF(current_setting('application_name'::text), ''::text) AS "nullif",
            inet_client_addr() AS inet_client_addr
           FROM ( VALUES (new.namespace,new.key,new.request,new.lease)) n(namespace, key, request, lease)
          WHERE (hivenet._request_start_valid(n.namespace, n.key, n.lease) AND (NOT (EXISTS ( SELECT
                   FROM hivenet.request_namespace p
                  WHERE ((p.namespace = n.namespace) AND ((p.fingerprint IS NOT NULL) OR (p.key_min_length IS NOT NULL) OR (p.key_pattern IS NOT NULL) OR (p.audit_chain IS NOT NULL))))))) ON CONFLICT DO NOTHING
  RETURNING request_attempt.namespace,
    request_attempt.key,
    NULL::jsonb AS jsonb,
    request_attempt.lease;

CREATE VIEW hivenet._step_start AS
 SELECT NULL::text AS system_serial,
    NULL::jsonb AS request,
    NULL::text AS unified_serial,
    NULL::interval AS lease
  WHERE false;
CREATE RULE start AS
    ON INSERT TO hivenet._step_start DO INSTEAD  INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at, called_by, application_name, client_addr)  SELECT 'hivenet.steps',
            n.system_serial,
            1,
            'processing',
            hivenet._fingerprint(n.request) AS _fingerprint,
            n.unified_serial,
            n.lease,
            hivenet.now() AS now,
            hivenet._called_by() AS _called_by,
            NULLIF(current_setting('application_name'::text), ''::text) AS "nullif",
            inet_client_addr() AS inet_client_addr
           FROM ( VALUES (new.system_serial,new.request,new.unified_serial,new.lease)) n(system_serial, request, unified_serial, lease)
          WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease) ON CONFLICT DO NOTHING
  RETURNING request_attempt.key,
    NULL::jsonb AS jsonb,
    request_attempt.unified_serial,
    request_attempt.lease;

CREATE VIEW hivenet.business_time_zone AS
 SELECT s.value AS time_zone,
    ((c.now AT TIME ZONE s.value) - (c.now AT TIME ZONE 'UTC'::text)) AS utc_offset,
    ((c.now AT TIME ZONE s.value))::timestamp(0) without time zone AS local_time
   FROM (hivenet.setting s
     CROSS JOIN ( SELECT hivenet.now() AS now) c)
  WHERE (s.name = 'time_zone'::text);
COMMENT ON VIEW hivenet.business_time_zone IS 'the business time zone of serials and messages, its offset from UTC, the local time now';

CREATE VIEW hivenet.request_attempts AS
 SELECT a.namespace,
    a.key,
    a.attempt,
    (a.state)::text AS state,
    a.started_at,
    a.finished_at,
    a.called_by,
    a.application_name,
    a.client_addr,
    a.resolved_by,
    a.note
   FROM hivenet.request_attempt a;
COMMENT ON VIEW hivenet.request_attempts IS 'every attempt of keyed requests and steps with who began it (role, application, client address), without payloads (audit)';

CREATE VIEW hivenet.request_decisions AS
 SELECT d.namespace,
    d.decision,
    (sum(COALESCE(hivenet._scope_counter_value((s.relname)::text), (0)::bigint)))::bigint AS decisions
   FROM (hivenet.decision_counter d
     JOIN pg_class s ON ((s.oid = (d.counter)::oid)))
  GROUP BY d.namespace, d.decision
  ORDER BY d.namespace, d.decision;
COMMENT ON VIEW hivenet.request_decisions IS 'number of begins per namespace and decision (started, replayed, in_progress, mismatch, rejected, expired), committed or not';

CREATE VIEW hivenet.request_states AS
 SELECT n.namespace,
    (s.state)::text AS state,
    count(l.key) AS requests
   FROM ((( SELECT DISTINCT a.namespace
           FROM hivenet.request_attempt a
          WHERE (a.namespace <> 'hivenet.steps'::text)) n
     CROSS JOIN unnest(enum_range(NULL::hivenet.step_state)) s(state))
     LEFT JOIN ( SELECT DISTINCT ON (a.namespace, a.key) a.namespace,
            a.key,
            a.state
           FROM hivenet.request_attempt a
          WHERE (a.namespace <> 'hivenet.steps'::text)
          ORDER BY a.namespace, a.key, a.attempt DESC) l ON (((l.namespace = n.namespace) AND (l.state = s.state))))
  GROUP BY n.namespace, s.state
  ORDER BY n.namespace, s.state;
COMMENT ON VIEW hivenet.request_states IS 'number of keyed requests per namespace and state (the state of their latest attempt)';

CREATE VIEW hivenet.step_attempt AS
 SELECT a.key AS system_serial,
    a.attempt,
    a.state,
    a.fingerprint,
    a.unified_serial,
    a.lease,
    a.started_at,
    a.finished_at,
    a.response,
    a.error,
    a.resolved_by,
    a.note
   FROM hivenet.request_attempt a
  WHERE (a.namespace = 'hivenet.steps'::text);
COMMENT ON VIEW hivenet.step_attempt IS 'every attempt of every processing step (system serial); the latest attempt is the step''s state';

CREATE VIEW hivenet.step_states AS
 SELECT (s.state)::text AS state,
    count(l.key) AS steps
   FROM (unnest(enum_range(NULL::hivenet.step_state)) s(state)
     LEFT JOIN ( SELECT DISTINCT ON (a.key) a.key,
            a.state
           FROM hivenet.request_attempt a
          WHERE (a.namespace = 'hivenet.steps'::text)
          ORDER BY a.key, a.attempt DESC) l ON ((l.state = s.state)))
  GROUP BY s.state
  ORDER BY s.state;
COMMENT ON VIEW hivenet.step_states IS 'number of steps per state (the state of their latest attempt)';

CREATE VIEW hivenet.stuck_requests AS
 SELECT a.namespace,
    a.key,
    a.attempt,
    a.started_at,
    (a.started_at + hivenet._step_lease(a.lease)) AS lease_expired_at,
    (hivenet.now() - a.started_at) AS processing_for
   FROM hivenet.request_attempt a
  WHERE ((a.namespace <> 'hivenet.steps'::text) AND (a.state = 'processing'::hivenet.step_state) AND ((a.started_at + hivenet._step_lease(a.lease)) < hivenet.now()))
  ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_requests IS 'processing requests past their lease (unknown outcome): resolve with hivenet.resolve_request';

CREATE VIEW hivenet.stuck_steps AS
 SELECT a.key AS system_serial,
    a.attempt,
    a.unified_serial,
    a.started_at,
    (a.started_at + hivenet._step_lease(a.lease)) AS lease_expired_at,
    (hivenet.now() - a.started_at) AS processing_for
   FROM hivenet.request_attempt a
  WHERE ((a.namespace = 'hivenet.steps'::text) AND (a.state = 'processing'::hivenet.step_state) AND ((a.started_at + hivenet._step_lease(a.lease)) < hivenet.now()))
  ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_steps IS 'processing steps past their lease (unknown outcome): resolve with hivenet.resolve_step';

-- Rows (the .data.sql beside this file).
-- Release 0.2.0 from 0.1.0: rows, written by hand, after the code.

-- The counters of the steps' decisions and of those without a namespace of their own, and of
-- every namespace that started keys under 0.1.0, so that its refusals are counted under its
-- own name (decisions.sql).
SELECT hivenet._create_decision_counters('hivenet.steps', false);
SELECT hivenet._create_decision_counters('hivenet.other', false);
SELECT hivenet._create_decision_counters(n.namespace, false)
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps' ORDER BY 1) AS n;

-- Unprepared scopes. 0.1.0 drew every one from its format's cold counter and maintain() gave
-- it a counter of its own; 0.2.0 refuses them (HN002) unless the format opts in to that
-- shared fallback. A database goes on as before for each format whose cold counter issued
-- serials, so that no allocation that worked before the upgrade is refused after it (turn
-- it off once its scopes are prepared: docs/operations.md).
INSERT INTO hivenet.setting (name, value, kind, description)
SELECT s.name, (SELECT coalesce(string_agg(f.name, ',' ORDER BY f.name), '')
                FROM hivenet.format f
                WHERE pg_sequence_last_value(('hivenet.'
                          || quote_ident(hivenet._cold_sequence_name(f.name)))::regclass)
                      IS NOT NULL),
       'text', s.description
FROM (VALUES
    ('shared_fallback',
     'formats (a list such as ''id_service,merchant_trade''; empty: none) whose scopes that '
     'are not prepared draw from the format''s shared fallback counter instead of being '
     'refused (HN002): unique and increasing, never from 1, one capacity for them all'),
    ('promote_fallback_scopes',
     'formats (a list; empty: none) whose scopes that drew from the shared fallback get a '
     'counter of their own from maintain()')) AS s (name, description);

-- A format with one scope (per_second; a custom one whose fields are printed only) has it
-- prepared with the format; here where this database may issue it (after the fallback, when
-- it drew from it: prepare_scope).
SELECT hivenet.prepare_scope(f.name, '{}')
FROM hivenet.format f
WHERE hivenet._one_scope(f)
  AND hivenet._not_owned(f, NULL, hivenet._setting_value('owned_instances'),
                         hivenet._setting_value('single_primary_formats')::boolean) IS NULL
ORDER BY f.name;

-- Grants as a fresh install makes them (privileges.sql), and the generated
-- functions from this database's settings and formats (compile.sql).
SELECT hivenet._grant_roles();
SELECT hivenet._recompile();
