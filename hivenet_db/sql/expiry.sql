-- Expiry of keyed requests and steps left `processing` (set_namespace_policy's expire_after,
-- policies.sql).
--
-- An attempt of a namespace with an expire_after that is still `processing` longer than that
-- after it started becomes `expired`, a failure by policy, when a begin of its key
-- (_begin_attempt, requests.sql) or maintain() finds it; the namespace's on_failure then applies as
-- to any failure ('retry': the next begin starts a new attempt; 'final': it is replayed as a
-- failure, with response NULL). Expiring finishes the attempt as an operator's resolution does: its
-- finished_at, resolved_by 'hivenet.expire_after' and a note saying why, so its late
-- finish_request gets HN033 (fencing). A finish that comes before anyone found the attempt
-- expired is accepted: no caller was told otherwise yet. Steps expire by the policy of their
-- namespace, 'hivenet.steps', as requests by theirs.

-- How far maintain()'s expiry has come in each namespace with an expire_after: every attempt
-- started before expired_through was left processing by no earlier run (each run reads the
-- index from there on, never the namespace's older attempts again). Written by maintain()
-- only; a row of a namespace without an expire_after is stale and removed by the next run.
CREATE TABLE hivenet.request_expiry (
    namespace       text        PRIMARY KEY,
    expired_through timestamptz NOT NULL
);
COMMENT ON TABLE hivenet.request_expiry IS
    'how far maintain() has expired the processing attempts of each namespace with an '
    'expire_after (expiry.sql)';

-- Expire the attempts (p_keys[i], p_attempts[i]) of namespace p_namespace that are still
-- `processing` past its expire_after; returns how many it expired. Blocks while another
-- transaction finishes, resolves or expires one of them, then leaves it if that one did.
-- 'expired' is named in PL/pgSQL, read when it runs: revision 0002 adds the value in the
-- transaction that creates this function, where it could not be used yet.
CREATE FUNCTION hivenet._expire_attempts(p_namespace text, p_keys text[],
                                         p_attempts integer[]) RETURNS integer
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
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
END $$;

-- Expiry by maintain(), so that the views and metrics show attempts nobody begins again. In
-- each namespace with an expire_after, the attempts started since the last run's mark
-- (request_expiry) and before the namespace's cutoff, read from the index
-- (namespace || '', started_at) in started order: what became due since the last run, not
-- the namespace's retained history again. At most 1,000 processing ones are expired a run
-- (bounded work: the mark stops at the last, and the next run goes on). SKIP LOCKED leaves an
-- attempt a begin or a finish is changing right now to that one. The begin of a key is what
-- enforces expiry; this is housekeeping, so an attempt committed `processing` only after
-- the mark passed its start is left to its key's next begin.
CREATE FUNCTION hivenet._maintain_request_expiry() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
END $$;
