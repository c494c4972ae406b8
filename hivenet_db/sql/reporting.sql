-- Reporting: every view a reporting tool (or `hivenet-db report`) reads with plain SELECT,
-- and call_chain(); docs/guides/reporting.md lists them all. Granted to hivenet_reporting and
-- hivenet_admin (privileges.sql), with what they call as their reader.

-- Interface calls (dedup.sql).

-- hivenet.interface_calls: every recorded call with the fields of its interface serial.
--   serial_time is the time printed in the serial (business-local, as issued).
CREATE VIEW hivenet.interface_calls AS
SELECT c.interface_serial,
       c.unified_serial,
       c.system_serial,
       -- Read by the layout of format 'interface' (compile.sql: generated functions).
       hivenet._serial_field('interface', c.interface_serial, 'system') AS source_system,
       hivenet._serial_field('interface', c.interface_serial, 'module') AS source_module,
       hivenet._serial_field('interface', c.interface_serial, 'instance') AS source_instance,
       hivenet._serial_field('interface', c.interface_serial, 'target') AS target_system,
       c.serial_day,
       -- make_timestamp: no session time zone involved (to_timestamp would shift a local time
       -- that the session's zone skips at a DST change).
       hivenet._serial_time('interface', c.interface_serial) AS serial_time,
       c.recorded_at,
       c.call_order
FROM hivenet.interface_call c;
COMMENT ON VIEW hivenet.interface_calls IS
    'recorded interface calls with the source and target of each serial (reporting)';

-- hivenet.interface_calls_per_day: calls per serial day, source and target system.
CREATE VIEW hivenet.interface_calls_per_day AS
SELECT serial_day AS day, source_system, target_system, count(*) AS calls
FROM hivenet.interface_calls
GROUP BY serial_day, source_system, target_system;
COMMENT ON VIEW hivenet.interface_calls_per_day IS
    'recorded interface calls per serial day, source system and target system (reporting)';

-- hivenet.call_chain(unified_serial) → table: every recorded call of that business
--   transaction, exactly in the order recorded (call_order). Empty when none is recorded or the
--   days are past retention. No HN error; reads only, never blocks.
CREATE FUNCTION hivenet.call_chain(unified_serial text)
RETURNS TABLE (interface_serial text, system_serial text, source_system text,
               source_module text, source_instance text, target_system text,
               serial_time timestamp, recorded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.interface_serial, c.system_serial, c.source_system, c.source_module,
           c.source_instance, c.target_system, c.serial_time, c.recorded_at
    FROM hivenet.interface_calls c
    WHERE c.unified_serial = call_chain.unified_serial
    ORDER BY c.call_order
$$;

-- Steps (steps.sql).

-- hivenet.stuck_steps: steps still `processing` after their lease ran out, oldest first. Their
-- outcome is unknown (the remote call may or may not have happened): find it out, then
-- hivenet.resolve_step(system_serial, attempt, succeeded, note).
-- A scan of the steps' attempts (an index on state would make every finish a non-HOT update).
CREATE VIEW hivenet.stuck_steps AS
SELECT a.key AS system_serial, a.attempt, a.unified_serial, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_steps IS
    'processing steps past their lease (unknown outcome): resolve with hivenet.resolve_step';

-- hivenet.step_states: how many steps (system serials) are in each state, every state listed.
CREATE VIEW hivenet.step_states AS
SELECT s.state::text AS state, count(l.key) AS steps
FROM unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.key) a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace = 'hivenet.steps'
           ORDER BY a.key, a.attempt DESC) AS l
       ON l.state = s.state
GROUP BY s.state
ORDER BY s.state;
COMMENT ON VIEW hivenet.step_states IS
    'number of steps per state (the state of their latest attempt)';

-- Counter scopes (counters.sql).


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
--   its own, and one per format for its shared fallback counter (scope '(unprepared scopes)',
--   fields {}, shared true), from which the scopes not prepared draw when the format opts in
--   to it (setting shared_fallback, fallback.sql): when it runs out, every unprepared scope of
--   the format is refused for the period.
--   format, scope, fields (jsonb: the counter-key fields given to next_serial), reset,
--   period_start (business-local start of the scope's current period: the clock's period, or
--   a later one when the clock went back or the format borrowed the next period),
--   issued (serials issued in that period; gaps of rolled-back transactions count as issued),
--   capacity (serials per period), remaining (capacity - issued), used_percent,
--   last_period_start (business-local start of the period of the last serial issued, NULL
--   when none), shared (true for a fallback counter). Reads the clock once (hivenet.now());
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

-- hivenet.business_time_zone: one row: the business time zone (setting time_zone) that every
--   date and time of a serial is printed in, and that messages show times in (with their
--   offset: _shown_time); its offset from UTC and the business-local time now (hivenet.now()).
--   The times of the other views are instants (timestamptz, shown in the reader's TimeZone),
--   but scope_usage's periods and a serial's printed time, which are business-local:
--   `hivenet-db report` shows every time in this zone (its transaction's TimeZone).
CREATE VIEW hivenet.business_time_zone AS
SELECT s.value AS time_zone,
       ((c.now AT TIME ZONE s.value) - (c.now AT TIME ZONE 'UTC')) AS utc_offset,
       (c.now AT TIME ZONE s.value)::timestamp(0) AS local_time
FROM hivenet.setting s CROSS JOIN (SELECT hivenet.now() AS now) AS c
WHERE s.name = 'time_zone';
COMMENT ON VIEW hivenet.business_time_zone IS
    'the business time zone of serials and messages, its offset from UTC, the local time now';

-- hivenet.clock_lead: one row per format that prints a date or a time: its clock policy
--   (on_clock_behind, max_wait: set_clock_policy, clock_policy.sql), latest_issued (the
--   business-local start of the latest instant it has issued in any scope, as the counters
--   keep it: their clocks, else their periods; NULL before its first serial) and lead (how
--   far that instant is ahead of the database clock, 0 when it is not): how long a clock
--   that stepped back still has to catch up, during which the format issues at that instant
--   ('continue'), waits or refuses (HN011). Metric hivenet_clock_lead_seconds. Reads the
--   clock once; never blocks; one sequence read per scope.
CREATE VIEW hivenet.clock_lead AS
WITH clock AS (
    SELECT hivenet._reporting_local_now() AS local_now
), latest AS (
    SELECT f.name AS format, max(CASE WHEN f.clock_unit IS NOT NULL
        THEN hivenet._period_start(nullif(hivenet._scope_counter_value(
                 hivenet._clock_sequence_name(c.live_name)), 0), f.clock_unit)
        ELSE hivenet._period_start(nullif(hivenet._scope_counter_value(c.sequence_name)
                                          / f.stride, 0), f.reset) END) AS latest_issued
    FROM hivenet.format f
    -- Each scope's counter (parked or not) with its clock, which keeps the live name; and
    -- the format's shared fallback counter and its clock (fallback.sql).
    JOIN (SELECT s.format, s.sequence_name,
                 hivenet._scope_sequence_name(s.format, s.scope) AS live_name
          FROM hivenet.scope s
          UNION ALL
          SELECT n.name, 'cold_' || n.name AS sequence_name, 'cold_' || n.name AS live_name
          FROM hivenet.format n
         ) AS c ON c.format = f.name
    GROUP BY f.name
)
SELECT f.name AS format, coalesce(p.on_clock_behind, 'continue') AS on_clock_behind,
       p.max_wait, l.latest_issued,
       coalesce(greatest(l.latest_issued - c.local_now, interval '0'), interval '0') AS lead
FROM hivenet.format f
JOIN latest l ON l.format = f.name
CROSS JOIN clock c
LEFT JOIN hivenet.clock_policy p ON p.format = f.name
WHERE jsonb_path_exists(f.segments, '$[*].time')
ORDER BY f.name;
COMMENT ON VIEW hivenet.clock_lead IS
    'per format printing a time: its clock policy, the latest instant it issued and how far '
    'that is ahead of the clock';

-- Keyed requests (requests.sql).

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

-- hivenet.request_attempts: one row per attempt of every key, keyed requests and steps
-- (namespace 'hivenet.steps', key the system serial), for audit: its state, when it began and
-- ended, who began it (called_by: the role; the client's application_name and address,
-- requests.sql) and who resolved it with what note. No payload: no request fingerprint,
-- response or error. A scan of the attempts: filter by namespace and key.
CREATE VIEW hivenet.request_attempts AS
SELECT a.namespace, a.key, a.attempt, a.state::text AS state, a.started_at, a.finished_at,
       a.called_by, a.application_name, a.client_addr, a.resolved_by, a.note
FROM hivenet.request_attempt a;
COMMENT ON VIEW hivenet.request_attempts IS
    'every attempt of keyed requests and steps with who began it (role, application, client '
    'address), without payloads (audit)';

-- hivenet.raw_requests: the exact bytes clients sent, one row per attempt that kept them (in
-- a namespace with keep_raw_request: begin_request's raw_request), beside who began it and
-- the fingerprint the key matches on. A payload: administrators only (privileges.sql), not
-- hivenet_reporting. A scan of the attempts: filter by namespace and key.
CREATE VIEW hivenet.raw_requests AS
SELECT a.namespace, a.key, a.attempt, a.started_at, a.called_by, a.client_addr,
       a.fingerprint, a.raw_request
FROM hivenet.request_attempt a
WHERE a.raw_request IS NOT NULL;
COMMENT ON VIEW hivenet.raw_requests IS
    'the exact bytes clients sent, per attempt, where the namespace keeps them '
    '(keep_raw_request; administrators only)';

-- hivenet.request_decisions: per namespace (steps: 'hivenet.steps'; decisions no namespace
-- could count: 'hivenet.other') and decision, how many begins decided so since install,
-- committed or not (decisions.sql says what each decision is and what a rollback does): what
-- metric hivenet_request_decisions_total exports. Every decision of a namespace is listed
-- once it has counters (its first started key), 0 until it happens.
CREATE VIEW hivenet.request_decisions AS
SELECT d.namespace, d.decision,
       sum(coalesce(hivenet._scope_counter_value(s.relname), 0))::bigint AS decisions
FROM hivenet.decision_counter d
JOIN pg_catalog.pg_class s ON s.oid = d.counter
GROUP BY d.namespace, d.decision
ORDER BY d.namespace, d.decision;
COMMENT ON VIEW hivenet.request_decisions IS
    'number of begins per namespace and decision (started, replayed, in_progress, mismatch, '
    'rejected, expired), committed or not';
