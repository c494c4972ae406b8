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

-- Advisory lock namespace of claims in progress: (this key, hash of namespace and key), held
-- by every claim until commit so that a nowait claim sees at once that one is in flight.
CREATE FUNCTION hivenet._claim_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210202 $$;

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

-- hivenet.claim(namespace, key, nowait default false) → void
--   Takes the claim (namespace, key) in the caller's transaction: it commits or vanishes with
--   that transaction. A claim whose namespace expiry has passed counts as free (maintain()
--   deletes such rows later; until then they still block nobody).
--   Raises HN001 when namespace or key is NULL, empty, or longer than 200 / 1000 bytes; HN040
--   when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also, once in about 4 billion, for another key claimed at that
--   moment whose 32-bit hash is the same). Under REPEATABLE READ a claim committed after the
--   transaction's snapshot raises 40001 (retry) instead.
CREATE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_lock integer;
    v_expires timestamptz;
BEGIN
    PERFORM hivenet._check_claim_namespace(p_namespace);
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim key %s of namespace %s must be 1 to 1000 bytes',
                             hivenet._shown(p_key), hivenet._shown(p_namespace));
    END IF;
    v_lock := hashtext(p_namespace || chr(31) || p_key);
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._claim_lock_space(), v_lock);
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._claim_lock_space(), v_lock) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is being taken by another transaction in progress '
                             '(nowait)', hivenet._shown(p_namespace), hivenet._shown(p_key));
    END IF;
    SELECT v_now + n.expiry INTO v_expires
    FROM hivenet.claim_namespace n WHERE n.namespace = p_namespace;
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    VALUES (p_namespace, p_key, v_now, v_expires)
    ON CONFLICT (namespace, key) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Rare path: taken before; free again if it expired.
    UPDATE hivenet.claim_record r SET claimed_at = v_now, expires_at = v_expires
    WHERE r.namespace = p_namespace AND r.key = p_key AND r.expires_at <= v_now;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken (until %s)',
                             hivenet._shown(p_namespace), hivenet._shown(p_key), v_expires);
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
