-- Back from release 0.2.0 to 0.1.0.
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
DROP VIEW hivenet.request_decisions;
DROP VIEW hivenet.request_attempts;
DROP VIEW hivenet.business_time_zone;
DROP VIEW hivenet._step_start;
DROP VIEW hivenet._request_start;
DROP TRIGGER setting_fallback_formats ON hivenet.setting;
DROP TRIGGER format_counters ON hivenet.format;
DROP FUNCTION hivenet.watch_request(text,text);
DROP FUNCTION hivenet.verify_audit_chain(text);
DROP FUNCTION hivenet.set_namespace_policy(text,interval,text,text,interval,integer,text,boolean);
DROP FUNCTION hivenet.finish_requests(text,text[],integer[],boolean[],jsonb[]);
DROP FUNCTION hivenet.begin_step(text,jsonb,text,text,interval,boolean);
DROP VIEW hivenet._step_replay;
DROP VIEW hivenet._decision_counters;
DROP FUNCTION hivenet.begin_requests(text,text[],jsonb[],interval);
DROP FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean,interval);
DROP FUNCTION hivenet._wake_waiters(text,text);
DROP FUNCTION hivenet._utf16_units(text);
DROP FUNCTION hivenet._start_chain(text);
DROP FUNCTION hivenet._shown_time(timestamp with time zone);
DROP FUNCTION hivenet._serials_issued();
DROP FUNCTION hivenet._refuse_unprepared(hivenet.format,text[]);
DROP FUNCTION hivenet._raise_key_refused(text,text,integer,text);
DROP FUNCTION hivenet._purge_chained(text,text[]);
DROP FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb,boolean);
DROP FUNCTION hivenet._policy_fingerprint(text,jsonb);
DROP FUNCTION hivenet._one_scope(hivenet.format);
DROP FUNCTION hivenet._new_decision_counter(text,text);
DROP FUNCTION hivenet._make_format_counters(hivenet.format);
DROP FUNCTION hivenet._maintain_request_expiry();
DROP FUNCTION hivenet._issue_unprepared(hivenet.format,text[],integer);
DROP FUNCTION hivenet._has_issued(text);
DROP FUNCTION hivenet._grant_decision_counters();
DROP FUNCTION hivenet._format_counters();
DROP FUNCTION hivenet._fallback_lock_space();
DROP FUNCTION hivenet._fallback_gate_space();
DROP FUNCTION hivenet._fallback_formats_check();
DROP FUNCTION hivenet._fallback_drawn(hivenet.format);
DROP FUNCTION hivenet._expiry_due(text,timestamp with time zone);
DROP FUNCTION hivenet._expire_attempts(text,text[],integer[]);
DROP FUNCTION hivenet._create_decision_counters(text,boolean);
DROP FUNCTION hivenet._count_decision(text,text);
DROP FUNCTION hivenet._check_fingerprint(text);
DROP FUNCTION hivenet._check_batch(text,text[],text,jsonb[],interval);
DROP FUNCTION hivenet._chain_link(bytea,hivenet.request_attempt,text);
DROP FUNCTION hivenet._chain_append(text,text,integer,text);
DROP FUNCTION hivenet._canonical_number(numeric);
DROP FUNCTION hivenet._canonical_json(jsonb);
DROP FUNCTION hivenet._called_by();
DROP FUNCTION hivenet._begin_request(text,text,jsonb,text,interval,boolean,interval);
DROP FUNCTION hivenet._begin_batch_key(text,text,jsonb,interval);
DROP FUNCTION hivenet._begin_attempt_within(text,text,jsonb,text,text,interval,interval);
DROP FUNCTION hivenet._batch_limit();

-- Tables, types and sequences (the .tables.sql beside this file).
-- Back from release 0.2.0 to 0.1.0: tables, types and sequences, written by hand (the code
-- around them is written from the schema files: hivenet_db/tools/revision.py). What 0.1.0
-- cannot hold goes: a namespace's policy but its retention, counts, callers, chains, waiters'
-- marks; expired attempts become failed ones.

-- Unprepared scopes: the scopes that drew from a fallback and have no counter of their own
-- wait for maintain() again, one pending row each.
CREATE TABLE hivenet.scope_pending (
    format text NOT NULL,
    scope  text NOT NULL,
    fields jsonb NOT NULL
);
COMMENT ON TABLE hivenet.scope_pending IS
    'new counter scopes waiting for their own sequence (hivenet.maintain() creates it)';
CREATE INDEX scope_pending_scope ON hivenet.scope_pending (format, scope);
INSERT INTO hivenet.scope_pending (format, scope, fields)
SELECT DISTINCT ON (d.format, d.scope) d.format, d.scope, d.fields
FROM hivenet.fallback_draw d
WHERE NOT EXISTS (SELECT FROM hivenet.scope s WHERE s.format = d.format AND s.scope = d.scope)
ORDER BY d.format, d.scope;
DROP TABLE hivenet.fallback_draw;

-- Decision counts, with their counters.
DO $$
DECLARE
    v_counter regclass;
BEGIN
    FOR v_counter IN SELECT c.counter FROM hivenet.decision_counter c LOOP
        EXECUTE format('DROP SEQUENCE %s', v_counter);
    END LOOP;
END $$;
DROP TABLE hivenet.decision_counter;
DROP SEQUENCE hivenet.decision_counter_number;

-- The audit chain, who began each attempt, waiters' marks.
DROP TABLE hivenet.request_chain;
ALTER TABLE hivenet.request_attempt
    DROP COLUMN called_by,
    DROP COLUMN application_name,
    DROP COLUMN client_addr,
    DROP COLUMN chain_position,
    DROP COLUMN chain_hash,
    DROP COLUMN finish_position,
    DROP COLUMN finish_hash,
    DROP COLUMN awaited;

-- The policy of a namespace: only a retention stays.
DELETE FROM hivenet.request_namespace WHERE retention IS NULL;
ALTER TABLE hivenet.request_namespace
    DROP COLUMN fingerprint,
    DROP COLUMN key_min_length,
    DROP COLUMN key_pattern,
    DROP COLUMN audit_chain,
    DROP COLUMN on_failure,
    DROP COLUMN expire_after,
    ALTER COLUMN retention SET NOT NULL;
COMMENT ON TABLE hivenet.request_namespace IS
    'retention of the finished requests of a namespace, when not the setting request_retention';

-- Expiry: an expired attempt becomes failed (its note says so: the next begin_request retries
-- it, 0.1.0's only policy), and 'expired' leaves type step_state. PostgreSQL cannot drop a
-- value of an enum, so the type is made again without it (what reads it was dropped above)
-- and the column converted (the table is rewritten).
UPDATE hivenet.request_attempt
SET state = 'failed',
    note = concat_ws('; ', note, 'marked failed by the downgrade to 0.1.0 (it had expired)')
WHERE state = 'expired';
DROP TABLE hivenet.request_expiry;
ALTER TYPE hivenet.step_state RENAME TO step_state_0_2_0;
CREATE TYPE hivenet.step_state AS ENUM ('processing', 'success', 'failed');
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN state TYPE hivenet.step_state USING state::text::hivenet.step_state;
DROP TYPE hivenet.step_state_0_2_0;

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
        RETURN hivenet._issue_cold(v_format, v_values, p_count);
    END IF;
    RETURN hivenet._issue(v_seq, v_format, v_values, p_count, format('scope %L', v_scope));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._allocate(text,jsonb,text[],integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_attempt(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_fingerprint bytea := hivenet._fingerprint(p_request);
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt(text,text,jsonb,text,text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_attempt_nowait(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET lock_timeout TO '1ms'
AS $function$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, p_unified_serial,
                                p_lease) b;
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('%s is being started by another transaction right now (nowait)',
                         hivenet._attempt_subject(p_namespace, p_key));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt_nowait(text,text,jsonb,text,text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_request(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._request_start_valid(p_namespace, p_key, p_lease), false)) THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
        PERFORM hivenet._check_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_request(text,text,jsonb,text,interval,boolean) FROM PUBLIC;

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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_step(text,jsonb,text,text,interval,boolean) FROM PUBLIC;

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
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken (until %s)',
                             hivenet._shown(p_namespace), hivenet._shown(p_key), v_expires);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._claim_checked(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._create_cold_counter()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(NEW.name));
    IF NEW.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._cold_sequence_name(NEW.name), 0);
    END IF;
    RETURN NULL;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._create_cold_counter() FROM PUBLIC;

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
    -- began: NULL then too, and the full path finds it (_issue_cold).
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
            v_from := coalesce(pg_sequence_last_value(v_seq), 0);
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
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._issue_cold(p_format hivenet.format, p_values text[], p_count integer)
 RETURNS text[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_scope text := hivenet._scope_of(p_format, p_values);
    v_key integer := hashtext(p_format.name);
    v_seq regclass;
    v_out text[];
BEGIN
    -- A scope's first use (and every use of a parked one): this database must own it
    -- (ownership.sql). Scopes with a sequence of their own passed this when promoted.
    IF hivenet._setting_constant('owned_instances') IS DISTINCT FROM 'all' THEN
        PERFORM hivenet._check_owned(p_format, p_values);
    END IF;
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('the cold counter of unprepared scopes (scope %L was not prepared '
                       'before its first use; prepare scopes at deployment, `hivenet-db '
                       'prepare`: one prepared now starts after every cold value, so it is '
                       'exhausted too until the next period)', v_scope));
            -- Once per scope, not per serial: a busy new scope would pile up rows.
            INSERT INTO hivenet.scope_pending (format, scope, fields)
            SELECT p_format.name, v_scope, hivenet._scope_fields(p_format, p_values)
            WHERE NOT EXISTS (SELECT FROM hivenet.scope_pending s
                              WHERE s.format = p_format.name AND s.scope = v_scope);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
    IF v_seq IS NOT NULL THEN
        RETURN hivenet._issue(v_seq, p_format, p_values, p_count, format('scope %L', v_scope));
    END IF;
    RETURN v_out;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._issue_cold(hivenet.format,text[],integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._latest_issued(p_format text, p_scope text)
 RETURNS timestamp without time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_format hivenet.format := (SELECT f FROM hivenet.format f WHERE f.name = p_format);
    v_pending boolean;
    v_counter text := hivenet._scope_sequence_name(p_format, p_scope);
    v_cold text := hivenet._cold_sequence_name(p_format);
    v_value bigint;
BEGIN
    IF v_format IS NULL THEN
        RETURN NULL;
    END IF;
    v_pending := EXISTS (SELECT FROM hivenet.scope_pending s
                         WHERE s.format = p_format AND s.scope = p_scope);
    IF v_format.clock_unit IS NOT NULL THEN
        v_value := pg_sequence_last_value(hivenet._committed_sequence(
            hivenet._clock_sequence_name(v_counter)));
        IF v_pending THEN
            v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(
                hivenet._clock_sequence_name(v_cold))));
        END IF;
        RETURN CASE WHEN v_value > 0 THEN hivenet._period_start(v_value, v_format.clock_unit) END;
    END IF;
    v_value := pg_sequence_last_value(hivenet._committed_sequence(v_counter));
    IF v_pending THEN
        v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(v_cold)));
    END IF;
    RETURN CASE WHEN v_value > 0
                THEN hivenet._period_start(v_value / v_format.stride, v_format.reset) END;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._latest_issued(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._maintain_scopes()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_pending record;
BEGIN
    FOR v_pending IN
        WITH taken AS (DELETE FROM hivenet.scope_pending RETURNING *)
        SELECT DISTINCT ON (t.format, t.scope) f AS format_row, t.scope, t.fields
        FROM taken t JOIN hivenet.format f ON f.name = t.format
        WHERE hivenet._not_owned(f, t.fields ->> hivenet._node_field(f),
                  hivenet._setting_value('owned_instances'),
                  hivenet._setting_value('single_primary_formats')::boolean) IS NULL
        ORDER BY t.format, t.scope
    LOOP
        PERFORM hivenet._promote_scope(v_pending.format_row, v_pending.scope, v_pending.fields);
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_scopes() FROM PUBLIC;

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
    IF TG_OP = 'INSERT' OR to_regclass('hivenet.scope_pending') IS NULL THEN
        RETURN NEW;
    END IF;
    v_owned := CASE WHEN NEW.name = 'owned_instances' THEN NEW.value
                    ELSE hivenet._setting_value('owned_instances') END;
    v_single := CASE WHEN NEW.name = 'single_primary_formats' THEN NEW.value::boolean
                     ELSE hivenet._setting_value('single_primary_formats')::boolean END;
    SELECT s.format, s.scope, s.node INTO v_scope FROM hivenet._scopes_by_node() s
    WHERE (s.sequence_name IS NULL OR left(s.sequence_name, 4) <> 'off_')
      AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
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
    RETURN NEW;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._ownership_check() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._promote_scope(p_format hivenet.format, p_scope text, p_fields jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, p_scope);
    v_seq regclass;
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format.name));
    -- Another promotion of the scope may have committed while we waited for the lock.
    IF hivenet._committed_sequence(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE SEQUENCE hivenet.%I AS bigint MINVALUE 0 START 0', v_name);
    PERFORM hivenet._grant_counter(v_name);  -- for the fast path, run as the caller
    v_seq := ('hivenet.' || quote_ident(v_name))::regclass;
    PERFORM setval(v_seq, greatest(
        pg_sequence_last_value(
            ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass),
        hivenet._period_index(hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                              p_format.reset) * p_format.stride,
        0), true);
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(v_name, pg_sequence_last_value(hivenet._clock_sequence(
            ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass)));
    END IF;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), v_name)
    ON CONFLICT DO NOTHING;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb) FROM PUBLIC;

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
    IF v_keys IS NOT NULL THEN
        DELETE FROM hivenet.request_attempt d
        WHERE d.namespace = p_namespace AND d.key = ANY (v_keys);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone) FROM PUBLIC;

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
    -- finish's fencing and state change; the note goes on the row it just locked.
    PERFORM hivenet.finish_request(p_namespace, p_key, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
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
          SELECT DISTINCT p.format, p.scope, p.fields, NULL FROM hivenet.scope_pending p) AS s
    JOIN hivenet.format f ON f.name = s.format
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._scopes_by_node() FROM PUBLIC;

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
       AND to_regclass('hivenet.scope_pending') IS NOT NULL THEN
        -- Nested: the tables are looked up only once they exist (not during an install).
        IF EXISTS (SELECT FROM hivenet.scope) OR EXISTS (SELECT FROM hivenet.scope_pending) THEN
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
             WHEN 'request_retention'::text THEN '24 hours'::text
             WHEN 'single_primary_formats'::text THEN 'false'::text
             WHEN 'step_future_tolerance'::text THEN '5 minutes'::text
             WHEN 'step_lease'::text THEN '5 minutes'::text
             WHEN 'step_retention'::text THEN '30 days'::text
             WHEN 'time_zone'::text THEN 'UTC'::text
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._setting_constant(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_request(p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval, p_nowait boolean)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT hivenet._plain_options(p_on_success, p_nowait) THEN
        RETURN false;
    END IF;
    INSERT INTO hivenet._request_start VALUES (p_namespace, p_key, p_request, p_lease);
    RETURN FOUND;
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
    RETURN FOUND;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_step(text,jsonb,text,text,interval,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.begin_request(p_namespace text, p_key text, p_request jsonb DEFAULT NULL::jsonb, p_on_success text DEFAULT 'replay'::text, p_lease interval DEFAULT NULL::interval, p_nowait boolean DEFAULT false)
 RETURNS TABLE(outcome text, attempt integer, response jsonb)
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT 'started'::text AS text,
     1,
     NULL::jsonb AS jsonb
   WHERE hivenet._start_request(begin_request.p_namespace, begin_request.p_key, begin_request.p_request, begin_request.p_on_success, begin_request.p_lease, begin_request.p_nowait)
 UNION ALL
  SELECT b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_request(begin_request.p_namespace, begin_request.p_key, begin_request.p_request, begin_request.p_on_success, begin_request.p_lease, begin_request.p_nowait) b(outcome, attempt, response)
 LIMIT 1;
END;
REVOKE EXECUTE ON FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean) FROM PUBLIC;

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
 SELECT 'replayed'::text AS text,
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
BEGIN
    UPDATE hivenet.request_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN
        PERFORM hivenet._raise_unfinished(p_namespace, p_key, p_attempt, p_succeeded);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.finish_request(text,text,integer,boolean,jsonb) FROM PUBLIC;

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
                DELETE FROM hivenet.scope_pending
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
    v_scope text;
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
        v_scope := hivenet._scope_of(v_format, v_values);
        CONTINUE WHEN EXISTS (SELECT FROM hivenet.scope s
                              WHERE s.format = p_format AND s.scope = v_scope);
        PERFORM hivenet._promote_scope(v_format, v_scope,
                                       hivenet._scope_fields(v_format, v_values));
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.prepare_scope(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_request_retention(p_namespace text, p_retention interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_conflict text;
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    IF p_retention IS NULL THEN
        DELETE FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    ELSE
        PERFORM hivenet._check_interval(format('retention of namespace %s',
                                               hivenet._shown(p_namespace)), p_retention);
        v_conflict := hivenet._interval_conflict('request_retention', p_retention);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('retention %s of namespace %s %s', p_retention,
                                 hivenet._shown(p_namespace), v_conflict);
        END IF;
        INSERT INTO hivenet.request_namespace AS n (namespace, retention)
        VALUES (p_namespace, p_retention)
        ON CONFLICT (namespace) DO UPDATE SET retention = EXCLUDED.retention;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_request_retention(text,interval) FROM PUBLIC;

CREATE TRIGGER format_cold_counter AFTER INSERT ON hivenet.format FOR EACH ROW EXECUTE FUNCTION hivenet._create_cold_counter();

CREATE VIEW hivenet._request_start AS
 SELECT NULL::text AS namespace,
    NULL::text AS key,
    NULL::jsonb AS request,
    NULL::interval AS lease
  WHERE false;
CREATE RULE start AS
    ON INSERT TO hivenet._request_start DO INSTEAD  INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, lease, started_at)  SELECT n.namespace,
            n.key,
            1,
            'processing',
            hivenet._fingerprint(n.request) AS _fingerprint,
            n.lease,
            hivenet.now() AS now
           FROM ( VALUES (new.namespace,new.key,new.request,new.lease)) n(namespace, key, request, lease)
          WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease) ON CONFLICT DO NOTHING
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
    ON INSERT TO hivenet._step_start DO INSTEAD  INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)  SELECT 'hivenet.steps',
            n.system_serial,
            1,
            'processing',
            hivenet._fingerprint(n.request) AS _fingerprint,
            n.unified_serial,
            n.lease,
            hivenet.now() AS now
           FROM ( VALUES (new.system_serial,new.request,new.unified_serial,new.lease)) n(system_serial, request, unified_serial, lease)
          WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease) ON CONFLICT DO NOTHING
  RETURNING request_attempt.key,
    NULL::jsonb AS jsonb,
    request_attempt.unified_serial,
    request_attempt.lease;

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
-- Back from release 0.2.0 to 0.1.0: rows, written by hand, after the code.

-- 0.1.0 draws every unprepared scope from its format's cold counter: no setting says so.
DELETE FROM hivenet.setting WHERE name IN ('shared_fallback', 'promote_fallback_scopes');

-- Grants as a fresh install makes them (privileges.sql), and the generated
-- functions from this database's settings and formats (compile.sql).
SELECT hivenet._grant_roles();
SELECT hivenet._recompile();
