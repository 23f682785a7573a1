#!/bin/sh
# The path of a build without a profile database, end to end on 2 real
# ranks with the replay backend: dsmpi profile writes text files, dsmpi
# import loads them, dsmpi predict uses them with Open MPI's algorithms,
# dsmpi execute reports the executor's runs as JSON.  What the SMPI build
# does on a simulated cluster (tests/smpi), here on this machine.
#   replay_cli.sh DSMPI MPIEXEC NPFLAG DATA WORKDIR
set -u
dsmpi=$1 mpiexec=$2 np=$3 data=$4 work=$5
test_name=replay_cli
. "$(cd "$(dirname "$0")" && pwd)/lib_check.sh"
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
model="--model $data/validate/tiny-gpt2.json --seq-len 64"
strategy="pp=2,mbs=1,gbs=4"
target="--target nodes=1,gpus-per-node=2,device=h100-sxm"

# Synthetic compute costs, then the profile without a database.
expect 0 "events --cost-table-out" "$dsmpi" events $model --strategy "$strategy" $target \
    --cost-table-out costs.txt --top 0
grep -q "^gemm fwd bf16 .* modelled$" costs.txt || fail "events --cost-table-out: $(head -3 costs.txt)"
expect 0 "profile to text files" "$mpiexec" "$np" 2 "$dsmpi" profile $model --strategy "$strategy" \
    $target --backend replay --costs-out measured.txt --comm-samples-out comm.txt \
    --sweep-min 1KiB --sweep-max 64KiB --quiet
test -s measured.txt || fail "profile --costs-out wrote nothing"
grep -q "^sendrecv fp32 bytes=1024 group=2 nodes=1 per-node=2 conc=1 = .* measured source=replay:" \
    comm.txt || fail "profile --comm-samples-out: $(head -3 comm.txt)"
expect 2 "profile without any output" "$dsmpi" profile $model --strategy "$strategy" $target
grep -q "comm-samples-out" err || fail "profile without any output: $(cat err)"

# Import, then predict with the samples: Open MPI's algorithms.
expect 0 "import" "$dsmpi" import --cost-table costs.txt --comm-samples comm.txt \
    --profile-db db.h5 --fingerprint "replay: h100-sxm, synthetic" --json
test "$(json out 'd["sources"][1]["comm_samples"]')" -eq "$(grep -vc '^#' comm.txt)" ||
    fail "import --comm-samples: $(cat out)"
expect 0 "predict" "$dsmpi" predict $model --strategy "$strategy" $target --profile-db db.h5 --json
cp out predict.json
json predict.json 'd["costs"]' | grep -q "ompi's algorithms" ||
    fail "predict: $(json predict.json 'd["costs"]')"
DS_COMM_LIBRARY=nccl "$dsmpi" predict $model --strategy "$strategy" $target --profile-db db.h5 \
    --json >out 2>err
json out 'd["costs"]' | grep -q "nccl's algorithms" || fail "DS_COMM_LIBRARY=nccl: $(cat err)"
printf 'allreduce fp32 bytes=8 group=2 nodes=1 per-node=2 = 1e-6\nallreduce fp32 bytes=8 group=2 = x\n' \
    >bad.txt
expect 2 "import of a malformed file" "$dsmpi" import --comm-samples bad.txt --profile-db db.h5
grep -q "bad.txt:2:" err || fail "import of a malformed file: $(cat err)"

# The executor on the replayed devices.
expect 0 "execute --help" "$dsmpi" execute --help
grep -q "^usage: mpirun -n N dsmpi execute" out || fail "execute --help: $(head -2 out)"
expect 2 "execute bad option" "$dsmpi" execute --model x --strategy dp=1 --bogus
expect 0 "execute" "$mpiexec" "$np" 2 "$dsmpi" execute $model --strategy "$strategy" $target \
    --backend replay --replay-costs costs.txt --warmup 1 --iterations 2 --runs 2 --json
cp out execute.json
python3 - <<'PY' || fail "execute --json: $(head -c 400 execute.json)"
import json
d = json.load(open("execute.json"))
p = json.load(open("predict.json"))
assert d["ranks"] == 2 and d["backend"] == "replay" and len(d["runs"]) == 2, d.keys()
assert d["fingerprint"].startswith("replay: h100-sxm, ")
for run in d["runs"]:
    s = run["summary"]
    assert s["iter_time_s"] > 0 and s["iteration_min_s"] <= s["iter_time_s"] <= s["iteration_max_s"]
    assert [x["rank"] for x in run["devices"]] == [0, 1]
    assert all(x["compute_s"] > 0 for x in run["devices"])
    assert len(run["microbatches"]) == 2 * d["num_microbatches"] == len(p["microbatches"])
    for m in run["microbatches"]:
        assert 0 <= m["fwd_start_s"] <= m["fwd_end_s"] <= m["bwd_start_s"] <= m["bwd_end_s"]
PY
expect 2 "execute on a cluster of another size" "$mpiexec" "$np" 2 "$dsmpi" execute $model \
    --strategy "$strategy" --target-gpus 8 --backend replay
grep -q "has 8 devices; this allocation has 2 ranks" err || fail "execute size check: $(cat err)"

[ "$failures" -eq 0 ] && echo "replay_cli: all checks passed"
exit "$failures"
