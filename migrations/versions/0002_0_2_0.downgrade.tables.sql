-- Back from release 0.2.0 to 0.1.0: tables, types and sequences, written by hand (the code
-- around them is written from the schema files: hivenet_db/tools/revision.py). What 0.1.0
-- cannot hold goes: a namespace's policy but its retention, counts, callers, chains, waiters'
-- marks, numeric formats and clock policies; expired attempts become failed ones.

-- Numeric formats (time_id, and any defined since) and clock policies: 0.1.0 holds
-- neither. Their counters go with them; the format trigger, whose code is half gone by now,
-- stays off while their rows go (the script ends by writing the generated code again).
DROP TABLE hivenet.clock_policy;
DO $$
DECLARE
    v_counter text;
BEGIN
    FOR v_counter IN SELECT s.sequence_name FROM hivenet.scope s
                     JOIN hivenet.format f ON f.name = s.format WHERE f.time_shift IS NOT NULL
                     UNION ALL
                     SELECT 'cold_' || f.name FROM hivenet.format f WHERE f.time_shift IS NOT NULL
    LOOP
        EXECUTE format('DROP SEQUENCE IF EXISTS hivenet.%I', v_counter);
    END LOOP;
END $$;
DELETE FROM hivenet.fallback_draw
WHERE format IN (SELECT name FROM hivenet.format WHERE time_shift IS NOT NULL);
DELETE FROM hivenet.scope
WHERE format IN (SELECT name FROM hivenet.format WHERE time_shift IS NOT NULL);
ALTER TABLE hivenet.format DISABLE TRIGGER format_recompile;
DELETE FROM hivenet.format WHERE time_shift IS NOT NULL;
ALTER TABLE hivenet.format ENABLE TRIGGER format_recompile;
ALTER TABLE hivenet.format DROP COLUMN time_shift;

-- The fence's mark and the allocation rates (fences applied by an allocation are recorded as
-- by the command); its settings go in the .downgrade.data.sql, once the code that rewrites the
-- generated functions on a change of a setting is 0.1.0's again.
DROP TABLE hivenet.allocation_rate;
DROP SEQUENCE hivenet.fenced_timeline;
UPDATE hivenet.failover_fence SET applied_by = 'command' WHERE applied_by = 'allocation';
ALTER TABLE hivenet.failover_fence
    DROP CONSTRAINT failover_fence_applied_by_check,
    ADD CONSTRAINT failover_fence_applied_by_check
        CHECK (applied_by IN ('install', 'command', 'maintain'));

-- Unprepared scopes: the scopes that drew from a fallback and have no counter of their own
-- wait for maintain() again, one pending row each.
CREATE TABLE hivenet.scope_pending (
    format text NOT NULL,
    scope  text NOT NULL,
    fields jsonb NOT NULL
);
COMMENT ON TABLE hivenet.scope_pending IS
    'new counter scopes waiting for their own sequence (hivenet.maintain() creates it)';
CREATE INDEX scope_pending_scope ON hivenet.scope_pending (format, scope);
INSERT INTO hivenet.scope_pending (format, scope, fields)
SELECT DISTINCT ON (d.format, d.scope) d.format, d.scope, d.fields
FROM hivenet.fallback_draw d
WHERE NOT EXISTS (SELECT FROM hivenet.scope s WHERE s.format = d.format AND s.scope = d.scope)
ORDER BY d.format, d.scope;
DROP TABLE hivenet.fallback_draw;

-- Decision counts, with their counters.
DO $$
DECLARE
    v_counter regclass;
BEGIN
    FOR v_counter IN SELECT c.counter FROM hivenet.decision_counter c LOOP
        EXECUTE format('DROP SEQUENCE %s', v_counter);
    END LOOP;
END $$;
DROP TABLE hivenet.decision_counter;
DROP SEQUENCE hivenet.decision_counter_number;

-- The audit chain, who began each attempt, waiters' marks, clients' bytes; the clock's
-- default.
DROP TABLE hivenet.request_chain;
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN started_at DROP DEFAULT,
    DROP COLUMN called_by,
    DROP COLUMN application_name,
    DROP COLUMN client_addr,
    DROP COLUMN chain_position,
    DROP COLUMN chain_hash,
    DROP COLUMN finish_position,
    DROP COLUMN finish_hash,
    DROP COLUMN awaited,
    DROP COLUMN raw_request;

-- The policy of a namespace: only a retention stays.
DELETE FROM hivenet.request_namespace WHERE retention IS NULL;
ALTER TABLE hivenet.request_namespace
    DROP COLUMN fingerprint,
    DROP COLUMN key_min_length,
    DROP COLUMN key_pattern,
    DROP COLUMN audit_chain,
    DROP COLUMN on_failure,
    DROP COLUMN expire_after,
    DROP COLUMN failure_retention,
    DROP COLUMN keep_raw_request,
    ALTER COLUMN retention SET NOT NULL;
COMMENT ON TABLE hivenet.request_namespace IS
    'retention of the finished requests of a namespace, when not the setting request_retention';

-- Expiry: an expired attempt becomes failed (its note says so: the next begin_request retries
-- it, 0.1.0's only policy), and 'expired' leaves type step_state. PostgreSQL cannot drop a
-- value of an enum, so the type is made again without it (what reads it was dropped above)
-- and the column converted (the table is rewritten).
UPDATE hivenet.request_attempt
SET state = 'failed',
    note = concat_ws('; ', note, 'marked failed by the downgrade to 0.1.0 (it had expired)')
WHERE state = 'expired';
DROP TABLE hivenet.request_expiry;
ALTER TYPE hivenet.step_state RENAME TO step_state_0_2_0;
CREATE TYPE hivenet.step_state AS ENUM ('processing', 'success', 'failed');
ALTER TABLE hivenet.request_attempt
    ALTER COLUMN state TYPE hivenet.step_state USING state::text::hivenet.step_state;
DROP TYPE hivenet.step_state_0_2_0;
