#!/bin/bash
# The band of communication extrapolated beyond the nodes measured, carried
# through predict and plan: all-reduce logs of 1 and 2 nodes of A100s, data
# parallelism over 8 nodes (beyond them: low < expected < high) and over 2
# (inside them: the three are equal when compute is measured; with
# --estimate-missing only the device model's band is left); plan's days and
# GPU-hours follow the iteration time's band.
#   band_cli.sh DSMPI DATA_DIR
set -u
dsmpi=$1
logs=$2/nccl-tests/a100-azure-ndv4
failures=0 checks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib_expect.bash"

common=(--model gpt2-medium --strategy tp=1,pp=1,mbs=1 --gpus-per-node 8 --device a100-80g
        --nccl-tests "$logs/all_reduce_8.log" "$logs/all_reduce_16.log" --estimate-missing)

# The compute costs of both sizes as measured (the device model's estimates,
# no band), so that only communication has one.
for gpus in 16 64; do
    expect_ok events "${common[@]:0:8}" --target-gpus $gpus --cost-table-out "$tmp/modelled.txt"
done
sed 's/ modelled$/ measured/' "$tmp/modelled.txt" >"$tmp/measured.txt"

# predict --json: the keys once each, the band around the expected time.
band_json() { # gpus, relation (beyond | inside), compute (measured | modelled)
    local table=()
    [ "$3" = measured ] && table=(--cost-table "$tmp/measured.txt")
    expect_ok predict "${common[@]}" "${table[@]}" --target-gpus "$1" --json
    python3 - "$tmp/out" "$2" "$3" <<'PY' || fail "predict --target-gpus $1 --json: band not $2 ($3 compute)"
import json, sys
from strict_json import load
d = load(sys.argv[1])
s = d["summary"]
low, mid, high = s["iter_time_low_s"], s["iter_time_s"], s["iter_time_high_s"]
beyond, modelled = sys.argv[2] == "beyond", sys.argv[3] == "modelled"
assert (s["band_comm_keys"] > 0) == beyond, s["band_comm_keys"]
assert (s["band_device_model_keys"] > 0) == modelled, s["band_device_model_keys"]
if beyond or modelled:
    assert 0 < low < mid < high, (low, mid, high)
else:
    assert low == mid == high, (low, mid, high)
PY
}
band_json 64 beyond measured
band_json 16 inside measured
band_json 64 beyond modelled
band_json 16 inside modelled

# predict's table: "iteration time  X s (band L - H s)", the JSON's numbers.
expect_ok predict "${common[@]}" --target-gpus 64
grep -Eq "^# iteration time  [0-9.]+ s \(band [0-9.]+ - [0-9.]+ s\)$" "$tmp/out" ||
    fail "predict's table has no 'iteration time X s (band L - H s)' line: $(grep -i band "$tmp/out")"
# CSV: the band's two columns after iter_time_s, on every row.
expect_ok predict "${common[@]}" --target-gpus 64 --csv
python3 - "$tmp/out" <<'PY' || fail "predict --csv: $(head -2 "$tmp/out")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert rows and all(float(r["iter_time_low_s"]) < float(r["iter_time_s"]) <
                    float(r["iter_time_high_s"]) for r in rows), rows[0]
PY

# search --json: the rows shown carry the band, ranked by the expected time.
expect_ok search --model gpt2-medium --target-gpus 64 --gpus-per-node 8 --device a100-80g \
    --fix tp=1 --nccl-tests "$logs/all_reduce_8.log" "$logs/all_reduce_16.log" --estimate-missing \
    --top 3 --json
python3 - "$tmp/out" <<'PY' || fail "search --json: band of the rows shown"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"] + [d["worst"]]
assert len(d["results"]) == 3
assert all(r["iter_time_low_s"] < r["iter_time_s"] < r["iter_time_high_s"] for r in rows), rows
assert all(r["band_comm_keys"] > 0 and r["band_device_model_keys"] > 0 for r in rows), rows
times = [r["iter_time_s"] for r in d["results"]]
assert times == sorted(times), times
PY

# plan --json: low / expected / high per size; GPU-hours in the ratio of the
# iteration times (the same steps, goodput and GPUs at each end).
plan=(plan --model gpt2-medium --tokens 10B --gpus 16,64 --gpus-per-node 8 --device a100-80g
      --fix tp=1,pp=1,mbs=1 --nccl-tests "$logs/all_reduce_8.log" "$logs/all_reduce_16.log"
      --estimate-missing --price-per-gpu-hour 2)
expect_ok "${plan[@]}" --json
python3 - "$tmp/out" <<'PY' || fail "plan --json: band per size"
import json, sys
from strict_json import load
d = load(sys.argv[1])
sizes = {s["gpus"]: s for s in d["sizes"]}
for gpus, s in sizes.items():
    for what in ("iter_time", "days", "gpu_hours", "node_hours", "cost"):
        low, mid, high = s[what + "_low" + ("_s" if what == "iter_time" else "")], \
            s[what + ("_s" if what == "iter_time" else "")], \
            s[what + "_high" + ("_s" if what == "iter_time" else "")]
        # Compute from the device model: a band at both sizes; communication
        # extrapolated only beyond the 2 nodes measured.
        assert 0 < low < mid < high, (gpus, what, low, mid, high)
    assert (s["band_comm_keys"] > 0) == (gpus == 64), (gpus, s["band_comm_keys"])
    assert s["band_device_model_keys"] > 0, (gpus, s["band_device_model_keys"])
    ratio = s["iter_time_high_s"] / s["iter_time_s"]
    assert abs(s["gpu_hours_high"] / s["gpu_hours"] - ratio) < 1e-5 * ratio, (gpus, ratio)
    ratio = s["iter_time_low_s"] / s["iter_time_s"]
    assert abs(s["gpu_hours_low"] / s["gpu_hours"] - ratio) < 1e-5 * ratio, (gpus, ratio)
PY
# CSV and Markdown carry the three values; the table says what the band is.
expect_ok "${plan[@]}" --csv
head -1 "$tmp/out" | grep -q "iter_time_low_s,iter_time_high_s" ||
    fail "plan --csv header has no band: $(head -1 "$tmp/out")"
head -1 "$tmp/out" | grep -q "days_low,days_high" || fail "plan --csv: no days_low,days_high"
expect_ok "${plan[@]}" --markdown
grep -qF "days to train | (low - high)" "$tmp/out" || fail "plan --markdown: no band column"
expect_ok "${plan[@]}"
grep -q "band" "$tmp/out" || fail "plan's table does not say what the band is"

# Bad input stays one line, exit 2.
expect_error 2 "cannot open" predict "${common[@]}" --target-gpus 64 --nccl-tests "$tmp/absent.log"

echo "$checks checks, $failures failures"
[ "$failures" -eq 0 ]
