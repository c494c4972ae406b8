-- Back from release 0.2.0 to 0.1.0.
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
            'hivenet._allocate(text,jsonb,text[],integer,boolean)',
            'hivenet._batch_limit()',
            'hivenet._begin_attempt(text,hivenet.request_namespace,text,jsonb,text,text,interval,bytea)',
            'hivenet._begin_attempt_within(text,hivenet.request_namespace,text,jsonb,text,text,interval,bytea,interval)',
            'hivenet._begin_batch(boolean,text,text[],jsonb[],text,interval)',
            'hivenet._begin_batch_key(boolean,text,text,jsonb,text,interval)',
            'hivenet._begin_key(boolean,text,text,jsonb,text,text,interval,boolean,interval,bytea)',
            'hivenet._canonical_json(jsonb)',
            'hivenet._canonical_number(numeric)',
            'hivenet._chain_append(text,text,integer,text)',
            'hivenet._chain_link(bytea,hivenet.request_attempt,text)',
            'hivenet._check_batch(boolean,text,text[],text,jsonb[],interval)',
            'hivenet._check_begin_options(text,interval,boolean,interval)',
            'hivenet._check_fields(hivenet.format,text[],boolean)',
            'hivenet._check_fingerprint(text)',
            'hivenet._check_owned(hivenet.format,text[])',
            'hivenet._check_policy(hivenet.request_namespace)',
            'hivenet._check_step(text,text,text)',
            'hivenet._check_timeline()',
            'hivenet._clock_behind(text,timestamp without time zone,timestamp without time zone)',
            'hivenet._compile_format(text,jsonb,boolean,text)',
            'hivenet._count_decision(text,text)',
            'hivenet._counted_apart(text)',
            'hivenet._create_decision_counters(text,boolean)',
            'hivenet._create_scope_counter(hivenet.format,text,jsonb,text)',
            'hivenet._expire_attempts(text,text[],integer[])',
            'hivenet._failover_gap()',
            'hivenet._fallback_drawn(hivenet.format)',
            'hivenet._fallback_formats_check()',
            'hivenet._fallback_gate_space()',
            'hivenet._fallback_lock_space()',
            'hivenet._fast_path_expression(hivenet.format,text,boolean,boolean)',
            'hivenet._fast_time_id(text,jsonb)',
            'hivenet._fence_counter(regclass,hivenet.format,bigint,bigint)',
            'hivenet._fenced()',
            'hivenet._field_values(hivenet.format,jsonb)',
            'hivenet._finish_batch(boolean,text,text[],integer[],boolean[],jsonb[])',
            'hivenet._format_constant(text)',
            'hivenet._format_counters()',
            'hivenet._grant_decision_counters()',
            'hivenet._has_issued(text)',
            'hivenet._issue(regclass,hivenet.format,text[],integer,text)',
            'hivenet._issue_unprepared(hivenet.format,text[],integer)',
            'hivenet._key_allowed(hivenet.request_namespace,text)',
            'hivenet._layout_sql(hivenet.format)',
            'hivenet._maintain_request_expiry()',
            'hivenet._make_format_counters(hivenet.format)',
            'hivenet._name_valid(text)',
            'hivenet._new_decision_counter(text,text)',
            'hivenet._next_time_id(text,jsonb)',
            'hivenet._node_field(hivenet.format)',
            'hivenet._not_owned(hivenet.format,text,text,boolean)',
            'hivenet._one_scope(hivenet.format)',
            'hivenet._plain_options(text,boolean,interval)',
            'hivenet._policy_checked(text,text,jsonb)',
            'hivenet._policy_fingerprint(text,jsonb)',
            'hivenet._printed_time(jsonb,text)',
            'hivenet._promote_scope(hivenet.format,text,jsonb,boolean)',
            'hivenet._purge_chained(text,text[])',
            'hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone,timestamp with time zone)',
            'hivenet._raise_key_refused(text,text,integer,text)',
            'hivenet._refuse_unprepared(hivenet.format,text[])',
            'hivenet._request_start_valid(text,text,text,interval)',
            'hivenet._sample_allocation_rates()',
            'hivenet._scope_fields(hivenet.format,text[])',
            'hivenet._scope_of(hivenet.format,text[])',
            'hivenet._scopes_by_node()',
            'hivenet._serial_field(text,text,text)',
            'hivenet._serial_time(text,text)',
            'hivenet._serials_issued()',
            'hivenet._set_policy(text,jsonb)',
            'hivenet._shown_time(timestamp with time zone)',
            'hivenet._start_attempt(text,text,integer,bytea,text,interval,boolean,bytea)',
            'hivenet._start_chain(text)',
            'hivenet._start_key(boolean,text,text,jsonb,text,text,interval,boolean,interval)',
            'hivenet._start_valid(boolean,text,text,text,interval)',
            'hivenet._starts_apart(hivenet.request_namespace)',
            'hivenet._time_id_batch(text,jsonb)',
            'hivenet._time_id_count(text,integer)',
            'hivenet._time_id_digits(bigint,integer)',
            'hivenet._time_id_fields(hivenet.format,text[])',
            'hivenet._time_id_parts(hivenet.format,text,boolean,boolean)',
            'hivenet._time_number_max(text)',
            'hivenet._timeout_left()',
            'hivenet._unseen_characters()',
            'hivenet._utf16_units(text)',
            'hivenet._waited_for_row(text,text)',
            'hivenet._wake_waiters(text,text)',
            'hivenet.begin_request(text,text,jsonb,text,interval,boolean,interval,bytea)',
            'hivenet.begin_requests(text,text[],jsonb[],interval)',
            'hivenet.begin_step(text,jsonb,text,text,interval,boolean,interval)',
            'hivenet.begin_steps(text[],jsonb[],text,interval)',
            'hivenet.call_chain(text)',
            'hivenet.claim(text,text,boolean)',
            'hivenet.claim_interface_serial(text,text,text,boolean)',
            'hivenet.define_format(text,jsonb,boolean,text)',
            'hivenet.fence_failover(bigint,boolean)',
            'hivenet.finish_request(text,text,integer,boolean,jsonb)',
            'hivenet.finish_requests(text,text[],integer[],boolean[],jsonb[])',
            'hivenet.finish_step(text,integer,boolean,jsonb)',
            'hivenet.finish_steps(text[],integer[],boolean[],jsonb[])',
            'hivenet.next_interface_serial(text,text,text,text)',
            'hivenet.next_serial(text,jsonb)',
            'hivenet.next_serials(text,jsonb,integer)',
            'hivenet.next_system_serial(text,text,text)',
            'hivenet.next_time_id(text,jsonb)',
            'hivenet.next_time_ids(text,integer,jsonb)',
            'hivenet.next_unified_serial(text,text,text)',
            'hivenet.own_instances(text,boolean,boolean)',
            'hivenet.parse_serial(text,text)',
            'hivenet.parse_time_id(bigint,text)',
            'hivenet.prepare_scope(text,jsonb)',
            'hivenet.register_module(text,text,text)',
            'hivenet.register_system(text,text)',
            'hivenet.resolve_request(text,text,integer,boolean,text,jsonb)',
            'hivenet.resolve_step(text,integer,boolean,text,jsonb)',
            'hivenet.set_claim_expiry(text,interval)',
            'hivenet.set_clock_policy(text,text,interval)',
            'hivenet.set_namespace_policy(text,interval,text,text,interval,integer,text,boolean,interval,boolean)',
            'hivenet.set_request_retention(text,interval)',
            'hivenet.verify_audit_chain(text)',
            'hivenet.watch_request(text,text)']::text[]) AS f);
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
DROP VIEW hivenet.request_decisions;
DROP VIEW hivenet.request_attempts;
DROP VIEW hivenet.raw_requests;
DROP VIEW hivenet.interface_calls_per_day;
DROP VIEW hivenet.interface_calls;
DROP VIEW hivenet.clock_lead;
DROP VIEW hivenet.business_time_zone;
DROP VIEW hivenet._new_attempt;
DROP TRIGGER setting_fallback_formats ON hivenet.setting;
DROP TRIGGER format_counters ON hivenet.format;
DROP FUNCTION hivenet.watch_request(text,text);
DROP FUNCTION hivenet.verify_audit_chain(text);
DROP FUNCTION hivenet.set_request_retention(text,interval);
DROP FUNCTION hivenet.set_namespace_policy(text,interval,text,text,interval,integer,text,boolean,interval,boolean);
DROP FUNCTION hivenet.set_clock_policy(text,text,interval);
DROP FUNCTION hivenet.set_claim_expiry(text,interval);
DROP FUNCTION hivenet.resolve_step(text,integer,boolean,text,jsonb);
DROP FUNCTION hivenet.resolve_request(text,text,integer,boolean,text,jsonb);
DROP FUNCTION hivenet.register_system(text,text);
DROP FUNCTION hivenet.register_module(text,text,text);
DROP FUNCTION hivenet.prepare_scope(text,jsonb);
DROP FUNCTION hivenet.parse_time_id(bigint,text);
DROP FUNCTION hivenet.own_instances(text,boolean,boolean);
DROP FUNCTION hivenet.next_unified_serial(text,text,text);
DROP FUNCTION hivenet.next_time_ids(text,integer,jsonb);
DROP FUNCTION hivenet.next_time_id(text,jsonb);
DROP FUNCTION hivenet.next_system_serial(text,text,text);
DROP FUNCTION hivenet.next_serials(text,jsonb,integer);
DROP FUNCTION hivenet.next_serial(text,jsonb);
DROP FUNCTION hivenet.next_interface_serial(text,text,text,text);
DROP FUNCTION hivenet.finish_steps(text[],integer[],boolean[],jsonb[]);
DROP FUNCTION hivenet.finish_step(text,integer,boolean,jsonb);
DROP FUNCTION hivenet.finish_requests(text,text[],integer[],boolean[],jsonb[]);
DROP FUNCTION hivenet.finish_request(text,text,integer,boolean,jsonb);
DROP FUNCTION hivenet.fence_failover(bigint,boolean);
DROP FUNCTION hivenet.define_format(text,jsonb,boolean,text);
DROP FUNCTION hivenet.claim_interface_serial(text,text,text,boolean);
DROP FUNCTION hivenet.claim(text,text,boolean);
DROP FUNCTION hivenet.call_chain(text);
DROP FUNCTION hivenet.begin_steps(text[],jsonb[],text,interval);
DROP FUNCTION hivenet.begin_step(text,jsonb,text,text,interval,boolean,interval);
DROP VIEW hivenet._step_replay;
DROP VIEW hivenet._decision_counters;
DROP FUNCTION hivenet.begin_requests(text,text[],jsonb[],interval);
DROP FUNCTION hivenet.begin_request(text,text,jsonb,text,interval,boolean,interval,bytea);
DROP FUNCTION hivenet._wake_waiters(text,text);
DROP FUNCTION hivenet._waited_for_row(text,text);
DROP FUNCTION hivenet._utf16_units(text);
DROP FUNCTION hivenet._timeout_left();
DROP FUNCTION hivenet._time_number_max(text);
DROP FUNCTION hivenet._time_id_parts(hivenet.format,text,boolean,boolean);
DROP FUNCTION hivenet._time_id_fields(hivenet.format,text[]);
DROP FUNCTION hivenet._time_id_digits(bigint,integer);
DROP FUNCTION hivenet._time_id_count(text,integer);
DROP FUNCTION hivenet._time_id_batch(text,jsonb);
DROP FUNCTION hivenet._starts_apart(hivenet.request_namespace);
DROP FUNCTION hivenet._start_valid(boolean,text,text,text,interval);
DROP FUNCTION hivenet._start_key(boolean,text,text,jsonb,text,text,interval,boolean,interval);
DROP FUNCTION hivenet._start_chain(text);
DROP FUNCTION hivenet._start_attempt(text,text,integer,bytea,text,interval,boolean,bytea);
DROP FUNCTION hivenet._shown_time(timestamp with time zone);
DROP FUNCTION hivenet._set_policy(text,jsonb);
DROP FUNCTION hivenet._serials_issued();
DROP FUNCTION hivenet._serial_time(text,text);
DROP FUNCTION hivenet._serial_field(text,text,text);
DROP FUNCTION hivenet.parse_serial(text,text);
DROP FUNCTION hivenet._scopes_by_node();
DROP FUNCTION hivenet._scope_of(hivenet.format,text[]);
DROP FUNCTION hivenet._scope_fields(hivenet.format,text[]);
DROP FUNCTION hivenet._sample_allocation_rates();
DROP FUNCTION hivenet._request_start_valid(text,text,text,interval);
DROP FUNCTION hivenet._refuse_unprepared(hivenet.format,text[]);
DROP FUNCTION hivenet._raise_key_refused(text,text,integer,text);
DROP FUNCTION hivenet._purge_requests(text,timestamp with time zone,timestamp without time zone,timestamp with time zone);
DROP FUNCTION hivenet._purge_chained(text,text[]);
DROP FUNCTION hivenet._promote_scope(hivenet.format,text,jsonb,boolean);
DROP FUNCTION hivenet._printed_time(jsonb,text);
DROP FUNCTION hivenet._policy_fingerprint(text,jsonb);
DROP FUNCTION hivenet._policy_checked(text,text,jsonb);
DROP FUNCTION hivenet._plain_options(text,boolean,interval);
DROP FUNCTION hivenet._one_scope(hivenet.format);
DROP FUNCTION hivenet._not_owned(hivenet.format,text,text,boolean);
DROP FUNCTION hivenet._node_field(hivenet.format);
DROP FUNCTION hivenet._next_time_id(text,jsonb);
DROP FUNCTION hivenet._new_decision_counter(text,text);
DROP FUNCTION hivenet._name_valid(text);
DROP FUNCTION hivenet._unseen_characters();
DROP FUNCTION hivenet._make_format_counters(hivenet.format);
DROP FUNCTION hivenet._maintain_request_expiry();
DROP FUNCTION hivenet._layout_sql(hivenet.format);
DROP FUNCTION hivenet._key_allowed(hivenet.request_namespace,text);
DROP FUNCTION hivenet._issue_unprepared(hivenet.format,text[],integer);
DROP FUNCTION hivenet._issue(regclass,hivenet.format,text[],integer,text);
DROP FUNCTION hivenet._has_issued(text);
DROP FUNCTION hivenet._grant_decision_counters();
DROP FUNCTION hivenet._format_counters();
DROP FUNCTION hivenet._format_constant(text);
DROP FUNCTION hivenet._finish_batch(boolean,text,text[],integer[],boolean[],jsonb[]);
DROP FUNCTION hivenet._field_values(hivenet.format,jsonb);
DROP FUNCTION hivenet._fenced();
DROP FUNCTION hivenet._fence_counter(regclass,hivenet.format,bigint,bigint);
DROP FUNCTION hivenet._fast_time_id(text,jsonb);
DROP FUNCTION hivenet._fast_path_expression(hivenet.format,text,boolean,boolean);
DROP FUNCTION hivenet._fallback_lock_space();
DROP FUNCTION hivenet._fallback_gate_space();
DROP FUNCTION hivenet._fallback_formats_check();
DROP FUNCTION hivenet._fallback_drawn(hivenet.format);
DROP FUNCTION hivenet._failover_gap();
DROP FUNCTION hivenet._expire_attempts(text,text[],integer[]);
DROP FUNCTION hivenet._create_scope_counter(hivenet.format,text,jsonb,text);
DROP FUNCTION hivenet._create_decision_counters(text,boolean);
DROP FUNCTION hivenet._counted_apart(text);
DROP FUNCTION hivenet._count_decision(text,text);
DROP FUNCTION hivenet._compile_format(text,jsonb,boolean,text);
DROP FUNCTION hivenet._clock_behind(text,timestamp without time zone,timestamp without time zone);
DROP FUNCTION hivenet._check_timeline();
DROP FUNCTION hivenet._check_step(text,text,text);
DROP FUNCTION hivenet._check_policy(hivenet.request_namespace);
DROP FUNCTION hivenet._check_owned(hivenet.format,text[]);
DROP FUNCTION hivenet._check_fingerprint(text);
DROP FUNCTION hivenet._check_fields(hivenet.format,text[],boolean);
DROP FUNCTION hivenet._check_begin_options(text,interval,boolean,interval);
DROP FUNCTION hivenet._check_batch(boolean,text,text[],text,jsonb[],interval);
DROP FUNCTION hivenet._chain_link(bytea,hivenet.request_attempt,text);
DROP FUNCTION hivenet._chain_append(text,text,integer,text);
DROP FUNCTION hivenet._canonical_number(numeric);
DROP FUNCTION hivenet._canonical_json(jsonb);
DROP FUNCTION hivenet._begin_key(boolean,text,text,jsonb,text,text,interval,boolean,interval,bytea);
DROP FUNCTION hivenet._begin_batch_key(boolean,text,text,jsonb,text,interval);
DROP FUNCTION hivenet._begin_batch(boolean,text,text[],jsonb[],text,interval);
DROP FUNCTION hivenet._begin_attempt_within(text,hivenet.request_namespace,text,jsonb,text,text,interval,bytea,interval);
DROP FUNCTION hivenet._begin_attempt(text,hivenet.request_namespace,text,jsonb,text,text,interval,bytea);
DROP FUNCTION hivenet._batch_limit();
DROP FUNCTION hivenet._allocate(text,jsonb,text[],integer,boolean);
DROP FUNCTION hivenet._advance(regclass,hivenet.format,bigint,text);

-- Tables, types and sequences (the .tables.sql beside this file).
-- Back from release 0.2.0 to 0.1.0: tables, types and sequences, written by hand (the code
-- around them is written from the schema files: hivenet_db/tools/revision.py). What 0.1.0
-- cannot hold goes: a namespace's policy but its retention, counts, callers, chains, waiters'
-- marks, numeric formats and clock policies; expired attempts become failed ones.

-- Numeric formats (time_id, and any defined since) and clock policies: 0.1.0 holds
-- neither. Their counters go with them; the format trigger, whose code is half gone by now,
-- stays off while their rows go (the script ends by writing the generated code again).
DROP TABLE hivenet.clock_policy;
DO $$
DECLARE
    v_counter text;
BEGIN
    FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s
                     JOIN hivenet.format f ON f.name = s.format WHERE f.time_shift IS NOT NULL
                     UNION ALL
                     SELECT 'cold_' || f.name FROM hivenet.format f WHERE f.time_shift IS NOT NULL
    LOOP
        EXECUTE format('DROP SEQUENCE IF EXISTS hivenet.%I', v_counter);
    END LOOP;
END $$;
DELETE FROM hivenet.fallback_draw
WHERE format IN (SELECT name FROM hivenet.format WHERE time_shift IS NOT NULL);
DELETE FROM hivenet.scope
WHERE format IN (SELECT name FROM hivenet.format WHERE time_shift IS NOT NULL);
ALTER TABLE hivenet.format DISABLE TRIGGER format_recompile;
DELETE FROM hivenet.format WHERE time_shift IS NOT NULL;
ALTER TABLE hivenet.format ENABLE TRIGGER format_recompile;
ALTER TABLE hivenet.format DROP COLUMN time_shift;

-- The fence's mark and the allocation rates (fences applied by an allocation are recorded as
-- by the command); its settings go in the .downgrade.data.sql, once the code that rewrites the
-- generated functions on a change of a setting is 0.1.0's again.
DROP TABLE hivenet.allocation_rate;
DROP SEQUENCE hivenet.fenced_timeline;
UPDATE hivenet.failover_fence SET applied_by = 'command' WHERE applied_by = 'allocation';
ALTER TABLE hivenet.failover_fence
    DROP CONSTRAINT failover_fence_applied_by_check,
    ADD CONSTRAINT failover_fence_applied_by_check
        CHECK (applied_by IN ('install', 'command', 'maintain'));

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

-- The audit chain, who began each attempt, waiters' marks, clients' bytes; the clock's
-- default.
DROP TABLE hivenet.request_chain;
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN started_at DROP DEFAULT,
    DROP COLUMN called_by,
    DROP COLUMN application_name,
    DROP COLUMN client_addr,
    DROP COLUMN chain_position,
    DROP COLUMN chain_hash,
    DROP COLUMN finish_position,
    DROP COLUMN finish_hash,
    DROP COLUMN awaited,
    DROP COLUMN raw_request;

-- The policy of a namespace: only a retention stays.
DELETE FROM hivenet.request_namespace WHERE retention IS NULL;
ALTER TABLE hivenet.request_namespace
    DROP COLUMN fingerprint,
    DROP COLUMN key_min_length,
    DROP COLUMN key_pattern,
    DROP COLUMN audit_chain,
    DROP COLUMN on_failure,
    DROP COLUMN expire_after,
    DROP COLUMN failure_retention,
    DROP COLUMN keep_raw_request,
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

CREATE OR REPLACE FUNCTION hivenet._check_begin_options(p_on_success text, p_lease interval, p_nowait boolean)
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
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_begin_options(text,interval,boolean) FROM PUBLIC;

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
                             'that owns that instance (docs/guides/scale-out.md; setting '
                             'check_received_instances)', p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._check_owned_serial(text,text) FROM PUBLIC;

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
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,30}$' THEN
        PERFORM hivenet._format_error(p_name, 'name must match [a-z][a-z0-9_]{0,30}');
    END IF;
    IF jsonb_typeof(p_segments) IS DISTINCT FROM 'array' OR jsonb_array_length(p_segments) = 0 THEN
        PERFORM hivenet._format_error(p_name, 'segments must be a non-empty JSON array');
    END IF;
    v_row.name := p_name;
    v_row.length := 0;
    v_row.field_names := '{}';
    v_row.field_min := '{}';
    v_row.field_max := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_segments) LOOP
        IF jsonb_typeof(v_seg) <> 'object' THEN
            PERFORM hivenet._format_error(p_name, format('segment %s is not an object',
                                                         hivenet._shown(v_seg::text)));
        END IF;
        SELECT k INTO v_kind FROM jsonb_object_keys(v_seg) AS k
        WHERE k IN ('field', 'literal', 'time', 'seq');
        IF v_kind IS NULL
           OR (SELECT count(*) FROM jsonb_object_keys(v_seg) AS k
               WHERE k IN ('field', 'literal', 'time', 'seq')) <> 1 THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s needs exactly one of the kinds field, literal, time, seq (its keys: '
                '%s)', hivenet._shown(v_seg::text),
                (SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k)
                 FROM jsonb_object_keys(v_seg) AS k)));
        END IF;
        SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k) INTO v_unknown
        FROM jsonb_object_keys(v_seg) AS k
        WHERE k <> ALL (CASE v_kind
            WHEN 'field' THEN ARRAY['field', 'width', 'charset', 'min', 'max', 'printed', 'counter']
            WHEN 'literal' THEN ARRAY['literal'] WHEN 'time' THEN ARRAY['time']
            ELSE ARRAY['seq', 'reset'] END);
        IF v_unknown IS NOT NULL THEN
            PERFORM hivenet._format_error(p_name, format(
                '%s segment %s has unknown keys %s (a %s segment takes %s)', v_kind,
                hivenet._shown(v_seg::text), v_unknown, v_kind, CASE v_kind
                WHEN 'field' THEN 'field, width, charset, min, max, printed, counter'
                WHEN 'seq' THEN 'seq, reset' ELSE v_kind END));
        END IF;
        CASE v_kind
        WHEN 'field' THEN
            v_width := CASE WHEN jsonb_typeof(v_seg -> 'width') = 'number'
                            THEN (v_seg ->> 'width')::numeric::integer END;
            v_charset := coalesce(v_seg ->> 'charset', 'alnum');
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
            IF v_printed THEN
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
            v_width := v_time.width;
            IF hivenet._unit_rank(v_time.resolution) < hivenet._unit_rank(v_finest) THEN
                v_finest := v_time.resolution;
            END IF;
            v_segments := v_segments || jsonb_build_array(
                v_seg || jsonb_build_object('to_char', v_time.to_char_pattern,
                                            'width', v_time.width,
                                            'resolution', v_time.resolution));
            v_pattern := v_pattern || v_time.to_char_pattern;
        ELSE -- seq
            IF v_row.seq_width IS NOT NULL THEN
                PERFORM hivenet._format_error(p_name, 'a format has exactly one seq segment');
            END IF;
            v_width := CASE WHEN jsonb_typeof(v_seg -> 'seq') = 'number'
                            THEN (v_seg ->> 'seq')::numeric::integer END;
            v_row.reset := coalesce(v_seg ->> 'reset', 'day');
            IF v_width IS NULL OR v_width NOT BETWEEN 1 AND 17 THEN
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
                'seq', v_width, 'reset', v_row.reset));
        END CASE;
        v_row.length := v_row.length + v_width;
    END LOOP;
    IF v_row.seq_width IS NULL THEN
        PERFORM hivenet._format_error(p_name, 'a format needs one seq segment');
    END IF;
    IF v_row.length > 64 THEN
        PERFORM hivenet._format_error(p_name, format('total length %s exceeds 64', v_row.length));
    END IF;
    -- Serials of two periods must differ in their printed time, or a reset would repeat them.
    IF hivenet._unit_rank(v_finest) > hivenet._unit_rank(v_row.reset) THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq resets every %s but the time fields only show the %s: serials of two periods '
            'would collide', v_row.reset, v_finest));
    END IF;
    v_row.capacity := (10::numeric ^ v_row.seq_width)::bigint - 1;
    -- Largest power of ten that keeps period * stride inside a bigint; at least 10x capacity,
    -- so calls that keep failing after exhaustion never spill into the next period.
    v_headroom := floor(log(9.2e18 / (hivenet._max_period_index(v_row.reset) + 1)))::bigint;
    IF v_headroom < v_row.seq_width + 1 THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq width %s is too wide for a counter that resets every %s (at most %s digits)',
            v_row.seq_width, v_row.reset, v_headroom - 1));
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

CREATE OR REPLACE FUNCTION hivenet._default_failover_gap()
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT 100000::bigint $function$;
REVOKE EXECUTE ON FUNCTION hivenet._default_failover_gap() FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((p_c)::numeric >= (1)::numeric) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || to_char(NULLIF((LEAST(GREATEST((nextval(to_regclass((((('hivenet."seq_system_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), '1000000000000'::bigint) % '1000000000000'::bigint), 0), 'FM000000000000'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._fast_system(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((p_c)::numeric >= (1)::numeric) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || to_char(NULLIF((LEAST(GREATEST((nextval(to_regclass((((('hivenet."seq_unified_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), '10000000000'::bigint) % '10000000000'::bigint), 0), 'FM0000000000'::text))
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

CREATE OR REPLACE FUNCTION hivenet._format_constant(p_name text)
 RETURNS hivenet.format
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_name
             WHEN 'id_service'::text THEN '(id_service,"[{""field"": ""merchant"", ""regex"": ""^[0-9]{12}$"", ""width"": 12, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""field"": ""shard"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""seq"": 6, ""reset"": ""day""}]",28,"{merchant,shard}",6,day,999999,100000000000000,f,t,"unified ID service (seed 001): merchant + date + shard + daily sequence per merchant and shard","^[0-9]{12} [0-9]{2}$","{NULL,NULL}","{NULL,NULL}",{},"""%1$s""YYYYMMDD""%2$s""","",,)'::hivenet.format
             WHEN 'interface'::text THEN '(interface,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""field"": ""target"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum"", ""counter"": false}, {""time"": ""YYYYMMDDHHMISS"", ""width"": 14, ""to_char"": ""YYYYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 10, ""reset"": ""day""}]",39,"{system,module,instance,target}",10,day,9999999999,100000000000000,f,t,"interface serial (接口流水号): one interface call","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2} [0-9A-Za-z]{5}$","{NULL,NULL,1,NULL}","{NULL,NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""""%4$s""YYYYMMDDHH24MISS","","{1,2,3}",second)'::hivenet.format
             WHEN 'merchant_trade'::text THEN '(merchant_trade,"[{""field"": ""merchant"", ""regex"": ""^[0-9]{12}$"", ""width"": 12, ""charset"": ""digit""}, {""time"": ""YYYYMMDDHHMISS"", ""width"": 14, ""to_char"": ""YYYYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 6, ""reset"": ""day""}]",32,{merchant},6,day,999999,100000000000000,f,t,"merchant trade number: merchant + date-time + daily sequence",^[0-9]{12}$,{NULL},{NULL},{},"""%1$s""YYYYMMDDHH24MISS","",,second)'::hivenet.format
             WHEN 'per_second'::text THEN '(per_second,"[{""time"": ""yyMMddHHmmss"", ""width"": 12, ""to_char"": ""YYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 5, ""reset"": ""second""}]",17,{},5,second,99999,1000000000,f,t,"time-based serial: yyMMddHHmmss + per-second sequence",^$,{},{},{},YYMMDDHH24MISS,"",,)'::hivenet.format
             WHEN 'system'::text THEN '(system,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""seq"": 12, ""reset"": ""day""}]",30,"{system,module,instance}",12,day,999999999999,100000000000000,f,t,"system serial (系统流水号): one processing step; retries reuse it","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$","{NULL,NULL,1}","{NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""YYYYMMDD","",,)'::hivenet.format
             WHEN 'unified'::text THEN '(unified,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""seq"": 10, ""reset"": ""day""}]",28,"{system,module,instance}",10,day,9999999999,100000000000000,f,t,"unified serial (统一流水号): one business transaction across all systems","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$","{NULL,NULL,1}","{NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""YYYYMMDD","",,)'::hivenet.format
             ELSE NULL::hivenet.format
         END AS "case";
END;
REVOKE EXECUTE ON FUNCTION hivenet._format_constant(text) FROM PUBLIC;

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
BEGIN
    IF p_format.clock_unit IS NOT NULL THEN
        -- Read once, before any value is drawn: every call that returned before this one
        -- started has raised it to what it printed.
        v_clock := hivenet._clock_sequence(p_seq);
        v_read := coalesce(pg_sequence_last_value(v_clock), 0);
        v_latest := v_read;
    END IF;
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(p_seq);
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
        -- concat, not ||: to_char of an empty pattern is NULL.
        v_out := v_out || concat(to_char(v_print, v_head),
                                 lpad((v_raw % p_format.stride)::text, p_format.seq_width, '0'),
                                 to_char(v_print, v_tail));
    END LOOP;
    IF v_latest > v_read THEN
        PERFORM hivenet._raise_clock(v_clock, v_latest);
    END IF;
    RETURN v_out;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._issue(regclass,hivenet.format,text[],integer,text) FROM PUBLIC;

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
    v_timeline integer := hivenet._timeline();
    v_warning text;
BEGIN
    IF NOT EXISTS (SELECT FROM hivenet.failover_fence WHERE timeline = v_timeline) THEN
        PERFORM hivenet._fence(hivenet._default_failover_gap(), false, 'maintain');
        RAISE WARNING USING MESSAGE = format(
            'hivenet: timeline %s was not fenced (a promoted standby or a restore): maintain() '
            'moved every counter forward by %s; run `hivenet-db failover-fence` before '
            'traffic next time', v_timeline, hivenet._default_failover_gap());
    END IF;
    v_warning := hivenet.replication_warning();
    IF v_warning IS NOT NULL THEN
        RAISE WARNING USING MESSAGE = 'hivenet: ' || v_warning;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_failover() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._maintain_requests()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_now timestamptz := hivenet.now();
    v_default interval := hivenet._setting_value('request_retention')::interval;
    v_namespace text;
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
        SELECT r.retention INTO v_retention FROM hivenet.request_namespace r
        WHERE r.namespace = v_namespace;
        -- Bounded as set_request_retention bounds it: a cutoff is always a timestamp.
        PERFORM hivenet._purge_requests(v_namespace, v_now - least(
            coalesce(v_retention, v_default), hivenet._longest_interval()));
    END LOOP;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._maintain_requests() FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._name_valid(p_value text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT (((length(p_value) >= 1) AND (length(p_value) <= 255)) AND (p_value !~ '[\x01-\x1f\x7f-\x9f]'::text));
END;
REVOKE EXECUTE ON FUNCTION hivenet._name_valid(text) FROM PUBLIC;

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
            'database that owns it (docs/guides/scale-out.md)', p_format.name,
            hivenet._node_field(p_format), hivenet._shown(p_node), p_owned)
    END
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._not_owned(hivenet.format,text,text,boolean) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet._plain_options(p_on_success text, p_nowait boolean)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT COALESCE(((p_on_success = ANY (ARRAY['replay'::text, 'reject'::text])) AND (NOT p_nowait)), false) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet._plain_options(text,boolean) FROM PUBLIC;

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
BEGIN
    FOR v_format IN SELECT * FROM hivenet.format f ORDER BY f.name LOOP
        SELECT * INTO v_layout FROM hivenet._layout_sql(v_format);
        v_formats := v_formats || format(' WHEN %L THEN %L::hivenet.format', v_format.name,
                                         v_format::text);
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

CREATE OR REPLACE FUNCTION hivenet._request_start_valid(p_namespace text, p_key text, p_lease interval)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
BEGIN ATOMIC
 SELECT (hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key) AND ("left"(p_namespace, 8) <> 'hivenet.'::text) AND ((p_lease IS NULL) OR hivenet._interval_allowed(p_lease)));
END;
REVOKE EXECUTE ON FUNCTION hivenet._request_start_valid(text,text,interval) FROM PUBLIC;

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
          SELECT DISTINCT p.format, p.scope, p.fields, NULL FROM hivenet.scope_pending p) AS s
    JOIN hivenet.format f ON f.name = s.format
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._scopes_by_node() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_kinds constant text[] := ARRAY['unified', 'system', 'interface'];
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

CREATE OR REPLACE FUNCTION hivenet._shown(p_value text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT CASE WHEN p_value IS NULL THEN 'NULL'
                WHEN q.quoted !~ '[\x01-\x1f\x7f-\x9f]' THEN q.quoted
                ELSE (SELECT string_agg(CASE WHEN c ~ '[\x01-\x1f\x7f-\x9f]'
                                             THEN '\x' || lpad(to_hex(ascii(c)), 2, '0')
                                             ELSE c END, '' ORDER BY i)
                      FROM unnest(string_to_array(q.quoted, NULL)) WITH ORDINALITY AS t(c, i))
           END || CASE WHEN length(p_value) > 40
                       THEN format('... (%s characters)', length(p_value)) ELSE '' END
    FROM (SELECT quote_literal(CASE WHEN length(p_value) <= 40 THEN p_value
                                    ELSE left(p_value, 32) END) AS quoted) q
$function$;
REVOKE EXECUTE ON FUNCTION hivenet._shown(text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet.call_chain(p_unified_serial text)
 RETURNS TABLE(interface_serial text, system_serial text, source_system text, source_module text, source_instance text, target_system text, serial_time timestamp without time zone, recorded_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.interface_serial, c.system_serial, c.source_system, c.source_module,
           c.source_instance, c.target_system, c.serial_time, c.recorded_at
    FROM hivenet.interface_calls c
    WHERE c.unified_serial = p_unified_serial
    ORDER BY c.call_order
$function$;
REVOKE EXECUTE ON FUNCTION hivenet.call_chain(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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

CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL::text, p_system_serial text DEFAULT NULL::text, p_nowait boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
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

CREATE OR REPLACE FUNCTION hivenet.define_format(p_name text, p_segments jsonb, p_borrow_next_period boolean DEFAULT false, p_description text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
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

CREATE OR REPLACE FUNCTION hivenet.fence_failover(p_gap bigint DEFAULT NULL::bigint, p_force boolean DEFAULT false)
 RETURNS TABLE(timeline integer, format text, counter text, from_value bigint, to_value bigint, parked boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM hivenet._fence(
        coalesce(p_gap, hivenet._default_failover_gap()), p_force, 'command');
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.fence_failover(bigint,boolean) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet.finish_step(p_system_serial text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE sql
BEGIN ATOMIC
 SELECT hivenet.finish_request('hivenet.steps'::text, p_system_serial, p_attempt, p_succeeded, p_response) AS finish_request;
END;
REVOKE EXECUTE ON FUNCTION hivenet.finish_step(text,integer,boolean,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_interface_serial(p_system text, p_module text, p_instance text, p_target text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN (hivenet._allocate('interface', NULL,
                              ARRAY[p_system, p_module, p_instance, p_target], 1))[1];
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.next_interface_serial(text,text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_serial(p_format text, p_fields jsonb)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN (hivenet._allocate(p_format, p_fields, NULL, 1))[1];
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.next_serial(text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_serials(p_format text, p_fields jsonb, p_n integer)
 RETURNS SETOF text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
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

CREATE OR REPLACE FUNCTION hivenet.next_system_serial(p_system text, p_module text, p_instance text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_system(p_system, p_module, p_instance), hivenet.next_serial('system'::text, jsonb_build_object('system', p_system, 'module', p_module, 'instance', p_instance))) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_system_serial(text,text,text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.next_unified_serial(p_system text, p_module text, p_instance text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT COALESCE(hivenet._fast_unified(p_system, p_module, p_instance), hivenet.next_serial('unified'::text, jsonb_build_object('system', p_system, 'module', p_module, 'instance', p_instance))) AS "coalesce";
END;
REVOKE EXECUTE ON FUNCTION hivenet.next_unified_serial(text,text,text) FROM PUBLIC;

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

CREATE OR REPLACE FUNCTION hivenet.register_module(p_system text, p_module text, p_description text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
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

CREATE OR REPLACE FUNCTION hivenet.register_system(p_system text, p_description text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT format('%s standby connection(s) and synchronous_standby_names is empty: a '
                  'failover loses the last commits, so the promoted standby reissues serials '
                  'and re-accepts claims unless `hivenet-db failover-fence` runs first '
                  '(docs/operations.md, Failover)', count(*))
    FROM pg_stat_replication
    WHERE state IS DISTINCT FROM 'backup'  -- NULL for roles without pg_read_all_stats
    HAVING count(*) > 0 AND current_setting('synchronous_standby_names') = ''
$function$;
REVOKE EXECUTE ON FUNCTION hivenet.replication_warning() FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.resolve_request(p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text, p_response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM hivenet._resolve_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_note,
                                     p_response);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.resolve_request(text,text,integer,boolean,text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.resolve_step(p_system_serial text, p_attempt integer, p_succeeded boolean, p_note text, p_response jsonb DEFAULT NULL::jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM hivenet._resolve_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                     p_note, p_response);
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.resolve_step(text,integer,boolean,text,jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet.set_claim_expiry(p_namespace text, p_expiry interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_interval(format('claim expiry of namespace %s',
                                           hivenet._shown(p_namespace)), p_expiry);
    INSERT INTO hivenet.claim_namespace (namespace, expiry) VALUES (p_namespace, p_expiry)
    ON CONFLICT (namespace) DO UPDATE SET expiry = excluded.expiry;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet.set_claim_expiry(text,interval) FROM PUBLIC;

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
-- Back from release 0.2.0 to 0.1.0: what the generated code cannot write, by hand, after it.

-- 0.1.0's _name_valid as its release wrote it. The revision copies a function from the
-- catalog, and the catalog of this one holds BETWEEN as an AND of its own inside the outer
-- AND, which PostgreSQL reads back as one flat AND: the same function, another catalog.
CREATE OR REPLACE FUNCTION hivenet._name_valid(p_value text) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT length(p_value) BETWEEN 1 AND 255 AND p_value !~ '[\x01-\x1f\x7f-\x9f]';
END;

-- The settings of the fence and of the bound on namespaces counted apart; and of the shared
-- fallback: 0.1.0 draws every unprepared scope from its format's cold counter.
DELETE FROM hivenet.setting
WHERE name IN ('failover_gap', 'failover_loss_window', 'max_counted_namespaces',
               'shared_fallback', 'promote_fallback_scopes');

-- Grants that only the old release had.
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT * FROM (VALUES
        ('FUNCTION hivenet._clock_sequence_name(text)', 'hivenet_admin', 'EXECUTE'),
        ('FUNCTION hivenet._clock_sequence_name(text)', 'hivenet_reporting', 'EXECUTE'),
        ('FUNCTION hivenet._scope_sequence_name(text,text)', 'hivenet_admin', 'EXECUTE'),
        ('FUNCTION hivenet._scope_sequence_name(text,text)', 'hivenet_reporting', 'EXECUTE')) AS g (object, grantee, privilege)
        WHERE to_regrole(g.grantee) IS NOT NULL LOOP
        EXECUTE format('REVOKE %s ON %s FROM %I', v.privilege, v.object, v.grantee);
    END LOOP;
END $$;

-- Grants as a fresh install makes them (privileges.sql), and the generated
-- functions from this database's settings and formats (compile.sql).
SELECT hivenet._grant_roles();
SELECT hivenet._recompile();
