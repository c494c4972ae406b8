-- Generic idempotency claims (SPEC §5; seed 002's unique_record, seed 003's consumer dedup):
-- one row per (namespace, key) that must be executed once, inserted in the caller's
-- transaction so the claim and the effect it guards commit or vanish together.

CREATE TABLE hivenet.claim_namespace (
    namespace   text PRIMARY KEY,
    expiry      interval CHECK (expiry > interval '0'),  -- NULL: claims never expire
    description text
);
COMMENT ON TABLE hivenet.claim_namespace IS
    'optional settings per claim namespace (expiry); namespaces need no row to be used';

CREATE TABLE hivenet.claim_record (
    namespace  text NOT NULL,
    key        text NOT NULL,
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (namespace, key)
)
-- Rolled-back claims and expired ones leave dead rows: autovacuum after 2,000 of them, not
-- after 20 % of a table that only grows (as step_attempt, steps.sql).
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.claim_record IS 'one row per taken claim (hivenet.claim)';
CREATE INDEX claim_record_expiry ON hivenet.claim_record (expires_at)
    WHERE expires_at IS NOT NULL;

-- HN001 unless p_namespace is 1 to 200 bytes: what claim() and set_claim_expiry() take (a
-- longer one would not fit the primary key's index row, 54000).
CREATE FUNCTION hivenet._check_claim_namespace(p_namespace text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_namespace IS NULL OR p_namespace = '' OR octet_length(p_namespace) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim namespace %s must be 1 to 200 bytes',
                             hivenet._shown(p_namespace));
    END IF;
END $$;

-- The full path of claim (its contract below): each check with its exact error, the insert,
-- and the retaking of an expired claim. The fast path hands it every claim it did not take.
-- Runs as its caller, the SECURITY DEFINER claim (the table's owner).
CREATE FUNCTION hivenet._claim_checked(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_expires timestamptz;
BEGIN
    PERFORM hivenet._check_claim_namespace(p_namespace);
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim key %s of namespace %s must be 1 to 1000 bytes',
                             hivenet._shown(p_key), hivenet._shown(p_namespace));
    END IF;
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
END $$;

-- The full path under the shortest lock_timeout: where it would wait for another transaction
-- taking the same claim, it raises HN040 at once. Its own function (SET clause) so the
-- caller's lock_timeout is untouched, and the subtransaction of the EXCEPTION block stays off
-- the default path (as _begin_attempt_nowait, requests.sql).
CREATE FUNCTION hivenet._claim_nowait(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    PERFORM hivenet._claim_checked(p_namespace, p_key);
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN040',
        MESSAGE = format('claim %s / %s is being taken by another transaction in progress '
                         '(nowait)', hivenet._shown(p_namespace), hivenet._shown(p_key));
END $$;

-- hivenet.claim(namespace, key, nowait default false) → void
--   Takes the claim (namespace, key) in the caller's transaction: it commits or vanishes with
--   that transaction. A claim whose namespace expiry has passed counts as free (maintain()
--   deletes such rows later; until then they still block nobody).
--   Raises HN001 when namespace or key is NULL, empty, or longer than 200 / 1000 bytes; HN040
--   when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also when it would wait over a millisecond for another lock, rarely:
--   the table's growth under heavy load; a lock on the whole table is waited for first).
--   Under REPEATABLE READ a claim committed after the transaction's snapshot raises 40001
--   (retry) instead.
--   The wait is the primary key's own (the insert waits for the transaction holding the same
--   key): claims of distinct keys never wait on each other.
CREATE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
    WHERE octet_length(p_namespace) BETWEEN 1 AND 200
      AND octet_length(p_key) BETWEEN 1 AND 1000
    ON CONFLICT (namespace, key) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_checked(p_namespace, p_key);
    END IF;
END $$;

-- hivenet.set_claim_expiry(namespace, expiry) → void: claims of namespace taken from now on
--   expire after expiry (NULL: never). Raises HN001 when namespace is NULL, empty or longer
--   than 200 bytes (as claim() takes it), or expiry is not positive. Runs in the caller's
--   transaction; blocks only a concurrent change of the same namespace.
CREATE FUNCTION hivenet.set_claim_expiry(p_namespace text, p_expiry interval) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._check_claim_namespace(p_namespace);
    IF p_expiry <= interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim expiry %s of namespace %s must be positive', p_expiry,
                             hivenet._shown(p_namespace));
    END IF;
    INSERT INTO hivenet.claim_namespace (namespace, expiry) VALUES (p_namespace, p_expiry)
    ON CONFLICT (namespace) DO UPDATE SET expiry = excluded.expiry;
END $$;

-- Part of maintain(): deletes expired claims (claim() already treats them as free).
CREATE FUNCTION hivenet._maintain_claims() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM hivenet.claim_record WHERE expires_at <= hivenet.now()
$$;
