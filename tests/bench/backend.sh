#!/bin/sh
# Backend figures on one rank (one device): GEMM throughput, then the time
# to prepare and measure every unique compute event of the demo case
# (GPT-2 medium, dp=64 tp=4 pp=4 mbs=2 on 1024 GPUs).  Prints the machine's
# load before and after: on a shared machine, read the figures with it.
#   tests/bench/backend.sh [build dir] [bench_backend options...]
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
bench="$build/tests/bench/bench_backend"
if [ ! -x "$bench" ]; then
    echo "backend.sh: $bench not found (build the project first)" >&2
    exit 2
fi
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1
echo "# load before: $(cat /proc/loadavg)"
mpiexec -n 1 "$bench" "$@"
echo "# load after: $(cat /proc/loadavg)"
