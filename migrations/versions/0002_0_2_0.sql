-- Release 0.2.0 from 0.1.0.
-- Written by `python -m hivenet_db.tools.revision` from the schema files and the
-- hand-written .tables.sql and .data.sql beside this file: do not edit it.
-- Views as PostgreSQL 15 prints them.
-- Bodies are checked when they run, as pg_dump's scripts do.
SET LOCAL check_function_bodies = off;

-- Objects outside schema hivenet that call a function this revision drops and makes again:
-- an application's column defaults (a serial column's DEFAULT hivenet.next_unified_serial(...))
-- are kept, dropped, and set again after the functions are made (restore_dependents.sql); the
-- migrating role must own their tables. Anything else (a view, a function with an SQL body, a
-- constraint, an index, a trigger) would be dropped with them: the upgrade stops, naming it.
DO $$
DECLARE
    v_functions regprocedure[] := ARRAY(
        SELECT to_regprocedure(f) FROM unnest(ARRAY[
            'hivenet._advance(regclass,hivenet.format,bigint,text)',
            'hivenet._allocate(text,jsonb,text[],integer)',
            'hivenet._begin_attempt(text,text,jsonb,text,text,interval)',
            'hivenet._begin_attempt_nowait(text,text,jsonb,text,text,interval)',
            'hivenet._begin_request(text,text,jsonb,text,interval,boolean)',
            'hivenet._begin_step(text,jsonb,text,text,interval,boolean)',
            'hivenet._check_begin_options(text,interval,boolean)',
            'hivenet._check_fields(hivenet.format,text[],boolean)',
            'hivenet._check_owned(hivenet.format,text[])',
            'hivenet._compile_format(text,jsonb,boolean,text)',
            'hivenet._create_cold_counter()',
            'hivenet._default_failover_gap()',
            'hivenet._fast_path_expression(hivenet.format,text,boolean,boolean)',
            'hivenet._field_values(hivenet.format,jsonb)',
            'hivenet._format_constant(text)',
            'hivenet._issue(regclass,hivenet.format,text[],integer,text)',
            'hivenet._issue_cold(hivenet.format,text[],integer)',
            'hivenet._layout_sql(hivenet.format)',
            'hivenet._node_field(hivenet.format)',
            'hivenet._not_owned(hivenet.format,text,text,boolean)',
            'hivenet._plain_options(text,boolean)',
            'hivenet._promote_scope(hivenet.format,text,jsonb)',
            'hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone)',
            'hivenet._request_start_valid(text,text,interval)',
            'hivenet._scope_fields(hivenet.format,text[])',
            'hivenet._scope_of(hivenet.format,text[])',
            'hivenet._scopes_by_node()',
            'hivenet._serial_field(text,text,text)',
            'hivenet._serial_time(text,text)',
            'hivenet._start_request(text,text,jsonb,text,interval,boolean)',
            'hivenet._start_step(text,jsonb,text,text,interval,boolean)',
            'hivenet.begin_request(text,text,jsonb,text,interval,boolean)',
            'hivenet.begin_step(text,jsonb,text,text,interval,boolean)',
            'hivenet.call_chain(text)',
            'hivenet.claim(text,text,boolean)',
            'hivenet.claim_interface_serial(text,text,text,boolean)',
            'hivenet.define_format(text,jsonb,boolean,text)',
            'hivenet.fence_failover(bigint,boolean)',
            'hivenet.finish_request(text,text,integer,boolean,jsonb)',
            'hivenet.finish_step(text,integer,boolean,jsonb)',
            'hivenet.next_interface_serial(text,text,text,text)',
            'hivenet.next_serial(text,jsonb)',
            'hivenet.next_serials(text,jsonb,integer)',
            'hivenet.next_system_serial(text,text,text)',
            'hivenet.next_unified_serial(text,text,text)',
            'hivenet.own_instances(text,boolean,boolean)',
            'hivenet.parse_serial(text,text)',
            'hivenet.prepare_scope(text,jsonb)',
            'hivenet.register_module(text,text,text)',
            'hivenet.register_system(text,text)',
            'hivenet.resolve_request(text,text,integer,boolean,text,jsonb)',
            'hivenet.resolve_step(text,integer,boolean,text,jsonb)',
            'hivenet.set_claim_expiry(text,interval)',
            'hivenet.set_request_retention(text,interval)']::text[]) AS f);
    v_blocking text;
    v_kept jsonb;
    v_default record;
BEGIN
    SELECT string_agg(DISTINCT coalesce(  -- a view, rather than its rule
               (SELECT pg_describe_object('pg_class'::regclass, r.ev_class, 0)
                FROM pg_rewrite r WHERE d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid),
               pg_describe_object(d.classid, d.objid, d.objsubid)), '; ')
    INTO v_blocking
    FROM pg_depend d
    WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (v_functions)
      AND d.deptype = 'n' AND d.classid <> 'pg_attrdef'::regclass
      AND (CASE d.classid
               WHEN 'pg_proc'::regclass THEN
                   (SELECT p.pronamespace FROM pg_proc p WHERE p.oid = d.objid)
               WHEN 'pg_rewrite'::regclass THEN
                   (SELECT c.relnamespace FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
                    WHERE r.oid = d.objid)
               WHEN 'pg_trigger'::regclass THEN
                   (SELECT c.relnamespace FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                    WHERE t.oid = d.objid)
               WHEN 'pg_constraint'::regclass THEN
                   (SELECT k.connamespace FROM pg_constraint k WHERE k.oid = d.objid)
               WHEN 'pg_class'::regclass THEN
                   (SELECT c.relnamespace FROM pg_class c WHERE c.oid = d.objid)
           END) IS DISTINCT FROM 'hivenet'::regnamespace;
    IF v_blocking IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'dependent_objects_still_exist',
            MESSAGE = format('this upgrade makes functions of schema hivenet again, and %s '
                             'calls one of them: drop it before the upgrade and make it again '
                             'after', v_blocking);
    END IF;
    FOR v_default IN
        SELECT a.adrelid::regclass AS relation, c.relowner, t.attname,
               pg_get_expr(a.adbin, a.adrelid) AS expression
        FROM pg_depend d
        JOIN pg_attrdef a ON d.classid = 'pg_attrdef'::regclass AND a.oid = d.objid
        JOIN pg_attribute t ON t.attrelid = a.adrelid AND t.attnum = a.adnum
        JOIN pg_class c ON c.oid = a.adrelid
        WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (v_functions)
          AND c.relnamespace <> 'hivenet'::regnamespace
        ORDER BY 1, 3
    LOOP
        IF NOT pg_has_role(v_default.relowner, 'USAGE') THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = format('the default of column %s of table %s calls a function of '
                                 'schema hivenet that this upgrade makes again: run the upgrade '
                                 'as a member of the table''s owner, %s, or drop the default '
                                 'before it and set it again after', v_default.attname,
                                 v_default.relation, v_default.relowner::regrole);
        END IF;
        v_kept := coalesce(v_kept, '[]') || jsonb_build_object('relation', v_default.relation,
            'column', v_default.attname, 'expression', v_default.expression);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', v_default.relation,
                       v_default.attname);
    END LOOP;
    PERFORM set_config('hivenet.revision_kept_defaults', coalesce(v_kept, '[]')::text, true);
END $$;

-- Code that goes, or changes what CREATE OR REPLACE cannot.
DROP VIEW hivenet.stuck_steps;
DROP VIEW hivenet.stuck_requests;
DROP VIEW hivenet.step_states;
DROP VIEW hivenet.step_attempt;
DROP VIEW hivenet.request_states;
DROP VIEW hivenet.interface_calls_per_day;
DROP VIEW hivenet.interface_calls;
DROP VIEW hivenet._step_start;
DROP VIEW hivenet._request_start;
DROP TRIGGER format_cold_counter ON hivenet.format;
DROP FUNCTION hivenet.set_request_retention(text,interval);
DROP FUNCTION hivenet.set_claim_expiry(text,interval);
DROP FUNCTION hivenet.resolve_step(text,integer,boolean,text,jsonb);
DROP FUNCTION hivenet.resolve_request(text,text,integer,boolean,text,jsonb);
DROP FUNCTION hivenet.register_system(text,text);
DROP FUNCTION hivenet.register_module(text,text,text);
DROP FUNCTION hivenet.prepare_scope(text,jsonb);
DROP FUNCTION hivenet.own_instances(text,boolean,boolean);
DROP FUNCTION hivenet.next_unified_serial(text,text,text);
DROP FUNCTION hivenet.next_system_serial(text,text,text);
DROP FUNCTION hivenet.next_serials(text,jsonb,integer);
DROP FUNCTION hivenet.next_serial(text,jsonb);
DROP FUNCTION hivenet.next_interface_serial(text,text,text,text);
DROP FUNCTION hivenet.finish_step(text,integer,boolean,jsonb);
DROP FUNCTION hivenet.finish_request(text,text,integer,boolean,jsonb);
DROP FUNCTION hivenet.fence_failover(bigint,boolean);
DROP FUNCTION hivenet.define_format(text,jsonb,boolean,text);
DROP FUNCTION hivenet.claim_interface_serial(text,text,text,boolean);
DROP FUNCTION hivenet.claim(text,text,boolean);
DROP FUNCTION hivenet.call_chain(text);
DROP FUNCTION hivenet.begin_step(text,jsonb,text,text,interval,boolean);
DROP VIEW hivenet._step_replay;
DROP FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean);
DROP FUNCTION hivenet._start_step(text,jsonb,text,text,interval,boolean);
DROP FUNCTION hivenet._start_request(text,text,jsonb,text,interval,boolean);
DROP FUNCTION hivenet._serial_time(text,text);
DROP FUNCTION hivenet._serial_field(text,text,text);
DROP FUNCTION hivenet.parse_serial(text,text);
DROP FUNCTION hivenet._scopes_by_node();
DROP FUNCTION hivenet._scope_of(hivenet.format,text[]);
DROP FUNCTION hivenet._scope_fields(hivenet.format,text[]);
DROP FUNCTION hivenet._request_start_valid(text,text,interval);
DROP FUNCTION hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone);
DROP FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb);
DROP FUNCTION hivenet._plain_options(text,boolean);
DROP FUNCTION hivenet._not_owned(hivenet.format,text,text,boolean);
DROP FUNCTION hivenet._node_field(hivenet.format);
DROP FUNCTION hivenet._layout_sql(hivenet.format);
DROP FUNCTION hivenet._issue_cold(hivenet.format,text[],integer);
DROP FUNCTION hivenet._issue(regclass,hivenet.format,text[],integer,text);
DROP FUNCTION hivenet._format_constant(text);
DROP FUNCTION hivenet._field_values(hivenet.format,jsonb);
DROP FUNCTION hivenet._fast_path_expression(hivenet.format,text,boolean,boolean);
DROP FUNCTION hivenet._default_failover_gap();
DROP FUNCTION hivenet._create_cold_counter();
DROP FUNCTION hivenet._compile_format(text,jsonb,boolean,text);
DROP FUNCTION hivenet._check_owned(hivenet.format,text[]);
DROP FUNCTION hivenet._check_fields(hivenet.format,text[],boolean);
DROP FUNCTION hivenet._check_begin_options(text,interval,boolean);
DROP FUNCTION hivenet._begin_step(text,jsonb,text,text,interval,boolean);
DROP FUNCTION hivenet._begin_request(text,text,jsonb,text,interval,boolean);
DROP FUNCTION hivenet._begin_attempt_nowait(text,text,jsonb,text,text,interval);
DROP FUNCTION hivenet._begin_attempt(text,text,jsonb,text,text,interval);
DROP FUNCTION hivenet._allocate(text,jsonb,text[],integer);
DROP FUNCTION hivenet._advance(regclass,hivenet.format,bigint,text);

-- Tables, types and sequences (the .tables.sql beside this file).
-- Release 0.2.0 from 0.1.0: tables, types and sequences, written by hand (the code around them
-- is written from the schema files: hivenet_db/tools/revision.py).

-- The policy of a namespace (set_namespace_policy): fingerprints, key rules, the audit chain,
-- the failure policy, expiry and how long failures are kept.
ALTER TABLE hivenet.request_namespace
    ALTER COLUMN retention DROP NOT NULL,
    ADD COLUMN fingerprint text,
    ADD COLUMN key_min_length integer,
    ADD COLUMN key_pattern text,
    ADD COLUMN audit_chain boolean,
    ADD COLUMN on_failure text,
    ADD COLUMN expire_after interval,
    ADD COLUMN failure_retention interval,
    ADD COLUMN keep_raw_request boolean;
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules, failure policy; NULL is the default';

-- Who began each attempt, its links in the namespace's audit chain, whether a client waits
-- for its outcome (watch_request), and the client's bytes where they are kept.
ALTER TABLE hivenet.request_attempt
    ADD COLUMN called_by text,
    ADD COLUMN application_name text,
    ADD COLUMN client_addr inet,
    ADD COLUMN chain_position bigint,
    ADD COLUMN chain_hash bytea,
    ADD COLUMN finish_position bigint,
    ADD COLUMN finish_hash bytea,
    ADD COLUMN awaited boolean,
    ADD COLUMN raw_request bytea;

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

-- Numeric formats (time_ids.sql): how far their time number is shifted left.
ALTER TABLE hivenet.format ADD COLUMN time_shift integer;

-- What a format does when the clock is behind the latest instant it issued (clock_policy.sql).
CREATE TABLE hivenet.clock_policy (
    format          text PRIMARY KEY REFERENCES hivenet.format (name),
    on_clock_behind text NOT NULL CHECK (on_clock_behind IN ('continue', 'wait', 'refuse')),
    max_wait        interval,
    CHECK ((on_clock_behind = 'wait') = (max_wait IS NOT NULL))
);
COMMENT ON TABLE hivenet.clock_policy IS
    'what a format does when the clock is behind the latest instant it issued '
    '(set_clock_policy); a format without a row continues';
-- The fence takes itself (failover.sql): the last timeline fenced, as a sequence (set in the
-- .data.sql), fences applied by an allocation, and the allocation rates maintain() samples.
CREATE SEQUENCE hivenet.fenced_timeline AS integer MINVALUE 0;
ALTER TABLE hivenet.failover_fence
    DROP CONSTRAINT failover_fence_applied_by_check,
    ADD CONSTRAINT failover_fence_applied_by_check
        CHECK (applied_by IN ('install', 'allocation', 'command', 'maintain'));
CREATE TABLE hivenet.allocation_rate (
    format        text PRIMARY KEY,
    timeline      integer NOT NULL,
    sampled_at    timestamptz NOT NULL,
    period_start  timestamp NOT NULL,
    issued        bigint,  -- NULL after a fence by command: no rate from it to the next
    day           date NOT NULL,
    peak          float8 NOT NULL DEFAULT 0,  -- serials a second, highest of day
    previous_peak float8 NOT NULL DEFAULT 0   -- ... of the day before day
);
COMMENT ON TABLE hivenet.allocation_rate IS
    'serials a second of each format, highest between two maintain() runs, today and yesterday';

-- Code, in dependency order.
CREATE OR REPLACE FUNCTION hivenet._advance(p_seq regclass, p_format hivenet.format, p_period bigint, p_scope text)
 RETURNS bigint
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_value bigint;
    v_period bigint;
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_seq::oid::integer);
    BEGIN
        v_value := nextval(p_seq);
        IF v_value / p_format.stride < p_period THEN
            PERFORM setval(p_seq, p_period * p_format.stride, true);
            v_value := nextval(p_seq);
        END IF;
        v_period := v_value / p_format.stride;
        IF v_value % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            IF NOT p_format.borrow_next_period THEN
                -- Park the counter just past capacity so failing calls never spill over.
                PERFORM setval(p_seq, v_period * p_format.stride + p_format.capacity, true);
                RAISE EXCEPTION USING ERRCODE = 'HN010',
                    MESSAGE = format('format %s: all %s serials of %s %s are used',
                                     p_format.name, p_format.capacity, p_scope,
                                     CASE p_format.reset WHEN 'never' THEN '(it never resets)'
                                     ELSE format('for the %s starting %s', p_format.reset,
                                         hivenet._period_start(v_period, p_format.reset)) END);
            END IF;
            PERFORM setval(p_seq, (v_period + 1) * p_format.stride, true);
            v_value := nextval(p_seq);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
    RETURN v_value;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._advance(regclass,hivenet.format,bigint,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[], p_count integer, p_numeric boolean DEFAULT false)
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
    IF current_setting('hivenet.timeline_checked', true) IS DISTINCT FROM 'true' THEN
        PERFORM hivenet._check_timeline();
    END IF;
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
    IF (v_format.time_shift IS NOT NULL) <> p_numeric THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format(CASE WHEN p_numeric
            THEN 'format %s is a text format: next_serial issues it'
            ELSE 'format %s is numeric (a bigint): next_time_id issues it' END, v_format.name);
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
REVOKE EXECUTE ON FUNCTION hivenet._allocate(text,jsonb,text[],integer,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._batch_limit()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT 1000;
END;
REVOKE EXECUTE ON FUNCTION hivenet._batch_limit() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_attempt(p_namespace text, p_policy hivenet.request_namespace, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_raw_request bytea, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_fingerprint bytea;
    v_attempt integer := 1;
    v_last hivenet.request_attempt;
BEGIN
    -- The fingerprint by the policy (fingerprints.sql); NULL, the default, inlined.
    IF p_policy.fingerprint IS NULL THEN
        v_fingerprint := hivenet._fingerprint(p_request);
    ELSE
        BEGIN
            v_fingerprint := hivenet._policy_fingerprint(p_policy.fingerprint, p_request);
        EXCEPTION WHEN SQLSTATE 'HN001' THEN  -- a number no double holds: the key is refused
            PERFORM hivenet._count_decision(p_namespace, 'rejected');
            RAISE;
        END;
    END IF;
    -- Optimistic: most keys are new, so start the attempt first; nothing written (after
    -- waiting for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        IF hivenet._start_attempt(p_namespace, p_key, v_attempt, v_fingerprint,
                                  p_unified_serial, p_lease,
                                  coalesce(p_policy.audit_chain, false),
                                  CASE WHEN p_policy.keep_raw_request THEN p_raw_request END)
        THEN
            outcome := 'started';
            attempt := v_attempt;
            RETURN;
        END IF;
        SELECT * INTO v_last FROM hivenet.request_attempt a
        WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
        IF NOT FOUND THEN
            v_attempt := 1;  -- removed by maintain() in between: the key is new again
        -- Another request: by the policy's fingerprint and by the default one, the finest
        -- (a key begun before a change of policy still matches the very same request).
        ELSIF v_last.fingerprint <> v_fingerprint
              AND (p_policy.fingerprint IS NULL
                   OR v_last.fingerprint <> hivenet._fingerprint(p_request)) THEN
            PERFORM hivenet._count_decision(p_namespace, 'mismatch');
            RAISE EXCEPTION USING ERRCODE = 'HN032',
                MESSAGE = format('%s was begun with another request (fingerprint %s, this one '
                                 '%s)', hivenet._attempt_subject(p_namespace, p_key),
                                 encode(v_last.fingerprint, 'hex'), encode(v_fingerprint, 'hex'));
        ELSIF v_last.state = 'processing'
              AND NOT coalesce(v_last.started_at + p_policy.expire_after <= hivenet.now(),
                               false) THEN
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
        ELSIF p_policy.on_failure = 'final' THEN
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
        -- Next round: start that attempt (waiting again if someone is starting it too).
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt(text,hivenet.request_namespace,text,jsonb,text,text,interval,bytea) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_attempt_within(p_namespace text, p_policy hivenet.request_namespace, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_raw_request bytea, p_wait interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET lock_timeout TO '1ms'
AS $function$
DECLARE
    -- In whole milliseconds, at least 1 (0 turns the timeout off), at most what it takes.
    v_timeout bigint := coalesce(least(greatest(ceil(extract(epoch FROM p_wait) * 1000), 1),
                                       2147483647), 1);
    v_context text;
BEGIN
    LOOP
        PERFORM set_config('lock_timeout', v_timeout || 'ms', true);
        BEGIN
            SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
            FROM hivenet._begin_attempt(p_namespace, p_policy, p_key, p_request,
                                        p_on_success, p_unified_serial, p_lease,
                                        p_raw_request) b;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            GET STACKED DIAGNOSTICS v_context = PG_EXCEPTION_CONTEXT;
            EXIT WHEN hivenet._waited_for_row(v_context, 'request_attempt');
        END;
        v_timeout := least(v_timeout * 2, 2147483647);
    END LOOP;
    PERFORM hivenet._count_decision(p_namespace, 'in_progress');
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('%s is being started by another transaction %s',
                         hivenet._attempt_subject(p_namespace, p_key),
                         CASE WHEN p_wait IS NULL THEN 'right now (nowait)'
                              ELSE format('that did not end within wait %s', p_wait) END);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt_within(text,hivenet.request_namespace,text,jsonb,text,text,interval,bytea,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_batch(p_step boolean, p_namespace text, p_keys text[], p_requests jsonb[], p_unified_serial text, p_lease interval)
 RETURNS TABLE(key text, outcome text, attempt integer, response jsonb)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    v_policy hivenet.request_namespace;
    v_started text[] := '{}';
    v_outcomes text[];
    v_attempts integer[];
    v_responses jsonb[];
    v_key text;
    v_request jsonb;
    v_position bigint;
    v_decided record;
BEGIN
    PERFORM hivenet._check_batch(p_step, p_namespace, p_keys, 'requests', p_requests, p_lease);
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF NOT hivenet._starts_apart(v_policy) THEN
        WITH started AS (
            INSERT INTO hivenet._new_attempt AS a
            SELECT p_namespace, k.key, 1, hivenet._fingerprint(k.request), p_unified_serial,
                   p_lease
            FROM unnest(p_keys, p_requests) AS k (key, request)
            WHERE hivenet._start_valid(p_step, p_namespace, k.key, p_unified_serial, p_lease)
              AND hivenet._key_allowed(v_policy, k.key)
            ORDER BY k.key
            RETURNING a.key)
        SELECT coalesce(array_agg(s.key), '{}') INTO v_started FROM started s;
        PERFORM hivenet._count_decision(p_namespace, 'started') FROM unnest(v_started);
    END IF;
    -- Every other key by the full path, in sort order too; the outcomes by the keys'
    -- positions (arrays of the batch's length: an element set in an empty array would start
    -- the array at that position).
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
        FROM hivenet._begin_batch_key(p_step, p_namespace, v_key, v_request, p_unified_serial,
                                      p_lease) b;
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
REVOKE EXECUTE ON FUNCTION hivenet._begin_batch(boolean,text,text[],jsonb[],text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_batch_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_unified_serial text, p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_key(p_step, p_namespace, p_key, p_request, 'replay', p_unified_serial,
                            p_lease, false, NULL, NULL) b;
EXCEPTION WHEN SQLSTATE 'HN030' OR SQLSTATE 'HN032' OR SQLSTATE 'HN001' OR SQLSTATE 'HN002'
               OR SQLSTATE 'HN021' THEN
    outcome := CASE SQLSTATE WHEN 'HN030' THEN 'in_progress' WHEN 'HN032' THEN 'mismatch'
                             ELSE 'rejected' END;
    response := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_batch_key(boolean,text,text,jsonb,text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._begin_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, p_wait interval, p_raw_request bytea, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_policy hivenet.request_namespace;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(hivenet._start_valid(p_step, p_namespace, p_key, p_unified_serial,
                                              p_lease), false)) THEN
        BEGIN
            IF p_step THEN
                PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait, p_wait);
                PERFORM hivenet._check_step(p_namespace, p_key, p_unified_serial);
            ELSE
                PERFORM hivenet._check_name('namespace', p_namespace);
                PERFORM hivenet._check_name('key', p_key);
                PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait, p_wait);
            END IF;
        EXCEPTION WHEN SQLSTATE 'HN001' OR SQLSTATE 'HN002' OR SQLSTATE 'HN021' THEN
            PERFORM hivenet._count_decision(p_namespace, 'rejected');  -- decisions.sql
            RAISE;
        END;
    END IF;
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF NOT hivenet._key_allowed(v_policy, p_key) THEN
        PERFORM hivenet._raise_key_refused(p_namespace, p_key, v_policy.key_min_length,
                                           v_policy.key_pattern);
    END IF;
    IF p_nowait OR p_wait IS NOT NULL THEN  -- nowait: no wait (NULL), whatever p_wait says
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_within(p_namespace, v_policy, p_key, p_request,
                                           p_on_success, p_unified_serial, p_lease,
                                           p_raw_request,
                                           CASE WHEN NOT p_nowait THEN p_wait END) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, v_policy, p_key, p_request, p_on_success,
                                    p_unified_serial, p_lease, p_raw_request) b;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_key(boolean,text,text,jsonb,text,text,interval,boolean,interval,bytea) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._check_batch(p_step boolean, p_namespace text, p_keys text[], p_what text, p_values jsonb[], p_lease interval)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_batch text := CASE WHEN p_step THEN 'the batch of steps'
                         ELSE format('the batch in namespace %s', hivenet._shown(p_namespace))
                    END;
    v_keys text := CASE WHEN p_step THEN 'system serials' ELSE 'keys' END;
    v_duplicate text;
BEGIN
    IF NOT p_step THEN  -- a batch of steps: begin_steps' and finish_steps' own namespace
        PERFORM hivenet._check_name('namespace', p_namespace);
    END IF;
    IF p_keys IS NULL OR p_values IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s of %s is NULL', CASE WHEN p_keys IS NULL THEN v_keys
                                                      ELSE p_what END, v_batch);
    END IF;
    IF array_ndims(p_keys) > 1 OR array_ndims(p_values) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s (%s dimensions) and %s (%s dimensions) of %s are not both '
                             'one-dimensional arrays', v_keys, array_ndims(p_keys), p_what,
                             array_ndims(p_values), v_batch);
    END IF;
    IF cardinality(p_keys) <> cardinality(p_values) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s has %s %s but %s %s', v_batch, cardinality(p_keys), v_keys,
                             cardinality(p_values), p_what);
    END IF;
    IF cardinality(p_keys) > hivenet._batch_limit() THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s has %s %s, more than %s', v_batch, cardinality(p_keys), v_keys,
                             hivenet._batch_limit());
    END IF;
    IF array_position(p_keys, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s of %s is NULL', CASE WHEN p_step THEN 'system serial'
                                                         ELSE 'key' END,
                             array_position(p_keys, NULL), v_batch);
    END IF;
    SELECT k.key INTO v_duplicate FROM unnest(p_keys) AS k (key)
    GROUP BY k.key HAVING count(*) > 1 ORDER BY min(k.key) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is given more than once in %s',
                             CASE WHEN p_step THEN 'system serial' ELSE 'key' END,
                             hivenet._shown(v_duplicate), v_batch);
    END IF;
    PERFORM hivenet._check_interval('lease', p_lease);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_batch(boolean,text,text[],text,jsonb[],interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_begin_options(p_on_success text, p_lease interval, p_nowait boolean, p_wait interval)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_on_success IS NULL OR p_on_success NOT IN ('replay', 'reject') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('on_success %s is neither ''replay'' nor ''reject''',
                             hivenet._shown(p_on_success));
    END IF;
    PERFORM hivenet._check_interval('lease', p_lease);
    IF p_nowait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'nowait is NULL';
    END IF;
    IF NOT p_wait BETWEEN interval '0' AND hivenet._longest_interval() THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('wait %s is not between 0 and %s', p_wait,
                             hivenet._longest_interval());
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_begin_options(text,interval,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_fields(p_format hivenet.format, p_values text[], p_key_only boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_seg jsonb;
    v_index integer := 0;
    v_problem text;
BEGIN
    FOR v_seg IN SELECT s FROM jsonb_array_elements(p_format.segments) AS s WHERE s ? 'field'
    LOOP
        v_index := v_index + 1;
        CONTINUE WHEN p_key_only AND p_values[v_index] IS NULL
                      AND v_index <> ALL (coalesce(p_format.key_fields, ARRAY[v_index]));
        v_problem := hivenet._field_problem(v_seg, p_values[v_index]);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format(
                'format %s: field %s %s', p_format.name, v_seg ->> 'field', v_problem);
        END IF;
    END LOOP;
    IF cardinality(p_values) <> cardinality(p_format.field_names) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s takes %s field values (%s), not %s', p_format.name,
                             cardinality(p_format.field_names),
                             array_to_string(p_format.field_names, ', '), cardinality(p_values));
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_fields(hivenet.format,text[],boolean) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._check_name(p_what text, p_value text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_value IS NULL OR p_value = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is empty', p_what, hivenet._shown(p_value));
    ELSIF length(p_value) > 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is longer than 255 characters', p_what,
                             hivenet._shown(p_value));
    ELSIF p_value ~ '[\x01-\x1f\x7f-\x9f]' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s contains a control character', p_what,
                             hivenet._shown(p_value));
    ELSIF p_value ~ hivenet._unseen_characters() THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s contains an invisible character (a Unicode format or '
                             'separator character, shown as its code)', p_what,
                             hivenet._shown(p_value));
    ELSIF p_what LIKE '%namespace' AND left(p_value, 8) = 'hivenet.' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s is reserved (namespaces starting with ''hivenet.'' '
                             'are the library''s own)', hivenet._shown(p_value));
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_name(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_owned(p_format hivenet.format, p_values text[])
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_problem text := hivenet._not_owned(p_format,
        p_values[array_position(p_format.field_names, hivenet._node_field(p_format))],
        hivenet._ownership_setting('owned_instances'),
        hivenet._ownership_setting('single_primary_formats')::boolean);
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002', MESSAGE = v_problem;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_owned(hivenet.format,text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_owned_serial(p_format text, p_serial text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_owned text := hivenet._ownership_setting('owned_instances');
    v_instance text;
BEGIN
    IF v_owned = 'all' OR NOT hivenet._ownership_setting('check_received_instances')::boolean
    THEN
        RETURN;
    END IF;
    -- Cut by the format's layout (compile.sql); parse_serial for a format not yet generated.
    v_instance := coalesce(hivenet._serial_field(p_format, p_serial, 'instance'),
                           hivenet.parse_serial(p_serial, p_format) ->> 'instance');
    IF NOT hivenet._instance_in(v_instance, v_owned) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('%s serial %s carries instance %s, which this database does not '
                             'own (it owns %s): send it, and every retry of it, to the shard '
                             'that owns that instance (setting check_received_instances)',
                             p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_owned_serial(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_policy(p_policy hivenet.request_namespace)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_retention interval := coalesce(p_policy.retention,
                                     hivenet._setting_value('request_retention')::interval);
BEGIN
    IF p_policy.failure_retention > v_retention THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failure_retention %s of namespace %s is longer than its retention '
                             '%s: a failure is kept no longer than a success',
                             p_policy.failure_retention, hivenet._shown(p_policy.namespace),
                             v_retention);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_policy(hivenet.request_namespace) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_step(p_namespace text, p_system_serial text, p_unified_serial text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_day date;
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s is not the steps'' namespace ''hivenet.steps''',
                             hivenet._shown(p_namespace));
    END IF;
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_step(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._check_timeline()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN;  -- a standby: drawing fails as read-only, and nothing is marked
    END IF;
    IF NOT hivenet._fenced() THEN
        PERFORM hivenet._fence(hivenet._failover_gap(), false, 'allocation');
    END IF;
    PERFORM set_config('hivenet.timeline_checked', 'true', false);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_timeline() FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._clock_behind(p_format text, p_latest timestamp without time zone, p_local timestamp without time zone)
 RETURNS timestamp without time zone
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_policy hivenet.clock_policy := (SELECT p FROM hivenet.clock_policy p
                                      WHERE p.format = p_format);
    v_budget interval := least(v_policy.max_wait, hivenet._timeout_left());
    v_local timestamp := p_local;
    v_waited interval := interval '0';
    v_step interval;
    v_started timestamptz;
BEGIN
    IF v_policy IS NULL OR v_policy.on_clock_behind = 'continue' THEN
        RETURN p_local;
    END IF;
    WHILE v_local < p_latest LOOP
        IF v_policy.on_clock_behind = 'refuse' OR p_latest - v_local > v_budget - v_waited THEN
            RAISE EXCEPTION USING ERRCODE = 'HN011', MESSAGE = format(
                'format %s: the clock (%s) is %s behind the latest instant the format issued '
                '(%s); its clock policy is %s (hivenet.set_clock_policy)', p_format, v_local,
                p_latest - v_local, p_latest, CASE v_policy.on_clock_behind
                WHEN 'refuse' THEN '''refuse'''
                ELSE format('''wait'', at most %s (%s), and %s is waited already',
                            date_trunc('milliseconds', v_budget),
                            CASE WHEN v_budget < v_policy.max_wait
                                 THEN 'what the statement''s timeout leaves'
                                 ELSE 'its max_wait' END,
                            date_trunc('milliseconds', v_waited)) END);
        END IF;
        v_step := least(p_latest - v_local, interval '1 second');
        v_started := clock_timestamp();
        PERFORM pg_sleep(extract(epoch FROM v_step));
        -- At least the sleep; more when the wall clock says so (a step forward ends sooner).
        v_waited := v_waited + greatest(v_step, clock_timestamp() - v_started);
        v_local := hivenet.now() AT TIME ZONE hivenet._setting_constant('time_zone');
    END LOOP;
    RETURN v_local;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._clock_behind(text,timestamp without time zone,timestamp without time zone) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._compile_format(p_name text, p_segments jsonb, p_borrow_next_period boolean, p_description text)
 RETURNS hivenet.format
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_row hivenet.format;
    v_segments jsonb := '[]';
    v_seg jsonb;
    v_kind text;
    v_width integer;
    v_charset text;
    v_time record;
    v_finest text := 'never';
    v_headroom bigint;
    v_regexes text[] := '{}';
    v_pattern text := '';  -- to_char pattern of the segments read so far
    v_unknown text;
    v_printed boolean;
    v_counter boolean;
    v_keys integer[] := '{}';
    v_numeric boolean;   -- a bigint (a seq_bits segment), not text
    v_bits integer;
    v_position integer := 0;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,30}$' THEN
        PERFORM hivenet._format_error(p_name, 'name must match [a-z][a-z0-9_]{0,30}');
    END IF;
    IF jsonb_typeof(p_segments) IS DISTINCT FROM 'array' OR jsonb_array_length(p_segments) = 0 THEN
        PERFORM hivenet._format_error(p_name, 'segments must be a non-empty JSON array');
    END IF;
    v_numeric := EXISTS (SELECT FROM jsonb_array_elements(p_segments) AS s
                         WHERE jsonb_typeof(s) = 'object' AND s ? 'seq_bits');
    v_row.name := p_name;
    v_row.length := 0;
    v_row.field_names := '{}';
    v_row.field_min := '{}';
    v_row.field_max := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_segments) LOOP
        v_position := v_position + 1;
        IF jsonb_typeof(v_seg) <> 'object' THEN
            PERFORM hivenet._format_error(p_name, format('segment %s is not an object',
                                                         hivenet._shown(v_seg::text)));
        END IF;
        SELECT k INTO v_kind FROM jsonb_object_keys(v_seg) AS k
        WHERE k IN ('field', 'literal', 'time', 'seq', 'seq_bits');
        IF v_kind IS NULL
           OR (SELECT count(*) FROM jsonb_object_keys(v_seg) AS k
               WHERE k IN ('field', 'literal', 'time', 'seq', 'seq_bits')) <> 1 THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s needs exactly one of the kinds field, literal, time, seq, seq_bits '
                '(its keys: %s)', hivenet._shown(v_seg::text),
                (SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k)
                 FROM jsonb_object_keys(v_seg) AS k)));
        END IF;
        SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k) INTO v_unknown
        FROM jsonb_object_keys(v_seg) AS k
        WHERE k <> ALL (CASE v_kind
            WHEN 'field' THEN ARRAY['field', 'width', 'charset', 'min', 'max', 'printed', 'counter',
                                    'bits']
            WHEN 'literal' THEN ARRAY['literal'] WHEN 'time' THEN ARRAY['time']
            ELSE ARRAY[v_kind, 'reset'] END);
        IF v_unknown IS NOT NULL THEN
            PERFORM hivenet._format_error(p_name, format(
                '%s segment %s has unknown keys %s (a %s segment takes %s)', v_kind,
                hivenet._shown(v_seg::text), v_unknown, v_kind, CASE v_kind
                WHEN 'field' THEN 'field, width, charset, min, max, printed, counter, bits'
                WHEN 'seq' THEN 'seq, reset' WHEN 'seq_bits' THEN 'seq_bits, reset'
                ELSE v_kind END));
        END IF;
        -- A numeric format is its time, its fields, then its seq in bits (formats.sql's top).
        IF v_numeric AND (v_kind IN ('literal', 'seq')
                          OR (v_kind = 'time') <> (v_position = 1)) THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s: a numeric format (with seq_bits) is its time first, then fields '
                'with bits, then seq_bits last; no literal or seq', hivenet._shown(v_seg::text)));
        END IF;
        CASE v_kind
        WHEN 'field' THEN
            v_width := CASE WHEN jsonb_typeof(v_seg -> 'width') = 'number'
                            THEN (v_seg ->> 'width')::numeric::integer END;
            v_charset := coalesce(v_seg ->> 'charset', CASE WHEN v_numeric THEN 'digit'
                                                            ELSE 'alnum' END);
            IF (v_seg ->> 'field') !~ '^[a-z][a-z0-9_]{0,30}$'
               OR (v_seg ->> 'field') IN ('format', 'date', 'datetime', 'seq')
               OR (v_seg ->> 'field') = ANY (v_row.field_names) THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field name %s must be a new name matching [a-z][a-z0-9_]{0,30} '
                    '(not format, date, datetime or seq)', v_seg -> 'field'));
            END IF;
            IF v_width IS NULL OR v_width NOT BETWEEN 1 AND 40 THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: width must be 1 to 40', v_seg -> 'field'));
            END IF;
            IF v_charset NOT IN ('digit', 'alnum', 'upper_alnum', 'alpha') THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: charset must be digit, alnum, upper_alnum or alpha',
                    v_seg -> 'field'));
            END IF;
            IF (v_seg ? 'min' OR v_seg ? 'max') AND (v_charset <> 'digit'
                OR coalesce(jsonb_typeof(v_seg -> 'min'), 'number') <> 'number'
                OR coalesce(jsonb_typeof(v_seg -> 'max'), 'number') <> 'number') THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: min and max are numbers, for digit fields only', v_seg -> 'field'));
            END IF;
            IF coalesce(jsonb_typeof(v_seg -> 'printed'), 'boolean') <> 'boolean'
               OR coalesce(jsonb_typeof(v_seg -> 'counter'), 'boolean') <> 'boolean' THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: printed and counter are true or false', v_seg -> 'field'));
            END IF;
            v_printed := coalesce((v_seg ->> 'printed')::boolean, true);
            v_counter := coalesce((v_seg ->> 'counter')::boolean, true);
            IF NOT v_printed AND NOT v_counter THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s is neither printed nor part of the counter key', v_seg -> 'field'));
            END IF;
            IF v_numeric THEN
                -- Its largest value (max, else all nines) must fit its bits.
                v_bits := CASE WHEN jsonb_typeof(v_seg -> 'bits') = 'number'
                               THEN (v_seg ->> 'bits')::numeric::integer END;
                IF v_bits IS NULL OR v_bits NOT BETWEEN 1 AND 62 OR v_charset <> 'digit'
                   OR NOT v_printed THEN
                    PERFORM hivenet._format_error(p_name, format(
                        'field %s of a numeric format: digits, printed, with bits 1 to 62',
                        v_seg -> 'field'));
                END IF;
                IF coalesce((v_seg ->> 'max')::numeric, 10::numeric ^ v_width - 1)
                   >= 2::numeric ^ v_bits THEN
                    PERFORM hivenet._format_error(p_name, format(
                        'field %s: values up to %s do not fit %s bits', v_seg -> 'field',
                        coalesce(v_seg ->> 'max', repeat('9', v_width)), v_bits));
                END IF;
            ELSIF v_seg ? 'bits' THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: bits are for numeric formats (a seq_bits segment)',
                    v_seg -> 'field'));
            END IF;
            v_row.field_names := v_row.field_names || (v_seg ->> 'field');
            v_row.field_min := v_row.field_min || (v_seg ->> 'min')::numeric;
            v_row.field_max := v_row.field_max || (v_seg ->> 'max')::numeric;
            v_regexes := v_regexes || format('%s{%s}', CASE v_charset
                    WHEN 'digit' THEN '[0-9]' WHEN 'alnum' THEN '[0-9A-Za-z]'
                    WHEN 'upper_alnum' THEN '[0-9A-Z]' ELSE '[A-Za-z]' END, v_width);
            -- printed / counter are kept only when false: definitions without them stay as
            -- they were stored before these keys existed.
            v_segments := v_segments || jsonb_build_array(v_seg - 'printed' - 'counter'
                || jsonb_build_object('width', v_width, 'charset', v_charset,
                                      'regex', '^' || v_regexes[cardinality(v_regexes)] || '$')
                || CASE WHEN v_printed THEN '{}' ELSE '{"printed": false}' END::jsonb
                || CASE WHEN v_counter THEN '{}' ELSE '{"counter": false}' END::jsonb);
            IF v_counter THEN
                v_keys := v_keys || cardinality(v_regexes);
            END IF;
            IF v_numeric THEN
                v_width := v_bits;  -- its room in the number (shifted below: after the loop)
            ELSIF v_printed THEN
                -- Field values and literals are [0-9A-Za-z_-]: safe inside a quoted to_char
                -- text.
                v_pattern := v_pattern || format('"%%%s$s"', cardinality(v_regexes));
            ELSE
                v_width := 0;  -- takes no room in the serial
            END IF;
        WHEN 'literal' THEN
            IF jsonb_typeof(v_seg -> 'literal') <> 'string'
               OR (v_seg ->> 'literal') !~ '^[0-9A-Za-z_-]{1,40}$' THEN
                PERFORM hivenet._format_error(p_name, format(
                    'literal %s must be 1 to 40 characters of [0-9A-Za-z_-]', v_seg -> 'literal'));
            END IF;
            v_width := length(v_seg ->> 'literal');
            v_segments := v_segments || jsonb_build_array(v_seg);
            v_pattern := v_pattern || format('"%s"', v_seg ->> 'literal');
        WHEN 'time' THEN
            SELECT * INTO v_time FROM hivenet._time_pattern(v_seg ->> 'time');
            IF v_time.width IS NULL THEN
                PERFORM hivenet._format_error(p_name, format(
                    'unknown time pattern %s (known: YYYY, YYYYMM, YYMMDD, YYYYMMDD, YYYYMMDDHH, '
                    'YYYYMMDDHHMI, YYMMDDHHMISS, yyMMddHHmmss, YYYYMMDDHHMISS)', v_seg -> 'time'));
            END IF;
            v_width := CASE WHEN v_numeric THEN 0 ELSE v_time.width END;
            IF hivenet._unit_rank(v_time.resolution) < hivenet._unit_rank(v_finest) THEN
                v_finest := v_time.resolution;
            END IF;
            v_segments := v_segments || jsonb_build_array(
                v_seg || jsonb_build_object('to_char', v_time.to_char_pattern,
                                            'width', v_time.width,
                                            'resolution', v_time.resolution));
            v_pattern := v_pattern || v_time.to_char_pattern;
        ELSE -- seq, seq_bits
            IF v_row.seq_width IS NOT NULL THEN
                PERFORM hivenet._format_error(p_name, 'a format has exactly one seq segment');
            END IF;
            v_width := CASE WHEN jsonb_typeof(v_seg -> v_kind) = 'number'
                            THEN (v_seg ->> v_kind)::numeric::integer END;
            -- A numeric format's seq resets when its time changes, as seed 004's does.
            v_row.reset := coalesce(v_seg ->> 'reset', CASE WHEN v_numeric THEN v_finest
                                                            ELSE 'day' END);
            IF v_numeric AND (v_width IS NULL OR v_width NOT BETWEEN 1 AND 62) THEN
                PERFORM hivenet._format_error(p_name, 'seq_bits must be 1 to 62');
            ELSIF NOT v_numeric AND (v_width IS NULL OR v_width NOT BETWEEN 1 AND 17) THEN
                PERFORM hivenet._format_error(p_name, 'seq width must be 1 to 17');
            END IF;
            IF hivenet._unit_rank(v_row.reset) IS NULL THEN
                PERFORM hivenet._format_error(p_name, format(
                    'reset %s must be second, minute, hour, day, month, year or never',
                    v_seg -> 'reset'));
            END IF;
            v_row.seq_width := v_width;
            v_row.head_pattern := v_pattern;
            v_pattern := '';
            v_segments := v_segments || jsonb_build_array(jsonb_build_object(
                v_kind, v_width, 'reset', v_row.reset));
        END CASE;
        v_row.length := v_row.length + v_width;
    END LOOP;
    IF v_row.seq_width IS NULL THEN
        PERFORM hivenet._format_error(p_name, 'a format needs one seq segment');
    END IF;
    -- Serials of two periods must differ in their printed time, or a reset would repeat them.
    IF hivenet._unit_rank(v_finest) > hivenet._unit_rank(v_row.reset) THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq resets every %s but the time fields only show the %s: serials of two periods '
            'would collide', v_row.reset, v_finest));
    END IF;
    IF v_numeric THEN
        IF NOT v_segments -> -1 ? 'seq_bits' THEN
            PERFORM hivenet._format_error(p_name, 'a numeric format ends with its seq_bits '
                                                  '(the lowest bits)');
        END IF;
        IF v_row.reset <> v_finest THEN
            PERFORM hivenet._format_error(p_name, format(
                'a numeric format''s seq resets when its time changes: reset %s, but the time '
                'shows the %s', v_row.reset, v_finest));
        END IF;
        -- Each field's shift: the bits below it (the fields after it, then the seq).
        v_bits := v_row.seq_width;
        FOR i IN REVERSE jsonb_array_length(v_segments) - 2 .. 1 LOOP
            v_segments := jsonb_set(v_segments, ARRAY[i::text, 'shift'], to_jsonb(v_bits));
            v_bits := v_bits + (v_segments -> i ->> 'bits')::integer;
        END LOOP;
        v_row.time_shift := v_bits;
        v_row.capacity := (2::numeric ^ v_row.seq_width)::bigint - 1;
        -- The time number's bits: those of the largest number its pattern prints.
        v_bits := floor(log(2, hivenet._time_number_max(
            v_segments -> 0 ->> 'to_char')::numeric))::integer + 1;
        v_row.length := v_bits + v_row.time_shift;
        IF v_row.length > 63 THEN
            PERFORM hivenet._format_error(p_name, format(
                'the time %s (up to %s: %s bits) shifted left by the %s bits below it takes %s '
                'bits, more than the 63 of a positive bigint', v_segments -> 0 ->> 'time',
                hivenet._time_number_max(v_segments -> 0 ->> 'to_char'), v_bits,
                v_row.time_shift, v_row.length));
        END IF;
    ELSIF v_row.length > 64 THEN
        PERFORM hivenet._format_error(p_name, format('total length %s exceeds 64', v_row.length));
    ELSE
        v_row.capacity := (10::numeric ^ v_row.seq_width)::bigint - 1;
    END IF;
    -- Largest power of ten that keeps period * stride inside a bigint; at least 10x capacity,
    -- so calls that keep failing after exhaustion never spill into the next period.
    v_headroom := floor(log(9.2e18 / (hivenet._max_period_index(v_row.reset) + 1)))::bigint;
    IF v_headroom < length(v_row.capacity::text) + 1 THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq %s %s is too wide for a counter that resets every %s (at most %s digits)',
            CASE WHEN v_numeric THEN 'bits' ELSE 'width' END, v_row.seq_width, v_row.reset,
            v_headroom - 1));
    END IF;
    v_row.stride := (10::numeric ^ v_headroom)::bigint;
    -- Space is in no charset and '?' stands for a missing value, so a match proves every value
    -- is present and valid (one regex match per allocation instead of one per field).
    v_row.field_pattern := '^' || array_to_string(v_regexes, ' ') || '$';
    v_row.bounded_fields := ARRAY(
        SELECT i FROM generate_subscripts(v_row.field_names, 1) AS i
        WHERE v_row.field_min[i] IS NOT NULL OR v_row.field_max[i] IS NOT NULL);
    v_row.tail_pattern := v_pattern;
    v_row.key_fields := CASE WHEN cardinality(v_keys) < cardinality(v_row.field_names)
                             THEN v_keys END;
    v_row.clock_unit := CASE WHEN hivenet._unit_rank(v_finest) < hivenet._unit_rank(v_row.reset)
                             THEN v_finest END;
    v_row.segments := v_segments;
    v_row.borrow_next_period := coalesce(p_borrow_next_period, false);
    v_row.builtin := false;
    v_row.description := p_description;
    RETURN v_row;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._compile_format(text,jsonb,boolean,text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._counted_apart(p_namespace text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN EXISTS (SELECT FROM hivenet.request_namespace n WHERE n.namespace = p_namespace)
        OR (SELECT count(DISTINCT c.namespace) FROM hivenet.decision_counter c
            WHERE c.decision = 'started' AND left(c.namespace, 8) <> 'hivenet.'
              AND NOT EXISTS (SELECT FROM hivenet.request_namespace n
                              WHERE n.namespace = c.namespace))
           < hivenet._setting_constant('max_counted_namespaces')::integer;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._counted_apart(text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._create_scope_counter(p_format hivenet.format, p_scope text, p_fields jsonb, p_name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    EXECUTE format('CREATE SEQUENCE hivenet.%I AS bigint MINVALUE 0 START 0', p_name);
    PERFORM hivenet._grant_counter(p_name);  -- for the fast path, run as the caller
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._scope_sequence_name(p_format.name, p_scope), 0);
    END IF;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), p_name)
    ON CONFLICT DO NOTHING;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._create_scope_counter(hivenet.format,text,jsonb,text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._failover_gap()
 RETURNS bigint
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT hivenet._setting_constant('failover_gap')::bigint
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._failover_gap() FROM PUBLIC;

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
    -- Until the session's first allocation has checked the timeline (failover.sql).
    v_checked text := $f$current_setting('hivenet.timeline_checked', true) = 'true' AND $f$;
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
    WHEN %s%s%s
    THEN %s || to_char(nullif(least(greatest(
             nextval(%s)
             - (%s::date - %L::date) * %s::bigint,
             0), %s) %% %s, 0), %L)
    END END$f$,
        p_format.field_pattern, v_checked, v_fake_clock,
        coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local,
        date '2000-01-01' - hivenet._period_index(timestamp '2000-01-01', 'day')::integer,
        p_format.stride, p_format.capacity + 1, p_format.capacity + 1,
        'FM' || repeat('0', p_format.seq_width));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fast_path_expression(hivenet.format,text,boolean,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND ((p_c)::numeric >= (1)::numeric)) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || to_char(NULLIF((LEAST(GREATEST((nextval(to_regclass((((('hivenet."seq_system_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), '1000000000000'::bigint) % '1000000000000'::bigint), 0), 'FM000000000000'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._fast_system(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_time_id(p_format text, p_fields jsonb)
 RETURNS bigint
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'time_id'::text THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND (COALESCE(p_fields, '{}'::jsonb) = '{}'::jsonb)) THEN (((to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYMMDDHH24MISS'::text))::bigint << 14) | NULLIF((LEAST(GREATEST((nextval(to_regclass('hivenet."seq_time_id_"'::text)) - (((floor(date_part('epoch'::text, (statement_timestamp() AT TIME ZONE 'UTC'::text))))::bigint - 946684799) * (1000000000)::bigint)), (0)::bigint), (16384)::bigint) % (16384)::bigint), 0))
                 ELSE NULL::bigint
             END
             ELSE NULL::bigint
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._fast_time_id(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND ((p_c)::numeric >= (1)::numeric)) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || to_char(NULLIF((LEAST(GREATEST((nextval(to_regclass((((('hivenet."seq_unified_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), '10000000000'::bigint) % '10000000000'::bigint), 0), 'FM0000000000'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._fast_unified(text,text,text) FROM PUBLIC;

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
    v_count integer := 0;
BEGIN
    IF p_gap IS NULL OR p_gap < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failover fence: gap %s must be at least 1',
                             coalesce(p_gap::text, 'NULL'));
    END IF;
    -- The fences' lock: key 1 of the period resets' space, whose other keys are sequence
    -- OIDs (never below 16384) and maintain()'s 0.
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), 1);
    BEGIN
        IF p_force OR NOT hivenet._fenced() THEN
            FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
                PERFORM pg_advisory_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
                BEGIN
                    v_period := hivenet._period_index(hivenet.now() AT TIME ZONE
                        hivenet._setting_value('time_zone'), v_format.reset);
                    FOR counter IN
                        SELECT hivenet._cold_sequence_name(v_format.name)
                        UNION ALL
                        (SELECT s.sequence_name FROM hivenet.scope s
                         WHERE s.format = v_format.name ORDER BY s.sequence_name)
                    LOOP
                        v_seq := to_regclass('hivenet.' || quote_ident(counter));
                        CONTINUE WHEN v_seq IS NULL;
                        SELECT f.from_value, f.to_value, f.parked
                        INTO from_value, to_value, parked
                        FROM hivenet._fence_counter(v_seq, v_format, v_period, p_gap) f;
                        v_count := v_count + 1;
                        timeline := v_timeline;
                        format := v_format.name;
                        RETURN NEXT;
                    END LOOP;
                EXCEPTION WHEN OTHERS OR query_canceled THEN
                    PERFORM pg_advisory_unlock(hivenet._cold_lock_space(),
                                               hashtext(v_format.name));
                    RAISE;
                END;
                PERFORM pg_advisory_unlock(hivenet._cold_lock_space(), hashtext(v_format.name));
            END LOOP;
            PERFORM setval('hivenet.fenced_timeline', v_timeline);
            INSERT INTO hivenet.failover_fence AS f (timeline, gap, counters, applied_by)
            VALUES (v_timeline, p_gap, v_count, p_by)
            ON CONFLICT ON CONSTRAINT failover_fence_pkey DO UPDATE
                SET fenced_at = clock_timestamp(), gap = coalesce(f.gap, 0) + EXCLUDED.gap,
                    counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by;
            RAISE LOG USING MESSAGE = format(
                'hivenet: fenced timeline %s (%s): %s counters moved forward by %s',
                v_timeline, p_by, v_count, p_gap);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), 1);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), 1);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fence(bigint,boolean,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fence_counter(p_seq regclass, p_format hivenet.format, p_period bigint, p_gap bigint, OUT from_value bigint, OUT to_value bigint, OUT parked boolean)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_base bigint;
    v_last bigint;
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_seq::oid::integer);
    BEGIN
        -- Its value, also one set as the next (is_called false: a prepared scope's start,
        -- counters.sql), which pg_sequence_last_value does not show.
        EXECUTE format('SELECT last_value FROM %s', p_seq) INTO from_value;
        v_base := greatest(from_value, p_period * p_format.stride);
        to_value := v_base + p_gap;
        v_last := (v_base / p_format.stride) * p_format.stride + p_format.capacity;
        parked := NOT p_format.borrow_next_period AND to_value > v_last;
        IF parked THEN
            to_value := greatest(v_last, from_value);
        END IF;
        PERFORM setval(p_seq, to_value, true);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._fence_counter(regclass,hivenet.format,bigint,bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fenced()
 RETURNS boolean
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT pg_sequence_last_value('hivenet.fenced_timeline') IS NOT DISTINCT FROM hivenet._timeline()
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._fenced() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._field_values(p_format hivenet.format, p_fields jsonb)
 RETURNS text[]
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF jsonb_typeof(p_fields) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: fields must be a JSON object, not %s', p_format.name,
                             hivenet._shown(p_fields::text));
    END IF;
    IF p_fields - p_format.field_names <> '{}'::jsonb THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s has no field %s (fields: %s)', p_format.name,
                             (SELECT hivenet._shown(k) FROM jsonb_object_keys(
                                  p_fields - p_format.field_names) AS k LIMIT 1),
                             array_to_string(p_format.field_names, ', '));
    END IF;
    RETURN ARRAY(SELECT p_fields ->> n FROM unnest(p_format.field_names) WITH ORDINALITY AS f(n, i)
                 ORDER BY i);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._field_values(hivenet.format,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._finish_batch(p_step boolean, p_namespace text, p_keys text[], p_attempts integer[], p_succeeded boolean[], p_responses jsonb[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM hivenet._check_batch(p_step, p_namespace, p_keys, 'responses', p_responses, NULL);
    IF cardinality(p_attempts) IS DISTINCT FROM cardinality(p_keys)
       OR cardinality(p_succeeded) IS DISTINCT FROM cardinality(p_keys) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s has %s %s but %s attempts and %s succeeded',
                             CASE WHEN p_step THEN 'the batch of steps'
                                  ELSE format('the batch in namespace %s',
                                              hivenet._shown(p_namespace)) END,
                             cardinality(p_keys),
                             CASE WHEN p_step THEN 'system serials' ELSE 'keys' END,
                             coalesce(cardinality(p_attempts)::text, 'NULL'),
                             coalesce(cardinality(p_succeeded)::text, 'NULL'));
    END IF;
    FOR i IN 1 .. cardinality(p_keys) LOOP
        PERFORM hivenet.finish_request(p_namespace, p_keys[i], p_attempts[i], p_succeeded[i],
                                       p_responses[i]);
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._finish_batch(boolean,text,text[],integer[],boolean[],jsonb[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._format_constant(p_name text)
 RETURNS hivenet.format
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_name
             WHEN 'id_service'::text THEN '(id_service,"[{""field"": ""merchant"", ""regex"": ""^[0-9]{12}$"", ""width"": 12, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""field"": ""shard"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""seq"": 6, ""reset"": ""day""}]",28,"{merchant,shard}",6,day,999999,100000000000000,f,t,"unified ID service (seed 001): merchant + date + shard + daily sequence per merchant and shard","^[0-9]{12} [0-9]{2}$","{NULL,NULL}","{NULL,NULL}",{},"""%1$s""YYYYMMDD""%2$s""","",,,)'::hivenet.format
             WHEN 'interface'::text THEN '(interface,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""field"": ""target"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum"", ""counter"": false}, {""time"": ""YYYYMMDDHHMISS"", ""width"": 14, ""to_char"": ""YYYYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 10, ""reset"": ""day""}]",39,"{system,module,instance,target}",10,day,9999999999,100000000000000,f,t,"interface serial (接口流水号): one interface call","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2} [0-9A-Za-z]{5}$","{NULL,NULL,1,NULL}","{NULL,NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""""%4$s""YYYYMMDDHH24MISS","","{1,2,3}",second,)'::hivenet.format
             WHEN 'merchant_trade'::text THEN '(merchant_trade,"[{""field"": ""merchant"", ""regex"": ""^[0-9]{12}$"", ""width"": 12, ""charset"": ""digit""}, {""time"": ""YYYYMMDDHHMISS"", ""width"": 14, ""to_char"": ""YYYYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 6, ""reset"": ""day""}]",32,{merchant},6,day,999999,100000000000000,f,t,"merchant trade number: merchant + date-time + daily sequence",^[0-9]{12}$,{NULL},{NULL},{},"""%1$s""YYYYMMDDHH24MISS","",,second,)'::hivenet.format
             WHEN 'per_second'::text THEN '(per_second,"[{""time"": ""yyMMddHHmmss"", ""width"": 12, ""to_char"": ""YYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 5, ""reset"": ""second""}]",17,{},5,second,99999,1000000000,f,t,"time-based serial: yyMMddHHmmss + per-second sequence",^$,{},{},{},YYMMDDHH24MISS,"",,,)'::hivenet.format
             WHEN 'system'::text THEN '(system,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""seq"": 12, ""reset"": ""day""}]",30,"{system,module,instance}",12,day,999999999999,100000000000000,f,t,"system serial (系统流水号): one processing step; retries reuse it","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$","{NULL,NULL,1}","{NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""YYYYMMDD","",,,)'::hivenet.format
             WHEN 'time_id'::text THEN '(time_id,"[{""time"": ""yyMMddHHmmss"", ""width"": 12, ""to_char"": ""YYMMDDHH24MISS"", ""resolution"": ""second""}, {""reset"": ""second"", ""seq_bits"": 14}]",54,{},14,second,16383,1000000000,f,t,"time id (seed 004): a bigint, (yyMMddHHmmss << 14) | per-second sequence",^$,{},{},{},YYMMDDHH24MISS,"",,,14)'::hivenet.format
             WHEN 'unified'::text THEN '(unified,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""seq"": 10, ""reset"": ""day""}]",28,"{system,module,instance}",10,day,9999999999,100000000000000,f,t,"unified serial (统一流水号): one business transaction across all systems","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$","{NULL,NULL,1}","{NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""YYYYMMDD","",,,)'::hivenet.format
             ELSE NULL::hivenet.format
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._format_constant(text) FROM PUBLIC;

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
            hivenet.now,
            hivenet.next_unified_serial,
            hivenet.next_system_serial,
            hivenet.next_interface_serial,
            hivenet.next_serial,
            hivenet.next_serials,
            hivenet.parse_serial,
            hivenet.next_time_id,
            hivenet.next_time_ids,
            hivenet.parse_time_id,
            hivenet.claim_interface_serial,
            hivenet.call_chain,
            hivenet.claim,
            hivenet.begin_step,
            hivenet.finish_step,
            hivenet.begin_request,
            hivenet.watch_request,
            hivenet.finish_request,
            hivenet.begin_requests,
            hivenet.finish_requests,
            hivenet.ownership,
            hivenet.flush_at_commit
        TO hivenet_app;
        -- now() is inlined into the caller: its fake clock (clock.sql) runs as the caller.
        GRANT EXECUTE ON FUNCTION hivenet._fake_now TO hivenet_app;
        -- The allocation fast path (compile.sql, _fast_unified and _fast_system), inlined into
        -- next_unified_serial / next_system_serial: every function in it, and USAGE on the
        -- counters it draws from (_grant_counter). The constants say what the formats and
        -- settings are (no secret).
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_unified,
            hivenet._fast_system,
            hivenet._format_constant,
            hivenet._setting_constant,
            hivenet._scope_sequence_name
        TO hivenet_app;
        -- next_time_id and next_time_ids (time_ids.sql), inlined: their fast paths
        -- (_fast_time_id, _time_id_batch), and what they call when those give NULL:
        -- _next_time_id (SECURITY DEFINER, every check of next_time_id), the count's check.
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_time_id,
            hivenet._time_id_batch,
            hivenet._next_time_id,
            hivenet._time_id_count
        TO hivenet_app;
        FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s ORDER BY 1 LOOP
            IF to_regclass('hivenet.' || quote_ident(v_counter)) IS NOT NULL THEN
                PERFORM hivenet._grant_counter(v_counter);
            END IF;
        END LOOP;
        -- begin_step, begin_request (steps.sql, requests.sql) and their batches: the public
        -- functions are inlined into the caller's statement and call _start_key and
        -- _begin_key, both SECURITY DEFINER with every check: no role writes an attempt but
        -- through them, and they count each decision (decisions.sql), so calling them
        -- directly can do nothing the public functions cannot. No table or view of attempts
        -- is writable by the role.
        GRANT EXECUTE ON FUNCTION
            hivenet.begin_steps, hivenet.finish_steps, hivenet._start_key, hivenet._begin_key
        TO hivenet_app;
        -- The replay of a succeeded step, inlined into begin_step and run as the caller:
        -- _step_in_window and view _step_replay, SELECT only: of every succeeded step its
        -- serial, attempt, request fingerprint, unified serial and stored response, what
        -- begin_step replays to whoever presents the same request. The application's own
        -- replays: no other role reads them. It counts the replay as the caller: a probe of
        -- view _decision_counters and nextval on the steps' counter (USAGE:
        -- _grant_decision_counters). And what they inline: the callers' clock, the bound on
        -- intervals (clock.sql).
        GRANT EXECUTE ON FUNCTION
            hivenet._step_in_window, hivenet._fingerprint, hivenet._caller_now,
            hivenet._longest_interval, hivenet._interval_allowed
        TO hivenet_app;
        GRANT SELECT ON hivenet._step_replay, hivenet._decision_counters TO hivenet_app;
        PERFORM hivenet._grant_decision_counters();
    END IF;

    -- The reporting views and what they call as their reader, for both roles that read them.
    FOREACH v_role IN ARRAY ARRAY['hivenet_reporting', 'hivenet_admin'] LOOP
        CONTINUE WHEN to_regrole(v_role) IS NULL;
        EXECUTE format('GRANT USAGE ON SCHEMA hivenet TO %I', v_role);
        EXECUTE format('GRANT SELECT ON hivenet.interface_calls, '
                       'hivenet.interface_calls_per_day, hivenet.step_states, '
                       'hivenet.stuck_steps, hivenet.scope_usage, hivenet.request_states, '
                       'hivenet.stuck_requests, hivenet.request_attempts, hivenet.request_decisions, '
                       'hivenet.clock_lead, hivenet.business_time_zone TO %I', v_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'hivenet.call_chain, '
                       'hivenet.now, hivenet._fake_now, hivenet._step_lease, '  -- stuck_*
                       'hivenet._reporting_local_now, hivenet._period_index, '  -- scope_usage
                       'hivenet._period_start, hivenet._scope_counter_value, '  -- also
                       -- request_decisions; clock_lead:
                       'hivenet._scope_sequence_name, hivenet._clock_sequence_name, '
                       -- interface_calls, and both for other formats:
                       'hivenet._serial_field, hivenet._serial_time, hivenet.parse_serial '
                       'TO %I', v_role);
    END LOOP;

    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.maintain,
            hivenet.fence_failover,
            hivenet._timeline,  -- `hivenet-db failover-fence` reports this timeline's fence
            hivenet.replication_warning,
            hivenet.define_format,
            hivenet.set_clock_policy,
            hivenet.prepare_scope,
            hivenet.register_system,
            hivenet.register_module,
            hivenet.own_instances,
            hivenet.ownership,
            hivenet.resolve_step,
            hivenet.resolve_request,
            hivenet.set_claim_expiry,
            hivenet.set_request_retention,
            hivenet.set_namespace_policy,
            hivenet.verify_audit_chain  -- `hivenet-db audit verify`
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

CREATE OR REPLACE FUNCTION hivenet._issue(p_seq regclass, p_format hivenet.format, p_values text[], p_count integer, p_scope text)
 RETURNS text[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_local timestamp := hivenet.now() AT TIME ZONE hivenet._setting_constant('time_zone');
    v_period bigint := hivenet._period_index(v_local, p_format.reset);
    v_head text := format(p_format.head_pattern, VARIADIC p_values);
    v_tail text := format(p_format.tail_pattern, VARIADIC p_values);
    v_raw bigint;
    v_print timestamp;
    v_out text[] := '{}';
    v_clock regclass;
    v_latest bigint;  -- the latest instant issued by the counter, in p_format.clock_unit
    v_read bigint;    -- ... as read from its clock sequence when this call started
    v_instant bigint;
    v_behind_asked boolean := false;
    v_fields bigint;  -- a numeric format's fields, in their bits
BEGIN
    IF p_format.time_shift IS NOT NULL THEN
        v_fields := hivenet._time_id_fields(p_format, p_values);
    END IF;
    IF p_format.clock_unit IS NOT NULL THEN
        -- Read once, before any value is drawn: every call that returned before this one
        -- started has raised it to what it printed.
        v_clock := hivenet._clock_sequence(p_seq);
        v_read := coalesce(pg_sequence_last_value(v_clock), 0);
        v_latest := v_read;
        IF v_read > hivenet._period_index(v_local, p_format.clock_unit) THEN
            v_local := hivenet._clock_behind(p_format.name,
                hivenet._period_start(v_read, p_format.clock_unit), v_local);
            v_period := hivenet._period_index(v_local, p_format.reset);
            v_behind_asked := true;
        END IF;
    END IF;
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(p_seq);
        IF i = 1 AND v_raw / p_format.stride > v_period AND NOT v_behind_asked THEN
            -- The counter is in a later period than the clock: the clock went back (or the
            -- format borrowed). Asked for the counter as the call found it, not for what the
            -- call's own values borrow.
            v_local := hivenet._clock_behind(p_format.name,
                hivenet._period_start(v_raw / p_format.stride, p_format.reset), v_local);
            v_period := hivenet._period_index(v_local, p_format.reset);
        END IF;
        IF v_raw / p_format.stride < v_period
           OR v_raw % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            v_raw := hivenet._advance(p_seq, p_format, v_period, p_scope);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / p_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / p_format.stride, p_format.reset) END;
        IF v_clock IS NOT NULL THEN
            v_instant := hivenet._period_index(v_print, p_format.clock_unit);
            IF v_instant < v_latest THEN
                -- The clock is behind an instant already issued: print that one, but never
                -- past the value's own period (its date must stay the period's).
                v_instant := least(v_latest, hivenet._period_last_instant(
                    v_raw / p_format.stride, p_format.reset, p_format.clock_unit));
                v_print := greatest(v_print,
                                    hivenet._period_start(v_instant, p_format.clock_unit));
            END IF;
            v_latest := greatest(v_latest, v_instant);
        END IF;
        IF p_format.time_shift IS NOT NULL THEN
            v_out := v_out || ((to_char(v_print, v_head)::bigint << p_format.time_shift)
                               | v_fields | v_raw % p_format.stride)::text;
        ELSE
            -- concat, not ||: to_char of an empty pattern is NULL.
            v_out := v_out || concat(to_char(v_print, v_head),
                                     lpad((v_raw % p_format.stride)::text, p_format.seq_width,
                                          '0'),
                                     to_char(v_print, v_tail));
        END IF;
    END LOOP;
    IF v_latest > v_read THEN
        PERFORM hivenet._raise_clock(v_clock, v_latest);
    END IF;
    RETURN v_out;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._issue(regclass,hivenet.format,text[],integer,text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._key_allowed(p_policy hivenet.request_namespace, p_key text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT (NOT COALESCE(((length(p_key) < (p_policy).key_min_length) OR (p_key !~ (p_policy).key_pattern)), false));
END;
REVOKE EXECUTE ON FUNCTION hivenet._key_allowed(hivenet.request_namespace,text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._layout_sql(p_format hivenet.format, OUT shape text, OUT valid text, OUT time_of text, OUT date_at integer, OUT fields jsonb, OUT scope text)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_seg jsonb;
    v_pos integer := 1;
    v_width integer;
    v_part text;
    v_type text;
    v_checks text[] := '{}';
    v_scope text[] := '{}';
    v_unprinted_key boolean := false;
    v_pattern text;
    v_token record;
    v_at integer;
    v_time jsonb;
    v_at_of jsonb;  -- the position of each part of the time segment
    v_classes text[] := '{}';  -- the shape as character classes (or literals) and counts
    v_counts integer[] := '{}';
    v_class text;
BEGIN
    shape := '';
    fields := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_format.segments) LOOP
        IF v_seg ? 'field' AND v_seg -> 'printed' = 'false' THEN
            v_unprinted_key := true;  -- only a counter key: nothing printed to read
            CONTINUE;
        ELSIF v_seg ? 'field' THEN
            v_width := (v_seg ->> 'width')::integer;
            v_part := format('substr(p_serial, %s, %s)', v_pos, v_width);
            -- The class of the field's own compiled regex ('^[0-9]{2}$').
            v_class := substring(v_seg ->> 'regex' FROM '^\^(\[[^]]*\])');
            fields := fields || jsonb_build_object(v_seg ->> 'field', v_part);
            v_type := CASE WHEN v_width <= 9 THEN 'integer' WHEN v_width <= 18 THEN 'bigint'
                           ELSE 'numeric' END;
            -- Bounds that digits alone meet need no check; a minimum of 1 is 'not all 0'.
            IF (v_seg ->> 'min')::numeric = 1 THEN
                v_checks := v_checks || format('%s <> %L', v_part, repeat('0', v_width));
            ELSIF (v_seg ->> 'min')::numeric > 0 THEN
                v_checks := v_checks || format('%s::%s >= %s', v_part, v_type, v_seg ->> 'min');
            END IF;
            IF (v_seg ->> 'max')::numeric < 10::numeric ^ v_width - 1 THEN
                v_checks := v_checks || format('%s::%s <= %s', v_part, v_type, v_seg ->> 'max');
            END IF;
            IF coalesce(v_seg -> 'counter', 'true') = 'true' THEN
                v_scope := v_scope || v_part;
            END IF;
        ELSIF v_seg ? 'literal' THEN
            v_width := length(v_seg ->> 'literal');
            v_class := v_seg ->> 'literal';  -- [0-9A-Za-z_-]: no regex meaning
        ELSIF v_seg ? 'time' THEN
            v_width := (v_seg ->> 'width')::integer;
            v_class := '[0-9]';
            -- The parts of its to_char pattern (formats.sql _time_pattern), as integers.
            v_time := '{}';
            v_at_of := '{}';
            v_pattern := v_seg ->> 'to_char';
            v_at := v_pos;
            WHILE v_pattern <> '' LOOP
                SELECT t.token, t.digits INTO v_token
                FROM (VALUES ('YYYY', 4, 1), ('HH24', 2, 2), ('YY', 2, 3), ('MM', 2, 4),
                             ('DD', 2, 5), ('MI', 2, 6), ('SS', 2, 7)) AS t(token, digits, o)
                WHERE starts_with(v_pattern, t.token) ORDER BY t.o LIMIT 1;
                v_time := v_time || jsonb_build_object(v_token.token,
                    format('substr(p_serial, %s, %s)::integer', v_at, v_token.digits));
                v_at_of := v_at_of || jsonb_build_object(v_token.token, v_at);
                v_at := v_at + v_token.digits;
                v_pattern := substr(v_pattern, length(v_token.token) + 1);
            END LOOP;
            IF v_time ? 'YY' THEN  -- to_timestamp's YY: the year nearest to 2020
                v_time := v_time || jsonb_build_object('YYYY', format(
                    '(%1$s + CASE WHEN %1$s < 70 THEN 2000 ELSE 1900 END)', v_time ->> 'YY'));
            ELSE
                v_checks := v_checks || format('substr(p_serial, %s, 4) <> %L',
                    v_pos + strpos(v_seg ->> 'to_char', 'YYYY') - 1, '0000');
            END IF;
            IF v_time ? 'MM' THEN
                v_checks := v_checks || format('%s BETWEEN 1 AND 12', v_time ->> 'MM');
            END IF;
            IF v_time ? 'DD' THEN
                -- Days in month m: 30 + (m + m / 8) % 2, but February.
                v_checks := v_checks || format(
                    '%1$s >= 1 AND (%1$s <= 28 OR %1$s <= CASE %2$s WHEN 2 THEN 28 + '
                    '(%3$s %% 4 = 0 AND (%3$s %% 100 <> 0 OR %3$s %% 400 = 0))::integer '
                    'ELSE 30 + (%2$s + %2$s / 8) %% 2 END)',
                    v_time ->> 'DD', v_time ->> 'MM', v_time ->> 'YYYY');
            END IF;
            IF v_time ? 'HH24' THEN
                v_checks := v_checks || format('%s < 24', v_time ->> 'HH24');
            END IF;
            IF v_time ? 'MI' THEN
                v_checks := v_checks || format('%s < 60', v_time ->> 'MI');
            END IF;
            IF v_time ? 'SS' THEN
                v_checks := v_checks || format('%s < 60', v_time ->> 'SS');
            END IF;
            -- The last time segment, as parse_serial reports it.
            time_of := format('make_timestamp(%s, %s, %s, %s, %s, %s)', v_time ->> 'YYYY',
                              coalesce(v_time ->> 'MM', '1'), coalesce(v_time ->> 'DD', '1'),
                              coalesce(v_time ->> 'HH24', '0'), coalesce(v_time ->> 'MI', '0'),
                              coalesce(v_time ->> 'SS', '0'));
            -- Where the date is, when the segment prints year, month and day one after another
            -- and no time of day (_step_window_expression compares it as text).
            date_at := CASE WHEN NOT v_at_of ?| ARRAY['HH24', 'MI', 'SS']
                                 AND v_at_of @> jsonb_build_object(
                                     'MM', (v_at_of ->> 'YYYY')::integer + 4,
                                     'DD', (v_at_of ->> 'YYYY')::integer + 6)
                            THEN (v_at_of ->> 'YYYY')::integer END;
        ELSE
            v_width := p_format.seq_width;
            v_class := '[0-9]';
            v_checks := v_checks || format('substr(p_serial, %s, %s) <> %L', v_pos, v_width,
                                           repeat('0', v_width));
        END IF;
        -- Runs of one class are one piece: a shorter regex is a faster one.
        IF v_class LIKE '[%' AND v_class = v_classes[cardinality(v_classes)] THEN
            v_counts[cardinality(v_counts)] := v_counts[cardinality(v_counts)] + v_width;
        ELSE
            v_classes := v_classes || v_class;
            v_counts := v_counts || CASE WHEN v_class LIKE '[%' THEN v_width ELSE 1 END;
        END IF;
        v_pos := v_pos + v_width;
    END LOOP;
    shape := format('length(p_serial) = %s AND p_serial ~ %L', v_pos - 1,
        '^' || (SELECT string_agg(CASE WHEN c NOT LIKE '[%' THEN c
                                       WHEN o = cardinality(v_classes) THEN c || '*'
                                       ELSE format('%s{%s}', c, n) END, '' ORDER BY o)
                FROM unnest(v_classes, v_counts) WITH ORDINALITY AS u(c, n, o)) || '$');
    valid := format('CASE WHEN %s THEN %s ELSE false END', shape,
                    coalesce(array_to_string(v_checks, ' AND '), 'true'));
    scope := CASE WHEN v_unprinted_key THEN NULL WHEN v_scope = '{}' THEN '''''::text'
                  ELSE array_to_string(v_scope, ' || ') END;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._layout_sql(hivenet.format) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._maintain_failover()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_warning text;
BEGIN
    IF NOT hivenet._fenced() THEN
        PERFORM hivenet._fence(hivenet._failover_gap(), false, 'maintain');
        RAISE NOTICE USING MESSAGE = format(
            'hivenet: timeline %s is new (a promoted standby or a restore): maintain() moved '
            'every counter forward by %s (failover_gap) before any allocation did',
            hivenet._timeline(), hivenet._failover_gap());
    END IF;
    PERFORM hivenet._sample_allocation_rates();
    v_warning := hivenet.replication_warning();
    IF v_warning IS NOT NULL THEN
        RAISE WARNING USING MESSAGE = 'hivenet: ' || v_warning;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_failover() FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._maintain_requests()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_now timestamptz := hivenet.now();
    v_default interval := hivenet._setting_value('request_retention')::interval;
    v_namespace text;
    v_policy hivenet.request_namespace;
    v_retention interval;
BEGIN
    FOR v_namespace IN
        WITH RECURSIVE n AS (
            SELECT min(a.namespace) AS namespace FROM hivenet.request_attempt a
            UNION ALL
            SELECT (SELECT min(a.namespace) FROM hivenet.request_attempt a
                    WHERE a.namespace > n.namespace)
            FROM n WHERE n.namespace IS NOT NULL)
        SELECT n.namespace FROM n
        WHERE n.namespace IS NOT NULL AND n.namespace <> 'hivenet.steps'
    LOOP
        SELECT r.* INTO v_policy FROM hivenet.request_namespace r
        WHERE r.namespace = v_namespace;
        -- Bounded as set_request_retention bounds it: a cutoff is always a timestamp. A
        -- failure is never kept longer than a success, also after request_retention shrank.
        v_retention := least(coalesce(v_policy.retention, v_default), hivenet._longest_interval());
        PERFORM hivenet._purge_requests(v_namespace, v_now - v_retention, NULL,
                                        v_now - least(v_policy.failure_retention, v_retention));
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_requests() FROM PUBLIC;

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
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, '');
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
                v_name := 'off_' || substr(v_name, 5);
            END IF;
        END IF;
        PERFORM hivenet._create_scope_counter(p_format, '', '{}', v_name);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._make_format_counters(hivenet.format) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._unseen_characters()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'::text AS unseen;
END;
REVOKE EXECUTE ON FUNCTION hivenet._unseen_characters() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._name_valid(p_value text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT ((length(p_value) >= 1) AND (length(p_value) <= 255) AND (p_value !~ hivenet._unseen_characters()));
END;
REVOKE EXECUTE ON FUNCTION hivenet._name_valid(text) FROM PUBLIC;

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
        ELSIF hivenet._counted_apart(v_namespace) THEN
            PERFORM hivenet._create_decision_counters(v_namespace, true);
        ELSE
            v_namespace := 'hivenet.other';
        END IF;
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._new_decision_counter(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._next_time_id(p_format text, p_fields jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN (hivenet._allocate(p_format, coalesce(p_fields, '{}'), NULL, 1, true))[1]::bigint;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._next_time_id(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._node_field(p_format hivenet.format)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN 'instance' = ANY (p_format.field_names) THEN 'instance'
                WHEN 'shard' = ANY (p_format.field_names) THEN 'shard' END
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._node_field(hivenet.format) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._not_owned(p_format hivenet.format, p_node text, p_owned text, p_single boolean)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE
        WHEN p_owned = 'all' THEN NULL
        WHEN hivenet._node_field(p_format) IS NULL THEN CASE WHEN NOT p_single THEN format(
            'format %s has no instance or shard field: with several primaries only the one '
            'whose setting single_primary_formats is on issues it (this database owns '
            'instances %s, and that setting is off here)', p_format.name, p_owned) END
        WHEN NOT hivenet._instance_in(p_node, p_owned) THEN format(
            'format %s: %s %s is not owned by this database (it owns %s): allocate on the '
            'database that owns it', p_format.name,
            hivenet._node_field(p_format), hivenet._shown(p_node), p_owned)
    END
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._not_owned(hivenet.format,text,text,boolean) FROM PUBLIC;

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
    FOR v_scope IN SELECT s.format, s.scope FROM hivenet._scopes_by_node() s
                   WHERE left(s.sequence_name, 4) = 'seq_'
                     AND NOT hivenet._has_issued(s.sequence_name)
                     AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
                   ORDER BY s.sequence_name LOOP
        PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
    END LOOP;
    SELECT s.format, s.scope, s.node INTO v_scope FROM hivenet._scopes_by_node() s
    WHERE (s.sequence_name IS NULL OR left(s.sequence_name, 4) <> 'off_')
      AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
    ORDER BY (s.format).name, s.scope LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s %s: this database has issued serials of format %s '
                             'scope %s, which it would no longer own; give it up with '
                             'hivenet.own_instances(..., force => true), which parks such '
                             'scopes', NEW.name, hivenet._shown(NEW.value),
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

CREATE OR REPLACE FUNCTION hivenet._plain_options(p_on_success text, p_nowait boolean, p_wait interval)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT COALESCE(((p_on_success = ANY (ARRAY['replay'::text, 'reject'::text])) AND (NOT p_nowait) AND (p_wait IS NULL)), false) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet._plain_options(text,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._policy_checked(p_namespace text, p_field text, p_value jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_text text := p_value #>> '{}';
    v_steps boolean := p_namespace = 'hivenet.steps';
    v_conflict text;
BEGIN
    -- The steps' keys are system serials, kept for the setting step_retention (steps.sql).
    IF v_steps AND p_field IN ('retention', 'key_min_length', 'key_pattern',
                               'failure_retention', 'keep_raw_request') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s is no policy of the steps'' namespace ''hivenet.steps'' (its '
                             'keys are system serials, kept for the setting step_retention)',
                             p_field);
    END IF;
    CASE p_field
    WHEN 'retention' THEN
        PERFORM hivenet._check_interval(format('retention of namespace %s',
                                               hivenet._shown(p_namespace)), v_text::interval);
        v_conflict := hivenet._interval_conflict('request_retention', v_text::interval);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('retention %s of namespace %s %s', v_text::interval,
                                 hivenet._shown(p_namespace), v_conflict);
        END IF;
        RETURN p_value;
    WHEN 'fingerprint' THEN
        PERFORM hivenet._check_fingerprint(v_text);
        RETURN CASE WHEN v_text = 'bytes' THEN 'null' ELSE p_value END;
    WHEN 'on_failure' THEN
        IF v_text NOT IN ('retry', 'final') THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('on_failure %s of namespace %s is neither ''retry'' nor '
                                 '''final''', hivenet._shown(v_text), hivenet._shown(p_namespace));
        END IF;
        RETURN CASE WHEN v_text = 'retry' THEN 'null' ELSE p_value END;
    WHEN 'expire_after' THEN
        IF v_text::interval = interval '0' THEN
            RETURN 'null';
        END IF;
        PERFORM hivenet._check_interval(format('expire_after of namespace %s',
                                               hivenet._shown(p_namespace)), v_text::interval);
        RETURN p_value;
    WHEN 'key_min_length' THEN
        IF v_text::integer NOT BETWEEN 1 AND 255 THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('key_min_length %s of namespace %s is not between 1 and 255',
                                 v_text, hivenet._shown(p_namespace));
        END IF;
        RETURN CASE WHEN v_text::integer = 1 THEN 'null' ELSE p_value END;
    WHEN 'key_pattern' THEN
        BEGIN
            PERFORM '' ~ v_text;
        EXCEPTION WHEN invalid_regular_expression THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('key_pattern %s of namespace %s is not a regular expression',
                                 hivenet._shown(v_text), hivenet._shown(p_namespace));
        END;
        RETURN CASE WHEN v_text = '' THEN 'null' ELSE p_value END;
    WHEN 'audit_chain' THEN
        RETURN CASE WHEN v_text::boolean THEN p_value ELSE 'null' END;
    WHEN 'failure_retention' THEN
        PERFORM hivenet._check_interval(format('failure_retention of namespace %s',
                                               hivenet._shown(p_namespace)), v_text::interval);
        RETURN p_value;
    WHEN 'keep_raw_request' THEN
        RETURN CASE WHEN v_text::boolean THEN p_value ELSE 'null' END;
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s is no field of a namespace policy', hivenet._shown(p_field));
    END CASE;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._policy_checked(text,text,jsonb) FROM PUBLIC;

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
        SELECT jsonb_build_object('paths', p_fingerprint::jsonb, 'values', coalesce(jsonb_agg(
                   jsonb_path_query_array(v_request, (p.path #>> '{}')::jsonpath, '{}', true)
                   ORDER BY p.position), '[]'))
        INTO v_request
        FROM jsonb_array_elements(p_fingerprint::jsonb) WITH ORDINALITY AS p (path, position);
    END IF;
    RETURN sha256(convert_to(hivenet._canonical_json(v_request), 'UTF8'));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._policy_fingerprint(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._printed_time(p_seg jsonb, p_part text)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._printed_time(jsonb,text) FROM PUBLIC;

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
    PERFORM hivenet._check_timeline();
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format.name));
    -- Another promotion of the scope may have committed while we waited for the lock.
    IF hivenet._committed_sequence(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM hivenet._create_scope_counter(p_format, p_scope, p_fields, v_name);
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
    IF p_format.clock_unit IS NOT NULL AND p_drawn IS NOT FALSE THEN
        PERFORM hivenet._create_clock(v_name,
            pg_sequence_last_value(hivenet._clock_sequence(v_fallback)));
    END IF;
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

CREATE OR REPLACE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamp with time zone, p_dated_before timestamp without time zone DEFAULT NULL::timestamp without time zone, p_failure_cutoff timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_latest timestamptz := greatest(p_cutoff, p_failure_cutoff);
    v_keys text[];
BEGIN
    SELECT array_agg(DISTINCT o.key) INTO v_keys FROM hivenet.request_attempt o
    WHERE o.namespace || '' = p_namespace AND o.started_at < v_latest  -- the index's expression
      AND (o.started_at < p_cutoff OR o.state IN ('failed', 'expired'))
      AND (p_dated_before IS NULL OR hivenet._serial_time('system', o.key) < p_dated_before)
      AND NOT EXISTS (SELECT 1 FROM hivenet.request_attempt y
                      WHERE y.namespace = p_namespace AND y.key = o.key
                        AND (y.finished_at IS NULL OR y.finished_at >= v_latest
                             OR (y.state = 'success' AND y.finished_at >= p_cutoff)));
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
REVOKE EXECUTE ON FUNCTION hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone,timestamp with time zone) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._recompile()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_settings jsonb := (SELECT coalesce(jsonb_object_agg(s.name, s.value), '{}')
                         FROM hivenet.setting s);
    v_format hivenet.format;
    v_layout record;
    v_unified hivenet.format;  -- for step 3
    v_system hivenet.format;
    v_system_layout record;    -- for step 4, when format 'system' exists
    v_formats text := '';
    v_valid text := '';
    v_shaped text := '';
    v_time text := '';
    v_field text := '';
    v_scope text := '';
    v_time_ids text[] := ARRAY['', '', '', '', ''];  -- _fast_time_id; _time_id_batch's four
    v_parts record;
BEGIN
    FOR v_format IN SELECT * FROM hivenet.format f ORDER BY f.name LOOP
        v_formats := v_formats || format(' WHEN %L THEN %L::hivenet.format', v_format.name,
                                         v_format::text);
        IF v_format.time_shift IS NOT NULL THEN
            -- A numeric format: a fast path, and no text layout (parse_time_id reads its ids).
            SELECT * INTO v_parts FROM hivenet._time_id_parts(v_format,
                coalesce(v_settings ->> 'time_zone', 'UTC'),
                coalesce((v_settings ->> 'enforce_registry')::boolean, false),
                coalesce((v_settings ->> 'allow_fake_clock')::boolean, false));
            CONTINUE WHEN v_parts.guard IS NULL;
            -- The seq: a value of the statement's period within capacity, else NULL (the
            -- clamp of _fast_path_expression; next_time_ids has the same for its rows).
            v_time_ids := ARRAY[
                v_time_ids[1] || format(' WHEN %L THEN CASE WHEN %s THEN %s | nullif(least('
                                        'greatest(nextval(%s) - %s, 0), %s) %% %s, 0) END',
                                        v_format.name, v_parts.guard, v_parts.high,
                                        v_parts.counter, v_parts.base, v_parts.capacity + 1,
                                        v_parts.capacity + 1),
                v_time_ids[2] || format(' WHEN %L THEN CASE WHEN %s THEN %s END', v_format.name,
                                        v_parts.guard, v_parts.high),
                v_time_ids[3] || format(' WHEN %L THEN CASE WHEN %s THEN %s END', v_format.name,
                                        v_parts.guard, v_parts.counter),
                v_time_ids[4] || format(' WHEN %L THEN %s', v_format.name, v_parts.base),
                v_time_ids[5] || format(' WHEN %L THEN %s', v_format.name,
                                        v_parts.capacity + 1)];
            CONTINUE;
        END IF;
        SELECT * INTO v_layout FROM hivenet._layout_sql(v_format);
        v_valid := v_valid || format(' WHEN %L THEN %s', v_format.name, v_layout.valid);
        v_shaped := v_shaped || format(' WHEN %L THEN %s', v_format.name, v_layout.shape);
        -- NULL unless valid: the function is public (views), and casts of a serial that only
        -- looks right (month 99) would fail.
        v_time := v_time || format(' WHEN %L THEN %s', v_format.name,
            CASE WHEN v_layout.time_of IS NULL THEN 'NULL::timestamp'
                 ELSE format('CASE WHEN %s THEN %s END', v_layout.valid, v_layout.time_of)
                 END);
        v_field := v_field || format(' WHEN %L THEN CASE p_field%s ELSE NULL::text END',
            v_format.name, (SELECT coalesce(string_agg(format(' WHEN %L THEN %s', f.key,
                                                              f.value), '' ORDER BY f.key),
                                            ' WHEN NULL THEN NULL')
                            FROM jsonb_each_text(v_layout.fields) f));
        v_scope := v_scope || format(' WHEN %L THEN %s', v_format.name,
                                     coalesce(v_layout.scope, 'NULL::text'));
        IF v_format.name = 'unified' THEN
            v_unified := v_format;
        ELSIF v_format.name = 'system' THEN
            v_system := v_format;
            v_system_layout := v_layout;
        END IF;
    END LOOP;
    -- 1. The rows, as constants.
    PERFORM hivenet._replace_function('_setting_constant(p_name text)', 'text', 'STABLE',
        format('CASE p_name %s ELSE NULL::text END', coalesce(
            (SELECT string_agg(format('WHEN %L THEN %L', s.key, s.value), ' ' ORDER BY s.key)
             FROM jsonb_each_text(v_settings) s), 'WHEN NULL THEN NULL')));
    PERFORM hivenet._replace_function('_format_constant(p_name text)', 'hivenet.format',
        'STABLE', format('CASE p_name %s ELSE NULL::hivenet.format END',
                         coalesce(nullif(v_formats, ''), 'WHEN NULL THEN NULL')));
    -- 2. The layouts.
    PERFORM hivenet._replace_function('_serial_valid(p_format text, p_serial text)', 'boolean',
        'STABLE', format('CASE p_format%s ELSE NULL::boolean END', v_valid));
    PERFORM hivenet._replace_function('_serial_shaped(p_format text, p_serial text)',
        'boolean', 'STABLE', format('CASE p_format%s ELSE NULL::boolean END', v_shaped));
    PERFORM hivenet._replace_function('_serial_time(p_format text, p_serial text)',
        'timestamp', 'STABLE', format(
            'CASE p_format%s ELSE coalesce(hivenet.parse_serial(p_serial, p_format) '
            '->> ''datetime'', hivenet.parse_serial(p_serial, p_format) ->> ''date'')'
            '::timestamp END', v_time));
    PERFORM hivenet._replace_function(
        '_serial_field(p_format text, p_serial text, p_field text)', 'text', 'STABLE',
        format('CASE p_format%s ELSE hivenet.parse_serial(p_serial, p_format) ->> p_field END',
               v_field));
    PERFORM hivenet._replace_function('_serial_scope(p_format text, p_serial text)', 'text',
        'STABLE', format('CASE p_format%s ELSE NULL::text END', v_scope));
    -- 3. The allocation fast paths.
    PERFORM hivenet._replace_function('_fast_unified(p_a text, p_b text, p_c text)', 'text',
        'VOLATILE', hivenet._fast_path_expression(v_unified,
            coalesce(v_settings ->> 'time_zone', 'UTC'),
            coalesce((v_settings ->> 'enforce_registry')::boolean, false),
            coalesce((v_settings ->> 'allow_fake_clock')::boolean, false)));
    PERFORM hivenet._replace_function('_fast_system(p_a text, p_b text, p_c text)', 'text',
        'VOLATILE', hivenet._fast_path_expression(v_system,
            coalesce(v_settings ->> 'time_zone', 'UTC'),
            coalesce((v_settings ->> 'enforce_registry')::boolean, false),
            coalesce((v_settings ->> 'allow_fake_clock')::boolean, false)));
    -- A CASE needs a branch: none for a database without numeric formats (mid-upgrade).
    v_time_ids := ARRAY(SELECT coalesce(nullif(b, ''), ' WHEN NULL THEN NULL')
                        FROM unnest(v_time_ids) WITH ORDINALITY AS t (b, i) ORDER BY i);
    PERFORM hivenet._replace_function('_fast_time_id(p_format text, p_fields jsonb)', 'bigint',
        'VOLATILE', format('CASE p_format%s ELSE NULL::bigint END', v_time_ids[1]));
    PERFORM hivenet._replace_function('_time_id_batch(p_format text, p_fields jsonb, '
        'OUT high bigint, OUT counter regclass, OUT base bigint, OUT modulus bigint)',
        'record', 'STABLE', format('CASE p_format%s ELSE NULL::bigint END, CASE p_format%s '
        'ELSE NULL::regclass END, CASE p_format%s ELSE NULL::bigint END, CASE p_format%s '
        'ELSE NULL::bigint END', v_time_ids[2], v_time_ids[3], v_time_ids[4],
        v_time_ids[5]));
    -- 4. The window of steps.
    IF v_system.name IS NULL THEN
        SELECT NULL::text AS valid, NULL::text AS time_of, NULL::integer AS date_at
        INTO v_system_layout;
    END IF;
    PERFORM hivenet._replace_function('_step_in_window(p_serial text)', 'boolean', 'VOLATILE',
        hivenet._step_window_expression(v_system_layout.valid, v_system_layout.time_of,
                                        v_system_layout.date_at, v_settings));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._recompile() FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._request_start_valid(p_namespace text, p_key text, p_unified_serial text, p_lease interval)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT (hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key) AND ("left"(p_namespace, 8) <> 'hivenet.'::text) AND (p_unified_serial IS NULL) AND ((p_lease IS NULL) OR hivenet._interval_allowed(p_lease)));
END;
REVOKE EXECUTE ON FUNCTION hivenet._request_start_valid(text,text,text,interval) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._sample_allocation_rates()
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    INSERT INTO hivenet.allocation_rate AS r
        (format, timeline, sampled_at, period_start, issued, day)
    SELECT u.format, hivenet._timeline(), clock_timestamp(), min(u.period_start),
           sum(u.issued), (clock_timestamp() AT TIME ZONE hivenet._setting_value('time_zone'))::date
    FROM hivenet.scope_usage u
    GROUP BY u.format
    ON CONFLICT (format) DO UPDATE SET
        timeline = EXCLUDED.timeline, sampled_at = EXCLUDED.sampled_at,
        period_start = EXCLUDED.period_start, issued = EXCLUDED.issued, day = EXCLUDED.day,
        previous_peak = CASE EXCLUDED.day - r.day WHEN 0 THEN r.previous_peak
                                                  WHEN 1 THEN r.peak ELSE 0 END,
        peak = greatest(
            CASE WHEN EXCLUDED.day = r.day THEN r.peak ELSE 0 END,
            CASE WHEN EXCLUDED.timeline = r.timeline AND EXCLUDED.period_start = r.period_start
                      AND EXCLUDED.issued >= r.issued AND EXCLUDED.sampled_at > r.sampled_at
                 THEN (EXCLUDED.issued - r.issued)
                      / extract(epoch FROM EXCLUDED.sampled_at - r.sampled_at)::float8 END)
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._sample_allocation_rates() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._scope_fields(p_format hivenet.format, p_values text[])
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT coalesce(jsonb_object_agg(f.name, p_values[f.i]), '{}')
    FROM unnest(p_format.field_names) WITH ORDINALITY AS f(name, i)
    WHERE p_format.key_fields IS NULL OR f.i = ANY (p_format.key_fields)
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._scope_fields(hivenet.format,text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._scope_of(p_format hivenet.format, p_values text[])
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT
         CASE
             WHEN ((p_format).key_fields IS NULL) THEN array_to_string(p_values, ''::text)
             ELSE array_to_string(ARRAY( SELECT (_scope_of.p_values)[k.i] AS p_values
                FROM unnest((_scope_of.p_format).key_fields) WITH ORDINALITY k(i, n)
               ORDER BY k.n), ''::text)
         END AS array_to_string;
END;
REVOKE EXECUTE ON FUNCTION hivenet._scope_of(hivenet.format,text[]) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet.parse_serial(serial text, format text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.parse_serial(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._serial_field(p_format text, p_serial text, p_field text)
 RETURNS text
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN
             CASE p_field
                 WHEN 'merchant'::text THEN substr(p_serial, 1, 12)
                 WHEN 'shard'::text THEN substr(p_serial, 21, 2)
                 ELSE NULL::text
             END
             WHEN 'interface'::text THEN
             CASE p_field
                 WHEN 'instance'::text THEN substr(p_serial, 9, 2)
                 WHEN 'module'::text THEN substr(p_serial, 6, 3)
                 WHEN 'system'::text THEN substr(p_serial, 1, 5)
                 WHEN 'target'::text THEN substr(p_serial, 11, 5)
                 ELSE NULL::text
             END
             WHEN 'merchant_trade'::text THEN
             CASE p_field
                 WHEN 'merchant'::text THEN substr(p_serial, 1, 12)
                 ELSE NULL::text
             END
             WHEN 'per_second'::text THEN
             CASE p_field
                 WHEN NULL::text THEN NULL::text
                 ELSE NULL::text
             END
             WHEN 'system'::text THEN
             CASE p_field
                 WHEN 'instance'::text THEN substr(p_serial, 9, 2)
                 WHEN 'module'::text THEN substr(p_serial, 6, 3)
                 WHEN 'system'::text THEN substr(p_serial, 1, 5)
                 ELSE NULL::text
             END
             WHEN 'unified'::text THEN
             CASE p_field
                 WHEN 'instance'::text THEN substr(p_serial, 9, 2)
                 WHEN 'module'::text THEN substr(p_serial, 6, 3)
                 WHEN 'system'::text THEN substr(p_serial, 1, 5)
                 ELSE NULL::text
             END
             ELSE (hivenet.parse_serial(p_serial, p_format) ->> p_field)
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._serial_field(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._serial_time(p_format text, p_serial text)
 RETURNS timestamp without time zone
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((substr(p_serial, 13, 4) <> '0000'::text) AND (((substr(p_serial, 17, 2))::integer >= 1) AND ((substr(p_serial, 17, 2))::integer <= 12)) AND ((substr(p_serial, 19, 2))::integer >= 1) AND (((substr(p_serial, 19, 2))::integer <= 28) OR ((substr(p_serial, 19, 2))::integer <=
                     CASE (substr(p_serial, 17, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 13, 4))::integer % 4) = 0) AND ((((substr(p_serial, 13, 4))::integer % 100) <> 0) OR (((substr(p_serial, 13, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 17, 2))::integer + ((substr(p_serial, 17, 2))::integer / 8)) % 2))
                     END)) AND (substr(p_serial, 23, 6) <> '000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 13, 4))::integer, (substr(p_serial, 17, 2))::integer, (substr(p_serial, 19, 2))::integer, 0, 0, (0)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'interface'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 39) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 16, 4) <> '0000'::text) AND (((substr(p_serial, 20, 2))::integer >= 1) AND ((substr(p_serial, 20, 2))::integer <= 12)) AND ((substr(p_serial, 22, 2))::integer >= 1) AND (((substr(p_serial, 22, 2))::integer <= 28) OR ((substr(p_serial, 22, 2))::integer <=
                     CASE (substr(p_serial, 20, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 16, 4))::integer % 4) = 0) AND ((((substr(p_serial, 16, 4))::integer % 100) <> 0) OR (((substr(p_serial, 16, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 20, 2))::integer + ((substr(p_serial, 20, 2))::integer / 8)) % 2))
                     END)) AND ((substr(p_serial, 24, 2))::integer < 24) AND ((substr(p_serial, 26, 2))::integer < 60) AND ((substr(p_serial, 28, 2))::integer < 60) AND (substr(p_serial, 30, 10) <> '0000000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 16, 4))::integer, (substr(p_serial, 20, 2))::integer, (substr(p_serial, 22, 2))::integer, (substr(p_serial, 24, 2))::integer, (substr(p_serial, 26, 2))::integer, ((substr(p_serial, 28, 2))::integer)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'merchant_trade'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 32) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((substr(p_serial, 13, 4) <> '0000'::text) AND (((substr(p_serial, 17, 2))::integer >= 1) AND ((substr(p_serial, 17, 2))::integer <= 12)) AND ((substr(p_serial, 19, 2))::integer >= 1) AND (((substr(p_serial, 19, 2))::integer <= 28) OR ((substr(p_serial, 19, 2))::integer <=
                     CASE (substr(p_serial, 17, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 13, 4))::integer % 4) = 0) AND ((((substr(p_serial, 13, 4))::integer % 100) <> 0) OR (((substr(p_serial, 13, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 17, 2))::integer + ((substr(p_serial, 17, 2))::integer / 8)) % 2))
                     END)) AND ((substr(p_serial, 21, 2))::integer < 24) AND ((substr(p_serial, 23, 2))::integer < 60) AND ((substr(p_serial, 25, 2))::integer < 60) AND (substr(p_serial, 27, 6) <> '000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 13, 4))::integer, (substr(p_serial, 17, 2))::integer, (substr(p_serial, 19, 2))::integer, (substr(p_serial, 21, 2))::integer, (substr(p_serial, 23, 2))::integer, ((substr(p_serial, 25, 2))::integer)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'per_second'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 17) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((((substr(p_serial, 3, 2))::integer >= 1) AND ((substr(p_serial, 3, 2))::integer <= 12)) AND ((substr(p_serial, 5, 2))::integer >= 1) AND (((substr(p_serial, 5, 2))::integer <= 28) OR ((substr(p_serial, 5, 2))::integer <=
                     CASE (substr(p_serial, 3, 2))::integer
                         WHEN 2 THEN (28 + ((((((substr(p_serial, 1, 2))::integer +
                         CASE
                             WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                             ELSE 1900
                         END) % 4) = 0) AND (((((substr(p_serial, 1, 2))::integer +
                         CASE
                             WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                             ELSE 1900
                         END) % 100) <> 0) OR ((((substr(p_serial, 1, 2))::integer +
                         CASE
                             WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                             ELSE 1900
                         END) % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 3, 2))::integer + ((substr(p_serial, 3, 2))::integer / 8)) % 2))
                     END)) AND ((substr(p_serial, 7, 2))::integer < 24) AND ((substr(p_serial, 9, 2))::integer < 60) AND ((substr(p_serial, 11, 2))::integer < 60) AND (substr(p_serial, 13, 5) <> '00000'::text))
                     ELSE false
                 END THEN make_timestamp(((substr(p_serial, 1, 2))::integer +
                 CASE
                     WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                     ELSE 1900
                 END), (substr(p_serial, 3, 2))::integer, (substr(p_serial, 5, 2))::integer, (substr(p_serial, 7, 2))::integer, (substr(p_serial, 9, 2))::integer, ((substr(p_serial, 11, 2))::integer)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'system'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 30) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 11, 4) <> '0000'::text) AND (((substr(p_serial, 15, 2))::integer >= 1) AND ((substr(p_serial, 15, 2))::integer <= 12)) AND ((substr(p_serial, 17, 2))::integer >= 1) AND (((substr(p_serial, 17, 2))::integer <= 28) OR ((substr(p_serial, 17, 2))::integer <=
                     CASE (substr(p_serial, 15, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 11, 4))::integer % 4) = 0) AND ((((substr(p_serial, 11, 4))::integer % 100) <> 0) OR (((substr(p_serial, 11, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 15, 2))::integer + ((substr(p_serial, 15, 2))::integer / 8)) % 2))
                     END)) AND (substr(p_serial, 19, 12) <> '000000000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 11, 4))::integer, (substr(p_serial, 15, 2))::integer, (substr(p_serial, 17, 2))::integer, 0, 0, (0)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'unified'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 11, 4) <> '0000'::text) AND (((substr(p_serial, 15, 2))::integer >= 1) AND ((substr(p_serial, 15, 2))::integer <= 12)) AND ((substr(p_serial, 17, 2))::integer >= 1) AND (((substr(p_serial, 17, 2))::integer <= 28) OR ((substr(p_serial, 17, 2))::integer <=
                     CASE (substr(p_serial, 15, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 11, 4))::integer % 4) = 0) AND ((((substr(p_serial, 11, 4))::integer % 100) <> 0) OR (((substr(p_serial, 11, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 15, 2))::integer + ((substr(p_serial, 15, 2))::integer / 8)) % 2))
                     END)) AND (substr(p_serial, 19, 10) <> '0000000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 11, 4))::integer, (substr(p_serial, 15, 2))::integer, (substr(p_serial, 17, 2))::integer, 0, 0, (0)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             ELSE (COALESCE((hivenet.parse_serial(p_serial, p_format) ->> 'datetime'::text), (hivenet.parse_serial(p_serial, p_format) ->> 'date'::text)))::timestamp without time zone
         END AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet._serial_time(text,text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._set_policy(p_namespace text, p_given jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_stored jsonb;
    v_policy hivenet.request_namespace;
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
    END IF;
    SELECT coalesce(jsonb_object_agg(f.key, hivenet._policy_checked(p_namespace, f.key, f.value)),
                    '{}')
    INTO v_stored FROM jsonb_each(jsonb_strip_nulls(p_given)) AS f;
    -- The namespace's row, locked until commit (made first when it has none).
    INSERT INTO hivenet.request_namespace AS n (namespace) VALUES (p_namespace)
    ON CONFLICT (namespace) DO UPDATE SET namespace = EXCLUDED.namespace
    RETURNING n.* INTO v_policy;
    v_policy := jsonb_populate_record(v_policy, v_stored);
    PERFORM hivenet._check_policy(v_policy);
    DELETE FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF jsonb_strip_nulls(to_jsonb(v_policy)) <> jsonb_build_object('namespace', p_namespace) THEN
        INSERT INTO hivenet.request_namespace SELECT v_policy.*;
    END IF;
    IF v_policy.audit_chain THEN
        PERFORM hivenet._start_chain(p_namespace);  -- audit.sql
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._set_policy(text,jsonb) FROM PUBLIC;

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
             WHEN 'failover_gap'::text THEN '100000'::text
             WHEN 'failover_loss_window'::text THEN '30 seconds'::text
             WHEN 'interface_future_tolerance'::text THEN '5 minutes'::text
             WHEN 'interface_partitions_ahead'::text THEN '2 days'::text
             WHEN 'interface_retention'::text THEN '7 days'::text
             WHEN 'interface_window'::text THEN '1 day'::text
             WHEN 'max_counted_namespaces'::text THEN '100'::text
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

CREATE OR REPLACE FUNCTION hivenet._shown(p_value text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN p_value IS NULL THEN 'NULL'
                WHEN q.quoted !~ hivenet._unseen_characters() THEN q.quoted
                ELSE (SELECT string_agg(CASE WHEN c !~ hivenet._unseen_characters() THEN c
                                             WHEN ascii(c) < 256
                                             THEN '\x' || lpad(to_hex(ascii(c)), 2, '0')
                                             WHEN ascii(c) < 65536
                                             THEN '\u' || lpad(to_hex(ascii(c)), 4, '0')
                                             ELSE '\U' || lpad(to_hex(ascii(c)), 8, '0') END,
                                        '' ORDER BY i)
                      FROM unnest(string_to_array(q.quoted, NULL)) WITH ORDINALITY AS t(c, i))
           END || CASE WHEN length(p_value) > 40
                       THEN format('... (%s characters)', length(p_value)) ELSE '' END
    FROM (SELECT quote_literal(CASE WHEN length(p_value) <= 40 THEN p_value
                                    ELSE left(p_value, 32) END) AS quoted) q
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._shown(text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._start_attempt(p_namespace text, p_key text, p_attempt integer, p_fingerprint bytea, p_unified_serial text, p_lease interval, p_chained boolean, p_raw_request bytea)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO hivenet._new_attempt
    VALUES (p_namespace, p_key, p_attempt, p_fingerprint, p_unified_serial, p_lease,
            p_raw_request);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_chained THEN
        PERFORM hivenet._chain_append(p_namespace, p_key, p_attempt, 'begin');
    END IF;
    PERFORM hivenet._count_decision(p_namespace, 'started');
    RETURN true;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_attempt(text,text,integer,bytea,text,interval,boolean,bytea) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._start_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, p_wait interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_policy hivenet.request_namespace;
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(hivenet._start_valid(p_step, p_namespace, p_key, p_unified_serial,
                                              p_lease), false)) THEN
        RETURN false;
    END IF;
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF hivenet._starts_apart(v_policy) OR NOT hivenet._key_allowed(v_policy, p_key) THEN
        RETURN false;
    END IF;
    RETURN hivenet._start_attempt(p_namespace, p_key, 1, hivenet._fingerprint(p_request),
                                  p_unified_serial, p_lease, false, NULL);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_key(boolean,text,text,jsonb,text,text,interval,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_valid(p_step boolean, p_namespace text, p_key text, p_unified_serial text, p_lease interval)
 RETURNS boolean
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN p_step THEN ((p_namespace = 'hivenet.steps'::text) AND hivenet._step_start_valid(p_key, p_unified_serial, p_lease))
             ELSE hivenet._request_start_valid(p_namespace, p_key, p_unified_serial, p_lease)
         END AS _request_start_valid;
END;
REVOKE EXECUTE ON FUNCTION hivenet._start_valid(boolean,text,text,text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._starts_apart(p_policy hivenet.request_namespace)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT (((p_policy).fingerprint IS NOT NULL) OR ((p_policy).audit_chain IS NOT NULL) OR ((p_policy).keep_raw_request IS NOT NULL));
END;
REVOKE EXECUTE ON FUNCTION hivenet._starts_apart(hivenet.request_namespace) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._time_id_batch(p_format text, p_fields jsonb, OUT high bigint, OUT counter regclass, OUT base bigint, OUT modulus bigint)
 RETURNS record
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'time_id'::text THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND (COALESCE(p_fields, '{}'::jsonb) = '{}'::jsonb)) THEN ((to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYMMDDHH24MISS'::text))::bigint << 14)
                 ELSE NULL::bigint
             END
             ELSE NULL::bigint
         END AS "case",
         CASE p_format
             WHEN 'time_id'::text THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND (COALESCE(p_fields, '{}'::jsonb) = '{}'::jsonb)) THEN to_regclass('hivenet."seq_time_id_"'::text)
                 ELSE NULL::regclass
             END
             ELSE NULL::regclass
         END AS "case",
         CASE p_format
             WHEN 'time_id'::text THEN (((floor(date_part('epoch'::text, (statement_timestamp() AT TIME ZONE 'UTC'::text))))::bigint - 946684799) * (1000000000)::bigint)
             ELSE NULL::bigint
         END AS "case",
         CASE p_format
             WHEN 'time_id'::text THEN (16384)::bigint
             ELSE NULL::bigint
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._time_id_batch(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._time_id_count(p_format text, p_n integer)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._time_id_count(text,integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._time_id_digits(p_number bigint, p_width integer)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN length(p_number::text) > p_width THEN p_number::text
                ELSE lpad(p_number::text, p_width, '0') END
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._time_id_digits(bigint,integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._time_id_fields(p_format hivenet.format, p_values text[])
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT coalesce(bit_or(p_values[array_position(p_format.field_names, e.s ->> 'field')]
                           ::bigint << (e.s ->> 'shift')::integer), 0)
    FROM jsonb_array_elements(p_format.segments) AS e (s)
    WHERE e.s ? 'field'
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._time_id_fields(hivenet.format,text[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._time_id_parts(p_format hivenet.format, p_zone text, p_enforce_registry boolean, p_allow_fake_clock boolean, OUT guard text, OUT high text, OUT counter text, OUT base text, OUT capacity bigint)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    -- Until the session's first allocation has checked the timeline (failover.sql).
    v_checks text[] := ARRAY[$f$current_setting('hivenet.timeline_checked', true) = 'true'$f$];
    v_bounds text[] := '{}';
    v_bits text := '';
    v_scope text[] := '{}';
    v_value text;
    v_seg jsonb;
BEGIN
    IF p_enforce_registry AND p_format.field_names <> '{}' THEN
        RETURN;
    END IF;
    IF p_allow_fake_clock THEN
        v_checks := v_checks
                    || $f$coalesce(current_setting('hivenet.fake_now', true), '') = ''$f$::text;
    END IF;
    FOR v_seg IN SELECT s FROM jsonb_array_elements(p_format.segments) AS s WHERE s ? 'field'
    LOOP
        v_value := format('(p_fields ->> %L)', v_seg ->> 'field');
        v_bits := v_bits || format(' | (%s::bigint << %s)', v_value, v_seg ->> 'shift');
        IF coalesce(v_seg -> 'counter', 'true') = 'true' THEN
            v_scope := v_scope || v_value;
        END IF;
        IF v_seg ? 'min' THEN
            v_bounds := v_bounds || format('%s::numeric >= %s', v_value, v_seg ->> 'min');
        END IF;
        IF v_seg ? 'max' THEN
            v_bounds := v_bounds || format('%s::numeric <= %s', v_value, v_seg ->> 'max');
        END IF;
    END LOOP;
    IF p_format.field_names = '{}' THEN
        v_checks := v_checks || $f$coalesce(p_fields, '{}') = '{}'::jsonb$f$::text;
        counter := quote_literal(
            'hivenet."' || hivenet._scope_sequence_name(p_format.name, '') || '"');
    ELSE
        -- Exactly the format's fields, as strings, matching their pattern; digits, so the
        -- quoted sequence name is theirs.
        v_checks := v_checks || format('p_fields = jsonb_build_object(%s)', (
            SELECT string_agg(format('%L, p_fields ->> %L', n, n), ', ' ORDER BY i)
            FROM unnest(p_format.field_names) WITH ORDINALITY AS f (n, i)));
        v_checks := v_checks || format('(%s) ~ %L', (
            SELECT string_agg(format('(p_fields ->> %L)', n), ' || '' '' || ' ORDER BY i)
            FROM unnest(p_format.field_names) WITH ORDINALITY AS f (n, i)),
            p_format.field_pattern);
        counter := format($f$'hivenet."' || hivenet._scope_sequence_name(%L, %s) || '"'$f$,
                          p_format.name, array_to_string(v_scope, ' || '));
    END IF;
    guard := array_to_string(v_checks, ' AND ');
    IF v_bounds <> '{}' THEN
        guard := format('CASE WHEN %s THEN %s ELSE false END', guard,
                        array_to_string(v_bounds, ' AND '));
    END IF;
    high := format('(to_char(%s, %L)::bigint << %s)%s', v_local, p_format.head_pattern,
                   p_format.time_shift, v_bits);
    counter := format('to_regclass(%s)', counter);
    -- _period_index(local, reset) in double precision: fewer, cheaper nodes, and no call the
    -- caller would need the right to run (tests/test_generated.py compares the two).
    base := format('%s * %s::bigint', CASE p_format.reset
        WHEN 'month' THEN format('(date_part(''year'', %1$s)::bigint * 12 + date_part(''month'', '
                                 '%1$s)::bigint - 24000)', v_local)
        WHEN 'year' THEN format('(date_part(''year'', %s)::bigint - 1999)', v_local)
        ELSE format('(floor(date_part(''epoch'', %s)%s)::bigint - %s)', v_local,
            CASE p_format.reset WHEN 'second' THEN '' ELSE format(' / %s', u.seconds) END,
            extract(epoch FROM timestamp '2000-01-01')::bigint / u.seconds - 1) END,
        p_format.stride)
    FROM (VALUES ('second', 1), ('minute', 60), ('hour', 3600), ('day', 86400),
                 ('month', 1), ('year', 1)) AS u (reset, seconds)
    WHERE u.reset = p_format.reset;
    capacity := p_format.capacity;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._time_id_parts(hivenet.format,text,boolean,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._time_number_max(p_to_char text)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT replace(replace(replace(replace(replace(replace(replace(p_to_char,
        'YYYY', '9999'), 'HH24', '23'), 'YY', '99'), 'MM', '12'), 'DD', '31'), 'MI', '59'),
        'SS', '59')::bigint
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._time_number_max(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._timeout_left()
 RETURNS interval
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT least(
        nullif(current_setting('statement_timeout')::interval, interval '0')
            - greatest(clock_timestamp() - statement_timestamp(), interval '0'),
        nullif(coalesce(current_setting('transaction_timeout', true), '0')::interval,
               interval '0')
            - greatest(clock_timestamp() - transaction_timestamp(), interval '0'))
        - interval '100 milliseconds'
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._timeout_left() FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._waited_for_row(p_context text, p_table text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT (EXISTS ( SELECT
            FROM regexp_split_to_table(_waited_for_row.p_context, '\n'::text) c(line)
           WHERE ((c.line ~ '\d+, ?\d+'::text) AND (strpos(c.line, _waited_for_row.p_table) > 0)))) AS "exists";
END;
REVOKE EXECUTE ON FUNCTION hivenet._waited_for_row(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._wake_waiters(p_namespace text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM pg_notify('hivenet_request_finished', json_build_array(p_namespace, p_key)::text);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._wake_waiters(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.begin_request(namespace text, key text, request jsonb DEFAULT NULL::jsonb, on_success text DEFAULT 'replay'::text, lease interval DEFAULT NULL::interval, nowait boolean DEFAULT false, wait interval DEFAULT NULL::interval, raw_request bytea DEFAULT NULL::bytea)
 RETURNS TABLE(outcome text, attempt integer, response jsonb)
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT 'started'::text AS text,
     1,
     NULL::jsonb AS jsonb
   WHERE hivenet._start_key(false, begin_request.namespace, begin_request.key, begin_request.request, begin_request.on_success, NULL::text, begin_request.lease, begin_request.nowait, begin_request.wait)
 UNION ALL
  SELECT b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_key(false, begin_request.namespace, begin_request.key, begin_request.request, begin_request.on_success, NULL::text, begin_request.lease, begin_request.nowait, begin_request.wait, begin_request.raw_request) b(outcome, attempt, response)
 LIMIT 1;
END;
REVOKE EXECUTE ON FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean,interval,bytea) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.begin_requests(namespace text, keys text[], requests jsonb[], lease interval DEFAULT NULL::interval)
 RETURNS TABLE(key text, outcome text, attempt integer, response jsonb)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
BEGIN ATOMIC
 SELECT b.key,
     b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_batch(false, begin_requests.namespace, begin_requests.keys, begin_requests.requests, NULL::text, begin_requests.lease) b(key, outcome, attempt, response);
END;
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

CREATE OR REPLACE FUNCTION hivenet.begin_step(system_serial text, request jsonb DEFAULT NULL::jsonb, on_success text DEFAULT 'replay'::text, unified_serial text DEFAULT NULL::text, lease interval DEFAULT NULL::interval, nowait boolean DEFAULT false, wait interval DEFAULT NULL::interval)
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
   WHERE ((r.system_serial = begin_step.system_serial) AND (r.fingerprint = hivenet._fingerprint(begin_step.request)) AND (begin_step.on_success = 'replay'::text) AND (begin_step.nowait IS NOT NULL) AND ((begin_step.lease IS NULL) OR hivenet._interval_allowed(begin_step.lease)) AND ((begin_step.wait IS NULL) OR ((begin_step.wait >= '00:00:00'::interval) AND (begin_step.wait <= hivenet._longest_interval()))) AND ((begin_step.unified_serial IS NULL) OR (begin_step.unified_serial = r.unified_serial)) AND hivenet._step_in_window(r.system_serial))
 UNION ALL
  SELECT 'started'::text AS text,
     1,
     NULL::jsonb AS jsonb
   WHERE hivenet._start_key(true, 'hivenet.steps'::text, begin_step.system_serial, begin_step.request, begin_step.on_success, begin_step.unified_serial, begin_step.lease, begin_step.nowait, begin_step.wait)
 UNION ALL
  SELECT b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_key(true, 'hivenet.steps'::text, begin_step.system_serial, begin_step.request, begin_step.on_success, begin_step.unified_serial, begin_step.lease, begin_step.nowait, begin_step.wait, NULL::bytea) b(outcome, attempt, response)
 LIMIT 1;
END;
REVOKE EXECUTE ON FUNCTION hivenet.begin_step(text,jsonb,text,text,interval,boolean,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.begin_steps(system_serials text[], requests jsonb[], unified_serial text DEFAULT NULL::text, lease interval DEFAULT NULL::interval)
 RETURNS TABLE(system_serial text, outcome text, attempt integer, response jsonb)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
BEGIN ATOMIC
 SELECT b.key,
     b.outcome,
     b.attempt,
     b.response
    FROM hivenet._begin_batch(true, 'hivenet.steps'::text, begin_steps.system_serials, begin_steps.requests, begin_steps.unified_serial, begin_steps.lease) b(key, outcome, attempt, response);
END;
REVOKE EXECUTE ON FUNCTION hivenet.begin_steps(text[],jsonb[],text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.call_chain(unified_serial text)
 RETURNS TABLE(interface_serial text, system_serial text, source_system text, source_module text, source_instance text, target_system text, serial_time timestamp without time zone, recorded_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.interface_serial, c.system_serial, c.source_system, c.source_module,
           c.source_instance, c.target_system, c.serial_time, c.recorded_at
    FROM hivenet.interface_calls c
    WHERE c.unified_serial = call_chain.unified_serial
    ORDER BY c.call_order
$function$;
REVOKE EXECUTE ON FUNCTION hivenet.call_chain(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.claim(namespace text, key text, nowait boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key; p_nowait ALIAS FOR nowait;
BEGIN
    IF p_nowait THEN
        -- The table's lock first, waited for as by any statement (as claim_interface_serial,
        -- dedup.sql): a wait for it under the nowait path's lock_timeout would read as a
        -- claim of this key in progress (a false HN040).
        LOCK TABLE hivenet.claim_record IN ROW EXCLUSIVE MODE;
        PERFORM hivenet._claim_nowait(p_namespace, p_key);
        RETURN;
    END IF;
    -- Fast path: one statement (its plan cached by the session) that takes a free claim of a
    -- well-sized namespace and key; anything else, a taken claim included, goes to the full
    -- path, which decides and raises the exact error.
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    SELECT p_namespace, p_key, c.now,
           c.now + (SELECT n.expiry FROM hivenet.claim_namespace n
                    WHERE n.namespace = p_namespace)
    FROM (SELECT hivenet.now() AS now OFFSET 0) c  -- one clock reading for both times
    WHERE hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key)
      AND left(p_namespace, 8) <> 'hivenet.'
    ON CONFLICT (namespace, key) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_checked(p_namespace, p_key);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.claim(text,text,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(serial text, unified_serial text DEFAULT NULL::text, system_serial text DEFAULT NULL::text, nowait boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_serial ALIAS FOR serial; p_unified_serial ALIAS FOR unified_serial;
    p_system_serial ALIAS FOR system_serial; p_nowait ALIAS FOR nowait;
    v_mark text;  -- an assignment is a simple expression; PERFORM would run the executor
BEGIN
    IF p_nowait THEN
        -- The table's lock first, waited for as by any statement: a maintain() creating a
        -- partition holds the table a moment, and under the nowait path's lock_timeout that
        -- wait would read as a claim of this serial in progress (a false HN020).
        LOCK TABLE hivenet.interface_call IN ROW EXCLUSIVE MODE;
        PERFORM hivenet._claim_interface_serial_nowait(p_serial, p_unified_serial,
                                                       p_system_serial);
        v_mark := set_config('hivenet.interface_claimed', 'on', true);
        RETURN;
    END IF;
    -- Fast path, run on every incoming call: one statement (its plan cached by the session)
    -- that records the call only when every check of the full path surely passes, the same
    -- generated expressions folded into its WHERE: a valid serial (its time read only then:
    -- casts may fail on others), inside the window, well-shaped carried serials, every
    -- instance owned, the day's partition there. Anything else, a duplicate included, goes
    -- to the full path, which decides and raises the exact error. Only for the transaction's
    -- first claim (hivenet.interface_claimed, set locally at the end of every claim, undone
    -- by a rolled-back savepoint as the claim's locks are): then it holds no lock on the
    -- table yet, so its list of partitions is refreshed when the insert takes that lock (see
    -- the full path).
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    SELECT p_serial, c.local_time::date, p_unified_serial, p_system_serial, c.now
    FROM (SELECT hivenet._serial_time('interface', p_serial) AS local_time,  -- NULL: invalid
                 hivenet.now() AS now
          OFFSET 0) c  -- one clock reading for the window and recorded_at
    WHERE c.local_time >= hivenet._caller_now(c.now, 'earliest')
                          - hivenet._setting_constant('interface_window')::interval
      AND c.local_time <= hivenet._caller_now(c.now, 'latest')
                          + hivenet._setting_constant('interface_future_tolerance')::interval
      AND coalesce(hivenet._serial_shaped('unified', p_unified_serial), true)
      AND coalesce(hivenet._serial_shaped('system', p_system_serial), true)
      AND hivenet._setting_constant('owned_instances') = 'all'
      AND to_regclass('hivenet.interface_call_' || to_char(c.local_time, 'YYYYMMDD'))
          IS NOT NULL
      AND current_setting('hivenet.interface_claimed', true) IS DISTINCT FROM 'on'
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_interface_serial_checked(p_serial, p_unified_serial,
                                                        p_system_serial);
    END IF;
    v_mark := set_config('hivenet.interface_claimed', 'on', true);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.claim_interface_serial(text,text,text,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.define_format(name text, segments jsonb, borrow_next_period boolean DEFAULT false, description text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_name ALIAS FOR name; p_segments ALIAS FOR segments;
    p_borrow_next_period ALIAS FOR borrow_next_period; p_description ALIAS FOR description;
    v_new hivenet.format := hivenet._compile_format(p_name, p_segments, p_borrow_next_period,
                                                    p_description);
    v_old hivenet.format;
    v_leftover text;
BEGIN
    INSERT INTO hivenet.format VALUES (v_new.*) ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        FOR v_leftover IN
            UPDATE hivenet.scope SET definition = md5(v_new.segments::text)
            WHERE format = p_name AND definition <> md5(v_new.segments::text)
            RETURNING sequence_name
        LOOP
            PERFORM setval(('hivenet.' || quote_ident(v_leftover))::regclass, 0, true);
            IF v_new.clock_unit IS NOT NULL THEN
                PERFORM hivenet._create_clock(v_leftover, 0);  -- the old one may have had none
            END IF;
        END LOOP;
    ELSE
        SELECT * INTO v_old FROM hivenet.format WHERE name = p_name;
        IF v_old.segments <> v_new.segments
           OR v_old.borrow_next_period <> v_new.borrow_next_period THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('format %L is already defined differently (as %s)', p_name,
                                 hivenet._shown(v_old.segments::text));
        END IF;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.define_format(text,jsonb,boolean,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.fence_failover(gap bigint DEFAULT NULL::bigint, force boolean DEFAULT false)
 RETURNS TABLE(timeline integer, format text, counter text, from_value bigint, to_value bigint, parked boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_gap ALIAS FOR gap; p_force ALIAS FOR force;
BEGIN
    RETURN QUERY SELECT * FROM hivenet._fence(
        coalesce(p_gap, hivenet._failover_gap()), p_force, 'command');
    IF FOUND THEN
        -- The jump is no allocation: the next sample of the rates starts afresh.
        UPDATE hivenet.allocation_rate SET issued = NULL;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.fence_failover(bigint,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.finish_request(namespace text, key text, attempt integer, succeeded boolean, response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key; p_attempt ALIAS FOR attempt;
    p_succeeded ALIAS FOR succeeded; p_response ALIAS FOR response;
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

CREATE OR REPLACE FUNCTION hivenet.finish_requests(namespace text, keys text[], attempts integer[], succeeded boolean[], responses jsonb[])
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
BEGIN ATOMIC
 SELECT hivenet._finish_batch(false, namespace, keys, attempts, succeeded, responses) AS _finish_batch;
END;
REVOKE EXECUTE ON FUNCTION hivenet.finish_requests(text,text[],integer[],boolean[],jsonb[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.finish_step(system_serial text, attempt integer, succeeded boolean, response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE sql
BEGIN ATOMIC
 SELECT hivenet.finish_request('hivenet.steps'::text, system_serial, attempt, succeeded, response) AS finish_request;
END;
REVOKE EXECUTE ON FUNCTION hivenet.finish_step(text,integer,boolean,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.finish_steps(system_serials text[], attempts integer[], succeeded boolean[], responses jsonb[])
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
BEGIN ATOMIC
 SELECT hivenet._finish_batch(true, 'hivenet.steps'::text, system_serials, attempts, succeeded, responses) AS _finish_batch;
END;
REVOKE EXECUTE ON FUNCTION hivenet.finish_steps(text[],integer[],boolean[],jsonb[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_interface_serial(system text, module text, instance text, target text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_system ALIAS FOR system; p_module ALIAS FOR module; p_instance ALIAS FOR instance;
    p_target ALIAS FOR target;
BEGIN
    RETURN (hivenet._allocate('interface', NULL,
                              ARRAY[p_system, p_module, p_instance, p_target], 1))[1];
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.next_interface_serial(text,text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_serial(format text, fields jsonb)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields;
BEGIN
    RETURN (hivenet._allocate(p_format, p_fields, NULL, 1))[1];
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.next_serial(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_serials(format text, fields jsonb, n integer)
 RETURNS SETOF text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields; p_n ALIAS FOR n;
    v_limit integer := hivenet._setting_constant('max_serials_per_call')::integer;
BEGIN
    IF p_n > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s is more than the %s serials one call may take '
                             '(setting max_serials_per_call); take them in several calls',
                             hivenet._shown(p_format), p_n, v_limit);
    END IF;
    RETURN QUERY SELECT unnest(hivenet._allocate(p_format, p_fields, NULL, p_n));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.next_serials(text,jsonb,integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_system_serial(system text, module text, instance text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_system(system, module, instance), hivenet.next_serial('system'::text, jsonb_build_object('system', system, 'module', module, 'instance', instance))) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_system_serial(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_time_id(format text DEFAULT 'time_id'::text, fields jsonb DEFAULT NULL::jsonb)
 RETURNS bigint
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_time_id(format, fields), hivenet._next_time_id(format, fields)) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_time_id(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_time_ids(format text, n integer, fields jsonb DEFAULT NULL::jsonb)
 RETURNS SETOF bigint
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT COALESCE((b.high | NULLIF((LEAST(GREATEST((nextval(b.counter) - b.base), (0)::bigint), b.modulus) % b.modulus), 0)), hivenet._next_time_id(next_time_ids.format, next_time_ids.fields)) AS "coalesce"
    FROM hivenet._time_id_batch(next_time_ids.format, next_time_ids.fields) b(high, counter, base, modulus),
     generate_series(1, hivenet._time_id_count(next_time_ids.format, next_time_ids.n)) generate_series(generate_series);
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_time_ids(text,integer,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_unified_serial(system text, module text, instance text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_unified(system, module, instance), hivenet.next_serial('unified'::text, jsonb_build_object('system', system, 'module', module, 'instance', instance))) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_unified_serial(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.own_instances(instances text, single_primary_formats boolean DEFAULT NULL::boolean, force boolean DEFAULT false)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_instances ALIAS FOR instances; p_single_primary_formats ALIAS FOR single_primary_formats;
    p_force ALIAS FOR force;
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

CREATE OR REPLACE FUNCTION hivenet.parse_time_id(id bigint, format text DEFAULT 'time_id'::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.parse_time_id(bigint,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.prepare_scope(format text, fields jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields;
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
    -- Before any lock (failover.sql): on a new timeline, the fence comes first.
    PERFORM hivenet._check_timeline();
    v_drawn := hivenet._fallback_drawn(v_format);
    FOR v_fields IN SELECT jsonb_build_object('scope', n.key, 'fields', n.value)
                    FROM jsonb_each(v_new) AS n ORDER BY n.key LOOP
        PERFORM hivenet._promote_scope(v_format, v_fields ->> 'scope', v_fields -> 'fields',
                                       v_fields ->> 'scope' = ANY (v_drawn));
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.prepare_scope(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.register_module(system text, module text, description text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_system ALIAS FOR system; p_module ALIAS FOR module; p_description ALIAS FOR description;
    v_format text;
BEGIN
    IF p_module IS NULL OR p_module !~ '^[0-9A-Za-z]{3}$' OR octet_length(p_module) <> 3 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('module %s must be 3 characters of [0-9A-Za-z]',
                             hivenet._shown(p_module));
    END IF;
    IF NOT EXISTS (SELECT FROM hivenet.registered_system WHERE system = p_system) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('system %s is not registered', hivenet._shown(p_system));
    END IF;
    INSERT INTO hivenet.registered_module (system, module, description)
    VALUES (p_system, p_module, p_description)
    ON CONFLICT (system, module) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_module.description);
    FOR v_format IN
        SELECT f.name FROM hivenet.format f
        WHERE ARRAY(SELECT f.field_names[k] FROM generate_subscripts(f.field_names, 1) AS k
                    WHERE f.key_fields IS NULL OR k = ANY (f.key_fields) ORDER BY 1)
              = ARRAY['instance', 'module', 'system']
        ORDER BY f.name
    LOOP
        PERFORM hivenet.prepare_scope(v_format, (
            SELECT coalesce(jsonb_agg(jsonb_build_object('system', p_system, 'module', p_module,
                                                'instance', to_char(i, 'FM00')) ORDER BY i), '[]')
            FROM generate_series(1, 99) AS i
            WHERE hivenet._instance_in(to_char(i, 'FM00'),
                                       hivenet._setting_value('owned_instances'))));
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.register_module(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.register_system(system text, description text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_system ALIAS FOR system; p_description ALIAS FOR description;
BEGIN
    IF p_system IS NULL OR p_system !~ '^[0-9A-Za-z]{5}$' OR octet_length(p_system) <> 5 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('system %s must be 5 characters of [0-9A-Za-z]',
                             hivenet._shown(p_system));
    END IF;
    INSERT INTO hivenet.registered_system (system, description) VALUES (p_system, p_description)
    ON CONFLICT (system) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_system.description);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.register_system(text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.replication_warning()
 RETURNS text
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT nullif(concat_ws('; ',
        (SELECT format('%s standby connection(s) and synchronous_standby_names is empty: a '
                       'failover loses the last commits (the claims, steps and requests '
                       'they held) and the fence of the promoted standby''s first allocation '
                       'keeps its serials from repeating only within failover_gap', count(*))
         FROM pg_stat_replication
         WHERE state IS DISTINCT FROM 'backup'  -- NULL for roles without pg_read_all_stats
         HAVING count(*) > 0 AND current_setting('synchronous_standby_names') = ''),
        (SELECT format('format %s peaked at %s serials a second (today or yesterday): %s '
                       'in failover_loss_window %s, more than failover_gap %s; raise '
                       'failover_gap to at least that', r.format, round(p.peak::numeric, 1),
                       ceil(p.peak * w.seconds)::bigint, w.value, hivenet._failover_gap())
         FROM hivenet.allocation_rate r
         CROSS JOIN LATERAL (SELECT greatest(r.peak, r.previous_peak) AS peak) p
         CROSS JOIN (SELECT s.value, extract(epoch FROM s.value::interval) AS seconds
                     FROM hivenet.setting s WHERE s.name = 'failover_loss_window') w
         WHERE p.peak * w.seconds > hivenet._failover_gap()
         ORDER BY p.peak DESC, r.format LIMIT 1)), '')
$function$;
REVOKE EXECUTE ON FUNCTION hivenet.replication_warning() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.resolve_request(namespace text, key text, attempt integer, succeeded boolean, note text, response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key; p_attempt ALIAS FOR attempt;
    p_succeeded ALIAS FOR succeeded; p_note ALIAS FOR note; p_response ALIAS FOR response;
BEGIN
    PERFORM hivenet._resolve_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_note,
                                     p_response);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.resolve_request(text,text,integer,boolean,text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.resolve_step(system_serial text, attempt integer, succeeded boolean, note text, response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_system_serial ALIAS FOR system_serial; p_attempt ALIAS FOR attempt;
    p_succeeded ALIAS FOR succeeded; p_note ALIAS FOR note; p_response ALIAS FOR response;
BEGIN
    PERFORM hivenet._resolve_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                     p_note, p_response);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.resolve_step(text,integer,boolean,text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_claim_expiry(namespace text, expiry interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_expiry ALIAS FOR expiry;
BEGIN
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_interval(format('claim expiry of namespace %s',
                                           hivenet._shown(p_namespace)), p_expiry);
    INSERT INTO hivenet.claim_namespace (namespace, expiry) VALUES (p_namespace, p_expiry)
    ON CONFLICT (namespace) DO UPDATE SET expiry = excluded.expiry;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_claim_expiry(text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_clock_policy(format text, on_clock_behind text, max_wait interval DEFAULT NULL::interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_segments jsonb := (SELECT f.segments FROM hivenet.format f
                         WHERE f.name = set_clock_policy.format);
BEGIN
    IF v_segments IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(set_clock_policy.format));
    ELSIF NOT jsonb_path_exists(v_segments, '$[*].time') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s prints no date or time: no clock can be behind it',
                             set_clock_policy.format);
    ELSIF on_clock_behind IS NULL OR on_clock_behind NOT IN ('continue', 'wait', 'refuse') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: clock policy %s is not continue, wait or refuse',
                             set_clock_policy.format, hivenet._shown(on_clock_behind));
    ELSIF (on_clock_behind = 'wait') <> (max_wait IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: clock policy %s %s', set_clock_policy.format,
                             on_clock_behind, CASE WHEN max_wait IS NULL
                             THEN 'needs a max_wait (how long it may wait)'
                             ELSE format('takes no max_wait (%s: only wait waits)', max_wait)
                             END);
    END IF;
    PERFORM hivenet._check_interval(format('format %s: max_wait', set_clock_policy.format),
                                    max_wait);
    INSERT INTO hivenet.clock_policy AS p (format, on_clock_behind, max_wait)
    VALUES (set_clock_policy.format, on_clock_behind, max_wait)
    ON CONFLICT ON CONSTRAINT clock_policy_pkey DO UPDATE
        SET on_clock_behind = EXCLUDED.on_clock_behind, max_wait = EXCLUDED.max_wait;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_clock_policy(text,text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_namespace_policy(namespace text, retention interval DEFAULT NULL::interval, fingerprint text DEFAULT NULL::text, on_failure text DEFAULT NULL::text, expire_after interval DEFAULT NULL::interval, key_min_length integer DEFAULT NULL::integer, key_pattern text DEFAULT NULL::text, audit_chain boolean DEFAULT NULL::boolean, failure_retention interval DEFAULT NULL::interval, keep_raw_request boolean DEFAULT NULL::boolean)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
BEGIN ATOMIC
 SELECT hivenet._set_policy(namespace, jsonb_build_object('retention', retention, 'fingerprint', fingerprint, 'on_failure', on_failure, 'expire_after', expire_after, 'key_min_length', key_min_length, 'key_pattern', key_pattern, 'audit_chain', audit_chain, 'failure_retention', failure_retention, 'keep_raw_request', keep_raw_request)) AS _set_policy;
END;
REVOKE EXECUTE ON FUNCTION hivenet.set_namespace_policy(text,interval,text,text,interval,integer,text,boolean,interval,boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_request_retention(namespace text, retention interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_retention ALIAS FOR retention;
BEGIN
    IF p_retention IS NULL THEN
        UPDATE hivenet.request_namespace n SET retention = NULL
        WHERE n.namespace = p_namespace;
    END IF;
    PERFORM hivenet._set_policy(p_namespace, jsonb_build_object('retention', p_retention));
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_request_retention(text,interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.verify_audit_chain(namespace text)
 RETURNS TABLE(attempts bigint, links bigint, head bytea, "position" bigint, key text, attempt integer, problem text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace;
    v_chain hivenet.request_chain;
    v_link record;
    v_previous bytea;
    v_expected bigint;
BEGIN
    SELECT * INTO v_chain FROM hivenet.request_chain c WHERE c.namespace = p_namespace;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s has no audit chain (set_namespace_policy(namespace, '
                             'audit_chain => true) starts one)', hivenet._shown(p_namespace));
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

CREATE OR REPLACE FUNCTION hivenet.watch_request(namespace text, key text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key;
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN  -- a step's key: its system serial
        PERFORM hivenet._check_name('namespace', p_namespace);
    END IF;
    PERFORM hivenet._check_name('key', p_key);
    UPDATE hivenet.request_attempt a SET awaited = true
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.state = 'processing'
      AND a.awaited IS NOT TRUE;
    RETURN 'hivenet_request_finished';
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.watch_request(text,text) FROM PUBLIC;

CREATE TRIGGER format_counters AFTER INSERT ON hivenet.format FOR EACH ROW EXECUTE FUNCTION hivenet._format_counters();

CREATE TRIGGER setting_fallback_formats BEFORE INSERT OR UPDATE ON hivenet.setting FOR EACH ROW WHEN ((new.name = ANY (ARRAY['shared_fallback'::text, 'promote_fallback_scopes'::text]))) EXECUTE FUNCTION hivenet._fallback_formats_check();

CREATE VIEW hivenet._new_attempt AS
 SELECT NULL::text AS namespace,
    NULL::text AS key,
    NULL::integer AS attempt,
    NULL::bytea AS fingerprint,
    NULL::text AS unified_serial,
    NULL::interval AS lease,
    NULL::bytea AS raw_request
  WHERE false;
CREATE RULE write AS
    ON INSERT TO hivenet._new_attempt DO INSTEAD  INSERT INTO hivenet.request_attempt AS a (namespace, key, attempt, state, fingerprint, unified_serial, lease, raw_request)
  VALUES (new.namespace, new.key, new.attempt, 'processing'::hivenet.step_state, new.fingerprint, new.unified_serial, new.lease, new.raw_request) ON CONFLICT DO NOTHING
  RETURNING a.namespace,
    a.key,
    a.attempt,
    a.fingerprint,
    a.unified_serial,
    a.lease,
    a.raw_request;

CREATE VIEW hivenet.business_time_zone AS
 SELECT s.value AS time_zone,
    ((c.now AT TIME ZONE s.value) - (c.now AT TIME ZONE 'UTC'::text)) AS utc_offset,
    ((c.now AT TIME ZONE s.value))::timestamp(0) without time zone AS local_time
   FROM (hivenet.setting s
     CROSS JOIN ( SELECT hivenet.now() AS now) c)
  WHERE (s.name = 'time_zone'::text);
COMMENT ON VIEW hivenet.business_time_zone IS 'the business time zone of serials and messages, its offset from UTC, the local time now';

CREATE VIEW hivenet.clock_lead AS
 WITH clock AS (
         SELECT hivenet._reporting_local_now() AS local_now
        ), latest AS (
         SELECT f_1.name AS format,
            max(
                CASE
                    WHEN (f_1.clock_unit IS NOT NULL) THEN hivenet._period_start(NULLIF(hivenet._scope_counter_value(hivenet._clock_sequence_name(c_1.live_name)), 0), f_1.clock_unit)
                    ELSE hivenet._period_start(NULLIF((hivenet._scope_counter_value(c_1.sequence_name) / f_1.stride), 0), f_1.reset)
                END) AS latest_issued
           FROM (hivenet.format f_1
             JOIN ( SELECT s.format,
                    s.sequence_name,
                    hivenet._scope_sequence_name(s.format, s.scope) AS live_name
                   FROM hivenet.scope s
                UNION ALL
                 SELECT n.name,
                    ('cold_'::text || n.name) AS sequence_name,
                    ('cold_'::text || n.name) AS live_name
                   FROM hivenet.format n) c_1 ON ((c_1.format = f_1.name)))
          GROUP BY f_1.name
        )
 SELECT f.name AS format,
    COALESCE(p.on_clock_behind, 'continue'::text) AS on_clock_behind,
    p.max_wait,
    l.latest_issued,
    COALESCE(GREATEST((l.latest_issued - c.local_now), '00:00:00'::interval), '00:00:00'::interval) AS lead
   FROM (((hivenet.format f
     JOIN latest l ON ((l.format = f.name)))
     CROSS JOIN clock c)
     LEFT JOIN hivenet.clock_policy p ON ((p.format = f.name)))
  WHERE jsonb_path_exists(f.segments, '$[*]."time"'::jsonpath)
  ORDER BY f.name;
COMMENT ON VIEW hivenet.clock_lead IS 'per format printing a time: its clock policy, the latest instant it issued and how far that is ahead of the clock';

CREATE VIEW hivenet.interface_calls AS
 SELECT c.interface_serial,
    c.unified_serial,
    c.system_serial,
    hivenet._serial_field('interface'::text, c.interface_serial, 'system'::text) AS source_system,
    hivenet._serial_field('interface'::text, c.interface_serial, 'module'::text) AS source_module,
    hivenet._serial_field('interface'::text, c.interface_serial, 'instance'::text) AS source_instance,
    hivenet._serial_field('interface'::text, c.interface_serial, 'target'::text) AS target_system,
    c.serial_day,
    hivenet._serial_time('interface'::text, c.interface_serial) AS serial_time,
    c.recorded_at,
    c.call_order
   FROM hivenet.interface_call c;
COMMENT ON VIEW hivenet.interface_calls IS 'recorded interface calls with the source and target of each serial (reporting)';

CREATE VIEW hivenet.interface_calls_per_day AS
 SELECT interface_calls.serial_day AS day,
    interface_calls.source_system,
    interface_calls.target_system,
    count(*) AS calls
   FROM hivenet.interface_calls
  GROUP BY interface_calls.serial_day, interface_calls.source_system, interface_calls.target_system;
COMMENT ON VIEW hivenet.interface_calls_per_day IS 'recorded interface calls per serial day, source system and target system (reporting)';

CREATE VIEW hivenet.raw_requests AS
 SELECT a.namespace,
    a.key,
    a.attempt,
    a.started_at,
    a.called_by,
    a.client_addr,
    a.fingerprint,
    a.raw_request
   FROM hivenet.request_attempt a
  WHERE (a.raw_request IS NOT NULL);
COMMENT ON VIEW hivenet.raw_requests IS 'the exact bytes clients sent, per attempt, where the namespace keeps them (keep_raw_request; administrators only)';

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

-- The column defaults keep_dependents.sql kept, set again: their expressions, read again,
-- call the functions just made.
DO $$
DECLARE
    v_default record;
BEGIN
    FOR v_default IN
        SELECT * FROM jsonb_to_recordset(
            current_setting('hivenet.revision_kept_defaults')::jsonb)
            AS k (relation text, "column" text, expression text)
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', v_default.relation,
                       v_default."column", v_default.expression);
    END LOOP;
END $$;

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

-- Who began an attempt and when: the table's column defaults, which every writer of an
-- attempt (view _new_attempt) leaves to them. Set after the code, and not when the columns
-- are added: a volatile default of ADD COLUMN would be written into every existing row.
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN started_at SET DEFAULT hivenet.now(),
    ALTER COLUMN called_by SET DEFAULT coalesce(nullif(current_setting('role'), 'none'),
                                                session_user::text),
    ALTER COLUMN application_name SET DEFAULT nullif(current_setting('application_name'), ''),
    ALTER COLUMN client_addr SET DEFAULT inet_client_addr();

-- The built-in format time_id (hivenet_db/sql/builtin_formats.json), compiled as a fresh
-- install compiles it; its one scope is prepared with it, as a fresh install prepares it
-- (parked on a database that may not issue it: counters.sql, _make_format_counters).
INSERT INTO hivenet.format
SELECT f.*
FROM jsonb_populate_record(hivenet._compile_format('time_id',
         '[{"time": "yyMMddHHmmss"}, {"seq_bits": 14, "reset": "second"}]', false,
         'time id (seed 004): a bigint, (yyMMddHHmmss << 14) | per-second sequence'),
     '{"builtin": true}') AS f;

-- The fence takes itself (failover.sql): this timeline counts as fenced when 0.1.0 recorded
-- a fence of it (or the install on it); else the next allocation (or prepare_scope below)
-- fences it. And its settings.
SELECT setval('hivenet.fenced_timeline', coalesce(
    (SELECT f.timeline FROM hivenet.failover_fence f
     ORDER BY f.timeline = hivenet._timeline() DESC, f.timeline DESC LIMIT 1), 0));
INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('failover_gap', '100000', 'count',
     'how far a fence moves every counter (the first allocation on a new timeline, maintain(), '
     'failover-fence without --gap): at least the serials one format issues in '
     'failover_loss_window at its peak rate'),
    ('failover_loss_window', '30 seconds', 'interval',
     'the longest stretch of commits a failover may lose, as your HA manager bounds it; '
     'replication_warning() says when a format''s peak rate over it exceeds failover_gap');
INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('max_counted_namespaces', '100', 'count',
     'most namespaces of keyed requests the application makes decision counters for (six '
     'sequences each; metric hivenet_request_decisions_total); begins in further ones count '
     'under hivenet.other, but those with a policy of their own (set_namespace_policy)');

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

-- Grants that only the old release had.
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT * FROM (VALUES
        ('FUNCTION hivenet._name_valid(text)', 'hivenet_app', 'EXECUTE'),
        ('FUNCTION hivenet._serial_valid(text,text)', 'hivenet_app', 'EXECUTE'),
        ('FUNCTION hivenet._step_start_valid(text,text,interval)', 'hivenet_app', 'EXECUTE')) AS g (object, grantee, privilege)
        WHERE to_regrole(g.grantee) IS NOT NULL LOOP
        EXECUTE format('REVOKE %s ON %s FROM %I', v.privilege, v.object, v.grantee);
    END LOOP;
END $$;

-- Grants as a fresh install makes them (privileges.sql), and the generated
-- functions from this database's settings and formats (compile.sql).
SELECT hivenet._grant_roles();
SELECT hivenet._recompile();
