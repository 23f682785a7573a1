#!/usr/bin/env python3
"""One option, one name, one behaviour across the commands.

Every command `dsmpi --help` lists has its option table probed for each option
of one shared list: `--opt=probe --probe-sentinel` stops at parsing whatever the
option is (a flag refuses the value, an unknown option is not known, an option
with a value takes it and the sentinel is then not known), so nothing runs.
Each shared option a command accepts must take a value (or not) as the list
says, and appear in the command's --help; one that is not accepted must not
appear there.  Retired spellings appear in no --help and are refused with their
new name.  Then the behaviours that were different: --nccl-tests takes several
files (and repeats) in every command that has it, every command with a target
or nccl-tests logs has --gpus-per-node, the --demo help names the target the
demo predicts, `profile --demo` uses run --demo's database, `version --json`
works.

  options.py DSMPI DATA WORKDIR
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
env = dict(os.environ, DS_MEASURE_BUDGET_S="0.02", DS_MEASURE_MIN_REPS="2",
           DS_MEASURE_WARMUP="1", DS_PROGRESS_PERIOD_S="0", OPENBLAS_NUM_THREADS="1")

failures = []


def fail(message):
    failures.append(message)


def parse_json(text, what):
    try:
        return json.loads(text)
    except ValueError as e:
        fail("%s: stdout is not JSON (%s): %r" % (what, e, text[:200]))
        return None


def run(words, extra_env=None, timeout=120):
    p = subprocess.run([dsmpi] + words, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout,
                       env=dict(env, **(extra_env or {})))
    return p.returncode, p.stdout, p.stderr


# Shared options: whether each takes a value.  A command that has one of them has it
# under this name and with this behaviour.
VALUE, FLAG = "value", "flag"
SHARED = {
    "--model": VALUE, "--seq-len": VALUE, "--global-batch": VALUE, "--dtype": VALUE,
    "--strategy": VALUE, "--target-gpus": VALUE, "--target-nodes": VALUE, "--target": VALUE,
    "--gpus-per-node": VALUE, "--cluster": VALUE, "--systems": VALUE, "--device": VALUE,
    "--json": FLAG, "--csv": FLAG, "--quiet": FLAG, "--out": VALUE, "--demo": FLAG,
    "--help": FLAG,
    "--nccl-tests": VALUE, "--cluster-tag": VALUE, "--profile-db": VALUE, "--site-db": VALUE,
    "--cost-table": VALUE, "--estimate-missing": FLAG, "--fingerprint": VALUE,
    "--peak-tflops": VALUE, "--mem-bw-gbs": VALUE,
    "--fix": VALUE, "--max-tp": VALUE, "--max-mbs": VALUE, "--top": VALUE,
    "--backend": VALUE, "--iterations": VALUE, "--warmup": VALUE, "--microbatches": VALUE,
    "--trace": VALUE, "--timeline": VALUE, "--svg": VALUE,
}
# Spellings no --help may show: refused with the new name, or (same meaning) still
# accepted as the new one.
REFUSED = {"--nccl-gpus-per-node": "--gpus-per-node", "--microbatches": "--microbatch-times"}
ALIASES = {"--target-gpus-per-node": "--gpus-per-node"}

# ---- the commands and their tables ---------------------------------------------------------

code, out, err = run(["--help"])
commands = re.findall(r"^  ([a-z]+) ", out.split("commands:", 1)[1], re.M)
if len(commands) < 12:
    fail("dsmpi --help lists %d commands: %r" % (len(commands), commands))
helps = {}
for command in commands:
    code, out, err = run([command, "--help"])
    if code != 0 or not out.startswith("usage: "):
        fail("%s --help: exit %d, %r" % (command, code, (out + err)[:200]))
    helps[command] = out


def documented(command):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", helps[command]))


SENTINEL = "--probe-sentinel"


def probe(command, option):
    """FLAG or VALUE when the command's table has the option, else None."""
    code, out, err = run([command, option + "=probe-value", SENTINEL])
    if code != 2:
        fail("%s %s=probe-value %s: exit %d, not a usage error: %r"
             % (command, option, SENTINEL, code, err[:200]))
        return None
    if "option '%s' takes no value" % option in err:
        return FLAG
    if "option '%s' is not known" % option in err:
        return None
    return VALUE  # it took the value: the sentinel, or the value itself, was refused after


tables = {command: {} for command in commands}
for command in commands:
    for option in sorted(set(SHARED) | set(REFUSED) | set(ALIASES)):
        tables[command][option] = probe(command, option)

undocumented = {command: [] for command in commands}
for command in commands:
    docs = documented(command)
    for option, kind in SHARED.items():
        has = tables[command][option]
        if has is not None and option not in docs and option != "--help" and \
                any(d.startswith(option + "-") for d in docs):
            has = None  # getopt_long took it as an abbreviation of a longer option
        tables[command][option] = has
        refused_here = option in REFUSED and has is not None and option not in docs
        if has is not None and has != kind and not refused_here:
            fail("%s %s %s (every command: %s)" % (command, option,
                                                   "takes a value" if has == VALUE
                                                   else "is a flag",
                                                   "a value" if kind == VALUE else "a flag"))
        if option == "--help":
            if has != FLAG:
                fail("%s has no --help" % command)
        elif has is not None and option not in docs and not refused_here:
            undocumented[command].append(option)
        elif has is None and option in docs:
            fail("%s --help shows %s, which it does not accept" % (command, option))
    for old, new in list(REFUSED.items()) + list(ALIASES.items()):
        if old in docs and not (old in SHARED and tables[command][old] == SHARED[old]):
            fail("%s --help shows the retired %s (now %s)" % (command, old, new))

# A retired spelling that a command's table still has is refused, naming the new one.
for command in commands:
    for old, new in REFUSED.items():
        if tables[command][old] is None or (old in SHARED and old in documented(command)):
            continue
        code, out, err = run([command, old, "4"])
        if code != 2 or new not in err or len(err.strip().splitlines()) != 1:
            fail("%s %s 4: exit %d, want 2 and one line naming %s: %r"
                 % (command, old, code, new, err[:300]))

# Aliases mean the same as the new name.
search = ["search", "--model", "gpt2-medium", "--target-gpus", "16", "--estimate-missing",
          "--top", "1", "--json"]
_, by_alias, _ = run(search + ["--target-gpus-per-node", "4"])
_, by_name, _ = run(search + ["--gpus-per-node", "4"])
by_alias = (parse_json(by_alias, "search --target-gpus-per-node 4") or {}).get("target")
by_name = (parse_json(by_name, "search --gpus-per-node 4") or {}).get("target")
if by_name != "4x4-h100-sxm" or by_alias != by_name:
    fail("--target-gpus-per-node 4 and --gpus-per-node 4 differ: %r vs %r"
         % (by_alias[:200], by_name[:200]))

# Every command with a target or nccl-tests logs has the layout option.
for command in commands:
    t = tables[command]
    if (t["--target-gpus"] or t["--nccl-tests"] or t["--cluster"]) and not t["--gpus-per-node"]:
        fail("%s has a target or logs but no --gpus-per-node" % command)

# ---- --nccl-tests takes several files in every command that has it ----------------------------

tiny = os.path.join(data, "validate", "tiny-gpt2.json")
ndv4 = os.path.join(data, "nccl-tests", "a100-azure-ndv4")
log2, log16 = (os.path.join(ndv4, "all_reduce_%d.log" % n) for n in (2, 16))
model = ["--model", tiny, "--seq-len", "64"]
# A command line that succeeds with the logs after --nccl-tests appended.
with_logs = {
    "predict": ["predict"] + model + ["--strategy", "tp=2", "--target-gpus", "4",
                                      "--estimate-missing", "--json"],
    "search": ["search"] + model + ["--target-gpus", "4", "--estimate-missing", "--top", "1",
                                    "--json"],
    "plan": ["plan"] + model + ["--gpus", "4", "--tokens", "1B", "--estimate-missing", "--json"],
    "comm": ["comm", "--gpus", "16", "--min-bytes", "1MiB", "--max-bytes", "1MiB", "--json"],
    "import": ["import", "--profile-db", "import.h5", "--json"],
    "run": ["run"] + model + ["--strategy", "tp=2", "--target-gpus", "4", "--profile-db",
                              "run.h5", "--sweep-max", "16KiB", "--estimate-missing", "--json"],
}
missing = "no-such-dir/all_reduce_8.log"
for command in commands:
    if not tables[command]["--nccl-tests"]:
        continue
    if command not in with_logs:
        fail("%s has --nccl-tests: add a command line for it to this test" % command)
        continue
    base = with_logs[command]
    code, out, err = run(base + ["--nccl-tests", log2, log16])
    if code != 0:
        fail("%s --nccl-tests LOG LOG: exit %d: %r" % (command, code, err[-300:]))
    else:
        parse_json(out, "%s --nccl-tests LOG LOG" % command)
    for shape, words in (("LOG MISSING", base + ["--nccl-tests", log2, missing]),
                         ("LOG --nccl-tests MISSING", base + ["--nccl-tests", log2,
                                                              "--nccl-tests", missing]),
                         ("MISSING LOG, then the other options",
                          base[:1] + ["--nccl-tests", missing, log2] + base[1:])):
        code, out, err = run(words)
        if code != 2 or "cannot open '%s'" % missing not in err:
            fail("%s --nccl-tests %s: exit %d, want 2 and \"cannot open '%s'\": %r"
                 % (command, shape, code, missing, err[-300:]))

# Words that are no option's value are refused, not taken as logs.
for command in ("search", "comm"):
    code, out, err = run(with_logs[command] + ["--nccl-tests", log2, "--json", log16])
    if code != 2 or "unexpected argument '%s'" % log16 not in err:
        fail("%s: a stray word after other options: exit %d: %r" % (command, code, err[:300]))

# A shared option a command's table has but its --help does not show is refused when used, in
# one line (plan takes its sizes from --gpus, search enumerates strategies): never ignored.
SAMPLE = {"--strategy": ["tp=2"], "--target-gpus": ["8"], "--target-nodes": ["2"],
          "--target": ["nodes=2,gpus-per-node=4"], "--demo": [], "--out": ["out"],
          "--microbatches": ["4"], "--nccl-gpus-per-node": ["4"]}
for command in commands:
    for option in undocumented[command]:
        if command not in with_logs or option not in SAMPLE:
            fail("%s accepts %s but its --help does not say so" % (command, option))
            continue
        code, out, err = run(with_logs[command] + [option] + SAMPLE[option])
        if code != 2 or len(err.strip().splitlines()) != 1:
            fail("%s accepts %s, which its --help does not show, and does not refuse it: exit "
                 "%d, %r" % (command, option, code, err[-300:]))

# ---- --demo -----------------------------------------------------------------------------------

for device in ("h100-sxm", "a100-80g"):
    denv = {"DS_DEFAULT_DEVICE": device}
    _, text, _ = run(["predict", "--help"], denv)
    m = re.search(r"--demo +(\S+) with (\S+)\s+on (\d+) nodes x (\d+) devices \((\d+)\).*?"
                  r"DS_DEFAULT_DEVICE \(now (\S+)\)", text, re.S)
    if m is None:
        fail("predict --help: the --demo text names no model, strategy and target: %r"
             % text[text.find("--demo"):][:300])
        break
    name, strategy, nodes, per_node, gpus, named = m.groups()
    code, out, err = run(["predict", "--demo", "--estimate-missing", "--json"], denv)
    d = parse_json(out, "predict --demo --estimate-missing --json") or {}
    want = (name, strategy, int(nodes) * int(per_node), "%sx%s-%s" % (nodes, per_node, named),
            named)
    got = tuple(d.get(k) for k in ("model", "strategy", "target_gpus", "target", "device"))
    if got != want or int(gpus) != d.get("target_gpus") or named != device:
        fail("predict --demo with DS_DEFAULT_DEVICE=%s predicts %r; its help says %r"
             % (device, got, want))
    for command in commands:
        if "--demo" in documented(command) and tables[command]["--demo"]:
            _, other, _ = run([command, "--help"], denv)
            if m.group(0) not in other:
                fail("%s --help describes --demo otherwise than predict's" % command)

# profile --demo and run --demo use one database (dsmpi-demo.h5 here): both refuse a
# foreign file of that name, and plan the same work.
os.makedirs("demo")
os.chdir("demo")
plans = {}
for command in ("profile", "run"):
    code, out, err = run([command, "--demo", "--dry-run", "--json"])
    if code != 0:
        fail("%s --demo --dry-run: exit %d: %r" % (command, code, err[-300:]))
    else:
        plans[command] = parse_json(out, "%s --demo --dry-run --json" % command)
# The expected times rest on a calibration timed in each run: the work is the rest.
TIMED = ("estimated_", "compute_factor", "comm_factor", "sync_s", "cpu_share")
for plan in plans.values():
    for key in [k for k in plan if k.startswith(TIMED)]:
        del plan[key]
if len(plans) == 2 and plans["profile"] != plans["run"]:
    fail("profile --demo and run --demo plan different work: %r vs %r"
         % (plans["profile"], plans["run"]))
with open("dsmpi-demo.h5", "w") as f:
    f.write("not a database\n")
for command in ("profile", "run"):
    code, out, err = run([command, "--demo", "--dry-run"])
    if code != 2 or "dsmpi-demo.h5" not in err:
        fail("%s --demo next to a foreign dsmpi-demo.h5: exit %d: %r" % (command, code, err))
os.chdir("..")

# ---- version --json ---------------------------------------------------------------------------

code, out, err = run(["version", "--json"])
if code != 0:
    fail("version --json: exit %d: %r" % (code, err))
else:
    v = parse_json(out, "version --json") or {}
    if not re.match(r"^\d+\.\d+\.\d+$", v.get("dsmpi", "")) or "mpi" not in v:
        fail("version --json: %r" % v)

for f in failures:
    print("FAIL: " + f, file=sys.stderr)
print("%d commands, %d shared options probed; %d failures"
      % (len(commands), len(SHARED), len(failures)))
sys.exit(1 if failures else 0)
