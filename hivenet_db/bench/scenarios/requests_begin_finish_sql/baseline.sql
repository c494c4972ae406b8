-- A raw INSERT ... ON CONFLICT DO NOTHING plus UPDATE of the request's row (the row
-- begin_request and finish_request write, its fingerprint a literal) in one transaction.
SELECT nextval('bench_request_n') AS n \gset
BEGIN;
INSERT INTO bench_request (namespace, key, attempt, state, fingerprint, started_at)
VALUES ('orders', 'order-' || :n, 1, 'processing', '\x5b4f2a3c9e1d8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a', now())
ON CONFLICT DO NOTHING;
UPDATE bench_request SET state = 'success', finished_at = now(), response = '{"order": 1}'
WHERE namespace = 'orders' AND key = 'order-' || :n AND attempt = 1 AND state = 'processing';
END;
