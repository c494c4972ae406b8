-- The format measured (the case time_id_vs_uuidv7, hivenet_db/bench/cases.py).
\ir ../_shared/bench_time_id.sql
