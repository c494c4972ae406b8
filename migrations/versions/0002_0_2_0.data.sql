-- Release 0.2.0 from 0.1.0: rows, written by hand, after the code.

-- The counters of the steps' decisions and of those without a namespace of their own, and of
-- every namespace that started keys under 0.1.0, so that its refusals are counted under its
-- own name (decisions.sql).
SELECT hivenet._create_decision_counters('hivenet.steps', false);
SELECT hivenet._create_decision_counters('hivenet.other', false);
SELECT hivenet._create_decision_counters(n.namespace, false)
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps' ORDER BY 1) AS n;

-- Who began an attempt and when: the table's column defaults, which every writer of an
-- attempt (view _new_attempt) leaves to them. Set after the code, and not when the columns
-- are added: a volatile default of ADD COLUMN would be written into every existing row.
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN started_at SET DEFAULT hivenet.now(),
    ALTER COLUMN called_by SET DEFAULT coalesce(nullif(current_setting('role'), 'none'),
                                                session_user::text),
    ALTER COLUMN application_name SET DEFAULT nullif(current_setting('application_name'), ''),
    ALTER COLUMN client_addr SET DEFAULT inet_client_addr();

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
-- The fence takes itself (failover.sql): this timeline counts as fenced when 0.1.0 recorded
-- a fence of it (or the install on it); else the next allocation fences it. And its settings.
SELECT setval('hivenet.fenced_timeline', coalesce(
    (SELECT f.timeline FROM hivenet.failover_fence f
     ORDER BY f.timeline = hivenet._timeline() DESC, f.timeline DESC LIMIT 1), 0));
INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('failover_gap', '100000', 'count',
     'how far a fence moves every counter (the first allocation on a new timeline, maintain(), '
     'failover-fence without --gap): at least the serials one format issues in '
     'failover_loss_window at its peak rate'),
    ('failover_loss_window', '30 seconds', 'interval',
     'the longest stretch of commits a failover may lose, as your HA manager bounds it; '
     'replication_warning() says when a format''s peak rate over it exceeds failover_gap');
INSERT INTO hivenet.setting (name, value, kind, description) VALUES
    ('max_counted_namespaces', '100', 'count',
     'most namespaces of keyed requests the application makes decision counters for (six '
     'sequences each; metric hivenet_request_decisions_total); begins in further ones count '
     'under hivenet.other, but those with a policy of their own (set_namespace_policy)');
