#!/bin/bash
# The prototypes of docs/benchmarks.md ("What the claim and step goals would take"), on a
# scratch database migrated to head whose server runs nothing else:
#     bash bench/prototypes/run.sh postgresql://owner@127.0.0.1:PORT/db
# Backend CPU per statement (bench/probe_cpu.py), then pgbench A/B of the step prototypes
# (16 clients, prepared, rounds alternating, median tps). About 10 minutes. Checkpoints add
# full-page images to whichever statement runs after them: give the server a long
# checkpoint_timeout and max_wal_size for the run.
set -euo pipefail
url=$1
here=$(cd "$(dirname "$0")" && pwd)
scenarios=$here/../../hivenet_db/bench/scenarios
python=${PYTHON:-python3}
pgbin=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
psql -q -v ON_ERROR_STOP=1 "$url" -f "$scenarios/dedup_interface/setup.sql" \
    -f "$scenarios/steps_begin_finish/setup.sql" -f "$here/objects.sql"

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

echo "== a step begun and finished: pgbench tps (16 clients, 3 rounds of 8 s)"
scripts=$(mktemp -d)
cp "$scenarios/steps_begin_finish/baseline.sql" "$scripts/raw.sql"
cp "$scenarios/steps_begin_finish/candidate.sql" "$scripts/functions.sql"
for view in step_begin step_begin_unchecked; do
    sed -n '/^SELECT/,/gset$/{p;/gset$/q}' "$scenarios/steps_begin_finish/candidate.sql" > "$scripts/$view.sql"
    cat >> "$scripts/$view.sql" <<SQL
BEGIN;
INSERT INTO prototype.$view VALUES (:serial, '{"amount": 100, "account": "6222020000000001"}', :unified) RETURNING 1 AS attempt \gset
INSERT INTO prototype.step_finish VALUES (:serial, :attempt, true, '{"ok": true}') RETURNING 1;
END;
SQL
done
declare -A tps
names="raw functions step_begin step_begin_unchecked"
for round in 1 2 3; do
    order=$names
    (( round % 2 )) || order=$(echo $names | tr ' ' '\n' | tac | tr '\n' ' ')
    for name in $order; do
        t=$("$pgbin/pgbench" -n -M prepared -c 16 -j 2 -T 8 -f "$scripts/$name.sql" "$url" 2>&1 \
            | sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p')
        tps[$name]="${tps[$name]:-} $t"
    done
done
for name in $names; do
    median=$(echo ${tps[$name]} | tr ' ' '\n' | sort -n | sed -n 2p)
    echo "$name median $median (${tps[$name]} )"
done
rm -rf "$scripts"
