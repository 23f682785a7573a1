#!/bin/bash
# The device model against Megatron-LM's weak-scaling table (Narayanan et al.,
# SC'21, table 1; tests/data/megatron/sc21_table1.csv): for each row, dsmpi's
# TFLOP/s per GPU from `dsmpi predict --estimate-missing` on a100-80g (compute
# from the device model, communication from the cluster's nominal links), and
# the error against the paper's.  The paper counts recomputation in its FLOPs
# (eq. 3), so the comparison is dsmpi's hardware TFLOP/s with full
# recomputation; the micro-batch size (1) and the schedule (1F1B, not
# interleaved) are not in the table and are choices here.  The gradients are
# all-reduced after the backward pass (no-overlap): Megatron-LM of 2021 (its
# "local" DDP, the default) reduced them in train_step once every
# micro-batch's backward had run.  Nothing is fitted to these numbers.
# Usage: device_model.sh [BUILD_DIR]
set -eu
build=${1:-build}
dsmpi=$build/apps/dsmpi/dsmpi
table=$(dirname "$0")/../data/megatron/sc21_table1.csv
echo "# dsmpi device model vs Megatron-LM SC'21 table 1 (a100-80g, --estimate-missing, mbs=1, 1f1b, recompute=full, no-overlap)"
printf "# %-14s %6s %3s %3s %4s %6s %10s %10s %8s %7s\n" "model" "gpus" "tp" "pp" "dp" "gbs" "paper" "dsmpi" "error" "MFU"
printf "# %-14s %6s %3s %3s %4s %6s %10s %10s %8s %7s\n" "" "(count)" "" "" "" "" "(TFLOP/s)" "(TFLOP/s)" "(%)" "(%)"
grep -v '^#' "$table" | tail -n +2 | while IFS=, read -r preset gpus tp pp gbs paper _; do
    dp=$((gpus / (tp * pp)))
    "$dsmpi" predict --model "$preset" --target-gpus "$gpus" --device a100-80g \
        --strategy "dp=$dp,tp=$tp,pp=$pp,mbs=1,gbs=$gbs,schedule=1f1b,recompute=full,no-overlap" \
        --estimate-missing --allow-oom --json | python3 -c '
import json, sys
s = json.load(sys.stdin)["summary"]
preset, gpus, tp, pp, dp, gbs, paper = sys.argv[1:]
ours = s["hardware_tflops_per_gpu"]
print("  %-14s %6s %3s %3s %4s %6s %10.1f %10.1f %+8.1f %7.1f%s" % (preset, gpus, tp, pp, dp, gbs,
      float(paper), ours, 100.0 * (ours - float(paper)) / float(paper), 100.0 * s["mfu"],
      "  OUT OF MEMORY" if s["oom"] else ""))' "$preset" "$gpus" "$tp" "$pp" "$dp" "$gbs" "$paper"
done
