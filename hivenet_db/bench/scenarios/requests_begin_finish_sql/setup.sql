-- The table and sequence of requests_begin_finish: the same baseline, the functions instead.
\ir ../requests_begin_finish/setup.sql
