#!/usr/bin/env python3
"""plan --report's HTML in a real browser.

Headless Chromium (Debian's package; the test is skipped where it is absent)
renders report.html with every network request sent to a local listener that
only counts them: the report must make none (a control page with one remote
image must make one, so the count can fail).  The screenshot must show the
page: not blank, the plan chart's blue series and the sensitivity chart's
three bar colours painted.

  report_browser.py DSMPI WORKDIR
"""
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import zlib

dsmpi, work = sys.argv[1:3]
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if browser is None:
    print("report_browser: skipped, no chromium installed (apt-get install chromium)")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)
failures = []
WIDTH, HEIGHT = 1280, 2400


# What Chromium itself asks for whatever the page (time, updates, sign-in): not the page's.
BROWSER_OWN = ("clients2.google.com", "update.googleapis.com", "accounts.google.com",
               "optimizationguide-pa.googleapis.com", "safebrowsing.googleapis.com",
               "content-autofill.googleapis.com", "redirector.gvt1.com")


class Listener:
    """A proxy that answers nothing and records the hosts asked for."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.requests = []
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
                conn.settimeout(2)
                try:
                    words = conn.recv(512).split(b" ")
                except OSError:
                    words = []
                conn.close()
                target = words[1].decode("latin-1") if len(words) > 1 else "?"
                host = target.split("://")[-1].split("/")[0].split(":")[0]
                if host not in BROWSER_OWN:
                    self.requests.append(target)
            except socket.timeout:
                pass

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def shoot(page, png):
    listener = Listener()
    port = listener.sock.getsockname()[1]
    words = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-default-apps", "--disable-extensions",
             "--proxy-server=http://127.0.0.1:%d" % port, "--proxy-bypass-list=<-loopback>",
             "--user-data-dir=" + os.path.abspath("profile"), "--hide-scrollbars",
             "--window-size=%d,%d" % (WIDTH, HEIGHT), "--screenshot=" + os.path.abspath(png),
             "file://" + os.path.abspath(page)]
    p = subprocess.run(words, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    listener.close()
    if p.returncode != 0 or not os.path.exists(png):
        failures.append("chromium on %s: exit %d: %s" % (page, p.returncode, p.stdout[-500:]))
    return listener.requests


def pixels(png):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(png, "rb").read()
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError("PNG of depth %d colour type %d" % (depth, colour))
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, prev, rows = zlib.decompress(idat), width * channels, None, []
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        up = prev or bytearray(stride)
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = up[i], (up[i - channels] if i >= channels else 0)
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, [[tuple(r[x * channels:x * channels + 3]) for x in range(width)]
                           for r in rows]


plan = [dsmpi, "plan", "--model", "llama3-70b", "--tokens", "1T", "--target", "system=perlmutter",
        "--gpus", "256,512,1024", "--estimate-missing", "--report", "report", "--quiet"]
p = subprocess.run(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
if p.returncode != 0:
    print("FAIL: plan --report: %s" % p.stderr)
    sys.exit(1)
html = open("report/report.html").read()
if "http://" in html or "https://" in html:
    failures.append("report.html holds a http(s):// reference")

with open("control.html", "w") as f:
    f.write("<html><body><p>control</p><img src=\"http://example.invalid/x.png\"></body></html>")
if "http://example.invalid/x.png" not in shoot("control.html", "control.png"):
    failures.append("the control page's remote image reached no listener: the count cannot fail")
fetched = shoot("report/report.html", "plan-report.png")
if fetched:
    failures.append("report.html made network requests: %s" % fetched)

if os.path.exists("plan-report.png"):
    width, height, image = pixels("plan-report.png")
    counts = {}
    for line in image:
        for rgb in line:
            counts[rgb] = counts.get(rgb, 0) + 1
    white = counts.get((255, 255, 255), 0)
    if (width, height) != (WIDTH, HEIGHT) or white > 0.97 * width * height or len(counts) < 20:
        failures.append("screenshot %dx%d looks blank: %d colours, %.1f%% white" % (
            width, height, len(counts), 100.0 * white / (width * height)))
    for name, rgb, least in [("plan chart series", (0x1f, 0x5f, 0xbf), 200),
                             ("network bars", (0xb0, 0x3a, 0x2e), 200),
                             ("kernel bars", (0x2e, 0x8b, 0x57), 200)]:
        if counts.get(rgb, 0) < least:
            failures.append("%s not painted: %d pixels of #%02x%02x%02x" % (
                name, counts.get(rgb, 0), *rgb))

for f in failures:
    print("FAIL:", f)
print("report_browser: %d failures" % len(failures))
sys.exit(1 if failures else 0)
