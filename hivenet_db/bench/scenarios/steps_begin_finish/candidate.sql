-- hivenet.begin_step + hivenet.finish_step of a new step in one transaction, as the Python
-- layer calls it (request fingerprinted, unified serial recorded and validated).
SELECT nextval('bench_step_n') AS n \gset
BEGIN;
SELECT attempt FROM hivenet.begin_step('C0001A010120261121' || lpad(:n::text, 12, '0'), '{"amount": 100, "account": "6222020000000001"}', 'replay', 'C0001A0101202611210000000001') \gset
SELECT hivenet.finish_step('C0001A010120261121' || lpad(:n::text, 12, '0'), :attempt, true, '{"ok": true}');
END;
