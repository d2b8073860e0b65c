"""export: one training step of a torch.nn.Module as a ration-graph/1 graph."""
import copy
import hashlib
import json

import torch

from ._trace import (ModuleScope, TraceError, Tracer, check_torch_version,
                     register_step_residents, storage_key)


class Graph:
    """A ration-graph/1 graph. `text` is the exact bytes handed to `ration`,
    so `sha256` is the hash a plan made from it records."""

    def __init__(self, data):
        self.data = data
        self.text = json.dumps(data, indent=1, sort_keys=False).encode() + b"\n"
        self.sha256 = hashlib.sha256(self.text).hexdigest()
        self.tensors = {t["name"]: t for t in data["tensors"]}

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            g = cls(json.loads(f.read()))
        return g

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.text)

    def tensor_bytes(self, name):
        t = self.tensors[name]
        n = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "u8": 1}[t["dtype"]]
        for d in t["shape"]:
            n *= d
        return n

    def stashed(self):
        """The activations the planner decides about: produced by a forward
        op and read by a later phase (DESIGN.md)."""
        produced_fwd, read_later = set(), set()
        for op in self.data["ops"]:
            if op["phase"] == "forward":
                produced_fwd.update(n for n in op["outputs"] if self.tensors[n].get("kind", "activation") == "activation")
            else:
                read_later.update(op["inputs"])
        return [t["name"] for t in self.data["tensors"] if t["name"] in produced_fwd & read_later]

    def stashed_bytes(self):
        return sum(self.tensor_bytes(n) for n in self.stashed())


def export(model, example_inputs, loss_fn, optimizer=None, *, name=None, profile=False):
    """Traces one training step, `loss_fn(model(*example_inputs))`, its
    backward and `optimizer.step()`, into a Graph.

    Every tensor is one allocation with its real shape, dtype and bytes;
    each aten op is one graph op of type "aten.<op>", with FLOPs from
    formulas, or with `profile=True` its measured time (time_us) in this
    run. The model, its grads and the optimizer's state are as they were
    when export returns. Raises TraceError for what it cannot trace."""
    check_torch_version()
    if not isinstance(model, torch.nn.Module):
        raise TraceError(f"export needs a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    params = dict(model.named_parameters())
    if not any(p.requires_grad for p in params.values()):
        raise TraceError("the model has no parameter that requires grad: there is no training step to trace")

    with torch.no_grad():
        saved_params = {n: p.detach().clone() for n, p in params.items()}
        saved_buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    saved_grads = {n: p.grad for n, p in params.items()}
    saved_opt = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    try:
        # A first, untraced step creates the optimizer's state and warms
        # up the kernels, so the traced step is the steady state ration
        # plans for (moments exist and are updated in place).
        _step(model, example_inputs, loss_fn, optimizer)
        tracer = Tracer(profile=profile)
        _traced_step(tracer, model, example_inputs, loss_fn, optimizer)
        graph = _graph(tracer, model, optimizer, name or type(model).__name__.lower())
    finally:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved_params[n])
                p.grad = saved_grads[n]
            for n, b in model.named_buffers():
                b.copy_(saved_buffers[n])
        if optimizer is not None:
            optimizer.load_state_dict(saved_opt)
    return graph


def _step(model, inputs, loss_fn, optimizer):
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model(*inputs))
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TraceError(f"loss_fn must return a scalar tensor, got "
                         f"{type(loss).__name__}{list(loss.shape) if isinstance(loss, torch.Tensor) else ''}")
    loss.backward()
    if optimizer is not None:
        optimizer.step()


def _traced_step(tracer, model, inputs, loss_fn, optimizer):
    if optimizer is not None:
        for p, state in optimizer.state.items():
            pname = next((n for n, q in model.named_parameters() if q is p), None)
            for key, v in state.items():
                if isinstance(v, torch.Tensor):
                    tracer.add_resident(v, f"opt.{pname}.{key}", "optstate")

    def on_root_forward(args):
        register_step_residents(tracer, model, args)

    def pack(t):
        name = tracer.name_of(t)
        if name is None or tracer.tensors[name].kind != "activation":
            return _Saved(None, t, tracer)
        tracer.saved.add(name)
        return _Saved(name, t, tracer)

    model.zero_grad(set_to_none=True)
    scope = ModuleScope(model, tracer, on_root_forward)
    try:
        with tracer, torch.autograd.graph.saved_tensors_hooks(pack, _Saved.unpack):
            tracer.phase = "forward"
            loss = loss_fn(model(*inputs))
            tracer.phase = "backward"
            loss.backward()
            tracer.phase = "optimizer"
            if optimizer is not None:
                optimizer.step()
            tracer.phase = None
    finally:
        scope.close()
    # what autograd freed after the last backward op was held to its end
    if tracer.unpacked and tracer.ops:
        last = next(op for op in reversed(tracer.ops) if op.phase == "backward")
        last.inputs += [n for n in tracer.unpacked if n not in last.inputs]
        tracer.unpacked = []
    if tracer.counts["backward"] == 0:
        raise TraceError("the backward pass ran no op: the loss does not depend on the parameters")


class _Saved:
    """What export's pack hook gives autograd for one saved tensor. Autograd
    holds a saved tensor until it frees this handle (after the backward node
    ran), whether or not the node unpacks it (a mean's backward saves its
    input and reads only the shape), so the backward op that runs next reads
    it: that is when the step lets go of it."""
    __slots__ = ("name", "tensor", "tracer")

    def __init__(self, name, tensor, tracer):
        self.name, self.tensor, self.tracer = name, tensor, tracer

    def unpack(self):
        return self.tensor

    def __del__(self):
        if self.name is not None and self.tracer.phase in ("backward", "optimizer"):
            self.tracer.unpacked.append(self.name)


def _graph(tracer, model, optimizer, name):
    rename = {}
    seen = set()
    for pname, p in model.named_parameters():
        if p.grad is None or id(p) in seen:
            continue
        seen.add(id(p))
        gname = tracer.by_storage.get(storage_key(p.grad))
        if gname is None:
            raise TraceError(f"the grad of {pname} was made outside the traced step")
        if tracer.tensors[gname].kind == "activation":
            tracer.tensors[gname].kind = "grad"
            rename[gname] = f"grad.{pname}"
    tensors = []
    for t in tracer.tensors.values():
        entry = {"name": rename.get(t.name, t.name), "shape": t.shape, "dtype": t.dtype}
        if t.kind != "activation":
            entry["kind"] = t.kind
        tensors.append(entry)
    return Graph({
        "format": "ration-graph/1",
        "name": name,
        "producer": f"ration_torch export, torch {torch.__version__}",
        "tensors": tensors,
        "ops": [op.as_json(rename) for op in tracer.ops],
    })
