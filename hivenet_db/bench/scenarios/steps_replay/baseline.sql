-- A retry of a step that succeeded: read its row by primary key (namespace, key), from a
-- table like hivenet.request_attempt holding the same rows.
-- Among the 100,000 steps of the setup (1000 when it prefilled little: bench_small).
\set n random(1, 100000 - 99000 * :bench_small)
SELECT attempt, state, response FROM bench_done_step
WHERE namespace = 'hivenet.steps'
  AND key = ('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0');
