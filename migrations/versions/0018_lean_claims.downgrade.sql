-- Revision 0018 down: every claim takes an advisory lock again (so a nowait claim sees one in
-- flight), in one PL/pgSQL body each; the full paths and nowait wrappers dropped. The bodies
-- are those of revisions 0016 (claim_interface_serial) and 0010 (claim).

-- hivenet_db/sql/dedup.sql
-- Advisory lock namespace of claims in progress: (this key, hash of the serial). Every claim
-- takes it until commit, so a nowait claim can see at once that another one is in flight.
CREATE FUNCTION hivenet._interface_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210201 $$;

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
    v_local timestamp;
    v_day date;
    v_from timestamp;
    v_to timestamp;
    v_window interval;
    v_tolerance interval;
    v_recorded timestamptz;
BEGIN
    -- This runs on every incoming call: the layout of format 'interface' checked by one
    -- inlined expression generated from its definition (parse.sql, _serial_valid; a call of
    -- a function with SET search_path costs). What it does not vouch for, parse_serial
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
    IF to_regclass('hivenet.interface_call_' || to_char(v_local, 'YYYYMMDD')) IS NULL THEN
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

DROP FUNCTION hivenet._claim_interface_serial_nowait(text, text, text);
DROP FUNCTION hivenet._claim_interface_serial_checked(text, text, text);

-- hivenet_db/sql/claims.sql
-- Advisory lock namespace of claims in progress: (this key, hash of namespace and key), held
-- by every claim until commit so that a nowait claim sees at once that one is in flight.
CREATE FUNCTION hivenet._claim_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210202 $$;

-- hivenet.claim(namespace, key, nowait default false) → void
--   Takes the claim (namespace, key) in the caller's transaction: it commits or vanishes with
--   that transaction. A claim whose namespace expiry has passed counts as free (maintain()
--   deletes such rows later; until then they still block nobody).
--   Raises HN001 when namespace or key is NULL, empty, or longer than 200 / 1000 bytes; HN040
--   when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also, once in about 4 billion, for another key claimed at that
--   moment whose 32-bit hash is the same). Under REPEATABLE READ a claim committed after the
--   transaction's snapshot raises 40001 (retry) instead.
CREATE OR REPLACE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_lock integer;
    v_expires timestamptz;
BEGIN
    PERFORM hivenet._check_claim_namespace(p_namespace);
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim key %s of namespace %s must be 1 to 1000 bytes',
                             hivenet._shown(p_key), hivenet._shown(p_namespace));
    END IF;
    v_lock := hashtext(p_namespace || chr(31) || p_key);
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._claim_lock_space(), v_lock);
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._claim_lock_space(), v_lock) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is being taken by another transaction in progress '
                             '(nowait)', hivenet._shown(p_namespace), hivenet._shown(p_key));
    END IF;
    SELECT v_now + n.expiry INTO v_expires
    FROM hivenet.claim_namespace n WHERE n.namespace = p_namespace;
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    VALUES (p_namespace, p_key, v_now, v_expires)
    ON CONFLICT (namespace, key) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Rare path: taken before; free again if it expired.
    UPDATE hivenet.claim_record r SET claimed_at = v_now, expires_at = v_expires
    WHERE r.namespace = p_namespace AND r.key = p_key AND r.expires_at <= v_now;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken (until %s)',
                             hivenet._shown(p_namespace), hivenet._shown(p_key), v_expires);
    END IF;
END $$;

DROP FUNCTION hivenet._claim_nowait(text, text);
DROP FUNCTION hivenet._claim_checked(text, text);

-- hivenet_db/sql/privileges.sql
REVOKE EXECUTE ON FUNCTION
    hivenet._interface_lock_space(),
    hivenet._claim_lock_space()
FROM PUBLIC;
