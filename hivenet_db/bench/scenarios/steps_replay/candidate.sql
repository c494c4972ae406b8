-- A retry of a step that succeeded: begin_step replays the stored response.
\set n random(1, 100000)
SELECT * FROM hivenet.begin_step(('C0001R0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')) || lpad(:n::text, 12, '0'), '{"amount": 100, "account": "6222020000000001"}', 'replay', 'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || '0000000001');
