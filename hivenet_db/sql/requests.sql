-- Keyed attempts: the one state machine of idempotency (SPEC §4, §5b; seeds 000/002/003).
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
-- One core for steps and keyed requests: one writer of attempt rows (view _new_attempt), one
-- start of a new key (_start_key, the fast path), one full path (_begin_key: the checks of a
-- step or of a request, then the state machine _begin_attempt), one finish. What differs is
-- the key's checks: a request's key and namespace by the rule for names and the namespace's
-- key rules, a step's key as a system serial dated inside the kept window (steps.sql).
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
    -- The schema's clock (clock.sql), when the attempt began.
    started_at     timestamptz NOT NULL DEFAULT hivenet.now(),
    finished_at    timestamptz,
    response       jsonb,      -- success: the response replayed to later callers
    error          jsonb,      -- failed: what the caller reported (expired: NULL)
    -- the operator (session user) who resolved a stuck attempt; 'hivenet.expire_after' when
    -- the namespace's policy expired it
    resolved_by    text,
    note           text,       -- the operator's note, or why the policy expired it
    -- Who began the attempt, whatever path wrote it: the role the caller acts as, its
    -- application_name (NULL when empty) and address (NULL over a Unix socket). The role is
    -- read from the session (SET ROLE, SET LOCAL ROLE: a pooler's or PostgREST's per-request
    -- role, else the login): the attempts are written inside SECURITY DEFINER functions,
    -- where current_user is the owner.
    called_by        text DEFAULT coalesce(nullif(current_setting('role'), 'none'),
                                           session_user::text),
    application_name text DEFAULT nullif(current_setting('application_name'), ''),
    client_addr      inet DEFAULT inet_client_addr(),
    -- In a namespace with an audit chain only (audit.sql): the links of the attempt's begin
    -- and of its end, each a position in the namespace's chain and the link's hash.
    chain_position   bigint,
    chain_hash       bytea,
    finish_position  bigint,
    finish_hash      bytea,
    -- true: a client waits for this processing attempt's outcome (watch_request), so that
    -- finish_request notifies; on the row, so finishing reads it at no cost.
    awaited          boolean,
    -- In a namespace that keeps them (keep_raw_request): the exact bytes the client sent,
    -- beside the fingerprint of their canonical form (begin_request's raw_request).
    raw_request      bytea,
    PRIMARY KEY (namespace, key, attempt)
)
-- fillfactor: room on the page so finishing is a HOT update. Autovacuum after 2,000 dead rows
-- whatever the table's size (a finish or a rollback leaves one; the default waits for 20 % of
-- the table, which grows every day): dead rows stay flat.
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.request_attempt IS
    'every attempt of every idempotency key (namespace, key); '
    'the latest attempt is the key''s state';
-- Retention reaches the old attempts of one namespace only (finishing leaves both columns
-- alone, so it stays a HOT update). On the expression namespace || '', not the column: the
-- hot path's lookups (namespace = ... AND key = ...) then can only use the primary key
-- (docs/design/sql-internals.md).
CREATE INDEX request_attempt_started_at ON hivenet.request_attempt
    ((namespace || ''), started_at);

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

-- HN001 unless the options of a begin are valid: on_success, lease, nowait, and wait (NULL,
-- or from 0 to the longest interval a caller may pass).
CREATE FUNCTION hivenet._check_begin_options(p_on_success text, p_lease interval,
    p_nowait boolean, p_wait interval) RETURNS void
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
    IF NOT p_wait BETWEEN interval '0' AND hivenet._longest_interval() THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('wait %s is not between 0 and %s', p_wait,
                             hivenet._longest_interval());
    END IF;
END $$;

-- Whether a begin's options are plain: on_success 'replay' or 'reject', without nowait and
-- without wait. Such a begin starts a new key alike (the policy matters only once a key has
-- succeeded) and may wait for a concurrent start unbounded, as an INSERT does: a new key with
-- plain options is started by the fast path (_start_key), and input it vouches for needs no
-- check again (_begin_key). The one definition. Inlined.
CREATE FUNCTION hivenet._plain_options(p_on_success text, p_nowait boolean, p_wait interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait AND p_wait IS NULL,
                    false);
END;

-- The request's default fingerprint ('bytes'), kept with every attempt and compared on every
-- later begin: sha256 of the jsonb text (jsonb normalises key order and whitespace); no
-- request counts as JSON null. The one definition, for namespaces without a fingerprint
-- policy (fingerprints.sql), on every path. Inlined (a SQL-standard body without SET):
-- begin_step's replay runs with the caller's rights (privileges.sql).
CREATE FUNCTION hivenet._fingerprint(p_request jsonb) RETURNS bytea
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'));
END;

-- HN001 naming the key rule of namespace p_namespace that key p_key breaks (key_min_length
-- p_min_length, key_pattern p_pattern: set_namespace_policy). Off the hot path: its caller
-- tests the rules first (_key_allowed, policies.sql).
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

-- The one writer of attempt rows: an INSERT into this view writes each row it is given (one,
-- or a batch's set) as a new `processing` attempt, and nothing for an attempt that exists
-- (ON CONFLICT DO NOTHING, after waiting for an uncommitted one); RETURNING names the
-- attempts written. Who began it and when come from the table's column defaults. A view's
-- rule, not a function: one INSERT serves one row (_start_key, _start_attempt) and a batch's
-- INSERT .. SELECT alike, where a function would be called once per key (batches.sql). The
-- owner's only: the functions that decide a start write through it, and count each start
-- (decisions.sql); no role may write an attempt past them (privileges.sql).
CREATE VIEW hivenet._new_attempt AS
SELECT NULL::text AS namespace, NULL::text AS key, NULL::integer AS attempt,
       NULL::bytea AS fingerprint, NULL::text AS unified_serial, NULL::interval AS lease,
       NULL::bytea AS raw_request
WHERE false;
CREATE RULE write AS ON INSERT TO hivenet._new_attempt DO INSTEAD
INSERT INTO hivenet.request_attempt AS a
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, raw_request)
VALUES (NEW.namespace, NEW.key, NEW.attempt, 'processing', NEW.fingerprint,
        NEW.unified_serial, NEW.lease, NEW.raw_request)
ON CONFLICT DO NOTHING
RETURNING a.namespace, a.key, a.attempt, a.fingerprint, a.unified_serial, a.lease,
          a.raw_request;

-- Start attempt p_attempt of key p_key in namespace p_namespace (_new_attempt), and when it
-- was written: its link in the namespace's audit chain when p_chained (audit.sql), and the
-- decision 'started' counted, with the client's bytes p_raw_request where the namespace keeps
-- them (NULL otherwise). Returns whether it was written (false: the attempt exists).
-- Its caller decides that this attempt may start (_begin_attempt). No SET clause:
-- it runs only inside SECURITY DEFINER callers, whose SET search_path is in force.
CREATE FUNCTION hivenet._start_attempt(p_namespace text, p_key text, p_attempt integer,
    p_fingerprint bytea, p_unified_serial text, p_lease interval, p_chained boolean,
    p_raw_request bytea)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
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
END $$;

-- The state machine: begin an attempt of key p_key in namespace p_namespace, whose policy is
-- p_policy (its row of request_namespace; every field NULL without one), the arguments
-- already checked by _begin_key. See begin_request for what it does. Not set-returning (OUT
-- parameters): the callers read its one row without a tuplestore. No SET clause, on purpose:
-- it runs only inside its callers, whose SET search_path is in force
-- (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._begin_attempt(
    p_namespace text, p_policy hivenet.request_namespace, p_key text, p_request jsonb,
    p_on_success text, p_unified_serial text, p_lease interval, p_raw_request bytea,
    OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
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
END $$;

-- Whether the lock wait that ended in lock_not_available, whose error context
-- (PG_EXCEPTION_CONTEXT) is p_context, was for a row of table p_table: another transaction
-- inserting the same key (the insert's check of the primary key), updating, deleting or
-- locking the row. PostgreSQL names such a row in one line of the context with its position
-- and the relation's name, 'while inserting index tuple (0,2) in relation "request_attempt"'
-- (in every language of its messages: '(0, 2)' in French, '0,2' in Korean); a wait for the
-- table's growth (its extension lock), for a lock on a whole relation, or for a row of
-- another table names none. lock_timeout itself cannot be told which lock to bound: this
-- tells the key's own wait from any other.
CREATE FUNCTION hivenet._waited_for_row(p_context text, p_table text) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT EXISTS (SELECT FROM regexp_split_to_table(p_context, '\n') AS c (line)
                   WHERE c.line ~ '\d+, ?\d+' AND strpos(c.line, p_table) > 0);
END;

-- _begin_attempt waiting at most p_wait for the key's own lock, then HN030 naming the wait:
-- the in-transaction shape's bound. A NULL p_wait is nowait: the shortest lock_timeout, 1 ms,
-- so that where it would wait for the key it raises HN030 at once. The key's
-- own lock is another transaction starting the same attempt (the insert waits for it) or
-- finishing or expiring the attempt this one would expire (the update waits for its row):
-- PostgreSQL names that row in the error of the lock_timeout (_waited_for_row). Any other
-- wait under the timeout (the table's growth under load, a lock on a whole table, the
-- namespace's audit chain; or behind another waiter for the key's row, whose holder the next
-- try meets) is no sign of the key, so it is waited for as by any statement: the begin
-- again, the timeout doubled each time. Its own function: a lock_timeout set inside
-- a function with a SET clause for it ends with the function, so the caller's is untouched,
-- and the subtransaction of the EXCEPTION block stays off the default path.
CREATE FUNCTION hivenet._begin_attempt_within(
    p_namespace text, p_policy hivenet.request_namespace, p_key text, p_request jsonb,
    p_on_success text, p_unified_serial text, p_lease interval, p_raw_request bytea,
    p_wait interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
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
END $$;

-- What _start_key vouches for in a keyed request, and _begin_key after it wrote nothing: what
-- _check_name and _check_begin_options accept (no namespace of the library's own), for plain
-- options, and no unified serial (only steps carry one). Inlined where it is called: no
-- function runs.
CREATE FUNCTION hivenet._request_start_valid(p_namespace text, p_key text,
    p_unified_serial text, p_lease interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key)
       AND left(p_namespace, 8) <> 'hivenet.' AND p_unified_serial IS NULL
       AND (p_lease IS NULL OR hivenet._interval_allowed(p_lease));
END;

-- The fast path of a begin: whether a new key was started, attempt 1 written. The first
-- branch of begin_request and the second of begin_step (p_step: the key is a step's system
-- serial, with unified serial p_unified_serial). It starts a key only with plain options,
-- input it vouches for (_start_valid), in a namespace whose keys do not start apart
-- (_starts_apart) and by its key rules (_key_allowed, policies.sql); false for everything
-- else, which _begin_key then decides and names. One probe of request_namespace, then one
-- INSERT into _new_attempt and the start counted: _start_attempt's work for a key without an
-- audit chain (a chained namespace starts apart), written out here: the call cost some 2% of
-- a begin + finish (docs/design/sql-internals.md).
-- SECURITY DEFINER: no role writes an attempt but through the functions that count it
-- (privileges.sql).
CREATE FUNCTION hivenet._start_key(p_step boolean, p_namespace text, p_key text,
    p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval,
    p_nowait boolean, p_wait interval)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_vouched boolean;
    v_apart boolean;
BEGIN
    -- The kind told apart by IF, _start_valid given it as a constant (folded to that kind's
    -- test): PL/pgSQL builds a simple expression's whole tree in every transaction, and
    -- _start_valid(p_step, ..) built the step's generated checks for every request too.
    IF p_step THEN
        v_vouched := hivenet._start_valid(true, p_namespace, p_key, p_unified_serial, p_lease);
    ELSE
        v_vouched := hivenet._start_valid(false, p_namespace, p_key, p_unified_serial, p_lease);
    END IF;
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(v_vouched, false)) THEN
        RETURN false;
    END IF;
    SELECT hivenet._starts_apart(n) OR NOT hivenet._key_allowed(n, p_key) INTO v_apart
    FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF v_apart THEN  -- NULL without a row: every default, no rule
        RETURN false;
    END IF;
    INSERT INTO hivenet._new_attempt
    VALUES (p_namespace, p_key, 1, hivenet._fingerprint(p_request), p_unified_serial, p_lease,
            NULL);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM hivenet._count_decision(p_namespace, 'started');
    RETURN true;
END $$;

-- The full path of a begin, after _start_key wrote nothing: the arguments checked as the kind
-- of key asks (a step's by _check_step, steps.sql; a request's names and its namespace's key
-- rules), each with its exact error and the decision 'rejected' counted, then the state
-- machine (_begin_attempt, bounded by nowait or wait). Input _start_key vouches for, with
-- plain options, met a key that has an attempt: it goes to the state machine at once. Not
-- set-returning (OUT parameters): no tuplestore of its own. p_raw_request: the client's
-- bytes, kept where the namespace's policy asks (keep_raw_request, which starts apart).
CREATE FUNCTION hivenet._begin_key(p_step boolean, p_namespace text, p_key text,
    p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval,
    p_nowait boolean, p_wait interval, p_raw_request bytea, OUT outcome text,
    OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_vouched boolean;
    v_policy hivenet.request_namespace;
BEGIN
    IF p_step THEN  -- the kind told apart as in _start_key
        v_vouched := hivenet._start_valid(true, p_namespace, p_key, p_unified_serial, p_lease);
    ELSE
        v_vouched := hivenet._start_valid(false, p_namespace, p_key, p_unified_serial, p_lease);
    END IF;
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(v_vouched, false)) THEN
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
END $$;

-- hivenet.begin_request(namespace, key, request default null, on_success default 'replay',
--                       lease default null, nowait default false, wait default null,
--                       raw_request default null)
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
--   raw_request: the exact bytes the client sent (request being what was read from them), kept
--   with the attempt it starts where the namespace keeps them (set_namespace_policy(...,
--   keep_raw_request => true)), ignored elsewhere; a replay keeps nothing: it matched the
--   first request's canonical form, whose bytes are the first attempt's.
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
--   is nowait). nowait and wait bound only that wait for the key: any other lock (on the
--   whole table, the table's growth, a chained namespace's chain) is waited for as by any
--   statement. An attempt begun and committed by another transaction holds no lock: begin
--   raises HN030 at once, wait or not; a client waits for its outcome with watch_request and
--   LISTEN, then begins again (see watch_request). In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
--   One statement, inlined into the caller's (a set-returning LANGUAGE sql function, as
--   begin_step): a new key with plain options is started by _start_key, one INSERT;
--   anything else (a key that has an attempt, bad input, nowait, wait) goes to _begin_key,
--   run only when the first branch wrote nothing (a UNION ALL under LIMIT 1, as begin_step's).
CREATE FUNCTION hivenet.begin_request(
    namespace text, key text, request jsonb DEFAULT NULL, on_success text DEFAULT 'replay',
    lease interval DEFAULT NULL, nowait boolean DEFAULT false, wait interval DEFAULT NULL,
    raw_request bytea DEFAULT NULL)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    (SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_key(false, namespace, key, request, on_success, NULL, lease, nowait,
                              wait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_key(false, namespace, key, request, on_success, NULL, lease, nowait,
                             wait, raw_request) b)
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

-- Remove every attempt of the keys of namespace p_namespace whose attempts all ended before
-- p_cutoff, and of the keys whose latest attempt failed or expired (no attempt succeeded: a
-- success is a key's last attempt) once all ended before p_failure_cutoff (NULL: p_cutoff;
-- later than it when the namespace's failure_retention is shorter than its retention); for
-- the steps' namespace, only of the keys (system serials) dated before p_dated_before
-- (_maintain_steps: what begin_step refuses). A processing key is never removed. Candidates
-- come from the index (namespace || '', started_at): an attempt that ended before a cutoff
-- also started before it; between the two cutoffs only failed or expired rows are looked at
-- further. The keys are collected first and deleted by primary key, so no plan can turn the
-- delete into a scan (a join would be hashed against every row of the namespace).
CREATE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamptz,
                                        p_dated_before timestamp DEFAULT NULL,
                                        p_failure_cutoff timestamptz DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- Retention of requests (run by hivenet.maintain()): each namespace but the steps' (see
-- _maintain_steps) by its own retention, and its failures by its failure_retention. The
-- namespaces are found by skipping through the index, one probe each, never by reading the
-- rows.
CREATE FUNCTION hivenet._maintain_requests() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
--   For a step: watch_request('hivenet.steps', system_serial) (begin_step's wait).
--   HN001: namespace or key not valid (as begin_request; the steps' namespace is).
CREATE FUNCTION hivenet.watch_request(namespace text, key text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
END $$;
