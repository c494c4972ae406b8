-- Revision 0006, frozen: no dblink loopback. The application role could reach superuser
-- through the loopback connection left open by durable allocation (issue 9); and the
-- loopback needed a superuser owner or a stored password. Now:
--   * a new counter scope draws from its format's cold counter until maintain() (or
--     prepare_scope) gives it a sequence of its own (allocate.sql);
--   * interface calls of a day without a partition land in a default partition (dedup.sql);
--   * durable allocation is done by the Python layer on a connection of its own;
--   * grants to the roles hivenet_app and hivenet_admin (privileges.sql).
-- Never edit this file: later changes go into new revisions.

-- settings.sql: no setting holds a connection string any more.
DELETE FROM hivenet.setting WHERE name = 'loopback_dsn';
-- Trigger: rewrite _setting_constant from the table.
CREATE OR REPLACE FUNCTION hivenet._compile_settings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM hivenet._rewrite_constants('hivenet.setting', TG_OP, 'hivenet._setting_constant',
        'text', (SELECT string_agg(format('WHEN %L THEN %L', name, value), ' ' ORDER BY name)
                 FROM hivenet.setting));
    RETURN NULL;
END $$;

-- loopback.sql is gone.
DROP FUNCTION hivenet.next_serial_durable(text, jsonb), hivenet._new_scope_sequence(text, text, jsonb, text),
    hivenet._create_scope(text, text, jsonb, text), hivenet._ensure_interface_partition(date),
    hivenet._loopback_committed(text), hivenet._loopback(text), hivenet._dblink_schema(),
    hivenet._loopback_dsn(), hivenet._conninfo_value(text),
    hivenet._field_error(hivenet.format, text[]), hivenet._advance(regclass, hivenet.format, bigint);
DO $$
BEGIN
    -- Only the dblink that revision 0001 put into schema hivenet; one installed elsewhere
    -- before hivenet-db belongs to someone else.
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'dblink'
               AND extnamespace = 'hivenet'::regnamespace) THEN
        DROP EXTENSION dblink;
    END IF;
END $$;

-- allocate.sql: cold counters, promotion by maintain(), the allocation core.
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

-- Advisory lock namespace of cold counters: (this key, hashtext(format)). Allocations from a
-- cold counter hold it shared for the allocation only; promoting a scope holds it exclusive
-- until the promotion commits.
CREATE FUNCTION hivenet._cold_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210103 $$;

CREATE FUNCTION hivenet._cold_sequence_name(p_format text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 'cold_' || p_format $$;

-- Trigger: every format gets its cold counter in the transaction that defines it.
CREATE FUNCTION hivenet._create_cold_counter() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                   hivenet._cold_sequence_name(NEW.name));
    RETURN NULL;
END $$;

CREATE TRIGGER format_cold_counter AFTER INSERT ON hivenet.format
    FOR EACH ROW EXECUTE FUNCTION hivenet._create_cold_counter();

-- The formats defined before the trigger (formats.sql) get theirs here.
DO $$
DECLARE
    v_name text;
BEGIN
    FOR v_name IN SELECT name FROM hivenet.format ORDER BY name LOOP
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                       hivenet._cold_sequence_name(v_name));
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
-- cold counter has issued (and no earlier than the clock's period), and records the scope.
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
    v_seq := ('hivenet.' || quote_ident(v_name))::regclass;
    PERFORM setval(v_seq, greatest(
        pg_sequence_last_value(
            ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass),
        hivenet._period_index(hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                              p_format.reset) * p_format.stride,
        0), true);
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format.name, p_scope, p_fields, md5(p_format.segments::text), v_name)
    ON CONFLICT DO NOTHING;
END $$;

-- hivenet.prepare_scope(format, fields) → void (administrators)
--   Gives the counter scope of fields its own sequence now, so that its serials start at 1
--   from the first (maintain() does the same for every scope that has been used). Commits
--   with the caller's transaction: run it in a short one of its own, since allocations of
--   new scopes of the format wait for it. HN001 for an unknown format or bad field values.
CREATE FUNCTION hivenet.prepare_scope(p_format text, p_fields jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_values text[];
BEGIN
    SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format('unknown format %L', p_format);
    END IF;
    v_values := hivenet._field_values(v_format, p_fields);
    PERFORM hivenet._check_fields(v_format, v_values);
    PERFORM hivenet._promote_scope(v_format, array_to_string(v_values, ''),
                                   jsonb_object(v_format.field_names, v_values));
END $$;

-- Part of maintain(): promotes every scope that drew from a cold counter.
CREATE FUNCTION hivenet._maintain_scopes() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_pending record;
BEGIN
    FOR v_pending IN
        WITH taken AS (DELETE FROM hivenet.scope_pending RETURNING *)
        SELECT DISTINCT ON (t.format, t.scope) f AS format_row, t.scope, t.fields
        FROM taken t JOIN hivenet.format f ON f.name = t.format
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
                    MESSAGE = format('format %s: all %s serials of %s for the period '
                                     'starting %s are used', p_format.name, p_format.capacity,
                                     p_scope, hivenet._period_start(v_period, p_format.reset));
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

-- HN001 naming the first field of p_values (in p_format's field order) that is invalid, or
-- saying how many values the format takes; returns when every value is valid.
CREATE FUNCTION hivenet._check_fields(p_format hivenet.format, p_values text[]) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_seg jsonb;
    v_index integer := 0;
    v_problem text;
BEGIN
    FOR v_seg IN SELECT s FROM jsonb_array_elements(p_format.segments) AS s WHERE s ? 'field'
    LOOP
        v_index := v_index + 1;
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
                             coalesce(left(p_fields::text, 100), 'NULL'));
    END IF;
    IF p_fields - p_format.field_names <> '{}'::jsonb THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s has no field %L (fields: %s)', p_format.name,
                             (SELECT left(k, 100) FROM jsonb_object_keys(
                                  p_fields - p_format.field_names) AS k LIMIT 1),
                             array_to_string(p_format.field_names, ', '));
    END IF;
    RETURN ARRAY(SELECT p_fields ->> n FROM unnest(p_format.field_names) WITH ORDINALITY AS f(n, i)
                 ORDER BY i);
END $$;

-- p_count serials of format p_format for field values p_values from counter p_seq (the
-- scope's own sequence, or the format's cold counter; p_scope names it in messages), printed
-- at the clock's time in the business time zone. HN010 when the period is exhausted.
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
BEGIN
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(p_seq);
        IF v_raw / p_format.stride < v_period
           OR v_raw % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            v_raw := hivenet._advance(p_seq, p_format, v_period, p_scope);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / p_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / p_format.stride, p_format.reset) END;
        -- concat, not ||: to_char of an empty pattern is NULL.
        v_out := v_out || concat(to_char(v_print, v_head),
                                 lpad((v_raw % p_format.stride)::text, p_format.seq_width, '0'),
                                 to_char(v_print, v_tail));
    END LOOP;
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
    v_scope text := array_to_string(p_values, '');
    v_key integer := hashtext(p_format.name);
    v_seq regclass;
    v_out text[];
BEGIN
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('new scopes (among them %L, sharing the format''s cold counter until '
                       'hivenet.maintain() gives each its own)', v_scope));
            -- Once per scope, not per serial: a busy new scope would pile up rows.
            INSERT INTO hivenet.scope_pending (format, scope, fields)
            SELECT p_format.name, v_scope, jsonb_object(p_format.field_names, p_values)
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
            MESSAGE = format('count %s must be from 1 to 1000000', coalesce(p_count::text, 'NULL'));
    END IF;
    IF v_format.name IS NULL THEN
        -- Not in the constants: defined by a transaction whose rewrite was superseded.
        SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('unknown format %L', left(p_format, 100));
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
    v_scope := array_to_string(v_values, '');
    v_seq := to_regclass(
        'hivenet.' || quote_ident(hivenet._scope_sequence_name(p_format, v_scope)));
    IF v_seq IS NULL THEN
        RETURN hivenet._issue_cold(v_format, v_values, p_count);
    END IF;
    RETURN hivenet._issue(v_seq, v_format, v_values, p_count, format('scope %L', v_scope));
END $$;

-- dedup.sql: a default partition instead of creating a day's partition on first use.
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
CREATE OR REPLACE FUNCTION hivenet._create_interface_partition(p_day date) RETURNS boolean
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

CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL,
    p_system_serial text DEFAULT NULL, p_nowait boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_valid boolean;
    v_local timestamp;
    v_day date;
    v_at timestamptz;
    v_window interval;
    v_tolerance interval;
    v_recorded timestamptz;
BEGIN
    -- This runs on every incoming call: the layout of formats.sql 'interface' checked inline
    -- (every call of a function with SET search_path costs; parse_serial only explains a
    -- rejection, and a test proves both agree). A plain character-class pattern, then the
    -- ranges as integers: a pattern with alternations for them costs twice as much. CASE keeps
    -- the casts behind the pattern.
    v_valid := CASE WHEN p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]{24}$' THEN
                   substr(p_serial, 9, 2) <> '00' AND substr(p_serial, 16, 4) <> '0000'
                   AND substr(p_serial, 20, 2)::integer BETWEEN 1 AND 12
                   AND substr(p_serial, 22, 2)::integer BETWEEN 1 AND 31
                   AND substr(p_serial, 24, 2)::integer < 24
                   AND substr(p_serial, 26, 2)::integer < 60
                   AND substr(p_serial, 28, 2)::integer < 60
                   AND right(p_serial, 10) <> '0000000000'
               ELSE false END;
    -- Nested in CASE, not AND: PostgreSQL does not promise to evaluate AND left to right.
    IF (CASE WHEN v_valid THEN substr(p_serial, 22, 2)::integer > 28 ELSE false END) THEN
        -- Day 29 to 31 must exist in that month: otherwise make_date rolls over.
        v_valid := extract(day FROM make_date(substr(p_serial, 16, 4)::integer,
                                              substr(p_serial, 20, 2)::integer, 1)
                                    + (substr(p_serial, 22, 2)::integer - 1))
                   = substr(p_serial, 22, 2)::integer;
    END IF;
    IF NOT v_valid THEN
        PERFORM hivenet._reject_serial(p_serial, 'interface');
    END IF;
    IF p_unified_serial !~ '^[0-9A-Za-z]{10}[0-9]{18}$' THEN
        PERFORM hivenet._reject_serial(p_unified_serial, 'unified');
    END IF;
    IF p_system_serial !~ '^[0-9A-Za-z]{10}[0-9]{20}$' THEN
        PERFORM hivenet._reject_serial(p_system_serial, 'system');
    END IF;
    v_local := make_timestamp(substr(p_serial, 16, 4)::integer, substr(p_serial, 20, 2)::integer,
                              substr(p_serial, 22, 2)::integer, substr(p_serial, 24, 2)::integer,
                              substr(p_serial, 26, 2)::integer, substr(p_serial, 28, 2)::integer);
    v_day := v_local::date;
    -- Settings from the generated constants (settings.sql): no query on the hot path.
    v_window := hivenet._setting_constant('interface_window')::interval;
    v_tolerance := hivenet._setting_constant('interface_future_tolerance')::interval;
    v_at := v_local AT TIME ZONE hivenet._setting_constant('time_zone');
    IF v_at < v_now - v_window OR v_at > v_now + v_tolerance THEN
        RAISE EXCEPTION USING ERRCODE = 'HN021',
            MESSAGE = format('interface serial %s was issued at %s, outside the duplicate-check '
                             'window from %s to %s', p_serial, v_at, v_now - v_window,
                             v_now + v_tolerance);
    END IF;
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial));
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial)) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is being claimed by another transaction '
                             'in progress (nowait)', p_serial);
    END IF;
    -- The name of _interface_partition_name(v_day), spelled out to save a call.
    IF to_regclass('hivenet.interface_call_' || substr(p_serial, 16, 8)) IS NULL THEN
        -- To the default partition, unless the day's partition was attached since this
        -- session last looked (this session's list of partitions can be stale, and the
        -- default partition then refuses the row). The first lock on the default partition
        -- in a transaction refreshes that list, and while held no ATTACH can complete.
        LOCK TABLE hivenet.interface_call_default IN ROW EXCLUSIVE MODE;
    END IF;
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    VALUES (p_serial, v_day, p_unified_serial, p_system_serial, v_now)
    -- No conflict target: the primary key is the only unique index, and a target makes every
    -- insert look up which index of the partition matches it in the catalog (measured).
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.recorded_at INTO v_recorded FROM hivenet.interface_call c
        WHERE c.serial_day = v_day AND c.interface_serial = p_serial;
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is already recorded (at %s)', p_serial,
                             coalesce(v_recorded::text, 'an earlier step of this transaction'));
    END IF;
END $$;

-- Part of maintain(): creates the partitions of every day a claim may be dated now (window
-- back, tolerance and interface_partitions_ahead forward), and drops the days whose calls are
-- all older than the retention (never less than the window: the check needs those rows).
CREATE OR REPLACE FUNCTION hivenet._maintain_interface_calls() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_zone text := hivenet._setting_value('time_zone');
    v_window interval := hivenet._setting_value('interface_window')::interval;
    v_tolerance interval := hivenet._setting_value('interface_future_tolerance')::interval;
    v_keep interval := greatest(hivenet._setting_value('interface_retention')::interval,
                                v_window + v_tolerance);
    v_ahead interval := hivenet._setting_value('interface_partitions_ahead')::interval;
    v_day date;
    v_partition record;
BEGIN
    DELETE FROM hivenet.interface_call_default
    WHERE (serial_day + 1) AT TIME ZONE v_zone < v_now - v_keep - interval '1 hour';
    FOR v_day IN
        SELECT generate_series(((v_now - v_window) AT TIME ZONE v_zone)::date,
                               ((v_now + greatest(v_tolerance, v_ahead)) AT TIME ZONE v_zone)::date,
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
          AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1) AT TIME ZONE v_zone
              < v_now - v_keep - interval '1 hour'
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

-- reporting.sql: scope_usage shows the cold counters too.
-- hivenet.scope_usage: one row per counter scope (format + field values) with a sequence of
--   its own, and one per format for its cold counter (scope '(new scopes)', fields {}), which
--   new scopes share until maintain() gives them their own.
--   format, scope, fields (jsonb, as given to next_serial), reset (period length),
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
       hivenet._period_start(u.value_period, u.reset) AS last_period_start
FROM usage u;
COMMENT ON VIEW hivenet.scope_usage IS
    'per counter scope: current period, serials issued in it, capacity and remaining headroom';

-- privileges.sql, applied again (new functions, roles).
-- Least privilege. Two roles, created once by `hivenet-db bootstrap` (the owner may not create
-- roles): hivenet_app may call the application API and read the reporting views; hivenet_admin
-- also runs the administrative functions and changes settings. The public functions are
-- SECURITY DEFINER, so neither needs any right on a table or sequence, and the private
-- helpers (hivenet._*) stay the owner's. Nothing here opens a connection, and no setting
-- holds a secret. Applied last; a revision that adds functions applies it again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's.
CREATE OR REPLACE FUNCTION hivenet._set_public_execute(p_grant boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

-- The application API: executable by every role, usable by those with USAGE on the schema.
GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
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
    hivenet._step_lease(interval),       -- in view stuck_steps, evaluated as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now()
TO PUBLIC;

-- Grants to hivenet_app and hivenet_admin, for those of them that exist (bootstrap creates
-- them; called again by bootstrap when it runs after the schema was installed).
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        GRANT SELECT ON hivenet.interface_calls, hivenet.interface_calls_per_day,
            hivenet.step_states, hivenet.stuck_steps, hivenet.scope_usage TO hivenet_app;
    END IF;
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_admin;
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.maintain(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.register_system(text, text), hivenet.register_module(text, text, text),
            hivenet.set_claim_expiry(text, interval), hivenet.prepare_scope(text, jsonb)
        TO hivenet_admin;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

SELECT hivenet._grant_roles();
