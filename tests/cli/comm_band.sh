#!/bin/sh
# The band of `dsmpi comm` beyond the measured nodes: fitted on 1 and 2
# nodes of A100s, all-reduce of 16 MiB at 8 nodes (factor 4) is
# time x exp(-1.012 / log2(5) x 2) .. time x exp(1.012 / log2(5) x 2) (the
# widest error per doubling of either sign, on both sides), and without the
# H100 cluster's rows (--band-leave-out) high is time x exp(1.098 / 3 x 2).
# Inside the measured nodes low/high stay the faster/slower of ring-only and
# tree-only.
# Usage: comm_band.sh DSMPI DATA_DIR
set -u
DSMPI=$1
LOGS=$2/nccl-tests/a100-azure-ndv4
fail=0
check() { # description, command...
    what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
row() { # gpus, extra options...: the CSV row of all-reduce at 16 MiB
    gpus=$1; shift
    "$DSMPI" comm --nccl-tests "$LOGS/all_reduce_8.log" "$LOGS/all_reduce_16.log" \
        --gpus-per-node 8 --op allreduce --gpus "$gpus" --min-bytes 16MiB --max-bytes 16MiB \
        --csv "$@" 2>/dev/null | tail -1
}
near() { # actual, expected: within 0.1%
    awk -v a="$1" -v e="$2" 'BEGIN { d = a - e; if (d < 0) d = -d; exit !(d <= 1e-3 * e) }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", a / b }'; }

# columns: gpus,nodes,size_B,count,time_us,algbw,busbw,algo,ring_us,tree_us,low_us,high_us,prov
inside=$(row 16)
ring=$(echo "$inside" | cut -d, -f9)
tree=$(echo "$inside" | cut -d, -f10)
fastest=$(awk -v r="$ring" -v t="$tree" 'BEGIN { print (r < t ? r : t) }')
slowest=$(awk -v r="$ring" -v t="$tree" 'BEGIN { print (r < t ? t : r) }')
check "inside the measured nodes: low = the faster of ring-only and tree-only" \
    near "$(echo "$inside" | cut -d, -f11)" "$fastest"
check "inside the measured nodes: high = the slower of them" \
    near "$(echo "$inside" | cut -d, -f12)" "$slowest"

beyond=$(row 64)
t=$(echo "$beyond" | cut -d, -f5)
check "factor 4: high / time = exp(2 x 1.012 / log2 5) = 2.3909" \
    near "$(ratio "$(echo "$beyond" | cut -d, -f12)" "$t")" 2.3909
check "factor 4: low / time = exp(-2 x 1.012 / log2 5) = 0.4182" \
    near "$(ratio "$(echo "$beyond" | cut -d, -f11)" "$t")" 0.4182
far=$(row 256)
check "factor 16: high / time = exp(4 x 1.012 / log2 5) = 5.7166" \
    near "$(ratio "$(echo "$far" | cut -d, -f12)" "$(echo "$far" | cut -d, -f5)")" 5.7166

left=$(row 64 --band-leave-out h100-ib-cluster01)
check "without the H100 rows: high / time = exp(2 x 1.098 / 3) = 2.0792" \
    near "$(ratio "$(echo "$left" | cut -d, -f12)" "$(echo "$left" | cut -d, -f5)")" 2.0792
check "the time itself does not move" near "$(echo "$left" | cut -d, -f5)" "$t"

# send/recv as sendrecv_perf on more nodes than its log's job spanned: the
# log's time slowed by the congestion prior (5% of the bandwidth per
# doubling of the span, 2 -> 8 nodes: at most 1 / 0.95^2 = 1.108 x, the
# latency not slowed), the band that of the span (f = 4) on the fast side;
# on the slow side the larger of the span's rate (2.39 x) and 3 x the logged
# time: the most loaded of 8 uplinks that 8 hashed flows take, at the 90th
# percentile (dsi_comm_collision_load).
sendrecv() { # gpus: the CSV row at 2 MiB from a 4-rank, 2-node log
    "$DSMPI" comm --nccl-tests "$2/nccl-tests/dialects/sendrecv_4.log" --gpus-per-node 2 \
        --op sendrecv --gpus "$1" --min-bytes 2MiB --max-bytes 2MiB --csv 2>/dev/null | tail -1
}
same=$(sendrecv 4 "$2")
wide=$(sendrecv 16 "$2")
check "send/recv on the log's 2 nodes: the logged 105 us, no band" \
    test "$(echo "$same" | cut -d, -f5,11,12)" = "105.0000,105.0000,105.0000"
slowed=$(ratio "$(echo "$wide" | cut -d, -f5)" 105)
check "send/recv on 8 nodes: 1.09 to 1.108 x the logged time ($slowed)" \
    awk -v r="$slowed" 'BEGIN { exit !(r >= 1.09 && r <= 1.1081) }'
check "send/recv on 8 nodes: provenance extrapolated" test "$(echo "$wide" | cut -d, -f13)" = extrapolated
check "send/recv on 8 nodes: high = 3 x the logged 105 us" \
    test "$(echo "$wide" | cut -d, -f12)" = "315.0000"
check "send/recv on 8 nodes: low / time = 0.4182" \
    near "$(ratio "$(echo "$wide" | cut -d, -f11)" "$(echo "$wide" | cut -d, -f5)")" 0.4182
exit $fail
