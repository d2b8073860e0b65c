"""torch_memory.py - PyTorch's own ways to trade compute for activation
memory against ration's plan applied (python/ration_torch), side by side in
one run on the CPU: plain eager; per-layer torch.utils.checkpoint; the
torch.compile min-cut partitioner at several activation_memory_budget
values; ration's checkpoint-layers plan and its plans at several budgets.
Per row: the bytes autograd saves for backward (distinct storages, params,
inputs and the loss's targets aside), the heap's peak
over a forward and backward above what was held before it (bench/
peak_malloc.c, preloaded: the CPU has no max_memory_allocated), and the
median step.

Run by bench/bench_torch_memory.sh (which builds the shim and the venv):
    python torch_memory.py RATION STEPS DEVICE.json [gpt2|llama|dit ...]
DEVICE.json is the device ration plans for: budgets/cpu.json, whose
"unified_memory" (the host is the same RAM) makes ration plan recompute
only.

On a GPU (gpu/torch_memory.sh runs it on the device machine):
    python torch_memory.py RATION STEPS DEVICE.json --cuda [--compile-budgets 1.0,0.0]
        [--plans checkpoint-layers,60%,smallest] [--compile-after S] [--plan-time-limit S] [MODEL ...]
models and inputs live on the GPU, ration plans for DEVICE.json (a GPU
profile: it offloads as well as recomputes), the peak is
torch.cuda.max_memory_allocated over the step above what was allocated
before it, step times are taken after a synchronize; torch.compile rows
run last and are skipped once S seconds have passed since the start;
--plan-time-limit is ration's --time-limit for each plan (the best plan
found within it).
"""
import argparse
import ctypes
import os
import re
import statistics
import sys
import time

import torch
import torch.utils.checkpoint as ckpt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import ration_torch  # noqa: E402
import torch_models  # noqa: E402
from ration_torch._trace import storage_key, storage_nbytes  # noqa: E402


def options(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("ration")
    ap.add_argument("steps", type=int)
    ap.add_argument("device")
    ap.add_argument("models", nargs="*", default=["gpt2", "llama", "dit"])
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--compile-budgets", default="1.0,0.5,0.0")
    ap.add_argument("--plans", default="checkpoint-layers,100%,80%,60%,40%,smallest")
    ap.add_argument("--compile-after", type=float, default=float("inf"))
    ap.add_argument("--plan-time-limit", type=float, default=None)
    return ap.parse_intermixed_args(argv)


OPT = options(sys.argv[1:])
RATION, STEPS, DEVICE, MODELS = OPT.ration, OPT.steps, OPT.device, OPT.models
COMPILE_BUDGETS = [float(b) for b in OPT.compile_budgets.split(",") if b]
RATION_PLANS = [p for p in OPT.plans.split(",") if p]
ON = "cuda" if OPT.cuda else "cpu"
START = time.perf_counter()
os.environ["RATION"] = RATION
MiB = 1 << 20


class HostHeap:
    """The heap's bytes, from bench/peak_malloc.c preloaded (the CPU has no
    max_memory_allocated)."""

    def __init__(self):
        self.lib = ctypes.CDLL(None)
        self.lib.peak_malloc_peak.restype = self.lib.peak_malloc_current.restype = ctypes.c_int64

    def current(self):
        return self.lib.peak_malloc_current()

    def reset(self):
        self.lib.peak_malloc_reset()

    def peak(self):
        return self.lib.peak_malloc_peak()

    def sync(self):
        pass


class CudaHeap:
    """The caching allocator's bytes in use on the GPU."""

    def current(self):
        return torch.cuda.memory_allocated()

    def reset(self):
        torch.cuda.reset_peak_memory_stats()

    def peak(self):
        return torch.cuda.max_memory_allocated()

    def sync(self):
        torch.cuda.synchronize()


heap = CudaHeap() if OPT.cuda else HostHeap()


def build(name):
    """The 6-layer, dim-384 configurations the issue measured, batch 4:
    (model, inputs, loss_fn, the targets loss_fn reads)."""
    torch.manual_seed(0)
    F = torch.nn.functional
    if name in ("gpt2", "llama"):
        model = (torch_models.GPT2(vocab=256, seq=256, dim=384, heads=6, layers=6) if name == "gpt2" else
                 torch_models.Llama(vocab=256, seq=256, dim=384, heads=6, kv_heads=2, ffn=1024, layers=6))
        tokens = torch.randint(0, 256, (4, 257)).to(ON)
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        return (model.to(ON), (x,), lambda logits: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)),
                (y,))
    model = torch_models.DiT(channels=4, size=32, patch=2, dim=384, heads=6, layers=6)
    x, t, noise = torch.randn(4, 4, 32, 32), torch.randint(0, 1000, (4,)), torch.randn(4, 4, 32, 32)
    x, t, noise = x.to(ON), t.to(ON), noise.to(ON)
    return model.to(ON), (x, t), lambda pred: F.mse_loss(pred, noise), (noise,)


def blocks_of(model):
    return max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)


def measure(model, inputs, loss_fn, targets, forward=None, run=None):
    """(saved bytes, heap peak over the step, median step seconds) over STEPS
    steps after a warm-up one; forward defaults to model. The targets are
    held whatever the method, like the inputs (ration's graph has them as
    inputs), so their bytes are not counted as saved."""
    forward = forward if forward is not None else model
    resident = {storage_key(t) for t in list(model.parameters()) + list(model.buffers()) + list(inputs) + list(targets)}
    peaks, times, saved = [], [], {}

    def pack(t):
        if t.numel() and storage_key(t) not in resident:
            saved[storage_key(t)] = storage_nbytes(t)
        return t
    for i in range(STEPS + 1):
        model.zero_grad(set_to_none=True)
        saved.clear()
        heap.sync()
        base = heap.current()
        heap.reset()
        t0 = time.perf_counter()
        if run is None:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn(forward(*inputs))
        else:  # the plan's hooks: an inner pair of ours would replace them
            loss = loss_fn(forward(*inputs))
        loss.backward()
        heap.sync()
        times.append(time.perf_counter() - t0)
        peaks.append(heap.peak() - base)
        del loss
    if run is not None:
        held = run.last_step.saved_bytes + run.last_step.offloaded_bytes
        return held, max(peaks[1:]), statistics.median(times[1:])
    return sum(saved.values()), max(peaks[1:]), statistics.median(times[1:])


def row(model_name, method, setting, m):
    saved, peak, secs = m
    print(f"| {model_name} | {method} | {setting} | {saved / MiB:.1f} | {peak / MiB:.1f} | {secs * 1e3:.0f} |", flush=True)


def compile_rows(name, model, inputs, loss_fn, targets):
    import torch._functorch.config as functorch_config
    for budget in COMPILE_BUDGETS:
        if time.perf_counter() - START > OPT.compile_after:
            print(f"| {name} | torch.compile | activation_memory_budget {budget} | not run: past --compile-after | | |")
            continue
        torch._dynamo.reset()
        functorch_config.activation_memory_budget = budget
        compiled = torch.compile(model)
        try:
            m = measure(model, inputs, loss_fn, targets, compiled)
        except Exception as e:
            print(f"| {name} | torch.compile | activation_memory_budget {budget} | FAILED: {type(e).__name__}: "
                  f"{str(e)[:300]} | | |", flush=True)
            continue
        row(name, "torch.compile", f"activation_memory_budget {budget}", m)
    torch._dynamo.reset()


def ration_rows(name, model, inputs, loss_fn, targets):
    graph = ration_torch.export(model, inputs, loss_fn)
    for setting in RATION_PLANS:
        budget, strategy = (None, setting) if setting == "checkpoint-layers" else (setting, None)
        try:
            if budget == "smallest":  # as ration names it when asked for one byte
                try:
                    ration_torch.plan(graph, device=DEVICE, budget=1, time_limit=OPT.plan_time_limit)
                except ration_torch.PlanError as e:
                    least = re.search(r"the smallest budget planned is (\d+) bytes", str(e))
                    if not least:
                        raise
                    budget = int(least.group(1))
                    setting = f"smallest, {budget / MiB:.1f} MiB"
            plan = ration_torch.plan(graph, device=DEVICE, budget=budget, strategy=strategy,
                                     time_limit=OPT.plan_time_limit)
        except ration_torch.PlanError as e:
            print(f"| {name} | ration | {setting} | no plan: {e} | | |")
            continue
        by = plan.bytes_by_decision()
        try:
            with ration_torch.apply(model, plan) as run:
                m = measure(model, inputs, loss_fn, targets, run=run)
        except Exception as e:  # a failed row is reported and the next one runs
            print(f"| {name} | ration plan | {setting} | FAILED: {type(e).__name__}: {str(e)[:300]} | | |", flush=True)
            continue
        row(name, "ration plan", f"{setting}: keep {by['keep'] / MiB:.1f}, recompute {by['recompute'] / MiB:.1f}, "
            f"offload {by['offload'] / MiB:.1f} MiB", m)


print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if OPT.cuda else 'the CPU'}, "
      f"{torch.get_num_threads()} threads, {STEPS} steps after a warm-up one, load {os.getloadavg()[0]:.1f}")
print("| model | method | setting | saved MiB | peak MiB | step ms |")
print("|---|---|---|---|---|---|")
built = {}
for name in MODELS:
    built[name] = model, inputs, loss_fn, targets = build(name)
    row(name, "eager", "-", measure(model, inputs, loss_fn, targets))
    blocks = blocks_of(model)
    plain = [b.forward for b in blocks]
    for b, f in zip(blocks, plain):
        b.forward = lambda *a, _f=f: ckpt.checkpoint(_f, *a, use_reentrant=False)
    row(name, "torch.utils.checkpoint", f"every block ({len(blocks)})", measure(model, inputs, loss_fn, targets))
    for b, f in zip(blocks, plain):
        b.forward = f
    ration_rows(name, model, inputs, loss_fn, targets)
for name in MODELS:  # last: torch.compile's first compile of a model can take a minute
    compile_rows(name, *built[name])
