"""apply: train a model as a ration plan decided.

Saved-tensor hooks see every tensor autograd saves for backward. The
tracer names it (the same names export gave the graph), and the plan's
decision for it is carried out:
  keep       autograd holds the tensor, as without a plan;
  offload    its storage is copied to host memory (pinned, on a side
             stream, on CUDA; on a thread on the CPU) and the device
             storage is let go; the copy back starts where the plan's
             prefetch step is (after the backward op before it, counted as
             the backward runs), on another stream or thread, and the
             unpack waits for it;
  recompute  nothing is held; unpacking re-runs the aten ops that made it,
             from the kept, offloaded or resident tensors they read (each
             forward op's function and arguments are taped as it runs,
             with activations taped by name, not held), each op once in a
             step, as ration's schedule family does.
On the CPU a re-run op is the same kernel on the same inputs, so the
gradients are bitwise those of plain training.
"""
import hashlib
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.utils._pytree as pytree

from ._trace import (_META_ONLY, _RESIDENT, _has_memory, ModuleScope, TraceError, Tracer,
                     check_torch_version, geometry, graph_shape, over_storage, register_step_residents,
                     storage_key, storage_nbytes)


class PlanMismatch(RuntimeError):
    """The model or its input is not what the plan was made for."""


class _Step:
    """One forward pass and what its backward needs. Handles that autograd
    holds point here, so a step lives until its backward is done."""

    def __init__(self):
        self.tape = {}              # forward op index -> (func, arg refs, spec, out names, in place)
        self.producer = {}          # activation name -> forward op index
        self.kept = {}              # name -> a saved tensor over its storage
        self.host = {}              # name -> the offload copy's handle (_Copies)
        self.fetching = {}          # name -> the copy back's handle, from its start to its unpack
        self.prefetched = {}        # name -> backward op after which its copy back started (None: at its unpack)
        self.due = {}               # name -> backward op after which its copy back is due, before it is offloaded
        self.copy_threads = set()   # the threads that copied (CPU)
        self.in_sync = True         # the backward ops ran so far are the graph's
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
            self._backward_op(func, args, kwargs, out)
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
            self.phase = "backward"
            self.run.backward_op_ran(step, -1, None)

    def _backward_op(self, func, args, kwargs, out):
        """Counts the backward's graph ops as export named them, so that a
        copy back starts where the plan's prefetch is."""
        if not self.step.in_sync:
            return
        try:
            rec = self.record(func, args, kwargs, out, None)
        except TraceError:
            rec = None
            self.step.in_sync = False
        if rec is not None:
            self.run.backward_op_ran(self.step, self.counts["backward"] - 1, rec)


class apply:
    """`with ration_torch.apply(model, plan) as run:` trains model as plan
    decided for every step run inside (each call of model starts one).
    run.last_step has what the last step measured: saved_bytes (device
    bytes autograd held for backward), offloaded_bytes, replays (forward
    ops re-run), prefetched (offloaded tensor -> the backward op after
    which its copy back started), copy_threads."""

    def __init__(self, model, plan):
        check_torch_version()
        got = hashlib.sha256(plan.graph.text).hexdigest()
        if got != plan.data["graph"]["sha256"]:
            raise PlanMismatch(f"the plan was made from a graph with sha256 {plan.data['graph']['sha256']}, "
                               f"not from this one ({got}); plan this graph again")
        self.model, self.plan, self.graph = model, plan, plan.graph
        self.forward_ops = [op for op in plan.graph.data["ops"] if op["phase"] == "forward"]
        self.n_forward = len(self.forward_ops)
        self.backward_types = [op["type"] for op in plan.graph.data["ops"] if op["phase"] == "backward"]
        self.prefetch_after = _prefetch_points(plan)
        self._check_params()
        self.tracer = None
        self.last_step = None
        self.copies = None

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
        self.copies = _Copies()
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
        self.copies.close()
        return False

    def backward_op_ran(self, step, k, rec):
        """Backward op k ran (-1: the forward is done): starts the copies
        back that the plan's prefetch steps start next, while the backward
        runs the graph's ops."""
        if rec is not None and (k >= len(self.backward_types) or rec.type != self.backward_types[k]):
            step.in_sync = False
        if step.in_sync:
            for name in self.prefetch_after.get(k, ()):
                self._prefetch(step, name, k)

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
                step.host[name] = self.copies.offload(flat, step.copy_threads)
                step.offloaded_bytes += storage_nbytes(flat)
                if name in step.due:
                    self._prefetch(step, name, step.due.pop(name))
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
            self._prefetch(step, name, None)
            step.regen[name] = self.copies.wait(step.fetching.pop(name))
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

    def _prefetch(self, step, name, k):
        """Starts copying an offloaded tensor back, once, after backward op k
        (None: at its unpack, the plan's prefetch not reached). A tensor the
        last forward op made is saved after that op returns, so a copy back
        due before it is offloaded starts when it is."""
        if name not in step.host:
            step.due[name] = k
        elif name not in step.fetching and name not in step.regen:
            step.fetching[name] = self.copies.prefetch(step.host[name], step.copy_threads)
            step.prefetched[name] = k

    @staticmethod
    def _used(step, name):
        step.uses[name] -= 1
        if step.uses[name] <= 0:
            for d in (step.kept, step.regen, step.host, step.fetching):
                d.pop(name, None)


def _prefetch_points(plan):
    """Backward op index -> the offloaded tensors whose copy back the plan's
    steps start right after that op (-1: before the backward's first op),
    in the plan's order."""
    buffers = {b["id"]: b for b in plan.data["buffers"]}
    backward = {op["name"]: k for k, op in enumerate(o for o in plan.graph.data["ops"] if o["phase"] == "backward")}
    points, last = {}, -1
    for st in plan.data["steps"]:
        if st["do"] == "compute" and not st.get("recompute") and st["op"] in backward:
            last = backward[st["op"]]
        elif st["do"] == "prefetch":
            name = buffers[st["to"]]["tensor"]
            if plan.decisions.get(name) == "offload":
                points.setdefault(last, []).append(name)
    return points


class _Copies:
    """The copies of offloaded tensors, off the compute path. On CUDA: a D2H
    and an H2D stream ordered by events, into pinned host memory. On the
    CPU: a thread each way, so that a copy overlaps the compute on the
    calling thread (torch ops let go of the GIL while they run). offload
    returns the host copy's handle, prefetch starts the copy back from it
    and returns that copy's handle, wait gives the device tensor once it is
    there (on CUDA: ordered before the compute stream's next work)."""

    def __init__(self):
        self.pools = {}     # "d2h" / "h2d" -> a one-thread executor (CPU)
        self.streams = {}   # ("d2h" / "h2d", device) -> torch.cuda.Stream

    def offload(self, flat, threads):
        if not flat.is_cuda:
            return ("cpu", self._pool("d2h").submit(_copy, flat, threads))
        s = self._stream("d2h", flat.device)
        host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
        s.wait_stream(torch.cuda.current_stream(flat.device))
        with torch.cuda.stream(s):
            host.copy_(flat, non_blocking=True)
        flat.record_stream(s)  # the device bytes stay allocated until the copy is done
        done = torch.cuda.Event()
        done.record(s)
        return ("cuda", host, done, flat.device)

    def prefetch(self, held, threads):
        if held[0] == "cpu":
            return ("cpu", self._pool("h2d").submit(lambda: _copy(held[1].result(), threads)))
        _, host, offloaded, device = held
        s = self._stream("h2d", device)
        s.wait_event(offloaded)
        with torch.cuda.stream(s):
            back = host.to(device, non_blocking=True)
        done = torch.cuda.Event()
        done.record(s)
        return ("cuda", back, done)

    @staticmethod
    def wait(fetching):
        if fetching[0] == "cpu":
            return fetching[1].result()
        _, back, done = fetching
        compute = torch.cuda.current_stream(back.device)
        compute.wait_event(done)
        back.record_stream(compute)  # allocated on the H2D stream, read on this one
        return back

    def _pool(self, way):
        if way not in self.pools:
            self.pools[way] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ration-{way}")
        return self.pools[way]

    def _stream(self, way, device):
        if (way, device) not in self.streams:
            self.streams[(way, device)] = torch.cuda.Stream(device)
        return self.streams[(way, device)]

    def close(self):
        for pool in self.pools.values():
            pool.shutdown(wait=True)
        self.pools = {}


def _copy(t, threads):
    threads.add(threading.get_ident())
    return t.clone()
