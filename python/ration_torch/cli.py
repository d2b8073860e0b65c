"""plan and report: run the `ration` CLI on an exported graph."""
import csv
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .export import Graph

_REPO = Path(__file__).resolve().parent.parent.parent


class PlanError(RuntimeError):
    """`ration` refused: an infeasible budget, a bad device; the message is its own."""


def _ration():
    """The ration binary: $RATION, else `ration` on PATH, else the bin/ration
    of the repository this package sits in."""
    for cand in (os.environ.get("RATION"), shutil.which("ration"), str(_REPO / "bin" / "ration")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise PlanError("no ration binary: set RATION=/path/to/ration, put it on PATH, or `make` the repository")


def _device(device, ration):
    """A device file, or a profile name looked up in the budgets/ next to the
    binary (ration itself looks in ./budgets, which depends on the cwd)."""
    if os.path.isfile(device):
        return device
    for base in (Path(ration).resolve().parent.parent, _REPO, Path.cwd()):
        p = base / "budgets" / f"{device}.json"
        if p.is_file():
            return str(p)
    raise PlanError(f"device {device!r}: not a file, and no budgets/{device}.json next to {ration}")


def _run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise PlanError((r.stderr.strip() or r.stdout.strip()) or f"{args[0]} exited {r.returncode}")
    return r.stdout


def _budget(budget):
    return str(budget) if isinstance(budget, (int, str)) else None


class Plan:
    """A ration-plan/1 plan and the graph it was made from."""

    def __init__(self, data, graph, summary=""):
        self.data, self.graph, self.summary = data, graph, summary

    @classmethod
    def load(cls, plan_path, graph_path):
        with open(plan_path) as f:
            return cls(json.load(f), Graph.load(graph_path))

    @property
    def decisions(self):
        return self.data["decisions"]

    def bytes_by_decision(self):
        """Bytes of the stashed tensors the plan keeps, recomputes and offloads."""
        out = {"keep": 0, "recompute": 0, "offload": 0}
        for name, d in self.decisions.items():
            if d in out:  # params, grads and optimizer state placed on the host are not stashed tensors
                out[d] += self.graph.tensor_bytes(name)
        return out


def plan(graph, device="h100-sxm-80g", budget=None, strategy=None, time_limit=None, out=None):
    """Runs `ration plan` on graph and returns the Plan. budget: bytes (int),
    a size ("10MiB") or a share of the keep-all peak ("60%"); None is the
    device's memory less its reserve. out: keep OUT.plan.json and the
    emitted schedule there (a temporary directory otherwise)."""
    ration = _ration()
    with tempfile.TemporaryDirectory() as tmp:
        gpath = os.path.join(tmp, f"{graph.data['name']}.json")
        graph.save(gpath)
        prefix = out or os.path.join(tmp, graph.data["name"])
        args = [ration, "plan", gpath, "--device", _device(device, ration), "-o", prefix]
        if budget is not None:
            args += ["--budget", _budget(budget) or _bad_budget(budget)]
        if strategy:
            args += ["--strategy", strategy]
        if time_limit:
            args += ["--time-limit", str(time_limit)]
        summary = _run(args)
        with open(prefix + ".plan.json") as f:
            data = json.load(f)
    return Plan(data, graph, summary.strip())


def _bad_budget(budget):
    raise PlanError(f"budget {budget!r}: give bytes (int), a size (\"10MiB\") or a percentage (\"60%\")")


class Report:
    """What `ration report` wrote: the directory and report.csv's rows."""

    def __init__(self, directory):
        self.directory = directory
        with open(os.path.join(directory, "report.csv")) as f:
            self.rows = list(csv.DictReader(f))
        with open(os.path.join(directory, "report.md")) as f:
            self.markdown = f.read()


def report(graph, out_dir, device="h100-sxm-80g", points=None, budgets=None, strategies=None):
    """Runs `ration report` (every strategy at a sweep of budgets) into out_dir."""
    ration = _ration()
    os.makedirs(out_dir, exist_ok=True)
    gpath = os.path.join(out_dir, f"{graph.data['name']}.json")
    graph.save(gpath)
    args = [ration, "report", gpath, "--device", _device(device, ration), "-o", out_dir]
    if points:
        args += ["--points", str(points)]
    if budgets:
        args += ["--budgets", ",".join(_budget(b) or _bad_budget(b) for b in budgets)]
    if strategies:
        args += ["--strategies", ",".join(strategies)]
    _run(args)
    return Report(out_dir)
