SELECT (to_char(now(), 'YYMMDDHH24MISS')::bigint << 23) | (nextval('bench_time_id_seq') % 8388608);
