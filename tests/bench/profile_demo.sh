#!/bin/bash
# Profiling the demo (gpt2-medium dp=64,tp=4,pp=4,mbs=2,gbs=1024 on 1024
# devices) on 2 ranks into a fresh database: unique vs total events, the
# wall time, and what profiling every event of one replica would take
# (computed from the measured costs).  Usage: profile_demo.sh [BUILD_DIR]
set -eu
build=${1:-build}
dsmpi=$(cd "$build" && pwd)/apps/dsmpi/dsmpi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
"$dsmpi" events --demo --top 0 | sed -n '/^# kind/,/^  total/p'
(cd "$work" && mpiexec -n 2 "$dsmpi" profile --demo --profile-db demo.h5 --sweep-max 64MiB --json \
    >profile.json 2>profile.err)
python3 - "$work/profile.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"# profiled on {d['ranks']} ranks: {d['units_measured']} layer passes ({d['compute_keys']} unique compute events) "
      f"and {d['comm_tasks'] - d['comm_tasks_reused']} communication tasks; target iteration: {d['target_events']} events")
print(f"# wall time {d['wall_s']:.1f} s: layer passes {d['compute_wall_s']:.1f} s, communication {d['comm_wall_s']:.1f} s, commit {d['commit_wall_s']:.2f} s")
for r in d["per_rank"]:
    print(f"#   rank {r['rank']}: predicted {r['predicted_s']:.1f} s, busy {r['busy_s']:.1f} s")
PY
"$build/tests/bench/profile_naive" "$work/demo.h5" gpt2-medium dp=64,tp=4,pp=4,mbs=2,gbs=1024 1024
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
