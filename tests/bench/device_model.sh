#!/bin/bash
# The device model against Megatron-LM's weak-scaling table (Narayanan et al.,
# SC'21, table 1; tests/data/megatron/sc21_table1.csv): for each row, dsmpi's
# TFLOP/s per GPU from `dsmpi predict --estimate-missing` on a100-80g (compute
# from the device model, communication from the cluster's nominal links), and
# the error against the paper's.  The paper counts recomputation in its FLOPs
# (eq. 3), so the comparison is dsmpi's hardware TFLOP/s with full
# recomputation.  The micro-batch size, the interleaving and the
# data-parallel wrapper of each row are not in the table: they are the
# paper's authors' settings in Megatron-LM's examples/sc21/run_table_1.sh,
# kept in the same file (torch DDP reduces gradients in buckets during the
# backward pass: dsmpi's overlap; Megatron-LM's "local" DDP after it:
# no-overlap).  Nothing is fitted to these numbers.
# Usage: device_model.sh [BUILD_DIR]
set -eu
build=${1:-build}
dsmpi=$build/apps/dsmpi/dsmpi
table=$(dirname "$0")/../data/megatron/sc21_table1.csv
echo "# dsmpi device model vs Megatron-LM SC'21 table 1 (a100-80g, --estimate-missing, recompute=full, the authors' mbs, interleaving and DDP per row)"
printf "# %-14s %6s %3s %3s %4s %6s %3s %4s %-5s %10s %10s %8s %7s\n" "model" "gpus" "tp" "pp" "dp" "gbs" "mbs" "lpvs" "ddp" "paper" "dsmpi" "error" "MFU"
printf "# %-14s %6s %3s %3s %4s %6s %3s %4s %-5s %10s %10s %8s %7s\n" "" "(count)" "" "" "" "" "" "" "" "(TFLOP/s)" "(TFLOP/s)" "(%)" "(%)"
grep -v '^#' "$table" | tail -n +2 | while IFS=, read -r preset gpus tp pp gbs paper _ mbs lpvs ddp; do
    dp=$((gpus / (tp * pp)))
    strategy="dp=$dp,tp=$tp,pp=$pp,mbs=$mbs,gbs=$gbs,recompute=full"
    vstage=""
    if [ -n "$lpvs" ]; then
        strategy="$strategy,schedule=interleaved"
        vstage="--num-layers-per-virtual-pipeline-stage $lpvs"
    else
        strategy="$strategy,schedule=1f1b"
    fi
    [ "$ddp" = local ] && strategy="$strategy,no-overlap"
    # shellcheck disable=SC2086 # $vstage is an option and its value, or nothing
    "$dsmpi" predict --model "$preset" --target-gpus "$gpus" --device a100-80g \
        --strategy "$strategy" $vstage --estimate-missing --allow-oom --json | python3 -c '
import json, sys
s = json.load(sys.stdin)["summary"]
preset, gpus, tp, pp, dp, gbs, mbs, lpvs, ddp, paper = sys.argv[1:]
ours = s["hardware_tflops_per_gpu"]
print("  %-14s %6s %3s %3s %4s %6s %3s %4s %-5s %10.1f %10.1f %+8.1f %7.1f%s" % (preset, gpus, tp, pp, dp, gbs,
      mbs, lpvs or "-", ddp, float(paper), ours, 100.0 * (ours - float(paper)) / float(paper), 100.0 * s["mfu"],
      "  OUT OF MEMORY" if s["oom"] else ""))' "$preset" "$gpus" "$tp" "$pp" "$dp" "$gbs" "$mbs" "$lpvs" "$ddp" "$paper"
done
