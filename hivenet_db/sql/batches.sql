-- Batches of keyed requests: begin_requests begins many keys of one namespace in one round
-- trip, with one outcome per key (a consumer's batch of messages, a partial batch that reports
-- per item). Nothing of the state machine is written twice: the new keys are started by one
-- INSERT of their first attempts (what begin_request writes for a new key), and every other key
-- goes through _begin_request, begin_request's own full path (its checks, the namespace's
-- policy and _begin_attempt), so each key is decided exactly as begin_request decides it.
-- finish_requests finishes the started keys in one call, each by finish_request.

-- The most keys one call takes: a batch is one statement and one transaction's locks.
CREATE FUNCTION hivenet._batch_limit() RETURNS integer
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT 1000;
END;

-- HN001 unless the batch's shape is valid: namespace (as begin_request), the keys and the
-- values given with them (p_what names them: 'requests', 'responses') given, one-dimensional,
-- as long as each other, at most _batch_limit() keys, no key NULL or given twice, lease (as
-- begin_request). A key begin_request would refuse is no error of begin_requests: that
-- key's outcome is 'rejected'.
CREATE FUNCTION hivenet._check_batch(p_namespace text, p_keys text[], p_what text,
    p_values jsonb[], p_lease interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- The outcome of key p_key of a batch that the INSERT of new keys did not start: what
-- begin_request (on_success 'replay', no nowait) decides, its refusals caught into outcomes in
-- this key's own subtransaction. response: the stored response when replayed, else for a
-- refusal the error begin_request would raise, {"code": ..., "message": ...}. No SET clause,
-- as _begin_attempt: only begin_requests calls it.
CREATE FUNCTION hivenet._begin_batch_key(p_namespace text, p_key text, p_request jsonb,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_request(p_namespace, p_key, p_request, 'replay', p_lease, false, NULL) b;
EXCEPTION WHEN SQLSTATE 'HN030' OR SQLSTATE 'HN032' OR SQLSTATE 'HN001' THEN
    outcome := CASE SQLSTATE WHEN 'HN030' THEN 'in_progress' WHEN 'HN032' THEN 'mismatch'
                             ELSE 'rejected' END;
    response := jsonb_build_object('code', SQLSTATE, 'message', SQLERRM);
END $$;

-- hivenet.begin_requests(namespace, keys text[], requests jsonb[], lease default null)
--   → table(key text, outcome text, attempt int, response jsonb), one row per key, in the
--   order of keys. Begins every key of a batch in namespace `namespace` in the caller's
--   transaction, in one round trip: for keys[i] with requests[i], what begin_request(namespace,
--   keys[i], requests[i], lease => lease) would decide, as an outcome instead of an error:
--   * 'started': a new attempt started (attempt n), response NULL. Finish each started key
--     with finish_request(namespace, key, attempt, ...), as after begin_request.
--   * 'replayed': the key succeeded; attempt and response are the success's.
--   * 'in_progress' (HN030), 'mismatch' (HN032), 'rejected' (HN001: a key begin_request
--     refuses, by the rule for keys or the namespace's key_min_length / key_pattern): attempt
--     NULL, response {"code": "HN0xx", "message": "<the error begin_request raises>"}.
--   The namespace's policy (fingerprint, key rules) applies as to begin_request. A batch is
--   partial by design: the other keys are begun whatever one key's outcome.
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
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_keys ALIAS FOR keys; p_requests ALIAS FOR requests;
    p_lease ALIAS FOR lease;
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
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_keys ALIAS FOR keys; p_attempts ALIAS FOR attempts;
    p_succeeded ALIAS FOR succeeded; p_responses ALIAS FOR responses;
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
END $$;
