-- Revision 0014 down: one primary again. Parked scopes get their sequences back first (their
-- counters are kept), then the ownership settings, trigger and functions go, and the functions
-- 0014 changed are as they were at revision 0013.

DO $$
DECLARE
    v_scope record;
BEGIN
    FOR v_scope IN SELECT format, scope FROM hivenet.scope
                   WHERE left(sequence_name, 4) = 'off_' ORDER BY sequence_name LOOP
        PERFORM hivenet._park_scope(v_scope.format, v_scope.scope, false);
    END LOOP;
END $$;

-- hivenet_db/sql/allocate.sql as of revision 0013
-- _issue for scope p_scope that has no sequence of its own yet (as far as this session's
-- catalog cache knows): from its own sequence if one was committed since, else from the
-- format's cold counter, recording the scope for maintain(). Holds the format's cold lock
-- shared while it looks and draws (never until commit), so a promotion that commits in
-- between is either seen here or waited for. Never waits for another caller's commit.
CREATE OR REPLACE FUNCTION hivenet._issue_cold(p_format hivenet.format, p_values text[], p_count integer)
RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_scope text := hivenet._scope_of(p_format, p_values);
    v_key integer := hashtext(p_format.name);
    v_seq regclass;
    v_out text[];
BEGIN
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('new scopes (among them %L, sharing the format''s cold counter until '
                       'hivenet.maintain() gives each its own)', v_scope));
            -- Once per scope, not per serial: a busy new scope would pile up rows.
            INSERT INTO hivenet.scope_pending (format, scope, fields)
            SELECT p_format.name, v_scope, hivenet._scope_fields(p_format, p_values)
            WHERE NOT EXISTS (SELECT FROM hivenet.scope_pending s
                              WHERE s.format = p_format.name AND s.scope = v_scope);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
    IF v_seq IS NOT NULL THEN
        RETURN hivenet._issue(v_seq, p_format, p_values, p_count, format('scope %L', v_scope));
    END IF;
    RETURN v_out;
END $$;

-- hivenet_db/sql/allocate.sql as of revision 0013
-- hivenet.prepare_scope(format, fields) → void (administrators)
--   Gives the counter scope of fields its own sequence now, so that its serials start at 1
--   from the first (maintain() does the same for every scope that has been used). Commits
--   with the caller's transaction: run it in a short one of its own, since allocations of
--   new scopes of the format wait for it. HN001 for an unknown format or bad field values.
CREATE OR REPLACE FUNCTION hivenet.prepare_scope(p_format text, p_fields jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_values text[];
BEGIN
    SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(p_format));
    END IF;
    v_values := hivenet._field_values(v_format, p_fields);
    PERFORM hivenet._check_fields(v_format, v_values);
    PERFORM hivenet._promote_scope(v_format, hivenet._scope_of(v_format, v_values),
                                   hivenet._scope_fields(v_format, v_values));
END $$;

-- hivenet_db/sql/allocate.sql as of revision 0013
-- Part of maintain(): promotes every scope that drew from a cold counter.
CREATE OR REPLACE FUNCTION hivenet._maintain_scopes() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_pending record;
BEGIN
    FOR v_pending IN
        WITH taken AS (DELETE FROM hivenet.scope_pending RETURNING *)
        SELECT DISTINCT ON (t.format, t.scope) f AS format_row, t.scope, t.fields
        FROM taken t JOIN hivenet.format f ON f.name = t.format
        ORDER BY t.format, t.scope
    LOOP
        PERFORM hivenet._promote_scope(v_pending.format_row, v_pending.scope, v_pending.fields);
    END LOOP;
END $$;

-- hivenet_db/sql/steps.sql as of revision 0013
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
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive.
--   HN021 SerialOutsideWindow: the serial's date (business time zone) starts before now -
--   step_retention (the step's record may already be purged: it must not run again) or
--   after now + step_future_tolerance.
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
CREATE OR REPLACE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
    v_day_start timestamptz;
BEGIN
    -- The common case is decided by one expression: plpgsql prepares every expression once
    -- per transaction, a good part of this function's cost. The regex matches the system
    -- serial followed by the unified serial, if any, only when both are valid (alnum system
    -- and module, instance 01-99, year from 1000, a day that exists in its month; 29 February
    -- is left to parse_serial); the last 10 digits not all 0 mean seq is not 0 (a lookahead
    -- costs more than the rest of the match). Whatever fails this takes the slow path, where
    -- parse_serial decides and names the problem: the accepted set is exactly parse_serial's
    -- (a test checks it), at a fraction of its cost.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND octet_length(p_system_serial) = 30
        AND right(p_system_serial, 10) <> '0000000000'
        AND coalesce(right(p_unified_serial, 10), '') <> '0000000000'
        AND p_system_serial || coalesce(p_unified_serial, '') ~ (
            '^[0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[1-9][0-9]{3}'
            '((0[13578]|1[02])(0[1-9]|[12][0-9]|3[01])|(0[469]|11)(0[1-9]|[12][0-9]|30)'
            '|02(0[1-9]|1[0-9]|2[0-8]))[0-9]{12}'
            '([0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[1-9][0-9]{3}'
            '((0[13578]|1[02])(0[1-9]|[12][0-9]|3[01])|(0[469]|11)(0[1-9]|[12][0-9]|30)'
            '|02(0[1-9]|1[0-9]|2[0-8]))[0-9]{10})?$'),
        false) THEN
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        PERFORM hivenet.parse_serial(p_system_serial, 'system');
        IF p_unified_serial IS NOT NULL THEN
            PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
        END IF;
    END IF;
    -- Old serials are refused, not run again: their record may be purged (HN021). Settings
    -- from the generated constants (settings.sql): no query on the hot path.
    v_day := make_date(substr(p_system_serial, 11, 4)::integer,
                       substr(p_system_serial, 15, 2)::integer,
                       substr(p_system_serial, 17, 2)::integer);
    v_day_start := v_day::timestamp AT TIME ZONE hivenet._setting_constant('time_zone');
    IF v_day_start < hivenet.now() - hivenet._setting_constant('step_retention')::interval
       OR v_day_start > hivenet.now()
                        + hivenet._setting_constant('step_future_tolerance')::interval THEN
        PERFORM hivenet._raise_step_outside_window(p_system_serial, v_day);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                    p_unified_serial, p_lease) b;
    END IF;
    RETURN NEXT;
END $$;

-- hivenet_db/sql/dedup.sql as of revision 0013
-- hivenet.claim_interface_serial(serial, unified_serial default null,
--                                system_serial default null, nowait default false) → void
--   Records an incoming interface call in the caller's transaction: its claim commits or
--   vanishes with that transaction. The unified and system serials are recorded for the call
--   chain, never checked for duplicates (HiveNet rule 1).
--   Raises HN001 when serial is no valid 39-character interface serial, or unified_serial /
--   system_serial is given but not 28 / 30 characters shaped as the standard says (10
--   letters or digits, then digits: only their shape is checked); HN021 when the serial's own
--   time (its caller's local time, in any zone from UTC-12 to UTC+14) is older than the
--   setting interface_window or later than now + interface_future_tolerance in every such
--   zone, unless this database issued it (its clock stepped back: allocate.sql); HN020 when
--   it is already recorded.
--   Blocks while another transaction holds an uncommitted claim of the same serial, then
--   raises HN020 if that one committed, or records the call if it rolled back. With nowait
--   it raises HN020 at once instead of waiting (also, once in about 4 billion, for another
--   serial claimed at that moment whose 32-bit hash is the same). Under REPEATABLE READ a
--   duplicate committed after the transaction's snapshot raises 40001 (retry) instead.
--   Never fails for a missing partition: a day without one is recorded in the default
--   partition.
CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL,
    p_system_serial text DEFAULT NULL, p_nowait boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_valid boolean;
    v_local timestamp;
    v_day date;
    v_from timestamp;
    v_to timestamp;
    v_window interval;
    v_tolerance interval;
    v_recorded timestamptz;
BEGIN
    -- This runs on every incoming call: the layout of formats.sql 'interface' checked inline
    -- (every call of a function with SET search_path costs; parse_serial only explains a
    -- rejection, and a test proves both agree). A plain character-class pattern, then the
    -- ranges as integers: a pattern with alternations for them costs twice as much. CASE keeps
    -- the casts behind the pattern.
    v_valid := CASE WHEN p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]{24}$' THEN
                   substr(p_serial, 9, 2) <> '00' AND substr(p_serial, 16, 4) <> '0000'
                   AND substr(p_serial, 20, 2)::integer BETWEEN 1 AND 12
                   AND substr(p_serial, 22, 2)::integer BETWEEN 1 AND 31
                   AND substr(p_serial, 24, 2)::integer < 24
                   AND substr(p_serial, 26, 2)::integer < 60
                   AND substr(p_serial, 28, 2)::integer < 60
                   AND right(p_serial, 10) <> '0000000000'
               ELSE false END;
    -- Nested in CASE, not AND: PostgreSQL does not promise to evaluate AND left to right.
    IF (CASE WHEN v_valid THEN substr(p_serial, 22, 2)::integer > 28 ELSE false END) THEN
        -- Day 29 to 31 must exist in that month: otherwise make_date rolls over.
        v_valid := extract(day FROM make_date(substr(p_serial, 16, 4)::integer,
                                              substr(p_serial, 20, 2)::integer, 1)
                                    + (substr(p_serial, 22, 2)::integer - 1))
                   = substr(p_serial, 22, 2)::integer;
    END IF;
    IF NOT v_valid THEN
        PERFORM hivenet._reject_serial(p_serial, 'interface');
    END IF;
    IF p_unified_serial !~ '^[0-9A-Za-z]{10}[0-9]{18}$' THEN
        PERFORM hivenet._reject_serial(p_unified_serial, 'unified');
    END IF;
    IF p_system_serial !~ '^[0-9A-Za-z]{10}[0-9]{20}$' THEN
        PERFORM hivenet._reject_serial(p_system_serial, 'system');
    END IF;
    v_local := make_timestamp(substr(p_serial, 16, 4)::integer, substr(p_serial, 20, 2)::integer,
                              substr(p_serial, 22, 2)::integer, substr(p_serial, 24, 2)::integer,
                              substr(p_serial, 26, 2)::integer, substr(p_serial, 28, 2)::integer);
    v_day := v_local::date;
    -- Settings from the generated constants (settings.sql): no query on the hot path.
    v_window := hivenet._setting_constant('interface_window')::interval;
    v_tolerance := hivenet._setting_constant('interface_future_tolerance')::interval;
    -- The serial's time is its caller's local time, in a zone it does not name: compared
    -- with the UTC clock, widened to every zone a caller may be in (_caller_zones).
    v_from := (v_now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[1] - v_window;
    v_to := (v_now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[2] + v_tolerance;
    IF v_local < v_from OR v_local > v_to THEN
        PERFORM hivenet._refuse_outside_window(p_serial, v_local, v_from, v_to);
    END IF;
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial));
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial)) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is being claimed by another transaction '
                             'in progress (nowait)', p_serial);
    END IF;
    -- The name of _interface_partition_name(v_day), spelled out to save a call.
    IF to_regclass('hivenet.interface_call_' || substr(p_serial, 16, 8)) IS NULL THEN
        -- To the default partition, unless the day's partition was attached since this
        -- session last looked (this session's list of partitions can be stale, and the
        -- default partition then refuses the row). The first lock on the default partition
        -- in a transaction refreshes that list, and while held no ATTACH can complete.
        LOCK TABLE hivenet.interface_call_default IN ROW EXCLUSIVE MODE;
    END IF;
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    VALUES (p_serial, v_day, p_unified_serial, p_system_serial, v_now)
    -- No conflict target: the primary key is the only unique index, and a target makes every
    -- insert look up which index of the partition matches it in the catalog (measured).
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.recorded_at INTO v_recorded FROM hivenet.interface_call c
        WHERE c.serial_day = v_day AND c.interface_serial = p_serial;
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is already recorded (at %s)', p_serial,
                             coalesce(v_recorded::text, 'an earlier step of this transaction'));
    END IF;
END $$;

DROP TRIGGER setting_ownership ON hivenet.setting;
DELETE FROM hivenet.setting
WHERE name IN ('owned_instances', 'single_primary_formats', 'check_received_instances');
DROP FUNCTION hivenet.own_instances(text, boolean, boolean);
DROP FUNCTION hivenet._park_scope(text, text, boolean);
DROP FUNCTION hivenet.ownership();
DROP FUNCTION hivenet._ownership_check();
DROP FUNCTION hivenet._scopes_by_node();
DROP FUNCTION hivenet._check_owned_serial(text, text);
DROP FUNCTION hivenet._check_owned(hivenet.format, text[]);
DROP FUNCTION hivenet._not_owned(hivenet.format, text, text, boolean);
DROP FUNCTION hivenet._ownership_setting(text);
DROP FUNCTION hivenet._node_field(hivenet.format);
DROP FUNCTION hivenet._instance_in(text, text);
DROP FUNCTION hivenet._canonical_instances(text);

-- hivenet_db/sql/privileges.sql as of revision 0013
-- Least privilege. Two roles, created once by `hivenet-db bootstrap` (the owner may not create
-- roles): hivenet_app may call the application API and read the reporting views; hivenet_admin
-- also runs the administrative functions and changes settings. The public functions are
-- SECURITY DEFINER, so neither needs any right on a table, and the private helpers
-- (hivenet._*) stay the owner's, but for the allocation fast path (below). Nothing here
-- opens a connection, and no setting holds a secret. Applied last; a revision that adds
-- functions applies it again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's.
CREATE OR REPLACE FUNCTION hivenet._set_public_execute(p_grant boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
        ORDER BY p.oid::regprocedure::text
    LOOP
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

-- The application API: executable by every role, usable by those with USAGE on the schema.
GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
    hivenet.next_unified_serial(text, text, text),
    hivenet.next_system_serial(text, text, text),
    hivenet.next_interface_serial(text, text, text, text),
    hivenet.next_serial(text, jsonb),
    hivenet.next_serials(text, jsonb, integer),
    hivenet.parse_serial(text, text),
    hivenet.claim_interface_serial(text, text, text, boolean),
    hivenet.call_chain(text),
    hivenet.claim(text, text, boolean),
    hivenet.begin_step(text, jsonb, text, text, interval, boolean),
    hivenet.finish_step(text, integer, boolean, jsonb),
    hivenet._step_lease(interval),       -- in views stuck_steps/_requests, as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now()
TO PUBLIC;
-- Keyed requests (requests.sql).
GRANT EXECUTE ON FUNCTION
    hivenet.begin_request(text, text, jsonb, text, interval, boolean),
    hivenet.finish_request(text, text, integer, boolean, jsonb)
TO PUBLIC;

-- The allocation fast path (allocate.sql, _fast_serial) is inlined into the caller's statement
-- and runs with the caller's rights, so every function in it must be executable by the
-- caller, and the caller may take values of the counter sequences of scopes: USAGE (nextval,
-- currval), never UPDATE (setval, which only the owner's slow path runs) nor ALTER. Granted to
-- PUBLIC like the allocation functions: taking a value is what any caller of next_serial
-- does. The constants say what the formats and settings are (no secret: settings.sql). A
-- scope's sequence gets its grant when it is made (_promote_scope); this covers older ones.
GRANT EXECUTE ON FUNCTION
    hivenet._fast_serial(text, text, text, text),
    hivenet._format_constant(text),
    hivenet._setting_constant(text),
    hivenet._scope_sequence_name(text, text)
TO PUBLIC;
DO $$
DECLARE
    v_name text;
BEGIN
    FOR v_name IN SELECT sequence_name FROM hivenet.scope ORDER BY sequence_name LOOP
        IF to_regclass('hivenet.' || quote_ident(v_name)) IS NOT NULL THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO PUBLIC', v_name);
        END IF;
    END LOOP;
END $$;

-- Grants to hivenet_app and hivenet_admin, for those of them that exist (bootstrap creates
-- them; called again by bootstrap when it runs after the schema was installed).
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        GRANT SELECT ON hivenet.interface_calls, hivenet.interface_calls_per_day,
            hivenet.step_states, hivenet.stuck_steps, hivenet.scope_usage TO hivenet_app;
        GRANT SELECT ON hivenet.request_states, hivenet.stuck_requests TO hivenet_app;
    END IF;
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_admin;
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.maintain(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.register_system(text, text), hivenet.register_module(text, text, text),
            hivenet.set_claim_expiry(text, interval), hivenet.prepare_scope(text, jsonb),
            hivenet.fence_failover(bigint, boolean), hivenet.replication_warning()
        TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

SELECT hivenet._grant_roles();
