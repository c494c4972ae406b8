-- A bare INSERT ... ON CONFLICT DO NOTHING plus UPDATE of a keyed row in one transaction.
SELECT nextval('bench_request_n') AS n \gset
BEGIN;
INSERT INTO bench_request (namespace, key, state)
VALUES ('orders', 'order-' || :n, 'processing')
ON CONFLICT DO NOTHING;
UPDATE bench_request SET state = 'success', finished_at = now(), response = '{"order": 1}'
WHERE namespace = 'orders' AND key = 'order-' || :n;
END;
