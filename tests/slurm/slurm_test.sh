#!/bin/bash
# dsmpi under a real Slurm: the one-node cluster of slurm/local-cluster.sh
# (brought up by the cluster-up test, a CTest fixture, and stopped by
# cluster-down), srun launching dsmpi, the sbatch templates, and the
# time-limit signal reaching a job step.
#   slurm_test.sh MODE DSMPI SOURCE_DIR
#   MODE: cluster-up | cluster-down | srun | templates | signal | profile-signal
# DSMPI_SLURM_DIR names the cluster's directory.  Exit 77 (skipped) when the
# Slurm packages are missing or the test does not run as root.
set -u
mode=$1 dsmpi=$2 source_dir=$3
cluster=$source_dir/slurm/local-cluster.sh
failures=0 checks=0

for command in munged slurmctld slurmd srun sbatch scontrol sinfo squeue python3; do
    if ! command -v "$command" >/dev/null 2>&1; then
        echo "skipped: '$command' not found (install munge slurmctld slurmd slurm-client: cmake/setup-debian.sh)"
        exit 77
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "skipped: the local Slurm cluster needs root"
    exit 77
fi
: "${DSMPI_SLURM_DIR:?DSMPI_SLURM_DIR must name the test cluster directory}"
# Whatever job or cluster ctest runs in, these commands go to the test cluster.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^SLURM_' || true)
export SLURM_CONF=$DSMPI_SLURM_DIR/slurm.conf

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsmpi-slurm-test.XXXXXX")
finish() {
    if [ "$failures" -eq 0 ]; then
        rm -rf "$tmp"
        echo "slurm_test $mode: $checks checks passed"
        exit 0
    fi
    echo "slurm_test $mode: $failures of $checks checks failed; files kept in $tmp" >&2
    exit 1
}

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    checks=$((checks + 1))
    "$@" || fail "$what"
}
seconds() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.2f", b - a }'; }

# json FILE EXPRESSION: evaluates a Python expression over the JSON object `j`.
json() { python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
json_is() { # json_is FILE EXPRESSION EXPECTED
    local got
    checks=$((checks + 1))
    got=$(json "$1" "$2" 2>&1 | tail -n 1)
    [ "$got" = "$3" ] || fail "$1: $2 is '$got', expected '$3'"
}

require_cluster() {
    if [ ! -r "$SLURM_CONF" ] || ! "$cluster" status >/dev/null 2>&1; then
        echo "FAIL: the test cluster in $DSMPI_SLURM_DIR is not up (the slurm_cluster_up fixture brings it up)" >&2
        "$cluster" status >&2
        exit 1
    fi
}

# The dsmpi subcommands this build has ('dsmpi --help' lists them).
has_command() { "$dsmpi" --help | grep -q "^  $1 "; }

case $mode in
cluster-up)
    t0=$(seconds)
    "$cluster" up >"$tmp/up.out" 2>&1
    rc=$? took=$(since "$t0")
    cat "$tmp/up.out"
    [ "$rc" -eq 0 ] || { fail "local-cluster.sh up exited $rc"; finish; }
    echo "bring-up: ${took} s"
    check "status after up" "$cluster" status
    # Idempotent and quiet when there is nothing to do.
    "$cluster" up >"$tmp/up2.out" 2>&1
    rc=$?
    check "a second up exits 0" test "$rc" -eq 0
    check "a second up is quiet: $(cat "$tmp/up2.out")" test ! -s "$tmp/up2.out"
    check "node has CPUs for 8 tasks" test "$(sinfo -h -o %c)" -ge 8
    check "slurm.conf picks pmix" grep -q '^MpiDefault=pmix$' "$SLURM_CONF"
    ;;

cluster-down)
    "$cluster" down >"$tmp/down.out" 2>&1
    rc=$?
    check "local-cluster.sh down exits 0: $(cat "$tmp/down.out")" test "$rc" -eq 0
    cat "$tmp/down.out"
    "$cluster" status >"$tmp/status.out" 2>&1
    rc=$?
    check "status after down exits 3" test "$rc" -eq 3
    check "no daemon left: $(cat "$tmp/status.out")" test "$(grep -c 'not running' "$tmp/status.out")" -eq 3
    "$cluster" down >"$tmp/down2.out" 2>&1
    rc=$?
    check "a second down exits 0" test "$rc" -eq 0
    check "a second down is quiet: $(cat "$tmp/down2.out")" test ! -s "$tmp/down2.out"
    ;;

srun)
    require_cluster
    cd "$tmp" || exit 1
    # Slurm's variables disagreeing with MPI are a warning, not an error: dsmpi
    # started without srun in the batch shell of a 2-task job is one rank.
    # (In the background: sbatch --wait polls every 2 s.)
    sbatch --wait -n 2 -o single.out --wrap "'$dsmpi' allocation --json >single.json 2>single.err" \
        >/dev/null 2>&1 &
    single=$!
    # dsmpi started by srun: 2 ranks on 1 node inside a Slurm job, no warnings.
    t0=$(seconds)
    srun -Q -n 2 "$dsmpi" allocation --json >alloc.json 2>alloc.err
    rc=$?
    echo "srun -n 2 dsmpi allocation: $(since "$t0") s"
    check "srun -n 2 dsmpi allocation exits 0 (got $rc): $(head -c 400 alloc.err)" test "$rc" -eq 0
    check "nothing on stderr: $(head -c 400 alloc.err)" test ! -s alloc.err
    check "one JSON line (rank 0 only)" test "$(wc -l <alloc.json)" -eq 1
    json_is alloc.json 'j["ranks"]' 2
    json_is alloc.json 'j["nodes"]' 1
    json_is alloc.json '(j["ranks_per_node_min"], j["ranks_per_node_max"])' '(2, 2)'
    json_is alloc.json 'j["slurm_ntasks"], j["slurm_nnodes"]' '(2, 1)'
    json_is alloc.json 'j["warnings"]' 0
    json_is alloc.json 'j["node_list"][0]["host"] == __import__("socket").gethostname().split(".")[0]' True
    job=$(json alloc.json 'j["slurm_job_id"]' 2>/dev/null)
    checks=$((checks + 1))
    if [[ ! $job =~ ^[1-9][0-9]*$ ]]; then
        fail "slurm_job_id '$job' is not a job id"
    else
        # The job is the test cluster's: its record reaches the job-completion log.
        for _ in $(seq 50); do
            grep -q "^JobId=$job .*JobState=COMPLETED" "$DSMPI_SLURM_DIR/jobcomp.txt" 2>/dev/null && break
            sleep 0.1
        done
        grep -q "^JobId=$job .*JobState=COMPLETED.*ProcCnt=2 " "$DSMPI_SLURM_DIR/jobcomp.txt" ||
            fail "job $job is not in $DSMPI_SLURM_DIR/jobcomp.txt as COMPLETED with 2 CPUs"
    fi

    # Four ranks (oversubscribed) with a GPU each: Slurm's GPU count is read.
    srun -Q -n 4 --gpus-per-task=1 "$dsmpi" allocation --json >alloc4.json 2>alloc4.err
    rc=$?
    check "srun -n 4 --gpus-per-task=1 dsmpi allocation: $(head -c 400 alloc4.err)" test "$rc" -eq 0
    json_is alloc4.json '(j["ranks"], j["nodes"], j["slurm_ntasks"], j["slurm_gpus_on_node"], j["warnings"])' \
        '(4, 1, 4, 4, 0)'

    # A layout Slurm and MPI disagree on (Slurm's variable altered in the
    # step): one warning, printed once for the node, not once per rank.
    srun -Q -n 2 env 'SLURM_TASKS_PER_NODE=1(x2)' "$dsmpi" allocation --json >layout.json 2>layout.err
    rc=$?
    check "srun -n 2 dsmpi allocation with SLURM_TASKS_PER_NODE=1(x2): $(head -c 400 layout.err)" test "$rc" -eq 0
    json_is layout.json 'j["warnings"]' 1
    check "the layout warning is printed once: $(cat layout.err)" \
        test "$(grep -c 'SLURM_TASKS_PER_NODE=1(x2) gives 1 tasks to node 0 but 2 ranks share it' layout.err)" -eq 1

    # dsmpi events under srun: the same table as without MPI, printed once.
    "$dsmpi" events --demo >events1.txt 2>events1.err
    rc=$?
    check "dsmpi events --demo alone" test "$rc" -eq 0
    srun -Q -n 2 "$dsmpi" events --demo >events2.txt 2>events2.err
    rc=$?
    check "srun -n 2 dsmpi events --demo: $(head -c 400 events2.err)" test "$rc" -eq 0
    check "events under srun print one preamble" test "$(grep -c '^# dsmpi ' events2.txt)" -eq 1
    check "events under srun report 2 ranks" grep -q '^# ranks: 2$' events2.txt
    check "events under srun give the same table" \
        diff <(grep -v '^# ranks:' events1.txt) <(grep -v '^# ranks:' events2.txt)

    # Bad input under srun: exit code 2 through srun, one message (rank 0).
    srun -Q -n 2 "$dsmpi" allocation --frob >bad.out 2>bad.err
    rc=$?
    check "bad option under srun exits 2" test "$rc" -eq 2
    check "one error line from dsmpi: $(cat bad.err)" \
        test "$(grep -c "^dsmpi allocation: option '--frob' is not known" bad.err)" -eq 1

    wait "$single"
    rc=$?
    check "dsmpi alone in a 2-task job exits 0: $(head -c 400 single.err)" test "$rc" -eq 0
    json_is single.json '(j["ranks"], j["slurm_ntasks"], j["warnings"])' '(1, 2, 1)'
    check "the warning names SLURM_NTASKS: $(head -c 400 single.err)" \
        grep -q "SLURM_NTASKS=2 but MPI sees 1 ranks" single.err
    ;;

templates)
    require_cluster
    cd "$tmp" || exit 1
    profile=$source_dir/slurm/dsmpi-profile.sbatch reuse=$source_dir/slurm/dsmpi-reuse.sbatch
    # shellcheck disable=SC2016 # the patterns name the templates' own variables
    for t in "$profile" "$reuse"; do
        check "$t: USR1 to the job steps, not only the batch shell" \
            bash -c '! grep -q "^#SBATCH --signal=B:" "$0"' "$t"
        check "$t: the srun MPI plugin is a variable" \
            bash -c '! grep -E "^[^#]*srun .*--mpi=[a-z]" "$0" && grep -q "DSMPI_SRUN_MPI:-pmix" "$0"' "$t"
        check "$t: outputs in SLURM_SUBMIT_DIR/dsmpi-SLURM_JOB_ID" \
            grep -q 'out=\$SLURM_SUBMIT_DIR/dsmpi-\$SLURM_JOB_ID' "$t"
        check "$t: bash syntax" bash -n "$t"
    done
    check "$profile: #SBATCH --signal=USR1@120" grep -q '^#SBATCH --signal=USR1@120$' "$profile"

    # Small settings: the steps this build of dsmpi has, a small model and target.
    steps=""
    # (predict, search and plan read the database the profile step writes.)
    for s in allocation events profile predict search plan; do
        case $s in allocation | events | profile) ;; *) has_command profile || continue ;; esac
        has_command "$s" && steps="$steps $s"
    done
    export DSMPI=$dsmpi DSMPI_MODEL=gpt2-medium DSMPI_SEQ_LEN=128 DSMPI_GLOBAL_BATCH=16
    export DSMPI_STRATEGY=tp=2,pp=2,mbs=1 DSMPI_TARGET_NODES=2 DSMPI_TARGET_GPUS_PER_NODE=4
    export DSMPI_PLAN_GPUS=8,16 DSMPI_PLAN_TOKENS=1M DSMPI_STEPS="${steps# }"
    # A small search space and short measurements keep the job to seconds.
    space="--fix mbs=1 --fix recompute=none --fix zero=0 --fix dp-algo=auto --fix no-sp"
    export DSMPI_PROFILE_ARGS="$space --sweep-max 64KiB" DSMPI_SEARCH_ARGS="$space"
    export DSMPI_PLAN_ARGS="$space --estimate-missing"
    export DS_MEASURE_BUDGET_S=0.05 DS_MEASURE_MIN_REPS=2 DS_MEASURE_WARMUP=1
    unset DSMPI_PROFILE_DB DSMPI_SRUN_MPI DSMPI_GPUS_PER_TASK
    small=(--nodes=1 --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 --time=5)
    echo "profile template steps: $DSMPI_STEPS"

    # The jobs that do not depend on each other run at once (sbatch --wait
    # polls every 2 s): submit NAME [VAR=VALUE...] -- SBATCH_ARGS... leaves
    # the job id in NAME.job and sbatch's exit code in NAME.rc.
    submit() {
        local name=$1
        shift
        local vars=()
        while [ "$1" != -- ]; do
            vars+=("$1")
            shift
        done
        shift
        (
            env "${vars[@]}" sbatch --parsable --wait "$@" >"$name.job" 2>"$name.err"
            echo $? >"$name.rc"
        ) &
    }
    result() { cat "$1.rc" 2>/dev/null || echo none; }
    t0=$(seconds)
    submit profile -- "${small[@]}" "$profile"
    # A failing step fails the job with its exit code and says which step.
    submit badmodel DSMPI_MODEL=no-such-model DSMPI_STEPS=events -- "${small[@]}" "$profile"
    # DSMPI_SRUN_MPI reaches srun: a plugin Open MPI cannot use fails the
    # allocation step at once.
    if has_command allocation; then
        submit pmi2 DSMPI_SRUN_MPI=pmi2 "DSMPI_STEPS=allocation events" -- "${small[@]}" "$profile"
    fi
    # The reuse template requires a readable profile database.
    submit nodb -- --ntasks=1 --time=5 "$reuse"
    submit missingdb DSMPI_PROFILE_DB=nowhere.h5 -- --ntasks=1 --time=5 "$reuse"
    wait
    echo "sbatch --wait of $(cat ./*.rc | wc -l) jobs at once: $(since "$t0") s"

    job=$(cat profile.job) out=dsmpi-$(cat profile.job)
    check "dsmpi-profile.sbatch exits 0 (got $(result profile)): $(cat profile.err "$out.out" 2>/dev/null | head -c 1500)" \
        test "$(result profile)" = 0
    check "job log $out.out" grep -q "dsmpi-profile: done; results in $tmp/$out" "$out.out"
    check "settings recorded" grep -q "^model=gpt2-medium seq_len=128 global_batch=16" "$out/settings.txt"
    for s in $DSMPI_STEPS; do
        check "step $s wrote $out/$s.txt" test -s "$out/$s.txt"
    done
    if has_command allocation; then
        check "allocation step: job $job, 2 tasks, 2 GPUs: $(grep '^# slurm' "$out/allocation.txt")" \
            grep -q "^# slurm: job $job, SLURM_NNODES 1, SLURM_NTASKS 2, SLURM_GPUS_ON_NODE 2$" \
            "$out/allocation.txt"
        check "allocation step: 2 ranks on 1 node" grep -q "^# mpi: 2 ranks on 1 nodes" "$out/allocation.txt"
        check "allocation step: no warnings" grep -q "^# warnings: 0$" "$out/allocation.txt"
    fi
    check "events step: the small target" \
        grep -q "^# target: .*2 nodes x 4 devices = 8$" "$out/events.txt"
    check "events step: the small strategy" \
        grep -q "^# strategy: dp=2,tp=2,pp=2,mbs=1,gbs=16," "$out/events.txt"

    log=dsmpi-$(cat badmodel.job).out
    check "bad model: job exits 2 (got $(result badmodel))" test "$(result badmodel)" = 2
    check "bad model: the log names the step" grep -q "step 'events' failed with exit code 2" "$log"
    check "bad model: dsmpi's message in the log" grep -q "model 'no-such-model' is not known" "$log"

    if has_command allocation; then
        job=$(cat pmi2.job)
        check "DSMPI_SRUN_MPI=pmi2: job fails (got $(result pmi2))" test "$(result pmi2)" != 0
        check "DSMPI_SRUN_MPI=pmi2: srun --mpi=pmi2 ran" grep -q "allocation: srun --mpi=pmi2 " "dsmpi-$job.out"
        check "DSMPI_SRUN_MPI=pmi2: stopped at the allocation step" \
            grep -q "step 'allocation' failed" "dsmpi-$job.out"
        check "DSMPI_SRUN_MPI=pmi2: no later step ran" test ! -e "dsmpi-$job/events.txt"
    fi

    check "reuse without a database exits 2 (got $(result nodb))" test "$(result nodb)" = 2
    check "reuse without a database says so" grep -q "no profile database given" "dsmpi-$(cat nodb.job).out"
    check "reuse with a missing database exits 2 (got $(result missingdb))" test "$(result missingdb)" = 2
    check "reuse with a missing database names it" \
        grep -q "profile database '$tmp/nowhere.h5' cannot be read" "dsmpi-$(cat missingdb.job).out"

    # The reuse template with the database the profile job wrote (once dsmpi
    # can profile; until then an empty file stands for it and only the events
    # step runs).
    reuse_steps="" db=$tmp/dsmpi-placeholder.h5
    if has_command profile; then
        db=$tmp/$out/profile.h5
        for s in events predict search plan; do has_command "$s" && reuse_steps="$reuse_steps $s"; done
    else
        : >"$db"
        reuse_steps=events
    fi
    t0=$(seconds)
    job=$(DSMPI_PROFILE_DB=$db DSMPI_TARGET_NODES=4 DSMPI_STEPS="${reuse_steps# }" \
        sbatch --parsable --wait --ntasks=2 --time=5 "$reuse" 2>/dev/null)
    rc=$?
    echo "sbatch --wait dsmpi-reuse.sbatch: $(since "$t0") s"
    check "dsmpi-reuse.sbatch exits 0 (got $rc): $(head -c 1500 "dsmpi-$job.out")" test "$rc" -eq 0
    for s in $reuse_steps; do
        check "reuse step $s wrote dsmpi-$job/$s.txt" test -s "dsmpi-$job/$s.txt"
    done
    check "reuse events: the new target" \
        grep -q "^# target: .*4 nodes x 4 devices = 16$" "dsmpi-$job/events.txt"
    ;;

signal)
    require_cluster
    cd "$tmp" || exit 1
    # The time-limit signal of the templates, on a one-minute job: without
    # "B:", SIGUSR1 reaches the job step (what srun started) and not the batch
    # shell.  slurmctld checks time limits every 30 s, so the signal comes at
    # the first check, within 30 s of the start; the step gives up after 40 s
    # (exit 3).  A check that falls in the moment between the job's start and
    # its step's is lost (Slurm signals the steps that exist): then one more
    # job is tried.
    cat >signal.sbatch <<'EOF'
#!/bin/bash
#SBATCH --time=1
#SBATCH --signal=USR1@50
#SBATCH --ntasks=1
trap 'echo batch >batch-usr1' USR1
start=$(date +%s.%N)
srun bash -c 'trap "echo step \$(date +%s.%N) >step-usr1; exit 0" USR1
              date +%s.%N >step-ready
              for ((i = 0; i < 40; i++)); do sleep 1 & wait $!; done
              exit 3'
code=$?
echo "srun exit code $code"
echo "start $start"
exit "$code"
EOF
    for attempt in 1 2; do
        rm -f step-usr1 step-ready batch-usr1
        t0=$(seconds)
        job=$(sbatch --parsable --wait signal.sbatch 2>submit.err)
        rc=$?
        echo "USR1 test job $job: $(since "$t0") s"
        if [ "$rc" -ne 3 ] || [ "$attempt" -eq 2 ]; then
            break
        fi
        echo "no USR1 in job $job: the check may have come before the step started; once more"
    done
    check "job completes before its limit (got $rc): $(cat submit.err slurm-"$job".out 2>/dev/null)" \
        test "$rc" -eq 0
    check "the step started" test -s step-ready
    check "the step received USR1" grep -qs '^step ' step-usr1
    check "the step exited 0 from its handler" grep -q '^srun exit code 0$' "slurm-$job.out"
    check "the batch shell did not receive USR1" test ! -e batch-usr1
    if [ -s step-usr1 ]; then
        start=$(sed -n 's/^start //p' "slurm-$job.out")
        got=$(awk '{ print $2 }' step-usr1)
        echo "USR1 reached the step $(awk -v a="$start" -v b="$got" 'BEGIN { printf "%.1f", b - a }') s after the job started"
    fi
    ;;

profile-signal)
    require_cluster
    has_command profile || { echo "this dsmpi has no profile command"; exit 77; }
    cd "$tmp" || exit 1
    # dsmpi profile in a one-minute job with --signal=USR1@50: the signal (or,
    # had it been missed, the SIGTERM at the limit) stops every rank after the
    # work in hand; the database is committed complete and the job exits 1.
    # Every measurement runs its whole 4 s budget (an unreachable precision
    # target), so the profile would need minutes.  A second job resumes.
    profile=(profile --model gpt2-medium --seq-len 256 --strategy tp=2,pp=2,mbs=1,gbs=16
             --target-gpus 8 --profile-db signal.h5 --sweep-max 64KiB --json)
    {
        echo '#!/bin/bash'
        echo '#SBATCH --time=1'
        echo '#SBATCH --signal=USR1@50'
        echo '#SBATCH --ntasks=2'
        echo 'export DS_MEASURE_BUDGET_S=4 DS_MEASURE_TARGET_CI=1e-9 DS_MEASURE_MIN_REPS=2 DS_MEASURE_MAX_REPS=10000000'
        echo "srun --mpi=\${DSMPI_SRUN_MPI:-pmix} $dsmpi ${profile[*]} >first.json 2>first.err"
        echo 'code=$?'
        echo 'echo "srun exit code $code"'
        echo 'exit $code'
    } >profile-signal.sbatch
    t0=$(seconds)
    job=$(sbatch --parsable --wait profile-signal.sbatch 2>submit.err)
    rc=$?
    echo "interrupted profile job $job: $(since "$t0") s, exit $rc"
    check "the job exits 1 after saving (got $rc): $(tail -c 600 first.err)" test "$rc" -eq 1
    check "stopped on request and saved" grep -q "profiling stopped on request; what was measured is saved in signal.h5" first.err
    check "the summary says interrupted" json_is first.json 'j["interrupted"]' True
    check "the database is complete (h5dump reads it)" h5dump -H signal.h5
    units=$(json first.json 'j["units"]')
    tasks=$(json first.json 'j["comm_tasks"]')
    # The rerun, in a job without a near limit and with short measurements,
    # measures only what the first job did not.
    {
        echo '#!/bin/bash'
        echo '#SBATCH --time=5'
        echo '#SBATCH --ntasks=2'
        echo 'export DS_MEASURE_BUDGET_S=0.05 DS_MEASURE_MIN_REPS=2'
        echo "srun --mpi=\${DSMPI_SRUN_MPI:-pmix} $dsmpi ${profile[*]} >second.json 2>second.err"
    } >profile-resume.sbatch
    job=$(sbatch --parsable --wait profile-resume.sbatch 2>>submit.err)
    rc=$?
    check "the rerun completes (got $rc): $(tail -c 600 second.err)" test "$rc" -eq 0
    reused=$(json second.json 'j["units_reused"]')
    measured=$(json second.json 'j["units_measured"]')
    tasks_reused=$(json second.json 'j["comm_tasks_reused"]')
    check "the rerun covers every pass once" test "$((reused + measured))" -eq "$units"
    check "the rerun reuses what the first job measured" test "$((reused + tasks_reused))" -gt 0
    check "the rerun is not interrupted" json_is second.json 'j["interrupted"]' False
    echo "resumed: $reused of $units passes and $tasks_reused of $tasks communication tasks reused"
    ;;

*)
    echo "slurm_test.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
finish
