-- Release 0.2.0 from 0.1.0: rows, written by hand, after the code.

-- The counters of the steps' decisions and of those without a namespace of their own, and of
-- every namespace that started keys under 0.1.0, so that its refusals are counted under its
-- own name (decisions.sql).
SELECT hivenet._create_decision_counters('hivenet.steps', false);
SELECT hivenet._create_decision_counters('hivenet.other', false);
SELECT hivenet._create_decision_counters(n.namespace, false)
FROM (SELECT DISTINCT a.namespace FROM hivenet.request_attempt a
      WHERE a.namespace <> 'hivenet.steps' ORDER BY 1) AS n;
