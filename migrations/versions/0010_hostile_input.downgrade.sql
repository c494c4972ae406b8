-- Downgrade of revision 0010, frozen: everything as revision 0008 left it.

-- Trigger: reject a value that does not parse as the setting's kind, and a business time zone
-- behind the current one once serials exist (their dates and times would go backwards).
-- hivenet.scope and hivenet.scope_pending (allocate.sql) are read when the trigger runs.
CREATE OR REPLACE FUNCTION hivenet._setting_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    BEGIN
        CASE NEW.kind
            WHEN 'boolean' THEN PERFORM NEW.value::boolean;
            WHEN 'interval' THEN PERFORM NEW.value::interval;
            WHEN 'time_zone' THEN PERFORM now() AT TIME ZONE NEW.value;
            ELSE NULL;
        END CASE;
    EXCEPTION WHEN data_exception OR invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %s is not a valid %s', NEW.name,
                             hivenet._shown(NEW.value), NEW.kind);
    END;
    IF TG_OP = 'UPDATE' AND NEW.kind = 'time_zone' AND NEW.value <> OLD.value
       AND now() AT TIME ZONE NEW.value < now() AT TIME ZONE OLD.value
       AND to_regclass('hivenet.scope_pending') IS NOT NULL THEN
        -- Nested: the tables are looked up only once they exist (not during an install).
        IF EXISTS (SELECT FROM hivenet.scope) OR EXISTS (SELECT FROM hivenet.scope_pending) THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('setting %s: %s is %s behind %s, and serials have been '
                                 'issued: their business dates and times would go backwards '
                                 '(choose the zone before the first serial)', NEW.name,
                                 hivenet._shown(NEW.value),
                                 (now() AT TIME ZONE OLD.value) - (now() AT TIME ZONE NEW.value),
                                 hivenet._shown(OLD.value));
        END IF;
    END IF;
    RETURN NEW;
END $$;

-- The fake clock of hivenet.now(): the session's hivenet.fake_now as a timestamptz.
--   Raises HN001 when fake clocks are not allowed in this database (setting
--   allow_fake_clock), or when the value is no timestamptz. Never blocks.
CREATE OR REPLACE FUNCTION hivenet._fake_now() RETURNS timestamptz
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_fake text := current_setting('hivenet.fake_now', true);
BEGIN
    IF NOT hivenet._setting_value('allow_fake_clock')::boolean THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now is set to %L but this database does not allow a '
                             'fake clock (setting allow_fake_clock)', hivenet._shown(v_fake));
    END IF;
    BEGIN
        RETURN v_fake::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now %s is not a timestamptz', hivenet._shown(v_fake));
    END;
END $$;

-- hivenet.claim(namespace, key, nowait default false) → void
--   Takes the claim (namespace, key) in the caller's transaction: it commits or vanishes with
--   that transaction. A claim whose namespace expiry has passed counts as free (maintain()
--   deletes such rows later; until then they still block nobody).
--   Raises HN001 when namespace or key is NULL, empty, or longer than 200 / 1000 bytes; HN040
--   when the claim is taken.
--   Blocks while another transaction holds an uncommitted claim of the same key, then raises
--   HN040 if that one committed, or takes the claim if it rolled back. With nowait it raises
--   HN040 at once instead (also, once in about 4 billion, for another key claimed at that
--   moment whose 32-bit hash is the same). Under REPEATABLE READ a claim committed after the
--   transaction's snapshot raises 40001 (retry) instead.
CREATE OR REPLACE FUNCTION hivenet.claim(p_namespace text, p_key text, p_nowait boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_lock integer;
    v_expires timestamptz;
BEGIN
    IF p_namespace IS NULL OR p_namespace = '' OR octet_length(p_namespace) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim namespace %s must be 1 to 200 bytes',
                             hivenet._shown(p_namespace));
    END IF;
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim key %s of namespace %s must be 1 to 1000 bytes',
                             hivenet._shown(p_key), hivenet._shown(p_namespace));
    END IF;
    v_lock := hashtext(p_namespace || chr(31) || p_key);
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._claim_lock_space(), v_lock);
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._claim_lock_space(), v_lock) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is being taken by another transaction in progress '
                             '(nowait)', hivenet._shown(p_namespace), hivenet._shown(p_key));
    END IF;
    SELECT v_now + n.expiry INTO v_expires
    FROM hivenet.claim_namespace n WHERE n.namespace = p_namespace;
    INSERT INTO hivenet.claim_record (namespace, key, claimed_at, expires_at)
    VALUES (p_namespace, p_key, v_now, v_expires)
    ON CONFLICT (namespace, key) DO NOTHING;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Rare path: taken before; free again if it expired.
    UPDATE hivenet.claim_record r SET claimed_at = v_now, expires_at = v_expires
    WHERE r.namespace = p_namespace AND r.key = p_key AND r.expires_at <= v_now;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN040',
            MESSAGE = format('claim %s / %s is already taken (until %s)',
                             hivenet._shown(p_namespace), hivenet._shown(p_key), v_expires);
    END IF;
END $$;

-- hivenet.set_claim_expiry(namespace, expiry) → void: claims of namespace taken from now on
--   expire after expiry (NULL: never). Raises HN001 when namespace is NULL or empty or expiry
--   is not positive. Runs in the caller's transaction; blocks only a concurrent change of the
--   same namespace.
CREATE OR REPLACE FUNCTION hivenet.set_claim_expiry(p_namespace text, p_expiry interval) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_namespace IS NULL OR p_namespace = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = 'claim namespace must not be empty';
    END IF;
    IF p_expiry <= interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('claim expiry %s of namespace %s must be positive', p_expiry,
                             hivenet._shown(p_namespace));
    END IF;
    INSERT INTO hivenet.claim_namespace (namespace, expiry) VALUES (p_namespace, p_expiry)
    ON CONFLICT (namespace) DO UPDATE SET expiry = excluded.expiry;
END $$;

-- begin_step with nowait: the same, under the shortest lock_timeout, so that where it would
-- wait for a concurrent start of the same attempt it raises HN030 at once. Its own function
-- (SET clause) so the caller's lock_timeout is untouched, and the subtransaction of the
-- EXCEPTION block stays off the default path.
CREATE OR REPLACE FUNCTION hivenet._begin_step_nowait(
    p_system_serial text, p_request jsonb, p_on_success text, p_unified_serial text,
    p_lease interval)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '1ms' AS $$
BEGIN
    RETURN QUERY SELECT * FROM hivenet.begin_step(
        p_system_serial, p_request, p_on_success, p_unified_serial, p_lease, false);
EXCEPTION WHEN lock_not_available THEN
    RAISE EXCEPTION USING ERRCODE = 'HN030',
        MESSAGE = format('step %s is being started by another transaction right now (nowait)',
                         p_system_serial);
END $$;

-- Why attempt p_attempt of step p_system_serial cannot be finished: HN033 naming what is there.
CREATE OR REPLACE FUNCTION hivenet._raise_stale_attempt(p_system_serial text, p_attempt integer)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_last hivenet.step_attempt;
BEGIN
    SELECT * INTO v_last FROM hivenet.step_attempt a
    WHERE a.system_serial = p_system_serial ORDER BY a.attempt DESC LIMIT 1;
    RAISE EXCEPTION USING ERRCODE = 'HN033',
        MESSAGE = CASE WHEN v_last.attempt IS NULL
            THEN format('step %s has no attempt %s', p_system_serial, p_attempt)
            ELSE format('attempt %s of step %s is not the current processing attempt (the '
                        'current is attempt %s, %s)', p_attempt, p_system_serial,
                        v_last.attempt, v_last.state) END;
END $$;

-- hivenet.finish_step(system_serial, attempt, succeeded, response default null) → void
--   Ends the processing attempt `attempt` (the number begin_step returned) as `success`
--   (response kept and replayed to later callers) or `failed` (response kept as the error;
--   the next begin_step proceeds with a new attempt), in the caller's transaction.
--   Fencing: HN033 StaleAttempt, changing nothing, when that attempt is not the step's
--   current one or is no longer `processing` (finished, or resolved by an operator).
--   HN001 when succeeded is NULL. Blocks only while another transaction is finishing or
--   resolving the same attempt; then raises HN033 if that one committed.
CREATE OR REPLACE FUNCTION hivenet.finish_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE hivenet.step_attempt a
    SET state = CASE WHEN p_succeeded THEN 'success'::hivenet.step_state
                     ELSE 'failed'::hivenet.step_state END,
        finished_at = hivenet.now(),
        response = CASE WHEN p_succeeded THEN p_response END,
        error = CASE WHEN NOT p_succeeded THEN p_response END
    WHERE a.system_serial = p_system_serial AND a.attempt = p_attempt
      AND a.state = 'processing' AND p_succeeded IS NOT NULL;
    IF NOT FOUND THEN  -- the checks stay off the hot path
        IF p_succeeded IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('step %s attempt %s: succeeded is NULL', p_system_serial,
                                 p_attempt);
        END IF;
        PERFORM hivenet._raise_stale_attempt(p_system_serial, p_attempt);
    END IF;
END $$;

-- hivenet.resolve_step(system_serial, attempt, succeeded, note, response default null) → void
--   Operator action for a stuck step (hivenet.stuck_steps): once the real outcome of attempt
--   `attempt` is known (e.g. from the remote system's reconciliation), record it as
--   `success` (response replayed later) or `failed` (the next begin_step proceeds), with a
--   note and the operator's session user. The original attempt's late finish_step then gets
--   HN033. Works on any processing attempt, also before its lease ran out.
--   HN033 as finish_step; HN001 when note is empty or succeeded NULL. Blocks like finish_step.
CREATE OR REPLACE FUNCTION hivenet.resolve_step(
    p_system_serial text, p_attempt integer, p_succeeded boolean, p_note text,
    p_response jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(btrim(p_note), '') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('step %s attempt %s: resolving needs a note', p_system_serial,
                             p_attempt);
    END IF;
    -- finish_step's fencing and state change; the note goes on the row it just locked.
    PERFORM hivenet.finish_step(p_system_serial, p_attempt, p_succeeded, p_response);
    UPDATE hivenet.step_attempt a SET resolved_by = session_user, note = p_note
    WHERE a.system_serial = p_system_serial AND a.attempt = p_attempt;
END $$;

-- next_serials was a sql function: changing the language back needs CREATE OR REPLACE too.

CREATE OR REPLACE FUNCTION hivenet.next_serials(p_format text, p_fields jsonb, p_n integer)
RETURNS SETOF text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT unnest(hivenet._allocate(p_format, p_fields, NULL, p_n))
$$;


-- Raw value of a counter scope's sequence (period * stride + seq), NULL before its first use.
-- SECURITY DEFINER: a reporting role reads the view without any right on the sequences.
CREATE OR REPLACE FUNCTION hivenet._scope_counter_value(p_sequence_name text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_sequence_last_value(to_regclass('hivenet.' || quote_ident(p_sequence_name)))
$$;

ALTER TABLE hivenet.step_attempt
    RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);
ALTER TABLE hivenet.claim_record
    RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold);

DROP FUNCTION hivenet._check_claim_namespace(text);
DELETE FROM hivenet.setting WHERE name = 'max_serials_per_call';
ALTER TABLE hivenet.setting DROP CONSTRAINT setting_kind_check;
ALTER TABLE hivenet.setting ADD CONSTRAINT setting_kind_check
    CHECK (kind IN ('text', 'boolean', 'interval', 'time_zone'));
