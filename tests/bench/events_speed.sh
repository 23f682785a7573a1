#!/bin/bash
# Time of `dsmpi events` (generation + deduplication + report) for large
# targets: median and spread of N runs.  Usage: events_speed.sh [BUILD_DIR] [N]
set -eu
build=${1:-build}
runs=${2:-7}
dsmpi=$build/apps/dsmpi/dsmpi
echo "# dsmpi events: wall time per run (median, min, max over $runs runs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "# %-60s %10s %10s %10s %12s %8s\n" "case" "median_ms" "min_ms" "max_ms" "events" "unique"
bench() {
    local label=$1
    shift
    local times=()
    for _ in $(seq "$runs"); do
        local t0 t1
        t0=$(date +%s%N)
        "$dsmpi" events "$@" --top 0 >/tmp/dsmpi_bench_events.$$
        t1=$(date +%s%N)
        times+=($(((t1 - t0) / 1000)))
    done
    local sorted
    sorted=($(printf "%s\n" "${times[@]}" | sort -n))
    local n=${#sorted[@]}
    local total unique
    total=$(awk '/^  total/ {print $2}' /tmp/dsmpi_bench_events.$$)
    unique=$(awk '/^  total/ {print $3}' /tmp/dsmpi_bench_events.$$)
    printf "  %-60s %10.1f %10.1f %10.1f %12s %8s\n" "$label" "$(echo "${sorted[$((n / 2))]} / 1000" | bc -l)" \
        "$(echo "${sorted[0]} / 1000" | bc -l)" "$(echo "${sorted[$((n - 1))]} / 1000" | bc -l)" "$total" "$unique"
    rm -f /tmp/dsmpi_bench_events.$$
}
bench "gpt3-175b dp=16,tp=8,pp=8,mbs=1,gbs=1536 on 1024" --model gpt3-175b --strategy dp=16,tp=8,pp=8,mbs=1,gbs=1536 --target-gpus 1024
bench "gpt3-175b tp=8,pp=8,mbs=1,gbs=1536 on 4096" --model gpt3-175b --strategy tp=8,pp=8,mbs=1,gbs=1536 --target-gpus 4096
bench "llama3-405b tp=8,pp=9,sp,zero=1,gbs=2048 on 9216" --model llama3-405b --strategy tp=8,pp=9,mbs=1,gbs=2048,sp,zero=1 --target-gpus 9216
bench "megatron-1t tp=8,pp=64,gbs=3072 on 3072" --model megatron-1t --strategy tp=8,pp=64,mbs=1,gbs=3072 --target-gpus 3072
