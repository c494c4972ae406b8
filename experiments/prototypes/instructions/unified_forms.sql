-- Set-up of unified_forms.json, in a database with hivenet installed, scope C0001/A01/01
-- prepared and bench_formatted_seq made (the bench's alloc_formatted set-up), as a superuser.
-- fb: a fallback call with three text arguments (not inlined: SECURITY DEFINER, SET).
CREATE OR REPLACE FUNCTION public.fb(text, text, text) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT hivenet.next_serial('unified', jsonb_build_object('system', $1, 'module', $2,
                                                             'instance', $3))
$$;
-- lk: the look-up declared IMMUTABLE, so that the planner folds it for a literal scope into a
-- regclass constant (which invalidates the plan when the sequence goes). Not a form to ship:
-- for bound parameters it is not inlined and runs as a SQL function at every call.
CREATE OR REPLACE FUNCTION public.lk(text) RETURNS regclass
LANGUAGE sql IMMUTABLE AS $$ SELECT to_regclass($1) $$;
-- Sessions marked checked, as after their first allocation (failover.sql).
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET hivenet.timeline_checked = true', current_database());
END $$;
