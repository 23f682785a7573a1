#!/bin/bash
# One rank of `dsmpi profile` (2 ranks) killed with SIGKILL: while it
# measures layer passes (killed from outside), entering the gather of the
# database's commit (rank 1, and rank 0), and as rank 0 renames the complete
# temporary file over the database.  Every time mpiexec must end the job
# within BOUND seconds saying which rank died of which signal, no process of
# the job may be left, and the database must be byte for byte the last
# complete state (the earlier profile).  A rerun then completes, reusing
# what the database holds, and leaves no temporary file.
#   fault_kill.sh DSMPI SHIM MODEL WORKDIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
dsmpi=$1 shim=$2 model=$3 work=$4 mpiexec=$5 npflag=$6
shift 6
preflags=("$@")
bound=30
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0 checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); "$@" || fail "$case: $*"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

export DS_MEASURE_BUDGET_S=0.01 DS_MEASURE_MIN_REPS=1 DS_MEASURE_WARMUP=1 DS_PROGRESS_PERIOD_S=0
common=(--model "$model" --target-gpus 8 --sweep-max 4KiB --profile-db "$work/db.h5")
first=(--strategy tp=2,pp=2,mbs=1,gbs=8)
second=(--strategy tp=1,pp=2,mbs=2,gbs=8)
# The launched processes get the shim through the environment; it lets
# sanitizer builds run with a library ahead of the sanitizer runtime.
asan_preload="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

"$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${first[@]}" --quiet \
    >/dev/null 2>first.err || { echo "the first profile failed:" >&2; cat first.err >&2; exit 1; }
state=$(cksum <db.h5)

# killed CASE VICTIM PID ERRFILE START: the verdict once the job has ended.
killed() {
    local victim=$2 rc=$3 err=$4 start=$5
    local elapsed=$(($(date +%s%N) / 1000000 - start))
    echo "$case: mpiexec ended $elapsed ms after the kill, exit $rc"
    check test "$rc" -ne 0
    check test "$elapsed" -le $((bound * 1000))
    check grep -q "rank $victim .*exited on signal 9" "$err"
    check test "$(cksum <db.h5)" = "$state"
    if pgrep -f "$work/db.h5" >/dev/null; then
        fail "$case: processes of the job are left: $(pgrep -af "$work/db.h5")"
        pkill -9 -f "$work/db.h5"
    fi
}

# ---- killed from outside while measuring layer passes ---------------------------------
case=profiling
# Every pass repeats for its whole 1 s budget, so that rank 1 is caught measuring.
DS_MEASURE_BUDGET_S=1 DS_MEASURE_TARGET_CI=0 DS_MEASURE_MAX_REPS=10000000 "$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${second[@]}" \
    >/dev/null 2>"$case.err" &
launcher=$!
victim_pid=
for _ in $(seq 600); do
    if grep -q "profiling layer passes: [1-9]" "$case.err" 2>/dev/null; then
        for child in $(pgrep -P "$launcher"); do
            grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$child/environ" 2>/dev/null && victim_pid=$child
        done
        break
    fi
    sleep 0.05
done
if [ -z "$victim_pid" ]; then
    fail "$case: never saw rank 1 measuring layer passes"
    kill -9 "$launcher"
    wait "$launcher"
else
    kill -9 "$victim_pid"
    start=$(($(date +%s%N) / 1000000))
    timeout -k 5 $((bound * 2)) tail --pid="$launcher" -f /dev/null
    wait "$launcher"
    killed "$case" 1 $? "$case.err" "$start"
fi

# ---- killed at the commit: the gather, the rename -------------------------------------
for case in gather:1 gather:0 rename:0; do
    DSMPI_TEST_DIE=$case LD_PRELOAD=$shim ASAN_OPTIONS=$asan_preload timeout -k 5 $((bound * 2)) \
        "$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${second[@]}" \
        >/dev/null 2>"${case/:/-}.err"
    rc=$?
    death=$(grep -o "fault_shim: rank ${case#*:} dies at ${case%:*} (at [0-9]* ms)" "${case/:/-}.err" |
        grep -o '[0-9]* ms' | grep -o '[0-9]*')
    if [ -z "$death" ]; then
        fail "$case: the rank did not die where it should: $(head -3 "${case/:/-}.err")"
        continue
    fi
    killed "$case" "${case#*:}" $rc "${case/:/-}.err" "$death"
done
check ls ./*.tmp.* >/dev/null 2>&1 # the killed rename left its complete temporary file

# ---- the rerun completes ------------------------------------------------------------------
case=rerun
"$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${second[@]}" --json \
    >rerun.json 2>rerun.err
check test $? -eq 0
check test "$(json rerun.json 'd["units_reused"] + d["units_measured"] == d["units"] and not d["interrupted"]')" = True
check test -z "$(ls | grep '\.tmp\.')"
"$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${first[@]}" --json \
    >again.json 2>again.err
check test "$(json again.json 'd["units_measured"]')" -eq 0

if [ "$failures" -ne 0 ]; then
    echo "fault_kill: $failures of $checks checks failed" >&2
    exit 1
fi
echo "fault_kill: $checks checks passed"
rm -rf "$work"
