"""torch_kernels.py - recomputes every kernel case that test_kernels dumped
(inputs, outputs, dy, gradients) with PyTorch autograd in float64 and
compares. Prints one "PASS name detail" or "FAIL name detail" line per case
for tests/t_kernels_torch.sh. Usage: torch_kernels.py DUMP_DIR"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

DT = {"f32": np.float32, "i32": np.int32}
RTOL, ATOL = 1e-4, 2e-5


def load_manifest(d):
    cases, order = {}, []
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            w = line.split()
            if w[0] == "case":
                attrs = {k: float(v) for k, v in (a.split("=") for a in w[4:])}
                cases[w[1]] = {"fwd": w[2], "bwd": w[3], "attrs": attrs, "t": {}}
                order.append(w[1])
            else:
                _, name, role, idx, dt, fn, rank = w[:7]
                shape = [int(s) for s in w[7:7 + int(rank)]]
                a = np.fromfile(os.path.join(d, fn), dtype=DT[dt]).reshape(shape)
                cases[name]["t"][(role, int(idx))] = torch.from_numpy(a.astype(np.int64 if dt == "i32" else np.float64))
    return [(n, cases[n]) for n in order]


def split_qkv(qkv, nh, kvh):
    B, T, row = qkv.shape
    hd = row // (nh + 2 * kvh)
    q = qkv[..., :nh * hd].reshape(B, T, nh, hd).transpose(1, 2)
    k = qkv[..., nh * hd:(nh + kvh) * hd].reshape(B, T, kvh, hd).transpose(1, 2)
    v = qkv[..., (nh + kvh) * hd:].reshape(B, T, kvh, hd).transpose(1, 2)
    return q, k, v, hd


def attention(qkv, a):
    nh, kvh = int(a["heads"]), int(a["kv_heads"])
    q, k, v, hd = split_qkv(qkv, nh, kvh)
    k = k.repeat_interleave(nh // kvh, dim=1)  # query head h reads kv head h // (nh/kvh)
    v = v.repeat_interleave(nh // kvh, dim=1)
    T = qkv.shape[1]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    y = torch.softmax(s, dim=-1) @ v
    return [y.transpose(1, 2).reshape(qkv.shape[0], T, nh * hd), lse]


def rope(qkv, a):
    nh, kvh, theta = int(a["heads"]), int(a["kv_heads"]), a["theta"]
    B, T, row = qkv.shape
    hd = row // (nh + 2 * kvh)
    rot = qkv[..., :(nh + kvh) * hd].reshape(B, T, nh + kvh, hd // 2, 2)
    i = torch.arange(hd // 2, dtype=torch.float64)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * theta ** (-2.0 * i / hd)
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
    x0, x1 = rot[..., 0], rot[..., 1]
    out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).reshape(B, T, (nh + kvh) * hd)
    return [torch.cat([out, qkv[..., (nh + kvh) * hd:]], dim=-1)]


def forward(op, ins, a):
    if op in ("encoder", "embedding"):
        x = ins[1][ins[0]]
        if op == "encoder":
            x = x + ins[2][: ins[0].shape[-1]]
        return [x]
    if op == "layernorm":
        x = ins[0]
        eps = a["eps"]
        mean = x.mean(-1)
        rstd = 1.0 / torch.sqrt(x.var(-1, unbiased=False) + eps)
        return [F.layer_norm(x, (x.shape[-1],), ins[1], ins[2], eps), mean, rstd]
    if op == "rmsnorm":
        x = ins[0]
        rstd = 1.0 / torch.sqrt((x * x).mean(-1) + a["eps"])
        return [x * rstd[..., None] * ins[1], rstd]
    if op == "matmul":
        return [F.linear(ins[0], ins[1], ins[2] if len(ins) > 2 else None)]
    if op == "attention":
        return attention(ins[0], a)
    if op == "rope":
        return rope(ins[0], a)
    if op == "gelu":
        return [F.gelu(ins[0], approximate="tanh")]
    if op == "swiglu":
        g, u = ins[0].chunk(2, dim=-1)
        return [F.silu(g) * u]
    if op == "crossentropy":
        lg, tg = ins
        V = int(a.get("vocab", lg.shape[-1]))  # a padded vocabulary's classes
        lg = lg[..., :V]
        loss = F.cross_entropy(lg.reshape(-1, V), tg.reshape(-1), reduction="sum") / a.get("mean_over", tg.numel())
        return [loss.reshape(1), torch.logsumexp(lg, -1)]
    if op == "lora_add":
        # PEFT: result + lora_B(lora_A(x)) * scaling, on columns [offset, offset + W) of the projection.
        y, v = ins
        off, W = int(a.get("offset", 0)), v.shape[-1]
        pad = [off, y.shape[-1] - off - W]
        return [y + F.pad(v * a.get("scale", 1.0), pad)]
    raise ValueError("no torch reference for " + op)


def compare(ours, ref):
    ours, ref = ours.double(), ref.detach().double()
    if ours.shape != ref.shape:
        return math.inf
    bad = (ours - ref).abs() > ATOL + RTOL * ref.abs()
    err = (ours - ref).abs().max().item()
    return err if not bad.any() else -err


def main():
    if len(sys.argv) != 2:
        print("usage: torch_kernels.py DUMP_DIR", file=sys.stderr)
        return 2
    worst = 0.0
    for name, c in load_manifest(sys.argv[1]):
        t = c["t"]
        nin = max(i for r, i in t if r == "in") + 1
        ins = [t[("in", i)].clone() for i in range(nin)]
        for i, x in enumerate(ins):
            if ("grad", i) in t:
                x.requires_grad_(True)
        outs = forward(c["fwd"], ins, c["attrs"])
        errs, msgs = [], []
        for i, r in enumerate(outs):
            e = compare(t[("out", i)], r)
            errs.append(e)
            msgs.append("out%d %.2g" % (i, abs(e)))
        outs[0].backward(t[("dy", 0)])
        for r, i in sorted(k for k in t if k[0] == "grad"):
            want = ins[i].grad + (t[("prefill", i)] if ("prefill", i) in t else 0)
            e = compare(t[("grad", i)], want)
            errs.append(e)
            msgs.append("grad(in%d) %.2g" % (i, abs(e)))
        ok = all(e >= 0 for e in errs)
        worst = max(worst, max(abs(e) for e in errs))
        print("%s %s: %s vs torch f64: max abs err %s" % ("PASS" if ok else "FAIL", name, c["fwd"], ", ".join(msgs)))
    print("worst %.3g" % worst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
