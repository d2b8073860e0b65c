/*
 * test_strategies.c - every strategy on every checked-in model (every .json file in models/)
 * at the benchmark's budget points m + f (k - m): a plan that is returned
 * passes the simulator's checks and fits the budget, a strategy gives up
 * only when its own decisions do not fit, and the ilp strategy is never
 * slower (simulated step time) than any baseline at the same budget (at
 * the midpoint f = 0.5 on the models up to ILP_MAX_OPS ops, to keep the
 * suite fast; bench_plan compares them at every point on every model).
 * Every plan queues the copies it issues together by deadline.
 */
#include "ration.h"
#include "test.h"

#include <glob.h>
#include <stdlib.h>

static const char *baselines[] = {"keep-all", "checkpoint-layers", "sqrt-n", "offload-all", "knapsack"};
#define NBASE (sizeof baselines / sizeof baselines[0])
#define ILP_MAX_OPS 250

/* The plan a strategy makes at a budget, or NULL; *fits tells whether its
 * own decisions fit (what an honest strategy's answer must agree with). */
static Plan *make(const Graph *g, const Device *d, const char *name, int64_t budget, bool *fits) {
  PlanOptions o = {.strategy = name, .solver = "glpk", .budget_bytes = budget, .quiet = true};
  Err e = {{0}};
  Plan *p = plan_make(g, d, &o, &e);
  const PlanStrategy *s = plan_find_strategy(name);
  /* A returned plan is its decisions' plan; only a refusal needs checking. */
  *fits = p && p->arena_bytes <= budget;
  if (p || !s->decide) return p;
  Decision *dec = calloc((size_t)g->ntensors, sizeof *dec);
  for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
  SolverInfo si = {.name = "none"};
  Err e2;
  Plan *q = s->decide(g, d, &o, dec, &si, &e2) == 0 ? plan_from_decisions(g, d, dec, &e2) : NULL;
  *fits = q && q->arena_bytes <= budget;
  T_CHECKF(e.msg[0], "%s on %s: no plan and no message", name, g->name);
  plan_free(q);
  free(dec);
  return p;
}

/* Copies issued together run one after another on their stream, so they
 * must be queued in the order they are waited for (schedule.c): for each
 * run of consecutive offloads (prefetches), the compute steps before their
 * waits never decrease. */
static bool queued_by_deadline(const Plan *p) {
  int *computes_before = calloc((size_t)p->nsteps + 1, sizeof(int)), *wait_of = calloc((size_t)p->nbuffers + 1, sizeof(int));
  bool ok = computes_before && wait_of;
  for (int s = 0, n = 0; ok && s < p->nsteps; s++) {
    computes_before[s] = n;
    n += p->steps[s].kind == STEP_COMPUTE;
    if (p->steps[s].kind == STEP_OFFLOAD_WAIT) wait_of[p->steps[s].from] = s;
    if (p->steps[s].kind == STEP_PREFETCH_WAIT) wait_of[p->steps[s].to] = s;
  }
  for (int s = 1; ok && s < p->nsteps; s++) {
    const Step *a = &p->steps[s - 1], *b = &p->steps[s];
    if (a->kind != b->kind || (a->kind != STEP_OFFLOAD && a->kind != STEP_PREFETCH)) continue;
    int wa = wait_of[a->kind == STEP_OFFLOAD ? a->from : a->to], wb = wait_of[b->kind == STEP_OFFLOAD ? b->from : b->to];
    if (computes_before[wa] > computes_before[wb]) {
      printf("  steps %d and %d: the copy waited for later is queued first\n", s - 1, s);
      ok = false;
    }
  }
  free(computes_before), free(wait_of);
  return ok;
}

static void check_model(const char *path, const Device *d) {
  Err e;
  Graph *g = graph_load(path, &e);
  T_CHECKF(g != NULL, "%s", e.msg);
  if (!g) return;
  int64_t k = plan_keep_all_peak(g, d, &e);
  /* m: the smallest arena of any baseline's unconstrained plan. */
  int64_t m = INT64_MAX;
  for (size_t s = 0; s < NBASE; s++) {
    bool fits;
    Plan *p = make(g, d, baselines[s], INT64_MAX / 4, &fits);
    if (p && p->arena_bytes < m) m = p->arena_bytes;
    plan_free(p);
  }
  T_CHECK(k > 0 && m < INT64_MAX);
  bool have_ilp = plan_find_strategy("ilp") != NULL;
  int points = 0, feasible = 0;
  for (int f = 0; f <= 10; f++) {
    int64_t budget = m + (int64_t)((double)(k - m) * f / 10.0);
    double best_baseline = -1;
    for (size_t s = 0; s < NBASE; s++) {
      bool fits = false;
      Plan *p = make(g, d, baselines[s], budget, &fits);
      T_CHECKF((p != NULL) == fits, "%s on %s at %lld: plan %s but its decisions %s", baselines[s], g->name,
               (long long)budget, p ? "returned" : "refused", fits ? "fit" : "do not fit");
      if (p) {
        Err ce;
        T_CHECKF(sim_check(p, g, &ce) == 0, "%s on %s at %lld: %s", baselines[s], g->name, (long long)budget, ce.msg);
        T_CHECK(p->arena_bytes <= budget && p->predicted.peak_live_bytes <= p->arena_bytes);
        T_CHECKF(queued_by_deadline(p), "%s on %s at %lld", baselines[s], g->name, (long long)budget);
        if (best_baseline < 0 || p->predicted.step_seconds < best_baseline) best_baseline = p->predicted.step_seconds;
        feasible++;
      }
      plan_free(p);
      points++;
    }
    /* The ilp is checked where a solve is quick. */
    if (!have_ilp || g->nops > ILP_MAX_OPS || f != 5) continue;
    bool unused;
    Plan *p = make(g, d, "ilp", budget, &unused);
    if (best_baseline >= 0)
      T_CHECKF(p && p->predicted.step_seconds <= best_baseline * (1 + 1e-9),
               "ilp on %s at %lld: %s %.9g, a baseline reaches %.9g", g->name, (long long)budget,
               p ? "step" : "infeasible, step", p ? p->predicted.step_seconds : 0.0, best_baseline);
    if (p) {
      Err ce;
      T_CHECKF(sim_check(p, g, &ce) == 0, "ilp on %s at %lld: %s", g->name, (long long)budget, ce.msg);
      T_CHECK(p->arena_bytes <= budget);
      T_CHECKF(queued_by_deadline(p), "ilp on %s at %lld", g->name, (long long)budget);
    }
    plan_free(p);
  }
  printf("  %s: %d baseline plans feasible of %d%s\n", g->name, feasible, points,
         !have_ilp ? " (no ilp built)" : g->nops > ILP_MAX_OPS ? " (ilp not checked: large)" : "");
  fflush(stdout);
  graph_free(g);
}

int main(void) {
  Err e;
  Device *d = device_load("budgets/h100-sxm-80g.json", &e);
  glob_t gl;
  if (!d || glob("models/*.json", 0, NULL, &gl) != 0) {
    printf("FAIL setup: %s\nRESULT 0 1\n", d ? "no models/*.json" : e.msg);
    return 1;
  }
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    char name[256];
    snprintf(name, sizeof name, "%s: every strategy at every budget point", gl.gl_pathv[i]);
    T_CASE(name) check_model(gl.gl_pathv[i], d);
  }
  T_CASE("the models are all there") T_CHECK(gl.gl_pathc >= 7);
  globfree(&gl);
  device_free(d);
  T_DONE();
}
