-- Objects outside schema hivenet that call a function this revision drops and makes again:
-- an application's column defaults (a serial column's DEFAULT hivenet.next_unified_serial(...))
-- are kept, dropped, and set again after the functions are made (restore_dependents.sql); the
-- migrating role must own their tables. Anything else (a view, a function with an SQL body, a
-- constraint, an index, a trigger) would be dropped with them: the upgrade stops, naming it.
DO $$
DECLARE
    v_functions regprocedure[] := ARRAY(
        SELECT to_regprocedure(f) FROM unnest(:'functions'::text[]) AS f);
    v_blocking text;
    v_kept jsonb;
    v_default record;
BEGIN
    SELECT string_agg(DISTINCT coalesce(  -- a view, rather than its rule
               (SELECT pg_describe_object('pg_class'::regclass, r.ev_class, 0)
                FROM pg_rewrite r WHERE d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid),
               pg_describe_object(d.classid, d.objid, d.objsubid)), '; ')
    INTO v_blocking
    FROM pg_depend d
    WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (v_functions)
      AND d.deptype = 'n' AND d.classid <> 'pg_attrdef'::regclass
      AND (CASE d.classid
               WHEN 'pg_proc'::regclass THEN
                   (SELECT p.pronamespace FROM pg_proc p WHERE p.oid = d.objid)
               WHEN 'pg_rewrite'::regclass THEN
                   (SELECT c.relnamespace FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
                    WHERE r.oid = d.objid)
               WHEN 'pg_trigger'::regclass THEN
                   (SELECT c.relnamespace FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                    WHERE t.oid = d.objid)
               WHEN 'pg_constraint'::regclass THEN
                   (SELECT k.connamespace FROM pg_constraint k WHERE k.oid = d.objid)
               WHEN 'pg_class'::regclass THEN
                   (SELECT c.relnamespace FROM pg_class c WHERE c.oid = d.objid)
           END) IS DISTINCT FROM 'hivenet'::regnamespace;
    IF v_blocking IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'dependent_objects_still_exist',
            MESSAGE = format('this upgrade makes functions of schema hivenet again, and %s '
                             'calls one of them: drop it before the upgrade and make it again '
                             'after', v_blocking);
    END IF;
    FOR v_default IN
        SELECT a.adrelid::regclass AS relation, c.relowner, t.attname,
               pg_get_expr(a.adbin, a.adrelid) AS expression
        FROM pg_depend d
        JOIN pg_attrdef a ON d.classid = 'pg_attrdef'::regclass AND a.oid = d.objid
        JOIN pg_attribute t ON t.attrelid = a.adrelid AND t.attnum = a.adnum
        JOIN pg_class c ON c.oid = a.adrelid
        WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid = ANY (v_functions)
          AND c.relnamespace <> 'hivenet'::regnamespace
        ORDER BY 1, 3
    LOOP
        IF NOT pg_has_role(v_default.relowner, 'USAGE') THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = format('the default of column %s of table %s calls a function of '
                                 'schema hivenet that this upgrade makes again: run the upgrade '
                                 'as a member of the table''s owner, %s, or drop the default '
                                 'before it and set it again after', v_default.attname,
                                 v_default.relation, v_default.relowner::regrole);
        END IF;
        v_kept := coalesce(v_kept, '[]') || jsonb_build_object('relation', v_default.relation,
            'column', v_default.attname, 'expression', v_default.expression);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', v_default.relation,
                       v_default.attname);
    END LOOP;
    PERFORM set_config('hivenet.revision_kept_defaults', coalesce(v_kept, '[]')::text, true);
END $$;
