-- System-serial step state machine (SPEC §4, seed 000 "业务层查重", seeds 002/003).
--
-- A step is the keyed request (requests.sql) of namespace 'hivenet.steps' whose key is its
-- 30-character system serial: the same table, the same state machine, the same errors. What
-- steps add: the serial is checked (HN001), must be dated inside the window whose records are
-- kept (HN021), and the business transaction's unified serial is recorded for audit.
--
-- The window and the purge are one rule (_step_days_from): a serial's date is read as its
-- caller's local date, in any zone from UTC-12 to UTC+14 (clock.sql, _caller_now), and
-- begin_step refuses a serial whose day starts before the earliest local time any caller
-- reads now minus step_retention. maintain() purges a step's record only once that refusal
-- covers its serial (and its last attempt ended step_retention ago): every purged step is
-- refused, so none can run again.

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('step_retention', '30 days', 'interval',
     'begin_step refuses system serials dated before now minus this in every caller''s zone '
     '(UTC-12 to UTC+14; HN021), and maintain() purges exactly the finished steps it refuses '
     'whose last attempt ended longer ago: keep it longer than any caller retries'),
    ('step_future_tolerance', '5 minutes', 'interval',
     'begin_step refuses system serials dated later than now plus this in every caller''s '
     'zone (HN021), but for those this database issued: clock skew between systems');

-- The steps as they were stored before requests.sql: one row per attempt of a system serial.
CREATE VIEW hivenet.step_attempt AS
SELECT a.key AS system_serial, a.attempt, a.state, a.fingerprint, a.unified_serial, a.lease,
       a.started_at, a.finished_at, a.response, a.error, a.resolved_by, a.note
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps';
COMMENT ON VIEW hivenet.step_attempt IS
    'every attempt of every processing step (system serial); the latest attempt is the step''s state';

-- The start of the earliest day a step's system serial may be dated at p_now: the earliest
-- local time a caller reads (UTC-12) minus step_retention. begin_step refuses a serial dated
-- before (HN021), and maintain() purges the records of such steps only (_maintain_steps):
-- the one measure of both, so a purged step is always refused.
CREATE FUNCTION hivenet._step_days_from(p_now timestamptz) RETURNS timestamp
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT hivenet._caller_now(p_now, 'earliest')
           - hivenet._setting_constant('step_retention')::interval;
END;

-- The latest start a step's system serial's day may have at p_now: the latest local time a
-- caller reads (UTC+14) plus step_future_tolerance. begin_step refuses a serial dated later
-- (HN021) unless this database issued it (_step_issued_here).
CREATE FUNCTION hivenet._step_days_to(p_now timestamptz) RETURNS timestamp
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT hivenet._caller_now(p_now, 'latest')
           + hivenet._setting_constant('step_future_tolerance')::interval;
END;

-- Whether this database has issued system serials of p_system_serial's scope dated p_day or
-- later: after its clock stepped back, its own fresh serials keep the latest day already
-- issued (periods.sql), maybe past _step_days_to, and begin_step accepts them (SPEC §2
-- guarantee 3: a serial a database issued is always accepted by its own checks).
CREATE FUNCTION hivenet._step_issued_here(p_system_serial text, p_day date) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce(p_day <= hivenet._latest_issued(
        'system', hivenet._serial_scope('system', p_system_serial)), false);
END $$;

-- HN021 naming the window: the system serial p_system_serial is dated p_day, outside it.
CREATE FUNCTION hivenet._raise_step_outside_window(p_system_serial text, p_day date)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_from timestamp := hivenet._step_days_from(hivenet.now());
BEGIN
    -- The first and last days whose start lies inside the window.
    RAISE EXCEPTION USING ERRCODE = 'HN021',
        MESSAGE = format('system serial %s is dated %s, outside the window of steps from %s to '
                         '%s (its caller''s local date, in any zone from UTC-12 to UTC+14): a '
                         'step dated earlier may already be purged (step_retention %s), one '
                         'dated later is beyond the clock tolerance (step_future_tolerance %s)',
                         p_system_serial, p_day,
                         v_from::date + CASE WHEN v_from = v_from::date THEN 0 ELSE 1 END,
                         hivenet._step_days_to(hivenet.now())::date,
                         hivenet._setting_constant('step_retention'),
                         hivenet._setting_constant('step_future_tolerance'));
END $$;

-- The succeeded steps, for begin_step's inlined replay, which runs with the caller's rights:
-- PUBLIC may read this view (privileges.sql), never hivenet.request_attempt. What it shows is
-- what begin_step replays to a caller who presents the same request, and what the replay
-- compares: of each succeeded step, its serial, attempt, the request's fingerprint, the
-- unified serial it was begun with and the stored response; no request, error, note, lease
-- or time, and nothing of other namespaces or states.
CREATE VIEW hivenet._step_replay AS
SELECT a.key AS system_serial, a.attempt, a.fingerprint, a.unified_serial, a.response
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'success';

-- What view _step_start vouches for (below), and _begin_step after the view wrote nothing: both
-- serials valid (the layouts generated from the formats, compile.sql), the system serial surely
-- inside the window (_step_in_window, compile.sql) and an allowed lease or none (clock.sql,
-- _interval_allowed). Inlined where it is called: no function runs. VOLATILE (hivenet.now()).
CREATE FUNCTION hivenet._step_start_valid(p_system_serial text, p_unified_serial text,
                                          p_lease interval) RETURNS boolean
LANGUAGE sql
BEGIN ATOMIC
    SELECT hivenet._serial_valid('system', p_system_serial)
       AND hivenet._step_in_window(p_system_serial)
       AND (p_unified_serial IS NULL OR hivenet._serial_valid('unified', p_unified_serial))
       AND (p_lease IS NULL OR hivenet._interval_allowed(p_lease));
END;

-- The first attempt of a new step, written by one INSERT into this view (its rule runs with the
-- owner's rights): begin_step's common case (_start_step, below). The rule checks what a new
-- step with plain options needs and inserts attempt 1; it writes nothing for a step that has
-- an attempt, or for input it does not vouch for, and then _begin_step decides and names the
-- problem. It records the caller as _begin_attempt does (requests.sql). No SECURITY DEFINER
-- call (docs/design/sql-internals.md).
-- Insert-only, for hivenet_app (privileges.sql): the row it writes is the one begin_step would
-- write, and reading the view shows nothing.
--   The checks (_step_start_valid, above) are generated from the definitions of formats
--   'system' and 'unified' and from the settings (compile.sql, _serial_valid; _step_in_window):
--   inlined, no query. A serial dated on the window's first two days or after today, or
--   instances to check, take the full path. Options are not columns: only plain options
--   (_plain_options, requests.sql) take this path, as they start a new step alike.
--   The VALUES list evaluates each inserted expression once. A rule puts the expression in
--   place of every NEW, so a volatile one (a fresh serial) would be checked as one value and
--   stored as another; for parameters and constants the planner folds the list away.
CREATE VIEW hivenet._step_start AS
SELECT NULL::text AS system_serial, NULL::jsonb AS request, NULL::text AS unified_serial,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at, called_by,
     application_name, client_addr)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now(), hivenet._called_by(),
       nullif(current_setting('application_name'), ''), inet_client_addr()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

-- Whether a new step with plain options was started: attempt 1 written through view
-- _step_start. begin_step's second branch, run as the caller: the view's rule writes with the
-- owner's rights and its checks are bound when it was created, so no SECURITY DEFINER and no
-- SET clause is needed, and none is paid (a SET costs a tenth of a begin; requests.sql).
-- PL/pgSQL, so its INSERT is planned once per session, not per call.
CREATE FUNCTION hivenet._start_step(p_system_serial text, p_request jsonb, p_on_success text,
    p_unified_serial text, p_lease interval, p_nowait boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT hivenet._plain_options(p_on_success, p_nowait) THEN
        RETURN false;
    END IF;
    INSERT INTO hivenet._step_start
    VALUES (p_system_serial, p_request, p_unified_serial, p_lease);
    IF FOUND THEN
        PERFORM hivenet._count_decision('hivenet.steps', 'started');
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- begin_step's full path, in the step owner's rights, after _start_step wrote nothing. A step
-- that has an attempt, its input vouched for by the view's test (_step_start_valid) with
-- plain options, goes to the state machine (requests.sql); everything else (bad input,
-- nowait, instances to check, a serial near the window's edges) gets every check with its
-- exact error first (parse_serial names the problem). Not set-returning (OUT parameters): no
-- tuplestore of its own.
CREATE FUNCTION hivenet._begin_step(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
BEGIN
    -- Without parse_serial (~200 µs a serial) when the view vouches for the input.
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._step_start_valid(p_system_serial, p_unified_serial, p_lease),
                         false)) THEN
        BEGIN
            PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
            PERFORM hivenet.parse_serial(p_system_serial, 'system');
            IF p_unified_serial IS NOT NULL THEN
                PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
            END IF;
            -- Several primaries: a serial of an instance another shard owns (ownership.sql).
            IF hivenet._setting_constant('owned_instances') <> 'all' THEN
                PERFORM hivenet._check_owned_serial('system', p_system_serial);
            END IF;
            -- Old serials are refused, not run again: their record may be purged (HN021).
            v_day := hivenet._serial_time('system', p_system_serial)::date;
            IF v_day < hivenet._step_days_from(hivenet.now())
               OR (v_day > hivenet._step_days_to(hivenet.now())
                   AND NOT hivenet._step_issued_here(p_system_serial, v_day)) THEN
                PERFORM hivenet._raise_step_outside_window(p_system_serial, v_day);
            END IF;
        EXCEPTION WHEN SQLSTATE 'HN001' OR SQLSTATE 'HN002' OR SQLSTATE 'HN021' THEN
            PERFORM hivenet._count_decision('hivenet.steps', 'rejected');
            RAISE;
        END;
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_within('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease, NULL) b;
        RETURN;
    END IF;
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                p_unified_serial, p_lease) b;
END $$;

-- hivenet.begin_step(system_serial, request default null, on_success default 'replay',
--                    unified_serial default null, lease default null, nowait default false)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one processing step, identified by its 30-character system serial, in the
--   caller's transaction (SPEC §4):
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the business effect, then call
--     finish_step with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck step with resolve_step; nothing takes it over silently).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: the business request; its fingerprint (sha256 of the jsonb text, which jsonb
--   normalises: key order and whitespace do not matter) is kept, and a different request
--   under the same serial raises HN032 RequestMismatch in every state. No request counts as
--   JSON null.
--   unified_serial: the business transaction's unified serial, kept for audit.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: system serial no valid system serial (as parse_serial(serial, 'system')), unified
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive or
--   longer than 10 years.
--   HN021 SerialOutsideWindow: the serial's date, read as its caller's local date in any zone
--   from UTC-12 to UTC+14, starts before now - step_retention in every such zone (the step's
--   record may already be purged: it must not run again), or after now +
--   step_future_tolerance in every such zone, unless this database issued serials of its
--   scope dated that day or later (its clock stepped back).
--   HN002 UnknownScope: a database that declared owned instances does not own the serial's
--   instance (a retry sent to the wrong shard; ownership.sql, check_received_instances).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
--   One statement, three branches: begin_step is a set-returning LANGUAGE sql function that
--   the planner inlines into the caller's statement (called in FROM), a UNION ALL under
--   LIMIT 1 whose branches run in order, each only when the ones before it returned nothing:
--   1. A replay of a step that succeeded with the same request, plain options, no unified
--      serial or the one it was begun with, and a serial in the window is one read of view
--      _step_replay by primary key, with no PL/pgSQL call: the stored serials were checked
--      when the step began (a format is never redefined), so no serial is parsed again.
--   2. A new step with plain options: _start_step, one INSERT into view _step_start.
--   3. Everything else (failed, processing, another request or unified serial, reject,
--      nowait, bad input, an instance other shards own) goes to _begin_step, which decides
--      and names the problem.
--   Why this shape: docs/design/sql-internals.md.
CREATE FUNCTION hivenet.begin_step(
    system_serial text, request jsonb DEFAULT NULL, on_success text DEFAULT 'replay',
    unified_serial text DEFAULT NULL, lease interval DEFAULT NULL, nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    -- 'replayed', counted (decisions.sql, as _count_decision) with no PL/pgSQL call: the
    -- select list runs only for the row replayed. The subquery names r so that it runs for
    -- every row replayed (uncorrelated, it would run once for a caller's whole statement).
    -- The parameters are qualified here: a column of r of the same name would win.
    (SELECT coalesce((SELECT 'replayed'::text FROM hivenet._decision_counters c
                      WHERE c.namespace = 'hivenet.steps' AND c.decision = 'replayed'
                        AND r.system_serial IS NOT NULL AND nextval(c.counter) > 0
                      LIMIT 1), 'replayed'),
            r.attempt, r.response
     FROM hivenet._step_replay r
     WHERE r.system_serial = begin_step.system_serial
       AND r.fingerprint = hivenet._fingerprint(begin_step.request)
       -- Options that replay (nowait or not: a replay never waits); the unified serial the
       -- step was begun with (so a valid one) or none.
       AND begin_step.on_success = 'replay' AND begin_step.nowait IS NOT NULL
       AND (begin_step.lease IS NULL OR begin_step.lease > interval '0')
       AND (begin_step.unified_serial IS NULL OR begin_step.unified_serial = r.unified_serial)
       AND hivenet._step_in_window(r.system_serial)
     UNION ALL
     SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_step(system_serial, request, on_success, unified_serial, lease, nowait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_step(system_serial, request, on_success, unified_serial, lease, nowait) b)
    LIMIT 1;
END;

-- hivenet.finish_step(system_serial, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_step returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_step proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the step's
--   current one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL. Blocks only while another transaction is finishing or
--   resolving the same attempt; then raises HN033 if that one committed.
CREATE FUNCTION hivenet.finish_step(
    system_serial text, attempt integer, succeeded boolean, response jsonb DEFAULT NULL)
RETURNS void
-- finish_request on the steps' namespace (the same UPDATE, the same errors), inlined into the
-- caller's statement: no PL/pgSQL layer of its own.
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT hivenet.finish_request('hivenet.steps', system_serial, attempt, succeeded, response);
END;

-- hivenet.resolve_step(system_serial, attempt, succeeded, note, response default null) → void
--   Operator action for a stuck step (hivenet.stuck_steps): once the real outcome of attempt
--   `attempt` is known (e.g. from the remote system's reconciliation), record it as
--   `success` (response replayed later) or `failed` (the next begin_step proceeds), with a
--   note and the operator's session user. The original attempt's late finish_step then gets
--   HN033. Works on any processing attempt, also before its lease ran out.
--   HN033 as finish_step; HN001 when note is empty or succeeded NULL. Blocks like finish_step.
CREATE FUNCTION hivenet.resolve_step(
    system_serial text, attempt integer, succeeded boolean, note text, response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_system_serial ALIAS FOR system_serial; p_attempt ALIAS FOR attempt;
    p_succeeded ALIAS FOR succeeded; p_note ALIAS FOR note; p_response ALIAS FOR response;
BEGIN
    PERFORM hivenet._resolve_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                     p_note, p_response);
END $$;

-- Retention of steps (run by hivenet.maintain()): purge every attempt of the steps whose
-- attempts all ended before now() - step_retention and whose serial begin_step refuses as
-- dated too early (_step_days_from): a step is purged only when it can no longer start. A
-- processing step is never purged.
CREATE FUNCTION hivenet._maintain_steps() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
BEGIN
    PERFORM hivenet._purge_requests(
        'hivenet.steps', v_now - hivenet._setting_constant('step_retention')::interval,
        hivenet._step_days_from(v_now));
END $$;
