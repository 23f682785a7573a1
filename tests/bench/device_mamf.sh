#!/bin/bash
# The device model against published maximum achievable matmul FLOPS (MAMF,
# tests/data/gemm/mamf.csv): for each row, the model's TFLOP/s at the row's
# best shape, measured / modelled, and the fraction of peak that would make
# the model reproduce the row (the model's compute time scales as 1 / fraction
# at a fixed shape).  MAMF is the best of many shapes, so it sits above the
# model's large-GEMM asymptote by a selection bias (and its software may be
# newer).  Where a device also has a full published GEMM table (OpenXLA's:
# h100-sxm from its sm_90 rows, b200 from its sm_100 rows; the bf16 fraction
# is fitted on it, tests/bench/device_gemm_published.sh) the bias is MAMF's
# bf16 fraction over the table's; other devices take h100-sxm's (h200 and
# gh200 are the same die, the a100 has no table).  The last column divides
# each row's fraction by its bias: the fraction device_model.c takes for a
# device and dtype the table does not cover.
# Usage: device_mamf.sh [BUILD_DIR]
set -eu
build=${1:-build}
dsmpi=$build/apps/dsmpi/dsmpi
table=$(dirname "$0")/../data/gemm/mamf.csv
if [ ! -x "$dsmpi" ]; then
    echo "device_mamf.sh: $dsmpi not found (build the project first)" >&2
    exit 2
fi
python3 - "$dsmpi" "$table" <<'PY'
import csv, json, subprocess, sys

dsmpi, path = sys.argv[1:3]
rows = list(csv.DictReader(line for line in open(path) if not line.startswith("#")))

def run(*args):
    return json.loads(subprocess.run([dsmpi, "device", *args, "--json"], check=True,
                                     capture_output=True, text=True).stdout)

out = []
for r in rows:
    dev = run("--device", r["device"])["devices"][0]
    fraction = dev["gemm_fraction_fp8" if r["dtype"] == "fp8" else "gemm_fraction_bf16"]
    shape = "%s,%s,%s" % (r["m"], r["n"], r["k"])
    e = run("--device", r["device"], "--gemm", shape, "--dtype", r["dtype"])
    flops = 2.0 * int(r["m"]) * int(r["n"]) * int(r["k"])
    launch = e["seconds"] - max(e["compute_s"], e["memory_s"])
    measured_s = flops / (float(r["mamf_tflops"]) * 1e12)
    # the fraction at which the model's compute time plus launch is measured_s
    at_shape = fraction * e["compute_s"] / (measured_s - launch)
    cited = None
    out.append((r, e, fraction, measured_s, at_shape, cited))

TABLES = ("h100-sxm", "b200")  # devices whose bf16 fraction is fitted on a full table
bias = {o[0]["device"]: o[4] / o[2] for o in out
        if o[0]["device"] in TABLES and o[0]["dtype"] == "bf16"}
if sorted(bias) != sorted(TABLES):
    sys.exit("device_mamf.sh: %s needs a bf16 row of each of %s" % (path, ", ".join(TABLES)))
print("# dsmpi device model vs published MAMF (%s)" % path)
print("# MAMF's bias over the model's asymptote, its bf16 fraction at the best shape over the "
      "one fitted on a table:")
print("#   " + ", ".join("%s %.3f" % (d, bias[d]) for d in TABLES) + " (others take h100-sxm's)")
print("# %-9s %-5s %18s %8s %9s %9s %8s %9s %9s %9s" % ("device", "dtype", "best shape", "MAMF",
      "model", "MAMF /", "model's", "fraction", "fraction", "bias"))
print("# %-9s %-5s %18s %8s %9s %9s %8s %9s %9s %9s" % ("", "", "(MxNxK)", "(TFLOP/s)",
      "(TFLOP/s)", "model", "fraction", "at shape", "/ bias", "from"))
for r, e, fraction, measured_s, at_shape, cited in out:
    own = r["device"] if r["device"] in bias else "h100-sxm"
    print("  %-9s %-5s %18s %8.1f %9.1f %9.3f %8.3f %9.3f %9.3f %9s" % (
        r["device"], r["dtype"], "%sx%sx%s" % (r["m"], r["n"], r["k"]), float(r["mamf_tflops"]),
        e["achieved_tflops"], e["seconds"] / measured_s, fraction, at_shape,
        at_shape / bias[own], own))
PY
