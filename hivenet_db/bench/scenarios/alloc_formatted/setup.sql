-- The raw-PostgreSQL baseline: the serial a user would write by hand.
CREATE SEQUENCE IF NOT EXISTS public.bench_formatted_seq;
-- Create the scope's counter before the runs, so they measure the steady state only.
SELECT hivenet.prepare_scope('unified', '{"system": "C0001", "module": "A01", "instance": "01"}');
