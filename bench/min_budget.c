/*
 * min_budget.c - prints the ilp's smallest budget with every resident tensor
 * (params, grads, optimizer state) on the device: plan_ilp_min_budget, the
 * number `ration plan --budget 1` named before the ilp strategy host-homed
 * params and optimizer state (docs/PLANNING.md 1.1-1.2). The benchmarks'
 * budget points m + f (k - m) take their m from here, so that they measure
 * the ilp over activations, not the homes search below m.
 *
 *   min_budget GRAPH DEVICE_FILE
 */
#include "ration.h"

#include <inttypes.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: min_budget GRAPH DEVICE_FILE\n");
    return 2;
  }
  Err e = {{0}};
  Device *d = device_load(argv[2], &e);
  Graph *g = d ? graph_load(argv[1], &e) : NULL;
  PlanOptions o = {.strategy = "ilp", .solver = "glpk", .quiet = true, .device_homes_only = true};
  char note[sizeof ((SolverInfo *)0)->note] = "";
  int64_t m = g && !graph_add_runtime_tensor(g, d->runtime_bytes, &e) ? plan_ilp_min_budget(g, d, &o, note, &e) : -1;
  graph_free(g);
  device_free(d);
  if (m <= 0) {
    fprintf(stderr, "min_budget: %s\n", e.msg);
    return 2;
  }
  if (note[0]) fprintf(stderr, "min_budget: the least found before %s\n", note);
  printf("%" PRId64 "\n", m);
  return 0;
}
