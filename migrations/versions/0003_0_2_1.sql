-- Release 0.2.1 from 0.2.0.
-- Written by `python -m hivenet_db.tools.revision` from the schema files and the
-- hand-written .tables.sql and .data.sql beside this file: do not edit it.
-- Views as PostgreSQL 15 prints them.
-- Bodies are checked when they run, as pg_dump's scripts do.
SET LOCAL check_function_bodies = off;

-- Code, in dependency order.
CREATE OR REPLACE FUNCTION hivenet._begin_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, p_wait interval, p_raw_request bytea, OUT outcome text, OUT attempt integer, OUT response jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_vouched boolean;
    v_policy hivenet.request_namespace;
BEGIN
    IF p_step THEN  -- the kind told apart as in _start_key
        v_vouched := hivenet._start_valid(true, p_namespace, p_key, p_unified_serial, p_lease);
    ELSE
        v_vouched := hivenet._start_valid(false, p_namespace, p_key, p_unified_serial, p_lease);
    END IF;
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(v_vouched, false)) THEN
        BEGIN
            IF p_step THEN
                PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait, p_wait);
                PERFORM hivenet._check_step(p_namespace, p_key, p_unified_serial);
            ELSE
                PERFORM hivenet._check_name('namespace', p_namespace);
                PERFORM hivenet._check_name('key', p_key);
                PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait, p_wait);
            END IF;
        EXCEPTION WHEN SQLSTATE 'HN001' OR SQLSTATE 'HN002' OR SQLSTATE 'HN021' THEN
            PERFORM hivenet._count_decision(p_namespace, 'rejected');  -- decisions.sql
            RAISE;
        END;
    END IF;
    SELECT * INTO v_policy FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF NOT hivenet._key_allowed(v_policy, p_key) THEN
        PERFORM hivenet._raise_key_refused(p_namespace, p_key, v_policy.key_min_length,
                                           v_policy.key_pattern);
    END IF;
    IF p_nowait OR p_wait IS NOT NULL THEN  -- nowait: no wait (NULL), whatever p_wait says
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_within(p_namespace, v_policy, p_key, p_request,
                                           p_on_success, p_unified_serial, p_lease,
                                           p_raw_request,
                                           CASE WHEN NOT p_nowait THEN p_wait END) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, v_policy, p_key, p_request, p_on_success,
                                    p_unified_serial, p_lease, p_raw_request) b;
    END IF;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._begin_key(boolean,text,text,jsonb,text,text,interval,boolean,interval,bytea) FROM PUBLIC;

CREATE OR REPLACE FUNCTION hivenet._start_key(p_step boolean, p_namespace text, p_key text, p_request jsonb, p_on_success text, p_unified_serial text, p_lease interval, p_nowait boolean, p_wait interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_vouched boolean;
    v_apart boolean;
BEGIN
    -- The kind told apart by IF, _start_valid given it as a constant (folded to that kind's
    -- test): PL/pgSQL builds a simple expression's whole tree in every transaction, and
    -- _start_valid(p_step, ..) built the step's generated checks for every request too.
    IF p_step THEN
        v_vouched := hivenet._start_valid(true, p_namespace, p_key, p_unified_serial, p_lease);
    ELSE
        v_vouched := hivenet._start_valid(false, p_namespace, p_key, p_unified_serial, p_lease);
    END IF;
    IF NOT (hivenet._plain_options(p_on_success, p_nowait, p_wait)
            AND coalesce(v_vouched, false)) THEN
        RETURN false;
    END IF;
    SELECT hivenet._starts_apart(n) OR NOT hivenet._key_allowed(n, p_key) INTO v_apart
    FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF v_apart THEN  -- NULL without a row: every default, no rule
        RETURN false;
    END IF;
    INSERT INTO hivenet._new_attempt
    VALUES (p_namespace, p_key, 1, hivenet._fingerprint(p_request), p_unified_serial, p_lease,
            NULL);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM hivenet._count_decision(p_namespace, 'started');
    RETURN true;
END $function$;
REVOKE EXECUTE ON FUNCTION hivenet._start_key(boolean,text,text,jsonb,text,text,interval,boolean,interval) FROM PUBLIC;

-- Grants as a fresh install makes them (privileges.sql), and the generated
-- functions from this database's settings and formats (compile.sql).
SELECT hivenet._grant_roles();
SELECT hivenet._recompile();
