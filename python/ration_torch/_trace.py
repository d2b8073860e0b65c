"""The op recorder that export and apply share.

A TorchDispatchMode sees every aten op below autograd. Each op's tensors are
named by the storage they live in: a graph tensor is one allocation (the
first op that returns a new storage produces it), a view is not a tensor of
its own (it is its base plus a geometry), and an in-place write to an
activation makes a new version, because ration-graph/1 gives an activation
exactly one producer. export and apply run this same classification, so a
forward op gets the same name, inputs and outputs in both, which is what lets
apply find a plan's decision for each tensor autograd saves.
"""
import time

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

SUPPORTED_TORCH = "1.13 and 2.x"

_DTYPES = {
    torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
    torch.int32: "i32", torch.int64: "i64",
    # one byte each: the planner needs only the bytes
    torch.uint8: "u8", torch.int8: "u8", torch.bool: "u8",
}
_DTYPE_SIZE = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "u8": 1}

# Ops whose tensor arguments give only shape, dtype and device: they do not
# keep their argument alive, so they are no reader of it.
_META_ONLY = ("empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
              "randn_like", "new_empty", "new_zeros", "new_ones", "new_full",
              "new_empty_strided")

# Ops that draw random numbers: recomputing one would draw different ones.
_RANDOM = ("bernoulli", "bernoulli_", "native_dropout", "dropout", "rand", "randn",
           "rand_like", "randn_like", "randint", "randint_like", "normal", "normal_",
           "uniform_", "multinomial", "randperm", "exponential_", "geometric_",
           "cauchy_", "log_normal_", "random_")

_RESIDENT = ("input", "param", "grad", "optstate")


class TraceError(RuntimeError):
    """The step holds something ration_torch cannot trace; the message says what."""


def storage_of(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def storage_key(t):
    return storage_of(t).data_ptr()


def storage_nbytes(t):
    return storage_of(t).nbytes()


def geometry(t):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def over_storage(holder, geom):
    """A tensor with geometry geom over holder's storage (how a saved view is
    rebuilt on a recomputed or fetched-back base)."""
    size, stride, offset = geom
    with torch.no_grad():
        return holder.new_empty(0).set_(storage_of(holder), offset, size, stride)


def _has_memory(t):
    """Whether t is memory the step plans. A 0-dim double is a Python number
    autograd wrapped (the 8.0 of x / 8.0): a value, not memory."""
    return (isinstance(t, torch.Tensor) and t.numel() > 0 and storage_nbytes(t) > 0
            and not (t.dim() == 0 and t.dtype not in _DTYPES))


def graph_shape(t, where):
    """ration-graph/1 shape and dtype of the storage t lives in: its own shape
    when that covers the storage exactly, else the storage as a flat array,
    so that a graph tensor's bytes are always the allocation's bytes."""
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise TraceError(f"{where}: a {t.dtype} tensor of shape {list(t.shape)}; ration-graph/1 has "
                         f"f32 bf16 f16 i32 i64 u8 (train in float32, bfloat16 or float16)")
    if t.layout != torch.strided:
        raise TraceError(f"{where}: a {t.layout} tensor; only dense (strided) tensors can be traced")
    nbytes = storage_nbytes(t)
    if t.numel() * t.element_size() == nbytes:
        return list(t.shape), dt
    size = _DTYPE_SIZE[dt]
    if nbytes % size:
        return [nbytes], "u8"
    return [nbytes // size], dt


class TensorInfo:
    __slots__ = ("name", "kind", "shape", "dtype", "nbytes", "phase")

    def __init__(self, name, kind, shape, dtype, nbytes, phase):
        self.name, self.kind, self.shape, self.dtype = name, kind, shape, dtype
        self.nbytes, self.phase = nbytes, phase


class OpRecord:
    """One graph op, plus how its flattened arguments and outputs map to
    graph tensors (apply replays from it)."""
    __slots__ = ("name", "type", "phase", "inputs", "outputs", "flops", "bytes", "time_us",
                 "arg_names", "out_names")

    def as_json(self, rename):
        op = {"name": self.name, "type": self.type, "phase": self.phase,
              "inputs": [rename.get(n, n) for n in self.inputs],
              "outputs": [rename.get(n, n) for n in self.outputs],
              "flops": self.flops, "bytes": self.bytes}
        if self.time_us is not None:
            op["time_us"] = self.time_us
        return op


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _flops(name, args, outs):
    """FLOPs of the ops that dominate a step (matmuls, convolutions,
    attention); every other op counts one per output element, and the
    roofline makes those memory-bound anyway."""
    t = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ("mm", "addmm") and len(t) >= 2:
        a, b = t[-2], t[-1]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]
    if name in ("bmm", "baddbmm") and len(t) >= 2:
        a, b = t[-2], t[-1]
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    if name in ("convolution", "_convolution", "convolution_backward") and len(t) >= 2:
        w = t[1] if name != "convolution_backward" else t[2]
        out = outs[0] if name != "convolution_backward" else t[0]
        fwd = 2 * out.numel() * _numel(w.shape[1:])
        return fwd if name != "convolution_backward" else 2 * fwd
    if "scaled_dot_product" in name and len(t) >= 3:
        q, k = t[0], t[1]
        fwd = 4 * _numel(q.shape[:-1]) * k.shape[-2] * q.shape[-1]
        return fwd if not name.endswith("_backward") else 2 * fwd + fwd // 2
    return sum(o.numel() for o in outs)


class Tracer(TorchDispatchMode):
    """Records the ops of one training step in ration-graph/1 terms.

    Ops run by the tracer's own hooks (pack, unpack, replay) run with
    `paused` set so that they are not part of the step."""

    def __init__(self, profile=False):
        super().__init__()
        self.profile = profile
        self.paused = False
        self.phase = "forward"
        self.module_stack = []
        self.reset()

    def reset(self):
        self.tensors = {}        # name -> TensorInfo, in creation order
        self.by_storage = {}     # storage data_ptr -> name of the tensor living there
        self.ops = []
        self.counts = {"forward": 0, "backward": 0, "optimizer": 0}
        self.layer = None        # index of the layer call running, None outside layers
        self.layer_depth = 0     # its module's depth in module_stack
        self.layer_calls = 0
        self.saved = set()       # forward activations autograd saved
        self.unpacked = []       # saved activations unpacked since the last backward op
        self.n_external = 0

    def add_resident(self, t, name, kind):
        if not _has_memory(t):
            return
        key = storage_key(t)
        if key in self.by_storage:
            return  # tied weights: one storage, one tensor
        shape, dt = graph_shape(t, name)
        self.tensors[name] = TensorInfo(name, kind, shape, dt, storage_nbytes(t), self.phase)
        self.by_storage[key] = name

    def name_of(self, t):
        return self.by_storage.get(storage_key(t)) if _has_memory(t) else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            out = func(*args, **kwargs)
            if isinstance(out, (bool, int, float)) and str(func._schema.returns[0].type) == "Tensor":
                out = torch.tensor(out, dtype=args[0].dtype)
            return out
        timed = self.profile and self.phase is not None
        if timed:
            self._sync(args)
            t0 = time.perf_counter()
        out = func(*args, **kwargs)
        if isinstance(out, (bool, int, float)) and str(func._schema.returns[0].type) == "Tensor":
            # torch 1.13 hands a wrapped Python number (the 8.0 of x / 8.0)
            # to a dispatch mode as a number; autograd wants the tensor back
            out = torch.tensor(out, dtype=args[0].dtype)
        elapsed = None
        if timed:
            self._sync(args)
            elapsed = (time.perf_counter() - t0) * 1e6
        self.paused = True
        try:
            self.on_op(func, args, kwargs, out, elapsed)
        finally:
            self.paused = False
        return out

    @staticmethod
    def _sync(args):
        if any(isinstance(a, torch.Tensor) and a.is_cuda for a in pytree.tree_flatten(args)[0]):
            torch.cuda.synchronize()

    def on_op(self, func, args, kwargs, out, elapsed):
        if self.phase is not None:
            self.record(func, args, kwargs, out, elapsed)

    def op_name(self, phase, short):
        """`l<k>.f<i>-<module>.<op>` for the i-th forward op when it runs in
        the k-th layer call, `f<i>-<module>.<op>` outside layers, `b<i>.<op>`
        and `o<i>.<op>` after the forward. The planner's checkpoint-layers
        and sqrt-n read a leading `<letters><digits>.` as the op's layer, so
        only layer ops may start that way (`f<i>-` does not)."""
        i = self.counts[phase]
        if phase != "forward":
            return f"{phase[0]}{i}.{short}"
        module = f"{self.module_stack[-1]}." if self.module_stack else ""
        layer = f"l{self.layer}." if self.layer is not None else ""
        return f"{layer}f{i}-{module}{short}"

    def record(self, func, args, kwargs, out, elapsed):
        """Classifies one op; returns its OpRecord, or None when it makes no
        graph op (a view, a metadata query, an op on empty tensors)."""
        short = func.overloadpacket.__name__
        phase = self.phase
        opname = self.op_name(phase, short)
        if phase == "forward" and short in _RANDOM:
            raise TraceError(f"{opname}: {func} draws random numbers, and recomputing it would draw "
                             f"different ones; trace with dropout and other random ops off")
        flat_args = pytree.tree_flatten((args, kwargs))[0]
        meta_only = short in _META_ONLY
        arg_names, inputs, in_keys = [], [], set()
        for a in flat_args:
            if not _has_memory(a):
                arg_names.append(None)
                continue
            key = storage_key(a)
            in_keys.add(key)
            name = self.by_storage.get(key)
            if name is None:
                name = self._external(a, opname)
            arg_names.append(name)
            info = self.tensors[name]
            if meta_only:
                continue
            # A forward activation that autograd did not save is held, if at
            # all, by the caller (the loss it calls backward on), not by the
            # step: the backward does not keep it alive.
            if (phase != "forward" and info.kind == "activation" and info.phase == "forward"
                    and name not in self.saved):
                continue
            if name not in inputs:
                inputs.append(name)

        returns = func._schema.returns
        tops = list(out) if isinstance(out, (tuple, list)) and len(returns) == len(out) and len(returns) > 1 else [out]
        outputs, out_names = [], []
        for i, top in enumerate(tops):
            alias = returns[i].alias_info if i < len(returns) else None
            writes = alias is not None and alias.is_write
            for o in pytree.tree_flatten(top)[0]:
                if not _has_memory(o):
                    out_names.append(None)
                    continue
                key = storage_key(o)
                old = self.by_storage.get(key)
                if key in in_keys or (alias is not None and old is not None):
                    if not writes:
                        out_names.append(None)       # a view of an input
                        continue
                    if self.tensors[old].kind in _RESIDENT:
                        out_names.append(old)        # params, grads, state: written in place
                        if old not in outputs:
                            outputs.append(old)
                        continue
                name = f"{opname}:{len(out_names)}"
                shape, dt = graph_shape(o, name)
                self.tensors[name] = TensorInfo(name, "activation", shape, dt, storage_nbytes(o), phase)
                self.by_storage[key] = name
                out_names.append(name)
                outputs.append(name)
        if not outputs:
            return None
        if phase == "backward":
            # saved tensors autograd unpacked or let go of since the last op
            inputs += [n for n in dict.fromkeys(self.unpacked) if n not in inputs]
            self.unpacked = []
        rec = OpRecord()
        rec.name, rec.type, rec.phase = opname, f"aten.{short}", phase
        rec.inputs, rec.outputs = inputs, outputs
        tensors_in = [a for a in flat_args if _has_memory(a)]
        rec.flops = _flops(short, tensors_in,
                           [o for o in pytree.tree_flatten(out)[0] if _has_memory(o)])
        rec.bytes = sum(self.tensors[n].nbytes for n in inputs) + sum(self.tensors[n].nbytes for n in outputs)
        rec.time_us = round(elapsed, 3) if elapsed is not None else None
        rec.arg_names, rec.out_names = arg_names, out_names
        self.counts[phase] += 1
        self.ops.append(rec)
        return rec

    def _external(self, t, where):
        """A tensor the step reads but did not make and was not told about: a
        target closed over by the loss, a constant."""
        name = f"input.ext{self.n_external}"
        self.n_external += 1
        shape, dt = graph_shape(t, where)
        self.tensors[name] = TensorInfo(name, "input", shape, dt, storage_nbytes(t), self.phase)
        self.by_storage[storage_key(t)] = name
        return name


def layer_modules(model):
    """The model's layers: the elements of its longest nn.ModuleList (the
    first of the longest), the blocks that per-block gradient checkpointing
    wraps; of its longest nn.Sequential when it has no ModuleList (a
    Sequential is as often a block's own MLP); none without either."""
    for kind in (torch.nn.ModuleList, torch.nn.Sequential):
        lists = [m for m in model.modules() if isinstance(m, kind) and m is not model]
        if lists:
            return list(max(lists, key=len))
    return []


class ModuleScope:
    """Names forward ops by the module running them and by the layer call
    they run in (forward hooks on every submodule), and tells the tracer
    when the root module's forward begins."""

    def __init__(self, model, tracer, on_root_forward):
        self.handles = []
        layers = {id(m) for m in layer_modules(model)}

        def enter(name, is_layer):
            tracer.module_stack.append(name)
            if is_layer and tracer.layer is None:
                tracer.layer, tracer.layer_depth = tracer.layer_calls, len(tracer.module_stack)
                tracer.layer_calls += 1

        def leave():
            if tracer.layer is not None and len(tracer.module_stack) == tracer.layer_depth:
                tracer.layer = None
            tracer.module_stack.pop()
        for mname, m in model.named_modules():
            if m is model:
                self.handles.append(m.register_forward_pre_hook(lambda mod, inp: on_root_forward(inp)))
                continue
            self.handles.append(m.register_forward_pre_hook(
                lambda mod, inp, n=mname, is_layer=id(m) in layers: enter(n, is_layer)))
            self.handles.append(m.register_forward_hook(lambda mod, inp, out: leave()))

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def register_step_residents(tracer, model, inputs):
    """Params, buffers and the model's tensor inputs, named the same way in
    export and apply."""
    for name, p in model.named_parameters():
        tracer.add_resident(p, name, "param")
    for name, b in model.named_buffers():
        tracer.add_resident(b, f"buffer.{name}", "param")
    for i, t in enumerate(x for x in pytree.tree_flatten(inputs)[0] if isinstance(x, torch.Tensor)):
        tracer.add_resident(t, f"input.{i}", "input")


def check_torch_version():
    parts = torch.__version__.split("+")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return
    if (major, minor) < (1, 13):
        raise TraceError(f"PyTorch {torch.__version__} is not supported: ration_torch needs "
                         f"{SUPPORTED_TORCH} (TorchDispatchMode and saved-tensor hooks)")
