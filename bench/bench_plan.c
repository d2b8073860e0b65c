/*
 * bench_plan.c - the planner's benchmark: every strategy on every graph at
 * the budget points of issue 3 (m + f (k - m), f = 0, 0.1, ..., 1, with k
 * keep-all's arena, the budget its plan needs, and m the smallest budget
 * any strategy meets), as
 * simulated step time over keep-all's, solve seconds, and arena over peak
 * live bytes (fragmentation). Every plan is checked by the simulator. With
 * --exact, the family's gap: Checkmate's optimum (strategy exact, CBC)
 * against ilp on reduced gpt2, llama and unet graphs built in process.
 *
 *   bench_plan [--device FILE] [--time-limit S] GRAPH...   budget sweep
 *   bench_plan --exact [--device FILE] [--time-limit S]    exact vs ilp
 *
 * Output is Markdown for bench/RESULTS.md.
 */
#include "ration.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct Run {
  bool ok;
  double step, seconds, frag;
  int64_t arena;
  char status[16];
} Run;

static double time_limit;
static int failures;

static Run run(const Graph *g, const Device *d, const char *strategy, int64_t budget, double limit) {
  Run r = {0};
  /* Every resident tensor on the device: the sweep compares the strategies
   * over activations, and the ilp's homes search below its all-device
   * smallest budget is not one of them (docs/PLANNING.md 1.1-1.2). */
  PlanOptions o = {.strategy = strategy, .solver = "glpk", .budget_bytes = budget, .time_limit = limit, .quiet = true,
                   .device_homes_only = true};
  Err e = {{0}};
  double t0 = now();
  Plan *p = plan_make(g, d, &o, &e);
  r.seconds = now() - t0;
  if (!p) {
    return r;
  }
  if (sim_check(p, g, &e)) {
    printf("\n**sim_check rejected %s on %s at %lld: %s**\n", strategy, g->name, (long long)budget, e.msg);
    failures++;
  }
  r.ok = true;
  r.step = p->predicted.step_seconds;
  r.arena = p->arena_bytes;
  r.frag = p->predicted.peak_live_bytes ? (double)p->arena_bytes / (double)p->predicted.peak_live_bytes : 1;
  snprintf(r.status, sizeof r.status, "%s", p->solver.status);
  plan_free(p);
  return r;
}

/* Smallest budget some strategy of the table meets: each one's arena when
 * given the keep-all peak, the smallest budget the ilp names, and bisection
 * for knapsack (whose plan depends on the budget), down to the bytes that
 * are resident whatever the plan. */
static int64_t smallest_budget(const Graph *g, const Device *d, int64_t keep_all) {
  int64_t m = INT64_MAX;
  for (const PlanStrategy *s = plan_strategies; s->name; s++) {
    if (!strcmp(s->name, "exact")) continue;
    Run r = run(g, d, s->name, keep_all * 4, time_limit);
    if (r.ok && r.arena < m) m = r.arena;
  }
  int64_t resident = 0;
  for (int t = 0; t < g->ntensors; t++)
    if (graph_is_resident(&g->tensors[t])) resident += g->tensors[t].bytes;
  /* The ilp names its smallest budget when refusing one (issue 3's
   * contract); taken when it then holds. */
  if (plan_find_strategy("ilp")) {
    PlanOptions o = {.strategy = "ilp", .solver = "glpk", .budget_bytes = resident, .time_limit = time_limit,
                     .quiet = true, .device_homes_only = true};
    Err e = {{0}};
    Plan *p = plan_make(g, d, &o, &e);
    const char *at = strstr(e.msg, "budget planned is ");
    long long named = at ? strtoll(at + strlen("budget planned is "), NULL, 10) : 0;
    if (p && p->arena_bytes < m) m = p->arena_bytes;
    plan_free(p);
    if (named > 0 && named < m && run(g, d, "ilp", named, time_limit).ok) m = named;
  }
  for (const PlanStrategy *s = plan_strategies; s->name; s++) {
    if (strcmp(s->name, "knapsack")) continue;
    int64_t lo = resident, hi = m; /* lo fails or is the floor, hi succeeds */
    while (hi - lo > (hi >> 12) + 256) {
      int64_t mid = lo + (hi - lo) / 2;
      Run r = run(g, d, s->name, mid, time_limit);
      if (r.ok) hi = r.arena < mid ? r.arena : mid;
      else lo = mid;
    }
    if (hi < m) m = hi;
  }
  return m;
}

static const char *strategy_names[16];
static int nstrategies;

static void sweep(const char *path, const Device *d) {
  Err e;
  Graph *g = graph_load(path, &e);
  if (!g || graph_add_runtime_tensor(g, d->runtime_bytes, &e)) {
    printf("\n%s\n", e.msg);
    graph_free(g);
    failures++;
    return;
  }
  double t0 = now();
  int64_t peak = plan_keep_all_peak(g, d, &e);
  Run base = run(g, d, "keep-all", INT64_MAX / 4, time_limit);
  /* The arena, not the peak: where the layout fragments, a budget between
   * the two is one keep-all does not meet. */
  int64_t k = base.ok ? base.arena : peak;
  int64_t m = smallest_budget(g, d, k);
  char b1[32], b2[32], b3[32];
  printf("\n### %s (%d ops, %d stashed) on %s\n\n", g->name, g->nops, g->nstashed, d->name);
  printf("keep-all: peak %s, arena %s, step %.6g s; m = %s (smallest budget any strategy meets)\n\n",
         util_fmt_bytes(peak, b1, sizeof b1), util_fmt_bytes(k, b3, sizeof b3), base.step, util_fmt_bytes(m, b2, sizeof b2));
  /* Fragmentation of each strategy's plan when nothing constrains it. */
  printf("arena / peak live with an unbounded budget:");
  for (int s = 0; s < nstrategies; s++) {
    Run r = run(g, d, strategy_names[s], INT64_MAX / 4, time_limit);
    if (r.ok) printf(" %s %.4f;", strategy_names[s], r.frag);
  }
  printf("\n\n| f | budget |");
  for (int s = 0; s < nstrategies; s++) printf(" %s |", strategy_names[s]);
  printf("\n|---|---|");
  for (int s = 0; s < nstrategies; s++) printf("---|");
  printf("\n");
  double worst_frag = 1, sum_frag = 0, max_seconds[16] = {0};
  int nfrag = 0;
  for (int i = 0; i <= 10; i++) {
    int64_t budget = m + (int64_t)((double)(k - m) * i / 10.0);
    printf("| %.1f | %s |", i / 10.0, util_fmt_bytes(budget, b1, sizeof b1));
    for (int s = 0; s < nstrategies; s++) {
      Run r = run(g, d, strategy_names[s], budget, time_limit);
      if (r.seconds > max_seconds[s]) max_seconds[s] = r.seconds;
      if (!r.ok) {
        printf(" - |");
        continue;
      }
      printf(" %.4f%s |", r.step / base.step, strcmp(r.status, "not_used") && strcmp(r.status, "optimal") ? "*" : "");
      if (r.frag > worst_frag) worst_frag = r.frag;
      sum_frag += r.frag;
      nfrag++;
    }
    printf("\n");
  }
  printf("\nslowest plan_make per strategy (s):");
  for (int s = 0; s < nstrategies; s++) printf(" %s %.3f;", strategy_names[s], max_seconds[s]);
  printf("\narena / peak live over the %d feasible plans above: mean %.4f, worst %.4f; sweep took %.1f s\n", nfrag,
         nfrag ? sum_frag / nfrag : 1, worst_frag, now() - t0);
  graph_free(g);
}

/* ------------------------------------------------------ exact vs ilp */

static Graph *build_model(const char *family, int layers, int dim, int seq, int batch, Err *e) {
  ModelConfig c;
  if (model_defaults(family, &c, e)) return NULL;
  c.layers = layers;
  c.dim = dim;
  c.seq = seq;
  c.batch = batch;
  c.dtype = DT_F32;
  if (strcmp(family, "unet")) {
    c.heads = 4;
    c.kv_heads = !strcmp(family, "llama") ? 2 : 4;
    c.vocab = 256;
    c.ffn = !strcmp(family, "llama") ? 3 * dim : 4 * dim;
  }
  char name[64];
  snprintf(name, sizeof name, "%s-l%d", family, layers);
  c.name = name;
  Buf b = {0};
  if (model_build(&c, &b, e)) {
    buf_free(&b);
    return NULL;
  }
  Graph *g = graph_parse(name, b.data, b.len, e);
  buf_free(&b);
  return g;
}

static void exact_table(const Device *d) {
  static const struct {
    const char *family;
    int layers, dim, seq, batch;
  } models[] = {{"gpt2", 1, 64, 128, 8}, {"llama", 1, 64, 128, 8}, {"unet", 1, 32, 32, 4}, {"gpt2", 2, 64, 128, 8}, {"llama", 2, 64, 128, 8}};
  printf("\n| graph | fwd+bwd ops | f | budget | exact (Checkmate, CBC) | status | gap | s | ilp | ilp / exact |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    Err e;
    Graph *g = build_model(models[i].family, models[i].layers, models[i].dim, models[i].seq, models[i].batch, &e);
    if (!g) {
      printf("| %s | %s |\n", models[i].family, e.msg);
      failures++;
      continue;
    }
    int n = 0;
    while (n < g->nops && g->ops[n].phase != PHASE_OPTIMIZER) n++;
    int64_t k = plan_keep_all_peak(g, d, &e);
    int64_t m = smallest_budget(g, d, k);
    for (int f = 0; f <= 4; f++) {
      int64_t budget = m + (int64_t)((double)(k - m) * f / 4.0);
      PlanOptions o = {.strategy = "exact", .budget_bytes = budget, .time_limit = time_limit, .quiet = true};
      SolverInfo si = {.name = "none"};
      Err xe;
      Plan *p = plan_exact_for_peak(g, d, &o, &si, &xe);
      Run ilp = {0};
      bool have_ilp = plan_find_strategy("ilp") != NULL;
      /* The ilp's work counted (no time limit): the same plan however loaded the machine. */
      if (have_ilp) ilp = run(g, d, "ilp", budget, 0);
      char b1[32], ex[64], il[64], ratio[32];
      if (p) snprintf(ex, sizeof ex, "%.6g s", si.objective);
      else snprintf(ex, sizeof ex, "infeasible");
      if (ilp.ok) snprintf(il, sizeof il, "%.6g s", ilp.step);
      else snprintf(il, sizeof il, have_ilp ? "infeasible" : "(no ilp)");
      if (p && ilp.ok) snprintf(ratio, sizeof ratio, "%.4f", ilp.step / si.objective);
      else snprintf(ratio, sizeof ratio, "-");
      printf("| %s | %d | %.2f | %s | %s | %s | %.2g | %.1f | %s | %s |\n", g->name, n, f / 4.0,
             util_fmt_bytes(budget, b1, sizeof b1), ex, p ? si.status : "-", p ? si.gap : 0.0, si.seconds, il, ratio);
      fflush(stdout);
      plan_free(p);
    }
    graph_free(g);
  }
}

int main(int argc, char **argv) {
  const char *device = "budgets/h100-sxm-80g.json";
  bool exact = false;
  int first = 1;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (!strcmp(argv[first], "--exact")) exact = true;
    else if (!strcmp(argv[first], "--device") && first + 1 < argc) device = argv[++first];
    else if (!strcmp(argv[first], "--time-limit") && first + 1 < argc) time_limit = atof(argv[++first]);
    else {
      fprintf(stderr, "usage: bench_plan [--device FILE] [--time-limit S] [--exact] GRAPH...\n");
      return 2;
    }
  }
  Err e;
  Device *d = device_load(device, &e);
  if (!d) {
    fprintf(stderr, "%s\n", e.msg);
    return 2;
  }
  for (const PlanStrategy *s = plan_strategies; s->name && nstrategies < 16; s++)
    if (strcmp(s->name, "exact")) strategy_names[nstrategies++] = s->name;
  if (exact) exact_table(d);
  for (int i = first; i < argc; i++) sweep(argv[i], d);
  device_free(d);
  if (failures) fprintf(stderr, "bench_plan: %d failures\n", failures);
  return failures != 0;
}
