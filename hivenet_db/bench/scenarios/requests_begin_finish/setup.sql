-- Baseline of issue 12: a bare keyed row (namespace, key), inserted (ON CONFLICT DO NOTHING)
-- then updated, with the columns a replay needs.
CREATE TABLE IF NOT EXISTS bench_request (
    namespace   text NOT NULL,
    key         text NOT NULL,
    state       text NOT NULL,
    fingerprint bytea,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    response    jsonb,
    PRIMARY KEY (namespace, key)
);
-- A fresh key per transaction in both scripts.
CREATE SEQUENCE IF NOT EXISTS bench_request_n;
