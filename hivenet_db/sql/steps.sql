-- System-serial step state machine (SPEC §4, seed 000 "业务层查重", seeds 002/003).
--
-- A step is the keyed request (requests.sql) of namespace 'hivenet.steps' whose key is its
-- 30-character system serial: the same table, the same core (one writer, one fast path, one
-- state machine), the same errors, the same features (wait, batches, the namespace's policy:
-- fingerprint, failure policy, expiry, audit chain). What steps add: the serial is checked
-- (HN001), must be dated inside the window whose records are kept (HN021), and the business
-- transaction's unified serial is recorded for audit; their retention is the setting
-- step_retention, not a policy's.
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
    'every attempt of every processing step (system serial); '
    'the latest attempt is the step''s state';

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

-- What the fast path vouches for in a step (_start_key, requests.sql), and _begin_key after
-- it wrote nothing: both serials valid (the layouts generated from the formats, compile.sql),
-- the system serial surely inside the window (_step_in_window, compile.sql) and an allowed
-- lease or none (clock.sql, _interval_allowed). Inlined where it is called: no function runs.
-- VOLATILE (hivenet.now()).
CREATE FUNCTION hivenet._step_start_valid(p_system_serial text, p_unified_serial text,
                                          p_lease interval) RETURNS boolean
LANGUAGE sql
BEGIN ATOMIC
    SELECT hivenet._serial_valid('system', p_system_serial)
       AND hivenet._step_in_window(p_system_serial)
       AND (p_unified_serial IS NULL OR hivenet._serial_valid('unified', p_unified_serial))
       AND (p_lease IS NULL OR hivenet._interval_allowed(p_lease));
END;

-- What _start_key vouches for, by the kind of key: a step's (p_step, in namespace
-- 'hivenet.steps': _step_start_valid, steps.sql) or a request's (_request_start_valid).
-- NULL (not vouched for) for a step elsewhere. Inlined: _start_key and _begin_key pass the
-- kind as a constant, which folds the CASE to its branch (a PL/pgSQL expression's tree is
-- built in each transaction, every branch of it); a batch's statement passes its parameter.
CREATE FUNCTION hivenet._start_valid(p_step boolean, p_namespace text, p_key text,
    p_unified_serial text, p_lease interval)
RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT CASE WHEN p_step
                THEN p_namespace = 'hivenet.steps'
                     AND hivenet._step_start_valid(p_key, p_unified_serial, p_lease)
                ELSE hivenet._request_start_valid(p_namespace, p_key, p_unified_serial,
                                                  p_lease) END;
END;

-- The checks of a step's key, each with its exact error (parse_serial names the problem):
-- system serial p_system_serial and unified serial p_unified_serial valid, the system
-- serial's instance owned here (ownership.sql), and its date inside the window (HN021).
-- _begin_key runs them for input _step_start_valid does not vouch for: a serial near the
-- window's edges, instances to check, bad input (parse_serial costs ~200 µs a serial).
-- HN001 also for a namespace other than the steps' (p_namespace). No SET clause: only
-- _begin_key calls it, whose SET search_path is in force.
CREATE FUNCTION hivenet._check_step(p_namespace text, p_system_serial text,
                                    p_unified_serial text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_day date;
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s is not the steps'' namespace ''hivenet.steps''',
                             hivenet._shown(p_namespace));
    END IF;
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
END $$;

-- hivenet.begin_step(system_serial, request default null, on_success default 'replay',
--                    unified_serial default null, lease default null, nowait default false,
--                    wait default null)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one processing step, identified by its 30-character system serial, in the
--   caller's transaction (SPEC §4): the keyed request (requests.sql) of the steps' namespace
--   'hivenet.steps' whose key is the system serial.
--   * no attempt yet, or the latest failed or expired: a new attempt starts, state
--     `processing`; outcome 'started', attempt n+1, response NULL. Apply the business
--     effect, then call finish_step with that attempt number. When the steps' failures are
--     final (set_namespace_policy('hivenet.steps', on_failure => 'final')), a latest failed
--     or expired attempt is replayed instead: outcome 'replayed_failure', that attempt, and
--     its error as response (NULL when expired).
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck step with resolve_step; nothing takes it over silently); but
--     past the steps' expire_after it becomes `expired` and is then a failure as above.
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: the business request; its fingerprint (by the steps' policy: by default sha256
--   of the jsonb text, which jsonb normalises: key order and whitespace do not matter) is
--   kept, and a different request under the same serial raises HN032 RequestMismatch in
--   every state. No request counts as JSON null.
--   unified_serial: the business transaction's unified serial, kept for audit.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: system serial no valid system serial (as parse_serial(serial, 'system')), unified
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive or
--   longer than 10 years, nowait NULL, wait negative or longer than 10 years.
--   HN021 SerialOutsideWindow: the serial's date, read as its caller's local date in any zone
--   from UTC-12 to UTC+14, starts before now - step_retention in every such zone (the step's
--   record may already be purged: it must not run again), or after now +
--   step_future_tolerance in every such zone, unless this database issued serials of its
--   scope dated that day or later (its clock stepped back).
--   HN002 UnknownScope: a database that declared owned instances does not own the serial's
--   instance (a retry sent to the wrong shard; ownership.sql, check_received_instances).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead, with wait once it waited that long (wait 0
--   is nowait): the key's wait only, as begin_request's. A step begun and committed by another
--   transaction holds no lock: begin_step raises HN030 at once, wait or not; a client waits for its
--   outcome with watch_request('hivenet.steps', system_serial) and LISTEN, then begins again (see
--   watch_request). In REPEATABLE READ or SERIALIZABLE a concurrent start raises
--   serialization_failure (40001): retry the transaction.
--   One statement, three branches: begin_step is a set-returning LANGUAGE sql function that
--   the planner inlines into the caller's statement (called in FROM), a UNION ALL under
--   LIMIT 1 whose branches run in order, each only when the ones before it returned nothing:
--   1. A replay of a step that succeeded with the same request, options that replay, no
--      unified serial or the one it was begun with, and a serial in the window is one read
--      of view _step_replay by primary key, with no PL/pgSQL call: the stored serials were
--      checked when the step began (a format is never redefined), so no serial is parsed
--      again.
--   2. A new step with plain options: _start_key, one INSERT (requests.sql).
--   3. Everything else (failed, processing, another request or unified serial, reject,
--      nowait, wait, bad input, an instance other shards own, a fingerprint policy) goes to
--      _begin_key, which decides and names the problem.
--   Why this shape: docs/design/sql-internals.md.
CREATE FUNCTION hivenet.begin_step(
    system_serial text, request jsonb DEFAULT NULL, on_success text DEFAULT 'replay',
    unified_serial text DEFAULT NULL, lease interval DEFAULT NULL, nowait boolean DEFAULT false,
    wait interval DEFAULT NULL)
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
       -- The default fingerprint: no other policy's equals it (fingerprints.sql), so the
       -- steps of a fingerprint policy are replayed by the third branch.
       AND r.fingerprint = hivenet._fingerprint(begin_step.request)
       -- Options that replay (a replay never waits); the unified serial the step was begun
       -- with (so a valid one) or none.
       AND begin_step.on_success = 'replay' AND begin_step.nowait IS NOT NULL
       AND (begin_step.lease IS NULL OR hivenet._interval_allowed(begin_step.lease))
       AND (begin_step.wait IS NULL
            OR begin_step.wait BETWEEN interval '0' AND hivenet._longest_interval())
       AND (begin_step.unified_serial IS NULL OR begin_step.unified_serial = r.unified_serial)
       AND hivenet._step_in_window(r.system_serial)
     UNION ALL
     SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_key(true, 'hivenet.steps', system_serial, request, on_success,
                              unified_serial, lease, nowait, wait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_key(true, 'hivenet.steps', system_serial, request, on_success,
                             unified_serial, lease, nowait, wait, NULL) b)
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

-- hivenet.begin_steps(system_serials text[], requests jsonb[], unified_serial default null,
--                     lease default null)
--   → table(system_serial text, outcome text, attempt int, response jsonb), one row per
--   system serial, in their order. Begins every step of a batch in the caller's transaction,
--   in one round trip: for system_serials[i] with requests[i], what
--   begin_step(system_serials[i], requests[i], unified_serial => unified_serial,
--   lease => lease) would decide, as an outcome instead of an error, as begin_requests does
--   for keyed requests (batches.sql): 'started' (finish it with finish_step or finish_steps),
--   'replayed', 'replayed_failure' (the steps' failures are final), or with attempt NULL and
--   response {"code": ..., "message": ...} 'in_progress' (HN030), 'mismatch' (HN032),
--   'rejected' (HN001 a serial that is no valid system serial, HN021 one outside the window,
--   HN002 one of an instance another database owns).
--   HN001 for the whole call: system_serials or requests NULL, not one-dimensional or not as
--   long as each other, more than 1,000 serials, a serial NULL or given twice, lease not
--   positive or longer than 10 years. Blocks as begin_requests; the serials are taken in
--   their sort order.
CREATE FUNCTION hivenet.begin_steps(
    system_serials text[], requests jsonb[], unified_serial text DEFAULT NULL,
    lease interval DEFAULT NULL)
RETURNS TABLE (system_serial text, outcome text, attempt integer, response jsonb)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT b.key, b.outcome, b.attempt, b.response
    FROM hivenet._begin_batch(true, 'hivenet.steps', system_serials, requests, unified_serial,
                              lease) b;
END;

-- hivenet.finish_steps(system_serials text[], attempts integer[], succeeded boolean[],
--                      responses jsonb[]) → void
--   finish_step(system_serials[i], attempts[i], succeeded[i], responses[i]) of every step of a
--   batch (begin_steps' started steps), in the order of system_serials, in one call. All or
--   nothing: the first step finish_step refuses raises its error (HN033, HN001) and the call
--   changes nothing. HN001 for the whole call as begin_steps (NULL, lengths, 1,000 serials, a
--   serial NULL or given twice), attempts or succeeded NULL or not as long as system_serials.
CREATE FUNCTION hivenet.finish_steps(
    system_serials text[], attempts integer[], succeeded boolean[], responses jsonb[])
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT hivenet._finish_batch(true, 'hivenet.steps', system_serials, attempts, succeeded,
                                 responses);
END;

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
