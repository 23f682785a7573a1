#!/usr/bin/env python3
"""A search ranks the same strategies with the same numbers whether or not
the simulator reuses work across candidates (DS_SIM_REUSE): the graph
itself where only durations differ (recompute, DP algorithm, ...), else
the evaluation order and node hashes of a graph structure seen before; and
whether it builds one iteration and evaluates it twice or builds two
(DS_SIM_ONE_ITERATION).  Every output but the timings must be equal.
  search_reuse.py DSMPI"""
import json
import os
import subprocess
import sys

dsmpi = sys.argv[1]
# Fused attention and fp8 are searched both ways with --estimate-missing;
# BERT's case does (their reuse is that of recompute: durations only), the
# larger cases keep them off so that the test stays short.
kernels_off = ["--fix", "flash=off", "--fix", "fp8=off"]
cases = [
    ["--model", "gpt3-175b", "--target-gpus", "256", "--no-bound", "--top", "40", *kernels_off],
    ["--model", "gpt3-175b", "--target-gpus", "256", "--all-variants", "--top", "25",
     *kernels_off],
    ["--model", "llama3-70b", "--target-gpus", "64", "--layer-level", "--no-bound", *kernels_off],
    ["--model", "bert-large", "--seq-len", "128", "--target-gpus", "8", "--no-bound",
     "--top", "100"],
    # pp = 1: ZeRO-2 rounds and ZeRO-3 parts on a kept graph
    ["--model", "gpt3-175b", "--target-gpus", "256", "--no-bound", "--fix", "pp=1", "--top",
     "30", *kernels_off],
    ["--model", "llama3-70b", "--target-gpus", "64", "--layer-level", "--no-bound", "--fix",
     "pp=1", "--all-variants", "--top", "40", *kernels_off],
    # mixture of experts (ep enumerated; the expert-gradient phase) and
    # context parallelism (the folded dp x cp, cp-comm variants)
    ["--model", "mixtral-8x7b", "--seq-len", "1024", "--target-gpus", "32", "--no-bound",
     "--top", "40", *kernels_off],
    ["--model", "llama3-8b", "--seq-len", "32768", "--global-batch", "16", "--target-gpus", "32",
     "--fix", "flash", "--fix", "fp8=off", "--fix", "cp-comm=p2p", "--fix", "cp-comm=a2a", "--no-bound",
     "--all-variants", "--top", "40"],
]
failures = 0
for args in cases:
    outs = []
    settings = [("1", "1"), ("0", "1"), ("1", "0")]
    for reuse, once in settings:
        env = dict(os.environ, DS_SIM_REUSE=reuse, DS_SIM_ONE_ITERATION=once)
        p = subprocess.run([dsmpi, "search", *args, "--estimate-missing", "--json"],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL {' '.join(args)} DS_SIM_REUSE={reuse} DS_SIM_ONE_ITERATION={once}: "
                  f"exit {p.returncode}: {p.stderr}")
            failures += 1
            break
        d = json.loads(p.stdout)
        d.pop("time", None)
        outs.append(d)
    if len(outs) == len(settings) and any(o != outs[0] for o in outs[1:]):
        print(f"FAIL {' '.join(args)}: the results differ with reuse and one iteration "
              "evaluated twice, without reuse, and with two iterations built")
        failures += 1
    elif len(outs) == len(settings):
        print(f"ok   {' '.join(args)}: {outs[0]['counts']['simulated']} simulated, same results")
sys.exit(1 if failures else 0)
