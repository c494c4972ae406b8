-- Interface-serial duplicate check (接口层查重, SPEC §3); the call chain of a unified serial
-- reads what it records (reporting.sql).
--
-- Every incoming interface call is one row of hivenet.interface_call, inserted in the caller's
-- transaction: a serial already there is a duplicate (HN020); a rollback takes the row away,
-- so a retry is accepted. The table is partitioned by the day printed in the serial itself
-- (YYYYMMDD of its YYYYMMDDHHMISS), so the primary key (serial, day) is unique per serial,
-- the check touches one partition through its unique index, and old days go away by dropping
-- partitions. Serials whose own time lies outside the check window are refused (HN021): their
-- day may already be dropped, so accepting them would let an old replay through.

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('interface_window', '1 day', 'interval',
     'interface serials older than this (by their own timestamp) are refused with HN021'),
    ('interface_future_tolerance', '5 minutes', 'interval',
     'interface serials dated more than this into the future are refused with HN021 '
     '(clock skew between systems)'),
    ('interface_retention', '7 days', 'interval',
     'recorded interface calls are kept this long for the call chain (never less than '
     'interface_window + interface_future_tolerance); maintain() drops older days'),
    ('interface_partitions_ahead', '2 days', 'interval',
     'maintain() creates the daily partitions of interface calls this far ahead');

CREATE TABLE hivenet.interface_call (
    interface_serial text NOT NULL,
    serial_day       date NOT NULL,  -- the serial's own YYYYMMDD: the partition key
    unified_serial   text,
    system_serial    text,
    recorded_at      timestamptz NOT NULL,
    -- The order of recording, across partitions (one sequence): call_chain sorts by it, since
    -- calls recorded at one clock reading share recorded_at.
    call_order       bigserial,
    PRIMARY KEY (interface_serial, serial_day)
) PARTITION BY RANGE (serial_day);
COMMENT ON TABLE hivenet.interface_call IS
    'one row per accepted interface call (claim_interface_serial), one partition per serial day';
CREATE INDEX interface_call_unified ON hivenet.interface_call (unified_serial)
    WHERE unified_serial IS NOT NULL;

CREATE FUNCTION hivenet._interface_partition_name(p_day date) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT 'interface_call_' || to_char(p_day, 'YYYYMMDD')
$$;

-- Calls of days without a partition of their own (maintain() not run for a while) land here,
-- so a claim never needs to create a table: DDL in the caller's transaction would serialise
-- every other caller of that day behind it and vanish with its rollback. maintain() deletes
-- its expired rows.
CREATE TABLE hivenet.interface_call_default PARTITION OF hivenet.interface_call DEFAULT;

-- Creates the partition of day p_day unless it exists; true when this call created it.
-- Committed by maintain()'s transaction. CREATE + ATTACH (not CREATE ... PARTITION OF) because
-- ATTACH only takes SHARE UPDATE EXCLUSIVE on the parent, which claims in flight (ROW
-- EXCLUSIVE) never block; the CHECK lets ATTACH skip its validation scan of the new table.
-- ATTACH does scan the default partition: when calls of that day are already there, the day
-- keeps living in the default partition (false, nothing created). Safe to race; the
-- lock_timeout bounds a wait behind claims writing to the default partition.
CREATE FUNCTION hivenet._create_interface_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '2s' AS $$
DECLARE
    v_name text := hivenet._interface_partition_name(p_day);
BEGIN
    IF to_regclass('hivenet.' || quote_ident(v_name)) IS NOT NULL
       OR EXISTS (SELECT FROM hivenet.interface_call_default WHERE serial_day = p_day) THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('CREATE TABLE hivenet.%I (LIKE hivenet.interface_call INCLUDING DEFAULTS, '
                       'CONSTRAINT day_range CHECK (serial_day >= %L AND serial_day < %L))',
                       v_name, p_day, p_day + 1);
        EXECUTE format('ALTER TABLE hivenet.interface_call ATTACH PARTITION hivenet.%I '
                       'FOR VALUES FROM (%L) TO (%L)', v_name, p_day, p_day + 1);
    EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
        RETURN false;  -- a concurrent creator committed it first (the table or its row type)
    WHEN check_violation OR lock_not_available THEN
        RETURN false;  -- a call of that day reached the default partition meanwhile, or is
                       -- being written there: the day stays there
    END;
    -- The partition constraint now does the CHECK's job; keep inserts free of it.
    EXECUTE format('ALTER TABLE hivenet.%I DROP CONSTRAINT day_range', v_name);
    RETURN true;
END $$;

-- Slow path of claim_interface_serial: raises HN021 for interface serial p_serial, dated
-- p_local (its caller's local time), outside the window from p_from to p_to, unless this
-- database issued it: after the clock stepped back, its own fresh serials carry a time up to
-- the latest instant already issued in their scope (periods.sql), maybe past p_to.
CREATE FUNCTION hivenet._refuse_outside_window(p_serial text, p_local timestamp,
    p_from timestamp, p_to timestamp) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_issued timestamp;
BEGIN
    IF p_local > p_to THEN
        v_issued := hivenet._latest_issued('interface',
                                           hivenet._serial_scope('interface', p_serial));
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

-- HN001 naming p_serial, with parse_serial's diagnosis when it has one.
CREATE FUNCTION hivenet._reject_serial(p_serial text, p_format text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet.parse_serial(p_serial, p_format);
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('%s is no valid %s serial', hivenet._shown(p_serial), p_format);
END $$;

-- The full path of claim_interface_serial (its contract below): every check one by one, each
-- failure with its exact error, then the insert. The fast path hands it every call it did not
-- record, so this function decides alone what is accepted. Runs as its caller, the
-- SECURITY DEFINER claim_interface_serial (the table's owner).
CREATE FUNCTION hivenet._claim_interface_serial_checked(p_serial text, p_unified_serial text,
    p_system_serial text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_local timestamp;
    v_day date;
    v_from timestamp;
    v_to timestamp;
    v_window interval;
    v_tolerance interval;
    v_recorded timestamptz;
    v_partition regclass;
BEGIN
    -- The layout of format 'interface' checked by one inlined expression generated from its
    -- definition (compile.sql, _serial_valid). What it does not vouch for, parse_serial
    -- decides, naming the problem (HN001): the accepted set is exactly parse_serial's.
    IF NOT coalesce(hivenet._serial_valid('interface', p_serial), false) THEN
        PERFORM hivenet.parse_serial(p_serial, 'interface');
    END IF;
    -- The serials carried for the call chain: only their shape is checked.
    IF NOT hivenet._serial_shaped('unified', p_unified_serial) THEN
        PERFORM hivenet._reject_serial(p_unified_serial, 'unified');
    END IF;
    IF NOT hivenet._serial_shaped('system', p_system_serial) THEN
        PERFORM hivenet._reject_serial(p_system_serial, 'system');
    END IF;
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('interface', p_serial);
    END IF;
    v_local := hivenet._serial_time('interface', p_serial);
    v_day := v_local::date;
    -- Settings from the generated constants (compile.sql): no query on the hot path.
    v_window := hivenet._setting_constant('interface_window')::interval;
    v_tolerance := hivenet._setting_constant('interface_future_tolerance')::interval;
    -- The serial's time is its caller's local time, in a zone it does not name: the window
    -- is widened to every zone a caller may be in (clock.sql, _caller_now).
    v_from := hivenet._caller_now(v_now, 'earliest') - v_window;
    v_to := hivenet._caller_now(v_now, 'latest') + v_tolerance;
    IF v_local < v_from OR v_local > v_to THEN
        PERFORM hivenet._refuse_outside_window(p_serial, v_local, v_from, v_to);
    END IF;
    -- This session's list of partitions can be stale: a partition attached while this
    -- transaction already held its lock on the table (an earlier claim) is not in it, and the
    -- default partition then refuses the row. A lock this transaction does not hold yet
    -- refreshes that list: the day's partition's (the one the row goes to), or the default
    -- partition's, while held no ATTACH can complete. The name of
    -- _interface_partition_name(v_day), spelled out to save a call.
    v_partition := to_regclass('hivenet.interface_call_' || to_char(v_local, 'YYYYMMDD'));
    IF v_partition IS NULL THEN
        LOCK TABLE hivenet.interface_call_default IN ROW EXCLUSIVE MODE;
    ELSE
        EXECUTE format('LOCK TABLE %s IN ROW EXCLUSIVE MODE', v_partition);
    END IF;
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    VALUES (p_serial, v_day, p_unified_serial, p_system_serial, v_now)
    -- No conflict target: the primary key is the only unique index, and a target makes every
    -- insert look up which index of the partition matches it in the catalog.
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.recorded_at INTO v_recorded FROM hivenet.interface_call c
        WHERE c.serial_day = v_day AND c.interface_serial = p_serial;
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is already recorded (at %s)', p_serial,
                             coalesce(v_recorded::text, 'an earlier step of this transaction'));
    END IF;
END $$;

-- The full path under the shortest lock_timeout: where the insert would wait for another
-- transaction's uncommitted claim of the same serial, it raises HN020 at once. Its own function
-- (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of the
-- EXCEPTION block stays off the default path (as _begin_attempt_within, requests.sql).
CREATE FUNCTION hivenet._claim_interface_serial_nowait(p_serial text, p_unified_serial text,
    p_system_serial text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    PERFORM hivenet._claim_interface_serial_checked(p_serial, p_unified_serial,
                                                    p_system_serial);
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN020',
        MESSAGE = format('interface serial %s is being claimed by another transaction in '
                         'progress (nowait)', p_serial);
END $$;

-- hivenet.claim_interface_serial(serial, unified_serial default null,
--                                system_serial default null, nowait default false) → void
--   Records an incoming interface call in the caller's transaction: its claim commits or
--   vanishes with that transaction. The unified and system serials are recorded for the call
--   chain, never checked for duplicates (HiveNet rule 1).
--   Raises HN001 when serial is no valid interface serial (as parse_serial), or
--   unified_serial / system_serial is given but not shaped as its format's layout says (the
--   characters of each field, digits for the date and seq: only their shape is checked;
--   compile.sql _serial_shaped); HN021 when the serial's own
--   time (its caller's local time, in any zone from UTC-12 to UTC+14) is older than the
--   setting interface_window or later than now + interface_future_tolerance in every such
--   zone, unless this database issued it (its clock stepped back: periods.sql); HN020 when
--   it is already recorded; HN002 when this database declared owned instances and does not
--   own the serial's (its caller's) instance: a retry sent to the wrong shard (ownership.sql,
--   check_received_instances).
--   Blocks while another transaction holds an uncommitted claim of the same serial, then
--   raises HN020 if that one committed, or records the call if it rolled back. With nowait
--   it raises HN020 at once instead of waiting (also when its insert would wait over a
--   millisecond for another lock: rarely, the table's growth under heavy load; a lock on the
--   whole table, as a maintain() creating a partition takes, is waited for first). Under
--   REPEATABLE READ a duplicate committed after the transaction's snapshot raises 40001
--   (retry) instead.
--   Never fails for a missing partition: a day without one is recorded in the default
--   partition.
--   The wait is the unique index's own (the insert waits for the transaction holding the
--   same key): a claim takes no other lock than the table's, so claims of distinct serials
--   never wait on each other.
CREATE FUNCTION hivenet.claim_interface_serial(serial text, unified_serial text DEFAULT NULL,
    system_serial text DEFAULT NULL, nowait boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_serial ALIAS FOR serial; p_unified_serial ALIAS FOR unified_serial;
    p_system_serial ALIAS FOR system_serial; p_nowait ALIAS FOR nowait;
    v_mark text;  -- an assignment is a simple expression; PERFORM would run the executor
BEGIN
    IF p_nowait THEN
        -- The table's lock first, waited for as by any statement: a maintain() creating a
        -- partition holds the table a moment, and under the nowait path's lock_timeout that
        -- wait would read as a claim of this serial in progress (a false HN020).
        LOCK TABLE hivenet.interface_call IN ROW EXCLUSIVE MODE;
        PERFORM hivenet._claim_interface_serial_nowait(p_serial, p_unified_serial,
                                                       p_system_serial);
        v_mark := set_config('hivenet.interface_claimed', 'on', true);
        RETURN;
    END IF;
    -- Fast path, run on every incoming call: one statement (its plan cached by the session)
    -- that records the call only when every check of the full path surely passes, the same
    -- generated expressions folded into its WHERE: a valid serial (its time read only then:
    -- casts may fail on others), inside the window, well-shaped carried serials, every
    -- instance owned, the day's partition there. Anything else, a duplicate included, goes
    -- to the full path, which decides and raises the exact error. Only for the transaction's
    -- first claim (hivenet.interface_claimed, set locally at the end of every claim, undone
    -- by a rolled-back savepoint as the claim's locks are): then it holds no lock on the
    -- table yet, so its list of partitions is refreshed when the insert takes that lock (see
    -- the full path).
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    SELECT p_serial, c.local_time::date, p_unified_serial, p_system_serial, c.now
    FROM (SELECT hivenet._serial_time('interface', p_serial) AS local_time,  -- NULL: invalid
                 hivenet.now() AS now
          OFFSET 0) c  -- one clock reading for the window and recorded_at
    WHERE c.local_time >= hivenet._caller_now(c.now, 'earliest')
                          - hivenet._setting_constant('interface_window')::interval
      AND c.local_time <= hivenet._caller_now(c.now, 'latest')
                          + hivenet._setting_constant('interface_future_tolerance')::interval
      AND coalesce(hivenet._serial_shaped('unified', p_unified_serial), true)
      AND coalesce(hivenet._serial_shaped('system', p_system_serial), true)
      AND hivenet._setting_constant('owned_instances') = 'all'
      AND to_regclass('hivenet.interface_call_' || to_char(c.local_time, 'YYYYMMDD'))
          IS NOT NULL
      AND current_setting('hivenet.interface_claimed', true) IS DISTINCT FROM 'on'
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_interface_serial_checked(p_serial, p_unified_serial,
                                                        p_system_serial);
    END IF;
    v_mark := set_config('hivenet.interface_claimed', 'on', true);
END $$;

-- Drops one expired partition, waiting at most a second for claims in flight (DROP locks the
-- parent ACCESS EXCLUSIVE): a long claim transaction makes maintain() skip, not stall claims.
CREATE FUNCTION hivenet._drop_interface_partition(p_partition regclass) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
BEGIN
    EXECUTE format('DROP TABLE %s', p_partition);
END $$;

-- Part of maintain(): creates the partitions of every day a claim may be dated now (window
-- back, tolerance and interface_partitions_ahead forward), and drops the days whose calls are
-- all older than the retention (never less than the window: the check needs those rows).
CREATE FUNCTION hivenet._maintain_interface_calls() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    -- Days are the serials' own (their callers' local dates), read as claim_interface_serial's
    -- window reads them (_caller_now).
    v_earliest timestamp := hivenet._caller_now(v_now, 'earliest');
    v_latest timestamp := hivenet._caller_now(v_now, 'latest');
    v_window interval := hivenet._setting_value('interface_window')::interval;
    v_tolerance interval := hivenet._setting_value('interface_future_tolerance')::interval;
    v_keep interval := greatest(hivenet._setting_value('interface_retention')::interval,
                                v_window + v_tolerance);
    v_ahead interval := hivenet._setting_value('interface_partitions_ahead')::interval;
    v_day date;
    v_partition record;
BEGIN
    DELETE FROM hivenet.interface_call_default
    WHERE (serial_day + 1) < v_earliest - v_keep - interval '1 hour';
    FOR v_day IN
        SELECT generate_series((v_earliest - v_window)::date,
                               (v_latest + greatest(v_tolerance, v_ahead))::date,
                               interval '1 day')::date
    LOOP
        PERFORM hivenet._create_interface_partition(v_day);
    END LOOP;
    -- An hour of margin: a claim that read the clock just before never loses its partition.
    FOR v_partition IN
        SELECT c.oid::regclass AS partition, c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'hivenet.interface_call'::regclass
          AND c.relname ~ '^interface_call_[0-9]{8}$'
          AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)
              < v_earliest - v_keep - interval '1 hour'
        ORDER BY c.relname
    LOOP
        BEGIN
            PERFORM hivenet._drop_interface_partition(v_partition.partition);
        EXCEPTION WHEN lock_not_available THEN
            RAISE WARNING 'hivenet.maintain: % not dropped, claims in progress; next run',
                v_partition.relname;
        END;
    END LOOP;
END $$;

SELECT hivenet._maintain_interface_calls();
