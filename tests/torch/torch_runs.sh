#!/bin/bash
# Real PyTorch runs (tests/torch/torch_train.py: single, DDP, GPipe, 1F1B,
# Megatron-style TP on 1 and 2 gloo processes, and the gloo collective sweep)
# imported into a profile database and validated, every trace layout; skipped
# (exit 77) where no interpreter imports torch.  A 1-layer model and one short
# iteration: what is checked is that every mode runs, its traces map with the
# coverage the import promises, and the sweep imports as nccl-tests logs.
#   torch_runs.sh DSMPI DATA_DIR WORKDIR
set -u
dsmpi=$1 data=$2/torch work=$3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/torch_python.sh" torch_runs
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1
failures=0
fail() { echo "torch_runs: FAILED: $*" >&2; failures=$((failures + 1)); }
port=$((29300 + $$ % 200))
run="--model $data/gpt2-tiny-1l.json --seq-len 64 --dtype fp32"
declare -A strategy=(
    [single]="dp=1,tp=1,pp=1,mbs=2,gbs=4"
    [ddp]="dp=2,tp=1,pp=1,mbs=2,gbs=8"
    [gpipe]="dp=1,tp=1,pp=2,mbs=2,gbs=4,schedule=gpipe"
    [1f1b]="dp=1,tp=1,pp=2,mbs=2,gbs=4,schedule=1f1b"
    [tp]="dp=1,tp=2,pp=1,mbs=2,gbs=4"
)
# The gloo sweep as nccl-tests logs: the communication model of the validations.
port=$((port + 1))
timeout 300 "$python" "$here/torch_train.py" --mode sweep --out sweep --sweep-max 65536 --sweep-iters 3 --sweep-seconds 0.05 \
    --port "$port" > sweep.log 2>&1 || fail "sweep: $(tail -3 sweep.log)"
"$dsmpi" import --nccl-tests sweep/gloo_*.log --gpus-per-node 2 --cluster-tag gloo \
    --profile-db sweep.h5 > sweep.out 2>&1 || fail "import sweep: $(cat sweep.out)"
grep -Eq 'nccl-tests +0 +[1-9]' sweep.out || fail "sweep: no samples: $(cat sweep.out)"
# pipeline modes need 2 layers: a 2-layer copy of the model
sed 's/"n_layer": 1/"n_layer": 2/' "$data/gpt2-tiny-1l.json" > gpt2-tiny-2l.json
for mode in single ddp gpipe 1f1b tp; do
    layers=1 model_run=$run
    case $mode in gpipe | 1f1b) layers=2 model_run="--model gpt2-tiny-2l.json --seq-len 64 --dtype fp32" ;; esac
    port=$((port + 1))
    if ! timeout 300 "$python" "$here/torch_train.py" --mode "$mode" --out . --iters 2 --warmup 1 \
        --microbatches 2 --layers "$layers" --port "$port" > "$mode.log" 2>&1; then
        fail "$mode: $(tail -3 "$mode.log")"
        continue
    fi
    traces=$(ls ${mode}_rank*.json)
    [ "$(echo "$traces" | wc -w)" -eq $([ "$mode" = single ] && echo 1 || echo 2) ] ||
        fail "$mode: traces $traces"
    for t in $traces; do
        rank=${t#${mode}_rank}
        rank=${rank%.json}
        stage=0
        case $mode in gpipe | 1f1b) stage=$rank ;; esac
        "$dsmpi" import --torch-trace "$t" $model_run --strategy "${strategy[$mode]}" \
            --stage "$stage" --profile-db "$mode.h5" --fingerprint "cpu: pytorch" > "$t.out" 2> "$t.err" ||
            fail "import $t: $(cat "$t.err")"
        cov=$(grep -o '[0-9.]*% of the iterations' "$t.out" | head -1 | tr -d '%' | cut -d' ' -f1)
        # torch.distributed's collectives outside the passes (DDP's gradient all-reduce)
        # and a DDP rank's wait for them (idle) are communication, left to the
        # communication model: not compute to map
        comm=0
        [ "$mode" = ddp ] &&
            comm=$(awk '$1 ~ /^c10d::/ || $1 == "(idle)" { s += $3 } END { print s + 0 }' "$t.out")
        # a pipeline rank waits for the other (the bubble): coverage is not the point there
        case $mode in
        gpipe | 1f1b) ;;
        *) awk -v c="$cov" -v k="$comm" 'BEGIN { exit !(c + k >= 90) }' ||
            fail "import $t: coverage $cov% (and $comm% in collectives and waits)" ;;
        esac
    done
    # validate from the run's own import and the gloo sweep
    "$dsmpi" validate --torch-trace $traces $model_run --strategy "${strategy[$mode]}" \
        --profile-db "$mode.h5" --fingerprint "cpu: pytorch" --nccl-tests sweep/gloo_*.log \
        --gpus-per-node 2 > "$mode.validate" 2>&1 || fail "validate $mode: $(cat "$mode.validate")"
    grep -q "^  iteration " "$mode.validate" || fail "validate $mode: $(cat "$mode.validate")"
done
# The Kineto layout (shapes) of the single run.
port=$((port + 1))
timeout 300 "$python" "$here/torch_train.py" --mode single --format kineto --out kineto --iters 1 --warmup 1 \
    --microbatches 1 --layers 1 --port "$port" > kineto.log 2>&1 || fail "kineto: $(tail -3 kineto.log)"
"$dsmpi" import --torch-trace kineto/single_rank0.json $run --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 \
    --profile-db kineto.h5 > kineto.out 2>&1 || fail "import kineto: $(cat kineto.out)"
grep -q "kineto trace" kineto.out || fail "kineto: $(cat kineto.out)"
[ "$failures" -eq 0 ] || exit 1
echo "torch_runs: all checks passed"
