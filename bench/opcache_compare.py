"""opcache_compare.py GRAPH PLAN.plan.json REPLAN.plan.json SIMS PAIR...

The cells of one bench_opcache.sh row. SIMS is a file of lines "K P
MEASURED", one per repetition: the simulator's step on the plan with the
keep-all session's profile (K) and with the plan's own (P), and the plan's
measured step, ms. Each PAIR is KEEPALL.costs.json,PLAN.costs.json of one
repetition. Prints: K / P (median [min-max]), K / measured and P /
measured (medians), the op times summed, plan / keep-all (median [min-max]
over the repetitions) of the forward ops, of the backward ops that read a
tensor the plan recomputes (the recompute ran just before them), of the
other backward ops and of the optimizer ops, and whether the re-plan from
the plan's own profile kept the plan's decisions.
"""
import json
import statistics
import sys

graph, plan, replan = (json.load(open(p)) for p in sys.argv[1:4])
sims = [tuple(map(float, line.split())) for line in open(sys.argv[4]) if line.strip()]
pairs = [[json.load(open(p))["ops"] for p in arg.split(",")] for arg in sys.argv[5:]]
phase = {op["name"]: op["phase"] for op in graph["ops"]}


def summary(values, ranged=True):
    m = statistics.median(values)
    return f"{m:.3f} [{min(values):.3f}-{max(values):.3f}]" if ranged else f"{m:.3f}"


cells = [summary([k / p for k, p, _ in sims]), summary([k / m for k, _, m in sims], False),
         summary([p / m for _, p, m in sims], False)]
recomputed = {t for t, v in plan["decisions"].items() if v == "recompute"}
reads_recomputed = {op["name"] for op in graph["ops"] if recomputed & set(op["inputs"])}
groups = [[n for n in phase if phase[n] == "forward"],
          [n for n in phase if phase[n] == "backward" and n in reads_recomputed],
          [n for n in phase if phase[n] == "backward" and n not in reads_recomputed],
          [n for n in phase if phase[n] == "optimizer"]]
for names in groups:
    cells.append(summary([sum(p[n] for n in names) / sum(k[n] for n in names) for k, p in pairs]) if names else "-")
differ = sum(replan["decisions"].get(t) != v for t, v in plan["decisions"].items())
cells.append("same decisions" if differ == 0 else f"{differ} of {len(plan['decisions'])} decisions differ")
print(" | ".join(cells))
