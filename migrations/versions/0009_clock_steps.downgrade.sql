-- Downgrade of revision 0009, frozen: the functions as revision 0008 left them, without
-- clock sequences or clock_unit.

-- The normalised format row for a definition, or HN001 naming what is wrong.
-- Field segments get a "regex" so allocation checks them with one match.
CREATE OR REPLACE FUNCTION hivenet._compile_format(p_name text, p_segments jsonb,
    p_borrow_next_period boolean, p_description text) RETURNS hivenet.format
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_row hivenet.format;
    v_segments jsonb := '[]';
    v_seg jsonb;
    v_kind text;
    v_width integer;
    v_charset text;
    v_time record;
    v_finest text := 'never';
    v_headroom bigint;
    v_regexes text[] := '{}';
    v_pattern text := '';  -- to_char pattern of the segments read so far
    v_unknown text;
    v_printed boolean;
    v_counter boolean;
    v_keys integer[] := '{}';
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,30}$' THEN
        PERFORM hivenet._format_error(p_name, 'name must match [a-z][a-z0-9_]{0,30}');
    END IF;
    IF jsonb_typeof(p_segments) IS DISTINCT FROM 'array' OR jsonb_array_length(p_segments) = 0 THEN
        PERFORM hivenet._format_error(p_name, 'segments must be a non-empty JSON array');
    END IF;
    v_row.name := p_name;
    v_row.length := 0;
    v_row.field_names := '{}';
    v_row.field_min := '{}';
    v_row.field_max := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_segments) LOOP
        IF jsonb_typeof(v_seg) <> 'object' THEN
            PERFORM hivenet._format_error(p_name, format('segment %s is not an object',
                                                         hivenet._shown(v_seg::text)));
        END IF;
        SELECT k INTO v_kind FROM jsonb_object_keys(v_seg) AS k
        WHERE k IN ('field', 'literal', 'time', 'seq');
        IF v_kind IS NULL
           OR (SELECT count(*) FROM jsonb_object_keys(v_seg) AS k
               WHERE k IN ('field', 'literal', 'time', 'seq')) <> 1 THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s needs exactly one of the kinds field, literal, time, seq (its keys: '
                '%s)', hivenet._shown(v_seg::text),
                (SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k)
                 FROM jsonb_object_keys(v_seg) AS k)));
        END IF;
        SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k) INTO v_unknown
        FROM jsonb_object_keys(v_seg) AS k
        WHERE k <> ALL (CASE v_kind
            WHEN 'field' THEN ARRAY['field', 'width', 'charset', 'min', 'max', 'printed', 'counter']
            WHEN 'literal' THEN ARRAY['literal'] WHEN 'time' THEN ARRAY['time']
            ELSE ARRAY['seq', 'reset'] END);
        IF v_unknown IS NOT NULL THEN
            PERFORM hivenet._format_error(p_name, format(
                '%s segment %s has unknown keys %s (a %s segment takes %s)', v_kind,
                hivenet._shown(v_seg::text), v_unknown, v_kind, CASE v_kind
                WHEN 'field' THEN 'field, width, charset, min, max, printed, counter'
                WHEN 'seq' THEN 'seq, reset' ELSE v_kind END));
        END IF;
        CASE v_kind
        WHEN 'field' THEN
            v_width := CASE WHEN jsonb_typeof(v_seg -> 'width') = 'number'
                            THEN (v_seg ->> 'width')::numeric::integer END;
            v_charset := coalesce(v_seg ->> 'charset', 'alnum');
            IF (v_seg ->> 'field') !~ '^[a-z][a-z0-9_]{0,30}$'
               OR (v_seg ->> 'field') IN ('format', 'date', 'datetime', 'seq')
               OR (v_seg ->> 'field') = ANY (v_row.field_names) THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field name %s must be a new name matching [a-z][a-z0-9_]{0,30} '
                    '(not format, date, datetime or seq)', v_seg -> 'field'));
            END IF;
            IF v_width IS NULL OR v_width NOT BETWEEN 1 AND 40 THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: width must be 1 to 40', v_seg -> 'field'));
            END IF;
            IF v_charset NOT IN ('digit', 'alnum', 'upper_alnum', 'alpha') THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: charset must be digit, alnum, upper_alnum or alpha',
                    v_seg -> 'field'));
            END IF;
            IF (v_seg ? 'min' OR v_seg ? 'max') AND (v_charset <> 'digit'
                OR coalesce(jsonb_typeof(v_seg -> 'min'), 'number') <> 'number'
                OR coalesce(jsonb_typeof(v_seg -> 'max'), 'number') <> 'number') THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: min and max are numbers, for digit fields only', v_seg -> 'field'));
            END IF;
            IF coalesce(jsonb_typeof(v_seg -> 'printed'), 'boolean') <> 'boolean'
               OR coalesce(jsonb_typeof(v_seg -> 'counter'), 'boolean') <> 'boolean' THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: printed and counter are true or false', v_seg -> 'field'));
            END IF;
            v_printed := coalesce((v_seg ->> 'printed')::boolean, true);
            v_counter := coalesce((v_seg ->> 'counter')::boolean, true);
            IF NOT v_printed AND NOT v_counter THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s is neither printed nor part of the counter key', v_seg -> 'field'));
            END IF;
            v_row.field_names := v_row.field_names || (v_seg ->> 'field');
            v_row.field_min := v_row.field_min || (v_seg ->> 'min')::numeric;
            v_row.field_max := v_row.field_max || (v_seg ->> 'max')::numeric;
            v_regexes := v_regexes || format('%s{%s}', CASE v_charset
                    WHEN 'digit' THEN '[0-9]' WHEN 'alnum' THEN '[0-9A-Za-z]'
                    WHEN 'upper_alnum' THEN '[0-9A-Z]' ELSE '[A-Za-z]' END, v_width);
            -- printed / counter are kept only when false: definitions without them stay as
            -- they were stored before these keys existed.
            v_segments := v_segments || jsonb_build_array(v_seg - 'printed' - 'counter'
                || jsonb_build_object('width', v_width, 'charset', v_charset,
                                      'regex', '^' || v_regexes[cardinality(v_regexes)] || '$')
                || CASE WHEN v_printed THEN '{}' ELSE '{"printed": false}' END::jsonb
                || CASE WHEN v_counter THEN '{}' ELSE '{"counter": false}' END::jsonb);
            IF v_counter THEN
                v_keys := v_keys || cardinality(v_regexes);
            END IF;
            IF v_printed THEN
                -- Field values and literals are [0-9A-Za-z_-]: safe inside a quoted to_char
                -- text.
                v_pattern := v_pattern || format('"%%%s$s"', cardinality(v_regexes));
            ELSE
                v_width := 0;  -- takes no room in the serial
            END IF;
        WHEN 'literal' THEN
            IF jsonb_typeof(v_seg -> 'literal') <> 'string'
               OR (v_seg ->> 'literal') !~ '^[0-9A-Za-z_-]{1,40}$' THEN
                PERFORM hivenet._format_error(p_name, format(
                    'literal %s must be 1 to 40 characters of [0-9A-Za-z_-]', v_seg -> 'literal'));
            END IF;
            v_width := length(v_seg ->> 'literal');
            v_segments := v_segments || jsonb_build_array(v_seg);
            v_pattern := v_pattern || format('"%s"', v_seg ->> 'literal');
        WHEN 'time' THEN
            SELECT * INTO v_time FROM hivenet._time_pattern(v_seg ->> 'time');
            IF v_time.width IS NULL THEN
                PERFORM hivenet._format_error(p_name, format(
                    'unknown time pattern %s (known: YYYY, YYYYMM, YYMMDD, YYYYMMDD, YYYYMMDDHH, '
                    'YYYYMMDDHHMI, YYMMDDHHMISS, yyMMddHHmmss, YYYYMMDDHHMISS)', v_seg -> 'time'));
            END IF;
            v_width := v_time.width;
            IF hivenet._unit_rank(v_time.resolution) < hivenet._unit_rank(v_finest) THEN
                v_finest := v_time.resolution;
            END IF;
            v_segments := v_segments || jsonb_build_array(
                v_seg || jsonb_build_object('to_char', v_time.to_char_pattern,
                                            'width', v_time.width,
                                            'resolution', v_time.resolution));
            v_pattern := v_pattern || v_time.to_char_pattern;
        ELSE -- seq
            IF v_row.seq_width IS NOT NULL THEN
                PERFORM hivenet._format_error(p_name, 'a format has exactly one seq segment');
            END IF;
            v_width := CASE WHEN jsonb_typeof(v_seg -> 'seq') = 'number'
                            THEN (v_seg ->> 'seq')::numeric::integer END;
            v_row.reset := coalesce(v_seg ->> 'reset', 'day');
            IF v_width IS NULL OR v_width NOT BETWEEN 1 AND 17 THEN
                PERFORM hivenet._format_error(p_name, 'seq width must be 1 to 17');
            END IF;
            IF hivenet._unit_rank(v_row.reset) IS NULL THEN
                PERFORM hivenet._format_error(p_name, format(
                    'reset %s must be second, minute, hour, day, month, year or never',
                    v_seg -> 'reset'));
            END IF;
            v_row.seq_width := v_width;
            v_row.head_pattern := v_pattern;
            v_pattern := '';
            v_segments := v_segments || jsonb_build_array(jsonb_build_object(
                'seq', v_width, 'reset', v_row.reset));
        END CASE;
        v_row.length := v_row.length + v_width;
    END LOOP;
    IF v_row.seq_width IS NULL THEN
        PERFORM hivenet._format_error(p_name, 'a format needs one seq segment');
    END IF;
    IF v_row.length > 64 THEN
        PERFORM hivenet._format_error(p_name, format('total length %s exceeds 64', v_row.length));
    END IF;
    -- Serials of two periods must differ in their printed time, or a reset would repeat them.
    IF hivenet._unit_rank(v_finest) > hivenet._unit_rank(v_row.reset) THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq resets every %s but the time fields only show the %s: serials of two periods '
            'would collide', v_row.reset, v_finest));
    END IF;
    v_row.capacity := (10::numeric ^ v_row.seq_width)::bigint - 1;
    -- Largest power of ten that keeps period * stride inside a bigint; at least 10x capacity,
    -- so calls that keep failing after exhaustion never spill into the next period.
    v_headroom := floor(log(9.2e18 / (hivenet._max_period_index(v_row.reset) + 1)))::bigint;
    IF v_headroom < v_row.seq_width + 1 THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq width %s is too wide for a counter that resets every %s (at most %s digits)',
            v_row.seq_width, v_row.reset, v_headroom - 1));
    END IF;
    v_row.stride := (10::numeric ^ v_headroom)::bigint;
    -- Space is in no charset and '?' stands for a missing value, so a match proves every value
    -- is present and valid (one regex match per allocation instead of one per field).
    v_row.field_pattern := '^' || array_to_string(v_regexes, ' ') || '$';
    v_row.bounded_fields := ARRAY(
        SELECT i FROM generate_subscripts(v_row.field_names, 1) AS i
        WHERE v_row.field_min[i] IS NOT NULL OR v_row.field_max[i] IS NOT NULL);
    v_row.tail_pattern := v_pattern;
    v_row.key_fields := CASE WHEN cardinality(v_keys) < cardinality(v_row.field_names)
                             THEN v_keys END;
    v_row.segments := v_segments;
    v_row.borrow_next_period := coalesce(p_borrow_next_period, false);
    v_row.builtin := false;
    v_row.description := p_description;
    RETURN v_row;
END $$;

-- hivenet.define_format(name, segments, borrow_next_period, description) → void
--   Defines a custom format. Raises HN001 for an invalid definition, and when the name is
--   taken by a different definition (redefining would break uniqueness of issued serials).
--   Defining the same format again is a no-op. Counters left by an earlier definition of the
--   name that was rolled back start over when they do not fit this one: every serial they
--   issued belonged to that rolled-back transaction. (Only databases from before revision
--   0006 can hold such counters: scopes now get their own only from maintain(), for
--   committed formats.) The format's cold counter is created with it (allocate.sql), and
--   vanishes with it on a rollback. Never delete rows of hivenet.format by hand. Takes a row lock on the new name, and a new
--   format waits for another transaction defining one (or changing a setting) to commit.
CREATE OR REPLACE FUNCTION hivenet.define_format(p_name text, p_segments jsonb,
    p_borrow_next_period boolean DEFAULT false, p_description text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_new hivenet.format := hivenet._compile_format(p_name, p_segments, p_borrow_next_period,
                                                    p_description);
    v_old hivenet.format;
    v_leftover text;
BEGIN
    INSERT INTO hivenet.format VALUES (v_new.*) ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        FOR v_leftover IN
            UPDATE hivenet.scope SET definition = md5(v_new.segments::text)
            WHERE format = p_name AND definition <> md5(v_new.segments::text)
            RETURNING sequence_name
        LOOP
            PERFORM setval(('hivenet.' || quote_ident(v_leftover))::regclass, 0, true);
        END LOOP;
    ELSE
        SELECT * INTO v_old FROM hivenet.format WHERE name = p_name;
        IF v_old.segments <> v_new.segments
           OR v_old.borrow_next_period <> v_new.borrow_next_period THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('format %L is already defined differently (as %s)', p_name,
                                 hivenet._shown(v_old.segments::text));
        END IF;
    END IF;
END $$;

-- Trigger: every format gets its cold counter in the transaction that defines it.
CREATE OR REPLACE FUNCTION hivenet._create_cold_counter() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(NEW.name));
    RETURN NULL;
END $$;

-- Gives scope p_scope of format p_format its own sequence, continuing after every value its
-- cold counter has issued (and no earlier than the clock's period), and records the scope.
-- Commits with the caller, who must be the owner's maintain() or prepare_scope(): holds the
-- format's cold lock exclusive until then, so cold allocations of the format wait for that
-- commit (a short transaction) and then see the new sequence. Safe to run twice.
CREATE OR REPLACE FUNCTION hivenet._promote_scope(p_format hivenet.format, p_scope text, p_fields jsonb)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, p_scope);
    v_seq regclass;
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format.name));
    -- Another promotion of the scope may have committed while we waited for the lock.
    IF hivenet._committed_sequence(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE SEQUENCE hivenet.%I AS bigint MINVALUE 0 START 0', v_name);
    v_seq := ('hivenet.' || quote_ident(v_name))::regclass;
    PERFORM setval(v_seq, greatest(
        pg_sequence_last_value(
            ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass),
        hivenet._period_index(hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                              p_format.reset) * p_format.stride,
        0), true);
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), v_name)
    ON CONFLICT DO NOTHING;
END $$;

-- p_count serials of format p_format for field values p_values from counter p_seq (the
-- scope's own sequence, or the format's cold counter; p_scope names it in messages), printed
-- at the clock's time in the business time zone. HN010 when the period is exhausted.
CREATE OR REPLACE FUNCTION hivenet._issue(p_seq regclass, p_format hivenet.format, p_values text[],
    p_count integer, p_scope text) RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_local timestamp := hivenet.now() AT TIME ZONE hivenet._setting_constant('time_zone');
    v_period bigint := hivenet._period_index(v_local, p_format.reset);
    v_head text := format(p_format.head_pattern, VARIADIC p_values);
    v_tail text := format(p_format.tail_pattern, VARIADIC p_values);
    v_raw bigint;
    v_print timestamp;
    v_out text[] := '{}';
BEGIN
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(p_seq);
        IF v_raw / p_format.stride < v_period
           OR v_raw % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            v_raw := hivenet._advance(p_seq, p_format, v_period, p_scope);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / p_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / p_format.stride, p_format.reset) END;
        -- concat, not ||: to_char of an empty pattern is NULL.
        v_out := v_out || concat(to_char(v_print, v_head),
                                 lpad((v_raw % p_format.stride)::text, p_format.seq_width, '0'),
                                 to_char(v_print, v_tail));
    END LOOP;
    RETURN v_out;
END $$;

-- hivenet.claim_interface_serial(serial, unified_serial default null,
--                                system_serial default null, nowait default false) → void
--   Records an incoming interface call in the caller's transaction: its claim commits or
--   vanishes with that transaction. The unified and system serials are recorded for the call
--   chain, never checked for duplicates (HiveNet rule 1).
--   Raises HN001 when serial is no valid 39-character interface serial, or unified_serial /
--   system_serial is given but not 28 / 30 characters shaped as the standard says (10
--   letters or digits, then digits: only their shape is checked); HN021 when the serial's own
--   time (read in the business time zone) is older than the setting interface_window or later
--   than now + interface_future_tolerance; HN020 when it is already recorded.
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
    v_at timestamptz;
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
    v_at := v_local AT TIME ZONE hivenet._setting_constant('time_zone');
    IF v_at < v_now - v_window OR v_at > v_now + v_tolerance THEN
        RAISE EXCEPTION USING ERRCODE = 'HN021',
            MESSAGE = format('interface serial %s was issued at %s, outside the duplicate-check '
                             'window from %s to %s', p_serial, v_at, v_now - v_window,
                             v_now + v_tolerance);
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

-- Part of maintain(): creates the partitions of every day a claim may be dated now (window
-- back, tolerance and interface_partitions_ahead forward), and drops the days whose calls are
-- all older than the retention (never less than the window: the check needs those rows).
CREATE OR REPLACE FUNCTION hivenet._maintain_interface_calls() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_zone text := hivenet._setting_value('time_zone');
    v_window interval := hivenet._setting_value('interface_window')::interval;
    v_tolerance interval := hivenet._setting_value('interface_future_tolerance')::interval;
    v_keep interval := greatest(hivenet._setting_value('interface_retention')::interval,
                                v_window + v_tolerance);
    v_ahead interval := hivenet._setting_value('interface_partitions_ahead')::interval;
    v_day date;
    v_partition record;
BEGIN
    DELETE FROM hivenet.interface_call_default
    WHERE (serial_day + 1) AT TIME ZONE v_zone < v_now - v_keep - interval '1 hour';
    FOR v_day IN
        SELECT generate_series(((v_now - v_window) AT TIME ZONE v_zone)::date,
                               ((v_now + greatest(v_tolerance, v_ahead)) AT TIME ZONE v_zone)::date,
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
          AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1) AT TIME ZONE v_zone
              < v_now - v_keep - interval '1 hour'
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

DROP FUNCTION hivenet._refuse_outside_window(text, timestamp, timestamp, timestamp),
    hivenet._caller_zones(), hivenet._latest_issued(text, text),
    hivenet._period_last_instant(bigint, text, text), hivenet._raise_clock(regclass, bigint),
    hivenet._create_clock(text, bigint), hivenet._clock_sequence(regclass),
    hivenet._clock_sequence_name(text);

DO $$
DECLARE
    v_clock text;
BEGIN
    FOR v_clock IN
        SELECT c.relname FROM pg_class c
        WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relkind = 'S'
          AND (c.relname LIKE 'clk\_%' OR c.relname LIKE 'clkcold\_%')
        ORDER BY 1
    LOOP
        EXECUTE format('DROP SEQUENCE hivenet.%I', v_clock);
    END LOOP;
END $$;

ALTER TABLE hivenet.format DROP COLUMN clock_unit;
UPDATE hivenet.format SET name = name;  -- rewrites _format_constant without the column
