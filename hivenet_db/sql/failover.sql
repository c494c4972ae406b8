-- Failover fence (docs/operations.md "Failover", docs/guarantees.md).
--
-- A standby promoted after an asynchronous failover (or a server restored to an earlier
-- point) has lost the WAL its old primary wrote last: its sequences stand below values the
-- old primary already issued, so it would issue them again. It cannot know how many, so the
-- fence moves every counter (each scope's sequence and each format's shared fallback counter)
-- forward by a gap, no earlier than the clock's period. Guarantee: no serial is issued twice
-- as long as the old primary issued at most `gap` serials per format in the WAL the new one
-- lacks (rule: gap >= peak serials per second of one format x the longest stretch of commits
-- a failover loses) and its clock was not ahead of the new primary's. A counter made after a
-- fence, in its period, starts after the gaps (_fence_floor): the old primary may have made
-- that counter, and issued from it, in the lost WAL. A promotion or a point-in-time recovery
-- shows as a new timeline.
--
-- The fence takes itself: the first allocation of each server session checks the timeline
-- (_check_timeline), and the first on a timeline not fenced yet fences it before it draws,
-- whatever promoted the standby. Every path that draws a serial calls _check_timeline before
-- it draws or takes a lock, unless the session is marked checked (setting
-- hivenet.timeline_checked): _allocate (and so the draws of unprepared scopes from a shared
-- fallback, fallback.sql), the generated fast paths (compile.sql), prepare_scope and the
-- promotion of a scope (counters.sql). `hivenet-db failover-fence` fences before traffic;
-- maintain() fences a timeline no allocation has fenced yet.

-- The timeline of each fence, and the one the schema was installed on (gap NULL). History:
-- a fence run by an allocation is recorded in the caller's transaction and vanishes with its
-- rollback; whether a timeline is fenced is sequence fenced_timeline's to say (below).
CREATE TABLE hivenet.failover_fence (
    timeline   integer PRIMARY KEY,
    fenced_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    gap        bigint,
    counters   integer NOT NULL DEFAULT 0,
    applied_by text NOT NULL
        CHECK (applied_by IN ('install', 'allocation', 'command', 'maintain'))
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

-- The last timeline fenced, or the install's: a sequence, so that a fence survives the
-- rollback of the transaction that ran it (sequences are not transactional), as the moves of
-- the counters do; set after them, in the same WAL, so it is never on disk without them.
CREATE SEQUENCE hivenet.fenced_timeline AS integer MINVALUE 0;
SELECT setval('hivenet.fenced_timeline', hivenet._timeline());
INSERT INTO hivenet.failover_fence (timeline, applied_by) VALUES (hivenet._timeline(), 'install');

-- The instant of the last fence (microseconds since 1970; none before the first) and the sum
-- of the gaps of every fence: sequences too, for the same reason. A counter made in the
-- period of the last fence starts after them (_fence_floor).
CREATE SEQUENCE hivenet.fenced_at AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE hivenet.fenced_gaps AS bigint MINVALUE 0 START 0;

-- Whether this server's timeline is the last one fenced (or the install's).
CREATE FUNCTION hivenet._fenced() RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_sequence_last_value('hivenet.fenced_timeline')
           IS NOT DISTINCT FROM hivenet._timeline()
$$;

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('failover_gap', '100000', 'count',
     'how far a fence moves every counter (the first allocation on a new timeline, maintain(), '
     'failover-fence without --gap): at least the serials one format issues in '
     'failover_loss_window at its peak rate'),
    ('failover_loss_window', '30 seconds', 'interval',
     'the longest stretch of commits a failover may lose, as your HA manager bounds it; '
     'replication_warning() says when a format''s peak rate over it exceeds failover_gap');

-- The gap of the fences that are given none: the setting failover_gap.
CREATE FUNCTION hivenet._failover_gap() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet._setting_constant('failover_gap')::bigint
$$;

-- hivenet.fence_failover(gap, force) → table (administrators; `hivenet-db failover-fence`)
--   Run on a promoted standby before it takes traffic (its first allocation would fence it
--   otherwise, with the setting failover_gap). Moves each counter to greatest(its last
--   value, the start of the clock's period) + gap. A counter of a format that does not
--   borrow the next period and whose period cannot hold the gap is parked at its capacity
--   (HN010 until the next period: every number of this one may have been issued). gap
--   NULL: the setting failover_gap. One row per counter moved. Does nothing (no row) when
--   this timeline was fenced already, unless force. The moves are done when it returns,
--   whatever the caller's transaction does then. HN001 for a gap below 1.
CREATE FUNCTION hivenet.fence_failover(gap bigint DEFAULT NULL, force boolean DEFAULT false)
RETURNS TABLE (timeline integer, format text, counter text, from_value bigint,
               to_value bigint, parked boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    p_gap ALIAS FOR gap; p_force ALIAS FOR force;
BEGIN
    RETURN QUERY SELECT * FROM hivenet._fence(
        coalesce(p_gap, hivenet._failover_gap()), p_force, 'command');
    IF FOUND THEN
        -- The jump is no allocation: the next sample of the rates starts afresh.
        UPDATE hivenet.allocation_rate SET issued = NULL;
    END IF;
END $$;

-- Where the fence moves a counter of format p_format that stands at p_from: to
-- greatest(p_from, the start of period p_period) + p_gap, or, parked, to its period's
-- capacity when the format does not borrow and the period cannot hold the gap.
CREATE FUNCTION hivenet._fenced_value(p_from bigint, p_format hivenet.format,
    p_period bigint, p_gap bigint, OUT to_value bigint, OUT parked boolean)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_base bigint := greatest(p_from, p_period * p_format.stride);
    v_last bigint := (v_base / p_format.stride) * p_format.stride + p_format.capacity;
BEGIN
    to_value := v_base + p_gap;
    parked := NOT p_format.borrow_next_period AND to_value > v_last;
    IF parked THEN
        to_value := greatest(v_last, p_from);
    END IF;
END $$;

-- Part of _fence: moves counter p_seq of format p_format as _fenced_value says. Under the
-- period reset's lock (_advance, periods.sql), held for the setval only.
CREATE FUNCTION hivenet._fence_counter(p_seq regclass, p_format hivenet.format,
    p_period bigint, p_gap bigint, OUT from_value bigint, OUT to_value bigint,
    OUT parked boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_seq::oid::integer);
    BEGIN
        -- Its value, also one set as the next (is_called false: a prepared scope's start,
        -- counters.sql), which pg_sequence_last_value does not show.
        EXECUTE format('SELECT last_value FROM %s', p_seq) INTO from_value;
        SELECT f.to_value, f.parked INTO to_value, parked
        FROM hivenet._fenced_value(from_value, p_format, p_period, p_gap) f;
        PERFORM setval(p_seq, to_value, true);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
END $$;

-- The fence (see fence_failover), applied by p_by: moves every counter, then marks this
-- timeline fenced (fenced_timeline) and records it (failover_fence, in the caller's
-- transaction). One fence at a time, under the fences' lock, and each format's counters
-- under its cold lock (no scope of the format is promoted from a fallback value read before),
-- each held until the fence is done, not until commit: the moves are not transactional, and
-- an allocation's fence runs in a caller's transaction, whose commit nobody may wait for.
-- Whoever waited finds the timeline fenced and fences nothing.
CREATE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
RETURNS TABLE (timeline integer, format text, counter text, from_value bigint,
               to_value bigint, parked boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_timeline integer := hivenet._timeline();
    v_format hivenet.format;
    v_period bigint;
    v_seq regclass;
    v_count integer := 0;
BEGIN
    IF p_gap IS NULL OR p_gap < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('failover fence: gap %s must be at least 1',
                             coalesce(p_gap::text, 'NULL'));
    END IF;
    -- The fences' lock: key 1 of the period resets' space, whose other keys are sequence
    -- OIDs (never below 16384) and maintain()'s 0.
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), 1);
    BEGIN
        IF p_force OR NOT hivenet._fenced() THEN
            FOR v_format IN SELECT * FROM hivenet.format ORDER BY name LOOP
                PERFORM pg_advisory_lock(hivenet._cold_lock_space(), hashtext(v_format.name));
                BEGIN
                    v_period := hivenet._period_index(hivenet.now() AT TIME ZONE
                        hivenet._setting_value('time_zone'), v_format.reset);
                    FOR counter IN
                        SELECT hivenet._cold_sequence_name(v_format.name)
                        UNION ALL
                        (SELECT s.sequence_name FROM hivenet.scope s
                         WHERE s.format = v_format.name ORDER BY s.sequence_name)
                    LOOP
                        v_seq := to_regclass('hivenet.' || quote_ident(counter));
                        CONTINUE WHEN v_seq IS NULL;
                        SELECT f.from_value, f.to_value, f.parked
                        INTO from_value, to_value, parked
                        FROM hivenet._fence_counter(v_seq, v_format, v_period, p_gap) f;
                        v_count := v_count + 1;
                        timeline := v_timeline;
                        format := v_format.name;
                        RETURN NEXT;
                    END LOOP;
                EXCEPTION WHEN OTHERS OR query_canceled THEN
                    PERFORM pg_advisory_unlock(hivenet._cold_lock_space(),
                                               hashtext(v_format.name));
                    RAISE;
                END;
                PERFORM pg_advisory_unlock(hivenet._cold_lock_space(), hashtext(v_format.name));
            END LOOP;
            PERFORM setval('hivenet.fenced_gaps',
                           coalesce(pg_sequence_last_value('hivenet.fenced_gaps'), 0) + p_gap);
            PERFORM setval('hivenet.fenced_at',
                           (extract(epoch FROM hivenet.now()) * 1000000)::bigint);
            PERFORM setval('hivenet.fenced_timeline', v_timeline);
            INSERT INTO hivenet.failover_fence AS f (timeline, gap, counters, applied_by)
            VALUES (v_timeline, p_gap, v_count, p_by)
            ON CONFLICT ON CONSTRAINT failover_fence_pkey DO UPDATE
                SET fenced_at = clock_timestamp(), gap = coalesce(f.gap, 0) + EXCLUDED.gap,
                    counters = EXCLUDED.counters, applied_by = EXCLUDED.applied_by;
            RAISE LOG USING MESSAGE = format(
                'hivenet: fenced timeline %s (%s): %s counters moved forward by %s',
                v_timeline, p_by, v_count, p_gap);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), 1);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), 1);
END $$;

-- The last value a counter of format p_format made now starts after, or NULL. Made in the
-- period of the last fence (or before it: a clock behind), it may be one the old primary
-- made and issued from in the WAL the fence could not see; so it starts where a fence would
-- have moved it, after the gaps of every fence so far (at least those of that period), and
-- parked where they do not fit (_fenced_value). Off the allocation path: counters.sql.
CREATE FUNCTION hivenet._fence_floor(p_format hivenet.format) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT v.to_value
    FROM (SELECT pg_sequence_last_value('hivenet.fenced_gaps') AS gaps,
                 hivenet._period_index(to_timestamp(
                     pg_sequence_last_value('hivenet.fenced_at') / 1e6) AT TIME ZONE z.zone,
                     p_format.reset) AS fenced,
                 hivenet._period_index(hivenet.now() AT TIME ZONE z.zone, p_format.reset) AS now
          FROM (SELECT hivenet._setting_value('time_zone') AS zone) z) p,
         hivenet._fenced_value(0, p_format, p.fenced, p.gaps) v
    WHERE p.gaps > 0 AND p.fenced >= p.now
$$;

-- The automatic fence: on a primary whose timeline is not the last one fenced, fences it
-- (setting failover_gap; one session fences, the others wait for it in _fence and then find
-- it done), then marks the server session checked for the fast paths and _allocate: setting
-- hivenet.timeline_checked, for the session (set_config(..., false)), so for whichever client
-- a pooler hands the session to next; a rollback of the caller's transaction unsets it (the
-- next allocation checks again, and finds the timeline fenced). A session cannot outlive a
-- timeline it allocated on: only a standby's sessions see a promotion, and a standby
-- allocates nothing. Run before the caller draws a serial or takes a lock.
CREATE FUNCTION hivenet._check_timeline() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN;  -- a standby: drawing fails as read-only, and nothing is marked
    END IF;
    IF NOT hivenet._fenced() THEN
        PERFORM hivenet._fence(hivenet._failover_gap(), false, 'allocation');
    END IF;
    PERFORM set_config('hivenet.timeline_checked', 'true', false);
END $$;

-- The allocation rate of each format, sampled by maintain() (_sample_allocation_rates), for
-- replication_warning() and the metric hivenet_allocation_peak_per_second: the serials its
-- counters had issued in their current period at the last sample, and the highest rate
-- between two samples of the business day and of the day before.
CREATE TABLE hivenet.allocation_rate (
    format        text PRIMARY KEY,
    timeline      integer NOT NULL,
    sampled_at    timestamptz NOT NULL,
    period_start  timestamp NOT NULL,
    issued        bigint,  -- NULL after a fence by command: no rate from it to the next
    day           date NOT NULL,
    peak          float8 NOT NULL DEFAULT 0,  -- serials a second, highest of day
    previous_peak float8 NOT NULL DEFAULT 0   -- ... of the day before day
);
COMMENT ON TABLE hivenet.allocation_rate IS
    'serials a second of each format, highest between two maintain() runs, today and yesterday';

-- Part of maintain(): samples each format's serials issued in the current period (view
-- scope_usage, summed over its counters) and keeps the highest rate since the last sample,
-- per business day of the wall clock. No rate across a change of period (a format that
-- resets faster than maintain() runs has none), of timeline or a fence by command (their
-- jumps are no allocations). A rate is an average between two runs of maintain(): a burst
-- shorter than that counts at its average.
CREATE FUNCTION hivenet._sample_allocation_rates() RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO hivenet.allocation_rate AS r
        (format, timeline, sampled_at, period_start, issued, day)
    SELECT u.format, hivenet._timeline(), clock_timestamp(), min(u.period_start),
           sum(u.issued), (clock_timestamp() AT TIME ZONE hivenet._setting_value('time_zone'))::date
    FROM hivenet.scope_usage u
    GROUP BY u.format
    ON CONFLICT (format) DO UPDATE SET
        timeline = EXCLUDED.timeline, sampled_at = EXCLUDED.sampled_at,
        period_start = EXCLUDED.period_start, issued = EXCLUDED.issued, day = EXCLUDED.day,
        previous_peak = CASE EXCLUDED.day - r.day WHEN 0 THEN r.previous_peak
                                                  WHEN 1 THEN r.peak ELSE 0 END,
        peak = greatest(
            CASE WHEN EXCLUDED.day = r.day THEN r.peak ELSE 0 END,
            CASE WHEN EXCLUDED.timeline = r.timeline AND EXCLUDED.period_start = r.period_start
                      AND EXCLUDED.issued >= r.issued AND EXCLUDED.sampled_at > r.sampled_at
                 THEN (EXCLUDED.issued - r.issued)
                      / extract(epoch FROM EXCLUDED.sampled_at - r.sampled_at)::float8 END)
$$;

-- hivenet.replication_warning() → text: why a failover could issue serials again, or NULL.
--   A primary with standbys (rows in pg_stat_replication, which every role may count) and
--   no synchronous_standby_names commits before its standbys have the WAL; a format whose
--   peak rate (allocation_rate) over failover_loss_window exceeds failover_gap issues more in
--   the commits a failover may lose than the fence jumps.
CREATE FUNCTION hivenet.replication_warning() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT nullif(concat_ws('; ',
        (SELECT format('%s standby connection(s) and synchronous_standby_names is empty: a '
                       'failover loses the last commits (the claims, steps and requests '
                       'they held) and the fence of the promoted standby''s first allocation '
                       'keeps its serials from repeating only within failover_gap', count(*))
         FROM pg_stat_replication
         WHERE state IS DISTINCT FROM 'backup'  -- NULL for roles without pg_read_all_stats
         HAVING count(*) > 0 AND current_setting('synchronous_standby_names') = ''),
        (SELECT format('format %s peaked at %s serials a second (today or yesterday): %s '
                       'in failover_loss_window %s, more than failover_gap %s; raise '
                       'failover_gap to at least that', r.format, round(p.peak::numeric, 1),
                       ceil(p.peak * w.seconds)::bigint, w.value, hivenet._failover_gap())
         FROM hivenet.allocation_rate r
         CROSS JOIN LATERAL (SELECT greatest(r.peak, r.previous_peak) AS peak) p
         CROSS JOIN (SELECT s.value, extract(epoch FROM s.value::interval) AS seconds
                     FROM hivenet.setting s WHERE s.name = 'failover_loss_window') w
         WHERE p.peak * w.seconds > hivenet._failover_gap()
         ORDER BY p.peak DESC, r.format LIMIT 1)), '')
$$;

-- Part of maintain(): fences a timeline no allocation has fenced yet (nothing was issued on
-- it), samples the allocation rates, and warns about asynchronous standbys and a gap too
-- small for the rates.
CREATE FUNCTION hivenet._maintain_failover() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_warning text;
BEGIN
    IF NOT hivenet._fenced() THEN
        PERFORM hivenet._fence(hivenet._failover_gap(), false, 'maintain');
        RAISE NOTICE USING MESSAGE = format(
            'hivenet: timeline %s is new (a promoted standby or a restore): maintain() moved '
            'every counter forward by %s (failover_gap) before any allocation did',
            hivenet._timeline(), hivenet._failover_gap());
    END IF;
    PERFORM hivenet._sample_allocation_rates();
    v_warning := hivenet.replication_warning();
    IF v_warning IS NOT NULL THEN
        RAISE WARNING USING MESSAGE = 'hivenet: ' || v_warning;
    END IF;
END $$;
