-- Revision 0016 down: the layouts written out by hand again in claim_interface_serial,
-- _refuse_outside_window, interface_calls, begin_step and parse_serial; the generated
-- functions and their trigger dropped. The bodies are those of revision 0014 (ownership).

-- hivenet.interface_calls: every recorded call with the fields of its interface serial.
--   serial_time is the time printed in the serial (business-local, as issued).
CREATE OR REPLACE VIEW hivenet.interface_calls AS
SELECT c.interface_serial,
       c.unified_serial,
       c.system_serial,
       substr(c.interface_serial, 1, 5) AS source_system,
       substr(c.interface_serial, 6, 3) AS source_module,
       substr(c.interface_serial, 9, 2) AS source_instance,
       substr(c.interface_serial, 11, 5) AS target_system,
       c.serial_day,
       -- ISO basic 'YYYYMMDDTHHMISS' to timestamp: no session time zone involved (to_timestamp
       -- would shift a local time that the session's zone skips at a DST change).
       (substr(c.interface_serial, 16, 8) || 'T' || substr(c.interface_serial, 24, 6))::timestamp
           AS serial_time,
       c.recorded_at,
       c.call_order
FROM hivenet.interface_call c;
COMMENT ON VIEW hivenet.interface_calls IS
    'recorded interface calls with the source and target of each serial (reporting)';

-- Slow path of claim_interface_serial: raises HN021 for interface serial p_serial, dated
-- p_local (its caller's local time), outside the window from p_from to p_to, unless this
-- database issued it: after the clock stepped back, its own fresh serials carry a time up to
-- the latest instant already issued in their scope (allocate.sql), maybe past p_to.
CREATE OR REPLACE FUNCTION hivenet._refuse_outside_window(p_serial text, p_local timestamp,
    p_from timestamp, p_to timestamp) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_issued timestamp;
BEGIN
    IF p_local > p_to THEN
        v_issued := hivenet._latest_issued('interface', substr(p_serial, 1, 15));
        IF p_local <= v_issued THEN
            RETURN;
        END IF;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'HN021',
        MESSAGE = format('interface serial %s was issued at %s (its caller''s local time), '
                         'outside the duplicate-check window from %s to %s (local times from '
                         'UTC-12 to UTC+14)%s', p_serial, p_local, p_from, p_to,
                         CASE WHEN v_issued IS NOT NULL
                              THEN format('; the latest serial of its scope issued here is of %s',
                                          v_issued) ELSE '' END);
END $$;

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
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('interface', p_serial);
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
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('system', p_system_serial);
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

-- hivenet.parse_serial(serial, format default null) → jsonb
--   {"format": ..., <one key per field>, "date" or "datetime": ..., "seq": n}. With no format,
--   the standard's kinds are told apart by length (28 unified, 30 system, 39 interface).
--   HN001 when the serial is no valid serial of that format (length, characters, an
--   impossible date, seq 0) or the format is unknown. IMMUTABLE in effect; never blocks.
--   hivenet_db.parse_serial does the same in Python for the built-in formats (same results,
--   same messages; tests/test_parsing.py compares them).
CREATE OR REPLACE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_seg jsonb;
    v_pos integer := 1;
    v_part text;
    v_problem text;
    v_time timestamp;
    v_result jsonb;
BEGIN
    IF p_serial IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'serial is NULL';
    END IF;
    SELECT * INTO v_format FROM hivenet.format
    WHERE name = coalesce(p_format, CASE octet_length(p_serial)
        WHEN 28 THEN 'unified' WHEN 30 THEN 'system' WHEN 39 THEN 'interface' END);
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = CASE WHEN p_format IS NULL
            THEN format('serial %s is no unified (28), system (30) or interface (39) serial; '
                        'name its format', hivenet._shown(p_serial))
            ELSE format('unknown format %s', hivenet._shown(p_format)) END;
    END IF;
    v_result := jsonb_build_object('format', v_format.name);
    IF octet_length(p_serial) <> v_format.length OR length(p_serial) <> v_format.length THEN
        v_problem := format('length %s, not %s', length(p_serial), v_format.length);
    END IF;
    FOR v_seg IN SELECT jsonb_array_elements(v_format.segments) LOOP
        EXIT WHEN v_problem IS NOT NULL;
        IF v_seg -> 'printed' = 'false' THEN
            v_part := '';  -- a field of the counter key that is not printed
        ELSIF v_seg ? 'field' THEN
            v_part := substr(p_serial, v_pos, (v_seg ->> 'width')::integer);
            v_problem := 'field ' || (v_seg ->> 'field') || ' '
                         || hivenet._field_problem(v_seg, v_part);
            v_result := v_result || jsonb_build_object(v_seg ->> 'field', v_part);
        ELSIF v_seg ? 'literal' THEN
            v_part := substr(p_serial, v_pos, length(v_seg ->> 'literal'));
            IF v_part <> v_seg ->> 'literal' THEN
                v_problem := format('%L where %L belongs', v_part, v_seg ->> 'literal');
            END IF;
        ELSIF v_seg ? 'time' THEN
            v_part := substr(p_serial, v_pos, (v_seg ->> 'width')::integer);
            BEGIN
                v_time := to_timestamp(v_part, v_seg ->> 'to_char')::timestamp;
            EXCEPTION WHEN data_exception THEN
                v_time := NULL;
            END;
            -- The round trip rejects what to_timestamp forgives (spaces, signs, 2-digit years).
            IF v_part !~ '^[0-9]+$' OR v_time IS NULL
               OR to_char(v_time, v_seg ->> 'to_char') <> v_part THEN
                v_problem := format('time %L is no valid %s', v_part, v_seg ->> 'time');
            ELSIF hivenet._unit_rank(v_seg ->> 'resolution') >= hivenet._unit_rank('day') THEN
                v_result := v_result || jsonb_build_object('date', to_char(v_time, 'YYYY-MM-DD'));
            ELSE
                v_result := v_result || jsonb_build_object(
                    'datetime', to_char(v_time, 'YYYY-MM-DD"T"HH24:MI:SS'));
            END IF;
        ELSE
            v_part := substr(p_serial, v_pos, v_format.seq_width);
            IF v_part !~ '^[0-9]+$' OR v_part::numeric = 0 THEN
                v_problem := format('seq %L is not 1 to %s', v_part, v_format.capacity);
            ELSE
                v_result := v_result || jsonb_build_object('seq', v_part::bigint);
            END IF;
        END IF;
        v_pos := v_pos + length(v_part);
    END LOOP;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('serial %s is no valid %s serial: %s', hivenet._shown(p_serial),
                             v_format.name, v_problem);
    END IF;
    RETURN v_result;
END $$;

-- hivenet_db/sql/ownership.sql at 0014
-- HN002 when serial p_serial of format p_format (system: a step; interface: a claim), valid,
-- was received by a database that does not own the instance printed in it (docs/scale-out.md:
-- a retry on the wrong shard). Callers test owned_instances <> 'all' first (no call at all on
-- one primary); nothing is checked when check_received_instances is off.
CREATE OR REPLACE FUNCTION hivenet._check_owned_serial(p_format text, p_serial text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text := hivenet._ownership_setting('owned_instances');
    v_instance text;
BEGIN
    IF v_owned = 'all' OR NOT hivenet._ownership_setting('check_received_instances')::boolean
    THEN
        RETURN;
    END IF;
    -- The standard's system and interface serials print the instance at 9-10.
    v_instance := CASE WHEN p_format IN ('system', 'interface') THEN substr(p_serial, 9, 2)
                       ELSE hivenet.parse_serial(p_serial, p_format) ->> 'instance' END;
    IF NOT hivenet._instance_in(v_instance, v_owned) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('%s serial %s carries instance %s, which this database does not '
                             'own (it owns %s): send it, and every retry of it, to the shard '
                             'that owns that instance (docs/scale-out.md; setting '
                             'check_received_instances)', p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $$;

DROP TRIGGER format_layouts ON hivenet.format;
DROP FUNCTION hivenet._compile_layouts_trigger();
DROP FUNCTION hivenet._compile_layouts(text);
DROP FUNCTION hivenet._serial_valid(text, text);
DROP FUNCTION hivenet._serial_shaped(text, text);
DROP FUNCTION hivenet._serial_time(text, text);
DROP FUNCTION hivenet._serial_field(text, text, text);
DROP FUNCTION hivenet._serial_scope(text, text);
DROP FUNCTION hivenet._layout_sql(hivenet.format);
