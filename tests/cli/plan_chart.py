#!/usr/bin/env python3
"""The chart of dsmpi plan --svg as a proposal uses it: days to train and
GPU-hours (and cost when a price is given) against GPUs, each point the
number the CSV prints, the legend clear of every plotted line and point, and
ASSUMED with its share when costs are assumed.

    plan_chart.py DSMPI WORKDIR
"""
import csv
import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

DSMPI, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
os.chdir(WORK)
NS = "{http://www.w3.org/2000/svg}"
SMALL = ["--model", "bert-large", "--seq-len", "128", "--samples", "1M", "--fix", "mbs=1"]
failures = []


def check(what, condition, detail=""):
    print(("ok: " if condition else "FAILED: ") + what + ("" if condition else " " + str(detail)))
    if not condition:
        failures.append(what)


def run(*args):
    p = subprocess.run([DSMPI, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("dsmpi %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout


def plan(svg, *extra):
    """Runs plan with --csv and --svg; the CSV rows by GPU count and the SVG root."""
    out = run("plan", *SMALL, *extra, "--csv", "--svg", svg)
    rows = {int(r["gpus"]): r for r in csv.DictReader(io.StringIO(out))}
    return rows, ET.parse(svg).getroot()


def series(root):
    """{name: [(x, y), ...]} of the plotted polylines."""
    lines = {}
    for p in root.iter(NS + "polyline"):
        pts = [tuple(float(v) for v in xy.split(",")) for xy in p.get("points").split()]
        lines[p.get("data-series")] = pts
    return lines


def text_box(t):
    """A generous box around a text element (12 px sans-serif: < 7.5 px a character)."""
    x, y = float(t.get("x")), float(t.get("y"))
    width = 7.5 * len("".join(t.itertext()))
    anchor = t.get("text-anchor", "start")
    x0 = x - width / 2 if anchor == "middle" else x - width if anchor == "end" else x
    return (x0, y - 13, x0 + width, y + 4)


def legend_box(root):
    legend = [g for g in root.iter(NS + "g") if g.get("class") == "legend"]
    if len(legend) != 1:
        return (0, 0, 0, 0), []
    boxes = []
    for e in legend[0]:
        tag = e.tag[len(NS):]
        if tag == "rect":
            x, y = float(e.get("x")), float(e.get("y"))
            boxes.append((x, y, x + float(e.get("width")), y + float(e.get("height"))))
        elif tag == "line":
            xs = (float(e.get("x1")), float(e.get("x2")))
            ys = (float(e.get("y1")), float(e.get("y2")))
            boxes.append((min(xs), min(ys) - 1, max(xs), max(ys) + 1))
        elif tag == "circle":
            cx, cy, r = float(e.get("cx")), float(e.get("cy")), float(e.get("r"))
            boxes.append((cx - r, cy - r, cx + r, cy + r))
        elif tag == "text":
            boxes.append(text_box(e))
    names = ["".join(t.itertext()) for t in legend[0].iter(NS + "text")]
    box = (min(b[0] for b in boxes), min(b[1] for b in boxes),
           max(b[2] for b in boxes), max(b[3] for b in boxes))
    return box, names


def inside(box, x, y, margin=4.0):
    return box[0] - margin <= x <= box[2] + margin and box[1] - margin <= y <= box[3] + margin


def points_values(root, unit):
    """{gpus: value} from the tooltips of the points of one series."""
    values = {}
    for c in root.iter(NS + "circle"):
        title = c.find(NS + "title")
        if title is None:
            continue
        m = re.match(r"(\d+) GPUs: ([0-9.eE+-]+)([kMG]?) " + unit + r"( \(band [^)]*\))?$",
                     title.text)
        if m:
            scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(3)]
            values[int(m.group(1))] = float(m.group(2)) * scale
    return values


def texts(root):
    return ["".join(t.itertext()) for t in root.iter(NS + "text")]


def near(a, b, rel=0.006):
    return abs(a - b) <= rel * max(abs(a), abs(b))


# 1. Priced, every cost from the device model (with its band).
rows, root = plan("priced.svg", "--gpus", "8,16,32", "--estimate-missing",
                  "--price-per-gpu-hour", "2.5")
lines = series(root)
check("three series: days, GPU-hours, cost", set(lines) == {"days to train", "GPU-hours",
      "cost at 2.5 per GPU-hour"}, sorted(lines))
check("a point per size in each series", all(len(p) == 3 for p in lines.values()), lines)
days = points_values(root, "days")
hours = points_values(root, "GPU-hours")
check("days are the CSV's", set(days) == set(rows) and
      all(near(days[g], float(rows[g]["days"])) for g in rows), (days, rows))
check("GPU-hours are the CSV's", set(hours) == set(rows) and
      all(near(hours[g], float(rows[g]["gpu_hours"])) for g in rows), hours)
# More GPUs: further right; fewer days: lower on the page is more (SVG y grows down).
pts = lines.get("days to train", [])
check("days fall left to right", all(a[0] < b[0] and a[1] < b[1] for a, b in zip(pts, pts[1:])),
      pts)
box, names = legend_box(root)
# Every cost from the device model: the device-model band is drawn around each series.
check("legend names the series and the band", names == ["days to train", "GPU-hours",
      "cost at 2.5 per GPU-hour", "band"], names)
bands = [p.get("data-band") for p in root.iter(NS + "polygon") if p.get("class") == "band"]
check("a band around each series", sorted(bands) == sorted(lines), (bands, sorted(lines)))
hits = [(n, p) for n, pl in lines.items() for p in pl if inside(box, *p)]
check("legend box clear of the polylines' points", not hits, (box, hits))
spans = {n: (min(x for x, _ in pl), min(y for _, y in pl), max(x for x, _ in pl),
             max(y for _, y in pl)) for n, pl in lines.items()}
overlap = [n for n, s in spans.items()
           if not (s[3] < box[1] or s[1] > box[3] or s[2] < box[0] or s[0] > box[2])]
check("legend box clear of the polylines' extents", not overlap, (box, spans))
markers = [(float(c.get("cx")), float(c.get("cy"))) for c in root.iter(NS + "circle")
           if c.find(NS + "title") is not None]
check("legend box clear of the points' markers", not [m for m in markers if inside(box, *m)])
notes = [t for t in texts(root) if t.startswith("ASSUMED")]
check("ASSUMED with the share", len(notes) == 1 and notes[0].startswith("ASSUMED: 100% "), notes)
check("the assumed share per size", "assumed" in texts(root))

# 2. No price: no cost series.
rows, root = plan("unpriced.svg", "--gpus", "8,16", "--estimate-missing")
lines = series(root)
check("no price: days and GPU-hours only", set(lines) == {"days to train", "GPU-hours"},
      sorted(lines))
box, names = legend_box(root)
check("no price: the legend has no cost", names == ["days to train", "GPU-hours", "band"],
      names)

# 3. Some costs measured (a table of one strategy's), the rest estimated: a share under 100%.
out = run("predict", "--model", "bert-large", "--seq-len", "128", "--strategy", "dp=8,mbs=1,gbs=512",
          "--target-gpus", "8", "--estimate-missing", "--json")
with open("costs.txt", "w") as f:
    for k in json.loads(out)["assumed_keys"]:
        f.write("%s = %.17g\n" % (k["event"], k["seconds"]))
rows, root = plan("part.svg", "--gpus", "8,16", "--cost-table", "costs.txt", "--estimate-missing")
notes = [t for t in texts(root) if t.startswith("ASSUMED")]
m = re.match(r"ASSUMED: ([\d.]+)%( to ([\d.]+)%)? of the predicted time", notes[0] if notes else "")
check("partly assumed: the share", m is not None and float(m.group(3) or m.group(1)) < 100, notes)

print("plan_chart: %d failures" % len(failures))
sys.exit(1 if failures else 0)
