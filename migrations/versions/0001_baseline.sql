-- hivenet_db/sql/settings.sql
-- Settings: one table, changed with plain UPDATE by an administrator.
-- Every value is checked when written (HN001 naming the bad value), so a typo cannot turn
-- the clock or the business time zone into a runtime error later.

CREATE SCHEMA IF NOT EXISTS hivenet;
COMMENT ON SCHEMA hivenet IS 'hivenet-db: serial numbers (HiveNet Sequence Standards) and idempotency';

-- A value as messages echo it: quoted (quote_literal), and cut to its first 32 characters
-- plus its length when longer than 40, so no message echoes a megabyte; 'NULL' for NULL. A
-- control character is shown as \xNN: a raw newline or escape sequence would forge lines of
-- the server log or a terminal. hivenet_db/parsing.py shown() is the same for messages made in
-- Python.
CREATE FUNCTION hivenet._shown(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_value IS NULL THEN 'NULL'
                WHEN q.quoted !~ '[\x01-\x1f\x7f-\x9f]' THEN q.quoted
                ELSE (SELECT string_agg(CASE WHEN c ~ '[\x01-\x1f\x7f-\x9f]'
                                             THEN '\x' || lpad(to_hex(ascii(c)), 2, '0')
                                             ELSE c END, '' ORDER BY i)
                      FROM unnest(string_to_array(q.quoted, NULL)) WITH ORDINALITY AS t(c, i))
           END || CASE WHEN length(p_value) > 40
                       THEN format('... (%s characters)', length(p_value)) ELSE '' END
    FROM (SELECT quote_literal(CASE WHEN length(p_value) <= 40 THEN p_value
                                    ELSE left(p_value, 32) END) AS quoted) q
$$;

CREATE TABLE hivenet.setting (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('text', 'boolean', 'interval', 'time_zone', 'count')),
    description text NOT NULL
);

-- Why interval setting p_name may not take value p_value, or NULL. Every interval is positive
-- (a tolerance may be 0) and at most _longest_interval() (clock.sql: ten years, the bound of
-- every interval a caller passes, so no time computed from it overflows). Every retention of
-- finished steps and requests is at least the lease, step_lease: a record purged sooner lets
-- a retry the lease still covers start the money step again (seed 003, 3.3).
-- set_request_retention (requests.sql) asks as request_retention for a namespace's retention.
CREATE FUNCTION hivenet._interval_conflict(p_name text, p_value interval) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_lease interval := hivenet._setting_value('step_lease')::interval;
    v_shortest record;
BEGIN
    IF p_name LIKE '%\_tolerance'
       AND NOT p_value BETWEEN interval '0' AND hivenet._longest_interval() THEN
        RETURN format('must be from 0 to %s', hivenet._longest_interval());
    ELSIF p_name NOT LIKE '%\_tolerance' AND NOT hivenet._interval_allowed(p_value) THEN
        RETURN format('must be positive and at most %s', hivenet._longest_interval());
    ELSIF p_name IN ('step_retention', 'request_retention') AND p_value < v_lease THEN
        RETURN format('must be at least step_lease %s: a step or request purged before its '
                      'lease ends would run again when retried', v_lease);
    ELSIF p_name = 'step_lease' THEN
        SELECT r.name, r.retention INTO v_shortest
        FROM (SELECT s.name, s.value::interval AS retention FROM hivenet.setting s
              WHERE s.name IN ('step_retention', 'request_retention')
              UNION ALL
              SELECT 'the retention of namespace ' || hivenet._shown(n.namespace), n.retention
              FROM hivenet.request_namespace n) AS r
        WHERE r.retention < p_value
        ORDER BY r.retention, r.name LIMIT 1;
        IF FOUND THEN
            RETURN format('must not exceed %s %s: a retention must outlive the lease',
                          v_shortest.name, v_shortest.retention);
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- Trigger: reject a value that does not parse as the setting's kind, an interval out of its
-- bounds (_interval_conflict), and a business time zone behind the current one once serials
-- exist (their dates and times would go backwards).
-- SECURITY DEFINER: an administrator updates the table without any right on what the checks
-- read (hivenet.scope and hivenet.scope_pending, counters.sql), and gets their HN001, never
-- 42501.
CREATE FUNCTION hivenet._setting_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_conflict text;
BEGIN
    BEGIN
        CASE NEW.kind
            WHEN 'boolean' THEN PERFORM NEW.value::boolean;
            WHEN 'interval' THEN PERFORM NEW.value::interval;
            WHEN 'time_zone' THEN PERFORM now() AT TIME ZONE NEW.value;
            -- A positive integer: 0 or less divides by zero (division_by_zero is a
            -- data_exception, caught below like a value that is no integer).
            WHEN 'count' THEN PERFORM 1 / (NEW.value::integer > 0)::integer;
            ELSE NULL;
        END CASE;
    EXCEPTION WHEN data_exception OR invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %s is not a valid %s', NEW.name,
                             hivenet._shown(NEW.value), NEW.kind);
    END;
    IF NEW.kind = 'interval' THEN
        v_conflict := hivenet._interval_conflict(NEW.name, NEW.value::interval);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format('setting %s: %s %s',
                NEW.name, hivenet._shown(NEW.value), v_conflict);
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.kind = 'time_zone' AND NEW.value <> OLD.value
       AND now() AT TIME ZONE NEW.value < now() AT TIME ZONE OLD.value
       AND to_regclass('hivenet.scope_pending') IS NOT NULL THEN
        -- Nested: the tables are looked up only once they exist (not during an install).
        IF EXISTS (SELECT FROM hivenet.scope) OR EXISTS (SELECT FROM hivenet.scope_pending) THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('setting %s: %s is %s behind %s, and serials have been '
                                 'issued: their business dates and times would go backwards '
                                 '(choose the zone before the first serial)', NEW.name,
                                 hivenet._shown(NEW.value),
                                 (now() AT TIME ZONE OLD.value) - (now() AT TIME ZONE NEW.value),
                                 hivenet._shown(OLD.value));
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER setting_check BEFORE INSERT OR UPDATE ON hivenet.setting
    FOR EACH ROW EXECUTE FUNCTION hivenet._setting_check();

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('time_zone', 'UTC', 'time_zone',
     'business time zone of every date and time field of a serial (never the session TimeZone)'),
    ('allow_fake_clock', 'false', 'boolean',
     'let sessions move hivenet.now() with SET hivenet.fake_now (tests and demos only)'),
    ('enforce_registry', 'false', 'boolean',
     'reject systems and modules that are not registered (HN002)'),
    ('max_serials_per_call', '10000', 'count',
     'most serials one next_serials() call may take (HN001 beyond): a runaway count would '
     'hold a backend for seconds and use up a scope''s capacity for the period');

-- The value of one setting (NULL when unknown).
CREATE FUNCTION hivenet._setting_value(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT value FROM hivenet.setting WHERE name = p_name
$$;

-- hivenet_db/sql/clock.sql
-- The fake clock of hivenet.now(): the session's hivenet.fake_now as a timestamptz.
--   Raises HN001 when fake clocks are not allowed in this database (setting
--   allow_fake_clock), or when the value is no timestamptz. Never blocks.
--   SECURITY DEFINER: the application role reads no setting itself, yet must get the fake
--   time where it is allowed (tests of its own code) and HN001 where not (never 42501). Off
--   the hot path: now() calls it only when hivenet.fake_now is set.
CREATE FUNCTION hivenet._fake_now() RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_fake text := current_setting('hivenet.fake_now', true);
BEGIN
    IF NOT hivenet._setting_value('allow_fake_clock')::boolean THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now is set to %s but this database does not allow a '
                             'fake clock (setting allow_fake_clock)', hivenet._shown(v_fake));
    END IF;
    BEGIN
        RETURN v_fake::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now %s is not a timestamptz', hivenet._shown(v_fake));
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
--   would forbid inlining (docs/design/sql-internals.md).
CREATE FUNCTION hivenet.now() RETURNS timestamptz
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT CASE WHEN coalesce(current_setting('hivenet.fake_now', true), '') = ''
                THEN clock_timestamp() ELSE hivenet._fake_now() END;
END;

-- What "now" is for a date or time a caller printed: the local time on its clock at p_now,
-- at edge p_edge of the zones a caller may be in ('earliest': UTC-12, 'latest': UTC+14;
-- every zone in use lies between). A serial carries no time zone, so each window on a
-- caller's date or time (the interface check, begin_step, and the partitions and purges that
-- follow them) is read from these two edges, and from nothing else: a caller anywhere is
-- never "old" or "in the future" merely for its zone. Inlined (a SQL-standard body without
-- SET, p_now read once, so a volatile argument such as hivenet.now() does not stop it);
-- p_edge is a constant at every call, and the CASE folds.
CREATE FUNCTION hivenet._caller_now(p_now timestamptz, p_edge text) RETURNS timestamp
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT (p_now AT TIME ZONE 'UTC') + CASE p_edge WHEN 'earliest' THEN interval '-12 hours'
                                                    WHEN 'latest' THEN interval '14 hours' END;
END;

-- The longest interval a caller may pass (a lease, a retention, an expiry): ten years. Every
-- such interval is added to or taken from the clock somewhere (a lease's end in the views,
-- a retention's cutoff in maintain()); bounded, that sum is always a timestamp, so no stored
-- value can make a view or maintain() fail for everyone (22008).
CREATE FUNCTION hivenet._longest_interval() RETURNS interval
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT interval '10 years';
END;

-- Whether p_value is an interval a caller may pass: positive and at most _longest_interval().
-- Inlined into the fast paths' checks (requests.sql, steps.sql).
CREATE FUNCTION hivenet._interval_allowed(p_value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT p_value > interval '0' AND p_value <= hivenet._longest_interval();
END;

-- HN001 unless p_value is NULL or an interval a caller may pass (_interval_allowed); p_what
-- names it in the message ('lease', 'retention of namespace ''x''', ...).
CREATE FUNCTION hivenet._check_interval(p_what text, p_value interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT hivenet._interval_allowed(p_value) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is not between 0 (excluded) and %s', p_what, p_value,
                             hivenet._longest_interval());
    END IF;
END $$;

-- hivenet_db/sql/formats.sql
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
    clock_unit         text
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
--   issued belonged to that rolled-back transaction. The format's cold counter is made with
--   it (counters.sql), and vanishes with it on a rollback. Never delete rows of
--   hivenet.format by hand. Takes a row lock on the new name, and a new format waits for
--   another transaction defining one (or changing a setting) to commit.
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
FROM jsonb_each('{
    "unified": {
        "description": "unified serial (统一流水号): one business transaction across all systems",
        "length": 28, "seq_width": 10, "capacity": 9999999999, "reset": "day",
        "segments": [
            {"field": "system", "width": 5, "charset": "alnum", "regex": "^[0-9A-Za-z]{5}$"},
            {"field": "module", "width": 3, "charset": "alnum", "regex": "^[0-9A-Za-z]{3}$"},
            {"field": "instance", "width": 2, "charset": "digit", "min": 1, "regex": "^[0-9]{2}$"},
            {"time": "YYYYMMDD", "width": 8, "to_char": "YYYYMMDD", "resolution": "day"},
            {"seq": 10, "reset": "day"}
        ]
    },
    "system": {
        "description": "system serial (系统流水号): one processing step; retries reuse it",
        "length": 30, "seq_width": 12, "capacity": 999999999999, "reset": "day",
        "segments": [
            {"field": "system", "width": 5, "charset": "alnum", "regex": "^[0-9A-Za-z]{5}$"},
            {"field": "module", "width": 3, "charset": "alnum", "regex": "^[0-9A-Za-z]{3}$"},
            {"field": "instance", "width": 2, "charset": "digit", "min": 1, "regex": "^[0-9]{2}$"},
            {"time": "YYYYMMDD", "width": 8, "to_char": "YYYYMMDD", "resolution": "day"},
            {"seq": 12, "reset": "day"}
        ]
    },
    "interface": {
        "description": "interface serial (接口流水号): one interface call",
        "length": 39, "seq_width": 10, "capacity": 9999999999, "reset": "day",
        "segments": [
            {"field": "system", "width": 5, "charset": "alnum", "regex": "^[0-9A-Za-z]{5}$"},
            {"field": "module", "width": 3, "charset": "alnum", "regex": "^[0-9A-Za-z]{3}$"},
            {"field": "instance", "width": 2, "charset": "digit", "min": 1, "regex": "^[0-9]{2}$"},
            {"field": "target", "width": 5, "charset": "alnum", "counter": false, "regex": "^[0-9A-Za-z]{5}$"},
            {"time": "YYYYMMDDHHMISS", "width": 14, "to_char": "YYYYMMDDHH24MISS", "resolution": "second"},
            {"seq": 10, "reset": "day"}
        ]
    },
    "id_service": {
        "description": "unified ID service (seed 001): merchant + date + shard + daily sequence per merchant and shard",
        "length": 28, "seq_width": 6, "capacity": 999999, "reset": "day",
        "segments": [
            {"field": "merchant", "width": 12, "charset": "digit", "regex": "^[0-9]{12}$"},
            {"time": "YYYYMMDD", "width": 8, "to_char": "YYYYMMDD", "resolution": "day"},
            {"field": "shard", "width": 2, "charset": "digit", "regex": "^[0-9]{2}$"},
            {"seq": 6, "reset": "day"}
        ]
    },
    "merchant_trade": {
        "description": "merchant trade number: merchant + date-time + daily sequence",
        "length": 32, "seq_width": 6, "capacity": 999999, "reset": "day",
        "segments": [
            {"field": "merchant", "width": 12, "charset": "digit", "regex": "^[0-9]{12}$"},
            {"time": "YYYYMMDDHHMISS", "width": 14, "to_char": "YYYYMMDDHH24MISS", "resolution": "second"},
            {"seq": 6, "reset": "day"}
        ]
    },
    "per_second": {
        "description": "time-based serial: yyMMddHHmmss + per-second sequence",
        "length": 17, "seq_width": 5, "capacity": 99999, "reset": "second",
        "segments": [
            {"time": "yyMMddHHmmss", "width": 12, "to_char": "YYMMDDHH24MISS", "resolution": "second"},
            {"seq": 5, "reset": "second"}
        ]
    }
}
'::jsonb) AS b (name, format),
     LATERAL (SELECT jsonb_agg(CASE WHEN s ? 'time' THEN s - 'to_char' - 'width' - 'resolution'
                                    ELSE s - 'regex' END ORDER BY i)
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
            MESSAGE = format('system %s must be 5 characters of [0-9A-Za-z]',
                             hivenet._shown(p_system));
    END IF;
    INSERT INTO hivenet.registered_system (system, description) VALUES (p_system, p_description)
    ON CONFLICT (system) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_system.description);
END $$;

-- hivenet.register_module(system, module, description) → void
--   Registers a module of a registered system, and prepares its counter scopes (prepare_scope)
--   for every instance this database owns (ownership.sql; 01 to 99 on one primary) in every
--   format counted per system, module and instance (unified, system, interface), so that each
--   counts from 1 from its first serial. HN001 for a malformed module, HN002 when the system
--   is not registered. Commits with the caller: allocations of unprepared scopes of those
--   formats wait for that commit (prepare_scope).
CREATE FUNCTION hivenet.register_module(p_system text, p_module text,
    p_description text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format text;
BEGIN
    IF p_module IS NULL OR p_module !~ '^[0-9A-Za-z]{3}$' OR octet_length(p_module) <> 3 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('module %s must be 3 characters of [0-9A-Za-z]',
                             hivenet._shown(p_module));
    END IF;
    IF NOT EXISTS (SELECT FROM hivenet.registered_system WHERE system = p_system) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('system %s is not registered', hivenet._shown(p_system));
    END IF;
    INSERT INTO hivenet.registered_module (system, module, description)
    VALUES (p_system, p_module, p_description)
    ON CONFLICT (system, module) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_module.description);
    FOR v_format IN
        SELECT f.name FROM hivenet.format f
        WHERE ARRAY(SELECT f.field_names[k] FROM generate_subscripts(f.field_names, 1) AS k
                    WHERE f.key_fields IS NULL OR k = ANY (f.key_fields) ORDER BY 1)
              = ARRAY['instance', 'module', 'system']
        ORDER BY f.name
    LOOP
        PERFORM hivenet.prepare_scope(v_format, (
            SELECT coalesce(jsonb_agg(jsonb_build_object('system', p_system, 'module', p_module,
                                                'instance', to_char(i, 'FM00')) ORDER BY i), '[]')
            FROM generate_series(1, 99) AS i
            WHERE hivenet._instance_in(to_char(i, 'FM00'),
                                       hivenet._setting_value('owned_instances'))));
    END LOOP;
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

-- hivenet_db/sql/counters.sql
-- Counters: one PostgreSQL sequence per counter scope (format + counter-key field values),
-- holding period * stride + seq (periods.sql moves it from period to period).
--
-- Every scope counts on a sequence of its own, from 1 each period (seed 000: the day's order
-- of that channel's business). It is created in a transaction of the owner's, never in the
-- caller's: created there, it would vanish with a rollback and start over (reissuing serials),
-- and make every other first user wait for the commit. So scopes are prepared before use:
-- register_module (the instances this database owns), prepare_scope and `hivenet-db prepare`.
-- An unprepared scope draws from its format's shared cold counter (hivenet.cold_<format>,
-- made when the format is defined): unique and increasing, but it cannot count from 1, and
-- its period's capacity is shared by every unprepared scope of the format. maintain() then
-- gives the scope its own sequence (promotes it) under the format's cold lock (below), so no
-- allocation can take a cold value after its own sequence has started; that sequence starts
-- after every cold value the scope may have printed (guarantee 2), so a scope prepared after
-- the cold counter ran out starts exhausted until the next period.

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

-- Scopes that drew from a cold counter, for maintain() to promote. No unique key: two first
-- users of one scope must not wait for each other's commit; maintain() reads and deletes.
CREATE TABLE hivenet.scope_pending (
    format text NOT NULL,
    scope  text NOT NULL,
    fields jsonb NOT NULL
);
COMMENT ON TABLE hivenet.scope_pending IS
    'new counter scopes waiting for their own sequence (hivenet.maintain() creates it)';
CREATE INDEX scope_pending_scope ON hivenet.scope_pending (format, scope);

-- Advisory lock namespace of the period reset: (this key, sequence oid) never collides with
-- an application's single-bigint advisory locks, and is constant across servers.
CREATE FUNCTION hivenet._reset_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210101 $$;

-- Advisory lock namespace of cold counters: (this key, hashtext(format)). Allocations from a
-- cold counter hold it shared for the allocation only; promoting a scope holds it exclusive
-- until the promotion commits.
CREATE FUNCTION hivenet._cold_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210103 $$;

-- On every allocation: inlined, a SQL-standard body without SET (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._scope_sequence_name(p_format text, p_scope text) RETURNS text
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT CASE WHEN octet_length(p_format || p_scope) <= 58
                THEN 'seq_' || p_format || '_' || p_scope
                ELSE 'seq_' || left(p_format, 26) || '_' || md5(p_scope) END;
END;

-- The counter scope of field values p_values (in p_format's field order): the values of the
-- format's counter-key fields, concatenated (fixed widths: unambiguous). Every field is in
-- the key unless the format marks it "counter": false (printed only); a "printed": false
-- field is in the key without being printed (custom formats).
-- On every allocation: inlined, a SQL-standard body without SET (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._scope_of(p_format hivenet.format, p_values text[]) RETURNS text
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT CASE WHEN p_format.key_fields IS NULL THEN array_to_string(p_values, '')
                ELSE array_to_string(ARRAY(
                    SELECT p_values[k.i] FROM unnest(p_format.key_fields) WITH ORDINALITY
                        AS k(i, n) ORDER BY k.n), '') END;
END;

-- The counter-key fields of p_values as a JSON object (hivenet.scope.fields).
CREATE FUNCTION hivenet._scope_fields(p_format hivenet.format, p_values text[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(jsonb_object_agg(f.name, p_values[f.i]), '{}')
    FROM unnest(p_format.field_names) WITH ORDINALITY AS f(name, i)
    WHERE p_format.key_fields IS NULL OR f.i = ANY (p_format.key_fields)
$$;

CREATE FUNCTION hivenet._cold_sequence_name(p_format text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 'cold_' || p_format $$;

-- The clock sequence of counter p_name (formats with a clock_unit): seq_X → clk_X (same
-- length), cold_F → clkcold_F. Never the name of a counter, nor of another clock.
CREATE FUNCTION hivenet._clock_sequence_name(p_name text) RETURNS text
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT CASE WHEN left(p_name, 4) = 'seq_' THEN 'clk_' || substr(p_name, 5)
                ELSE 'clk' || p_name END;
END;

-- The clock sequence of counter p_seq (_clock_sequence_name of its name), or NULL when it has
-- none. On the allocation path of formats with a clock_unit: inlined, a SQL-standard body
-- without SET (see _period_index), and string replacements on p_seq::text, which is always
-- hivenet.<name>, quoted or not (schema hivenet is never on the search path), and holds no
-- other dot (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._clock_sequence(p_seq regclass) RETURNS regclass
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT to_regclass(replace(replace(replace(replace(p_seq::text,
        'hivenet.seq_', 'hivenet.clk_'), 'hivenet."seq_', 'hivenet."clk_'),
        'hivenet.cold_', 'hivenet.clkcold_'), 'hivenet."cold_', 'hivenet."clkcold_'));
END;

-- Creates the clock sequence of counter p_name (formats with a clock_unit) unless it exists,
-- holding at least instant p_instant (a period index in the clock unit).
CREATE FUNCTION hivenet._create_clock(p_name text, p_instant bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_clock text := hivenet._clock_sequence_name(p_name);
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   v_clock);
    PERFORM setval(('hivenet.' || quote_ident(v_clock))::regclass, greatest(
        pg_sequence_last_value(('hivenet.' || quote_ident(v_clock))::regclass), p_instant, 0),
        true);
END $$;

-- Trigger: every format gets its cold counter (and clock) in the transaction that defines it.
CREATE FUNCTION hivenet._create_cold_counter() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(NEW.name));
    IF NEW.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._cold_sequence_name(NEW.name), 0);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER format_cold_counter AFTER INSERT ON hivenet.format
    FOR EACH ROW EXECUTE FUNCTION hivenet._create_cold_counter();

-- The formats already defined get theirs here.
DO $$
DECLARE
    v_name text;
    v_format hivenet.format;
BEGIN
    FOR v_name IN SELECT name FROM hivenet.format ORDER BY name LOOP
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                       hivenet._cold_sequence_name(v_name));
    END LOOP;
    FOR v_name IN SELECT name FROM hivenet.format WHERE clock_unit IS NOT NULL ORDER BY name LOOP
        PERFORM hivenet._create_clock(hivenet._cold_sequence_name(v_name), 0);
    END LOOP;
END $$;

-- Sequence p_name of schema hivenet, or NULL, as committed right now. to_regclass alone can
-- answer from a cache that is only refreshed when the session next locks a relation (a
-- sequence created since, even by a committed transaction, stays invisible, in any isolation
-- level). LOCK on the name refreshes it; it then fails either way (no such relation, or a
-- sequence cannot be locked), and the error is what we expect. Off the hot path only.
CREATE FUNCTION hivenet._committed_sequence(p_name text) RETURNS regclass
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    BEGIN
        EXECUTE format('LOCK TABLE hivenet.%I IN ACCESS SHARE MODE', p_name);
    EXCEPTION WHEN undefined_table OR wrong_object_type THEN
        NULL;
    END;
    RETURN to_regclass('hivenet.' || quote_ident(p_name));
END $$;

-- Gives scope p_scope of format p_format its own sequence, continuing after every value its
-- cold counter has issued (and no earlier than the clock's period), and its own clock (a
-- format with a clock_unit) no earlier than the latest instant the cold counter has issued,
-- and records the scope.
-- Commits with the caller, who must be the owner's maintain() or prepare_scope(): holds the
-- format's cold lock exclusive until then, so cold allocations of the format wait for that
-- commit (a short transaction) and then see the new sequence. Safe to run twice.
CREATE FUNCTION hivenet._promote_scope(p_format hivenet.format, p_scope text, p_fields jsonb)
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
    PERFORM hivenet._grant_counter(v_name);  -- for the fast path, run as the caller
    v_seq := ('hivenet.' || quote_ident(v_name))::regclass;
    PERFORM setval(v_seq, greatest(
        pg_sequence_last_value(
            ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass),
        hivenet._period_index(hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                              p_format.reset) * p_format.stride,
        0), true);
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(v_name, pg_sequence_last_value(hivenet._clock_sequence(
            ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass)));
    END IF;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), v_name)
    ON CONFLICT DO NOTHING;
END $$;

-- hivenet.prepare_scope(format, fields) → void (administrators; `hivenet-db prepare`)
--   Gives the counter scope of fields (a JSON object of the counter's fields: the interface
--   serial's target may be left out), or of each of fields (a JSON array of such objects),
--   its own sequence now, so that it counts from 1 from its first serial; a scope
--   prepared already is left as it is. Prepare at deployment: a scope first used unprepared
--   draws from its format's shared cold counter until maintain() promotes it. Commits with the
--   caller's transaction: run it in a short one of its own (at most a few thousand scopes:
--   each new sequence holds a lock until commit), since allocations of unprepared scopes of
--   the format wait for it. HN001 for an unknown format or bad field values; HN002 for an
--   instance (or a format) this database does not own (ownership.sql).
CREATE FUNCTION hivenet.prepare_scope(p_format text, p_fields jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_fields jsonb;
    v_values text[];
    v_scope text;
BEGIN
    SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(p_format));
    END IF;
    FOR v_fields IN SELECT f FROM jsonb_array_elements(CASE jsonb_typeof(p_fields)
                                  WHEN 'array' THEN p_fields ELSE jsonb_build_array(p_fields)
                                  END) AS f LOOP
        v_values := hivenet._field_values(v_format, v_fields);
        PERFORM hivenet._check_fields(v_format, v_values, true);
        PERFORM hivenet._check_owned(v_format, v_values);
        v_scope := hivenet._scope_of(v_format, v_values);
        CONTINUE WHEN EXISTS (SELECT FROM hivenet.scope s
                              WHERE s.format = p_format AND s.scope = v_scope);
        PERFORM hivenet._promote_scope(v_format, v_scope,
                                       hivenet._scope_fields(v_format, v_values));
    END LOOP;
END $$;

-- Part of maintain(): promotes every scope that drew from a cold counter, but those this
-- database no longer owns (a first use that raced with own_instances: ownership.sql), whose
-- rows are dropped.
CREATE FUNCTION hivenet._maintain_scopes() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_pending record;
BEGIN
    FOR v_pending IN
        WITH taken AS (DELETE FROM hivenet.scope_pending RETURNING *)
        SELECT DISTINCT ON (t.format, t.scope) f AS format_row, t.scope, t.fields
        FROM taken t JOIN hivenet.format f ON f.name = t.format
        WHERE hivenet._not_owned(f, t.fields ->> hivenet._node_field(f),
                  hivenet._setting_value('owned_instances'),
                  hivenet._setting_value('single_primary_formats')::boolean) IS NULL
        ORDER BY t.format, t.scope
    LOOP
        PERFORM hivenet._promote_scope(v_pending.format_row, v_pending.scope, v_pending.fields);
    END LOOP;
END $$;

-- hivenet_db/sql/periods.sql
-- Periods and clocks of a counter (counters.sql): moving it to a new period, and keeping the
-- time it prints from going back.
--
-- A counter's value carries its period. When the value's period is older than the clock's,
-- the first caller to notice moves the sequence forward (setval) under a short, namespaced
-- session-level advisory lock that is released before returning: nobody ever waits for
-- another transaction to commit. When the value's period is newer (the clock went back),
-- issuing continues in the sequence's period, so serials never go backwards. Sequences are
-- not transactional, so numbers taken by a transaction that rolls back are gaps, never
-- reissued.
--
-- A format that prints a finer time than its period (interface and merchant_trade print the
-- second, reset daily: its clock_unit) keeps, per counter, the latest instant issued in a
-- second sequence, its clock sequence, holding that instant's period index in the clock unit
-- (the same encoding, one unit finer). Every allocation reads it and prints no earlier
-- (within the value's own period), and raises it under the same short advisory lock as a
-- period reset, before returning: a serial issued after another call returned is never
-- smaller, whatever the clock did (seed 004's guard, for every format; SPEC guarantee 3).

-- Slow path, under the counter's advisory lock: move sequence p_seq (the counter of p_scope,
-- a name for messages) to period p_period when it is still in an older one, and past an
-- exhausted period (borrowing formats only; others get HN010 naming the format, the scope, the
-- period and the capacity). Returns a fresh value in or after p_period and not exhausted.
CREATE FUNCTION hivenet._advance(p_seq regclass, p_format hivenet.format, p_period bigint,
    p_scope text) RETURNS bigint
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
                    MESSAGE = format('format %s: all %s serials of %s %s are used',
                                     p_format.name, p_format.capacity, p_scope,
                                     CASE p_format.reset WHEN 'never' THEN '(it never resets)'
                                     ELSE format('for the %s starting %s', p_format.reset,
                                         hivenet._period_start(v_period, p_format.reset)) END);
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

-- Slow path, once per clock unit and counter (and after a step back): raises clock sequence
-- p_clock to instant p_instant unless it holds a later one, under the same advisory lock as a
-- period reset (setval alone could move it back when two callers race). Held for one setval,
-- released before returning: never until commit. Not transactional, like the counter: an
-- instant used by a transaction that rolls back stays used (later serials only go forward).
CREATE FUNCTION hivenet._raise_clock(p_clock regclass, p_instant bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_clock::oid::integer);
    BEGIN
        IF coalesce(pg_sequence_last_value(p_clock), 0) < p_instant THEN
            PERFORM setval(p_clock, p_instant, true);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_clock::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_clock::oid::integer);
END $$;

-- The last instant of period p_period of reset p_reset, as a period index in unit p_unit.
CREATE FUNCTION hivenet._period_last_instant(p_period bigint, p_reset text, p_unit text)
RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_reset = 'never' THEN 9223372036854775807
                ELSE hivenet._period_index(hivenet._period_start(p_period + 1, p_reset), p_unit) - 1
           END
$$;

-- The latest instant format p_format has issued in counter scope p_scope, business-local:
-- from the scope's own clock, or, while the scope waits for maintain() (a pending row), its
-- format's cold clock (shared by unprepared scopes); for a format without a clock_unit (dates
-- only), the start of the latest period its counter (own sequence, or cold counter while
-- pending) holds. NULL when it issued nothing there. Pending first, then the catalog: a
-- promotion committing in between is seen by one of the two. Off the hot path (it refreshes
-- the catalog cache): claim_interface_serial and begin_step ask it only for a serial dated
-- past their window.
CREATE FUNCTION hivenet._latest_issued(p_format text, p_scope text) RETURNS timestamp
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format := (SELECT f FROM hivenet.format f WHERE f.name = p_format);
    v_pending boolean;
    v_counter text := hivenet._scope_sequence_name(p_format, p_scope);
    v_cold text := hivenet._cold_sequence_name(p_format);
    v_value bigint;
BEGIN
    IF v_format IS NULL THEN
        RETURN NULL;
    END IF;
    v_pending := EXISTS (SELECT FROM hivenet.scope_pending s
                         WHERE s.format = p_format AND s.scope = p_scope);
    IF v_format.clock_unit IS NOT NULL THEN
        v_value := pg_sequence_last_value(hivenet._committed_sequence(
            hivenet._clock_sequence_name(v_counter)));
        IF v_pending THEN
            v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(
                hivenet._clock_sequence_name(v_cold))));
        END IF;
        RETURN CASE WHEN v_value > 0 THEN hivenet._period_start(v_value, v_format.clock_unit) END;
    END IF;
    v_value := pg_sequence_last_value(hivenet._committed_sequence(v_counter));
    IF v_pending THEN
        v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(v_cold)));
    END IF;
    RETURN CASE WHEN v_value > 0
                THEN hivenet._period_start(v_value / v_format.stride, v_format.reset) END;
END $$;

-- hivenet_db/sql/fields.sql
-- Field values given to allocation: in the format's field order, each checked against its
-- segment (formats.sql, _field_problem), HN001 naming the first bad one.

-- HN001 naming the first field of p_values (in p_format's field order) that is invalid, or
-- saying how many values the format takes; returns when every value is valid. With
-- p_key_only, a field outside the counter key may be missing (prepare_scope).
CREATE FUNCTION hivenet._check_fields(p_format hivenet.format, p_values text[],
    p_key_only boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_seg jsonb;
    v_index integer := 0;
    v_problem text;
BEGIN
    FOR v_seg IN SELECT s FROM jsonb_array_elements(p_format.segments) AS s WHERE s ? 'field'
    LOOP
        v_index := v_index + 1;
        CONTINUE WHEN p_key_only AND p_values[v_index] IS NULL
                      AND v_index <> ALL (coalesce(p_format.key_fields, ARRAY[v_index]));
        v_problem := hivenet._field_problem(v_seg, p_values[v_index]);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format(
                'format %s: field %s %s', p_format.name, v_seg ->> 'field', v_problem);
        END IF;
    END LOOP;
    IF cardinality(p_values) <> cardinality(p_format.field_names) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s takes %s field values (%s), not %s', p_format.name,
                             cardinality(p_format.field_names),
                             array_to_string(p_format.field_names, ', '), cardinality(p_values));
    END IF;
END $$;

-- The values of p_fields (a JSON object of field name → value) in p_format's field order.
-- HN001 when p_fields is no object or names a field the format does not have.
CREATE FUNCTION hivenet._field_values(p_format hivenet.format, p_fields jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF jsonb_typeof(p_fields) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: fields must be a JSON object, not %s', p_format.name,
                             hivenet._shown(p_fields::text));
    END IF;
    IF p_fields - p_format.field_names <> '{}'::jsonb THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s has no field %s (fields: %s)', p_format.name,
                             (SELECT hivenet._shown(k) FROM jsonb_object_keys(
                                  p_fields - p_format.field_names) AS k LIMIT 1),
                             array_to_string(p_format.field_names, ', '));
    END IF;
    RETURN ARRAY(SELECT p_fields ->> n FROM unnest(p_format.field_names) WITH ORDINALITY AS f(n, i)
                 ORDER BY i);
END $$;

-- hivenet_db/sql/parse.sql
-- hivenet.parse_serial(serial, format default null) → jsonb
--   {"format": ..., <one key per field>, "date" or "datetime": ..., "seq": n}. With no format,
--   the standard's kinds (unified, system, interface) are told apart by their lengths.
--   HN001 when the serial is no valid serial of that format (length, characters, an
--   impossible date, seq 0) or the format is unknown. IMMUTABLE in effect; never blocks.
--   hivenet_db.parse_serial does the same in Python for the built-in formats (same results,
--   same messages; tests/test_parsing.py compares them).
CREATE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_kinds constant text[] := ARRAY['unified', 'system', 'interface'];
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
    WHERE name = coalesce(p_format, (SELECT k.name FROM hivenet.format k
                                     WHERE k.name = ANY (v_kinds)
                                       AND k.length = octet_length(p_serial)));
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = CASE WHEN p_format IS NULL
            -- 'unified (28), system (30) or interface (39)', lengths from the definitions.
            THEN format('serial %s is no %s serial; name its format', hivenet._shown(p_serial),
                        (SELECT regexp_replace(string_agg(format('%s (%s)', k.name, k.length),
                                                          ', ' ORDER BY array_position(v_kinds,
                                                                                       k.name)),
                                               ', ([^,]*)$', ' or \1')
                         FROM hivenet.format k WHERE k.name = ANY (v_kinds)))
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

-- hivenet_db/sql/compile.sql
-- Generated code: the functions whose bodies are written from the rows of hivenet.format
-- and hivenet.setting, and the one place that writes them (_recompile).
--
-- The hot paths read formats and settings on every call; generated functions hold them as
-- constants, so no call queries a table, and a change reaches every session exactly when the
-- transaction that made it commits (a function's body is catalog data). One statement
-- trigger per table calls _recompile() in the changing transaction. Each generated function
-- is written below as it is before any row exists, with its contract; _recompile replaces
-- its body (CREATE OR REPLACE keeps its grants, privileges.sql). What their shapes owe to
-- the planner: docs/design/sql-internals.md.
--
-- _recompile() reads both tables once and writes, in this order:
--   1. _setting_constant, _format_constant: the rows, as constants;
--   2. _serial_valid, _serial_shaped, _serial_time, _serial_field, _serial_scope: every
--      format's layout (_layout_sql);
--   3. _fast_unified, _fast_system: the allocation fast paths (_fast_path_expression);
--   4. _step_in_window: from the layout of format 'system' (step 2's values) and the
--      settings (_step_window_expression).
-- Generators pass values (records, arguments), never SQL text they read back.
-- tests/test_generated.py keeps a snapshot of every generated body.

-- Advisory lock namespace of the rewrites: (this key, 0).
CREATE FUNCTION hivenet._constants_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210102 $$;

-- HN001 unless the transaction may rewrite the generated functions after a change of kind
-- p_op (TG_OP) to table p_table; then takes the rewrites' advisory lock until commit, so
-- rewrites never interleave. Updates, deletes and truncates must run in READ COMMITTED: the
-- rewrite reads the table after waiting for the lock, and a REPEATABLE READ snapshot could
-- miss a change committed meanwhile and write an older value back. Inserts are safe
-- anywhere: a row missing from the generated functions is read from its table instead.
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

-- 1. The value of setting p_name (NULL when unknown). Never reads a table; never blocks.
CREATE FUNCTION hivenet._setting_constant(p_name text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- 1. The row of format p_name, or NULL when it is not there (a definition whose rewrite lost
-- to a concurrent one: read the table then). Never reads a table; never blocks.
CREATE FUNCTION hivenet._format_constant(p_name text) RETURNS hivenet.format
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::hivenet.format;
END;

-- 2. A format's layout as code, one CASE branch per format, so the hot paths
-- (claim_interface_serial, begin_step) and the views read a serial without parsing its
-- definition. Each takes the format's name first. A format missing from them (its rewrite
-- lost a race) gets NULL from the checks (the caller asks parse_serial) and parse_serial's
-- answer for the values. Never raise.
-- _serial_valid(format, serial): true when serial is surely a valid serial of format, false
-- when parse_serial must decide (it raises HN001 naming the problem), NULL for an unknown
-- format.
CREATE FUNCTION hivenet._serial_valid(p_format text, p_serial text) RETURNS boolean
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::boolean;
END;

-- _serial_shaped(format, serial): serial has the shape of the format (the right characters
-- in the right places; values unchecked); NULL for an unknown format or a NULL serial.
CREATE FUNCTION hivenet._serial_shaped(p_format text, p_serial text) RETURNS boolean
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::boolean;
END;

-- _serial_time(format, serial): the time printed in a valid serial (business-local; midnight
-- for a date), NULL when the serial is not valid (as _serial_valid) or the format prints none.
CREATE FUNCTION hivenet._serial_time(p_format text, p_serial text) RETURNS timestamp
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::timestamp;
END;

-- _serial_field(format, serial, field): the value of a printed field of a serial (NULL for
-- a field the format does not print).
CREATE FUNCTION hivenet._serial_field(p_format text, p_serial text, p_field text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- _serial_scope(format, serial): the counter scope of a valid serial (counters.sql), NULL
-- when the format does not print its whole counter key.
CREATE FUNCTION hivenet._serial_scope(p_format text, p_serial text) RETURNS text
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- 3. The fast paths of next_unified_serial and next_system_serial (allocate.sql): a serial
-- of format unified (system) for system p_a, module p_b, instance p_c, or NULL for anything
-- but the plain case, which the caller then hands to next_serial (the full checks, the exact
-- errors, the slow paths). The plain case: a format whose printed fields are its values and
-- the date (no time of day, which _issue keeps monotonic), reset daily, every field in the
-- counter key; valid values (one regex, the digit bounds); no registry check; no fake clock
-- (where a database allows one, a session that set hivenet.fake_now goes to the full path;
-- where none is allowed, the fast path does not read the setting and issues by the real
-- clock); a prepared scope, its sequence found by name (every scope sequence belongs to an
-- owned instance, ownership.sql); a value of today's period within capacity (a new period,
-- a clock stepped back, exhaustion: the value taken here is a gap, as when _issue hands over
-- to _advance). The time is the statement's: one instant for the period check and the
-- printed date. Runs with the caller's rights: the caller needs USAGE on the scopes'
-- sequences (privileges.sql, _grant_counter). Never waits for another transaction.
CREATE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::text;
END;

CREATE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::text;
END;

-- 4. _step_in_window(system serial): the serial, if valid, is surely dated inside the window
-- whose steps are kept (HN021, see _begin_step in steps.sql), and no instance needs a check
-- (setting owned_instances 'all'). Then begin_step may replay a stored step without
-- _begin_step, and view _step_start may start a new one (its layout checked there). When the
-- layout prints the date as YYYYMMDD, that date is compared as text, so no input makes it
-- raise: from the day after the day of _step_days_from to the day of _step_days_to (exact at
-- that end); a step dated on the window's first day or later goes to _begin_step, which
-- decides exactly (and accepts this database's own serials past the end). VOLATILE
-- (hivenet.now()).
CREATE FUNCTION hivenet._step_in_window(p_serial text) RETURNS boolean
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT false;
END;

-- 2. The SQL expressions (on a text p_serial) that read serials of format p_format, from its
-- segments only:
--   shape: a boolean expression, true when p_serial has the characters of every printed
--     segment (charset of each field, digits for time and seq, literals as they are); every
--     valid serial has them: its length, then one regex.
--   valid: true when p_serial is valid, false when it may not be (parse_serial decides then):
--     the shape, digit bounds, months, days of the month (leap years included), hours,
--     minutes, seconds, a seq other than 0. The casts sit behind the shape, in a CASE.
--   time_of: the time printed in a valid serial (midnight for a date), NULL when none.
--   date_at: where time_of's date starts when it is a date only, printed YYYYMMDD; else NULL.
--   fields: field name → the expression of its printed value.
--   scope: the counter scope of a valid serial (its counter-key fields, counters.sql), NULL
--     when one of them is not printed.
CREATE FUNCTION hivenet._layout_sql(p_format hivenet.format, OUT shape text, OUT valid text,
    OUT time_of text, OUT date_at integer, OUT fields jsonb, OUT scope text)
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
    v_at_of jsonb;  -- the position of each part of the time segment
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
            v_at_of := '{}';
            v_pattern := v_seg ->> 'to_char';
            v_at := v_pos;
            WHILE v_pattern <> '' LOOP
                SELECT t.token, t.digits INTO v_token
                FROM (VALUES ('YYYY', 4, 1), ('HH24', 2, 2), ('YY', 2, 3), ('MM', 2, 4),
                             ('DD', 2, 5), ('MI', 2, 6), ('SS', 2, 7)) AS t(token, digits, o)
                WHERE starts_with(v_pattern, t.token) ORDER BY t.o LIMIT 1;
                v_time := v_time || jsonb_build_object(v_token.token,
                    format('substr(p_serial, %s, %s)::integer', v_at, v_token.digits));
                v_at_of := v_at_of || jsonb_build_object(v_token.token, v_at);
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
            -- Where the date is, when the segment prints year, month and day one after another
            -- and no time of day (_step_window_expression compares it as text).
            date_at := CASE WHEN NOT v_at_of ?| ARRAY['HH24', 'MI', 'SS']
                                 AND v_at_of @> jsonb_build_object(
                                     'MM', (v_at_of ->> 'YYYY')::integer + 4,
                                     'DD', (v_at_of ->> 'YYYY')::integer + 6)
                            THEN (v_at_of ->> 'YYYY')::integer END;
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

-- 3. The expression of the fast path of format p_format (see _fast_unified) in business time
-- zone p_zone, or 'NULL::text' when the format or the settings (p_enforce_registry) leave
-- every call to the full path; p_allow_fake_clock: the setting allow_fake_clock.
CREATE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text,
    p_enforce_registry boolean, p_allow_fake_clock boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    v_bounds text[] := ARRAY[]::text[];
    v_printed text;
    v_field text;
    v_counter text;
    v_fake_clock text := '';
BEGIN
    IF p_format IS NULL OR p_enforce_registry OR p_format.reset IS DISTINCT FROM 'day'
       OR p_format.key_fields IS NOT NULL OR p_format.tail_pattern <> ''
       OR cardinality(p_format.field_names) <> 3
       -- Outside the quoted field values, the pattern prints the date only.
       OR regexp_replace(p_format.head_pattern, '"[^"]*"', '', 'g') !~ '^(YYYY|YY|MM|DD)*$'
       OR p_format.capacity <> 10::bigint ^ p_format.seq_width - 1 THEN
        RETURN 'NULL::text';
    END IF;
    FOR i IN 1 .. 3 LOOP
        v_field := (ARRAY['p_a', 'p_b', 'p_c'])[i];
        IF p_format.field_min[i] IS NOT NULL THEN
            v_bounds := v_bounds || format('%s::numeric >= %s', v_field, p_format.field_min[i]);
        END IF;
        IF p_format.field_max[i] IS NOT NULL THEN
            v_bounds := v_bounds || format('%s::numeric <= %s', v_field, p_format.field_max[i]);
        END IF;
    END LOOP;
    -- The counter: the scope's own sequence by its qualified name, NULL for a scope without
    -- one (unprepared, or parked: ownership.sql), which nextval (strict) passes on to the full
    -- path. The values are alnum here (the pattern matched), so the quoted name is theirs.
    -- The session's catalog cache may not see a sequence created since its transaction
    -- began: NULL then too, and the full path finds it (_issue_cold).
    v_counter := format('to_regclass(%L || p_a || p_b || p_c || %L)',
                        'hivenet."' || hivenet._scope_sequence_name(p_format.name, ''), '"');
    IF p_allow_fake_clock THEN
        v_fake_clock := $f$coalesce(current_setting('hivenet.fake_now', true), '') = '' AND $f$;
    END IF;
    -- The values then the date (the built-in layouts): no format() at run time.
    v_printed := CASE WHEN starts_with(p_format.head_pattern, '"%1$s""%2$s""%3$s"')
        THEN format('p_a || p_b || p_c || to_char(%s, %L)', v_local,
                    substr(p_format.head_pattern, 19))
        ELSE format('to_char(%s, format(%L, p_a, p_b, p_c))', v_local, p_format.head_pattern)
        END;
    -- Nested CASE: the casts of the bounds are safe only once the values matched. The period
    -- is _period_index(local, 'day') as days since the day before its first, and the clamp
    -- maps 0 and capacity + 1 both to 0, then NULL.
    RETURN format(
        $f$CASE WHEN (p_a || ' ' || p_b || ' ' || p_c) ~ %L THEN CASE
    WHEN %s%s
    THEN %s || to_char(nullif(least(greatest(
             nextval(%s)
             - (%s::date - %L::date) * %s::bigint,
             0), %s) %% %s, 0), %L)
    END END$f$,
        p_format.field_pattern, v_fake_clock,
        coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local,
        date '2000-01-01' - hivenet._period_index(timestamp '2000-01-01', 'day')::integer,
        p_format.stride, p_format.capacity + 1, p_format.capacity + 1,
        'FM' || repeat('0', p_format.seq_width));
END $$;

-- 4. The expression of _step_in_window: from the layout of format 'system' (_layout_sql's
-- valid, time_of and date_at) and the settings p_settings (name → value). A layout that
-- prints its date otherwise than YYYYMMDD gets the exact window of its printed time, behind
-- its validity check; 'false' (every call to the full path) when it prints no time or
-- instances are checked. The edges of the callers' zones come from _caller_now (clock.sql).
CREATE FUNCTION hivenet._step_window_expression(p_valid text, p_time_of text,
    p_date_at integer, p_settings jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_settings ->> 'owned_instances' IS DISTINCT FROM 'all' OR p_time_of IS NULL THEN
        RETURN 'false';
    ELSIF p_date_at IS NOT NULL THEN
        RETURN format(
            'substr(p_serial, %s, 8) BETWEEN to_char((hivenet._caller_now(hivenet.now(), '
            '''earliest'') - %L::interval)::date + 1, ''YYYYMMDD'') AND '
            'to_char((hivenet._caller_now(hivenet.now(), ''latest'') + %L::interval)::date, '
            '''YYYYMMDD'')',
            p_date_at, p_settings ->> 'step_retention', p_settings ->> 'step_future_tolerance');
    END IF;
    RETURN format(
        'CASE WHEN %s THEN (%s)::date::timestamp BETWEEN hivenet._caller_now(hivenet.now(), '
        '''earliest'') - %L::interval AND hivenet._caller_now(hivenet.now(), ''latest'') + '
        '%L::interval ELSE false END',
        p_valid, p_time_of, p_settings ->> 'step_retention',
        p_settings ->> 'step_future_tolerance');
END $$;

-- Replaces generated function hivenet.<p_head> (name and arguments) by a SQL-standard body
-- returning p_returns, of volatility p_volatility, that selects expression p_select.
CREATE FUNCTION hivenet._replace_function(p_head text, p_returns text, p_volatility text,
    p_select text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet.%s RETURNS %s LANGUAGE sql %s '
                   'BEGIN ATOMIC SELECT %s; END', p_head, p_returns, p_volatility, p_select);
END $$;

-- Rewrites every generated function from the tables, in the order stated at the top. The
-- caller holds the rewrites' lock (_lock_constants), as the triggers below do.
CREATE FUNCTION hivenet._recompile() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_settings jsonb := (SELECT coalesce(jsonb_object_agg(s.name, s.value), '{}')
                         FROM hivenet.setting s);
    v_format hivenet.format;
    v_layout record;
    v_unified hivenet.format;  -- for step 3
    v_system hivenet.format;
    v_system_layout record;    -- for step 4, when format 'system' exists
    v_formats text := '';
    v_valid text := '';
    v_shaped text := '';
    v_time text := '';
    v_field text := '';
    v_scope text := '';
BEGIN
    FOR v_format IN SELECT * FROM hivenet.format f ORDER BY f.name LOOP
        SELECT * INTO v_layout FROM hivenet._layout_sql(v_format);
        v_formats := v_formats || format(' WHEN %L THEN %L::hivenet.format', v_format.name,
                                         v_format::text);
        v_valid := v_valid || format(' WHEN %L THEN %s', v_format.name, v_layout.valid);
        v_shaped := v_shaped || format(' WHEN %L THEN %s', v_format.name, v_layout.shape);
        -- NULL unless valid: the function is public (views), and casts of a serial that only
        -- looks right (month 99) would fail.
        v_time := v_time || format(' WHEN %L THEN %s', v_format.name,
            CASE WHEN v_layout.time_of IS NULL THEN 'NULL::timestamp'
                 ELSE format('CASE WHEN %s THEN %s END', v_layout.valid, v_layout.time_of)
                 END);
        v_field := v_field || format(' WHEN %L THEN CASE p_field%s ELSE NULL::text END',
            v_format.name, (SELECT coalesce(string_agg(format(' WHEN %L THEN %s', f.key,
                                                              f.value), '' ORDER BY f.key),
                                            ' WHEN NULL THEN NULL')
                            FROM jsonb_each_text(v_layout.fields) f));
        v_scope := v_scope || format(' WHEN %L THEN %s', v_format.name,
                                     coalesce(v_layout.scope, 'NULL::text'));
        IF v_format.name = 'unified' THEN
            v_unified := v_format;
        ELSIF v_format.name = 'system' THEN
            v_system := v_format;
            v_system_layout := v_layout;
        END IF;
    END LOOP;
    -- 1. The rows, as constants.
    PERFORM hivenet._replace_function('_setting_constant(p_name text)', 'text', 'STABLE',
        format('CASE p_name %s ELSE NULL::text END', coalesce(
            (SELECT string_agg(format('WHEN %L THEN %L', s.key, s.value), ' ' ORDER BY s.key)
             FROM jsonb_each_text(v_settings) s), 'WHEN NULL THEN NULL')));
    PERFORM hivenet._replace_function('_format_constant(p_name text)', 'hivenet.format',
        'STABLE', format('CASE p_name %s ELSE NULL::hivenet.format END',
                         coalesce(nullif(v_formats, ''), 'WHEN NULL THEN NULL')));
    -- 2. The layouts.
    PERFORM hivenet._replace_function('_serial_valid(p_format text, p_serial text)', 'boolean',
        'STABLE', format('CASE p_format%s ELSE NULL::boolean END', v_valid));
    PERFORM hivenet._replace_function('_serial_shaped(p_format text, p_serial text)',
        'boolean', 'STABLE', format('CASE p_format%s ELSE NULL::boolean END', v_shaped));
    PERFORM hivenet._replace_function('_serial_time(p_format text, p_serial text)',
        'timestamp', 'STABLE', format(
            'CASE p_format%s ELSE coalesce(hivenet.parse_serial(p_serial, p_format) '
            '->> ''datetime'', hivenet.parse_serial(p_serial, p_format) ->> ''date'')'
            '::timestamp END', v_time));
    PERFORM hivenet._replace_function(
        '_serial_field(p_format text, p_serial text, p_field text)', 'text', 'STABLE',
        format('CASE p_format%s ELSE hivenet.parse_serial(p_serial, p_format) ->> p_field END',
               v_field));
    PERFORM hivenet._replace_function('_serial_scope(p_format text, p_serial text)', 'text',
        'STABLE', format('CASE p_format%s ELSE NULL::text END', v_scope));
    -- 3. The allocation fast paths.
    PERFORM hivenet._replace_function('_fast_unified(p_a text, p_b text, p_c text)', 'text',
        'VOLATILE', hivenet._fast_path_expression(v_unified,
            coalesce(v_settings ->> 'time_zone', 'UTC'),
            coalesce((v_settings ->> 'enforce_registry')::boolean, false),
            coalesce((v_settings ->> 'allow_fake_clock')::boolean, false)));
    PERFORM hivenet._replace_function('_fast_system(p_a text, p_b text, p_c text)', 'text',
        'VOLATILE', hivenet._fast_path_expression(v_system,
            coalesce(v_settings ->> 'time_zone', 'UTC'),
            coalesce((v_settings ->> 'enforce_registry')::boolean, false),
            coalesce((v_settings ->> 'allow_fake_clock')::boolean, false)));
    -- 4. The window of steps.
    IF v_system.name IS NULL THEN
        SELECT NULL::text AS valid, NULL::text AS time_of, NULL::integer AS date_at
        INTO v_system_layout;
    END IF;
    PERFORM hivenet._replace_function('_step_in_window(p_serial text)', 'boolean', 'VOLATILE',
        hivenet._step_window_expression(v_system_layout.valid, v_system_layout.time_of,
                                        v_system_layout.date_at, v_settings));
END $$;

-- Trigger: any change of a format or a setting rewrites the generated functions, in the
-- changing transaction, under the rewrites' lock. SECURITY DEFINER: an administrator
-- changes a setting without owning the functions.
CREATE FUNCTION hivenet._recompile_trigger() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._lock_constants(format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP);
    PERFORM hivenet._recompile();
    RETURN NULL;
END $$;

CREATE TRIGGER format_recompile AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.format
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._recompile_trigger();
CREATE TRIGGER setting_recompile AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hivenet.setting
    FOR EACH STATEMENT EXECUTE FUNCTION hivenet._recompile_trigger();

SELECT hivenet._recompile();

-- hivenet_db/sql/ownership.sql
-- Instance ownership: several primaries, serials that never collide (SPEC §1 "Several
-- primaries", docs/guides/scale-out.md).
--
-- Each database declares the instances it owns (setting owned_instances, changed with
-- hivenet.own_instances(...) or `hivenet-db migrate --owns-instances`): the `instance` field of
-- unified, system and interface serials, the `shard` field of id_service (a format's node
-- field: its field named instance, else shard). 'all' (the default) is one primary, as before.
-- Formats without a node field (merchant_trade, per_second) cannot be split by instance: once
-- ownership is declared, only the database whose setting single_primary_formats is on issues
-- them. Allocation outside that raises HN002 naming the instance and what this database owns.
--
-- Nothing is added to the allocation hot path (next_unified_serial's inlined fast path,
-- _allocate with a scope's own sequence): the check runs where a scope is first used
-- (_issue_cold, allocate.sql) and where it gets its own sequence (prepare_scope, maintain(): counters.sql).
-- Every scope sequence therefore belongs to an owned instance; giving an instance up is
-- refused while it has scopes here, unless forced, which parks their sequences (renamed
-- seq_X → off_X, counters kept): the next allocation finds no sequence, goes through the
-- first-use path and its check, and gets HN002. Owning the instance again restores them.
-- The fast paths of unified and system find a scope's sequence by its name, which parking
-- changes (_park_scope): a parked scope's next call takes the full path.
-- A change takes effect for transactions that start after it commits.
--
-- The receiving side: on a database that declared ownership, begin_step and
-- claim_interface_serial refuse a serial whose printed instance it does not own (HN002),
-- unless the setting check_received_instances is off. Received serials carry their sender's
-- instance (seed 000: the caller makes the system and interface serials), so this holds when
-- received calls are routed to the shard that owns the instance in their serial (as the
-- sender's own allocations are): then a retry on the wrong shard is refused instead of running
-- the step a second time. A deployment routing received calls by another key (a merchant)
-- turns the setting off and relies on its routing alone.

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('owned_instances', 'all', 'text',
     'instances (the instance field; the shard field of id_service) this database allocates '
     'for: ''all'' (one primary) or a list such as ''01-09,12''; change it with '
     'hivenet.own_instances() (HN002 for others)'),
    ('single_primary_formats', 'false', 'boolean',
     'once owned_instances is not ''all'': this database is the one that issues the formats '
     'without an instance or shard field (merchant_trade, per_second); on exactly one primary'),
    ('check_received_instances', 'true', 'boolean',
     'once owned_instances is not ''all'': begin_step and claim_interface_serial refuse '
     'serials whose instance this database does not own (HN002: a retry on the wrong shard)');

-- The instances of p_instances ('all', or a list of two-digit instances and ranges such as
-- '01-09, 12'), written canonically: sorted, ranges merged ('01-09,12'). HN001 naming the bad
-- part; an empty list is refused (a database that owns nothing issues nothing).
CREATE FUNCTION hivenet._canonical_instances(p_instances text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_part text;
    v_from integer;
    v_to integer;
    v_owned boolean[] := array_fill(false, ARRAY[100], ARRAY[0]);
    v_out text[] := '{}';
    v_start integer;
BEGIN
    IF lower(btrim(p_instances)) = 'all' THEN
        RETURN 'all';
    END IF;
    FOREACH v_part IN ARRAY string_to_array(replace(coalesce(p_instances, ''), ' ', ''), ',')
    LOOP
        IF v_part !~ '^[0-9]{2}(-[0-9]{2})?$' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('owned instances %s: %s is no instance (00 to 99) nor range '
                                 '(such as 01-09); give ''all'' or a list such as ''01-09,12''',
                                 hivenet._shown(p_instances), hivenet._shown(v_part));
        END IF;
        v_from := left(v_part, 2)::integer;
        v_to := right(v_part, 2)::integer;
        IF v_to < v_from THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('owned instances %s: range %s ends before it starts',
                                 hivenet._shown(p_instances), hivenet._shown(v_part));
        END IF;
        FOR i IN v_from .. v_to LOOP
            v_owned[i] := true;
        END LOOP;
    END LOOP;
    FOR i IN 0 .. 100 LOOP
        IF i < 100 AND v_owned[i] AND v_start IS NULL THEN
            v_start := i;
        ELSIF (i = 100 OR NOT v_owned[i]) AND v_start IS NOT NULL THEN
            v_out := v_out || CASE WHEN v_start = i - 1 THEN to_char(v_start, 'FM00')
                                   ELSE to_char(v_start, 'FM00') || '-' || to_char(i - 1, 'FM00')
                              END;
            v_start := NULL;
        END IF;
    END LOOP;
    IF v_out = '{}' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('owned instances %s: name at least one instance, or ''all''',
                             hivenet._shown(p_instances));
    END IF;
    RETURN array_to_string(v_out, ',');
END $$;

-- Whether instance p_instance (two digits) is in p_owned (canonical: _canonical_instances).
CREATE FUNCTION hivenet._instance_in(p_instance text, p_owned text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p_owned = 'all' OR (p_instance ~ '^[0-9]{2}$' AND EXISTS (
        SELECT FROM unnest(string_to_array(p_owned, ',')) AS r
        WHERE p_instance BETWEEN left(r, 2) AND right(r, 2)))
$$;

-- The node field of format p_format: its field named instance, else shard, else NULL (a
-- format that can only be issued by one primary).
CREATE FUNCTION hivenet._node_field(p_format hivenet.format) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN 'instance' = ANY (p_format.field_names) THEN 'instance'
                WHEN 'shard' = ANY (p_format.field_names) THEN 'shard' END
$$;

-- The current value of setting p_name: its generated constant, or its row when the constant
-- is missing (a rewrite lost to a concurrent one: compile.sql).
CREATE FUNCTION hivenet._ownership_setting(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(hivenet._setting_constant(p_name), hivenet._setting_value(p_name))
$$;

-- hivenet.ownership() → table(owned_instances text, single_primary_formats boolean,
--   check_received_instances boolean), one row: what this database declared (for any role:
--   hivenet_db.shards.ShardMap checks its map against every shard's at start). No error.
CREATE FUNCTION hivenet.ownership()
RETURNS TABLE (owned_instances text, single_primary_formats boolean,
               check_received_instances boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet._setting_value('owned_instances'),
           hivenet._setting_value('single_primary_formats')::boolean,
           hivenet._setting_value('check_received_instances')::boolean
$$;

-- Why this database may not issue format p_format for node value p_node (its node field's
-- value; NULL for a format without one) under owned instances p_owned and setting
-- single_primary_formats p_single; NULL when it may.
CREATE FUNCTION hivenet._not_owned(p_format hivenet.format, p_node text, p_owned text,
    p_single boolean) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN p_owned = 'all' THEN NULL
        WHEN hivenet._node_field(p_format) IS NULL THEN CASE WHEN NOT p_single THEN format(
            'format %s has no instance or shard field: with several primaries only the one '
            'whose setting single_primary_formats is on issues it (this database owns '
            'instances %s, and that setting is off here)', p_format.name, p_owned) END
        WHEN NOT hivenet._instance_in(p_node, p_owned) THEN format(
            'format %s: %s %s is not owned by this database (it owns %s): allocate on the '
            'database that owns it (docs/guides/scale-out.md)', p_format.name,
            hivenet._node_field(p_format), hivenet._shown(p_node), p_owned)
    END
$$;

-- HN002 unless this database may issue format p_format for field values p_values (in the
-- format's field order). Off the hot path: on a scope's first use and promotion only.
CREATE FUNCTION hivenet._check_owned(p_format hivenet.format, p_values text[]) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_problem text := hivenet._not_owned(p_format,
        p_values[array_position(p_format.field_names, hivenet._node_field(p_format))],
        hivenet._ownership_setting('owned_instances'),
        hivenet._ownership_setting('single_primary_formats')::boolean);
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002', MESSAGE = v_problem;
    END IF;
END $$;

-- HN002 when serial p_serial of format p_format (system: a step; interface: a claim), valid,
-- was received by a database that does not own the instance printed in it (docs/guides/scale-out.md:
-- a retry on the wrong shard). Callers test owned_instances <> 'all' first (no call at all on
-- one primary); nothing is checked when check_received_instances is off.
CREATE FUNCTION hivenet._check_owned_serial(p_format text, p_serial text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text := hivenet._ownership_setting('owned_instances');
    v_instance text;
BEGIN
    IF v_owned = 'all' OR NOT hivenet._ownership_setting('check_received_instances')::boolean
    THEN
        RETURN;
    END IF;
    -- Cut by the format's layout (compile.sql); parse_serial for a format not yet generated.
    v_instance := coalesce(hivenet._serial_field(p_format, p_serial, 'instance'),
                           hivenet.parse_serial(p_serial, p_format) ->> 'instance');
    IF NOT hivenet._instance_in(v_instance, v_owned) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('%s serial %s carries instance %s, which this database does not '
                             'own (it owns %s): send it, and every retry of it, to the shard '
                             'that owns that instance (docs/guides/scale-out.md; setting '
                             'check_received_instances)', p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $$;

-- Counter scopes with a sequence of their own (parked or not) or waiting for one, with their
-- format and node value.
CREATE FUNCTION hivenet._scopes_by_node()
RETURNS TABLE (format hivenet.format, scope text, node text, sequence_name text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT f, s.scope, s.fields ->> hivenet._node_field(f), s.sequence_name
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name FROM hivenet.scope c
          UNION ALL
          SELECT DISTINCT p.format, p.scope, p.fields, NULL FROM hivenet.scope_pending p) AS s
    JOIN hivenet.format f ON f.name = s.format
$$;

-- Trigger on hivenet.setting, for owned_instances and single_primary_formats: writes the
-- instances canonically (HN001 when malformed), refuses a change that leaves a scope of this
-- database outside what it may issue (HN001 naming one: give the instances up with
-- own_instances(..., p_force => true), which parks them first), and restores the parked
-- scopes that the new value allows again. SECURITY DEFINER: an administrator's plain UPDATE
-- renames the owner's sequences.
CREATE FUNCTION hivenet._ownership_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text;
    v_single boolean;
    v_scope record;
BEGIN
    IF NEW.name = 'owned_instances' THEN
        NEW.value := hivenet._canonical_instances(NEW.value);
    END IF;
    IF TG_OP = 'INSERT' OR to_regclass('hivenet.scope_pending') IS NULL THEN
        RETURN NEW;
    END IF;
    v_owned := CASE WHEN NEW.name = 'owned_instances' THEN NEW.value
                    ELSE hivenet._setting_value('owned_instances') END;
    v_single := CASE WHEN NEW.name = 'single_primary_formats' THEN NEW.value::boolean
                     ELSE hivenet._setting_value('single_primary_formats')::boolean END;
    SELECT s.format, s.scope, s.node INTO v_scope FROM hivenet._scopes_by_node() s
    WHERE (s.sequence_name IS NULL OR left(s.sequence_name, 4) <> 'off_')
      AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
    ORDER BY (s.format).name, s.scope LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s %s: this database has issued serials of format %s '
                             'scope %s, which it would no longer own; give it up with '
                             'hivenet.own_instances(..., p_force => true), which parks such '
                             'scopes (docs/guides/scale-out.md)', NEW.name, hivenet._shown(NEW.value),
                             (v_scope.format).name, hivenet._shown(v_scope.scope));
    END IF;
    FOR v_scope IN SELECT s.format, s.scope, s.sequence_name FROM hivenet._scopes_by_node() s
                   WHERE left(s.sequence_name, 4) = 'off_'
                     AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NULL
                   ORDER BY s.sequence_name LOOP
        PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, false);
    END LOOP;
    RETURN NEW;
END $$;

CREATE TRIGGER setting_ownership BEFORE INSERT OR UPDATE ON hivenet.setting
    FOR EACH ROW WHEN (NEW.name IN ('owned_instances', 'single_primary_formats'))
    EXECUTE FUNCTION hivenet._ownership_check();

-- Parks (p_park) or restores the own sequence of scope p_scope of format p_format: renamed
-- seq_X → off_X and back (same length, so the name stays valid), its counter kept, the scope's
-- row following. A parked scope's allocation finds no sequence and takes the first-use path.
-- Waits for transactions that used the sequence (ALTER SEQUENCE locks it).
CREATE FUNCTION hivenet._park_scope(p_format text, p_scope text, p_park boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_live text := hivenet._scope_sequence_name(p_format, p_scope);
    v_parked text := 'off_' || substr(v_live, 5);
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format));
    IF p_park AND hivenet._committed_sequence(v_live) IS NOT NULL THEN
        EXECUTE format('ALTER SEQUENCE hivenet.%I RENAME TO %I', v_live, v_parked);
        UPDATE hivenet.scope SET sequence_name = v_parked
        WHERE format = p_format AND scope = p_scope;
    ELSIF NOT p_park AND hivenet._committed_sequence(v_parked) IS NOT NULL THEN
        EXECUTE format('ALTER SEQUENCE hivenet.%I RENAME TO %I', v_parked, v_live);
        UPDATE hivenet.scope SET sequence_name = v_live
        WHERE format = p_format AND scope = p_scope;
    END IF;
END $$;

-- hivenet.own_instances(instances, single_primary_formats default null, force default false)
--   → text (administrators): declares what this database allocates for (docs/guides/scale-out.md):
--   instances 'all' (one primary: the default) or a list such as '01-09' or '01,03,05' (of the
--   instance field; the shard field of id_service), and, when single_primary_formats is not
--   NULL, whether it is the one database issuing formats without such a field. Returns the
--   instances as written ('01-09,12').
--   HN001: a malformed list; an instance or format this database has issued serials for and
--   would no longer own, unless force, which parks those scopes (their next allocation raises
--   HN002; owning them again restores their counters) and drops their pending first uses.
--   Moving an instance to another database is safe only across a period boundary of its
--   formats: counters are not carried over (docs/guides/scale-out.md). Commits with the caller;
--   waits for transactions that use a parked scope. READ COMMITTED only (compile.sql).
CREATE FUNCTION hivenet.own_instances(p_instances text,
    p_single_primary_formats boolean DEFAULT NULL, p_force boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text := hivenet._canonical_instances(p_instances);
    v_single boolean := coalesce(p_single_primary_formats,
                                 hivenet._setting_value('single_primary_formats')::boolean);
    v_scope record;
BEGIN
    IF p_force THEN
        FOR v_scope IN SELECT s.format, s.scope, s.sequence_name FROM hivenet._scopes_by_node() s
                       WHERE hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
                       ORDER BY (s.format).name, s.scope LOOP
            IF v_scope.sequence_name IS NULL THEN
                DELETE FROM hivenet.scope_pending
                WHERE format = (v_scope.format).name AND scope = v_scope.scope;
            ELSE
                PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
            END IF;
        END LOOP;
    END IF;
    -- The trigger checks each update against the other setting's value of the moment: the
    -- update that owns more goes first, so that no state between owns less than the last.
    IF v_single THEN
        UPDATE hivenet.setting SET value = 'true' WHERE name = 'single_primary_formats'
                                                  AND value <> 'true';
    END IF;
    UPDATE hivenet.setting SET value = v_owned WHERE name = 'owned_instances';
    UPDATE hivenet.setting SET value = v_single::text WHERE name = 'single_primary_formats'
                                                        AND value <> v_single::text;
    RETURN v_owned;
END $$;

-- hivenet_db/sql/allocate.sql
-- Allocation: the next_* functions, and the issuing of serials from a scope's counter
-- (counters.sql) at the clock's period (periods.sql). The fast paths of next_unified_serial and
-- next_system_serial are generated (compile.sql).

-- p_count serials of format p_format for field values p_values from counter p_seq (the
-- scope's own sequence, or the format's cold counter; p_scope names it in messages), printed
-- at the clock's time in the business time zone, never before the latest instant the counter
-- has issued (its clock sequence, formats with a clock_unit). HN010 when the period is
-- exhausted.
CREATE FUNCTION hivenet._issue(p_seq regclass, p_format hivenet.format, p_values text[],
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
    v_clock regclass;
    v_latest bigint;  -- the latest instant issued by the counter, in p_format.clock_unit
    v_read bigint;    -- ... as read from its clock sequence when this call started
    v_instant bigint;
BEGIN
    IF p_format.clock_unit IS NOT NULL THEN
        -- Read once, before any value is drawn: every call that returned before this one
        -- started has raised it to what it printed.
        v_clock := hivenet._clock_sequence(p_seq);
        v_read := coalesce(pg_sequence_last_value(v_clock), 0);
        v_latest := v_read;
    END IF;
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(p_seq);
        IF v_raw / p_format.stride < v_period
           OR v_raw % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            v_raw := hivenet._advance(p_seq, p_format, v_period, p_scope);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / p_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / p_format.stride, p_format.reset) END;
        IF v_clock IS NOT NULL THEN
            v_instant := hivenet._period_index(v_print, p_format.clock_unit);
            IF v_instant < v_latest THEN
                -- The clock is behind an instant already issued: print that one, but never
                -- past the value's own period (its date must stay the period's).
                v_instant := least(v_latest, hivenet._period_last_instant(
                    v_raw / p_format.stride, p_format.reset, p_format.clock_unit));
                v_print := greatest(v_print,
                                    hivenet._period_start(v_instant, p_format.clock_unit));
            END IF;
            v_latest := greatest(v_latest, v_instant);
        END IF;
        -- concat, not ||: to_char of an empty pattern is NULL.
        v_out := v_out || concat(to_char(v_print, v_head),
                                 lpad((v_raw % p_format.stride)::text, p_format.seq_width, '0'),
                                 to_char(v_print, v_tail));
    END LOOP;
    IF v_latest > v_read THEN
        PERFORM hivenet._raise_clock(v_clock, v_latest);
    END IF;
    RETURN v_out;
END $$;

-- _issue for scope p_scope that has no sequence of its own yet (as far as this session's
-- catalog cache knows): from its own sequence if one was committed since, else from the
-- format's cold counter, recording the scope for maintain(). Holds the format's cold lock
-- shared while it looks and draws (never until commit), so a promotion that commits in
-- between is either seen here or waited for. Never waits for another caller's commit.
CREATE FUNCTION hivenet._issue_cold(p_format hivenet.format, p_values text[], p_count integer)
RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_scope text := hivenet._scope_of(p_format, p_values);
    v_key integer := hashtext(p_format.name);
    v_seq regclass;
    v_out text[];
BEGIN
    -- A scope's first use (and every use of a parked one): this database must own it
    -- (ownership.sql). Scopes with a sequence of their own passed this when promoted.
    IF hivenet._setting_constant('owned_instances') IS DISTINCT FROM 'all' THEN
        PERFORM hivenet._check_owned(p_format, p_values);
    END IF;
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('the cold counter of unprepared scopes (scope %L was not prepared '
                       'before its first use; prepare scopes at deployment, `hivenet-db '
                       'prepare`: one prepared now starts after every cold value, so it is '
                       'exhausted too until the next period)', v_scope));
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

-- The core of every next_* function: p_count serials of format p_format, the field values
-- given by name in p_fields (a JSON object), or, when p_values is not NULL, in p_values in the
-- format's field order (the next_<kind>_serial functions: no JSON on their path).
-- Raises HN001 (bad format, field or count), HN002 (registry), HN010 (period exhausted).
-- Never waits for another transaction; may wait a moment for another allocation's period
-- reset (the advisory lock is held for one setval, never until commit), and a new scope's
-- allocation waits for a maintain() that is promoting scopes of the format to commit.
-- The common case is one query, one regex match, no loop over segments; the slow paths (bad
-- input, a new scope, period reset) are helpers (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
    p_count integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- Settings and format from generated constants (compile.sql): no query on the hot path.
    v_format hivenet.format := hivenet._format_constant(p_format);
    v_values text[] := p_values;
    v_field integer;
    v_scope text;
    v_seq regclass;
BEGIN
    IF p_count IS NULL OR p_count NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s must be from 1 to 1000000',
                             hivenet._shown(p_format), coalesce(p_count::text, 'NULL'));
    END IF;
    IF v_format.name IS NULL THEN
        -- Not in the constants: defined by a transaction whose rewrite was superseded.
        SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('unknown format %s', hivenet._shown(p_format));
        END IF;
    END IF;
    IF v_values IS NULL THEN
        v_values := hivenet._field_values(v_format, p_fields);
    END IF;
    IF array_to_string(v_values, ' ', '?') !~ v_format.field_pattern THEN
        PERFORM hivenet._check_fields(v_format, v_values);
    END IF;
    IF v_format.bounded_fields <> '{}' THEN
        -- Digits only (the pattern matched), so the casts are safe.
        FOREACH v_field IN ARRAY v_format.bounded_fields LOOP
            IF v_values[v_field]::numeric < v_format.field_min[v_field]
               OR v_values[v_field]::numeric > v_format.field_max[v_field] THEN
                PERFORM hivenet._check_fields(v_format, v_values);
            END IF;
        END LOOP;
    END IF;
    IF hivenet._setting_constant('enforce_registry')::boolean THEN
        PERFORM hivenet._check_registry(jsonb_object(v_format.field_names, v_values));
    END IF;
    -- Formats whose every field is in the counter key skip _scope_of's subquery, which
    -- would take the expression off PL/pgSQL's fast path for simple expressions.
    IF v_format.key_fields IS NULL THEN
        v_scope := array_to_string(v_values, '');
    ELSE
        v_scope := hivenet._scope_of(v_format, v_values);
    END IF;
    v_seq := to_regclass(
        'hivenet.' || quote_ident(hivenet._scope_sequence_name(p_format, v_scope)));
    IF v_seq IS NULL THEN
        RETURN hivenet._issue_cold(v_format, v_values, p_count);
    END IF;
    RETURN hivenet._issue(v_seq, v_format, v_values, p_count, format('scope %L', v_scope));
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
--   in increasing order. HN001 unless 1 <= n <= the setting max_serials_per_call (10,000 by
--   default): one call for a million would hold its backend for many seconds and take a
--   million of the scope's capacity for the period. Larger batches take several calls.
CREATE FUNCTION hivenet.next_serials(p_format text, p_fields jsonb, p_n integer)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_limit integer := hivenet._setting_constant('max_serials_per_call')::integer;
BEGIN
    IF p_n > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: count %s is more than the %s serials one call may take '
                             '(setting max_serials_per_call); take them in several calls',
                             hivenet._shown(p_format), p_n, v_limit);
    END IF;
    RETURN QUERY SELECT unnest(hivenet._allocate(p_format, p_fields, NULL, p_n));
END $$;
-- hivenet.next_unified_serial(system, module, instance) → text (28 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction. Inlined (see
--   _fast_unified): the fast path, else next_serial (_allocate: the checks, the exact errors,
--   the slow paths), which the caller may run without the right to call _allocate.
CREATE FUNCTION hivenet.next_unified_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_unified(p_system, p_module, p_instance),
                    hivenet.next_serial('unified', jsonb_build_object(
                        'system', p_system, 'module', p_module, 'instance', p_instance)));
END;

-- hivenet.next_system_serial(system, module, instance) → text (30 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction. Inlined, as
--   next_unified_serial.
CREATE FUNCTION hivenet.next_system_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_system(p_system, p_module, p_instance),
                    hivenet.next_serial('system', jsonb_build_object(
                        'system', p_system, 'module', p_module, 'instance', p_instance)));
END;

-- The next_interface_serial function is plpgsql, not sql: its serial prints the time of day,
-- which the fast path leaves to _issue.

-- hivenet.next_interface_serial(system, module, instance, target) → text (39 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_interface_serial(p_system text, p_module text, p_instance text,
    p_target text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('interface', NULL,
                              ARRAY[p_system, p_module, p_instance, p_target], 1))[1];
END $$;

-- hivenet.flush_at_commit() → void: makes the caller's commit wait until it, and every serial
--   drawn in its transaction, is on disk: for a transaction that sends serials out after it
--   commits and writes nothing else (durable allocation; Python flush_at_commit). PostgreSQL
--   flushes a commit only with synchronous_commit on, in a transaction that has an id AND
--   wrote WAL itself; the nextval that logged a serial's range may be another, uncommitted
--   transaction's, so drawing is not enough, nor is an id alone. This sets synchronous_commit
--   on for the transaction, takes an id and writes one small WAL record (a setval of sequence
--   durable_mark, whose value means nothing). Never waits for another transaction.
CREATE SEQUENCE hivenet.durable_mark;
CREATE FUNCTION hivenet.flush_at_commit() RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
    PERFORM pg_current_xact_id();
    PERFORM setval('hivenet.durable_mark', 1);
END $$;

-- hivenet_db/sql/maintain.sql
-- When maintain() last finished (wall clock, clock_timestamp(): never the fake clock), for
-- the metric hivenet_maintain_last_run_timestamp_seconds (docs/operations.md). One row at
-- most, none before the first run; written by maintain() only, never on a hot path.
CREATE TABLE hivenet.maintain_run (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    ran_at   timestamptz NOT NULL
);
COMMENT ON TABLE hivenet.maintain_run IS
    'when hivenet.maintain() last finished (one row; none before its first run)';

-- hivenet.maintain() → void
--   Housekeeping, to run every few minutes (cron, pg_cron, or `hivenet-db maintain`): runs
--   every hivenet._maintain_<concern>() function in name order, each creating upcoming
--   partitions, dropping expired ones or purging rows per retention. Each concern adds its
--   own function, so this file never changes when one is added. Runs in the caller's
--   transaction; takes a transaction-level advisory lock so two runs never overlap. Records
--   when it finished in hivenet.maintain_run (visible when the caller commits).
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
    INSERT INTO hivenet.maintain_run (ran_at) VALUES (clock_timestamp())
    ON CONFLICT (only_row) DO UPDATE SET ran_at = EXCLUDED.ran_at;
END $$;

-- hivenet_db/sql/dedup.sql
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
CREATE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL,
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

-- hivenet_db/sql/claims.sql
-- Generic idempotency claims (SPEC §5; seed 002's unique_record, seed 003's consumer dedup):
-- one row per (namespace, key) that must be executed once, inserted in the caller's
-- transaction so the claim and the effect it guards commit or vanish together.

CREATE TABLE hivenet.claim_namespace (
    namespace   text PRIMARY KEY,
    expiry      interval CHECK (expiry > interval '0'),  -- NULL: claims never expire
    description text
);
COMMENT ON TABLE hivenet.claim_namespace IS
    'optional settings per claim namespace (expiry); namespaces need no row to be used';

CREATE TABLE hivenet.claim_record (
    namespace  text NOT NULL,
    key        text NOT NULL,
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (namespace, key)
)
-- Rolled-back claims and expired ones leave dead rows: autovacuum after 2,000 of them, not
-- after 20 % of a table that only grows (as step_attempt, steps.sql).
WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.claim_record IS 'one row per taken claim (hivenet.claim)';
CREATE INDEX claim_record_expiry ON hivenet.claim_record (expires_at)
    WHERE expires_at IS NOT NULL;

-- Whether p_value is a valid namespace or key: 1 to 255 characters, none of them a control
-- character. The one rule for the names and keys of claims and keyed requests (requests.sql).
-- Inlined into the fast paths (claim, _request_start_valid): no function runs.
CREATE FUNCTION hivenet._name_valid(p_value text) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT length(p_value) BETWEEN 1 AND 255 AND p_value !~ '[\x01-\x1f\x7f-\x9f]';
END;

-- HN001 unless p_value is a valid namespace or key (p_what names which: 'namespace', 'key',
-- 'claim namespace', 'claim key'): _name_valid, each failure named. Namespaces starting
-- 'hivenet.' are the library's own.
CREATE FUNCTION hivenet._check_name(p_what text, p_value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_value IS NULL OR p_value = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is empty', p_what, hivenet._shown(p_value));
    ELSIF length(p_value) > 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is longer than 255 characters', p_what,
                             hivenet._shown(p_value));
    ELSIF p_value ~ '[\x01-\x1f\x7f-\x9f]' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s contains a control character', p_what,
                             hivenet._shown(p_value));
    ELSIF p_what LIKE '%namespace' AND left(p_value, 8) = 'hivenet.' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s is reserved (namespaces starting with ''hivenet.'' '
                             'are the library''s own)', hivenet._shown(p_value));
    END IF;
END $$;

-- The full path of claim (its contract below): each check with its exact error, the insert,
-- and the retaking of an expired claim. The fast path hands it every claim it did not take.
-- Runs as its caller, the SECURITY DEFINER claim (the table's owner).
CREATE FUNCTION hivenet._claim_checked(p_namespace text, p_key text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_expires timestamptz;
BEGIN
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_name('claim key', p_key);
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
--   Raises HN001 when namespace or key is NULL, empty, longer than 255 characters or holds a
--   control character, or the namespace starts 'hivenet.' (the library's own): the rule of
--   keyed requests (_check_name); HN040 when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also when it would wait over a millisecond for another lock, rarely:
--   the table's growth under heavy load; a lock on the whole table is waited for first).
--   Under REPEATABLE READ a claim committed after the transaction's snapshot raises 40001
--   (retry) instead.
--   The wait is the primary key's own (the insert waits for the transaction holding the same
--   key): claims of distinct keys never wait on each other.
CREATE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
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
    WHERE hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key)
      AND left(p_namespace, 8) <> 'hivenet.'
    ON CONFLICT (namespace, key) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM hivenet._claim_checked(p_namespace, p_key);
    END IF;
END $$;

-- hivenet.set_claim_expiry(namespace, expiry) → void: claims of namespace taken from now on
--   expire after expiry (NULL: never). Raises HN001 when namespace is not valid (as claim()
--   takes it), or expiry is not positive or longer than 10 years. Runs in the caller's
--   transaction; blocks only a concurrent change of the same namespace.
CREATE FUNCTION hivenet.set_claim_expiry(p_namespace text, p_expiry interval) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._check_name('claim namespace', p_namespace);
    PERFORM hivenet._check_interval(format('claim expiry of namespace %s',
                                           hivenet._shown(p_namespace)), p_expiry);
    INSERT INTO hivenet.claim_namespace (namespace, expiry) VALUES (p_namespace, p_expiry)
    ON CONFLICT (namespace) DO UPDATE SET expiry = excluded.expiry;
END $$;

-- Part of maintain(): deletes expired claims (claim() already treats them as free).
CREATE FUNCTION hivenet._maintain_claims() RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM hivenet.claim_record WHERE expires_at <= hivenet.now()
$$;

-- hivenet_db/sql/requests.sql
-- Keyed requests: the one state machine of idempotency (SPEC §4, seeds 000/002/003).
--
-- Every idempotency key lives in a namespace: a client's request key, a message id of a queue,
-- a pay id or notify id of the purchase flow, and the steps of steps.sql (namespace
-- 'hivenet.steps', key = the system serial). One table holds every attempt of every key: the
-- key's state is the state of its latest attempt. Attempts of a key are numbered 1, 2, ... and
-- only the latest can be `processing` or `success`; a new attempt n+1 is only inserted after
-- attempt n failed. The primary key (namespace, key, attempt) is therefore the whole duplicate
-- guard: two callers starting the same attempt collide on it, the second waits for the first
-- to commit or roll back (or fails at once with nowait) and then looks again. One INSERT to
-- begin and one (HOT) UPDATE to finish keep the hot path as short as a bare dedup table's.
--
-- The table is not partitioned by time: PostgreSQL has no index across partitions, so a key
-- whose first attempt sits in an older partition could be accepted again in a newer one while
-- its record is still retained. Retention instead deletes through an index on (namespace,
-- started_at), which reaches only the rows started before a namespace's cutoff: never a scan
-- of live rows.

-- The states of an attempt; an enum, not a CHECK on text (docs/design/sql-internals.md).
-- The other invariants (attempt > 0, lease > 0, finished_at set exactly when
-- not processing) are kept by the functions, the only writers.
CREATE TYPE hivenet.step_state AS ENUM ('processing', 'success', 'failed');

CREATE TABLE hivenet.request_attempt (
    namespace      text        NOT NULL,
    key            text        NOT NULL,
    attempt        integer     NOT NULL,
    state          hivenet.step_state NOT NULL,
    -- sha256 of the normalised request (jsonb text): the same key with another request is
    -- refused, never re-executed or replayed.
    fingerprint    bytea       NOT NULL,
    unified_serial text,       -- steps: the business transaction's unified serial, for audit
    -- how long `processing` is trusted; NULL: the setting step_lease (read when checked).
    lease          interval,
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    response       jsonb,      -- success: the response replayed to later callers
    error          jsonb,      -- failed: what the caller reported
    resolved_by    text,       -- the operator (session user) who resolved a stuck attempt
    note           text,       -- the operator's note
    PRIMARY KEY (namespace, key, attempt)
)
-- fillfactor: room on the page so finishing is a HOT update. Autovacuum after 2,000 dead rows
-- whatever the table's size (a finish or a rollback leaves one; the default waits for 20 % of
-- the table, which grows every day): dead rows stay flat.
WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000);
COMMENT ON TABLE hivenet.request_attempt IS
    'every attempt of every idempotency key (namespace, key); the latest attempt is the key''s state';
-- Retention reaches the old attempts of one namespace only (finishing leaves both columns
-- alone, so it stays a HOT update). On the expression namespace || '', not the column: the
-- hot path's lookups (namespace = ... AND key = ...) then can only use the primary key
-- (docs/design/sql-internals.md).
CREATE INDEX request_attempt_started_at ON hivenet.request_attempt
    ((namespace || ''), started_at);

-- Retention per namespace (set_request_retention); namespaces without a row keep the setting
-- request_retention.
CREATE TABLE hivenet.request_namespace (
    namespace text     PRIMARY KEY,
    retention interval NOT NULL
);
COMMENT ON TABLE hivenet.request_namespace IS
    'retention of the finished requests of a namespace, when not the setting request_retention';

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('step_lease', '5 minutes', 'interval',
     'how long a processing step or request is trusted when begun without a lease; after it '
     'the step is listed in hivenet.stuck_steps (a request in hivenet.stuck_requests) for an '
     'operator'),
    ('request_retention', '24 hours', 'interval',
     'finished requests whose last attempt ended longer ago are removed by maintain(), in '
     'namespaces without a retention of their own (hivenet.set_request_retention); the same '
     'key after that starts afresh');

-- Helpers are plpgsql, not sql: a sql function with SET search_path is never inlined
-- (docs/design/sql-internals.md).

-- The lease in force of an attempt, never longer than a caller may pass (clock.sql,
-- _longest_interval): its end is a timestamp whatever is stored, so the views never fail.
-- SECURITY DEFINER: views stuck_steps and stuck_requests call it as their reader, who may not
-- read hivenet.setting.
CREATE FUNCTION hivenet._step_lease(p_lease interval) RETURNS interval
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN least(coalesce(p_lease, hivenet._setting_value('step_lease')::interval),
                 hivenet._longest_interval());
END $$;

-- How messages name a key: 'step <serial>' in the namespace of steps, else the request.
CREATE FUNCTION hivenet._attempt_subject(p_namespace text, p_key text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN CASE WHEN p_namespace = 'hivenet.steps' THEN 'step ' || hivenet._shown(p_key)
                ELSE format('request %s in namespace %s', hivenet._shown(p_key),
                            hivenet._shown(p_namespace)) END;
END $$;

-- HN001 unless the options of a begin are valid.
CREATE FUNCTION hivenet._check_begin_options(p_on_success text, p_lease interval,
    p_nowait boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_on_success IS NULL OR p_on_success NOT IN ('replay', 'reject') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('on_success %s is neither ''replay'' nor ''reject''',
                             hivenet._shown(p_on_success));
    END IF;
    PERFORM hivenet._check_interval('lease', p_lease);
    IF p_nowait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'nowait is NULL';
    END IF;
END $$;

-- Whether a begin's options are plain: on_success 'replay' or 'reject' without nowait. Such a
-- begin starts a new key alike (the policy matters only once a key has succeeded) and may wait
-- for a concurrent start, as an INSERT does: a new step or key with plain options is started
-- by one INSERT into view _step_start / _request_start (_start_step, _start_request), and
-- input those views vouch for needs no check again (_begin_step, _begin_request). The one
-- definition, for both. Inlined.
CREATE FUNCTION hivenet._plain_options(p_on_success text, p_nowait boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false);
END;

-- The request's fingerprint, kept with every attempt and compared on every later begin: sha256
-- of the jsonb text (jsonb normalises key order and whitespace); no request counts as JSON
-- null. The one definition, for begin_request, begin_step and their full paths. Inlined (a
-- SQL-standard body without SET), so PUBLIC may execute it: begin_step's replay runs with the
-- caller's rights (privileges.sql).
CREATE FUNCTION hivenet._fingerprint(p_request jsonb) RETURNS bytea
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT sha256(convert_to(coalesce(p_request, 'null'::jsonb)::text, 'UTF8'));
END;

-- The state machine: begin an attempt of key p_key in namespace p_namespace, the arguments
-- already checked by the caller (begin_request, begin_step). See begin_request for what it
-- does. Not set-returning (OUT parameters): the callers read its one row without a tuplestore.
-- No SET clause, on purpose: it runs only inside its callers, whose SET search_path is in
-- force (docs/design/sql-internals.md).
CREATE FUNCTION hivenet._begin_attempt(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_fingerprint bytea := hivenet._fingerprint(p_request);
    v_attempt integer := 1;
    v_last hivenet.request_attempt;
BEGIN
    -- Optimistic: most keys are new, so insert the attempt first; a conflict (after waiting
    -- for an uncommitted one) means there is a committed attempt to look at.
    LOOP
        INSERT INTO hivenet.request_attempt
            (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
        VALUES (p_namespace, p_key, v_attempt, 'processing', v_fingerprint, p_unified_serial,
                p_lease, hivenet.now())
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            outcome := 'started';
            attempt := v_attempt;
            RETURN;
        END IF;
        SELECT * INTO v_last FROM hivenet.request_attempt a
        WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
        IF NOT FOUND THEN
            v_attempt := 1;  -- removed by maintain() in between: the key is new again
        ELSIF v_last.fingerprint <> v_fingerprint THEN
            RAISE EXCEPTION USING ERRCODE = 'HN032',
                MESSAGE = format('%s was begun with another request (fingerprint %s, this one '
                                 '%s)', hivenet._attempt_subject(p_namespace, p_key),
                                 encode(v_last.fingerprint, 'hex'), encode(v_fingerprint, 'hex'));
        ELSIF v_last.state = 'processing' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN030',
                MESSAGE = format('%s is processing (attempt %s started at %s, lease until %s): '
                                 'its outcome is unknown',
                                 hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                                 v_last.started_at,
                                 v_last.started_at + hivenet._step_lease(v_last.lease));
        ELSIF v_last.state = 'success' THEN
            IF p_on_success = 'reject' THEN
                RAISE EXCEPTION USING ERRCODE = 'HN031',
                    MESSAGE = format('%s already succeeded (attempt %s at %s)',
                                     hivenet._attempt_subject(p_namespace, p_key),
                                     v_last.attempt, v_last.finished_at);
            END IF;
            outcome := 'replayed';
            attempt := v_last.attempt;
            response := v_last.response;
            RETURN;
        ELSE
            v_attempt := v_last.attempt + 1;  -- the latest failed: proceed
        END IF;
        -- Next round: insert that attempt (waiting again if someone is starting it too).
    END LOOP;
END $$;

-- _begin_attempt with nowait: the same, under the shortest lock_timeout, so that where it
-- would wait for a concurrent start of the same attempt it raises HN030 at once. Its own
-- function (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of
-- the EXCEPTION block stays off the default path.
CREATE FUNCTION hivenet._begin_attempt_nowait(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, p_unified_serial,
                                p_lease) b;
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('%s is being started by another transaction right now (nowait)',
                         hivenet._attempt_subject(p_namespace, p_key));
END $$;

-- What view _request_start vouches for (below), and begin_request after the view wrote nothing:
-- what _check_name and _check_begin_options accept, for plain options. Inlined where
-- it is called: no function runs.
CREATE FUNCTION hivenet._request_start_valid(p_namespace text, p_key text, p_lease interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT hivenet._name_valid(p_namespace) AND hivenet._name_valid(p_key)
       AND left(p_namespace, 8) <> 'hivenet.'
       AND (p_lease IS NULL OR hivenet._interval_allowed(p_lease));
END;

-- The first attempt of a new keyed request, written by one INSERT into this view (its rule
-- runs with the owner's rights), begin_request's common case (_start_request), as view
-- _step_start for steps (steps.sql, where the why is). The rule checks the names and the lease
-- (_request_start_valid, above; the checks' exact errors stay in _begin_request) and inserts
-- attempt 1; it writes nothing for a key that has an attempt or for input it does not vouch
-- for (a namespace of the library's own among them), and then _begin_request decides.
-- Insert-only, for hivenet_app (privileges.sql): the row it writes is the one begin_request
-- would write. The VALUES list evaluates each inserted expression once (see _step_start).
CREATE VIEW hivenet._request_start AS
SELECT NULL::text AS namespace, NULL::text AS key, NULL::jsonb AS request,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE hivenet._request_start_valid(n.namespace, n.key, n.lease)
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

-- Whether a new key with plain options was started: attempt 1 written through view
-- _request_start. begin_request's first branch, run as the caller, as _start_step (steps.sql,
-- where the why is).
CREATE FUNCTION hivenet._start_request(p_namespace text, p_key text, p_request jsonb,
    p_on_success text, p_lease interval, p_nowait boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT hivenet._plain_options(p_on_success, p_nowait) THEN
        RETURN false;
    END IF;
    INSERT INTO hivenet._request_start VALUES (p_namespace, p_key, p_request, p_lease);
    RETURN FOUND;
END $$;

-- begin_request's full path, in the owner's rights, after _start_request wrote nothing. Input
-- the view vouches for, with plain options, met a key that has an attempt: the state machine
-- decides. Anything else (bad input, nowait) gets every check with its exact error first.
-- Not set-returning (OUT parameters): no tuplestore of its own.
CREATE FUNCTION hivenet._begin_request(
    p_namespace text, p_key text, p_request jsonb, p_on_success text, p_lease interval,
    p_nowait boolean, OUT outcome text, OUT attempt integer, OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._request_start_valid(p_namespace, p_key, p_lease), false)) THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
        PERFORM hivenet._check_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success, NULL,
                                           p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
END $$;

-- hivenet.begin_request(namespace, key, request default null, on_success default 'replay',
--                       lease default null, nowait default false)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one keyed request (a client's Idempotency-Key, a message id, a pay id ...) in the
--   caller's transaction:
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the effect, then call
--     finish_request with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck request with resolve_request; nothing takes it over).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: its fingerprint (sha256 of the jsonb text, which jsonb normalises: key order and
--   whitespace do not matter) is kept, and a different request under the same key raises
--   HN032 RequestMismatch in every state. No request counts as JSON null.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: namespace or key NULL, empty, longer than 255 characters or with a control
--   character, a namespace starting 'hivenet.' (the library's own), on_success not
--   'replay'/'reject', lease not positive or longer than 10 years, nowait NULL.
--   A key is never accepted twice while its record is kept: finished requests are removed by
--   maintain() once their last attempt ended longer ago than the namespace's retention
--   (set_request_retention; default the setting request_retention, 24 hours).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again); with nowait it raises HN030 at once instead. In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
--   One statement, inlined into the caller's (a set-returning LANGUAGE sql function, as
--   begin_step): a new key with plain options is started by _start_request, with no SECURITY
--   DEFINER call; anything else (a key that has an attempt, bad input, nowait) goes to
--   _begin_request, run only when the first branch wrote nothing (a UNION ALL under LIMIT 1,
--   as begin_step's).
CREATE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    (SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_request(p_namespace, p_key, p_request, p_on_success, p_lease,
                                  p_nowait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_request(p_namespace, p_key, p_request, p_on_success, p_lease,
                                 p_nowait) b)
    LIMIT 1;
END;

-- Why attempt p_attempt of a key cannot be finished: HN033 naming what is there.
CREATE FUNCTION hivenet._raise_stale_attempt(p_namespace text, p_key text, p_attempt integer)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_last hivenet.request_attempt;
BEGIN
    SELECT * INTO v_last FROM hivenet.request_attempt a
    WHERE a.namespace = p_namespace AND a.key = p_key ORDER BY a.attempt DESC LIMIT 1;
    RAISE EXCEPTION USING ERRCODE = 'HN033',
        MESSAGE = CASE WHEN v_last.attempt IS NULL
            THEN format('%s has no attempt %s', hivenet._attempt_subject(p_namespace, p_key),
                        p_attempt)
            ELSE format('attempt %s of %s is not the current processing attempt (the current '
                        'is attempt %s, %s)', p_attempt,
                        hivenet._attempt_subject(p_namespace, p_key), v_last.attempt,
                        v_last.state) END;
END $$;

-- Why finish_request's UPDATE found no attempt to finish, raised: HN001 for a namespace or key
-- begin_request would refuse, or a NULL succeeded; else HN033 naming what is there. Off the hot
-- path. No SET clause, as _begin_attempt: only called by functions that set the search path.
CREATE FUNCTION hivenet._raise_unfinished(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
        PERFORM hivenet._check_name('key', p_key);
    END IF;
    IF p_succeeded IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s attempt %s: succeeded is NULL',
                             hivenet._attempt_subject(p_namespace, p_key), p_attempt);
    END IF;
    PERFORM hivenet._raise_stale_attempt(p_namespace, p_key, p_attempt);
END $$;

-- The operator's resolution of a processing attempt (resolve_request, resolve_step).
CREATE FUNCTION hivenet._resolve_attempt(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(btrim(p_note), '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s attempt %s: resolving needs a note',
                             hivenet._attempt_subject(p_namespace, p_key), p_attempt);
    END IF;
    -- finish's fencing and state change; the note goes on the row it just locked.
    PERFORM hivenet.finish_request(p_namespace, p_key, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
END $$;

-- hivenet.finish_request(namespace, key, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_request returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_request proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the key's current
--   one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL, or namespace or key is not valid (as begin_request). Blocks
--   only while another transaction is finishing or resolving the same attempt; then raises
--   HN033 if that one committed.
CREATE FUNCTION hivenet.finish_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE hivenet.request_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN
        PERFORM hivenet._raise_unfinished(p_namespace, p_key, p_attempt, p_succeeded);
    END IF;
END $$;

-- hivenet.resolve_request(namespace, key, attempt, succeeded, note, response default null)
--   → void. Operator action for a stuck request (hivenet.stuck_requests): once the real
--   outcome of attempt `attempt` is known, record it as `success` (response replayed later)
--   or `failed` (the next begin_request proceeds), with a note and the operator's session
--   user. The original attempt's late finish_request then gets HN033. Works on any processing
--   attempt, also before its lease ran out.
--   HN033 as finish_request; HN001 when note is empty or succeeded NULL. Blocks like finish.
CREATE FUNCTION hivenet.resolve_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._resolve_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_note,
                                     p_response);
END $$;

-- hivenet.set_request_retention(namespace, retention) → void
--   Finished requests of the namespace are kept for `retention` after their last attempt
--   ended (then maintain() removes them, and the same key starts afresh); NULL: back to the
--   setting request_retention (24 hours). Keep it longer than any client retries.
--   HN001: namespace not valid (as begin_request), retention not positive or longer than 10
--   years.
CREATE FUNCTION hivenet.set_request_retention(p_namespace text, p_retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_conflict text;
BEGIN
    PERFORM hivenet._check_name('namespace', p_namespace);
    IF p_retention IS NULL THEN
        DELETE FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    ELSE
        PERFORM hivenet._check_interval(format('retention of namespace %s',
                                               hivenet._shown(p_namespace)), p_retention);
        v_conflict := hivenet._interval_conflict('request_retention', p_retention);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('retention %s of namespace %s %s', p_retention,
                                 hivenet._shown(p_namespace), v_conflict);
        END IF;
        INSERT INTO hivenet.request_namespace AS n (namespace, retention)
        VALUES (p_namespace, p_retention)
        ON CONFLICT (namespace) DO UPDATE SET retention = EXCLUDED.retention;
    END IF;
END $$;

-- Remove every attempt of the keys of namespace p_namespace whose attempts all ended before
-- p_cutoff; for the steps' namespace, only of the keys (system serials) dated before
-- p_dated_before (_maintain_steps: what begin_step refuses). A processing key is never
-- removed. Candidates come from the index (namespace || '', started_at): an attempt that ended before the cutoff also started before it. The keys are
-- collected first and deleted by primary key, so no plan can turn the delete into a scan (a
-- join would be hashed against every row of the namespace).
CREATE FUNCTION hivenet._purge_requests(p_namespace text, p_cutoff timestamptz,
                                        p_dated_before timestamp DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_keys text[];
BEGIN
    SELECT array_agg(DISTINCT o.key) INTO v_keys FROM hivenet.request_attempt o
    WHERE o.namespace || '' = p_namespace AND o.started_at < p_cutoff  -- the index's expression
      AND (p_dated_before IS NULL OR hivenet._serial_time('system', o.key) < p_dated_before)
      AND NOT EXISTS (SELECT 1 FROM hivenet.request_attempt y
                      WHERE y.namespace = p_namespace AND y.key = o.key
                        AND (y.finished_at IS NULL OR y.finished_at >= p_cutoff));
    IF v_keys IS NOT NULL THEN
        DELETE FROM hivenet.request_attempt d
        WHERE d.namespace = p_namespace AND d.key = ANY (v_keys);
    END IF;
END $$;

-- Retention of requests (run by hivenet.maintain()): each namespace but the steps' (see
-- _maintain_steps) by its own retention. The namespaces are found by skipping through the
-- index, one probe each, never by reading the rows.
CREATE FUNCTION hivenet._maintain_requests() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_default interval := hivenet._setting_value('request_retention')::interval;
    v_namespace text;
    v_retention interval;
BEGIN
    FOR v_namespace IN
        WITH RECURSIVE n AS (
            SELECT min(a.namespace) AS namespace FROM hivenet.request_attempt a
            UNION ALL
            SELECT (SELECT min(a.namespace) FROM hivenet.request_attempt a
                    WHERE a.namespace > n.namespace)
            FROM n WHERE n.namespace IS NOT NULL)
        SELECT n.namespace FROM n
        WHERE n.namespace IS NOT NULL AND n.namespace <> 'hivenet.steps'
    LOOP
        SELECT r.retention INTO v_retention FROM hivenet.request_namespace r
        WHERE r.namespace = v_namespace;
        -- Bounded as set_request_retention bounds it: a cutoff is always a timestamp.
        PERFORM hivenet._purge_requests(v_namespace, v_now - least(
            coalesce(v_retention, v_default), hivenet._longest_interval()));
    END LOOP;
END $$;

-- hivenet_db/sql/steps.sql
-- System-serial step state machine (SPEC §4, seed 000 "业务层查重", seeds 002/003).
--
-- A step is the keyed request (requests.sql) of namespace 'hivenet.steps' whose key is its
-- 30-character system serial: the same table, the same state machine, the same errors. What
-- steps add: the serial is checked (HN001), must be dated inside the window whose records are
-- kept (HN021), and the business transaction's unified serial is recorded for audit.
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
    'every attempt of every processing step (system serial); the latest attempt is the step''s state';

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

-- What view _step_start vouches for (below), and _begin_step after the view wrote nothing: both
-- serials valid (the layouts generated from the formats, compile.sql), the system serial surely
-- inside the window (_step_in_window, compile.sql) and an allowed lease or none (clock.sql,
-- _interval_allowed). Inlined where it is called: no function runs. VOLATILE (hivenet.now()).
CREATE FUNCTION hivenet._step_start_valid(p_system_serial text, p_unified_serial text,
                                          p_lease interval) RETURNS boolean
LANGUAGE sql
BEGIN ATOMIC
    SELECT hivenet._serial_valid('system', p_system_serial)
       AND hivenet._step_in_window(p_system_serial)
       AND (p_unified_serial IS NULL OR hivenet._serial_valid('unified', p_unified_serial))
       AND (p_lease IS NULL OR hivenet._interval_allowed(p_lease));
END;

-- The first attempt of a new step, written by one INSERT into this view (its rule runs with the
-- owner's rights): begin_step's common case (_start_step, below). The rule checks what a new
-- step with plain options needs and inserts attempt 1; it writes nothing for a step that has
-- an attempt, or for input it does not vouch for, and then _begin_step decides and names the
-- problem. No SECURITY DEFINER call (docs/design/sql-internals.md).
-- Insert-only, for hivenet_app (privileges.sql): the row it writes is the one begin_step would
-- write, and reading the view shows nothing.
--   The checks (_step_start_valid, above) are generated from the definitions of formats
--   'system' and 'unified' and from the settings (compile.sql, _serial_valid; _step_in_window):
--   inlined, no query. A serial dated on the window's first two days or after today, or
--   instances to check, take the full path. Options are not columns: only plain options
--   (_plain_options, requests.sql) take this path, as they start a new step alike.
--   The VALUES list evaluates each inserted expression once. A rule puts the expression in
--   place of every NEW, so a volatile one (a fresh serial) would be checked as one value and
--   stored as another; for parameters and constants the planner folds the list away.
CREATE VIEW hivenet._step_start AS
SELECT NULL::text AS system_serial, NULL::jsonb AS request, NULL::text AS unified_serial,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._step_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE hivenet._step_start_valid(n.system_serial, n.unified_serial, n.lease)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;

-- Whether a new step with plain options was started: attempt 1 written through view
-- _step_start. begin_step's second branch, run as the caller: the view's rule writes with the
-- owner's rights and its checks are bound when it was created, so no SECURITY DEFINER and no
-- SET clause is needed, and none is paid (a SET costs a tenth of a begin; requests.sql).
-- PL/pgSQL, so its INSERT is planned once per session, not per call.
CREATE FUNCTION hivenet._start_step(p_system_serial text, p_request jsonb, p_on_success text,
    p_unified_serial text, p_lease interval, p_nowait boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT hivenet._plain_options(p_on_success, p_nowait) THEN
        RETURN false;
    END IF;
    INSERT INTO hivenet._step_start
    VALUES (p_system_serial, p_request, p_unified_serial, p_lease);
    RETURN FOUND;
END $$;

-- begin_step's full path, in the step owner's rights, after _start_step wrote nothing. A step
-- that has an attempt, its input vouched for by the view's test (_step_start_valid) with
-- plain options, goes to the state machine (requests.sql); everything else (bad input,
-- nowait, instances to check, a serial near the window's edges) gets every check with its
-- exact error first (parse_serial names the problem). Not set-returning (OUT parameters): no
-- tuplestore of its own.
CREATE FUNCTION hivenet._begin_step(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval, p_nowait boolean, OUT outcome text, OUT attempt integer,
    OUT response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
BEGIN
    -- Without parse_serial (~200 µs a serial) when the view vouches for the input.
    IF NOT (hivenet._plain_options(p_on_success, p_nowait)
            AND coalesce(hivenet._step_start_valid(p_system_serial, p_unified_serial, p_lease),
                         false)) THEN
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
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
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease) b;
        RETURN;
    END IF;
    SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
    FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                p_unified_serial, p_lease) b;
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
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive or
--   longer than 10 years.
--   HN021 SerialOutsideWindow: the serial's date, read as its caller's local date in any zone
--   from UTC-12 to UTC+14, starts before now - step_retention in every such zone (the step's
--   record may already be purged: it must not run again), or after now +
--   step_future_tolerance in every such zone, unless this database issued serials of its
--   scope dated that day or later (its clock stepped back).
--   HN002 UnknownScope: a database that declared owned instances does not own the serial's
--   instance (a retry sent to the wrong shard; ownership.sql, check_received_instances).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
--   One statement, three branches: begin_step is a set-returning LANGUAGE sql function that
--   the planner inlines into the caller's statement (called in FROM), a UNION ALL under
--   LIMIT 1 whose branches run in order, each only when the ones before it returned nothing:
--   1. A replay of a step that succeeded with the same request, plain options, no unified
--      serial or the one it was begun with, and a serial in the window is one read of view
--      _step_replay by primary key, with no PL/pgSQL call: the stored serials were checked
--      when the step began (a format is never redefined), so no serial is parsed again.
--   2. A new step with plain options: _start_step, one INSERT into view _step_start.
--   3. Everything else (failed, processing, another request or unified serial, reject,
--      nowait, bad input, an instance other shards own) goes to _begin_step, which decides
--      and names the problem.
--   Why this shape: docs/design/sql-internals.md.
CREATE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE sql STABLE
BEGIN ATOMIC
    (SELECT 'replayed'::text, r.attempt, r.response
     FROM hivenet._step_replay r
     WHERE r.system_serial = p_system_serial
       AND r.fingerprint = hivenet._fingerprint(p_request)
       -- Options that replay (nowait or not: a replay never waits); the unified serial the
       -- step was begun with (so a valid one) or none.
       AND p_on_success = 'replay' AND p_nowait IS NOT NULL
       AND (p_lease IS NULL OR p_lease > interval '0')
       AND (p_unified_serial IS NULL OR p_unified_serial = r.unified_serial)
       AND hivenet._step_in_window(r.system_serial)
     UNION ALL
     SELECT 'started'::text, 1, NULL::jsonb
     WHERE hivenet._start_step(p_system_serial, p_request, p_on_success, p_unified_serial,
                               p_lease, p_nowait)
     UNION ALL
     SELECT b.outcome, b.attempt, b.response
     FROM hivenet._begin_step(p_system_serial, p_request, p_on_success, p_unified_serial,
                              p_lease, p_nowait) b)
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
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL)
RETURNS void
-- finish_request on the steps' namespace (the same UPDATE, the same errors), inlined into the
-- caller's statement: no PL/pgSQL layer of its own.
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT hivenet.finish_request('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                  p_response);
END;

-- hivenet.resolve_step(system_serial, attempt, succeeded, note, response default null) → void
--   Operator action for a stuck step (hivenet.stuck_steps): once the real outcome of attempt
--   `attempt` is known (e.g. from the remote system's reconciliation), record it as
--   `success` (response replayed later) or `failed` (the next begin_step proceeds), with a
--   note and the operator's session user. The original attempt's late finish_step then gets
--   HN033. Works on any processing attempt, also before its lease ran out.
--   HN033 as finish_step; HN001 when note is empty or succeeded NULL. Blocks like finish_step.
CREATE FUNCTION hivenet.resolve_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._resolve_attempt('hivenet.steps', p_system_serial, p_attempt, p_succeeded,
                                     p_note, p_response);
END $$;

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

-- hivenet_db/sql/reporting.sql
-- Reporting: every view a reporting tool (or `hivenet-db report`) reads with plain SELECT,
-- and call_chain(); docs/guides/reporting.md lists them all. Granted to hivenet_reporting and
-- hivenet_admin (privileges.sql), with what they call as their reader.

-- Interface calls (dedup.sql).

-- hivenet.interface_calls: every recorded call with the fields of its interface serial.
--   serial_time is the time printed in the serial (business-local, as issued).
CREATE VIEW hivenet.interface_calls AS
SELECT c.interface_serial,
       c.unified_serial,
       c.system_serial,
       -- Read by the layout of format 'interface' (compile.sql: generated functions).
       hivenet._serial_field('interface', c.interface_serial, 'system') AS source_system,
       hivenet._serial_field('interface', c.interface_serial, 'module') AS source_module,
       hivenet._serial_field('interface', c.interface_serial, 'instance') AS source_instance,
       hivenet._serial_field('interface', c.interface_serial, 'target') AS target_system,
       c.serial_day,
       -- make_timestamp: no session time zone involved (to_timestamp would shift a local time
       -- that the session's zone skips at a DST change).
       hivenet._serial_time('interface', c.interface_serial) AS serial_time,
       c.recorded_at,
       c.call_order
FROM hivenet.interface_call c;
COMMENT ON VIEW hivenet.interface_calls IS
    'recorded interface calls with the source and target of each serial (reporting)';

-- hivenet.interface_calls_per_day: calls per serial day, source and target system.
CREATE VIEW hivenet.interface_calls_per_day AS
SELECT serial_day AS day, source_system, target_system, count(*) AS calls
FROM hivenet.interface_calls
GROUP BY serial_day, source_system, target_system;
COMMENT ON VIEW hivenet.interface_calls_per_day IS
    'recorded interface calls per serial day, source system and target system (reporting)';

-- hivenet.call_chain(unified_serial) → table: every recorded call of that business
--   transaction, exactly in the order recorded (call_order). Empty when none is recorded or the
--   days are past retention. No HN error; reads only, never blocks.
CREATE FUNCTION hivenet.call_chain(p_unified_serial text)
RETURNS TABLE (interface_serial text, system_serial text, source_system text,
               source_module text, source_instance text, target_system text,
               serial_time timestamp, recorded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.interface_serial, c.system_serial, c.source_system, c.source_module,
           c.source_instance, c.target_system, c.serial_time, c.recorded_at
    FROM hivenet.interface_calls c
    WHERE c.unified_serial = p_unified_serial
    ORDER BY c.call_order
$$;

-- Steps (steps.sql).

-- hivenet.stuck_steps: steps still `processing` after their lease ran out, oldest first. Their
-- outcome is unknown (the remote call may or may not have happened): find it out, then
-- hivenet.resolve_step(system_serial, attempt, succeeded, note).
-- A scan of the steps' attempts (an index on state would make every finish a non-HOT update).
CREATE VIEW hivenet.stuck_steps AS
SELECT a.key AS system_serial, a.attempt, a.unified_serial, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace = 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_steps IS
    'processing steps past their lease (unknown outcome): resolve with hivenet.resolve_step';

-- hivenet.step_states: how many steps (system serials) are in each state, every state listed.
CREATE VIEW hivenet.step_states AS
SELECT s.state::text AS state, count(l.key) AS steps
FROM unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.key) a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace = 'hivenet.steps'
           ORDER BY a.key, a.attempt DESC) AS l
       ON l.state = s.state
GROUP BY s.state
ORDER BY s.state;
COMMENT ON VIEW hivenet.step_states IS 'number of steps per state (the state of their latest attempt)';

-- Counter scopes (counters.sql).


-- Raw value of a counter scope's sequence (period * stride + seq), NULL before its first use
-- and for any name that is no sequence of schema hivenet (executable by every role: a table's
-- name must not raise 42809).
-- SECURITY DEFINER: a reporting role reads the view without any right on the sequences.
CREATE FUNCTION hivenet._scope_counter_value(p_sequence_name text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_sequence_last_value(c.oid) FROM pg_class c
    WHERE c.relnamespace = 'hivenet'::regnamespace AND c.relname = p_sequence_name
      AND c.relkind = 'S'
$$;

-- Business-local now for the views: SECURITY DEFINER because the clock and the time zone
-- read hivenet.setting, which a reporting role cannot.
CREATE FUNCTION hivenet._reporting_local_now() RETURNS timestamp
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone')
$$;

-- hivenet.scope_usage: one row per counter scope (format + field values) with a sequence of
--   its own, and one per format for its cold counter (scope '(unprepared scopes)', fields {},
--   shared true), which the scopes not prepared before their first use share until maintain()
--   gives each its own: when it runs out, every unprepared scope of the format is refused for
--   the period, and a scope prepared then starts exhausted (counters.sql).
--   format, scope, fields (jsonb: the counter-key fields given to next_serial), reset,
--   period_start (business-local start of the scope's current period: the clock's period, or
--   a later one when the clock went back or the format borrowed the next period),
--   issued (serials issued in that period; gaps of rolled-back transactions count as issued),
--   capacity (serials per period), remaining (capacity - issued), used_percent,
--   last_period_start (business-local start of the period of the last serial issued, NULL
--   when none), shared (true for a cold counter). Reads the clock once (hivenet.now());
--   never blocks; one sequence read per scope.
CREATE VIEW hivenet.scope_usage AS
WITH clock AS (
    SELECT hivenet._reporting_local_now() AS local_now
), counter AS (
    SELECT s.format, s.scope, s.fields, s.shared, f.reset, f.capacity,
           v.value / f.stride AS value_period,
           v.value % f.stride AS value_seq,
           greatest(hivenet._period_index(c.local_now, f.reset), v.value / f.stride) AS period
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name, false AS shared
          FROM hivenet.scope c
          UNION ALL
          SELECT n.name, '(unprepared scopes)', '{}'::jsonb, 'cold_' || n.name, true
          FROM hivenet.format n
         ) AS s
    JOIN hivenet.format f ON f.name = s.format
    CROSS JOIN clock c
    CROSS JOIN LATERAL (SELECT hivenet._scope_counter_value(s.sequence_name) AS value) v
), usage AS (
    SELECT c.*,
           CASE WHEN c.value_period = c.period THEN least(c.value_seq, c.capacity) ELSE 0 END
               AS issued
    FROM counter c
)
SELECT u.format, u.scope, u.fields, u.reset,
       hivenet._period_start(u.period, u.reset) AS period_start,
       u.issued, u.capacity, u.capacity - u.issued AS remaining,
       round(100.0 * u.issued / u.capacity, 2) AS used_percent,
       hivenet._period_start(u.value_period, u.reset) AS last_period_start,
       u.shared
FROM usage u;
COMMENT ON VIEW hivenet.scope_usage IS
    'per counter scope: current period, serials issued in it, capacity and remaining headroom';

-- Keyed requests (requests.sql).

-- hivenet.stuck_requests: keyed requests (requests.sql; not steps: hivenet.stuck_steps) still
-- `processing` after their lease ran out, oldest first. Their outcome is unknown: find it out,
-- then hivenet.resolve_request(namespace, key, attempt, succeeded, note).
CREATE VIEW hivenet.stuck_requests AS
SELECT a.namespace, a.key, a.attempt, a.started_at,
       a.started_at + hivenet._step_lease(a.lease) AS lease_expired_at,
       hivenet.now() - a.started_at AS processing_for
FROM hivenet.request_attempt a
WHERE a.namespace <> 'hivenet.steps' AND a.state = 'processing'
  AND a.started_at + hivenet._step_lease(a.lease) < hivenet.now()
ORDER BY a.started_at;
COMMENT ON VIEW hivenet.stuck_requests IS
    'processing requests past their lease (unknown outcome): resolve with hivenet.resolve_request';

-- hivenet.request_states: per namespace of keyed requests (not steps: hivenet.step_states),
-- how many keys are in each state (the state of their latest attempt), every state listed.
CREATE VIEW hivenet.request_states AS
SELECT n.namespace, s.state::text AS state, count(l.key) AS requests
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps') AS n
CROSS JOIN unnest(enum_range(NULL::hivenet.step_state)) AS s(state)
LEFT JOIN (SELECT DISTINCT ON (a.namespace, a.key) a.namespace, a.key, a.state
           FROM hivenet.request_attempt a WHERE a.namespace <> 'hivenet.steps'
           ORDER BY a.namespace, a.key, a.attempt DESC) AS l
       ON l.namespace = n.namespace AND l.state = s.state
GROUP BY n.namespace, s.state
ORDER BY n.namespace, s.state;
COMMENT ON VIEW hivenet.request_states IS
    'number of keyed requests per namespace and state (the state of their latest attempt)';

-- hivenet_db/sql/failover.sql
-- Failover fence (docs/operations.md "Failover", docs/guarantees.md).
--
-- A standby promoted after an asynchronous failover (or a server restored to an earlier
-- point) has lost the WAL its old primary wrote last: its sequences stand below values the
-- old primary already issued, so it would issue them again. It cannot know how many, so the
-- fence moves every counter (each scope's sequence and each format's cold counter) forward by
-- a gap, no earlier than the clock's period. Guarantee: no
-- serial is issued twice as long as the old primary issued at most `gap` serials per format
-- in the WAL the new one lacks (rule: gap >= peak serials per second of one format x maximum
-- replication lag in seconds) and its clock was not ahead of the new primary's. A promotion
-- shows as a new timeline.

-- The timeline of each fence, and the one the schema was installed on (gap NULL): a timeline
-- without a row here is one nobody has fenced yet.
CREATE TABLE hivenet.failover_fence (
    timeline   integer PRIMARY KEY,
    fenced_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    gap        bigint,
    counters   integer NOT NULL DEFAULT 0,
    applied_by text NOT NULL CHECK (applied_by IN ('install', 'command', 'maintain'))
);
COMMENT ON TABLE hivenet.failover_fence IS
    'timelines whose counters were fenced after a promotion or restore (gap NULL: the install)';

-- The server's current timeline (1 on a fresh cluster; each promotion or point-in-time
-- recovery starts a new one). Readable by every role: pg_control_checkpoint() is not, and
-- it only changes at the next checkpoint. Fails on a standby (in recovery), like any write.
CREATE FUNCTION hivenet._timeline() RETURNS integer
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::integer
$$;

INSERT INTO hivenet.failover_fence (timeline, applied_by) VALUES (hivenet._timeline(), 'install');

-- The gap maintain() applies when it finds an unfenced timeline, and fence_failover() when
-- given none.
CREATE FUNCTION hivenet._default_failover_gap() RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 100000::bigint $$;

-- hivenet.fence_failover(gap, force) → table (administrators; `hivenet-db failover-fence`)
--   Run on a promoted standby before it takes traffic. Moves each counter to greatest(its
--   last value, the start of the clock's period) + p_gap. A counter of a format that does not
--   borrow the next period and whose period cannot hold the gap is parked at its capacity (HN010
--   until the next period: every number of this one may have been issued). p_gap NULL:
--   _default_failover_gap(). One row per counter moved. Does nothing (no row) when this
--   timeline was fenced already, unless p_force.
--   Commits with the caller; holds every format's cold lock until then, so run it in a short
--   transaction of its own. HN001 for a gap below 1.
CREATE FUNCTION hivenet.fence_failover(p_gap bigint DEFAULT NULL, p_force boolean DEFAULT false)
RETURNS TABLE (timeline integer, format text, counter text, from_value bigint,
               to_value bigint, parked boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM hivenet._fence(
        coalesce(p_gap, hivenet._default_failover_gap()), p_force, 'command');
END $$;

CREATE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
RETURNS TABLE (timeline integer, format text, counter text, from_value bigint,
               to_value bigint, parked boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_format hivenet.format;
    v_period bigint;
    v_seq regclass;
    v_from bigint;
    v_base bigint;
    v_to bigint;
    v_last bigint;
    v_count integer := 0;
BEGIN
    IF p_gap IS NULL OR p_gap < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failover fence: gap %s must be at least 1',
                             coalesce(p_gap::text, 'NULL'));
    END IF;
    -- maintain()'s lock: one fence at a time, never beside a maintain() run.
    PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), 0);
    IF NOT p_force AND EXISTS (SELECT FROM hivenet.failover_fence f
                               WHERE f.timeline = v_timeline) THEN
        RETURN;
    END IF;
    FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
        -- Until commit: no scope of the format is promoted from a cold value read before.
        PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
        v_period := hivenet._period_index(
            hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), v_format.reset);
        FOR counter IN
            SELECT hivenet._cold_sequence_name(v_format.name)
            UNION ALL
            (SELECT s.sequence_name FROM hivenet.scope s
             WHERE s.format = v_format.name ORDER BY s.sequence_name)
        LOOP
            v_seq := to_regclass('hivenet.' || quote_ident(counter));
            CONTINUE WHEN v_seq IS NULL;
            -- The period reset's lock (_advance), until commit: no setval of theirs between.
            PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), v_seq::oid::integer);
            v_from := coalesce(pg_sequence_last_value(v_seq), 0);
            v_base := greatest(v_from, v_period * v_format.stride);
            v_to := v_base + p_gap;
            v_last := (v_base / v_format.stride) * v_format.stride + v_format.capacity;
            parked := NOT v_format.borrow_next_period AND v_to > v_last;
            IF parked THEN
                v_to := greatest(v_last, v_from);
            END IF;
            PERFORM setval(v_seq, v_to, true);
            v_count := v_count + 1;
            timeline := v_timeline;
            format := v_format.name;
            from_value := v_from;
            to_value := v_to;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    INSERT INTO hivenet.failover_fence AS f (timeline, gap, counters, applied_by)
    VALUES (v_timeline, p_gap, v_count, p_by)
    ON CONFLICT ON CONSTRAINT failover_fence_pkey DO UPDATE
        SET fenced_at = clock_timestamp(), gap = coalesce(f.gap, 0) + EXCLUDED.gap,
            counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by;
END $$;

-- hivenet.replication_warning() → text: why failover could reissue serials, or NULL.
--   A primary with standbys (rows in pg_stat_replication, which every role may count) and
--   no synchronous_standby_names commits before its standbys have the WAL.
CREATE FUNCTION hivenet.replication_warning() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format('%s standby connection(s) and synchronous_standby_names is empty: a '
                  'failover loses the last commits, so the promoted standby reissues serials '
                  'and re-accepts claims unless `hivenet-db failover-fence` runs first '
                  '(docs/operations.md, Failover)', count(*))
    FROM pg_stat_replication
    WHERE state IS DISTINCT FROM 'backup'  -- NULL for roles without pg_read_all_stats
    HAVING count(*) > 0 AND current_setting('synchronous_standby_names') = ''
$$;

-- Part of maintain(): fences a timeline nobody fenced, as a backstop: serials issued between
-- the promotion or restore and this run are not covered. Warns about asynchronous standbys.
CREATE FUNCTION hivenet._maintain_failover() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_warning text;
BEGIN
    IF NOT EXISTS (SELECT FROM hivenet.failover_fence WHERE timeline = v_timeline) THEN
        PERFORM hivenet._fence(hivenet._default_failover_gap(), false, 'maintain');
        RAISE WARNING USING MESSAGE = format(
            'hivenet: timeline %s was not fenced (a promoted standby or a restore): maintain() '
            'moved every counter forward by %s; run `hivenet-db failover-fence` before '
            'traffic next time', v_timeline, hivenet._default_failover_gap());
    END IF;
    v_warning := hivenet.replication_warning();
    IF v_warning IS NOT NULL THEN
        RAISE WARNING USING MESSAGE = 'hivenet: ' || v_warning;
    END IF;
END $$;

-- hivenet_db/sql/privileges.sql
-- Least privilege. Nothing in schema hivenet is granted to PUBLIC: a role that may see the
-- schema may do nothing in it, and a login with no grant at all may not draw from a counter by
-- its OID (nextval(oid) needs no USAGE on the schema). Three roles, granted to logins by the
-- owner (it holds them WITH ADMIN OPTION):
--   hivenet_app        the application API (allocation, claims, steps, keyed requests);
--   hivenet_reporting  SELECT on the reporting views and call_chain(): states, counts, ages
--                      and serials, never a stored request or response;
--   hivenet_admin      administration (maintain, fence, formats, registry, settings) and the
--                      reporting views; SELECT on every table.
-- The public functions are SECURITY DEFINER, so no role needs a right on a table. What runs
-- with the caller's rights is listed below and granted to the role that calls it: the
-- inlined fast paths (an inlined function is inlined only if the caller may EXECUTE it, and
-- what its body reads is checked as the caller), the rules of the start views, and the
-- functions the views call (PostgreSQL runs a view's functions as its reader). Nothing here
-- opens a connection, and no setting holds a secret.

-- The roles, when the migrating role may create them (a superuser, or CREATEROLE: a
-- developer's laptop, the embedded server). Otherwise `hivenet-db bootstrap` creates them and
-- runs _grant_roles(); until then only the owner may use the schema (migrate says so).
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['hivenet_app', 'hivenet_reporting', 'hivenet_admin'] LOOP
        IF to_regrole(v_role) IS NULL
           AND (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
        END IF;
    END LOOP;
END $$;

-- Lets hivenet_app take values (nextval, currval: USAGE) of counter sequence p_name of schema
-- hivenet, which the allocation fast path draws from as the caller; never UPDATE (setval is
-- the owner's slow path) nor ALTER. Called when a counter is made (counters.sql) and for every
-- counter by _grant_roles(). Nothing when the role does not exist yet.
CREATE FUNCTION hivenet._grant_counter(p_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO hivenet_app', p_name);
    END IF;
END $$;

-- Grants to the roles that exist (called here, and by bootstrap when it creates them after the
-- schema was installed). Safe to run again.
CREATE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_counter text;
    v_role text;
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        -- The application API.
        GRANT EXECUTE ON FUNCTION
            hivenet.now(),
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
            hivenet.begin_request(text, text, jsonb, text, interval, boolean),
            hivenet.finish_request(text, text, integer, boolean, jsonb),
            hivenet.ownership(),
            hivenet.flush_at_commit()
        TO hivenet_app;
        -- now() is inlined into the caller: its fake clock (clock.sql) runs as the caller.
        GRANT EXECUTE ON FUNCTION hivenet._fake_now() TO hivenet_app;
        -- The allocation fast path (compile.sql, _fast_unified and _fast_system), inlined into
        -- next_unified_serial / next_system_serial: every function in it, and USAGE on the
        -- counters it draws from (_grant_counter). The constants say what the formats and
        -- settings are (no secret).
        GRANT EXECUTE ON FUNCTION
            hivenet._fast_unified(text, text, text),
            hivenet._fast_system(text, text, text),
            hivenet._format_constant(text),
            hivenet._setting_constant(text),
            hivenet._scope_sequence_name(text, text)
        TO hivenet_app;
        FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s ORDER BY 1 LOOP
            IF to_regclass('hivenet.' || quote_ident(v_counter)) IS NOT NULL THEN
                PERFORM hivenet._grant_counter(v_counter);
            END IF;
        END LOOP;
        -- begin_step and begin_request (steps.sql, requests.sql), inlined into the caller's
        -- statement. The replay of a succeeded step: _step_in_window and view _step_replay,
        -- SELECT only: of every succeeded step its serial, attempt, request fingerprint,
        -- unified serial and stored response, what begin_step replays to whoever presents the
        -- same request. The application's own replays: no other role reads them.
        GRANT EXECUTE ON FUNCTION
            hivenet._step_in_window(text),
            hivenet._fingerprint(jsonb)
        TO hivenet_app;
        GRANT SELECT ON hivenet._step_replay TO hivenet_app;
        -- A new step's or key's first attempt: _start_step / _start_request (run as the
        -- caller) insert into view _step_start / _request_start, whose rule writes with the
        -- owner's rights: the role may insert, not read. The rules' checks run as the
        -- inserter: _step_start_valid and the generated layout check _serial_valid with
        -- _serial_time (compile.sql), and _request_start_valid.
        GRANT INSERT ON hivenet._step_start, hivenet._request_start TO hivenet_app;
        GRANT EXECUTE ON FUNCTION
            hivenet._plain_options(text, boolean),
            hivenet._start_step(text, jsonb, text, text, interval, boolean),
            hivenet._start_request(text, text, jsonb, text, interval, boolean),
            hivenet._serial_valid(text, text),
            hivenet._serial_time(text, text),
            hivenet._step_start_valid(text, text, interval),
            hivenet._request_start_valid(text, text, interval)
        TO hivenet_app;
        -- Everything else: _begin_step / _begin_request (SECURITY DEFINER, every check of
        -- begin_step / begin_request: calling them directly can do nothing the public
        -- functions cannot).
        GRANT EXECUTE ON FUNCTION
            hivenet._begin_step(text, jsonb, text, text, interval, boolean),
            hivenet._begin_request(text, text, jsonb, text, interval, boolean)
        TO hivenet_app;
        -- The rules those checks and _step_in_window inline (clock.sql, claims.sql): the
        -- callers' clock, the bound on intervals, the rule for names and keys.
        GRANT EXECUTE ON FUNCTION
            hivenet._caller_now(timestamptz, text),
            hivenet._longest_interval(),
            hivenet._interval_allowed(interval),
            hivenet._name_valid(text)
        TO hivenet_app;
    END IF;

    -- The reporting views and what they call as their reader, for both roles that read them.
    FOREACH v_role IN ARRAY ARRAY['hivenet_reporting', 'hivenet_admin'] LOOP
        CONTINUE WHEN to_regrole(v_role) IS NULL;
        EXECUTE format('GRANT USAGE ON SCHEMA hivenet TO %I', v_role);
        EXECUTE format('GRANT SELECT ON hivenet.interface_calls, '
                       'hivenet.interface_calls_per_day, hivenet.step_states, '
                       'hivenet.stuck_steps, hivenet.scope_usage, hivenet.request_states, '
                       'hivenet.stuck_requests TO %I', v_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION '
                       'hivenet.call_chain(text), '
                       'hivenet.now(), hivenet._fake_now(), '    -- stuck_steps, stuck_requests
                       'hivenet._step_lease(interval), '         -- likewise
                       'hivenet._reporting_local_now(), '        -- scope_usage
                       'hivenet._period_index(timestamp, text), '
                       'hivenet._period_start(bigint, text), '
                       'hivenet._scope_counter_value(text), '
                       'hivenet._serial_field(text, text, text), '  -- interface_calls
                       'hivenet._serial_time(text, text), '
                       'hivenet.parse_serial(text, text) '          -- in both, for other formats
                       'TO %I', v_role);
    END LOOP;

    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.maintain(),
            hivenet.fence_failover(bigint, boolean),
            hivenet._timeline(),  -- `hivenet-db failover-fence` reports this timeline's fence
            hivenet.replication_warning(),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.prepare_scope(text, jsonb),
            hivenet.register_system(text, text),
            hivenet.register_module(text, text, text),
            hivenet.own_instances(text, boolean, boolean),
            hivenet.ownership(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_claim_expiry(text, interval),
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $$;

-- Functions are executable by PUBLIC when created: take that back from every function of the
-- schema that is not an extension's. (Generated functions are replaced, never created anew,
-- so they keep their grants.)
DO $$
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
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_function);
    END LOOP;
END $$;

SELECT hivenet._grant_roles();

