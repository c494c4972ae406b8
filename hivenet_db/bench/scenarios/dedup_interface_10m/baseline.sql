-- A bare INSERT ... ON CONFLICT DO NOTHING of a 39-character key (built like the candidate's).
\set seq random(1, 9999999999)
INSERT INTO public.bench_raw_key (k)
VALUES ('C0001A01' || lpad((:client_id % 99 + 1)::text, 2, '0') || 'T0001'
        || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') || lpad(:seq::text, 10, '0'))
ON CONFLICT DO NOTHING;
