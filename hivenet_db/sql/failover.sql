-- Failover fence (docs/operations.md "Failover", docs/guarantees.md).
--
-- A standby promoted after an asynchronous failover (or a server restored to an earlier
-- point) has lost the WAL its old primary wrote last: its sequences stand below values the
-- old primary already issued, so it would issue them again. It cannot know how many, so the
-- fence moves every counter (each scope's sequence, each lane of a laned format and each
-- format's cold counter) forward by a gap, no earlier than the clock's period. Guarantee: no
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
    applied_by text NOT NULL CHECK (applied_by IN ('install', 'command', 'maintain')),
    -- _lane_hash() of the server that wrote the row (allocate.sql): another value here means
    -- a restore onto a server of the other byte order, whose lanes the fence must move.
    lane_hash  integer NOT NULL DEFAULT hivenet._lane_hash()
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

-- Rewrites _lanes_aligned (allocate.sql) from the lane hash of this timeline's fence (else of
-- the latest one: not by time alone, since a restored row may carry a later time from another
-- server's clock): the lanes are aligned on this server when that fence (or the install) ran
-- on one whose hashtext is this one's. The text _lane_hash hashes is written in: a call of
-- _lane_hash there cost ~6 µs of planning per unprepared allocation (a SQL function run when
-- the statement is planned), the text ~1. Run by the install and by every fence, under the
-- fence's lock (_fence), so never two at once; a dump carries the rewritten function to the
-- server it is restored on.
CREATE FUNCTION hivenet._compile_lanes_aligned() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_hash integer := (SELECT f.lane_hash FROM hivenet.failover_fence f
                       ORDER BY f.timeline = hivenet._timeline() DESC, f.fenced_at DESC
                       LIMIT 1);
BEGIN
    EXECUTE format('CREATE OR REPLACE FUNCTION hivenet._lanes_aligned() RETURNS boolean '
                   'LANGUAGE sql STABLE BEGIN ATOMIC SELECT %s; END',
                   coalesce(format('hashtext(%L) = %s', 'hivenet lanes', v_hash), 'true'));
END $$;

SELECT hivenet._compile_lanes_aligned();

-- The gap maintain() applies when it finds an unfenced timeline, and fence_failover() when
-- given none.
CREATE FUNCTION hivenet._default_failover_gap() RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 100000::bigint $$;

-- hivenet.fence_failover(gap, force) → table (administrators; `hivenet-db failover-fence`)
--   Run on a promoted standby before it takes traffic, and after restoring onto a server of
--   the other byte order. Moves each counter to greatest(its last value, the start of the
--   clock's period) + p_gap, and every counter of a laned format (allocate.sql) to the
--   greatest of its lanes' values + p_gap: a scope that draws from another lane afterwards
--   (hashtext, which picks the lane, differs between byte orders) then meets no value it was
--   issued before, whichever lane it drew from. A counter of a format that does not borrow
--   the next period and whose period cannot hold the gap is parked at its capacity (HN010
--   until the next period: every number of this one may have been issued). p_gap NULL:
--   _default_failover_gap(). One row per counter moved. Does nothing (no row) when this
--   timeline was fenced already on a server of this byte order (lane_hash), unless p_force.
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
    v_lanes_top bigint;
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
                               WHERE f.timeline = v_timeline
                                 AND f.lane_hash = hivenet._lane_hash()) THEN
        RETURN;
    END IF;
    FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
        -- Until commit: no scope of the format is promoted from a cold value read before.
        PERFORM pg_advisory_xact_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
        v_period := hivenet._period_index(
            hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'), v_format.reset);
        -- The greatest lane of a laned format (NULL otherwise): all its lanes move past it.
        v_lanes_top := (SELECT max(pg_sequence_last_value(to_regclass('hivenet.' || quote_ident(
                                   hivenet._lane_sequence_name(v_format.name, l)))))
                        FROM generate_series(0, coalesce(v_format.lanes, 0) - 1) AS l);
        -- A laned format's lanes, not the sequences its scopes had before revision 0017
        -- (retired, never drawn from again).
        FOR counter IN
            SELECT hivenet._cold_sequence_name(v_format.name)
            UNION ALL
            (SELECT hivenet._lane_sequence_name(v_format.name, l)
             FROM generate_series(0, coalesce(v_format.lanes, 0) - 1) AS l ORDER BY l)
            UNION ALL
            (SELECT s.sequence_name FROM hivenet.scope s
             WHERE s.format = v_format.name AND v_format.lanes IS NULL
             ORDER BY s.sequence_name)
        LOOP
            v_seq := to_regclass('hivenet.' || quote_ident(counter));
            CONTINUE WHEN v_seq IS NULL;
            -- The period reset's lock (_advance), until commit: no setval of theirs between.
            PERFORM pg_advisory_xact_lock(hivenet._reset_lock_space(), v_seq::oid::integer);
            v_from := coalesce(pg_sequence_last_value(v_seq), 0);
            v_base := greatest(v_from, v_period * v_format.stride, v_lanes_top);
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
            counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by,
            lane_hash = EXCLUDED.lane_hash;
    -- The lanes are past the greatest now: they may issue on this server (a restore's).
    PERFORM hivenet._compile_lanes_aligned();
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

-- Part of maintain(): fences a timeline nobody fenced, or fenced on a server of the other byte
-- order (a restore: the scopes hash to other lanes here), as a backstop: serials issued
-- between the promotion or restore and this run are not covered. Warns about asynchronous
-- standbys.
CREATE FUNCTION hivenet._maintain_failover() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_other_byte_order boolean;
    v_warning text;
BEGIN
    IF NOT EXISTS (SELECT FROM hivenet.failover_fence
                   WHERE timeline = v_timeline AND lane_hash = hivenet._lane_hash()) THEN
        v_other_byte_order := EXISTS (SELECT FROM hivenet.failover_fence
                                      WHERE timeline = v_timeline);
        PERFORM hivenet._fence(hivenet._default_failover_gap(), false, 'maintain');
        RAISE WARNING USING MESSAGE = format(
            'hivenet: %s: maintain() moved every counter forward by %s; run `hivenet-db '
            'failover-fence` before traffic next time',
            CASE WHEN v_other_byte_order
                 THEN format('timeline %s was fenced on a server of the other byte order (a '
                             'restore: scopes hash to other lanes here)', v_timeline)
                 ELSE format('timeline %s was not fenced (a promoted standby or a restore)',
                             v_timeline) END,
            hivenet._default_failover_gap());
    END IF;
    v_warning := hivenet.replication_warning();
    IF v_warning IS NOT NULL THEN
        RAISE WARNING USING MESSAGE = 'hivenet: ' || v_warning;
    END IF;
END $$;
