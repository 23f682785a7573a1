#!/bin/sh
# Profile database write/read times on 2 ranks, median of 3 runs each.
#   tests/bench/store_bench.sh BUILD_DIR [DIRECTORY_FOR_THE_FILE]
# write: commit of N new records gathered from both ranks (temporary file,
# collective parallel HDF5 or rank 0 alone, rename); read: open (rank 0
# reads, broadcasts); rewrite: commit of one more record onto N (what a
# checkpoint costs).  Times are the slowest rank's.
set -eu
build=${1:?usage: store_bench.sh BUILD_DIR [DIRECTORY]}
if [ $# -ge 2 ]; then directory=$2 made=""; else directory=$(mktemp -d) made=$directory; fi
program=$build/tests/bench/bench_store
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
echo "# dsmpi profile database benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; file in $directory ($(stat -f -c %T "$directory"))"
echo "# median of 3 runs; the machine may be shared with other work"
printf '# %8s %6s %-10s %10s %10s %10s %10s\n' records ranks mode write read rewrite file
printf '# %8s %6s %-10s %10s %10s %10s %10s\n' "(count)" "(count)" "" "(s)" "(s)" "(s)" "(MiB)"
for records in 10000 100000; do
    for mode in collective serial; do
        DS_DB_WRITE_MODE=$mode mpiexec -n 2 "$program" "$directory/bench.h5" $records 3
    done
done
rm -f "$directory/bench.h5"
[ -z "$made" ] || rmdir "$made"
