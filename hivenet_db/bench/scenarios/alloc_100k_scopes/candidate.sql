-- The same allocation in any of the 100,000 scopes (with a sequence per scope, each backend
-- meets most of them for the first time and loads the scope's sequence into its relation
-- cache; with lanes, unified's, the 100,000 scopes share 64 lane sequences).
\set s random(0, 9999)
\set i random(1, 10)
SELECT hivenet.next_unified_serial('S' || lpad(:s::text, 4, '0'), 'A01', lpad(:i::text, 2, '0'));
