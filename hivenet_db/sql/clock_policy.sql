-- What a format does when the clock is behind the latest instant it has issued (an NTP step
-- back, a failover to a server whose clock is behind, the hour a summer-time zone repeats):
-- its clock policy. Whatever the policy, no serial is smaller than one issued before it in
-- its scope (SPEC guarantee 3): the latest instant is kept in the database, in the counter's
-- own sequence (its period) or its clock sequence (periods.sql), so a restart, a crash or a
-- failover fence keeps it too.
--   continue  issue at the latest instant already issued until the clock catches up (the
--             default; a format resetting every second then runs out of that second: HN010);
--   wait      wait for the clock to reach it, at most max_wait and never past the caller's
--             statement_timeout (or transaction_timeout), then refuse (HN011);
--   refuse    refuse at once (HN011).
-- Asked only when a call finds the clock behind (_issue, allocate.sql): nothing on the hot
-- path. The view hivenet.clock_lead (reporting.sql) shows how far ahead each format is.

CREATE TABLE hivenet.clock_policy (
    format          text PRIMARY KEY REFERENCES hivenet.format (name),
    on_clock_behind text NOT NULL CHECK (on_clock_behind IN ('continue', 'wait', 'refuse')),
    max_wait        interval,
    CHECK ((on_clock_behind = 'wait') = (max_wait IS NOT NULL))
);
COMMENT ON TABLE hivenet.clock_policy IS
    'what a format does when the clock is behind the latest instant it issued '
    '(set_clock_policy); a format without a row continues';

-- hivenet.set_clock_policy(format, on_clock_behind, max_wait default null) → void
--   (administrators) Sets the clock policy of format (one that prints a date or a time):
--   'continue', 'wait' (max_wait: how long at most, positive and at most ten years) or
--   'refuse'. HN001 for an unknown format, a format that prints no time, another policy, a
--   max_wait missing for 'wait' or given for another policy. Allocations that start after
--   the caller's transaction commits follow it. Never blocks but on a concurrent change of
--   the same format's policy.
CREATE FUNCTION hivenet.set_clock_policy(format text, on_clock_behind text,
    max_wait interval DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_segments jsonb := (SELECT f.segments FROM hivenet.format f
                         WHERE f.name = set_clock_policy.format);
BEGIN
    IF v_segments IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('unknown format %s', hivenet._shown(set_clock_policy.format));
    ELSIF NOT jsonb_path_exists(v_segments, '$[*].time') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s prints no date or time: no clock can be behind it',
                             set_clock_policy.format);
    ELSIF on_clock_behind IS NULL OR on_clock_behind NOT IN ('continue', 'wait', 'refuse') THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: clock policy %s is not continue, wait or refuse',
                             set_clock_policy.format, hivenet._shown(on_clock_behind));
    ELSIF (on_clock_behind = 'wait') <> (max_wait IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('format %s: clock policy %s %s', set_clock_policy.format,
                             on_clock_behind, CASE WHEN max_wait IS NULL
                             THEN 'needs a max_wait (how long it may wait)'
                             ELSE format('takes no max_wait (%s: only wait waits)', max_wait)
                             END);
    END IF;
    PERFORM hivenet._check_interval(format('format %s: max_wait', set_clock_policy.format),
                                    max_wait);
    INSERT INTO hivenet.clock_policy AS p (format, on_clock_behind, max_wait)
    VALUES (set_clock_policy.format, on_clock_behind, max_wait)
    ON CONFLICT ON CONSTRAINT clock_policy_pkey DO UPDATE
        SET on_clock_behind = EXCLUDED.on_clock_behind, max_wait = EXCLUDED.max_wait;
END $$;

-- How long the running statement may still wait: what its statement_timeout and the
-- transaction's transaction_timeout (PostgreSQL 17) leave, less a margin to raise HN011
-- before the server cancels it (57014); NULL when neither is set. Elapsed time is read on the
-- wall clock, which may have stepped: never less than 0.
CREATE FUNCTION hivenet._timeout_left() RETURNS interval
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT least(
        nullif(current_setting('statement_timeout')::interval, interval '0')
            - greatest(clock_timestamp() - statement_timestamp(), interval '0'),
        nullif(coalesce(current_setting('transaction_timeout', true), '0')::interval,
               interval '0')
            - greatest(clock_timestamp() - transaction_timestamp(), interval '0'))
        - interval '100 milliseconds'
$$;

-- A call found the clock at p_local (business-local) behind p_latest, the latest instant
-- format p_format has issued in the call's counter: what its clock policy says. Returns the
-- business-local time to issue at: p_local for 'continue' (the caller issues at p_latest,
-- never before it), the clock once it has reached p_latest for 'wait'. HN011 for 'refuse', and
-- for 'wait' once the clock would not reach p_latest within what max_wait and the statement's
-- timeouts leave (_timeout_left), saying how far behind it is. Waits by pg_sleep, which
-- counts on a clock that never steps, at most a second at a time (so a clock set right is
-- seen soon), holding no lock of this schema but, for a draw from a shared fallback, that
-- fallback's shared locks (_issue_unprepared, fallback.sql: prepare_scope and maintain() may
-- wait for them). Off the hot path: only when the clock is behind.
CREATE FUNCTION hivenet._clock_behind(p_format text, p_latest timestamp, p_local timestamp)
RETURNS timestamp
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_policy hivenet.clock_policy := (SELECT p FROM hivenet.clock_policy p
                                      WHERE p.format = p_format);
    v_budget interval := least(v_policy.max_wait, hivenet._timeout_left());
    v_local timestamp := p_local;
    v_waited interval := interval '0';
    v_step interval;
    v_started timestamptz;
BEGIN
    IF v_policy IS NULL OR v_policy.on_clock_behind = 'continue' THEN
        RETURN p_local;
    END IF;
    WHILE v_local < p_latest LOOP
        IF v_policy.on_clock_behind = 'refuse' OR p_latest - v_local > v_budget - v_waited THEN
            RAISE EXCEPTION USING ERRCODE = 'HN011', MESSAGE = format(
                'format %s: the clock (%s) is %s behind the latest instant the format issued '
                '(%s); its clock policy is %s (hivenet.set_clock_policy)', p_format, v_local,
                p_latest - v_local, p_latest, CASE v_policy.on_clock_behind
                WHEN 'refuse' THEN '''refuse'''
                ELSE format('''wait'', at most %s (%s), and %s is waited already',
                            date_trunc('milliseconds', v_budget),
                            CASE WHEN v_budget < v_policy.max_wait
                                 THEN 'what the statement''s timeout leaves'
                                 ELSE 'its max_wait' END,
                            date_trunc('milliseconds', v_waited)) END);
        END IF;
        v_step := least(p_latest - v_local, interval '1 second');
        v_started := clock_timestamp();
        PERFORM pg_sleep(extract(epoch FROM v_step));
        -- At least the sleep; more when the wall clock says so (a step forward ends sooner).
        v_waited := v_waited + greatest(v_step, clock_timestamp() - v_started);
        v_local := hivenet.now() AT TIME ZONE hivenet._setting_constant('time_zone');
    END LOOP;
    RETURN v_local;
END $$;
