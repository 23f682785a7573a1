#!/bin/sh
# dsmpi predict from the command line: usage and exit codes, missing costs
# naming the profile command, a cost table round trip, and the exports
# (Perfetto trace: valid JSON, one track per device and stream, no overlap
# on a track; SVG: valid XML; HDF5 timeline: per-device datasets).
# Usage: test_predict.sh DSMPI WORKDIR
set -u
DSMPI=$1
WORK=$2
. "$(dirname "$0")/lib_check.sh"
mkdir -p "$WORK" && cd "$WORK" || exit 1
fail=0

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
# Compute priced by the device model, communication by the cluster's links.
assert {k["provenance"] for k in d["assumed_keys"] if "group=" not in k["event"]} == {"modelled"}
assert {k["provenance"] for k in d["assumed_keys"] if "group=" in k["event"]} == {"assumed"}
assert 0 < s["modelled_keys"] < s["assumed_keys"], s
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
check "svg: valid XML with a row per distinct timeline" python3 - <<'PY'
import xml.dom.minidom
d = xml.dom.minidom.parse("chart.svg")
labels = [t.firstChild.data for t in d.getElementsByTagName("text")
          if t.getAttribute("text-anchor") == "end" and t.firstChild]
# tp=4 x pp=4: the 4 TP ranks of a stage run the same timeline.
assert labels == ["ranks 0-3  pp0", "ranks 256-259  pp1", "ranks 512-515  pp2",
                  "ranks 768-771  pp3"], labels
assert len(d.getElementsByTagName("rect")) > 40
PY
# The Gantt chart of tp=8 x pp=2: one row per stage (its 8 TP ranks are one
# timeline), a legend of the kinds drawn only, the assumed share in the title.
check "gantt tp=8 pp=2" expect_rc 0 "$DSMPI" predict --model llama3-8b --strategy tp=8,pp=2,mbs=1,gbs=64 \
    --target-gpus 64 --estimate-missing --svg tp8.svg --quiet
check "gantt measured" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt --svg measured.svg --quiet
head -n 20 costs.txt > part.txt
check "gantt partly assumed" expect_rc 0 "$DSMPI" predict --demo --cost-table part.txt --estimate-missing \
    --svg part.svg --quiet
check "gantt of chosen ranks" expect_rc 0 "$DSMPI" predict --demo --cost-table costs.txt --svg ranks.svg \
    --trace-ranks 0-7,256,300 --quiet
check "gantt: rows, legend, assumed share" python3 - <<'PY'
import re, xml.dom.minidom
def chart(path):
    d = xml.dom.minidom.parse(path)
    texts = [t for t in d.getElementsByTagName("text") if t.firstChild]
    labels = [t.firstChild.data for t in texts if t.getAttribute("text-anchor") == "end"]
    rects = d.getElementsByTagName("rect")
    rows = [r for r in rects if r.getAttribute("fill") == "#eeeeee" and r.getAttribute("width") != "14"]
    # Legend: a 14x14 swatch followed by its name; bars: the other coloured rectangles.
    legend = {}
    for r in rects:
        if r.getAttribute("width") == "14" and r.getAttribute("height") == "14":
            legend[r.nextSibling.firstChild.data] = r.getAttribute("fill")
    drawn = {r.getAttribute("fill") for r in rects if r not in rows and r.getAttribute("width") != "14"
             and r.getAttribute("fill") != "white"}
    subtitle = [t.firstChild.data for t in texts if t.getAttribute("y") == "40"][0]
    return labels, rows, legend, drawn, subtitle
labels, rows, legend, drawn, subtitle = chart("tp8.svg")
assert labels == ["ranks 0-7  pp0", "ranks 32-39  pp1"], labels
assert len(rows) == 2, len(rows)
assert "tp-comm" not in legend and "idle" in legend, legend
assert {c for k, c in legend.items() if k != "idle"} == drawn, (legend, drawn)
assert set(legend) == {"forward", "backward", "optimizer", "pp-p2p", "dp-comm", "other-comm",
                       "idle"}, legend
assert "ASSUMED: 100% of the event time rests on modelled or assumed costs" in subtitle, subtitle
assert "partly" not in subtitle, subtitle
labels, rows, legend, drawn, subtitle = chart("measured.svg")
assert len(rows) == 4 and "assumed" not in subtitle.lower(), subtitle
labels, rows, legend, drawn, subtitle = chart("part.svg")
m = re.search(r"ASSUMED: (\d+)% of the event time", subtitle)
assert m and 0 < int(m.group(1)) < 100, subtitle
# Chosen ranks: replica 1's (4-7) run replica 0's timelines.
labels, rows, legend, drawn, subtitle = chart("ranks.svg")
assert labels == ["ranks 0-7  pp0", "ranks 256,300  pp1"], labels
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
