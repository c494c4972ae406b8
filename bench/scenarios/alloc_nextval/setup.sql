-- The raw-PostgreSQL baseline: a bare sequence.
CREATE SEQUENCE IF NOT EXISTS public.bench_seq;
-- Create the scope's counter before the runs, so they measure the steady state only.
SELECT hivenet.next_unified_serial('C0001', 'A01', '01');
