-- Revision 0015: the allocation fast path generated per format (issue 13).
--   * hivenet._fast_unified, hivenet._fast_system (new): the fast path of next_unified_serial
--     and next_system_serial with the format's constants written in, rewritten by
--     _compile_fast_paths (new, with _fast_path_expression) whenever a format or a setting
--     changes; they replace _fast_serial, whose reads of _format_constant cost ~5 ms of
--     planning to every caller that does not prepare its statements;
--   * _compile_settings, _compile_formats: also rewrite the fast paths;
--   * next_unified_serial, next_system_serial: call them;
--   * privileges: EXECUTE to PUBLIC on the two fast paths (as on _fast_serial before).

-- hivenet_db/sql/allocate.sql
-- The fast path of next_unified_serial and next_system_serial (docs/benchmarks.md): one
-- expression, inlined into the caller's statement, so nothing is prepared again in each
-- transaction (a PL/pgSQL body prepares every expression anew in each one). For it to be
-- inlined: LANGUAGE sql, one SELECT without FROM, no SECURITY DEFINER, no SET (a SQL-standard
-- body is bound to its functions when created, so no search path can redirect it), and the
-- one volatile call (nextval) used once. It runs with the caller's rights: the caller needs
-- USAGE on the scope's sequence (granted to PUBLIC when the sequence is made, privileges.sql:
-- it lets a caller consume values, which any caller of next_serial can, and never setval).
--
-- It serves only the plain case and returns NULL for anything else, so that its caller hands
-- the call to next_serial (_allocate: the full checks, the exact errors, the slow paths): a
-- format whose printed fields are its values and the date (no time of day, which _issue keeps
-- monotonic), reset daily, every field in the counter key; valid values (one regex, the digit
-- bounds); no registry check; no fake clock; a scope with its own sequence (to_regclass: NULL,
-- so nextval NULL, for a new scope, which draws from the cold counter in _issue_cold); a
-- value of today's period within capacity (a new period, a clock stepped back, exhaustion:
-- the value taken here is a gap, as when _issue hands over to _advance). The time is the
-- statement's (stable, so one instant for the period check and the printed date:
-- clock_timestamp() read twice could straddle midnight and print a day that is not the
-- value's). The value is clamped and NULLed when it is not 1 .. capacity past the period's
-- start, arithmetic only (a regex costs several microseconds).
--
-- Generated per format (_fast_unified, _fast_system) with the format's pattern, widths,
-- bounds and the business time zone written in as literals, rewritten whenever a format or a
-- setting changes (the triggers of formats.sql and settings.sql call _compile_fast_paths):
-- an expression that read them from _format_constant instead was folded to the same plan,
-- but folding ~30 reads of the format row cost ~5 ms of planning, paid by every caller that
-- does not prepare its statement (psql, PgBouncer in transaction pooling, PL/Proxy).
CREATE OR REPLACE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::text;
END;

CREATE OR REPLACE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT NULL::text;
END;

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
             nextval(to_regclass('hivenet.' || quote_ident(
                 hivenet._scope_sequence_name(%L, p_a || p_b || p_c))))
             - hivenet._period_index(%s, 'day') * %s,
             0), %s), 0), %s)::text, %s, '0')
    END END$f$,
        p_format.field_pattern, coalesce(array_to_string(v_bounds, ' AND '), 'true'),
        v_printed, p_format.name, v_local, p_format.stride, p_format.capacity + 1,
        p_format.capacity + 1, p_format.seq_width);
END $$;

-- Rewrite _fast_unified and _fast_system from the tables (called by the triggers that rewrite
-- the generated constants, in the same transaction and under the same lock).
CREATE OR REPLACE FUNCTION hivenet._compile_fast_paths() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_zone text := (SELECT value FROM hivenet.setting WHERE name = 'time_zone');
    v_registry boolean := (SELECT value FROM hivenet.setting
                           WHERE name = 'enforce_registry')::boolean;
    v_format hivenet.format;
    v_name text;
BEGIN
    FOREACH v_name IN ARRAY ARRAY['unified', 'system'] LOOP
        v_format := (SELECT f FROM hivenet.format f WHERE f.name = v_name);
        EXECUTE format('CREATE OR REPLACE FUNCTION hivenet.%I(p_a text, p_b text, p_c text) '
                       'RETURNS text LANGUAGE sql VOLATILE BEGIN ATOMIC SELECT %s; END',
                       '_fast_' || v_name,
                       hivenet._fast_path_expression(v_format, coalesce(v_zone, 'UTC'),
                                                     coalesce(v_registry, false)));
    END LOOP;
END $$;

-- hivenet_db/sql/settings.sql, formats.sql
-- Trigger: rewrite _setting_constant from the table.
CREATE OR REPLACE FUNCTION hivenet._compile_settings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._rewrite_constants('hivenet.setting', TG_OP, 'hivenet._setting_constant',
        'text', (SELECT string_agg(format('WHEN %L THEN %L', name, value), ' ' ORDER BY name)
                 FROM hivenet.setting));
    -- The allocation fast paths are generated from settings and formats too (allocate.sql;
    -- not there yet while the schema's first files are installed).
    IF to_regprocedure('hivenet._compile_fast_paths()') IS NOT NULL THEN
        PERFORM hivenet._compile_fast_paths();
    END IF;
    RETURN NULL;
END $$;

-- Trigger: rewrite _format_constant from the table.
CREATE OR REPLACE FUNCTION hivenet._compile_formats() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._rewrite_constants('hivenet.format', TG_OP, 'hivenet._format_constant',
        'hivenet.format',
        (SELECT string_agg(format('WHEN %L THEN %L::hivenet.format', f.name, f::text), ' '
                           ORDER BY f.name)
         FROM hivenet.format f));
    -- The allocation fast paths are generated from settings and formats too (allocate.sql;
    -- not there yet while the schema's first files are installed).
    IF to_regprocedure('hivenet._compile_fast_paths()') IS NOT NULL THEN
        PERFORM hivenet._compile_fast_paths();
    END IF;
    RETURN NULL;
END $$;

-- hivenet_db/sql/allocate.sql
-- hivenet.next_unified_serial(system, module, instance) → text (28 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction. Inlined (see
--   _fast_unified): the fast path, else next_serial (_allocate: the checks, the exact errors,
--   the slow paths), which the caller may run without the right to call _allocate.
CREATE OR REPLACE FUNCTION hivenet.next_unified_serial(p_system text, p_module text, p_instance text)
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
CREATE OR REPLACE FUNCTION hivenet.next_system_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_system(p_system, p_module, p_instance),
                    hivenet.next_serial('system', jsonb_build_object(
                        'system', p_system, 'module', p_module, 'instance', p_instance)));
END;

DROP FUNCTION hivenet._fast_serial(text, text, text, text);

SELECT hivenet._compile_fast_paths();

-- hivenet_db/sql/privileges.sql (the new functions are the owner's; the fast paths run as
-- the caller)
REVOKE EXECUTE ON FUNCTION hivenet._fast_path_expression(hivenet.format, text, boolean),
    hivenet._compile_fast_paths() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hivenet._fast_unified(text, text, text),
    hivenet._fast_system(text, text, text) TO PUBLIC;
