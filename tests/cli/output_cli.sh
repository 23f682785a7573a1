#!/bin/bash
# What predict and plan tell their reader: where the costs come from (plan
# and search with a profile database, predict with site databases), plan's
# JSON and CSV fields, a strategy out of memory (first row, JSON, exit code
# 3, --allow-oom, --quiet), plan's --strategy and Megatron options, the
# "scaling stops here" note, "no failures modelled", the sequence-length
# note, predict's CSV iteration time.
#   output_cli.sh DSMPI DATA WORKDIR
set -u
dsmpi=$1 data=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0 checks=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# run CODE ARGS...: dsmpi ARGS with stdout in out, stderr in err; checks the exit code.
run() {
    local want=$1
    shift
    checks=$((checks + 1))
    "$dsmpi" "$@" >out 2>err
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "dsmpi $* -> exit $rc, expected $want: $(head -c 300 err)"
}
# py EXPRESSION FILE: a Python assertion on the JSON document in FILE (d).
py() {
    checks=$((checks + 1))
    python3 -c "import json,sys; d=json.load(open(sys.argv[2])); assert $1, sys.argv[1]" "$1" "$2" ||
        fail "$1: $(head -c 400 "$2")"
}
has() { # has PATTERN FILE WHAT
    checks=$((checks + 1))
    grep -Eq -- "$1" "$2" || fail "$3: no '$1' in $(head -c 600 "$2")"
}
lacks() { # lacks PATTERN FILE WHAT
    checks=$((checks + 1))
    ! grep -Eq -- "$1" "$2" || fail "$3: '$1' in $(grep -E -- "$1" "$2" | head -3)"
}

# ---- costs from a profile database ---------------------------------------------
# The compute costs of one strategy (roofline estimates of a cpu device) imported
# into a database: plan's communication is left to --estimate-missing.
bert="--model bert-large --seq-len 128"
fixed="--fix tp=1,pp=1,mbs=1,schedule=1f1b,zero=1,recompute=none"
run 0 predict $bert --strategy dp=8,tp=1,pp=1,mbs=1,schedule=1f1b,zero=1 --target-gpus 8 \
    --device cpu --estimate-missing --json
python3 - out <<'PY' || fail "cost table from the estimate"
import json, sys
d = json.load(open(sys.argv[1]))
with open("compute.txt", "w") as f:
    for k in d["assumed_keys"]:
        if "group=" not in k["event"]:
            f.write("%s = %.17g\n" % (k["event"], k["seconds"]))
PY
run 0 import --cost-table compute.txt --profile-db db.h5 --fingerprint cpu:test
printf 'gemm fwd bf16 NN m=1 n=1 k=1 = 1e-6\n' >site.txt
run 0 import --cost-table site.txt --profile-db site.h5 --fingerprint cpu:test

plan="plan $bert --samples 1M --gpus 8,16 --profile-db db.h5 $fixed"
run 0 $plan --estimate-missing
has "^# costs: profile database db.h5: compute events measured on cpu; the rest estimated from the device model" out "plan --profile-db: costs line"
lacks "no cost table" out "plan --profile-db"
has "^# ASSUMED: [0-9.e-]+% to [0-9.e-]+% of the simulated event time" out "plan: assumed share"
run 0 $plan --estimate-missing --markdown
has "predicted with dsmpi [0-9.]+ from profile database db.h5 and device-model estimates \([0-9.e-]+% to [0-9.e-]+% of the event time assumed\)" out "plan --markdown basis"
lacks "from device-model estimates \(assumed, not measured\)" out "plan --markdown with measured costs"
run 2 $plan
has "^dsmpi plan: events of the space have no cost in profile database db.h5:" err "plan: missing costs"
lacks "no --cost-table given" err "plan: missing costs with a database"
run 2 search $bert --target-gpus 8 --profile-db db.h5 $fixed
has "^dsmpi search: events of the space have no cost in profile database db.h5:" err "search: missing costs"

run 0 $plan --estimate-missing --json
py 'd["seq_len"] == 128 and d["global_batch"] == 256 and d["device"] == "cpu"' out
py 'd["profile_db"] == "db.h5" and d["cost_table"] is None and d["nccl_tests_logs"] == 0' out
py '"compute events measured on cpu" in d["costs"]' out
py '[s["gpus"] for s in d["sizes"]] == [8, 16] and all(0 < s["assumed_share"] < 1 for s in d["sizes"])' out
run 0 $plan --estimate-missing --csv
python3 - out <<'PY' || fail "plan --csv columns: $(cat out)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["gpus"] for r in rows] == ["8", "16"], rows
for r in rows:
    assert 0 < float(r["assumed_share"]) < 1 and r["seq_len"] == "128", r
    assert r["global_batch"] == "256" and r["device"] == "cpu", r
PY
checks=$((checks + 1))

# predict: the database, the site database behind it, and where a missing cost was looked for.
one="predict $bert --strategy dp=8,tp=1,pp=1,mbs=1,schedule=1f1b,zero=1 --target-gpus 8"
run 0 $one --profile-db db.h5 --site-db site.h5 --estimate-missing --json
py 'd["profile_db"] == "db.h5" and d["cost_table"] is None' out
py 'd["costs"].startswith("profile database db.h5 (then site.h5): ") and "compute events measured on cpu" in d["costs"]' out
run 2 $one --profile-db db.h5 --site-db site.h5
has "^dsmpi predict: [0-9]+ events have no cost in profile database db.h5 \(then site.h5\):" err "predict: missing costs"
run 2 $one --cost-table site.txt
has "^dsmpi predict: [0-9]+ events have no cost in cost table site.txt:" err "predict: missing costs of a table"

# ---- out of memory -------------------------------------------------------------
oom="predict --model llama2-70b --strategy tp=8 --target-gpus 8 --estimate-missing"
run 3 $oom
checks=$((checks + 1))
[ "$(grep -A1 '^# (s) ' out | tail -1 | grep -c 'OUT OF MEMORY$')" -eq 1 ] ||
    fail "OUT OF MEMORY is not in the first row: $(grep -A1 '^# (s) ' out)"
has "^dsmpi predict: OUT OF MEMORY: .* needs [0-9.]+ GiB on its busiest GPU, the h100-sxm has 80 GiB" err "oom line"
run 3 $oom --json
py 'd["oom"] is True and d["summary"]["oom"] is True' out
run 0 $oom --json --allow-oom
py 'd["oom"] is True' out
has "OUT OF MEMORY.*--allow-oom" err "--allow-oom still says so"
run 3 $oom --quiet
checks=$((checks + 1))
{ [ ! -s out ] && [ "$(wc -l <err)" -eq 1 ] && grep -q "OUT OF MEMORY" err; } ||
    fail "--quiet: stdout $(wc -c <out) bytes, stderr: $(cat err)"
run 0 predict --demo --estimate-missing --json
py 'd["oom"] is False' out
run 0 predict --demo --estimate-missing
checks=$((checks + 1))
[ "$(grep -A1 '^# (s) ' out | tail -1 | grep -c ' fits$')" -eq 1 ] || fail "first row of a strategy that fits"
run 0 predict --help
has "--allow-oom" out "predict --help: --allow-oom"
has "3 the strategy does not fit in" out "predict --help: exit code 3"
# search and plan never rank a strategy that does not fit.
space="--model llama2-70b --estimate-missing --fix tp=8,pp=1,mbs=1,schedule=1f1b,no-sp,recompute=none,zero=0,dp-algo=auto"
run 2 search $space --target-gpus 8
has "no strategy fits in the 80 GiB of a h100-sxm" err "search: out of memory"
run 0 plan $space --gpus 8 --tokens 1B --json
py 'd["sizes"][0]["strategy"] is None and d["sizes"][0]["note"].startswith("no strategy fits")' out

# ---- plan --strategy and Megatron options ------------------------------------------
small="plan --model gpt2-medium --seq-len 512 --tokens 10B --gpus 8,16,32 --estimate-missing"
run 0 $small --strategy tp=8 --json
py '[s["strategy"].split(",")[1] for s in d["sizes"]] == ["tp=8"] * 3' out
run 0 $small --tensor-model-parallel-size 2 --sequence-parallel --json
py 'all(",tp=2," in s["strategy"] and ",sp" in s["strategy"] for s in d["sizes"])' out
run 0 $small --strategy tp=4
has "^# fixed: tp=4 " out "plan header: fixed"
run 2 $small --num-layers-per-virtual-pipeline-stage 2
has "^dsmpi plan: --num-layers-per-virtual-pipeline-stage cannot narrow the search" err "no item"

# ---- scaling stops, failures, the sequence-length note ---------------------------------
stops="plan $bert --global-batch 16 --samples 1M --gpus 8,16 --estimate-missing"
run 0 $stops
has "^# +16 GPUs: scaling stops here: [0-9.e-]+ days, longer than the [0-9.e-]+ days of 8 GPUs" out "scaling stops note"
run 0 $stops --json
py '[s["scaling_stops"] for s in d["sizes"]] == [False, True] and d["sizes"][1]["faster_with_fewer_gpus"] == 8' out
py 'd["sizes"][1]["days"] > d["sizes"][0]["days"]' out
run 0 $stops --csv
has ",scaling_stops,iter_time_low_s,iter_time_high_s,days_low,days_high," out "plan --csv: scaling_stops and band columns"
has "^16,.*,1(,[0-9.e+-]+){12}$" out "plan --csv: 16 GPUs stop scaling"
run 0 $stops --checkpoint-interval-min 30 --checkpoint-cost-s 60
has "^# goodput: checkpoint every 30 min \(60 s each\); no failures modelled" out "no failures modelled"
lacks "MTBF 0 h" out "MTBF 0 h"
hf="--model $data/hf/meta-llama-3-8b.json --estimate-missing --fix tp=8,pp=1,mbs=1,schedule=1f1b,no-sp,recompute=full,zero=1,dp-algo=auto"
run 0 search $hf --target-gpus 8
grep '^# note: ' out >search.note
run 0 plan $hf --gpus 8 --tokens 1B
grep '^# note: ' out >plan.note
checks=$((checks + 1))
{ [ -s search.note ] && cmp -s search.note plan.note; } ||
    fail "plan's sequence-length note: '$(cat plan.note)', search: '$(cat search.note)'"

# ---- predict --csv: the iteration time -------------------------------------------------
run 0 predict --demo --estimate-missing --json
cp out demo.json
run 0 predict --demo --estimate-missing --csv
python3 - out demo.json <<'PY' || fail "predict --csv iter_time_s: $(head -2 out)"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = json.load(open(sys.argv[2]))["summary"]["iter_time_s"]
assert len(rows) == 16 and all(abs(float(r["iter_time_s"]) - want) < 1e-9 for r in rows), rows[0]
PY
checks=$((checks + 1))

echo "output_cli: $checks checks, $failures failures"
[ "$failures" -eq 0 ]
