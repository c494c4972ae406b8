-- The business table of alloc_in_txn, and the rejected design: one counter row per scope.
CREATE TABLE IF NOT EXISTS public.bench_order (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    serial  text,
    created timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.bench_counter (
    scope text PRIMARY KEY,
    v     bigint NOT NULL
);
