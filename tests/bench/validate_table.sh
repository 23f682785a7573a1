#!/bin/bash
# The validation table: dsmpi validate on 2 ranks for three small models and
# every 2-rank strategy (dp=2, tp=2, pp=2 with GPipe, 1F1B and interleaved
# 1F1B, several micro-batch counts, and data-parallel buckets small enough to
# overlap the backward), context parallelism (cp=2, ring) and expert
# parallelism (ep=2 on a tiny Mixtral-like model), one case per validate run,
# each after a check that the machine is quiet.  Prints one row per case, then the mean and maximum
# absolute iteration-time error and per-rank busy-time error.
#
# usage: tests/bench/validate_table.sh [BUILD_DIR] [OUT_DIR]
# environment:
#   MODELS       models under tests/data/validate (default: tiny-gpt2 tiny-llama tiny-bert)
#   SEQ_LEN      training sequence length (default 128)
#   REPEATS      runs per case (default 3); ITERATIONS measured per run (default 5)
#   ABLATION=1   also predict from costs measured the other ways (dsmpi validate --ablation)
#   PROFILE_DB   a profile database: the profiler's costs instead (dsmpi validate --profile-db)
#   QUIET_IDLE   percent of both cores idle over 2 s that counts as quiet (default 95)
#   QUIET_WAIT   seconds to wait for quiet before a case (default 900); inside a case
#                dsmpi validate --wait-quiet waits before each measurement (default 120)
#   CASES        "STRATEGY:MICROBATCHES ..." to run instead of the default list
#   CP_CASES     context-parallel cases on CP_MODELS (default tiny-llama): cp=2 with the p2p
#                ring and fused attention (the cpu backend's blocked kernel)
#   EP_CASES     expert-parallel cases on EP_MODELS (default tiny-mixtral): ep=2 with the
#                router skew at 1 (tokens split evenly) and at its default (1.5: the EP
#                group's first rank runs 1.5 times the mean tokens' expert work)
#   SETS         which sets to run (default "dense cp ep")
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
out=${2:-$(mktemp -d /tmp/dsmpi-validate.XXXXXX)}
mkdir -p "$out"
dsmpi=$build/apps/dsmpi/dsmpi
models=${MODELS:-tiny-gpt2 tiny-llama tiny-bert}
seq=${SEQ_LEN:-128}
repeats=${REPEATS:-3}
iterations=${ITERATIONS:-5}
idle_min=${QUIET_IDLE:-95}
max_wait=${QUIET_WAIT:-900}
mpiexec=${MPIEXEC:-mpiexec}
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1
cases=${CASES:-"dp=2:2 dp=2:4 dp=2,bucket=1M:4 tp=2:2 tp=2:4 pp=2,schedule=gpipe:2 pp=2,schedule=gpipe:4 pp=2,schedule=gpipe:8 pp=2,schedule=1f1b:2 pp=2,schedule=1f1b:4 pp=2,schedule=1f1b:8 pp=2,schedule=interleaved,vpp=2:4 pp=2,schedule=interleaved,vpp=2:8"}
cp_models=${CP_MODELS:-tiny-llama}
cp_cases=${CP_CASES:-"cp=2,flash:2 cp=2,flash:4"}
ep_models=${EP_MODELS:-tiny-mixtral}
ep_cases=${EP_CASES:-"dp=2,ep=2,router-skew=1:2 dp=2,ep=2,router-skew=1:4 dp=2,ep=2:4 cp=2,flash,ep=2,router-skew=1:4"}
sets=${SETS:-dense cp ep}
extra=(--wait-quiet "${WAIT_QUIET:-120}")
[ "${ABLATION:-0}" = 1 ] && extra+=(--ablation)
[ -n "${PROFILE_DB:-}" ] && extra+=(--profile-db "$PROFILE_DB")

# Percent of both cores idle over 2 seconds (/proc/stat).
idle_percent() {
    local a b
    read -r -a a < <(head -1 /proc/stat)
    sleep 2
    read -r -a b < <(head -1 /proc/stat)
    local total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    local idle=$((b[4] - a[4] + b[5] - a[5]))
    [ "$total" -gt 0 ] && echo $((100 * idle / total)) || echo 0
}

# Waits until the machine is quiet; prints the idle percent seen.
wait_quiet() {
    local start=$SECONDS idle
    while :; do
        idle=$(idle_percent)
        if [ "$idle" -ge "$idle_min" ] || [ $((SECONDS - start)) -ge "$max_wait" ]; then
            echo "$idle"
            return
        fi
    done
}

echo "# dsmpi validation table: 2 ranks, sets: $sets, seq $seq, $repeats runs x $iterations iterations"
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# outputs: $out"
printf "# %-12s %-40s %3s %9s %9s %7s %7s %5s %8s %8s %6s %6s %5s\n" model strategy mb iter_pred \
    iter_meas spread error "" busy_avg busy_max foreign idle_before ""
printf "# %-12s %-40s %3s %9s %9s %7s %7s %5s %8s %8s %6s %6s %5s\n" "" "" "" "(ms)" "(ms)" "(%)" \
    "(%)" "" "(%)" "(%)" "(%)" "(%)" ""
rows=$out/rows.csv
: > "$rows"
# One case: MODEL STRATEGY:MICROBATCHES.
run_case() {
    local model=$1 c=$2
    local strategy=${c%:*} mb=${c##*:}
    local name idle line label
    name=$(echo "$model-$strategy-$mb" | tr ',=' '__')
    idle=$(wait_quiet)
    "$mpiexec" -n 2 "$dsmpi" validate --model "$root/tests/data/validate/$model.json" \
        --seq-len "$seq" --strategy "$strategy" --microbatches "$mb" --repeats "$repeats" \
        --iterations "$iterations" --csv --max-error 100 "${extra[@]}" \
        > "$out/$name.csv" 2> "$out/$name.err"
    # The strategy text holds commas: keep the case's own label instead.
    line=$(sed -n 2p "$out/$name.csv" | sed 's/^"[^"]*",//')
    label=$(echo "$strategy" | tr ',' ';')
    if [ -z "$line" ]; then
        printf "  %-12s %-40s %3s failed: %s\n" "$model" "$strategy" "$mb" \
            "$(grep -m1 'dsmpi validate' "$out/$name.err")"
        return
    fi
    # model,strategy,idle,mb,pred,meas,spread,error,noise,busy_mean,busy_max,compute,
    # bubble_pred,bubble_meas,mb_time,foreign,noisy_runs,costs_foreign[,variant error,busy]...
    echo "$model,$label,$idle,$line" >> "$rows"
    echo "$model,$label,$idle,$line" | awk -F, '{
        noise = $9 == 1 ? "noise" : "";
        flag = ($17 > 0 ? "noisy-runs" : "") ($18 > 0.05 ? " noisy-costs" : "");
        printf "  %-12s %-40s %3d %9.3f %9.3f %7.2f %7.2f %5s %8.2f %8.2f %6.1f %6d %s\n",
            $1, $2, $4, 1e3 * $5, 1e3 * $6, 100 * $7, 100 * $8, noise, 100 * $10, 100 * $11,
            100 * $16, $3, flag }'
}
for set in $sets; do
    case $set in
    dense) set_models=$models set_cases=$cases ;;
    cp) set_models=$cp_models set_cases=$cp_cases ;;
    ep) set_models=$ep_models set_cases=$ep_cases ;;
    *) echo "validate_table.sh: set '$set' (accepted: dense, cp, ep)" >&2; exit 2 ;;
    esac
    for model in $set_models; do
        for c in $set_cases; do
            run_case "$model" "$c"
        done
    done
done
awk -F, '{ n++; e = $8 < 0 ? -$8 : $8; sum += e; if (e > max) max = e; noise += $9;
           b += $10; if ($11 > bmax) bmax = $11 }
         END { if (n) printf "# %d cases: iteration time mean |error| %.2f%%, max %.2f%% (%d within the runs'\'' spread); busy time mean |error| %.2f%%, max %.2f%%\n",
                         n, 100 * sum / n, 100 * max, noise, 100 * b / n, 100 * bmax }' "$rows"
if [ "${ABLATION:-0}" = 1 ]; then
    # Variant columns after the 18 fixed ones, named in any case's CSV header.
    first=$(ls "$out"/*.csv | grep -v rows.csv | head -1)
    names=$(sed -n 1p "$first" | tr ',' '\n' | tail -n +17 | grep -v busy | sed 's/_error$//')
    echo "# ablation: the same runs against costs measured the other ways"
    col=19
    for name in $names; do
        awk -F, -v c=$col -v name="$name" '
            { n++; e = $c < 0 ? -$c : $c; s += e; if (e > m) m = e; bs += $(c + 1) }
            END { if (n) printf "  %-20s iteration mean |error| %6.2f%%  max %6.2f%%  busy mean |error| %6.2f%%\n",
                                 name, 100 * s / n, 100 * m, 100 * bs / n }' "$rows"
        col=$((col + 2))
    done
fi
