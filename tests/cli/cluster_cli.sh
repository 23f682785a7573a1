#!/bin/sh
# Cluster files from the command line: every level shapes the estimated
# communication (oversubscription, NICs, span), unknown keys are refused
# (one line, exit 2, the key, the file, the accepted keys), and options that
# contradict the file are an error, targets larger than it a warning.
# Usage: cluster_cli.sh DSMPI WORKDIR
set -u
DSMPI=$1
WORK=$2
. "$(dirname "$0")/lib_check.sh"
mkdir -p "$WORK" && cd "$WORK" || exit 1
fail=0
one_line() { [ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt; return 1; }; }

# A dragonfly-like machine: 256 nodes of 4 GPUs, groups of SPAN nodes, NICS
# per node, global links OVERSUBSCRIPTION:1 above the groups.
dragonfly() { # file, oversubscription, nics, span
    cat > "$1" <<EOF
{"name": "df", "nodes": 256, "gpus_per_node": 4, "device": "h100-sxm",
 "levels": [{"name": "nvlink", "latency_us": 2, "bandwidth_GBps": 450},
            {"name": "group", "latency_us": 3, "bandwidth_GBps": 25, "span": $4, "nics_per_node": $3},
            {"name": "global", "latency_us": 5, "bandwidth_GBps": 25, "oversubscription": $2}]}
EOF
}
dragonfly os2.json 2 4 32
dragonfly os16.json 16 4 32
dragonfly nic1.json 2 1 32
dragonfly wide16.json 16 4 256

iter_s() { # cluster file: the predicted iteration time of dp=1024, no costs given
    "$DSMPI" predict --model gpt2-medium --strategy dp=1024,mbs=1,gbs=1024 --cluster "$1" \
        --estimate-missing --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["summary"]["iter_time_s"])'
}
t2=$(iter_s os2.json) t16=$(iter_s os16.json) nic=$(iter_s nic1.json) wide=$(iter_s wide16.json)
echo "iteration: 2:1 $t2 s, 16:1 $t16 s, one NIC $nic s, 16:1 with groups of 256 nodes $wide s"
slower() { python3 -c "import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(0 if a > r * b else 1)" "$@"; }
near() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 1e-6 * abs(b) else 1)" "$@"; }
check "16:1 global links are slower than 2:1" slower "$t16" "$t2" 1.5
check "one NIC per node is slower than four" slower "$nic" "$t2" 1.2
check "a span holding every node keeps the group off the global links" slower "$t16" "$wide" 1.5

# Unknown keys: one line, exit 2, the key, the file and the accepted keys.
sed 's/"name": "df",/"name": "df", "topology": "dragonfly",/' os2.json > topology.json
check "a top-level typo is bad input" expect_rc 2 "$DSMPI" predict --model gpt2-medium \
    --cluster topology.json --estimate-missing
check "one line" one_line
check "it names the key, the file and the accepted keys" grep -q \
    '^dsmpi predict: topology.json: key "topology" is not known (accepted: name, nodes, gpus_per_node, device, device_memory_GiB, peak_tflops, mem_bw_GBps, levels, pat)$' err.txt
sed 's/"span": 32/"spann": 32/' os2.json > spann.json
check "a typo inside a level is bad input" expect_rc 2 "$DSMPI" search --model gpt2-medium \
    --cluster spann.json --estimate-missing
check "one line" one_line
check "it names the level, the key and the keys accepted there" grep -q \
    '^dsmpi search: spann.json: levels\[1\]: key "spann" is not known (accepted: name, latency_us, bandwidth_GBps, span, oversubscription, nics_per_node, congestion_per_doubling, sharp)$' err.txt
check "plan refuses it too" expect_rc 2 "$DSMPI" plan --model gpt2-medium --cluster spann.json \
    --gpus 256 --estimate-missing --tokens 1T

# The in-switch reductions are booleans: anything else is one line, exit 2.
sed 's/"nics_per_node": 4}/"nics_per_node": 4, "sharp": "yes"}/' os2.json > sharp.json
check "a sharp that is not a boolean is bad input" expect_rc 2 \
    "$DSMPI" comm --cluster sharp.json --gpus 256
check "one line" one_line
check "it names the file, the level and the key" grep -q \
    '^dsmpi comm: sharp.json: levels\[1\]: "sharp" is not true or false$' err.txt
sed 's/"bandwidth_GBps": 450}/"bandwidth_GBps": 450, "nvls": 1}/' os2.json > nvls.json
check "an nvls that is not a boolean is bad input" expect_rc 2 \
    "$DSMPI" comm --cluster nvls.json --gpus 256
check "one line" one_line
sed 's/"name": "df",/"name": "df", "pat": 2,/' os2.json > pat.json
check "a pat that is not a boolean is bad input" expect_rc 2 \
    "$DSMPI" comm --cluster pat.json --gpus 256
check "one line" one_line

# Options against the file: devices per node that contradict it are an error.
check "--gpus-per-node against the file is bad input" expect_rc 2 "$DSMPI" predict \
    --model gpt2-medium --cluster os2.json --gpus-per-node 8 --estimate-missing
check "one line naming both counts and the file" grep -q \
    '^dsmpi predict: gpus-per-node 8 contradicts the 4 devices per node of cluster file os2.json (accepted: 4, or leave it out)$' err.txt
check "plan: --target-gpus-per-node against the file is bad input" expect_rc 2 "$DSMPI" plan \
    --model gpt2-medium --cluster os2.json --target-gpus-per-node 8 --gpus 256 --estimate-missing --tokens 1T
check "one line" one_line
check "the file's own count is accepted" expect_rc 0 "$DSMPI" predict --model gpt2-medium \
    --cluster os2.json --gpus-per-node 4 --strategy dp=1024,mbs=1,gbs=1024 --estimate-missing
check "and warns nothing" test ! -s err.txt

# A target larger than the file: a warning, the exit status unchanged.
check "a target within the file is its size" expect_rc 0 "$DSMPI" predict --model gpt2-medium \
    --cluster os2.json --target-gpus 256 --strategy mbs=1,gbs=256 --estimate-missing
check "64 nodes of the file" grep -q '^# target: df, 64 nodes x 4 devices = 256' out.txt
check "without a warning" test ! -s err.txt
check "a target beyond the file runs" expect_rc 0 "$DSMPI" predict --model gpt2-medium \
    --cluster os2.json --target-nodes 512 --strategy mbs=1,gbs=2048 --estimate-missing
check "on 512 nodes" grep -q '^# target: df, 512 nodes x 4 devices = 2048' out.txt
check "with one warning line" one_line
check "that says so" grep -q \
    '^dsmpi predict: warning: a target of 2048 GPUs (512 nodes) is larger than the 256 nodes of cluster file os2.json' err.txt
check "plan sizes beyond the file run" expect_rc 0 "$DSMPI" plan --model gpt2-medium \
    --cluster os2.json --gpus 512,2048 --estimate-missing --tokens 1T
check "with one warning line" one_line
check "that names the largest" grep -q \
    '^dsmpi plan: warning: sizes up to 2048 GPUs (512 nodes) are larger than the 256 nodes of cluster file os2.json' err.txt

# Impossible values: zero or negative bandwidth, oversubscription below 1:
# one line, exit 2, the value and the range accepted.
dragonfly os_half.json 0.5 4 32
sed 's/"bandwidth_GBps": 25, "span"/"bandwidth_GBps": 0, "span"/' os2.json > bw0.json
sed 's/"bandwidth_GBps": 25, "oversubscription"/"bandwidth_GBps": -3, "oversubscription"/' os2.json > bwneg.json
# refused DESCRIPTION FILE PATTERN: comm on FILE exits 2 with one stderr line matching PATTERN.
refused() {
    check "$1 is bad input" expect_rc 2 "$DSMPI" comm --cluster "$2" --gpus 256
    check "one line" one_line
    check "it names the value" grep -q "$3" err.txt
}
refused "zero bandwidth" bw0.json \
    '^dsmpi comm: bw0.json: levels\[1\]: "bandwidth_GBps" = 0 is out of range (accepted: 1e-06 to 1e+06)$'
refused "negative bandwidth" bwneg.json '"bandwidth_GBps" = -3 is out of range'
refused "oversubscription below 1" os_half.json \
    '^dsmpi comm: os_half.json: levels\[2\]: "oversubscription" = 0.5 is out of range (accepted: 1 to 1024)$'

# Congestion per doubling of the span: 0 to 0.9; out of range refused the
# same way; a prior that the output names, and that slows a wide group.
sed 's/"nics_per_node": 4}/"nics_per_node": 4, "congestion_per_doubling": 1.5}/' os2.json > cong15.json
sed 's/"nics_per_node": 4}/"nics_per_node": 4, "congestion_per_doubling": -0.1}/' os2.json > congneg.json
sed 's/"nics_per_node": 4}/"nics_per_node": 4, "congestion_per_doubling": 0.2}/' os2.json > cong02.json
refused "congestion above 0.9" cong15.json \
    '^dsmpi comm: cong15.json: levels\[1\]: "congestion_per_doubling" = 1.5 is out of range (accepted: 0 to 0.9)$'
refused "negative congestion" congneg.json '"congestion_per_doubling" = -0.1 is out of range'
comm_us() { # cluster file: all-reduce of 1 GiB on 128 GPUs (32 nodes), microseconds
    "$DSMPI" comm --cluster "$1" --op allreduce --gpus 128 --min-bytes 1GiB --max-bytes 1GiB \
        --csv 2>/dev/null | tail -1 | cut -d, -f5
}
sed 's/"nics_per_node": 4}/"nics_per_node": 4, "congestion_per_doubling": 0}/' os2.json > cong0.json
c0=$(comm_us cong0.json) c2=$(comm_us cong02.json) cd=$(comm_us os2.json)
c5=$(DS_COMM_CONGESTION_PRIOR=0.2 comm_us os2.json)
echo "1 GiB on 32 nodes: $c0 us without congestion, $c2 us at 20% per doubling, $cd us at the default prior"
# 32 nodes are 4 doublings beyond two: the bandwidth x 0.8^4 = 0.41.
check "20% per doubling slows a 32-node group by more than 2x" slower "$c2" "$c0" 2.0
check "and by less than 1 / 0.8^4" slower "$(python3 -c "print($c0 / 0.8 ** 4)")" "$c2" 1.0
check "the output says it is a prior" sh -c \
    "'$DSMPI' comm --cluster cong02.json --gpus 128 --max-bytes 8 | grep -q \
    '20.0% of it lost per doubling of the span beyond the measured (prior: the cluster file.s)'"
# Without the key, DS_COMM_CONGESTION_PRIOR (5%: bandwidth x 0.95^4 = 0.81).
check "the default prior slows it by more than 1.15x" slower "$cd" "$c0" 1.15
check "and by less than 1 / 0.95^4" slower "$(python3 -c "print($c0 / 0.95 ** 4)")" "$cd" 1.0
check "the environment sets the prior" near "$c5" "$c2"
check "the output names the default" sh -c \
    "'$DSMPI' comm --cluster os2.json --gpus 128 --max-bytes 8 | grep -q \
    '5.0% of it lost per doubling of the span beyond the measured (prior: DS_COMM_CONGESTION_PRIOR)'"

exit $fail
