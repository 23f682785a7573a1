#!/usr/bin/env python3
"""The virtual-cluster validation protocol (METHOD.md section 8) on SimGrid SMPI.

Decided before tuning, run as it is:
  1. profile communication on 4 simulated ranks (2 nodes x 2 devices) of the
     platform with the replay backend under smpirun; import the samples and
     the compute cost table into a profile database (normal build);
  2. predict every case with `dsmpi predict --profile-db` (normal build);
  3. run the executor on the whole platform under smpirun with the replay
     backend (`dsmpi execute`, SMPI build), the same compute cost table;
  4. compare iteration time, per-stage per-micro-batch start/end, exposed
     communication, the bubble, and for a set of strategies the ranking
     (Kendall's tau, top-1 regret).
The ground truth (step 3) is never used for calibration: the prediction
rests on the 4-rank profile and the cost table only.

Compute costs are synthetic: roofline estimates of the platform's device
(`dsmpi events --cost-table-out`), the same table for the replay backend and
the profile database, so the comparison isolates communication,
extrapolation and the simulator's semantics.

Usage:
  protocol.py --dsmpi BUILD/apps/dsmpi/dsmpi --dsmpi-smpi SMPI/apps/dsmpi/dsmpi
              --platforms tests/data/smpi --work DIR --sizes 64[,256,1024]
              [--set ci|bench|moe-cp] [--ranking 256] [--json FILE]
              [--max-error PCT] [--max-mb-error PCT] [--min-tau T] [--max-regret PCT]
              [--predict-only] [--jobs N]
Ranks sit on the hosts in block order (rank r on node r / G, device r % G,
as Slurm's and mpirun's default block distribution place them, and as
`dsmpi predict` assumes): smpirun without a hostfile takes the platform's
hosts in name order, which puts rank 8 on n100 of a 128-node platform.

Exit status: 0, 1 when a case failed to run or a --max-*/--min-* bound is
exceeded, 77 when smpirun is missing.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time

# SimGrid settings of every run: computation only where the replay backend
# asks for it, Open MPI's collective selection, MPI_Test/Iprobe/Wtime cost no
# simulated time (the executor polls), no noise in the logs.
SMPI_CFG = [
    "--cfg=smpi/simulate-computation:no",
    "--cfg=smpi/coll-selector:ompi",
    # ... but broadcasts by a binomial tree: the rules' small-message pick
    # on 64+ ranks (SMPI's "knomial intra-node" broadcast) spends minutes of
    # simulation setting up its first call on a communicator of 1024 ranks.
    # Broadcasts only appear inside small all-reduces on 128+ ranks, which
    # the model's tree reads as binomial anyway.
    "--cfg=smpi/bcast:binomial_tree",
    "--cfg=smpi/test:0",
    "--cfg=smpi/iprobe:0",
    "--cfg=smpi/wtime:0",
    "--cfg=smpi/host-speed:1Gf",
    # Rates are in bytes per second (1e7 to 1e11): the default precision of
    # the sharing solver (1e-5) is below their rounding error at 1024 ranks
    # ("Cannot saturate more a constraint that has no active element").
    "--cfg=maxmin/precision:1e-3",
    # The replay backend's shared buffers: one lazy mapping each (the
    # default maps and populates 1 MiB blocks: vm.max_map_count at scale).
    "--cfg=smpi/shared-malloc:local",
    "--log=root.thres:warning",
]

# Cases: (model, options, strategy).  The model's global batch is made small
# so that the executor's micro-batches stay few on the simulated cluster.
GPT = ("gpt2-medium", ("--global-batch", "GBS"))
LLAMA = ("llama2-7b", ("--seq-len", "2048", "--global-batch", "GBS"))
# Mixture of experts (Mixtral's 8 experts, top-2) and long sequences for
# context parallelism (fused attention, which cp needs).
MIXTRAL = ("mixtral-8x7b", ("--seq-len", "1024", "--global-batch", "GBS"))
LLAMA_LONG = ("llama2-7b", ("--seq-len", "8192", "--global-batch", "GBS"))

CASES = {
    "ci": {
        64: [
            (GPT, 64, "dp=2,tp=8,pp=4,mbs=1,schedule=1f1b"),
            (GPT, 64, "dp=4,tp=4,pp=4,mbs=1,schedule=interleaved,vpp=2"),
            (GPT, 64, "dp=16,tp=4,pp=1,mbs=1,no-overlap"),
        ],
    },
    "bench": {
        64: [
            (GPT, 64, "dp=8,tp=8,pp=1,mbs=1"),
            (GPT, 64, "dp=2,tp=8,pp=4,mbs=1,schedule=1f1b"),
            (GPT, 64, "dp=4,tp=4,pp=4,mbs=1,schedule=interleaved,vpp=2"),
            (GPT, 64, "dp=16,tp=4,pp=1,mbs=1,no-overlap"),
            (LLAMA, 32, "dp=2,tp=8,pp=4,mbs=1,schedule=1f1b"),
        ],
        256: [
            (GPT, 256, "dp=32,tp=8,pp=1,mbs=1"),
            (GPT, 256, "dp=32,tp=8,pp=1,mbs=1,no-overlap"),
            (GPT, 256, "dp=16,tp=4,pp=4,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=16,tp=4,pp=4,mbs=1,schedule=interleaved,vpp=2"),
            (GPT, 256, "dp=8,tp=8,pp=4,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=8,tp=8,pp=4,mbs=1,schedule=interleaved,vpp=2"),
            (GPT, 256, "dp=64,tp=4,pp=1,mbs=1"),
            (GPT, 256, "dp=32,tp=2,pp=4,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=16,tp=2,pp=8,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=4,tp=8,pp=8,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=64,tp=2,pp=2,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=16,tp=8,pp=2,mbs=1,schedule=1f1b,no-overlap"),
        ],
        # 1-8 micro-batches per replica, one measured iteration.
        1024: [
            (GPT, 128, "dp=128,tp=8,pp=1,mbs=1"),
            (GPT, 128, "dp=32,tp=8,pp=4,mbs=1,schedule=1f1b"),
            (GPT, 256, "dp=64,tp=4,pp=4,mbs=1,schedule=interleaved,vpp=2"),
            (LLAMA, 128, "dp=16,tp=8,pp=8,mbs=1,schedule=1f1b"),
        ],
    },
    # Expert parallelism across nodes (tp=2 with sp spreads each EP group of
    # 8 x etp 2 over two 8-device nodes) and context parallelism (the p2p
    # ring of 2; at 256 with experts: llama2-7b at seq 8192 on 256 simulated
    # ranks needs over 17 GB), on the g8 platforms.
    "moe-cp": {
        64: [
            (MIXTRAL, 16, "dp=8,tp=2,pp=4,sp,ep=8,mbs=1,schedule=1f1b"),
            (LLAMA_LONG, 8, "dp=4,tp=8,cp=2,pp=1,flash,mbs=1"),
        ],
        256: [
            (MIXTRAL, 64, "dp=32,tp=2,pp=4,sp,ep=8,mbs=1,schedule=1f1b"),
            (MIXTRAL, 64, "dp=16,tp=2,pp=4,sp,cp=2,flash,ep=8,mbs=1,schedule=1f1b"),
        ],
    },
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, out=None, check=True):
    start = time.time()
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out is not None:
        with open(out, "w") as f:
            f.write(result.stdout)
    if check and result.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd[:4]) + " ...", result.returncode,
                                                    result.stderr[-3000:]))
    return result, time.time() - start


def write_block_hostfile(cluster, path):
    """Hosts n<node>g<device> in block order (make_platform.py's names)."""
    with open(cluster) as f:
        c = json.load(f)
    with open(path, "w") as f:
        for node in range(c["nodes"]):
            for gpu in range(c["gpus_per_node"]):
                f.write("n%dg%d\n" % (node, gpu))


def model_args(model, gbs):
    name, options = model
    return ["--model", name] + [str(gbs) if o == "GBS" else o for o in options]


def valid_json(path):
    try:
        with open(path) as f:
            json.load(f)
        return True
    except (OSError, ValueError):
        return False


def kendall_tau(x, y):
    """Tau-b of two sequences."""
    n = len(x)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    return (concordant - discordant) / denominator if denominator > 0 else 1.0


def compare(pred, meas):
    """The protocol's figures of one case (seconds and fractions)."""
    p_iter = pred["summary"]["iter_time_s"]
    runs = meas["runs"]
    m_iter = sorted(r["summary"]["iter_time_s"] for r in runs)[len(runs) // 2]
    run0 = runs[len(runs) // 2]
    # Micro-batches of replica 0: start and end of every (stage, chunk, mb).
    key = lambda m: (m["stage"], m["chunk"], m["microbatch"])
    pm = {key(m): m for m in pred["microbatches"]}
    diffs, stage_fwd, stage_bwd = [], {}, {}
    for m in run0["microbatches"]:
        p = pm.get(key(m))
        if p is None:
            continue
        for f in ("fwd_start_s", "fwd_end_s", "bwd_start_s", "bwd_end_s"):
            diffs.append(abs(p[f] - m[f]))
        for table, which in ((stage_fwd, "fwd"), (stage_bwd, "bwd")):
            e = table.setdefault(m["stage"], [0.0, 0.0])
            e[0] += p[which + "_end_s"] - p[which + "_start_s"]
            e[1] += m[which + "_end_s"] - m[which + "_start_s"]
    mb_error = sum(diffs) / len(diffs) / m_iter if diffs else 0.0
    stage_error = max([abs(p / m - 1.0) for p, m in list(stage_fwd.values()) +
                       list(stage_bwd.values()) if m > 0] or [0.0])
    # Exposed communication per device (prediction in full mode: every rank).
    pdev = {d["rank"]: d for d in pred["devices"]}
    exposed_p = exposed_m = exposed_abs = 0.0
    devices = run0["devices"]
    for d in devices:
        p = pdev.get(d["rank"])
        if p is None:
            continue
        exposed_p += p["comm_exposed_s"] / len(devices)
        exposed_m += d["comm_exposed_s"] / len(devices)
        exposed_abs += abs(p["comm_exposed_s"] - d["comm_exposed_s"]) / len(devices)
    return {
        "iter_pred_s": p_iter,
        "iter_meas_s": m_iter,
        "iter_error": p_iter / m_iter - 1.0,
        "mb_error": mb_error,
        "stage_pass_error": stage_error,
        "exposed_pred_s": exposed_p,
        "exposed_meas_s": exposed_m,
        "exposed_error": exposed_p / exposed_m - 1.0 if exposed_m > 0 else 0.0,
        "exposed_abs_of_iter": exposed_abs / m_iter,
        "bubble_pred": pred["summary"]["bubble_fraction"],
        "bubble_meas": run0["summary"]["bubble_fraction"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsmpi", required=True)
    ap.add_argument("--dsmpi-smpi", required=True)
    ap.add_argument("--platforms", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--sizes", default="64")
    ap.add_argument("--set", default="ci", choices=sorted(CASES))
    ap.add_argument("--family", default="g8", help="platform family: g8 (8 per node) or g4")
    ap.add_argument("--ranking", type=int, default=0, help="size whose cases are ranked")
    ap.add_argument("--iterations", type=int, default=0,
                    help="measured iterations (default 2, 1 at 1024 devices)")
    ap.add_argument("--keep-runs", action="store_true",
                    help="reuse executor runs already in the work directory (resume)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="executor runs at once (each takes one core; simulated time does "
                         "not depend on how many run)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--max-error", type=float, default=None, help="percent, every case")
    ap.add_argument("--max-mb-error", type=float, default=None, help="percent of the iteration")
    ap.add_argument("--min-tau", type=float, default=None)
    ap.add_argument("--max-regret", type=float, default=None, help="percent")
    ap.add_argument("--predict-only", action="store_true",
                    help="reuse the work directory's profile and executor runs (the ground "
                         "truth does not depend on the model): predict and compare again")
    a = ap.parse_args()
    smpirun = shutil.which("smpirun")
    if smpirun is None:
        log("protocol.py: smpirun not found (Debian: libsimgrid-dev); skipped")
        return 77
    os.makedirs(a.work, exist_ok=True)
    sizes = [int(s) for s in a.sizes.split(",")]
    results, failures, cases = [], 0, []
    for size in sizes:
        size_cases = CASES[a.set].get(size, [])
        platform = os.path.join(a.platforms, "%s-%d.xml" % (a.family, size))
        cluster = os.path.join(a.platforms, "%s-%d.json" % (a.family, size))
        work = os.path.join(a.work, str(size))
        os.makedirs(work, exist_ok=True)
        with open(cluster) as f:
            device = json.load(f)["device"]
        models = {}
        for model, gbs, strategy in size_cases:
            models.setdefault(model, []).append((gbs, strategy))
        for model, entries in models.items():
            name = model[0]
            costs = os.path.join(work, "costs-%s.txt" % name)
            samples = os.path.join(work, "comm-%s.txt" % name)
            db = os.path.join(work, "profile-%s.h5" % name)
            if a.predict_only:
                if not os.path.exists(db):
                    log("%d: %s: no profile database in %s (run without --predict-only)"
                        % (size, name, work))
                    failures += 1
                    continue
            else:
                for path in (costs, db):
                    if os.path.exists(path):
                        os.remove(path)
                # Synthetic compute costs: every case's keys, one table.
                for gbs, strategy in entries:
                    run([a.dsmpi, "events"] + model_args(model, gbs) +
                        ["--strategy", strategy, "--cluster", cluster, "--cost-table-out", costs,
                         "--top", "0", "--quiet"])
            # Step 1: communication on 4 simulated ranks, 2 nodes x 2.
            hosts = os.path.join(work, "profile.hosts")
            with open(hosts, "w") as f:
                f.write("n0g0\nn0g1\nn1g0\nn1g1\n")
            gbs, strategy = entries[0]
            if not a.predict_only:
                _, took = run([smpirun, "-np", "4", "-platform", platform, "-hostfile", hosts] +
                              SMPI_CFG + [a.dsmpi_smpi, "profile"] + model_args(model, gbs) +
                              ["--strategy", strategy, "--cluster", cluster, "--backend",
                               "replay", "--comm-only", "--comm-samples-out", samples, "--quiet"])
                log("%d: %s: communication profiled on 4 simulated ranks in %.0f s"
                    % (size, name, took))
                run([a.dsmpi, "import", "--cost-table", costs, "--comm-samples", samples,
                     "--profile-db", db, "--fingerprint",
                     "replay: %s, synthetic roofline" % device, "--quiet"])
            block_hosts = os.path.join(work, "block.hosts")
            write_block_hostfile(cluster, block_hosts)
            for gbs, strategy in entries:
                tag = "%s-%s" % (name, strategy.replace(",", "_").replace("=", ""))
                case = {"size": size, "name": name, "strategy": strategy,
                        "pred": os.path.join(work, "predict-%s.json" % tag),
                        "exec": os.path.join(work, "execute-%s.json" % tag), "cmd": None}
                try:
                    # Step 2: prediction from the profile database only.
                    run([a.dsmpi, "predict"] + model_args(model, gbs) +
                        ["--strategy", strategy, "--cluster", cluster, "--profile-db", db,
                         "--full", "--json"], out=case["pred"])
                except RuntimeError as e:
                    log("%d: %s %s: FAILED: %s" % (size, name, strategy, e))
                    failures += 1
                    continue
                # Step 3: the executor on the simulated cluster (below).
                if a.predict_only and not os.path.exists(case["exec"]):
                    log("%d: %s %s: FAILED: no executor run %s to reuse"
                        % (size, name, strategy, case["exec"]))
                    failures += 1
                    continue
                if a.keep_runs and valid_json(case["exec"]):
                    log("%d: %s %s: reusing %s" % (size, name, strategy, case["exec"]))
                elif not a.predict_only:
                    iterations = a.iterations or (1 if size >= 1024 else 2)
                    case["cmd"] = ([smpirun, "-platform", platform, "-hostfile", block_hosts] +
                                   SMPI_CFG + [a.dsmpi_smpi, "execute"] +
                                   model_args(model, gbs) +
                                   ["--strategy", strategy, "--cluster", cluster, "--backend",
                                    "replay", "--replay-costs", costs, "--warmup", "1",
                                    "--iterations", str(iterations), "--json"])
                cases.append(case)

    # Step 3 and 4: executor runs (a few at once with --jobs), comparison.
    def execute(case):
        if case["cmd"] is None:
            return 0.0
        _, took = run(case["cmd"], out=case["exec"])
        return took

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = [(case, pool.submit(execute, case)) for case in cases]
        for case, future in futures:
            size, name, strategy = case["size"], case["name"], case["strategy"]
            try:
                took = future.result()
                with open(case["pred"]) as f:
                    pred = json.load(f)
                with open(case["exec"]) as f:
                    meas = json.load(f)
            except (RuntimeError, ValueError, OSError) as e:
                log("%d: %s %s: FAILED: %s" % (size, name, strategy, e))
                failures += 1
                continue
            r = compare(pred, meas)
            r.update({"size": size, "model": name, "strategy": meas["strategy"],
                      "execute_wall_s": took})
            results.append(r)
            log("%d: %s %s: predicted %.2f ms, measured %.2f ms (%+.2f%%), executor %.0f s"
                % (size, name, strategy, 1e3 * r["iter_pred_s"], 1e3 * r["iter_meas_s"],
                   100 * r["iter_error"], took))

    print_table(results)
    summary = summarize(results, a.ranking)
    print_summary(summary)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cases": results, "summary": summary}, f, indent=1)
    failed = failures > 0
    for r in results:
        if a.max_error is not None and abs(100 * r["iter_error"]) > a.max_error:
            log("FAIL: %d %s %s: iteration error %+.2f%% beyond %.1f%%" %
                (r["size"], r["model"], r["strategy"], 100 * r["iter_error"], a.max_error))
            failed = True
        if a.max_mb_error is not None and 100 * r["mb_error"] > a.max_mb_error:
            log("FAIL: %d %s %s: micro-batch start/end error %.2f%% beyond %.1f%%" %
                (r["size"], r["model"], r["strategy"], 100 * r["mb_error"], a.max_mb_error))
            failed = True
    rank = summary.get("ranking")
    if rank and a.min_tau is not None and rank["kendall_tau"] < a.min_tau:
        log("FAIL: Kendall tau %.3f below %.2f" % (rank["kendall_tau"], a.min_tau))
        failed = True
    if rank and a.max_regret is not None and 100 * rank["top1_regret"] > a.max_regret:
        log("FAIL: top-1 regret %.2f%% beyond %.1f%%" % (100 * rank["top1_regret"], a.max_regret))
        failed = True
    return 1 if failed else 0


def print_table(results):
    print("# dsmpi virtual-cluster validation (SimGrid SMPI, replay backend, Open MPI rules)")
    print("# %5s %-12s %-44s %9s %9s %7s %7s %7s %8s %8s %7s %6s %6s" %
          ("gpus", "model", "strategy", "pred", "meas", "error", "mb_err", "stage", "exp_pred",
           "exp_meas", "exp_err", "bub_p", "bub_m"))
    print("# %5s %-12s %-44s %9s %9s %7s %7s %7s %8s %8s %7s %6s %6s" %
          ("", "", "", "(ms)", "(ms)", "(%)", "(%it)", "(%)", "(ms)", "(ms)", "(%)", "(%)", "(%)"))
    for r in results:
        strategy = r["strategy"].replace(",schedule=1f1b", "").replace("mbs=1,", "")
        print("  %5d %-12s %-44s %9.2f %9.2f %+7.2f %7.2f %7.2f %8.2f %8.2f %+7.2f %6.1f %6.1f" %
              (r["size"], r["model"], strategy[:44], 1e3 * r["iter_pred_s"],
               1e3 * r["iter_meas_s"], 100 * r["iter_error"], 100 * r["mb_error"],
               100 * r["stage_pass_error"], 1e3 * r["exposed_pred_s"], 1e3 * r["exposed_meas_s"],
               100 * r["exposed_error"], 100 * r["bubble_pred"], 100 * r["bubble_meas"]))


def summarize(results, ranking_size):
    summary = {"sizes": {}}
    for size in sorted({r["size"] for r in results}):
        errors = [abs(r["iter_error"]) for r in results if r["size"] == size]
        mbs = [r["mb_error"] for r in results if r["size"] == size]
        summary["sizes"][size] = {"cases": len(errors), "mean_abs_error": sum(errors) / len(errors),
                                  "max_abs_error": max(errors), "mean_mb_error": sum(mbs) / len(mbs)}
    ranked = [r for r in results if r["size"] == ranking_size]
    if len(ranked) >= 2:
        pred = [r["iter_pred_s"] for r in ranked]
        meas = [r["iter_meas_s"] for r in ranked]
        best = min(meas)
        chosen = meas[pred.index(min(pred))]
        summary["ranking"] = {"size": ranking_size, "strategies": len(ranked),
                              "kendall_tau": kendall_tau(pred, meas),
                              "top1_regret": chosen / best - 1.0}
    return summary


def print_summary(summary):
    print("#")
    print("# %5s %6s %14s %14s %14s" % ("gpus", "cases", "mean|err|", "max|err|", "mean mb_err"))
    print("# %5s %6s %14s %14s %14s" % ("", "", "(%)", "(%)", "(%it)"))
    for size, s in summary["sizes"].items():
        print("  %5d %6d %14.2f %14.2f %14.2f" % (size, s["cases"], 100 * s["mean_abs_error"],
                                                 100 * s["max_abs_error"], 100 * s["mean_mb_error"]))
    rank = summary.get("ranking")
    if rank:
        print("# ranking at %d GPUs over %d strategies: Kendall tau %.3f, top-1 regret %.2f%%" %
              (rank["size"], rank["strategies"], rank["kendall_tau"], 100 * rank["top1_regret"]))


if __name__ == "__main__":
    sys.exit(main())
