#!/bin/bash
# Real PyTorch as the truth: predict PyTorch's 2-process 1F1B (pp=2) and
# Megatron-style TP (tp=2) training of a small GPT-2-style model on CPU from
# the traces of its 1-process and 2-process DDP runs (less the profiler's own
# time, from the same runs without it) plus a sweep of its own collectives
# (gloo, in situ), and compare with the measured runs (profiler off).  REPEATS rounds,
# each tracing the inputs and measuring the truth one after the other, each
# round's prediction compared with its own measured runs (the machine's load
# recorded before each round); dsmpi's own-profile prediction printed beside.
#
# usage: tests/bench/torch_truth.sh [--short] [BUILD_DIR] [OUT_DIR]
#   --short     one round, 2 iterations, a small sweep (the CTest case
#               bench_torch_truth_short: the pipeline end to end, no accuracy gate)
# environment:
#   DSMPI_TORCH_PYTHON  an interpreter that imports torch (default: the first of
#                       /usr/bin/python3 and python3 that does); none: exit 77
#   REPEATS (3), ITERATIONS (5), WARMUP (2), MICROBATCHES (4)
#   MPIEXEC             launcher of dsmpi profile (default mpirun)
#   BIND=core           every PyTorch rank bound to a core of its own (torch_train.py --bind
#                       core, as mpirun binds two ranks; default: left to the scheduler)
#   FLUSH_DENORMAL=1    every PyTorch run with torch.set_flush_denormal(True) (the output
#                       layer's backward GEMMs otherwise run on denormals, 5-10x slower by an
#                       amount that varies from run to run)
set -u
short=0
if [ "${1:-}" = "--short" ]; then
    short=1
    shift
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
out=${2:-$(mktemp -d /tmp/dsmpi-torch-truth.XXXXXX)}
mkdir -p "$out" || exit 1
dsmpi=$build/apps/dsmpi/dsmpi
mpiexec=${MPIEXEC:-mpirun}
script=$root/tests/torch/torch_train.py
model=$root/tests/data/torch/gpt2-tiny.json
. "$root/tests/torch/torch_python.sh" torch_truth
if [ "$short" -eq 1 ]; then
    repeats=1 iterations=2 warmup=1 sweep_max=262144 sweep_s=0.1
else
    repeats=${REPEATS:-3} iterations=${ITERATIONS:-5} warmup=${WARMUP:-2} sweep_max=16777216 sweep_s=0.5
fi
mb=${MICROBATCHES:-4}
denormal=""
[ "${FLUSH_DENORMAL:-0}" = 1 ] && denormal=--flush-denormal
bind="--bind ${BIND:-none}"
port=$((29600 + $$ % 300))
run="--model $model --seq-len 64 --dtype fp32"
# gbs = dp x mbs x micro-batches of each run
declare -A strategy=(
    [single]="dp=1,tp=1,pp=1,mbs=2,gbs=$((2 * mb))"
    [ddp]="dp=2,tp=1,pp=1,mbs=2,gbs=$((4 * mb))"
    [1f1b]="dp=1,tp=1,pp=2,mbs=2,gbs=$((2 * mb)),schedule=1f1b"
    [tp]="dp=1,tp=2,pp=1,mbs=2,gbs=$((2 * mb))"
)
load() { cut -d' ' -f1 /proc/loadavg; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
fail() {
    echo "torch_truth: FAILED: $*" >&2
    exit 1
}
declare -A own_pred=()
train() { # MODE DIR [ARGS...]
    local mode=$1 dir=$2
    shift 2
    port=$((port + 1))
    timeout 600 "$python" "$script" --mode "$mode" --out "$dir" --iters "$iterations" \
        --warmup "$warmup" --microbatches "$mb" --port "$port" $denormal $bind "$@" \
        >"$dir/$mode.log" 2>&1 ||
        fail "torch_train.py --mode $mode: $(tail -3 "$dir/$mode.log")"
}

exec > >(tee "$out/torch_truth.txt")
echo "# torch_truth: $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "# load before: $(cat /proc/loadavg); PyTorch runs with $bind${denormal:+ $denormal}"
echo "# out: $out"

# 1. What does not drift with the machine's speed: dsmpi's own 2-rank profile
#    (its kernels, not the framework's), once.
own=$out/own.h5
for mode in ddp 1f1b tp; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        $mpiexec -np 2 "$dsmpi" profile $run --strategy "${strategy[$mode]}" --target-gpus 2 \
        --profile-db "$own" >"$out/profile_$mode.log" 2>&1 ||
        fail "dsmpi profile ${strategy[$mode]}: $(tail -3 "$out/profile_$mode.log")"
done
own_fp=$(h5dump -d /fingerprints "$own" | grep '(0):' | head -1 | sed 's/.*(0): "\(.*\)"/\1/')
[ -n "$own_fp" ] || fail "no fingerprint in $own (h5dump)"

predict() { # DB FINGERPRINT MODE [ARGS...] -> iteration seconds
    local db=$1 fp=$2 mode=$3
    shift 3
    "$dsmpi" predict --profile-db "$db" --fingerprint "$fp" $run --strategy "${strategy[$mode]}" \
        --target-gpus 2 --json "$@" 2>"$out/predict.err" |
        grep -o '"iter_time_s": [0-9.e+-]*' | head -1 | awk '{ print $2 }'
}
for mode in 1f1b tp; do
    p=$(predict "$own" "$own_fp" "$mode")
    [ -n "$p" ] || fail "predict $mode from the own profile: $(head -c 300 "$out/predict.err")"
    own_pred[$mode]=$p
done

# 2. Rounds: the inputs (traces of the 1-process and DDP runs, the same runs
#    without the profiler, the gloo sweep isolated and in situ) and the truth
#    (1F1B and TP without the profiler) one after the other, so that each round's prediction is compared with
#    runs made minutes from its own inputs: this machine's speed drifts by
#    more than the model's error between runs far apart (the same 1F1B
#    measured 0.07 s one day and 0.18 s another).
tf="cpu: pytorch (framework trace)"
median_file() { grep -v '^#' "$1" | median; }
for r in $(seq 1 "$repeats"); do
    rd=$out/round$r
    mkdir -p "$rd/traces" "$rd/unprofiled"
    l=$(load)
    train single "$rd/traces"
    train ddp "$rd/traces"
    declare -A unprofiled=()
    for mode in single ddp; do
        train "$mode" "$rd/unprofiled" --no-profile
        unprofiled[$mode]=$(median_file "$rd/unprofiled/${mode}_times.txt")
    done
    # The gloo sweep: isolated (as nccl-tests measures) and in situ (each
    # repetition right after one layer's forward, as training issues its
    # blocking collectives: METHOD 3); the prediction uses the in-situ logs.
    for context in "" --in-situ; do
        port=$((port + 1))
        timeout 600 "$python" "$script" --mode sweep --out "$rd/sweep" --sweep-max "$sweep_max" \
            --sweep-seconds "$sweep_s" --port "$port" $bind $context >"$rd/sweep$context.log" 2>&1 ||
            fail "gloo sweep $context: $(tail -3 "$rd/sweep$context.log")"
    done
    isolated=("$rd"/sweep/gloo_*.log)
    in_situ=("$rd"/sweep/in-situ/gloo_*.log)
    for mode in 1f1b tp; do
        mkdir -p "$rd/measured/$mode"
        train "$mode" "$rd/measured/$mode" --no-profile
    done
    # The round's traces imported; what they lack calibrated from the own profile.
    fw=$rd/framework.h5
    cp "$own" "$fw"
    "$dsmpi" import --profile-db "$fw" --fingerprint "$tf" $run --strategy "${strategy[single]}" \
        --torch-trace "$rd/traces/single_rank0.json" --unprofiled-s "${unprofiled[single]}" \
        >"$rd/import_single.txt" 2>&1 ||
        fail "import single: $(tail -2 "$rd/import_single.txt")"
    "$dsmpi" import --profile-db "$fw" --fingerprint "$tf" $run --strategy "${strategy[ddp]}" \
        --torch-trace "$rd/traces/ddp_rank0.json" "$rd/traces/ddp_rank1.json" \
        --unprofiled-s "${unprofiled[ddp]}" --calibrate-from "$own_fp" >"$rd/import_ddp.txt" 2>&1 ||
        fail "import ddp: $(tail -2 "$rd/import_ddp.txt")"
    for mode in 1f1b tp; do
        meas=$(median_file "$rd/measured/$mode/${mode}_times.txt")
        fwp=$(predict "$fw" "$tf" "$mode" --nccl-tests "${in_situ[@]}" --gpus-per-node 2)
        [ -n "$fwp" ] || fail "predict $mode from the traces: $(head -c 300 "$out/predict.err")"
        iso=$(predict "$fw" "$tf" "$mode" --nccl-tests "${isolated[@]}" --gpus-per-node 2)
        [ -n "$iso" ] || fail "predict $mode (isolated sweep): $(head -c 300 "$out/predict.err")"
        echo "$meas $fwp $l $iso" >>"$out/$mode.rounds"
    done
    echo "# round $r (load $l): unprofiled single ${unprofiled[single]} s, ddp ${unprofiled[ddp]} s;" \
        "$(grep -h "calibrated from" "$rd/import_ddp.txt" | sed 's/.*ratio per class: //')"
done

# 3. The table: per mode, the measured runs' median and spread over the
#    rounds, the prediction and error of each round (median, min..max), and
#    whether the median error is within the truth's own spread (METHOD 8).
echo "#"
printf "# %-6s %10s %18s %7s %10s %8s %17s %8s %9s %10s %8s\n" mode measured "min-max" load framework error \
    "round errors" noise isolated own_profile error
printf "# %-6s %10s %18s %7s %10s %8s %17s %8s %9s %10s %8s\n" "" "(s)" "(s)" "(1-min)" "(s)" "(%)" "(%)" "" "(%)" "(s)" "(%)"
for mode in 1f1b tp; do
    awk -v m="$mode" -v o="${own_pred[$mode]}" '
        function med(a, n,   i, j, t) {
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { n++; t[n] = $1; f[n] = $2; l[n] = $3; e[n] = 100 * ($2 - $1) / $1; ei[n] = 100 * ($4 - $1) / $1
          lo = (n == 1 || $1 < lo) ? $1 : lo; hi = (n == 1 || $1 > hi) ? $1 : hi
          elo = (n == 1 || e[n] < elo) ? e[n] : elo; ehi = (n == 1 || e[n] > ehi) ? e[n] : ehi }
        END {
            tm = med(t, n); fm = med(f, n); lm = med(l, n); em = med(e, n); eim = med(ei, n)
            spread = 100 * (hi - lo) / 2 / tm
            printf "  %-6s %10.4f %8.4f-%-9.4f %7.2f %10.4f %8.1f %8.1f..%-7.1f %8s %9.1f %10.4f %8.1f\n", m, tm, lo, hi, lm,
                   fm, em, elo, ehi, (em <= spread && -em <= spread) ? "within" : "outside", eim, o, 100 * (o - tm) / tm
        }' "$out/$mode.rounds"
done
echo "# measured: PyTorch without the profiler, each run's median of $iterations iterations; median"
echo "#   and spread over $repeats rounds; framework: each round's prediction from that round's"
echo "#   traces of the 1-process and DDP runs (calibrated where they lack a key) and that round's"
echo "#   gloo sweep in situ (each collective after one layer's forward); error: median of the"
echo "#   rounds' errors, their range beside it; noise: the median error within half the measured"
echo "#   runs' range (within) or not (outside); isolated: the median error with the round's sweep"
echo "#   in a tight loop (as nccl-tests measures) instead; own_profile: dsmpi's"
echo "#   own 2-rank profile (MPI, OpenBLAS).  load after: $(cat /proc/loadavg)"
