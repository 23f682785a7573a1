#!/bin/sh
# dsmpi predict from the command line: usage and exit codes, missing costs
# naming the profile command, a cost table round trip, and the exports
# (Perfetto trace: valid JSON, one track per device and stream, no overlap
# on a track; SVG: valid XML; HDF5 timeline: per-device datasets).
# Usage: test_predict.sh DSMPI WORKDIR
set -u
DSMPI=$1
WORK=$2
mkdir -p "$WORK" && cd "$WORK" || exit 1
fail=0
check() { # description, command...
    what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
expect_rc() { # rc, command...
    want=$1; shift
    "$@" > out.txt 2> err.txt
    got=$?
    [ "$got" = "$want" ] || { echo "exit $got, expected $want: $*"; cat err.txt; return 1; }
}

check "help exits 0" expect_rc 0 "$DSMPI" predict --help
check "help names the outputs" grep -q -- "--trace FILE.json" out.txt
check "no costs is bad input" expect_rc 2 "$DSMPI" predict --demo
check "bad slow device is bad input" expect_rc 2 "$DSMPI" predict --demo --estimate-missing --slow-device x
check "bad rank list is bad input" expect_rc 2 "$DSMPI" predict --demo --estimate-missing --trace t.json --trace-ranks 5000

# Missing costs: the events are named with the command that profiles them.
: > empty.txt
check "missing costs exit 2" expect_rc 2 "$DSMPI" predict --demo --cost-table empty.txt
check "missing costs are listed" grep -q "allreduce" err.txt
check "the profile command is given" grep -q "dsmpi profile --model gpt2-medium" err.txt

# Estimated, then the same costs as a table: same time, nothing assumed.
check "estimate json" expect_rc 0 "$DSMPI" predict --demo --estimate-missing --json
cp out.txt estimated.json
check "json round trip" python3 - <<'PY'
import json
d = json.load(open("estimated.json"))
s = d["summary"]
assert s["basis"] == "assumed" and s["assumed_share"] == 1.0, s
assert d["mode"] == "symmetric" and d["target_gpus"] == 1024
assert len(d["devices"]) == 16 and sum(x["represents"] for x in d["devices"]) == 1024
assert len(d["microbatches"]) == 4 * 8
with open("costs.txt", "w") as f:
    for k in d["assumed_keys"]:
        f.write("%s = %.17g\n" % (k["event"], k["seconds"]))
print(len(d["assumed_keys"]), "costs written")
PY
check "predict from the cost table" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt --json
check "same iteration, nothing assumed" python3 - <<'PY'
import json
a = json.load(open("estimated.json"))["summary"]
b = json.load(open("out.txt"))["summary"]
assert a["iter_time_s"] == b["iter_time_s"], (a["iter_time_s"], b["iter_time_s"])
assert b["assumed_keys"] == 0 and b["basis"] == "measured"
PY
check "table output" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt
check "table has a units row" grep -q "(sample/s)" out.txt
check "full mode agrees" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt --full --json
check "full == symmetric" python3 - <<'PY'
import json
a = json.load(open("estimated.json"))["summary"]
b = json.load(open("out.txt"))
assert b["mode"] == "full" and len(b["devices"]) == 1024
assert a["iter_time_s"] == b["summary"]["iter_time_s"]
PY
check "straggler" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt --slow-device 5=1.5 --json
check "straggler slows the iteration" python3 - <<'PY'
import json
a = json.load(open("estimated.json"))["summary"]
b = json.load(open("out.txt"))
assert b["mode"] == "full" and b["summary"]["iter_time_s"] > a["iter_time_s"]
assert [d for d in b["devices"] if d["rank"] == 5][0]["speed_factor"] == 1.5
PY

# Exports.
check "exports" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt --quiet \
    --trace trace.json --svg chart.svg --timeline timeline.h5 --detail-ranks 0
check "trace: valid JSON, 4 tracks per device of replica 0, no overlap" python3 - <<'PY'
import json, collections
d = json.load(open("trace.json"))
ev = d["traceEvents"]
tracks = [e for e in ev if e["ph"] == "M" and e["name"] == "thread_name"]
procs = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
# 16 devices (tp 4 x pp 4) with compute, pp, dp and other streams; rank 0
# traced operator by operator adds its TP collective track.
assert len(tracks) == 16 * 4 + 1, len(tracks)
assert len(procs) == 4, len(procs)  # replica 0 sits on 4 nodes
per = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        assert e["dur"] >= 0
        per[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
assert set(per) <= {(t["pid"], t["tid"]) for t in tracks}
for spans in per.values():
    spans.sort()
    for a, b in zip(spans, spans[1:]):
        assert b[0] >= a[1] - 1e-6, (a, b)
# Rank 0 (gpu 0 of node 0: tracks 0-5) is traced operator by operator, rank 1 by layer.
rank0 = {e["name"] for e in ev if e["ph"] == "X" and e["pid"] == 0 and e["tid"] < 6}
rank1 = {e["name"] for e in ev if e["ph"] == "X" and e["pid"] == 0 and 6 <= e["tid"] < 12}
assert "attn.qkv" in rank0 and "attn.tp.reduce" in rank0 and "fwd layer 0 mb 0" not in rank0
assert "fwd layer 0 mb 0" in rank1 and "attn.qkv" not in rank1
print(sum(len(v) for v in per.values()), "events on", len(tracks), "tracks")
PY
check "svg: valid XML with a row per device" python3 - <<'PY'
import xml.dom.minidom
d = xml.dom.minidom.parse("chart.svg")
texts = [t.firstChild.data for t in d.getElementsByTagName("text") if t.firstChild]
assert sum(1 for t in texts if t.startswith("rank ")) == 16, texts
assert len(d.getElementsByTagName("rect")) > 100
PY
check "timeline: per-device datasets" sh -c 'h5ls -r timeline.h5 | grep -q "/devices/rank_000000/start_ns"'
check "timeline: 16 devices (symmetric)" sh -c '[ "$(h5ls timeline.h5/devices | wc -l)" = 16 ]'

# Sequence parallelism adds the TP stream (norm gradients) to every device.
check "sp trace" expect_rc 0 "$DSMPI" predict --model gpt2-medium --seq-len 256 \
    --strategy tp=2,pp=2,mbs=1,gbs=16,sp --target-gpus 16 --estimate-missing --trace sp.json --svg sp.svg --quiet
check "sp trace has 5 tracks per device" python3 - <<'PY'
import json
ev = json.load(open("sp.json"))["traceEvents"]
assert sum(1 for e in ev if e["ph"] == "M" and e["name"] == "thread_name") == 4 * 5
PY
exit $fail
