-- A new step begun and finished in one transaction: hivenet.begin_step + hivenet.finish_step,
-- as the Python layer (StepRepository) and SQL callers send them. Serials as parameters;
-- request fingerprinted, unified serial recorded and validated.
SELECT 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || lpad(nextval('bench_step_n')::text, 12, '0') AS serial,
       'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001' AS unified \gset
BEGIN;
SELECT attempt FROM hivenet.begin_step(:serial, '{"amount": 100, "account": "6222020000000001"}', 'replay', :unified) \gset
SELECT hivenet.finish_step(:serial, :attempt, true, '{"ok": true}');
END;
