-- The table and sequence of steps_begin_finish: the same baseline, the functions instead.
\ir ../steps_begin_finish/setup.sql
