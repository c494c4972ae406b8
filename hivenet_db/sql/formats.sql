-- Serial formats: a declarative layout (segments) per format, checked when defined.
--
-- A segment is one JSON object:
--   {"field": "system", "width": 5, "charset": "alnum"}    value given by the caller; optional
--                                                         "min"/"max" for digit fields,
--                                                         "printed": false (counter key only),
--                                                         "counter": false (printed only)
--   {"literal": "HN"}                                      fixed text
--   {"time": "YYYYMMDD"}                                   date/time in the business time zone
--   {"seq": 10, "reset": "day"}                            counter, zero-padded, reset per period
-- Any other key, or a segment of no known kind, is refused (HN001 naming it).
-- The counter scope is the concatenation of the values of the counter-key fields (every field
-- unless marked "counter": false): two scopes never share a counter. docs/guides/formats.md.
--
-- A numeric format (a bigint, seed 004: `(yyMMddHHmmss << 14) | seq`) has a seq in bits:
--   {"time": "yyMMddHHmmss"}                               first: the time's digits as a number,
--                                                         in the highest bits
--   {"field": "instance", "width": 2, "bits": 7}           digits, as a number in its bits
--   {"seq_bits": 14, "reset": "second"}                    last: the counter, in the lowest bits
-- No literal, every field digits and printed; the seq resets when the printed time changes;
-- the largest time number shifted left by the bits below it must fit 63 bits (a positive
-- bigint). time_ids.sql issues and parses them.

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
-- Stored in the counter's sequence as period * stride + seq (see counters.sql).
-- On every allocation, so it is inlined into its caller: a SQL-standard body (BEGIN ATOMIC),
-- bound when created, so it needs no SET search_path (which would forbid inlining;
-- docs/design/sql-internals.md).
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

-- The largest number time pattern p_to_char (a _time_pattern's to_char) prints, its digits
-- read as a number (a numeric format's time): each part at its largest value.
CREATE FUNCTION hivenet._time_number_max(p_to_char text) RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT replace(replace(replace(replace(replace(replace(replace(p_to_char,
        'YYYY', '9999'), 'HH24', '23'), 'YY', '99'), 'MM', '12'), 'DD', '31'), 'MI', '59'),
        'SS', '59')::bigint
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
    tail_pattern       text NOT NULL,     --   and after it; field n is format() arg %n$s
    key_fields         integer[],         -- the fields of the counter scope, NULL for all
    -- The finest time unit printed, when finer than the reset period (interface and
    -- merchant_trade: second): each scope then keeps the latest instant it has issued, in this
    -- unit, in a clock sequence of its own, so its time of day never goes back (periods.sql).
    -- NULL when the counter's period is all the time printed.
    clock_unit         text,
    -- Numeric formats (time_ids.sql): how many bits the time number is shifted left (the bits
    -- of the fields and the seq below it); NULL for a text format.
    time_shift         integer
);
COMMENT ON TABLE hivenet.format IS 'serial formats; add with hivenet.define_format()';

-- Reject a format definition with HN001 naming the format and the offending part.
CREATE FUNCTION hivenet._format_error(p_name text, p_message text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('format %s: %s', hivenet._shown(p_name), p_message);
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
    v_unknown text;
    v_printed boolean;
    v_counter boolean;
    v_keys integer[] := '{}';
    v_numeric boolean;   -- a bigint (a seq_bits segment), not text
    v_bits integer;
    v_position integer := 0;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,30}$' THEN
        PERFORM hivenet._format_error(p_name, 'name must match [a-z][a-z0-9_]{0,30}');
    END IF;
    IF jsonb_typeof(p_segments) IS DISTINCT FROM 'array' OR jsonb_array_length(p_segments) = 0 THEN
        PERFORM hivenet._format_error(p_name, 'segments must be a non-empty JSON array');
    END IF;
    v_numeric := EXISTS (SELECT FROM jsonb_array_elements(p_segments) AS s
                         WHERE jsonb_typeof(s) = 'object' AND s ? 'seq_bits');
    v_row.name := p_name;
    v_row.length := 0;
    v_row.field_names := '{}';
    v_row.field_min := '{}';
    v_row.field_max := '{}';
    FOR v_seg IN SELECT jsonb_array_elements(p_segments) LOOP
        v_position := v_position + 1;
        IF jsonb_typeof(v_seg) <> 'object' THEN
            PERFORM hivenet._format_error(p_name, format('segment %s is not an object',
                                                         hivenet._shown(v_seg::text)));
        END IF;
        SELECT k INTO v_kind FROM jsonb_object_keys(v_seg) AS k
        WHERE k IN ('field', 'literal', 'time', 'seq', 'seq_bits');
        IF v_kind IS NULL
           OR (SELECT count(*) FROM jsonb_object_keys(v_seg) AS k
               WHERE k IN ('field', 'literal', 'time', 'seq', 'seq_bits')) <> 1 THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s needs exactly one of the kinds field, literal, time, seq, seq_bits '
                '(its keys: %s)', hivenet._shown(v_seg::text),
                (SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k)
                 FROM jsonb_object_keys(v_seg) AS k)));
        END IF;
        SELECT string_agg(hivenet._shown(k), ', ' ORDER BY k) INTO v_unknown
        FROM jsonb_object_keys(v_seg) AS k
        WHERE k <> ALL (CASE v_kind
            WHEN 'field' THEN ARRAY['field', 'width', 'charset', 'min', 'max', 'printed', 'counter',
                                    'bits']
            WHEN 'literal' THEN ARRAY['literal'] WHEN 'time' THEN ARRAY['time']
            ELSE ARRAY[v_kind, 'reset'] END);
        IF v_unknown IS NOT NULL THEN
            PERFORM hivenet._format_error(p_name, format(
                '%s segment %s has unknown keys %s (a %s segment takes %s)', v_kind,
                hivenet._shown(v_seg::text), v_unknown, v_kind, CASE v_kind
                WHEN 'field' THEN 'field, width, charset, min, max, printed, counter, bits'
                WHEN 'seq' THEN 'seq, reset' WHEN 'seq_bits' THEN 'seq_bits, reset'
                ELSE v_kind END));
        END IF;
        -- A numeric format is its time, its fields, then its seq in bits (formats.sql's top).
        IF v_numeric AND (v_kind IN ('literal', 'seq')
                          OR (v_kind = 'time') <> (v_position = 1)) THEN
            PERFORM hivenet._format_error(p_name, format(
                'segment %s: a numeric format (with seq_bits) is its time first, then fields '
                'with bits, then seq_bits last; no literal or seq', hivenet._shown(v_seg::text)));
        END IF;
        CASE v_kind
        WHEN 'field' THEN
            v_width := CASE WHEN jsonb_typeof(v_seg -> 'width') = 'number'
                            THEN (v_seg ->> 'width')::numeric::integer END;
            v_charset := coalesce(v_seg ->> 'charset', CASE WHEN v_numeric THEN 'digit'
                                                            ELSE 'alnum' END);
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
            IF v_numeric THEN
                -- Its largest value (max, else all nines) must fit its bits.
                v_bits := CASE WHEN jsonb_typeof(v_seg -> 'bits') = 'number'
                               THEN (v_seg ->> 'bits')::numeric::integer END;
                IF v_bits IS NULL OR v_bits NOT BETWEEN 1 AND 62 OR v_charset <> 'digit'
                   OR NOT v_printed THEN
                    PERFORM hivenet._format_error(p_name, format(
                        'field %s of a numeric format: digits, printed, with bits 1 to 62',
                        v_seg -> 'field'));
                END IF;
                IF coalesce((v_seg ->> 'max')::numeric, 10::numeric ^ v_width - 1)
                   >= 2::numeric ^ v_bits THEN
                    PERFORM hivenet._format_error(p_name, format(
                        'field %s: values up to %s do not fit %s bits', v_seg -> 'field',
                        coalesce(v_seg ->> 'max', repeat('9', v_width)), v_bits));
                END IF;
            ELSIF v_seg ? 'bits' THEN
                PERFORM hivenet._format_error(p_name, format(
                    'field %s: bits are for numeric formats (a seq_bits segment)',
                    v_seg -> 'field'));
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
            IF v_numeric THEN
                v_width := v_bits;  -- its room in the number (shifted below: after the loop)
            ELSIF v_printed THEN
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
            v_width := CASE WHEN v_numeric THEN 0 ELSE v_time.width END;
            IF hivenet._unit_rank(v_time.resolution) < hivenet._unit_rank(v_finest) THEN
                v_finest := v_time.resolution;
            END IF;
            v_segments := v_segments || jsonb_build_array(
                v_seg || jsonb_build_object('to_char', v_time.to_char_pattern,
                                            'width', v_time.width,
                                            'resolution', v_time.resolution));
            v_pattern := v_pattern || v_time.to_char_pattern;
        ELSE -- seq, seq_bits
            IF v_row.seq_width IS NOT NULL THEN
                PERFORM hivenet._format_error(p_name, 'a format has exactly one seq segment');
            END IF;
            v_width := CASE WHEN jsonb_typeof(v_seg -> v_kind) = 'number'
                            THEN (v_seg ->> v_kind)::numeric::integer END;
            -- A numeric format's seq resets when its time changes, as seed 004's does.
            v_row.reset := coalesce(v_seg ->> 'reset', CASE WHEN v_numeric THEN v_finest
                                                            ELSE 'day' END);
            IF v_numeric AND (v_width IS NULL OR v_width NOT BETWEEN 1 AND 62) THEN
                PERFORM hivenet._format_error(p_name, 'seq_bits must be 1 to 62');
            ELSIF NOT v_numeric AND (v_width IS NULL OR v_width NOT BETWEEN 1 AND 17) THEN
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
                v_kind, v_width, 'reset', v_row.reset));
        END CASE;
        v_row.length := v_row.length + v_width;
    END LOOP;
    IF v_row.seq_width IS NULL THEN
        PERFORM hivenet._format_error(p_name, 'a format needs one seq segment');
    END IF;
    -- Serials of two periods must differ in their printed time, or a reset would repeat them.
    IF hivenet._unit_rank(v_finest) > hivenet._unit_rank(v_row.reset) THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq resets every %s but the time fields only show the %s: serials of two periods '
            'would collide', v_row.reset, v_finest));
    END IF;
    IF v_numeric THEN
        IF NOT v_segments -> -1 ? 'seq_bits' THEN
            PERFORM hivenet._format_error(p_name, 'a numeric format ends with its seq_bits '
                                                  '(the lowest bits)');
        END IF;
        IF v_row.reset <> v_finest THEN
            PERFORM hivenet._format_error(p_name, format(
                'a numeric format''s seq resets when its time changes: reset %s, but the time '
                'shows the %s', v_row.reset, v_finest));
        END IF;
        -- Each field's shift: the bits below it (the fields after it, then the seq).
        v_bits := v_row.seq_width;
        FOR i IN REVERSE jsonb_array_length(v_segments) - 2 .. 1 LOOP
            v_segments := jsonb_set(v_segments, ARRAY[i::text, 'shift'], to_jsonb(v_bits));
            v_bits := v_bits + (v_segments -> i ->> 'bits')::integer;
        END LOOP;
        v_row.time_shift := v_bits;
        v_row.capacity := (2::numeric ^ v_row.seq_width)::bigint - 1;
        -- The time number's bits: those of the largest number its pattern prints.
        v_bits := floor(log(2, hivenet._time_number_max(
            v_segments -> 0 ->> 'to_char')::numeric))::integer + 1;
        v_row.length := v_bits + v_row.time_shift;
        IF v_row.length > 63 THEN
            PERFORM hivenet._format_error(p_name, format(
                'the time %s (up to %s: %s bits) shifted left by the %s bits below it takes %s '
                'bits, more than the 63 of a positive bigint', v_segments -> 0 ->> 'time',
                hivenet._time_number_max(v_segments -> 0 ->> 'to_char'), v_bits,
                v_row.time_shift, v_row.length));
        END IF;
    ELSIF v_row.length > 64 THEN
        PERFORM hivenet._format_error(p_name, format('total length %s exceeds 64', v_row.length));
    ELSE
        v_row.capacity := (10::numeric ^ v_row.seq_width)::bigint - 1;
    END IF;
    -- Largest power of ten that keeps period * stride inside a bigint; at least 10x capacity,
    -- so calls that keep failing after exhaustion never spill into the next period.
    v_headroom := floor(log(9.2e18 / (hivenet._max_period_index(v_row.reset) + 1)))::bigint;
    IF v_headroom < length(v_row.capacity::text) + 1 THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq %s %s is too wide for a counter that resets every %s (at most %s digits)',
            CASE WHEN v_numeric THEN 'bits' ELSE 'width' END, v_row.seq_width, v_row.reset,
            v_headroom - 1));
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
    v_row.clock_unit := CASE WHEN hivenet._unit_rank(v_finest) < hivenet._unit_rank(v_row.reset)
                             THEN v_finest END;
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
--   issued belonged to that rolled-back transaction. The format's fallback counter is made with
--   it (counters.sql), and vanishes with it on a rollback. Never delete rows of
--   hivenet.format by hand. Takes a row lock on the new name, and a new format waits for
--   another transaction defining one (or changing a setting) to commit.
--   As every public PL/pgSQL function: parameters named as the reference prints them, read
--   through p_ aliases (a bare name is a column): docs/design/sql-internals.md.
CREATE FUNCTION hivenet.define_format(name text, segments jsonb,
    borrow_next_period boolean DEFAULT false, description text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_name ALIAS FOR name; p_segments ALIAS FOR segments;
    p_borrow_next_period ALIAS FOR borrow_next_period; p_description ALIAS FOR description;
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
            IF v_new.clock_unit IS NOT NULL THEN
                PERFORM hivenet._create_clock(v_leftover, 0);  -- the old one may have had none
            END IF;
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

-- The built-in formats of the HiveNet Sequence Standards (seed 000) and seeds 001 and 004, as
-- hivenet.format stores them: hivenet_db/sql/builtin_formats.json, their one copy, which the
-- Python parser reads too (hivenet_db/parsing.py). hivenet_db/schema.py writes the file in
-- here as a literal in place of the psql variable builtin_formats, as psql -v would. Each is
-- compiled again from its definition, its segments without the keys _compile_format adds (a
-- field's regex; a time's to_char, width and resolution), so the file must say what the
-- compiler says (tests/test_parsing.py compares it with this table).
--   The standard's three kinds count per channel (system, module, instance): the seq is the
--   order of the day's business of the channel (seed 000), and an interface serial's target
--   system is printed, not part of its counter. id_service counts per printed merchant and
--   shard, so no two calls print the same serial (seed 001's first requirement, global
--   uniqueness; its hint to key a Redis counter by reconciliation type would break it).
INSERT INTO hivenet.format
SELECT f.*
FROM jsonb_each(:'builtin_formats'::jsonb) AS b (name, format),
     LATERAL (SELECT jsonb_agg(CASE WHEN s ? 'time' THEN s - 'to_char' - 'width' - 'resolution'
                                    ELSE s - 'regex' - 'shift' END ORDER BY i)
              FROM jsonb_array_elements(b.format -> 'segments') WITH ORDINALITY AS e (s, i))
         AS d (segments),
     LATERAL jsonb_populate_record(
         hivenet._compile_format(b.name, d.segments, false, b.format ->> 'description'),
         '{"builtin": true}') AS f;

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
        RETURN format('%s must be %s %s characters', hivenet._shown(p_value),
                      p_seg ->> 'width', p_seg ->> 'charset');
    END IF;
    -- Nested IF: the cast is safe only once the value is known to be digits.
    IF p_seg ->> 'charset' = 'digit' AND (p_seg ? 'min' OR p_seg ? 'max') THEN
        IF p_value::numeric NOT BETWEEN coalesce((p_seg ->> 'min')::numeric, 0)
                                    AND coalesce((p_seg ->> 'max')::numeric, p_value::numeric)
        THEN
            RETURN format('%s must be from %s to %s', hivenet._shown(p_value),
                          lpad(coalesce(p_seg ->> 'min', '0'), length(p_value), '0'),
                          coalesce(p_seg ->> 'max', repeat('9', length(p_value))));
        END IF;
    END IF;
    RETURN NULL;
END $$;
