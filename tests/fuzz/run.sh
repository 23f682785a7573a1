#!/bin/bash
# Runs every libFuzzer target (or those named after the build directory) for
# SECONDS each (default 600) from a clang build, starting from the committed
# corpus; new crashing inputs land in tests/fuzz/findings/<target>/.
#   tests/fuzz/run.sh [SECONDS] [BUILD_DIR] [TARGET...]
set -eu
seconds=${1:-600}
build=${2:-build-fuzz}
shift $(($# < 2 ? $# : 2))
targets=${*:-fuzz_model_json fuzz_cluster_json fuzz_text fuzz_nccl_tests fuzz_cli fuzz_torch_trace}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
if [ ! -x "$build/tests/fuzz/fuzz_cli_libfuzzer" ]; then
    CC=clang cmake -S "$top" -B "$build" -DDSMPI_FUZZ=ON -DDSMPI_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j2 >/dev/null
printf "# %-20s %10s %12s %10s %s\n" target seconds executions exec_per_s result
for target in $targets; do
    work=$(mktemp -d)
    cp "$here/corpus/$target"/* "$work/" 2>/dev/null || true
    mkdir -p "$here/findings/$target"
    log=$work/log
    extra=()
    # The commands print their results and errors (keep libFuzzer's own output only),
    # and a whole command may legitimately take seconds.
    [ "$target" = fuzz_cli ] && extra=(-close_fd_mask=3 -max_len=8192 -timeout=30)
    set +e
    "$build/tests/fuzz/${target}_libfuzzer" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
        -timeout=10 -print_final_stats=1 "${extra[@]}" -artifact_prefix="$here/findings/$target/" "$work" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    [ -n "$execs" ] || execs=0
    result=ok
    [ "$rc" -eq 0 ] || result="FOUND (see $log and findings/$target)"
    printf "  %-20s %10s %12s %10s %s\n" "$target" "$seconds" "$execs" "$((execs / seconds))" "$result"
    [ "$rc" -eq 0 ] && rm -rf "$work"
done
