-- A new key begun and finished in one transaction as the Python layer (RequestRepository)
-- sends it: one INSERT into view hivenet._request_start, whose rule checks namespace and key
-- and writes attempt 1 (begin_request only when it writes nothing: \gset fails the
-- transaction then), and finish_request. Request fingerprinted.
SELECT nextval('bench_request_n') AS n \gset
BEGIN;
INSERT INTO hivenet._request_start VALUES ('orders', 'order-' || :n, '{"item": "P0001", "quantity": 2}', NULL) RETURNING 1 AS attempt \gset
SELECT hivenet.finish_request('orders', 'order-' || :n, :attempt, true, '{"order": 1}');
END;
