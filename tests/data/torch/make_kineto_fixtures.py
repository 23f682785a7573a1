#!/usr/bin/env python3
"""Writes the hand-made Kineto-format fixtures of this folder (not measured:
every duration is chosen so that a test can assert what dsmpi makes of it).

  gpu-kineto.json      a CUDA trace as torch.profiler (Kineto) writes one with
                       record_shapes=True: one ProfilerStep, the forward pass of
                       layer 0 of gpt2-tiny-1l.json (mbs 2, seq 64, fp32) as a
                       record_function range, the optimizer step; cpu_op events
                       with "Input Dims", cuda_runtime / cuda_driver launches and
                       kernel / gpu_memset work linked by args "correlation".
  modules-kineto.json  a CPU trace with with_stack=True: layer ranges are the
                       python_function events "nn.Module: TransformerLayer_0"
                       (Megatron-Core's class), two micro-batches, the backward
                       pass found through the ops' "Sequence number".

The format follows libkineto's output_json.cpp and CuptiActivity.cpp: "X"
events with ts/dur in microseconds (three decimals), cpu_op args "External
id", "Input Dims", "Input type", "Sequence number", "Fwd thread id";
cudaLaunchKernel (cbid 211), cudaMemsetAsync (cbid 51), cuLaunchKernel
(cuda_driver, cbid 307) with args "cbid", "correlation"; kernels on pid =
device, tid = stream with "queued", "device", "context", "stream",
"correlation", ...; "ac2g" flow events; gpu_user_annotation copies of the
user ranges on the stream.

  python3 make_kineto_fixtures.py    (in this folder)
"""
import json

PID, TID = 4242, 4242          # the training process and its main thread
DEV, STREAM = 0, 7


class Trace:
    def __init__(self):
        self.events = []
        self.t = 1000.0        # CPU clock, us
        self.gpu_t = 1000.0    # stream clock, us
        self.external = 100    # cpu_op "External id"
        self.correlation = 5000
        self.seq = 200         # autograd sequence numbers

    def x(self, cat, name, ts, dur, pid=PID, tid=TID, args=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
             "ts": round(ts, 3), "dur": round(dur, 3)}
        if args is not None:
            e["args"] = args
        self.events.append(e)
        return e

    def op(self, name, dims, dur, children=(), launches=(), seq=False, tid=TID):
        """A cpu_op of `dur` us at the clock, its child ops and launches inside it."""
        start = self.t
        self.external += 1
        args = {"External id": self.external, "Record function id": 0,
                "Ev Idx": len(self.events)}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = ["float" if d else "Scalar" for d in dims]
        if seq:
            self.seq += 1
            args["Sequence number"] = self.seq
            args["Fwd thread id"] = 0
        event = self.x("cpu_op", name, start, dur, tid=tid, args=args)
        self.t += 1.0
        for child in children:
            child()
        for launch in launches:
            self.launch(*launch, external=args["External id"], tid=tid)
        end = max(start + dur, self.t + 0.5)      # a parent ends after its children
        event["dur"] = round(end - start, 3)
        self.t = end + 0.5
        return event

    def launch(self, kernel, kernel_dur, runtime="cudaLaunchKernel", external=0, tid=TID):
        self.correlation += 1
        c = self.correlation
        cat, cbid = {"cudaLaunchKernel": ("cuda_runtime", 211),
                     "cudaMemsetAsync": ("cuda_runtime", 51),
                     "cuLaunchKernel": ("cuda_driver", 307)}[runtime]
        ts = self.t
        self.x(cat, runtime, ts, 4.0, tid=tid,
               args={"External id": external, "cbid": cbid, "correlation": c})
        self.events.append({"ph": "s", "id": c, "pid": PID, "tid": tid, "ts": round(ts, 3),
                            "cat": "ac2g", "name": "ac2g"})
        self.gpu_t = max(self.gpu_t, ts + 6.0)
        if runtime == "cudaMemsetAsync":
            work = self.x("gpu_memset", "Memset (Device)", self.gpu_t, kernel_dur, DEV, STREAM,
                          {"External id": external, "device": DEV, "context": 1,
                           "stream": STREAM, "correlation": c, "bytes": 262144,
                           "memory bandwidth (GB/s)": 262.144})
        else:
            work = self.x("kernel", kernel, self.gpu_t, kernel_dur, DEV, STREAM,
                          {"External id": external, "queued": 0, "device": DEV, "context": 1,
                           "stream": STREAM, "correlation": c, "registers per thread": 64,
                           "shared memory": 8192, "blocks per SM": 0.5, "warps per SM": 2.0,
                           "grid": [4, 3, 1], "block": [256, 1, 1],
                           "est. achieved occupancy %": 6})
        self.events.append({"ph": "f", "id": c, "pid": DEV, "tid": STREAM,
                            "ts": round(self.gpu_t, 3), "cat": "ac2g", "name": "ac2g",
                            "bp": "e"})
        self.gpu_t += kernel_dur + 0.5
        self.t += 5.0
        return work

    def comm(self, collective, dtype, in_nelems, out_nelems, ranks, kernel, kernel_dur):
        """torch.distributed's record_param_comms around a collective, its NCCL kernel."""
        self.external += 1
        args = {"External id": self.external, "Record function id": 0,
                "Ev Idx": len(self.events), "Collective name": collective, "dtype": dtype,
                "In msg nelems": in_nelems, "Out msg nelems": out_nelems, "Group size": ranks,
                "Process Group Name": "0", "Process Group Description": "default_pg",
                "In split size": "[]", "Out split size": "[]"}
        start = self.t
        event = self.x("cpu_op", "record_param_comms", start, 0.0, args=args)
        self.t += 1.0
        self.launch(kernel, kernel_dur, external=args["External id"])
        event["dur"] = round(self.t + 0.5 - start, 3)
        self.t += 1.0
        return event

    def user_range(self, name, body, gpu_copy=True, cat="user_annotation", tid=TID):
        start, gpu_start = self.t, self.gpu_t
        self.t += 0.5
        body()
        self.t += 0.5
        self.x(cat, name, start, self.t - start, tid=tid, args={"External id": 1})
        if gpu_copy and self.gpu_t > gpu_start:
            self.x("gpu_user_annotation", name, gpu_start, self.gpu_t - gpu_start, DEV, STREAM,
                   {"External id": 1})
        self.t += 1.0

    def write(self, path, **top):
        head = {"schemaVersion": 1,
                "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB",
                                      "totalGlobalMem": 85095874560, "computeMajor": 8,
                                      "computeMinor": 0, "numSms": 108}]}
        head.update(top)
        meta = [{"name": "process_name", "ph": "M", "ts": 1000.0, "pid": PID, "tid": 0,
                 "args": {"name": "python"}},
                {"name": "process_name", "ph": "M", "ts": 1000.0, "pid": DEV, "tid": 0,
                 "args": {"name": "GPU 0"}},
                {"name": "thread_name", "ph": "M", "ts": 1000.0, "pid": DEV, "tid": STREAM,
                 "args": {"name": "stream 7"}}]
        head["traceEvents"] = meta + self.events + [
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
             "ts": round(self.t + 10.0, 3)}]
        head["traceName"] = path
        with open(path, "w") as f:
            json.dump(head, f, indent=None, separators=(",", ":"))
            f.write("\n")


# Kernel names as CUDA builds of PyTorch 2.x show them (shortened).
LN = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
SGEMM = "ampere_sgemm_32x128_tn"
BGEMM = "ampere_sgemm_64x32_sliced1x4_nn"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 6, false, false>"
DROPOUT = ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, "
           "unsigned int, 1, 4, bool>")
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
COPY = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda>"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>"
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def gpu_fixture(path="gpu-kineto.json", ddp=False):
    """gpu-kineto.json: device time per operator (us) chosen below, CPU times larger.
    ddp-gpu-kineto.json (ddp=True): rank 0 of two data-parallel ranks, the same
    iteration with DDP's gradient all-reduce (record_param_comms, 1 Mi fp32
    elements over 2 ranks, its NCCL kernel 120 us) before the optimizer step."""
    tr = Trace()
    B, S, H = 2, 64, 128

    def linear(out, inp, kernel_us, runtime="cudaLaunchKernel", memset_us=None):
        def addmm():
            launches = [(SGEMM, kernel_us, runtime)]
            if memset_us is not None:
                launches.append(("", memset_us, "cudaMemsetAsync"))
            tr.op("aten::addmm", [[out], [B * S, inp], [inp, out], [], []], 30.0,
                  launches=launches)
        tr.op("aten::linear", [[B, S, inp], [out, inp], [out]], 45.0,
              children=[lambda: tr.op("aten::t", [[out, inp]], 3.0), addmm])

    def layer_norm(kernel_us):
        tr.op("aten::layer_norm", [[B, S, H], [], [H], [H], [], []], 30.0, children=[
            lambda: tr.op("aten::native_layer_norm", [[B, S, H], [], [H], [H], []], 22.0,
                          launches=[(LN, kernel_us)])])

    def dropout(shape, kernel_us):
        tr.op("aten::dropout", [shape, [], []], 20.0, children=[
            lambda: tr.op("aten::native_dropout", [shape, [], []], 14.0,
                          launches=[(DROPOUT, kernel_us)])])

    def bmm(a, b, kernel_us):
        tr.op("aten::matmul", [a, b], 30.0, children=[
            lambda: tr.op("aten::bmm", [a, b], 22.0, launches=[(BGEMM, kernel_us)])])

    def layer():
        layer_norm(4.5)                                              # layernorm fwd
        linear(3 * H, H, 21.0, runtime="cuLaunchKernel")              # qkv: 21.0
        tr.op("aten::view", [[B, S, 3 * H], []], 2.0)                 # no device work
        tr.op("aten::contiguous", [[B, 4, S, 32], []], 18.0, children=[  # unknown kind: 3.0
            lambda: tr.op("aten::copy_", [[B, 4, S, 32], [B, 4, S, 32], []], 12.0,
                          launches=[(COPY, 3.0)])])
        bmm([8, S, 32], [8, 32, S], 7.25)                             # scores
        tr.op("aten::softmax", [[8, S, S], [], []], 20.0, children=[
            lambda: tr.op("aten::_softmax", [[8, S, S], [], []], 12.0,
                          launches=[(SOFTMAX, 3.0)])])
        dropout([8, S, S], 2.5)
        bmm([8, S, S], [8, S, 32], 6.75)                              # context
        linear(H, H, 9.5)                                             # proj
        dropout([B, S, H], 2.0)                                       # dropout_add: the dropout
        tr.op("aten::add", [[B, S, H], [B, S, H], []], 12.0,          # ... its add: 1.5, other
              launches=[(ADD, 1.5)])
        layer_norm(4.5)
        linear(4 * H, H, 24.0, memset_us=1.0)                         # fc1: 24 + 1
        tr.op("aten::gelu", [[B, S, 4 * H], []], 16.0, launches=[(GELU, 4.0)])
        linear(H, 4 * H, 23.0)                                        # fc2
        dropout([B, S, H], 2.0)
        tr.op("aten::add", [[B, S, H], [B, S, H], []], 12.0, launches=[(ADD, 1.5)])

    def optimizer():
        tr.op("aten::_fused_adam_", [[], [], [], [], [], [], [], [], [], [], [], []], 60.0,
              launches=[(ADAM, 30.0), (ADAM, 20.0)])                  # optimizer: 50.0

    def step():
        tr.op("aten::zeros", [[], [], [], [], []], 12.0)
        tr.user_range("layer:0:fwd", layer)
        if ddp:
            tr.comm("allreduce", "Float", 1048576, 1048576, 2, NCCL_ALLREDUCE, 120.0)
        tr.user_range("Optimizer.step#FusedAdam.step", optimizer)

    tr.user_range("ProfilerStep#1", step)
    # Device work whose launch the trace lost (a CUPTI buffer overflow): not linked.
    tr.x("kernel", SGEMM, tr.gpu_t + 5.0, 8.0, DEV, STREAM,
         {"queued": 0, "device": DEV, "context": 1, "stream": STREAM, "correlation": 99999})
    tr.write(path, record_shapes=1, with_stack=0, profile_memory=0)


def modules_fixture():
    """modules-kineto.json: a CPU trace whose layer ranges are nn.Module events."""
    tr = Trace()
    B, S, H = 2, 64, 128
    seqs = {}

    def fwd(name, dims, dur, label):
        tr.op(name, dims, dur, seq=True)
        seqs.setdefault(label, []).append(tr.seq)

    def module(name, body, tid=TID):
        tr.user_range("nn.Module: " + name, body, gpu_copy=False, cat="python_function",
                      tid=tid)

    def layer(mb):
        module("LayerNorm_0", lambda: fwd("aten::layer_norm", [[B, S, H], [], [H], [H], [], []],
                                          20.0, "ln1"))
        module("Linear_0", lambda: fwd("aten::addmm", [[3 * H], [B * S, H], [H, 3 * H], [], []],
                                       30.0, "qkv"))
        fwd("aten::bmm", [[8, S, 32], [8, 32, S]], 15.0, "scores")
        fwd("aten::softmax", [[8, S, S], [], []], 10.0, "softmax")
        fwd("aten::dropout", [[8, S, S], [], []], 8.0, "drop1")
        fwd("aten::bmm", [[8, S, S], [8, S, 32]], 15.0, "context")
        module("Linear_1", lambda: fwd("aten::addmm", [[H], [B * S, H], [H, H], [], []],
                                       20.0, "proj"))
        fwd("aten::add", [[B, S, H], [B, S, H], []], 6.0, "res1")
        module("LayerNorm_1", lambda: fwd("aten::layer_norm", [[B, S, H], [], [H], [H], [], []],
                                          20.0, "ln2"))
        module("Linear_2", lambda: fwd("aten::addmm", [[4 * H], [B * S, H], [H, 4 * H], [], []],
                                       40.0, "fc1"))
        fwd("aten::gelu", [[B, S, 4 * H], []], 12.0, "gelu")
        module("Linear_3", lambda: fwd("aten::addmm", [[H], [B * S, 4 * H], [4 * H, H], [], []],
                                       40.0, "fc2"))
        fwd("aten::add", [[B, S, H], [B, S, H], []], 6.0, "res2")

    def backward_node(node, seq, inner, tid=TID):
        """autograd::engine::evaluate_function: NODE with the forward op's sequence number."""
        start = tr.t
        tr.x("cpu_op", "autograd::engine::evaluate_function: " + node, start, 0.0, tid=tid,
             args={"External id": 0, "Sequence number": seq, "Fwd thread id": 1})
        tr.t += 1.0
        for name, dims, dur in inner:
            tr.op(name, dims, dur, tid=tid)
        tr.events[-1 - len(inner)]["dur"] = round(tr.t - start, 3)
        tr.t += 1.0

    def layer_norm_backward(seq):
        backward_node("NativeLayerNormBackward0", seq, [
            ("aten::native_layer_norm_backward", [[B, S, H], [B, S, H], [], [], [], [H], [H], []],
             20.0)])

    def backward(mb):
        s = {k: v[mb] for k, v in seqs.items()}
        backward_node("AddBackward0", s["res2"], [])
        backward_node("AddmmBackward0", s["fc2"], [
            ("aten::mm", [[B * S, H], [H, 4 * H]], 30.0),
            ("aten::mm", [[H, B * S], [B * S, 4 * H]], 30.0)])
        backward_node("GeluBackward0", s["gelu"], [
            ("aten::gelu_backward", [[B * S, 4 * H], [B * S, 4 * H], []], 12.0)])
        backward_node("AddmmBackward0", s["fc1"], [
            ("aten::mm", [[B * S, 4 * H], [4 * H, H]], 30.0),
            ("aten::mm", [[4 * H, B * S], [B * S, H]], 30.0)])
        layer_norm_backward(s["ln2"])
        backward_node("AddBackward0", s["res1"], [])
        backward_node("AddmmBackward0", s["proj"], [
            ("aten::mm", [[B * S, H], [H, H]], 15.0),
            ("aten::mm", [[H, B * S], [B * S, H]], 15.0)])
        backward_node("BmmBackward0", s["context"], [
            ("aten::bmm", [[8, S, 32], [8, 32, S]], 12.0),
            ("aten::bmm", [[8, S, S], [8, S, 32]], 12.0)])
        backward_node("NativeDropoutBackward0", s["drop1"], [
            ("aten::native_dropout_backward", [[8, S, S], [8, S, S], []], 8.0)])
        backward_node("SoftmaxBackward0", s["softmax"], [
            ("aten::_softmax_backward_data", [[8, S, S], [8, S, S], [], []], 10.0)])
        backward_node("BmmBackward0", s["scores"], [
            ("aten::bmm", [[8, S, S], [8, S, 32]], 12.0),
            ("aten::bmm", [[8, 32, S], [8, S, S]], 12.0)])
        backward_node("AddmmBackward0", s["qkv"], [
            ("aten::mm", [[B * S, 3 * H], [3 * H, H]], 20.0),
            ("aten::mm", [[3 * H, B * S], [B * S, H]], 20.0)])
        layer_norm_backward(s["ln1"])

    def step():
        def block(mb):  # Megatron-Core: GPTModel > TransformerBlock (the stack) > TransformerLayer
            module("TransformerLayer_0", lambda: layer(mb))
        for mb in range(2):
            module("GPTModel_0", lambda: module("TransformerBlock_0", lambda: block(mb)))
        tr.t += 20.0
        for mb in reversed(range(2)):  # autograd runs CPU work on the calling thread
            backward(mb)

    tr.user_range("ProfilerStep#3", step)
    tr.write("modules-kineto.json", record_shapes=1, with_stack=1, profile_memory=0)


if __name__ == "__main__":
    gpu_fixture()
    gpu_fixture("ddp-gpu-kineto.json", ddp=True)
    modules_fixture()
