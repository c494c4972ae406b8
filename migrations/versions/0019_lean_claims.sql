-- Revision 0019: lean claims (issue 13). claim_interface_serial and claim take no advisory
-- lock any more (the unique index's own wait serves every claim; nowait runs under the
-- shortest lock_timeout instead) and record the plain case with one statement, handing
-- everything else to their full paths (_claim_interface_serial_checked, _claim_checked) for
-- the exact error. Redefines claim_interface_serial and claim; drops _interface_lock_space and
-- _claim_lock_space. Also parse.sql's generated shape checks: the length, then a regex whose
-- last run is unbounded (three times faster than {24}); redefines _layout_sql and
-- _compile_layouts and rewrites the generated functions.

-- hivenet_db/sql/dedup.sql
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
    -- definition (parse.sql, _serial_valid). What it does not vouch for, parse_serial
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

-- The full path under the shortest lock_timeout: where the insert would wait for another
-- transaction's uncommitted claim of the same serial, it raises HN020 at once. Its own function
-- (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of the
-- EXCEPTION block stays off the default path (as _begin_attempt_nowait, requests.sql).
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
--   millisecond for another lock: a maintain() attaching a partition, rarely the table's
--   growth under heavy load). Under REPEATABLE READ a duplicate committed after the
--   transaction's snapshot raises 40001 (retry) instead.
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

DROP FUNCTION hivenet._interface_lock_space();

-- hivenet_db/sql/claims.sql
-- The full path of claim (its contract below): each check with its exact error, the insert,
-- and the retaking of an expired claim. The fast path hands it every claim it did not take.
-- Runs as its caller, the SECURITY DEFINER claim (the table's owner).
CREATE FUNCTION hivenet._claim_checked(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_expires timestamptz;
BEGIN
    PERFORM hivenet._check_claim_namespace(p_namespace);
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim key %s of namespace %s must be 1 to 1000 bytes',
                             hivenet._shown(p_key), hivenet._shown(p_namespace));
    END IF;
    SELECT v_now + n.expiry INTO v_expires
    FROM hivenet.claim_namespace n WHERE n.namespace = p_namespace;
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    VALUES (p_namespace, p_key, v_now, v_expires)
    ON CONFLICT (namespace, key) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Taken before; free again if it expired. A concurrent retaking holds the row: this waits
    -- for it, then finds the claim unexpired (or, under REPEATABLE READ, raises 40001).
    UPDATE hivenet.claim_record r SET claimed_at = v_now, expires_at = v_expires
    WHERE r.namespace = p_namespace AND r.key = p_key AND r.expires_at <= v_now;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken (until %s)',
                             hivenet._shown(p_namespace), hivenet._shown(p_key), v_expires);
    END IF;
END $$;

-- The full path under the shortest lock_timeout: where it would wait for another transaction
-- taking the same claim, it raises HN040 at once. Its own function (SET clause) so the
-- caller's lock_timeout is untouched, and the subtransaction of the EXCEPTION block stays off
-- the default path (as _begin_attempt_nowait, requests.sql).
CREATE FUNCTION hivenet._claim_nowait(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    PERFORM hivenet._claim_checked(p_namespace, p_key);
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN040',
        MESSAGE = format('claim %s / %s is being taken by another transaction in progress '
                         '(nowait)', hivenet._shown(p_namespace), hivenet._shown(p_key));
END $$;

-- hivenet.claim(namespace, key, nowait default false) → void
--   Takes the claim (namespace, key) in the caller's transaction: it commits or vanishes with
--   that transaction. A claim whose namespace expiry has passed counts as free (maintain()
--   deletes such rows later; until then they still block nobody).
--   Raises HN001 when namespace or key is NULL, empty, or longer than 200 / 1000 bytes; HN040
--   when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also when it would wait over a millisecond for another lock, rarely:
--   the table's growth under heavy load). Under REPEATABLE READ a claim committed after the
--   transaction's snapshot raises 40001 (retry) instead.
--   The wait is the primary key's own (the insert waits for the transaction holding the same
--   key): claims of distinct keys never wait on each other.
CREATE OR REPLACE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_nowait THEN
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

DROP FUNCTION hivenet._claim_lock_space();

-- hivenet_db/sql/parse.sql
-- The SQL expressions (on a text p_serial) that read serials of format p_format: the
-- generators of the functions below. Positions and checks come from the segments only.
--   shape: a boolean expression, true when p_serial has the characters of every printed
--     segment (charset of each field, digits for time and seq, literals as they are); every
--     valid serial has them. Its length, then one regex whose last run is unbounded: a
--     bounded run ({24}) makes PostgreSQL's regex three times slower (measured, issue 13).
--   valid: true when p_serial is valid, false when it may not be (parse_serial decides then):
--     the shape, digit bounds, months, days of the month (leap years included), hours,
--     minutes, seconds, a seq other than 0. The casts sit behind the shape, in a CASE.
--   time_of: the time printed in a valid serial (midnight for a date), NULL when none.
--   fields: field name → the expression of its printed value.
--   scope: the counter scope of a valid serial (its counter-key fields, allocate.sql), NULL
--     when one of them is not printed.
CREATE OR REPLACE FUNCTION hivenet._layout_sql(p_format hivenet.format, OUT shape text, OUT valid text,
    OUT time_of text, OUT fields jsonb, OUT scope text)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_seg jsonb;
    v_pos integer := 1;
    v_width integer;
    v_part text;
    v_type text;
    v_checks text[] := '{}';
    v_scope text[] := '{}';
    v_unprinted_key boolean := false;
    v_pattern text;
    v_token record;
    v_at integer;
    v_time jsonb;
    v_classes text[] := '{}';  -- the shape as character classes (or literals) and counts
    v_counts integer[] := '{}';
    v_class text;
BEGIN
    shape := '';
    fields := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_format.segments) LOOP
        IF v_seg ? 'field' AND v_seg -> 'printed' = 'false' THEN
            v_unprinted_key := true;  -- only a counter key: nothing printed to read
            CONTINUE;
        ELSIF v_seg ? 'field' THEN
            v_width := (v_seg ->> 'width')::integer;
            v_part := format('substr(p_serial, %s, %s)', v_pos, v_width);
            -- The class of the field's own compiled regex ('^[0-9]{2}$').
            v_class := substring(v_seg ->> 'regex' FROM '^\^(\[[^]]*\])');
            fields := fields || jsonb_build_object(v_seg ->> 'field', v_part);
            v_type := CASE WHEN v_width <= 9 THEN 'integer' WHEN v_width <= 18 THEN 'bigint'
                           ELSE 'numeric' END;
            -- Bounds that digits alone meet need no check; a minimum of 1 is 'not all 0'.
            IF (v_seg ->> 'min')::numeric = 1 THEN
                v_checks := v_checks || format('%s <> %L', v_part, repeat('0', v_width));
            ELSIF (v_seg ->> 'min')::numeric > 0 THEN
                v_checks := v_checks || format('%s::%s >= %s', v_part, v_type, v_seg ->> 'min');
            END IF;
            IF (v_seg ->> 'max')::numeric < 10::numeric ^ v_width - 1 THEN
                v_checks := v_checks || format('%s::%s <= %s', v_part, v_type, v_seg ->> 'max');
            END IF;
            IF coalesce(v_seg -> 'counter', 'true') = 'true' THEN
                v_scope := v_scope || v_part;
            END IF;
        ELSIF v_seg ? 'literal' THEN
            v_width := length(v_seg ->> 'literal');
            v_class := v_seg ->> 'literal';  -- [0-9A-Za-z_-]: no regex meaning
        ELSIF v_seg ? 'time' THEN
            v_width := (v_seg ->> 'width')::integer;
            v_class := '[0-9]';
            -- The parts of its to_char pattern (formats.sql _time_pattern), as integers.
            v_time := '{}';
            v_pattern := v_seg ->> 'to_char';
            v_at := v_pos;
            WHILE v_pattern <> '' LOOP
                SELECT t.token, t.digits INTO v_token
                FROM (VALUES ('YYYY', 4, 1), ('HH24', 2, 2), ('YY', 2, 3), ('MM', 2, 4),
                             ('DD', 2, 5), ('MI', 2, 6), ('SS', 2, 7)) AS t(token, digits, o)
                WHERE starts_with(v_pattern, t.token) ORDER BY t.o LIMIT 1;
                v_time := v_time || jsonb_build_object(v_token.token,
                    format('substr(p_serial, %s, %s)::integer', v_at, v_token.digits));
                v_at := v_at + v_token.digits;
                v_pattern := substr(v_pattern, length(v_token.token) + 1);
            END LOOP;
            IF v_time ? 'YY' THEN  -- to_timestamp's YY: the year nearest to 2020
                v_time := v_time || jsonb_build_object('YYYY', format(
                    '(%1$s + CASE WHEN %1$s < 70 THEN 2000 ELSE 1900 END)', v_time ->> 'YY'));
            ELSE
                v_checks := v_checks || format('substr(p_serial, %s, 4) <> %L',
                    v_pos + strpos(v_seg ->> 'to_char', 'YYYY') - 1, '0000');
            END IF;
            IF v_time ? 'MM' THEN
                v_checks := v_checks || format('%s BETWEEN 1 AND 12', v_time ->> 'MM');
            END IF;
            IF v_time ? 'DD' THEN
                -- Days in month m: 30 + (m + m / 8) % 2, but February.
                v_checks := v_checks || format(
                    '%1$s >= 1 AND (%1$s <= 28 OR %1$s <= CASE %2$s WHEN 2 THEN 28 + '
                    '(%3$s %% 4 = 0 AND (%3$s %% 100 <> 0 OR %3$s %% 400 = 0))::integer '
                    'ELSE 30 + (%2$s + %2$s / 8) %% 2 END)',
                    v_time ->> 'DD', v_time ->> 'MM', v_time ->> 'YYYY');
            END IF;
            IF v_time ? 'HH24' THEN
                v_checks := v_checks || format('%s < 24', v_time ->> 'HH24');
            END IF;
            IF v_time ? 'MI' THEN
                v_checks := v_checks || format('%s < 60', v_time ->> 'MI');
            END IF;
            IF v_time ? 'SS' THEN
                v_checks := v_checks || format('%s < 60', v_time ->> 'SS');
            END IF;
            -- The last time segment, as parse_serial reports it.
            time_of := format('make_timestamp(%s, %s, %s, %s, %s, %s)', v_time ->> 'YYYY',
                              coalesce(v_time ->> 'MM', '1'), coalesce(v_time ->> 'DD', '1'),
                              coalesce(v_time ->> 'HH24', '0'), coalesce(v_time ->> 'MI', '0'),
                              coalesce(v_time ->> 'SS', '0'));
        ELSE
            v_width := p_format.seq_width;
            v_class := '[0-9]';
            v_checks := v_checks || format('substr(p_serial, %s, %s) <> %L', v_pos, v_width,
                                           repeat('0', v_width));
        END IF;
        -- Runs of one class are one piece: a shorter regex is a faster one.
        IF v_class LIKE '[%' AND v_class = v_classes[cardinality(v_classes)] THEN
            v_counts[cardinality(v_counts)] := v_counts[cardinality(v_counts)] + v_width;
        ELSE
            v_classes := v_classes || v_class;
            v_counts := v_counts || CASE WHEN v_class LIKE '[%' THEN v_width ELSE 1 END;
        END IF;
        v_pos := v_pos + v_width;
    END LOOP;
    shape := format('length(p_serial) = %s AND p_serial ~ %L', v_pos - 1,
        '^' || (SELECT string_agg(CASE WHEN c NOT LIKE '[%' THEN c
                                       WHEN o = cardinality(v_classes) THEN c || '*'
                                       ELSE format('%s{%s}', c, n) END, '' ORDER BY o)
                FROM unnest(v_classes, v_counts) WITH ORDINALITY AS u(c, n, o)) || '$');
    valid := format('CASE WHEN %s THEN %s ELSE false END', shape,
                    coalesce(array_to_string(v_checks, ' AND '), 'true'));
    scope := CASE WHEN v_unprinted_key THEN NULL WHEN v_scope = '{}' THEN '''''::text'
                  ELSE array_to_string(v_scope, ' || ') END;
END $$;

-- Rewrites the generated functions from hivenet.format (under the constants' lock, settings.sql
-- _lock_constants, after a change of kind p_op).
CREATE OR REPLACE FUNCTION hivenet._compile_layouts(p_op text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_valid text := '';
    v_shaped text := '';
    v_time text := '';
    v_field text := '';
    v_scope text := '';
    v_format record;
BEGIN
    PERFORM hivenet._lock_constants('hivenet.format', p_op);
    FOR v_format IN
        SELECT f.name, l.* FROM hivenet.format f, hivenet._layout_sql(f) l ORDER BY f.name
    LOOP
        v_valid := v_valid || format(' WHEN %L THEN %s', v_format.name, v_format.valid);
        v_shaped := v_shaped || format(' WHEN %L THEN %s', v_format.name, v_format.shape);
        -- NULL unless valid: the function is public (views), and casts of a serial that only
        -- looks right (month 99) would fail.
        v_time := v_time || format(' WHEN %L THEN %s', v_format.name,
            CASE WHEN v_format.time_of IS NULL THEN 'NULL::timestamp'
                 ELSE format('CASE WHEN %s THEN %s END', v_format.valid, v_format.time_of)
                 END);
        v_field := v_field || format(' WHEN %L THEN CASE p_field%s ELSE NULL::text END',
            v_format.name, (SELECT coalesce(string_agg(format(' WHEN %L THEN %s', f.key,
                                                              f.value), '' ORDER BY f.key),
                                            ' WHEN NULL THEN NULL')
                            FROM jsonb_each_text(v_format.fields) f));
        v_scope := v_scope || format(' WHEN %L THEN %s', v_format.name,
                                     coalesce(v_format.scope, 'NULL::text'));
    END LOOP;
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_valid(p_format text, '
                   'p_serial text) RETURNS boolean LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE NULL::boolean END; END', v_valid);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_shaped(p_format text, '
                   'p_serial text) RETURNS boolean LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE NULL::boolean END; END', v_shaped);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_time(p_format text, '
                   'p_serial text) RETURNS timestamp LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE coalesce(hivenet.parse_serial(p_serial, p_format) '
                   '->> ''datetime'', hivenet.parse_serial(p_serial, p_format) ->> ''date'')'
                   '::timestamp END; END', v_time);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_field(p_format text, '
                   'p_serial text, p_field text) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC '
                   'SELECT CASE p_format%s ELSE hivenet.parse_serial(p_serial, p_format) '
                   '->> p_field END; END', v_field);
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._serial_scope(p_format text, '
                   'p_serial text) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC SELECT '
                   'CASE p_format%s ELSE NULL::text END; END', v_scope);
END $$;

SELECT hivenet._compile_layouts('INSERT');

-- hivenet_db/sql/privileges.sql (the new functions: the owner's, called by the public ones)
REVOKE EXECUTE ON FUNCTION
    hivenet._claim_interface_serial_checked(text, text, text),
    hivenet._claim_interface_serial_nowait(text, text, text),
    hivenet._claim_checked(text, text),
    hivenet._claim_nowait(text, text)
FROM PUBLIC;
