"""op_times.py - a measured ration-costs/1 file summed by op type, largest
first, beside the step time the ops add up to: where a step's time goes,
and each type's achieved rates from the graph's own counts (an op's
`flops` and `bytes`, the fewest bytes it must move), so a kernel far under
the card's copy bandwidth or matrix rate stands out.

Usage: python3 gpu/op_times.py GRAPH.json COSTS.json
"""
import collections
import json
import sys


def main():
    graph, costs = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    ops = {o["name"]: o for o in graph["ops"]}
    total, count = collections.Counter(), collections.Counter()
    flops, moved = collections.Counter(), collections.Counter()
    for name, us in costs["ops"].items():
        k = ops[name]["type"]
        total[k] += us
        count[k] += 1
        flops[k] += ops[name].get("flops", 0)
        moved[k] += ops[name].get("bytes", 0)
    step = sum(total.values())
    print("op_times: %d ops, %.3f ms of kernels (device events)" % (sum(count.values()), step / 1e3))
    print("op_time %-22s %4s %10s %6s %9s %9s" % ("type", "ops", "ms", "share", "TFLOP/s", "GB/s"))
    for k, us in total.most_common():
        s = us / 1e6
        print("op_time %-22s %4d %10.3f %5.1f%% %9.1f %9.0f" % (k, count[k], us / 1e3, 100 * us / step,
                                                               flops[k] / s / 1e12 if s else 0,
                                                               moved[k] / s / 1e9 if s else 0))


if __name__ == "__main__":
    main()
