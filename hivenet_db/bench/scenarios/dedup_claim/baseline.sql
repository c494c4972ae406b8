-- A bare INSERT ... ON CONFLICT DO NOTHING of a message id.
\set r random(1, 9000000000000000)
INSERT INTO public.bench_unique_record (namespace, key)
VALUES ('queue.orders', 'msg-' || :client_id || '-' || :r)
ON CONFLICT DO NOTHING;
