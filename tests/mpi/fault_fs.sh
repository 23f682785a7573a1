#!/bin/bash
# `dsmpi profile` (2 ranks) with its database on a file system that is full
# or read-only, before the run and while it measures: one line naming the
# database and the cause, exit 1, the earlier database byte for byte intact,
# no temporary file left; once there is room again a rerun completes.  Uses
# a small tmpfs, so it needs root and mount(8); skipped (77) otherwise.
#   fault_fs.sh DSMPI MODEL WORKDIR MPIEXEC NUMPROC_FLAG [PREFLAGS...]
set -u
dsmpi=$1 model=$2 work=$3 mpiexec=$4 npflag=$5
shift 5
preflags=("$@")
umount "$work/mnt" 2>/dev/null # left mounted by a run that was killed
rm -rf "$work" && mkdir -p "$work/mnt" && cd "$work" || exit 1
if [ "$(id -u)" != 0 ] || ! mount -t tmpfs -o size=1m dsmpi-fault-fs "$work/mnt" 2>/dev/null; then
    echo "fault_fs: cannot mount a tmpfs here (needs root); skipped"
    exit 77
fi
trap 'umount "$work/mnt" 2>/dev/null' EXIT
trap 'exit 1' INT TERM
db=$work/mnt/db.h5
failures=0 checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); "$@" || fail "$case: $*"; }

export DS_MEASURE_BUDGET_S=0.01 DS_MEASURE_MIN_REPS=1 DS_MEASURE_WARMUP=1 DS_PROGRESS_PERIOD_S=0
common=(--model "$model" --target-gpus 8 --sweep-max 4KiB --profile-db "$db")
first=(--strategy tp=2,pp=2,mbs=1,gbs=8)
second=(--strategy tp=1,pp=2,mbs=2,gbs=8)
profile() { timeout -k 5 120 "$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "$@"; }
# Slow passes (each repeats for its 1 s budget), to act while rank 0 measures.
slow=(env DS_MEASURE_BUDGET_S=1 DS_MEASURE_TARGET_CI=0 DS_MEASURE_MAX_REPS=10000000)

profile "${common[@]}" "${first[@]}" --quiet >/dev/null 2>first.err ||
    { echo "the first profile failed:" >&2; cat first.err >&2; exit 1; }
state=$(cksum <"$db")

fill() { dd if=/dev/zero of="$work/mnt/filler" bs=4k 2>/dev/null; sync; }
# refused CASE PATTERN RC: the verdict on a run that could not write.
refused() {
    local pattern=$2 rc=$3
    local message
    message=$(grep '^dsmpi profile: ' "$case.err")
    echo "$case: exit $rc: $message"
    check test "$rc" -eq 1
    check test "$(grep -c '^dsmpi profile: ' "$case.err")" -eq 1
    check grep -q "'$db'.*$pattern" <<<"$message"
    check test "$(cksum <"$db")" = "$state"
    check test -z "$(ls -A "$work/mnt" | grep -v '^db.h5$' | grep -v '^filler$')"
    rm -f "$work/mnt/filler"
    mount -o remount,rw "$work/mnt"
}
# wait_measuring: until rank 0 reports a pass done (the run in $case.err).
wait_measuring() {
    for _ in $(seq 600); do
        grep -q "profiling layer passes: [1-9]" "$case.err" 2>/dev/null && return 0
        sleep 0.05
    done
    fail "$case: never saw the layer passes"
}

case=full-before
fill
profile "${common[@]}" "${second[@]}" --quiet >/dev/null 2>"$case.err"
refused "$case" "No space left on device" $?

case=read-only-before
mount -o remount,ro "$work/mnt" || fail "cannot remount read-only"
profile "${common[@]}" "${second[@]}" --quiet >/dev/null 2>"$case.err"
refused "$case" "Read-only file system" $?

case=full-while-measuring
"${slow[@]}" "$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${second[@]}" \
    --quiet >/dev/null 2>"$case.err" &
run=$!
wait_measuring
fill
wait $run
refused "$case" "No space left on device" $?

case=read-only-while-measuring
"${slow[@]}" "$mpiexec" "$npflag" 2 "${preflags[@]}" "$dsmpi" profile "${common[@]}" "${second[@]}" \
    --quiet >/dev/null 2>"$case.err" &
run=$!
wait_measuring
mount -o remount,ro "$work/mnt" || fail "$case: cannot remount read-only"
wait $run
refused "$case" "Read-only file system" $?

case=room-again
profile "${common[@]}" "${second[@]}" --quiet >/dev/null 2>"$case.err"
check test $? -eq 0
check test "$(ls -A "$work/mnt")" = db.h5
profile "${common[@]}" "${first[@]}" --dry-run --json >"$case.json" 2>/dev/null
check python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["units_reused"] == d["units"], d' "$case.json"

if [ "$failures" -ne 0 ]; then
    echo "fault_fs: $failures of $checks checks failed" >&2
    exit 1
fi
echo "fault_fs: $checks checks passed"
