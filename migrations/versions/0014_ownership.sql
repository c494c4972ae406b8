-- Revision 0014: instance ownership, several primaries whose serials never collide (issue 16).
--   * hivenet_db/sql/ownership.sql (new): settings owned_instances, single_primary_formats,
--     check_received_instances; own_instances(), ownership(); the checks; parking of given-up scopes;
--   * _issue_cold, prepare_scope: HN002 for an instance (or format) this database does not own;
--   * _maintain_scopes: pending first uses no longer owned are dropped, not promoted;
--   * begin_step, claim_interface_serial: HN002 for a received serial of an instance this
--     database does not own, once it declared ownership (a retry on the wrong shard);
--   * privileges applied again (new functions; own_instances for hivenet_admin).
-- The state of hivenet_db/sql/{ownership,allocate,steps,dedup,privileges}.sql on 2026-11-24.
-- Never edit it.

-- hivenet_db/sql/ownership.sql
-- Instance ownership: several primaries, serials that never collide (SPEC §1 "Several
-- primaries", docs/scale-out.md).
--
-- Each database declares the instances it owns (setting owned_instances, changed with
-- hivenet.own_instances(...) or `hivenet-db migrate --owns-instances`): the `instance` field of
-- unified, system and interface serials, the `shard` field of id_service (a format's node
-- field: its field named instance, else shard). 'all' (the default) is one primary, as before.
-- Formats without a node field (merchant_trade, per_second) cannot be split by instance: once
-- ownership is declared, only the database whose setting single_primary_formats is on issues
-- them. Allocation outside that raises HN002 naming the instance and what this database owns.
--
-- Nothing is added to the allocation hot path (next_unified_serial's inlined fast path,
-- _allocate with a scope's own sequence): the check runs where a scope is first used
-- (_issue_cold, allocate.sql) and where it gets its own sequence (prepare_scope, maintain()).
-- Every scope sequence therefore belongs to an owned instance; giving an instance up is
-- refused while it has scopes here, unless forced, which parks their sequences (renamed
-- seq_X → off_X, counters kept): the next allocation finds no sequence, goes through the
-- first-use path and its check, and gets HN002. Owning the instance again restores them.
-- A change takes effect for transactions that start after it commits.
--
-- The receiving side: on a database that declared ownership, begin_step and
-- claim_interface_serial refuse a serial whose printed instance it does not own (HN002),
-- unless the setting check_received_instances is off. Received serials carry their sender's
-- instance (seed 000: the caller makes the system and interface serials), so this holds when
-- received calls are routed to the shard that owns the instance in their serial (as the
-- sender's own allocations are): then a retry on the wrong shard is refused instead of running
-- the step a second time. A deployment routing received calls by another key (a merchant)
-- turns the setting off and relies on its routing alone.

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('owned_instances', 'all', 'text',
     'instances (the instance field; the shard field of id_service) this database allocates '
     'for: ''all'' (one primary) or a list such as ''01-09,12''; change it with '
     'hivenet.own_instances() (HN002 for others)'),
    ('single_primary_formats', 'false', 'boolean',
     'once owned_instances is not ''all'': this database is the one that issues the formats '
     'without an instance or shard field (merchant_trade, per_second); on exactly one primary'),
    ('check_received_instances', 'true', 'boolean',
     'once owned_instances is not ''all'': begin_step and claim_interface_serial refuse '
     'serials whose instance this database does not own (HN002: a retry on the wrong shard)');

-- The instances of p_instances ('all', or a list of two-digit instances and ranges such as
-- '01-09, 12'), written canonically: sorted, ranges merged ('01-09,12'). HN001 naming the bad
-- part; an empty list is refused (a database that owns nothing issues nothing).
CREATE FUNCTION hivenet._canonical_instances(p_instances text) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_part text;
    v_from integer;
    v_to integer;
    v_owned boolean[] := array_fill(false, ARRAY[100], ARRAY[0]);
    v_out text[] := '{}';
    v_start integer;
BEGIN
    IF lower(btrim(p_instances)) = 'all' THEN
        RETURN 'all';
    END IF;
    FOREACH v_part IN ARRAY string_to_array(replace(coalesce(p_instances, ''), ' ', ''), ',')
    LOOP
        IF v_part !~ '^[0-9]{2}(-[0-9]{2})?$' THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('owned instances %s: %s is no instance (00 to 99) nor range '
                                 '(such as 01-09); give ''all'' or a list such as ''01-09,12''',
                                 hivenet._shown(p_instances), hivenet._shown(v_part));
        END IF;
        v_from := left(v_part, 2)::integer;
        v_to := right(v_part, 2)::integer;
        IF v_to < v_from THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('owned instances %s: range %s ends before it starts',
                                 hivenet._shown(p_instances), hivenet._shown(v_part));
        END IF;
        FOR i IN v_from .. v_to LOOP
            v_owned[i] := true;
        END LOOP;
    END LOOP;
    FOR i IN 0 .. 100 LOOP
        IF i < 100 AND v_owned[i] AND v_start IS NULL THEN
            v_start := i;
        ELSIF (i = 100 OR NOT v_owned[i]) AND v_start IS NOT NULL THEN
            v_out := v_out || CASE WHEN v_start = i - 1 THEN to_char(v_start, 'FM00')
                                   ELSE to_char(v_start, 'FM00') || '-' || to_char(i - 1, 'FM00')
                              END;
            v_start := NULL;
        END IF;
    END LOOP;
    IF v_out = '{}' THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('owned instances %s: name at least one instance, or ''all''',
                             hivenet._shown(p_instances));
    END IF;
    RETURN array_to_string(v_out, ',');
END $$;

-- Whether instance p_instance (two digits) is in p_owned (canonical: _canonical_instances).
CREATE FUNCTION hivenet._instance_in(p_instance text, p_owned text) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p_owned = 'all' OR (p_instance ~ '^[0-9]{2}$' AND EXISTS (
        SELECT FROM unnest(string_to_array(p_owned, ',')) AS r
        WHERE p_instance BETWEEN left(r, 2) AND right(r, 2)))
$$;

-- The node field of format p_format: its field named instance, else shard, else NULL (a
-- format that can only be issued by one primary).
CREATE FUNCTION hivenet._node_field(p_format hivenet.format) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN 'instance' = ANY (p_format.field_names) THEN 'instance'
                WHEN 'shard' = ANY (p_format.field_names) THEN 'shard' END
$$;

-- The current value of setting p_name: its generated constant, or its row when the constant
-- is missing (a rewrite lost to a concurrent one: settings.sql).
CREATE FUNCTION hivenet._ownership_setting(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(hivenet._setting_constant(p_name), hivenet._setting_value(p_name))
$$;

-- hivenet.ownership() → table(owned_instances text, single_primary_formats boolean,
--   check_received_instances boolean), one row: what this database declared (for any role:
--   hivenet_db.shards.ShardMap checks its map against every shard's at start). No error.
CREATE FUNCTION hivenet.ownership()
RETURNS TABLE (owned_instances text, single_primary_formats boolean,
               check_received_instances boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet._setting_value('owned_instances'),
           hivenet._setting_value('single_primary_formats')::boolean,
           hivenet._setting_value('check_received_instances')::boolean
$$;

-- Why this database may not issue format p_format for node value p_node (its node field's
-- value; NULL for a format without one) under owned instances p_owned and setting
-- single_primary_formats p_single; NULL when it may.
CREATE FUNCTION hivenet._not_owned(p_format hivenet.format, p_node text, p_owned text,
    p_single boolean) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN p_owned = 'all' THEN NULL
        WHEN hivenet._node_field(p_format) IS NULL THEN CASE WHEN NOT p_single THEN format(
            'format %s has no instance or shard field: with several primaries only the one '
            'whose setting single_primary_formats is on issues it (this database owns '
            'instances %s, and that setting is off here)', p_format.name, p_owned) END
        WHEN NOT hivenet._instance_in(p_node, p_owned) THEN format(
            'format %s: %s %s is not owned by this database (it owns %s): allocate on the '
            'database that owns it (docs/scale-out.md)', p_format.name,
            hivenet._node_field(p_format), hivenet._shown(p_node), p_owned)
    END
$$;

-- HN002 unless this database may issue format p_format for field values p_values (in the
-- format's field order). Off the hot path: on a scope's first use and promotion only.
CREATE FUNCTION hivenet._check_owned(p_format hivenet.format, p_values text[]) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_problem text := hivenet._not_owned(p_format,
        p_values[array_position(p_format.field_names, hivenet._node_field(p_format))],
        hivenet._ownership_setting('owned_instances'),
        hivenet._ownership_setting('single_primary_formats')::boolean);
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002', MESSAGE = v_problem;
    END IF;
END $$;

-- HN002 when serial p_serial of format p_format (system: a step; interface: a claim), valid,
-- was received by a database that does not own the instance printed in it (docs/scale-out.md:
-- a retry on the wrong shard). Callers test owned_instances <> 'all' first (no call at all on
-- one primary); nothing is checked when check_received_instances is off.
CREATE FUNCTION hivenet._check_owned_serial(p_format text, p_serial text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text := hivenet._ownership_setting('owned_instances');
    v_instance text;
BEGIN
    IF v_owned = 'all' OR NOT hivenet._ownership_setting('check_received_instances')::boolean
    THEN
        RETURN;
    END IF;
    -- The standard's system and interface serials print the instance at 9-10.
    v_instance := CASE WHEN p_format IN ('system', 'interface') THEN substr(p_serial, 9, 2)
                       ELSE hivenet.parse_serial(p_serial, p_format) ->> 'instance' END;
    IF NOT hivenet._instance_in(v_instance, v_owned) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('%s serial %s carries instance %s, which this database does not '
                             'own (it owns %s): send it, and every retry of it, to the shard '
                             'that owns that instance (docs/scale-out.md; setting '
                             'check_received_instances)', p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $$;

-- Counter scopes with a sequence of their own (parked or not) or waiting for one, with their
-- format and node value.
CREATE FUNCTION hivenet._scopes_by_node()
RETURNS TABLE (format hivenet.format, scope text, node text, sequence_name text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT f, s.scope, s.fields ->> hivenet._node_field(f), s.sequence_name
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name FROM hivenet.scope c
          UNION ALL
          SELECT DISTINCT p.format, p.scope, p.fields, NULL FROM hivenet.scope_pending p) AS s
    JOIN hivenet.format f ON f.name = s.format
$$;

-- Trigger on hivenet.setting, for owned_instances and single_primary_formats: writes the
-- instances canonically (HN001 when malformed), refuses a change that leaves a scope of this
-- database outside what it may issue (HN001 naming one: give the instances up with
-- own_instances(..., p_force => true), which parks them first), and restores the parked
-- scopes that the new value allows again. SECURITY DEFINER: an administrator's plain UPDATE
-- renames the owner's sequences.
CREATE FUNCTION hivenet._ownership_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text;
    v_single boolean;
    v_scope record;
BEGIN
    IF NEW.name = 'owned_instances' THEN
        NEW.value := hivenet._canonical_instances(NEW.value);
    END IF;
    IF TG_OP = 'INSERT' OR to_regclass('hivenet.scope_pending') IS NULL THEN
        RETURN NEW;
    END IF;
    v_owned := CASE WHEN NEW.name = 'owned_instances' THEN NEW.value
                    ELSE hivenet._setting_value('owned_instances') END;
    v_single := CASE WHEN NEW.name = 'single_primary_formats' THEN NEW.value::boolean
                     ELSE hivenet._setting_value('single_primary_formats')::boolean END;
    SELECT s.format, s.scope, s.node INTO v_scope FROM hivenet._scopes_by_node() s
    WHERE (s.sequence_name IS NULL OR left(s.sequence_name, 4) <> 'off_')
      AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
    ORDER BY (s.format).name, s.scope LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s %s: this database has issued serials of format %s '
                             'scope %s, which it would no longer own; give it up with '
                             'hivenet.own_instances(..., p_force => true), which parks such '
                             'scopes (docs/scale-out.md)', NEW.name, hivenet._shown(NEW.value),
                             (v_scope.format).name, hivenet._shown(v_scope.scope));
    END IF;
    FOR v_scope IN SELECT s.format, s.scope, s.sequence_name FROM hivenet._scopes_by_node() s
                   WHERE left(s.sequence_name, 4) = 'off_'
                     AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NULL
                   ORDER BY s.sequence_name LOOP
        PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, false);
    END LOOP;
    RETURN NEW;
END $$;

CREATE TRIGGER setting_ownership BEFORE INSERT OR UPDATE ON hivenet.setting
    FOR EACH ROW WHEN (NEW.name IN ('owned_instances', 'single_primary_formats'))
    EXECUTE FUNCTION hivenet._ownership_check();

-- Parks (p_park) or restores the own sequence of scope p_scope of format p_format: renamed
-- seq_X → off_X and back (same length, so the name stays valid), its counter kept, the scope's
-- row following. A parked scope's allocation finds no sequence and takes the first-use path.
-- Waits for transactions that used the sequence (ALTER SEQUENCE locks it).
CREATE FUNCTION hivenet._park_scope(p_format text, p_scope text, p_park boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_live text := hivenet._scope_sequence_name(p_format, p_scope);
    v_parked text := 'off_' || substr(v_live, 5);
BEGIN
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(p_format));
    IF p_park AND hivenet._committed_sequence(v_live) IS NOT NULL THEN
        EXECUTE format('ALTER SEQUENCE hivenet.%I RENAME TO %I', v_live, v_parked);
        UPDATE hivenet.scope SET sequence_name = v_parked
        WHERE format = p_format AND scope = p_scope;
    ELSIF NOT p_park AND hivenet._committed_sequence(v_parked) IS NOT NULL THEN
        EXECUTE format('ALTER SEQUENCE hivenet.%I RENAME TO %I', v_parked, v_live);
        UPDATE hivenet.scope SET sequence_name = v_live
        WHERE format = p_format AND scope = p_scope;
    END IF;
END $$;

-- hivenet.own_instances(instances, single_primary_formats default null, force default false)
--   → text (administrators): declares what this database allocates for (docs/scale-out.md):
--   instances 'all' (one primary: the default) or a list such as '01-09' or '01,03,05' (of the
--   instance field; the shard field of id_service), and, when single_primary_formats is not
--   NULL, whether it is the one database issuing formats without such a field. Returns the
--   instances as written ('01-09,12').
--   HN001: a malformed list; an instance or format this database has issued serials for and
--   would no longer own, unless force, which parks those scopes (their next allocation raises
--   HN002; owning them again restores their counters) and drops their pending first uses.
--   Moving an instance to another database is safe only across a period boundary of its
--   formats: counters are not carried over (docs/scale-out.md). Commits with the caller;
--   waits for transactions that use a parked scope. READ COMMITTED only (settings.sql).
CREATE FUNCTION hivenet.own_instances(p_instances text,
    p_single_primary_formats boolean DEFAULT NULL, p_force boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owned text := hivenet._canonical_instances(p_instances);
    v_single boolean := coalesce(p_single_primary_formats,
                                 hivenet._setting_value('single_primary_formats')::boolean);
    v_scope record;
BEGIN
    IF p_force THEN
        FOR v_scope IN SELECT s.format, s.scope, s.sequence_name FROM hivenet._scopes_by_node() s
                       WHERE hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
                       ORDER BY (s.format).name, s.scope LOOP
            IF v_scope.sequence_name IS NULL THEN
                DELETE FROM hivenet.scope_pending
                WHERE format = (v_scope.format).name AND scope = v_scope.scope;
            ELSE
                PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
            END IF;
        END LOOP;
    END IF;
    UPDATE hivenet.setting SET value = v_single::text WHERE name = 'single_primary_formats'
                                                        AND value <> v_single::text;
    UPDATE hivenet.setting SET value = v_owned WHERE name = 'owned_instances';
    RETURN v_owned;
END $$;

-- hivenet_db/sql/allocate.sql
-- _issue for scope p_scope that has no sequence of its own yet (as far as this session's
-- catalog cache knows): from its own sequence if one was committed since, else from the
-- format's cold counter, recording the scope for maintain(). Holds the format's cold lock
-- shared while it looks and draws (never until commit), so a promotion that commits in
-- between is either seen here or waited for. Never waits for another caller's commit.
CREATE OR REPLACE FUNCTION hivenet._issue_cold(p_format hivenet.format, p_values text[], p_count integer)
RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_scope text := hivenet._scope_of(p_format, p_values);
    v_key integer := hashtext(p_format.name);
    v_seq regclass;
    v_out text[];
BEGIN
    -- A scope's first use (and every use of a parked one): this database must own it
    -- (ownership.sql). Scopes with a sequence of their own passed this when promoted.
    IF hivenet._setting_constant('owned_instances') IS DISTINCT FROM 'all' THEN
        PERFORM hivenet._check_owned(p_format, p_values);
    END IF;
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('new scopes (among them %L, sharing the format''s cold counter until '
                       'hivenet.maintain() gives each its own)', v_scope));
            -- Once per scope, not per serial: a busy new scope would pile up rows.
            INSERT INTO hivenet.scope_pending (format, scope, fields)
            SELECT p_format.name, v_scope, hivenet._scope_fields(p_format, p_values)
            WHERE NOT EXISTS (SELECT FROM hivenet.scope_pending s
                              WHERE s.format = p_format.name AND s.scope = v_scope);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
    IF v_seq IS NOT NULL THEN
        RETURN hivenet._issue(v_seq, p_format, p_values, p_count, format('scope %L', v_scope));
    END IF;
    RETURN v_out;
END $$;

-- hivenet_db/sql/allocate.sql
-- hivenet.prepare_scope(format, fields) → void (administrators)
--   Gives the counter scope of fields its own sequence now, so that its serials start at 1
--   from the first (maintain() does the same for every scope that has been used). Commits
--   with the caller's transaction: run it in a short one of its own, since allocations of
--   new scopes of the format wait for it. HN001 for an unknown format or bad field values;
--   HN002 for an instance (or a format) this database does not own (ownership.sql).
CREATE OR REPLACE FUNCTION hivenet.prepare_scope(p_format text, p_fields jsonb) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_values text[];
BEGIN
    SELECT * INTO v_format FROM hivenet.format WHERE name = p_format;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(p_format));
    END IF;
    v_values := hivenet._field_values(v_format, p_fields);
    PERFORM hivenet._check_fields(v_format, v_values);
    PERFORM hivenet._check_owned(v_format, v_values);
    PERFORM hivenet._promote_scope(v_format, hivenet._scope_of(v_format, v_values),
                                   hivenet._scope_fields(v_format, v_values));
END $$;

-- hivenet_db/sql/allocate.sql
-- Part of maintain(): promotes every scope that drew from a cold counter, but those this
-- database no longer owns (a first use that raced with own_instances: ownership.sql), whose
-- rows are dropped.
CREATE OR REPLACE FUNCTION hivenet._maintain_scopes() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_pending record;
BEGIN
    FOR v_pending IN
        WITH taken AS (DELETE FROM hivenet.scope_pending RETURNING *)
        SELECT DISTINCT ON (t.format, t.scope) f AS format_row, t.scope, t.fields
        FROM taken t JOIN hivenet.format f ON f.name = t.format
        WHERE hivenet._not_owned(f, t.fields ->> hivenet._node_field(f),
                  hivenet._setting_value('owned_instances'),
                  hivenet._setting_value('single_primary_formats')::boolean) IS NULL
        ORDER BY t.format, t.scope
    LOOP
        PERFORM hivenet._promote_scope(v_pending.format_row, v_pending.scope, v_pending.fields);
    END LOOP;
END $$;

-- hivenet_db/sql/steps.sql
-- hivenet.begin_step(system_serial, request default null, on_success default 'replay',
--                    unified_serial default null, lease default null, nowait default false)
--   → table(outcome text, attempt int, response jsonb), exactly one row.
--   Receives one processing step, identified by its 30-character system serial, in the
--   caller's transaction (SPEC §4):
--   * no attempt yet, or the latest failed: a new attempt starts, state `processing`;
--     outcome 'started', attempt n+1, response NULL. Apply the business effect, then call
--     finish_step with that attempt number.
--   * latest `processing`: HN030 StepInProgress (unknown state), also past its lease (an
--     operator resolves a stuck step with resolve_step; nothing takes it over silently).
--   * latest `success`: on_success 'replay' → outcome 'replayed', the attempt that succeeded
--     and its stored response; 'reject' → HN031 StepAlreadySucceeded.
--   request: the business request; its fingerprint (sha256 of the jsonb text, which jsonb
--   normalises: key order and whitespace do not matter) is kept, and a different request
--   under the same serial raises HN032 RequestMismatch in every state. No request counts as
--   JSON null.
--   unified_serial: the business transaction's unified serial, kept for audit.
--   lease: how long `processing` is trusted (default: setting step_lease).
--   HN001: system serial no valid system serial (as parse_serial(serial, 'system')), unified
--   serial no valid unified serial, on_success not 'replay'/'reject', lease not positive.
--   HN021 SerialOutsideWindow: the serial's date (business time zone) starts before now -
--   step_retention (the step's record may already be purged: it must not run again) or
--   after now + step_future_tolerance.
--   HN002 UnknownScope: a database that declared owned instances does not own the serial's
--   instance (a retry sent to the wrong shard; ownership.sql, check_received_instances).
--   Blocks while another transaction has started the same attempt and not yet committed or
--   rolled back (then looks again: replay, reject, or proceed if it failed or rolled back);
--   with nowait it raises HN030 at once instead. In REPEATABLE READ or SERIALIZABLE a
--   concurrent start raises serialization_failure (40001): retry the transaction.
CREATE OR REPLACE FUNCTION hivenet.begin_step(
    p_system_serial text, p_request jsonb DEFAULT NULL, p_on_success text DEFAULT 'replay',
    p_unified_serial text DEFAULT NULL, p_lease interval DEFAULT NULL,
    p_nowait boolean DEFAULT false)
RETURNS TABLE (outcome text, attempt integer, response jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_day date;
    v_day_start timestamptz;
BEGIN
    -- The common case is decided by one expression: plpgsql prepares every expression once
    -- per transaction, a good part of this function's cost. The regex matches the system
    -- serial followed by the unified serial, if any, only when both are valid (alnum system
    -- and module, instance 01-99, year from 1000, a day that exists in its month; 29 February
    -- is left to parse_serial); the last 10 digits not all 0 mean seq is not 0 (a lookahead
    -- costs more than the rest of the match). Whatever fails this takes the slow path, where
    -- parse_serial decides and names the problem: the accepted set is exactly parse_serial's
    -- (a test checks it), at a fraction of its cost.
    IF NOT coalesce(
        p_on_success IN ('replay', 'reject') AND NOT p_nowait
        AND (p_lease IS NULL OR p_lease > interval '0')
        AND octet_length(p_system_serial) = 30
        AND right(p_system_serial, 10) <> '0000000000'
        AND coalesce(right(p_unified_serial, 10), '') <> '0000000000'
        AND p_system_serial || coalesce(p_unified_serial, '') ~ (
            '^[0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[1-9][0-9]{3}'
            '((0[13578]|1[02])(0[1-9]|[12][0-9]|3[01])|(0[469]|11)(0[1-9]|[12][0-9]|30)'
            '|02(0[1-9]|1[0-9]|2[0-8]))[0-9]{12}'
            '([0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[1-9][0-9]{3}'
            '((0[13578]|1[02])(0[1-9]|[12][0-9]|3[01])|(0[469]|11)(0[1-9]|[12][0-9]|30)'
            '|02(0[1-9]|1[0-9]|2[0-8]))[0-9]{10})?$'),
        false) THEN
        PERFORM hivenet._check_begin_options(p_on_success, p_lease, p_nowait);
        PERFORM hivenet.parse_serial(p_system_serial, 'system');
        IF p_unified_serial IS NOT NULL THEN
            PERFORM hivenet.parse_serial(p_unified_serial, 'unified');
        END IF;
    END IF;
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('system', p_system_serial);
    END IF;
    -- Old serials are refused, not run again: their record may be purged (HN021). Settings
    -- from the generated constants (settings.sql): no query on the hot path.
    v_day := make_date(substr(p_system_serial, 11, 4)::integer,
                       substr(p_system_serial, 15, 2)::integer,
                       substr(p_system_serial, 17, 2)::integer);
    v_day_start := v_day::timestamp AT TIME ZONE hivenet._setting_constant('time_zone');
    IF v_day_start < hivenet.now() - hivenet._setting_constant('step_retention')::interval
       OR v_day_start > hivenet.now()
                        + hivenet._setting_constant('step_future_tolerance')::interval THEN
        PERFORM hivenet._raise_step_outside_window(p_system_serial, v_day);
    END IF;
    IF p_nowait THEN
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt_nowait('hivenet.steps', p_system_serial, p_request,
                                           p_on_success, p_unified_serial, p_lease) b;
    ELSE
        SELECT b.outcome, b.attempt, b.response INTO outcome, attempt, response
        FROM hivenet._begin_attempt('hivenet.steps', p_system_serial, p_request, p_on_success,
                                    p_unified_serial, p_lease) b;
    END IF;
    RETURN NEXT;
END $$;

-- hivenet_db/sql/dedup.sql
-- hivenet.claim_interface_serial(serial, unified_serial default null,
--                                system_serial default null, nowait default false) → void
--   Records an incoming interface call in the caller's transaction: its claim commits or
--   vanishes with that transaction. The unified and system serials are recorded for the call
--   chain, never checked for duplicates (HiveNet rule 1).
--   Raises HN001 when serial is no valid 39-character interface serial, or unified_serial /
--   system_serial is given but not 28 / 30 characters shaped as the standard says (10
--   letters or digits, then digits: only their shape is checked); HN021 when the serial's own
--   time (its caller's local time, in any zone from UTC-12 to UTC+14) is older than the
--   setting interface_window or later than now + interface_future_tolerance in every such
--   zone, unless this database issued it (its clock stepped back: allocate.sql); HN020 when
--   it is already recorded; HN002 when this database declared owned instances and does not
--   own the serial's (its caller's) instance: a retry sent to the wrong shard (ownership.sql,
--   check_received_instances).
--   Blocks while another transaction holds an uncommitted claim of the same serial, then
--   raises HN020 if that one committed, or records the call if it rolled back. With nowait
--   it raises HN020 at once instead of waiting (also, once in about 4 billion, for another
--   serial claimed at that moment whose 32-bit hash is the same). Under REPEATABLE READ a
--   duplicate committed after the transaction's snapshot raises 40001 (retry) instead.
--   Never fails for a missing partition: a day without one is recorded in the default
--   partition.
CREATE OR REPLACE FUNCTION hivenet.claim_interface_serial(p_serial text, p_unified_serial text DEFAULT NULL,
    p_system_serial text DEFAULT NULL, p_nowait boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := hivenet.now();
    v_valid boolean;
    v_local timestamp;
    v_day date;
    v_from timestamp;
    v_to timestamp;
    v_window interval;
    v_tolerance interval;
    v_recorded timestamptz;
BEGIN
    -- This runs on every incoming call: the layout of formats.sql 'interface' checked inline
    -- (every call of a function with SET search_path costs; parse_serial only explains a
    -- rejection, and a test proves both agree). A plain character-class pattern, then the
    -- ranges as integers: a pattern with alternations for them costs twice as much. CASE keeps
    -- the casts behind the pattern.
    v_valid := CASE WHEN p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]{24}$' THEN
                   substr(p_serial, 9, 2) <> '00' AND substr(p_serial, 16, 4) <> '0000'
                   AND substr(p_serial, 20, 2)::integer BETWEEN 1 AND 12
                   AND substr(p_serial, 22, 2)::integer BETWEEN 1 AND 31
                   AND substr(p_serial, 24, 2)::integer < 24
                   AND substr(p_serial, 26, 2)::integer < 60
                   AND substr(p_serial, 28, 2)::integer < 60
                   AND right(p_serial, 10) <> '0000000000'
               ELSE false END;
    -- Nested in CASE, not AND: PostgreSQL does not promise to evaluate AND left to right.
    IF (CASE WHEN v_valid THEN substr(p_serial, 22, 2)::integer > 28 ELSE false END) THEN
        -- Day 29 to 31 must exist in that month: otherwise make_date rolls over.
        v_valid := extract(day FROM make_date(substr(p_serial, 16, 4)::integer,
                                              substr(p_serial, 20, 2)::integer, 1)
                                    + (substr(p_serial, 22, 2)::integer - 1))
                   = substr(p_serial, 22, 2)::integer;
    END IF;
    IF NOT v_valid THEN
        PERFORM hivenet._reject_serial(p_serial, 'interface');
    END IF;
    IF p_unified_serial !~ '^[0-9A-Za-z]{10}[0-9]{18}$' THEN
        PERFORM hivenet._reject_serial(p_unified_serial, 'unified');
    END IF;
    IF p_system_serial !~ '^[0-9A-Za-z]{10}[0-9]{20}$' THEN
        PERFORM hivenet._reject_serial(p_system_serial, 'system');
    END IF;
    -- Several primaries: a serial of an instance another shard owns (ownership.sql).
    IF hivenet._setting_constant('owned_instances') <> 'all' THEN
        PERFORM hivenet._check_owned_serial('interface', p_serial);
    END IF;
    v_local := make_timestamp(substr(p_serial, 16, 4)::integer, substr(p_serial, 20, 2)::integer,
                              substr(p_serial, 22, 2)::integer, substr(p_serial, 24, 2)::integer,
                              substr(p_serial, 26, 2)::integer, substr(p_serial, 28, 2)::integer);
    v_day := v_local::date;
    -- Settings from the generated constants (settings.sql): no query on the hot path.
    v_window := hivenet._setting_constant('interface_window')::interval;
    v_tolerance := hivenet._setting_constant('interface_future_tolerance')::interval;
    -- The serial's time is its caller's local time, in a zone it does not name: compared
    -- with the UTC clock, widened to every zone a caller may be in (_caller_zones).
    v_from := (v_now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[1] - v_window;
    v_to := (v_now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[2] + v_tolerance;
    IF v_local < v_from OR v_local > v_to THEN
        PERFORM hivenet._refuse_outside_window(p_serial, v_local, v_from, v_to);
    END IF;
    IF NOT p_nowait THEN
        PERFORM pg_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial));
    ELSIF NOT pg_try_advisory_xact_lock(hivenet._interface_lock_space(), hashtext(p_serial)) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is being claimed by another transaction '
                             'in progress (nowait)', p_serial);
    END IF;
    -- The name of _interface_partition_name(v_day), spelled out to save a call.
    IF to_regclass('hivenet.interface_call_' || substr(p_serial, 16, 8)) IS NULL THEN
        -- To the default partition, unless the day's partition was attached since this
        -- session last looked (this session's list of partitions can be stale, and the
        -- default partition then refuses the row). The first lock on the default partition
        -- in a transaction refreshes that list, and while held no ATTACH can complete.
        LOCK TABLE hivenet.interface_call_default IN ROW EXCLUSIVE MODE;
    END IF;
    INSERT INTO hivenet.interface_call
        (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
    VALUES (p_serial, v_day, p_unified_serial, p_system_serial, v_now)
    -- No conflict target: the primary key is the only unique index, and a target makes every
    -- insert look up which index of the partition matches it in the catalog (measured).
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.recorded_at INTO v_recorded FROM hivenet.interface_call c
        WHERE c.serial_day = v_day AND c.interface_serial = p_serial;
        RAISE EXCEPTION USING ERRCODE = 'HN020',
            MESSAGE = format('interface serial %s is already recorded (at %s)', p_serial,
                             coalesce(v_recorded::text, 'an earlier step of this transaction'));
    END IF;
END $$;

-- hivenet_db/sql/privileges.sql, applied again (new functions)
-- Least privilege. Two roles, created once by `hivenet-db bootstrap` (the owner may not create
-- roles): hivenet_app may call the application API and read the reporting views; hivenet_admin
-- also runs the administrative functions and changes settings. The public functions are
-- SECURITY DEFINER, so neither needs any right on a table, and the private helpers
-- (hivenet._*) stay the owner's, but for the allocation fast path (below). Nothing here
-- opens a connection, and no setting holds a secret. Applied last; a revision that adds
-- functions applies it again.

-- Grant (true) or revoke (false) EXECUTE for PUBLIC on every function of the schema that is
-- not an extension's.
CREATE OR REPLACE FUNCTION hivenet._set_public_execute(p_grant boolean) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
        ORDER BY p.oid::regprocedure::text
    LOOP
        EXECUTE format(CASE WHEN p_grant THEN 'GRANT EXECUTE ON FUNCTION %s TO PUBLIC'
                            ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC' END, v_function);
    END LOOP;
END $$;

SELECT hivenet._set_public_execute(false);

-- The application API: executable by every role, usable by those with USAGE on the schema.
GRANT EXECUTE ON FUNCTION
    hivenet.now(),
    hivenet._fake_now(),                 -- inlined into now(): runs with the caller's rights
    hivenet.next_unified_serial(text, text, text),
    hivenet.next_system_serial(text, text, text),
    hivenet.next_interface_serial(text, text, text, text),
    hivenet.next_serial(text, jsonb),
    hivenet.next_serials(text, jsonb, integer),
    hivenet.parse_serial(text, text),
    hivenet.claim_interface_serial(text, text, text, boolean),
    hivenet.call_chain(text),
    hivenet.claim(text, text, boolean),
    hivenet.begin_step(text, jsonb, text, text, interval, boolean),
    hivenet.finish_step(text, integer, boolean, jsonb),
    hivenet._step_lease(interval),       -- in views stuck_steps/_requests, as the reader
    hivenet._period_index(timestamp, text),  -- in view scope_usage, likewise
    hivenet._period_start(bigint, text),
    hivenet._scope_counter_value(text),
    hivenet._reporting_local_now()
TO PUBLIC;
-- Keyed requests (requests.sql).
GRANT EXECUTE ON FUNCTION
    hivenet.begin_request(text, text, jsonb, text, interval, boolean),
    hivenet.finish_request(text, text, integer, boolean, jsonb)
TO PUBLIC;
-- What this database owns among several primaries (ownership.sql).
GRANT EXECUTE ON FUNCTION hivenet.ownership() TO PUBLIC;

-- The allocation fast path (allocate.sql, _fast_serial) is inlined into the caller's statement
-- and runs with the caller's rights, so every function in it must be executable by the
-- caller, and the caller may take values of the counter sequences of scopes: USAGE (nextval,
-- currval), never UPDATE (setval, which only the owner's slow path runs) nor ALTER. Granted to
-- PUBLIC like the allocation functions: taking a value is what any caller of next_serial
-- does. The constants say what the formats and settings are (no secret: settings.sql). A
-- scope's sequence gets its grant when it is made (_promote_scope); this covers older ones.
GRANT EXECUTE ON FUNCTION
    hivenet._fast_serial(text, text, text, text),
    hivenet._format_constant(text),
    hivenet._setting_constant(text),
    hivenet._scope_sequence_name(text, text)
TO PUBLIC;
DO $$
DECLARE
    v_name text;
BEGIN
    FOR v_name IN SELECT sequence_name FROM hivenet.scope ORDER BY sequence_name LOOP
        IF to_regclass('hivenet.' || quote_ident(v_name)) IS NOT NULL THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE hivenet.%I TO PUBLIC', v_name);
        END IF;
    END LOOP;
END $$;

-- Grants to hivenet_app and hivenet_admin, for those of them that exist (bootstrap creates
-- them; called again by bootstrap when it runs after the schema was installed).
CREATE OR REPLACE FUNCTION hivenet._grant_roles() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF to_regrole('hivenet_app') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_app;
        GRANT SELECT ON hivenet.interface_calls, hivenet.interface_calls_per_day,
            hivenet.step_states, hivenet.stuck_steps, hivenet.scope_usage TO hivenet_app;
        GRANT SELECT ON hivenet.request_states, hivenet.stuck_requests TO hivenet_app;
    END IF;
    IF to_regrole('hivenet_admin') IS NOT NULL THEN
        GRANT USAGE ON SCHEMA hivenet TO hivenet_admin;
        GRANT SELECT ON ALL TABLES IN SCHEMA hivenet TO hivenet_admin;
        GRANT UPDATE ON hivenet.setting TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.maintain(),
            hivenet.resolve_step(text, integer, boolean, text, jsonb),
            hivenet.define_format(text, jsonb, boolean, text),
            hivenet.register_system(text, text), hivenet.register_module(text, text, text),
            hivenet.set_claim_expiry(text, interval), hivenet.prepare_scope(text, jsonb),
            hivenet.fence_failover(bigint, boolean), hivenet.replication_warning()
        TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION hivenet.own_instances(text, boolean, boolean)
        TO hivenet_admin;
        GRANT EXECUTE ON FUNCTION
            hivenet.resolve_request(text, text, integer, boolean, text, jsonb),
            hivenet.set_request_retention(text, interval)
        TO hivenet_admin;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION hivenet._grant_roles() FROM PUBLIC;

SELECT hivenet._grant_roles();
