#!/bin/bash
# Command-line contract of dsmpi search and dsmpi plan: help, bad input (one
# line on stderr naming the value, exit 2, nothing on stdout), the outputs
# (table, CSV, JSON, Markdown, exports) and rank-0-only printing under MPI.
#   search_cli.sh DSMPI MPIEXEC NPFLAG
set -u
dsmpi=$1 mpiexec=$2 npflag=$3
failures=0 checks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib_expect.bash"

small="--model bert-large --seq-len 128 --target-gpus 8 --estimate-missing --fix mbs=1"

# Help.
expect_ok --help
grep -q "^  search " "$tmp/out" || fail "--help does not list 'search'"
grep -q "^  plan " "$tmp/out" || fail "--help does not list 'plan'"
expect_ok search --help
grep -q -- "--fix KEY=VALUE" "$tmp/out" || fail "search --help does not describe --fix"
expect_ok plan --help
grep -q "GPU-hours   = GPUs x days x 24" "$tmp/out" || fail "plan --help does not give the formulas"

# Bad input.
expect_error 2 "no costs given (accepted: --profile-db FILE, --cost-table FILE, --estimate-missing" search --model gpt2-medium --target-gpus 8
expect_error 2 "no model given" search --target-gpus 8 --estimate-missing
expect_error 2 "no target given" search --model gpt2-medium --estimate-missing
expect_error 2 "tp 'x' is not a whole number" search $small --fix tp=x
expect_error 2 "strategy key 'foo' is not known" search $small --fix foo=1
expect_error 2 "narrow the space with --fix KEY=VALUE" search $small --strategy tp=2
expect_error 2 "narrow the space with --fix KEY=VALUE" search $small --tensor-model-parallel-size 2
expect_error 2 "max-tp 0 is out of range" search $small --max-tp 0
expect_error 2 "top 0 is out of range (accepted: 1 to 100000)" search $small --top 0
expect_error 2 "unexpected argument 'extra'" search $small extra
expect_error 2 "cannot open 'no-such.log'" search $small --nccl-tests no-such.log
expect_error 2 "option '--frob' is not known" search $small --frob
expect_error 2 "the space is empty" search $small --fix tp=3
# fused attention and fp8 on an H100 are searched both ways: 2 x 2 combinations
expect_error 2 "no strategy of the space is valid: 4 combinations, all rejected (the first: tp=2 does not divide the 25 attention heads" \
    search --model gpt2-xl --target-gpus 8 --estimate-missing --fix tp=2,pp=1,mbs=1,schedule=1f1b,no-sp,recompute=none,zero=0,dp-algo=auto
expect_error 2 "no strategy fits in the 80 GiB of a h100-sxm" search --model llama2-70b --target-gpus 8 --estimate-missing --max-mbs 1
expect_error 2 "no cluster sizes given" plan --model gpt2-medium --tokens 1T --estimate-missing
expect_error 2 "give the training budget once" plan --model gpt2-medium --gpus 8 --estimate-missing
expect_error 2 "give the training budget once" plan --model gpt2-medium --gpus 8 --tokens 1T --samples 10 --estimate-missing
expect_error 2 "tokens '1Q' is not a whole number" plan --model gpt2-medium --gpus 8 --tokens 1Q --estimate-missing
expect_error 2 "gpus 0 is out of range" plan --model gpt2-medium --gpus 0,8 --tokens 1T --estimate-missing
expect_error 2 "target-gpus 12 is not a multiple of 8" plan --model gpt2-medium --gpus 12 --tokens 1T --estimate-missing
expect_error 2 "plan takes the cluster sizes from --gpus" plan --model gpt2-medium --target-gpus 8 --gpus 8 --tokens 1T --estimate-missing
expect_error 2 "--price-per-gpu-hour '-1' (accepted: a number, 0 or above)" plan --model gpt2-medium --gpus 8 --tokens 1T --estimate-missing --price-per-gpu-hour -1
expect_error 2 "--mtbf-hours-per-gpu needs --checkpoint-interval-min" plan --model gpt2-medium --gpus 8 --tokens 1T --estimate-missing --mtbf-hours-per-gpu 1000
expect_error 2 "the run never finishes" plan --model gpt2-medium --gpus 8 --tokens 1T --estimate-missing --checkpoint-interval-min 60 --mtbf-hours-per-gpu 0.5
expect_error 2 "no costs given" plan --model gpt2-medium --gpus 8 --tokens 1T

# Missing costs: the events that lack one, exit 2.
checks=$((checks + 1))
printf '# no costs\n' >"$tmp/empty.costs"
"$dsmpi" search --model bert-large --seq-len 128 --target-gpus 8 --fix tp=1,pp=1,mbs=1 --cost-table "$tmp/empty.costs" >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ "$rc" -eq 2 ] && grep -q "lack a cost: profile them" "$tmp/err" && grep -q "^  gemm fwd" "$tmp/err" && [ ! -s "$tmp/out" ]; } ||
    fail "missing costs: rc $rc: $(head -c 300 "$tmp/err")"

# Outputs.
expect_ok search $small --top 3
grep -q "^# space: [0-9]* combinations, [0-9]* invalid" "$tmp/out" || fail "search table: no counts"
grep -Eq "^ +1 +[0-9.]+ +[0-9.]+ " "$tmp/out" || fail "search table: no rank 1"
grep -q "^# best/worst: the best strategy is [0-9.]*x faster than the worst" "$tmp/out" || fail "search table: no best/worst"
[ "$(grep -Ec '^ +[0-9]+ +[0-9.]+ ' "$tmp/out")" -eq 3 ] || fail "search --top 3: not 3 rows"
expect_ok search $small --csv --top 2
head -1 "$tmp/out" | grep -q "^row,candidate,iter_time_s,samples_per_s,tokens_per_s,model_tflops_per_gpu,mfu,hfu,bubble_fraction,comm_exposed_s,mem_GiB," ||
    fail "search --csv header"
[ "$(wc -l <"$tmp/out")" -eq 4 ] || fail "search --csv: header, 2 rows and the worst expected"
expect_ok search $small --json
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['counts']['candidates'] > 0 and d['results'][0]['rank'] == 1 and d['best_worst_ratio'] >= 1" "$tmp/out" ||
    fail "search --json"
expect_ok search $small --quiet --trace "$tmp/best.json" --svg "$tmp/best.svg" --timeline "$tmp/best.h5"
[ ! -s "$tmp/out" ] || fail "search --quiet printed"
for f in best.json best.svg best.h5; do [ -s "$tmp/$f" ] || fail "search did not write $f"; done
expect_ok plan --model bert-large --seq-len 128 --samples 1M --gpus 8,16 --estimate-missing --fix mbs=1 --markdown --price-per-gpu-hour 2 --svg "$tmp/plan.svg"
grep -qF "| GPUs | nodes | best strategy | iteration (s) | tokens/s | MFU | goodput | days to train | (low - high) | GPU-hours | (low - high) | node-hours | (low - high) | cost | (low - high) | scaling efficiency |" "$tmp/out" ||
    fail "plan --markdown header"
[ "$(grep -c '^| [0-9]' "$tmp/out")" -eq 2 ] || fail "plan --markdown: 2 rows expected"
grep -q "<svg" "$tmp/plan.svg" || fail "plan --svg"
expect_ok plan --model bert-large --seq-len 128 --samples 1M --gpus 8,16 --estimate-missing --fix mbs=1 --csv
head -1 "$tmp/out" | grep -q "^gpus,nodes,iter_time_s,tokens_per_s,mfu,steps,goodput,train_s,days,gpu_hours,node_hours,service_units,cost,efficiency,strategy" ||
    fail "plan --csv header"
awk -F, 'NR > 1 && $6 != 3907 {bad = 1} END {exit bad}' "$tmp/out" || fail "plan --csv: 1M samples / 256 per iteration is 3907 steps"

# plan on --device prices its best strategy on that device's links, as predict does.
expect_ok plan --model gpt2-medium --tokens 1B --gpus 16 --device a100-80g --estimate-missing --csv
read -r plan_s plan_strategy < <(python3 -c 'import csv,sys; r = next(csv.DictReader(open(sys.argv[1]))); print(r["iter_time_s"], r["strategy"])' "$tmp/out")
expect_ok predict --model gpt2-medium --strategy "$plan_strategy" --target-gpus 16 --device a100-80g \
    --estimate-missing --stage-level --csv
predict_s=$(python3 -c 'import csv,sys; print(next(csv.DictReader(open(sys.argv[1])))["iter_time_s"])' "$tmp/out")
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-6 * b)' "$plan_s" "$predict_s" ||
    fail "plan --device a100-80g gives $plan_s s for $plan_strategy, predict $predict_s s"

# Equivalent variants: strategies with the same simulated timeline and memory
# share a row that names them; the top K are K distinct rows; --all-variants
# ranks them one by one.  bert-large on 8 devices: dp-algo auto, ring, tree
# and hierarchical of dp=8,flash,fp8=hybrid,zero=1 are one timeline.
expect_ok search $small --top 10
[ "$(grep -Ec '^ +[0-9]+ +[0-9.]+ ' "$tmp/out")" -eq 10 ] || fail "search --top 10: not 10 rows"
[ "$(awk '/^ +[0-9]+ +[0-9.]+ / {print $2, $9}' "$tmp/out" | sort | uniq -d | wc -l)" -eq 0 ] ||
    fail "search: rows with the same time and memory: $(awk '/^ +[0-9]+ +[0-9.]+ / {print $2, $9}' "$tmp/out" | sort | uniq -d | head -3)"
grep -Eq '^ +1 .*  dp=8,tp=1,pp=1,mbs=1,schedule=1f1b,flash,fp8=hybrid,zero=1  \(also: dp-algo=ring,tree,hierarchical\)$' "$tmp/out" ||
    fail "search: row 1 does not name its variants: $(grep -E '^ +1 ' "$tmp/out")"
grep -q "^# also: [0-9]* equivalent variants share these rows" "$tmp/out" || fail "search: no note on variants"
expect_ok search $small --top 10 --all-variants
[ "$(awk '/^ +[1-4] +[0-9.]+ / {print $2, $9}' "$tmp/out" | sort -u | wc -l)" -eq 1 ] ||
    fail "search --all-variants: rows 1-4 are not the four equal variants"
grep -Eq '^ +4 .*zero=1,dp-algo=hierarchical$' "$tmp/out" || fail "search --all-variants: row 4 is not dp-algo=hierarchical"
! grep -q "also:" "$tmp/out" || fail "search --all-variants names variants"
expect_ok search $small --csv --top 3
head -1 "$tmp/out" | grep -q ",strategy,variants,also,iter_time_low_s,iter_time_high_s$" ||
    fail "search --csv: no variants and band columns"
grep -Eq '^1,32,.*,"dp=8,tp=1,pp=1,mbs=1,gbs=256,schedule=1f1b,flash,fp8=hybrid,zero=1",3,"dp-algo=ring,tree,hierarchical",[0-9.e+-]+,[0-9.e+-]+$' "$tmp/out" ||
    fail "search --csv: row 1 variants: $(sed -n 2p "$tmp/out")"
expect_ok search $small --json --top 3
python3 - "$tmp/out" <<'PY' || fail "search --json variants"
import json, sys
from strict_json import load
d = load(sys.argv[1])
r = d["results"][0]
assert r["variant_count"] == 3 and r["also"] == "dp-algo=ring,tree,hierarchical", r
assert [v["candidate"] for v in r["variants"]] == [33, 34, 35], r["variants"]
assert r["variants"][0]["strategy"].endswith("zero=1,dp-algo=ring"), r["variants"]
assert len({(x["iter_time_s"], x["mem_GiB"]) for x in d["results"]}) == 3
PY

# Under MPI only rank 0 prints, and the ranking is the serial one.
if [ -n "$mpiexec" ]; then
    checks=$((checks + 1))
    "$dsmpi" search $small --csv --top 5 >"$tmp/serial.csv" 2>/dev/null
    "$mpiexec" "$npflag" 2 "$dsmpi" search $small --csv --top 5 >"$tmp/mpi.csv" 2>"$tmp/err" || fail "mpiexec search: $(head -c 300 "$tmp/err")"
    head -6 "$tmp/serial.csv" >"$tmp/serial.top"
    head -6 "$tmp/mpi.csv" >"$tmp/mpi.top"
    cmp -s "$tmp/serial.top" "$tmp/mpi.top" || fail "search on 2 ranks ranks differently from 1 rank"
    [ "$(grep -c '^row,' "$tmp/mpi.csv")" -eq 1 ] || fail "search under MPI: more than one rank printed"
fi

echo "search_cli: $checks checks, $failures failures"
[ "$failures" -eq 0 ]
