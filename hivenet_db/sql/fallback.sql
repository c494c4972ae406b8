-- The shared fallback: the serials of a scope that has no sequence of its own (counters.sql),
-- for the formats that opt in to it.
--
-- With the defaults an allocation for a scope that is not prepared is refused (HN002, naming
-- the scope and the command that prepares it): a sequence made in the caller's transaction
-- would vanish with its rollback and start over, reissuing serials (guarantee 2), and nothing
-- else in PostgreSQL remembers a new scope outside the caller's transaction.
--
-- A format named in the setting shared_fallback draws the serials of its unprepared scopes from
-- its shared fallback counter instead (sequence hivenet.cold_<format>, made with the format,
-- and its clock for a format with a clock_unit): unique and increasing in each scope, but never
-- from 1, and one period's capacity for every unprepared scope of the format together. It is
-- for key spaces too large for a sequence each. maintain() gives each scope that drew its own
-- sequence when the format is named in setting promote_fallback_scopes too.
--
-- A scope prepared before its first use counts from 1 in the period it is prepared, whatever
-- other scopes drew. Every draw is recorded in the caller's transaction (fallback_draw: its
-- scope, period and number of serials), insert-only, so that it vanishes with a rollback and
-- nobody waits for it; and a transaction's first draw passes the format's gate (a lock held
-- for that moment only) and then holds the format's fallback lock shared until it ends.
-- prepare_scope (_fallback_drawn), when the fallback has issued serials in the period, closes
-- the gate (new transactions' first draws wait for its commit; those in flight go on) and waits
-- at most a second for the draws in flight to end (pg_try_advisory_xact_lock, in a loop: it
-- never waits in the lock queue, so no lock cycle can form through it). Then the committed
-- draws of the period are all there is, unless one rolled back (or was lost in a crash), in
-- which case the fallback's count for the period is more than the records account for. So a
-- prepared scope starts empty when the records account for every serial of the period and do
-- not name it; it starts after the fallback's count when they name it, or when a draw was
-- still in flight after that second, one rolled back in the period, or the counter is in a
-- later period than the clock. None of these locks decides what is issued: the count does,
-- under the format's cold lock (counters.sql), so a draw that slipped past them only makes
-- prepare start after the fallback.

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('shared_fallback', '', 'text',
     'formats (a list such as ''id_service,merchant_trade''; empty: none) whose scopes that '
     'are not prepared draw from the format''s shared fallback counter instead of being '
     'refused (HN002): unique and increasing, never from 1, one capacity for them all'),
    ('promote_fallback_scopes', '', 'text',
     'formats (a list; empty: none) whose scopes that drew from the shared fallback get a '
     'counter of their own from maintain()');

-- Trigger on hivenet.setting, for shared_fallback and promote_fallback_scopes: writes the list
-- canonically (sorted, no repeats, no blanks); HN001 naming a name that is no format.
CREATE FUNCTION hivenet._fallback_formats_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_names text[] := ARRAY(SELECT DISTINCT btrim(n)
                            FROM unnest(string_to_array(NEW.value, ',')) AS n
                            WHERE btrim(n) <> '' ORDER BY 1);
    v_unknown text;
BEGIN
    SELECT n INTO v_unknown FROM unnest(v_names) AS n
    WHERE NOT EXISTS (SELECT FROM hivenet.format f WHERE f.name = n) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %s is no format (formats: %s)', NEW.name,
                             hivenet._shown(v_unknown),
                             (SELECT string_agg(f.name, ', ' ORDER BY f.name)
                              FROM hivenet.format f));
    END IF;
    NEW.value := array_to_string(v_names, ',');
    RETURN NEW;
END $$;

CREATE TRIGGER setting_fallback_formats BEFORE INSERT OR UPDATE ON hivenet.setting
    FOR EACH ROW WHEN (NEW.name IN ('shared_fallback', 'promote_fallback_scopes'))
    EXECUTE FUNCTION hivenet._fallback_formats_check();

-- The draws from the fallback counters, one row per allocation (maintain() sums them per scope
-- and period, and drops past periods). No key: two draws never wait for each other.
CREATE TABLE hivenet.fallback_draw (
    format  text NOT NULL,
    scope   text NOT NULL,
    fields  jsonb NOT NULL,   -- the counter-key fields, as hivenet.scope.fields
    period  bigint NOT NULL,  -- the clock's period of the draw (_period_index)
    serials bigint NOT NULL   -- how many serials it drew
);
COMMENT ON TABLE hivenet.fallback_draw IS
    'draws of unprepared scopes from their format''s shared fallback counter (setting '
    'shared_fallback), per scope and period';
CREATE INDEX fallback_draw_scope ON hivenet.fallback_draw (format, scope);

-- Advisory lock namespaces of the fallback of a format: (this key, hashtext(format)). The
-- draws in flight: held shared by a transaction from its first draw from the format's
-- fallback until it ends (the setting hivenet.fallback_drawn, local to the transaction, lists
-- the formats it holds it for).
CREATE FUNCTION hivenet._fallback_lock_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210104 $$;

-- The gate a transaction's first draw from a format's fallback passes (held shared for that
-- moment), which prepare_scope closes (exclusive until it commits) while it waits for the
-- draws in flight.
CREATE FUNCTION hivenet._fallback_gate_space() RETURNS integer
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 1214210105 $$;

-- HN002 for an allocation of format p_format for field values p_values (valid, in the
-- format's field order) whose scope is not prepared: names the scope by its counter-key fields
-- and the two ways to prepare it, as typed.
CREATE FUNCTION hivenet._refuse_unprepared(p_format hivenet.format, p_values text[])
RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_key record;
BEGIN
    -- The counter-key fields in the format's order; values are valid, so [0-9A-Za-z] only.
    SELECT coalesce(string_agg(format('%s %L', f.name, p_values[f.i]), ', ' ORDER BY f.i),
                    'its one scope') AS named,
           coalesce(string_agg(format('"%s": "%s"', f.name, p_values[f.i]), ', '
                               ORDER BY f.i), '') AS json,
           coalesce(array_agg(f.name ORDER BY f.i) = ARRAY['system', 'module', 'instance'],
                    false) AS channel,
           string_agg(p_values[f.i], ' ' ORDER BY f.i) AS words,
           string_agg(format('%s=%s', f.name, p_values[f.i]), ',' ORDER BY f.i) AS pairs
    INTO v_key
    FROM unnest(p_format.field_names) WITH ORDINALITY AS f(name, i)
    WHERE p_format.key_fields IS NULL OR f.i = ANY (p_format.key_fields);
    RAISE EXCEPTION USING ERRCODE = 'HN002',
        MESSAGE = format('format %s has no counter for %s: a scope counts on a counter of its '
                         'own, prepared before its first use; prepare it with `hivenet-db '
                         'prepare %s%s` or SELECT hivenet.prepare_scope(%L, %L)',
                         p_format.name, v_key.named, p_format.name,
                         CASE WHEN v_key.channel THEN ' ' || v_key.words
                              WHEN v_key.pairs IS NOT NULL THEN ' ' || v_key.pairs
                              ELSE '' END,
                         p_format.name, '{' || v_key.json || '}');
END $$;

-- _issue for scope p_values of format p_format that has no sequence of its own as far as this
-- session's catalog cache knows (_allocate): from its own sequence if one was committed since;
-- else from the format's fallback counter when setting shared_fallback names the format,
-- recording the draw; else HN002 (_refuse_unprepared). Holds the format's cold lock shared
-- while it looks and draws (never until commit), so a prepare or promotion committing in
-- between is either seen here or waited for. A transaction's first draw from the fallback
-- passes the gate and holds the fallback lock shared until it ends (above). Never waits for
-- another caller's commit; may wait for a prepare_scope() of the format to commit.
CREATE FUNCTION hivenet._issue_unprepared(p_format hivenet.format, p_values text[],
    p_count integer) RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_scope text := hivenet._scope_of(p_format, p_values);
    v_key integer := hashtext(p_format.name);
    -- The setting's generated constant, or its row when the constant is missing.
    v_shared boolean := p_format.name = ANY (string_to_array(coalesce(
        hivenet._setting_constant('shared_fallback'),
        hivenet._setting_value('shared_fallback')), ','));
    v_held text := coalesce(current_setting('hivenet.fallback_drawn', true), '');
    v_seq regclass;
    v_out text[];
BEGIN
    -- A scope's first use (and every use of a parked one): this database must own it
    -- (ownership.sql). Scopes with a sequence of their own passed this when prepared.
    IF hivenet._setting_constant('owned_instances') IS DISTINCT FROM 'all' THEN
        PERFORM hivenet._check_owned(p_format, p_values);
    END IF;
    IF v_shared AND strpos(v_held, ',' || p_format.name || ',') = 0 THEN
        PERFORM pg_advisory_lock_shared(hivenet._fallback_gate_space(), v_key);
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(hivenet._fallback_lock_space(), v_key);
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            PERFORM pg_advisory_unlock_shared(hivenet._fallback_gate_space(), v_key);
            RAISE;
        END;
        PERFORM pg_advisory_unlock_shared(hivenet._fallback_gate_space(), v_key);
        PERFORM set_config('hivenet.fallback_drawn',
                           coalesce(nullif(v_held, ''), ',') || p_format.name || ',', true);
    END IF;
    PERFORM pg_advisory_lock_shared(hivenet._cold_lock_space(), v_key);
    BEGIN
        v_seq := hivenet._committed_sequence(hivenet._scope_sequence_name(p_format.name, v_scope));
        IF v_seq IS NULL AND v_shared THEN
            v_out := hivenet._issue(
                ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass,
                p_format, p_values, p_count,
                format('the shared fallback counter of the unprepared scopes (scope %L among '
                       'them; a scope prepared before its first use counts on its own, '
                       '`hivenet-db prepare`)', v_scope));
            INSERT INTO hivenet.fallback_draw (format, scope, fields, period, serials)
            VALUES (p_format.name, v_scope, hivenet._scope_fields(p_format, p_values),
                    hivenet._period_index(hivenet.now() AT TIME ZONE
                                          hivenet._setting_constant('time_zone'), p_format.reset),
                    p_count);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock_shared(hivenet._cold_lock_space(), v_key);
    IF v_seq IS NOT NULL THEN
        RETURN hivenet._issue(v_seq, p_format, p_values, p_count, format('scope %L', v_scope));
    ELSIF v_out IS NULL THEN
        PERFORM hivenet._refuse_unprepared(p_format, p_values);
    END IF;
    RETURN v_out;
END $$;

-- The scopes of format p_format that drew from its fallback counter in the clock's current
-- period: '{}' when the counter issued nothing in it; NULL when which ones cannot be known (a
-- draw still in flight after a second, a draw rolled back or lost in this period, the counter
-- in a later period than the clock). When the counter has issued in the period, closes the
-- format's gate and waits at most a second for the draws in flight to end (see the top);
-- then takes the format's cold lock exclusive, so nothing more is drawn from the fallback
-- until the caller commits. Both until commit.
CREATE FUNCTION hivenet._fallback_drawn(p_format hivenet.format) RETURNS text[]
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_key integer := hashtext(p_format.name);
    v_period bigint := hivenet._period_index(
        hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), p_format.reset);
    v_fallback regclass :=
        ('hivenet.' || quote_ident(hivenet._cold_sequence_name(p_format.name)))::regclass;
    v_value bigint := coalesce(pg_sequence_last_value(v_fallback), 0);
    v_settled boolean := false;
    v_deadline timestamptz := clock_timestamp() + interval '1 second';
BEGIN
    IF v_value / p_format.stride >= v_period AND v_value % p_format.stride > 0 THEN
        PERFORM pg_advisory_xact_lock(hivenet._fallback_gate_space(), v_key);
        LOOP
            v_settled := pg_try_advisory_xact_lock(hivenet._fallback_lock_space(), v_key);
            EXIT WHEN v_settled OR clock_timestamp() > v_deadline;
            PERFORM pg_sleep(0.005);
        END LOOP;
    END IF;
    PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), v_key);
    v_value := coalesce(pg_sequence_last_value(v_fallback), 0);  -- now it stays
    IF v_value / p_format.stride < v_period OR v_value % p_format.stride = 0 THEN
        RETURN '{}';
    ELSIF v_value / p_format.stride > v_period OR NOT v_settled THEN
        RETURN NULL;
    END IF;
    -- Values past the capacity are never printed (_advance parks the counter there).
    IF least(v_value % p_format.stride, p_format.capacity) IS DISTINCT FROM (
           SELECT sum(d.serials) FROM hivenet.fallback_draw d
           WHERE d.format = p_format.name AND d.period = v_period) THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT DISTINCT d.scope FROM hivenet.fallback_draw d
                 WHERE d.format = p_format.name AND d.period = v_period ORDER BY 1);
END $$;

-- Part of maintain(), per format with draws, under its cold lock: gives each scope that drew
-- its own sequence (after the fallback's count: _promote_scope) when the format is named in
-- promote_fallback_scopes, but the scopes this database no longer owns (a draw that raced
-- with own_instances: ownership.sql); then sums the draws per scope and period, dropping past
-- periods (prepare reads the current one).
CREATE FUNCTION hivenet._maintain_scopes() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format;
    v_promoted text[] := string_to_array(hivenet._setting_value('promote_fallback_scopes'), ',');
    v_drawn record;
BEGIN
    FOR v_format IN SELECT f.* FROM hivenet.format f
                    WHERE EXISTS (SELECT FROM hivenet.fallback_draw d WHERE d.format = f.name)
                    ORDER BY f.name LOOP
        PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
        IF v_format.name = ANY (v_promoted) THEN
            FOR v_drawn IN
                SELECT DISTINCT ON (d.scope) d.scope, d.fields FROM hivenet.fallback_draw d
                WHERE d.format = v_format.name
                  AND NOT EXISTS (SELECT FROM hivenet.scope s
                                  WHERE s.format = d.format AND s.scope = d.scope)
                  AND hivenet._not_owned(v_format, d.fields ->> hivenet._node_field(v_format),
                          hivenet._setting_value('owned_instances'),
                          hivenet._setting_value('single_primary_formats')::boolean) IS NULL
                ORDER BY d.scope
            LOOP
                PERFORM hivenet._promote_scope(v_format, v_drawn.scope, v_drawn.fields, true);
            END LOOP;
        END IF;
        WITH taken AS (DELETE FROM hivenet.fallback_draw d WHERE d.format = v_format.name
                       RETURNING d.*)
        INSERT INTO hivenet.fallback_draw (format, scope, fields, period, serials)
        SELECT t.format, t.scope, (array_agg(t.fields))[1], t.period, sum(t.serials)
        FROM taken t
        WHERE t.period >= hivenet._period_index(
                  hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), v_format.reset)
        GROUP BY t.format, t.scope, t.period;
    END LOOP;
END $$;
