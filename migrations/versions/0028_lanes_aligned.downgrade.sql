-- Revision 0028 undone: the lanes issue whatever the lane hash, as revision 0027 left them.

-- hivenet_db/sql/failover.sql
CREATE OR REPLACE FUNCTION hivenet._fence(p_gap bigint, p_force boolean, p_by text)
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
END $$;

-- hivenet_db/sql/allocate.sql
CREATE OR REPLACE FUNCTION hivenet._lane(p_format hivenet.format, p_scope text) RETURNS regclass
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT hivenet._lane_sequence(p_format.name, hivenet._lane_of(p_scope, p_format.lanes))
$$;

CREATE OR REPLACE FUNCTION hivenet._lane_of(p_scope text, p_lanes integer) RETURNS integer
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    -- NULL for a lane count no format can have (the function is public: the fast path).
    SELECT CASE WHEN p_lanes BETWEEN 1 AND 1024 THEN hashtext(p_scope) & (p_lanes - 1) END;
END;

DROP FUNCTION hivenet._compile_lanes_aligned();
DROP FUNCTION hivenet._raise_lanes_unaligned(text);
DROP FUNCTION hivenet._lanes_aligned();
