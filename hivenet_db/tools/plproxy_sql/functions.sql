-- The application API of the shards (SPEC §8), same names and signatures, in schema hivenet
-- of the proxy database: each call runs on one shard, chosen by routing.sql, so a caller
-- changes only its database URL. An HN error of the shard reaches the caller with its
-- SQLSTATE (PL/Proxy re-raises the remote error), so the same Python exception.
--
-- Each call commits on its own on the shard, whatever the caller's transaction does next: a
-- claim or begin_step made here survives the caller's rollback. For callers without a
-- transaction of their own only (docs/guides/plproxy.md). Administrative functions (maintain,
-- define_format, own_instances, settings) are run on each shard, not through the proxy.

-- A proxy installed by an earlier version (parameters named p_..., a begin without wait):
-- CREATE OR REPLACE can neither rename a parameter nor add one, so every function of schema
-- hivenet is dropped and made again below, granted as a new install.
DO $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN SELECT p.oid FROM pg_proc p
                      WHERE p.pronamespace = 'hivenet'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION %s', v_function);
    END LOOP;
END $$;

-- Allocation: by the scope's node field (instance; shard for id_service).
-- next_unified_serial and next_system_serial run the shard's next_serial, which they fall
-- back to on any unusual case anyway (allocate.sql): same serials, same errors. PL/Proxy sends
-- every call as a new unprepared statement, and planning the inlined fast path of the two
-- costs the shard ~10x the call itself (docs/guides/plproxy.md, "Figures").
-- Each runs the shard's flush_at_commit() first (allocate.sql): the shard's commit then waits
-- until the serial is on disk, as the caller, told it is committed, expects. Without it,
-- PostgreSQL does not flush a commit that only drew serials, and a crash can issue them again.
CREATE OR REPLACE FUNCTION hivenet.next_unified_serial(system text, module text,
    instance text) RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of(instance);
    SELECT hivenet.next_serial('unified', jsonb_build_object('system', system,
        'module', module, 'instance', instance)) AS next_unified_serial
    FROM hivenet.flush_at_commit();
$$;

CREATE OR REPLACE FUNCTION hivenet.next_system_serial(system text, module text,
    instance text) RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of(instance);
    SELECT hivenet.next_serial('system', jsonb_build_object('system', system,
        'module', module, 'instance', instance)) AS next_system_serial
    FROM hivenet.flush_at_commit();
$$;

CREATE OR REPLACE FUNCTION hivenet.next_interface_serial(system text, module text,
    instance text, target text) RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of(instance);
    SELECT hivenet.next_interface_serial(system, module, instance, target)
    FROM hivenet.flush_at_commit();
$$;

CREATE OR REPLACE FUNCTION hivenet.next_serial(format text, fields jsonb) RETURNS text
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_fields(format, fields);
    SELECT hivenet.next_serial(format, fields)
    FROM hivenet.flush_at_commit();
$$;

CREATE OR REPLACE FUNCTION hivenet.next_serials(format text, fields jsonb, n integer)
RETURNS SETOF text
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_fields(format, fields);
    SELECT s AS next_serials
    FROM hivenet.flush_at_commit(),
         hivenet.next_serials(format, fields, n) WITH ORDINALITY AS t(s, i)
    ORDER BY i;
$$;

-- Parsing reads only the format definitions, the same on every shard.
CREATE OR REPLACE FUNCTION hivenet.parse_serial(serial text, format text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON ANY;
$$;

-- The interface-serial check: by the instance printed in the serial.
CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(serial text,
    unified_serial text DEFAULT NULL, system_serial text DEFAULT NULL,
    nowait boolean DEFAULT false) RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_serial(serial);
$$;

-- A transaction's calls may have been recorded on several shards: every shard answers, each
-- in its recording order (sort on recorded_at for one order).
CREATE OR REPLACE FUNCTION hivenet.call_chain(unified_serial text)
RETURNS TABLE (interface_serial text, system_serial text, source_system text,
               source_module text, source_instance text, target_system text,
               serial_time timestamp without time zone, recorded_at timestamp with time zone)
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.every_shard();
$$;

-- Generic claims: by the key's hash.
CREATE OR REPLACE FUNCTION hivenet.claim(namespace text, key text,
    nowait boolean DEFAULT false) RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_key(key);
$$;

-- Steps: by the instance printed in the system serial.
CREATE OR REPLACE FUNCTION hivenet.begin_step(system_serial text, request jsonb DEFAULT NULL,
    on_success text DEFAULT 'replay', unified_serial text DEFAULT NULL,
    lease interval DEFAULT NULL, nowait boolean DEFAULT false, wait interval DEFAULT NULL)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_serial(system_serial);
$$;

CREATE OR REPLACE FUNCTION hivenet.finish_step(system_serial text, attempt integer,
    succeeded boolean, response jsonb DEFAULT NULL) RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_serial(system_serial);
$$;

CREATE OR REPLACE FUNCTION hivenet.resolve_step(system_serial text, attempt integer,
    succeeded boolean, note text, response jsonb DEFAULT NULL) RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_serial(system_serial);
$$;

-- Keyed requests: by the key's hash (steps' namespace: as begin_step).
CREATE OR REPLACE FUNCTION hivenet.begin_request(namespace text, key text,
    request jsonb DEFAULT NULL, on_success text DEFAULT 'replay',
    lease interval DEFAULT NULL, nowait boolean DEFAULT false, wait interval DEFAULT NULL)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_request(namespace, key);
$$;

CREATE OR REPLACE FUNCTION hivenet.finish_request(namespace text, key text,
    attempt integer, succeeded boolean, response jsonb DEFAULT NULL) RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_request(namespace, key);
$$;

CREATE OR REPLACE FUNCTION hivenet.resolve_request(namespace text, key text,
    attempt integer, succeeded boolean, note text, response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON hivenet_proxy.partition_of_request(namespace, key);
$$;

-- The install's check that every shard answers through the cluster as the right database:
-- its name, port and owned instances (NULL before ownership exists on it).
CREATE OR REPLACE FUNCTION hivenet_proxy.reach(p_shard integer)
RETURNS TABLE (shard integer, database text, port integer, owned text)
LANGUAGE plproxy AS $$
    CLUSTER 'hivenet_shards';
    RUN ON p_shard;
    SELECT p_shard AS shard, current_database()::text AS database,
           inet_server_port() AS port,
           (SELECT s.value FROM hivenet.setting s WHERE s.name = 'owned_instances') AS owned;
$$;

-- Like the shards: resolving is for administrators; the rest for any role with USAGE on
-- the schema (the shard checks the role's rights again).
REVOKE EXECUTE ON FUNCTION
    hivenet.resolve_step(text, integer, boolean, text, jsonb),
    hivenet.resolve_request(text, text, integer, boolean, text, jsonb)
FROM PUBLIC;
DO $$
BEGIN
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT EXECUTE ON FUNCTION
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb)
        TO hivenet_admin;
    END IF;
END $$;
