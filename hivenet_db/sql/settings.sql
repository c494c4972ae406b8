-- Settings: one table, changed with plain UPDATE by an administrator.
-- Every value is checked when written (HN001 naming the bad value), so a typo cannot turn
-- the clock or the business time zone into a runtime error later.

CREATE SCHEMA IF NOT EXISTS hivenet;
COMMENT ON SCHEMA hivenet IS
    'hivenet-db: serial numbers (HiveNet Sequence Standards) and idempotency';

-- The characters that no namespace or key may hold (claims.sql) and that every message shows
-- escaped (_shown), as a bracket expression: the control characters (Unicode category Cc)
-- and the invisible ones that change how text reads, the format and separator characters
-- (Cf, Zl, Zp, as of Unicode 15: U+200B zero width space, U+202E right-to-left override,
-- U+2028 line separator, U+FEFF, ...). Raw, they forge lines of the server log or of a
-- terminal, reorder what a message says, or make two different keys look the same.
-- hivenet_db/parsing.py UNSEEN is the same class. Inlined where it is used: a constant.
CREATE FUNCTION hivenet._unseen_characters() RETURNS text
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT '[\x01-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e'
           '\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb'
           '\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3'
           '\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]' AS unseen;
END;

-- A value as messages echo it: quoted (quote_literal), and cut to its first 32 characters
-- plus its length when longer than 40, so no message echoes a megabyte; 'NULL' for NULL.
-- An unseen character (_unseen_characters) is shown as its code: \xNN, \uNNNN or
-- \UNNNNNNNN. hivenet_db/parsing.py shown() is the same for messages made in Python.
CREATE FUNCTION hivenet._shown(p_value text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_value IS NULL THEN 'NULL'
                WHEN q.quoted !~ hivenet._unseen_characters() THEN q.quoted
                ELSE (SELECT string_agg(CASE WHEN c !~ hivenet._unseen_characters() THEN c
                                             WHEN ascii(c) < 256
                                             THEN '\x' || lpad(to_hex(ascii(c)), 2, '0')
                                             WHEN ascii(c) < 65536
                                             THEN '\u' || lpad(to_hex(ascii(c)), 4, '0')
                                             ELSE '\U' || lpad(to_hex(ascii(c)), 8, '0') END,
                                        '' ORDER BY i)
                      FROM unnest(string_to_array(q.quoted, NULL)) WITH ORDINALITY AS t(c, i))
           END || CASE WHEN length(p_value) > 40
                       THEN format('... (%s characters)', length(p_value)) ELSE '' END
    FROM (SELECT quote_literal(CASE WHEN length(p_value) <= 40 THEN p_value
                                    ELSE left(p_value, 32) END) AS quoted) q
$$;

CREATE TABLE hivenet.setting (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('text', 'boolean', 'interval', 'time_zone', 'count')),
    description text NOT NULL
);

-- Why interval setting p_name may not take value p_value, or NULL. Every interval is positive
-- (a tolerance may be 0) and at most _longest_interval() (clock.sql: ten years, the bound of
-- every interval a caller passes, so no time computed from it overflows). Every retention of
-- finished steps and requests is at least the lease, step_lease: a record purged sooner lets
-- a retry the lease still covers start the money step again (seed 003, 3.3).
-- set_request_retention (policies.sql) asks as request_retention for a namespace's retention.
CREATE FUNCTION hivenet._interval_conflict(p_name text, p_value interval) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_lease interval := hivenet._setting_value('step_lease')::interval;
    v_shortest record;
BEGIN
    IF p_name LIKE '%\_tolerance'
       AND NOT p_value BETWEEN interval '0' AND hivenet._longest_interval() THEN
        RETURN format('must be from 0 to %s', hivenet._longest_interval());
    ELSIF p_name NOT LIKE '%\_tolerance' AND NOT hivenet._interval_allowed(p_value) THEN
        RETURN format('must be positive and at most %s', hivenet._longest_interval());
    ELSIF p_name IN ('step_retention', 'request_retention') AND p_value < v_lease THEN
        RETURN format('must be at least step_lease %s: a step or request purged before its '
                      'lease ends would run again when retried', v_lease);
    ELSIF p_name = 'step_lease' THEN
        SELECT r.name, r.retention INTO v_shortest
        FROM (SELECT s.name, s.value::interval AS retention FROM hivenet.setting s
              WHERE s.name IN ('step_retention', 'request_retention')
              UNION ALL
              SELECT 'the retention of namespace ' || hivenet._shown(n.namespace), n.retention
              FROM hivenet.request_namespace n) AS r
        WHERE r.retention < p_value
        ORDER BY r.retention, r.name LIMIT 1;
        IF FOUND THEN
            RETURN format('must not exceed %s %s: a retention must outlive the lease',
                          v_shortest.name, v_shortest.retention);
        END IF;
    END IF;
    RETURN NULL;
END $$;

-- Trigger: reject a value that does not parse as the setting's kind, an interval out of its
-- bounds (_interval_conflict), and a business time zone behind the current one once serials
-- exist (their dates and times would go backwards; a scope prepared and never used issued
-- none: _serials_issued, counters.sql).
-- SECURITY DEFINER: an administrator updates the table without any right on what the checks
-- read (the counters: counters.sql), and gets their HN001, never 42501.
CREATE FUNCTION hivenet._setting_check() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_conflict text;
BEGIN
    BEGIN
        CASE NEW.kind
            WHEN 'boolean' THEN PERFORM NEW.value::boolean;
            WHEN 'interval' THEN PERFORM NEW.value::interval;
            WHEN 'time_zone' THEN PERFORM now() AT TIME ZONE NEW.value;
            -- A positive integer: 0 or less divides by zero (division_by_zero is a
            -- data_exception, caught below like a value that is no integer).
            WHEN 'count' THEN PERFORM 1 / (NEW.value::integer > 0)::integer;
            ELSE NULL;
        END CASE;
    EXCEPTION WHEN data_exception OR invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %s is not a valid %s', NEW.name,
                             hivenet._shown(NEW.value), NEW.kind);
    END;
    IF NEW.kind = 'interval' THEN
        v_conflict := hivenet._interval_conflict(NEW.name, NEW.value::interval);
        IF v_conflict IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001', MESSAGE = format('setting %s: %s %s',
                NEW.name, hivenet._shown(NEW.value), v_conflict);
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.kind = 'time_zone' AND NEW.value <> OLD.value
       AND now() AT TIME ZONE NEW.value < now() AT TIME ZONE OLD.value
       AND to_regclass('hivenet.fallback_draw') IS NOT NULL THEN
        -- Nested: the counters are looked up only once they exist (not during an install).
        IF hivenet._serials_issued() THEN
            RAISE EXCEPTION USING ERRCODE = 'HN001',
                MESSAGE = format('setting %s: %s is %s behind %s, and serials have been '
                                 'issued: their business dates and times would go backwards '
                                 '(choose the zone before the first serial)', NEW.name,
                                 hivenet._shown(NEW.value),
                                 (now() AT TIME ZONE OLD.value) - (now() AT TIME ZONE NEW.value),
                                 hivenet._shown(OLD.value));
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER setting_check BEFORE INSERT OR UPDATE ON hivenet.setting
    FOR EACH ROW EXECUTE FUNCTION hivenet._setting_check();

INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('time_zone', 'UTC', 'time_zone',
     'business time zone of every date and time field of a serial (never the session TimeZone)'),
    ('allow_fake_clock', 'false', 'boolean',
     'let sessions move hivenet.now() with SET hivenet.fake_now (tests and demos only)'),
    ('enforce_registry', 'false', 'boolean',
     'reject systems and modules that are not registered (HN002)'),
    ('max_serials_per_call', '10000', 'count',
     'most serials one next_serials() call may take (HN001 beyond): a runaway count would '
     'hold a backend for seconds and use up a scope''s capacity for the period');

-- The value of one setting (NULL when unknown).
CREATE FUNCTION hivenet._setting_value(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT value FROM hivenet.setting WHERE name = p_name
$$;
