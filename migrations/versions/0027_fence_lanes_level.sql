-- Revision 0027: the failover fence moves every lane of a laned format (unified, system) past
-- the greatest of them, not each lane past its own value. A scope then meets no value it was
-- issued before whichever lane it draws from afterwards: the lane is picked by hashtext,
-- which differs between byte orders, so a database restored onto a server of the other byte
-- order (x86-64 to s390x) hashes its scopes to other lanes. Each fence records the server's
-- _lane_hash(); a fence recorded with another (a restore from the other byte order) counts
-- as none, so the fence runs again without --force and maintain() runs it as a backstop.
-- docs/operations.md ("Backup and restore"). No change on the hot path.

-- hivenet_db/sql/allocate.sql
-- hashtext of a fixed text on this server. It differs between servers of the two byte orders
-- (hash_bytes reads the text in native words), and so do the lanes of the same scopes: the
-- failover fence records it and maintain() compares it (failover.sql), since a database
-- restored onto a server where it differs needs the fence before it issues a serial.
CREATE FUNCTION hivenet._lane_hash() RETURNS integer
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT hashtext('hivenet lanes');
END;
REVOKE EXECUTE ON FUNCTION hivenet._lane_hash() FROM PUBLIC;

-- hivenet_db/sql/failover.sql
-- The rows so far get this server's value: an upgrade cannot tell where they were written.
ALTER TABLE hivenet.failover_fence
    ADD COLUMN lane_hash integer NOT NULL DEFAULT hivenet._lane_hash();

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

CREATE OR REPLACE FUNCTION hivenet._maintain_failover() RETURNS void
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
