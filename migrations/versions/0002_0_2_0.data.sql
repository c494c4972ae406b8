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
