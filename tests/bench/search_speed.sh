#!/bin/bash
# Speed of `dsmpi search` on one core (one rank), roofline costs
# (--estimate-missing): median, min and max over N runs of
#   candidates/s   candidates ranked per second of search (lower bounds +
#                  simulations, branch and bound on): the search's rate;
#   simulated/s    fully simulated strategies per second of simulation time;
#   wall           the whole command (process start, enumeration, output).
# Cases: GPT-3 175B on 1024 GPUs (target >= 1000 candidates/s per core), the
# same with every candidate simulated (--no-bound) and at layer level, GPT-3
# 175B on 16,384 GPUs with every candidate simulated, and the full search of
# llama3-70b on 1024 and 4096 GPUs, and DeepSeek-V3 on 2048 H100 (experts,
# uneven pipeline ends; target: the whole command under 10 s).  Exhaustive
# search targets >= 5,000 simulated/s per core on both GPT-3 targets.  With
# --estimate-missing every case searches fused attention and fp8 as well.
# Usage: search_speed.sh [BUILD_DIR] [N]
set -eu
build=${1:-build}
runs=${2:-5}
dsmpi=$build/apps/dsmpi/dsmpi
echo "# dsmpi search speed, 1 rank: median [min, max] over $runs runs; load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
printf "# %-44s %10s %9s %9s %24s %24s %22s\n" "case" "candidates" "simulated" "skipped" "candidates/s" "simulated/s" "wall_s"

stats() { # median [min, max] of the numbers on stdin
    sort -g | awk '{v[NR] = $1} END {printf "%.4g [%.4g, %.4g]", v[int((NR + 1) / 2)], v[1], v[NR]}'
}

bench() {
    local label=$1
    shift
    local rates=() sims=() walls=() json
    json=$(mktemp)
    for _ in $(seq "$runs"); do
        local t0 t1
        t0=$(date +%s%N)
        "$dsmpi" search "$@" --estimate-missing --json >"$json"
        t1=$(date +%s%N)
        walls+=("$(echo "($t1 - $t0) / 1000000000" | bc -l)")
        read -r cand sim skipped rate simrate < <(python3 - "$json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c, t = d["counts"], d["time"]
search_s = t["bound_s"] + t["simulate_s"]
print(c["candidates"], c["simulated"], c["bounded"],
      c["candidates"] / search_s if search_s > 0 else 0,
      c["simulated"] / t["sim_cpu_s"] if t["sim_cpu_s"] > 0 else 0)
EOF
)
        rates+=("$rate")
        sims+=("$simrate")
    done
    rm -f "$json"
    printf "  %-44s %10s %9s %9s %24s %24s %22s\n" "$label" "$cand" "$sim" "$skipped" \
        "$(printf '%s\n' "${rates[@]}" | stats)" "$(printf '%s\n' "${sims[@]}" | stats)" \
        "$(printf '%s\n' "${walls[@]}" | stats)"
}

bench "gpt3-175b on 1024 GPUs" --model gpt3-175b --target-gpus 1024
bench "gpt3-175b on 1024 GPUs, --no-bound" --model gpt3-175b --target-gpus 1024 --no-bound
bench "gpt3-175b on 16384 GPUs, --no-bound" --model gpt3-175b --target-gpus 16384 --no-bound
bench "gpt3-175b on 1024 GPUs, layer level" --model gpt3-175b --target-gpus 1024 --layer-level
bench "llama3-70b on 1024 GPUs" --model llama3-70b --target-gpus 1024
bench "llama3-70b on 4096 GPUs" --model llama3-70b --target-gpus 4096
bench "deepseek-v3 on 2048 h100-sxm, --top 5" --model deepseek-v3 --target-gpus 2048 \
    --device h100-sxm --top 5
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
