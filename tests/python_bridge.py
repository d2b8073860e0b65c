"""The ration_torch bridge on GPT-2, Llama and a DiT built in PyTorch
(tests/torch_models.py): export, plan at several budgets and strategies,
apply each plan and compare with plain training. Prints one PASS/FAIL line
per check; tests/t_python_bridge.sh counts them.

Checks, per model:
- the graph's stashed bytes (`ration info`) equal the bytes of the distinct
  storages autograd saves in a plain step (params and inputs aside);
- the checkpoint-layers plan of the exported graph keeps exactly the bytes
  per-block checkpointing holds (the blocks' inputs and what autograd saves
  outside the blocks): export names the blocks' ops as layers;
- per plan: the grads of a step with the plan applied equal plain
  training's bitwise (on the CPU a recomputed tensor comes from the same
  kernel on the same inputs, and an offloaded one is a copy); the device
  bytes the hooks held for backward equal the bytes of the tensors the plan
  keeps, and the host bytes those it offloads; the step re-runs exactly the
  forward ops the plan re-runs, each once (ration's schedule family); every
  offloaded tensor's copy back starts right after the backward op that the
  plan's prefetch step follows, on a thread other than the step's;
- a changed input shape and a changed model are refused with PlanMismatch.
"""
import subprocess
import sys
import threading

import torch

import ration_torch
import torch_models
from ration_torch._trace import storage_key, storage_nbytes

RATION = sys.argv[1]
failed = 0


def check(ok, what, detail=""):
    global failed
    print(("PASS " if ok else "FAIL ") + what + ("" if ok else f": {detail}"))
    failed += not ok


def plain_saved_bytes(model, inputs, loss_fn, targets):
    """Bytes of the distinct storages autograd saves in a plain step, those of
    params, buffers, inputs and targets aside (they are held anyway), and Python
    numbers autograd wraps as 0-dim doubles."""
    resident = {storage_key(t) for t in list(model.parameters()) + list(model.buffers()) + list(inputs) + list(targets)}
    saved = {}

    def pack(t):
        if t.numel() and t.dtype != torch.float64 and storage_key(t) not in resident:
            saved[storage_key(t)] = storage_nbytes(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(*inputs))
    del loss
    return sum(saved.values())


def checkpointed_bytes(model, inputs, loss_fn, targets, blocks):
    """Bytes of the distinct storages per-block torch.utils.checkpoint holds
    for backward: each block's tensor inputs, and what autograd saves outside
    the blocks (params, buffers, inputs and targets aside, as above). Counted
    by its definition, with hooks: torch 1.13's checkpoint holds a block's
    inputs in a closure that no saved-tensor hook sees."""
    resident = {storage_key(t) for t in list(model.parameters()) + list(model.buffers()) + list(inputs) + list(targets)}
    held, depth = {}, [0]

    def hold(t):
        if isinstance(t, torch.Tensor) and t.numel() and t.dtype != torch.float64 and storage_key(t) not in resident:
            held[storage_key(t)] = storage_nbytes(t)

    def enter(mod, args):
        if depth[0] == 0:
            for a in args:
                hold(a)
        depth[0] += 1

    def leave(mod, args, out):
        depth[0] -= 1

    def pack(t):
        if depth[0] == 0:
            hold(t)
        return t
    handles = [h for b in blocks for h in (b.register_forward_pre_hook(enter), b.register_forward_hook(leave))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = loss_fn(model(*inputs))
    finally:
        for h in handles:
            h.remove()
    del loss
    return sum(held.values())


def planned_reruns(graph, plan):
    """The forward ops a plan re-runs in ration's family, from the graph: the
    producers of the tensors it recomputes and, in turn, of the activations
    they read that it neither keeps nor offloads."""
    producer = {n: op for op in graph.data["ops"] if op["phase"] == "forward" for n in op["outputs"]}
    stays = {n for n, d in plan.decisions.items() if d != "recompute"}
    todo = [n for n, d in plan.decisions.items() if d == "recompute"]
    rerun = set()
    while todo:
        op = producer[todo.pop()]
        if op["name"] in rerun:
            continue
        rerun.add(op["name"])
        todo += [n for n in op["inputs"] if "kind" not in graph.tensors[n] and n not in stays]
    return rerun


def planned_prefetches(graph, plan):
    """Offloaded tensor -> how many backward ops run before the plan's
    prefetch step of it, less one (the op it starts after; -1: none)."""
    backward = {op["name"] for op in graph.data["ops"] if op["phase"] == "backward"}
    tensor = {b["id"]: b["tensor"] for b in plan.data["buffers"]}
    ran, out = 0, {}
    for st in plan.data["steps"]:
        if st["do"] == "compute" and not st.get("recompute"):
            ran += st["op"] in backward
        elif st["do"] == "prefetch" and plan.decisions.get(tensor[st["to"]]) == "offload":
            out[tensor[st["to"]]] = ran - 1
    return out


def grads_of_step(model, inputs, loss_fn, plan=None):
    model.zero_grad(set_to_none=True)
    if plan is None:
        loss_fn(model(*inputs)).backward()
        run = None
    else:
        with ration_torch.apply(model, plan) as run:
            loss_fn(model(*inputs)).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}, run


def stashed_bytes_by_ration(path):
    out = subprocess.run([RATION, "info", path], capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.strip().startswith("stashed"))
    return int(line.split("(")[-1].split()[0])


# (device, budget, strategy) per model: the baselines, and the ILP at budgets
# below keep-all's peak.
BASELINES = (("cpu", None, "keep-all"), ("cpu", None, "sqrt-n"), ("cpu", None, "checkpoint-layers"),
             ("cpu", None, "offload-all"))
PLANS = {
    "gpt2": BASELINES + (("cpu", "90%", None), ("cpu", "95%", None), ("h100-sxm-80g", "99%", None)),
    "llama": BASELINES + (("cpu", "98%", None), ("cpu", "90%", None)),
    "dit": BASELINES + (("cpu", "90%", None), ("cpu", "80%", None)),
}


BLOCKS = {"gpt2": "h", "llama": "layers", "dit": "blocks"}


def run_model(name):
    model, inputs, loss_fn, targets = torch_models.build(name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    graph = ration_torch.export(model, inputs, loss_fn, optimizer=opt)
    gpath = f"{sys.argv[2]}/{name}.json"
    graph.save(gpath)
    plain = plain_saved_bytes(model, inputs, loss_fn, targets)
    by_ration = stashed_bytes_by_ration(gpath)
    check(plain == by_ration == graph.stashed_bytes(),
          f"{name}: keep-all stashed bytes of the graph ({by_ration}, {len(graph.stashed())} tensors) "
          f"= bytes autograd saves unplanned ({plain})", f"python {graph.stashed_bytes()}")

    if name == "gpt2":
        timed = ration_torch.export(model, inputs, loss_fn, optimizer=opt, profile=True)
        ops = timed.data["ops"]
        p = ration_torch.plan(timed, device="cpu", strategy="keep-all")
        check(all(op.get("time_us", -1) >= 0 for op in ops) and [o["name"] for o in ops] ==
              [o["name"] for o in graph.data["ops"]] and p.data["predicted"]["step_seconds"] > 0,
              f"{name}: export(profile=True) gives every op of the same graph its measured time_us "
              f"({sum(o['time_us'] for o in ops) / 1e3:.1f} ms in all), and ration plans with them")

    layers = ration_torch.plan(graph, device="cpu", strategy="checkpoint-layers").bytes_by_decision()["keep"]
    blocks = getattr(model, BLOCKS[name])
    per_block = checkpointed_bytes(model, inputs, loss_fn, targets, blocks)
    check(layers == per_block, f"{name}: checkpoint-layers keeps {layers} B = what checkpointing each of the "
          f"{len(blocks)} blocks holds ({per_block} B)")

    ref, _ = grads_of_step(model, inputs, loss_fn)
    for device, budget, strategy in PLANS[name]:
        label = f"{name}: {strategy or 'ilp'}{' at ' + budget if budget else ''} on {device}"
        try:
            plan = ration_torch.plan(graph, device=device, budget=budget, strategy=strategy)
        except ration_torch.PlanError as e:
            check(False, label, str(e))
            continue
        grads, run = grads_of_step(model, inputs, loss_fn, plan)
        by = plan.bytes_by_decision()
        counts = {d: sum(v == d for v in plan.decisions.values()) for d in by}
        same = all(torch.equal(grads[n], ref[n]) for n in ref)
        step = run.last_step
        reruns = len(planned_reruns(graph, plan))
        prefetches = planned_prefetches(graph, plan)
        ahead = (step.prefetched == prefetches and len(prefetches) == counts["offload"]
                 and (not prefetches or (step.copy_threads and threading.get_ident() not in step.copy_threads)))
        check(same and step.saved_bytes == by["keep"] and step.offloaded_bytes == by["offload"]
              and step.replays == reruns and ahead,
              f"{label}: keep/recompute/offload {counts['keep']}/{counts['recompute']}/{counts['offload']}, "
              f"grads bitwise equal to plain training, saved {step.saved_bytes} B = plan's kept bytes, "
              f"offloaded {step.offloaded_bytes} B = plan's, {step.replays} op re-runs = the {reruns} ops the "
              f"plan re-runs" + (f", {len(prefetches)} copies back started at the plan's prefetches, on another "
                                    f"thread" if prefetches else ""),
              f"grads equal {same}, saved {step.saved_bytes} vs {by['keep']}, "
              f"offloaded {step.offloaded_bytes} vs {by['offload']}, re-runs {step.replays} vs {reruns}, "
              f"copies back started after {sorted(step.prefetched.items())}, planned {sorted(prefetches.items())}, "
              f"on threads {step.copy_threads}")
    return model, inputs, loss_fn, plan


def refused(what, fn, want):
    try:
        fn()
        check(False, what, "no error")
    except RuntimeError as e:
        # raised in a saved-tensor hook, torch 1.13 re-raises a PlanMismatch
        # as a RuntimeError that names it
        named = isinstance(e, ration_torch.PlanMismatch) or str(e).startswith("PlanMismatch: ")
        msg = str(e).split("\n")[0]
        check(named and want in msg, f"{what}: {msg}", f"not a PlanMismatch naming {want!r}: {msg}")


def refusals(model, inputs, loss_fn, plan):
    def step(m, x):
        with ration_torch.apply(m, plan):
            loss_fn(m(*x)).backward()
    refused("a batch of another shape is refused", lambda: step(model, tuple(torch.cat([x, x]) for x in inputs)),
            "input.0")
    shorter, _, _, _ = torch_models.build("gpt2")
    shorter.h = shorter.h[:1]
    refused("a model with a layer fewer is refused", lambda: ration_torch.apply(shorter, plan), "h.1.")
    def step_more(m, x):
        with ration_torch.apply(m, plan):
            (loss_fn(m(*x)) * 2).backward()
    refused("a step with an op more is refused", lambda: step_more(model, inputs), "runs on after")
    # the same parameters, another computation: 2 heads where the plan has 4
    other, _, _, _ = torch_models.build("gpt2")
    other.h[0].heads = 2
    refused("a model computing otherwise with the same parameters is refused", lambda: step(other, inputs),
            "forward op")


def main():
    for name in ("gpt2", "llama", "dit"):
        last = run_model(name)
        if name == "gpt2":
            refusals(*last)
    print("PASS whole run" if not failed else f"FAIL whole run: {failed} failed")
    sys.exit(1 if failed else 0)


main()
