-- 100,000 counter scopes of the unified format, each with its own sequence (as maintain()
-- leaves every scope that has been used): systems S0000..S9999 x instances 01..10. Prepared
-- in transactions of 1000 (one transaction would exceed the lock table: each new sequence is
-- a relation). Skipped when already there (setups may run again on the same database).
-- Minutes: every sequence is a relation, a file and catalog rows. Under --check and --quick
-- (bench_small on) 100 systems only: the scripts then touch scopes that have no sequence yet,
-- which is still a valid allocation.
SELECT set_config('bench.systems', CASE WHEN :'bench_small' = 'on' THEN '100' ELSE '10000' END,
                  false);
DO $$
DECLARE
    v_systems integer := current_setting('bench.systems')::integer;
    v_done integer := (SELECT count(*) FROM hivenet.scope
                       WHERE format = 'unified' AND scope LIKE 'S____A01__');
BEGIN
    IF v_done >= v_systems * 10 THEN
        RETURN;
    END IF;
    FOR s IN 0 .. v_systems - 1 LOOP
        FOR i IN 1 .. 10 LOOP
            PERFORM hivenet.prepare_scope('unified', jsonb_build_object(
                'system', 'S' || lpad(s::text, 4, '0'), 'module', 'A01',
                'instance', lpad(i::text, 2, '0')));
        END LOOP;
        IF s % 100 = 99 THEN
            COMMIT;
        END IF;
    END LOOP;
END $$;
VACUUM ANALYZE pg_class;
CHECKPOINT;
