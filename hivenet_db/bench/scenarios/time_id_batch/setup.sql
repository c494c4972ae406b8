-- The format measured and the baseline's sequence.
\ir ../_shared/bench_time_id.sql
