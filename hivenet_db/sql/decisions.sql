-- Decision counts: how many begins of each namespace (steps are namespace 'hivenet.steps')
-- ended in each decision, for metric hivenet_request_decisions_total (view
-- request_decisions, reporting.sql). The decisions, the same strings as the Python hook's and
-- the OpenTelemetry attribute's (hivenet_db/decisions.py):
--   started      a new attempt began (the key was new, or its latest attempt failed)
--   replayed     the stored response of a success was returned
--   in_progress  HN030: the latest attempt is processing
--   mismatch     HN032: the key was begun with another request
--   rejected     the key or an option was refused (HN001, HN002, HN021), or a repeat of a
--                success whose policy is 'reject' (HN031)
--   expired      a processing attempt was found past its namespace's expire_after
--
-- A count is a sequence: nextval survives the caller's rollback, and in_progress, mismatch
-- and rejected raise, which aborts the caller's transaction. So a count is of decisions
-- taken, committed or not: a started key whose transaction rolled back was counted started
-- (and its next begin is counted again). The cost on the hot path is one index probe of
-- decision_counter and one nextval (no row written); the measurements are in
-- docs/benchmarks.md. A sequence writes WAL once per 32 values, so after a crash a count can
-- jump ahead by up to 32 (never back).
--
-- A namespace gets its six counters with its first started key (_new_decision_counter), if
-- an administrator gave it a policy of its own (set_namespace_policy) or it is among the
-- first max_counted_namespaces to start one (the setting): the application's begins make no
-- more sequences than that, and the metric no more series; begins in any further namespace
-- count under 'hivenet.other'. Made in that caller's transaction: a second transaction
-- starting a key of the same new namespace at the same time makes six of its own (each
-- counter's name is unique, so neither waits for the other) and the view sums them. Made in a
-- transaction that rolls back, the counters vanish with what they counted (that transaction's
-- decisions only: no other saw them). Decisions of a namespace without counters that raise (a bad
-- namespace, a bad key in a namespace that never started one, a duplicate of its first key before
-- that commits) cannot make them, as the raise would undo it: they are counted under namespace
-- 'hivenet.other'.

-- Which sequences count which decision of which namespace: six rows (one per decision) per
-- namespace and maker, usually one maker. counter: nextval by OID, no name resolved.
CREATE TABLE hivenet.decision_counter (
    namespace text     NOT NULL,
    decision  text     NOT NULL,
    counter   regclass NOT NULL,
    PRIMARY KEY (namespace, decision, counter)
);
COMMENT ON TABLE hivenet.decision_counter IS
    'the sequences that count the decisions of begin per namespace (view request_decisions)';

-- The counters, for begin_step's inlined replay, which runs as hivenet_app and reads them
-- through this view: the role has no right on a table (privileges.sql).
CREATE VIEW hivenet._decision_counters AS
SELECT c.namespace, c.decision, c.counter FROM hivenet.decision_counter c;

-- The number in each counter's name (decisions_<number>_<decision>): unique, whoever makes it.
CREATE SEQUENCE hivenet.decision_counter_number;

-- Make the six counters of namespace p_namespace, usable by hivenet_app (_grant_counter,
-- privileges.sql) unless p_grant is false: at install, before privileges.sql, whose
-- _grant_roles grants every counter (_grant_decision_counters).
CREATE FUNCTION hivenet._create_decision_counters(p_namespace text, p_grant boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_number bigint := nextval('hivenet.decision_counter_number');
    v_decision text;
    v_name text;
BEGIN
    FOREACH v_decision IN ARRAY ARRAY['started', 'replayed', 'in_progress', 'mismatch',
                                      'rejected', 'expired'] LOOP
        v_name := format('decisions_%s_%s', v_number, v_decision);
        EXECUTE format('CREATE SEQUENCE hivenet.%I', v_name);
        IF p_grant THEN
            PERFORM hivenet._grant_counter(v_name);
        END IF;
        INSERT INTO hivenet.decision_counter (namespace, decision, counter)
        VALUES (p_namespace, v_decision, ('hivenet.' || quote_ident(v_name))::regclass);
    END LOOP;
END $$;

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('max_counted_namespaces', '100', 'count',
     'most namespaces of keyed requests the application makes decision counters for (six '
     'sequences each; metric hivenet_request_decisions_total); begins in further ones count '
     'under hivenet.other, but those with a policy of their own (set_namespace_policy)');

-- The counter of decision p_decision in namespace p_namespace when _count_decision found
-- none: for a started key, the namespace's own, made now (its first start, or another
-- transaction's counters are not committed yet) when it may have its own; else, and for
-- anything else, namespace 'hivenet.other' (see above). NULL for no decision of the six.
-- SECURITY DEFINER: it makes sequences for hivenet_app.
CREATE FUNCTION hivenet._new_decision_counter(p_namespace text, p_decision text) RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_namespace text := CASE WHEN p_decision = 'started' AND hivenet._name_valid(p_namespace)
                             THEN p_namespace ELSE 'hivenet.other' END;
    v_counter regclass;
BEGIN
    LOOP
        SELECT c.counter INTO v_counter FROM hivenet.decision_counter c
        WHERE c.namespace = v_namespace AND c.decision = p_decision LIMIT 1;
        IF FOUND OR v_namespace = 'hivenet.other' THEN
            RETURN v_counter;
        ELSIF hivenet._counted_apart(v_namespace) THEN
            PERFORM hivenet._create_decision_counters(v_namespace, true);
        ELSE
            v_namespace := 'hivenet.other';
        END IF;
    END LOOP;
END $$;

-- Whether namespace p_namespace, which has no counters, may get its own: it has a policy of
-- its own (a row of request_namespace: set_namespace_policy, an administrator's), or fewer
-- than the setting max_counted_namespaces namespaces without one have counters (as this
-- transaction sees them: first starts of new namespaces at the same time may each make
-- theirs).
CREATE FUNCTION hivenet._counted_apart(p_namespace text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN EXISTS (SELECT FROM hivenet.request_namespace n WHERE n.namespace = p_namespace)
        OR (SELECT count(DISTINCT c.namespace) FROM hivenet.decision_counter c
            WHERE c.decision = 'started' AND left(c.namespace, 8) <> 'hivenet.'
              AND NOT EXISTS (SELECT FROM hivenet.request_namespace n
                              WHERE n.namespace = c.namespace))
           < hivenet._setting_constant('max_counted_namespaces')::integer;
END $$;

-- Let hivenet_app count on every counter (_grant_counter): run by _grant_roles
-- (privileges.sql), at install and when bootstrap made the roles.
CREATE FUNCTION hivenet._grant_decision_counters() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_name name;
BEGIN
    FOR v_name IN SELECT s.relname FROM hivenet.decision_counter c
                  JOIN pg_class s ON s.oid = c.counter ORDER BY 1 LOOP
        PERFORM hivenet._grant_counter(v_name);
    END LOOP;
END $$;

-- Count decision p_decision of a begin in namespace p_namespace; returns p_decision, so a
-- caller can write `outcome := hivenet._count_decision(p_namespace, 'started')`, and calls
-- it just before a RAISE. Runs inside begin's SECURITY DEFINER paths: one probe of view
-- _decision_counters and a nextval; the rare miss goes to _new_decision_counter. No SET
-- clause (a SET costs a tenth of a begin, requests.sql), so every name is qualified.
CREATE FUNCTION hivenet._count_decision(p_namespace text, p_decision text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- Every name qualified, operators too: the caller's search_path is in force.
    PERFORM pg_catalog.nextval(coalesce(
        (SELECT c.counter FROM hivenet._decision_counters c
         WHERE c.namespace OPERATOR(pg_catalog.=) p_namespace
           AND c.decision OPERATOR(pg_catalog.=) p_decision LIMIT 1),
        hivenet._new_decision_counter(p_namespace, p_decision)));
    RETURN p_decision;
END $$;

-- The counters of the steps and of decisions without a namespace of their own, from the start.
SELECT hivenet._create_decision_counters('hivenet.steps', false);
SELECT hivenet._create_decision_counters('hivenet.other', false);
