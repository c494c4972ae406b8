-- Downgrade of revision 0006, frozen: back to the dblink loopback of revisions 0001-0005
-- (needs a superuser, as they did). Scopes that drew from a cold counter get their own
-- sequence first, and the cold counters stay (unused until an upgrade uses them again), so
-- no serial is issued twice across a downgrade and upgrade. Calls in the default partition
-- move to partitions of their days.

SELECT hivenet._maintain_scopes();
ALTER TABLE hivenet.interface_call DETACH PARTITION hivenet.interface_call_default;
DROP TRIGGER format_cold_counter ON hivenet.format;
DO $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA hivenet FROM hivenet_app;
        REVOKE USAGE ON SCHEMA hivenet FROM hivenet_app;
    END IF;
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA hivenet FROM hivenet_admin;
        REVOKE ALL ON ALL FUNCTIONS IN SCHEMA hivenet FROM hivenet_admin;
        REVOKE USAGE ON SCHEMA hivenet FROM hivenet_admin;
    END IF;
END $$;
DROP FUNCTION hivenet._grant_roles(), hivenet._allocate(text, jsonb, text[], integer),
    hivenet._issue_cold(hivenet.format, text[], integer),
    hivenet._issue(regclass, hivenet.format, text[], integer, text),
    hivenet._field_values(hivenet.format, jsonb), hivenet._check_fields(hivenet.format, text[]),
    hivenet._advance(regclass, hivenet.format, bigint, text), hivenet._maintain_scopes(),
    hivenet.prepare_scope(text, jsonb), hivenet._promote_scope(hivenet.format, text, jsonb),
    hivenet._committed_sequence(text), hivenet._create_cold_counter(),
    hivenet._cold_sequence_name(text), hivenet._cold_lock_space();
DROP TABLE hivenet.scope_pending;

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('loopback_dsn', '', 'text',
     'libpq connection string the schema uses to create a new counter scope in its own '
     'transaction; empty: this server''s socket and port, as the schema owner');
-- Trigger: rewrite _setting_constant from the table.
CREATE OR REPLACE FUNCTION hivenet._compile_settings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Not loopback_dsn: it may hold a password, and function bodies are readable by every
    -- role (pg_proc). It is read from the table, on the slow path only.
    PERFORM hivenet._rewrite_constants('hivenet.setting', TG_OP, 'hivenet._setting_constant',
        'text', (SELECT string_agg(format('WHEN %L THEN %L', name, value), ' ' ORDER BY name)
                 FROM hivenet.setting WHERE name <> 'loopback_dsn'));
    RETURN NULL;
END $$;

UPDATE hivenet.setting SET value = value WHERE name = 'time_zone';

-- hivenet_db/sql/loopback.sql
-- The loopback connection: SQL run through dblink in a session of its own on this database,
-- committed before the caller goes on. Used where work must not vanish with the caller's
-- rollback, nor make other callers wait for the caller's commit: creating a counter's
-- sequence on first use, a missing day partition, and durable allocation.

CREATE EXTENSION IF NOT EXISTS dblink SCHEMA hivenet;

CREATE FUNCTION hivenet._conninfo_value(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT '''' || replace(replace(p_value, '\', '\\'), '''', '\''') || ''''
$$;

-- The loopback connection string: the setting loopback_dsn, or this server's own socket and
-- port as the current user (the schema owner inside the SECURITY DEFINER callers). dblink
-- lets only superusers connect without a password: otherwise put one in loopback_dsn.
CREATE FUNCTION hivenet._loopback_dsn() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(nullif(hivenet._setting_value('loopback_dsn'), ''), format(
        'dbname=%s user=%s port=%s host=%s application_name=hivenet_loopback',
        hivenet._conninfo_value(current_database()),
        hivenet._conninfo_value(current_user),
        current_setting('port'),
        hivenet._conninfo_value(coalesce(
            nullif(trim(split_part(current_setting('unix_socket_directories'), ',', 1)), ''),
            '127.0.0.1'))))
$$;

-- Schema of the dblink extension (ours, or one the database already had elsewhere).
CREATE FUNCTION hivenet._dblink_schema() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'dblink'
$$;

-- Runs p_sql (one statement returning one value) in a new loopback session, committed on
-- return; the value as text. The session gives up after lock_timeout rather than wait forever
-- on a lock the caller's own transaction holds (a wait no deadlock detector can see). Errors
-- of p_sql come back with their own SQLSTATE and message.
CREATE FUNCTION hivenet._loopback(p_sql text) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_value text;
BEGIN
    EXECUTE format('SELECT v FROM %I.dblink($1, $2) AS t(v text)', hivenet._dblink_schema())
        INTO v_value
        USING hivenet._loopback_dsn(), 'SET lock_timeout = ''10s''; ' || p_sql;
    RETURN v_value;
END $$;

-- As _loopback, on a loopback session kept open for this session (no connection set-up per
-- call), with synchronous_commit on so the value is on disk when it returns. A session that
-- broke (server restart) is replaced once.
CREATE FUNCTION hivenet._loopback_committed(p_sql text) RETURNS text
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_schema text := hivenet._dblink_schema();
    v_value text;
    v_open boolean;
BEGIN
    FOR v_try IN 1 .. 2 LOOP
        EXECUTE format('SELECT %L = ANY (coalesce(%I.dblink_get_connections(), ''{}''))',
                       'hivenet_loopback', v_schema) INTO v_open;
        IF NOT v_open THEN
            EXECUTE format('SELECT %I.dblink_connect(%L, $1)', v_schema, 'hivenet_loopback')
                USING hivenet._loopback_dsn();
            EXECUTE format('SELECT %I.dblink_exec(%L, %L)', v_schema, 'hivenet_loopback',
                           'SET synchronous_commit = on; SET lock_timeout = ''10s''');
        END IF;
        BEGIN
            EXECUTE format('SELECT v FROM %I.dblink(%L, $1) AS t(v text)', v_schema,
                           'hivenet_loopback')
                INTO v_value USING p_sql;
            RETURN v_value;
        EXCEPTION WHEN connection_exception THEN
            EXECUTE format('SELECT %I.dblink_disconnect(%L)', v_schema, 'hivenet_loopback');
            IF v_try = 2 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END $$;

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
CREATE OR REPLACE FUNCTION hivenet._allocate(p_format text, p_fields jsonb, p_values text[],
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

-- Creates the partition of day p_day unless it exists; true when this call created it.
-- Committed by its caller's transaction: maintain(), or the dblink session of
-- _ensure_interface_partition. CREATE + ATTACH (not CREATE ... PARTITION OF) because ATTACH
-- only takes SHARE UPDATE EXCLUSIVE on the parent, which claims in flight (ROW EXCLUSIVE) never
-- block; the CHECK lets ATTACH skip its validation scan. Safe to race; the lock_timeout bounds
-- a wait behind a maintain() that is dropping partitions.
CREATE OR REPLACE FUNCTION hivenet._create_interface_partition(p_day date) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    v_name text := hivenet._interface_partition_name(p_day);
BEGIN
    IF to_regclass('hivenet.' || quote_ident(v_name)) IS NOT NULL THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('CREATE TABLE hivenet.%I (LIKE hivenet.interface_call INCLUDING DEFAULTS, '
                       'CONSTRAINT day_range CHECK (serial_day >= %L AND serial_day < %L))',
                       v_name, p_day, p_day + 1);
    EXCEPTION WHEN unique_violation OR duplicate_table OR duplicate_object THEN
        RETURN false;  -- a concurrent creator committed it first (the table or its row type)
    END;
    EXECUTE format('ALTER TABLE hivenet.interface_call ATTACH PARTITION hivenet.%I '
                   'FOR VALUES FROM (%L) TO (%L)', v_name, p_day, p_day + 1);
    -- The partition constraint now does the CHECK's job; keep inserts free of it.
    EXECUTE format('ALTER TABLE hivenet.%I DROP CONSTRAINT day_range', v_name);
    RETURN true;
END $$;

-- The partition of day p_day, created in a committed transaction of its own (dblink loopback,
-- as allocate.sql does for sequences) when missing: created inside the caller's transaction it
-- would serialise every other caller of that day behind it and vanish with its rollback.
CREATE FUNCTION hivenet._ensure_interface_partition(p_day date) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name text := hivenet._interface_partition_name(p_day);
BEGIN
    IF to_regclass('hivenet.' || quote_ident(v_name)) IS NOT NULL THEN
        RETURN;
    END IF;
    PERFORM hivenet._loopback(format('SELECT hivenet._create_interface_partition(%L)', p_day));
    -- Locking the new partition makes this session read the invalidation of the parent's
    -- partition list, so the INSERT that follows routes into it.
    EXECUTE format('LOCK TABLE hivenet.%I IN ROW EXCLUSIVE MODE', v_name);
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
        PERFORM hivenet._ensure_interface_partition(v_day);
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

-- hivenet.scope_usage: one row per counter scope (format + field values) ever used.
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
    FROM hivenet.scope s
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

SELECT hivenet._create_interface_partition(d)
FROM (SELECT DISTINCT serial_day AS d FROM hivenet.interface_call_default ORDER BY 1) AS days;
INSERT INTO hivenet.interface_call SELECT * FROM hivenet.interface_call_default;
DROP TABLE hivenet.interface_call_default;

-- hivenet_db/sql/privileges.sql
-- Least privilege. A role granted USAGE on schema hivenet may call the application API below
-- and nothing else: the public functions are SECURITY DEFINER, so it needs no right on any
-- table or sequence, and the private helpers (above all the loopback connection, which runs
-- SQL as the schema owner) stay the owner's. Administrative functions (define_format,
-- register_system, register_module, resolve_step, set_claim_expiry, maintain) are granted
-- by name to an operator role; the reporting grants are in docs/reporting.md.
-- Applied last: a revision that adds functions applies this file again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's (dblink keeps its own privileges).
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
    LOOP
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
    hivenet.next_unified_serial(text, text, text),
    hivenet.next_system_serial(text, text, text),
    hivenet.next_interface_serial(text, text, text, text),
    hivenet.next_serial(text, jsonb),
    hivenet.next_serials(text, jsonb, integer),
    hivenet.next_serial_durable(text, jsonb),
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
