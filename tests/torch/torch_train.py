#!/usr/bin/env python3
"""Train a small GPT-2-style model with real PyTorch on CPU and write what
dsmpi reads: torch.profiler traces, measured iteration times, and a sweep of
the framework's own collectives (gloo) as nccl-tests-format logs.

  torch_train.py --mode single|ddp|gpipe|1f1b|tp --out DIR [--iters N] [--format legacy|kineto]
  torch_train.py --mode sweep --out DIR [--in-situ]

Modes on 2 processes (ddp, gpipe, 1f1b, tp, sweep) start their own 2 gloo
processes.  The model is tests/data/torch/gpt2-tiny.json (4 layers, hidden 128,
4 heads, vocabulary 4096), sequence 64, micro-batch 2, fp32, Adam.  Layer
passes are record_function ranges "layer:N:fwd|bwd", "embedding:fwd|bwd",
"head:fwd|bwd"; iterations "ProfilerStep#N" (what dsmpi import --torch-trace
reads).  Exit 77 when torch cannot be imported.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
except ImportError:
    print("torch_train.py: skipped: this interpreter has no torch", file=sys.stderr)
    sys.exit(77)

HIDDEN, LAYERS, HEADS, VOCAB, POSITIONS = 128, 4, 4, 4096, 128
SEQ, MBS = 64, 2
DROPOUT = 0.1

_handles = {}


class Mark(torch.autograd.Function):
    """Identity whose backward opens (enter) or closes a record_function range."""

    @staticmethod
    def forward(ctx, x, name, enter):
        ctx.name, ctx.enter = name, enter
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if ctx.enter:
            _handles[ctx.name] = torch.ops.profiler._record_function_enter(ctx.name)
        else:
            close_range(ctx.name)
        return grad, None, None


def close_range(name):
    if name in _handles:
        torch.ops.profiler._record_function_exit(_handles.pop(name))


def ranged(name, fn, x):
    """fn(x) inside the range name:fwd, its backward inside name:bwd."""
    with torch.autograd.profiler.record_function(name + ":fwd"):
        x = Mark.apply(x, name + ":bwd", False) if x.requires_grad else x
        y = fn(x)
        return Mark.apply(y, name + ":bwd", True)


# ---- tensor parallelism (Megatron-style), identity when tp == 1 ----
TP_GROUP = None


def tp_size():
    return dist.get_world_size(TP_GROUP) if TP_GROUP is not None else 1


class CopyToTP(torch.autograd.Function):  # f: identity forward, all-reduce backward
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g, group=TP_GROUP)
        return g


class ReduceFromTP(torch.autograd.Function):  # g: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x, group=TP_GROUP)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def enter_tp(x):
    return CopyToTP.apply(x) if tp_size() > 1 else x


def exit_tp(x):
    return ReduceFromTP.apply(x) if tp_size() > 1 else x


class Block(torch.nn.Module):
    def __init__(self, tp):
        super().__init__()
        self.heads = HEADS // tp
        self.d = HIDDEN // HEADS
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * self.heads * self.d)
        self.proj = torch.nn.Linear(self.heads * self.d, HIDDEN, bias=(tp == 1))
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc1 = torch.nn.Linear(HIDDEN, 4 * HIDDEN // tp)
        self.fc2 = torch.nn.Linear(4 * HIDDEN // tp, HIDDEN, bias=(tp == 1))
        mask = torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1)
        self.mask = mask  # not a buffer: DDP cannot broadcast bool tensors over gloo

    def forward(self, x):
        b, s, _ = x.shape
        h = enter_tp(self.ln1(x))
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, self.d).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.d))
        scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
        p = F.dropout(torch.softmax(scores, dim=-1), DROPOUT, self.training)
        y = torch.matmul(p, v).transpose(1, 2).reshape(b, s, self.heads * self.d)
        x = x + F.dropout(exit_tp(self.proj(y)), DROPOUT, self.training)
        h = enter_tp(self.ln2(x))
        h = self.fc2(F.gelu(self.fc1(h), approximate="tanh"))
        return x + F.dropout(exit_tp(h), DROPOUT, self.training)


def gpt2_init(module):
    """GPT-2's initialisation (initializer_range 0.02).  torch's default N(0, 1)
    embedding, tied to the output layer, makes the logits so wide that softmax
    gives denormal numbers, on which the output layer's backward GEMMs run 5-10x
    slower on CPU, by an amount that varies from run to run."""
    if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
        torch.nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, torch.nn.Linear) and module.bias is not None:
        torch.nn.init.zeros_(module.bias)


class GPT(torch.nn.Module):
    """Layers first..last-1; the embedding on the first stage, the head on the last."""

    def __init__(self, first, last, tp=1):
        super().__init__()
        self.first, self.last, self.tp = first, last, tp
        self.vocab = VOCAB // tp
        self.wte = torch.nn.Embedding(self.vocab, HIDDEN)
        self.wpe = torch.nn.Embedding(POSITIONS, HIDDEN) if first == 0 else None
        self.blocks = torch.nn.ModuleList(Block(tp) for _ in range(first, last))
        self.ln_f = torch.nn.LayerNorm(HIDDEN) if last == LAYERS else None
        self.apply(gpt2_init)
        if first == 0:  # the embedding's backward ends when both tables have their gradient
            self.pending = 0
            for table in (self.wte, self.wpe):
                table.weight.register_hook(self.embedding_done)

    def embedding_done(self, grad):
        self.pending -= 1
        if self.pending == 0:
            close_range("embedding:bwd")
        return grad

    def embed(self, idx):
        if self.tp > 1:  # vocabulary-parallel lookup
            lo = dist.get_rank(TP_GROUP) * self.vocab
            outside = (idx < lo) | (idx >= lo + self.vocab)
            e = self.wte(torch.where(outside, torch.zeros_like(idx), idx - lo))
            e = exit_tp(e.masked_fill(outside.unsqueeze(-1), 0.0))
        else:
            e = self.wte(idx)
        pos = torch.arange(idx.shape[1])
        return F.dropout(e + self.wpe(pos), DROPOUT, self.training)

    def head(self, x, targets):
        h = enter_tp(self.ln_f(x))
        logits = F.linear(h, self.wte.weight)
        if self.tp == 1:
            return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))
        return vocab_parallel_cross_entropy(logits.view(-1, self.vocab), targets.view(-1),
                                            self.vocab)

    def forward(self, x, targets=None):
        if self.first == 0:
            with torch.autograd.profiler.record_function("embedding:fwd"):
                self.pending = 2
                x = self.embed(x)
                x = Mark.apply(x, "embedding:bwd", True)
        for i, block in enumerate(self.blocks):
            x = ranged("layer:%d" % (self.first + i), block, x)
        if self.ln_f is None:
            return x
        return ranged("head", lambda h: self.head(h, targets), x)


class _VocabParallelCrossEntropy(torch.autograd.Function):  # named as Megatron-LM names it
    @staticmethod
    def forward(ctx, logits, target, vocab):
        lo = dist.get_rank(TP_GROUP) * vocab
        m = logits.max(dim=-1)[0]
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=TP_GROUP)
        e = torch.exp(logits - m.unsqueeze(-1))
        s = e.sum(dim=-1)
        dist.all_reduce(s, group=TP_GROUP)
        inside = (target >= lo) & (target < lo + vocab)
        local = torch.where(inside, target - lo, torch.zeros_like(target))
        t = torch.where(inside, logits.gather(1, local.unsqueeze(1)).squeeze(1) - m,
                        torch.zeros_like(m))
        dist.all_reduce(t, group=TP_GROUP)
        p = e / s.unsqueeze(-1)
        ctx.save_for_backward(p, local, inside)
        return (torch.log(s) - t).mean()

    @staticmethod
    def backward(ctx, g):
        p, local, inside = ctx.saved_tensors
        grad = p.clone()
        rows = torch.arange(grad.shape[0])
        grad[rows[inside], local[inside]] -= 1.0
        return grad * (g / grad.shape[0]), None, None


def vocab_parallel_cross_entropy(logits, target, vocab):
    return _VocabParallelCrossEntropy.apply(logits, target, vocab)


def batch(step, micro, n=MBS):
    g = torch.Generator().manual_seed(1000 * step + micro)
    idx = torch.randint(0, VOCAB, (n, SEQ + 1), generator=g)
    return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()


def write_trace(prof, path, fmt, rank, compact=False):
    if fmt == "legacy":
        prof.export_chrome_trace(path)
        if compact:
            with open(path) as f:
                events = json.load(f)
            with open(path, "w") as f:
                json.dump(events, f, separators=(",", ":"))
        return
    events = []
    steps = 0
    for e in prof.function_events:  # Kineto layout from the profiler's own events
        name = e.name
        if name == "ProfilerStep*":  # function_events rename the steps; Kineto keeps "#N"
            name = "ProfilerStep#%d" % steps
            steps += 1
        item = {"ph": "X", "cat": "cpu_op", "name": name, "pid": rank, "tid": e.thread,
                "ts": e.time_range.start, "dur": e.time_range.end - e.time_range.start,
                "args": {}}
        if e.input_shapes:
            item["args"]["Input Dims"] = e.input_shapes
        if not name.startswith("aten::"):
            item["cat"] = "user_annotation"
        events.append(item)
    with open(path, "w") as f:
        json.dump({"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}, f,
                  separators=(",", ":") if compact else None)


def run(args, rank, world, train_step, params):
    opt = torch.optim.Adam(params, lr=1e-4)
    times = []
    for it in range(args.warmup):
        train_step(it)
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.autograd.profiler.profile(enabled=not args.no_profile,
                                         record_shapes=args.format == "kineto") as prof:
        for it in range(args.iters):
            if world > 1:
                dist.barrier()
            t0 = time.perf_counter()
            with torch.autograd.profiler.record_function("ProfilerStep#%d" % it):
                train_step(args.warmup + it)
                opt.step()
                opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
    if world > 1:  # an iteration ends when the slowest rank ends
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
    if not args.no_profile:
        write_trace(prof, os.path.join(args.out, "%s_rank%d.json" % (args.mode, rank)),
                    args.format, rank, args.compact)
    if rank == 0:
        with open(os.path.join(args.out, "%s_times.txt" % args.mode), "w") as f:
            f.write("# %s: iteration seconds (profiler %s), %d iterations after %d warm-up\n"
                    % (args.mode, "off" if args.no_profile else "on", args.iters, args.warmup))
            for t in times:
                f.write("%.6f\n" % t)
        print("%s: median %.4f s over %d iterations (min %.4f max %.4f)"
              % (args.mode, statistics.median(times), len(times), min(times), max(times)))


def leave():
    """Ends a process of a 2-process run once both are done.  gloo's teardown
    (destroy_process_group) has hung here, one rank waiting on a futex after
    the other had exited; its outputs are written, so it exits at once."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def bind(rank, args):
    """Each rank on a core of its own (rank modulo the cores this process may
    use), as mpirun binds two ranks and srun --cpu-bind=cores does: gloo's
    threads then wait on their rank's core, not on the other rank's."""
    if args.bind == "core" and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})


def worker(rank, world, args):
    global TP_GROUP, LAYERS
    LAYERS = args.layers  # spawned processes import this file afresh
    bind(rank, args)
    if args.flush_denormal:
        torch.set_flush_denormal(True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    m = args.microbatches
    if args.mode in ("single", "ddp"):
        model = GPT(0, LAYERS)
        net = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False) if args.mode == "ddp" else model

        def step(it):
            for mb in range(m):
                x, y = batch(it, mb + m * rank)
                if args.mode == "ddp" and mb < m - 1:
                    with net.no_sync():
                        (net(x, y) / m).backward()
                else:
                    (net(x, y) / m).backward()
        run(args, rank, world, step, model.parameters())
    elif args.mode == "tp":
        TP_GROUP = dist.new_group([0, 1])
        model = GPT(0, LAYERS, tp=2)
        torch.manual_seed(1 + rank)
        for p in model.parameters():  # shards differ; replicated params equal
            if p.dim() > 1:
                torch.nn.init.normal_(p, std=0.02)

        def step(it):
            for mb in range(m):
                x, y = batch(it, mb)
                (model(x, y) / m).backward()
        run(args, rank, world, step, model.parameters())
    elif args.mode in ("gpipe", "1f1b"):
        half = LAYERS // 2
        model = GPT(0, half) if rank == 0 else GPT(half, LAYERS)
        shape = (MBS, SEQ, HIDDEN)
        sends = []  # non-blocking sends, as Megatron's p2p: 1F1B would deadlock on blocking ones

        def forward(it, mb):
            x, y = batch(it, mb)
            if rank == 0:
                out = model(x)
                sends.append(dist.isend(out.detach().contiguous(), 1))
                return out, None
            inp = torch.empty(shape)
            dist.recv(inp, 0)
            inp.requires_grad_(True)
            return model(inp, y) / m, inp

        def backward(out, inp):
            if rank == 0:
                g = torch.empty(shape)
                dist.recv(g, 1)
                out.backward(g)
            else:
                out.backward()
                sends.append(dist.isend(inp.grad.contiguous(), 0))

        def step(it):
            saved = []
            if args.mode == "gpipe":
                for mb in range(m):
                    saved.append(forward(it, mb))
                for out, inp in saved:
                    backward(out, inp)
            else:  # 1F1B: warm-up forwards, steady 1F1B, cool-down backwards
                warm = 1 if rank == 0 else 0
                for mb in range(warm):
                    saved.append(forward(it, mb))
                for mb in range(warm, m):
                    saved.append(forward(it, mb))
                    backward(*saved.pop(0))
                while saved:
                    backward(*saved.pop(0))
            for request in sends:
                request.wait()
            sends.clear()
            # tied embedding: the first and last stage sum the gradient of wte
            g = model.wte.weight.grad
            dist.all_reduce(g)
        run(args, rank, world, step, model.parameters())
    if world > 1:
        leave()


def sweep_reps(op, producer, budget_s, least, most):
    """Repetitions for one size: rank 0 times a few (producer included) and
    picks how many fill budget_s, between least and most; both ranks run it."""
    t0 = time.perf_counter()
    for _ in range(3):
        producer()
        op()
    each = (time.perf_counter() - t0) / 3
    n = torch.tensor([min(most, max(least, int(budget_s / max(each, 1e-6))))])
    dist.broadcast(n, 0)
    return int(n.item())


def sweep_time(op, producer, reps, pingpong):
    """Mean seconds of op over reps, each repetition after producer(): both
    processes stamp entry and exit on the host's monotonic clock (one host:
    the same clock), and a repetition costs the last exit minus the last
    entry, so that one process waiting for the other is not counted as the
    collective's time (METHOD 3, arrival skew).  A ping-pong costs half its
    round trip (one direction)."""
    stamps = torch.zeros(reps, 2, dtype=torch.float64)
    dist.barrier()
    for i in range(reps):
        producer()
        stamps[i, 0] = time.perf_counter()
        op()
        stamps[i, 1] = time.perf_counter()
    both = [torch.zeros_like(stamps) for _ in range(dist.get_world_size())]
    dist.all_gather(both, stamps)
    both = torch.stack(both)  # process, repetition, (entry, exit)
    cost = both[:, :, 1].max(0).values - both[:, :, 0].max(0).values
    return float(cost.clamp(min=0.0).mean()) / (2.0 if pingpong else 1.0)


def sweep_producer(args):
    """What runs before each repetition: nothing (isolated, as nccl-tests
    measures), or with --in-situ one transformer layer's forward at the
    tensor-parallel shapes of the traced model (tp=2, micro-batch MBS), the
    compute a TP rank runs between its collectives (METHOD 3, in-situ
    communication: a collective right after compute costs more than in a
    tight loop)."""
    if not args.in_situ:
        return lambda: None
    block = Block(2)
    block.apply(gpt2_init)
    block.eval()
    x = torch.randn(MBS, SEQ, HIDDEN)

    def produce():
        with torch.no_grad():
            block(x)
    return produce


def sweep_worker(rank, world, args):
    bind(rank, args)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    host = os.uname().nodename.split(".")[0]
    producer = sweep_producer(args)
    out = os.path.join(args.out, "in-situ") if args.in_situ else args.out
    os.makedirs(out, exist_ok=True)
    context = ("each repetition after one layer's forward at tp=2 (in situ)" if args.in_situ
               else "isolated")
    tests = [("all_reduce_perf", "sum"), ("all_gather_perf", "none"), ("sendrecv_perf", "sum")]
    for name, redop in tests:
        lines = ["# nccl-tests version 2.17.8 (torch.distributed %s over gloo; %s; mean of the "
                 "repetitions, each the last exit minus the last entry)" % (torch.__version__, context),
                 "# Collective test starting: %s" % name,
                 "# nThread 1 nGpus 1 minBytes 4096 maxBytes %d step: 4(factor) warmup iters: 3 "
                 "iters: %d agg iters: 1 validation: 0 graph: 0" % (args.sweep_max, args.sweep_iters),
                 "#", "# Using devices"]
        for r in range(world):
            lines.append("#  Rank %2d Group  0 Pid %6d on %10s device  0 [0x00] cpu"
                         % (r, os.getpid(), host))
        lines += ["#",
                  "#                                                              out-of-place                       in-place          ",
                  "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
                  "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "]
        size = 4096
        while size <= args.sweep_max:
            n = size // 4
            # Values like activations (random), not constants (METHOD 3).
            if name == "all_gather_perf":
                send = torch.randn(n // world)
                recv = [torch.empty(n // world) for _ in range(world)]
                op = lambda: dist.all_gather(recv, send)
                bus = (world - 1) / world
            elif name == "all_reduce_perf":
                buf = torch.randn(n)
                op = lambda: dist.all_reduce(buf)
                bus = 2.0 * (world - 1) / world
            else:
                buf = torch.randn(n)
                peer = 1 - rank

                def op():
                    if rank == 0:
                        dist.send(buf, peer)
                        dist.recv(buf, peer)
                    else:
                        dist.recv(buf, peer)
                        dist.send(buf, peer)
                bus = 1.0
            reps = sweep_reps(op, producer, args.sweep_seconds, args.sweep_iters, 2000)
            us = sweep_time(op, producer, reps, name == "sendrecv_perf") * 1e6
            algbw = size / us / 1e3
            lines.append("%12d  %12d     float  %6s      -1  %7.2f  %6.2f  %6.2f       0  %7.2f  %6.2f  %6.2f       0"
                         % (size, n, redop, us, algbw, algbw * bus, us, algbw, algbw * bus))
            size *= 4
        lines += ["# Out of bounds values : 0 OK", "#", "# Collective test concluded: %s" % name, "#"]
        if rank == 0:
            with open(os.path.join(out, "gloo_%s.log" % name.replace("_perf", "")), "w") as f:
                f.write("\n".join(lines) + "\n")
    leave()


def main():
    global LAYERS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", required=True,
                    choices=["single", "ddp", "gpipe", "1f1b", "tp", "sweep"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4,
                    help="transformer layers (4: gpt2-tiny.json; 1: gpt2-tiny-1l.json, fixtures)")
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True): the output layer's backward GEMMs of this "
                         "model run on denormal numbers on CPU, 5-10x slower, by how much varies "
                         "from run to run")
    ap.add_argument("--no-profile", action="store_true",
                    help="no profiler: iteration times only (what a run without tracing takes)")
    ap.add_argument("--compact", action="store_true",
                    help="rewrite the trace without whitespace (fixtures)")
    ap.add_argument("--format", choices=["legacy", "kineto"], default="legacy")
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--bind", choices=["core", "none"], default="none",
                    help="core: each rank bound to a core of its own (as mpirun binds two "
                         "ranks); none (default): left to the scheduler")
    ap.add_argument("--sweep-max", type=int, default=4 << 20)
    ap.add_argument("--sweep-iters", type=int, default=20,
                    help="sweep: at least this many repetitions per size")
    ap.add_argument("--sweep-seconds", type=float, default=0.5,
                    help="sweep: repetitions per size to fill about this time (at most 2000)")
    ap.add_argument("--in-situ", action="store_true",
                    help="sweep: each repetition right after one layer's forward (tp=2 shapes); "
                         "logs in OUT/in-situ")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.mode == "sweep":
        mp.spawn(sweep_worker, args=(2, args), nprocs=2, join=True)
    elif args.mode == "single":
        worker(0, 1, args)
    else:
        mp.spawn(worker, args=(2, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
