"""apply: train a model as a ration plan decided.

Saved-tensor hooks see every tensor autograd saves for backward. The
tracer names it (the same names export gave the graph), and the plan's
decision for it is carried out:
  keep       autograd holds the tensor, as without a plan;
  offload    its storage is copied to host memory (pinned, on a side
             stream, on CUDA) and the device storage is let go; unpacking
             copies it back;
  recompute  nothing is held; unpacking re-runs the aten ops that made it,
             from the kept, offloaded or resident tensors they read (each
             forward op's function and arguments are taped as it runs,
             with activations taped by name, not held), each op once in a
             step, as ration's schedule family does.
On the CPU a re-run op is the same kernel on the same inputs, so the
gradients are bitwise those of plain training.
"""
import hashlib
from collections import Counter

import torch
import torch.utils._pytree as pytree

from ._trace import (_META_ONLY, _RESIDENT, _has_memory, ModuleScope, Tracer, check_torch_version,
                     geometry, graph_shape, over_storage, register_step_residents, storage_key,
                     storage_nbytes)


class PlanMismatch(RuntimeError):
    """The model or its input is not what the plan was made for."""


class _Step:
    """One forward pass and what its backward needs. Handles that autograd
    holds point here, so a step lives until its backward is done."""

    def __init__(self):
        self.tape = {}              # forward op index -> (func, arg refs, spec, out names, in place)
        self.producer = {}          # activation name -> forward op index
        self.kept = {}              # name -> a saved tensor over its storage
        self.host = {}              # name -> (host copy of its storage, copy event or None)
        self.regen = {}             # name -> re-made or fetched-back storage, while it has uses
        self.uses = Counter()       # name -> unpacks and re-run reads still to come
        self.reruns_counted = False
        self.kept_storages = set()
        self.saved_bytes = 0        # device bytes autograd holds for this step's backward
        self.offloaded_bytes = 0    # host bytes holding offloaded storages
        self.replays = 0            # forward ops re-run during the backward
        self.done = False


class _ApplyTracer(Tracer):
    def __init__(self, run):
        super().__init__()
        self.run = run
        self.step = None

    def on_op(self, func, args, kwargs, out, elapsed):
        step = self.step
        if step is None:
            return
        if step.done:
            # the backward and the optimizer run without grad mode; an op
            # with it, on tensors that require grad, is forward beyond the
            # plan (backward() makes its seed, ones_like(loss), with it too)
            if (torch.is_grad_enabled() and func.overloadpacket.__name__ not in _META_ONLY and any(isinstance(a, torch.Tensor) and a.requires_grad
                                                for a in pytree.tree_flatten((args, kwargs))[0])):
                raise PlanMismatch(f"the forward runs on after the plan's {self.run.n_forward} forward ops "
                                   f"({func} is one more); export and plan again")
            return
        rec = self.record(func, args, kwargs, out, None)
        if rec is None:
            return
        i = len(self.ops) - 1
        self.run.check_op(i, rec, self.tensors)
        flat, spec = pytree.tree_flatten((args, kwargs))
        meta_only = func.overloadpacket.__name__ in _META_ONLY
        refs = []
        for a, name in zip(flat, rec.arg_names):
            if name is None or self.tensors[name].kind in _RESIDENT:
                refs.append(("val", a))
            elif meta_only:
                refs.append(("meta", tuple(a.shape), tuple(a.stride()), a.dtype, a.device))
            else:
                refs.append(("act", name, geometry(a)))
        inplace = any(arg.alias_info is not None and arg.alias_info.is_write
                      for arg in func._schema.arguments)
        step.tape[i] = (func, refs, spec, rec.out_names, inplace)
        for n in rec.outputs:
            step.producer[n] = i
        if len(self.ops) == self.run.n_forward:
            step.done = True


class apply:
    """`with ration_torch.apply(model, plan) as run:` trains model as plan
    decided for every step run inside (each call of model starts one).
    run.last_step has what the last step measured: saved_bytes (device
    bytes autograd held for backward), offloaded_bytes, replays."""

    def __init__(self, model, plan):
        check_torch_version()
        got = hashlib.sha256(plan.graph.text).hexdigest()
        if got != plan.data["graph"]["sha256"]:
            raise PlanMismatch(f"the plan was made from a graph with sha256 {plan.data['graph']['sha256']}, "
                               f"not from this one ({got}); plan this graph again")
        self.model, self.plan, self.graph = model, plan, plan.graph
        self.forward_ops = [op for op in plan.graph.data["ops"] if op["phase"] == "forward"]
        self.n_forward = len(self.forward_ops)
        self._check_params()
        self.tracer = None
        self.last_step = None
        self._copy_stream = None

    def _check_params(self):
        seen = set()
        for name, p in self.model.named_parameters():
            if storage_key(p) in seen:
                continue
            seen.add(storage_key(p))
            self._check_tensor(name, p, "parameter")
            seen.add(name)
        missing = [t["name"] for t in self.graph.data["tensors"]
                   if t.get("kind") == "param" and not t["name"].startswith("buffer.") and t["name"] not in seen]
        if missing:
            raise PlanMismatch(f"the model lacks parameters the plan's graph has: {', '.join(missing[:4])}"
                               f"{' ...' if len(missing) > 4 else ''}; export and plan this model again")

    def _check_tensor(self, name, t, what):
        g = self.graph.tensors.get(name)
        if g is None:
            raise PlanMismatch(f"{what} {name} is not in the plan's graph {self.graph.data['name']!r}; "
                               f"export and plan this model again")
        if graph_shape(t, name) != (g["shape"], g["dtype"]):
            raise PlanMismatch(f"{what} {name} is {t.dtype} {list(t.shape)}, the plan was made for {g['dtype']} {g['shape']}; "
                               f"export and plan again")

    def check_op(self, i, rec, tensors):
        want = self.forward_ops[i]

        def shapes(names, lookup):
            return [(n, lookup(n)) for n in names]
        got = (rec.name, rec.type, rec.inputs, shapes(rec.outputs, lambda n: tensors[n].shape))
        exp = (want["name"], want["type"], want["inputs"],
               shapes(want["outputs"], lambda n: self.graph.tensors[n]["shape"]))
        if got != exp:
            raise PlanMismatch(f"forward op {i}: the step ran {rec.name} ({rec.type}) reading {rec.inputs} "
                               f"and writing {got[3]}; the plan's graph has {want['name']} ({want['type']}) "
                               f"reading {want['inputs']} and writing {exp[3]}; export and plan again")

    def __enter__(self):
        self.tracer = _ApplyTracer(self)
        self.scope = ModuleScope(self.model, self.tracer, self._begin_step)
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.tracer.__enter__()
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        self.tracer.__exit__(*exc)
        self.scope.close()
        self.tracer.step = None
        return False

    def _begin_step(self, inputs):
        tr = self.tracer
        if tr.step is not None and not tr.step.done and tr.ops:
            raise PlanMismatch(f"the model ran again after {len(tr.ops)} of the plan's {self.n_forward} "
                               f"forward ops: the step does not match the plan; export and plan again")
        tr.reset()
        tr.phase = "forward"
        tr.paused = True
        try:
            register_step_residents(tr, self.model, inputs)
            flat = [x for x in pytree.tree_flatten(inputs)[0] if isinstance(x, torch.Tensor)]
            for k, t in enumerate(flat):
                self._check_tensor(f"input.{k}", t, "input")
        finally:
            tr.paused = False
        tr.step = _Step()
        self.last_step = tr.step

    def _pack(self, t):
        tr = self.tracer
        step = tr.step
        if step is None or not _has_memory(t):
            return ("val", t)
        tr.paused = True
        try:
            name = tr.name_of(t)
            if name is None and not step.done:
                # autograd saves an op's inputs before the op runs: a tensor
                # the step has not read yet is the caller's (a target)
                return ("val", t)
            if name is None:
                raise PlanMismatch(f"the forward runs on after the plan's {self.n_forward} forward ops "
                                   f"(autograd saved a {list(t.shape)} tensor the plan's graph does not have); "
                                   f"export and plan again")
            if tr.tensors[name].kind in _RESIDENT:
                return ("val", t)
            decision = self.plan.decisions.get(name)
            if decision is None:
                raise PlanMismatch(f"autograd saved {name}, which the plan's graph does not stash; "
                                   f"export and plan again")
            step.uses[name] += 1
            if decision == "keep":
                key = storage_key(t)
                if key not in step.kept_storages:
                    step.kept_storages.add(key)
                    step.saved_bytes += storage_nbytes(t)
                step.kept[name] = t
                return ("keep", step, name, t)
            if decision == "offload" and name not in step.host:
                n = storage_nbytes(t) // t.element_size()
                flat = over_storage(t, ((n,), (1,), 0))
                step.host[name] = self._to_host(flat)
                step.offloaded_bytes += storage_nbytes(step.host[name][0])
            return (decision, step, name, geometry(t))
        finally:
            tr.paused = False

    def _unpack(self, handle):
        if handle[0] == "val":
            return handle[1]
        decision, step, name, rest = handle
        tr = self.tracer
        tr.paused = True
        try:
            if not step.reruns_counted:
                self._count_reruns(step)
            if decision == "keep":
                out = rest
            else:
                out = over_storage(self._fetch(step, name), rest)
            self._used(step, name)
            return out
        finally:
            tr.paused = False

    def _count_reruns(self, step):
        """Once the backward begins: the forward ops it will re-run, each once
        (ration's schedule family): the producers of the recomputed tensors
        autograd saved and, in turn, of the activations they read that are
        neither kept nor offloaded. Each re-run's read is a use, so a tensor
        (kept, fetched back or re-made) lives until its last unpack or re-run
        read, as in the plan."""
        todo = [n for n in step.uses if n not in step.kept and n not in step.host]
        rerun = set()
        while todo:
            i = step.producer[todo.pop()]
            if i in rerun:
                continue
            rerun.add(i)
            for n in dict.fromkeys(r[1] for r in step.tape[i][1] if r[0] == "act"):
                step.uses[n] += 1
                if n not in step.kept and n not in step.host:
                    todo.append(n)
        step.reruns_counted = True

    def _fetch(self, step, name):
        """A tensor over name's storage: the kept one, one re-made or
        fetched back earlier, the offloaded one fetched back now, or one
        re-made now by re-running its producer."""
        for d in (step.kept, step.regen):
            if name in d:
                return d[name]
        if name in step.host:
            step.regen[name] = self._to_device(*step.host[name])
        else:
            self._rerun(step, step.producer[name])
        return step.regen[name]

    def _rerun(self, step, i):
        """Re-runs forward op i; keeps the outputs that have uses to come
        (an output kept or offloaded is that copy's, so a re-made one is
        transient) and lets go of the inputs it was the last reader of."""
        func, refs, spec, out_names, inplace = step.tape[i]
        vals, read = [], []
        for r in refs:
            if r[0] == "val":
                vals.append(r[1])
            elif r[0] == "meta":
                vals.append(torch.empty_strided(r[1], r[2], dtype=r[3], device=r[4]))
            else:
                base = self._fetch(step, r[1])
                read.append(r[1])
                if inplace:
                    # the op writes its argument: write a copy, never a tensor
                    # that autograd or a later re-run still reads
                    n = storage_nbytes(base) // base.element_size()
                    base = over_storage(base, ((n,), (1,), 0)).clone()
                vals.append(over_storage(base, r[2]))
        args, kwargs = pytree.tree_unflatten(vals, spec)
        with torch.no_grad():
            out = func(*args, **kwargs)
        step.replays += 1
        for o, n in zip(pytree.tree_flatten(out)[0], out_names):
            if n is not None and step.uses[n] > 0 and n not in step.kept and n not in step.host:
                step.regen[n] = o
        for n in dict.fromkeys(read):
            self._used(step, n)

    @staticmethod
    def _used(step, name):
        step.uses[name] -= 1
        if step.uses[name] <= 0:
            for d in (step.kept, step.regen, step.host):
                d.pop(name, None)

    def _to_host(self, flat):
        if not flat.is_cuda:
            return flat.clone(), None
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(flat.device)
        s = self._copy_stream
        host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
        s.wait_stream(torch.cuda.current_stream(flat.device))
        with torch.cuda.stream(s):
            host.copy_(flat, non_blocking=True)
        flat.record_stream(s)  # the device bytes stay allocated until the copy is done
        done = torch.cuda.Event()
        done.record(s)
        return host, (done, flat.device)

    @staticmethod
    def _to_device(host, copied):
        if copied is None:
            return host.clone()
        done, device = copied
        torch.cuda.current_stream(device).wait_event(done)
        return host.to(device, non_blocking=True)
