-- Revision 0024 undone: begin_request as revision 0022 left it (its own check and INSERT),
-- then the view goes.

-- hivenet.begin_request(namespace, key, request default null, on_success default 'replay',
--                       lease default null, nowait default false)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one keyed request (a client's Idempotency-Key, a message id, a pay id ...) in the
--   caller's transaction:
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the effect, then call
--     finish_request with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck request with resolve_request; nothing takes it over).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: its fingerprint (sha256 of the jsonb text, which jsonb normalises: key order and
--   whitespace do not matter) is kept, and a different request under the same key raises
--   HN032 RequestMismatch in every state. No request counts as JSON null.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: namespace or key NULL, empty, longer than 255 characters or with a control
--   character, a namespace starting 'hivenet.' (the library's own), on_success not
--   'replay'/'reject', lease not positive, nowait NULL.
--   A key is never accepted twice while its record is kept: finished requests are removed by
--   maintain() once their last attempt ended longer ago than the namespace's retention
--   (set_request_retention; default the setting request_retention, 24 hours).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again); with nowait it raises HN030 at once instead. In
--   REPEATABLE READ or SERIALIZABLE a concurrent start raises serialization_failure (40001).
CREATE OR REPLACE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- The common case in one expression (plpgsql prepares each expression once per
    -- transaction); whatever fails it is explained by the checks.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND length(p_namespace) BETWEEN 1 AND 255 AND length(p_key) BETWEEN 1 AND 255
        -- one search for a control character (an anchored {1,255} repetition measured dearer)
        AND p_namespace || p_key !~ '[\x01-\x1f\x7f-\x9f]'
        AND left(p_namespace, 8) <> 'hivenet.',
        false) THEN
        PERFORM hivenet._check_request_name('namespace', p_namespace);
        PERFORM hivenet._check_request_name('key', p_key);
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        IF p_nowait THEN
            SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
            FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success,
                                               NULL, p_lease) b;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- _begin_attempt's first move, for a new key, without its call (a layer less on the hot
    -- path, as _begin_step in steps.sql); a conflict hands over to _begin_attempt.
    INSERT INTO hivenet.request_attempt
        (namespace, key, attempt, state, fingerprint, lease, started_at)
    VALUES (p_namespace, p_key, 1, 'processing', hivenet._fingerprint(p_request), p_lease,
            hivenet.now())
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        outcome := 'started';
        attempt := 1;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
    RETURN NEXT;
END $$;

DROP VIEW hivenet._request_start;
