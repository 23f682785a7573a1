#!/usr/bin/env python3
"""GPU systems on the command line.

--target system=NAME[,nodes=N] predicts the same, to the bit, as the cluster
file written by hand from the same public pages (tests/data/systems); `dsmpi
systems` lists every entry with its sources; a site's --systems file adds a
system; bad names, sizes beyond the partition and contradicting options are
one line on stderr and exit 2.

  systems_cli.py DSMPI DATA WORKDIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys

dsmpi, data, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)
failures = []


def run(words):
    p = subprocess.run([dsmpi] + words, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def prediction(words):
    code, out, err = run(["predict", "--model", "gpt2-medium", "--estimate-missing", "--json"]
                         + words)
    if code != 0:
        failures.append("%s: exit %d: %s" % (words, code, err.strip()))
        return None
    result = json.loads(out)
    for timing in ("build_s", "evaluate_s"):  # wall-clock of this run, not the prediction
        result.pop(timing, None)
    return result


# The catalogue against the hand-written files: a strategy within a group and one across groups.
for target, path, strategy in [
        ("system=perlmutter,nodes=64", "perlmutter-64.json", "tp=4,pp=2,mbs=2"),
        ("system=dgx-h100-superpod,nodes=96", "dgx-h100-superpod-96.json", "tp=8,pp=2,mbs=1,gbs=480")]:
    a = prediction(["--strategy", strategy, "--target", target])
    b = prediction(["--strategy", strategy, "--cluster", os.path.join(data, "systems", path)])
    if a is None or b is None:
        continue
    if a != b:
        failures.append("%s and %s predict differently: %s vs %s" % (
            target, path, a["summary"]["iter_time_s"], b["summary"]["iter_time_s"]))
    if a["target_gpus"] != (256 if "perlmutter" in target else 768):
        failures.append("%s: target_gpus %s" % (target, a["target_gpus"]))

# The listing, and one system with its sources.
code, out, err = run(["systems", "--json"])
systems = json.loads(out)["systems"] if code == 0 else []
names = [s["name"] for s in systems]
for wanted in ["perlmutter", "polaris", "alps-gh200", "juwels-booster", "jupiter-booster",
               "leonardo-booster", "isambard-ai", "dgx-h100-superpod", "dgx-b200-superpod",
               "aws-p5", "aws-p5e", "azure-nd-h100-v5", "azure-nd-h200-v5", "gcp-a3-mega",
               "gcp-a3-ultra"]:
    if wanted not in names:
        failures.append("systems --json lacks %s" % wanted)
for s in systems:
    if "https://" not in s["source_node"] or len(s["read_on"]) != 10:
        failures.append("%s: no source or date read" % s["name"])
code, out, err = run(["systems", "jupiter-booster"])
for needle in ["4 x gh200", "4 x 200 Gb/s = 800 Gb/s per node", "6000 nodes, 24000 GPUs",
               "https://apps.fz-juelich.de/jsc/hps/jupiter/configuration.html",
               "--cluster-tag jupiter-booster", "not published, and the default used:"]:
    if code != 0 or needle not in out:
        failures.append("systems jupiter-booster lacks '%s' (exit %d)" % (needle, code))

# A site's file adds a system predict can target.
with open("site.json", "w") as f:
    json.dump({"systems": [{"name": "lab-a100", "device": "a100-80g", "gpus_per_node": 8,
                            "nics_per_node": 8, "nic_Gbps": 200, "max_nodes": 4,
                            "source_node": "https://lab.example/cluster"}]}, f)
code, out, err = run(["systems", "lab-a100", "--systems", "site.json"])
if code != 0 or "8 x 200 Gb/s = 1600 Gb/s per node" not in out:
    failures.append("site system not listed: %d %s %s" % (code, out, err))
site = prediction(["--strategy", "tp=8", "--systems", "site.json", "--target",
                   "system=lab-a100,nodes=2"])
if site is not None and (site["target_gpus"] != 16 or site["device"] != "a100-80g"):
    failures.append("site system target: %s GPUs of %s" % (site["target_gpus"], site["device"]))
with open("bad.json", "w") as f:
    json.dump({"systems": [{"name": "lab-a100", "racks": 2}]}, f)

# search on a system.
code, out, err = run(["search", "--model", "gpt2-medium", "--estimate-missing", "--top", "1",
                      "--target", "system=polaris,nodes=8", "--json"])
found = json.loads(out) if code == 0 else {}
if found.get("target") != "polaris" or found.get("target_gpus") != 32:
    failures.append("search on polaris,nodes=8: exit %d %s %s" % (code, out[:200], err))

# plan on a system: its network per size, its charging unit.
code, out, err = run(["plan", "--model", "gpt2-medium", "--tokens", "10B", "--target",
                      "system=jupiter-booster", "--gpus", "64,128", "--estimate-missing", "--csv"])
rows = list(csv.DictReader(out.splitlines())) if code == 0 else []
if len(rows) != 2 or not all(r["device"] == "gh200" and r["nodes"] == str(int(r["gpus"]) // 4)
                             and r["service_units"] == r["node_hours"] for r in rows):
    failures.append("plan on jupiter-booster: exit %d, %r %s" % (code, rows, err))

# One line, exit 2.
refusals = [
    (["systems", "summit"], "system 'summit' is not known (accepted: perlmutter,"),
    (["systems", "--systems", "bad.json"], "key \"racks\" is not known"),
    (["predict", "--model", "gpt2-medium", "--estimate-missing", "--target",
      "system=perlmutter,nodes=4096"], "4096 nodes are beyond system perlmutter's largest"),
    (["predict", "--model", "gpt2-medium", "--estimate-missing", "--target", "system=perlmutter",
      "--cluster", os.path.join(data, "systems", "perlmutter-64.json")],
     "both describe the target"),
    (["predict", "--model", "gpt2-medium", "--estimate-missing", "--target", "system=polaris",
      "--gpus-per-node", "8"], "--gpus-per-node 8 contradicts the 4 GPUs per node of system"),
    (["predict", "--model", "gpt2-medium", "--estimate-missing", "--target", "system=polaris",
      "--device", "h100-sxm"], "--device h100-sxm contradicts system polaris's a100-40g"),
    (["predict", "--model", "gpt2-medium", "--estimate-missing", "--target", "system=polaris",
      "--target-nodes", "8"], "the nodes in the target"),
    (["predict", "--model", "gpt2-medium", "--estimate-missing", "--target", "system=gcp-a3-ultra"],
     "system gcp-a3-ultra publishes no partition size"),
    (["search", "--model", "gpt2-medium", "--estimate-missing", "--target", "system=nope"],
     "system 'nope' is not known"),
    (["plan", "--model", "gpt2-medium", "--tokens", "1B", "--estimate-missing", "--target",
      "system=polaris", "--gpus", "256,4096"],
     "4096 GPUs are beyond system polaris's largest partition (accepted: up to 2240 GPUs"),
    (["plan", "--model", "gpt2-medium", "--tokens", "1B", "--estimate-missing", "--target",
      "system=polaris,nodes=8", "--gpus", "32"], "--target other than system=NAME"),
]
for words, needle in refusals:
    code, out, err = run(words)
    if code != 2 or needle not in err or len(err.strip().splitlines()) != 1:
        failures.append("%s: exit %d, stderr %r (wanted exit 2 and one line with %r)" % (
            " ".join(words), code, err, needle))

for f in failures:
    print("FAIL:", f)
print("systems_cli: %d failures" % len(failures))
sys.exit(1 if failures else 0)
