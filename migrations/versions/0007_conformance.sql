-- Revision 0007, frozen: conformance with the standard and the seeds (issue 11).
--   * messages echo user values cut to a short prefix plus their length (hivenet._shown);
--   * parse_serial's messages as hivenet_db.parse_serial gives them in Python;
--   * interface calls keep the order they were recorded in (call_order), and call_chain
--     returns exactly that order, across partitions;
-- Never edit this file: later changes go into new revisions.

CREATE FUNCTION hivenet._shown(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_value IS NULL THEN 'NULL'
                WHEN length(p_value) <= 40 THEN quote_literal(p_value)
                ELSE quote_literal(left(p_value, 32))
                     || format('... (%s characters)', length(p_value)) END
$$;

CREATE OR REPLACE FUNCTION hivenet._field_problem(p_seg jsonb, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_value IS NULL THEN
        RETURN 'is missing';
    END IF;
    -- octet_length: full-width and other non-ASCII characters never pass.
    IF p_value !~ (p_seg ->> 'regex') OR octet_length(p_value) <> (p_seg ->> 'width')::integer
    THEN
        RETURN format('%s must be %s %s characters', hivenet._shown(p_value),
                      p_seg ->> 'width', p_seg ->> 'charset');
    END IF;
    -- Nested IF: the cast is safe only once the value is known to be digits.
    IF p_seg ->> 'charset' = 'digit' AND (p_seg ? 'min' OR p_seg ? 'max') THEN
        IF p_value::numeric NOT BETWEEN coalesce((p_seg ->> 'min')::numeric, 0)
                                    AND coalesce((p_seg ->> 'max')::numeric, p_value::numeric)
        THEN
            RETURN format('%s must be from %s to %s', hivenet._shown(p_value),
                          lpad(coalesce(p_seg ->> 'min', '0'), length(p_value), '0'),
                          coalesce(p_seg ->> 'max', repeat('9', length(p_value))));
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION hivenet.parse_serial(p_serial text, p_format text DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_seg jsonb;
    v_pos integer := 1;
    v_part text;
    v_problem text;
    v_time timestamp;
    v_result jsonb;
BEGIN
    IF p_serial IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'serial is NULL';
    END IF;
    SELECT * INTO v_format FROM hivenet.format
    WHERE name = coalesce(p_format, CASE octet_length(p_serial)
        WHEN 28 THEN 'unified' WHEN 30 THEN 'system' WHEN 39 THEN 'interface' END);
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = CASE WHEN p_format IS NULL
            THEN format('serial %s is no unified (28), system (30) or interface (39) serial; '
                        'name its format', hivenet._shown(p_serial))
            ELSE format('unknown format %s', hivenet._shown(p_format)) END;
    END IF;
    v_result := jsonb_build_object('format', v_format.name);
    IF octet_length(p_serial) <> v_format.length OR length(p_serial) <> v_format.length THEN
        v_problem := format('length %s, not %s', length(p_serial), v_format.length);
    END IF;
    FOR v_seg IN SELECT jsonb_array_elements(v_format.segments) LOOP
        EXIT WHEN v_problem IS NOT NULL;
        IF v_seg ? 'field' THEN
            v_part := substr(p_serial, v_pos, (v_seg ->> 'width')::integer);
            v_problem := 'field ' || (v_seg ->> 'field') || ' '
                         || hivenet._field_problem(v_seg, v_part);
            v_result := v_result || jsonb_build_object(v_seg ->> 'field', v_part);
        ELSIF v_seg ? 'literal' THEN
            v_part := substr(p_serial, v_pos, length(v_seg ->> 'literal'));
            IF v_part <> v_seg ->> 'literal' THEN
                v_problem := format('%L where %L belongs', v_part, v_seg ->> 'literal');
            END IF;
        ELSIF v_seg ? 'time' THEN
            v_part := substr(p_serial, v_pos, (v_seg ->> 'width')::integer);
            BEGIN
                v_time := to_timestamp(v_part, v_seg ->> 'to_char')::timestamp;
            EXCEPTION WHEN data_exception THEN
                v_time := NULL;
            END;
            -- The round trip rejects what to_timestamp forgives (spaces, signs, 2-digit years).
            IF v_part !~ '^[0-9]+$' OR v_time IS NULL
               OR to_char(v_time, v_seg ->> 'to_char') <> v_part THEN
                v_problem := format('time %L is no valid %s', v_part, v_seg ->> 'time');
            ELSIF hivenet._unit_rank(v_seg ->> 'resolution') >= hivenet._unit_rank('day') THEN
                v_result := v_result || jsonb_build_object('date', to_char(v_time, 'YYYY-MM-DD'));
            ELSE
                v_result := v_result || jsonb_build_object(
                    'datetime', to_char(v_time, 'YYYY-MM-DD"T"HH24:MI:SS'));
            END IF;
        ELSE
            v_part := substr(p_serial, v_pos, v_format.seq_width);
            IF v_part !~ '^[0-9]+$' OR v_part::numeric = 0 THEN
                v_problem := format('seq %L is not 1 to %s', v_part, v_format.capacity);
            ELSE
                v_result := v_result || jsonb_build_object('seq', v_part::bigint);
            END IF;
        END IF;
        v_pos := v_pos + length(v_part);
    END LOOP;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('serial %s is no valid %s serial: %s', hivenet._shown(p_serial),
                             v_format.name, v_problem);
    END IF;
    RETURN v_result;
END $$;

-- dedup.sql: the order of recording. Rows recorded before this revision are numbered by
-- recorded_at, then serial (the order call_chain showed them in).
CREATE SEQUENCE hivenet.interface_call_call_order_seq;
ALTER TABLE hivenet.interface_call ADD COLUMN call_order bigint;
UPDATE hivenet.interface_call c SET call_order = o.n
FROM (SELECT interface_serial, serial_day,
             nextval('hivenet.interface_call_call_order_seq') AS n
      FROM (SELECT interface_serial, serial_day FROM hivenet.interface_call
            ORDER BY recorded_at, interface_serial) ordered) o
WHERE c.interface_serial = o.interface_serial AND c.serial_day = o.serial_day;
ALTER TABLE hivenet.interface_call
    ALTER COLUMN call_order SET DEFAULT nextval('hivenet.interface_call_call_order_seq'::regclass),
    ALTER COLUMN call_order SET NOT NULL;
ALTER SEQUENCE hivenet.interface_call_call_order_seq OWNED BY hivenet.interface_call.call_order;

CREATE OR REPLACE VIEW hivenet.interface_calls AS
SELECT c.interface_serial,
       c.unified_serial,
       c.system_serial,
       substr(c.interface_serial, 1, 5) AS source_system,
       substr(c.interface_serial, 6, 3) AS source_module,
       substr(c.interface_serial, 9, 2) AS source_instance,
       substr(c.interface_serial, 11, 5) AS target_system,
       c.serial_day,
       -- ISO basic 'YYYYMMDDTHHMISS' to timestamp: no session time zone involved (to_timestamp
       -- would shift a local time that the session's zone skips at a DST change).
       (substr(c.interface_serial, 16, 8) || 'T' || substr(c.interface_serial, 24, 6))::timestamp
           AS serial_time,
       c.recorded_at,
       c.call_order
FROM hivenet.interface_call c;

CREATE OR REPLACE FUNCTION hivenet.call_chain(p_unified_serial text)
RETURNS TABLE (interface_serial text, system_serial text, source_system text,
               source_module text, source_instance text, target_system text,
               serial_time timestamp, recorded_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.interface_serial, c.system_serial, c.source_system, c.source_module,
           c.source_instance, c.target_system, c.serial_time, c.recorded_at
    FROM hivenet.interface_calls c
    WHERE c.unified_serial = p_unified_serial
    ORDER BY c.call_order
$$;

-- privileges.sql, as of this revision: EXECUTE revoked from PUBLIC on every function, the API
-- granted again, the roles' grants again.
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
