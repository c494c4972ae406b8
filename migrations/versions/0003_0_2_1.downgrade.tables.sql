-- Back from release 0.2.1 to 0.2.0: tables, types and sequences, written by hand (the code
-- around them is written from the schema files: hivenet_db/tools/revision.py).

DROP SEQUENCE hivenet.fenced_at, hivenet.fenced_gaps;
