-- Downgrade of revision 0008, frozen: maintain() as revision 0007 left it, without a record.

CREATE OR REPLACE FUNCTION hivenet.maintain() RETURNS void
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

DROP TABLE hivenet.maintain_run;
