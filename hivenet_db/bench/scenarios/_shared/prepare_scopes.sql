-- Shared by the scope scenarios' setups: prepares the unified scopes of systems S0000 ..
-- S<bench.systems - 1> x instances 01..10, 50 systems (500 scopes) a transaction.
DO $$
DECLARE
    v_systems integer := current_setting('bench.systems')::integer;
BEGIN
    FOR s IN 0 .. v_systems - 1 BY 50 LOOP
        PERFORM hivenet.prepare_scope('unified', (
            SELECT jsonb_agg(jsonb_build_object('system', 'S' || lpad(k::text, 4, '0'),
                                                'module', 'A01',
                                                'instance', lpad(i::text, 2, '0')))
            FROM generate_series(s, least(s + 49, v_systems - 1)) AS k,
                 generate_series(1, 10) AS i));
        COMMIT;
    END LOOP;
END $$;
VACUUM ANALYZE pg_class;
CHECKPOINT;
