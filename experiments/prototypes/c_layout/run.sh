#!/bin/bash
# The prototype of docs/benchmarks.md "What C layout checks would give": builds and installs
# layout_check.c (as root; needs gcc and postgresql-server-dev-15), then runs issue 13's steps
# scenario four ways against its raw insert + update, with the benchmark runner's own server:
#   steps_view            as shipped: view hivenet._step_start, then finish_step
#   steps_c               the start view's two layout checks as one C call each (start_view.sql)
#   steps_c_rawfinish     steps_c finished by a raw UPDATE (no function: a free finish)
#   steps_view_rawfinish  as shipped, finished by a raw UPDATE
#     bash experiments/prototypes/c_layout/run.sh [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=$(cd "$here/../../../hivenet_db/bench/scenarios/steps_begin_finish" && pwd)
python=${PYTHON:-python3}
make -s -C "$here" install
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for name in steps_view steps_c steps_c_rawfinish steps_view_rawfinish; do
    mkdir "$dir/$name"
    cp "$steps/baseline.sql" "$steps/candidate.sql" "$steps/params.json" "$dir/$name/"
    echo "\\i $steps/setup.sql" > "$dir/$name/setup.sql"
    case $name in steps_c*) echo "\\i $here/start_view.sql" >> "$dir/$name/setup.sql" ;; esac
    "$python" - "$dir/$name/candidate.sql" "$name" <<'PY'
import sys
path, name = sys.argv[1], sys.argv[2]
script = open(path).read()
if name.startswith("steps_c"):
    script = script.replace("INSERT INTO hivenet._step_start ", "INSERT INTO prototype._step_start_c ")
if name.endswith("rawfinish"):
    script = script.replace(
        "SELECT hivenet.finish_step(:serial, :attempt, true, '{\"ok\": true}');",
        "UPDATE hivenet.request_attempt SET state = 'success', finished_at = hivenet.now(),"
        " response = '{\"ok\": true}' WHERE namespace = 'hivenet.steps' AND key = :serial"
        " AND attempt = :attempt AND state = 'processing';")
open(path, "w").write(script)
PY
done
"$python" -m hivenet_db.bench --scenarios-dir "$dir" --rounds "${1:-5}"
