-- 100 000 steps that succeeded (begun with the unified serial the candidate's retries carry),
-- in hivenet and, for the baseline, the same rows in a table
-- like hivenet.request_attempt (its columns, primary key, retention index and storage
-- parameters; until 0018 a narrower table of four columns keyed by the serial alone, whose
-- smaller rows and index flattered the baseline). 1000 steps under --check and --quick
-- (bench_small on).
SELECT set_config('bench.steps', CASE WHEN :'bench_small' = 'on' THEN '1000' ELSE '100000' END,
                  false);
DO $$
BEGIN
    IF EXISTS (SELECT FROM hivenet.step_attempt
               WHERE system_serial = 'C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '000000000001') THEN
        RETURN;  -- set up by an earlier run on this database
    END IF;
    FOR n IN 1..current_setting('bench.steps')::integer LOOP
        PERFORM FROM hivenet.begin_step(('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(n::text, 12, '0'),
                                   '{"amount": 100, "account": "6222020000000001"}', 'replay',
                                   'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001');
        PERFORM hivenet.finish_step(('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(n::text, 12, '0'), 1, true,
                                    '{"ok": true}');
    END LOOP;
END $$;
DROP TABLE IF EXISTS bench_done_step;  -- an older run's narrower table
CREATE TABLE bench_done_step (LIKE hivenet.request_attempt INCLUDING ALL)
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
INSERT INTO bench_done_step
SELECT * FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.key LIKE 'C0001R0101%';
VACUUM ANALYZE bench_done_step;
VACUUM ANALYZE hivenet.request_attempt;  -- the steps live there (namespace hivenet.steps)
