#!/bin/bash
# Command-line contract of dsmpi: help and version, bad input (one line on
# stderr naming the value, exit 2, nothing on stdout), machine-readable
# output, and rank-0-only printing under MPI.
#   cli_test.sh DSMPI DATA_DIR GOLDEN_DIR MPIEXEC NPFLAG
set -u
dsmpi=$1 data=$2 golden=$3 mpiexec=$4 npflag=$5
failures=0 checks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib_expect.bash"

# Help, version, tunables.
expect_ok --help
grep -q "^  events " "$tmp/out" || fail "--help does not list 'events'"
expect_ok events --help
grep -q -- "--strategy" "$tmp/out" || fail "events --help does not describe --strategy"
expect_ok --version
grep -q "^dsmpi [0-9]" "$tmp/out" || fail "--version"
expect_ok --params
grep -q "DS_LOG_LEVEL" "$tmp/out" || fail "--params does not list DS_LOG_LEVEL"
expect_ok version
grep -q "^hdf5 .*parallel" "$tmp/out" || fail "version does not report parallel HDF5"

# Bad input: exit 2, one line naming the value and what is accepted.
checks=$((checks + 1))
"$dsmpi" >"$tmp/out" 2>"$tmp/err"; rc=$?
{ [ "$rc" -eq 2 ] && grep -q "^usage: dsmpi" "$tmp/err" && [ ! -s "$tmp/out" ]; } || fail "bare dsmpi: rc $rc"
expect_error 2 "'frobnicate' is not a command (accepted: " frobnicate
expect_error 2 "model 'gpt5' is not known (accepted: bert-large" events --model gpt5 --target-gpus 8
expect_error 2 "no target given" events --model gpt2-medium
expect_error 2 "no model given" events --target-gpus 8
expect_error 2 "tp=3 does not divide the 16 attention heads of gpt2-medium (accepted: none with the rest of this strategy; tp values its model and target allow: 1, 2, 4, 8)" events --model gpt2-medium --strategy tp=3 --target-gpus 24
expect_error 2 "pp=5 does not divide the 24 layers" events --model gpt2-medium --strategy pp=5 --target-gpus 40
expect_error 2 "dp*tp*pp = 2*2*2 = 8 does not equal the 16 target devices" events --model gpt2-medium --strategy dp=2,tp=2,pp=2 --target-gpus 16
expect_error 2 "gbs=100 is not a multiple of dp*mbs" events --model gpt2-medium --strategy gbs=100 --target-gpus 16
expect_error 2 "strategy key 'foo' is not known" events --model gpt2-medium --strategy foo=1 --target-gpus 8
expect_error 2 "target-gpus 12 is not a multiple of 8 devices per node" events --model gpt2-medium --target-gpus 12
expect_error 2 "target-gpus 1000000000000 is out of range" events --model gpt2-medium --target-gpus 1T
expect_error 2 "target-gpus -4 is out of range (accepted: 1 to" events --model gpt2-medium --target-gpus -4
expect_error 2 "seq-len 1099511627776 is out of range" events --model llama3-8b --seq-len 1099511627776 --target-gpus 8
expect_error 2 "seq-len 4096 exceeds the 1024 learned positions" events --model gpt2-medium --seq-len 4096 --target-gpus 8
expect_error 2 "dtype 'fp64' is not known" events --model gpt2-medium --dtype fp64 --target-gpus 8
expect_error 2 "device 'tpu' is not known" events --model gpt2-medium --target nodes=2,device=tpu
expect_error 2 "zero=2 cannot be combined with pp=2" events --model gpt2-medium --strategy pp=2,zero=2 --target-gpus 8
expect_error 2 "schedule 'zigzag' is not known (accepted: gpipe, 1f1b, interleaved)" events --model gpt2-medium --strategy schedule=zigzag --target-gpus 8
expect_error 2 "cannot open '/nonexistent/model.json'" events --model /nonexistent/model.json --target-gpus 8
expect_error 2 "option '--frob' is not known" events --demo --frob
expect_error 2 "unexpected argument 'extra'" events --demo extra
expect_error 2 "tensor-model-parallel-size" events --model gpt2-medium --target-gpus 8 --tensor-model-parallel-size
printf '{"model_type": "gpt2", "n_layer": 2,\n' >"$tmp/broken.json"
expect_error 2 "broken.json:2:0: not valid JSON" events --model "$tmp/broken.json" --target-gpus 8
head -c 9000000 /dev/zero | tr '\0' ' ' >"$tmp/huge.json"
expect_error 2 "huge.json' is 9000000 bytes (accepted: at most 8388608)" events --model "$tmp/huge.json" --target-gpus 8

# A Hugging Face config and a layer list run end to end; Megatron names are accepted.
expect_ok events --model "$data/hf/meta-llama-3-8b.json" --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 256 --target-nodes 32 --target-gpus-per-node 8
grep -q "strategy: dp=32,tp=4,pp=2,mbs=1,gbs=256,schedule=1f1b,sp" "$tmp/out" || fail "Megatron aliases not applied: $(grep strategy "$tmp/out")"
grep -q "note: seq-len 8192 taken from max_position_embeddings 8192" "$tmp/out" || fail "no seq-len note for a HF config"
expect_ok events --model "$data/models/mlp-layers.json" --strategy tp=2,pp=2 --target-gpus 8
# Megatron-Core's layouts of a pipeline's ends, by their option names.
expect_ok events --model gpt2-medium --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 5 --target-gpus 8
grep -q "strategy: dp=2,tp=1,pp=4,.*first-stage-layers=3,last-stage-layers=5" "$tmp/out" || fail "uneven ends not applied: $(grep strategy "$tmp/out")"
expect_ok events --model gpt2-medium --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 13 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --global-batch-size 8 --target-gpus 8
grep -q "strategy: dp=4,tp=1,pp=2,.*vpp=13,embedding-in-split,loss-in-split" "$tmp/out" || fail "embedding/loss in the split not applied: $(grep strategy "$tmp/out")"
expect_error 2 "embedding-in-split counts 25 layers, which pp*vpp = 4*1 does not divide" events --model gpt2-medium --strategy pp=4,embedding-in-split --target-gpus 8

# nccl-tests logs into a database, and the communication model from it.
ndv4=$data/nccl-tests/a100-azure-ndv4
expect_ok import --nccl-tests "$ndv4/all_reduce_8.log" --nccl-tests "$ndv4/all_reduce_16.log" --gpus-per-node 8 \
    --cluster-tag ndv4 --profile-db "$tmp/nccl.h5"
grep -q "^  nccl-tests  *0  *50 .*all_reduce_16.log" "$tmp/out" || fail "import --nccl-tests: $(cat "$tmp/out")"
expect_ok comm --profile-db "$tmp/nccl.h5" --device a100-40g --gpus 16 --min-bytes 1MiB --max-bytes 1MiB --csv
grep -q "^16,2,1048576,262144,100.01[0-9]*,.*,imported$" "$tmp/out" || fail "comm --profile-db does not reproduce the imported 1 MiB time: $(cat "$tmp/out")"
expect_error 2 "all_reduce_99.log" import --nccl-tests "$ndv4/all_reduce_99.log" --profile-db "$tmp/nccl.h5"

# A target given by its size on --device has that device's links: the tensor-parallel
# all-reduce costs what `dsmpi comm` assumes for an a100-80g node (156.1 us at 16 MiB;
# the default device's NVLink gives 119.5 us), whichever way the target is written.
expect_ok comm --device a100-80g --gpus 8 --min-bytes 16MiB --max-bytes 16MiB --csv
comm_us=$(tail -1 "$tmp/out" | cut -d, -f5 | xargs printf '%.1f')
for target in "--target-gpus 8" "--target nodes=1,gpus-per-node=8" "--target-nodes 1 --gpus-per-node 8"; do
    # shellcheck disable=SC2086 # the target is two or four words
    expect_ok events --model gpt2-medium --strategy tp=8,mbs=8,gbs=8 $target --device a100-80g --top 40
    events_us=$(awk '/allreduce fwd .*group=tp:8/ {print $4; exit}' "$tmp/out")
    [ "$events_us" = "$comm_us" ] && [ "$comm_us" = "156.1" ] ||
        fail "events $target --device a100-80g prices the tp all-reduce at $events_us us, comm at $comm_us us (expected 156.1)"
done

# Machine-readable output.
expect_ok events --demo --json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["target_gpus"] == 1024 and len(d["kinds"]) == 5 and len(d["top"]) == 10' "$tmp/out" || fail "--json is not the expected JSON"
expect_ok events --demo --csv
[ "$(head -1 "$tmp/out" | cut -d, -f1-3)" = "class,op,pass" ] || fail "--csv header"
rows=$(($(wc -l <"$tmp/out") - 1))
unique=$(grep '^  total' <("$dsmpi" events --demo) | awk '{print $3}')
[ "$rows" -eq "$unique" ] || fail "--csv has $rows rows, the table says $unique unique events"

# Golden output of the demo.
expect_ok events --demo
diff -u "$golden/events_demo.txt" "$tmp/out" >"$tmp/diff" || fail "events --demo differs from the golden output: $(head -40 "$tmp/diff")"

# Under MPI only rank 0 prints.
checks=$((checks + 1))
"$mpiexec" "$npflag" 2 "$dsmpi" events --demo >"$tmp/mpi" 2>"$tmp/mpierr" || fail "mpiexec -n 2 dsmpi events --demo: $(head -c 300 "$tmp/mpierr")"
[ "$(grep -c '^# dsmpi ' "$tmp/mpi")" -eq 1 ] || fail "under MPI the table is printed $(grep -c '^# dsmpi ' "$tmp/mpi") times"
grep -q "^# ranks: 2$" "$tmp/mpi" || fail "under MPI the preamble does not say 2 ranks"

# The allocation, under mpiexec (outside Slurm): 2 ranks on this one node.
expect_ok allocation --help
expect_error 2 "option '--frob' is not known (accepted: --json, --csv, --help)" allocation --frob
checks=$((checks + 1))
"$mpiexec" "$npflag" 2 "$dsmpi" allocation --json >"$tmp/alloc" 2>"$tmp/allocerr" || fail "mpiexec -n 2 dsmpi allocation: $(head -c 300 "$tmp/allocerr")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert (d["ranks"], d["nodes"], d["slurm_job_id"], d["warnings"]) == (2, 1, None, 0)' "$tmp/alloc" || fail "mpiexec -n 2 dsmpi allocation --json: $(cat "$tmp/alloc")"

if [ "$failures" -ne 0 ]; then
    echo "cli_test: $failures of $checks checks failed" >&2
    exit 1
fi
echo "cli_test: $checks checks passed"
