-- The audit chain of a namespace of keyed requests (set_namespace_policy(..., audit_chain =>
-- true)): tamper evidence for its attempts, checked by verify_audit_chain and `hivenet-db
-- audit verify`. Who began each attempt is recorded in every namespace (requests.sql, the
-- column defaults of request_attempt; view request_attempts).
--
-- Every event of an attempt is a link of one chain per namespace, in the order the events
-- happened: its begin (chain_position, chain_hash on the attempt's row) and its end
-- (finish_position, finish_hash: finish_request, resolve_request). A link's hash is sha256 of
-- the previous link's hash followed by the event's content (_chain_link). So a changed row
-- breaks its link, a deleted row leaves a gap in the positions, and hashes written anew after
-- a change give another head: verify_audit_chain returns the head, to keep outside the
-- database (only that finds a chain rewritten from the changed row on by someone who can
-- write the table).
--
-- Links are appended under the lock of the namespace's row of request_chain, held until
-- commit: the begins and ends of attempts of one chained namespace take turns, and "the
-- previous link" is always committed or the transaction's own. Only chained namespaces pay
-- for it: other namespaces never read request_chain on begin or finish. The lock is taken
-- once the attempt's row is written (a begin may first wait for a concurrent start or finish
-- of its key, which waits for the lock in its turn); so a transaction that already appended
-- a link and then begins a key another transaction is starting or finishing deadlocks with
-- it, and PostgreSQL ends one of them (40P01): retry it. With nowait, a begin raises HN030
-- while another transaction holds the chain.
--
-- Retention keeps the chain verifiable: maintain() removes only a prefix of the chain (the
-- oldest links, up to the last one after which no attempt is half removed) and keeps the
-- hash of the last removed link as the anchor the rest starts from (_purge_chained). Keys
-- past their retention that are linked after a key still kept stay until that one goes.

-- The chain of each namespace that ever had audit_chain on: where it starts after retention
-- (anchor) and where it ends (head). Only the functions write it.
CREATE TABLE hivenet.request_chain (
    namespace       text   PRIMARY KEY,
    position        bigint NOT NULL,  -- of the last link (0: none yet)
    head            bytea  NOT NULL,  -- its hash
    anchor_position bigint NOT NULL,  -- of the last link retention removed (0: none)
    anchor          bytea  NOT NULL   -- its hash (the empty string before the first link)
);
COMMENT ON TABLE hivenet.request_chain IS
    'the audit chain of a namespace of keyed requests: its head and the anchor retention left';

-- The chain of namespace p_namespace, made when audit_chain is first turned on
-- (set_namespace_policy); a chain turned on again goes on from its head.
CREATE FUNCTION hivenet._start_chain(p_namespace text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO hivenet.request_chain (namespace, position, head, anchor_position, anchor)
    VALUES (p_namespace, 0, '', 0, '')
    ON CONFLICT (namespace) DO NOTHING;
END $$;

-- The hash of the link of event p_event ('begin' or 'finish') of attempt p_attempt (its row),
-- after the link whose hash is p_previous. What it covers: of a begin, the namespace, key,
-- attempt, its position, the request's fingerprint, unified serial, lease, start and who
-- began it (role, application, address); of an end, the namespace, key, attempt, its
-- position, the state, end, a sha256 of the response and of the error, and the operator and
-- note of a resolution. Times and intervals as epoch seconds, so no session setting (time
-- zone, IntervalStyle) changes the text hashed.
CREATE FUNCTION hivenet._chain_link(p_previous bytea, p_attempt hivenet.request_attempt,
                                    p_event text) RETURNS bytea
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT sha256(p_previous || convert_to(CASE p_event
        WHEN 'begin' THEN jsonb_build_array(
            'begin', p_attempt.namespace, p_attempt.key, p_attempt.attempt,
            p_attempt.chain_position, encode(p_attempt.fingerprint, 'hex'),
            p_attempt.unified_serial, extract(epoch FROM p_attempt.lease),
            extract(epoch FROM p_attempt.started_at), p_attempt.called_by,
            p_attempt.application_name, host(p_attempt.client_addr))
        WHEN 'finish' THEN jsonb_build_array(
            'finish', p_attempt.namespace, p_attempt.key, p_attempt.attempt,
            p_attempt.finish_position, p_attempt.state::text,
            extract(epoch FROM p_attempt.finished_at),
            encode(sha256(convert_to(p_attempt.response::text, 'UTF8')), 'hex'),
            encode(sha256(convert_to(p_attempt.error::text, 'UTF8')), 'hex'),
            p_attempt.resolved_by, p_attempt.note) END::text, 'UTF8'));
END;

-- Append the link of event p_event ('begin' or 'finish') of attempt p_attempt of key p_key to
-- the chain of namespace p_namespace, after its head: the attempt's row gets the position and
-- hash, the chain the new head. Locks the chain until commit.
CREATE FUNCTION hivenet._chain_append(p_namespace text, p_key text, p_attempt integer,
                                      p_event text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_chain hivenet.request_chain;
    v_row hivenet.request_attempt;
    v_hash bytea;
BEGIN
    SELECT * INTO v_chain FROM hivenet.request_chain c
    WHERE c.namespace = p_namespace FOR UPDATE;
    SELECT * INTO v_row FROM hivenet.request_attempt a
    WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
    IF p_event = 'begin' THEN
        v_row.chain_position := v_chain.position + 1;
        v_hash := hivenet._chain_link(v_chain.head, v_row, p_event);
        UPDATE hivenet.request_attempt a
        SET chain_position = v_row.chain_position, chain_hash = v_hash
        WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
    ELSE
        v_row.finish_position := v_chain.position + 1;
        v_hash := hivenet._chain_link(v_chain.head, v_row, p_event);
        UPDATE hivenet.request_attempt a
        SET finish_position = v_row.finish_position, finish_hash = v_hash
        WHERE a.namespace = p_namespace AND a.key = p_key AND a.attempt = p_attempt;
    END IF;
    UPDATE hivenet.request_chain c SET position = c.position + 1, head = v_hash
    WHERE c.namespace = p_namespace;
END $$;

-- Retention of a namespace with an audit chain (_purge_requests): of the attempts of keys
-- p_keys (all ended before the namespace's cutoff), remove those not in the chain and those
-- whose links lie in the longest prefix of the chain that holds only whole attempts of those
-- keys; the hash of its last link becomes the anchor. The rest waits for a later maintain().
-- Reads the namespace's links.
CREATE FUNCTION hivenet._purge_chained(p_namespace text, p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_kept bigint;
    v_cut bigint;
BEGIN
    -- No link appended meanwhile.
    PERFORM FROM hivenet.request_chain c WHERE c.namespace = p_namespace FOR UPDATE;
    -- The first link of an attempt that stays.
    SELECT min(a.chain_position) INTO v_kept FROM hivenet.request_attempt a
    WHERE a.namespace = p_namespace AND a.chain_position IS NOT NULL
      AND NOT a.key = ANY (p_keys);
    -- Before it, the last link after which every begun attempt has ended: counting +1 at a
    -- begin and -1 at an end, in the chain's order, where the count is back to 0.
    SELECT max(l.position) INTO v_cut
    FROM (SELECT l.position, sum(l.step) OVER (ORDER BY l.position) AS open
          FROM (SELECT a.chain_position, 1 FROM hivenet.request_attempt a
                WHERE a.namespace = p_namespace AND a.key = ANY (p_keys)
                  AND a.chain_position IS NOT NULL
                UNION ALL
                SELECT a.finish_position, -1 FROM hivenet.request_attempt a
                WHERE a.namespace = p_namespace AND a.key = ANY (p_keys)
                  AND a.finish_position IS NOT NULL) AS l (position, step)
          WHERE l.position < coalesce(v_kept, 9223372036854775807)) AS l
    WHERE l.open = 0;
    IF v_cut IS NOT NULL THEN
        UPDATE hivenet.request_chain c SET anchor_position = v_cut,
            anchor = (SELECT a.finish_hash FROM hivenet.request_attempt a
                      WHERE a.namespace = p_namespace AND a.finish_position = v_cut)
        WHERE c.namespace = p_namespace;
    END IF;
    DELETE FROM hivenet.request_attempt d
    WHERE d.namespace = p_namespace AND d.key = ANY (p_keys)
      AND (d.chain_position IS NULL OR d.finish_position <= v_cut);
END $$;

-- hivenet.verify_audit_chain(namespace) → table(attempts bigint, links bigint, head bytea,
--     position bigint, key text, attempt integer, problem text), exactly one row.
--   Checks the audit chain of a namespace (set_namespace_policy(..., audit_chain => true))
--   from its anchor to its head: every link's hash against the content of its attempt's row
--   and the link before it, and that no position is missing. problem NULL: the chain is
--   intact, attempts (begun in the chain since its anchor) and links counted, head its last
--   hash (keep it outside the database: a chain rewritten from a changed row on gives
--   another). Otherwise the first bad link: its position, key, attempt, and what is wrong
--   (a row changed, or the links of a deleted row missing). Attempts begun while the chain
--   was off are not in it.
--   HN001: the namespace never had an audit chain. Reads the namespace's attempts; blocks
--   nothing (a link appended meanwhile is after the head it read).
CREATE FUNCTION hivenet.verify_audit_chain(namespace text)
RETURNS TABLE (attempts bigint, links bigint, head bytea, "position" bigint, key text,
               attempt integer, problem text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_namespace ALIAS FOR namespace;
    v_chain hivenet.request_chain;
    v_link record;
    v_previous bytea;
    v_expected bigint;
BEGIN
    SELECT * INTO v_chain FROM hivenet.request_chain c WHERE c.namespace = p_namespace;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('namespace %s has no audit chain (set_namespace_policy(namespace, '
                             'audit_chain => true) starts one)', hivenet._shown(p_namespace));
    END IF;
    attempts := 0;
    head := v_chain.head;
    v_previous := v_chain.anchor;
    v_expected := v_chain.anchor_position + 1;
    FOR v_link IN
        SELECT l.position, l.event, l.hash, l.attempt_row
        FROM (SELECT a.chain_position, 'begin', a.chain_hash, a FROM hivenet.request_attempt a
              WHERE a.namespace = p_namespace AND a.chain_position IS NOT NULL
              UNION ALL
              SELECT a.finish_position, 'finish', a.finish_hash, a
              FROM hivenet.request_attempt a
              WHERE a.namespace = p_namespace AND a.finish_position IS NOT NULL)
             AS l (position, event, hash, attempt_row)
        WHERE l.position <= v_chain.position
        ORDER BY l.position
    LOOP
        "position" := v_link.position;
        key := (v_link.attempt_row).key;
        attempt := (v_link.attempt_row).attempt;
        IF v_link.position > v_expected THEN
            "position" := v_expected;
            problem := format('links %s to %s are missing (a deleted attempt, or a changed '
                              'position) before the %s of key %s attempt %s', v_expected,
                              v_link.position - 1, v_link.event, hivenet._shown(key), attempt);
        ELSIF v_link.position < v_expected THEN
            problem := format('link %s appears twice (a changed position): %s of key %s '
                              'attempt %s', v_link.position, v_link.event, hivenet._shown(key),
                              attempt);
        ELSIF hivenet._chain_link(v_previous, v_link.attempt_row, v_link.event)
              IS DISTINCT FROM v_link.hash THEN
            problem := format('link %s, the %s of key %s attempt %s, does not match its row '
                              'and the link before it: that row was changed', v_link.position,
                              v_link.event, hivenet._shown(key), attempt);
        END IF;
        IF problem IS NOT NULL THEN
            links := v_expected - 1 - v_chain.anchor_position;
            RETURN NEXT;
            RETURN;
        END IF;
        attempts := attempts + (v_link.event = 'begin')::integer;
        v_previous := v_link.hash;
        v_expected := v_expected + 1;
    END LOOP;
    links := v_expected - 1 - v_chain.anchor_position;
    "position" := NULL;
    key := NULL;
    attempt := NULL;
    IF v_expected <= v_chain.position THEN
        "position" := v_expected;
        problem := format('links %s to %s, the latest, are missing (deleted attempts)',
                          v_expected, v_chain.position);
    ELSIF v_previous IS DISTINCT FROM v_chain.head THEN
        "position" := v_chain.position;
        problem := format('the head of the chain (position %s) is not the hash of its last '
                          'link', v_chain.position);
    END IF;
    RETURN NEXT;
END $$;
