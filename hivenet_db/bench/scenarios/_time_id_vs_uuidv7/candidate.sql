SELECT hivenet.next_time_id('bench_time_id');
