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
    -- On a new timeline, from fenced values only (failover.sql): the fence must see the scope.
    PERFORM hivenet._check_timeline();
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
CREATE FUNCTION hivenet.prepare_scope(format text, fields jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields;
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
