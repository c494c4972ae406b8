-- A retry of a step that succeeded: begin_step replays the stored response.
-- Among the 100,000 steps of the setup (1000 when it prefilled little: bench_small).
\set n random(1, 100000 - 99000 * :bench_small)
SELECT * FROM hivenet.begin_step(('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0'), '{"amount": 100, "account": "6222020000000001"}', 'replay', 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001');
