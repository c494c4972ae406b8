-- Periods and clocks of a counter (counters.sql): moving it to a new period, and keeping the
-- time it prints from going back.
--
-- A counter's value carries its period. When the value's period is older than the clock's,
-- the first caller to notice moves the sequence forward (setval) under a short, namespaced
-- session-level advisory lock that is released before returning: nobody ever waits for
-- another transaction to commit. When the value's period is newer (the clock went back),
-- issuing continues in the sequence's period, so serials never go backwards. Sequences are
-- not transactional, so numbers taken by a transaction that rolls back are gaps, never
-- reissued.
--
-- A format that prints a finer time than its period (interface and merchant_trade print the
-- second, reset daily: its clock_unit) keeps, per counter, the latest instant issued in a
-- second sequence, its clock sequence, holding that instant's period index in the clock unit
-- (the same encoding, one unit finer). Every allocation reads it and prints no earlier
-- (within the value's own period), and raises it under the same short advisory lock as a
-- period reset, before returning: a serial issued after another call returned is never
-- smaller, whatever the clock did (seed 004's guard, for every format; SPEC guarantee 3).

-- Slow path, under the counter's advisory lock: move sequence p_seq (the counter of p_scope,
-- a name for messages) to period p_period when it is still in an older one, and past an
-- exhausted period (borrowing formats only; others get HN010 naming the format, the scope, the
-- period and the capacity). Returns a fresh value in or after p_period and not exhausted.
CREATE FUNCTION hivenet._advance(p_seq regclass, p_format hivenet.format, p_period bigint,
    p_scope text) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_value bigint;
    v_period bigint;
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_seq::oid::integer);
    BEGIN
        v_value := nextval(p_seq);
        IF v_value / p_format.stride < p_period THEN
            PERFORM setval(p_seq, p_period * p_format.stride, true);
            v_value := nextval(p_seq);
        END IF;
        v_period := v_value / p_format.stride;
        IF v_value % p_format.stride NOT BETWEEN 1 AND p_format.capacity THEN
            IF NOT p_format.borrow_next_period THEN
                -- Park the counter just past capacity so failing calls never spill over.
                PERFORM setval(p_seq, v_period * p_format.stride + p_format.capacity, true);
                RAISE EXCEPTION USING ERRCODE = 'HN010',
                    MESSAGE = format('format %s: all %s serials of %s %s are used',
                                     p_format.name, p_format.capacity, p_scope,
                                     CASE p_format.reset WHEN 'never' THEN '(it never resets)'
                                     ELSE format('for the %s starting %s', p_format.reset,
                                         hivenet._period_start(v_period, p_format.reset)) END);
            END IF;
            PERFORM setval(p_seq, (v_period + 1) * p_format.stride, true);
            v_value := nextval(p_seq);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_seq::oid::integer);
    RETURN v_value;
END $$;

-- Slow path, once per clock unit and counter (and after a step back): raises clock sequence
-- p_clock to instant p_instant unless it holds a later one, under the same advisory lock as a
-- period reset (setval alone could move it back when two callers race). Held for one setval,
-- released before returning: never until commit. Not transactional, like the counter: an
-- instant used by a transaction that rolls back stays used (later serials only go forward).
CREATE FUNCTION hivenet._raise_clock(p_clock regclass, p_instant bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_lock(hivenet._reset_lock_space(), p_clock::oid::integer);
    BEGIN
        IF coalesce(pg_sequence_last_value(p_clock), 0) < p_instant THEN
            PERFORM setval(p_clock, p_instant, true);
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_clock::oid::integer);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(hivenet._reset_lock_space(), p_clock::oid::integer);
END $$;

-- The last instant of period p_period of reset p_reset, as a period index in unit p_unit.
CREATE FUNCTION hivenet._period_last_instant(p_period bigint, p_reset text, p_unit text)
RETURNS bigint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_reset = 'never' THEN 9223372036854775807
                ELSE hivenet._period_index(hivenet._period_start(p_period + 1, p_reset), p_unit) - 1
           END
$$;

-- The latest instant format p_format has issued in counter scope p_scope, business-local:
-- from the scope's own clock, or, while the scope has drawn from its format's fallback counter
-- (a row in fallback_draw: fallback.sql), that counter's clock too (shared by unprepared
-- scopes); for a format without a clock_unit (dates only), the start of the latest period its
-- counter (own sequence, or the fallback while drawn from) holds. NULL when it issued nothing
-- there. The draws first, then the catalog: a promotion committing in between is seen by one
-- of the two. Off the hot path (it refreshes the catalog cache): claim_interface_serial and
-- begin_step ask it only for a serial dated past their window.
CREATE FUNCTION hivenet._latest_issued(p_format text, p_scope text) RETURNS timestamp
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_format hivenet.format := (SELECT f FROM hivenet.format f WHERE f.name = p_format);
    v_drawn boolean;
    v_counter text := hivenet._scope_sequence_name(p_format, p_scope);
    v_cold text := hivenet._cold_sequence_name(p_format);
    v_value bigint;
BEGIN
    IF v_format IS NULL THEN
        RETURN NULL;
    END IF;
    v_drawn := EXISTS (SELECT FROM hivenet.fallback_draw d
                       WHERE d.format = p_format AND d.scope = p_scope);
    IF v_format.clock_unit IS NOT NULL THEN
        v_value := pg_sequence_last_value(hivenet._committed_sequence(
            hivenet._clock_sequence_name(v_counter)));
        IF v_drawn THEN
            v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(
                hivenet._clock_sequence_name(v_cold))));
        END IF;
        RETURN CASE WHEN v_value > 0 THEN hivenet._period_start(v_value, v_format.clock_unit) END;
    END IF;
    v_value := pg_sequence_last_value(hivenet._committed_sequence(v_counter));
    IF v_drawn THEN
        v_value := greatest(v_value, pg_sequence_last_value(hivenet._committed_sequence(v_cold)));
    END IF;
    RETURN CASE WHEN v_value > 0
                THEN hivenet._period_start(v_value / v_format.stride, v_format.reset) END;
END $$;
