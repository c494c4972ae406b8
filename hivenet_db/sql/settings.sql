-- Settings: one table, changed with plain UPDATE by an administrator.
-- Every value is checked when written (HN001 naming the bad value), so a typo cannot turn
-- the clock or the business time zone into a runtime error later.

CREATE SCHEMA IF NOT EXISTS hivenet;
COMMENT ON SCHEMA hivenet IS 'hivenet-db: serial numbers (HiveNet Sequence Standards) and idempotency';

CREATE TABLE hivenet.setting (
    name        text PRIMARY KEY,
    value       text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('text', 'boolean', 'interval', 'time_zone')),
    description text NOT NULL
);

-- Trigger: reject a value that does not parse as the setting's kind.
CREATE FUNCTION hivenet._setting_check() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    BEGIN
        CASE NEW.kind
            WHEN 'boolean' THEN PERFORM NEW.value::boolean;
            WHEN 'interval' THEN PERFORM NEW.value::interval;
            WHEN 'time_zone' THEN PERFORM now() AT TIME ZONE NEW.value;
            ELSE NULL;
        END CASE;
    EXCEPTION WHEN data_exception OR invalid_parameter_value OR feature_not_supported THEN
        RAISE EXCEPTION USING ERRCODE = 'HN001',
            MESSAGE = format('setting %s: %L is not a valid %s', NEW.name, NEW.value, NEW.kind);
    END;
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
    ('loopback_dsn', '', 'text',
     'libpq connection string the schema uses to create a new counter scope in its own '
     'transaction; empty: this server''s socket and port, as the schema owner');

-- The value of one setting (NULL when unknown).
CREATE FUNCTION hivenet._setting_value(p_name text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT value FROM hivenet.setting WHERE name = p_name
$$;
