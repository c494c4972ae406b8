-- Raw baseline: an unpartitioned table with the same columns, defaults and indexes
-- as hivenet.interface_call (dedup.sql), into which the baseline inserts the values a claim
-- records. Emptied here so that every run starts equal (setups may run again).
CREATE TABLE IF NOT EXISTS public.bench_interface_call (
    interface_serial text NOT NULL,
    serial_day       date NOT NULL,
    unified_serial   text,
    system_serial    text,
    recorded_at      timestamptz NOT NULL,
    call_order       bigserial,
    PRIMARY KEY (interface_serial, serial_day)
);
CREATE INDEX IF NOT EXISTS bench_interface_call_unified ON public.bench_interface_call
    (unified_serial) WHERE unified_serial IS NOT NULL;
TRUNCATE public.bench_interface_call;
