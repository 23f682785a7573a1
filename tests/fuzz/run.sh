#!/bin/bash
# Runs every libFuzzer target for SECONDS each (default 600) from a clang
# build, starting from the committed corpus; new crashing inputs land in
# tests/fuzz/findings/<target>/.  Usage: tests/fuzz/run.sh [SECONDS] [BUILD_DIR]
set -eu
seconds=${1:-600}
build=${2:-build-fuzz}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
if [ ! -x "$build/tests/fuzz/fuzz_text_libfuzzer" ]; then
    CC=clang cmake -S "$top" -B "$build" -DDSMPI_FUZZ=ON -DDSMPI_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j2 >/dev/null
fi
printf "# %-20s %10s %12s %10s %s\n" target seconds executions exec_per_s result
for target in fuzz_model_json fuzz_cluster_json fuzz_text; do
    work=$(mktemp -d)
    cp "$here/corpus/$target"/* "$work/" 2>/dev/null || true
    mkdir -p "$here/findings/$target"
    log=$work/log
    set +e
    "$build/tests/fuzz/${target}_libfuzzer" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
        -timeout=10 -artifact_prefix="$here/findings/$target/" "$work" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    result=ok
    [ "$rc" -eq 0 ] || result="FOUND (see $log and findings/$target)"
    printf "  %-20s %10s %12s %10s %s\n" "$target" "$seconds" "$execs" "$((execs / seconds))" "$result"
    [ "$rc" -eq 0 ] && rm -rf "$work"
done
