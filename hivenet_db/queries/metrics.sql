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

-- name: clock_lead
-- Per format printing a date or time: how far the latest instant it issued is ahead of the
-- database clock (0 when it is not; a clock that stepped back shows here until it catches up).
SELECT format, extract(epoch FROM lead)::float8 AS lead_seconds
FROM hivenet.clock_lead
ORDER BY format;

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
-- Per namespace whose decisions are counted apart (decisions.sql: the declared ones and the
-- first max_counted_namespaces), the others summed under 'hivenet.other', as their decisions.
SELECT CASE WHEN s.namespace IN (SELECT d.namespace FROM hivenet.request_decisions d)
            THEN s.namespace ELSE 'hivenet.other' END AS namespace,
       s.state, sum(s.requests)::bigint AS requests
FROM hivenet.request_states s
GROUP BY 1, 2
ORDER BY 1, 2;

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

-- name: failover
-- The fence's gap and the stretch of commits a failover may lose, as the settings declare
-- them (failover.sql).
SELECT (SELECT s.value::bigint FROM hivenet.setting s WHERE s.name = 'failover_gap') AS gap,
       (SELECT extract(epoch FROM s.value::interval) FROM hivenet.setting s
        WHERE s.name = 'failover_loss_window') AS loss_window_seconds;

-- name: allocation_rate
-- Each format's highest rate between two runs of maintain(), today or yesterday.
SELECT format, greatest(peak, previous_peak) AS peak_per_second
FROM hivenet.allocation_rate
ORDER BY format;
