/*
 * test_ilp.c - the ilp strategy's claims, each against the simulator:
 * its model's peak equals the simulator's peak to the byte for any decision
 * vector (random ones on the small models), every plan it returns passes
 * sim_check within the budget with that exact peak, it is never slower than
 * a baseline that fits the same budget, an infeasible budget names a
 * smallest budget that really is met, a time limit is honoured with an
 * honest status, its pair moves get back to a plan from two changes away,
 * and GLPK failing inside the solve (made to, by its own memory limit)
 * costs neither the plan nor the bound's honesty. The
 * large-model cases use gpt2-124m at one budget.
 */
#include "ration.h"
#include "test.h"

#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

static const char *baselines[] = {"keep-all", "checkpoint-layers", "sqrt-n", "offload-all", "knapsack"};
#define NBASE (sizeof baselines / sizeof baselines[0])

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The activation ilp's plans (device_homes_only): their peaks are its
 * model's; on h100-sxm-80g the strategy's host twin would move AdamW and
 * its state to the host, outside that model (test_homes covers it). */
static Plan *make(const Graph *g, const Device *d, const char *name, int64_t budget, double limit, Err *e) {
  PlanOptions o = {.strategy = name, .solver = "glpk", .budget_bytes = budget, .time_limit = limit, .quiet = true,
                   .device_homes_only = true};
  return plan_make(g, d, &o, e);
}

/* The smallest budget an infeasible-budget error names, 0 if none. */
static long long named_budget(const char *msg) {
  const char *lead = "smallest budget planned is ", *at = strstr(msg, lead);
  return at ? atoll(at + strlen(lead)) : 0;
}

/* The ilp at the budget an error named: a plan whose arena fits it. */
static void check_named_met(const Graph *g, const Device *d, PlanOptions o, long long named, const char *when) {
  Err e;
  o.budget_bytes = named;
  Plan *q = plan_make(g, d, &o, &e);
  T_CHECKF(q && q->arena_bytes <= named, "%s: at the named budget %lld: %s", when, named, q ? "over" : e.msg);
  plan_free(q);
}

/* The smallest arena of any baseline without a budget, and keep-all's. */
static void range(const Graph *g, const Device *d, int64_t *m, int64_t *k) {
  Err e;
  *m = INT64_MAX;
  *k = plan_keep_all_peak(g, d, &e);
  for (size_t s = 0; s < NBASE; s++) {
    Plan *p = make(g, d, baselines[s], INT64_MAX / 4, 0, &e);
    if (p && p->arena_bytes < *m) *m = p->arena_bytes;
    plan_free(p);
  }
}

/* The model's peak of one vector is the simulator's (else printed). */
static bool peak_exact(const Graph *g, const Device *d, const Decision *dec, const char *what, int it) {
  Err e;
  Plan *p = plan_from_decisions(g, d, dec, &e);
  int64_t ilp = plan_ilp_predicted_peak(g, d, dec, &e);
  bool ok = p && ilp == p->predicted.peak_live_bytes;
  if (!ok)
    printf("  %s %svector %d: model %lld, simulator %lld (%s)\n", g->name, what, it, (long long)ilp,
           p ? (long long)p->predicted.peak_live_bytes : -1LL, ilp < 0 ? e.msg : "");
  plan_free(p);
  return ok;
}

/* Random decision vectors: the model's peak is the simulator's. */
static void check_model_exact(const Graph *g, const Device *d, int n, unsigned seed) {
  Decision *dec = calloc((size_t)g->ntensors, sizeof *dec);
  srand(seed);
  int bad = 0;
  for (int it = 0; it < n; it++) {
    for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
    /* Mostly one decision per vector, so long recompute chains occur. */
    int bias = rand() % 4;
    for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = (Decision)(rand() % 2 ? bias % 3 : rand() % 3);
    bad += !peak_exact(g, d, dec, "", it);
  }
  T_CHECKF(bad == 0, "%s on %s: %d of %d vectors differ", g->name, d->name, bad, n);
  free(dec);
}

/* A random home for tensor t where it may have one (host-refetch or
 * host, else the device), DEC_NONE otherwise. */
static Decision random_home(const Graph *g, int t) {
  if (plan_home_allowed(g, t, DEC_HOST_REFETCH) && rand() % 2) return DEC_HOST_REFETCH;
  return plan_home_allowed(g, t, DEC_HOST) && rand() % 4 ? DEC_HOST : DEC_NONE;
}

/* Whether param x may be host-refetch with optimizer op `op` on the host:
 * it keeps a use after the forward on the device (else its second window
 * would follow the re-runs alone, which the model leaves out). */
static bool refetch_beside(const Graph *g, int x, int op) {
  if (!plan_home_allowed(g, x, DEC_HOST_REFETCH)) return false;
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    for (int k = 0; i != op && o->phase != PHASE_FORWARD && k < o->ninputs + o->noutputs; k++)
      if ((k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs]) == x) return true;
  }
  return false;
}

/* Runs about one in `one_in` optimizer ops that may run on the host
 * there (where d gives host compute), their params and optimizer state
 * host-homed (host-refetch or host where not already homed). How many. */
static int random_host_optimizer(const Graph *g, const Device *d, Decision *dec, int one_in) {
  int n = 0;
  for (int t = 0; d->host_memory_gbps > 0 && t < g->ntensors; t++) {
    int op = plan_host_optimizer_op(g, t);
    if (op < 0 || rand() % one_in) continue;
    const Op *o = &g->ops[op];
    for (int k = 0; k < o->ninputs + o->noutputs; k++) {
      int x = k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs];
      if (x == t || dec[x] == DEC_HOST || (dec[x] == DEC_HOST_REFETCH && refetch_beside(g, x, op))) continue;
      dec[x] = refetch_beside(g, x, op) && rand() % 2 ? DEC_HOST_REFETCH : DEC_HOST;
    }
    dec[t] = DEC_HOST_OPTIMIZER;
    n++;
  }
  return n;
}

/* A descent's sequence of vectors: trials one to three decisions away
 * from the current vector, one in four taken as the next current (so the
 * vectors drift from any base), one in twenty a fresh random vector: the
 * incremental evaluation answers each exactly as the whole one, in the
 * time model and the memory-minimizing one. */
static void check_eval_incremental(const Graph *g, const Device *d, int n, unsigned seed) {
  size_t nt = (size_t)g->ntensors;
  Decision *decs = calloc((size_t)n * nt + 1, sizeof *decs), *cur = calloc(nt + 1, sizeof *cur);
  static const char *const model_name[] = {"", " (memory model)", " (model with homes)"};
  for (PlanIlpModel model = PLAN_ILP_TIME; model <= PLAN_ILP_WITH_HOMES; model++) {
    /* In the model with homes the bases home some params and optimizer
     * state and the moves change homes and host optimizers too, each
     * evaluated incrementally over its base like an activation's change. */
    bool homes = model == PLAN_ILP_WITH_HOMES;
    int homed = 0, on_host = 0;
    srand(seed);
    for (int it = 0; it < n; it++) {
      Decision *v = decs + (size_t)it * nt;
      bool fresh = it == 0 || rand() % 20 == 0;
      for (size_t t = 0; fresh && t < nt; t++) cur[t] = homes && rand() % 3 == 0 ? random_home(g, (int)t) : DEC_NONE;
      if (fresh && homes && rand() % 2) random_host_optimizer(g, d, cur, 4);
      for (int i = 0; fresh && i < g->nstashed; i++) cur[g->stashed[i]] = (Decision)(rand() % 3);
      memcpy(v, cur, nt * sizeof *v);
      for (int k = 1 + rand() % 3; !fresh && k > 0; k--) {
        int t = homes && rand() % 8 == 0 ? rand() % g->ntensors : -1;
        if (t >= 0 && rand() % 4 == 0) random_host_optimizer(g, d, v, 8);
        else if (t >= 0) v[t] = plan_host_optimizer_op(g, t) >= 0 ? DEC_NONE : random_home(g, t);
        else v[g->stashed[rand() % g->nstashed]] = (Decision)(rand() % 3);
      }
      if (rand() % 4 == 0) memcpy(cur, v, nt * sizeof *v);
      for (size_t t = 0; t < nt; t++) homed += v[t] == DEC_HOST || v[t] == DEC_HOST_REFETCH;
      for (size_t t = 0; t < nt; t++) on_host += v[t] == DEC_HOST_OPTIMIZER;
    }
    Err e;
    int differ = -1;
    T_CHECKF(plan_ilp_eval_check(g, d, model, decs, n, &differ, &e) == 0, "%s: %s", g->name, e.msg);
    T_CHECKF(differ == 0, "%s%s: %d of %d vectors evaluated incrementally differ", g->name, model_name[model], differ, n);
    T_CHECKF(!homes || homed > 0, "%s: no vector homed anything", g->name);
    T_CHECKF(!homes || on_host > 0 || !(d->host_memory_gbps > 0), "%s: no vector ran an optimizer op on the host", g->name);
  }
  free(decs), free(cur);
}

/* Random decision vectors with params and optimizer state host-homed
 * (host or host-refetch where allowed; the optimizer on the device): the
 * model's peak, with its home columns, is the simulator's; and some
 * vectors home something, so the home terms are exercised. */
static void check_model_homes_exact(const Graph *g, const Device *d, int n, unsigned seed) {
  Decision *dec = calloc((size_t)g->ntensors, sizeof *dec);
  srand(seed);
  int bad = 0, homed = 0, on_host = 0;
  for (int it = 0; it < n; it++) {
    int bias = rand() % 4, share = 1 + rand() % 3;
    for (int t = 0; t < g->ntensors; t++) {
      dec[t] = DEC_NONE;
      if (rand() % 4 >= share) continue;
      if (plan_home_allowed(g, t, DEC_HOST_REFETCH) && rand() % 2) dec[t] = DEC_HOST_REFETCH;
      else if (plan_home_allowed(g, t, DEC_HOST)) dec[t] = DEC_HOST;
      homed += dec[t] != DEC_NONE;
    }
    if (it % 2) on_host += random_host_optimizer(g, d, dec, 1 + rand() % 4);
    for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = (Decision)(rand() % 2 ? bias % 3 : rand() % 3);
    bad += !peak_exact(g, d, dec, "homes ", it);
  }
  T_CHECKF(bad == 0, "%s on %s: %d of %d vectors with homes differ", g->name, d->name, bad, n);
  T_CHECKF(homed > 0, "%s: no vector homed anything", g->name);
  T_CHECKF(on_host > 0 || !(d->host_memory_gbps > 0), "%s: no vector ran an optimizer op on the host", g->name);
  free(dec);
}

/* Random vectors with params and optimizer state host-homed over kept and
 * offloaded activations: the model's objective (compute, each copy's
 * share of the compute stream, the stalls of the copy queues the homes'
 * copies join) is the simulator's step where every prefetch starts at its
 * issue step, and above it by what prefetches gain by starting earlier:
 * the simulator starts one as soon as the bytes its buffer takes are free
 * (the host runs ahead of the compute stream), which only the layout
 * knows (docs/PLANNING.md 4). Left out of the model, the homes' copies
 * put it below the simulator on vectors that stall. The host row counts
 * plan_host_bound's bytes, and the homes add to it what they add to the
 * plan's host arena, up to the top buffer's alignment padding. Re-runs are left out: the time they add before a
 * copy's due op and the prefetches a pull moves are what the activations'
 * estimate does not see. */
static void check_objective_homes(const Graph *g, const Device *d, int n, unsigned seed) {
  int nt = g->ntensors;
  Decision *dec = calloc((size_t)nt, sizeof *dec), *bare = calloc((size_t)nt, sizeof *bare);
  srand(seed);
  int below = 0, homed = 0, stalled = 0, host_bad = 0, equal = 0, on_host = 0, bounded = 0, bound_above = 0;
  double worst = 0;
  for (int it = 0; it < n; it++) {
    int share = 1 + rand() % 3, offload_pct = rand() % 60;
    for (int t = 0; t < nt; t++) {
      dec[t] = DEC_NONE;
      if (rand() % 4 >= share) continue;
      if (plan_home_allowed(g, t, DEC_HOST_REFETCH) && rand() % 2) dec[t] = DEC_HOST_REFETCH;
      else if (plan_home_allowed(g, t, DEC_HOST)) dec[t] = DEC_HOST;
      homed += dec[t] != DEC_NONE;
    }
    if (it % 2) on_host += random_host_optimizer(g, d, dec, 1 + rand() % 4);
    for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = rand() % 100 < offload_pct ? DEC_OFFLOAD : DEC_KEEP;
    for (int t = 0; t < nt; t++) bare[t] = graph_is_resident(&g->tensors[t]) ? DEC_NONE : dec[t];
    Err e;
    Plan *p = plan_from_decisions(g, d, dec, &e), *pb = plan_from_decisions(g, d, bare, &e);
    double model = plan_ilp_objective(g, d, dec), sim = p ? p->predicted.step_seconds * 1e6 : -1;
    if (!p || model < sim * (1 - 1e-9)) {
      below++;
      printf("  %s on %s vector %d: model %.6f us, simulator %.6f (%s)\n", g->name, d->name, it, model, sim, p ? "" : e.msg);
    }
    equal += p && fabs(model - sim) <= 1e-6 * sim;
    if (p && (model - sim) / sim > worst) worst = (model - sim) / sim;
    int64_t host = plan_ilp_host_bytes(g, d, dec), host_bare = plan_ilp_host_bytes(g, d, bare);
    if (!p || !pb || host != plan_host_bound(g, dec) || llabs((host - host_bare) - (p->host_bytes - pb->host_bytes)) >= PLAN_ALIGNMENT) {
      host_bad++;
      printf("  %s on %s vector %d: model host %lld bytes (without homes %lld), plan %lld (%lld)\n", g->name, d->name, it,
             (long long)host, (long long)host_bare, p ? (long long)p->host_bytes : -1LL, pb ? (long long)pb->host_bytes : -1LL);
    }
    stalled += p && p->predicted.stall_seconds > 0;
    /* The relaxation of the model with homes at the vector's own arena
     * (it fits there) is at most its objective: every fifth vector, where
     * the bound is claimed (no copy share). */
    if (p && it % 5 == 0 && d->copy_compute_share <= 0) {
      HomesSolve hs = {0};
      double lp = plan_ilp_homes_bound(g, d, p->arena_bytes, &hs);
      bounded++;
      if (lp > model * (1 + 1e-9)) {
        bound_above++;
        printf("  %s on %s vector %d: bound over homes %.6f us above the objective %.6f\n", g->name, d->name, it, lp, model);
      }
    }
    plan_free(p), plan_free(pb);
  }
  T_CHECKF(bound_above == 0, "%s on %s: the bound over homes above the objective at %d of %d vectors", g->name, d->name,
           bound_above, bounded);
  T_CHECKF(below == 0, "%s on %s: %d of %d vectors with homes: objective below the simulator", g->name, d->name, below, n);
  T_CHECKF(host_bad == 0, "%s on %s: %d of %d vectors with homes: host bytes differ", g->name, d->name, host_bad, n);
  T_CHECKF(homed > 0 && stalled > 0, "%s on %s: %d homes, %d vectors stalled", g->name, d->name, homed, stalled);
  T_CHECKF(on_host > 0 || !(d->host_memory_gbps > 0), "%s on %s: no vector ran an optimizer op on the host", g->name, d->name);
  printf("  %s on %s: %d vectors (%d optimizer ops on the host), %d stalled, %d equal to the simulator, the rest above by at most %.4f%%\n", g->name,
         d->name, n, on_host, stalled, equal, worst * 100);
  free(dec), free(bare);
}

/* Random offload-heavy decision vectors: the least stalls the model's rows
 * allow are at most what its copy queues give (the rows are what the LP
 * bounds the step time with, so a row the queues can beat would make the
 * bound a lie); and the rows are not idle: some vectors make them bind.
 * The evaluation's forward pass over the rows (what every start and move
 * is scored by) gives the same least stalls as the LP over the rows with
 * the decisions fixed. */
static void check_stall_rows(const Graph *g, const Device *d, int n, bool recompute, unsigned seed) {
  Decision *dec = calloc((size_t)g->ntensors, sizeof *dec);
  srand(seed);
  int bad = 0, binding = 0, unequal = 0;
  for (int it = 0; it < n; it++) {
    for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
    int offload_pct = 30 + 70 * it / n;
    for (int i = 0; i < g->nstashed; i++) {
      int r = rand() % 100;
      dec[g->stashed[i]] = r < offload_pct ? DEC_OFFLOAD : recompute && r % 2 ? DEC_RECOMPUTE : DEC_KEEP;
    }
    Err e;
    double rows, queues, lp;
    if (plan_ilp_stalls(g, d, dec, &rows, &queues, &lp, &e)) {
      bad++;
      printf("  %s vector %d: %s\n", g->name, it, e.msg);
      continue;
    }
    if (rows > queues * (1 + 1e-9) + 1e-6) {
      bad++;
      printf("  %s vector %d: rows %.6f us, queues %.6f us\n", g->name, it, rows, queues);
    }
    if (fabs(rows - lp) > 1e-6 * fmax(1, lp)) {
      unequal++;
      printf("  %s vector %d: rows %.6f us by the forward pass, %.6f by the LP\n", g->name, it, rows, lp);
    }
    binding += rows > 0;
  }
  T_CHECKF(bad == 0, "%s on %s: %d of %d vectors", g->name, d->name, bad, n);
  T_CHECKF(unequal == 0, "%s on %s: the forward pass and the LP differ at %d of %d vectors", g->name, d->name, unequal, n);
  T_CHECKF(binding > 0, "%s on %s: the rows never bind", g->name, d->name);
  free(dec);
}

/* The tree's cuts (c-MIR of the window, queue and memory rows), made at
 * the LP's point and near random vectors: each cuts its point off, and
 * none cuts off a vector that fits the budget (a cut that did would make
 * the tree's bound a lie and could drop the optimum). */
static void check_cuts(const Graph *g, const Device *d, int64_t budget, int n, unsigned seed) {
  Decision *decs = calloc((size_t)n * (size_t)g->ntensors, sizeof *decs);
  srand(seed);
  for (int v = 0; v < n; v++) {
    Decision *dec = decs + (size_t)v * (size_t)g->ntensors;
    int offload_pct = 20 + 50 * v / n, recompute_pct = 60 - 40 * v / n;
    for (int i = 0; i < g->nstashed; i++) {
      int r = rand() % 100;
      dec[g->stashed[i]] = r < offload_pct ? DEC_OFFLOAD : r < offload_pct + recompute_pct ? DEC_RECOMPUTE : DEC_KEEP;
    }
  }
  Err e;
  int ncuts, fits;
  double cut_off, worst;
  int rc = plan_ilp_cut_check(g, d, budget, decs, n, &ncuts, &fits, &cut_off, &worst, &e);
  T_CHECKF(rc == 0, "%s", e.msg);
  if (rc == 0) {
    T_CHECKF(ncuts > 0 && cut_off > 0, "%s at %lld: %d cuts, the least cuts its point off by %g", g->name,
             (long long)budget, ncuts, cut_off);
    T_CHECKF(fits >= n / 10, "%s at %lld: only %d of %d vectors fit", g->name, (long long)budget, fits, n);
    T_CHECKF(worst <= 1e-7, "%s at %lld: a cut is violated by %g of its right side at a vector that fits", g->name,
             (long long)budget, worst);
    printf("  %s at %lld: %d cuts, %d of %d vectors fit, worst %.3g\n", g->name, (long long)budget, ncuts, fits, n, worst);
  }
  free(decs);
}

/* Plans two changes away from the ilp's plan at the budget, each given the
 * plan as the relaxation's preference but for four other tensors (so that
 * fifteen pairs compete): the pair step must get back to the plan or
 * better, within the budget, and leave the plan itself alone. */
static void check_pairs(const Graph *g, const Device *d, int64_t budget, int tries) {
  Err e;
  Plan *q = make(g, d, "ilp", budget, 3, &e);
  T_CHECKF(q != NULL, "%s", e.msg);
  if (!q) return;
  int n = g->ntensors, found = 0;
  Decision *p = malloc((size_t)n * sizeof *p), *out = malloc((size_t)n * sizeof *out);
  Decision *prefer = malloc((size_t)n * sizeof *prefer);
  double q_obj, obj;
  T_CHECKF(plan_ilp_pair_step(g, d, budget, q->decisions, q->decisions, out, &q_obj, &e) == 0 &&
               !memcmp(out, q->decisions, (size_t)n * sizeof *out),
           "the plan itself: %s", e.msg);
  for (int i = 0; i < g->nstashed && found < tries; i++)
    for (int j = i + 1 + i % 7; j < g->nstashed && found < tries; j += 7) {
      int t1 = g->stashed[i], t2 = g->stashed[j];
      memcpy(p, q->decisions, (size_t)n * sizeof *p);
      p[t1] = (Decision)((p[t1] + 1 + j % 2) % 3);
      p[t2] = (Decision)((p[t2] + 1 + i % 2) % 3);
      Err pe;
      int64_t peak = plan_ilp_predicted_peak(g, d, p, &pe);
      if (peak < 0 || peak > budget) continue;
      found++;
      memcpy(prefer, q->decisions, (size_t)n * sizeof *prefer);
      for (int k = 0, s = (i + j) % g->nstashed; k < 4; s = (s + 5) % g->nstashed) {
        int t = g->stashed[s];
        if (t != t1 && t != t2) prefer[t] = (Decision)((prefer[t] + 1 + k % 2) % 3), k++;
      }
      T_CHECKF(plan_ilp_pair_step(g, d, budget, p, prefer, out, &obj, &e) == 0, "%s", e.msg);
      int64_t out_peak = plan_ilp_predicted_peak(g, d, out, &pe);
      T_CHECKF(obj <= q_obj + 1e-9 * q_obj && out_peak >= 0 && out_peak <= budget,
               "%s at %lld, %s and %s changed: %.6f us after the pair step, the plan %.6f; peak %lld", g->name,
               (long long)budget, g->tensors[t1].name, g->tensors[t2].name, obj, q_obj, (long long)out_peak);
    }
  T_CHECKF(found == tries, "%s: %d plans two changes away fit the budget", g->name, found);
  free(p), free(out), free(prefer);
  plan_free(q);
}

/* The repair of an answer over the budget by its layout (plan_ilp_repair_arena)
 * from keep-all, at a budget half its single changes that lower the arena
 * meet: it must end one change away, at the fastest of those that fit, by
 * brute force over every single change (the first change that lowers the
 * arena, the rule before, is another on the three models). */
static void check_repair(const Graph *g, const Device *d) {
  Err e;
  int n = g->ntensors, nlow = 0;
  Decision *dec = malloc((size_t)n * sizeof *dec);
  int64_t *low = malloc((size_t)(2 * g->nstashed + 1) * sizeof *low);
  double *step = malloc((size_t)(2 * g->nstashed + 1) * sizeof *step);
  for (int t = 0; t < n; t++) dec[t] = g->tensors[t].stashed ? DEC_KEEP : DEC_NONE;
  Plan *k = plan_from_decisions(g, d, dec, &e);
  T_CHECKF(k != NULL, "%s", e.msg);
  int64_t arena = k ? k->arena_bytes : 0;
  for (int i = 0; k && i < g->nstashed; i++)
    for (int a = DEC_RECOMPUTE; a <= DEC_OFFLOAD; a++) {
      dec[g->stashed[i]] = (Decision)a;
      Plan *p = plan_from_decisions(g, d, dec, &e);
      if (p && p->arena_bytes < arena) low[nlow] = p->arena_bytes, step[nlow++] = p->predicted.step_seconds;
      plan_free(p);
      dec[g->stashed[i]] = DEC_KEEP;
    }
  T_CHECKF(nlow >= 2, "%s: %d single changes lower keep-all's arena", g->name, nlow);
  if (nlow >= 2) {
    int64_t budget = 0;
    for (int i = 0; i < nlow; i++) {
      int below = 0;
      for (int j = 0; j < nlow; j++) below += low[j] <= low[i];
      if (2 * below >= nlow && (budget == 0 || low[i] < budget)) budget = low[i];
    }
    double fastest = INFINITY;
    for (int i = 0; i < nlow; i++)
      if (low[i] <= budget) fastest = fmin(fastest, step[i]);
    int64_t reached = plan_ilp_repair_arena(g, d, budget, dec, arena);
    int changed = 0;
    for (int i = 0; i < g->nstashed; i++) changed += dec[g->stashed[i]] != DEC_KEEP;
    Plan *p = plan_from_decisions(g, d, dec, &e);
    T_CHECKF(p && reached == p->arena_bytes && reached <= budget && changed == 1 && p->predicted.step_seconds == fastest,
             "%s at %lld: arena %lld (plan's %lld) after %d changes, step %.6f us, the fastest single change that fits %.6f",
             g->name, (long long)budget, (long long)reached, p ? (long long)p->arena_bytes : -1LL, changed,
             p ? p->predicted.step_seconds * 1e6 : -1, fastest * 1e6);
    plan_free(p);
  }
  plan_free(k);
  free(dec), free(low), free(step);
}

/* The ilp plan at one budget against the simulator and the baselines. */
static void check_plan(const Graph *g, const Device *d, int64_t budget, double limit) {
  Err e;
  Plan *p = make(g, d, "ilp", budget, limit, &e);
  double best_base = -1;
  for (size_t s = 0; s < NBASE; s++) {
    Err e2;
    Plan *b = make(g, d, baselines[s], budget, 0, &e2);
    if (b && (best_base < 0 || b->predicted.step_seconds < best_base)) best_base = b->predicted.step_seconds;
    plan_free(b);
  }
  T_CHECKF(p != NULL, "ilp on %s at %lld: %s", g->name, (long long)budget, e.msg);
  if (!p) return;
  Err ce;
  T_CHECKF(sim_check(p, g, &ce) == 0, "ilp on %s at %lld: %s", g->name, (long long)budget, ce.msg);
  T_CHECK(p->arena_bytes <= budget);
  int64_t model = plan_ilp_predicted_peak(g, d, p->decisions, &e);
  T_CHECKF(model == p->predicted.peak_live_bytes, "ilp on %s at %lld: model peak %lld, simulator %lld", g->name,
           (long long)budget, (long long)model, (long long)p->predicted.peak_live_bytes);
  T_CHECKF(best_base < 0 || p->predicted.step_seconds <= best_base * (1 + 1e-9),
           "ilp on %s at %lld: step %.9g, a baseline reaches %.9g", g->name, (long long)budget, p->predicted.step_seconds,
           best_base);
  const SolverInfo *si = &p->solver;
  T_CHECKF(!strcmp(si->name, "glpk"), "solver %s", si->name);
  T_CHECKF(!strcmp(si->status, "optimal") || !strcmp(si->status, "feasible") || !strcmp(si->status, "time_limit"),
           "status %s", si->status);
  T_CHECKF(si->gap >= 0 && si->bound <= si->objective * (1 + 1e-9) && si->seconds >= 0, "objective %g bound %g gap %g",
           si->objective, si->bound, si->gap);
  printf("  %s at %lld: step %.6f s (best baseline %.6f), %s, gap %.4f, %.2f s\n", g->name, (long long)budget,
         p->predicted.step_seconds, best_base, si->status, si->gap, si->seconds);
  plan_free(p);
}

int main(void) {
  Err e;
  Device *h100 = device_load("budgets/h100-sxm-80g.json", &e), *cpu = device_load("budgets/cpu.json", &e);
  /* Every copy field set: a slow link, so copies stall, whose time also
   * takes a share of the compute stream (a CPU backend's profile). */
  Device *slow = device_load("budgets/h100-sxm-80g.json", &e);
  if (slow) slow->d2h_gbps = slow->h2d_gbps = 8, slow->copy_compute_share = 0.58;
  /* ... and the slow link alone, where the bound over homes is claimed. */
  Device *slow_link = device_load("budgets/h100-sxm-80g.json", &e);
  if (slow_link) slow_link->d2h_gbps = slow_link->h2d_gbps = 8;
  if (!h100 || !cpu || !slow || !slow_link) {
    printf("FAIL setup: %s\nRESULT 0 1\n", e.msg);
    return 1;
  }
  const char *small[] = {"models/gpt2-tiny.json", "models/llama-tiny.json", "models/unet.json"};
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
    Graph *g = graph_load(small[i], &e);
    if (!g) {
      T_CASE(small[i]) T_CHECKF(0, "%s", e.msg);
      continue;
    }
    T_CASE("model peak == simulator peak, random decisions (h100, cpu)") {
      check_model_exact(g, h100, 25, 1 + (unsigned)i);
      check_model_exact(g, cpu, 25, 11 + (unsigned)i);
    }
    T_CASE("model peak == simulator peak, random decisions with host homes (h100)")
      check_model_homes_exact(g, h100, 25, 31 + (unsigned)i);
    T_CASE("model objective: the simulated step or above by prefetches started early; host bytes the plan's; random homes") {
      check_objective_homes(g, h100, 25, 51 + (unsigned)i);
      check_objective_homes(g, slow, 25, 61 + (unsigned)i);
      check_objective_homes(g, slow_link, 10, 81 + (unsigned)i);
    }
    T_CASE("incremental evaluation == whole evaluation over random move sequences") {
      check_eval_incremental(g, h100, 300, 51 + (unsigned)i);
      check_eval_incremental(g, slow, 150, 71 + (unsigned)i);
    }
    T_CASE("stall rows never exceed the copy queues, random decisions") check_stall_rows(g, h100, 40, true, 21 + (unsigned)i);
    T_CASE("the tree's cuts cut their point off and hold at every vector that fits") {
      int64_t m, k;
      range(g, h100, &m, &k);
      for (int f = 1; f <= 3; f += 2) check_cuts(g, h100, m + (int64_t)((double)(k - m) * f / 10.0), 200, 41 + (unsigned)i);
    }
    T_CASE("pair moves: two changes away from a plan, the pair step gets back") {
      int64_t m, k;
      range(g, h100, &m, &k);
      check_pairs(g, h100, m + (k - m) / 2, 6);
    }
    if (g->nstashed <= 64)
      T_CASE("the repair of an arena over the budget takes the fastest single change that fits") check_repair(g, h100);
    T_CASE("ilp plans: valid, exact peak, never behind a baseline") {
      int64_t m, k;
      range(g, h100, &m, &k);
      for (int f = 1; f <= 9; f += 4) check_plan(g, h100, m + (int64_t)((double)(k - m) * f / 10.0), 3);
    }
    graph_free(g);
  }
  Graph *tiny = graph_load("models/gpt2-tiny.json", &e);
  T_CASE("infeasible budget: the smallest budget named is met") {
    /* llama-tiny: gpt2-tiny's plan at the budget named takes 500 CPU s. */
    Graph *lt = graph_load("models/llama-tiny.json", &e);
    PlanOptions o = {.strategy = "ilp", .solver = "glpk", .budget_bytes = 1 << 20, .quiet = true};
    Err e2 = {{0}};
    Plan *p = lt ? plan_make(lt, h100, &o, &e2) : NULL;
    T_CHECK(lt && p == NULL);
    long long m = named_budget(e2.msg);
    T_CHECKF(m > 0, "message: %s", e2.msg);
    if (m > 0) {
      T_CHECKF(m > (1 << 20), "named %lld", m);
      check_named_met(lt, h100, o, m, "unlimited");
    }
    plan_free(p);
    graph_free(lt);
  }
  T_CASE("a graph whose resident bytes dominate: the smallest budget within 0.1% of info's lower bound, and met") {
    /* A llama whose vocabulary's params and optimizer state dwarf its
     * activations: the memory solve's descent reaches the least peak any
     * plan has, and the solve stops there (docs/PLANNING.md 5 step 8). */
    ModelConfig mc;
    Buf json = {0};
    Err e2 = {{0}};
    model_defaults("llama", &mc, &e2);
    mc.layers = 8, mc.dim = 256, mc.heads = 4, mc.kv_heads = 2, mc.ffn = 512, mc.vocab = 32000, mc.seq = 256, mc.batch = 1;
    Graph *lg = model_build(&mc, &json, &e2) == 0 ? graph_parse("llama-vocab.json", json.data, json.len, &e2) : NULL;
    T_CHECKF(lg != NULL, "%s", e2.msg);
    int64_t resident, working;
    int at;
    PlanOptions o = {.strategy = "ilp", .solver = "glpk", .quiet = true, .device_homes_only = true};
    char note[sizeof ((SolverInfo *)0)->note];
    int64_t least = lg ? plan_ilp_min_budget(lg, h100, &o, note, &e2) : -1;
    if (lg && info_lower_bound(lg, &resident, &working, &at) == 0) {
      T_CHECKF(least >= resident + working && (double)least <= (double)(resident + working) * 1.001,
               "smallest budget %lld, info's lower bound %lld: %s", (long long)least, (long long)(resident + working), e2.msg);
      check_named_met(lg, h100, o, least, "the smallest budget");
    }
    graph_free(lg);
    buf_free(&json);
  }
  T_CASE("GLPK failing inside the solve: the best plan so far, a bound below the optimum, GLPK's reason") {
    int64_t m, k;
    if (tiny) range(tiny, h100, &m, &k);
    int64_t budget = tiny ? m + (k - m) / 2 : 0;
    Err e2;
    Plan *full = tiny ? make(tiny, h100, "ilp", budget, 0, &e2) : NULL;
    T_CHECKF(full != NULL, "%s", tiny ? e2.msg : e.msg);
    double best_base = INFINITY;
    for (size_t s = 0; full && s < NBASE; s++) {
      Plan *b = make(tiny, h100, baselines[s], budget, 0, &e2);
      if (b) best_base = fmin(best_base, b->predicted.step_seconds);
      plan_free(b);
    }
    /* Each limit fails GLPK somewhere else, up to the first it stays under. */
    int failed = 0;
    for (int mb = 1; full && mb <= 64; mb++) {
      glp_mem_limit(mb);
      Plan *p = make(tiny, h100, "ilp", budget, 0, &e2);
      glp_free_env(); /* the limit goes with it */
      T_CHECKF(p != NULL, "%d MB: %s", mb, e2.msg);
      if (!p) continue;
      if (!p->solver.note[0]) {
        plan_free(p);
        break;
      }
      failed++;
      const SolverInfo *si = &p->solver;
      Err ce;
      T_CHECKF(strstr(si->note, "GLPK failed inside the solve") && strstr(si->note, "memory allocation limit exceeded") &&
                   !strchr(si->note, '\n'),
               "%d MB: note \"%s\"", mb, si->note);
      T_CHECKF(!strcmp(si->status, "feasible") && si->bound <= si->objective && si->bound <= full->solver.objective * (1 + 1e-9),
               "%d MB: %s, bound %.6f, objective %.6f, the unlimited solve's %.6f", mb, si->status, si->bound,
               si->objective, full->solver.objective);
      T_CHECKF(sim_check(p, tiny, &ce) == 0 && p->arena_bytes <= budget, "%d MB: %s", mb, ce.msg);
      T_CHECKF(plan_ilp_predicted_peak(tiny, h100, p->decisions, &ce) == p->predicted.peak_live_bytes, "%d MB", mb);
      T_CHECKF(p->predicted.step_seconds <= best_base * (1 + 1e-9), "%d MB: step %.9g, a baseline reaches %.9g", mb,
               p->predicted.step_seconds, best_base);
      if (failed == 1) printf("  %d MB: %.6f s, bound %.2f us: %s\n", mb, p->predicted.step_seconds, si->bound, si->note);
      plan_free(p);
    }
    T_CHECKF(!full || failed > 0, "GLPK never failed");
    Plan *again = full ? make(tiny, h100, "ilp", budget, 0, &e2) : NULL;
    T_CHECKF(!full || (again && again->predicted.step_seconds == full->predicted.step_seconds), "after the failures: %s",
             again ? "another plan" : e2.msg);
    plan_free(again);
    plan_free(full);
  }
  T_CASE("GLPK failing at an infeasible budget: one line, the budget it names is met, and says when it may not be the least") {
    /* The activation ilp's own refusal (test_homes.c: with homes). */
    PlanOptions o = {.strategy = "ilp", .solver = "glpk", .budget_bytes = 1 << 20, .quiet = true, .device_homes_only = true};
    Err e2 = {{0}};
    Plan *p = tiny ? plan_make(tiny, h100, &o, &e2) : NULL;
    long long least = tiny ? named_budget(e2.msg) : 0;
    T_CHECKF(!tiny || (!p && least > 0), "unlimited: %s", e2.msg);
    plan_free(p);
    char note[sizeof ((SolverInfo *)0)->note];
    /* What `ration report` starts its budget points at. */
    int64_t least_report = tiny ? plan_ilp_min_budget(tiny, h100, &o, note, &e2) : -1;
    T_CHECKF(!tiny || (least_report > 0 && !note[0]), "unlimited: %s", e2.msg);
    int in_mm = 0, in_report = 0, nmet = 0;
    long long met[64];
    for (int mb = 1; least && mb <= 64; mb++) {
      glp_mem_limit(mb);
      int64_t named_report = plan_ilp_min_budget(tiny, h100, &o, note, &e2);
      glp_free_env();
      T_CHECKF(named_report < 0 || (note[0] ? named_report >= least_report : named_report == least_report),
               "%d MB: the report's smallest budget %lld (unlimited %lld), note \"%s\"", mb, (long long)named_report,
               (long long)least_report, note);
      in_report += note[0] != 0;
      glp_mem_limit(mb);
      p = plan_make(tiny, h100, &o, &e2);
      glp_free_env();
      T_CHECKF(!p && !strchr(e2.msg, '\n'), "%d MB: %s", mb, p ? "a plan" : e2.msg);
      plan_free(p);
      long long named = named_budget(e2.msg);
      bool failed = strstr(e2.msg, "GLPK failed inside the solve") != NULL;
      if (!named) { /* no plan at all before the failure: GLPK's reason is the error */
        T_CHECKF(failed, "%d MB: %s", mb, e2.msg);
        continue;
      }
      /* A failed memory-minimizing solve names the least it found, and says so. */
      T_CHECKF(failed ? named >= least && strstr(e2.msg, " (the least found before milp: GLPK failed") : named == least,
               "%d MB: the least is %lld: %s", mb, least, e2.msg);
      if (failed && in_mm++ == 0) printf("  %d MB: %s\n", mb, e2.msg);
      /* Each budget named is planned once: a plan is a function of its
       * budget (the limits that fail GLPK are off by then). */
      bool seen = false;
      for (int i = 0; i < nmet; i++) seen |= met[i] == named;
      if (!seen) {
        char when[32];
        snprintf(when, sizeof when, "%d MB", mb);
        check_named_met(tiny, h100, o, named, when);
        met[nmet++] = named;
      }
      if (!failed) break;
    }
    T_CHECKF(!least || (in_mm > 0 && in_report > 0), "GLPK never failed inside the memory-minimizing solve: %d, %d", in_mm,
             in_report);
  }
  graph_free(tiny);
  Graph *big = graph_load("models/gpt2-124m.json", &e);
  T_CASE("gpt2-124m at the midpoint: valid, exact, never behind a baseline") {
    T_CHECKF(big != NULL, "%s", e.msg);
    if (big) {
      int64_t m, k;
      range(big, h100, &m, &k);
      check_plan(big, h100, m + (k - m) / 2, 4);
    }
  }
  T_CASE("stall rows never exceed the copy queues on gpt2-124m and llama3.2-1b") {
    Graph *l1 = graph_load("models/llama3.2-1b.json", &e);
    T_CHECKF(big && l1, "%s", e.msg);
    /* No re-runs: their pulls can leave the depth-bounded model. */
    if (big) check_stall_rows(big, h100, 12, false, 31);
    if (l1) check_stall_rows(l1, h100, 12, false, 32);
    graph_free(l1);
  }
  T_CASE("time limit: honoured, status honest") {
    if (big) {
      int64_t k = plan_keep_all_peak(big, h100, &e);
      double t0 = now();
      Plan *p = make(big, h100, "ilp", k * 3 / 4, 0.5, &e);
      double took = now() - t0;
      T_CHECKF(p != NULL, "%s", e.msg);
      /* Model building and the final simulations come on top of the limit. */
      T_CHECKF(took < 8, "took %.2f s with a 0.5 s limit", took);
      if (p) {
        T_CHECKF(!strcmp(p->solver.status, "time_limit") || (!strcmp(p->solver.status, "optimal") && p->solver.gap <= 0.001) ||
                     !strcmp(p->solver.status, "feasible"),
                 "status %s gap %g", p->solver.status, p->solver.gap);
        T_CHECK(p->solver.seconds <= 0.5 + 1.5);
        Err ce;
        T_CHECKF(sim_check(p, big, &ce) == 0, "%s", ce.msg);
      }
      plan_free(p);
    }
  }
  graph_free(big);
  device_free(h100);
  device_free(cpu);
  device_free(slow);
  device_free(slow_link);
  T_DONE();
}
