#!/bin/bash
# The device model's band carried through predict: with --estimate-missing
# every compute cost is modelled and the iteration time has a band (low <
# expected < high) that the output says comes from the device model; the same
# costs given as measured carry none (low = expected = high, no device-model
# line, band_device_model_keys 0); given as modelled in a cost table, they
# carry it again.  One node: no communication is extrapolated.
#   device_band_cli.sh DSMPI
set -u
dsmpi=$1
failures=0 checks=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib_expect.bash"

case=(--model gpt2-medium --seq-len 512 --strategy tp=2,pp=2,mbs=1 --global-batch 16
      --target-gpus 8 --gpus-per-node 8 --device a100-80g)

# JSON: the band's ends and where it comes from.
band_json() { # what, relation (banded | none)
    python3 - "$tmp/out" "$2" <<'PY' || fail "$1: band not $2: $(grep -o '"iter_time[^,]*' "$tmp/out")"
import sys
from strict_json import load
s = load(sys.argv[1])["summary"]
low, mid, high = s["iter_time_low_s"], s["iter_time_s"], s["iter_time_high_s"]
assert s["band_comm_keys"] == 0, s["band_comm_keys"]
if sys.argv[2] == "banded":
    assert 0 < low < mid < high, (low, mid, high)
    assert s["band_device_model_keys"] == s["modelled_keys"] > 0, s
else:
    assert low == mid == high, (low, mid, high)
    assert s["band_device_model_keys"] == 0 and s["modelled_keys"] == 0, s
PY
}

# 1. --estimate-missing: every compute cost from the device model, with its band.
expect_ok predict "${case[@]}" --estimate-missing --json
band_json "predict --estimate-missing --json" banded
expect_ok predict "${case[@]}" --estimate-missing
line=$(grep -E "^# iteration time  [0-9.]+ s \(band [0-9.]+ - [0-9.]+ s\)$" "$tmp/out")
python3 - "$line" <<'PY' || fail "predict --estimate-missing: band line '$line'"
import re, sys
m = re.match(r"# iteration time  ([0-9.]+) s \(band ([0-9.]+) - ([0-9.]+) s\)", sys.argv[1])
low, mid, high = float(m.group(2)), float(m.group(1)), float(m.group(3))
assert low < mid < high, (low, mid, high)
PY
grep -q "^#   band: device model, [0-9]* compute costs modelled" "$tmp/out" ||
    fail "predict --estimate-missing does not say the band is from the device model: $(grep band "$tmp/out")"
grep -q "band: communication" "$tmp/out" &&
    fail "predict on one node says some communication was extrapolated: $(grep band "$tmp/out")"

# 2. The same costs as measured: no band from the device model.
expect_ok events "${case[@]}" --cost-table-out "$tmp/modelled.txt"
sed 's/ modelled$/ measured/' "$tmp/modelled.txt" >"$tmp/measured.txt"
grep -q " measured$" "$tmp/measured.txt" || fail "events --cost-table-out wrote no cost"
expect_ok predict "${case[@]}" --cost-table "$tmp/measured.txt" --estimate-missing --json
band_json "predict from measured costs --json" none
expect_ok predict "${case[@]}" --cost-table "$tmp/measured.txt" --estimate-missing
grep -q "band: device model" "$tmp/out" &&
    fail "predict from measured costs says the band is from the device model: $(grep band "$tmp/out")"
grep -q "^#   band: none" "$tmp/out" || fail "predict from measured costs: no 'band: none' line"

# 3. A cost table's modelled costs carry the band as the estimates do.
expect_ok predict "${case[@]}" --cost-table "$tmp/modelled.txt" --estimate-missing --json
band_json "predict from a table of modelled costs --json" banded

echo "$checks checks, $failures failures"
[ "$failures" -eq 0 ]
