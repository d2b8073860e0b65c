"""torch_model.py - one training step of a ration graph in PyTorch eager, as
a user would write it (F.linear, F.layer_norm, scaled_dot_product_attention,
torch.optim.AdamW), for the side-by-side benchmark bench/bench_torch.sh.
The graph's forward ops are walked in order, so the model, batch and shapes
are the ones ration trains. Prints "median_ms X" over the timed steps.
Usage: torch_model.py GRAPH.json THREADS STEPS"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def main():
    graph, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    g = json.load(open(graph))
    tensors = {t["name"]: t for t in g["tensors"]}
    fwd = [op for op in g["ops"] if op["phase"] == "forward"]
    params = {}
    for name, t in tensors.items():
        if t["kind"] == "param":
            p = torch.randn(t["shape"]) * 0.02
            if name.endswith(".w") and len(t["shape"]) == 1:
                p = torch.ones(t["shape"])
            params[name] = p.requires_grad_()
    attrs = {}
    for op in g["ops"]:
        attrs[op["name"]] = op.get("attrs", {})
    opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    tok_t = tensors[fwd[0]["inputs"][0]]
    B, T = tok_t["shape"]
    ce = next(op for op in fwd if op["type"] == "crossentropy")
    V = tensors[ce["inputs"][0]]["shape"][-1]
    rope_cache = {}

    def rope(x, a):
        nh, kvh, theta = int(a["heads"]), int(a["kv_heads"]), a.get("theta", 10000.0)
        row = x.shape[-1]
        hd = row // (nh + 2 * kvh)
        if hd not in rope_cache:
            i = torch.arange(hd // 2, dtype=torch.float64)
            ang = torch.arange(T, dtype=torch.float64)[:, None] * theta ** (-2.0 * i / hd)
            rope_cache[hd] = (torch.cos(ang).float()[:, None, :], torch.sin(ang).float()[:, None, :])
        c, s = rope_cache[hd]
        r = x[..., :(nh + kvh) * hd].reshape(B, T, nh + kvh, hd // 2, 2)
        x0, x1 = r[..., 0], r[..., 1]
        out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).reshape(B, T, (nh + kvh) * hd)
        return torch.cat([out, x[..., (nh + kvh) * hd:]], dim=-1)

    def attention(qkv, a):
        nh, kvh = int(a["heads"]), int(a["kv_heads"])
        hd = qkv.shape[-1] // (nh + 2 * kvh)
        q = qkv[..., :nh * hd].reshape(B, T, nh, hd).transpose(1, 2)
        k = qkv[..., nh * hd:(nh + kvh) * hd].reshape(B, T, kvh, hd).transpose(1, 2)
        v = qkv[..., (nh + kvh) * hd:].reshape(B, T, kvh, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nh != kvh)
        return y.transpose(1, 2).reshape(B, T, nh * hd)

    def step(tokens, targets):
        val = dict(params)
        val[fwd[0]["inputs"][0]] = tokens
        val[ce["inputs"][1]] = targets
        loss = None
        for op in fwd:
            ins = [val[n] for n in op["inputs"]]
            a, ty = attrs[op["name"]], op["type"]
            if ty == "encoder":
                y = ins[1][ins[0]] + ins[2][:T]
            elif ty == "embedding":
                y = ins[1][ins[0]]
            elif ty == "layernorm":
                y = F.layer_norm(ins[0], (ins[0].shape[-1],), ins[1], ins[2], a.get("eps", 1e-5))
            elif ty == "rmsnorm":
                x = ins[0]
                y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + a.get("eps", 1e-5)) * ins[1]
            elif ty == "matmul":
                y = F.linear(ins[0], ins[1], ins[2] if len(ins) > 2 else None)
            elif ty == "attention":
                y = attention(ins[0], a)
            elif ty == "rope":
                y = rope(ins[0], a)
            elif ty == "gelu":
                y = F.gelu(ins[0], approximate="tanh")
            elif ty == "swiglu":
                gt, u = ins[0].chunk(2, dim=-1)
                y = F.silu(gt) * u
            elif ty == "add":
                y = ins[0] + ins[1]
            elif ty == "crossentropy":
                loss = F.cross_entropy(ins[0].reshape(-1, ins[0].shape[-1]), ins[1].reshape(-1))
                continue
            else:
                raise ValueError("no eager op for " + ty)
            val[op["outputs"][0]] = y
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    times = []
    for i in range(steps + 1):
        tokens = torch.randint(0, V, (B, T))
        targets = torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        step(tokens, targets)
        if i > 0:  # the first step runs on cold caches, as ration's first
            times.append(time.perf_counter() - t0)
    print("median_ms %.3f" % (1e3 * statistics.median(times)))


if __name__ == "__main__":
    main()
