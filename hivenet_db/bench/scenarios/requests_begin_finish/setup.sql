-- The baseline ("begin_request + finish_request vs raw insert + update"): the same row
-- written by hand into a table like the one the requests live in, hivenet.request_attempt:
-- its columns and types, primary key (namespace, key, attempt), retention index and storage
-- parameters (fillfactor 80: the finishing UPDATE is a HOT update in both). Until 0018 it was
-- a lighter table (key (namespace, key), no retention index, seven columns), which made the
-- library's own index maintenance count against it.
DROP TABLE IF EXISTS bench_request;  -- an older run's lighter table
CREATE TABLE bench_request (LIKE hivenet.request_attempt INCLUDING ALL)
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
-- A fresh key per transaction in both scripts.
CREATE SEQUENCE IF NOT EXISTS bench_request_n;
