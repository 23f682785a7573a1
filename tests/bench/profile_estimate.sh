#!/bin/bash
# The profiling time `dsmpi profile --dry-run` predicts (to size #SBATCH
# --time) against the time the real profile then takes, per phase, on 2
# ranks with a fresh database each time, for three cases:
#   demo        what `dsmpi run --demo` profiles (gpt2-medium dp=64,tp=4,pp=4
#               on 1024 GPUs, sweep up to 64 MiB)
#   tiny-llama  tests/data/validate/tiny-llama.json, dp=2,tp=2,pp=2,mbs=2 on
#               8 GPUs, the default sweep (up to 256 MiB)
#   gpt2-search gpt2-medium, seq 512, every candidate of a search space
#               (--search --fix tp=2,mbs=1) on 16 GPUs, sweep up to 16 MiB
# and how far the progress lines' ETA was from the phase's real end.
# Prints the machine's load before and after each case: the machine is
# shared, and a busy core makes every phase slower than a calibration a
# second long saw; rerun when the load moved.
#   Usage: profile_estimate.sh [BUILD_DIR] [CASE...]
set -eu
build=${1:-build}
shift || true
cases=${*:-demo tiny-llama gpt2-search}
dsmpi=$(cd "$build" && pwd)/apps/dsmpi/dsmpi
data=$(cd "$(dirname "$0")/../data/validate" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 DS_PROGRESS_PERIOD_S=${DS_PROGRESS_PERIOD_S:-5}
mpiexec=${MPIEXEC:-mpiexec --oversubscribe}

args_of() {
    case $1 in
    demo) echo "--demo --sweep-max 64MiB" ;;
    tiny-llama) echo "--model $data/tiny-llama.json --strategy dp=2,tp=2,pp=2,mbs=2 --global-batch 16 --target-gpus 8" ;;
    gpt2-search) echo "--model gpt2-medium --seq-len 512 --search --fix tp=2 --fix mbs=1 --global-batch 64 --target-gpus 16 --sweep-max 16MiB" ;;
    *) echo "unknown case '$1' (accepted: demo, tiny-llama, gpt2-search)" >&2; exit 2 ;;
    esac
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "# dsmpi profile --dry-run's expected time vs the real profile, 2 ranks on $(nproc) cores, fresh database"
printf "# %-12s %-13s %9s %9s %7s  %s\n" case phase predicted real ratio "load before -> after (1, 5, 15 min)"
printf "# %-12s %-13s %9s %9s %7s\n" "" "" "(s)" "(s)" "(r/p)"
for c in $cases; do
    dir=$work/$c
    mkdir -p "$dir"
    read -r -a args <<<"$(args_of "$c")"
    before=$(load)
    (cd "$dir" && $mpiexec -n 2 "$dsmpi" profile "${args[@]}" --profile-db db.h5 --dry-run --json \
        >dry.json 2>dry.err) || { echo "$c: dry run failed: $(tail -c 300 "$dir/dry.err")" >&2; exit 1; }
    rm -f "$dir/db.h5"
    (cd "$dir" && $mpiexec -n 2 "$dsmpi" profile "${args[@]}" --profile-db db.h5 --json \
        >run.json 2>run.err) || { echo "$c: profile failed: $(tail -c 300 "$dir/run.err")" >&2; exit 1; }
    after=$(load)
    python3 - "$c" "$dir/dry.json" "$dir/run.json" "$dir/run.err" "$before" "$after" <<'PY'
import json, re, sys
case, dry, run, err, before, after = sys.argv[1:]
p, r = json.load(open(dry)), json.load(open(run))
rows = [("layer passes", p["estimated_compute_s"], r["compute_wall_s"]),
        ("communication", p["estimated_comm_s"], r["comm_wall_s"]),
        ("writing", p["estimated_commit_s"], r["commit_wall_s"]),
        ("total", p["estimated_wall_s"], r["wall_s"])]
for i, (phase, predicted, real) in enumerate(rows):
    ratio = real / predicted if predicted > 0 else float("inf")
    note = f"{before} -> {after}" if i == 0 else ""
    print(f"  {case:<12} {phase:<13} {predicted:9.1f} {real:9.1f} {ratio:7.2f}  {note}")
# Progress lines: "profiling X: d/n done, E s elapsed, ETA T s": the end they
# predicted (E + T) against the phase's real length.
ends = {"layer passes": r["compute_wall_s"], "communication": r["comm_wall_s"]}
for what, real in ends.items():
    errors = []
    for line in open(err):
        m = re.search(r"profiling " + what + r": (\d+)/(\d+) done, (\d+) s elapsed, ETA (\d+) s", line)
        if m and int(m.group(1)) < int(m.group(2)) and real > 0:
            errors.append(abs(int(m.group(3)) + int(m.group(4)) - real) / real)
    if errors:
        print(f"# {case}: progress of the {what}: {len(errors)} lines, their predicted end "
              f"{100 * sum(errors) / len(errors):.0f}% from the real one on average (largest {100 * max(errors):.0f}%)")
calibration = (f"operators {p['compute_factor']:.2g}x the spec's roofline, collectives {p['comm_factor']:.2g}x, "
               f"barrier {1e6 * p['sync_s']:.1f} us" if p.get("calibrated") else "not calibrated")
print(f"# {case}: {r['units_measured']} layer passes in {p['compute_rounds']} rounds, "
      f"{r['comm_tasks'] - r['comm_tasks_reused']} communication tasks; calibration: {calibration}")
PY
done
