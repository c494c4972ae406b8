-- Allocation: one PostgreSQL sequence per counter scope, holding period * stride + seq.
--
-- Fast path: one nextval(). When the value's period is older than the clock's, the first
-- caller to notice moves the sequence forward (setval) under a short, namespaced session-level
-- advisory lock that is released before returning: nobody ever waits for another transaction
-- to commit. When the value's period is newer (the clock went back), issuing continues in the
-- sequence's period, so serials never go backwards. Sequences are not transactional, so
-- numbers taken by a transaction that rolls back are gaps, never reissued.
--
-- A format that prints a finer time than its period (interface and merchant_trade print the
-- second, reset daily: its clock_unit) keeps, per counter, the latest instant issued in a
-- second sequence, its clock sequence, holding that instant's period index in the clock unit
-- (the same encoding, one unit finer). Every allocation reads it and prints no earlier
-- (within the value's own period), and raises it under the same short advisory lock as a
-- period reset, before returning: a serial issued after another call returned is never
-- smaller, whatever the clock did (seed 004's guard, for every format; SPEC guarantee 3).
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

-- On every allocation: inlined, a SQL-standard body without SET (see _period_index).
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
-- On every allocation: inlined, a SQL-standard body without SET (see _period_index).
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
-- other dot: parse_ident and quote_ident cost several times more (measured).
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

-- The formats defined before the trigger (formats.sql) get theirs here.
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
-- The hot path is short on purpose (docs/benchmarks.md): one query, one regex match, no loop
-- over segments; the slow paths (bad input, a new scope, period reset) are helpers.
CREATE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
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

-- The fast path of next_unified_serial and next_system_serial (docs/benchmarks.md): one
-- expression, inlined into the caller's statement, so nothing is prepared again in each
-- transaction (a PL/pgSQL body prepares every expression anew in each one). For it to be
-- inlined: LANGUAGE sql, one SELECT without FROM, no SECURITY DEFINER, no SET (a SQL-standard
-- body is bound to its functions when created, so no search path can redirect it), and the
-- one volatile call (nextval) used once. It runs with the caller's rights: the caller needs
-- USAGE on the scopes' sequences (granted to hivenet_app when they are made, _promote_scope,
-- privileges.sql _grant_counter:
-- it lets a caller consume values, which any caller of next_serial can, and never setval).
--
-- It serves only the plain case and returns NULL for anything else, so that its caller hands
-- the call to next_serial (_allocate: the full checks, the exact errors, the slow paths): a
-- format whose printed fields are its values and the date (no time of day, which _issue keeps
-- monotonic), reset daily, every field in the counter key; valid values (one regex, the digit
-- bounds); no registry check; no fake clock (where a database allows one: a session that set
-- hivenet.fake_now goes to the full path; where none is allowed, the fast path does not read
-- the setting at all, which cost ~7% of a call, and issues by the real clock, while every
-- other function raises HN001); a prepared scope (its sequence found by name: every scope
-- sequence belongs to an owned instance, ownership.sql); a value of today's period within capacity (a new period, a clock stepped back, exhaustion:
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

-- The expression of the fast path of format p_format (see above), or 'NULL::text' when the
-- format or the settings leave every call to the full path.
CREATE FUNCTION hivenet._fast_path_expression(p_format hivenet.format, p_zone text,
    p_enforce_registry boolean) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
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
    -- Measured against a constant map of scope to OID (docs/benchmarks.md): the same cost
    -- per call, ~0.7 us, and nothing to plan: a map written in here was read again whenever a
    -- statement was planned (7.7 ms with 10,000 scopes), one in a PL/pgSQL function cost twice
    -- as much per call. The session's catalog cache may not see a sequence created since its
    -- transaction began: NULL then too, and the full path finds it (_issue_cold).
    v_counter := format('to_regclass(%L || p_a || p_b || p_c || %L)',
                        'hivenet."' || hivenet._scope_sequence_name(p_format.name, ''), '"');
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

-- Rewrite _fast_unified and _fast_system from the tables (called by the triggers that rewrite
-- the generated constants, in the same transaction and under the same lock).
CREATE FUNCTION hivenet._compile_fast_paths() RETURNS void
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

SELECT hivenet._compile_fast_paths();

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
