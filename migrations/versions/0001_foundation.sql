-- Revision 0001, frozen: the SQL this revision applied when it was written
-- (hivenet_db/sql/{settings,clock,formats,registry,loopback,allocate,parse,maintain}.sql as of 2026-11-21). Never edit it: later
-- changes go into new revisions.

-- hivenet_db/sql/settings.sql
-- Settings: one table, changed with plain UPDATE by an administrator.
-- Every value is checked when written (HN001 naming the bad value), so a typo cannot turn
-- the clock or the business time zone into a runtime error later.

CREATE SCHEMA IF NOT EXISTS hivenet;
COMMENT ON SCHEMA hivenet IS 'hivenet-db: serial numbers (HiveNet Sequence Standards) and idempotency';

CREATE TABLE hivenet.setting (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('text', 'boolean', 'interval', 'time_zone')),
    description text NOT NULL
);

-- Trigger: reject a value that does not parse as the setting's kind.
CREATE FUNCTION hivenet._setting_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    BEGIN
        CASE NEW.kind
            WHEN 'boolean' THEN PERFORM NEW.value::boolean;
            WHEN 'interval' THEN PERFORM NEW.value::interval;
            WHEN 'time_zone' THEN PERFORM now() AT TIME ZONE NEW.value;
            ELSE NULL;
        END CASE;
    EXCEPTION WHEN data_exception OR invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %L is not a valid %s', NEW.name, NEW.value, NEW.kind);
    END;
    RETURN NEW;
END $$;

CREATE TRIGGER setting_check BEFORE INSERT OR UPDATE ON hivenet.setting
    FOR EACH ROW EXECUTE FUNCTION hivenet._setting_check();

-- Generated constants: hot paths (allocation) read settings and formats without a query, which
-- costs a quarter of an allocation (docs/benchmarks.md). A trigger rewrites a function whose body
-- holds the current values whenever the table changes, in the same transaction: every session
-- sees the new values exactly when the change commits (a plan that inlined the function is
-- invalidated by the rewrite). Rewrites are serialised by this advisory lock, held until commit.
CREATE FUNCTION hivenet._constants_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210102 $$;

-- HN001 unless the transaction may rewrite generated constants after a change of kind p_op
-- (TG_OP) to table p_table. Updates, deletes and truncates must run in READ COMMITTED: the
-- rewrite reads the table after waiting for the lock, and a REPEATABLE READ snapshot could miss a
-- change committed meanwhile and write an older value back. Inserts are safe anywhere: a row
-- missing from generated constants is read from its table instead.
CREATE FUNCTION hivenet._lock_constants(p_table text, p_op text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_op <> 'INSERT' AND current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('change %s in a READ COMMITTED transaction, not %s', p_table,
                             current_setting('transaction_isolation'));
    END IF;
    PERFORM pg_advisory_xact_lock(hivenet._constants_lock_space(), 0);
END $$;

-- Rewrite generated-constant function p_function(p_name text) RETURNS p_type so that it maps
-- each name to its value: p_cases is the body of a CASE on p_name ('WHEN ... THEN ...', or
-- NULL when the table is empty). Called by the triggers of p_table after a change p_op.
CREATE FUNCTION hivenet._rewrite_constants(p_table text, p_op text, p_function text,
    p_type text, p_cases text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._lock_constants(p_table, p_op);
    EXECUTE format('CREATE OR REPLACE FUNCTION %s(p_name text) RETURNS %s LANGUAGE sql STABLE '
                   'BEGIN ATOMIC SELECT CASE p_name %s ELSE NULL::%2$s END; END',
                   p_function, p_type, coalesce(p_cases, 'WHEN NULL THEN NULL'));
END $$;

-- The value of setting p_name, as a constant written by a trigger (NULL when unknown). A SQL-
-- standard body without SET (bound when created, so no search path can redirect it): inlined,
-- and folded to a constant when the name is one. Never reads a table; never blocks.
CREATE FUNCTION hivenet._setting_constant(p_name text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- Trigger: rewrite _setting_constant from the table.
CREATE FUNCTION hivenet._compile_settings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Not loopback_dsn: it may hold a password, and function bodies are readable by every
    -- role (pg_proc). It is read from the table, on the slow path only.
    PERFORM hivenet._rewrite_constants('hivenet.setting', TG_OP, 'hivenet._setting_constant',
        'text', (SELECT string_agg(format('WHEN %L THEN %L', name, value), ' ' ORDER BY name)
                 FROM hivenet.setting WHERE name <> 'loopback_dsn'));
    RETURN NULL;
END $$;

CREATE TRIGGER setting_compile AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.setting
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._compile_settings();

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('time_zone', 'UTC', 'time_zone',
     'business time zone of every date and time field of a serial (never the session TimeZone)'),
    ('allow_fake_clock', 'false', 'boolean',
     'let sessions move hivenet.now() with SET hivenet.fake_now (tests and demos only)'),
    ('enforce_registry', 'false', 'boolean',
     'reject systems and modules that are not registered (HN002)'),
    ('loopback_dsn', '', 'text',
     'libpq connection string the schema uses to create a new counter scope in its own '
     'transaction; empty: this server''s socket and port, as the schema owner');

-- The value of one setting (NULL when unknown).
CREATE FUNCTION hivenet._setting_value(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT value FROM hivenet.setting WHERE name = p_name
$$;

-- hivenet_db/sql/clock.sql
-- The fake clock of hivenet.now(): the session's hivenet.fake_now as a timestamptz.
--   Raises HN001 when fake clocks are not allowed in this database (setting
--   allow_fake_clock), or when the value is no timestamptz. Never blocks.
CREATE FUNCTION hivenet._fake_now() RETURNS timestamptz
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_fake text := current_setting('hivenet.fake_now', true);
BEGIN
    IF NOT hivenet._setting_value('allow_fake_clock')::boolean THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now is set to %L but this database does not allow a '
                             'fake clock (setting allow_fake_clock)', v_fake);
    END IF;
    BEGIN
        RETURN v_fake::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now %L is not a timestamptz', v_fake);
    END;
END $$;

-- hivenet.now(): the one clock of the schema.
--   Returns the wall clock (clock_timestamp(), so long transactions still see time pass), or
--   the session's `hivenet.fake_now` when the setting allow_fake_clock is true.
--   Raises HN001 when hivenet.fake_now is set but fake clocks are not allowed here, or when it
--   is no timestamptz: a production clock is never moved by a session (SPEC §8).
--   Never blocks. VOLATILE: it reads the clock.
--   Called on every allocation, so it is inlined into its caller: a SQL-standard body (bound
--   to its functions when created, so no search path can redirect it) without SET, which
--   would forbid inlining (see _period_index in formats.sql).
CREATE FUNCTION hivenet.now() RETURNS timestamptz
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT CASE WHEN coalesce(current_setting('hivenet.fake_now', true), '') = ''
                THEN clock_timestamp() ELSE hivenet._fake_now() END;
END;

-- hivenet_db/sql/formats.sql
-- Serial formats: a declarative layout (segments) per format, checked when defined.
--
-- A segment is one JSON object:
--   {"field": "system", "width": 5, "charset": "alnum"}    value given by the caller; optional
--                                                         "min"/"max" for digit fields
--   {"literal": "HN"}                                      fixed text
--   {"time": "YYYYMMDD"}                                   date/time in the business time zone
--   {"seq": 10, "reset": "day"}                            counter, zero-padded, reset per period
-- The counter scope is the concatenation of the field values: two scopes never share a counter.

-- Time patterns a format may use: to_char pattern, width, and the finest unit they show.
CREATE FUNCTION hivenet._time_pattern(p_pattern text,
    OUT to_char_pattern text, OUT width integer, OUT resolution text)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.p, t.w, t.r
    FROM (VALUES
        ('YYYY', 'YYYY', 4, 'year'),
        ('YYYYMM', 'YYYYMM', 6, 'month'),
        ('YYMMDD', 'YYMMDD', 6, 'day'),
        ('YYYYMMDD', 'YYYYMMDD', 8, 'day'),
        ('YYYYMMDDHH', 'YYYYMMDDHH24', 10, 'hour'),
        ('YYYYMMDDHHMI', 'YYYYMMDDHH24MI', 12, 'minute'),
        ('YYMMDDHHMISS', 'YYMMDDHH24MISS', 12, 'second'),
        ('yyMMddHHmmss', 'YYMMDDHH24MISS', 12, 'second'),
        ('YYYYMMDDHHMISS', 'YYYYMMDDHH24MISS', 14, 'second')
    ) AS t(name, p, w, r)
    WHERE t.name = p_pattern
$$;

-- Rank of a reset period or time resolution: a time field can tell periods apart only when
-- its resolution ranks at or below the reset period.
CREATE FUNCTION hivenet._unit_rank(p_unit text) RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT array_position(ARRAY['second', 'minute', 'hour', 'day', 'month', 'year', 'never'],
                          p_unit)
$$;

-- Period index of a business-local time: 1 for the first period starting 2000-01-01.
-- Stored in the counter's sequence as period * stride + seq (see allocate.sql).
-- On every allocation, so it is inlined into its caller: a SQL-standard body (BEGIN ATOMIC)
-- without SET. The SET search_path convention is not needed here: such a body is parsed and
-- bound to its functions and operators when created, so no search path can change it later,
-- and a SET clause would forbid inlining (a call with SET costs ~1.5 us, measured in
-- docs/benchmarks.md).
CREATE FUNCTION hivenet._period_index(p_local timestamp, p_reset text) RETURNS bigint
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT 1 + CASE p_reset
        WHEN 'day' THEN (p_local::date - date '2000-01-01')::bigint
        WHEN 'second' THEN floor(extract(epoch FROM p_local - timestamp '2000-01-01'))::bigint
        WHEN 'minute' THEN floor(extract(epoch FROM p_local - timestamp '2000-01-01') / 60)::bigint
        WHEN 'hour' THEN floor(extract(epoch FROM p_local - timestamp '2000-01-01') / 3600)::bigint
        WHEN 'month' THEN (extract(year FROM p_local)::bigint - 2000) * 12
                          + extract(month FROM p_local)::bigint - 1
        WHEN 'year' THEN extract(year FROM p_local)::bigint - 2000
        ELSE 0
    END;
END;

-- Business-local start of period p_index (inverse of _period_index).
CREATE FUNCTION hivenet._period_start(p_index bigint, p_reset text) RETURNS timestamp
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT timestamp '2000-01-01' + CASE p_reset
        WHEN 'day' THEN (p_index - 1) * interval '1 day'
        WHEN 'second' THEN (p_index - 1) * interval '1 second'
        WHEN 'minute' THEN (p_index - 1) * interval '1 minute'
        WHEN 'hour' THEN (p_index - 1) * interval '1 hour'
        WHEN 'month' THEN (p_index - 1) * interval '1 month'
        WHEN 'year' THEN (p_index - 1) * interval '1 year'
        ELSE interval '0'
    END
$$;

-- Largest period index a format must hold (periods until 2200), so period * stride fits a bigint.
CREATE FUNCTION hivenet._max_period_index(p_reset text) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet._period_index(timestamp '2200-01-01', p_reset)
$$;

CREATE TABLE hivenet.format (
    name               text PRIMARY KEY,
    segments           jsonb NOT NULL,
    length             integer NOT NULL,
    field_names        text[] NOT NULL,
    seq_width          integer NOT NULL,
    reset              text NOT NULL,
    capacity           bigint NOT NULL,   -- serials per period per scope: 10^seq_width - 1
    stride             bigint NOT NULL,   -- sequence value = period index * stride + seq
    borrow_next_period boolean NOT NULL,
    builtin            boolean NOT NULL DEFAULT false,
    description        text,
    -- Compiled from segments by _compile_format, so allocation does no per-segment work:
    field_pattern      text NOT NULL,     -- matches array_to_string(field values, ' ', '?')
    field_min          numeric[] NOT NULL,  -- per field, NULL when unbounded (digit fields)
    field_max          numeric[] NOT NULL,
    bounded_fields     integer[] NOT NULL,  -- the fields with a min or max
    head_pattern       text NOT NULL,     -- to_char pattern of the segments before the seq,
    tail_pattern       text NOT NULL      --   and after it; field n is format() arg %n$s
);
COMMENT ON TABLE hivenet.format IS 'serial formats; add with hivenet.define_format()';

-- The row of format p_name, as a constant written by a trigger (see _setting_constant in
-- settings.sql), or NULL when it is not there yet (read the table then). Inlined; never reads
-- a table; never blocks.
CREATE FUNCTION hivenet._format_constant(p_name text) RETURNS hivenet.format
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::hivenet.format;
END;

-- Trigger: rewrite _format_constant from the table.
CREATE FUNCTION hivenet._compile_formats() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._rewrite_constants('hivenet.format', TG_OP, 'hivenet._format_constant',
        'hivenet.format',
        (SELECT string_agg(format('WHEN %L THEN %L::hivenet.format', f.name, f::text), ' '
                           ORDER BY f.name)
         FROM hivenet.format f));
    RETURN NULL;
END $$;

CREATE TRIGGER format_compile AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.format
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._compile_formats();

-- Reject a format definition with HN001 naming the format and the offending part.
CREATE FUNCTION hivenet._format_error(p_name text, p_message text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('format %L: %s', p_name, p_message);
END $$;

-- The normalised format row for a definition, or HN001 naming what is wrong.
-- Field segments get a "regex" so allocation checks them with one match.
CREATE FUNCTION hivenet._compile_format(p_name text, p_segments jsonb,
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
            PERFORM hivenet._format_error(p_name, format('segment %s is not an object', v_seg));
        END IF;
        SELECT k INTO v_kind FROM jsonb_object_keys(v_seg) AS k
        WHERE k IN ('field', 'literal', 'time', 'seq');
        IF v_kind IS NULL
           OR (SELECT count(*) FROM jsonb_object_keys(v_seg) AS k
               WHERE k IN ('field', 'literal', 'time', 'seq')) <> 1 THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s needs exactly one of field, literal, time, seq', v_seg));
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
            v_row.field_names := v_row.field_names || (v_seg ->> 'field');
            v_row.field_min := v_row.field_min || (v_seg ->> 'min')::numeric;
            v_row.field_max := v_row.field_max || (v_seg ->> 'max')::numeric;
            v_regexes := v_regexes || format('%s{%s}', CASE v_charset
                    WHEN 'digit' THEN '[0-9]' WHEN 'alnum' THEN '[0-9A-Za-z]'
                    WHEN 'upper_alnum' THEN '[0-9A-Z]' ELSE '[A-Za-z]' END, v_width);
            v_segments := v_segments || jsonb_build_array(v_seg || jsonb_build_object(
                'width', v_width, 'charset', v_charset,
                'regex', '^' || v_regexes[cardinality(v_regexes)] || '$'));
            -- Field values and literals are [0-9A-Za-z_-]: safe inside a quoted to_char text.
            v_pattern := v_pattern || format('"%%%s$s"', cardinality(v_regexes));
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
--   issued belonged to that rolled-back transaction. (setval, not DROP: the counter may be
--   recreated through the loopback connection, which would wait on our uncommitted DROP.)
--   Never delete rows of hivenet.format by hand. Takes a row lock on the new name, and a new
--   format waits for another transaction defining one (or changing a setting) to commit.
CREATE FUNCTION hivenet.define_format(p_name text, p_segments jsonb,
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
                MESSAGE = format('format %L is already defined differently', p_name);
        END IF;
    END IF;
END $$;

-- The built-in formats of the HiveNet Sequence Standards (seed 000) and seeds 001 and 004.
DO $$
DECLARE
    v_scope constant jsonb := '[{"field": "system", "width": 5, "charset": "alnum"},
                                {"field": "module", "width": 3, "charset": "alnum"},
                                {"field": "instance", "width": 2, "charset": "digit", "min": 1}]';
    v_merchant constant jsonb := '[{"field": "merchant", "width": 12, "charset": "digit"}]';
    v_row hivenet.format;
    v_def record;
BEGIN
    FOR v_def IN SELECT * FROM (VALUES
        ('unified', v_scope || '[{"time": "YYYYMMDD"}, {"seq": 10, "reset": "day"}]',
         'unified serial (统一流水号): one business transaction across all systems'),
        ('system', v_scope || '[{"time": "YYYYMMDD"}, {"seq": 12, "reset": "day"}]',
         'system serial (系统流水号): one processing step; retries reuse it'),
        ('interface', v_scope || '[{"field": "target", "width": 5, "charset": "alnum"},
                                   {"time": "YYYYMMDDHHMISS"}, {"seq": 10, "reset": "day"}]',
         'interface serial (接口流水号): one interface call'),
        ('id_service', v_merchant || '[{"time": "YYYYMMDD"},
                                       {"field": "shard", "width": 2, "charset": "digit"},
                                       {"seq": 6, "reset": "day"}]',
         'unified ID service: merchant + date + shard + daily sequence'),
        ('merchant_trade', v_merchant || '[{"time": "YYYYMMDDHHMISS"}, {"seq": 6, "reset": "day"}]',
         'merchant trade number: merchant + date-time + daily sequence'),
        ('per_second', '[{"time": "yyMMddHHmmss"}, {"seq": 5, "reset": "second"}]',
         'time-based serial: yyMMddHHmmss + per-second sequence')
    ) AS d(name, segments, description)
    LOOP
        v_row := hivenet._compile_format(v_def.name, v_def.segments::jsonb, false,
                                         v_def.description);
        v_row.builtin := true;
        INSERT INTO hivenet.format VALUES (v_row.*);
    END LOOP;
END $$;

-- What is wrong with p_value as a value of field segment p_seg, or NULL when it is valid.
CREATE FUNCTION hivenet._field_problem(p_seg jsonb, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_value IS NULL THEN
        RETURN 'is missing';
    END IF;
    -- octet_length: full-width and other non-ASCII characters never pass.
    IF p_value !~ (p_seg ->> 'regex') OR octet_length(p_value) <> (p_seg ->> 'width')::integer
    THEN
        RETURN format('%L must be %s %s characters', p_value, p_seg ->> 'width',
                      p_seg ->> 'charset');
    END IF;
    -- Nested IF: the cast is safe only once the value is known to be digits.
    IF p_seg ->> 'charset' = 'digit' AND (p_seg ? 'min' OR p_seg ? 'max') THEN
        IF p_value::numeric NOT BETWEEN coalesce((p_seg ->> 'min')::numeric, 0)
                                    AND coalesce((p_seg ->> 'max')::numeric, p_value::numeric)
        THEN
            RETURN format('%L must be from %s to %s', p_value,
                          lpad(coalesce(p_seg ->> 'min', '0'), length(p_value), '0'),
                          coalesce(p_seg ->> 'max', repeat('9', length(p_value))));
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- hivenet_db/sql/registry.sql
-- Registry of systems and modules. Enforced only when the setting enforce_registry is true:
-- then allocating for an unknown system, target system or module raises HN002.

CREATE TABLE hivenet.registered_system (
    system        text PRIMARY KEY CHECK (system ~ '^[0-9A-Za-z]{5}$'),
    description   text,
    registered_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE hivenet.registered_module (
    system        text NOT NULL REFERENCES hivenet.registered_system ON DELETE CASCADE,
    module        text NOT NULL CHECK (module ~ '^[0-9A-Za-z]{3}$'),
    description   text,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (system, module)
);

-- hivenet.register_system(system, description) → void
--   Registers (or re-describes) a system id. HN001 when it is not 5 characters of [0-9A-Za-z].
CREATE FUNCTION hivenet.register_system(p_system text, p_description text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_system IS NULL OR p_system !~ '^[0-9A-Za-z]{5}$' OR octet_length(p_system) <> 5 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('system %L must be 5 characters of [0-9A-Za-z]', p_system);
    END IF;
    INSERT INTO hivenet.registered_system (system, description) VALUES (p_system, p_description)
    ON CONFLICT (system) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_system.description);
END $$;

-- hivenet.register_module(system, module, description) → void
--   Registers a module of a registered system. HN001 for a malformed module, HN002 when the
--   system is not registered.
CREATE FUNCTION hivenet.register_module(p_system text, p_module text,
    p_description text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_module IS NULL OR p_module !~ '^[0-9A-Za-z]{3}$' OR octet_length(p_module) <> 3 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('module %L must be 3 characters of [0-9A-Za-z]', p_module);
    END IF;
    IF NOT EXISTS (SELECT FROM hivenet.registered_system WHERE system = p_system) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('system %L is not registered', p_system);
    END IF;
    INSERT INTO hivenet.registered_module (system, module, description)
    VALUES (p_system, p_module, p_description)
    ON CONFLICT (system, module) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_module.description);
END $$;

-- HN002 when a system, target system or module in p_fields is unknown. The caller calls it
-- only when the setting enforce_registry is true.
CREATE FUNCTION hivenet._check_registry(p_fields jsonb) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_system text;
BEGIN
    FOR v_system IN SELECT p_fields ->> k FROM unnest(ARRAY['system', 'target']) AS k
                    WHERE p_fields ? k LOOP
        IF NOT EXISTS (SELECT FROM hivenet.registered_system WHERE system = v_system) THEN
            RAISE EXCEPTION USING ERRCODE = 'HN002',
                MESSAGE = format('system %L is not registered', v_system);
        END IF;
    END LOOP;
    IF p_fields ? 'module' AND NOT EXISTS (
        SELECT FROM hivenet.registered_module
        WHERE system = p_fields ->> 'system' AND module = p_fields ->> 'module') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('module %L of system %L is not registered',
                             p_fields ->> 'module', p_fields ->> 'system');
    END IF;
END $$;

-- hivenet_db/sql/loopback.sql
-- The loopback connection: SQL run through dblink in a session of its own on this database,
-- committed before the caller goes on. Used where work must not vanish with the caller's
-- rollback, nor make other callers wait for the caller's commit: creating a counter's
-- sequence on first use, a missing day partition, and durable allocation.

CREATE EXTENSION IF NOT EXISTS dblink SCHEMA hivenet;

CREATE FUNCTION hivenet._conninfo_value(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT '''' || replace(replace(p_value, '\', '\\'), '''', '\''') || ''''
$$;

-- The loopback connection string: the setting loopback_dsn, or this server's own socket and
-- port as the current user (the schema owner inside the SECURITY DEFINER callers). dblink
-- lets only superusers connect without a password: otherwise put one in loopback_dsn.
CREATE FUNCTION hivenet._loopback_dsn() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(nullif(hivenet._setting_value('loopback_dsn'), ''), format(
        'dbname=%s user=%s port=%s host=%s application_name=hivenet_loopback',
        hivenet._conninfo_value(current_database()),
        hivenet._conninfo_value(current_user),
        current_setting('port'),
        hivenet._conninfo_value(coalesce(
            nullif(trim(split_part(current_setting('unix_socket_directories'), ',', 1)), ''),
            '127.0.0.1'))))
$$;

-- Schema of the dblink extension (ours, or one the database already had elsewhere).
CREATE FUNCTION hivenet._dblink_schema() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'dblink'
$$;

-- Runs p_sql (one statement returning one value) in a new loopback session, committed on
-- return; the value as text. The session gives up after lock_timeout rather than wait forever
-- on a lock the caller's own transaction holds (a wait no deadlock detector can see). Errors
-- of p_sql come back with their own SQLSTATE and message.
CREATE FUNCTION hivenet._loopback(p_sql text) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_value text;
BEGIN
    EXECUTE format('SELECT v FROM %I.dblink($1, $2) AS t(v text)', hivenet._dblink_schema())
        INTO v_value
        USING hivenet._loopback_dsn(), 'SET lock_timeout = ''10s''; ' || p_sql;
    RETURN v_value;
END $$;

-- As _loopback, on a loopback session kept open for this session (no connection set-up per
-- call), with synchronous_commit on so the value is on disk when it returns. A session that
-- broke (server restart) is replaced once.
CREATE FUNCTION hivenet._loopback_committed(p_sql text) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_schema text := hivenet._dblink_schema();
    v_value text;
    v_open boolean;
BEGIN
    FOR v_try IN 1 .. 2 LOOP
        EXECUTE format('SELECT %L = ANY (coalesce(%I.dblink_get_connections(), ''{}''))',
                       'hivenet_loopback', v_schema) INTO v_open;
        IF NOT v_open THEN
            EXECUTE format('SELECT %I.dblink_connect(%L, $1)', v_schema, 'hivenet_loopback')
                USING hivenet._loopback_dsn();
            EXECUTE format('SELECT %I.dblink_exec(%L, %L)', v_schema, 'hivenet_loopback',
                           'SET synchronous_commit = on; SET lock_timeout = ''10s''');
        END IF;
        BEGIN
            EXECUTE format('SELECT v FROM %I.dblink(%L, $1) AS t(v text)', v_schema,
                           'hivenet_loopback')
                INTO v_value USING p_sql;
            RETURN v_value;
        EXCEPTION WHEN connection_exception THEN
            EXECUTE format('SELECT %I.dblink_disconnect(%L)', v_schema, 'hivenet_loopback');
            IF v_try = 2 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END $$;

-- hivenet_db/sql/allocate.sql
-- Allocation: one PostgreSQL sequence per counter scope, holding period * stride + seq.
--
-- Fast path: one nextval(). When the value's period is older than the clock's, the first
-- caller to notice moves the sequence forward (setval) under a short, namespaced session-level
-- advisory lock that is released before returning: nobody ever waits for another transaction
-- to commit. When the value's period is newer (the clock went back), issuing continues in the
-- sequence's period, so serials never go backwards. Sequences are not transactional, so
-- numbers taken by a transaction that rolls back are gaps, never reissued.

-- No foreign key to hivenet.format: scopes are created in a transaction of their own, which
-- cannot see a format defined in the caller's still-open transaction. `definition` tells
-- leftovers of a rolled-back definition apart (define_format restarts them).
CREATE TABLE hivenet.scope (
    format        text NOT NULL,
    scope         text NOT NULL,
    fields        jsonb NOT NULL,
    definition    text NOT NULL,   -- md5 of the format's segments
    sequence_name text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (format, scope)
);
COMMENT ON TABLE hivenet.scope IS 'one row per counter scope (format + field values) ever used';

-- Advisory lock namespace of the period reset: (this key, sequence oid) never collides with
-- an application's single-bigint advisory locks, and is constant across servers.
CREATE FUNCTION hivenet._reset_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210101 $$;

-- On every allocation: inlined, a SQL-standard body without SET (see _period_index).
CREATE FUNCTION hivenet._scope_sequence_name(p_format text, p_scope text) RETURNS text
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT CASE WHEN octet_length(p_format || p_scope) <= 58
                THEN 'seq_' || p_format || '_' || p_scope
                ELSE 'seq_' || left(p_format, 26) || '_' || md5(p_scope) END;
END;

-- Runs in its own transaction through the loopback connection (see _new_scope_sequence):
-- creates the scope's sequence if missing and returns its oid. Safe to race.
CREATE FUNCTION hivenet._create_scope(p_format text, p_scope text, p_fields jsonb,
    p_definition text) RETURNS oid
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format, p_scope);
BEGIN
    BEGIN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                       v_name);
    EXCEPTION WHEN unique_violation OR duplicate_table THEN
        NULL; -- a concurrent first use created it
    END;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format, p_scope, p_fields, p_definition, v_name) ON CONFLICT DO NOTHING;
    -- A catalog query, not a name lookup, so a sequence committed by a racer is seen.
    RETURN (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'hivenet' AND c.relname = v_name);
END $$;

-- The sequence of a counter scope that has none yet (first use), created in a committed
-- transaction of its own (through dblink): created inside the caller's transaction, it would
-- vanish with a rollback and start over, handing out the same serials again (SPEC §2,
-- guarantee 2).
CREATE FUNCTION hivenet._new_scope_sequence(p_format text, p_scope text, p_fields jsonb,
    p_definition text) RETURNS regclass
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Using the oid (not the name) makes nextval lock the relation, which refreshes this
    -- session's catalog caches.
    RETURN hivenet._loopback(format('SELECT hivenet._create_scope(%L, %L, %L, %L)',
                                    p_format, p_scope, p_fields, p_definition))::oid::regclass;
END $$;

-- Slow path, under the scope's advisory lock: move the sequence to period p_period when it is
-- still in an older one, and past an exhausted period (borrowing formats only; others get
-- HN010). Returns a fresh sequence value that is in or after p_period and not exhausted.
CREATE FUNCTION hivenet._advance(p_seq regclass, p_format hivenet.format, p_period bigint)
RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_value bigint;
    v_period bigint;
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_seq::oid::integer);
    BEGIN
        v_value := nextval(p_seq);
        IF v_value / p_format.stride < p_period THEN
            PERFORM setval(p_seq, p_period * p_format.stride, true);
            v_value := nextval(p_seq);
        END IF;
        v_period := v_value / p_format.stride;
        IF v_value % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            IF NOT p_format.borrow_next_period THEN
                -- Park the counter just past capacity so failing calls never spill over.
                PERFORM setval(p_seq, v_period * p_format.stride + p_format.capacity, true);
                RAISE EXCEPTION USING ERRCODE = 'HN010',
                    MESSAGE = format('format %s: all %s serials of scope %L for the period '
                                     'starting %s are used', p_format.name, p_format.capacity,
                                     (SELECT scope FROM hivenet.scope
                                      WHERE sequence_name = p_seq::text),
                                     hivenet._period_start(v_period, p_format.reset));
            END IF;
            PERFORM setval(p_seq, (v_period + 1) * p_format.stride, true);
            v_value := nextval(p_seq);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
    RETURN v_value;
END $$;

-- HN001 naming the first field of p_values (in p_format's field order) that is invalid.
-- Called only when allocation's one-match check failed; builds the precise message.
CREATE FUNCTION hivenet._field_error(p_format hivenet.format, p_values text[]) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_seg jsonb;
    v_index integer := 0;
    v_problem text;
BEGIN
    FOR v_seg IN SELECT s FROM jsonb_array_elements(p_format.segments) AS s WHERE s ? 'field'
    LOOP
        v_index := v_index + 1;
        v_problem := hivenet._field_problem(v_seg, p_values[v_index]);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format(
                'format %s: field %s %s', p_format.name, v_seg ->> 'field', v_problem);
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('format %s takes %s field values (%s), not %s', p_format.name,
                         cardinality(p_format.field_names),
                         array_to_string(p_format.field_names, ', '), cardinality(p_values));
END $$;

-- The core of every next_* function: p_count serials of format p_format, the field values
-- given by name in p_fields (a JSON object), or, when p_values is not NULL, in p_values in the
-- format's field order (the next_<kind>_serial functions: no JSON on their path).
-- Raises HN001 (bad format, field or count), HN002 (registry), HN010 (period exhausted).
-- Never waits for another transaction; may wait a moment for another allocation's period
-- reset (the advisory lock is held for one setval, never until commit).
-- The hot path is short on purpose (docs/benchmarks.md): one query, one regex match, no loop
-- over segments; the slow paths (bad input, first use of a scope, period reset) are helpers.
CREATE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
    p_count integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- Settings and format from generated constants (settings.sql): no query on the hot path.
    v_time_zone text := hivenet._setting_constant('time_zone');
    v_format hivenet.format := hivenet._format_constant(p_format);
    v_head text;
    v_tail text;
    v_values text[] := p_values;
    v_name text;
    v_field integer;
    v_scope text;
    v_seq regclass;
    v_local timestamp;
    v_period bigint;
    v_raw bigint;
    v_print timestamp;
    v_out text[] := '{}';
BEGIN
    IF p_count IS NULL OR p_count NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('count %s must be from 1 to 1000000', coalesce(p_count::text, 'NULL'));
    END IF;
    IF v_format.name IS NULL THEN
        -- Not in the constants: defined by a transaction whose rewrite was superseded.
        SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('unknown format %L', p_format);
        END IF;
    END IF;
    IF v_values IS NULL THEN
        IF jsonb_typeof(p_fields) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('format %s: fields must be a JSON object, not %s', p_format,
                                 coalesce(p_fields::text, 'NULL'));
        END IF;
        IF p_fields - v_format.field_names <> '{}'::jsonb THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('format %s has no field %L (fields: %s)', p_format,
                                 (SELECT k FROM jsonb_object_keys(
                                      p_fields - v_format.field_names) AS k LIMIT 1),
                                 array_to_string(v_format.field_names, ', '));
        END IF;
        v_values := '{}';
        FOREACH v_name IN ARRAY v_format.field_names LOOP
            v_values := v_values || (p_fields ->> v_name);
        END LOOP;
    END IF;
    IF array_to_string(v_values, ' ', '?') !~ v_format.field_pattern THEN
        PERFORM hivenet._field_error(v_format, v_values);
    END IF;
    IF v_format.bounded_fields <> '{}' THEN
        -- Digits only (the pattern matched), so the casts are safe.
        FOREACH v_field IN ARRAY v_format.bounded_fields LOOP
            IF v_values[v_field]::numeric < v_format.field_min[v_field]
               OR v_values[v_field]::numeric > v_format.field_max[v_field] THEN
                PERFORM hivenet._field_error(v_format, v_values);
            END IF;
        END LOOP;
    END IF;
    IF hivenet._setting_constant('enforce_registry')::boolean THEN
        PERFORM hivenet._check_registry(jsonb_object(v_format.field_names, v_values));
    END IF;

    v_scope := array_to_string(v_values, '');
    v_seq := to_regclass(
        'hivenet.' || quote_ident(hivenet._scope_sequence_name(p_format, v_scope)));
    IF v_seq IS NULL THEN
        v_seq := hivenet._new_scope_sequence(p_format, v_scope,
                                             jsonb_object(v_format.field_names, v_values),
                                             md5(v_format.segments::text));
    END IF;
    v_local := hivenet.now() AT TIME ZONE v_time_zone;
    v_period := hivenet._period_index(v_local, v_format.reset);
    v_head := format(v_format.head_pattern, VARIADIC v_values);
    v_tail := format(v_format.tail_pattern, VARIADIC v_values);
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(v_seq);
        IF v_raw / v_format.stride < v_period
           OR v_raw % v_format.stride NOT BETWEEN 1 AND v_format.capacity THEN
            v_raw := hivenet._advance(v_seq, v_format, v_period);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / v_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / v_format.stride, v_format.reset) END;
        -- concat, not ||: to_char of an empty pattern is NULL.
        v_out := v_out || concat(to_char(v_print, v_head),
                                 lpad((v_raw % v_format.stride)::text, v_format.seq_width, '0'),
                                 to_char(v_print, v_tail));
    END LOOP;
    RETURN v_out;
END $$;

-- hivenet.next_serial(format, fields) → text: one serial of any format, fields by name,
--   e.g. next_serial('unified', '{"system":"C0001","module":"A01","instance":"01"}').
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_serial(p_format text, p_fields jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate(p_format, p_fields, NULL, 1))[1];
END $$;

-- hivenet.next_serials(format, fields, n) → setof text: n serials in one call (bulk work),
--   in increasing order. HN001 unless 1 <= n <= 1000000.
CREATE FUNCTION hivenet.next_serials(p_format text, p_fields jsonb, p_n integer)
RETURNS SETOF text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT unnest(hivenet._allocate(p_format, p_fields, NULL, p_n))
$$;

-- The next_<kind>_serial functions are plpgsql, not sql: a SET search_path sql function is
-- never inlined and runs through the SQL function executor, which costs more than the call.

-- hivenet.next_unified_serial(system, module, instance) → text (28 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_unified_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('unified', NULL, ARRAY[p_system, p_module, p_instance], 1))[1];
END $$;

-- hivenet.next_system_serial(system, module, instance) → text (30 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_system_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('system', NULL, ARRAY[p_system, p_module, p_instance], 1))[1];
END $$;

-- hivenet.next_interface_serial(system, module, instance, target) → text (39 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_interface_serial(p_system text, p_module text, p_instance text,
    p_target text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('interface', NULL,
                              ARRAY[p_system, p_module, p_instance, p_target], 1))[1];
END $$;

-- hivenet.next_serial_durable(format, fields) → text
--   Like next_serial, but the serial is allocated and committed in a transaction of its own
--   (the session's loopback connection) before it is returned. PostgreSQL can hand out again,
--   after a crash, sequence values taken by a transaction that never committed; a serial from
--   here cannot come back, so it may leave the database (be sent to a remote system) before
--   the caller's transaction commits (SPEC §6). Costs one loopback round trip.
--   HN001 / HN002 / HN010 as next_serial. Never waits for another transaction.
CREATE FUNCTION hivenet.next_serial_durable(p_format text, p_fields jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN hivenet._loopback_committed(format('SELECT hivenet.next_serial(%L, %L)',
                                              p_format, p_fields));
END $$;

-- hivenet_db/sql/parse.sql
-- hivenet.parse_serial(serial, format default null) → jsonb
--   {"format": ..., <one key per field>, "date" or "datetime": ..., "seq": n}. With no format,
--   the standard's kinds are told apart by length (28 unified, 30 system, 39 interface).
--   HN001 when the serial is no valid serial of that format (length, characters, an
--   impossible date, seq 0) or the format is unknown. IMMUTABLE in effect; never blocks.
CREATE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
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
            THEN format('serial %L is no unified (28), system (30) or interface (39) serial; '
                        'name its format', p_serial)
            ELSE format('unknown format %L', p_format) END;
    END IF;
    v_result := jsonb_build_object('format', v_format.name);
    IF octet_length(p_serial) <> v_format.length OR length(p_serial) <> v_format.length THEN
        v_problem := format('length %s, not %s', length(p_serial), v_format.length);
    END IF;
    FOR v_seg IN SELECT jsonb_array_elements(v_format.segments) LOOP
        EXIT WHEN v_problem IS NOT NULL;
        IF v_seg ? 'field' THEN
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
            MESSAGE = format('serial %L is no valid %s serial: %s', p_serial, v_format.name,
                             v_problem);
    END IF;
    RETURN v_result;
END $$;

-- hivenet_db/sql/maintain.sql
-- hivenet.maintain() → void
--   Housekeeping, to run every few minutes (cron, pg_cron, or `hivenet-db maintain`): runs
--   every hivenet._maintain_<concern>() function in name order, each creating upcoming
--   partitions, dropping expired ones or purging rows per retention. Each concern adds its
--   own function, so this file never changes when one is added. Runs in the caller's
--   transaction; takes a transaction-level advisory lock so two runs never overlap.
CREATE FUNCTION hivenet.maintain() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_function regprocedure;
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), 0);
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname LIKE '\_maintain\_%'
          AND p.pronargs = 0
        ORDER BY p.proname
    LOOP
        EXECUTE format('SELECT %s', v_function);
    END LOOP;
END $$;
