#!/usr/bin/env python3
"""gen_graph.py - training graphs (ration-graph/1) of structures the planner
was not tuned on, for tests and bench/: a forward pass of the chosen shape,
its backward pass derived op by op (each backward op reads its forward op's
inputs and its outputs' gradients; a tensor read by several ops gets its
gradient accumulated along a chain of partial sums, so every activation has
one producer) and an AdamW update per parameter.

Structures:
  chain   a plain chain of blocks (norm, matmul, act)
  skips   a chain with long skips: block i also reads block i - span's output
  encdec  an encoder, then a decoder whose every block cross-attends to the
          encoder's output (one tensor read by every decoder block)
  cond    DiT-like: a conditioning tensor (adaLN) read by every block's
          modulation, whose shift/scale/gate outputs feed the block
  fanout  every block's input read by `width` parallel branches, joined by
          one op (a tensor with many consumers re-run at the same op)
  dag     a random layered DAG: each op reads 1-3 earlier tensors of the
          last few layers (seeded, so the same arguments give the same file)

  python3 bench/gen_graph.py STRUCTURE [--layers N] [--dim D] [--width W]
      [--seed S] [--span K] -o FILE
Sizes come from --dim (activation elements are dim * 1024 f32 values, some
ops widen them 4x); flops follow from the sizes, so op times vary.
"""
import argparse
import json
import random


class Builder:
    def __init__(self, name, dim, rng):
        self.name, self.dim, self.rng = name, dim, rng
        self.tensors, self.ops, self.params = [], [], []
        self.size = {}
        self.forward = []  # (op index) in order

    def tensor(self, name, elems, kind="activation"):
        self.tensors.append({"name": name, "shape": [int(elems)], "dtype": "f32", "kind": kind})
        self.size[name] = int(elems)
        return name

    def param(self, name, elems):
        self.params.append(name)
        return self.tensor(name, elems, "param")

    def op(self, name, typ, inputs, outputs, flops_per_elem=4.0):
        elems = sum(self.size[t] for t in inputs + outputs)
        scale = 0.5 + self.rng.random()  # ops of one type still differ in cost
        self.ops.append({"name": name, "type": typ, "phase": "forward", "inputs": inputs, "outputs": outputs,
                         "flops": int(elems * flops_per_elem * scale * 64), "bytes": int(elems * 4), "workspace": 0})
        self.forward.append(len(self.ops) - 1)

    def finish(self, loss_input):
        self.tensor("targets", self.dim, "input")
        self.tensor("loss", 1)
        self.op("loss", "crossentropy", [loss_input, "targets"], ["loss"], 2.0)
        grad = {"loss": None}  # tensor -> name of its (latest partial) gradient
        nparts = {}
        kinds = {t["name"]: t["kind"] for t in self.tensors}
        for i in reversed(self.forward):
            f = self.ops[i]
            ins = [t for t in dict.fromkeys(f["inputs"])]
            reads = [grad[t] for t in f["outputs"] if grad.get(t)] + ins
            outs = []
            for t in ins:
                if kinds[t] == "param":  # grads accumulate in place (a param read twice)
                    g = "grad." + t
                    if g in self.size:
                        reads.append(g)
                    else:
                        self.tensor(g, self.size[t], "grad")
                    grad[t] = g
                    outs.append(g)
                elif kinds[t] == "activation":
                    n = nparts.get(t, 0)
                    nparts[t] = n + 1
                    g = "grad.%s.%d" % (t, n)
                    self.tensor(g, self.size[t])
                    if grad.get(t):
                        reads.append(grad[t])
                    grad[t] = g
                    outs.append(g)
            reads = list(dict.fromkeys(reads))
            elems = sum(self.size[t] for t in reads + outs)
            self.ops.append({"name": "bwd." + f["name"], "type": f["type"] + "_backward", "phase": "backward",
                             "inputs": reads, "outputs": outs, "flops": 2 * f["flops"],
                             "bytes": int(elems * 4), "workspace": 0})
        for p in self.params:
            for s in ("m", "v"):
                self.tensor("adam.%s.%s" % (s, p), self.size[p], "optstate")
            g = grad.get(p)
            if not g:
                continue
            self.ops.append({"name": "adamw." + p, "type": "adamw", "phase": "optimizer",
                             "inputs": [p, g, "adam.m." + p, "adam.v." + p],
                             "outputs": [p, "adam.m." + p, "adam.v." + p], "flops": self.size[p] * 10,
                             "bytes": self.size[p] * 28, "workspace": 0})
        return {"format": "ration-graph/1", "name": self.name, "tensors": self.tensors, "ops": self.ops,
                "outputs": ["loss"]}


def block(b, tag, x, extra=(), widen=True):
    """norm -> matmul (4x) -> act -> matmul back; extra tensors join the first matmul."""
    d = b.dim * 1024
    w1, w2 = b.param(tag + ".w1", b.dim * 4), b.param(tag + ".w2", b.dim * 4)
    n = b.tensor(tag + ".norm", d)
    b.op(tag + ".norm", "layernorm", [x], [n], 6)
    h = b.tensor(tag + ".h", d * (4 if widen else 1))
    b.op(tag + ".fc1", "matmul", [n, w1] + list(extra), [h], 32)
    a = b.tensor(tag + ".a", d * (4 if widen else 1))
    b.op(tag + ".act", "gelu", [h], [a], 8)
    y = b.tensor(tag + ".y", d)
    b.op(tag + ".fc2", "matmul", [a, w2, x], [y], 32)
    return y


def build(args):
    rng = random.Random(args.seed)
    b = Builder("%s-%d" % (args.structure, args.layers), args.dim, rng)
    d = args.dim * 1024
    x = b.tensor("x", d, "input")
    emb = b.param("emb", args.dim)
    h = b.tensor("h0", d)
    b.op("embed", "embed", [x, emb], [h], 2)
    s = args.structure
    if s == "chain":
        for i in range(args.layers):
            h = block(b, "l%d" % i, h)
    elif s == "skips":
        outs = [h]
        for i in range(args.layers):
            extra = [outs[-args.span]] if len(outs) >= args.span else []
            h = block(b, "l%d" % i, h, extra)
            outs.append(h)
    elif s == "encdec":
        enc = h
        for i in range(args.layers // 2):
            enc = block(b, "enc%d" % i, enc)
        mem = b.tensor("memory", d)
        b.op("enc.out", "layernorm", [enc], [mem], 6)
        y = b.tensor("dec.in", d)
        b.op("dec.embed", "embed", [x, emb], [y], 2)
        for i in range(args.layers - args.layers // 2):
            wk = b.param("dec%d.wkv" % i, args.dim)
            kv = b.tensor("dec%d.kv" % i, d)
            b.op("dec%d.kv" % i, "matmul", [mem, wk], [kv], 32)
            att = b.tensor("dec%d.cross" % i, d)
            b.op("dec%d.cross" % i, "attention", [y, kv], [att], 48)
            y = block(b, "dec%d" % i, att)
        h = y
    elif s == "cond":
        c0 = b.tensor("cond.in", args.dim * 64, "input")
        wc = b.param("cond.w", args.dim)
        c = b.tensor("cond", args.dim * 64)
        b.op("cond.embed", "matmul", [c0, wc], [c], 16)
        for i in range(args.layers):
            wm = b.param("l%d.mod.w" % i, args.dim)
            mods = [b.tensor("l%d.%s" % (i, k), args.dim * 64) for k in ("shift", "scale", "gate")]
            b.op("l%d.mod" % i, "matmul", [c, wm], mods, 16)
            m = b.tensor("l%d.modulated" % i, d)
            b.op("l%d.adaln" % i, "modulate", [h, mods[0], mods[1]], [m], 4)
            y = block(b, "l%d" % i, m, widen=True)
            g = b.tensor("l%d.out" % i, d)
            b.op("l%d.gate" % i, "gate", [y, mods[2], h], [g], 3)
            h = g
    elif s == "fanout":
        for i in range(args.layers):
            branches = []
            for j in range(args.width):
                w = b.param("l%d.b%d.w" % (i, j), args.dim)
                o = b.tensor("l%d.b%d" % (i, j), d // args.width)
                b.op("l%d.b%d" % (i, j), "matmul", [h, w], [o], 16)
                branches.append(o)
            j = b.tensor("l%d.join" % i, d)
            b.op("l%d.join" % i, "concat", branches + [h], [j], 2)
            h = j
    elif s == "dag":
        layers = [[h]]
        for i in range(args.layers):
            layer = []
            for j in range(1 + rng.randrange(3)):
                pool = [t for L in layers[-args.span:] for t in L]
                ins = rng.sample(pool, min(len(pool), 1 + rng.randrange(3)))
                w = b.param("n%d.%d.w" % (i, j), args.dim)
                o = b.tensor("n%d.%d" % (i, j), d * rng.choice((1, 1, 2, 4)) // 2)
                b.op("n%d.%d" % (i, j), rng.choice(("matmul", "gelu", "layernorm", "attention")), ins + [w], [o],
                     rng.choice((2, 8, 32)))
                layer.append(o)
            layers.append(layer)
        last = [t for L in layers[-2:] for t in L]
        h = b.tensor("dag.out", d)
        b.op("dag.out", "sum", last, [h], 2)
    else:
        raise SystemExit("gen_graph.py: unknown structure %r" % s)
    return b.finish(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("structure")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--span", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", required=True)
    args = ap.parse_args()
    g = build(args)
    with open(args.o, "w") as f:
        json.dump(g, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
