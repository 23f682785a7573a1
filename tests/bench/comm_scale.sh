#!/bin/sh
# Leave-scale-out accuracy of the communication model on real nccl-tests
# logs: for every data set with three or more node counts, fit on the logs
# of at most two nodes (then of at most four), predict every larger node
# count with `dsmpi comm --nccl-tests <fit logs> --gpus N --json`, and print
# per collective and target size the median and max |error| (all sizes and
# sizes >= 64 KiB), the signed median error over sizes >= 64 KiB (< 0: the
# prediction is too fast), and the share of measured points inside the
# predicted band ("-" where the model gives no band around its value; the
# band is sized without the data set's own errors: --band-leave-out) and
# inside [ring-only, tree-only].  Then the targets a row misses: median
# |e| <= 10%, max |e| <= 25%, |signed median| <= 5%, band covering >= 90%
# of the points; the signed median error of each part of the size range
# (latency: below 64 KiB, mid: 64 KiB - 4 MiB, bandwidth: 4 MiB up); and,
# where a target is missed, the part that errs most and which way: the
# effect behind the miss (README, "How far communication extrapolates").
#
#   tests/bench/comm_scale.sh [BUILD_DIR] [SHARED_DATA]
#
# Data sets: tests/data/nccl-tests/a100-azure-ndv4 and every folder of
# SHARED_DATA/nccl-tests (default: $DSMPI_SHARED_DATA, else the build's
# DSMPI_SHARED_DATA, the folder the tests read: ../shared/data beside the
# project unless configured otherwise; never copied into it).  Set COMM_SCALE_ARGS="--verbose"
# for every size.  Builds dsmpi and comm_scale if needed.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
configured=$(sed -n 's/^DSMPI_SHARED_DATA:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)
shared=${2:-${DSMPI_SHARED_DATA:-${configured:-$root/../shared/data}}}
cmake --build "$build" --target comm_scale dsmpi_tool -j2 >/dev/null
dsmpi=$build/apps/dsmpi/dsmpi

sets=$root/tests/data/nccl-tests/a100-azure-ndv4
if [ -d "$shared/nccl-tests" ]; then
    for dir in "$shared"/nccl-tests/*/; do
        dir=${dir%/}
        # the copy under tests/data is the same data
        [ "$(basename "$dir")" = a100-azure-ndv4 ] && continue
        ls "$dir"/*.log >/dev/null 2>&1 && sets="$sets $dir"
    done
else
    echo "# no public logs at $shared/nccl-tests (pass the folder or set DSMPI_SHARED_DATA):"
    echo "# only tests/data's, which cover too few node counts"
fi

echo "# comm_scale: leave-scale-out relative time errors of the communication model"
echo "# $("$dsmpi" --version 2>/dev/null | head -1)"
echo "# data sets:"
for dir in $sets; do
    printf '#   %-18s %s\n' "$(basename "$dir")" "$(sed -n '1s/^# *//p' "$dir/README.md" 2>/dev/null)"
done
for nodes in 2 4; do
    echo "#"
    echo "# fitted on the logs of at most $nodes nodes; every larger node count predicted"
    header=--header
    for dir in $sets; do
        # shellcheck disable=SC2086
        "$build/tests/bench/comm_scale" --dsmpi "$dsmpi" --fit-nodes $nodes $header \
            --name "$(basename "$dir")" ${COMM_SCALE_ARGS:-} "$dir"/*.log
        header=
    done
done
