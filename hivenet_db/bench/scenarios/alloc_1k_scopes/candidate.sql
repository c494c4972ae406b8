-- The same allocation in any of the 1,000 prepared scopes (each backend meets most of their
-- sequences for the first time and loads them into its relation cache).
\set s random(0, 99)
\set i random(1, 10)
SELECT hivenet.next_unified_serial('S' || lpad(:s::text, 4, '0'), 'A01', lpad(:i::text, 2, '0'));
