#!/bin/sh
# Leave-one-out accuracy of the communication model on nccl-tests logs:
# each log is predicted from all the others; prints the relative time errors
# (median and max, %) per size band (<64KiB, 64KiB-1MiB, >=1MiB), then the
# fit's error on the points it was fitted on.
#
#   tests/bench/comm_loo.sh [BUILD_DIR] [LOG_DIR]
#
# Defaults: build/ and the A100 (Azure NDv4) logs under tests/data.  Set
# COMM_LOO_ARGS="--verbose" for every size.  Builds comm_loo if needed.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
logs=${2:-$root/tests/data/nccl-tests/a100-azure-ndv4}
cmake --build "$build" --target comm_loo -j2 >/dev/null
# shellcheck disable=SC2086
"$build/tests/bench/comm_loo" --device a100-40g --gpus-per-node 8 ${COMM_LOO_ARGS:-} \
    "$logs"/all_reduce_*.log
