-- A business transaction lasting about 5 ms, without a serial.
BEGIN;
INSERT INTO bench_order (serial) VALUES (NULL);
SELECT pg_sleep(0.005);
COMMIT;
