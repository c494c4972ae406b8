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

-- Whether p_value is a valid namespace or key: 1 to 255 characters, none of them a control
-- or an invisible character (_unseen_characters, settings.sql). The one rule for the names
-- and keys of claims and keyed requests (requests.sql). Inlined into the fast paths (claim,
-- _request_start_valid): no function runs.
CREATE FUNCTION hivenet._name_valid(p_value text) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    -- No BETWEEN: it parses into a nested AND, which the revision's copy would not be.
    SELECT length(p_value) >= 1 AND length(p_value) <= 255
       AND p_value !~ hivenet._unseen_characters();
END;

-- HN001 unless p_value is a valid namespace or key (p_what names which: 'namespace', 'key',
-- 'claim namespace', 'claim key'): _name_valid, each failure named. Namespaces starting
-- 'hivenet.' are the library's own.
CREATE FUNCTION hivenet._check_name(p_what text, p_value text) RETURNS void
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
    ELSIF p_value ~ hivenet._unseen_characters() THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s contains an invisible character (a Unicode format or '
                             'separator character, shown as its code)', p_what,
                             hivenet._shown(p_value));
    ELSIF p_what LIKE '%namespace' AND left(p_value, 8) = 'hivenet.' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s is reserved (namespaces starting with ''hivenet.'' '
                             'are the library''s own)', hivenet._shown(p_value));
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
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_name('claim key', p_key);
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
        -- Until when the claim that holds the key is taken (not this one's expiry).
        SELECT r.expires_at INTO v_expires
        FROM hivenet.claim_record r WHERE r.namespace = p_namespace AND r.key = p_key;
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken%s',
                             hivenet._shown(p_namespace), hivenet._shown(p_key),
                             CASE WHEN NOT FOUND THEN ''
                                  WHEN v_expires IS NULL THEN ' (for good: its namespace has '
                                                              'no expiry)'
                                  ELSE format(' (until %s)', hivenet._shown_time(v_expires))
                             END);
    END IF;
END $$;

-- The full path under the shortest lock_timeout: where it would wait for another transaction
-- taking the same claim, it raises HN040 at once. Its own function (SET clause) so the
-- caller's lock_timeout is untouched, and the subtransaction of the EXCEPTION block stays off
-- the default path (as _begin_attempt_within, requests.sql).
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
--   Raises HN001 when namespace or key is NULL, empty, longer than 255 characters or holds a
--   control character, or the namespace starts 'hivenet.' (the library's own): the rule of
--   keyed requests (_check_name); HN040 when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also when it would wait over a millisecond for another lock, rarely:
--   the table's growth under heavy load; a lock on the whole table is waited for first).
--   Under REPEATABLE READ a claim committed after the transaction's snapshot raises 40001
--   (retry) instead.
--   The wait is the primary key's own (the insert waits for the transaction holding the same
--   key): claims of distinct keys never wait on each other.
CREATE FUNCTION hivenet.claim(namespace text, key text, nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_key ALIAS FOR key; p_nowait ALIAS FOR nowait;
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
    WHERE hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key)
      AND left(p_namespace, 8) <> 'hivenet.'
    ON CONFLICT (namespace, key) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_checked(p_namespace, p_key);
    END IF;
END $$;

-- hivenet.set_claim_expiry(namespace, expiry) → void: claims of namespace taken from now on
--   expire after expiry (NULL: never). Raises HN001 when namespace is not valid (as claim()
--   takes it), or expiry is not positive or longer than 10 years. Runs in the caller's
--   transaction; blocks only a concurrent change of the same namespace.
CREATE FUNCTION hivenet.set_claim_expiry(namespace text, expiry interval) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_expiry ALIAS FOR expiry;
BEGIN
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_interval(format('claim expiry of namespace %s',
                                           hivenet._shown(p_namespace)), p_expiry);
    INSERT INTO hivenet.claim_namespace (namespace, expiry) VALUES (p_namespace, p_expiry)
    ON CONFLICT (namespace) DO UPDATE SET expiry = excluded.expiry;
END $$;

-- Part of maintain(): deletes expired claims (claim() already treats them as free).
CREATE FUNCTION hivenet._maintain_claims() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM hivenet.claim_record WHERE expires_at <= hivenet.now()
$$;
