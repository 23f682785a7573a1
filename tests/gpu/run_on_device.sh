#!/bin/bash
# One run on a machine with one GPU, the CUDA toolkit and possibly no MPI and
# no package registry, within a time budget (default 8 minutes):
#   1. dsmpi: the build given (--build), the one carried in .device/build
#      (tests/gpu/carry_runtime.sh), or one configured here for the GPU found;
#      Debian's Open MPI, HDF5 and OpenBLAS from .device/debs when carried
#   2. the cuda-labelled tests
#   3. the compute events of gpt2-medium and llama3-8b layers at tp 1, 2, 4 and
#      mbs 1, 4 in bf16, then at tp 1 with FP8 GEMMs (mbs 1, 4) and with flash
#      attention (mbs 1), profiled on one rank into a profile database (what
#      the backend refuses in the last two is listed, not fatal); per GEMM the
#      achieved TFLOP/s against the device's peak (dsmpi device)
#   4. dsmpi validate on one GPU for stacks of 2 and 4 layers and 1 and 4
#      micro-batches
#   5. everything under $OUT (default ./device-out): summary.txt (each step's
#      status and time), device.txt, gemm_tflops.txt, validate.txt,
#      profile.h5, results.tar.gz (logs, cost tables, JSON); kept up to date
#      after every step, so a run stopped at any point leaves what it did.
# dsmpi runs as an MPI singleton (no mpirun): Open MPI starts its orted
# itself, from the carried runtime when there is one.
#
# usage: tests/gpu/run_on_device.sh [--backend cuda|cpu] [--tiny] [--build DIR]
#                                   [--budget SECONDS]
#   --backend cpu   the same steps on the cpu backend (no GPU needed): what
#                   remains to fail on a GPU is the GPU's
#   --tiny          a tiny model, one case per step (the CTest check)
#   --build DIR     a build tree (apps/dsmpi/dsmpi) or a packed build (bin/dsmpi)
#   --budget S      stop starting steps so as to end within S seconds (default 480)
# Exit status: 0 when every step ran (cases refused by the backend are listed,
# not fatal), 1 when a step failed, 2 on bad usage.
set -uo pipefail

backend=cuda
tiny=0
build=""
budget=480
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
    --backend)
        backend=${2:-}
        shift 2 || true
        ;;
    --tiny)
        tiny=1
        shift
        ;;
    --build)
        build=${2:-}
        shift 2 || true
        ;;
    --budget)
        budget=${2:-}
        shift 2 || true
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "run_on_device.sh: unknown option '$1' (accepted: --backend cuda|cpu, --tiny, --build DIR, --budget SECONDS, --help)" >&2
        exit 2
        ;;
    esac
done
case "$backend" in cuda | cpu) ;; *)
    echo "run_on_device.sh: --backend '$backend' is not accepted (accepted: cuda, cpu)" >&2
    exit 2
    ;;
esac
case "$budget" in '' | *[!0-9]*)
    echo "run_on_device.sh: --budget '$budget' is not accepted (accepted: whole seconds, at least 60)" >&2
    exit 2
    ;;
esac
if [ "$budget" -lt 60 ]; then
    echo "run_on_device.sh: --budget $budget is not accepted (accepted: whole seconds, at least 60)" >&2
    exit 2
fi

repo=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dsmpi-device.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/logs" "$work/costs" "$work/validate"
start=$(date +%s)
failed=0

elapsed() { echo $(($(date +%s) - start)); }
left() { echo $((budget - $(elapsed))); }
note() { echo "[$(elapsed) s] $*" | tee -a "$OUT/summary.txt"; }
# Brings $OUT up to date: at most 8 files, none in sub-folders.
publish() {
    cp -f "$work"/gemm_tflops.txt "$work"/validate.txt "$work"/device.txt "$OUT"/ 2>/dev/null
    [ -f "$work/profile.h5" ] && cp -f "$work/profile.h5" "$OUT/"
    tar -C "$work" -czf "$OUT/results.tar.gz.part" logs costs validate 2>/dev/null &&
        mv -f "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
}
# step NAME LIMIT COMMAND...: runs COMMAND with the dsmpi runtime (runner=env:
# the machine's own libraries), its output in logs/NAME.log, for at most LIMIT
# seconds and never past the budget.
step() {
    local name=$1 limit=$2
    shift 2
    local room=$(($(left) - 10))
    [ "$room" -lt "$limit" ] && limit=$room
    if [ "$limit" -lt 5 ]; then
        note "$name: not run (budget spent)"
        return 124
    fi
    local t0 rc
    t0=$(date +%s)
    ${runner:-with_runtime} timeout -k 5 "$limit" "$@" >"$work/logs/$name.log" 2>&1
    rc=$?
    note "$name: exit $rc in $(($(date +%s) - t0)) s"
    return $rc
}

: >"$OUT/summary.txt"
note "run_on_device.sh: backend $backend, budget $budget s, tiny $tiny, out $OUT"

# ---- 1. runtime and build ------------------------------------------------------------------
runtime_path=""
runtime_lib=""
if [ -d "$repo/.device/debs" ] && [ ! -d "$repo/.device/root/usr" ]; then
    mkdir -p "$repo/.device/root"
    for deb in "$repo"/.device/debs/*.deb; do
        dpkg -x "$deb" "$repo/.device/root" || failed=1
    done
    note "unpacked $(ls "$repo"/.device/debs/*.deb | wc -l) carried packages"
fi
if [ -d "$repo/.device/root/usr" ]; then
    r=$repo/.device/root
    runtime_lib="$r/usr/lib/x86_64-linux-gnu:$r/usr/lib/x86_64-linux-gnu/openmpi/lib:$r/lib/x86_64-linux-gnu"
    runtime_lib="$runtime_lib:$r/usr/lib/x86_64-linux-gnu/openblas-pthread"
    runtime_path="$r/usr/bin"
    export OPAL_PREFIX=$r/usr
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The carried libraries serve dsmpi alone: the machine's own tools keep theirs.
with_runtime() {
    LD_LIBRARY_PATH="${build_lib:+$build_lib:}${runtime_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        PATH="${runtime_path:+$runtime_path:}$PATH" "$@"
}

gpu_arch=""
if [ "$backend" = cuda ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv >"$work/device.txt" 2>&1
    gpu_arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
fi
build_lib=""
dsmpi=""
tests_dir=""
if [ -z "$build" ] && [ -x "$repo/.device/build/bin/dsmpi" ]; then
    build=$repo/.device/build
fi
if [ -n "$build" ] && [ -x "$build/bin/dsmpi" ]; then # packed by carry_runtime.sh
    dsmpi=$build/bin/dsmpi
    build_lib=$build/lib
    tests_dir=$build/tests
elif [ -n "$build" ] && [ -x "$build/apps/dsmpi/dsmpi" ]; then
    dsmpi=$build/apps/dsmpi/dsmpi
    build_lib=$build/libdsmpi
elif [ -n "$build" ]; then
    echo "run_on_device.sh: --build '$build' holds neither bin/dsmpi nor apps/dsmpi/dsmpi" >&2
    exit 2
else
    build=$repo/build-device
    runner=env step configure 240 cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DDSMPI_WITH_CUDA="$([ "$backend" = cuda ] && echo ON || echo AUTO)" \
        ${gpu_arch:+-DCMAKE_CUDA_ARCHITECTURES=$gpu_arch} || failed=1
    runner=env step build 300 cmake --build "$build" -j "$(nproc)" || failed=1
    dsmpi=$build/apps/dsmpi/dsmpi
    build_lib=$build/libdsmpi
fi
if ! with_runtime "$dsmpi" version >"$work/logs/version.log" 2>&1; then
    note "dsmpi does not start: $(tail -2 "$work/logs/version.log" | tr '\n' ' ')"
    publish
    exit 1
fi
cat "$work/logs/version.log" >>"$work/device.txt"
note "dsmpi: $dsmpi"

# ---- 2. the cuda-labelled tests ------------------------------------------------------------------
if [ -n "$tests_dir" ]; then
    while read -r name program args; do
        [ -n "$name" ] || continue
        args=${args//@REPO@/$repo}
        # shellcheck disable=SC2086 # the arguments were quoted when packed
        step "test-$name" 120 "$tests_dir/$program" $args
        rc=$?
        [ $rc -eq 77 ] && note "test-$name: skipped (no GPU visible)"
        [ $rc -ne 0 ] && [ $rc -ne 77 ] && failed=1
    done <"$tests_dir/tests.txt"
else
    step ctest-cuda 180 ctest --test-dir "$build" -L cuda --output-on-failure || failed=1
fi
publish

# ---- 3. profiles ---------------------------------------------------------------------------------
device=$(grep -m1 -i nvidia "$work/device.txt" | cut -d, -f1)
case "$backend:$device" in
cpu:*) spec=cpu ;;
*GH200*) spec=gh200 ;;
*H200*) spec=h200 ;;
*H100*PCIe*) spec=h100-pcie ;;
*H100*) spec=h100-sxm ;;
*B200*) spec=b200 ;;
*A100*40GB*) spec=a100-40g ;;
*A100*) spec=a100-80g ;;
*) spec=h100-sxm ;;
esac
note "device spec for the peaks: $spec ($device)"

if [ "$tiny" = 1 ]; then
    models="$repo/tests/data/validate/tiny-gpt2.json"
    tps="1 2"
    mbss="1"
    seq=32
    export DS_MEASURE_BUDGET_S=0.02 DS_MEASURE_MIN_REPS=2 DS_MEASURE_WARMUP=1
else
    models="gpt2-medium llama3-8b"
    tps="1 2 4"
    mbss="1 4"
    seq=2048
    export DS_MEASURE_BUDGET_S=${DS_MEASURE_BUDGET_S:-0.25}
fi
# Every bf16 case; FP8 GEMMs and flash attention at tp 1 (the new kernels'
# shapes at both batch sizes without doubling the run).
cases=""
for model in $models; do
    for tp in $tps; do
        for mbs in $mbss; do cases="$cases bf16:$model:$tp:$mbs"; done
    done
done
for model in $models; do
    for mbs in $mbss; do cases="$cases fp8:$model:1:$mbs"; done
    cases="$cases flash:$model:1:1"
done
validate_reserve=$([ "$tiny" = 1 ] && echo 30 || echo 150)
for c in $cases; do
    IFS=: read -r variant model tp mbs <<<"$c"
    name=$(basename "$model" .json)-$variant-tp$tp-mbs$mbs
    if [ "$(left)" -lt "$validate_reserve" ]; then
        note "profile-$name: not run (time kept for validate)"
        continue
    fi
    extra=()
    [ "$variant" = fp8 ] && extra=(--fp8-format hybrid)
    [ "$variant" = flash ] && extra=(--use-flash-attn)
    step "profile-$name" 120 "$dsmpi" profile --model "$model" --seq-len "$seq" \
        --dtype bf16 --strategy "tp=$tp,mbs=$mbs" --target-gpus 8 --compute-only \
        --backend "$backend" "${extra[@]}" --costs-out "$work/costs/$name.txt"
    rc=$?
    # A kernel the backend does not have (fp8 shapes, cuDNN's attention) is
    # reported, not a failure of the run; bf16 must run.
    if [ $rc -ne 0 ] && [ "$variant" != bf16 ]; then
        note "profile-$name: not run by the $backend backend: $(grep -v '^#' "$work/logs/profile-$name.log" | tail -1)"
    elif [ $rc -ne 0 ]; then
        failed=1
    fi
done

# The database: every table under the fingerprint it was measured with.
for table in "$work"/costs/*.txt; do
    [ -s "$table" ] || continue
    fingerprint=$(sed -n 's/^# measured by dsmpi profile on [0-9]* ranks\{0,1\} of [a-z]*: //p' "$table" | head -1)
    with_runtime "$dsmpi" import --cost-table "$table" --profile-db "$work/profile.h5" \
        --fingerprint "${fingerprint:-unknown}" --quiet >>"$work/logs/import.log" 2>&1 || failed=1
done

# Per GEMM: achieved TFLOP/s = 2 m n k (x batch) / median, against the peak of its dtype.
peaks=$(with_runtime "$dsmpi" device --device "$spec" | awk -v d="$spec" '$1 == d {print $4, $5, $7}')
awk -v peaks="$peaks" -v spec="$spec" '
    BEGIN {
        split(peaks, p, " ")
        peak["bf16"] = p[1]; peak["fp16"] = p[1]; peak["fp32"] = p[2]; peak["fp8"] = p[3]
        printf "# achieved TFLOP/s per GEMM = 2 m n k (x batch) / median time; peak: dsmpi device --device %s\n", spec
        printf "# %-26s %-5s %-9s %-2s %7s %7s %7s %5s %10s %8s %6s\n", "case", "op", "pass", "tr", "m", "n", "k", "batch", "median", "achieved", "peak"
        printf "# %-26s %-5s %-9s %-2s %7s %7s %7s %5s %10s %8s %6s\n", "", "", "", "", "", "", "", "", "(us)", "(TF/s)", "(%)"
    }
    FNR == 1 { name = FILENAME; sub(/.*\//, "", name); sub(/\.txt$/, "", name) }
    ($1 == "gemm" || $1 == "bgemm") && !seen[name, $0]++ {
        m = n = k = 0; b = 1; median = 0
        for (i = 1; i <= NF; i++) {
            if ($i ~ /^m=/) m = substr($i, 3)
            if ($i ~ /^n=/) n = substr($i, 3)
            if ($i ~ /^k=/) k = substr($i, 3)
            if ($i ~ /^batch=/) b = substr($i, 7)
            if ($i == "=") median = $(i + 2)
        }
        if (median <= 0) next
        tf = 2.0 * m * n * k * b / median / 1e12
        pk = peak[$3] + 0
        share = pk > 0 ? 100 * tf / pk : 0
        printf "  %-26s %-5s %-9s %-2s %7d %7d %7d %5d %10.2f %8.3f %6.1f\n", name, $1, $2 "/" $3, $4, m, n, k, b, median * 1e6, tf, share
    }' "$work"/costs/*.txt >"$work/gemm_tflops.txt" 2>>"$work/logs/tflops.log"
note "GEMMs reported: $(grep -c '^  ' "$work/gemm_tflops.txt")"
publish

# ---- 4. validate on one GPU ---------------------------------------------------------------------
# Layer stacks of the two models as Hugging Face configurations.
stack() { # NAME LAYERS
    case "$1" in
    gpt2-medium)
        printf '{"model_type": "gpt2", "n_layer": %d, "n_embd": 1024, "n_head": 16, "n_positions": 2048, "vocab_size": 50257}\n' "$2"
        ;;
    llama3-8b)
        printf '{"model_type": "llama", "num_hidden_layers": %d, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 8192, "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0}\n' "$2"
        ;;
    esac
}
if [ "$tiny" = 1 ]; then
    cases="$repo/tests/data/validate/tiny-gpt2.json:2"
else
    cases=""
    for model in gpt2-medium llama3-8b; do
        for layers in 2 4; do
            stack "$model" "$layers" >"$work/validate/$model-$layers.json"
            for m in 1 4; do cases="$cases $work/validate/$model-$layers.json:$m"; done
        done
    done
fi
: >"$work/validate.txt"
errors=""
for c in $cases; do
    config=${c%:*}
    m=${c##*:}
    name=$(basename "$config" .json)-m$m
    if [ "$(left)" -lt 25 ]; then
        note "validate-$name: not run (budget spent)"
        continue
    fi
    step "validate-$name" 150 "$dsmpi" validate --model "$config" --seq-len "$seq" --dtype bf16 \
        --strategy "dp=1,tp=1,pp=1,mbs=1" --global-batch "$m" --backend "$backend" \
        --warmup 1 --iterations 3 --repeats 2 --retries 1 --max-error 100
    rc=$?
    [ $rc -ne 0 ] && failed=1
    # predicted, measured (ms), spread, error (%) of the iteration time
    iteration=$(grep -m1 '^  iteration ' "$work/logs/validate-$name.log" | awk '{print $2, $3, $5}')
    if [ -n "$iteration" ]; then
        set -- $iteration
        note "validate-$name: iteration predicted $1 ms, measured $2 ms, error $3 %"
        errors="$errors $3"
    fi
    {
        echo "## $name (exit $rc)"
        grep -v '^$' "$work/logs/validate-$name.log" | tail -25
    } >>"$work/validate.txt"
done
if [ -n "$errors" ]; then
    note "validate: mean |iteration error| $(echo $errors | awk '{for (i = 1; i <= NF; i++) t += ($i < 0 ? -$i : $i); printf "%.2f", t / NF}') % over $(echo $errors | wc -w) case(s) (target 3 %)"
fi
publish
note "done: $([ $failed = 0 ] && echo 'every step ran' || echo 'a step failed (see its log in results.tar.gz)')"
exit $failed
