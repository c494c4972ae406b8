-- Keyed requests: the one state machine of idempotency (SPEC §4, seeds 000/002/003).
--
-- Every idempotency key lives in a namespace: a client's request key, a message id of a queue,
-- a pay id or notify id of the purchase flow, and the steps of steps.sql (namespace
-- 'hivenet.steps', key = the system serial). One table holds every attempt of every key: the
-- key's state is the state of its latest attempt. Attempts of a key are numbered 1, 2, ... and
-- only the latest can be `processing` or `success`; a new attempt n+1 is only inserted after
-- attempt n failed. The primary key (namespace, key, attempt) is therefore the whole duplicate
-- guard: two callers starting the same attempt collide on it, the second waits for the first
-- to commit or roll back (or fails at once with nowait) and then looks again. One INSERT to
-- begin and one (HOT) UPDATE to finish keep the hot path as short as a bare dedup table's.
--
-- The table is not partitioned by time: PostgreSQL has no index across partitions, so a key
-- whose first attempt sits in an older partition could be accepted again in a newer one while
-- its record is still retained. Retention instead deletes through an index on (namespace,
-- started_at), which reaches only the rows started before a namespace's cutoff: never a scan
-- of live rows.

-- The states of an attempt; an enum, not a CHECK on text (docs/design/sql-internals.md).
-- `expired`: left `processing` longer than its namespace's expire_after (expiry.sql), a
-- failure by policy. The other invariants (attempt > 0, lease > 0, finished_at set exactly
-- when not processing) are kept by the functions, the only writers.
CREATE TYPE hivenet.step_state AS ENUM ('processing', 'success', 'failed', 'expired');

CREATE TABLE hivenet.request_attempt (
    namespace      text        NOT NULL,
    key            text        NOT NULL,
    attempt        integer     NOT NULL,
    state          hivenet.step_state NOT NULL,
    -- sha256 of the request by the namespace's policy (fingerprints.sql; by default the jsonb
    -- text): the same key with another request is refused, never re-executed or replayed.
    fingerprint    bytea       NOT NULL,
    unified_serial text,       -- steps: the business transaction's unified serial, for audit
    -- how long `processing` is trusted; NULL: the setting step_lease (read when checked).
    lease          interval,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    response       jsonb,      -- success: the response replayed to later callers
    error          jsonb,      -- failed: what the caller reported (expired: NULL)
    -- the operator (session user) who resolved a stuck attempt; 'hivenet.expire_after' when
    -- the namespace's policy expired it
    resolved_by    text,
    note           text,       -- the operator's note, or why the policy expired it
    -- Who began the attempt, on every path (_called_by): the role, the client's
    -- application_name (NULL when empty) and address (NULL over a Unix socket).
    called_by        text,
    application_name text,
    client_addr      inet,
    -- In a namespace with an audit chain only (audit.sql): the links of the attempt's begin
    -- and of its end, each a position in the namespace's chain and the link's hash.
    chain_position   bigint,
    chain_hash       bytea,
    finish_position  bigint,
    finish_hash      bytea,
    -- true: a client waits for this processing attempt's outcome (watch_request), so that
    -- finish_request notifies; on the row, so finishing reads it at no cost.
    awaited          boolean,
    PRIMARY KEY (namespace, key, attempt)
)
-- fillfactor: room on the page so finishing is a HOT update. Autovacuum after 2,000 dead rows
-- whatever the table's size (a finish or a rollback leaves one; the default waits for 20 % of
-- the table, which grows every day): dead rows stay flat.
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.request_attempt IS
    'every attempt of every idempotency key (namespace, key); the latest attempt is the key''s state';
-- Retention reaches the old attempts of one namespace only (finishing leaves both columns
-- alone, so it stays a HOT update). On the expression namespace || '', not the column: the
-- hot path's lookups (namespace = ... AND key = ...) then can only use the primary key
-- (docs/design/sql-internals.md).
CREATE INDEX request_attempt_started_at ON hivenet.request_attempt
    ((namespace || ''), started_at);

-- The policy of a namespace (set_namespace_policy): NULL in a column is the default, and a
-- namespace without a row has every default. retention NULL: the setting request_retention;
-- fingerprint NULL: 'bytes' (fingerprints.sql); key_min_length, key_pattern NULL: no rule
-- beyond a valid name; audit_chain NULL: no hash chain (audit.sql); on_failure NULL: 'retry';
-- expire_after NULL: never (expiry.sql). Only a namespace with a fingerprint, a key rule or an
-- audit chain leaves begin_request's fast path (view _request_start): the failure policy
-- matters only once a key has an attempt. A row holding only NULLs is deleted.
CREATE TABLE hivenet.request_namespace (
    namespace      text     PRIMARY KEY,
    retention      interval,
    fingerprint    text,
    key_min_length integer,
    key_pattern    text,
    audit_chain    boolean,
    on_failure     text,
    expire_after   interval
);
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules, failure policy; NULL is the default';

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('step_lease', '5 minutes', 'interval',
     'how long a processing step or request is trusted when begun without a lease; after it '
     'the step is listed in hivenet.stuck_steps (a request in hivenet.stuck_requests) for an '
     'operator'),
    ('request_retention', '24 hours', 'interval',
     'finished requests whose last attempt ended longer ago are removed by maintain(), in '
     'namespaces without a retention of their own (hivenet.set_request_retention); the same '
     'key after that starts afresh');

-- Helpers are plpgsql, not sql: a sql function with SET search_path is never inlined
-- (docs/design/sql-internals.md).

-- The lease in force of an attempt, never longer than a caller may pass (clock.sql,
-- _longest_interval): its end is a timestamp whatever is stored, so the views never fail.
-- SECURITY DEFINER: views stuck_steps and stuck_requests call it as their reader, who may not
-- read hivenet.setting.
CREATE FUNCTION hivenet._step_lease(p_lease interval) RETURNS interval
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN least(coalesce(p_lease, hivenet._setting_value('step_lease')::interval),
                 hivenet._longest_interval());
END $$;

-- How messages name a key: 'step <serial>' in the namespace of steps, else the request.
CREATE FUNCTION hivenet._attempt_subject(p_namespace text, p_key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN CASE WHEN p_namespace = 'hivenet.steps' THEN 'step ' || hivenet._shown(p_key)
                ELSE format('request %s in namespace %s', hivenet._shown(p_key),
                            hivenet._shown(p_namespace)) END;
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
    PERFORM hivenet._check_interval('lease', p_lease);
    IF p_nowait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'nowait is NULL';
    END IF;
END $$;

-- Whether a begin's options are plain: on_success 'replay' or 'reject' without nowait. Such a
-- begin starts a new key alike (the policy matters only once a key has succeeded) and may wait
-- for a concurrent start, as an INSERT does: a new step or key with plain options is started
-- by one INSERT into view _step_start / _request_start (_start_step, _start_request), and
-- input those views vouch for needs no check again (_begin_step, _begin_request). The one
-- definition, for both. Inlined.
CREATE FUNCTION hivenet._plain_options(p_on_success text, p_nowait boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false);
END;

-- The request's default fingerprint ('bytes'), kept with every attempt and compared on every
-- later begin: sha256 of the jsonb text (jsonb normalises key order and whitespace); no
-- request counts as JSON null. The one definition, for steps and for keyed requests in
-- namespaces without a fingerprint policy (fingerprints.sql), on every path. Inlined (a
-- SQL-standard body without SET), so PUBLIC may execute it: begin_step's replay runs with the
-- caller's rights (privileges.sql).
CREATE FUNCTION hivenet._fingerprint(p_request jsonb) RETURNS bytea
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'));
END;

-- Who begins an attempt (column called_by): the role the caller acts as. current_user where
-- the caller's own code runs; inside SECURITY DEFINER functions (_begin_attempt's callers)
-- current_user is the owner, so the role is read from the session: the role of SET ROLE (SET
-- LOCAL ROLE: a pooler's or PostgREST's per-request role), else the login. The one
-- definition, for every path that inserts an attempt. Inlined (the rules of views
-- _request_start and _step_start run it as the inserter: privileges.sql).
CREATE FUNCTION hivenet._called_by() RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text);
END;

-- HN001 naming the key rule of namespace p_namespace that key p_key breaks (key_min_length
-- p_min_length, key_pattern p_pattern: set_namespace_policy). Off the hot path: its caller
-- tests the rules first.
CREATE FUNCTION hivenet._raise_key_refused(p_namespace text, p_key text, p_min_length integer,
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
CREATE FUNCTION hivenet._begin_attempt(
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
END $$;

-- _begin_attempt waiting at most p_wait for a concurrent start of the same attempt (a lock
-- wait), under lock_timeout p_wait, then HN030 naming the wait: the in-transaction shape's
-- bound. A NULL p_wait is nowait: the shortest lock_timeout (the SET clause's), so that where
-- it would wait it raises HN030 at once. Its own function: a lock_timeout set inside a
-- function with a SET clause for it ends with the function, so the caller's is untouched, and
-- the subtransaction of the EXCEPTION block stays off the default path.
CREATE FUNCTION hivenet._begin_attempt_within(
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

-- What view _request_start vouches for (below), and begin_request after the view wrote nothing:
-- what _check_name and _check_begin_options accept, for plain options. Inlined where
-- it is called: no function runs.
CREATE FUNCTION hivenet._request_start_valid(p_namespace text, p_key text, p_lease interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key)
       AND left(p_namespace, 8) <> 'hivenet.'
       AND (p_lease IS NULL OR hivenet._interval_allowed(p_lease));
END;

-- The first attempt of a new keyed request, written by one INSERT into this view (its rule
-- runs with the owner's rights), begin_request's common case (_start_request), as view
-- _step_start for steps (steps.sql, where the why is). The rule checks the names and the lease
-- (_request_start_valid, above; the checks' exact errors stay in _begin_request) and inserts
-- attempt 1; it writes nothing for a key that has an attempt or for input it does not vouch
-- for (a namespace of the library's own among them, or one whose policy has a fingerprint, a
-- key rule or an audit chain: one probe of request_namespace), and then _begin_request
-- decides. It records the caller as _begin_attempt does.
-- Insert-only, for hivenet_app (privileges.sql): the row it writes is the one begin_request
-- would write. The VALUES list evaluates each inserted expression once (see _step_start).
CREATE VIEW hivenet._request_start AS
SELECT NULL::text AS namespace, NULL::text AS key, NULL::jsonb AS request,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
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

-- Whether a new key with plain options was started: attempt 1 written through view
-- _request_start. begin_request's first branch, run as the caller, as _start_step (steps.sql,
-- where the why is).
CREATE FUNCTION hivenet._start_request(p_namespace text, p_key text, p_request jsonb,
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
CREATE FUNCTION hivenet._begin_request(
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
--   * no attempt yet, or the latest failed or expired: a new attempt starts, state
--     `processing`; outcome 'started', attempt n+1, response NULL. Apply the effect, then call
--     finish_request with that attempt number. In a namespace whose on_failure is 'final'
--     (set_namespace_policy), a latest failed or expired attempt is replayed instead: outcome
--     'replayed_failure', that attempt, and its error as response (NULL when expired).
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck request with resolve_request; nothing takes it over); but
--     past the namespace's expire_after, it becomes `expired` (finished now, resolved_by
--     'hivenet.expire_after', a note saying so) and is then a failure as above.
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
--   rolled back, or is finishing or expiring the attempt it would expire (then looks again);
--   with nowait it raises HN030 at once instead, with wait once it waited that long (wait 0
--   is nowait). An attempt begun and committed by another transaction holds no lock: begin
--   raises HN030 at once, wait or not; a client waits for its outcome with watch_request and
--   LISTEN, then begins again (see watch_request). In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
--   One statement, inlined into the caller's (a set-returning LANGUAGE sql function, as
--   begin_step): a new key with plain options is started by _start_request, with no SECURITY
--   DEFINER call; anything else (a key that has an attempt, bad input, nowait) goes to
--   _begin_request, run only when the first branch wrote nothing (a UNION ALL under LIMIT 1,
--   as begin_step's).
CREATE FUNCTION hivenet.begin_request(
    namespace text, key text, request jsonb DEFAULT NULL, on_success text DEFAULT 'replay',
    lease interval DEFAULT NULL, nowait boolean DEFAULT false, wait interval DEFAULT NULL)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    -- With a wait, not the view: its INSERT would wait for a concurrent start unbounded.
    (SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_request(namespace, key, request, on_success, lease,
                                  nowait OR wait IS NOT NULL)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_request(namespace, key, request, on_success, lease, nowait, wait) b)
    LIMIT 1;
END;

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

-- Why finish_request's UPDATE found no attempt to finish, raised: HN001 for a namespace or key
-- begin_request would refuse, or a NULL succeeded; else HN033 naming what is there. Off the hot
-- path. No SET clause, as _begin_attempt: only called by functions that set the search path.
CREATE FUNCTION hivenet._raise_unfinished(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
        PERFORM hivenet._check_name('key', p_key);
    END IF;
    IF p_succeeded IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s attempt %s: succeeded is NULL',
                             hivenet._attempt_subject(p_namespace, p_key), p_attempt);
    END IF;
    PERFORM hivenet._raise_stale_attempt(p_namespace, p_key, p_attempt);
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
    -- The note first, so that the end of an attempt in an audit chain covers it (audit.sql);
    -- then finish's fencing and state change (HN033 undoes the note with everything else).
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing';
    PERFORM hivenet.finish_request(p_namespace, p_key, p_attempt, p_succeeded, p_response);
END $$;

-- Wake the clients waiting for key p_key's outcome (watch_request) at commit: only for an
-- attempt marked awaited, since NOTIFY serialises the notifying commits of the whole cluster.
-- Called where an attempt ends: finish_request (resolve_request through it) and expiry.
CREATE FUNCTION hivenet._wake_waiters(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('hivenet_request_finished', json_build_array(p_namespace, p_key)::text);
END $$;

-- hivenet.finish_request(namespace, key, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_request returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_request proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the key's current
--   one or is no longer `processing` (finished, resolved by an operator, or expired by its
--   namespace's expire_after).
--   HN001 when succeeded is NULL, or namespace or key is not valid (as begin_request). Blocks
--   only while another transaction is finishing or resolving the same attempt; then raises
--   HN033 if that one committed.
--   When a client waits for the attempt's outcome (watch_request), notifies channel
--   hivenet_request_finished at commit with payload the JSON array [namespace, key].
CREATE FUNCTION hivenet.finish_request(
    namespace text, key text, attempt integer, succeeded boolean, response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- hivenet.resolve_request(namespace, key, attempt, succeeded, note, response default null)
--   → void. Operator action for a stuck request (hivenet.stuck_requests): once the real
--   outcome of attempt `attempt` is known, record it as `success` (response replayed later)
--   or `failed` (the next begin_request proceeds), with a note and the operator's session
--   user. The original attempt's late finish_request then gets HN033. Works on any processing
--   attempt, also before its lease ran out.
--   HN033 as finish_request; HN001 when note is empty or succeeded NULL. Blocks like finish.
--   Wakes the waiters of the key as finish_request does.
CREATE FUNCTION hivenet.resolve_request(
    namespace text, key text, attempt integer, succeeded boolean, note text,
    response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key; p_attempt ALIAS FOR attempt;
    p_succeeded ALIAS FOR succeeded; p_note ALIAS FOR note; p_response ALIAS FOR response;
BEGIN
    PERFORM hivenet._resolve_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_note,
                                     p_response);
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
    namespace text, retention interval DEFAULT NULL, fingerprint text DEFAULT NULL,
    on_failure text DEFAULT NULL, expire_after interval DEFAULT NULL,
    key_min_length integer DEFAULT NULL, key_pattern text DEFAULT NULL,
    audit_chain boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_retention ALIAS FOR retention;
    p_fingerprint ALIAS FOR fingerprint; p_on_failure ALIAS FOR on_failure;
    p_expire_after ALIAS FOR expire_after; p_key_min_length ALIAS FOR key_min_length;
    p_key_pattern ALIAS FOR key_pattern; p_audit_chain ALIAS FOR audit_chain;
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

-- hivenet.set_request_retention(namespace, retention) → void
--   set_namespace_policy(namespace, retention), and NULL: back to the setting
--   request_retention (24 hours). Keep it longer than any client retries.
CREATE FUNCTION hivenet.set_request_retention(namespace text, retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_retention ALIAS FOR retention;
BEGIN
    IF p_retention IS NULL THEN
        UPDATE hivenet.request_namespace n SET retention = NULL
        WHERE n.namespace = p_namespace;
    END IF;
    PERFORM hivenet.set_namespace_policy(p_namespace, p_retention);  -- checks, tidies
END $$;

-- Remove every attempt of the keys of namespace p_namespace whose attempts all ended before
-- p_cutoff; for the steps' namespace, only of the keys (system serials) dated before
-- p_dated_before (_maintain_steps: what begin_step refuses). A processing key is never
-- removed. Candidates come from the index (namespace || '', started_at): an attempt that ended before the cutoff also started before it. The keys are
-- collected first and deleted by primary key, so no plan can turn the delete into a scan (a
-- join would be hashed against every row of the namespace).
CREATE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamptz,
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
        -- Bounded as set_request_retention bounds it: a cutoff is always a timestamp.
        PERFORM hivenet._purge_requests(v_namespace, v_now - least(
            coalesce(v_retention, v_default), hivenet._longest_interval()));
    END LOOP;
END $$;

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
CREATE FUNCTION hivenet.watch_request(namespace text, key text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key;
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    PERFORM hivenet._check_name('key', p_key);
    UPDATE hivenet.request_attempt a SET awaited = true
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.state = 'processing'
      AND a.awaited IS NOT TRUE;
    RETURN 'hivenet_request_finished';
END $$;
