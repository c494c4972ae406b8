-- The same transaction, stamped with a unified serial allocated at its start.
BEGIN;
INSERT INTO bench_order (serial) VALUES (hivenet.next_unified_serial('C0001', 'A01', '01'));
SELECT pg_sleep(0.005);
COMMIT;
