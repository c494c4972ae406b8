-- hivenet.begin_request + hivenet.finish_request of a new key in one transaction, as SQL
-- callers call them (namespace and key checked, request fingerprinted). The Python layer
-- starts a new key through view _request_start instead (scenario requests_begin_finish).
SELECT nextval('bench_request_n') AS n \gset
BEGIN;
SELECT attempt FROM hivenet.begin_request('orders', 'order-' || :n, '{"item": "P0001", "quantity": 2}') \gset
SELECT hivenet.finish_request('orders', 'order-' || :n, :attempt, true, '{"order": 1}');
END;
