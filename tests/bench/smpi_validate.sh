#!/bin/sh
# The virtual-cluster validation at 64, 256 and 1024 devices (SimGrid SMPI):
# profile communication on 4 simulated ranks, predict, run the executor on
# the whole simulated cluster with the replay backend, compare; the ranking
# of 12 strategies at 256 devices.  Prints the error table of
# tests/smpi/protocol.py and writes it as JSON.  Simulated time does not
# depend on the machine's load, but the simulation takes CPU: an executor
# run took 17-112 s at 64 devices, 71-282 s at 256 and 189-560 s at 1024 on
# a shared 2-core machine, two at a time.
# Usage: smpi_validate.sh [BUILD_DIR] [SIZES] [WORK_DIR]
#   BUILD_DIR   the normal build (default build); the SMPI build goes to
#               BUILD_DIR/tests/smpi/smpi-build (built when missing)
#   SIZES       comma-separated (default 64,256,1024)
#   WORK_DIR    the runs (default BUILD_DIR/tests/smpi/bench)
# Environment: KEEP_RUNS=1 reuses the executor runs already in WORK_DIR
# (resume an interrupted run); JOBS=N runs N executor cases at once (default
# the number of cores); SET=moe-cp runs the mixture-of-experts and
# context-parallel cases instead (sizes 64,256; no ranking).
set -eu
build=${1:-build}
sizes=${2:-64,256,1024}
here=$(cd "$(dirname "$0")/../.." && pwd)
work=${3:-$build/tests/smpi/bench}
smpi=$build/tests/smpi/smpi-build
sh "$here/tests/smpi/build_smpi.sh" "$here" "$smpi" >/dev/null
mkdir -p "$work"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -n), load $(cut -d' ' -f1-3 /proc/loadavg), $(smpirun -version 2>&1 | head -1)"
python3 "$here/tests/smpi/protocol.py" --dsmpi "$build/apps/dsmpi/dsmpi" \
    --dsmpi-smpi "$smpi/apps/dsmpi/dsmpi" --platforms "$here/tests/data/smpi" \
    --work "$work" --sizes "$sizes" --set "${SET:-bench}" \
    --ranking "$([ "${SET:-bench}" = bench ] && echo 256 || echo 0)" --json "$work/smpi_validate.json" \
    --jobs "${JOBS:-$(nproc)}" ${KEEP_RUNS:+--keep-runs}
