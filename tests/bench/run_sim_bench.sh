#!/bin/sh
# Simulation speed of dsmpi's simulator (GPT-3 175B on 1024 and 4096 GPUs).
# Each case runs in its own process so the peak resident memory is its own.
# Usage: tests/bench/run_sim_bench.sh [BUILD_DIR]   (default: build)
set -e
BUILD=${1:-build}
BENCH=$BUILD/tests/bench/sim_bench
[ -x "$BENCH" ] || { echo "build $BENCH first: cmake --build $BUILD --target sim_bench" >&2; exit 2; }
echo "# dsmpi simulator speed, $(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), load: $(cut -d' ' -f1-3 /proc/loadavg)"
for case in sym-layer sym-stage full-1024 full-4096 space-layer space-stage; do
    "$BENCH" "$case"
done
