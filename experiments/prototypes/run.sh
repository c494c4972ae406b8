#!/bin/bash
# The prototypes of docs/benchmarks.md ("What the claim and step goals would take"), on a
# scratch database migrated to head whose server runs nothing else:
#     bash experiments/prototypes/run.sh postgresql://owner@127.0.0.1:PORT/db
# Backend CPU per statement (experiments/probe_cpu.py), then the step prototypes as scenarios of
# the benchmark runner (`hivenet-db bench --scenarios-dir`, its own server). About 10
# minutes. Checkpoints add full-page images to whichever statement runs after them: give the
# scratch server a long checkpoint_timeout and max_wal_size for the run.
set -euo pipefail
url=$1
here=$(cd "$(dirname "$0")" && pwd)
scenarios=$here/../../hivenet_db/bench/scenarios
python=${PYTHON:-python3}
psql -q -v ON_ERROR_STOP=1 "$url" -f "$scenarios/dedup_interface/setup.sql" \
    -f "$here/objects.sql"

echo "== a claim: backend CPU per statement (µs)"
columns="(interface_serial, serial_day, unified_serial, system_serial, recorded_at)"
values="VALUES (%(serial)s, (now() AT TIME ZONE 'UTC')::date, %(unified)s, NULL, now())"
window="%(time)s::timestamp BETWEEN (now() AT TIME ZONE 'UTC') - interval '36 hours'
        AND (now() AT TIME ZONE 'UTC') + interval '14:05'"
"$python" "$here/../probe_cpu.py" --url "$url" --rounds 6 \
    "INSERT INTO public.bench_interface_call $columns $values ON CONFLICT DO NOTHING" \
    "INSERT INTO hivenet.interface_call $columns $values ON CONFLICT DO NOTHING" \
    "INSERT INTO hivenet.interface_call $columns SELECT %(serial)s,
        (now() AT TIME ZONE 'UTC')::date, %(unified)s, NULL, now() WHERE $window
        ON CONFLICT DO NOTHING" \
    "INSERT INTO hivenet.interface_call $columns
        SELECT %(serial)s, c.local_time::date, %(unified)s, NULL, c.now
        FROM (SELECT hivenet._serial_time('interface', %(serial)s) AS local_time,
                     hivenet.now() AS now OFFSET 0) c
        WHERE c.local_time >= (c.now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[1]
                              - hivenet._setting_constant('interface_window')::interval
          AND c.local_time <= (c.now AT TIME ZONE 'UTC') + (hivenet._caller_zones())[2]
                              + hivenet._setting_constant('interface_future_tolerance')::interval
          AND coalesce(hivenet._serial_shaped('unified', %(unified)s), true)
          AND hivenet._setting_constant('owned_instances') = 'all'
          AND to_regclass('hivenet.interface_call_' || to_char(c.local_time, 'YYYYMMDD'))
              IS NOT NULL
        ON CONFLICT DO NOTHING" \
    "INSERT INTO prototype.interface_claim VALUES (%(serial)s, %(unified)s, NULL)" \
    "INSERT INTO prototype.interface_claim_regex VALUES (%(serial)s, %(unified)s, NULL)" \
    "SELECT hivenet.claim_interface_serial(%(serial)s, %(unified)s)"

echo "== parts of a check: backend CPU per statement (µs)"
"$python" "$here/../probe_cpu.py" --url "$url" --rounds 6 \
    "SELECT %(serial)s::text = 'x'" \
    "SELECT %(serial)s::text ~ '^[0-9A-Za-z]{8}(0[1-9]|[1-9][0-9])[0-9A-Za-z]{5}[0-9]{4}(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01])([01][0-9]|2[0-3])[0-5][0-9][0-5][0-9][0-9]{10}$'" \
    "SELECT hivenet._serial_valid('interface', %(serial)s::text)" \
    "SELECT $window" \
    "SELECT jsonb_build_object('serial', %(serial)s::text)" \
    "SELECT hivenet._fingerprint(jsonb_build_object('serial', %(serial)s::text))" \
    "SELECT prototype.plain(%(serial)s::text)" \
    "SELECT prototype.definer(%(serial)s::text)" \
    "SELECT prototype.definer_set(%(serial)s::text)"

echo "== a step begun and finished: hivenet-db bench, its own server (3 rounds of 8 s)"
# Three scenarios against the raw insert + update (steps_begin_finish's baseline), run by the
# benchmark runner in a folder of their own: begin_step + finish_step, and the two rules.
folder=$(mktemp -d)
mkdir "$folder/functions" "$folder/step_begin" "$folder/step_begin_unchecked"
cp "$scenarios/steps_begin_finish/candidate.sql" "$folder/functions/"
for view in step_begin step_begin_unchecked; do
    sed -n '/^SELECT/,/gset$/{p;/gset$/q}' "$scenarios/steps_begin_finish/candidate.sql" \
        > "$folder/$view/candidate.sql"
    cat >> "$folder/$view/candidate.sql" <<SQL
BEGIN;
INSERT INTO prototype.$view VALUES (:serial, '{"amount": 100, "account": "6222020000000001"}', :unified) RETURNING 1 AS attempt \gset
INSERT INTO prototype.step_finish VALUES (:serial, :attempt, true, '{"ok": true}') RETURNING 1;
END;
SQL
done
for name in functions step_begin step_begin_unchecked; do
    cp "$scenarios/steps_begin_finish/baseline.sql" "$folder/$name/"
    printf '\\ir %s\n\\ir %s\n' "$scenarios/steps_begin_finish/setup.sql" "$here/objects.sql" \
        > "$folder/$name/setup.sql"
    echo "{\"clients\": 16, \"seconds\": 8, \"description\": \"$name vs raw insert + update\"}" \
        > "$folder/$name/params.json"
done
"$python" -m hivenet_db.bench --scenarios-dir "$folder" --rounds 3
rm -rf "$folder"
