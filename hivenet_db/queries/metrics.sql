-- Read-only queries behind hivenet_db.metrics (`hivenet-db metrics` and the prometheus_client
-- collector). Each query follows a `-- name: NAME` line; hivenet_db.metrics.METRICS says which
-- column of which query is which metric and which columns are its labels. Read only.

-- name: scope_usage
-- The scopes that issued in the current period (not the idle ones: a bank has thousands of
-- prepared scopes), and each format's shared fallback counter, scope '(unprepared scopes)',
-- always: its headroom is what the alert on unprepared scopes reads.
SELECT format, scope, issued, capacity, remaining,
       remaining::float8 / capacity AS headroom
FROM hivenet.scope_usage
WHERE issued > 0 OR shared
ORDER BY format, scope;

-- name: stuck_steps
-- Processing steps past their lease, and how long past it the oldest one is.
SELECT count(*) AS steps,
       coalesce(extract(epoch FROM max(hivenet.now() - lease_expired_at)), 0) AS overdue_seconds
FROM hivenet.stuck_steps;

-- name: step_states
SELECT state, steps FROM hivenet.step_states ORDER BY state;

-- name: stuck_requests
-- Processing keyed requests (every namespace but the steps') past their lease, and how long
-- past it the oldest one is.
SELECT count(*) AS requests,
       coalesce(extract(epoch FROM max(hivenet.now() - lease_expired_at)), 0) AS overdue_seconds
FROM hivenet.stuck_requests;

-- name: request_states
SELECT namespace, state, requests FROM hivenet.request_states ORDER BY namespace, state;

-- name: claims
SELECT count(*) AS claims FROM hivenet.claim_record;

-- name: interface_calls_per_day
SELECT day::text AS day, source_system, target_system, calls
FROM hivenet.interface_calls_per_day
ORDER BY day, source_system, target_system;

-- name: interface_partitions
-- The daily partitions of hivenet.interface_call (named interface_call_YYYYMMDD; the default
-- partition is not a day), and the rows that landed in the default partition. maintain()
-- creates partitions two days ahead: days_ahead under 1 means it has not run for a day.
SELECT extract(epoch FROM min(p.day)::timestamp) AS oldest_day_seconds,
       extract(epoch FROM max(p.day)::timestamp) AS newest_day_seconds,
       max(p.day) - hivenet._reporting_local_now()::date AS days_ahead,
       (SELECT count(*) FROM hivenet.interface_call_default) AS default_rows
FROM (SELECT to_date(right(c.relname, 8), 'YYYYMMDD') AS day
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'hivenet.interface_call'::regclass
        AND c.relname ~ '^interface_call_[0-9]{8}$') AS p;  -- not interface_call_default

-- name: maintain_run
-- When hivenet.maintain() last finished (unix time, wall clock); 0 before its first run, so
-- "not run for a day" fires then too.
SELECT coalesce((SELECT extract(epoch FROM ran_at) FROM hivenet.maintain_run), 0)
       AS last_run_seconds;

-- name: request_decisions
-- Begins per namespace and decision since install, committed or not (decisions.sql).
SELECT namespace, decision, decisions FROM hivenet.request_decisions
ORDER BY namespace, decision;
