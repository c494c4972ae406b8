-- Release 0.2.0 from 0.1.0: rows, written by hand, after the code.

-- The counters of the steps' decisions and of those without a namespace of their own, and of
-- every namespace that started keys under 0.1.0, so that its refusals are counted under its
-- own name (decisions.sql).
SELECT hivenet._create_decision_counters('hivenet.steps', false);
SELECT hivenet._create_decision_counters('hivenet.other', false);
SELECT hivenet._create_decision_counters(n.namespace, false)
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps' ORDER BY 1) AS n;

-- The built-in format time_id (hivenet_db/sql/builtin_formats.json), compiled as a fresh
-- install compiles it, and its one scope, prepared as a fresh install prepares it (parked on
-- a database that may not issue it: time_ids.sql).
INSERT INTO hivenet.format
SELECT f.*
FROM jsonb_populate_record(hivenet._compile_format('time_id',
         '[{"time": "yyMMddHHmmss"}, {"seq_bits": 14, "reset": "second"}]', false,
         'time id (seed 004): a bigint, (yyMMddHHmmss << 14) | per-second sequence'),
     '{"builtin": true}') AS f;
SELECT hivenet._prepare_time_id_scope();
