"""ration_torch: bring a PyTorch training step to ration and train as planned.

    graph = ration_torch.export(model, (x,), loss_fn, optimizer=opt)
    plan = ration_torch.plan(graph, device="h100-sxm-80g", budget="60%")
    with ration_torch.apply(model, plan):
        loss_fn(model(x)).backward(); opt.step()
"""
from ._trace import SUPPORTED_TORCH, TraceError
from .export import Graph, export
from .cli import Plan, PlanError, Report, plan, report
from .apply import PlanMismatch, apply

__all__ = ["export", "plan", "report", "apply", "Graph", "Plan", "Report",
           "TraceError", "PlanError", "PlanMismatch", "SUPPORTED_TORCH"]
