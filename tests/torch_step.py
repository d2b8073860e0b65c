"""torch_step.py - one whole training step of a graph, recomputed with
PyTorch (float64 autograd) from the initial weights and batch that
tests/step_dump.c dumped after running the emitted schedule on libration's
CPU backend. Compares the loss, every gradient, the AdamW update of every
trained param and its moments, every EMA, and that frozen params (LoRA's
base weights) did not move. Forward op semantics come from torch_kernels.py (the
per-kernel cross-check); backward is torch's autograd, so none of our
backward kernels or the executor's schedule is trusted.
Prints one "PASS what detail" / "FAIL what detail" line per check.
Usage: torch_step.py GRAPH.json DUMP_DIR"""
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


def main():
    if len(sys.argv) != 3:
        print("usage: torch_step.py GRAPH.json DUMP_DIR", file=sys.stderr)
        return 2
    g = json.load(open(sys.argv[1]))
    d = load(sys.argv[2])
    torch.set_default_dtype(torch.float64)
    vals = {}
    for (name, when), v in d.items():
        if when == "before":
            vals[name] = v.clone().requires_grad_(v.is_floating_point())
    shapes = {t["name"]: t["shape"] for t in g["tensors"]}
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
    loss_name = g["outputs"][0]
    loss = vals[loss_name]
    loss.backward()
    ok = compare("loss", d[(loss_name, "after")], loss)
    nparams = 0
    for op in g["ops"]:
        if op["type"] != "adamw":
            continue
        a = op.get("attrs", {})
        lr, b1, b2 = a.get("lr", 1e-3), a.get("beta1", 0.9), a.get("beta2", 0.999)
        eps, wd = a.get("eps", 1e-8), a.get("weight_decay", 0.01)
        p, gname, m, v = op["inputs"][:4]
        master = op["inputs"][4] if len(op["inputs"]) > 4 else None
        grad = vals[p].grad
        if grad is None:
            grad = torch.zeros_like(vals[p])
        ok &= compare("grad " + gname, d[(gname, "after")], grad)
        # AdamW step t = 1 (torch.optim.AdamW's update, decoupled decay).
        m1 = (1 - b1) * grad
        v1 = (1 - b2) * grad * grad
        mhat, vhat = m1 / (1 - b1), v1 / (1 - b2)
        w0 = d[(master or p, "before")]
        w1 = w0 - lr * (mhat / (vhat.sqrt() + eps) + wd * w0)
        ok &= compare("adam m " + p, d[(m, "after")], m1)
        ok &= compare("adam v " + p, d[(v, "after")], v1)
        # At t = 1 the update is about lr * sign(grad): where |grad| is near
        # eps, f32 rounding of the grad moves it by up to lr, so allow that
        # for elements whose grad is that small.
        small = (grad.abs() < 1e3 * eps).double() * lr
        ok &= compare("updated " + (master or p), d[(master or p, "after")], w1, extra_atol=small)
        nparams += 1
    for op in g["ops"]:
        if op["type"] != "ema":
            continue
        e, p = op["inputs"]
        dcy = op["attrs"]["decay"]
        # Of our updated param (checked against torch's above): where the
        # update is near eps, f32 rounding moves it by up to lr.
        ok &= compare("ema " + p, d[(e, "after")], dcy * d[(e, "before")] + (1 - dcy) * d[(p, "after")])
    for t in g["tensors"]:
        if t.get("frozen"):
            same = torch.equal(d[(t["name"], "before")], d[(t["name"], "after")])
            print("%s frozen %s unchanged" % ("PASS" if same else "FAIL", t["name"]))
            ok &= same
    print("%s whole step: %d params checked" % ("PASS" if ok and nparams else "FAIL", nparams))
    return 0


if __name__ == "__main__":
    sys.exit(main())
