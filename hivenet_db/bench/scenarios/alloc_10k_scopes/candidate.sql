-- The same allocation in any of the 10,000 prepared scopes (each backend meets most of their
-- sequences for the first time and loads them into its relation cache); among the 1,000
-- prepared when the setup prepared 100 systems only (bench_small).
\set s random(0, 999 - 900 * :bench_small)
\set i random(1, 10)
SELECT hivenet.next_unified_serial('S' || lpad(:s::text, 4, '0'), 'A01', lpad(:i::text, 2, '0'));
