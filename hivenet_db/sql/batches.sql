-- Batches of keys: begin_requests and begin_steps begin many keys of one namespace in one round
-- trip, with one outcome per key (a consumer's batch of messages, a partial batch that reports
-- per item, the steps of one business transaction). Nothing of the state machine is written
-- twice: the new keys the fast path would start are started by one INSERT of their first
-- attempts (into the one writer, view _new_attempt), and every other key goes through
-- _begin_key, the full path of begin_request and begin_step (their checks, the namespace's
-- policy and the state machine), so each key is decided exactly as a single begin decides it.
-- finish_requests and finish_steps finish the started keys in one call, each as
-- finish_request.

-- The most keys one call takes: a batch is one statement and one transaction's locks.
CREATE FUNCTION hivenet._batch_limit() RETURNS integer
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT 1000;
END;

-- HN001 unless the batch's shape is valid: namespace (as begin_request; for a batch of steps,
-- p_step, the steps' namespace), the keys and the values given with them (p_what names them:
-- 'requests', 'responses') given, one-dimensional, as long as each other, at most
-- _batch_limit() keys, no key NULL or given twice, lease (as begin_request). A key a single
-- begin would refuse is no error of the batch: that key's outcome is 'rejected'.
CREATE FUNCTION hivenet._check_batch(p_step boolean, p_namespace text, p_keys text[],
    p_what text, p_values jsonb[], p_lease interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- The outcome of key p_key of a batch that the INSERT of new keys did not start: what a single
-- begin (on_success 'replay', no nowait) decides, its refusals caught into outcomes in this
-- key's own subtransaction. response: the stored response when replayed, else for a refusal
-- the error the single begin would raise, {"code": ..., "message": ...}. No SET clause, as
-- _begin_attempt: only _begin_batch calls it.
CREATE FUNCTION hivenet._begin_batch_key(p_step boolean, p_namespace text, p_key text,
    p_request jsonb, p_unified_serial text, p_lease interval, OUT outcome text,
    OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_key(p_step, p_namespace, p_key, p_request, 'replay', p_unified_serial,
                            p_lease, false, NULL, NULL) b;
EXCEPTION WHEN SQLSTATE 'HN030' OR SQLSTATE 'HN032' OR SQLSTATE 'HN001' OR SQLSTATE 'HN002'
               OR SQLSTATE 'HN021' THEN
    outcome := CASE SQLSTATE WHEN 'HN030' THEN 'in_progress' WHEN 'HN032' THEN 'mismatch'
                             ELSE 'rejected' END;
    response := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
END $$;

-- The batch of begin_requests (p_step false) and begin_steps (p_step true, namespace
-- 'hivenet.steps', unified serial p_unified_serial): one row per key, in the order of
-- p_keys. The common case is set-based: the first attempt of every new key the fast path
-- would start (_start_valid, _starts_apart, _key_allowed: the same tests as _start_key), by
-- one INSERT; a key with an attempt writes nothing, after waiting for an uncommitted one as a
-- single begin does. Every other key by _begin_key, one by one. Both go in the keys' sort
-- order: two overlapping batches then wait for each other instead of deadlocking. No SET
-- clause: its callers set the search path.
CREATE FUNCTION hivenet._begin_batch(p_step boolean, p_namespace text, p_keys text[],
    p_requests jsonb[], p_unified_serial text, p_lease interval)
RETURNS TABLE (key text, outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
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
END $$;

-- hivenet.begin_requests(namespace, keys text[], requests jsonb[], lease default null)
--   → table(key text, outcome text, attempt int, response jsonb), one row per key, in the
--   order of keys. Begins every key of a batch in namespace `namespace` in the caller's
--   transaction, in one round trip: for keys[i] with requests[i], what begin_request(namespace,
--   keys[i], requests[i], lease => lease) would decide, as an outcome instead of an error:
--   * 'started': a new attempt started (attempt n), response NULL. Finish each started key
--     with finish_request(namespace, key, attempt, ...), as after begin_request.
--   * 'replayed': the key succeeded; attempt and response are the success's.
--     'replayed_failure': its failure is final (set_namespace_policy's on_failure); attempt
--     and response are the failed attempt's and its error.
--   * 'in_progress' (HN030), 'mismatch' (HN032), 'rejected' (HN001: a key begin_request
--     refuses, by the rule for keys or the namespace's key_min_length / key_pattern): attempt
--     NULL, response {"code": "HN0xx", "message": "<the error begin_request raises>"}.
--   The namespace's policy (fingerprint, key rules, failure policy) applies as to
--   begin_request. A batch is partial by design: the other keys are begun whatever one key's
--   outcome.
--   HN001 for the whole call: namespace not valid (as begin_request), keys or requests NULL,
--   not one-dimensional or not as long as each other, more than 1,000 keys, a key NULL or
--   given twice, lease not positive or longer than 10 years. (A request the namespace's
--   fingerprint cannot read, a number no double holds under 'json', is that key's 'rejected'.)
--   Blocks while another transaction has started one of the keys and not yet committed or
--   rolled back, as begin_request; the keys are taken in their sort order, so two batches
--   never deadlock on each other (a transaction that began some of the keys one by one, in
--   another order, may: PostgreSQL then rolls one back with 40P01).
CREATE FUNCTION hivenet.begin_requests(
    namespace text, keys text[], requests jsonb[], lease interval DEFAULT NULL)
RETURNS TABLE (key text, outcome text, attempt integer, response jsonb)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT b.key, b.outcome, b.attempt, b.response
    FROM hivenet._begin_batch(false, namespace, keys, requests, NULL, lease) b;
END;

-- finish_request of every key of a batch, in the order of p_keys, in one call: all or nothing
-- (the first key finish_request refuses raises its error). Key by key, each by the primary
-- key: a join of the arrays with the table is planned from the table's statistics, and may
-- read every processing row of the namespace.
CREATE FUNCTION hivenet._finish_batch(p_step boolean, p_namespace text, p_keys text[],
    p_attempts integer[], p_succeeded boolean[], p_responses jsonb[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
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
END $$;

-- hivenet.finish_requests(namespace, keys text[], attempts integer[], succeeded boolean[],
--                         responses jsonb[]) → void
--   finish_request(namespace, keys[i], attempts[i], succeeded[i], responses[i]) of every key
--   of a batch (begin_requests' started keys), in the order of keys, in one call. All or
--   nothing: the first key finish_request refuses raises its error (HN033, HN001) and the
--   call changes nothing.
--   HN001 for the whole call as begin_requests (namespace, keys, responses; NULL, lengths,
--   1,000 keys, a key NULL or given twice), attempts or succeeded NULL or not as long as keys.
CREATE FUNCTION hivenet.finish_requests(
    namespace text, keys text[], attempts integer[], succeeded boolean[],
    responses jsonb[])
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT hivenet._finish_batch(false, namespace, keys, attempts, succeeded, responses);
END;
