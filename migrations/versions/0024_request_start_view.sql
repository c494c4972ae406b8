-- Revision 0024: a new keyed request starts through view _request_start, as a new step does
-- through _step_start since 0023. One INSERT into the view, whose rule checks the names and
-- the lease (begin_request's first check, moved there) and writes attempt 1 with the owner's
-- rights: no PL/pgSQL call. The Python layer's begin inserts there first and calls
-- begin_request only when nothing was written; begin_request inserts there too. PUBLIC may
-- insert into the view (not read it).

-- hivenet_db/sql/requests.sql
-- The first attempt of a new keyed request, written by one INSERT into this view (its rule
-- runs with the owner's rights): the Python layer's begin (requests.py) and begin_request's
-- common case, as view _step_start for steps (steps.sql, where the why is). The rule checks
-- the names and the lease as begin_request does (the checks' exact errors stay there) and
-- inserts attempt 1; it writes nothing for a key that has an attempt or for input it does not
-- vouch for (a namespace of the library's own among them), and then begin_request decides.
-- Insert-only, for PUBLIC (privileges.sql): the row it writes is the one begin_request would
-- write. The VALUES list evaluates each inserted expression once (see _step_start).
CREATE VIEW hivenet._request_start AS
SELECT NULL::text AS namespace, NULL::text AS key, NULL::jsonb AS request,
       NULL::interval AS lease
WHERE false;
CREATE RULE start AS ON INSERT TO hivenet._request_start DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, lease, started_at)
SELECT n.namespace, n.key, 1, 'processing', hivenet._fingerprint(n.request), n.lease,
       hivenet.now()
FROM (VALUES (NEW.namespace, NEW.key, NEW.request, NEW.lease)) AS n (namespace, key, request, lease)
WHERE length(n.namespace) BETWEEN 1 AND 255 AND length(n.key) BETWEEN 1 AND 255
  -- one search for a control character (an anchored {1,255} repetition measured dearer)
  AND n.namespace || n.key !~ '[\x01-\x1f\x7f-\x9f]'
  AND left(n.namespace, 8) <> 'hivenet.'
  AND (n.lease IS NULL OR n.lease > interval '0')
ON CONFLICT DO NOTHING
RETURNING namespace, key, NULL::jsonb, lease;

-- hivenet.begin_request: see requests.sql.
CREATE OR REPLACE FUNCTION hivenet.begin_request(
    p_namespace text, p_key text, p_request jsonb DEFAULT NULL,
    p_on_success text DEFAULT 'replay', p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- A new key with plain options: attempt 1 through view _request_start. Whatever that does
    -- not write (bad input, nowait, a key that has an attempt) gets every check with its exact
    -- error, then the state machine.
    IF coalesce(p_on_success IN ('replay', 'reject') AND NOT p_nowait, false) THEN
        INSERT INTO hivenet._request_start VALUES (p_namespace, p_key, p_request, p_lease);
        IF FOUND THEN
            outcome := 'started';
            attempt := 1;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    PERFORM hivenet._check_request_name('namespace', p_namespace);
    PERFORM hivenet._check_request_name('key', p_key);
    PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait(p_namespace, p_key, p_request, p_on_success, NULL,
                                           p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt(p_namespace, p_key, p_request, p_on_success, NULL,
                                    p_lease) b;
    END IF;
    RETURN NEXT;
END $$;

-- hivenet_db/sql/privileges.sql
-- The same for a new keyed request (requests.sql, view _request_start): its checks call no
-- function of the schema but the fingerprint and the clock, both public.
GRANT INSERT ON hivenet._request_start TO PUBLIC;
