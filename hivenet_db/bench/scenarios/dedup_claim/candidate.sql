-- The same message id claimed with hivenet.claim.
\set r random(1, 9000000000000000)
SELECT hivenet.claim('queue.orders', 'msg-' || :client_id || '-' || :r);
