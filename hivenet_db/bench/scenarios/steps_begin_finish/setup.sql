-- Baseline of issue 4: a bare step row, inserted (ON CONFLICT DO NOTHING) then updated.
CREATE TABLE IF NOT EXISTS bench_step (
    system_serial text PRIMARY KEY,
    attempt       integer NOT NULL,
    state         text NOT NULL,
    fingerprint   bytea,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    response      jsonb
);
-- A fresh system serial per transaction in both scripts (random ones would collide).
CREATE SEQUENCE IF NOT EXISTS bench_step_n;
