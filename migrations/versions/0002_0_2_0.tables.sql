-- Release 0.2.0 from 0.1.0: tables, types and sequences, written by hand (the code around them
-- is written from the schema files: hivenet_db/tools/revision.py).

-- The policy of a namespace (set_namespace_policy): fingerprints, key rules, the audit chain,
-- the failure policy, expiry and how long failures are kept.
ALTER TABLE hivenet.request_namespace
    ALTER COLUMN retention DROP NOT NULL,
    ADD COLUMN fingerprint text,
    ADD COLUMN key_min_length integer,
    ADD COLUMN key_pattern text,
    ADD COLUMN audit_chain boolean,
    ADD COLUMN on_failure text,
    ADD COLUMN expire_after interval,
    ADD COLUMN failure_retention interval,
    ADD COLUMN keep_raw_request boolean;
COMMENT ON TABLE hivenet.request_namespace IS
    'the policy of a namespace of keyed requests (set_namespace_policy): retention, fingerprint, '
    'key rules, failure policy; NULL is the default';

-- Who began each attempt, its links in the namespace's audit chain, whether a client waits
-- for its outcome (watch_request), and the client's bytes where they are kept.
ALTER TABLE hivenet.request_attempt
    ADD COLUMN called_by text,
    ADD COLUMN application_name text,
    ADD COLUMN client_addr inet,
    ADD COLUMN chain_position bigint,
    ADD COLUMN chain_hash bytea,
    ADD COLUMN finish_position bigint,
    ADD COLUMN finish_hash bytea,
    ADD COLUMN awaited boolean,
    ADD COLUMN raw_request bytea;

CREATE TABLE hivenet.request_chain (
    namespace       text   PRIMARY KEY,
    position        bigint NOT NULL,  -- of the last link (0: none yet)
    head            bytea  NOT NULL,  -- its hash
    anchor_position bigint NOT NULL,  -- of the last link retention removed (0: none)
    anchor          bytea  NOT NULL   -- its hash (the empty string before the first link)
);
COMMENT ON TABLE hivenet.request_chain IS
    'the audit chain of a namespace of keyed requests: its head and the anchor retention left';

-- Expiry. ADD VALUE in this transaction: 'expired' may not be used before it commits, so
-- only PL/pgSQL bodies (read when they run) name it, and nothing here runs them.
ALTER TYPE hivenet.step_state ADD VALUE 'expired';
CREATE TABLE hivenet.request_expiry (
    namespace       text        PRIMARY KEY,
    expired_through timestamptz NOT NULL
);
COMMENT ON TABLE hivenet.request_expiry IS
    'how far maintain() has expired the processing attempts of each namespace with an '
    'expire_after (expiry.sql)';

-- Decision counts: which sequences count which decision of which namespace.
CREATE TABLE hivenet.decision_counter (
    namespace text     NOT NULL,
    decision  text     NOT NULL,
    counter   regclass NOT NULL,
    PRIMARY KEY (namespace, decision, counter)
);
COMMENT ON TABLE hivenet.decision_counter IS
    'the sequences that count the decisions of begin per namespace (view request_decisions)';
CREATE SEQUENCE hivenet.decision_counter_number;

-- Unprepared scopes: each draw from a format's shared fallback is recorded (fallback.sql), in
-- place of one pending row per scope. 0.1.0's pending scopes drew at some time: recorded as
-- scopes that drew in the current period (of no known count, so that a scope prepared today
-- starts after the fallback, and maintain() promotes them as before).
CREATE TABLE hivenet.fallback_draw (
    format  text NOT NULL,
    scope   text NOT NULL,
    fields  jsonb NOT NULL,   -- the counter-key fields, as hivenet.scope.fields
    period  bigint NOT NULL,  -- the clock's period of the draw (_period_index)
    serials bigint NOT NULL   -- how many serials it drew
);
COMMENT ON TABLE hivenet.fallback_draw IS
    'draws of unprepared scopes from their format''s shared fallback counter (setting '
    'shared_fallback), per scope and period';
CREATE INDEX fallback_draw_scope ON hivenet.fallback_draw (format, scope);
INSERT INTO hivenet.fallback_draw (format, scope, fields, period, serials)
SELECT DISTINCT ON (p.format, p.scope) p.format, p.scope, p.fields,
       hivenet._period_index(hivenet.now() AT TIME ZONE hivenet._setting_value('time_zone'),
                             f.reset), 0
FROM hivenet.scope_pending p JOIN hivenet.format f ON f.name = p.format
ORDER BY p.format, p.scope;
DROP TABLE hivenet.scope_pending;

-- Numeric formats (time_ids.sql): how far their time number is shifted left.
ALTER TABLE hivenet.format ADD COLUMN time_shift integer;

-- What a format does when the clock is behind the latest instant it issued (clock_policy.sql).
CREATE TABLE hivenet.clock_policy (
    format          text PRIMARY KEY REFERENCES hivenet.format (name),
    on_clock_behind text NOT NULL CHECK (on_clock_behind IN ('continue', 'wait', 'refuse')),
    max_wait        interval,
    CHECK ((on_clock_behind = 'wait') = (max_wait IS NOT NULL))
);
COMMENT ON TABLE hivenet.clock_policy IS
    'what a format does when the clock is behind the latest instant it issued '
    '(set_clock_policy); a format without a row continues';
-- The fence takes itself (failover.sql): the last timeline fenced, as a sequence (set in the
-- .data.sql), fences applied by an allocation, and the allocation rates maintain() samples.
CREATE SEQUENCE hivenet.fenced_timeline AS integer MINVALUE 0;
ALTER TABLE hivenet.failover_fence
    DROP CONSTRAINT failover_fence_applied_by_check,
    ADD CONSTRAINT failover_fence_applied_by_check
        CHECK (applied_by IN ('install', 'allocation', 'command', 'maintain'));
CREATE TABLE hivenet.allocation_rate (
    format        text PRIMARY KEY,
    timeline      integer NOT NULL,
    sampled_at    timestamptz NOT NULL,
    period_start  timestamp NOT NULL,
    issued        bigint,  -- NULL after a fence by command: no rate from it to the next
    day           date NOT NULL,
    peak          float8 NOT NULL DEFAULT 0,  -- serials a second, highest of day
    previous_peak float8 NOT NULL DEFAULT 0   -- ... of the day before day
);
COMMENT ON TABLE hivenet.allocation_rate IS
    'serials a second of each format, highest between two maintain() runs, today and yesterday';
