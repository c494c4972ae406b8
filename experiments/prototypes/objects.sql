-- Prototypes of shapes that issue 13's claim and step goals were measured against
-- (docs/benchmarks.md, "What the claim and step goals would take"). Nothing here is part of
-- hivenet-db: a scratch database migrated to head, as its owner; everything in schema
-- prototype, dropped and made again by each run of run.sh.
DROP SCHEMA IF EXISTS prototype CASCADE;
CREATE SCHEMA prototype;

-- What a function call costs by itself: PL/pgSQL, SECURITY DEFINER, SET search_path.
CREATE FUNCTION prototype.plain(p text) RETURNS integer LANGUAGE plpgsql
AS $$ BEGIN RETURN length(p); END $$;
CREATE FUNCTION prototype.definer(p text) RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
AS $$ BEGIN RETURN length(p); END $$;
CREATE FUNCTION prototype.definer_set(p text) RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN length(p); END $$;

-- A claim as one INSERT into a view whose rule records the call with the owner's rights (no
-- function call): the window of the SPEC checked on the serial's printed time as text, the
-- day's partition by a constant (maintain() would rewrite it), the layout NOT checked.
-- (Rules expand NEW once per reference: a volatile expression inserted into the view, such as
-- a fresh serial, would be evaluated several times. The steps' view that landed, revision
-- 0023's _step_start, reads NEW through a one-row VALUES list, evaluated once.)
DO $$
BEGIN
    EXECUTE format('CREATE FUNCTION prototype.partition_days(p_day text) RETURNS boolean '
                   'LANGUAGE sql IMMUTABLE BEGIN ATOMIC SELECT p_day BETWEEN %L AND %L; END',
                   to_char(current_date - 2, 'YYYYMMDD'), to_char(current_date + 2, 'YYYYMMDD'));
END $$;
CREATE VIEW prototype.interface_claim AS
SELECT interface_serial, unified_serial, system_serial FROM hivenet.interface_call WHERE false;
CREATE RULE record AS ON INSERT TO prototype.interface_claim DO INSTEAD
INSERT INTO hivenet.interface_call
    (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
SELECT NEW.interface_serial, substr(NEW.interface_serial, 16, 8)::date, NEW.unified_serial,
       NEW.system_serial, now()
WHERE substr(NEW.interface_serial, 16, 14)
      BETWEEN to_char(now() AT TIME ZONE 'UTC' - interval '36 hours', 'YYYYMMDDHH24MISS')
          AND to_char(now() AT TIME ZONE 'UTC' + interval '14:05', 'YYYYMMDDHH24MISS')
  AND prototype.partition_days(substr(NEW.interface_serial, 16, 8))
ON CONFLICT DO NOTHING;
-- The same with the layout checked by one regular expression (dates not fully: no 31 April).
CREATE VIEW prototype.interface_claim_regex AS TABLE prototype.interface_claim;
CREATE RULE record AS ON INSERT TO prototype.interface_claim_regex DO INSTEAD
INSERT INTO hivenet.interface_call
    (interface_serial, serial_day, unified_serial, system_serial, recorded_at)
SELECT NEW.interface_serial, substr(NEW.interface_serial, 16, 8)::date, NEW.unified_serial,
       NEW.system_serial, now()
WHERE NEW.interface_serial ~ '^[0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[0-9A-Za-z]{5}[0-9]{4}(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01])([01][0-9]|2[0-3])[0-5][0-9][0-5][0-9][0-9]{10}$'
  AND substr(NEW.interface_serial, 16, 14)
      BETWEEN to_char(now() AT TIME ZONE 'UTC' - interval '36 hours', 'YYYYMMDDHH24MISS')
          AND to_char(now() AT TIME ZONE 'UTC' + interval '14:05', 'YYYYMMDDHH24MISS')
  AND prototype.partition_days(substr(NEW.interface_serial, 16, 8))
ON CONFLICT DO NOTHING;

-- A step begun and finished by one INSERT each into views whose rules write the attempt with
-- the owner's rights (the begin became view hivenet._step_start in revision 0023; the finish
-- as a rule cannot tell its caller what it did: an INSERT rewritten into an UPDATE returns no
-- rows through the extended protocol, nor FOUND in PL/pgSQL): begin with begin_step's checks (both serials' layouts, the window, the
-- fingerprint), or without the serial checks; finish as finish_request's UPDATE. RETURNING
-- tells the caller whether the fast path did it (else it would call the function).
CREATE VIEW prototype.step_begin AS
SELECT NULL::text AS system_serial, NULL::jsonb AS request, NULL::text AS unified_serial
WHERE false;
CREATE RULE begin AS ON INSERT TO prototype.step_begin DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', NEW.system_serial, 1, 'processing', hivenet._fingerprint(NEW.request),
       NEW.unified_serial, NULL, hivenet.now()
WHERE hivenet._serial_valid('system', NEW.system_serial)
  AND (NEW.unified_serial IS NULL OR hivenet._serial_valid('unified', NEW.unified_serial))
  AND hivenet._step_in_window(NEW.system_serial)
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial;
CREATE VIEW prototype.step_begin_unchecked AS TABLE prototype.step_begin;
CREATE RULE begin AS ON INSERT TO prototype.step_begin_unchecked DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', NEW.system_serial, 1, 'processing', hivenet._fingerprint(NEW.request),
       NEW.unified_serial, NULL, now()
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial;
CREATE VIEW prototype.step_finish AS
SELECT NULL::text AS system_serial, NULL::integer AS attempt, NULL::boolean AS succeeded,
       NULL::jsonb AS response
WHERE false;
CREATE RULE finish AS ON INSERT TO prototype.step_finish DO INSTEAD
UPDATE hivenet.request_attempt a
SET state = CASE WHEN NEW.succeeded THEN 'success'::hivenet.step_state
                 ELSE 'failed'::hivenet.step_state END,
    finished_at = hivenet.now(),
    response = CASE WHEN NEW.succeeded THEN NEW.response END,
    error = CASE WHEN NOT NEW.succeeded THEN NEW.response END
WHERE a.namespace = 'hivenet.steps' AND a.key = NEW.system_serial AND a.attempt = NEW.attempt
  AND a.state = 'processing' AND NEW.succeeded IS NOT NULL
RETURNING a.key, a.attempt, NEW.succeeded, a.response;
