-- Revision 0005, frozen: the SQL this revision applied when it was written
-- (hivenet_db/sql/{privileges}.sql as of 2026-11-21). Never edit it: later
-- changes go into new revisions.

-- hivenet_db/sql/privileges.sql
-- Least privilege. A role granted USAGE on schema hivenet may call the application API below
-- and nothing else: the public functions are SECURITY DEFINER, so it needs no right on any
-- table or sequence, and the private helpers (above all the loopback connection, which runs
-- SQL as the schema owner) stay the owner's. Administrative functions (define_format,
-- register_system, register_module, resolve_step, set_claim_expiry, maintain) are granted
-- by name to an operator role; the reporting grants are in docs/reporting.md.
-- Applied last: a revision that adds functions applies this file again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's (dblink keeps its own privileges).
CREATE OR REPLACE FUNCTION hivenet._set_public_execute(p_grant boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
    LOOP
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
    hivenet.next_unified_serial(text, text, text),
    hivenet.next_system_serial(text, text, text),
    hivenet.next_interface_serial(text, text, text, text),
    hivenet.next_serial(text, jsonb),
    hivenet.next_serials(text, jsonb, integer),
    hivenet.next_serial_durable(text, jsonb),
    hivenet.parse_serial(text, text),
    hivenet.claim_interface_serial(text, text, text, boolean),
    hivenet.call_chain(text),
    hivenet.claim(text, text, boolean),
    hivenet.begin_step(text, jsonb, text, text, interval, boolean),
    hivenet.finish_step(text, integer, boolean, jsonb),
    hivenet._step_lease(interval),       -- in view stuck_steps, evaluated as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now()
TO PUBLIC;
