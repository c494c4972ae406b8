-- Downgrade of revision 0012, frozen: steps back in their own table hivenet.step_attempt
-- as revision 0008 had them (the keyed requests of other namespaces are dropped with theirs).

DROP VIEW hivenet.stuck_requests, hivenet.request_states, hivenet.stuck_steps,
    hivenet.step_states, hivenet.step_attempt;

CREATE TABLE hivenet.step_attempt (
    system_serial  text        NOT NULL,
    attempt        integer     NOT NULL,
    state          hivenet.step_state NOT NULL,
    -- sha256 of the normalised request (jsonb text): the same serial with another request is
    -- refused, never re-executed or replayed.
    fingerprint    bytea       NOT NULL,
    unified_serial text,
    -- how long `processing` is trusted; NULL: the setting step_lease (read when checked).
    lease          interval,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    response       jsonb,      -- success: the response replayed to later callers
    error          jsonb,      -- failed: what the caller reported
    resolved_by    text,       -- the operator (session user) who resolved a stuck attempt
    note           text,       -- the operator's note
    PRIMARY KEY (system_serial, attempt)
)
-- As revision 0010 left it: HOT room, and autovacuum after 2,000 dead rows.
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.step_attempt IS
    'every attempt of every processing step (system serial); the latest attempt is the step''s state';
-- Retention finds old attempts without a B-tree maintained on every begin: rows arrive in
-- started_at order, which is what BRIN summarises.
CREATE INDEX step_attempt_started_at ON hivenet.step_attempt USING brin (started_at);


INSERT INTO hivenet.step_attempt
    (system_serial, attempt, state, fingerprint, unified_serial, lease, started_at, finished_at,
     response, error, resolved_by, note)
SELECT a.key, a.attempt, a.state, a.fingerprint, a.unified_serial, a.lease, a.started_at,
       a.finished_at, a.response, a.error, a.resolved_by, a.note
FROM hivenet.request_attempt a WHERE a.namespace = 'hivenet.steps';

DELETE FROM hivenet.setting WHERE name IN ('request_retention', 'step_future_tolerance');
UPDATE hivenet.setting SET description =
     'how long a processing step is trusted when begin_step got no lease; after it the step '
     'is listed in hivenet.stuck_steps for an operator'
WHERE name = 'step_lease';
UPDATE hivenet.setting SET description =
     'finished steps whose last attempt ended longer ago are purged by maintain(); a retry '
     'after that starts afresh, so keep it longer than any caller retries'
WHERE name = 'step_retention';

DROP FUNCTION hivenet._attempt_subject(text, text), hivenet._check_request_name(text, text),
    hivenet._check_begin_options(text, interval, boolean),
    hivenet._begin_attempt(text, text, jsonb, text, text, interval),
    hivenet._begin_attempt_nowait(text, text, jsonb, text, text, interval),
    hivenet.begin_request(text, text, jsonb, text, interval, boolean),
    hivenet._raise_stale_attempt(text, text, integer),
    hivenet._finish_attempt(text, text, integer, boolean, jsonb),
    hivenet._resolve_attempt(text, text, integer, boolean, text, jsonb),
    hivenet.finish_request(text, text, integer, boolean, jsonb),
    hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
    hivenet.set_request_retention(text, interval), hivenet._purge_requests(text, timestamptz),
    hivenet._maintain_requests(), hivenet._raise_step_outside_window(text, date);

-- Helpers are plpgsql, not sql: a sql function with SET search_path is never inlined and on
-- PostgreSQL 15 is planned again at every call (about 10x the cost on the hot path).


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
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive.
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
CREATE OR REPLACE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_fingerprint bytea := sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'));
    v_attempt integer := 1;
    v_last hivenet.step_attempt;
BEGIN
    -- The common case is decided by one expression: plpgsql prepares every expression once
    -- per transaction, a good part of this function's cost. The regex matches the system
    -- serial followed by the unified serial, if any, only when both are valid (alnum system
    -- and module, instance 01-99, year from 1000, a day that exists in its month; 29 February
    -- is left to parse_serial); the last 10 digits not all 0 mean seq is not 0 (a lookahead
    -- costs more than the rest of the match). Whatever fails this takes the slow path, where
    -- parse_serial decides and names the problem: the accepted set is exactly parse_serial's
    -- (a test checks it), at a fraction of its cost.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND octet_length(p_system_serial) = 30
        AND right(p_system_serial, 10) <> '0000000000'
        AND coalesce(right(p_unified_serial, 10), '') <> '0000000000'
        AND p_system_serial || coalesce(p_unified_serial, '') ~ (
            '^[0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[1-9][0-9]{3}'
            '((0[13578]|1[02])(0[1-9]|[12][0-9]|3[01])|(0[469]|11)(0[1-9]|[12][0-9]|30)'
            '|02(0[1-9]|1[0-9]|2[0-8]))[0-9]{12}'
            '([0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[1-9][0-9]{3}'
            '((0[13578]|1[02])(0[1-9]|[12][0-9]|3[01])|(0[469]|11)(0[1-9]|[12][0-9]|30)'
            '|02(0[1-9]|1[0-9]|2[0-8]))[0-9]{10})?$'),
        false) THEN
        IF p_nowait THEN
            RETURN QUERY SELECT * FROM hivenet._begin_step_nowait(
                p_system_serial, p_request, p_on_success, p_unified_serial, p_lease);
            RETURN;
        END IF;
        IF p_on_success IS NULL OR p_on_success NOT IN ('replay', 'reject') THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('on_success %s is neither ''replay'' nor ''reject''',
                                 hivenet._shown(p_on_success));
        END IF;
        IF p_lease <= interval '0' OR p_nowait IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('lease %s is not positive or nowait is NULL', p_lease);
        END IF;
        PERFORM hivenet.parse_serial(p_system_serial, 'system');
        IF p_unified_serial IS NOT NULL THEN
            PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
        END IF;
    END IF;
    -- Optimistic: most steps are new, so insert the attempt first; a conflict (after waiting
    -- for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        INSERT INTO hivenet.step_attempt
            (system_serial, attempt, state, fingerprint, unified_serial, lease, started_at)
        VALUES (p_system_serial, v_attempt, 'processing', v_fingerprint, p_unified_serial,
                p_lease, hivenet.now())
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            outcome := 'started';  -- OUT columns and RETURN NEXT: no query to run
            attempt := v_attempt;
            RETURN NEXT;
            RETURN;
        END IF;
        SELECT * INTO v_last FROM hivenet.step_attempt a
        WHERE a.system_serial = p_system_serial ORDER BY a.attempt DESC LIMIT 1;
        IF NOT FOUND THEN
            v_attempt := 1;  -- purged by maintain() in between: the step is new again
        ELSIF v_last.fingerprint <> v_fingerprint THEN
            RAISE EXCEPTION USING ERRCODE = 'HN032',
                MESSAGE = format('step %s was begun with another request (fingerprint %s, '
                                 'this one %s)', p_system_serial,
                                 encode(v_last.fingerprint, 'hex'), encode(v_fingerprint, 'hex'));
        ELSIF v_last.state = 'processing' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN030',
                MESSAGE = format('step %s is processing (attempt %s started at %s, lease until '
                                 '%s): its outcome is unknown', p_system_serial, v_last.attempt,
                                 v_last.started_at,
                                 v_last.started_at + hivenet._step_lease(v_last.lease));
        ELSIF v_last.state = 'success' THEN
            IF p_on_success = 'reject' THEN
                RAISE EXCEPTION USING ERRCODE = 'HN031',
                    MESSAGE = format('step %s already succeeded (attempt %s at %s)',
                                     p_system_serial, v_last.attempt, v_last.finished_at);
            END IF;
            outcome := 'replayed';
            attempt := v_last.attempt;
            response := v_last.response;
            RETURN NEXT;
            RETURN;
        ELSE
            v_attempt := v_last.attempt + 1;  -- the latest failed: proceed
        END IF;
        -- Next round: insert that attempt (waiting again if someone is starting it too).
    END LOOP;
END $$;

-- begin_step with nowait: the same, under the shortest lock_timeout, so that where it would
-- wait for a concurrent start of the same attempt it raises HN030 at once. Its own function
-- (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of the
-- EXCEPTION block stays off the default path.
CREATE FUNCTION hivenet._begin_step_nowait(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    RETURN QUERY SELECT * FROM hivenet.begin_step(
        p_system_serial, p_request, p_on_success, p_unified_serial, p_lease, false);
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('step %s is being started by another transaction right now (nowait)',
                         hivenet._shown(p_system_serial));
END $$;

-- Why attempt p_attempt of step p_system_serial cannot be finished: HN033 naming what is there.
CREATE FUNCTION hivenet._raise_stale_attempt(p_system_serial text, p_attempt integer)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_last hivenet.step_attempt;
BEGIN
    SELECT * INTO v_last FROM hivenet.step_attempt a
    WHERE a.system_serial = p_system_serial ORDER BY a.attempt DESC LIMIT 1;
    RAISE EXCEPTION USING ERRCODE = 'HN033',
        MESSAGE = CASE WHEN v_last.attempt IS NULL
            THEN format('step %s has no attempt %s', hivenet._shown(p_system_serial), p_attempt)
            ELSE format('attempt %s of step %s is not the current processing attempt (the '
                        'current is attempt %s, %s)', p_attempt, hivenet._shown(p_system_serial),
                        v_last.attempt, v_last.state) END;
END $$;

-- hivenet.finish_step(system_serial, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_step returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_step proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the step's
--   current one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL. Blocks only while another transaction is finishing or
--   resolving the same attempt; then raises HN033 if that one committed.
CREATE OR REPLACE FUNCTION hivenet.finish_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE hivenet.step_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.system_serial = p_system_serial AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN  -- the checks stay off the hot path
        IF p_succeeded IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('step %s attempt %s: succeeded is NULL',
                                 hivenet._shown(p_system_serial), p_attempt);
        END IF;
        PERFORM hivenet._raise_stale_attempt(p_system_serial, p_attempt);
    END IF;
END $$;

-- hivenet.resolve_step(system_serial, attempt, succeeded, note, response default null) → void
--   Operator action for a stuck step (hivenet.stuck_steps): once the real outcome of attempt
--   `attempt` is known (e.g. from the remote system's reconciliation), record it as
--   `success` (response replayed later) or `failed` (the next begin_step proceeds), with a
--   note and the operator's session user. The original attempt's late finish_step then gets
--   HN033. Works on any processing attempt, also before its lease ran out.
--   HN033 as finish_step; HN001 when note is empty or succeeded NULL. Blocks like finish_step.
CREATE OR REPLACE FUNCTION hivenet.resolve_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(btrim(p_note), '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('step %s attempt %s: resolving needs a note',
                             hivenet._shown(p_system_serial), p_attempt);
    END IF;
    -- finish_step's fencing and state change; the note goes on the row it just locked.
    PERFORM hivenet.finish_step(p_system_serial, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.step_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.system_serial = p_system_serial AND a.attempt = p_attempt;
END $$;

-- hivenet.stuck_steps: steps still `processing` after their lease ran out, oldest first. Their
-- outcome is unknown (the remote call may or may not have happened): find it out, then
-- hivenet.resolve_step(system_serial, attempt, succeeded, note).
-- A scan of the attempts (an index on state would make every finish a non-HOT update).
CREATE VIEW hivenet.stuck_steps AS
SELECT a.system_serial, a.attempt, a.unified_serial, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.step_attempt a
WHERE a.state = 'processing' AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_steps IS
    'processing steps past their lease (unknown outcome): resolve with hivenet.resolve_step';

-- hivenet.step_states: how many steps (system serials) are in each state, every state listed.
CREATE VIEW hivenet.step_states AS
SELECT s.state::text AS state, count(l.system_serial) AS steps
FROM unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.system_serial) a.system_serial, a.state
           FROM hivenet.step_attempt a ORDER BY a.system_serial, a.attempt DESC) AS l
       ON l.state = s.state
GROUP BY s.state
ORDER BY s.state;
COMMENT ON VIEW hivenet.step_states IS 'number of steps per state (the state of their latest attempt)';

-- Retention (run by hivenet.maintain()): purge every attempt of the steps whose attempts all
-- ended before now() - step_retention. A processing step is never purged. Candidates come
-- from the BRIN index: an attempt that ended before the cutoff also started before it.
CREATE OR REPLACE FUNCTION hivenet._maintain_steps() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_cutoff timestamptz := hivenet.now() - hivenet._setting_value('step_retention')::interval;
BEGIN
    DELETE FROM hivenet.step_attempt d
    USING (SELECT DISTINCT o.system_serial FROM hivenet.step_attempt o
           WHERE o.started_at < v_cutoff) AS c
    WHERE d.system_serial = c.system_serial
      AND NOT EXISTS (SELECT 1 FROM hivenet.step_attempt y
                      WHERE y.system_serial = c.system_serial
                        AND (y.finished_at IS NULL OR y.finished_at >= v_cutoff));
END $$;

DROP TABLE hivenet.request_attempt, hivenet.request_namespace;

-- hivenet_db/sql/privileges.sql as revision 0008 had it
-- Least privilege. Two roles, created once by `hivenet-db bootstrap` (the owner may not create
-- roles): hivenet_app may call the application API and read the reporting views; hivenet_admin
-- also runs the administrative functions and changes settings. The public functions are
-- SECURITY DEFINER, so neither needs any right on a table or sequence, and the private
-- helpers (hivenet._*) stay the owner's. Nothing here opens a connection, and no setting
-- holds a secret. Applied last; a revision that adds functions applies it again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's.
CREATE OR REPLACE FUNCTION hivenet._set_public_execute(p_grant boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

-- The application API: executable by every role, usable by those with USAGE on the schema.
GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
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
    hivenet._step_lease(interval),       -- in view stuck_steps, evaluated as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now()
TO PUBLIC;

-- Grants to hivenet_app and hivenet_admin, for those of them that exist (bootstrap creates
-- them; called again by bootstrap when it runs after the schema was installed).
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        GRANT SELECT ON hivenet.interface_calls, hivenet.interface_calls_per_day,
            hivenet.step_states, hivenet.stuck_steps, hivenet.scope_usage TO hivenet_app;
    END IF;
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_admin;
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.maintain(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.register_system(text, text), hivenet.register_module(text, text, text),
            hivenet.set_claim_expiry(text, interval), hivenet.prepare_scope(text, jsonb),
            hivenet.fence_failover(bigint, boolean), hivenet.replication_warning()
        TO hivenet_admin;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

SELECT hivenet._grant_roles();
