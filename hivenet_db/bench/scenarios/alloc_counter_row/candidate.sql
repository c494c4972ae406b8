-- The same 5 ms transaction numbered by a counter row: the row lock taken by the upsert is
-- held until COMMIT, so concurrent callers of the scope queue behind each other.
BEGIN;
WITH n AS (INSERT INTO bench_counter AS c (scope, v) VALUES ('C0001A0101', 1)
           ON CONFLICT (scope) DO UPDATE SET v = c.v + 1 RETURNING c.v)
INSERT INTO bench_order (serial)
SELECT 'C0001A0101' || to_char(now(), 'YYYYMMDD') || lpad(n.v::text, 10, '0') FROM n;
SELECT pg_sleep(0.005);
COMMIT;
