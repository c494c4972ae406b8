-- A retry of a step that succeeded: read its row by primary key.
\set n random(1, 100000)
SELECT state, response FROM bench_done_step
WHERE system_serial = ('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0');
