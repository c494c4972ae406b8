-- The same allocation in any of the 100,000 scopes (each backend meets most of them for the
-- first time: it loads the scope's sequence into its relation cache).
\set s random(0, 9999)
\set i random(1, 10)
SELECT hivenet.next_unified_serial('S' || lpad(:s::text, 4, '0'), 'A01', lpad(:i::text, 2, '0'));
