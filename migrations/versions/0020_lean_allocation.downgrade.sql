-- Revision 0020 down: the fast paths of revision 0017 again (they test hivenet.fake_now in
-- every database: a session that set it goes to the full path). The body is revision 0017's.

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


SELECT hivenet._compile_fast_paths();
