#!/bin/bash
# The device model's band per operator class, measured on this machine: the
# CPU backend profiles the layer passes of a few cases (one rank, one core,
# single-threaded BLAS, compute only), then device_band predicts each case's
# kernels with the `cpu` description's GEMM rate and bandwidth set from the
# other cases' kernels and prints measured / modelled per class (the numbers
# of libdsmpi/events/device_band.c), and per case the iteration's compute
# time (each kernel x its occurrences) measured / modelled.  Prints the load
# before and after: the machine may be shared; rerun when the load moved.
#   tests/bench/device_band.sh [BUILD_DIR] [--verbose]
set -eu
build=$(cd "${1:-build}" && pwd)
shift || true
dsmpi=$build/apps/dsmpi/dsmpi
bench=$build/tests/bench/device_band
data=$(cd "$(dirname "$0")/../data/validate" && pwd)
if [ ! -x "$bench" ]; then
    echo "device_band.sh: $bench not found (build the project first)" >&2
    exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OPENBLAS_NUM_THREADS=1
# model;seq-len;global batch;strategy;target GPUs: unfused and flash attention,
# wide and thin GEMMs (tensor parallelism splits them), three families.
cases=(
    "$data/tiny-llama.json;256;8;dp=1,tp=2,pp=1,mbs=2;2"
    "$data/tiny-llama.json;512;4;dp=1,tp=1,pp=1,mbs=1,flash;1"
    "$data/tiny-llama.json;64;8;dp=1,tp=2,pp=1,mbs=1;2"
    "$data/tiny-gpt2.json;128;8;dp=1,tp=1,pp=1,mbs=4;1"
    "$data/tiny-bert.json;128;8;dp=1,tp=2,pp=1,mbs=2,flash;2"
    "gpt2-medium;128;8;dp=1,tp=8,pp=1,mbs=1;8"
)
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
args=()
i=0
for c in "${cases[@]}"; do
    IFS=';' read -r model seq gbs strategy gpus <<<"$c"
    mpiexec -n 1 "$dsmpi" profile --model "$model" --seq-len "$seq" --global-batch "$gbs" \
        --strategy "$strategy" --target-gpus "$gpus" --gpus-per-node "$gpus" --compute-only \
        --costs-out "$work/costs$i.txt" >"$work/profile$i.out" 2>&1 ||
        { echo "device_band.sh: profiling '$c' failed: $(tail -c 300 "$work/profile$i.out")" >&2; exit 1; }
    args+=("$c;$work/costs$i.txt")
    i=$((i + 1))
done
echo "# load after profiling: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" "$@" "${args[@]}"
