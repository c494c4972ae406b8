SELECT 'C0001A0101' || to_char(now(), 'YYYYMMDD') || lpad(nextval('bench_formatted_seq')::text, 10, '0');
