#!/usr/bin/env python3
"""plan --report DIR: the proposal's report.

The issue's command writes report.md, report.html, plan.svg and
sensitivity.svg; the HTML names nothing outside itself (no http:, https: or
protocol-relative URL, no <link>, <script> or <img> of another file) and
carries both charts inline; both documents state the request, the bands, the
sensitivity to a network 20% slower and kernels 10% slower, and the command;
the sensitivity's first run reproduces the plan's iteration time.  A DIR that
holds files is refused (one line, exit 2, nothing written) unless --force.

With nccl-tests logs of 1 and 2 nodes (8 GPUs each) on the DGX H100
SuperPOD, the band is not empty at 32 nodes and the report shows it.

  plan_report.py DSMPI DATA WORKDIR
"""
import json
import os
import re
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
                       universal_newlines=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


plan = ["plan", "--model", "llama3-70b", "--tokens", "1T", "--target", "system=perlmutter",
        "--gpus", "256,512,1024", "--estimate-missing"]
code, out, err = run(plan + ["--report", "out"])
if code != 0:
    failures.append("plan --report: exit %d: %s" % (code, err))
files = sorted(os.listdir("out")) if os.path.isdir("out") else []
if files != ["plan.svg", "report.html", "report.md", "sensitivity.svg"]:
    failures.append("report files: %s" % files)

html = open("out/report.html").read() if "report.html" in files else ""
md = open("out/report.md").read() if "report.md" in files else ""
external = re.findall(r"(?i)(https?:|//[a-z0-9]|<link|<script|<img|url\()", html)
if external:
    failures.append("report.html refers outside itself: %s" % sorted(set(external)))
if html.count("<svg") != 2 or "</html>" not in html:
    failures.append("report.html: %d inline charts" % html.count("<svg"))
for doc, text in (("md", md), ("html", html)):
    for needle in ["We request ", "node-hours", "GPU-hours", "llama3-70b", "1T tokens",
                   "NERSC Perlmutter", "low / expected / high", "network 20% slower",
                   "kernels 10% slower", "--target system=perlmutter", "unique costs:",
                   "Profile:"]:
        if needle not in text:
            failures.append("report.%s lacks %r" % (doc, needle))

# The sensitivity's first run is the plan's own iteration time; each slowdown adds time.
code, out, err = run(plan + ["--json"])
sizes = json.loads(out)["sizes"] if code == 0 else []
rows = re.findall(r"^\| (\d+) \| ([0-9.e+]+) \| ([0-9.e+]+) \(\+([0-9.]+)%\) \| [0-9.]+ \| [0-9]+ "
                  r"\| ([0-9.e+]+) \(\+([0-9.]+)%\)", md, re.M)
if len(rows) != 3 or len(sizes) != 3:
    failures.append("sensitivity rows: %s" % rows)
for (gpus, base, net, net_pct, kern, kern_pct), size in zip(rows, sizes):
    if int(gpus) != size["gpus"] or abs(float(base) / size["iter_time_s"] - 1) > 1e-3:
        failures.append("%s GPUs: sensitivity base %s vs plan %s" % (gpus, base,
                                                                     size["iter_time_s"]))
    if not (float(net) >= float(base) and 0 < float(kern_pct) <= 10.0 + 1e-9):
        failures.append("%s GPUs: network %s, kernels +%s%%" % (gpus, net, kern_pct))

# An existing report is not overwritten without --force; with it, it is.
before = os.path.getmtime("out/report.md")
code, out, err = run(plan + ["--report", "out"])
if code != 2 or "exists and is not empty" not in err or len(err.strip().splitlines()) != 1:
    failures.append("non-empty DIR: exit %d %r" % (code, err))
if os.path.getmtime("out/report.md") != before:
    failures.append("refused report still wrote report.md")
code, out, err = run(plan + ["--report", "out", "--force", "--quiet"])
if code != 0:
    failures.append("--force: exit %d %s" % (code, err))
code, out, err = run(plan + ["--force"])
if code != 2 or "--force goes with --report" not in err:
    failures.append("--force alone: exit %d %r" % (code, err))

# A band from real logs: low < expected < high days at 256 GPUs (32 nodes).
logs = os.path.join(data, "nccl-tests", "a100-azure-ndv4")
code, out, err = run(["plan", "--model", "llama3-8b", "--tokens", "100B", "--target",
                      "system=dgx-h100-superpod", "--gpus", "64,256", "--estimate-missing",
                      "--nccl-tests", os.path.join(logs, "all_reduce_8.log"),
                      os.path.join(logs, "all_reduce_16.log"), "--report", "band", "--quiet"])
band = re.search(r"^\| 256 \| 32 \| [^|]* \| ([0-9.]+) / ([0-9.]+) / ([0-9.]+) \|",
                 open("band/report.md").read() if code == 0 else "", re.M)
if band is None or not float(band.group(1)) <= float(band.group(2)) < float(band.group(3)):
    failures.append("band report: exit %d, %s %s" % (code, band and band.groups(), err))

for f in failures:
    print("FAIL:", f)
print("plan_report: %d failures" % len(failures))
sys.exit(1 if failures else 0)
