-- Back from release 0.2.0 to 0.1.0: what the generated code cannot write, by hand, after it.

-- 0.1.0's _name_valid as its release wrote it. The revision copies a function from the
-- catalog, and the catalog of this one holds BETWEEN as an AND of its own inside the outer
-- AND, which PostgreSQL reads back as one flat AND: the same function, another catalog.
CREATE OR REPLACE FUNCTION hivenet._name_valid(p_value text) RETURNS boolean
LANGUAGE sql IMMUTABLE
BEGIN ATOMIC
    SELECT length(p_value) BETWEEN 1 AND 255 AND p_value !~ '[\x01-\x1f\x7f-\x9f]';
END;

-- The settings of the fence and of the bound on namespaces counted apart; and of the shared
-- fallback: 0.1.0 draws every unprepared scope from its format's cold counter.
DELETE FROM hivenet.setting
WHERE name IN ('failover_gap', 'failover_loss_window', 'max_counted_namespaces',
               'shared_fallback', 'promote_fallback_scopes');
