-- Raw baseline: a table with nothing but a unique 39-character key.
CREATE TABLE IF NOT EXISTS public.bench_raw_key (k text PRIMARY KEY);
