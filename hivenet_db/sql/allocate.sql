-- Allocation: one PostgreSQL sequence per counter scope, holding period * stride + seq.
--
-- Fast path: one nextval(). When the value's period is older than the clock's, the first
-- caller to notice moves the sequence forward (setval) under a short, namespaced session-level
-- advisory lock that is released before returning: nobody ever waits for another transaction
-- to commit. When the value's period is newer (the clock went back), issuing continues in the
-- sequence's period, so serials never go backwards. Sequences are not transactional, so
-- numbers taken by a transaction that rolls back are gaps, never reissued.

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

-- On every allocation: inlined, a SQL-standard body without SET (see _period_index).
CREATE FUNCTION hivenet._scope_sequence_name(p_format text, p_scope text) RETURNS text
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT CASE WHEN octet_length(p_format || p_scope) <= 58
                THEN 'seq_' || p_format || '_' || p_scope
                ELSE 'seq_' || left(p_format, 26) || '_' || md5(p_scope) END;
END;

-- Runs in its own transaction through the loopback connection (see _new_scope_sequence):
-- creates the scope's sequence if missing and returns its oid. Safe to race.
CREATE FUNCTION hivenet._create_scope(p_format text, p_scope text, p_fields jsonb,
    p_definition text) RETURNS oid
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name text := hivenet._scope_sequence_name(p_format, p_scope);
BEGIN
    BEGIN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS hivenet.%I AS bigint MINVALUE 0 START 0',
                       v_name);
    EXCEPTION WHEN unique_violation OR duplicate_table THEN
        NULL; -- a concurrent first use created it
    END;
    INSERT INTO hivenet.scope (format, scope, fields, definition, sequence_name)
    VALUES (p_format, p_scope, p_fields, p_definition, v_name) ON CONFLICT DO NOTHING;
    -- A catalog query, not a name lookup, so a sequence committed by a racer is seen.
    RETURN (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'hivenet' AND c.relname = v_name);
END $$;

-- The sequence of a counter scope that has none yet (first use), created in a committed
-- transaction of its own (through dblink): created inside the caller's transaction, it would
-- vanish with a rollback and start over, handing out the same serials again (SPEC §2,
-- guarantee 2).
CREATE FUNCTION hivenet._new_scope_sequence(p_format text, p_scope text, p_fields jsonb,
    p_definition text) RETURNS regclass
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Using the oid (not the name) makes nextval lock the relation, which refreshes this
    -- session's catalog caches.
    RETURN hivenet._loopback(format('SELECT hivenet._create_scope(%L, %L, %L, %L)',
                                    p_format, p_scope, p_fields, p_definition))::oid::regclass;
END $$;

-- Slow path, under the scope's advisory lock: move the sequence to period p_period when it is
-- still in an older one, and past an exhausted period (borrowing formats only; others get
-- HN010). Returns a fresh sequence value that is in or after p_period and not exhausted.
CREATE FUNCTION hivenet._advance(p_seq regclass, p_format hivenet.format, p_period bigint)
RETURNS bigint
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
                    MESSAGE = format('format %s: all %s serials of scope %L for the period '
                                     'starting %s are used', p_format.name, p_format.capacity,
                                     (SELECT scope FROM hivenet.scope
                                      WHERE sequence_name = p_seq::text),
                                     hivenet._period_start(v_period, p_format.reset));
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

-- HN001 naming the first field of p_values (in p_format's field order) that is invalid.
-- Called only when allocation's one-match check failed; builds the precise message.
CREATE FUNCTION hivenet._field_error(p_format hivenet.format, p_values text[]) RETURNS void
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
    RAISE EXCEPTION USING ERRCODE = 'HN001',
        MESSAGE = format('format %s takes %s field values (%s), not %s', p_format.name,
                         cardinality(p_format.field_names),
                         array_to_string(p_format.field_names, ', '), cardinality(p_values));
END $$;

-- The core of every next_* function: p_count serials of format p_format, the field values
-- given by name in p_fields (a JSON object), or, when p_values is not NULL, in p_values in the
-- format's field order (the next_<kind>_serial functions: no JSON on their path).
-- Raises HN001 (bad format, field or count), HN002 (registry), HN010 (period exhausted).
-- Never waits for another transaction; may wait a moment for another allocation's period
-- reset (the advisory lock is held for one setval, never until commit).
-- The hot path is short on purpose (docs/benchmarks.md): one query, one regex match, no loop
-- over segments; the slow paths (bad input, first use of a scope, period reset) are helpers.
CREATE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
    p_count integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- Settings and format from generated constants (settings.sql): no query on the hot path.
    v_time_zone text := hivenet._setting_constant('time_zone');
    v_format hivenet.format := hivenet._format_constant(p_format);
    v_head text;
    v_tail text;
    v_values text[] := p_values;
    v_name text;
    v_field integer;
    v_scope text;
    v_seq regclass;
    v_local timestamp;
    v_period bigint;
    v_raw bigint;
    v_print timestamp;
    v_out text[] := '{}';
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
                MESSAGE = format('unknown format %L', p_format);
        END IF;
    END IF;
    IF v_values IS NULL THEN
        IF jsonb_typeof(p_fields) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('format %s: fields must be a JSON object, not %s', p_format,
                                 coalesce(p_fields::text, 'NULL'));
        END IF;
        IF p_fields - v_format.field_names <> '{}'::jsonb THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('format %s has no field %L (fields: %s)', p_format,
                                 (SELECT k FROM jsonb_object_keys(
                                      p_fields - v_format.field_names) AS k LIMIT 1),
                                 array_to_string(v_format.field_names, ', '));
        END IF;
        v_values := '{}';
        FOREACH v_name IN ARRAY v_format.field_names LOOP
            v_values := v_values || (p_fields ->> v_name);
        END LOOP;
    END IF;
    IF array_to_string(v_values, ' ', '?') !~ v_format.field_pattern THEN
        PERFORM hivenet._field_error(v_format, v_values);
    END IF;
    IF v_format.bounded_fields <> '{}' THEN
        -- Digits only (the pattern matched), so the casts are safe.
        FOREACH v_field IN ARRAY v_format.bounded_fields LOOP
            IF v_values[v_field]::numeric < v_format.field_min[v_field]
               OR v_values[v_field]::numeric > v_format.field_max[v_field] THEN
                PERFORM hivenet._field_error(v_format, v_values);
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
        v_seq := hivenet._new_scope_sequence(p_format, v_scope,
                                             jsonb_object(v_format.field_names, v_values),
                                             md5(v_format.segments::text));
    END IF;
    v_local := hivenet.now() AT TIME ZONE v_time_zone;
    v_period := hivenet._period_index(v_local, v_format.reset);
    v_head := format(v_format.head_pattern, VARIADIC v_values);
    v_tail := format(v_format.tail_pattern, VARIADIC v_values);
    FOR i IN 1 .. p_count LOOP
        v_raw := nextval(v_seq);
        IF v_raw / v_format.stride < v_period
           OR v_raw % v_format.stride NOT BETWEEN 1 AND v_format.capacity THEN
            v_raw := hivenet._advance(v_seq, v_format, v_period);
        END IF;
        -- A newer period than the clock's (clock went back, or borrowed): print its start.
        v_print := CASE WHEN v_raw / v_format.stride = v_period THEN v_local
                        ELSE hivenet._period_start(v_raw / v_format.stride, v_format.reset) END;
        -- concat, not ||: to_char of an empty pattern is NULL.
        v_out := v_out || concat(to_char(v_print, v_head),
                                 lpad((v_raw % v_format.stride)::text, v_format.seq_width, '0'),
                                 to_char(v_print, v_tail));
    END LOOP;
    RETURN v_out;
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
--   in increasing order. HN001 unless 1 <= n <= 1000000.
CREATE FUNCTION hivenet.next_serials(p_format text, p_fields jsonb, p_n integer)
RETURNS SETOF text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT unnest(hivenet._allocate(p_format, p_fields, NULL, p_n))
$$;

-- The next_<kind>_serial functions are plpgsql, not sql: a SET search_path sql function is
-- never inlined and runs through the SQL function executor, which costs more than the call.

-- hivenet.next_unified_serial(system, module, instance) → text (28 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_unified_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('unified', NULL, ARRAY[p_system, p_module, p_instance], 1))[1];
END $$;

-- hivenet.next_system_serial(system, module, instance) → text (30 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_system_serial(p_system text, p_module text, p_instance text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('system', NULL, ARRAY[p_system, p_module, p_instance], 1))[1];
END $$;

-- hivenet.next_interface_serial(system, module, instance, target) → text (39 characters)
--   HN001 / HN002 / HN010 as _allocate. Never waits for another transaction.
CREATE FUNCTION hivenet.next_interface_serial(p_system text, p_module text, p_instance text,
    p_target text) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (hivenet._allocate('interface', NULL,
                              ARRAY[p_system, p_module, p_instance, p_target], 1))[1];
END $$;

-- hivenet.next_serial_durable(format, fields) → text
--   Like next_serial, but the serial is allocated and committed in a transaction of its own
--   (the session's loopback connection) before it is returned. PostgreSQL can hand out again,
--   after a crash, sequence values taken by a transaction that never committed; a serial from
--   here cannot come back, so it may leave the database (be sent to a remote system) before
--   the caller's transaction commits (SPEC §6). Costs one loopback round trip.
--   HN001 / HN002 / HN010 as next_serial. Never waits for another transaction.
CREATE FUNCTION hivenet.next_serial_durable(p_format text, p_fields jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN hivenet._loopback_committed(format('SELECT hivenet.next_serial(%L, %L)',
                                              p_format, p_fields));
END $$;
