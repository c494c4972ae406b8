-- 100,000 counter scopes of the unified format: systems S0000..S9999 x instances 01..10.
-- unified has hash lanes (allocate.sql, revision 0017): its scopes share 64 lane sequences and
-- have none of their own, so prepare_scope only checks the fields (and ownership) and creates
-- nothing; the loop is kept so that the scenario measures the same scopes on a format without
-- lanes (where it gives each scope its own sequence, as maintain() does for every scope used:
-- minutes, every sequence being a relation, a file and catalog rows; in transactions of 1000,
-- since one transaction would exceed the lock table). Skipped when already there (hivenet.scope
-- rows: never for a laned format, whose loop is seconds). Under --check and --quick
-- (bench_small on) 100 systems only.
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
