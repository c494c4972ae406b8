-- A new step begun and finished in one transaction as the Python layer (StepRepository) sends
-- it: one INSERT into view hivenet._step_start, whose rule checks both serials and the window
-- and writes attempt 1 (begin_step only when it writes nothing: \gset fails the transaction
-- then), and finish_step. Serials as parameters; request fingerprinted, unified serial
-- recorded and validated.
SELECT 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || lpad(nextval('bench_step_n')::text, 12, '0') AS serial,
       'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001' AS unified \gset
BEGIN;
INSERT INTO hivenet._step_start VALUES (:serial, '{"amount": 100, "account": "6222020000000001"}', :unified, NULL) RETURNING 1 AS attempt \gset
SELECT hivenet.finish_step(:serial, :attempt, true, '{"ok": true}');
END;
