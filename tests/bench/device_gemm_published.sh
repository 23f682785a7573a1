#!/bin/bash
# The device model's GEMM times against published GPU GEMM timings: OpenXLA's
# matmul table (xla/service/gpu/model/matmul_interpolator_data.h, in the
# openxla/xla repository and tensorflow/tensorflow's third_party/xla; Apache
# 2.0), which gives the FLOP/s XLA measured for bf16 GEMMs of batch 1-4 and
# M, N, K of 256-4096 on sm_90 (an H100 SXM-class part: its largest GEMMs run
# above the PCIe part's peak); later versions add sm_100 (Blackwell).  The file
# is not part of dsmpi: download it and pass its path.  Prints, for the bf16
# rows of one architecture:
#   - measured / modelled time per size decade, as the model stands;
#   - the bf16 fraction of peak device_model.c takes from this table: the one
#     that makes the median measured / modelled 1 over the GEMMs of at least
#     1e10 FLOP (the fraction is the model's large-GEMM asymptote), fitted with
#     each batch size left out in turn and checked on it;
#   - the band of the gemm classes (libdsmpi/events/device_band.c): the 10th
#     and 90th percentile of measured / modelled over every GEMM of the
#     left-out batch size, with the fraction fitted without it, by the bound
#     the model gives each GEMM and over all of them (gemm-any).
# Usage: device_gemm_published.sh [BUILD_DIR] XLA_MATMUL_TABLE [SM [DEVICE]]
#   (SM: the table's architecture key, default sm_90; DEVICE: the dsmpi device
#   its rows stand for, default h100-sxm for sm_90 and b200 for sm_100)
set -eu
build=${1:-build}
table=${2:-}
sm=${3:-sm_90}
case $sm in
sm_90) device=${4:-h100-sxm} ;;
sm_100) device=${4:-b200} ;;
*) device=${4:-} ;;
esac
if [ -z "$device" ]; then
    echo "device_gemm_published.sh: no device given for $sm (accepted: sm_90, sm_100, or any" \
        "key with a DEVICE)" >&2
    exit 2
fi
dsmpi=$build/apps/dsmpi/dsmpi
if [ -z "$table" ] || [ ! -r "$table" ]; then
    echo "device_gemm_published.sh: skipped: no XLA matmul table given (download" \
        "xla/service/gpu/model/matmul_interpolator_data.h and pass its path)" >&2
    exit 0
fi
if [ ! -x "$dsmpi" ]; then
    echo "device_gemm_published.sh: $dsmpi not found (build the project first)" >&2
    exit 2
fi
python3 - "$dsmpi" "$table" "$sm" "$device" <<'EOF'
import json, math, re, statistics, subprocess, sys

dsmpi, path, want_sm, device = sys.argv[1:5]
rows = []  # (batch, m, n, k, measured seconds)
sm = None
entry = {}
for line in open(path, encoding="utf-8"):
    key = re.search(r'key:\s*"(sm_\d+)"', line)
    if key:
        sm = key.group(1)
        continue
    dim = re.match(r"\s*([bmnk]):\s*(\d+)\s*$", line)
    if dim:
        entry[dim.group(1)] = int(dim.group(2))
        continue
    flops = re.search(r'flops\s*\{\s*key:\s*"([^"]+)"\s*value:\s*(\d+)', line)
    if flops and sm == want_sm and flops.group(1).lower().startswith("bf16xbf16"):
        b, m, n, k = (entry[d] for d in "bmnk")
        rows.append((b, m, n, k, 2.0 * b * m * n * k / int(flops.group(2))))
if not rows:
    print("device_gemm_published.sh: no %s bf16 rows in %s (accepted: OpenXLA's "
          "matmul_interpolator_data.h)" % (want_sm, path), file=sys.stderr)
    sys.exit(2)

listing = json.loads(subprocess.run([dsmpi, "device", "--device", device, "--json"],
                                    check=True, capture_output=True, text=True).stdout)
spec = listing["devices"][0] if "devices" in listing else listing
fraction = spec["gemm_fraction_bf16"]
launch = spec["launch_us"] * 1e-6

gemms = []  # measured s, launch-free compute s at `fraction`, memory s, batch, FLOP
for b, m, n, k, measured in rows:
    e = json.loads(subprocess.run([dsmpi, "device", "--device", device, "--gemm",
                                   "%d,%d,%d,%d" % (m, n, k, b), "--dtype", "bf16", "--json"],
                                  check=True, capture_output=True, text=True).stdout)
    gemms.append((measured, e["compute_s"], e["memory_s"], b, 2.0 * b * m * n * k))


def modelled(g, f):
    """The model's time with bf16 fraction f: compute scales as 1 / f."""
    return launch + max(g[1] * fraction / f, g[2])


def ratios(sel, f):
    return [g[0] / modelled(g, f) for g in sel]


def fit(sel):
    """The fraction whose median measured / modelled over sel is 1."""
    lo, hi = 0.05, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if statistics.median(ratios(sel, mid)) > 1 else (mid, hi)
    return (lo + hi) / 2


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


print("# %d %s bf16 GEMMs of %s; device %s: bf16 peak %.0f TFLOP/s, fraction %.3f, "
      "launch %.1f us" % (len(gemms), want_sm, path, device, spec["peak_tflops_bf16"],
                          fraction, launch * 1e6))
print("# measured / modelled time (above 1: the model is too fast)")
print("# %-18s %5s %8s %8s %8s %10s" % ("GEMM FLOP", "count", "median", "min", "max",
                                        "median|err|"))
decades = [(0, 1e9), (1e9, 1e10), (1e10, 1e11), (1e11, 1e14), (0, 1e14)]
for lo, hi in decades:
    r = ratios([g for g in gemms if lo <= g[4] < hi], fraction)
    label = "all" if (lo, hi) == (0, 1e14) else "%.0e - %.0e" % (lo, hi)
    print("  %-18s %5d %8.3f %8.3f %8.3f %9.1f%%" % (
        label, len(r), statistics.median(r), min(r), max(r),
        100 * statistics.median(abs(x - 1) for x in r)))

large = [g for g in gemms if g[4] >= 1e10]
print("# the bf16 fraction from the GEMMs of at least 1e10 FLOP (%d): %.4f" %
      (len(large), fit(large)))
held = {"compute": [], "memory": []}
for b in sorted({g[3] for g in gemms}):
    f = fit([g for g in large if g[3] != b])
    out = [g for g in gemms if g[3] == b]
    r_large = ratios([g for g in out if g[4] >= 1e10], f)
    print("  batch %d left out: fraction %.4f; its GEMMs >= 1e10 FLOP: median %.3f "
          "[%.3f, %.3f]" % (b, f, statistics.median(r_large), min(r_large), max(r_large)))
    for g in out:
        bound = "memory" if g[2] > g[1] * fraction / f else "compute"
        held[bound].append(g[0] / modelled(g, f))
held["any"] = held["compute"] + held["memory"]
for bound in ("compute", "memory", "any"):
    r = held[bound]
    if r:
        print("# band gemm-%s (left-out batches, every size): p10 %.3f p90 %.3f "
              "(min %.3f, max %.3f; %d GEMMs)" % (bound, pct(r, 0.1), pct(r, 0.9), min(r),
                                                   max(r), len(r)))
EOF
