-- hivenet.begin_step + hivenet.finish_step of a new step in one transaction, as the Python
-- layer calls it (request fingerprinted, unified serial recorded and validated).
SELECT nextval('bench_step_n') AS n \gset
BEGIN;
SELECT attempt FROM hivenet.begin_step(('C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0'), '{"amount": 100, "account": "6222020000000001"}', 'replay', 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001') \gset
SELECT hivenet.finish_step(('C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0'), :attempt, true, '{"ok": true}');
END;
