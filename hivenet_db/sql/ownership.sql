-- Instance ownership: several primaries, serials that never collide (SPEC §1 "Several
-- primaries", docs/guides/scale-out.md).
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
-- _allocate with a scope's own sequence): the check runs where an unprepared scope is used
-- (_issue_unprepared, fallback.sql) and where a scope gets its own sequence (prepare_scope:
-- counters.sql; maintain(): fallback.sql).
-- Every scope sequence therefore belongs to an owned instance; giving an instance up is
-- refused while it has scopes here that issued serials, unless forced, which parks their
-- sequences (renamed seq_X → off_X, counters kept; scopes prepared and never used are parked
-- without force): the next allocation finds no sequence, goes through the unprepared path
-- and its check, and gets HN002. Owning the instance again restores them.
-- The fast paths of unified and system find a scope's sequence by its name, which parking
-- changes (_park_scope): a parked scope's next call takes the full path.
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
-- is missing (a rewrite lost to a concurrent one: compile.sql).
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
            'database that owns it', p_format.name,
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
-- was received by a database that does not own the instance printed in it
-- (docs/guides/scale-out.md: a retry on the wrong shard). Callers test owned_instances <> 'all'
-- first (no call at all on one primary); nothing is checked when check_received_instances is off.
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
    -- Cut by the format's layout (compile.sql); parse_serial for a format not yet generated.
    v_instance := coalesce(hivenet._serial_field(p_format, p_serial, 'instance'),
                           hivenet.parse_serial(p_serial, p_format) ->> 'instance');
    IF NOT hivenet._instance_in(v_instance, v_owned) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN002',
            MESSAGE = format('%s serial %s carries instance %s, which this database does not '
                             'own (it owns %s): send it, and every retry of it, to the shard '
                             'that owns that instance (setting check_received_instances)',
                             p_format, p_serial,
                             hivenet._shown(v_instance), v_owned);
    END IF;
END $$;

-- Counter scopes with a sequence of their own (parked or not) or that drew from their format's
-- fallback counter, with their format and node value.
CREATE FUNCTION hivenet._scopes_by_node()
RETURNS TABLE (format hivenet.format, scope text, node text, sequence_name text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT f, s.scope, s.fields ->> hivenet._node_field(f), s.sequence_name
    FROM (SELECT c.format, c.scope, c.fields, c.sequence_name FROM hivenet.scope c
          UNION ALL
          SELECT DISTINCT d.format, d.scope, d.fields, NULL FROM hivenet.fallback_draw d
          WHERE NOT EXISTS (SELECT FROM hivenet.scope c
                            WHERE c.format = d.format AND c.scope = d.scope)) AS s
    JOIN hivenet.format f ON f.name = s.format
$$;

-- Trigger on hivenet.setting, for owned_instances and single_primary_formats: writes the
-- instances canonically (HN001 when malformed), parks the scopes it leaves outside what this
-- database may issue that have issued nothing (prepared and never used: _has_issued),
-- refuses a change that leaves any other scope outside (HN001 naming one: give the instances
-- up with own_instances(..., force => true), which parks them first), and restores the
-- parked scopes that the new value allows again. SECURITY DEFINER: an administrator's plain
-- UPDATE renames the owner's sequences.
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
    IF TG_OP = 'INSERT' OR to_regclass('hivenet.fallback_draw') IS NULL THEN
        RETURN NEW;
    END IF;
    v_owned := CASE WHEN NEW.name = 'owned_instances' THEN NEW.value
                    ELSE hivenet._setting_value('owned_instances') END;
    v_single := CASE WHEN NEW.name = 'single_primary_formats' THEN NEW.value::boolean
                     ELSE hivenet._setting_value('single_primary_formats')::boolean END;
    FOR v_scope IN SELECT s.format, s.scope FROM hivenet._scopes_by_node() s
                   WHERE left(s.sequence_name, 4) = 'seq_'
                     AND NOT hivenet._has_issued(s.sequence_name)
                     AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
                   ORDER BY s.sequence_name LOOP
        PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
    END LOOP;
    SELECT s.format, s.scope, s.node INTO v_scope FROM hivenet._scopes_by_node() s
    WHERE (s.sequence_name IS NULL OR left(s.sequence_name, 4) <> 'off_')
      AND hivenet._not_owned(s.format, s.node, v_owned, v_single) IS NOT NULL
    ORDER BY (s.format).name, s.scope LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s %s: this database has issued serials of format %s '
                             'scope %s, which it would no longer own; give it up with '
                             'hivenet.own_instances(..., force => true), which parks such '
                             'scopes', NEW.name, hivenet._shown(NEW.value),
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
--   → text (administrators): declares what this database allocates for (docs/guides/scale-out.md):
--   instances 'all' (one primary: the default) or a list such as '01-09' or '01,03,05' (of the
--   instance field; the shard field of id_service), and, when single_primary_formats is not
--   NULL, whether it is the one database issuing formats without such a field. Returns the
--   instances as written ('01-09,12').
--   HN001: a malformed list; an instance or format this database has issued serials for and
--   would no longer own, unless force, which parks those scopes (their next allocation raises
--   HN002; owning them again restores their counters) and drops their pending first uses.
--   Moving an instance to another database is safe only across a period boundary of its
--   formats: counters are not carried over (docs/guides/scale-out.md). Commits with the caller;
--   waits for transactions that use a parked scope. READ COMMITTED only (compile.sql).
CREATE FUNCTION hivenet.own_instances(instances text,
    single_primary_formats boolean DEFAULT NULL, force boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_instances ALIAS FOR instances; p_single_primary_formats ALIAS FOR single_primary_formats;
    p_force ALIAS FOR force;
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
                DELETE FROM hivenet.fallback_draw
                WHERE format = (v_scope.format).name AND scope = v_scope.scope;
            ELSE
                PERFORM hivenet._park_scope((v_scope.format).name, v_scope.scope, true);
            END IF;
        END LOOP;
    END IF;
    -- The trigger checks each update against the other setting's value of the moment: the
    -- update that owns more goes first, so that no state between owns less than the last.
    IF v_single THEN
        UPDATE hivenet.setting SET value = 'true' WHERE name = 'single_primary_formats'
                                                  AND value <> 'true';
    END IF;
    UPDATE hivenet.setting SET value = v_owned WHERE name = 'owned_instances';
    UPDATE hivenet.setting SET value = v_single::text WHERE name = 'single_primary_formats'
                                                        AND value <> v_single::text;
    RETURN v_owned;
END $$;
