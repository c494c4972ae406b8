-- Revision 0020: leaner allocation fast paths (_fast_unified, _fast_system; issue 13). They
-- test the session's hivenet.fake_now only where the setting allow_fake_clock is true;
-- elsewhere they do not read it (the test cost ~7% of a call) and issue by the real clock,
-- while every other function still raises HN001 for it. And fewer expression nodes, each
-- built again for every statement: the day's period as days since 1999-12-31, the clamp as
-- one modulo and one nullif, to_char for the padding. Redefines _fast_path_expression and
-- rewrites the fast paths.

-- hivenet_db/sql/allocate.sql
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
    v_fake_clock text := '';
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
    IF (SELECT value FROM hivenet.setting WHERE name = 'allow_fake_clock')::boolean THEN
        v_fake_clock := $f$coalesce(current_setting('hivenet.fake_now', true), '') = '' AND $f$;
    END IF;
    -- The values then the date (the built-in layouts): no format() at run time.
    v_printed := CASE WHEN starts_with(p_format.head_pattern, '"%1$s""%2$s""%3$s"')
        THEN format('p_a || p_b || p_c || to_char(%s, %L)', v_local,
                    substr(p_format.head_pattern, 19))
        ELSE format('to_char(%s, format(%L, p_a, p_b, p_c))', v_local, p_format.head_pattern)
        END;
    -- Nested CASE: the casts of the bounds are safe only once the values matched. Each node
    -- is built again for every statement, so the fewest: the period is _period_index(local,
    -- 'day') as days since the day before its first (two nodes fewer), and the clamp maps 0
    -- and capacity + 1 both to 0, then NULL (one comparison fewer than two nullif).
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


SELECT hivenet._compile_fast_paths();
