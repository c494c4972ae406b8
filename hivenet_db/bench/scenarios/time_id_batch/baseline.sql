SELECT nextval('bench_time_id_seq') FROM generate_series(1, 10000);
