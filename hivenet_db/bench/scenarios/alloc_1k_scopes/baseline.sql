-- One allocation in one of 10 prepared scopes (system S0000, instances 01..10).
\set s 0
\set i random(1, 10)
SELECT hivenet.next_unified_serial('S' || lpad(:s::text, 4, '0'), 'A01', lpad(:i::text, 2, '0'));
