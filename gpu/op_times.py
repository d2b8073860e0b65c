"""op_times.py - a measured ration-costs/1 file summed by op type, largest
first, beside the step time the ops add up to: where a step's time goes.

Usage: python3 gpu/op_times.py GRAPH.json COSTS.json
"""
import collections
import json
import sys


def main():
    graph, costs = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    kind = {o["name"]: o["type"] for o in graph["ops"]}
    total, count = collections.Counter(), collections.Counter()
    for name, us in costs["ops"].items():
        total[kind[name]] += us
        count[kind[name]] += 1
    step = sum(total.values())
    print("op_times: %d ops, %.3f ms of kernels (device events)" % (sum(count.values()), step / 1e3))
    for k, us in total.most_common():
        print("op_time %-22s %4d ops %10.3f ms %5.1f%%" % (k, count[k], us / 1e3, 100 * us / step))


if __name__ == "__main__":
    main()
