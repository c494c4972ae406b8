-- Bootstrap: what needs more rights than the schema owner has, done once per database by
-- `hivenet-db bootstrap --owner ROLE`, run by a superuser or a managed server's administrator
-- (CREATEROLE, and owner of the database or holding its rights WITH GRANT OPTION). NOT part
-- of schema hivenet: no migration applies this file, and it leaves nothing behind but the
-- roles and grants below.
--
-- This file only defines two temporary functions (pg_temp), so that the command passes the
-- owner as a parameter and gets back one row per action; the command drops them in the same
-- transaction (through a pooler, the session serves other clients afterwards). Identifiers
-- are quoted with format('%I'). No password is ever set, stored or shown here: the owner and
-- the login roles are created, with their passwords, by the administrator.

-- One step: p_check, a boolean SQL expression ($1: the owner's oid), says whether it is
-- already so; if not, p_statement runs and p_check must hold afterwards. A GRANT by a role
-- without the grant option is only a warning in PostgreSQL ("no privileges were granted"),
-- so success is read from the catalog, never assumed. Returns the row to report.
CREATE FUNCTION pg_temp._hivenet_step(p_statement text, p_check text, p_owner oid)
RETURNS TABLE (statement text, outcome text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_done boolean;
BEGIN
    EXECUTE 'SELECT ' || p_check INTO v_done USING p_owner;
    IF v_done THEN
        RETURN QUERY SELECT p_statement, 'already done';
        RETURN;
    END IF;
    EXECUTE p_statement;
    EXECUTE 'SELECT ' || p_check INTO v_done USING p_owner;
    IF NOT v_done THEN
        RAISE EXCEPTION '% had no effect: role % lacks the right to do it', p_statement,
                        current_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN QUERY SELECT p_statement, 'ran';
END $$;

-- Makes sure that
--   * roles hivenet_app (application API), hivenet_reporting (the reporting views) and
--     hivenet_admin (maintain, settings, formats, registry) exist, NOLOGIN: the migration
--     grants to them when they exist, and creates them only when the migrating role may
--     (an owner without CREATEROLE may not);
--   * p_owner can create schema hivenet in the current database (CREATE ON DATABASE), and the
--     version table hivenet_alembic_version, which `hivenet-db migrate` keeps in schema
--     public (PostgreSQL 15 no longer lets every role create there);
--   * p_owner holds the three roles WITH ADMIN OPTION, so it grants them to logins itself;
--   * when schema hivenet was installed before the roles existed, they get their grants now.
-- Returns one row per step, in order: the statement and its outcome, 'ran', 'already done',
-- or 'for the owner' (a step the current user may not take: the owner runs the statement).
-- Raises undefined_object (42704) when p_owner does not exist, invalid_parameter_value
-- (22023) when p_owner is one of the three roles, insufficient_privilege (42501) when the
-- current user may not take a step (nothing is changed then). Runs in the caller's
-- transaction.
CREATE FUNCTION pg_temp.hivenet_bootstrap(p_owner text)
RETURNS TABLE (statement text, outcome text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role text;
    v_owner oid := to_regrole(quote_ident(p_owner));
    v_grant_roles oid;
    v_done boolean;
    v_message text;
BEGIN
    IF v_owner IS NULL THEN
        RAISE EXCEPTION 'role % does not exist', quote_ident(p_owner)
            USING ERRCODE = 'undefined_object',
                  HINT = format('create it first: CREATE ROLE %I LOGIN PASSWORD ''...''',
                                p_owner);
    END IF;
    IF p_owner IN ('hivenet_app', 'hivenet_reporting', 'hivenet_admin') THEN
        RAISE EXCEPTION 'the owner must be a role of its own, not %', p_owner
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    FOREACH v_role IN ARRAY ARRAY['hivenet_app', 'hivenet_reporting', 'hivenet_admin'] LOOP
        RETURN QUERY SELECT * FROM pg_temp._hivenet_step(
            format('CREATE ROLE %I NOLOGIN', v_role),
            format('to_regrole(%L) IS NOT NULL', v_role), v_owner);
    END LOOP;

    -- Any way of holding these will do (directly, through a role, as owner).
    RETURN QUERY SELECT * FROM pg_temp._hivenet_step(
        format('GRANT CREATE ON DATABASE %I TO %I', current_database(), p_owner),
        'has_database_privilege($1, current_database(), ''CREATE'')', v_owner);
    IF to_regnamespace('public') IS NOT NULL THEN
        RETURN QUERY SELECT * FROM pg_temp._hivenet_step(
            format('GRANT CREATE ON SCHEMA public TO %I', p_owner),
            'has_schema_privilege($1, ''public'', ''CREATE'')', v_owner);
    END IF;

    -- Only a direct membership with admin option lets the owner grant the role.
    FOREACH v_role IN ARRAY ARRAY['hivenet_app', 'hivenet_reporting', 'hivenet_admin'] LOOP
        RETURN QUERY SELECT * FROM pg_temp._hivenet_step(
            format('GRANT %I TO %I WITH ADMIN OPTION', v_role, p_owner),
            format('EXISTS (SELECT FROM pg_auth_members WHERE roleid = to_regrole(%L) '
                   'AND member = $1 AND admin_option)', v_role), v_owner);
    END LOOP;

    -- The schema grants to whichever of the roles exist when it is installed.
    -- USAGE on the schema, its first grant to each role, tells whether that was after this.
    -- Looked up in the catalog: an administrator may have no right on schema hivenet at all.
    SELECT p.oid INTO v_grant_roles FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'hivenet' AND p.proname = '_grant_roles' AND p.pronargs = 0;
    IF v_grant_roles IS NOT NULL THEN
        v_done := has_schema_privilege('hivenet_app', 'hivenet', 'USAGE')
                  AND has_schema_privilege('hivenet_reporting', 'hivenet', 'USAGE')
                  AND has_schema_privilege('hivenet_admin', 'hivenet', 'USAGE');
        IF NOT v_done AND NOT (has_schema_privilege('hivenet', 'USAGE')
                               AND has_function_privilege(v_grant_roles, 'EXECUTE')) THEN
            RETURN QUERY SELECT 'SELECT hivenet._grant_roles()', 'for the owner';
        ELSE
            RETURN QUERY SELECT * FROM pg_temp._hivenet_step('SELECT hivenet._grant_roles()',
                'has_schema_privilege(''hivenet_app'', ''hivenet'', ''USAGE'') '
                'AND has_schema_privilege(''hivenet_reporting'', ''hivenet'', ''USAGE'') '
                'AND has_schema_privilege(''hivenet_admin'', ''hivenet'', ''USAGE'')', v_owner);
        END IF;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    -- PostgreSQL's own refusals say what was refused, not who may do it.
    GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
    RAISE EXCEPTION '%', v_message USING ERRCODE = 'insufficient_privilege',
        HINT = 'run bootstrap as a superuser, or as an administrator with CREATEROLE that '
               'owns the database';
END $$;
