-- A raw INSERT ... ON CONFLICT DO NOTHING plus UPDATE of the step's row (the row begin_step and
-- finish_step write, its fingerprint a literal) in one transaction. The serials come as
-- parameters, as the Python layer sends them.
SELECT 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || lpad(nextval('bench_step_n')::text, 12, '0') AS serial,
       'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001' AS unified \gset
BEGIN;
INSERT INTO bench_step (namespace, key, attempt, state, fingerprint, unified_serial, started_at)
VALUES ('hivenet.steps', :serial, 1, 'processing', '\x5b4f2a3c9e1d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a', :unified, now())
ON CONFLICT DO NOTHING;
UPDATE bench_step SET state = 'success', finished_at = now(), response = '{"ok": true}'
WHERE namespace = 'hivenet.steps' AND key = :serial AND attempt = 1 AND state = 'processing';
END;
