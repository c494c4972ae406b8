SELECT * FROM hivenet.next_time_ids('bench_time_id', 10000);
