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
