-- 100 000 steps that succeeded, in hivenet and in a bare baseline table.
CREATE TABLE bench_step (
    system_serial text PRIMARY KEY,
    attempt       integer NOT NULL,
    state         text NOT NULL,
    response      jsonb
);
INSERT INTO bench_step
SELECT 'C0001A010120261121' || lpad(n::text, 12, '0'), 1, 'success', '{"ok": true}'
FROM generate_series(1, 100000) AS n;
DO $$
BEGIN
    FOR n IN 1..100000 LOOP
        PERFORM hivenet.begin_step('C0001A010120261121' || lpad(n::text, 12, '0'),
                                   '{"amount": 100, "account": "6222020000000001"}');
        PERFORM hivenet.finish_step('C0001A010120261121' || lpad(n::text, 12, '0'), 1, true,
                                    '{"ok": true}');
    END LOOP;
END $$;
VACUUM ANALYZE bench_step;
VACUUM ANALYZE hivenet.step_attempt;
