-- A bare INSERT ... ON CONFLICT DO NOTHING of what a claim records (the interface serial, its
-- day, the unified serial it carries, the time) into an unpartitioned table with the same
-- columns and indexes as hivenet.interface_call (setup.sql).
\set seq random(1, 9999999999)
INSERT INTO public.bench_interface_call
    (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
VALUES ('C0001A01' || lpad((:client_id % 99 + 1)::text, 2, '0') || 'T0001'
            || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') || lpad(:seq::text, 10, '0'),
        (now() AT TIME ZONE 'UTC')::date,
        'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || lpad(:seq::text, 10, '0'),
        NULL, now())
ON CONFLICT DO NOTHING;
