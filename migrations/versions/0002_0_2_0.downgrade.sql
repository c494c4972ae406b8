-- Back to release 0.1.0: the bodies of 0001_baseline.sql, and what 0.2.0 added dropped, in
-- this order: nowait's own function, decision counts, batches, audit, the namespace policy,
-- waiting (after the policy's section, which restores the _begin_request it keeps), the
-- failure policy (last: it makes the type of the state column again, once nothing of 0.2.0
-- reads it). A namespace's policy goes but for its retention; counts, callers, chains and
-- waiters' marks go; expired attempts become failed ones.

-- Back from nowait and wait in one function: 0.1.0's _begin_attempt_nowait again, before
-- the callers that call it come back (below); owner-only, as 0.1.0 had it (privileges.sql).
-- _begin_attempt_within goes with waiting.

-- _begin_attempt with nowait: the same, under the shortest lock_timeout, so that where it
-- would wait for a concurrent start of the same attempt it raises HN030 at once. Its own
-- function (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of
-- the EXCEPTION block stays off the default path.
CREATE FUNCTION hivenet._begin_attempt_nowait(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, p_unified_serial,
                                p_lease) b;
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('%s is being started by another transaction right now (nowait)',
                         hivenet._attempt_subject(p_namespace, p_key));
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_attempt_nowait(text, text, jsonb, text, text, interval)
    FROM PUBLIC;

-- Back from decision counts: the 0.1.0 bodies of the functions that count, then the
-- counts dropped with their counters.

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
    RETURN FOUND;
END $$;

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
    RETURN FOUND;
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
    (SELECT 'replayed'::text, r.attempt, r.response
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

DROP VIEW hivenet.request_decisions;
DROP FUNCTION hivenet._count_decision(text, text);
DROP FUNCTION hivenet._new_decision_counter(text, text);
DROP FUNCTION hivenet._grant_decision_counters();
DROP FUNCTION hivenet._create_decision_counters(text, boolean);
DO $$
DECLARE
    v_counter regclass;
BEGIN
    FOR v_counter IN SELECT c.counter FROM hivenet.decision_counter c LOOP
        EXECUTE format('DROP SEQUENCE %s', v_counter);
    END LOOP;
END $$;
DROP VIEW hivenet._decision_counters;
DROP TABLE hivenet.decision_counter;
DROP SEQUENCE hivenet.decision_counter_number;

-- Batches of keyed requests (batches.sql).
DROP FUNCTION hivenet.finish_requests(text, text[], integer[], boolean[], jsonb[]);
DROP FUNCTION hivenet.begin_requests(text, text[], jsonb[], interval);
DROP FUNCTION hivenet._begin_batch_key(text, text, jsonb, interval);
DROP FUNCTION hivenet._check_batch(text, text[], text, jsonb[], interval);
DROP FUNCTION hivenet._batch_limit();

-- Audit with the caller, undone: who began each attempt and the hash chains go.
DROP VIEW hivenet.request_attempts;
DROP FUNCTION hivenet.verify_audit_chain(text);
DROP FUNCTION hivenet._purge_chained(text, text[]);
DROP FUNCTION hivenet._chain_append(text, text, integer, text);
DROP FUNCTION hivenet._chain_link(bytea, hivenet.request_attempt, text);
DROP FUNCTION hivenet._start_chain(text);
DROP TABLE hivenet.request_chain;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

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
    -- finish's fencing and state change; the note goes on the row it just locked.
    PERFORM hivenet.finish_request(p_namespace, p_key, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
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
    IF v_keys IS NOT NULL THEN
        DELETE FROM hivenet.request_attempt d
        WHERE d.namespace = p_namespace AND d.key = ANY (v_keys);
    END IF;
END $$;

DROP FUNCTION hivenet._called_by();
ALTER TABLE hivenet.request_attempt
    DROP COLUMN called_by,
    DROP COLUMN application_name,
    DROP COLUMN client_addr,
    DROP COLUMN chain_position,
    DROP COLUMN chain_hash,
    DROP COLUMN finish_position,
    DROP COLUMN finish_hash;
ALTER TABLE hivenet.request_namespace DROP COLUMN audit_chain;

DROP FUNCTION hivenet.set_namespace_policy(text, interval, text, text, interval, integer, text,
    boolean);
DROP FUNCTION hivenet._raise_key_refused(text, text, integer, text);
DROP FUNCTION hivenet._policy_fingerprint(text, jsonb);
DROP FUNCTION hivenet._check_fingerprint(text);
DROP FUNCTION hivenet._canonical_json(jsonb);
DROP FUNCTION hivenet._canonical_number(numeric);
DROP FUNCTION hivenet._utf16_units(text);

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
END $$;

CREATE OR REPLACE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
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
END $$;

-- hivenet.set_request_retention(namespace, retention) → void
--   Finished requests of the namespace are kept for `retention` after their last attempt
--   ended (then maintain() removes them, and the same key starts afresh); NULL: back to the
--   setting request_retention (24 hours). Keep it longer than any client retries.
--   HN001: namespace not valid (as begin_request), retention not positive or longer than 10
--   years.
CREATE OR REPLACE FUNCTION hivenet.set_request_retention(p_namespace text, p_retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

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
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $$;

DELETE FROM hivenet.request_namespace WHERE retention IS NULL;
ALTER TABLE hivenet.request_namespace
    DROP COLUMN fingerprint,
    DROP COLUMN key_min_length,
    DROP COLUMN key_pattern,
    ALTER COLUMN retention SET NOT NULL;
COMMENT ON TABLE hivenet.request_namespace IS
    'retention of the finished requests of a namespace, when not the setting request_retention';

-- Waiting for the first outcome, undone (after the sections above restored 0.1.0's
-- _grant_roles and _begin_request): begin_request without wait, finish_request without the
-- notification, attempts without the mark.
DROP FUNCTION hivenet.begin_request(text, text, jsonb, text, interval, boolean, interval);
DROP FUNCTION hivenet._begin_request(text, text, jsonb, text, interval, boolean, interval);
DROP FUNCTION hivenet._begin_attempt_within(text, text, jsonb, text, text, interval, interval);
DROP FUNCTION hivenet.watch_request(text, text);
DROP FUNCTION hivenet._wake_waiters(text, text);

-- hivenet.begin_request(namespace, key, request default null, on_success default 'replay',
--                       lease default null, nowait default false)
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
--   request: its fingerprint (sha256 of the jsonb text, which jsonb normalises: key order and
--   whitespace do not matter) is kept, and a different request under the same key raises
--   HN032 RequestMismatch in every state. No request counts as JSON null.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: namespace or key NULL, empty, longer than 255 characters or with a control
--   character, a namespace starting 'hivenet.' (the library's own), on_success not
--   'replay'/'reject', lease not positive or longer than 10 years, nowait NULL.
--   A key is never accepted twice while its record is kept: finished requests are removed by
--   maintain() once their last attempt ended longer ago than the namespace's retention
--   (set_request_retention; default the setting request_retention, 24 hours).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again); with nowait it raises HN030 at once instead. In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
--   One statement, inlined into the caller's (a set-returning LANGUAGE sql function, as
--   begin_step): a new key with plain options is started by _start_request, with no SECURITY
--   DEFINER call; anything else (a key that has an attempt, bad input, nowait) goes to
--   _begin_request, run only when the first branch wrote nothing (a UNION ALL under LIMIT 1,
--   as begin_step's).
CREATE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    (SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_request(p_namespace, p_key, p_request, p_on_success, p_lease,
                                  p_nowait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_request(p_namespace, p_key, p_request, p_on_success, p_lease,
                                 p_nowait) b)
    LIMIT 1;
END;

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
END $$;

ALTER TABLE hivenet.request_attempt DROP COLUMN awaited;

REVOKE EXECUTE ON FUNCTION hivenet._begin_request(text, text, jsonb, text, interval, boolean) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hivenet.begin_request(text, text, jsonb, text, interval, boolean) FROM PUBLIC;
SELECT hivenet._grant_roles();

-- Back from the failure policy per namespace: what 0.1.0 cannot hold goes. An `expired`
-- attempt becomes `failed` (its note says so: the next begin_request retries it, 0.1.0's only
-- policy), and the value 'expired' leaves type step_state. PostgreSQL cannot drop a value of
-- an enum, so the type is made again without it: the views and rules that read the column
-- state, and begin_step (its SQL body reads them), are dropped and made again with 0.1.0's
-- definitions, and the column is converted (the table is rewritten). Last in this file: any
-- object of 0.2.0 reading that column is gone by then.
UPDATE hivenet.request_attempt
SET state = 'failed',
    note = concat_ws('; ', note, 'marked failed by the downgrade to 0.1.0 (it had expired)')
WHERE state = 'expired';
DROP FUNCTION hivenet._maintain_request_expiry();
DROP FUNCTION hivenet._expire_attempts(text, text[], integer[]);
DROP FUNCTION hivenet._expiry_due(text, timestamptz);
DROP TABLE hivenet.request_expiry;
ALTER TABLE hivenet.request_namespace
    DROP COLUMN on_failure,
    DROP COLUMN expire_after;

DROP FUNCTION hivenet.begin_step(text, jsonb, text, text, interval, boolean);
DROP VIEW hivenet.request_states, hivenet.stuck_requests, hivenet.step_states,
    hivenet.stuck_steps, hivenet._step_start, hivenet._step_replay, hivenet.step_attempt,
    hivenet._request_start;
ALTER TYPE hivenet.step_state RENAME TO step_state_0_2_0;
CREATE TYPE hivenet.step_state AS ENUM ('processing', 'success', 'failed');
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN state TYPE hivenet.step_state USING state::text::hivenet.step_state;
DROP TYPE hivenet.step_state_0_2_0;

-- 0.1.0's definitions (0001_baseline.sql), in its order.
CREATE VIEW hivenet._request_start AS
SELECT NULL::text AS namespace, NULL::text AS key, NULL::jsonb AS request,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

CREATE VIEW hivenet.step_attempt AS
SELECT a.key AS system_serial, a.attempt, a.state, a.fingerprint, a.unified_serial, a.lease,
       a.started_at, a.finished_at, a.response, a.error, a.resolved_by, a.note
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps';
COMMENT ON VIEW hivenet.step_attempt IS
    'every attempt of every processing step (system serial); the latest attempt is the step''s state';

CREATE VIEW hivenet._step_replay AS
SELECT a.key AS system_serial, a.attempt, a.fingerprint, a.unified_serial, a.response
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'success';

CREATE VIEW hivenet._step_start AS
SELECT NULL::text AS system_serial, NULL::jsonb AS request, NULL::text AS unified_serial,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

CREATE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    (SELECT 'replayed'::text, r.attempt, r.response
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

CREATE VIEW hivenet.stuck_steps AS
SELECT a.key AS system_serial, a.attempt, a.unified_serial, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_steps IS
    'processing steps past their lease (unknown outcome): resolve with hivenet.resolve_step';

CREATE VIEW hivenet.step_states AS
SELECT s.state::text AS state, count(l.key) AS steps
FROM unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.key) a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace = 'hivenet.steps'
           ORDER BY a.key, a.attempt DESC) AS l
       ON l.state = s.state
GROUP BY s.state
ORDER BY s.state;
COMMENT ON VIEW hivenet.step_states IS 'number of steps per state (the state of their latest attempt)';

CREATE VIEW hivenet.stuck_requests AS
SELECT a.namespace, a.key, a.attempt, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace <> 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_requests IS
    'processing requests past their lease (unknown outcome): resolve with hivenet.resolve_request';

CREATE VIEW hivenet.request_states AS
SELECT n.namespace, s.state::text AS state, count(l.key) AS requests
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps') AS n
CROSS JOIN unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.namespace, a.key) a.namespace, a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace <> 'hivenet.steps'
           ORDER BY a.namespace, a.key, a.attempt DESC) AS l
       ON l.namespace = n.namespace AND l.state = s.state
GROUP BY n.namespace, s.state
ORDER BY n.namespace, s.state;
COMMENT ON VIEW hivenet.request_states IS
    'number of keyed requests per namespace and state (the state of their latest attempt)';

-- Their grants, as 0.1.0 gives them (privileges.sql).
REVOKE EXECUTE ON FUNCTION hivenet.begin_step(text, jsonb, text, text, interval, boolean)
    FROM PUBLIC;
SELECT hivenet._grant_roles();
