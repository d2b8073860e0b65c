"""torch_step.py - whole training steps of a graph (one, or STEPS on the
same batch), recomputed with PyTorch (float64 autograd) from the initial
weights and batch that tests/step_dump.c dumped after running the emitted
schedule on libration's
CPU backend. Compares the loss, every gradient, the AdamW update of every
trained param and its moments, every EMA, and that frozen params (LoRA's
base weights) did not move. Forward op semantics come from torch_kernels.py (the
per-kernel cross-check); backward is torch's autograd, so none of our
backward kernels or the executor's schedule is trusted.
Prints one "PASS what detail" / "FAIL what detail" line per check.
Usage: torch_step.py GRAPH.json DUMP_DIR [STEPS]"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_kernels import forward  # noqa: E402

# f32 arithmetic against f64 across a whole network: elementwise
# |ours - torch| <= ATOL * max|torch| + RTOL * |torch|.
RTOL, ATOL = 2e-3, 2e-4


def load(d):
    vals = {}
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            w = line.split()
            _, name, when, dt, fn, rank = w[:6]
            shape = [int(s) for s in w[6:6 + int(rank)]]
            path = os.path.join(d, fn)
            if dt == "f32":
                a = np.fromfile(path, dtype=np.float32).astype(np.float64)
            elif dt == "bf16":
                a = (np.fromfile(path, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
            elif dt == "i32":
                a = np.fromfile(path, dtype=np.int32).astype(np.int64)
            elif dt == "u8":
                continue  # opaque runtime bytes (ration.runtime: the GPU backend's workspace), no model tensor
            else:
                raise ValueError("dtype " + dt)
            vals[(name, when)] = torch.from_numpy(a.reshape(shape))
    return vals


def compare(what, ours, ref, extra_atol=0.0):
    ref = ref.detach().double()
    ours = ours.double()
    if ours.shape != ref.shape:
        print("FAIL %s: shape %s, torch %s" % (what, list(ours.shape), list(ref.shape)))
        return False
    scale = ref.abs().max().item()
    tol = ATOL * scale + RTOL * ref.abs() + extra_atol
    err = (ours - ref).abs()
    bad = int((err > tol).sum().item())
    worst = (err / (scale + 1e-30)).max().item()
    ok = bad == 0 and bool(torch.isfinite(ours).all())
    print("%s %s: max err %.2e of max|torch| %.2e%s" % ("PASS" if ok else "FAIL", what, worst * scale, scale,
                                                        "" if ok else ", %d elements out of tolerance" % bad))
    return ok


def forward_loss(g, vals, shapes):
    """Runs the graph's forward ops on vals (filling it) and returns the loss."""
    for op in g["ops"]:
        if op["phase"] != "forward":
            continue
        ins = [vals[n] for n in op["inputs"]]
        if op["type"] == "add":
            outs = [ins[0] + ins[1]]
        elif op["type"] == "slice":  # a block of rows: elements [offset, offset + numel(y)) of x
            shape = shapes[op["outputs"][0]]
            off = int(op["attrs"]["offset"])
            outs = [ins[0].reshape(-1)[off:off + int(np.prod(shape))].reshape(shape)]
        else:
            outs = forward(op["type"], ins, op.get("attrs", {}))
        for n, o in zip(op["outputs"], outs):
            vals[n] = o
    return vals[g["outputs"][0]]


def main():
    if len(sys.argv) not in (3, 4):
        print("usage: torch_step.py GRAPH.json DUMP_DIR [STEPS]", file=sys.stderr)
        return 2
    g = json.load(open(sys.argv[1]))
    d = load(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) == 4 else 1
    torch.set_default_dtype(torch.float64)
    shapes = {t["name"]: t["shape"] for t in g["tensors"]}
    # Every resident value (params, AdamW state, EMAs, inputs) as the steps
    # leave it; each step the same batch, as tests/step_dump.c runs them.
    state = {name: v.clone() for (name, when), v in d.items() if when == "before"}
    small = {}
    for t in range(1, steps + 1):
        vals = {n: v.clone().requires_grad_(v.is_floating_point()) for n, v in state.items()}
        loss = forward_loss(g, vals, shapes)
        loss.backward()
        grads = {}
        with torch.no_grad():
            for op in g["ops"]:
                a = op.get("attrs", {})
                if op["type"] == "adamw":
                    # torch.optim.AdamW's update at step t, decoupled decay.
                    lr, b1, b2 = a.get("lr", 1e-3), a.get("beta1", 0.9), a.get("beta2", 0.999)
                    eps, wd = a.get("eps", 1e-8), a.get("weight_decay", 0.01)
                    p, gname, m, v = op["inputs"][:4]
                    w = op["inputs"][4] if len(op["inputs"]) > 4 else p
                    grad = vals[p].grad if vals[p].grad is not None else torch.zeros_like(vals[p])
                    grads[gname] = grad
                    state[m] = b1 * state[m] + (1 - b1) * grad
                    state[v] = b2 * state[v] + (1 - b2) * grad * grad
                    mhat, vhat = state[m] / (1 - b1 ** t), state[v] / (1 - b2 ** t)
                    state[w] = state[w] - lr * (mhat / (vhat.sqrt() + eps) + wd * state[w])
                    # Where |grad| is near eps the update is about lr * sign(grad), and
                    # f32 rounding of the grad moves it by up to lr: allow that, per step.
                    small[w] = small.get(w, 0) + (grad.abs() < 1e3 * eps).double() * lr
                elif op["type"] == "ema":
                    e, p = op["inputs"]
                    state[e] = a["decay"] * state[e] + (1 - a["decay"]) * state[p]
                    small[e] = small.get(p, 0)
    ok = compare("loss", d[(g["outputs"][0], "after")], loss)
    nparams = 0
    for op in g["ops"]:
        if op["type"] == "adamw":
            p, gname, m, v = op["inputs"][:4]
            w = op["inputs"][4] if len(op["inputs"]) > 4 else p
            ok &= compare("grad " + gname, d[(gname, "after")], grads[gname])
            ok &= compare("adam m " + p, d[(m, "after")], state[m])
            ok &= compare("adam v " + p, d[(v, "after")], state[v])
            ok &= compare("updated " + w, d[(w, "after")], state[w], extra_atol=small[w])
            nparams += 1
        elif op["type"] == "ema":
            e = op["inputs"][0]
            ok &= compare("ema " + e, d[(e, "after")], state[e], extra_atol=small[e])
    for t in g["tensors"]:
        if t.get("frozen"):
            same = torch.equal(d[(t["name"], "before")], d[(t["name"], "after")])
            print("%s frozen %s unchanged" % ("PASS" if same else "FAIL", t["name"]))
            ok &= same
    print("%s whole step%s: %d params checked" % ("PASS" if ok and nparams else "FAIL",
                                                  " x%d" % steps if steps > 1 else "", nparams))
    return 0


if __name__ == "__main__":
    sys.exit(main())
