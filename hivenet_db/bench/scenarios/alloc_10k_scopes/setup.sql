-- 10,000 prepared counter scopes of the unified format, each its own sequence: systems
-- S0000..S0999 x instances 01..10, prepared as at deployment (`hivenet-db prepare`: 500 a
-- transaction). A scope prepared already is left as it is, so the setup can run again. Under
-- --check and --quick (bench_small on) 100 systems only.
SELECT set_config('bench.systems', CASE WHEN :'bench_small' = 'on' THEN '100' ELSE '1000' END,
                  false);
\ir ../_shared/prepare_scopes.sql
