-- The proxy database's own schema (hivenet_proxy): which shard owns which instance, and the
-- routing functions the PL/Proxy functions of schema hivenet (functions.sql) run on. Installed
-- by `hivenet-db proxy install` (hivenet_db/tools/plproxy.py), never by the shard migrations; every
-- statement here may run again (the install is idempotent). docs/guides/plproxy.md.
--
-- Routing always yields a shard number 0..n-1, never a hash: PL/Proxy maps a value v to
-- partition v & (partitions - 1), and the cluster has the next power of two of partitions
-- (partition p is shard p mod n), so v = shard number lands on that shard whatever n is.

CREATE SCHEMA IF NOT EXISTS hivenet_proxy;
CREATE SCHEMA IF NOT EXISTS hivenet;

-- One row per shard, in the order of --shards. connstr: libpq key=value without user nor
-- password (PL/Proxy connects as the calling role; passwords come from the proxy server's
-- .pgpass or trust, never from this database). owned: what the shard owns ('01-09,12').
CREATE TABLE IF NOT EXISTS hivenet_proxy.shard (
    shard          integer PRIMARY KEY CHECK (shard BETWEEN 0 AND 99),
    connstr        text NOT NULL CHECK (connstr !~* '(^|\s)(password|user)\s*='),
    label          text NOT NULL,
    owned          text NOT NULL,
    single_primary boolean NOT NULL DEFAULT false
);

-- Instance (the instance field; the shard field of id_service) → the shard that owns it.
CREATE TABLE IF NOT EXISTS hivenet_proxy.owner (
    instance text PRIMARY KEY CHECK (instance ~ '^[0-9]{2}$'),
    shard    integer NOT NULL REFERENCES hivenet_proxy.shard ON DELETE CASCADE
);

-- How messages echo a value: the same rule as hivenet._shown (settings.sql) of the shards,
-- which this database does not have.
CREATE OR REPLACE FUNCTION hivenet_proxy._shown(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_value IS NULL THEN 'NULL'
                WHEN length(p_value) <= 40 THEN quote_literal(p_value)
                ELSE quote_literal(left(p_value, 32))
                     || format('... (%s characters)', length(p_value)) END
$$;

-- Where an instance no shard owns goes. A well-formed instance (00 to 99) that no shard owns:
-- HN002 naming it and what each shard owns. Anything else (NULL, 'ab', a serial too short to
-- hold an instance): shard 0, whose own checks reject it with their own code (HN001, ...),
-- so the caller sees the same error as on one primary.
CREATE OR REPLACE FUNCTION hivenet_proxy._unowned(p_instance text) RETURNS integer
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_instance ~ '^[0-9]{2}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('instance %s is owned by no shard of this proxy (%s): declare it '
                             'on a shard (hivenet-db migrate --owns-instances) and run '
                             'hivenet-db proxy install again', hivenet_proxy._shown(p_instance),
                             (SELECT string_agg(format('shard %s %s owns %s', shard, label,
                                                       owned), '; ' ORDER BY shard)
                              FROM hivenet_proxy.shard));
    END IF;
    RETURN 0;
END $$;

-- Rewrites the SQL/MED cluster hivenet_shards and the generated routing functions from the
-- tables above (in the caller's transaction: a failed install changes nothing). The routing
-- functions carry the tables' content as constants, like the shards' generated constants
-- (settings.sql): routing a call reads no table.
--   partition_of(instance) → the owning shard (else _unowned)
--   shard_count(), single_primary() → n, the shard issuing formats without a node field
CREATE OR REPLACE FUNCTION hivenet_proxy.configure() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_n integer := (SELECT count(*) FROM hivenet_proxy.shard);
    v_partitions integer := 1;
    v_options text;
    v_cases text;
    v_single integer;
BEGIN
    IF v_n = 0 OR v_n <> (SELECT max(shard) + 1 FROM hivenet_proxy.shard) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet_proxy.shard must hold shards 0 to n-1 (it holds %s)',
                             (SELECT coalesce(string_agg(shard::text, ',' ORDER BY shard),
                                              'none') FROM hivenet_proxy.shard));
    END IF;
    WHILE v_partitions < v_n LOOP
        v_partitions := v_partitions * 2;
    END LOOP;
    SELECT string_agg(format('p%s %L', p, s.connstr), ', ' ORDER BY p) INTO v_options
    FROM generate_series(0, v_partitions - 1) AS p
    JOIN hivenet_proxy.shard s ON s.shard = p % v_n;
    DROP SERVER IF EXISTS hivenet_shards CASCADE;
    EXECUTE format('CREATE SERVER hivenet_shards FOREIGN DATA WRAPPER plproxy OPTIONS (%s)',
                   v_options);
    -- No options: PL/Proxy connects as the calling role, without a stored password.
    CREATE USER MAPPING FOR PUBLIC SERVER hivenet_shards;

    SELECT string_agg(format('WHEN %L THEN %s', instance, shard), ' ' ORDER BY instance)
    INTO v_cases FROM hivenet_proxy.owner;
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION hivenet_proxy.partition_of(p_instance text) RETURNS integer
        LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $b$
            SELECT CASE p_instance %s ELSE hivenet_proxy._unowned(p_instance) END
        $b$ $f$, coalesce(v_cases, ''));

    v_single := coalesce((SELECT min(shard) FROM hivenet_proxy.shard WHERE single_primary), 0);
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION hivenet_proxy.shard_count() RETURNS integer
        LANGUAGE sql IMMUTABLE AS 'SELECT %s' $f$, v_n);
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION hivenet_proxy.single_primary() RETURNS integer
        LANGUAGE sql IMMUTABLE AS 'SELECT %s' $f$, v_single);
    PERFORM hivenet_proxy._grant_roles();
END $$;

-- Placeholders until the first configure() (the functions below refer to them).
DO $$
BEGIN
    IF to_regprocedure('hivenet_proxy.partition_of(text)') IS NULL THEN
        CREATE FUNCTION hivenet_proxy.partition_of(p_instance text) RETURNS integer
        LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
        AS 'SELECT hivenet_proxy._unowned(p_instance)';
    END IF;
    IF to_regprocedure('hivenet_proxy.shard_count()') IS NULL THEN
        CREATE FUNCTION hivenet_proxy.shard_count() RETURNS integer
        LANGUAGE sql IMMUTABLE AS 'SELECT 1';
    END IF;
    IF to_regprocedure('hivenet_proxy.single_primary()') IS NULL THEN
        CREATE FUNCTION hivenet_proxy.single_primary() RETURNS integer
        LANGUAGE sql IMMUTABLE AS 'SELECT 0';
    END IF;
END $$;

-- The shard of a serial of the standard (unified, system, interface: the instance is
-- printed at 9-10): the owner of its instance.
CREATE OR REPLACE FUNCTION hivenet_proxy.partition_of_serial(p_serial text) RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet_proxy.partition_of(substr(p_serial, 9, 2))
$$;

-- The shard of an allocation by format and fields: its node field's owner (instance, else
-- shard for id_service), the single primary for formats without one (merchant_trade,
-- per_second, custom formats with neither field).
CREATE OR REPLACE FUNCTION hivenet_proxy.partition_of_fields(p_format text, p_fields jsonb)
RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_format IN ('merchant_trade', 'per_second')
                THEN hivenet_proxy.single_primary()
                WHEN p_fields ? 'instance' THEN hivenet_proxy.partition_of(p_fields ->> 'instance')
                WHEN p_fields ? 'shard' THEN hivenet_proxy.partition_of(p_fields ->> 'shard')
                ELSE hivenet_proxy.single_primary() END
$$;

-- The shard of a key with no instance in it (generic claims, keyed requests): a stable hash
-- (the first 28 bits of its md5) modulo the number of shards. Python:
-- int(hashlib.md5(key.encode()).hexdigest()[:7], 16) % n. Changes when n does (docs).
CREATE OR REPLACE FUNCTION hivenet_proxy.partition_of_key(p_key text) RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT (('x' || left(md5(coalesce(p_key, '')), 7))::bit(28)::integer)
           % hivenet_proxy.shard_count()
$$;

-- Keyed requests: steps (namespace hivenet.steps, steps.sql) go where begin_step sends them,
-- by the system serial's instance; any other namespace by the key's hash.
CREATE OR REPLACE FUNCTION hivenet_proxy.partition_of_request(p_namespace text, p_key text)
RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_namespace = 'hivenet.steps' THEN hivenet_proxy.partition_of_serial(p_key)
                ELSE hivenet_proxy.partition_of_key(p_key) END
$$;

-- Every shard once (call_chain, the reachability check): 0..n-1, never the filler partitions.
CREATE OR REPLACE FUNCTION hivenet_proxy.every_shard() RETURNS SETOF integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT generate_series(0, hivenet_proxy.shard_count() - 1)
$$;

-- Grants to hivenet_app and hivenet_admin, for those of them that exist on the proxy's
-- server: the schemas and the cluster. The shards check each call's rights again, since
-- PL/Proxy runs it there as the same role.
CREATE OR REPLACE FUNCTION hivenet_proxy._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['hivenet_app', 'hivenet_admin'] LOOP
        IF to_regrole(v_role) IS NOT NULL THEN
            EXECUTE format('GRANT USAGE ON SCHEMA hivenet, hivenet_proxy TO %I', v_role);
            IF EXISTS (SELECT FROM pg_foreign_server WHERE srvname = 'hivenet_shards') THEN
                EXECUTE format('GRANT USAGE ON FOREIGN SERVER hivenet_shards TO %I', v_role);
            END IF;
        END IF;
    END LOOP;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet_proxy.configure(), hivenet_proxy._grant_roles() FROM PUBLIC;
