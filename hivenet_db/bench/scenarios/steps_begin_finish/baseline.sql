-- A bare INSERT ... ON CONFLICT DO NOTHING plus UPDATE of a step row in one transaction.
SELECT nextval('bench_step_n') AS n \gset
BEGIN;
INSERT INTO bench_step (system_serial, attempt, state)
VALUES (('C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0'), 1, 'processing')
ON CONFLICT DO NOTHING;
UPDATE bench_step SET state = 'success', finished_at = now(), response = '{"ok": true}'
WHERE system_serial = ('C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0');
END;
