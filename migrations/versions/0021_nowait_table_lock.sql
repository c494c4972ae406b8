-- Revision 0021: claim_interface_serial and claim with nowait first take their table's lock
-- (ROW EXCLUSIVE, as their insert does) with the caller's own lock_timeout: under the nowait
-- path's 1 ms one, a maintain() creating a partition (its lock on the whole table) made a
-- claim of a serial nobody else had claimed fail with HN020 / HN040. Redefines both.

-- hivenet_db/sql/dedup.sql
-- hivenet.claim_interface_serial(serial, unified_serial default null,
--                                system_serial default null, nowait default false) → void
--   Records an incoming interface call in the caller's transaction: its claim commits or
--   vanishes with that transaction. The unified and system serials are recorded for the call
--   chain, never checked for duplicates (HiveNet rule 1).
--   Raises HN001 when serial is no valid interface serial (as parse_serial), or
--   unified_serial / system_serial is given but not shaped as its format's layout says (the
--   characters of each field, digits for the date and seq: only their shape is checked;
--   parse.sql _serial_shaped); HN021 when the serial's own
--   time (its caller's local time, in any zone from UTC-12 to UTC+14) is older than the
--   setting interface_window or later than now + interface_future_tolerance in every such
--   zone, unless this database issued it (its clock stepped back: allocate.sql); HN020 when
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
CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL,
    p_system_serial text DEFAULT NULL, p_nowait boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
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
    WHERE c.local_time >= (c.now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[1]
                          - hivenet._setting_constant('interface_window')::interval
      AND c.local_time <= (c.now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[2]
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


-- hivenet_db/sql/claims.sql
-- hivenet.claim(namespace, key, nowait default false) → void
--   Takes the claim (namespace, key) in the caller's transaction: it commits or vanishes with
--   that transaction. A claim whose namespace expiry has passed counts as free (maintain()
--   deletes such rows later; until then they still block nobody).
--   Raises HN001 when namespace or key is NULL, empty, or longer than 200 / 1000 bytes; HN040
--   when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also when it would wait over a millisecond for another lock, rarely:
--   the table's growth under heavy load; a lock on the whole table is waited for first).
--   Under REPEATABLE READ a claim committed after the transaction's snapshot raises 40001
--   (retry) instead.
--   The wait is the primary key's own (the insert waits for the transaction holding the same
--   key): claims of distinct keys never wait on each other.
CREATE OR REPLACE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_nowait THEN
        -- The table's lock first, waited for as by any statement (as claim_interface_serial,
        -- dedup.sql): a wait for it under the nowait path's lock_timeout would read as a
        -- claim of this key in progress (a false HN040).
        LOCK TABLE hivenet.claim_record IN ROW EXCLUSIVE MODE;
        PERFORM hivenet._claim_nowait(p_namespace, p_key);
        RETURN;
    END IF;
    -- Fast path: one statement (its plan cached by the session) that takes a free claim of a
    -- well-sized namespace and key; anything else, a taken claim included, goes to the full
    -- path, which decides and raises the exact error.
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    SELECT p_namespace, p_key, c.now,
           c.now + (SELECT n.expiry FROM hivenet.claim_namespace n
                    WHERE n.namespace = p_namespace)
    FROM (SELECT hivenet.now() AS now OFFSET 0) c  -- one clock reading for both times
    WHERE octet_length(p_namespace) BETWEEN 1 AND 200
      AND octet_length(p_key) BETWEEN 1 AND 1000
    ON CONFLICT (namespace, key) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_checked(p_namespace, p_key);
    END IF;
END $$;

