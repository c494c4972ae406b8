-- hivenet.maintain() → void
--   Housekeeping, to run every few minutes (cron, pg_cron, or `hivenet-db maintain`): runs
--   every hivenet._maintain_<concern>() function in name order, each creating upcoming
--   partitions, dropping expired ones or purging rows per retention. Each concern adds its
--   own function, so this file never changes when one is added. Runs in the caller's
--   transaction; takes a transaction-level advisory lock so two runs never overlap.
CREATE FUNCTION hivenet.maintain() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_function regprocedure;
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), 0);
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname LIKE '\_maintain\_%'
          AND p.pronargs = 0
        ORDER BY p.proname
    LOOP
        EXECUTE format('SELECT %s', v_function);
    END LOOP;
END $$;
