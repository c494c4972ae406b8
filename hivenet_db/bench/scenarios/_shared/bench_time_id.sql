-- Shared by the time id scenarios' setups: the numeric format they measure, and their
-- baselines' sequence. time_id itself issues at most 16,383 ids a second, fewer than 16
-- clients draw (HN010 then, and pgbench would stop those clients); bench_time_id is the same
-- layout and the same code path with 23 seq bits (8,388,607 a second), the widest
-- yyMMddHHmmss leaves in a bigint. Its one scope is prepared, as time_id's is at install.
CREATE SEQUENCE IF NOT EXISTS public.bench_time_id_seq;
SELECT hivenet.define_format('bench_time_id',
    '[{"time": "yyMMddHHmmss"}, {"seq_bits": 23, "reset": "second"}]');
SELECT hivenet.prepare_scope('bench_time_id', '{}');
