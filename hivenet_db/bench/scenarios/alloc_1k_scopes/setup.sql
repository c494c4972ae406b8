-- 1,000 prepared counter scopes of the unified format: systems S0000..S0099 x instances
-- 01..10 (as alloc_10k_scopes, smaller; under --check and --quick 100 systems too).
SELECT set_config('bench.systems', '100', false);
\ir ../_shared/prepare_scopes.sql
