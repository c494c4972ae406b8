-- Revision 0026: the UPDATE that finishes an attempt is written once, in finish_request.
-- _resolve_attempt (resolve_request, resolve_step) calls finish_request instead of
-- _finish_attempt, which ran the same UPDATE; what _finish_attempt did after an UPDATE that
-- found nothing is _raise_unfinished's, which finish_request calls. No change on the hot path.

-- hivenet_db/sql/requests.sql
-- Why finish_request's UPDATE found no attempt to finish, raised: HN001 for a namespace or key
-- begin_request would refuse, or a NULL succeeded; else HN033 naming what is there. Off the hot
-- path. No SET clause, as _begin_attempt: only called by functions that set the search path.
CREATE FUNCTION hivenet._raise_unfinished(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF p_namespace IS DISTINCT FROM 'hivenet.steps' THEN
        PERFORM hivenet._check_request_name('namespace', p_namespace);
        PERFORM hivenet._check_request_name('key', p_key);
    END IF;
    IF p_succeeded IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s attempt %s: succeeded is NULL',
                             hivenet._attempt_subject(p_namespace, p_key), p_attempt);
    END IF;
    PERFORM hivenet._raise_stale_attempt(p_namespace, p_key, p_attempt);
END $$;

-- hivenet._resolve_attempt: see requests.sql.
CREATE OR REPLACE FUNCTION hivenet._resolve_attempt(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(btrim(p_note), '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s attempt %s: resolving needs a note',
                             hivenet._attempt_subject(p_namespace, p_key), p_attempt);
    END IF;
    -- finish's fencing and state change; the note goes on the row it just locked.
    PERFORM hivenet.finish_request(p_namespace, p_key, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
END $$;

-- hivenet.finish_request: see requests.sql.
CREATE OR REPLACE FUNCTION hivenet.finish_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE hivenet.request_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN
        PERFORM hivenet._raise_unfinished(p_namespace, p_key, p_attempt, p_succeeded);
    END IF;
END $$;

DROP FUNCTION hivenet._finish_attempt(text, text, integer, boolean, jsonb);

-- As privileges.sql leaves it on a fresh install: no EXECUTE for PUBLIC.
REVOKE EXECUTE ON FUNCTION hivenet._raise_unfinished(text, text, integer, boolean) FROM PUBLIC;
