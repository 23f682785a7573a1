#!/usr/bin/env python3
"""Absurd inputs get a clear error quickly, without huge allocations.

Each case runs one dsmpi command and asserts its exit code, a message on
stderr (a regular expression on the line "dsmpi <command>: ..."), and that
the command ended within its time bound using at most its memory bound
(maximum resident set size of the process; Linux carries the resident size
of this script at the fork, about 35 MB, into the child's maximum).  Cases under MPI (dsmpi profile)
run on one rank; their memory is not measured (it would be mpiexec's).

  limits.py DSMPI WORKDIR MPIEXEC NUMPROC_FLAG
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

dsmpi, work, mpiexec, npflag = sys.argv[1:5]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)

QUICK_S, SMALL_MB = 10.0, 256

# ---- input files ------------------------------------------------------------------------------


def write_json(name, value):
    with open(name, "w") as f:
        json.dump(value, f)


def hf(**fields):
    config = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
              "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
              "max_position_embeddings": 4096}
    config.update(fields)
    return config


def layers(ops, repeat=1):
    return {"format": "dsmpi-layers", "name": "limits",
            "layers": [{"name": "block", "repeat": repeat, "ops": ops}]}


write_json("zero-layers.json", {"format": "dsmpi-layers", "name": "zero", "layers": []})
write_json("hf-zero-layers.json", hf(num_hidden_layers=0))
write_json("hf-negative-hidden.json", hf(hidden_size=-4096))
write_json("hf-huge.json", hf(num_hidden_layers=100000, hidden_size=1 << 20,
                              intermediate_size=1 << 22))
write_json("negative-features.json", layers([{"op": "linear", "in_features": -5,
                                              "out_features": 4}]))
write_json("wide.json", layers([{"op": "linear", "in_features": 1 << 31,
                                 "out_features": 1 << 31, "rows": 1 << 31}], repeat=100000))
write_json("repeat.json", layers([{"op": "relu", "elements": 4}], repeat=10 ** 9))
write_json("cluster-nodes.json", {"name": "big", "nodes": 10 ** 12, "gpus_per_node": 8,
                                  "device": "h100-sxm"})
with open("deep.json", "w") as f:
    f.write("[" * 1000000 + "]" * 1000000)
with open("ten-mb-string.json", "w") as f:
    f.write('{"format": "dsmpi-layers", "name": "' + "x" * (10 << 20) + '"}')
write_json("five-mb-name.json", {"format": "dsmpi-layers", "name": "x" * (5 << 20),
                                  "layers": [{"name": "a", "ops": [{"op": "relu",
                                                                    "elements": 4}]}]})
with open("all_reduce_ranks.log", "w") as f:
    f.write("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
            "# Using devices\n"
            "#  Rank 999999999 Pid 1 on node-1 device 0 [0x00] A100-SXM4-40GB\n"
            "#       size         count      type   redop     time   algbw   busbw  error"
            "     time   algbw   busbw  error\n"
            "           8             2     float     sum     8.65    0.00    0.00  0e+00"
            "     8.51    0.00    0.00  0e+00\n")

# ---- cases: (name, command, expected exit, message pattern[, seconds, MB]) ----------------------

gpt3 = ["--model", "gpt3-175b"]
small = ["--model", "gpt2-medium", "--target-gpus", "64", "--estimate-missing"]
predict_1024 = ["predict", "--model", "gpt2-medium", "--target-gpus", "1024", "--strategy",
                "tp=4,pp=4,mbs=1,gbs=1024", "--estimate-missing"]
cases = [
    # targets
    ("1e12 GPUs", ["events", *gpt3, "--target-gpus", "1000000000000"], 2,
     r"target-gpus 1000000000000 is out of range"),
    ("1T GPUs", ["events", *gpt3, "--target-gpus", "1T"], 2, r"out of range"),
    ("1e12 nodes", ["events", *gpt3, "--target-nodes", "1000000000000"], 2, r"out of range"),
    ("1e12 nodes in --target", ["events", *gpt3, "--target", "nodes=1000000000000,gpus-per-node=8"],
     2, r"nodes 1000000000000 is out of range"),
    ("1e12 nodes in a cluster file", ["events", *gpt3, "--cluster", "cluster-nodes.json"], 2,
     r'"nodes" = 1000000000000 is out of range'),
    ("negative GPUs", ["events", *gpt3, "--target-gpus", "-8"], 2, r"target-gpus -8 is out of range"),
    ("comm on 1e12 GPUs", ["comm", "--gpus", "1000000000000"], 2, r"out of range"),
    # models
    ("0 layers (layer list)", ["events", "--model", "zero-layers.json", "--target-gpus", "8"], 2,
     r'"layers" must be an array of 1 to'),
    ("0 layers (Hugging Face)", ["events", "--model", "hf-zero-layers.json", "--target-gpus", "8"],
     2, r'"num_hidden_layers" = 0 is out of range'),
    ("negative hidden size", ["events", "--model", "hf-negative-hidden.json", "--target-gpus", "8"],
     2, r'"hidden_size" = -4096 is out of range'),
    ("negative features", ["events", "--model", "negative-features.json", "--target-gpus", "8"], 2,
     r'"in_features" = -5 is out of range'),
    ("1e18 parameters", ["events", "--model", "hf-huge.json", "--target-gpus", "8"], 2,
     r"parameters \(accepted: at most 1e\+15\)"),
    ("2^62-element weights", ["events", "--model", "wide.json", "--target-gpus", "8"], 2,
     r"weights of 2147483648 x 2147483648 elements"),
    ("1e9 repeats", ["events", "--model", "repeat.json", "--target-gpus", "8"], 2,
     r'"repeat" = 1000000000 is out of range'),
    ("deep-nested JSON", ["events", "--model", "deep.json", "--target-gpus", "8"], 2,
     r"maximum parsing depth"),
    ("10 MB string", ["events", "--model", "ten-mb-string.json", "--target-gpus", "8"], 2,
     r"bytes \(accepted: at most 8388608\)"),
    ("5 MB model name", ["events", "--model", "five-mb-name.json", "--target-gpus", "8"], 0, r""),
    # sequence, batch, strategy
    ("seq-len 2^40", ["events", *gpt3, "--target-gpus", "1024", "--seq-len", "1099511627776"], 2,
     r"seq-len 1099511627776 is out of range"),
    ("negative seq-len", ["events", *gpt3, "--target-gpus", "1024", "--seq-len", "-5"], 2,
     r"seq-len -5 is out of range"),
    ("negative global batch", ["events", *gpt3, "--target-gpus", "1024", "--global-batch", "-1"],
     2, r"global-batch -1 is out of range"),
    ("2^48 tokens per micro-batch",
     ["events", "--model", "llama3-8b", "--target-gpus", "8", "--seq-len", "16777216",
      "--strategy", "tp=8,mbs=16777216,gbs=16777216"], 2, r"tokens per micro-batch"),
    ("1M micro-batches",
     ["predict", *gpt3, "--target-gpus", "64", "--estimate-missing", "--strategy",
      "tp=8,pp=8,mbs=1,gbs=1048576"], 2, r"DS_MAX_MICROBATCHES"),
    ("tp=1e9", ["events", *gpt3, "--target-gpus", "1024", "--strategy", "tp=1000000000"], 2,
     r"tp 1000000000 is out of range"),
    ("100 KB strategy", ["events", *gpt3, "--target-gpus", "1024", "--strategy",
                         "tp=1," * 20000 + "pp=1"], 2, r"strategy text of 100004 characters"),
    ("2^63 bucket", ["events", *gpt3, "--target-gpus", "1024", "--strategy",
                     "tp=2,bucket=9223372036854775807"], 2, r"bucket .* is out of range"),
    # outputs and search
    ("--top 1e9 (events)", ["events", *gpt3, "--target-gpus", "1024", "--top", "1000000000"], 2,
     r"top 1000000000 is out of range"),
    ("--top 1e9 (search)", ["search", *small, "--top", "1000000000"], 2,
     r"top 1000000000 is out of range"),
    ("--fix tp=1e9", ["search", *small, "--fix", "tp=1000000000"], 2, r"out of range"),
    ("--fix mbs=2^40", ["search", *small, "--fix", "mbs=1099511627776"], 2, r"out of range"),
    ("--fix zero=99", ["search", *small, "--fix", "zero=99"], 2, r"zero 99 is out of range"),
    ("--fix vpp=-1", ["search", *small, "--fix", "vpp=-1"], 2, r"vpp -1 is out of range"),
    ("200 --fix", ["search", *small] + ["--fix", "mbs=1"] * 200, 2, r"more than 128 --fix"),
    ("--max-tp 2^40", ["search", *small, "--max-tp", "1099511627776"], 2, r"out of range"),
    ("1e6 ranks in a trace",
     ["predict", "--model", "gpt2-medium", "--target-gpus", "1048576", "--strategy",
      "tp=4,pp=4,mbs=1,gbs=65536", "--estimate-missing", "--trace", "t.json", "--trace-ranks",
      "0-1048575"], 2,
     r"names 1048576 ranks \(accepted: at most 4096 in a trace\)", 30, 512),
    ("10^4 repeated rank ranges",
     [*predict_1024, "--trace", "t.json", "--trace-ranks", ",".join(["0-1023"] * 10000)], 2,
     r"names more than the 1024 ranks there are"),
    ("rank 1e9", [*predict_1024, "--trace", "t.json", "--trace-ranks", "1000000000"], 2,
     r"rank list '1000000000' \(accepted: ranks or ranges below 1024"),
    ("slow device 1e9", [*predict_1024, "--slow-device", "999999999=2"], 2,
     r"slow device rank 999999999"),
    ("slow factor 1e300", [*predict_1024, "--slow-device", "1=1e300"], 2,
     r"slow device factor 1e\+300"),
    ("every device of 1M GPUs",
     ["predict", *gpt3, "--target-gpus", "1048576", "--estimate-missing", "--full", "--strategy",
      "tp=8,pp=8,mbs=1,gbs=1048576"], 2, r"exceeds 8388608 nodes \(DS_SIM_MAX_NODES", 60, 3072),
    # sizes
    ("8 EiB messages", ["comm", "--gpus", "16", "--max-bytes", "8EiB"], 2, r"is not a size"),
    ("negative message size", ["comm", "--gpus", "16", "--min-bytes", "-1"], 2, r"is not a size"),
    ("rank 999999999 in a log", ["comm", "--nccl-tests", "all_reduce_ranks.log", "--gpus", "16"],
     2, r"all_reduce_ranks.log:3:"),
    ("64+ plan sizes", ["plan", "--model", "gpt2-medium", "--tokens", "1T", "--estimate-missing",
                        "--gpus", ",".join(str(i) for i in range(1, 20001))], 2,
     r"--gpus '1,2,3.*' has more than 64 items \(accepted: at most 64\)"),
]
profile = ["profile", "--model", "gpt2-medium", "--target-gpus", "64", "--strategy", "tp=2",
           "--profile-db", "p.h5", "--dry-run"]
mpi_cases = [
    ("sweep to 2 TiB", [*profile, "--sweep-max", "2TiB"], 2, r"accepted: 1 <= min <= max <= 1TiB"),
    ("negative sweep", [*profile, "--sweep-min", "-1"], 2, r"is not a size"),
    ("sweep 1 B to 1 TiB (accepted)", [*profile, "--sweep-min", "1", "--sweep-max", "1TiB"], 0,
     r""),
]

# ---- run ------------------------------------------------------------------------------------------

failures = 0


def run(name, argv, expected, pattern, seconds=QUICK_S, megabytes=SMALL_MB, mpi=False):
    global failures
    start = time.monotonic()
    with open("out", "wb") as out, open("err", "wb") as err:
        child = subprocess.Popen(argv if not mpi else [mpiexec, npflag, "1", *argv],
                                 stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except KeyboardInterrupt:
            child.kill()
            raise
    elapsed = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(status)
    with open("err", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f if line.startswith("dsmpi ")]
    message = lines[0] if lines else ""
    rss_mb = usage.ru_maxrss / 1024.0
    problems = []
    if rc != expected:
        problems.append(f"exit {rc} (expected {expected})")
    if expected != 0 and not re.search(pattern, message):
        problems.append(f"message {message[:300]!r} does not match {pattern!r}")
    if expected != 0 and len(lines) != 1:
        problems.append(f"{len(lines)} lines 'dsmpi ...' on stderr (expected 1)")
    if elapsed > seconds:
        problems.append(f"took {elapsed:.2f} s (bound {seconds} s)")
    if not mpi and rss_mb > megabytes:
        problems.append(f"used {rss_mb:.0f} MB (bound {megabytes} MB)")
    shown = f"{elapsed:6.2f} s {rss_mb if not mpi else 0:7.0f} MB  {name}: {message[:160]}"
    if problems:
        failures += 1
        print(f"FAIL {shown}\n     " + "; ".join(problems))
    else:
        print(f"ok   {shown}")
    sys.stdout.flush()


for case in cases:
    name, argv, expected, pattern, *bounds = case
    run(name, [dsmpi, *argv], expected, pattern, *bounds)
for case in mpi_cases:
    name, argv, expected, pattern, *bounds = case
    run(name, [dsmpi, *argv], expected, pattern, *bounds, mpi=True)

total = len(cases) + len(mpi_cases)
print(f"limits: {total - failures} of {total} cases refused (or accepted) as expected, in bounds")
if failures == 0:
    os.chdir("/")
    shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failures else 0)
