-- Counters: one PostgreSQL sequence per counter scope (format + counter-key field values),
-- holding period * stride + seq (periods.sql moves it from period to period).
--
-- Every scope counts on a sequence of its own, from 1 each period (seed 000: the day's order
-- of that channel's business). It is created in a transaction of the owner's, never in the
-- caller's: created there, it would vanish with a rollback and start over (reissuing serials,
-- guarantee 2), and make every other first user wait for the commit. So scopes are prepared
-- before use: register_module (the instances this database owns), prepare_scope and
-- `hivenet-db prepare`; a format whose counter key is empty (per_second, time_id) has one
-- scope, prepared when the format is defined (parked where this database may not issue it:
-- ownership.sql). An allocation for a scope that has no sequence is
-- refused (HN002, naming the scope and how to prepare it), unless its format opts in to the
-- shared fallback counter (fallback.sql).

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

-- Advisory lock namespace of a format's shared fallback counter (its "cold counter",
-- fallback.sql): (this key, hashtext(format)). Allocations of unprepared scopes hold it shared
-- while they look for the scope's sequence and draw (never until commit); preparing or
-- promoting a scope of the format holds it exclusive until it commits, so that nothing is
-- drawn from the fallback for a scope once its own sequence has started.
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

-- Lets hivenet_app take values (nextval, currval: USAGE) of counter sequence p_name of schema
-- hivenet, which the allocation fast path draws from as the caller; never UPDATE (setval is
-- the owner's slow path) nor ALTER. Called when a counter is made, and for every counter by
-- _grant_roles() (privileges.sql). Nothing when the role does not exist yet.
CREATE FUNCTION hivenet._grant_counter(p_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO hivenet_app', p_name);
    END IF;
END $$;

-- Creates counter p_name (the scope's live name, seq_X, or its parked one, off_X:
-- ownership.sql) of scope p_scope of format p_format, empty, and its clock (a format with a
-- clock_unit; named after the live name), and records the scope. Returns the last value the
-- counter starts after when it is made in the period of a failover fence (_fence_floor:
-- set as its next value, so it shows nothing issued), NULL otherwise.
CREATE FUNCTION hivenet._create_scope_counter(p_format hivenet.format, p_scope text,
    p_fields jsonb, p_name text) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_floor bigint;
BEGIN
    EXECUTE format('CREATE SEQUENCE hivenet.%I AS bigint MINVALUE 0 START 0', p_name);
    -- Nested: the fence (failover.sql) is not there yet while the schema is installed.
    IF to_regclass('hivenet.fenced_gaps') IS NOT NULL THEN
        v_floor := hivenet._fence_floor(p_format);
        IF v_floor IS NOT NULL THEN
            PERFORM setval(('hivenet.' || quote_ident(p_name))::regclass, v_floor + 1, false);
        END IF;
    END IF;
    PERFORM hivenet._grant_counter(p_name);  -- for the fast path, run as the caller
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._scope_sequence_name(p_format.name, p_scope), 0);
    END IF;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), p_name)
    ON CONFLICT DO NOTHING;
    RETURN v_floor;
END $$;

-- Gives scope p_scope of format p_format its own sequence and records the scope. p_drawn:
-- whether the scope drew from its format's fallback counter (NULL: unknown). One that drew,
-- or may have, continues after every value that counter has issued, and its clock (a format
-- with a clock_unit) after the latest instant it has issued: no serial the scope printed from
-- the fallback comes again, nor a smaller one. One that never drew starts empty, its first
-- serial the first of its period: of any period when the fallback never issued; of the
-- current period or a later one otherwise (the fallback's latest), so that a clock stepping
-- back later can never bring it into a period whose serials the fallback printed. A start
-- set for a scope that did not draw (or may not have) is its next value (is_called false):
-- its sequence shows nothing issued until it issues (_has_issued). Never below the start a
-- failover fence gives it (_create_scope_counter).
-- Checks the timeline first (failover.sql): on a new one, the fallback's values it starts
-- from are fenced ones. Commits with the caller, who must be the owner's maintain() or
-- prepare_scope(): holds the format's cold lock exclusive until then, so allocations from
-- the fallback of the format wait for that commit (a short transaction) and then see the new
-- sequence. Safe to run twice.
CREATE FUNCTION hivenet._promote_scope(p_format hivenet.format, p_scope text, p_fields jsonb,
    p_drawn boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, p_scope);
    v_fallback regclass;
    v_issued bigint;  -- the fallback's last value, NULL before its first
    v_floor bigint;   -- the fence's start (_fence_floor), NULL for none
BEGIN
    PERFORM hivenet._check_timeline();
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format.name));
    -- Another promotion of the scope may have committed while we waited for the lock.
    IF hivenet._committed_sequence(v_name) IS NOT NULL THEN
        RETURN;
    END IF;
    v_floor := hivenet._create_scope_counter(p_format, p_scope, p_fields, v_name);
    v_fallback := ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass;
    v_issued := pg_sequence_last_value(v_fallback);
    IF v_issued > 0 AND p_drawn THEN
        PERFORM setval(('hivenet.' || quote_ident(v_name))::regclass,
                       greatest(v_issued, v_floor), true);
    ELSIF v_issued > 0 THEN
        PERFORM setval(('hivenet.' || quote_ident(v_name))::regclass, 1 + greatest(CASE
            WHEN p_drawn IS NULL THEN v_issued
            ELSE greatest(v_issued / p_format.stride, hivenet._period_index(
                     hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                     p_format.reset)) * p_format.stride END, v_floor), false);
    END IF;
    IF p_format.clock_unit IS NOT NULL AND p_drawn IS NOT FALSE THEN
        PERFORM hivenet._create_clock(v_name,
            pg_sequence_last_value(hivenet._clock_sequence(v_fallback)));
    END IF;
END $$;

-- Whether the scope whose counter is sequence p_sequence_name (NULL: a scope that drew from
-- its format's fallback) has issued a serial, or lost one to a rollback, or drew from the
-- fallback before it got its sequence: false for a scope prepared and never used
-- (_promote_scope).
CREATE FUNCTION hivenet._has_issued(p_sequence_name text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p_sequence_name IS NULL OR pg_sequence_last_value(
        to_regclass('hivenet.' || quote_ident(p_sequence_name))) IS NOT NULL
$$;

-- Whether this database has issued a serial (or lost one to a rollback), of any format: a
-- counter of a scope, or a format's fallback counter, has been drawn from.
CREATE FUNCTION hivenet._serials_issued() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT FROM hivenet.scope s WHERE hivenet._has_issued(s.sequence_name))
        OR EXISTS (SELECT FROM hivenet.format f WHERE pg_sequence_last_value(to_regclass(
               'hivenet.' || quote_ident(hivenet._cold_sequence_name(f.name)))) IS NOT NULL)
$$;

-- Whether format p_format has exactly one counter scope, '' (no counter-key field: per_second,
-- or a format whose every field is printed only).
CREATE FUNCTION hivenet._one_scope(p_format hivenet.format) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(p_format.key_fields = '{}', cardinality(p_format.field_names) = 0)
$$;

-- Makes the counters every format has: its shared fallback counter (and that counter's clock,
-- for a format with a clock_unit: fallback.sql), and, for a format with one scope, that scope,
-- prepared (parked where this database may not issue the format: ownership.sql; a fresh
-- install, which has no such setting yet, may). The format is new: its fallback has issued
-- nothing, so the scope starts empty and owes the timeline no check (_promote_scope).
CREATE FUNCTION hivenet._make_format_counters(p_format hivenet.format) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format.name, '');
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(p_format.name));
    IF p_format.clock_unit IS NOT NULL THEN
        PERFORM hivenet._create_clock(hivenet._cold_sequence_name(p_format.name), 0);
    END IF;
    IF hivenet._one_scope(p_format) THEN
        -- Nested: _not_owned is not there yet while the schema is installed.
        IF coalesce(hivenet._setting_value('owned_instances'), 'all') <> 'all' THEN
            IF hivenet._not_owned(p_format, NULL, hivenet._setting_value('owned_instances'),
                   hivenet._setting_value('single_primary_formats')::boolean) IS NOT NULL THEN
                v_name := 'off_' || substr(v_name, 5);
            END IF;
        END IF;
        PERFORM hivenet._create_scope_counter(p_format, '', '{}', v_name);
    END IF;
END $$;

-- Trigger: a format gets its counters in the transaction that defines it.
CREATE FUNCTION hivenet._format_counters() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._make_format_counters(NEW);
    RETURN NULL;
END $$;

CREATE TRIGGER format_counters AFTER INSERT ON hivenet.format
    FOR EACH ROW EXECUTE FUNCTION hivenet._format_counters();

-- The formats already defined (the built-in ones) get theirs here.
SELECT hivenet._make_format_counters(f) FROM hivenet.format f ORDER BY f.name;

-- hivenet.prepare_scope(format, fields) → void (administrators; `hivenet-db prepare`)
--   Gives the counter scope of fields (a JSON object of the counter's fields: the interface
--   serial's target may be left out), or of each of fields (a JSON array of such objects),
--   its own sequence now, so that it counts from 1 from its first serial; a scope prepared
--   already is left as it is. Prepare at deployment: with the defaults, an allocation for a
--   scope that is not prepared is refused (HN002). A scope of a format that opted in to the
--   shared fallback (setting shared_fallback) and drew from it in the current period starts
--   after the fallback's count; so does every new scope when prepare cannot tell which scopes
--   drew (fallback.sql, _fallback_drawn). Commits with the caller's transaction: run it in a
--   short one of its own (at most a few thousand scopes: each new sequence holds a lock until
--   commit), since allocations from the format's fallback wait for it; when the fallback has
--   issued serials in the current period, it waits at most a second for those still in
--   flight. HN001 for an unknown format or bad field values; HN002 for an instance (or a
--   format) this database does not own (ownership.sql).
CREATE FUNCTION hivenet.prepare_scope(format text, fields jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_format ALIAS FOR format; p_fields ALIAS FOR fields;
    v_format hivenet.format;
    v_fields jsonb;
    v_values text[];
    v_new jsonb := '{}';  -- scope → its fields, for the scopes without a sequence
    v_drawn text[];
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
        v_new := v_new || jsonb_build_object(hivenet._scope_of(v_format, v_values),
                                             hivenet._scope_fields(v_format, v_values));
    END LOOP;
    SELECT coalesce(jsonb_object_agg(n.key, n.value), '{}') INTO v_new
    FROM jsonb_each(v_new) AS n
    WHERE NOT EXISTS (SELECT FROM hivenet.scope s WHERE s.format = p_format AND s.scope = n.key);
    IF v_new = '{}' THEN
        RETURN;
    END IF;
    -- Before any lock (failover.sql): on a new timeline, the fence comes first.
    PERFORM hivenet._check_timeline();
    v_drawn := hivenet._fallback_drawn(v_format);
    FOR v_fields IN SELECT jsonb_build_object('scope', n.key, 'fields', n.value)
                    FROM jsonb_each(v_new) AS n ORDER BY n.key LOOP
        PERFORM hivenet._promote_scope(v_format, v_fields ->> 'scope', v_fields -> 'fields',
                                       v_fields ->> 'scope' = ANY (v_drawn));
    END LOOP;
END $$;
