-- The fake clock of hivenet.now(): the session's hivenet.fake_now as a timestamptz.
--   Raises HN001 when fake clocks are not allowed in this database (setting
--   allow_fake_clock), or when the value is no timestamptz. Never blocks.
--   SECURITY DEFINER: the application role reads no setting itself, yet must get the fake
--   time where it is allowed (tests of its own code) and HN001 where not (never 42501). Off
--   the hot path: now() calls it only when hivenet.fake_now is set.
CREATE FUNCTION hivenet._fake_now() RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_fake text := current_setting('hivenet.fake_now', true);
BEGIN
    IF NOT hivenet._setting_value('allow_fake_clock')::boolean THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now is set to %s but this database does not allow a '
                             'fake clock (setting allow_fake_clock)', hivenet._shown(v_fake));
    END IF;
    BEGIN
        RETURN v_fake::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('hivenet.fake_now %s is not a timestamptz', hivenet._shown(v_fake));
    END;
END $$;

-- hivenet.now(): the one clock of the schema.
--   Returns the wall clock (clock_timestamp(), so long transactions still see time pass), or
--   the session's `hivenet.fake_now` when the setting allow_fake_clock is true.
--   Raises HN001 when hivenet.fake_now is set but fake clocks are not allowed here, or when it
--   is no timestamptz: a production clock is never moved by a session (SPEC §8).
--   Never blocks. VOLATILE: it reads the clock.
--   Called on every allocation, so it is inlined into its caller: a SQL-standard body (bound
--   to its functions when created, so no search path can redirect it) without SET, which
--   would forbid inlining (docs/design/sql-internals.md).
CREATE FUNCTION hivenet.now() RETURNS timestamptz
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT CASE WHEN coalesce(current_setting('hivenet.fake_now', true), '') = ''
                THEN clock_timestamp() ELSE hivenet._fake_now() END;
END;

-- Instant p_time as every message and report shows a time: in the business time zone (setting
-- time_zone, never the session's TimeZone), with its offset from UTC and the zone named, e.g.
-- '2026-11-21 17:30:00+08:00 (Asia/Shanghai)'; NULL for NULL.
CREATE FUNCTION hivenet._shown_time(p_time timestamptz) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT to_char(p_time AT TIME ZONE z.zone, 'YYYY-MM-DD HH24:MI:SS')
           || CASE WHEN o.seconds < 0 THEN '-' ELSE '+' END
           || to_char(make_interval(secs => abs(o.seconds)), 'HH24:MI')
           || format(' (%s)', z.zone)
    FROM (SELECT hivenet._setting_value('time_zone') AS zone) AS z,
         LATERAL (SELECT extract(epoch FROM (p_time AT TIME ZONE z.zone)
                                          - (p_time AT TIME ZONE 'UTC')) AS seconds) AS o
$$;

-- What "now" is for a date or time a caller printed: the local time on its clock at p_now,
-- at edge p_edge of the zones a caller may be in ('earliest': UTC-12, 'latest': UTC+14;
-- every zone in use lies between). A serial carries no time zone, so each window on a
-- caller's date or time (the interface check, begin_step, and the partitions and purges that
-- follow them) is read from these two edges, and from nothing else: a caller anywhere is
-- never "old" or "in the future" merely for its zone. Inlined (a SQL-standard body without
-- SET, p_now read once, so a volatile argument such as hivenet.now() does not stop it);
-- p_edge is a constant at every call, and the CASE folds.
CREATE FUNCTION hivenet._caller_now(p_now timestamptz, p_edge text) RETURNS timestamp
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT (p_now AT TIME ZONE 'UTC') + CASE p_edge WHEN 'earliest' THEN interval '-12 hours'
                                                    WHEN 'latest' THEN interval '14 hours' END;
END;

-- The longest interval a caller may pass (a lease, a retention, an expiry): ten years. Every
-- such interval is added to or taken from the clock somewhere (a lease's end in the views,
-- a retention's cutoff in maintain()); bounded, that sum is always a timestamp, so no stored
-- value can make a view or maintain() fail for everyone (22008).
CREATE FUNCTION hivenet._longest_interval() RETURNS interval
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT interval '10 years';
END;

-- Whether p_value is an interval a caller may pass: positive and at most _longest_interval().
-- Inlined into the fast paths' checks (requests.sql, steps.sql).
CREATE FUNCTION hivenet._interval_allowed(p_value interval) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT p_value > interval '0' AND p_value <= hivenet._longest_interval();
END;

-- HN001 unless p_value is NULL or an interval a caller may pass (_interval_allowed); p_what
-- names it in the message ('lease', 'retention of namespace ''x''', ...).
CREATE FUNCTION hivenet._check_interval(p_what text, p_value interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT hivenet._interval_allowed(p_value) THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('%s %s is not between 0 (excluded) and %s', p_what, p_value,
                             hivenet._longest_interval());
    END IF;
END $$;
