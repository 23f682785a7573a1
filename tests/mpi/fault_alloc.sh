#!/bin/bash
# Allocation failure at the N-th allocation (DS_FAULT_ALLOC_AT=N, a build
# with -DDSMPI_FAULT_INJECTION=ON) across whole runs:
#   - dsmpi predict from a complete database, every N up to its allocation
#     count, with every output (trace, timeline, chart);
#   - dsmpi run (profile + predict) on 2 ranks into a database holding an
#     earlier profile: 1, 2, 3 and 10 values of N spread over its count
#     (every N with FULL=1).
# Every run must end in bounded time with exit 1 or 2 and one line
# "dsmpi <command>: ..." on stderr (log lines "host:pid rN warn: ..." aside),
# no sanitizer report (leaks included, in a sanitizer build), the database
# either untouched or a complete database that still holds the earlier
# profile, and no temporary file left behind.
#   fault_alloc.sh DSMPI MODEL WORKDIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
dsmpi=$1 model=$2 work=$3 mpiexec=$4 npflag=$5
shift 5
preflags=("$@")
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0 runs=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
mpirun2() { timeout -k 5 120 "$mpiexec" "$npflag" 2 "${preflags[@]}" "$@"; }

export DS_MEASURE_BUDGET_S=0.01 DS_MEASURE_MIN_REPS=1 DS_MEASURE_WARMUP=1 DS_MEASURE_WARMUP_S=0
export DS_PROGRESS_PERIOD_S=0
base=(--model "$model" --target-gpus 8 --sweep-max 4KiB)
first=(--strategy tp=2,pp=2,mbs=1,gbs=8)
second=(--strategy tp=1,pp=2,mbs=2,gbs=8)
predict_args=(--model "$model" --target-gpus 8 "${first[@]}" --device cpu --profile-db ref.h5
              --trace out/trace.json --timeline out/timeline.h5 --svg out/chart.svg --microbatch-times)

# The count of allocations of a run: the largest any process printed.
count_of() { grep -o '^dsmpi: [0-9]* allocations' "$1" | grep -o '[0-9]*' | sort -n | tail -1; }

# check CASE COMMAND RC ERRFILE: the verdict on one run that had a failure injected.
check() {
    local case=$1 command=$2 rc=$3 err=$4
    runs=$((runs + 1))
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        fail "$case: no exit within the time bound"
        return
    fi
    [ "$rc" -eq 1 ] || [ "$rc" -eq 2 ] || fail "$case: exit $rc (expected 1 or 2)"
    if grep -qE 'Sanitizer|runtime error|Segmentation|core dumped|Aborted|exited on signal' "$err"; then
        fail "$case: crash or sanitizer report: $(grep -m1 -E 'Sanitizer|runtime error|Segmentation|core dumped|Aborted|exited on signal' "$err")"
    fi
    local lines
    lines=$(grep -c "^dsmpi $command: " "$err")
    [ "$lines" -eq 1 ] || fail "$case: $lines lines 'dsmpi $command: ...' on stderr (expected 1)"
}

# ---- predict: every N ----------------------------------------------------------------------
mpirun2 "$dsmpi" profile "${base[@]}" "${first[@]}" --profile-db ref.h5 --quiet >/dev/null 2>profile.err ||
    { echo "the reference profile failed:" >&2; cat profile.err >&2; exit 1; }
ref_sum=$(cksum <ref.h5)
mkdir -p out
DS_FAULT_ALLOC_AT=-1 "$dsmpi" predict "${predict_args[@]}" >/dev/null 2>count.err ||
    { echo "predict without a fault failed:" >&2; cat count.err >&2; exit 1; }
predict_count=$(count_of count.err)
[ -n "$predict_count" ] || { echo "no allocation count: not a fault-injection build?" >&2; exit 1; }
for n in $(seq 1 "$predict_count"); do
    rm -rf out && mkdir out
    DS_FAULT_ALLOC_AT=$n timeout -k 5 60 "$dsmpi" predict "${predict_args[@]}" >/dev/null 2>err
    check "predict N=$n" predict $? err
done
[ "$(cksum <ref.h5)" = "$ref_sum" ] || fail "predict changed its database"

# ---- run on 2 ranks: sampled N -----------------------------------------------------------------
# The earlier profile (the first strategy) is the state every failed run
# must leave intact.
run_args=("${base[@]}" "${second[@]}" --profile-db db.h5 --quiet --device cpu)
cp ref.h5 db.h5
DS_FAULT_ALLOC_AT=-1 mpirun2 "$dsmpi" run "${run_args[@]}" >/dev/null 2>count.err ||
    { echo "run without a fault failed:" >&2; cat count.err >&2; exit 1; }
run_count=$(count_of count.err)
if [ "${FULL:-0}" = 1 ]; then
    samples=$(seq 1 "$run_count")
else
    samples=$(python3 -c "n=$run_count; print(*sorted({1, 2, 3, n} | {1 + k * (n - 1) // 9 for k in range(10)}))")
fi
for n in $samples; do
    cp ref.h5 db.h5
    DS_FAULT_ALLOC_AT=$n mpirun2 "$dsmpi" run "${run_args[@]}" >/dev/null 2>err
    rc=$?
    # Counts vary a little with timing (measurement retries): a run whose
    # processes all ended before their N-th allocation had nothing injected,
    # as the counts they print show. No verdict.
    reached=$(count_of err)
    if [ "$rc" -eq 0 ] && [ -n "$reached" ] && [ "$reached" -lt "$n" ]; then
        continue
    fi
    check "run N=$n" run $rc err
    if [ "$(cksum <db.h5)" != "$ref_sum" ]; then
        # Committed before the failure: a complete database with the earlier profile in it.
        "$dsmpi" predict "${predict_args[@]:0:8}" --profile-db db.h5 >/dev/null 2>verify.err ||
            fail "run N=$n: the database no longer holds the earlier profile: $(head -1 verify.err)"
    fi
    if ls | grep -q '\.tmp\.'; then
        fail "run N=$n: temporary files left: $(ls | grep '\.tmp\.' | tr '\n' ' ')"
        rm -f ./*.tmp.*
    fi
done

echo "fault_alloc: predict failed cleanly at each of its $predict_count allocations; run (2 ranks, $run_count allocations) at $(echo "$samples" | wc -w) sampled ones; $runs runs, $failures failures"
[ "$failures" -eq 0 ] || exit 1
rm -rf "$work"
