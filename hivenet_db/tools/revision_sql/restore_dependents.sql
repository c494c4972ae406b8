-- The column defaults keep_dependents.sql kept, set again: their expressions, read again,
-- call the functions just made.
DO $$
DECLARE
    v_default record;
BEGIN
    FOR v_default IN
        SELECT * FROM jsonb_to_recordset(
            current_setting('hivenet.revision_kept_defaults')::jsonb)
            AS k (relation text, "column" text, expression text)
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', v_default.relation,
                       v_default."column", v_default.expression);
    END LOOP;
END $$;
