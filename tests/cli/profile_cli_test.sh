#!/bin/bash
# dsmpi profile / run / predict --profile-db end to end under mpiexec with 2
# ranks: a signal mid-profile saves and exits 1, the rerun measures only the
# rest, the prediction reads the database, a foreign file is refused and left
# untouched, a bare `dsmpi run` only prints usage.
#   profile_cli_test.sh DSMPI MPIEXEC NPFLAG WORKDIR
set -u
dsmpi=$1 mpiexec=$2 npflag=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0 checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); "$@" || fail "${FUNCNAME[1]:-main}: $*"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

export DS_MEASURE_BUDGET_S=0.3 DS_MEASURE_MIN_REPS=3 DS_MEASURE_WARMUP=1 DS_PROGRESS_PERIOD_S=0
inputs=(--model gpt2-medium --seq-len 256 --strategy tp=2,pp=2,mbs=1,gbs=16 --target-gpus 8 --sweep-max 64KiB)

# 0. The dry run's expected time: per phase, from the loop's tunables on a
#    calibration of this allocation; nothing measured, nothing written.
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db dry.h5 --dry-run >dry.txt 2>dry.err
check test $? -eq 0
check grep -Eq "^# expected profiling time: [0-9]+ s in all: [0-9]+ s of layer passes \([0-9]+ rounds over 2 ranks\),$" dry.txt
check grep -q "on speeds calibrated here" dry.txt
check test ! -e dry.h5
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db dry.h5 --dry-run --json >dry.json 2>/dev/null
check python3 - dry.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["calibrated"] is True and d["compute_rounds"] > 0, d
assert d["estimated_compute_s"] > 0 and d["estimated_comm_s"] > 0 and d["estimated_commit_s"] > 0, d
assert abs(d["estimated_wall_s"] - d["estimated_compute_s"] - d["estimated_comm_s"] - d["estimated_commit_s"]) < 2e-3, d
assert 0 <= d["estimated_setup_s"] <= d["estimated_comm_s"], d
PY
# A smaller budget per event: every task that ran out of it takes less.  The
# communication part is compared: the compute part rests on a calibration of
# kernel speeds that varies run to run on a shared machine by more than the
# budget changes it.
DS_MEASURE_BUDGET_S=0.03 "$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db dry.h5 --dry-run --json >dry3.json 2>/dev/null
check python3 -c 'import json,sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); assert b["estimated_comm_s"] < 0.8 * a["estimated_comm_s"], (a["estimated_comm_s"], b["estimated_comm_s"])' dry.json dry3.json

# 1. SIGUSR1 (what Slurm sends before the time limit) in the middle of the
#    layer passes: mpiexec forwards it, every rank stops after its pass in
#    hand, the database is committed, exit 1 with one message.
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db db.h5 --json >run1.json 2>run1.err &
pid=$!
for _ in $(seq 300); do
    grep -q "profiling layer passes: [1-9]" run1.err 2>/dev/null && break
    sleep 0.05
done
kill -USR1 "$pid"
wait "$pid"
rc=$?
check test "$rc" -eq 1
check grep -q "profiling stopped on request; what was measured is saved in db.h5 and a rerun measures the rest" run1.err
check test "$(json run1.json 'd["interrupted"]')" = True
check h5dump -H db.h5 >/dev/null
measured1=$(json run1.json 'd["units_measured"]')
units=$(json run1.json 'd["units"]')

# 2. The rerun measures only what is missing.
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db db.h5 --json >run2.json 2>run2.err
check test $? -eq 0
reused=$(json run2.json 'd["units_reused"]')
measured2=$(json run2.json 'd["units_measured"]')
check test "$reused" -gt 0
check test "$measured2" -gt 0
check test "$((reused + measured2))" -eq "$units"
check test "$(json run2.json 'd["interrupted"]')" = False
echo "interrupted run: $units passes planned; after the stop $reused were reused and $measured2 measured (the first run had planned $measured1)"

# 3. Everything measured: a third run reuses all, and predict reads the database.
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db db.h5 --json >run3.json 2>/dev/null
check test "$(json run3.json 'd["units_measured"]')" -eq 0
check test "$(json run3.json 'd["comm_tasks_reused"]')" -eq "$(json run3.json 'd["comm_tasks"]')"
"$dsmpi" predict "${inputs[@]:0:8}" --device cpu --profile-db db.h5 --json >predict.json 2>predict.err
check test $? -eq 0
check python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["summary"]["iter_time_s"] > 0 and "compute events measured on cpu" in d["costs"] and d["profile_db"] == "db.h5", d["costs"]' predict.json

# 4. run = profile + predict; with everything in the database it only predicts.
"$mpiexec" "$npflag" 2 "$dsmpi" run "${inputs[@]}" --profile-db db.h5 >run.txt 2>run.err
check test $? -eq 0
check grep -q "^# dsmpi [0-9.]* run" run.txt
check grep -q "profiled 0 of $units layer passes ($units reused from the database)" run.txt
check grep -q "^# iter_time" run.txt
check grep -q "target: 1x8-cpu" run.txt

# 4b. run --search: the space of tp=2, pp=2 needs nothing new; every rank ranks it.
"$mpiexec" "$npflag" 2 "$dsmpi" run --search "${inputs[@]:0:4}" --global-batch 16 --target-gpus 8 \
    --fix tp=2 --fix pp=2 --fix mbs=1 --fix no-sp --fix recompute=none --fix zero=0 --fix dp-algo=auto \
    --sweep-max 64KiB --profile-db db.h5 --top 3 >search.txt 2>search.err
check test $? -eq 0
check grep -q "profiled 0 of .* layer passes (.*), 0 communication tasks" search.txt
check grep -q "^# costs: profile database db.h5: .* compute events measured on cpu" search.txt
check test "$(grep -c '^ *[1-3] .*dp=2,tp=2,pp=2' search.txt)" -eq 3

# 5. A foreign file as database: refused in one line, exit 2, left byte for byte.
printf 'not a database\n' >foreign.h5
cp foreign.h5 foreign.copy
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --profile-db foreign.h5 >foreign.out 2>foreign.err
check test $? -eq 2
check test "$(grep -c 'foreign.h5' foreign.err)" -ge 1
check cmp -s foreign.h5 foreign.copy

# 6. A bare `dsmpi run` burns nothing: usage, exit 2.
"$mpiexec" "$npflag" 1 "$dsmpi" run >bare.out 2>bare.err
check test $? -eq 2
check grep -q "^usage: mpiexec -n R dsmpi run" bare.err
check test ! -s bare.out

if [ "$failures" -ne 0 ]; then
    echo "profile_cli_test: $failures of $checks checks failed" >&2
    exit 1
fi
echo "profile_cli_test: $checks checks passed"
