-- Release 0.2.1 from 0.2.0: tables, types and sequences, written by hand (the code around them
-- is written from the schema files: hivenet_db/tools/revision.py).

-- The instant of the last failover fence and the sum of every fence's gap (failover.sql,
-- _fence_floor), from the fences recorded so far: a fence whose transaction rolled back left
-- no row, and counts from the next one on.
CREATE SEQUENCE hivenet.fenced_at AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE hivenet.fenced_gaps AS bigint MINVALUE 0 START 0;
SELECT setval('hivenet.fenced_at', (extract(epoch FROM max(fenced_at)) * 1000000)::bigint),
       setval('hivenet.fenced_gaps', sum(gap)::bigint)
FROM hivenet.failover_fence WHERE gap IS NOT NULL HAVING sum(gap) > 0;
