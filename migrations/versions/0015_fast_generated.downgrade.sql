-- Revision 0015 down: back to 0013's fast path, which reads _format_constant.
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
-- value's).
-- Every format property is folded to a constant when the statement is planned
-- (_format_constant, _setting_constant), so the checks on them cost nothing at run time.
-- The value is clamped and NULLed when it is not 1 .. capacity past the period's start,
-- arithmetic only (a regex costs several microseconds).
CREATE OR REPLACE FUNCTION hivenet._fast_serial(p_format text, p_a text, p_b text, p_c text) RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT CASE
        WHEN (hivenet._format_constant(p_format)).reset = 'day'
         AND (hivenet._format_constant(p_format)).key_fields IS NULL
         AND (hivenet._format_constant(p_format)).tail_pattern = ''
         AND cardinality((hivenet._format_constant(p_format)).field_names) = 3
         -- Outside the quoted field values, the pattern prints the date only.
         AND regexp_replace((hivenet._format_constant(p_format)).head_pattern, '"[^"]*"', '',
                            'g') ~ '^(YYYY|YY|MM|DD)*$'
         AND (hivenet._format_constant(p_format)).capacity
             = 10::bigint ^ (hivenet._format_constant(p_format)).seq_width - 1
         AND NOT hivenet._setting_constant('enforce_registry')::boolean
         AND (p_a || ' ' || p_b || ' ' || p_c)
             ~ (hivenet._format_constant(p_format)).field_pattern
        -- Nested: the casts are safe only once the values matched (digits where bounded),
        -- and this level alone is constant when the values are (then folded when planned,
        -- its THEN left unplanned when it is false, as the casts need).
        THEN CASE WHEN coalesce(current_setting('hivenet.fake_now', true), '') = '' THEN CASE
            WHEN (CASE WHEN (hivenet._format_constant(p_format)).field_min[1] IS NULL THEN true
                  ELSE p_a::numeric >= (hivenet._format_constant(p_format)).field_min[1] END)
             AND (CASE WHEN (hivenet._format_constant(p_format)).field_max[1] IS NULL THEN true
                  ELSE p_a::numeric <= (hivenet._format_constant(p_format)).field_max[1] END)
             AND (CASE WHEN (hivenet._format_constant(p_format)).field_min[2] IS NULL THEN true
                  ELSE p_b::numeric >= (hivenet._format_constant(p_format)).field_min[2] END)
             AND (CASE WHEN (hivenet._format_constant(p_format)).field_max[2] IS NULL THEN true
                  ELSE p_b::numeric <= (hivenet._format_constant(p_format)).field_max[2] END)
             AND (CASE WHEN (hivenet._format_constant(p_format)).field_min[3] IS NULL THEN true
                  ELSE p_c::numeric >= (hivenet._format_constant(p_format)).field_min[3] END)
             AND (CASE WHEN (hivenet._format_constant(p_format)).field_max[3] IS NULL THEN true
                  ELSE p_c::numeric <= (hivenet._format_constant(p_format)).field_max[3] END)
            -- The values then the date (the built-in layouts): no format() at run time.
            THEN CASE WHEN starts_with((hivenet._format_constant(p_format)).head_pattern,
                                       '"%1$s""%2$s""%3$s"')
                      THEN p_a || p_b || p_c || to_char(statement_timestamp()
                               AT TIME ZONE hivenet._setting_constant('time_zone'),
                               substr((hivenet._format_constant(p_format)).head_pattern, 19))
                      ELSE to_char(statement_timestamp()
                               AT TIME ZONE hivenet._setting_constant('time_zone'),
                               format((hivenet._format_constant(p_format)).head_pattern,
                                      p_a, p_b, p_c)) END
                 || lpad(nullif(nullif(least(greatest(
                        nextval(to_regclass('hivenet.' || quote_ident(
                            hivenet._scope_sequence_name(p_format, p_a || p_b || p_c))))
                        - hivenet._period_index(statement_timestamp()
                              AT TIME ZONE hivenet._setting_constant('time_zone'), 'day')
                          * (hivenet._format_constant(p_format)).stride,
                        0), (hivenet._format_constant(p_format)).capacity + 1), 0),
                        (hivenet._format_constant(p_format)).capacity + 1)::text,
                        (hivenet._format_constant(p_format)).seq_width, '0')
            END END
        END;
END;

-- hivenet.next_unified_serial(system, module, instance) → text (28 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction. Inlined (see
--   _fast_serial): the fast path, else next_serial (_allocate: the checks, the exact errors,
--   the slow paths), which the caller may run without the right to call _allocate.
CREATE OR REPLACE FUNCTION hivenet.next_unified_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT coalesce(hivenet._fast_serial('unified', p_system, p_module, p_instance),
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
    SELECT coalesce(hivenet._fast_serial('system', p_system, p_module, p_instance),
                    hivenet.next_serial('system', jsonb_build_object(
                        'system', p_system, 'module', p_module, 'instance', p_instance)));
END;

-- Trigger: rewrite _setting_constant from the table.
CREATE OR REPLACE FUNCTION hivenet._compile_settings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._rewrite_constants('hivenet.setting', TG_OP, 'hivenet._setting_constant',
        'text', (SELECT string_agg(format('WHEN %L THEN %L', name, value), ' ' ORDER BY name)
                 FROM hivenet.setting));
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
    RETURN NULL;
END $$;

DROP FUNCTION hivenet._compile_fast_paths();
DROP FUNCTION hivenet._fast_path_expression(hivenet.format, text, boolean);
DROP FUNCTION hivenet._fast_unified(text, text, text);
DROP FUNCTION hivenet._fast_system(text, text, text);
GRANT EXECUTE ON FUNCTION hivenet._fast_serial(text, text, text, text) TO PUBLIC;
