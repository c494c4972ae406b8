-- Revision 0012, frozen: keyed requests (issue 12). One state machine for every idempotency
-- key: table hivenet.request_attempt (namespace, key, attempt) replaces hivenet.step_attempt,
-- whose rows move to namespace 'hivenet.steps' (step_attempt stays as a view of them);
-- begin_request / finish_request / resolve_request, per-namespace retention
-- (set_request_retention, request_namespace, _maintain_requests), views stuck_requests and
-- request_states; begin_step / finish_step / resolve_step / _maintain_steps become the case
-- of the steps' namespace, and begin_step refuses serials dated outside the kept window
-- (HN021, setting step_future_tolerance). As hivenet_db/sql/{requests,steps,reporting,
-- privileges}.sql were on 2026-11-23. Never edit it.

-- The step views read the old table: made again below.
DROP VIEW hivenet.stuck_steps, hivenet.step_states;
DROP FUNCTION hivenet._begin_step_nowait(text, jsonb, text, text, interval),
    hivenet._raise_stale_attempt(text, integer);

-- hivenet_db/sql/requests.sql (the type step_state and _step_lease are unchanged)
CREATE TABLE hivenet.request_attempt (
    namespace      text        NOT NULL,
    key            text        NOT NULL,
    attempt        integer     NOT NULL,
    state          hivenet.step_state NOT NULL,
    -- sha256 of the normalised request (jsonb text): the same key with another request is
    -- refused, never re-executed or replayed.
    fingerprint    bytea       NOT NULL,
    unified_serial text,       -- steps: the business transaction's unified serial, for audit
    -- how long `processing` is trusted; NULL: the setting step_lease (read when checked).
    lease          interval,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    response       jsonb,      -- success: the response replayed to later callers
    error          jsonb,      -- failed: what the caller reported
    resolved_by    text,       -- the operator (session user) who resolved a stuck attempt
    note           text,       -- the operator's note
    PRIMARY KEY (namespace, key, attempt)
)
-- fillfactor: room on the page so finishing is a HOT update. Autovacuum after 2,000 dead rows
-- whatever the table's size (a finish or a rollback leaves one; the default waits for 20 % of
-- the table, which grows every day): dead rows stay flat (docs/benchmarks.md, load).
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.request_attempt IS
    'every attempt of every idempotency key (namespace, key); the latest attempt is the key''s state';
-- Retention reaches the old attempts of one namespace only (finishing leaves both columns
-- alone, so it stays a HOT update). On the expression namespace || '', not the column: the
-- hot path's lookups (namespace = ... AND key = ...) then can only use the primary key.
-- Indexed on the bare column, a table without statistics yet (a fresh install, just after
-- the upgrade) had finish_step scan this index over every row of the namespace (measured).
CREATE INDEX request_attempt_started_at ON hivenet.request_attempt
    ((namespace || ''), started_at);

-- Retention per namespace (set_request_retention); namespaces without a row keep the setting
-- request_retention.
CREATE TABLE hivenet.request_namespace (
    namespace text     PRIMARY KEY,
    retention interval NOT NULL
);
COMMENT ON TABLE hivenet.request_namespace IS
    'retention of the finished requests of a namespace, when not the setting request_retention';


-- Helpers are plpgsql, not sql: a sql function with SET search_path is never inlined and on
-- PostgreSQL 15 is planned again at every call (about 10x the cost on the hot path).


-- How messages name a key: 'step <serial>' in the namespace of steps, else the request.
CREATE FUNCTION hivenet._attempt_subject(p_namespace text, p_key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN CASE WHEN p_namespace = 'hivenet.steps' THEN 'step ' || hivenet._shown(p_key)
                ELSE format('request %s in namespace %s', hivenet._shown(p_key),
                            hivenet._shown(p_namespace)) END;
END $$;

-- HN001 unless p_value is a valid namespace or key (p_what names which): 1 to 255 characters,
-- none of them a control character. Namespaces starting 'hivenet.' are the library's own.
CREATE FUNCTION hivenet._check_request_name(p_what text, p_value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
    ELSIF p_what = 'namespace' AND left(p_value, 8) = 'hivenet.' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s is reserved (namespaces starting with ''hivenet.'' '
                             'are the library''s own)', hivenet._shown(p_value));
    END IF;
END $$;

-- HN001 unless the options of a begin are valid.
CREATE FUNCTION hivenet._check_begin_options(p_on_success text, p_lease interval,
    p_nowait boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_on_success IS NULL OR p_on_success NOT IN ('replay', 'reject') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('on_success %s is neither ''replay'' nor ''reject''',
                             hivenet._shown(p_on_success));
    END IF;
    IF p_lease <= interval '0' OR p_nowait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('lease %s is not positive or nowait is NULL', p_lease);
    END IF;
END $$;

-- The state machine: begin an attempt of key p_key in namespace p_namespace, the arguments
-- already checked by the caller (begin_request, begin_step). See begin_request for what it
-- does. Not set-returning (OUT parameters): the callers read its one row without a tuplestore.
-- No SET clause, on purpose: it runs only inside its callers, whose SET search_path is in
-- force, and a SET on a nested call costs a tenth of a begin (measured, docs/benchmarks.md).
CREATE FUNCTION hivenet._begin_attempt(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_fingerprint bytea := sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'));
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
--   'replay'/'reject', lease not positive, nowait NULL.
--   A key is never accepted twice while its record is kept: finished requests are removed by
--   maintain() once their last attempt ended longer ago than the namespace's retention
--   (set_request_retention; default the setting request_retention, 24 hours).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again); with nowait it raises HN030 at once instead. In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
CREATE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- The common case in one expression (plpgsql prepares each expression once per
    -- transaction); whatever fails it is explained by the checks.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND length(p_namespace) BETWEEN 1 AND 255 AND length(p_key) BETWEEN 1 AND 255
        -- one search for a control character (an anchored {1,255} repetition measured dearer)
        AND p_namespace || p_key !~ '[\x01-\x1f\x7f-\x9f]'
        AND left(p_namespace, 8) <> 'hivenet.',
        false) THEN
        PERFORM hivenet._check_request_name('namespace', p_namespace);
        PERFORM hivenet._check_request_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        IF p_nowait THEN
            SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
            FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success,
                                               NULL, p_lease) b;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL, p_lease) b;
    RETURN NEXT;
END $$;

-- Why attempt p_attempt of a key cannot be finished: HN033 naming what is there.
CREATE FUNCTION hivenet._raise_stale_attempt(p_namespace text, p_key text, p_attempt integer)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_last hivenet.request_attempt;
BEGIN
    SELECT * INTO v_last FROM hivenet.request_attempt a
    WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
    RAISE EXCEPTION USING ERRCODE = 'HN033',
        MESSAGE = CASE WHEN v_last.attempt IS NULL
            THEN format('%s has no attempt %s', hivenet._attempt_subject(p_namespace, p_key),
                        p_attempt)
            ELSE format('attempt %s of %s is not the current processing attempt (the current '
                        'is attempt %s, %s)', p_attempt,
                        hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                        v_last.state) END;
END $$;

-- The state machine's end of an attempt (finish_request, finish_step; resolve): see
-- finish_request. The checks stay off the hot path, after an UPDATE that found nothing. No
-- SET clause, as _begin_attempt: only called by functions that set the search path.
CREATE FUNCTION hivenet._finish_attempt(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_response jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
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
        IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
            PERFORM hivenet._check_request_name('namespace', p_namespace);
            PERFORM hivenet._check_request_name('key', p_key);
        END IF;
        IF p_succeeded IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('%s attempt %s: succeeded is NULL',
                                 hivenet._attempt_subject(p_namespace, p_key), p_attempt);
        END IF;
        PERFORM hivenet._raise_stale_attempt(p_namespace, p_key, p_attempt);
    END IF;
END $$;

-- The operator's resolution of a processing attempt (resolve_request, resolve_step).
CREATE FUNCTION hivenet._resolve_attempt(
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
    PERFORM hivenet._finish_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
END $$;

-- hivenet.finish_request(namespace, key, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_request returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_request proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the key's current
--   one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL, or namespace or key is not valid (as begin_request). Blocks
--   only while another transaction is finishing or resolving the same attempt; then raises
--   HN033 if that one committed.
CREATE FUNCTION hivenet.finish_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._finish_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_response);
END $$;

-- hivenet.resolve_request(namespace, key, attempt, succeeded, note, response default null)
--   → void. Operator action for a stuck request (hivenet.stuck_requests): once the real
--   outcome of attempt `attempt` is known, record it as `success` (response replayed later)
--   or `failed` (the next begin_request proceeds), with a note and the operator's session
--   user. The original attempt's late finish_request then gets HN033. Works on any processing
--   attempt, also before its lease ran out.
--   HN033 as finish_request; HN001 when note is empty or succeeded NULL. Blocks like finish.
CREATE FUNCTION hivenet.resolve_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._resolve_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_note,
                                     p_response);
END $$;

-- hivenet.set_request_retention(namespace, retention) → void
--   Finished requests of the namespace are kept for `retention` after their last attempt
--   ended (then maintain() removes them, and the same key starts afresh); NULL: back to the
--   setting request_retention (24 hours). Keep it longer than any client retries.
--   HN001: namespace not valid (as begin_request), retention not positive.
CREATE FUNCTION hivenet.set_request_retention(p_namespace text, p_retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._check_request_name('namespace', p_namespace);
    IF p_retention IS NULL THEN
        DELETE FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    ELSIF p_retention <= interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('retention %s of namespace %s is not positive', p_retention,
                             hivenet._shown(p_namespace));
    ELSE
        INSERT INTO hivenet.request_namespace AS n (namespace, retention)
        VALUES (p_namespace, p_retention)
        ON CONFLICT (namespace) DO UPDATE SET retention = EXCLUDED.retention;
    END IF;
END $$;

-- Remove every attempt of the keys of namespace p_namespace whose attempts all ended before
-- p_cutoff. A processing key is never removed. Candidates come from the index (namespace || '',
-- started_at): an attempt that ended before the cutoff also started before it. The keys are
-- collected first and deleted by primary key, so no plan can turn the delete into a scan (a
-- join would be hashed against every row of the namespace).
CREATE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_keys text[];
BEGIN
    SELECT array_agg(DISTINCT o.key) INTO v_keys FROM hivenet.request_attempt o
    WHERE o.namespace || '' = p_namespace AND o.started_at < p_cutoff  -- the index's expression
      AND NOT EXISTS (SELECT 1 FROM hivenet.request_attempt y
                      WHERE y.namespace = p_namespace AND y.key = o.key
                        AND (y.finished_at IS NULL OR y.finished_at >= p_cutoff));
    IF v_keys IS NOT NULL THEN
        DELETE FROM hivenet.request_attempt d
        WHERE d.namespace = p_namespace AND d.key = ANY (v_keys);
    END IF;
END $$;

-- Retention of requests (run by hivenet.maintain()): each namespace but the steps' (see
-- _maintain_steps) by its own retention. The namespaces are found by skipping through the
-- index, one probe each, never by reading the rows.
CREATE FUNCTION hivenet._maintain_requests() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
        PERFORM hivenet._purge_requests(v_namespace, v_now - coalesce(v_retention, v_default));
    END LOOP;
END $$;

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('request_retention', '24 hours', 'interval',
     'finished requests whose last attempt ended longer ago are removed by maintain(), in '
     'namespaces without a retention of their own (hivenet.set_request_retention); the same '
     'key after that starts afresh');
UPDATE hivenet.setting SET description =
     'how long a processing step or request is trusted when begun without a lease; after it '
     'the step is listed in hivenet.stuck_steps (a request in hivenet.stuck_requests) for an '
     'operator'
WHERE name = 'step_lease';

-- The steps move into the table of requests, in their namespace.
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at, finished_at,
     response, error, resolved_by, note)
SELECT 'hivenet.steps', s.system_serial, s.attempt, s.state, s.fingerprint, s.unified_serial,
       s.lease, s.started_at, s.finished_at, s.response, s.error, s.resolved_by, s.note
FROM hivenet.step_attempt s;
DROP TABLE hivenet.step_attempt;

-- hivenet_db/sql/steps.sql
INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('step_future_tolerance', '5 minutes', 'interval',
     'begin_step refuses system serials dated later than now plus this (HN021): clock skew '
     'between systems');
UPDATE hivenet.setting SET description =
     'finished steps whose last attempt ended longer ago are purged by maintain(); begin_step '
     'refuses system serials dated before then (HN021), so keep it longer than any caller '
     'retries'
WHERE name = 'step_retention';

-- The steps as they were stored before requests.sql: one row per attempt of a system serial.
CREATE VIEW hivenet.step_attempt AS
SELECT a.key AS system_serial, a.attempt, a.state, a.fingerprint, a.unified_serial, a.lease,
       a.started_at, a.finished_at, a.response, a.error, a.resolved_by, a.note
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps';
COMMENT ON VIEW hivenet.step_attempt IS
    'every attempt of every processing step (system serial); the latest attempt is the step''s state';

-- HN021 naming the window: the system serial p_system_serial is dated p_day, outside it.
CREATE FUNCTION hivenet._raise_step_outside_window(p_system_serial text, p_day date)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_zone text := hivenet._setting_value('time_zone');
    v_from timestamp := (hivenet.now() - hivenet._setting_value('step_retention')::interval)
                        AT TIME ZONE v_zone;
    v_to timestamp := (hivenet.now() + hivenet._setting_value('step_future_tolerance')::interval)
                      AT TIME ZONE v_zone;
BEGIN
    -- The first and last days whose start lies inside the window.
    RAISE EXCEPTION USING ERRCODE = 'HN021',
        MESSAGE = format('system serial %s is dated %s, outside the window of steps from %s to '
                         '%s: a step dated earlier may already be purged (step_retention %s), '
                         'one dated later is beyond the clock tolerance (step_future_tolerance '
                         '%s)', p_system_serial, p_day,
                         v_from::date + CASE WHEN v_from = v_from::date THEN 0 ELSE 1 END,
                         v_to::date, hivenet._setting_value('step_retention'),
                         hivenet._setting_value('step_future_tolerance'));
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
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive.
--   HN021 SerialOutsideWindow: the serial's date (business time zone) starts before now -
--   step_retention (the step's record may already be purged: it must not run again) or
--   after now + step_future_tolerance.
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
    v_day date;
    v_day_start timestamptz;
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
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        PERFORM hivenet.parse_serial(p_system_serial, 'system');
        IF p_unified_serial IS NOT NULL THEN
            PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
        END IF;
    END IF;
    -- Old serials are refused, not run again: their record may be purged (HN021). Settings
    -- from the generated constants (settings.sql): no query on the hot path.
    v_day := make_date(substr(p_system_serial, 11, 4)::integer,
                       substr(p_system_serial, 15, 2)::integer,
                       substr(p_system_serial, 17, 2)::integer);
    v_day_start := v_day::timestamp AT TIME ZONE hivenet._setting_constant('time_zone');
    IF v_day_start < hivenet.now() - hivenet._setting_constant('step_retention')::interval
       OR v_day_start > hivenet.now()
                        + hivenet._setting_constant('step_future_tolerance')::interval THEN
        PERFORM hivenet._raise_step_outside_window(p_system_serial, v_day);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                    p_unified_serial, p_lease) b;
    END IF;
    RETURN NEXT;
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
    PERFORM hivenet._finish_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                    p_response);
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
    PERFORM hivenet._resolve_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                     p_note, p_response);
END $$;

-- hivenet.stuck_steps: steps still `processing` after their lease ran out, oldest first. Their
-- outcome is unknown (the remote call may or may not have happened): find it out, then
-- hivenet.resolve_step(system_serial, attempt, succeeded, note).
-- A scan of the steps' attempts (an index on state would make every finish a non-HOT update).
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

-- hivenet.step_states: how many steps (system serials) are in each state, every state listed.
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

-- Retention of steps (run by hivenet.maintain()): purge every attempt of the steps whose
-- attempts all ended before now() - step_retention; a processing step is never purged.
CREATE OR REPLACE FUNCTION hivenet._maintain_steps() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._purge_requests('hivenet.steps', hivenet.now()
                                    - hivenet._setting_value('step_retention')::interval);
END $$;

-- hivenet_db/sql/reporting.sql (the views of requests)
-- hivenet.stuck_requests: keyed requests (requests.sql; not steps: hivenet.stuck_steps) still
-- `processing` after their lease ran out, oldest first. Their outcome is unknown: find it out,
-- then hivenet.resolve_request(namespace, key, attempt, succeeded, note).
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

-- hivenet.request_states: per namespace of keyed requests (not steps: hivenet.step_states),
-- how many keys are in each state (the state of their latest attempt), every state listed.
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

-- hivenet_db/sql/privileges.sql, applied again (new functions and views)
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
    hivenet._step_lease(interval),       -- in views stuck_steps/_requests, as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now()
TO PUBLIC;
-- Keyed requests (requests.sql).
GRANT EXECUTE ON FUNCTION
    hivenet.begin_request(text, text, jsonb, text, interval, boolean),
    hivenet.finish_request(text, text, integer, boolean, jsonb)
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
        GRANT SELECT ON hivenet.request_states, hivenet.stuck_requests TO hivenet_app;
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
        GRANT EXECUTE ON FUNCTION
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

SELECT hivenet._grant_roles();
