-- Failover fence (docs/operations.md "Failover", docs/guarantees.md).
--
-- A standby promoted after an asynchronous failover (or a server restored to an earlier
-- point) has lost the WAL its old primary wrote last: its sequences stand below values the
-- old primary already issued, so it would issue them again. It cannot know how many, so the
-- fence moves every counter (each scope's sequence and each format's shared fallback counter) forward by
-- a gap, no earlier than the clock's period. Guarantee: no
-- serial is issued twice as long as the old primary issued at most `gap` serials per format
-- in the WAL the new one lacks (rule: gap >= peak serials per second of one format x maximum
-- replication lag in seconds) and its clock was not ahead of the new primary's. A promotion
-- shows as a new timeline.

-- The timeline of each fence, and the one the schema was installed on (gap NULL): a timeline
-- without a row here is one nobody has fenced yet.
CREATE TABLE hivenet.failover_fence (
    timeline   integer PRIMARY KEY,
    fenced_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    gap        bigint,
    counters   integer NOT NULL DEFAULT 0,
    applied_by text NOT NULL CHECK (applied_by IN ('install', 'command', 'maintain'))
);
COMMENT ON TABLE hivenet.failover_fence IS
    'timelines whose counters were fenced after a promotion or restore (gap NULL: the install)';

-- The server's current timeline (1 on a fresh cluster; each promotion or point-in-time
-- recovery starts a new one). Readable by every role: pg_control_checkpoint() is not, and
-- it only changes at the next checkpoint. Fails on a standby (in recovery), like any write.
CREATE FUNCTION hivenet._timeline() RETURNS integer
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::integer
$$;

INSERT INTO hivenet.failover_fence (timeline, applied_by) VALUES (hivenet._timeline(), 'install');

-- The gap maintain() applies when it finds an unfenced timeline, and fence_failover() when
-- given none.
CREATE FUNCTION hivenet._default_failover_gap() RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 100000::bigint $$;

-- hivenet.fence_failover(gap, force) → table (administrators; `hivenet-db failover-fence`)
--   Run on a promoted standby before it takes traffic. Moves each counter to greatest(its
--   last value, the start of the clock's period) + p_gap. A counter of a format that does not
--   borrow the next period and whose period cannot hold the gap is parked at its capacity (HN010
--   until the next period: every number of this one may have been issued). p_gap NULL:
--   _default_failover_gap(). One row per counter moved. Does nothing (no row) when this
--   timeline was fenced already, unless p_force.
--   Commits with the caller; holds every format's cold lock until then, so run it in a short
--   transaction of its own. HN001 for a gap below 1.
CREATE FUNCTION hivenet.fence_failover(p_gap bigint DEFAULT NULL, p_force boolean DEFAULT false)
RETURNS TABLE (timeline integer, format text, counter text, from_value bigint,
               to_value bigint, parked boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM hivenet._fence(
        coalesce(p_gap, hivenet._default_failover_gap()), p_force, 'command');
END $$;

CREATE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
RETURNS TABLE (timeline integer, format text, counter text, from_value bigint,
               to_value bigint, parked boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_format hivenet.format;
    v_period bigint;
    v_seq regclass;
    v_from bigint;
    v_base bigint;
    v_to bigint;
    v_last bigint;
    v_count integer := 0;
BEGIN
    IF p_gap IS NULL OR p_gap < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failover fence: gap %s must be at least 1',
                             coalesce(p_gap::text, 'NULL'));
    END IF;
    -- maintain()'s lock: one fence at a time, never beside a maintain() run.
    PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), 0);
    IF NOT p_force AND EXISTS (SELECT FROM hivenet.failover_fence f
                               WHERE f.timeline = v_timeline) THEN
        RETURN;
    END IF;
    FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
        -- Until commit: no scope of the format is promoted from a cold value read before.
        PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
        v_period := hivenet._period_index(
            hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), v_format.reset);
        FOR counter IN
            SELECT hivenet._cold_sequence_name(v_format.name)
            UNION ALL
            (SELECT s.sequence_name FROM hivenet.scope s
             WHERE s.format = v_format.name ORDER BY s.sequence_name)
        LOOP
            v_seq := to_regclass('hivenet.' || quote_ident(counter));
            CONTINUE WHEN v_seq IS NULL;
            -- The period reset's lock (_advance), until commit: no setval of theirs between.
            PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), v_seq::oid::integer);
            -- Its value, also one set as the next (is_called false: a prepared scope's start).
            EXECUTE format('SELECT last_value FROM %s', v_seq) INTO v_from;
            v_base := greatest(v_from, v_period * v_format.stride);
            v_to := v_base + p_gap;
            v_last := (v_base / v_format.stride) * v_format.stride + v_format.capacity;
            parked := NOT v_format.borrow_next_period AND v_to > v_last;
            IF parked THEN
                v_to := greatest(v_last, v_from);
            END IF;
            PERFORM setval(v_seq, v_to, true);
            v_count := v_count + 1;
            timeline := v_timeline;
            format := v_format.name;
            from_value := v_from;
            to_value := v_to;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    INSERT INTO hivenet.failover_fence AS f (timeline, gap, counters, applied_by)
    VALUES (v_timeline, p_gap, v_count, p_by)
    ON CONFLICT ON CONSTRAINT failover_fence_pkey DO UPDATE
        SET fenced_at = clock_timestamp(), gap = coalesce(f.gap, 0) + EXCLUDED.gap,
            counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by;
END $$;

-- hivenet.replication_warning() → text: why failover could reissue serials, or NULL.
--   A primary with standbys (rows in pg_stat_replication, which every role may count) and
--   no synchronous_standby_names commits before its standbys have the WAL.
CREATE FUNCTION hivenet.replication_warning() RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format('%s standby connection(s) and synchronous_standby_names is empty: a '
                  'failover loses the last commits, so the promoted standby reissues serials '
                  'and re-accepts claims unless `hivenet-db failover-fence` runs first '
                  '(docs/operations.md, Failover)', count(*))
    FROM pg_stat_replication
    WHERE state IS DISTINCT FROM 'backup'  -- NULL for roles without pg_read_all_stats
    HAVING count(*) > 0 AND current_setting('synchronous_standby_names') = ''
$$;

-- Part of maintain(): fences a timeline nobody fenced, as a backstop: serials issued between
-- the promotion or restore and this run are not covered. Warns about asynchronous standbys.
CREATE FUNCTION hivenet._maintain_failover() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_warning text;
BEGIN
    IF NOT EXISTS (SELECT FROM hivenet.failover_fence WHERE timeline = v_timeline) THEN
        PERFORM hivenet._fence(hivenet._default_failover_gap(), false, 'maintain');
        RAISE WARNING USING MESSAGE = format(
            'hivenet: timeline %s was not fenced (a promoted standby or a restore): maintain() '
            'moved every counter forward by %s; run `hivenet-db failover-fence` before '
            'traffic next time', v_timeline, hivenet._default_failover_gap());
    END IF;
    v_warning := hivenet.replication_warning();
    IF v_warning IS NOT NULL THEN
        RAISE WARNING USING MESSAGE = 'hivenet: ' || v_warning;
    END IF;
END $$;
