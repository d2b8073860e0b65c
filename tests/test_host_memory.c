/*
 * test_host_memory.c - host memory is a budget: a device's host_memory
 * bounds the host arena of every plan. Where the ilp left alone offloads
 * more than host_memory, it still plans the budget within it (offloading
 * less, re-running more) and the laid-out host arena is exactly what its
 * offloads stack to; a strategy whose offloads cannot fit fails with one
 * line naming host_memory and the host bytes it needs.
 */
#include "ration.h"
#include "test.h"

#include <stdlib.h>

static Plan *make(const Graph *g, const Device *d, const char *name, int64_t budget, Err *e) {
  PlanOptions o = {.strategy = name, .solver = "glpk", .budget_bytes = budget, .quiet = true};
  return plan_make(g, d, &o, e);
}

static int64_t offloaded_bytes(const Graph *g, const Plan *p) {
  int64_t sum = 0;
  for (int i = 0; i < g->nstashed; i++)
    if (p->decisions[g->stashed[i]] == DEC_OFFLOAD) sum += g->tensors[g->stashed[i]].bytes;
  return sum;
}

int main(void) {
  Err e;
  Graph *g = graph_load("models/gpt2-tiny.json", &e);
  Device *d = g ? device_load("budgets/h100-sxm-80g.json", &e) : NULL;
  if (!g || !d || graph_add_runtime_tensor(g, d->runtime_bytes, &e)) {
    printf("FAIL setup: %s\nRESULT 0 1\n", e.msg);
    return 1;
  }
  /* 43.87 MiB: between the smallest budget and keep-all (86 MiB with the
   * profile's runtime_bytes), where the ilp with its 512 GiB of host memory
   * offloads 7.3 MiB. */
  const int64_t budget = 46000000, host = 3 << 20;
  Plan *free_host = make(g, d, "ilp", budget, &e);
  T_CASE("setup: unlimited host memory, the ilp offloads more than the limit to come") {
    T_CHECKF(free_host != NULL, "%s", e.msg);
    T_CHECKF(free_host && free_host->host_bytes > host, "host %lld", free_host ? (long long)free_host->host_bytes : -1LL);
  }
  d->host_memory = host;
  T_CASE("ilp: the budget is still planned, its host arena within host_memory, to the byte") {
    Plan *p = make(g, d, "ilp", budget, &e);
    T_CHECKF(p != NULL, "%s", e.msg);
    if (p) {
      Err ce;
      T_CHECKF(sim_check(p, g, &ce) == 0, "%s", ce.msg);
      T_CHECK(p->arena_bytes <= budget);
      /* Every offloaded tensor is on the host at the turn, so the arena is
       * their aligned sizes stacked: the row's bound, met exactly here. */
      T_CHECKF(p->host_bytes == host, "host %lld", (long long)p->host_bytes);
      T_CHECK(p->host_bytes == plan_host_bound(g, p->decisions));
      T_CHECK(offloaded_bytes(g, p) <= p->host_bytes);
      T_CHECK(offloaded_bytes(g, p) > 0);
      /* A restriction of the same problem: never faster than without it. */
      T_CHECK(!free_host || p->predicted.step_seconds >= free_host->predicted.step_seconds);
      T_CHECK(plan_ilp_predicted_peak(g, d, p->decisions, &ce) == p->predicted.peak_live_bytes);
    }
    plan_free(p);
  }
  T_CASE("ilp: host_memory below every tensor's size: no offload, still planned") {
    d->host_memory = 255;
    Plan *p = make(g, d, "ilp", budget, &e);
    T_CHECKF(p != NULL, "%s", e.msg);
    T_CHECK(p && p->host_bytes == 0 && offloaded_bytes(g, p) == 0 && p->arena_bytes <= budget);
    plan_free(p);
    d->host_memory = host;
  }
  T_CASE("offload-all over host_memory: one line naming host_memory and the host bytes it needs") {
    Device big = *d;
    big.host_memory = 0;
    Plan *all = make(g, &big, "offload-all", INT64_MAX / 4, &e);
    T_CHECKF(all != NULL, "%s", e.msg);
    Err fe = {{0}};
    Plan *p = make(g, d, "offload-all", INT64_MAX / 4, &fe);
    T_CHECK(p == NULL);
    char want[160];
    snprintf(want, sizeof want, "needs a host arena of %lld bytes", all ? (long long)all->host_bytes : -1LL);
    T_CHECKF(strstr(fe.msg, want) && strstr(fe.msg, "host_memory is 3145728 bytes") && !strchr(fe.msg, '\n'), "%s",
             fe.msg);
    plan_free(p);
    plan_free(all);
  }
  T_CASE("every strategy's plan fits host_memory or is refused") {
    const char *names[] = {"keep-all", "checkpoint-layers", "sqrt-n", "offload-all", "knapsack", "ilp"};
    for (size_t s = 0; s < sizeof names / sizeof names[0]; s++) {
      Err se = {{0}};
      Plan *p = make(g, d, names[s], budget, &se);
      T_CHECKF(p ? p->host_bytes <= host : se.msg[0] != 0, "%s", names[s]);
      plan_free(p);
    }
  }
  plan_free(free_host);
  device_free(d);
  graph_free(g);
  T_DONE();
}
