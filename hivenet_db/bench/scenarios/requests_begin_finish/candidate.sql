-- A new key begun and finished in one transaction: hivenet.begin_request +
-- hivenet.finish_request, as the Python layer (RequestRepository) and SQL callers send them.
-- Namespace and key checked, request fingerprinted.
SELECT nextval('bench_request_n') AS n \gset
BEGIN;
SELECT attempt FROM hivenet.begin_request('orders', 'order-' || :n, '{"item": "P0001", "quantity": 2}') \gset
SELECT hivenet.finish_request('orders', 'order-' || :n, :attempt, true, '{"order": 1}');
END;
