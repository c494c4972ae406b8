-- Registry of systems and modules. Enforced only when the setting enforce_registry is true:
-- then allocating for an unknown system, target system or module raises HN002.

CREATE TABLE hivenet.registered_system (
    system        text PRIMARY KEY CHECK (system ~ '^[0-9A-Za-z]{5}$'),
    description   text,
    registered_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE hivenet.registered_module (
    system        text NOT NULL REFERENCES hivenet.registered_system ON DELETE CASCADE,
    module        text NOT NULL CHECK (module ~ '^[0-9A-Za-z]{3}$'),
    description   text,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (system, module)
);

-- hivenet.register_system(system, description) → void
--   Registers (or re-describes) a system id. HN001 when it is not 5 characters of [0-9A-Za-z].
CREATE FUNCTION hivenet.register_system(system text, description text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_system ALIAS FOR system; p_description ALIAS FOR description;
BEGIN
    IF p_system IS NULL OR p_system !~ '^[0-9A-Za-z]{5}$' OR octet_length(p_system) <> 5 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('system %s must be 5 characters of [0-9A-Za-z]',
                             hivenet._shown(p_system));
    END IF;
    INSERT INTO hivenet.registered_system (system, description) VALUES (p_system, p_description)
    ON CONFLICT (system) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_system.description);
END $$;

-- hivenet.register_module(system, module, description) → void
--   Registers a module of a registered system, and prepares its counter scopes (prepare_scope)
--   for every instance this database owns (ownership.sql; 01 to 99 on one primary) in every
--   format counted per system, module and instance (unified, system, interface), so that each
--   counts from 1 from its first serial. HN001 for a malformed module, HN002 when the system
--   is not registered. Commits with the caller: allocations of unprepared scopes of those
--   formats wait for that commit (prepare_scope).
CREATE FUNCTION hivenet.register_module(system text, module text,
    description text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_system ALIAS FOR system; p_module ALIAS FOR module; p_description ALIAS FOR description;
    v_format text;
BEGIN
    IF p_module IS NULL OR p_module !~ '^[0-9A-Za-z]{3}$' OR octet_length(p_module) <> 3 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('module %s must be 3 characters of [0-9A-Za-z]',
                             hivenet._shown(p_module));
    END IF;
    IF NOT EXISTS (SELECT FROM hivenet.registered_system WHERE system = p_system) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('system %s is not registered', hivenet._shown(p_system));
    END IF;
    INSERT INTO hivenet.registered_module (system, module, description)
    VALUES (p_system, p_module, p_description)
    ON CONFLICT (system, module) DO UPDATE
        SET description = coalesce(EXCLUDED.description, registered_module.description);
    FOR v_format IN
        SELECT f.name FROM hivenet.format f
        WHERE ARRAY(SELECT f.field_names[k] FROM generate_subscripts(f.field_names, 1) AS k
                    WHERE f.key_fields IS NULL OR k = ANY (f.key_fields) ORDER BY 1)
              = ARRAY['instance', 'module', 'system']
        ORDER BY f.name
    LOOP
        PERFORM hivenet.prepare_scope(v_format, (
            SELECT coalesce(jsonb_agg(jsonb_build_object('system', p_system, 'module', p_module,
                                                'instance', to_char(i, 'FM00')) ORDER BY i), '[]')
            FROM generate_series(1, 99) AS i
            WHERE hivenet._instance_in(to_char(i, 'FM00'),
                                       hivenet._setting_value('owned_instances'))));
    END LOOP;
END $$;

-- HN002 when a system, target system or module in p_fields is unknown. The caller calls it
-- only when the setting enforce_registry is true.
CREATE FUNCTION hivenet._check_registry(p_fields jsonb) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_system text;
BEGIN
    FOR v_system IN SELECT p_fields ->> k FROM unnest(ARRAY['system', 'target']) AS k
                    WHERE p_fields ? k LOOP
        IF NOT EXISTS (SELECT FROM hivenet.registered_system WHERE system = v_system) THEN
            RAISE EXCEPTION USING ERRCODE = 'HN002',
                MESSAGE = format('system %L is not registered', v_system);
        END IF;
    END LOOP;
    IF p_fields ? 'module' AND NOT EXISTS (
        SELECT FROM hivenet.registered_module
        WHERE system = p_fields ->> 'system' AND module = p_fields ->> 'module') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('module %L of system %L is not registered',
                             p_fields ->> 'module', p_fields ->> 'system');
    END IF;
END $$;
