-- Revision 0008, frozen: hivenet.maintain() records when it last finished, in the one-row
-- table hivenet.maintain_run (metric hivenet_maintain_last_run_timestamp_seconds); readable
-- by hivenet_admin. A database upgraded to here has no row until its next maintain().
-- Never edit this file: later changes go into new revisions.

-- When maintain() last finished (wall clock, clock_timestamp(): never the fake clock), for
-- the metric hivenet_maintain_last_run_timestamp_seconds (docs/operations.md). One row at
-- most, none before the first run; written by maintain() only, never on a hot path.
CREATE TABLE hivenet.maintain_run (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    ran_at   timestamptz NOT NULL
);
COMMENT ON TABLE hivenet.maintain_run IS
    'when hivenet.maintain() last finished (one row; none before its first run)';

-- hivenet.maintain() → void
--   Housekeeping, to run every few minutes (cron, pg_cron, or `hivenet-db maintain`): runs
--   every hivenet._maintain_<concern>() function in name order, each creating upcoming
--   partitions, dropping expired ones or purging rows per retention. Each concern adds its
--   own function, so this file never changes when one is added. Runs in the caller's
--   transaction; takes a transaction-level advisory lock so two runs never overlap. Records
--   when it finished in hivenet.maintain_run (visible when the caller commits).
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
    INSERT INTO hivenet.maintain_run (ran_at) VALUES (clock_timestamp())
    ON CONFLICT (only_row) DO UPDATE SET ran_at = EXCLUDED.ran_at;
END $$;

SELECT hivenet._grant_roles();
