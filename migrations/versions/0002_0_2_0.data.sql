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
-- install compiles it; its one scope is prepared with it, as a fresh install prepares it
-- (parked on a database that may not issue it: counters.sql, _make_format_counters).
INSERT INTO hivenet.format
SELECT f.*
FROM jsonb_populate_record(hivenet._compile_format('time_id',
         '[{"time": "yyMMddHHmmss"}, {"seq_bits": 14, "reset": "second"}]', false,
         'time id (seed 004): a bigint, (yyMMddHHmmss << 14) | per-second sequence'),
     '{"builtin": true}') AS f;

-- The fence takes itself (failover.sql): this timeline counts as fenced when 0.1.0 recorded
-- a fence of it (or the install on it); else the next allocation (or prepare_scope below)
-- fences it. And its settings.
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

-- Unprepared scopes. 0.1.0 drew every one from its format's cold counter and maintain() gave
-- it a counter of its own; 0.2.0 refuses them (HN002) unless the format opts in to that
-- shared fallback. A database goes on as before for each format whose cold counter issued
-- serials, so that no allocation that worked before the upgrade is refused after it (turn
-- it off once its scopes are prepared: docs/operations.md).
INSERT INTO hivenet.setting (name, value, kind, description)
SELECT s.name, (SELECT coalesce(string_agg(f.name, ',' ORDER BY f.name), '')
                FROM hivenet.format f
                WHERE pg_sequence_last_value(('hivenet.'
                          || quote_ident(hivenet._cold_sequence_name(f.name)))::regclass)
                      IS NOT NULL),
       'text', s.description
FROM (VALUES
    ('shared_fallback',
     'formats (a list such as ''id_service,merchant_trade''; empty: none) whose scopes that '
     'are not prepared draw from the format''s shared fallback counter instead of being '
     'refused (HN002): unique and increasing, never from 1, one capacity for them all'),
    ('promote_fallback_scopes',
     'formats (a list; empty: none) whose scopes that drew from the shared fallback get a '
     'counter of their own from maintain()')) AS s (name, description);

-- A format with one scope (per_second; a custom one whose fields are printed only) has it
-- prepared with the format; here where this database may issue it (after the fallback, when
-- it drew from it: prepare_scope).
SELECT hivenet.prepare_scope(f.name, '{}')
FROM hivenet.format f
WHERE hivenet._one_scope(f)
  AND hivenet._not_owned(f, NULL, hivenet._setting_value('owned_instances'),
                         hivenet._setting_value('single_primary_formats')::boolean) IS NULL
ORDER BY f.name;
