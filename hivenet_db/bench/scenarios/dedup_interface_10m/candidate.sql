-- An incoming call as a provider records it: interface serial plus the unified serial it
-- carries (the call chain), one transaction each.
\set seq random(1, 9999999999)
SELECT hivenet.claim_interface_serial(
    'C0001A01' || lpad((:client_id % 99 + 1)::text, 2, '0') || 'T0001'
        || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') || lpad(:seq::text, 10, '0'),
    'C0001A0101' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD') || lpad(:seq::text, 10, '0'));
