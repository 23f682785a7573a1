#!/bin/bash
# dsmpi against Llama 3 405B's pre-training on 8192 and 16384 H100s (the Llama 3
# paper, table 4; tests/data/llama3/table4.csv): for each row, `dsmpi predict
# --estimate-missing` on h100-sxm with the paper's strategy (tp, cp, pp, dp,
# 16M tokens a batch, interleaved with one layer a virtual stage and the
# embedding and loss in the split: vpp=8, embedding-in-split, loss-in-split),
# sequence parallelism, fused attention, the distributed optimizer and
# micro-batch 1 (the paper does not give the last three: choices here).
# Communication from the cluster's nominal links ("nominal") and, where
# ../shared/data holds them, from the 1- and 2-node nccl-tests logs of an
# H100 cluster ("nccl-tests").  Nothing is fitted to these numbers.
#
# The paper gives TFLOP/s but not how it counts attention; dsmpi counts every
# query-key pair as Megatron-LM's formula does (the causal half as well), so
# the comparison is in tokens/s per GPU, the paper's converted with both
# counts: "full" (dsmpi's) and "causal" (half the pairs).  At sequence 8192
# they differ by 4%, at 131072 by 40%.
# Usage: llama3_table.sh [BUILD_DIR]
set -eu
build=${1:-build}
dsmpi=$build/apps/dsmpi/dsmpi
here=$(cd "$(dirname "$0")" && pwd)
table=$here/../data/llama3/table4.csv
logs=$here/../../../shared/data/nccl-tests/h100-ib-cluster01
comm_sets="nominal"
if [ -r "$logs/allcollectives_8.log" ] && [ -r "$logs/alltoall+sendrecv_16.log" ]; then
    comm_sets="nominal nccl-tests"
else
    echo "# $logs not found: the nccl-tests rows are skipped"
fi
echo "# dsmpi vs Llama 3 405B pre-training (arXiv:2407.21783, table 4), h100-sxm, --estimate-missing"
printf "# %-6s %3s %3s %3s %4s %7s %-10s %9s %9s %13s %9s %13s %15s %7s %8s\n" "gpus" "tp" "cp" "pp" "dp" "seq" "comm" \
    "paper" "dsmpi" "paper" "dsmpi" "dsmpi band" "error" "bubble" "memory"
printf "# %-6s %3s %3s %3s %4s %7s %-10s %9s %9s %13s %9s %13s %15s %7s %8s\n" "" "" "" "" "" "" "" \
    "(TFLOP/s)" "(TFLOP/s)" "(tok/s/GPU)" "(tok/s/GPU)" "(tok/s/GPU)" "(%)" "(%)" "(GiB)"
printf "# %-6s %3s %3s %3s %4s %7s %-10s %9s %9s %13s %9s %13s %15s %7s %8s\n" "" "" "" "" "" "" "" \
    "" "" "causal-full" "" "" "causal..full" "" ""
grep -v '^#' "$table" | tail -n +2 | while IFS=, read -r preset gpus tp cp pp dp seq gbs layers hidden tflops _; do
    for comm in $comm_sets; do
        extra=()
        if [ "$comm" = "nccl-tests" ]; then
            extra=(--nccl-tests "$logs/allcollectives_8.log" --nccl-tests "$logs/alltoall+sendrecv_16.log")
        fi
        "$dsmpi" predict --model "$preset" --seq-len "$seq" --target-gpus "$gpus" --device h100-sxm \
            --strategy "dp=$dp,tp=$tp,cp=$cp,pp=$pp,vpp=8,mbs=1,gbs=$gbs,sp,flash,zero=1,embedding-in-split,loss-in-split" \
            --estimate-missing --allow-oom --json "${extra[@]}" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)["summary"]
gpus, tp, cp, pp, dp, seq, gbs, layers, hidden, tflops, comm = sys.argv[1:]
gpus, seq, gbs, layers, hidden, tflops = int(gpus), int(seq), int(gbs), int(layers), int(hidden), float(tflops)
tokens = gbs * seq
full = s["model_flops"] / tokens                 # FLOPs a token as dsmpi counts them
causal = full - 6.0 * layers * seq * hidden      # less the causal mask s hidden half of QK^T and PV
ours = s["tokens_per_s"] / gpus
paper_causal, paper_full = tflops * 1e12 / causal, tflops * 1e12 / full
band_lo = tokens / s["iter_time_high_s"] / gpus
band_hi = tokens / s["iter_time_low_s"] / gpus
e_lo, e_hi = sorted((100.0 * (ours - paper_causal) / paper_causal, 100.0 * (ours - paper_full) / paper_full))
inside = band_lo <= max(paper_causal, paper_full) and min(paper_causal, paper_full) <= band_hi
print("  %-6d %3s %3s %3s %4s %7d %-10s %9.0f %9.1f %6.1f-%-6.1f %9.1f %6.1f-%-6.1f %+7.1f..%+-6.1f %7.1f %8.1f%s%s" % (
    gpus, tp, cp, pp, dp, seq, comm, tflops, s["model_tflops_per_gpu"], paper_causal, paper_full, ours,
    band_lo, band_hi, e_lo, e_hi, 100.0 * s["bubble_fraction"], s["peak_memory_GiB"],
    "" if inside else "  OUTSIDE THE BAND", "  OUT OF MEMORY" if s["oom"] else ""))
' "$gpus" "$tp" "$cp" "$pp" "$dp" "$seq" "$gbs" "$layers" "$hidden" "$tflops" "$comm"
    done
done
