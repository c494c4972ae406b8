-- The policy of a namespace of keyed attempts (set_namespace_policy): what its keys may be, how
-- their requests are compared, what a failure or a forgotten attempt becomes, how long they
-- are kept. The steps' namespace, 'hivenet.steps', has one too: their fingerprint, failure
-- policy, expiry and audit chain (their keys and retention are the system serials' rules,
-- steps.sql).
--
-- One shape for every field: a column of request_namespace (NULL: the default), a parameter
-- of set_namespace_policy, and its check in _policy_checked. Nothing else names the fields
-- but the code that uses one, and _starts_apart for a field a new key's start depends on.
-- CONTRIBUTING.md ("A field of the namespace policy") walks through adding one.

-- NULL in a column is the default, and a namespace without a row has every default: retention
-- NULL the setting request_retention; fingerprint NULL 'bytes' (fingerprints.sql);
-- key_min_length, key_pattern NULL no rule beyond a valid name; audit_chain NULL no hash
-- chain (audit.sql); on_failure NULL 'retry'; expire_after NULL never (expiry.sql);
-- failure_retention NULL the retention (requests.sql, _purge_requests); keep_raw_request
-- NULL the client's bytes are not kept (requests.sql, begin_request's raw_request). A row
-- holding only NULLs is deleted.
CREATE TABLE hivenet.request_namespace (
    namespace         text     PRIMARY KEY,
    retention         interval,
    fingerprint       text,
    key_min_length    integer,
    key_pattern       text,
    audit_chain       boolean,
    on_failure        text,
    expire_after      interval,
    failure_retention interval,
    keep_raw_request  boolean
);
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules, failure policy; NULL is the default';

-- Whether a new key of a namespace with policy p_policy starts apart from the fast path
-- (requests.sql, _start_key; a batch's new keys, batches.sql): its fingerprint is not the
-- default one, each begin is a link of its audit chain, or it keeps the client's bytes. The one
-- definition; the fields a new key's start does not depend on (retention, the failure policy,
-- expiry: they matter once a key has an attempt) leave it on the fast path. Inlined: on a row of
-- request_namespace, its columns are read, nothing is called.
CREATE FUNCTION hivenet._starts_apart(p_policy hivenet.request_namespace) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT p_policy.fingerprint IS NOT NULL OR p_policy.audit_chain IS NOT NULL
           OR p_policy.keep_raw_request IS NOT NULL;
END;

-- Whether key p_key keeps the key rules of policy p_policy (key_min_length, key_pattern);
-- true when it has none. The one definition, for the fast path, a batch's new keys and the
-- full path, which raises _raise_key_refused when it is false. Inlined.
CREATE FUNCTION hivenet._key_allowed(p_policy hivenet.request_namespace, p_key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT NOT coalesce(length(p_key) < p_policy.key_min_length
                        OR p_key !~ p_policy.key_pattern, false);
END;

-- Field p_field of the policy of namespace p_namespace given as p_value (its JSON, never
-- null), checked: the value to store, JSON null for the field's default (so that a default
-- policy is no row, and keeps the fast path). HN001 naming the value when it is not one the
-- field takes, and for a field the namespace cannot have. One branch per field: a new field
-- is one more (CONTRIBUTING.md).
CREATE FUNCTION hivenet._policy_checked(p_namespace text, p_field text, p_value jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_text text := p_value #>> '{}';
    v_steps boolean := p_namespace = 'hivenet.steps';
    v_conflict text;
BEGIN
    -- The steps' keys are system serials, kept for the setting step_retention (steps.sql).
    IF v_steps AND p_field IN ('retention', 'key_min_length', 'key_pattern',
                               'failure_retention', 'keep_raw_request') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s is no policy of the steps'' namespace ''hivenet.steps'' (its '
                             'keys are system serials, kept for the setting step_retention)',
                             p_field);
    END IF;
    CASE p_field
    WHEN 'retention' THEN
        PERFORM hivenet._check_interval(format('retention of namespace %s',
                                               hivenet._shown(p_namespace)), v_text::interval);
        v_conflict := hivenet._interval_conflict('request_retention', v_text::interval);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('retention %s of namespace %s %s', v_text::interval,
                                 hivenet._shown(p_namespace), v_conflict);
        END IF;
        RETURN p_value;
    WHEN 'fingerprint' THEN
        PERFORM hivenet._check_fingerprint(v_text);
        RETURN CASE WHEN v_text = 'bytes' THEN 'null' ELSE p_value END;
    WHEN 'on_failure' THEN
        IF v_text NOT IN ('retry', 'final') THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('on_failure %s of namespace %s is neither ''retry'' nor '
                                 '''final''', hivenet._shown(v_text), hivenet._shown(p_namespace));
        END IF;
        RETURN CASE WHEN v_text = 'retry' THEN 'null' ELSE p_value END;
    WHEN 'expire_after' THEN
        IF v_text::interval = interval '0' THEN
            RETURN 'null';
        END IF;
        PERFORM hivenet._check_interval(format('expire_after of namespace %s',
                                               hivenet._shown(p_namespace)), v_text::interval);
        RETURN p_value;
    WHEN 'key_min_length' THEN
        IF v_text::integer NOT BETWEEN 1 AND 255 THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('key_min_length %s of namespace %s is not between 1 and 255',
                                 v_text, hivenet._shown(p_namespace));
        END IF;
        RETURN CASE WHEN v_text::integer = 1 THEN 'null' ELSE p_value END;
    WHEN 'key_pattern' THEN
        BEGIN
            PERFORM '' ~ v_text;
        EXCEPTION WHEN invalid_regular_expression THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('key_pattern %s of namespace %s is not a regular expression',
                                 hivenet._shown(v_text), hivenet._shown(p_namespace));
        END;
        RETURN CASE WHEN v_text = '' THEN 'null' ELSE p_value END;
    WHEN 'audit_chain' THEN
        RETURN CASE WHEN v_text::boolean THEN p_value ELSE 'null' END;
    WHEN 'failure_retention' THEN
        PERFORM hivenet._check_interval(format('failure_retention of namespace %s',
                                               hivenet._shown(p_namespace)), v_text::interval);
        RETURN p_value;
    WHEN 'keep_raw_request' THEN
        RETURN CASE WHEN v_text::boolean THEN p_value ELSE 'null' END;
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s is no field of a namespace policy', hivenet._shown(p_field));
    END CASE;
END $$;

-- The checks between fields of policy p_policy, as it would be stored: HN001 naming both
-- values when failure_retention is longer than the retention in effect (the namespace's, or
-- the setting request_retention), since a failure is never kept longer than a success.
CREATE FUNCTION hivenet._check_policy(p_policy hivenet.request_namespace) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_retention interval := coalesce(p_policy.retention,
                                     hivenet._setting_value('request_retention')::interval);
BEGIN
    IF p_policy.failure_retention > v_retention THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failure_retention %s of namespace %s is longer than its retention '
                             '%s: a failure is kept no longer than a success',
                             p_policy.failure_retention, hivenet._shown(p_policy.namespace),
                             v_retention);
    END IF;
END $$;

-- Set the fields of the policy of namespace p_namespace given in p_given (field → value; a
-- JSON null or a missing field leaves that field as it is): each checked (_policy_checked),
-- and together (_check_policy), then the namespace's row written again whole, or deleted when every
-- field is its default. Fields are read and written by name (jsonb_populate_record), so nothing
-- here names one. Blocks a concurrent change of the same namespace until commit.
CREATE FUNCTION hivenet._set_policy(p_namespace text, p_given jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_stored jsonb;
    v_policy hivenet.request_namespace;
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        PERFORM hivenet._check_name('namespace', p_namespace);
    END IF;
    SELECT coalesce(jsonb_object_agg(f.key, hivenet._policy_checked(p_namespace, f.key, f.value)),
                    '{}')
    INTO v_stored FROM jsonb_each(jsonb_strip_nulls(p_given)) AS f;
    -- The namespace's row, locked until commit (made first when it has none).
    INSERT INTO hivenet.request_namespace AS n (namespace) VALUES (p_namespace)
    ON CONFLICT (namespace) DO UPDATE SET namespace = EXCLUDED.namespace
    RETURNING n.* INTO v_policy;
    v_policy := jsonb_populate_record(v_policy, v_stored);
    PERFORM hivenet._check_policy(v_policy);
    DELETE FROM hivenet.request_namespace n WHERE n.namespace = p_namespace;
    IF jsonb_strip_nulls(to_jsonb(v_policy)) <> jsonb_build_object('namespace', p_namespace) THEN
        INSERT INTO hivenet.request_namespace SELECT v_policy.*;
    END IF;
    IF v_policy.audit_chain THEN
        PERFORM hivenet._start_chain(p_namespace);  -- audit.sql
    END IF;
END $$;

-- hivenet.set_namespace_policy(namespace, retention default null, fingerprint default null,
--     on_failure default null, expire_after default null, key_min_length default null,
--     key_pattern default null, audit_chain default null,
--     failure_retention default null, keep_raw_request default null) → void
--   The policy of a namespace of keyed requests, or of the steps' namespace 'hivenet.steps';
--   a NULL argument leaves that value as it is.
--   retention: finished requests are kept that long after their last attempt ended (then
--   maintain() removes them, and the same key starts afresh); set_request_retention(namespace,
--   NULL) goes back to the setting request_retention. fingerprint: what makes two requests
--   under one key the same (fingerprints.sql): 'bytes' (the default), 'json' (RFC 8785) or a
--   JSON array of JSON paths; keys begun before a change keep their old fingerprint, so their
--   requests mismatch (HN032) until retention removes them. key_min_length (1 = no rule) and
--   key_pattern (a POSIX regular expression; '' = no rule): begin_request refuses a key
--   breaking them with HN001. audit_chain: true chains every attempt begun from then on
--   (begin and end) into the namespace's hash chain, which verify_audit_chain checks; false
--   chains no more, and the chain so far stays verifiable (audit.sql). on_failure: 'retry'
--   (the default: a failed attempt may run again) or 'final' (begin_request and begin_step
--   replay a failed attempt's error: outcome 'replayed_failure'). expire_after: a
--   `processing` attempt started longer ago becomes `expired` when a begin of its key or
--   maintain() finds it (expiry.sql), then on_failure applies; '0' = never (the default).
--   failure_retention: a key whose latest attempt failed or expired is kept that long after
--   it ended, a succeeded one for retention (NULL: retention, the default); at most the
--   retention. Under on_failure 'final' it is how long the failure is replayed: then the key
--   starts afresh. In a namespace with an audit chain, a key goes only with the chain's
--   prefix before it (audit.sql). keep_raw_request: true keeps, with each attempt begun from
--   then on, the exact bytes the client sent (begin_request's raw_request) beside the
--   fingerprint of their canonical form; false keeps no more (those kept stay).
--   Administrators read them in view raw_requests.
--   The steps' namespace takes fingerprint, on_failure, expire_after and audit_chain (its
--   keys are system serials, kept for the setting step_retention).
--   HN001: namespace not valid (as begin_request; 'hivenet.steps' is), retention not
--   positive, longer than 10 years or shorter than step_lease, fingerprint none of the three,
--   key_min_length not in 1..255, key_pattern not a regular expression, on_failure neither
--   'retry' nor 'final', expire_after negative or longer than 10 years, failure_retention not
--   positive or longer than the retention (the namespace's, or request_retention); retention,
--   key_min_length, key_pattern, failure_retention or keep_raw_request for the steps'
--   namespace.
--   Each parameter is one field of the policy, passed by its name (_set_policy).
CREATE FUNCTION hivenet.set_namespace_policy(
    namespace text, retention interval DEFAULT NULL, fingerprint text DEFAULT NULL,
    on_failure text DEFAULT NULL, expire_after interval DEFAULT NULL,
    key_min_length integer DEFAULT NULL, key_pattern text DEFAULT NULL,
    audit_chain boolean DEFAULT NULL, failure_retention interval DEFAULT NULL,
    keep_raw_request boolean DEFAULT NULL)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT hivenet._set_policy(namespace, jsonb_build_object(
        'retention', retention, 'fingerprint', fingerprint, 'on_failure', on_failure,
        'expire_after', expire_after, 'key_min_length', key_min_length,
        'key_pattern', key_pattern, 'audit_chain', audit_chain,
        'failure_retention', failure_retention, 'keep_raw_request', keep_raw_request));
END;

-- hivenet.set_request_retention(namespace, retention) → void
--   set_namespace_policy(namespace, retention), and NULL: back to the setting
--   request_retention (24 hours). Keep it longer than any client retries.
CREATE FUNCTION hivenet.set_request_retention(namespace text, retention interval)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace; p_retention ALIAS FOR retention;
BEGIN
    IF p_retention IS NULL THEN
        UPDATE hivenet.request_namespace n SET retention = NULL
        WHERE n.namespace = p_namespace;
    END IF;
    PERFORM hivenet._set_policy(p_namespace, jsonb_build_object('retention', p_retention));
END $$;
