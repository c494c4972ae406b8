-- Prototype (run.sh): view _step_start with its two layout checks as one call each of the C
-- function layout_check (layout_check.c) instead of the generated _serial_valid; the window,
-- the lease and the row as hivenet._step_start's rule has them (steps.sql).
CREATE SCHEMA IF NOT EXISTS prototype;
CREATE OR REPLACE FUNCTION prototype.layout_check(text, integer) RETURNS boolean
AS '$libdir/layout_check', 'layout_check' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE OR REPLACE VIEW prototype._step_start_c AS
SELECT NULL::text AS system_serial, NULL::jsonb AS request, NULL::text AS unified_serial,
       NULL::interval AS lease
WHERE false;
CREATE OR REPLACE RULE start AS ON INSERT TO prototype._step_start_c DO INSTEAD
INSERT INTO hivenet.request_attempt
    (namespace, key, attempt, state, fingerprint, unified_serial, lease, started_at)
SELECT 'hivenet.steps', n.system_serial, 1, 'processing', hivenet._fingerprint(n.request),
       n.unified_serial, n.lease, hivenet.now()
FROM (VALUES (NEW.system_serial, NEW.request, NEW.unified_serial, NEW.lease))
     AS n (system_serial, request, unified_serial, lease)
WHERE prototype.layout_check(n.system_serial, 12)
  AND hivenet._step_in_window(n.system_serial)
  AND (n.unified_serial IS NULL OR prototype.layout_check(n.unified_serial, 10))
  AND (n.lease IS NULL OR n.lease > interval '0')
ON CONFLICT DO NOTHING
RETURNING key, NULL::jsonb, unified_serial, lease;
