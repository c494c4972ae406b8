-- A business table the 5 ms transaction writes to.
CREATE TABLE IF NOT EXISTS public.bench_order (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    serial  text,
    created timestamptz NOT NULL DEFAULT clock_timestamp()
);
SELECT hivenet.prepare_scope('unified', '{"system": "C0001", "module": "A01", "instance": "01"}');
