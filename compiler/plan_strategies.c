/*
 * plan_strategies.c - the table of planning strategies and the simplest of
 * them, keep-all: every stashed tensor stays on the device until its last
 * backward reader, what a framework does without any memory option.
 */
#include "ration.h"

#include <string.h>

int plan_decide_keep_all(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si,
                         Err *e) {
  (void)d, (void)o, (void)si, (void)e;
  for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = DEC_KEEP;
  return 0;
}

const PlanStrategy plan_strategies[] = {
    {"keep-all", plan_decide_keep_all, NULL},
    {"ilp", plan_decide_placed, NULL},
    {"checkpoint-layers", plan_decide_checkpoint_layers, NULL},
    {"sqrt-n", plan_decide_sqrt_n, NULL},
    {"offload-all", plan_decide_offload_all, NULL},
    {"knapsack", plan_decide_knapsack, NULL},
    {"exact", NULL, plan_build_exact},
    {NULL, NULL, NULL},
};

const PlanStrategy *plan_find_strategy(const char *name) {
  for (const PlanStrategy *s = plan_strategies; s->name; s++)
    if (strcmp(s->name, name) == 0) return s;
  return NULL;
}
