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
--   would forbid inlining (see _period_index in formats.sql).
CREATE FUNCTION hivenet.now() RETURNS timestamptz
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT CASE WHEN coalesce(current_setting('hivenet.fake_now', true), '') = ''
                THEN clock_timestamp() ELSE hivenet._fake_now() END;
END;
