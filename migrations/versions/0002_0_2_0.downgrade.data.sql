-- Back from release 0.2.0 to 0.1.0: rows, written by hand, after the code.

-- 0.1.0 draws every unprepared scope from its format's cold counter: no setting says so.
DELETE FROM hivenet.setting WHERE name IN ('shared_fallback', 'promote_fallback_scopes');
