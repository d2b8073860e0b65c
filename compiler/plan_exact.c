/*
 * plan_exact.c - strategy `exact`: Checkmate's MILP (Jain et al., "Checkmate:
 * breaking the memory wall with optimal tensor rematerialization", MLSys
 * 2020), solved with COIN-OR CBC. It is not limited to the schedule family:
 * any forward op may be re-run any number of times at any point, so its
 * optimum bounds what the family (keep / recompute / offload-less) gives up.
 * It has no offload, so the family's ILP can beat it when copies hide.
 *
 * Stages t = 0..N-1 over the forward and backward ops (optimizer ops run
 * once after them). Binaries:
 *   R[t][k]   op k runs in stage t (k <= t; R[t][t] = 1; k < t only for
 *             forward ops whose outputs are all activations)
 *   S[t][v]   activation v is held in memory entering stage t (p(v) < t)
 *   F[t][k][v] v (an activation input or output of k) is freed right after
 *             op k in stage t
 * Rows, as in the paper, with values per tensor instead of per op so that
 * multi-output ops are exact:
 *   dependencies  R[t][k] <= R[t][p(v)] + S[t][v]      for v read by k
 *   holding       S[t+1][v] <= S[t][v] + R[t][p(v)]
 *   freeing       F = R[t][k] * (1 - S[t+1][v]) * prod_{users j>k} (1 - R[t][j]);
 *                 only its upper bounds are rows (F <= each factor), F is
 *                 continuous: freeing only helps, so the solver takes F up
 *                 to the product wherever memory binds, and the optimum
 *                 over R and S is that of the paper's binary F
 *   memory        U[t][k0] = sum_v b_v S[t][v] + out(k0) R[t][k0]
 *                 U[t][k]  = U[t][k'] - sum_v b_v F[t][k'][v] + out(k) R[t][k]
 *                 U[t][k] + workspace(k) R[t][k] <= budget - resident bytes,
 *                 a grad's counted from its first user's own step on
 *                 (plan_grad_start_op: zeroed there, as the family does)
 * Objective: sum of R[t][k] times the op's time. With binary F that is
 * Checkmate's 2n^2 + n|E| binaries; here n^2 + (S per tensor) binaries, and
 * S[t][v] exists only up to v's last reader (holding it longer only costs
 * memory). Still only graphs up to ~80 ops are practical.
 *
 * The solution becomes a real plan (every R[t][k] a compute step, new
 * buffers per run), laid out and checked by the simulator like any other.
 */
#include "ration.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Beyond this the MILP is too large to build, let alone solve. */
#define EXACT_MAX_OPS 120
/* Branch-and-bound nodes without --time-limit: counted work, so the plan
 * does not depend on the machine's load (CBC runs one thread). */
#define EXACT_NODES 20000

/* ------------------------------------------------------------ model */

typedef struct Exact {
  const Graph *g;
  const Device *d;
  int n;            /* stages: the forward and backward ops */
  bool *recomp;     /* op -> may be re-run */
  int **fs;         /* op -> activations it reads or writes (deduplicated) */
  int *nfs;
  int64_t *out_bytes; /* op -> bytes of its activation outputs */
  int64_t resident;   /* bytes of every resident tensor occupied all step */
  int64_t *grads_from; /* stage -> bytes of the grads whose start op it is */
  int *R;           /* [t*n+k] -> column or -1 */
  int *S;           /* [t*ntensors+v] -> column or -1 */
  int **F;          /* [t*n+k] -> nfs[k] columns, NULL if (t,k) inactive */
  double scale;     /* bytes per memory unit in the rows */
  MilpModel m;
  int row;          /* the row ck_term() adds to */
} Exact;

/* Rows are built term by term: ck_term() after ck_row(); only 'L' (<= rhs)
 * and 'E' rows occur. */
static void ck_row(Exact *x, char sense, double rhs) { x->row = milp_add_row(&x->m, sense == 'E' ? rhs : -HUGE_VAL, rhs, 0, NULL, NULL); }

static void ck_term(Exact *x, int col, double coef) {
  if (col >= 0 && x->row >= 0) milp_add_term(&x->m, x->row, col, coef);
}

static bool is_act(const Graph *g, int v) { return !graph_is_resident(&g->tensors[v]); }

static int R_at(const Exact *x, int t, int k) { return k > t ? -1 : x->R[t * x->n + k]; }
static int S_at(const Exact *x, int t, int v) { return t >= x->n ? -1 : x->S[(size_t)t * x->g->ntensors + v]; }

/* Resident bytes occupied for the whole step: all but the grads that have
 * a start op. */
static int64_t resident_all_step(const Graph *g) {
  int64_t bytes = 0;
  for (int t = 0; t < g->ntensors; t++)
    if (!is_act(g, t) && plan_grad_start_op(g, t) < 0) bytes += g->tensors[t].bytes;
  return bytes;
}

/* Graph facts the model needs; -1 with e set on a graph it cannot take. */
static int exact_prepare(Exact *x, Err *e) {
  const Graph *g = x->g;
  int n = 0;
  while (n < g->nops && g->ops[n].phase != PHASE_OPTIMIZER) n++;
  for (int i = n; i < g->nops; i++)
    if (g->ops[i].phase != PHASE_OPTIMIZER)
      return err_set(e, "%s: ops[%d]: exact needs the optimizer ops last, but \"%s\" follows them", g->path, i,
                     g->ops[i].name);
  if (n > EXACT_MAX_OPS)
    return err_set(e, "%s: exact (Checkmate's MILP) is for graphs up to ~80 forward+backward ops; this one has %d "
                      "(limit %d)", g->path, n, EXACT_MAX_OPS);
  x->n = n;
  x->recomp = util_xcalloc((size_t)n, sizeof *x->recomp);
  x->fs = util_xcalloc((size_t)n, sizeof *x->fs);
  x->nfs = util_xcalloc((size_t)n, sizeof *x->nfs);
  x->out_bytes = util_xcalloc((size_t)n, sizeof *x->out_bytes);
  x->R = util_xcalloc((size_t)n * (size_t)n, sizeof *x->R);
  x->S = util_xcalloc((size_t)n * (size_t)g->ntensors, sizeof *x->S);
  x->F = util_xcalloc((size_t)n * (size_t)n, sizeof *x->F);
  x->grads_from = util_xcalloc((size_t)n + 1, sizeof *x->grads_from);
  if (!x->recomp || !x->fs || !x->nfs || !x->out_bytes || !x->R || !x->S || !x->F || !x->grads_from)
    return err_set(e, "%s: out of memory", g->path);
  x->resident = resident_all_step(g);
  for (int t = 0; t < g->ntensors; t++) {
    int z = plan_grad_start_op(g, t);
    /* A grad first used by an optimizer op (after every stage) is counted
     * by the simulator alone. */
    if (z >= 0 && z < n) x->grads_from[z] += g->tensors[t].bytes;
  }
  for (int k = 0; k < n; k++) {
    const Op *o = &g->ops[k];
    x->recomp[k] = o->phase == PHASE_FORWARD;
    if (!(x->fs[k] = util_xcalloc((size_t)(o->ninputs + o->noutputs), sizeof(int))))
      return err_set(e, "%s: out of memory", g->path);
    for (int j = 0; j < o->ninputs + o->noutputs; j++) {
      int v = j < o->ninputs ? o->inputs[j] : o->outputs[j - o->ninputs];
      if (!is_act(g, v)) {
        if (j >= o->ninputs) x->recomp[k] = false; /* writes a resident tensor: a side effect */
        continue;
      }
      bool seen = false;
      for (int q = 0; q < x->nfs[k]; q++) seen |= x->fs[k][q] == v;
      if (!seen) x->fs[k][x->nfs[k]++] = v;
      if (j >= o->ninputs) x->out_bytes[k] += g->tensors[v].bytes;
    }
  }
  return 0;
}

static void exact_release(Exact *x) {
  for (int k = 0; x->fs && k < x->n; k++) free(x->fs[k]);
  for (int i = 0; x->F && i < x->n * x->n; i++) free(x->F[i]);
  free(x->recomp);
  free(x->fs);
  free(x->nfs);
  free(x->out_bytes);
  free(x->grads_from);
  free(x->R);
  free(x->S);
  free(x->F);
  milp_model_free(&x->m);
}

static bool reads(const Op *o, int v) {
  for (int k = 0; k < o->ninputs; k++)
    if (o->inputs[k] == v) return true;
  return false;
}

/* Columns and rows for a budget of `avail` bytes above the resident ones. */
static int exact_build(Exact *x, int64_t avail, Err *e) {
  const Graph *g = x->g;
  MilpModel *m = &x->m;
  int n = x->n, nt = g->ntensors;
  x->scale = avail > 0 ? (double)avail : 1.0;
  for (int t = 0; t < n; t++)
    for (int k = 0; k <= t; k++) {
      bool active = k == t || x->recomp[k];
      x->R[t * n + k] = !active ? -1 : milp_add_col(m, k == t ? 1 : 0, 1, cost_op_seconds(g, x->d, k) * 1e6, true);
    }
  for (int t = 0; t < n; t++)
    for (int v = 0; v < nt; v++) {
      const Tensor *tv = &g->tensors[v];
      /* Holding a tensor past its last reader only costs memory. */
      bool exists = is_act(g, v) && tv->producer >= 0 && tv->producer < t && (tv->is_output || t <= tv->last_read);
      x->S[(size_t)t * nt + v] = exists ? milp_add_col(m, tv->is_output ? 1 : 0, 1, 0, true) : -1;
    }
  for (int t = 0; t < n; t++)
    for (int k = 0; k <= t; k++) {
      if (R_at(x, t, k) < 0 || !x->nfs[k]) continue;
      int *cols = util_xcalloc((size_t)x->nfs[k], sizeof(int));
      if (!cols) return err_set(e, "%s: out of memory", g->path);
      x->F[t * n + k] = cols;
      for (int q = 0; q < x->nfs[k]; q++) cols[q] = milp_add_col(m, 0, g->tensors[x->fs[k][q]].is_output ? 0 : 1, 0, false);
    }
  for (int t = 0; t < n; t++) {
    /* Dependencies of every op that may run in stage t. */
    for (int k = 0; k <= t; k++) {
      if (R_at(x, t, k) < 0) continue;
      const Op *o = &g->ops[k];
      for (int j = 0; j < o->ninputs; j++) {
        int v = o->inputs[j];
        if (!is_act(g, v)) continue;
        ck_row(x, 'L', 0);
        ck_term(x, R_at(x, t, k), 1);
        ck_term(x, R_at(x, t, g->tensors[v].producer), -1);
        ck_term(x, S_at(x, t, v), -1);
      }
    }
    /* A re-run is only worth its time if a later op of the stage reads
     * one of its outputs: a valid cut that tightens the relaxation. */
    for (int k = 0; k < t; k++) {
      if (R_at(x, t, k) < 0) continue;
      ck_row(x, 'L', 0);
      ck_term(x, R_at(x, t, k), 1);
      for (int j = k + 1; j <= t; j++) {
        bool uses = false;
        for (int q = 0; q < g->ops[k].noutputs && R_at(x, t, j) >= 0; q++) uses |= reads(&g->ops[j], g->ops[k].outputs[q]);
        if (uses) ck_term(x, R_at(x, t, j), -1);
      }
    }
    /* Holding into the next stage. */
    for (int v = 0; v < nt && t + 1 < n; v++) {
      if (S_at(x, t + 1, v) < 0 || g->tensors[v].producer == t) continue;
      ck_row(x, 'L', 0);
      ck_term(x, S_at(x, t + 1, v), 1);
      ck_term(x, S_at(x, t, v), -1);
      ck_term(x, R_at(x, t, g->tensors[v].producer), -1);
    }
    /* Freeing: F <= R[t][k], F <= 1 - S[t+1][v], F <= 1 - R[t][j] for
     * every later reader j. Freeing only lowers memory, so the solver
     * raises F to the product of those binaries wherever that matters, and
     * F need not be integer: the optimum over R and S is the paper's. */
    for (int k = 0; k <= t; k++) {
      const int *fc = R_at(x, t, k) >= 0 ? x->F[t * n + k] : NULL;
      for (int q = 0; fc && q < x->nfs[k]; q++) {
        int v = x->fs[k][q];
        if (g->tensors[v].is_output) continue;
        ck_row(x, 'L', 0);
        ck_term(x, fc[q], 1);
        ck_term(x, R_at(x, t, k), -1);
        if (S_at(x, t + 1, v) >= 0) {
          ck_row(x, 'L', 1);
          ck_term(x, fc[q], 1);
          ck_term(x, S_at(x, t + 1, v), 1);
        }
        for (int j = k + 1; j <= t; j++)
          if (R_at(x, t, j) >= 0 && reads(&g->ops[j], v)) {
            ck_row(x, 'L', 1);
            ck_term(x, fc[q], 1);
            ck_term(x, R_at(x, t, j), 1);
          }
      }
    }
    /* Memory after each op of the stage, plus its workspace, within the
     * budget; U in units of the budget keeps the coefficients near 1. */
    int prev = -1, prev_u = -1;
    int64_t grads = 0; /* of earlier stages' start ops; stage t's from op t on */
    for (int s = 0; s < t; s++) grads += x->grads_from[s];
    for (int k = 0; k <= t; k++) {
      if (R_at(x, t, k) < 0) continue;
      if (k == t) grads += x->grads_from[t];
      int u = milp_add_col(m, 0, HUGE_VAL, 0, false);
      ck_row(x, 'E', 0);
      ck_term(x, u, 1);
      ck_term(x, R_at(x, t, k), -(double)x->out_bytes[k] / x->scale);
      if (prev < 0) {
        for (int v = 0; v < nt; v++)
          if (S_at(x, t, v) >= 0) ck_term(x, S_at(x, t, v), -(double)g->tensors[v].bytes / x->scale);
      } else {
        ck_term(x, prev_u, -1);
        for (int q = 0; x->F[t * n + prev] && q < x->nfs[prev]; q++)
          ck_term(x, x->F[t * n + prev][q], (double)g->tensors[x->fs[prev][q]].bytes / x->scale);
      }
      ck_row(x, 'L', (double)(avail - grads) / x->scale);
      ck_term(x, u, 1);
      ck_term(x, R_at(x, t, k), (double)g->ops[k].workspace / x->scale);
      prev = k;
      prev_u = u;
    }
  }
  if (m->failed) return err_set(e, "%s: out of memory building the exact MILP", g->path);
  return 0;
}

/* The keep-all schedule as a MIP start: each op once, every activation
 * held from its producer to its last reader. */
static void exact_keep_all_start(const Exact *x, double *start) {
  const Graph *g = x->g;
  int n = x->n, nt = g->ntensors;
  for (int c = 0; c < x->m.ncols; c++) start[c] = 0;
  for (int t = 0; t < n; t++) {
    start[R_at(x, t, t)] = 1;
    for (int v = 0; v < nt; v++) {
      const Tensor *tv = &g->tensors[v];
      if (S_at(x, t, v) >= 0 && (tv->is_output || t <= tv->last_read)) start[S_at(x, t, v)] = 1;
    }
    const int *fc = x->F[t * n + t];
    for (int q = 0; fc && q < x->nfs[t]; q++) {
      const Tensor *tv = &g->tensors[x->fs[t][q]];
      start[fc[q]] = !tv->is_output && tv->last_read <= t;
    }
  }
}

/* ------------------------------------------------------------- plan */

/* Every R[t][k] = 1 becomes a compute step, in stage then op order; each
 * run writes new buffers, so a buffer lives from its run to its last reader. */
static Plan *exact_plan(const Exact *x, const double *sol, Err *e) {
  const Graph *g = x->g;
  Plan *p = plan_new(g);
  int *cur = util_xcalloc((size_t)g->ntensors, sizeof *cur);
  if (!p || !cur) goto oom;
  snprintf(p->device, sizeof p->device, "%s", x->d->name);
  for (int v = 0; v < g->ntensors; v++) {
    cur[v] = -1;
    if (!is_act(g, v) && (cur[v] = plan_add_buffer(p, v, -1, g->tensors[v].bytes, SPACE_DEVICE)) < 0) goto oom;
    if (!is_act(g, v)) p->buffers[cur[v]].home = true;
  }
  for (int t = 0; t < g->nops; t++)
    for (int k = 0; k <= t; k++) {
      bool run = k == t || (t < x->n && R_at(x, t, k) >= 0 && sol[R_at(x, t, k)] > 0.5);
      if (!run) continue;
      const Op *o = &g->ops[k];
      if (k == t && plan_add_grad_zeros(p, g, k, cur)) goto oom;
      Step *s = plan_add_step(p, STEP_COMPUTE);
      if (!s) goto oom;
      s->op = k;
      s->recompute = k != t;
      s->inputs = util_xcalloc((size_t)o->ninputs, sizeof(int));
      s->outputs = util_xcalloc((size_t)o->noutputs, sizeof(int));
      if (!s->inputs || !s->outputs) goto oom;
      for (int j = 0; j < o->ninputs; j++) {
        if (cur[o->inputs[j]] < 0) {
          err_set(e, "%s: exact: the solution reads \"%s\" in stage %d before any op wrote it", g->path,
                  g->tensors[o->inputs[j]].name, t);
          goto fail;
        }
        s->inputs[j] = cur[o->inputs[j]];
      }
      if (o->workspace > 0 && (s->workspace = plan_add_buffer(p, -1, k, o->workspace, SPACE_DEVICE)) < 0) goto oom;
      for (int j = 0; j < o->noutputs; j++) {
        int v = o->outputs[j];
        if (is_act(g, v) && (cur[v] = plan_add_buffer(p, v, -1, g->tensors[v].bytes, SPACE_DEVICE)) < 0) goto oom;
        s->outputs[j] = cur[v];
        if (s->recompute && g->tensors[v].stashed) p->decisions[v] = DEC_RECOMPUTE;
      }
    }
  for (int i = 0; i < g->nstashed; i++)
    if (p->decisions[g->stashed[i]] == DEC_NONE) p->decisions[g->stashed[i]] = DEC_KEEP;
  free(cur);
  return p;
oom:
  err_set(e, "%s: out of memory", g->path);
fail:
  free(cur);
  plan_free(p);
  return NULL;
}

/* Layout and simulation of a built plan, as plan_from_decisions does. */
static int exact_finish(Plan *p, const Graph *g, const Device *d, Err *e) {
  p->budget_bytes = INT64_MAX; /* checked by plan_make against the real one */
  return plan_finish(p, g, d, e);
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One MILP solve at `avail` bytes; a plan, or NULL with e set. */
static Plan *exact_solve(const Graph *g, const Device *d, const PlanOptions *o, int64_t avail, SolverInfo *si,
                         Err *e) {
  Exact x = {.g = g, .d = d};
  Plan *p = NULL;
  MilpResult r = {0};
  double t0 = now_seconds(), limit = o->time_limit;
  if (exact_prepare(&x, e) || exact_build(&x, avail, e)) goto out;
  MilpModel *m = &x.m;
  if (!o->quiet)
    fprintf(stderr, "exact: CBC on %d columns, %d rows, %s %g\n", m->ncols, m->nrows,
            limit > 0 ? "seconds at most" : "nodes at most", limit > 0 ? limit : EXACT_NODES);
  int64_t keep_all = plan_keep_all_peak(g, d, e);
  if (keep_all < 0) goto out;
  if (keep_all - x.resident <= avail && (m->start = util_xcalloc((size_t)m->ncols + 1, sizeof *m->start)))
    exact_keep_all_start(&x, m->start);
  /* mip_gap 0: CBC's own gap. */
  MilpOptions mo = {.solver = "cbc", .time_limit = limit, .node_limit = limit > 0 ? 0 : EXACT_NODES, .quiet = true};
  if (milp_solve(m, &mo, &r, e)) goto out;
  if (r.status == MILP_INFEASIBLE || r.status == MILP_NO_SOLUTION) {
    char b1[32];
    if (r.status == MILP_INFEASIBLE)
      err_set(e, "%s: exact: no schedule, even with arbitrary recomputation, fits a budget of %s (CBC proved it "
                 "infeasible)", g->path, util_fmt_bytes(avail + x.resident, b1, sizeof b1));
    else
      err_set(e, "%s: exact: CBC found no schedule within %g %s", g->path, limit > 0 ? limit : EXACT_NODES,
              limit > 0 ? "seconds (--time-limit)" : "nodes");
    goto out;
  }
  /* Ops that run once whatever the plan: the optimizer and every R[t][t]. */
  double fixed = 0;
  for (int k = x.n; k < g->nops; k++) fixed += cost_op_seconds(g, d, k);
  snprintf(si->name, sizeof si->name, "cbc");
  snprintf(si->status, sizeof si->status, "%s", r.status == MILP_OPTIMAL ? "optimal" : r.status == MILP_TIME_LIMIT ? "time_limit" : "feasible");
  si->objective = r.objective * 1e-6 + fixed;
  si->bound = r.status == MILP_OPTIMAL ? si->objective : r.bound * 1e-6 + fixed;
  si->gap = si->objective > 0 ? (si->objective - si->bound) / si->objective : 0;
  p = exact_plan(&x, r.x, e);
  if (p && exact_finish(p, g, d, e)) {
    plan_free(p);
    p = NULL;
  }
out:
  si->seconds = now_seconds() - t0;
  milp_result_free(&r);
  exact_release(&x);
  return p;
}

Plan *plan_exact_for_peak(const Graph *g, const Device *d, const PlanOptions *o, SolverInfo *si, Err *e) {
  return exact_solve(g, d, o, o->budget_bytes - resident_all_step(g), si, e);
}

Plan *plan_build_exact(const Graph *g, const Device *d, const PlanOptions *o, SolverInfo *si, Err *e) {
  /* The MILP bounds live bytes; when the layout's fragmentation pushes the
   * arena over the budget, ask again for that much less. */
  PlanOptions tight = *o;
  double spent = 0, limit = o->time_limit;
  for (int round = 0; round < 4; round++) {
    /* The limit is for the whole strategy: a later round gets what is left. */
    if (round > 0 && limit > 0 && spent >= limit) {
      err_set(e, "%s: exact: the layout of the solution found within the %g s time limit overflows the budget",
              g->path, limit);
      return NULL;
    }
    if (limit > 0) tight.time_limit = limit - spent;
    Plan *p = plan_exact_for_peak(g, d, &tight, si, e);
    spent += si->seconds;
    si->seconds = spent;
    if (!p && round > 0) {
      /* The tightened budget is not the user's: say what really failed. */
      char b1[32], b2[32];
      err_set(e, "%s: exact: a solution fits the budget of %s in live bytes but not once laid out, and none fits "
                 "with %s left for the layout's alignment and fragmentation", g->path,
              util_fmt_bytes(o->budget_bytes, b1, sizeof b1), util_fmt_bytes(o->budget_bytes - tight.budget_bytes, b2, sizeof b2));
      return NULL;
    }
    if (!p || p->arena_bytes <= o->budget_bytes) return p;
    tight.budget_bytes -= p->arena_bytes - o->budget_bytes;
    plan_free(p);
  }
  char b1[32];
  err_set(e, "%s: exact: the layout of every solution overflows the budget of %s", g->path,
          util_fmt_bytes(o->budget_bytes, b1, sizeof b1));
  return NULL;
}
