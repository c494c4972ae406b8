-- Revision 0017: hash lanes (issue 13: allocation flat from 10 to 100,000 scopes, a first use
-- as cheap as any allocation).
--   * formats.sql: column format.lanes, from the seq segment's "lanes" (a power of two from 2
--     to 1024; refused for a format with a clock_unit); unified and system get 64.
--   * allocate.sql: the lanes hivenet.lane_<format>_<n> (made with the format, USAGE for
--     PUBLIC), _lane_of (the hash), _allocate and the generated fast path draw a laned
--     format's scope from its lane (the fast path by a constant array of the lanes' OIDs, with
--     the owned instances written in); prepare_scope only checks for a laned format.
--   * ownership.sql: _scopes_by_node leaves laned formats out (checked on every call instead).
--   * failover.sql: _fence moves the lanes, not the retired scope sequences.
--   * reporting.sql: scope_usage shows a laned format's lanes.
--   * settings.sql: _setting_check counts a used lane as serials issued (time zone guard).
--   * data: every lane starts at the highest value any counter of its format reached (each
--     scope sequence, parked or not, and the cold counter), so no scope goes back; pending
--     first uses of laned formats are dropped (they draw from lanes now). The scope sequences
--     of laned formats are kept, retired (never drawn from again): dropping 100,000 of them
--     would take one lock each in this transaction (beyond the lock table), and the
--     downgrade restarts them above the lanes.

-- hivenet_db/sql/formats.sql
ALTER TABLE hivenet.format ADD COLUMN lanes integer;

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
            ELSE ARRAY['seq', 'reset', 'lanes'] END);
        IF v_unknown IS NOT NULL THEN
            PERFORM hivenet._format_error(p_name, format(
                '%s segment %s has unknown keys %s (a %s segment takes %s)', v_kind,
                hivenet._shown(v_seg::text), v_unknown, v_kind, CASE v_kind
                WHEN 'field' THEN 'field, width, charset, min, max, printed, counter'
                WHEN 'seq' THEN 'seq, reset, lanes' ELSE v_kind END));
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
            -- Lanes: a power of two (the lane is a bit mask of the hash), 0 or absent for a
            -- sequence per scope.
            IF v_seg ? 'lanes' AND (jsonb_typeof(v_seg -> 'lanes') <> 'number'
                OR (v_seg ->> 'lanes') NOT IN ('0', '2', '4', '8', '16', '32', '64', '128',
                                               '256', '512', '1024')) THEN
                PERFORM hivenet._format_error(p_name, format(
                    'seq lanes %s must be a power of two from 2 to 1024, or 0 for a sequence '
                    'per scope', hivenet._shown(v_seg ->> 'lanes')));
            END IF;
            v_row.lanes := nullif((v_seg ->> 'lanes')::integer, 0);
            v_row.seq_width := v_width;
            v_row.head_pattern := v_pattern;
            v_pattern := '';
            v_segments := v_segments || jsonb_build_array(jsonb_build_object(
                'seq', v_width, 'reset', v_row.reset)
                || CASE WHEN v_row.lanes IS NULL THEN '{}'
                        ELSE jsonb_build_object('lanes', v_row.lanes) END);
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
    -- A clock sequence is per counter: a lane's would keep the time of day of every scope of
    -- the lane, and its name is derived from a scope's (allocate.sql).
    IF v_row.lanes IS NOT NULL AND v_row.clock_unit IS NOT NULL THEN
        PERFORM hivenet._format_error(p_name, format(
            'seq lanes need a format that prints no time finer than its reset period (this one '
            'prints the %s and resets every %s): give it no lanes', v_row.clock_unit,
            v_row.reset));
    END IF;
    v_row.segments := v_segments;
    v_row.borrow_next_period := coalesce(p_borrow_next_period, false);
    v_row.builtin := false;
    v_row.description := p_description;
    RETURN v_row;
END $$;

-- hivenet_db/sql/allocate.sql
-- The lane sequence p_lane (0 .. lanes - 1) of format p_format: at most 5 + 31 + 1 + 4
-- characters (format names are at most 31).
CREATE OR REPLACE FUNCTION hivenet._lane_sequence_name(p_format text, p_lane integer) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT 'lane_' || p_format || '_' || p_lane
$$;

-- The lane (0 .. p_lanes - 1, a power of two) of counter scope p_scope: the one definition of
-- the hash, on the full path (_lane) and in the generated fast paths. Inlined: a SQL-standard
-- body without SET (see _period_index).
CREATE OR REPLACE FUNCTION hivenet._lane_of(p_scope text, p_lanes integer) RETURNS integer
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    -- NULL for a lane count no format can have (the function is public: the fast path).
    SELECT CASE WHEN p_lanes BETWEEN 1 AND 1024 THEN hashtext(p_scope) & (p_lanes - 1) END;
END;

-- The lane sequence of counter scope p_scope of laned format p_format.
CREATE OR REPLACE FUNCTION hivenet._lane(p_format hivenet.format, p_scope text) RETURNS regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('hivenet.' || quote_ident(hivenet._lane_sequence_name(
        p_format.name, hivenet._lane_of(p_scope, p_format.lanes))))::regclass
$$;

-- Creates the lanes of format p_format that do not exist yet, and moves every lane to at
-- least p_floor (a value every scope of the format has passed: revision 0017).
CREATE OR REPLACE FUNCTION hivenet._create_lanes(p_format hivenet.format, p_floor bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_lane regclass;
BEGIN
    FOR i IN 0 .. coalesce(p_format.lanes, 0) - 1 LOOP
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                       hivenet._lane_sequence_name(p_format.name, i));
        -- For the fast path, which runs as the caller (privileges.sql): nextval only.
        EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO PUBLIC',
                       hivenet._lane_sequence_name(p_format.name, i));
        v_lane := ('hivenet.' || quote_ident(hivenet._lane_sequence_name(p_format.name, i)))
                  ::regclass;
        IF coalesce(pg_sequence_last_value(v_lane), 0) < p_floor THEN
            PERFORM setval(v_lane, p_floor, true);
        END IF;
    END LOOP;
END $$;

-- Trigger: every format gets its cold counter (and clock), and a laned format its lanes, in
-- the transaction that defines it.
CREATE OR REPLACE FUNCTION hivenet._create_cold_counter() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(NEW.name));
    IF NEW.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._cold_sequence_name(NEW.name), 0);
    END IF;
    PERFORM hivenet._create_lanes(NEW, 0);
    RETURN NULL;
END $$;

-- hivenet.prepare_scope(format, fields) → void (administrators)
--   Gives the counter scope of fields its own sequence now, so that its serials start at 1
--   from the first (maintain() does the same for every scope that has been used). For a
--   format with lanes it only checks (fields, ownership): its scopes have no sequence of their
--   own, and there is nothing to prepare (a first use is an ordinary allocation). Commits
--   with the caller's transaction: run it in a short one of its own, since allocations of
--   new scopes of the format wait for it. HN001 for an unknown format or bad field values;
--   HN002 for an instance (or a format) this database does not own (ownership.sql).
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
    PERFORM hivenet._check_owned(v_format, v_values);
    IF v_format.lanes IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM hivenet._promote_scope(v_format, hivenet._scope_of(v_format, v_values),
                                   hivenet._scope_fields(v_format, v_values));
END $$;

-- The core of every next_* function: p_count serials of format p_format, the field values
-- given by name in p_fields (a JSON object), or, when p_values is not NULL, in p_values in the
-- format's field order (the next_<kind>_serial functions: no JSON on their path).
-- Raises HN001 (bad format, field or count), HN002 (registry), HN010 (period exhausted).
-- Never waits for another transaction; may wait a moment for another allocation's period
-- reset (the advisory lock is held for one setval, never until commit), and a new scope's
-- allocation waits for a maintain() that is promoting scopes of the format to commit.
-- The hot path is short on purpose (docs/benchmarks.md): one query, one regex match, no loop
-- over segments; the slow paths (bad input, a new scope, period reset) are helpers.
CREATE OR REPLACE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
    p_count integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- Settings and format from generated constants (settings.sql): no query on the hot path.
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
    IF v_format.lanes IS NOT NULL THEN
        -- No first use to check ownership at: every call of a laned format is checked
        -- (ownership.sql; the fast path has the owned instances written in).
        IF hivenet._setting_constant('owned_instances') IS DISTINCT FROM 'all' THEN
            PERFORM hivenet._check_owned(v_format, v_values);
        END IF;
        RETURN hivenet._issue(hivenet._lane(v_format, v_scope), v_format, v_values, p_count,
            format('lane %s (shared by scope %L and the other scopes hashed to it)',
                   hivenet._lane_of(v_scope, v_format.lanes), v_scope));
    END IF;
    v_seq := to_regclass(
        'hivenet.' || quote_ident(hivenet._scope_sequence_name(p_format, v_scope)));
    IF v_seq IS NULL THEN
        RETURN hivenet._issue_cold(v_format, v_values, p_count);
    END IF;
    RETURN hivenet._issue(v_seq, v_format, v_values, p_count, format('scope %L', v_scope));
END $$;

-- The expression of the fast path of format p_format (see above), or 'NULL::text' when the
-- format or the settings leave every call to the full path.
CREATE OR REPLACE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text,
    p_enforce_registry boolean) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_local text := format('(statement_timestamp() AT TIME ZONE %L)', p_zone);
    v_bounds text[] := ARRAY[]::text[];
    v_printed text;
    v_field text;
    v_counter text;
    v_owned text;
    v_node integer;
BEGIN
    IF p_format IS NULL OR p_enforce_registry OR p_format.reset IS DISTINCT FROM 'day'
       OR p_format.lanes IS NULL
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
    -- The counter: the scope's lane, by a constant (the lanes' OIDs written in: no name
    -- look-up, which cost ~3%).
    v_counter := format('(%L::regclass[])[hivenet._lane_of(p_a || p_b || p_c, %s) + 1]',
        (SELECT array_agg(('hivenet.' || quote_ident(hivenet._lane_sequence_name(
             p_format.name, l)))::regclass::oid ORDER BY l)
         FROM generate_series(0, p_format.lanes - 1) AS l),
        p_format.lanes);
    -- No first use to check ownership at (ownership.sql): the owned instances are written in,
    -- and an unowned one goes to the full path (HN002). (No setting yet while the schema's
    -- first files are installed.)
    v_owned := (SELECT value FROM hivenet.setting WHERE name = 'owned_instances');
    IF v_owned IS DISTINCT FROM 'all' AND v_owned IS NOT NULL THEN
        v_node := array_position(p_format.field_names, hivenet._node_field(p_format));
        IF v_node IS NULL THEN
            RETURN 'NULL::text';
        END IF;
        v_bounds := v_bounds || format('%s = ANY (%L::text[])',
            (ARRAY['p_a', 'p_b', 'p_c'])[v_node],
            ARRAY(SELECT to_char(i, 'FM00') FROM generate_series(0, 99) AS i
                  WHERE hivenet._instance_in(to_char(i, 'FM00'), v_owned) ORDER BY i));
    END IF;
    -- The values then the date (the built-in layouts): no format() at run time.
    v_printed := CASE WHEN starts_with(p_format.head_pattern, '"%1$s""%2$s""%3$s"')
        THEN format('p_a || p_b || p_c || to_char(%s, %L)', v_local,
                    substr(p_format.head_pattern, 19))
        ELSE format('to_char(%s, format(%L, p_a, p_b, p_c))', v_local, p_format.head_pattern)
        END;
    -- Nested CASE: the casts of the bounds are safe only once the values matched.
    RETURN format(
        $f$CASE WHEN (p_a || ' ' || p_b || ' ' || p_c) ~ %L THEN CASE
    WHEN coalesce(current_setting('hivenet.fake_now', true), '') = '' AND %s
    THEN %s || lpad(nullif(nullif(least(greatest(
             nextval(%s)
             - hivenet._period_index(%s, 'day') * %s,
             0), %s), 0), %s)::text, %s, '0')
    END END$f$,
        p_format.field_pattern, coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, v_counter, v_local, p_format.stride, p_format.capacity + 1,
        p_format.capacity + 1, p_format.seq_width);
END $$;

-- hivenet_db/sql/ownership.sql
-- Counter scopes with a sequence of their own (parked or not) or waiting for one, with their
-- format and node value. Not those of laned formats (sequences retired by revision 0017: their
-- scopes draw from lanes, which ownership never parks).
CREATE OR REPLACE FUNCTION hivenet._scopes_by_node()
RETURNS TABLE (format hivenet.format, scope text, node text, sequence_name text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT f, s.scope, s.fields ->> hivenet._node_field(f), s.sequence_name
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name FROM hivenet.scope c
          UNION ALL
          SELECT DISTINCT p.format, p.scope, p.fields, NULL FROM hivenet.scope_pending p) AS s
    JOIN hivenet.format f ON f.name = s.format
    WHERE f.lanes IS NULL
$$;

-- hivenet_db/sql/failover.sql
CREATE OR REPLACE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
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
        -- A laned format's lanes, not the sequences its scopes had before revision 0017
        -- (retired, never drawn from again).
        FOR counter IN
            SELECT hivenet._cold_sequence_name(v_format.name)
            UNION ALL
            (SELECT hivenet._lane_sequence_name(v_format.name, l)
             FROM generate_series(0, coalesce(v_format.lanes, 0) - 1) AS l ORDER BY l)
            UNION ALL
            (SELECT s.sequence_name FROM hivenet.scope s
             WHERE s.format = v_format.name AND v_format.lanes IS NULL
             ORDER BY s.sequence_name)
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

-- hivenet_db/sql/reporting.sql
-- hivenet.scope_usage: one row per counter scope (format + field values) with a sequence of
--   its own, and one per format for its cold counter (scope '(new scopes)', fields {}), which
--   new scopes share until maintain() gives them their own; for a format with hash lanes
--   (unified, system: allocate.sql), one row per lane instead (scope '(lane N)', fields {}:
--   its scopes share it; issued counts them all), and none for its scopes or cold counter.
--   format, scope, fields (jsonb: the counter-key fields given to next_serial), reset,
--   period_start (business-local start of the scope's current period: the clock's period, or
--   a later one when the clock went back or the format borrowed the next period),
--   issued (serials issued in that period; gaps of rolled-back transactions count as issued),
--   capacity (serials per period), remaining (capacity - issued), used_percent,
--   last_period_start (business-local start of the period of the last serial issued, NULL
--   when none). Reads the clock once (hivenet.now()); never blocks; one sequence read per scope.
CREATE OR REPLACE VIEW hivenet.scope_usage AS
WITH clock AS (
    SELECT hivenet._reporting_local_now() AS local_now
), counter AS (
    SELECT s.format, s.scope, s.fields, f.reset, f.capacity,
           v.value / f.stride AS value_period,
           v.value % f.stride AS value_seq,
           greatest(hivenet._period_index(c.local_now, f.reset), v.value / f.stride) AS period
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name FROM hivenet.scope c
          UNION ALL
          SELECT n.name, '(new scopes)', '{}'::jsonb, 'cold_' || n.name FROM hivenet.format n
          UNION ALL
          SELECT n.name, '(lane ' || l || ')', '{}'::jsonb, hivenet._lane_sequence_name(n.name, l)
          FROM hivenet.format n CROSS JOIN generate_series(0, n.lanes - 1) AS l
         ) AS s
    JOIN hivenet.format f ON f.name = s.format
                         AND (f.lanes IS NULL OR s.sequence_name LIKE 'lane\_%')
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
       hivenet._period_start(u.value_period, u.reset) AS last_period_start
FROM usage u;

-- hivenet_db/sql/settings.sql
-- Trigger: reject a value that does not parse as the setting's kind, and a business time zone
-- behind the current one once serials exist (their dates and times would go backwards).
-- hivenet.scope, hivenet.scope_pending and the lanes (allocate.sql) are read when the trigger
-- runs.
CREATE OR REPLACE FUNCTION hivenet._setting_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
    IF TG_OP = 'UPDATE' AND NEW.kind = 'time_zone' AND NEW.value <> OLD.value
       AND now() AT TIME ZONE NEW.value < now() AT TIME ZONE OLD.value
       AND to_regclass('hivenet.scope_pending') IS NOT NULL THEN
        -- Nested: the tables are looked up only once they exist (not during an install).
        IF EXISTS (SELECT FROM hivenet.scope) OR EXISTS (SELECT FROM hivenet.scope_pending)
           -- A lane that has issued a value (never-used lanes have none).
           OR EXISTS (SELECT FROM hivenet.format f, generate_series(0, f.lanes - 1) AS l
                      WHERE pg_sequence_last_value(('hivenet.' || quote_ident(
                          hivenet._lane_sequence_name(f.name, l)))::regclass) IS NOT NULL) THEN
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
-- The built-ins unified and system get 64 lanes (formats.sql), each lane starting at the highest
-- value any counter of the format reached, then the definition (the trigger rewrites the
-- constants, the fast paths with the lanes written in, and the layouts).
DO $$
DECLARE
    v_format hivenet.format;
    v_top bigint;
BEGIN
    FOR v_format IN SELECT * FROM hivenet.format WHERE builtin AND name IN ('unified', 'system')
                    ORDER BY name LOOP
        v_format.lanes := 64;
        SELECT max(pg_sequence_last_value(to_regclass('hivenet.' || quote_ident(c.name))))
        INTO v_top
        FROM (SELECT hivenet._cold_sequence_name(v_format.name) AS name
              UNION ALL SELECT s.sequence_name FROM hivenet.scope s
              WHERE s.format = v_format.name) AS c;
        PERFORM hivenet._create_lanes(v_format, coalesce(v_top, 0));
    END LOOP;
END $$;
UPDATE hivenet.format
SET lanes = 64,
    segments = jsonb_set(segments, ARRAY[(jsonb_array_length(segments) - 1)::text],
                         (segments -> (jsonb_array_length(segments) - 1)) || '{"lanes": 64}')
WHERE builtin AND name IN ('unified', 'system');
-- Their pending first uses draw from lanes now: nothing for maintain() to promote.
DELETE FROM hivenet.scope_pending p USING hivenet.format f
WHERE f.name = p.format AND f.lanes IS NOT NULL;

-- hivenet_db/sql/privileges.sql (the new functions are the owner's, but for the hash, in the
-- fast path, and the lane's name, in view scope_usage: both run as the caller)
REVOKE EXECUTE ON FUNCTION hivenet._lane(hivenet.format, text),
    hivenet._create_lanes(hivenet.format, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hivenet._lane_of(text, integer),
    hivenet._lane_sequence_name(text, integer) TO PUBLIC;
