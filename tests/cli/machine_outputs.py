#!/usr/bin/env python3
"""--json and --csv outputs are what a parser reads: nothing else on stdout.

Every command that has --json (and --csv) runs on one rank (started alone, as
most users start predict or plan) and on two ranks (mpiexec from CMake's
MPIEXEC_* variables); its stdout must be exactly one JSON
document, whose objects have no key twice (json.loads with an object_pairs_hook
that refuses repeats), or a CSV table whose rows all have the header's number
of columns.  Human text (profiling tables, progress) goes to stderr.  The cases
are small (a 4-layer GPT-2, 4 target devices, tiny budgets) so the whole test
takes well under a minute.

  machine_outputs.py DSMPI WORKDIR DATA MPIEXEC NUMPROC_FLAG [PREFLAGS...]
"""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time

import strict_json

dsmpi, work, data, mpiexec, npflag = sys.argv[1:6]
preflags = [a for a in sys.argv[6:] if a]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)

env = dict(os.environ, DS_MEASURE_BUDGET_S="0.02", DS_MEASURE_MIN_REPS="2",
           DS_MEASURE_WARMUP="1", DS_PROGRESS_PERIOD_S="0", OPENBLAS_NUM_THREADS="1")

tiny = os.path.join(data, "validate", "tiny-gpt2.json")
ndv4 = os.path.join(data, "nccl-tests", "a100-azure-ndv4")
logs = [os.path.join(ndv4, "all_reduce_%d.log" % n) for n in (2, 16)]
model = ["--model", tiny, "--seq-len", "64"]
target = ["--strategy", "tp=2", "--target-gpus", "4"]
sweep = ["--sweep-max", "16KiB"]

failures = []
CASE_TIMEOUT_S = 90


def check_json(text):
    strict_json.loads(text)


def check_csv(text):
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0]:
        raise ValueError("no header row")
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]):
            raise ValueError("row %d has %d columns, the header %d: %r"
                             % (number, len(row), len(rows[0]), row))
    if len(rows) < 2:
        raise ValueError("a header and no rows")


def launch(ranks):
    if ranks == 1:  # MPI's singleton start: no mpiexec (0.3 s less per case)
        return [dsmpi]
    return [mpiexec, npflag, str(ranks)] + preflags + [dsmpi]


def run_case(name, ranks, words, fmt, allowed=(0,)):
    argv = launch(ranks) + words + ["--" + fmt]
    started = time.monotonic()
    label = "%s --%s on %d rank%s" % (name, fmt, ranks, "" if ranks == 1 else "s")
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                           universal_newlines=True, timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        failures.append("%s: still running after %d s\n  %s" % (label, CASE_TIMEOUT_S,
                                                               " ".join(argv)))
        return
    took = time.monotonic() - started
    if p.returncode not in allowed:
        failures.append("%s: exit %d\n  %s\n  stderr: %s" % (label, p.returncode, " ".join(argv),
                                                             p.stderr.strip()[-600:]))
        return
    try:
        (check_json if fmt == "json" else check_csv)(p.stdout)
    except ValueError as e:
        failures.append("%s: stdout is not one %s document: %s\n  %s\n  stdout starts: %r"
                        % (label, fmt.upper(), e, " ".join(argv), p.stdout[:300]))
        return
    print("ok  %-40s %5.1f s" % (label, took))


# (name, words, formats (or {ranks: formats}), exit codes accepted); `{ranks}` in a word is the
# rank count.
cases = [
    ("version", ["version"], ("json", "csv"), (0,)),
    ("systems", ["systems"], ("json", "csv"), (0,)),
    ("systems NAME", ["systems", "jupiter-booster"], ("json", "csv"), (0,)),
    ("allocation", ["allocation"], ("json", "csv"), (0,)),
    ("events", ["events"] + model + target, ("json", "csv"), (0,)),
    ("predict", ["predict"] + model + target + ["--estimate-missing"], ("json", "csv"), (0,)),
    ("predict --nccl-tests", ["predict"] + model + target + ["--nccl-tests"] + logs +
     ["--estimate-missing"], ("json", "csv"), (0,)),
    ("search", ["search"] + model + ["--target-gpus", "4", "--estimate-missing", "--top", "3"],
     ("json", "csv"), (0,)),
    ("plan", ["plan"] + model + ["--gpus", "4,8", "--tokens", "1B", "--estimate-missing"],
     ("json", "csv"), (0,)),
    ("comm", ["comm", "--nccl-tests"] + logs + ["--gpus", "16,32", "--min-bytes", "1MiB",
                                                "--max-bytes", "4MiB"], ("json", "csv"), (0,)),
    ("import", ["import", "--nccl-tests"] + logs + ["--profile-db", "import-{ranks}.h5"],
     ("json", "csv"), (0,)),
    ("profile --dry-run", ["profile"] + model + target + sweep +
     ["--profile-db", "profile-{ranks}.h5", "--dry-run"], ("json", "csv"), (0,)),
    ("profile", ["profile"] + model + target + sweep + ["--profile-db", "profile-{ranks}.h5"],
     ("json", "csv"), (0,)),
    ("run --dry-run", ["run"] + model + target + sweep +
     ["--profile-db", "run-{ranks}.h5", "--dry-run"], ("json", "csv"), (0,)),
    # One rank measures no communication: its links are estimated.
    ("run", ["run"] + model + target + sweep + ["--profile-db", "run-{ranks}.h5",
                                                "--estimate-missing"], ("json", "csv"), (0,)),
    ("run --search", ["run", "--search"] + model + ["--target-gpus", "4", "--fix", "tp=2",
                                                    "--fix", "pp=1", "--top", "2"] + sweep +
     ["--profile-db", "run-search-{ranks}.h5", "--estimate-missing"], ("json", "csv"), (0,)),
    ("execute", ["execute"] + model + ["--strategy", "dp={ranks}", "--global-batch", "4",
                                       "--warmup", "1", "--iterations", "1"], ("json", "csv"),
     (0,)),
    # validate measures its costs first (the slowest case): its CSV on one rank only.
    ("validate", ["validate"] + model + ["--strategy", "dp={ranks}", "--microbatches", "2",
                                         "--warmup", "1", "--iterations", "1", "--repeats", "1",
                                         "--retries", "0", "--max-foreign", "1",
                                         "--profile-budget", "0.01", "--max-error", "100000",
                                         "--wait-quiet", "0"],
     {1: ("json", "csv"), 2: ("json",)}, (0, 1)),
]

started = time.monotonic()
for ranks in (1, 2):
    for name, words, formats, allowed in cases:
        for fmt in formats[ranks] if isinstance(formats, dict) else formats:
            run_case(name, ranks, [w.replace("{ranks}", str(ranks)) for w in words], fmt, allowed)
print("%.0f s in all" % (time.monotonic() - started))
for f in failures:
    print("FAIL: " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
