-- Reporting: views a reporting tool (or `hivenet-db report`) reads with plain SELECT.
-- The views of other concerns live with them (dedup.sql: interface_calls_per_day,
-- call_chain(); steps.sql: step_states, stuck_steps); docs/reporting.md lists them all.

-- Raw value of a counter scope's sequence (period * stride + seq), NULL before its first use
-- and for any name that is no sequence of schema hivenet (executable by every role: a table's
-- name must not raise 42809).
-- SECURITY DEFINER: a reporting role reads the view without any right on the sequences.
CREATE FUNCTION hivenet._scope_counter_value(p_sequence_name text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_sequence_last_value(c.oid) FROM pg_class c
    WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relname = p_sequence_name
      AND c.relkind = 'S'
$$;

-- Business-local now for the views: SECURITY DEFINER because the clock and the time zone
-- read hivenet.setting, which a reporting role cannot.
CREATE FUNCTION hivenet._reporting_local_now() RETURNS timestamp
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone')
$$;

-- hivenet.scope_usage: one row per counter scope (format + field values) with a sequence of
--   its own, and one per format for its cold counter (scope '(unprepared scopes)', fields {},
--   shared true), which the scopes not prepared before their first use share until maintain()
--   gives each its own: when it runs out, every unprepared scope of the format is refused for
--   the period, and a scope prepared then starts exhausted (allocate.sql).
--   format, scope, fields (jsonb: the counter-key fields given to next_serial), reset,
--   period_start (business-local start of the scope's current period: the clock's period, or
--   a later one when the clock went back or the format borrowed the next period),
--   issued (serials issued in that period; gaps of rolled-back transactions count as issued),
--   capacity (serials per period), remaining (capacity - issued), used_percent,
--   last_period_start (business-local start of the period of the last serial issued, NULL
--   when none), shared (true for a cold counter). Reads the clock once (hivenet.now());
--   never blocks; one sequence read per scope.
CREATE VIEW hivenet.scope_usage AS
WITH clock AS (
    SELECT hivenet._reporting_local_now() AS local_now
), counter AS (
    SELECT s.format, s.scope, s.fields, s.shared, f.reset, f.capacity,
           v.value / f.stride AS value_period,
           v.value % f.stride AS value_seq,
           greatest(hivenet._period_index(c.local_now, f.reset), v.value / f.stride) AS period
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name, false AS shared
          FROM hivenet.scope c
          UNION ALL
          SELECT n.name, '(unprepared scopes)', '{}'::jsonb, 'cold_' || n.name, true
          FROM hivenet.format n
         ) AS s
    JOIN hivenet.format f ON f.name = s.format
    CROSS JOIN clock c
    CROSS JOIN LATERAL (SELECT hivenet._scope_counter_value(s.sequence_name) AS value) v
), usage AS (
    SELECT c.*,
           CASE WHEN c.value_period = c.period THEN least(c.value_seq, c.capacity) ELSE 0 END
               AS issued
    FROM counter c
)
SELECT u.format, u.scope, u.fields, u.reset,
       hivenet._period_start(u.period, u.reset) AS period_start,
       u.issued, u.capacity, u.capacity - u.issued AS remaining,
       round(100.0 * u.issued / u.capacity, 2) AS used_percent,
       hivenet._period_start(u.value_period, u.reset) AS last_period_start,
       u.shared
FROM usage u;
COMMENT ON VIEW hivenet.scope_usage IS
    'per counter scope: current period, serials issued in it, capacity and remaining headroom';

-- hivenet.stuck_requests: keyed requests (requests.sql; not steps: hivenet.stuck_steps) still
-- `processing` after their lease ran out, oldest first. Their outcome is unknown: find it out,
-- then hivenet.resolve_request(namespace, key, attempt, succeeded, note).
CREATE VIEW hivenet.stuck_requests AS
SELECT a.namespace, a.key, a.attempt, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace <> 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_requests IS
    'processing requests past their lease (unknown outcome): resolve with hivenet.resolve_request';

-- hivenet.request_states: per namespace of keyed requests (not steps: hivenet.step_states),
-- how many keys are in each state (the state of their latest attempt), every state listed.
CREATE VIEW hivenet.request_states AS
SELECT n.namespace, s.state::text AS state, count(l.key) AS requests
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps') AS n
CROSS JOIN unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.namespace, a.key) a.namespace, a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace <> 'hivenet.steps'
           ORDER BY a.namespace, a.key, a.attempt DESC) AS l
       ON l.namespace = n.namespace AND l.state = s.state
GROUP BY n.namespace, s.state
ORDER BY n.namespace, s.state;
COMMENT ON VIEW hivenet.request_states IS
    'number of keyed requests per namespace and state (the state of their latest attempt)';
