-- Raw baseline: seed 002's unique_record, a table with a unique (namespace, key).
CREATE TABLE IF NOT EXISTS public.bench_unique_record (
    namespace text NOT NULL,
    key       text NOT NULL,
    PRIMARY KEY (namespace, key)
);
