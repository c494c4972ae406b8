-- The baseline ("begin_step + finish_step vs raw insert + update"): the same row
-- written by hand into a table like the one the steps live in, hivenet.request_attempt: its
-- columns and types, primary key (namespace, key, attempt), retention index and storage
-- parameters (fillfactor 80: the finishing UPDATE is a HOT update in both). Until 0018 it was
-- a lighter table (one text key, no retention index, seven columns), which made the
-- library's own index maintenance count against it: the ratio understated what the functions
-- cost beyond the write they do (measured the same run: docs/benchmarks.md).
CREATE TABLE IF NOT EXISTS bench_step (LIKE hivenet.request_attempt INCLUDING ALL)
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
-- A fresh system serial per transaction in both scripts (random ones would collide).
CREATE SEQUENCE IF NOT EXISTS bench_step_n;
