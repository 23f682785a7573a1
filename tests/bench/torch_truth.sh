#!/bin/bash
# Real PyTorch as the truth: predict PyTorch's 2-process 1F1B (pp=2) and
# Megatron-style TP (tp=2) training of a small GPT-2-style model on CPU from
# the traces of its 1-process and 2-process DDP runs (less the profiler's own
# time, from the same runs without it) plus a sweep of its own collectives
# (gloo), and compare with the measured runs (profiler off,
# median of REPEATS runs, the machine's load recorded before each); dsmpi's
# own-profile prediction printed beside it.
#
# usage: tests/bench/torch_truth.sh [--short] [BUILD_DIR] [OUT_DIR]
#   --short     one run of each, 2 iterations, a small sweep (the CTest case
#               bench_torch_truth_short: the pipeline end to end, no accuracy gate)
# environment:
#   DSMPI_TORCH_PYTHON  an interpreter that imports torch (default: the first of
#                       /usr/bin/python3 and python3 that does); none: exit 77
#   REPEATS (3), ITERATIONS (5), WARMUP (2), MICROBATCHES (4)
#   MPIEXEC             launcher of dsmpi profile (default mpirun)
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
    repeats=1 iterations=2 warmup=1 sweep_max=262144
else
    repeats=${REPEATS:-3} iterations=${ITERATIONS:-5} warmup=${WARMUP:-2} sweep_max=16777216
fi
mb=${MICROBATCHES:-4}
denormal=""
[ "${FLUSH_DENORMAL:-0}" = 1 ] && denormal=--flush-denormal
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
train() { # MODE DIR [ARGS...]
    local mode=$1 dir=$2
    shift 2
    port=$((port + 1))
    timeout 600 "$python" "$script" --mode "$mode" --out "$dir" --iters "$iterations" \
        --warmup "$warmup" --microbatches "$mb" --port "$port" $denormal "$@" >"$dir/$mode.log" 2>&1 ||
        fail "torch_train.py --mode $mode: $(tail -3 "$dir/$mode.log")"
}

exec > >(tee "$out/torch_truth.txt")
echo "# torch_truth: $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "# load before: $(cat /proc/loadavg)${denormal:+; PyTorch runs with $denormal}"
echo "# out: $out"
# 1. The inputs: traces of the 1-process and DDP runs, the gloo sweep.
mkdir -p "$out/traces" "$out/sweep"
train single "$out/traces"
train ddp "$out/traces"
port=$((port + 1))
timeout 600 "$python" "$script" --mode sweep --out "$out/sweep" --sweep-max "$sweep_max" --port "$port" \
    >"$out/sweep/sweep.log" 2>&1 || fail "gloo sweep: $(tail -3 "$out/sweep/sweep.log")"
logs=("$out"/sweep/gloo_*.log)
# The same runs without the profiler: the profiler's own time per recorded
# event comes off the traced costs (import --unprofiled-s).
declare -A unprofiled
for mode in single ddp; do
    mkdir -p "$out/unprofiled"
    train "$mode" "$out/unprofiled" --no-profile
    unprofiled[$mode]=$(grep -v '^#' "$out/unprofiled/${mode}_times.txt" | median)
done

# 2. The truth: 1F1B and TP without the profiler, REPEATS runs.
for mode in 1f1b tp; do
    : >"$out/$mode.medians"
    for r in $(seq 1 "$repeats"); do
        mkdir -p "$out/measured/$mode.$r"
        l=$(load)
        train "$mode" "$out/measured/$mode.$r" --no-profile
        m=$(grep -v '^#' "$out/measured/$mode.$r/${mode}_times.txt" | median)
        echo "$m $l" >>"$out/$mode.medians"
    done
done

# 3. dsmpi's own profile of the same runs (2 ranks).
own=$out/own.h5
for mode in ddp 1f1b tp; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        $mpiexec -np 2 "$dsmpi" profile $run --strategy "${strategy[$mode]}" --target-gpus 2 \
        --profile-db "$own" >"$out/profile_$mode.log" 2>&1 ||
        fail "dsmpi profile ${strategy[$mode]}: $(tail -3 "$out/profile_$mode.log")"
done
own_fp=$(h5dump -d /fingerprints "$own" | grep '(0):' | head -1 | sed 's/.*(0): "\(.*\)"/\1/')
[ -n "$own_fp" ] || fail "no fingerprint in $own (h5dump)"

# 4. The traces imported; what they lack calibrated from the own profile.
fw=$out/framework.h5
tf="cpu: pytorch (framework trace)"
cp "$own" "$fw"
"$dsmpi" import --profile-db "$fw" --fingerprint "$tf" $run --strategy "${strategy[single]}" \
    --torch-trace "$out/traces/single_rank0.json" --unprofiled-s "${unprofiled[single]}" \
    >"$out/import_single.txt" 2>&1 ||
    fail "import single: $(tail -2 "$out/import_single.txt")"
"$dsmpi" import --profile-db "$fw" --fingerprint "$tf" $run --strategy "${strategy[ddp]}" \
    --torch-trace "$out/traces/ddp_rank0.json" "$out/traces/ddp_rank1.json" \
    --unprofiled-s "${unprofiled[ddp]}" --calibrate-from "$own_fp" >"$out/import_ddp.txt" 2>&1 ||
    fail "import ddp: $(tail -2 "$out/import_ddp.txt")"
grep -h "without the profiler: costs" "$out/import_single.txt" "$out/import_ddp.txt" | sed 's/^#  */# /'
grep "calibrated from" "$out/import_ddp.txt" | sed 's/from .*: \([0-9]* costs\)/from the own profile: \1/'

# 5. Predictions, and the table.
predict() { # DB FINGERPRINT MODE [ARGS...] -> iteration seconds
    local db=$1 fp=$2 mode=$3
    shift 3
    "$dsmpi" predict --profile-db "$db" --fingerprint "$fp" $run --strategy "${strategy[$mode]}" \
        --target-gpus 2 --json "$@" 2>"$out/predict.err" |
        grep -o '"iter_time_s": [0-9.e+-]*' | head -1 | awk '{ print $2 }'
}
echo "#"
printf "# %-6s %10s %18s %7s %10s %8s %10s %8s\n" mode measured "min-max" load framework error \
    own_profile error
printf "# %-6s %10s %18s %7s %10s %8s %10s %8s\n" "" "(s)" "(s)" "(1-min)" "(s)" "(%)" "(s)" "(%)"
status=0
for mode in 1f1b tp; do
    meas=$(awk '{ print $1 }' "$out/$mode.medians" | median)
    lo=$(awk '{ print $1 }' "$out/$mode.medians" | sort -g | head -1)
    hi=$(awk '{ print $1 }' "$out/$mode.medians" | sort -g | tail -1)
    ld=$(awk '{ print $2 }' "$out/$mode.medians" | median)
    fwp=$(predict "$fw" "$tf" "$mode" --nccl-tests "${logs[@]}" --gpus-per-node 2)
    [ -n "$fwp" ] || fail "predict $mode from the traces: $(head -c 300 "$out/predict.err")"
    ownp=$(predict "$own" "$own_fp" "$mode")
    [ -n "$ownp" ] || fail "predict $mode from the own profile: $(head -c 300 "$out/predict.err")"
    awk -v m="$mode" -v t="$meas" -v lo="$lo" -v hi="$hi" -v l="$ld" -v f="$fwp" -v o="$ownp" \
        'BEGIN { printf "  %-6s %10.4f %8.4f-%-9.4f %7.2f %10.4f %8.1f %10.4f %8.1f\n", m, t, lo, hi,
                 l, f, 100 * (f - t) / t, o, 100 * (o - t) / t }'
done
echo "# measured: PyTorch without the profiler, median over $repeats runs of each run's median"
echo "#   of $iterations iterations; framework: from the traces of the 1-process and DDP runs"
echo "#   (calibrated where they lack a key) and the gloo sweep; own_profile: dsmpi's own"
echo "#   2-rank profile (MPI, OpenBLAS).  load after: $(cat /proc/loadavg)"
exit $status
