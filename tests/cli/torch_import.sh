#!/bin/sh
# dsmpi import --torch-trace: the committed fixtures of real PyTorch runs into a
# profile database; bad files refused with one line, exit 2, nothing written.
#   torch_import.sh DSMPI DATA_DIR WORKDIR
set -u
dsmpi=$1 data=$2/torch work=$3
test_name=torch_import
. "$(cd "$(dirname "$0")" && pwd)/lib_check.sh"
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1
run="--model $data/gpt2-tiny-1l.json --seq-len 64 --dtype fp32"

expect 0 "--help" "$dsmpi" import --help
grep -q -- "--torch-trace" out || fail "--help does not list --torch-trace"
grep -q -- "--calibrate-from" out || fail "--help does not list --calibrate-from"

expect 0 "legacy trace" "$dsmpi" import --torch-trace "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5 --fingerprint "cpu: pytorch"
grep -Eq '^ +torch-trace +[0-9]+ +0 +[0-9]+ +0 ' out || fail "legacy trace: $(cat out)"
grep -q "legacy trace, 1 iterations" out || fail "legacy trace: no trace summary: $(cat out)"
grep -q "unmapped" out || fail "legacy trace: no unmapped list: $(cat out)"
[ -s err ] && fail "legacy trace: a warning on a fully mapped trace: $(cat err)"
# The job's iteration without the profiler: every cost of the CPU trace scaled to it.
median=$(sed -n 's/.*legacy trace, 1 iterations, median \([0-9.]*\) s.*/\1/p' out)
half=$(awk -v m="$median" 'BEGIN { printf "%.9g", m / 2 }')
expect 0 "--unprofiled-s" "$dsmpi" import --torch-trace "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db unprofiled.h5 --fingerprint "cpu: pytorch" \
    --unprofiled-s "$half"
grep -Eq "without the profiler: costs x 0\.(499|500)[0-9] " out || fail "--unprofiled-s $half: $(cat out)"
for bad in 0 -1 abc; do
    before=$(cksum < unprofiled.h5)
    expect 2 "--unprofiled-s $bad" "$dsmpi" import --torch-trace "$data/single-legacy.json" $run \
        --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db unprofiled.h5 --unprofiled-s "$bad"
    one_line_naming "unprofiled-s" "--unprofiled-s $bad"
    [ "$(cksum < unprofiled.h5)" = "$before" ] || fail "--unprofiled-s $bad modified the database"
done
expect 0 "kineto trace" "$dsmpi" import --torch-trace "$data/single-kineto.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5 --fingerprint "cpu: pytorch" --json
grep -q '"source": "torch-trace"' out || fail "kineto trace --json: $(cat out)"
grep -Eq '"new": 0, "replaced": [1-9]' out || fail "kineto trace: keys not replaced: $(cat out)"
if command -v h5dump >/dev/null 2>&1; then
    h5dump -d events db.h5 > dump 2>&1 || fail "h5dump cannot read db.h5"
    grep -q 'framework' dump || fail "h5dump: no event marked framework"
fi

# gzip-compressed (the .json.gz torch.profiler writes): read as the JSON it holds.
expect 0 "kineto trace .json" "$dsmpi" import --torch-trace "$data/single-kineto.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db plain.h5 --fingerprint "cpu: pytorch"
plain_events=$(awk '$1 == "torch-trace" { print $2 }' out)
gzip -9 -c "$data/single-kineto.json" > single-kineto.json.gz || fail "gzip"
expect 0 "kineto trace .json.gz" "$dsmpi" import --torch-trace single-kineto.json.gz $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db gz.h5 --fingerprint "cpu: pytorch"
grep -q "single-kineto.json.gz: kineto trace, 1 iterations" out || fail ".json.gz: $(cat out)"
[ -n "$plain_events" ] && [ "$(awk '$1 == "torch-trace" { print $2 }' out)" = "$plain_events" ] ||
    fail ".json.gz: not the $plain_events events of the .json: $(cat out)"
head -c 4000 single-kineto.json.gz > cut.json.gz
expect 2 "truncated .json.gz" "$dsmpi" import --torch-trace cut.json.gz $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db cut.h5
one_line_naming "cut.json.gz" "truncated .json.gz"
grep -q "truncated gzip" err || fail "truncated .json.gz: $(cat err)"
[ -e cut.h5 ] && fail "truncated .json.gz: cut.h5 was written"
expect 0 "validate .json.gz" "$dsmpi" validate --torch-trace single-kineto.json.gz $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db gz.h5 --fingerprint "cpu: pytorch"
grep -q "^  iteration " out || fail "validate .json.gz: $(cat out)"

# A CUDA trace (hand-written to Kineto's format): costs are the device time of each
# operator's kernels, found through the correlation ids.
expect 0 "gpu trace" "$dsmpi" import --torch-trace "$data/gpu-kineto.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db gpu.h5 --fingerprint "a100: pytorch"
grep -Eq '^ +torch-trace +13 ' out || fail "gpu trace: not 13 keys: $(cat out)"
grep -q "20 kernels, copies and memsets, 19 linked to their launches" out ||
    fail "gpu trace: kernels: $(cat out)"
grep -q "costs are device time: 0.000165 s of the matched operators' work; 0.000006 s launched in the passes by operators of no known kind and 0.000316 s idle between kernels (64.9% of the charged time)" out ||
    fail "gpu trace: device time: $(cat out)"

# A fingerprint naming no device dsmpi knows: imported, with a one-line warning that
# predictions cannot carry its compute costs to a device.
expect 0 "unknown device" "$dsmpi" import --torch-trace "$data/gpu-kineto.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db unknown.h5 --fingerprint "a100: pytorch"
[ "$(wc -l < err)" -eq 1 ] && grep -q "'a100: pytorch' names no device dsmpi knows" err ||
    fail "unknown device: $(cat err)"

# DDP on GPUs: the gradient all-reduce read with its size (record_param_comms) and timed by
# its NCCL kernel; validate prints it beside the communication model's prediction.
gpu_fp="cuda: NVIDIA A100-SXM4-80GB, pytorch"
expect 0 "ddp gpu trace" "$dsmpi" import --torch-trace "$data/ddp-gpu-kineto.json" $run \
    --strategy dp=2,tp=1,pp=1,mbs=2,gbs=4 --profile-db ddp.h5 --fingerprint "$gpu_fp"
grep -q "collectives with sizes (record_param_comms): 1 kinds" out ||
    fail "ddp gpu trace: no collectives: $(cat out)"
grep -Eq '^ +allreduce +fp32 +4194304 +2 +1 +0\.000120$' out ||
    fail "ddp gpu trace: the all-reduce: $(cat out)"
# The collective is stored as a communication sample: the model fitted on
# the database gives its traced time at its size, as imported.
grep -Eq '^  torch-trace +[0-9]+ +1 ' out || fail "ddp gpu trace: one communication sample: $(cat out)"
expect 0 "comm from the trace's sample" "$dsmpi" comm --profile-db ddp.h5 --gpus 2 \
    --min-bytes 4MiB --max-bytes 4MiB
grep -Eq '^ +4194304 +1048576 +float +120\.00 .* imported$' out ||
    fail "comm from the trace's sample: $(cat out)"
expect 0 "validate ddp" "$dsmpi" validate --torch-trace "$data/ddp-gpu-kineto.json" \
    "$data/ddp-gpu-kineto.json" $run --strategy dp=2,tp=1,pp=1,mbs=2,gbs=4 --profile-db ddp.h5 \
    --fingerprint "$gpu_fp" --estimate-missing
grep -Eq '^  allreduce +fp32 +4194304 +2 +2 +0\.000120 +0\.0000[0-9]+ +-?[0-9.]+$' out ||
    fail "validate ddp: the all-reduce row: $(cat out)"
# the pass measured from its first kernel to its last; its costs add up to it
grep -Eq '^  layer fwd +0\.000436 +0\.000436 +-?0\.0 ' out || fail "validate ddp: layer fwd: $(cat out)"
expect 0 "validate ddp --json" "$dsmpi" validate --torch-trace "$data/ddp-gpu-kineto.json" \
    "$data/ddp-gpu-kineto.json" $run --strategy dp=2,tp=1,pp=1,mbs=2,gbs=4 --profile-db ddp.h5 \
    --fingerprint "$gpu_fp" --estimate-missing --json
python3 - out <<'PY' || fail "validate ddp --json: $(cat out)"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["collectives"]
assert len(c) == 1 and c[0]["op"] == "allreduce" and c[0]["bytes"] == 4194304, c
assert c[0]["ranks"] == 2 and c[0]["count"] == 2 and abs(c[0]["measured_s"] - 120e-6) < 1e-12, c
assert c[0]["predicted_s"] > 0, c
PY

# Layer ranges from with_stack's module events (Megatron-Core's TransformerLayer), the
# backward passes found through autograd's sequence numbers.
expect 0 "module ranges" "$dsmpi" import --torch-trace "$data/modules-kineto.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=4 --profile-db modules.h5 --fingerprint "cpu: pytorch"
grep -Eq '^ +torch-trace +28 ' out || fail "module ranges: not 28 keys: $(cat out)"
grep -q "mapped: 4 ranges onto 28 keys" out || fail "module ranges: $(cat out)"
[ -s err ] && fail "module ranges: a warning: $(cat err)"

# tp=2: its collectives are left out of the compute costs.
expect 0 "tp trace" "$dsmpi" import --torch-trace "$data/tp2-rank0-legacy.json" $run \
    --strategy dp=1,tp=2,pp=1,mbs=2,gbs=2 --profile-db tp.h5
grep -q "collectives inside the passes" out || fail "tp trace: $(cat out)"

# Calibration from a database of dsmpi's own costs.
cat > own.txt <<'COSTS'
gemm fwd fp32 NT m=128 n=384 k=128 = 1e-4
gemm fwd fp32 NT m=128 n=192 k=128 = 5e-5
layernorm fwd fp32 rows=128 cols=128 = 1e-5
COSTS
expect 0 "own costs" "$dsmpi" import --cost-table own.txt --profile-db cal.h5 --fingerprint "cpu: own"
expect 0 "calibrated" "$dsmpi" import --torch-trace "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db cal.h5 --fingerprint "cpu: pytorch" \
    --calibrate-from "cpu: own"
grep -q "calibrated from 'cpu: own': 1 costs" out || fail "calibrated: $(cat out)"
if command -v h5dump >/dev/null 2>&1; then
    h5dump -d events cal.h5 | grep -q 'calibrated' || fail "h5dump: no event marked calibrated"
fi

# validate: the traced run predicted from its own import, beside the trace.
expect 0 "validate --help" "$dsmpi" validate --torch-trace --help
grep -q "slowest rank" out || fail "validate --torch-trace --help: $(cat out)"
expect 0 "validate" "$dsmpi" validate --torch-trace "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5 --fingerprint "cpu: pytorch"
for q in iteration "layer fwd" "layer bwd" "head bwd" optimizer collectives; do
    grep -q "^  $q " out || fail "validate: no row '$q': $(cat out)"
done
# Costs end to end: the passes add up to their ranges, so the iteration is close.
err=$(awk '$1 == "iteration" { e = $4; print (e < 0 ? -e : e) < 10 ? "ok" : e }' out)
[ "$err" = ok ] || fail "validate: iteration error $err% (expected under 10%): $(cat out)"
expect 0 "validate --json" "$dsmpi" validate --torch-trace "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5 --fingerprint "cpu: pytorch" --json
grep -q '"quantity": "iteration"' out || fail "validate --json: $(cat out)"
expect 2 "validate: two traces for one rank" "$dsmpi" validate --torch-trace \
    "$data/single-legacy.json" "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5
one_line_naming "2 target devices" "validate: two traces for one rank"
expect 2 "validate: truncated" "$dsmpi" validate --torch-trace "$data/bad/truncated.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5
one_line_naming "truncated.json" "validate: truncated"

# record_shapes: the GEMMs' Input Dims agree with the model's keys, or the import is refused.
expect 0 "kineto shapes" "$dsmpi" import --torch-trace "$data/single-kineto.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db shapes.h5
grep -q "the Input Dims of 21 traced GEMMs agree" out || fail "kineto shapes: $(cat out)"

before=$(cksum < db.h5)
expect 2 "another micro-batch size" "$dsmpi" import --torch-trace "$data/single-kineto.json" \
    $run --strategy dp=1,tp=1,pp=1,mbs=1,gbs=1 --profile-db db.h5
one_line_naming "single-kineto.json: layer:0:fwd" "another micro-batch size"
grep -q "expects 'gemm fwd fp32 NT m=64 n=384 k=128' (attn.qkv) where the trace has aten::addmm \
with Input Dims m=128 n=384 k=128" err || fail "another micro-batch size: $(cat err)"
expect 2 "another micro-batch size (new database)" "$dsmpi" import --torch-trace \
    "$data/single-kineto.json" $run --strategy dp=1,tp=1,pp=1,mbs=1,gbs=1 --profile-db new.h5
[ -e new.h5 ] && fail "another micro-batch size: new.h5 was written" && rm -f new.h5
for bad in truncated.json not-a-trace.json no-iteration.json gzip.json.gz; do
    expect 2 "$bad" "$dsmpi" import --torch-trace "$data/bad/$bad" $run \
        --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db db.h5
    one_line_naming "$bad" "$bad"
    expect 2 "$bad (new database)" "$dsmpi" import --torch-trace "$data/bad/$bad" $run \
        --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --profile-db new.h5
    [ -e new.h5 ] && fail "$bad: new.h5 was written" && rm -f new.h5
done
expect 2 "no model" "$dsmpi" import --torch-trace "$data/single-legacy.json" --profile-db db.h5
one_line_naming "model" "no model"
expect 2 "stage out of range" "$dsmpi" import --torch-trace "$data/single-legacy.json" $run \
    --strategy dp=1,tp=1,pp=1,mbs=2,gbs=2 --stage 1 --profile-db db.h5
one_line_naming "stage" "stage out of range"
[ "$(cksum < db.h5)" = "$before" ] || fail "a refused import modified db.h5"

[ "$failures" -eq 0 ] || exit 1
echo "torch_import: all checks passed"
