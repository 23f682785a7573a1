#!/bin/bash
# dsmpi profile --dry-run says what this allocation's shape measures of the
# target's communication and which shape to ask for, under mpiexec with 2
# ranks for a target of 64 nodes x 8 GPUs (a tree 6 levels deep): on one node
# no network level; 2 ranks as 2 nodes x 1 measure depth 1 at f = 64 / 2 =
# 32, the band exp(-fast x 5) .. exp(slow x 5) of the rates --json prints; of
# 4 devices 2 x 2 (a pair inside a node and 2 nodes), of 8 devices 4 x 2.
#   profile_shapes.sh DSMPI MPIEXEC NPFLAG WORKDIR
set -u
dsmpi=$1 mpiexec=$2 npflag=$3 tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp" && cd "$tmp" || exit 1
failures=0 checks=0
. "$(dirname "$0")/lib_expect.bash"
check() { checks=$((checks + 1)); "$@" || fail "${FUNCNAME[1]:-main}: $*"; }

export DS_MEASURE_BUDGET_S=0.3 DS_MEASURE_MIN_REPS=3 DS_MEASURE_WARMUP=1
inputs=(--model gpt2-medium --seq-len 128 --strategy tp=8,pp=2,mbs=1,gbs=512
        --target nodes=64,gpus-per-node=8 --sweep-max 64KiB --profile-db dry.h5 --dry-run)

# One node x 2 ranks (this machine): a pair inside the node, no network.
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" >one.txt 2>one.err
check test $? -eq 0
check grep -qx "# what this allocation (1 node x 2 ranks) measures for the target (64 nodes x 8 GPUs;" one.txt
check grep -qx "#   inside a node: groups of 2; across nodes: none" one.txt
check grep -q "^#   -> tree depth 0 of the 6 the target needs: every inter-node cost is assumed" one.txt
# The recommendations, each followed by its #SBATCH lines.
check grep -A3 -x "# ask for (2 devices, as this allocation): 2 nodes x 1" one.txt >ask2.txt
check diff - ask2.txt <<'TXT'
# ask for (2 devices, as this allocation): 2 nodes x 1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
TXT
check grep -A3 -x "# ask for (4 devices): 2 nodes x 2" one.txt >ask4.txt
check diff - ask4.txt <<'TXT'
# ask for (4 devices): 2 nodes x 2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
TXT
check grep -A3 -x "# ask for (8 devices): 4 nodes x 2" one.txt >ask8.txt
check diff - ask8.txt <<'TXT'
# ask for (8 devices): 4 nodes x 2
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
TXT
# Every factorisation of 2, 4 and 8 devices, the best of each marked.
check test "$(grep -cE '^[* ] +[248] +[0-9]+ +[0-9]+ ' one.txt)" -eq 9
check grep -qE '^\* +4 +2 +2 +2 +2 +1/6 +32 ' one.txt
check grep -qE '^  +4 +1 +4 +2,4 +- +0/6 +- +- +- +the network \(every inter-node level assumed\)' one.txt

# --json: one document with unique keys, the same recommendations, the band by hand.
"$mpiexec" "$npflag" 2 "$dsmpi" profile "${inputs[@]}" --json >one.json 2>/dev/null
check test $? -eq 0
check python3 -m json.tool one.json >/dev/null
check python3 - one.json <<'PY'
import json, math, sys
from strict_json import load
d = load(sys.argv[1])
here = d["allocation_measures"]
assert d["target_nodes"] == 64 and d["target_gpus_per_node"] == 8, d
assert here["nodes"] == 1 and here["inside_node"] == [2] and here["across_nodes"] == [], here
assert here["lacks_network"] is True and here["factor"] is None, here
assert [s["devices"] for s in d["allocation_shapes"]] == [2, 4, 8], d["allocation_shapes"]
best = [(a["shapes"][a["best"]]["nodes"], a["shapes"][a["best"]]["ranks_per_node"])
        for a in d["allocation_shapes"]]
assert best == [(2, 1), (2, 2), (4, 2)], best
assert d["allocation_shapes"][0]["sbatch"] == ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                                               "#SBATCH --gpus-per-node=1"], d["allocation_shapes"][0]
slow, fast = d["band_rates"]["slow"], d["band_rates"]["fast"]
for a in d["allocation_shapes"]:
    for s in a["shapes"]:
        most = max(s["across_nodes"], default=0)
        if most == 0:
            assert s["factor"] is None and s["tree_depth_max"] == 0, s
            continue
        f = 64 / most
        assert abs(s["factor"] - f) < 1e-9 and s["tree_depth_max"] == math.ceil(math.log2(most)), s
        assert abs(s["band_low"] - math.exp(-fast * math.log2(f))) < 1e-5 * s["band_low"], s
        assert abs(s["band_high"] - math.exp(slow * math.log2(f))) < 1e-5 * s["band_high"], s
PY

# DS_COMM_FAKE_NODES=1 places each rank on a node of its own: 2 nodes x 1.
DS_COMM_FAKE_NODES=1 "$mpiexec" "$npflag" 2 -x DS_COMM_FAKE_NODES "$dsmpi" profile "${inputs[@]}" \
    >two.txt 2>two.err
check test $? -eq 0
check grep -qx "#   inside a node: none; across nodes: 2 nodes, one rank each" two.txt
check grep -qx "#   -> tree depth 1 of the 6 the target needs; beyond 2 nodes times are extrapolated" two.txt

# Bad input: one line on stderr, exit 2.
expect_error 2 "gpus-per-node 0 is out of range" profile --model gpt2-medium \
    --strategy tp=8,pp=2,mbs=1,gbs=512 --target-gpus 512 --gpus-per-node 0 --profile-db x.h5 --dry-run
expect_error 2 "target item '64x8' has no value" profile --model gpt2-medium \
    --strategy tp=8,pp=2,mbs=1,gbs=512 --target 64x8 --profile-db x.h5 --dry-run

echo "profile_shapes: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
