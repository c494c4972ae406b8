-- 100 000 steps that succeeded, in hivenet and in a bare baseline table (1000 under --check
-- and --quick: bench_small on).
SELECT set_config('bench.steps', CASE WHEN :'bench_small' = 'on' THEN '1000' ELSE '100000' END,
                  false);
CREATE TABLE IF NOT EXISTS bench_done_step (
    system_serial text PRIMARY KEY,
    attempt       integer NOT NULL,
    state         text NOT NULL,
    response      jsonb
);
INSERT INTO bench_done_step
SELECT ('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(n::text, 12, '0'), 1, 'success', '{"ok": true}'
FROM generate_series(1, current_setting('bench.steps')::integer) AS n
ON CONFLICT DO NOTHING;
DO $$
BEGIN
    IF EXISTS (SELECT FROM hivenet.step_attempt
               WHERE system_serial = 'C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '000000000001') THEN
        RETURN;  -- set up by an earlier run on this database
    END IF;
    FOR n IN 1..current_setting('bench.steps')::integer LOOP
        PERFORM hivenet.begin_step(('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(n::text, 12, '0'),
                                   '{"amount": 100, "account": "6222020000000001"}');
        PERFORM hivenet.finish_step(('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(n::text, 12, '0'), 1, true,
                                    '{"ok": true}');
    END LOOP;
END $$;
VACUUM ANALYZE bench_done_step;
VACUUM ANALYZE hivenet.request_attempt;  -- the steps live there (namespace hivenet.steps)
