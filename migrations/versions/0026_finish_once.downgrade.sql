-- Revision 0026 undone: _finish_attempt as revision 0012 made it, and _resolve_attempt and
-- finish_request calling it as revisions 0012 and 0018 left them; then _raise_unfinished goes.

-- The state machine's end of an attempt (finish_request, finish_step; resolve): see
-- finish_request. The checks stay off the hot path, after an UPDATE that found nothing. No
-- SET clause, as _begin_attempt: only called by functions that set the search path.
CREATE FUNCTION hivenet._finish_attempt(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean, p_response jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
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
    END IF;
END $$;

-- hivenet._resolve_attempt as revision 0012 left it.
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
    PERFORM hivenet._finish_attempt(p_namespace, p_key, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.request_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
END $$;

-- hivenet.finish_request as revision 0018 left it.
CREATE OR REPLACE FUNCTION hivenet.finish_request(
    p_namespace text, p_key text, p_attempt integer, p_succeeded boolean,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- _finish_attempt's UPDATE, without its call on the hot path; when it finds nothing,
    -- _finish_attempt runs it again (finding nothing) and names the problem.
    UPDATE hivenet.request_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN
        PERFORM hivenet._finish_attempt(p_namespace, p_key, p_attempt, p_succeeded,
                                        p_response);
    END IF;
END $$;

REVOKE EXECUTE ON FUNCTION hivenet._finish_attempt(text, text, integer, boolean, jsonb) FROM PUBLIC;
DROP FUNCTION hivenet._raise_unfinished(text, text, integer, boolean);
