/*
 * homes.c - host homes of params and optimizer state, and the host
 * optimizer, as columns of the ILP: per candidate tensor a binary H (its
 * home on the host, one device window) and, for a param the forward
 * leaves unchanged, F (host-refetch, two windows); per grad whose
 * optimizer op may run on the host a binary X (that op on the host,
 * X <= H + F of each of its operands). Each with its exact device-memory
 * terms, its copies on the copy streams (queued with the offloaded
 * activations' by ilp_eval_stalls, which also runs the host stream) and
 * the compute its copies take, or X's op gives back, on the compute
 * stream (docs/PLANNING.md section 3, "Host homes"). The windows and
 * copies are the builder's static positions (plan_home_copies: a copy
 * back's wait counts every op's device time, so each home's positions
 * depend on its own op's place alone), so a vector with homes and host
 * optimizers has the simulator's peak to the byte. Only the evaluated
 * model has them (ilp_build_with_homes): a solve decides the activations
 * alone; plan_ilp_homes_search moves homes, host optimizers and
 * activations together in the evaluated model.
 */
#include "ilp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The device terms of t homed as `how` (column col), every optimizer op
 * on the device: its bytes off the device at every position, back on in
 * its windows. host: one window, from its prefetch's issue op to the wait
 * of its copy back. host-refetch: the first window ends at its last
 * forward reader; the second is needed at its first use after the
 * forward (static) or earlier, at the re-run of a forward reader that
 * comes first (a condition on Y, as an offloaded tensor's prefetch).
 * h: plan_home_copies' answer for it. */
static void home_terms(Ilp *md, int t, Decision how, const HomeCopies *h, int col) {
  const Graph *g = md->g;
  int64_t bytes = g->tensors[t].bytes;
  Lin on = ilp_var(md, col), off = on;
  off.c[0] = -1;
  ilp_term(md, 0, md->npos - 1, &off, bytes);
  int last_fwd = g->tensors[t].last_fwd_read, end = md->grp_comp[h->wait_op];
  if (how != DEC_HOST_REFETCH) {
    ilp_term(md, md->grp_first[h->issue[0]], end, &on, bytes);
    return;
  }
  ilp_term(md, md->grp_first[h->issue[0]], md->grp_comp[last_fwd], &on, bytes);
  ilp_term(md, md->grp_first[h->issue[1]], end, &on, bytes);
  /* A bound model that is not exact leaves it out: it only adds bytes,
   * so the memory rows without it admit every vector they admitted (a
   * relaxation), and its product columns made the relaxation degenerate
   * (31,005 simplex iterations instead of 515 at gpt2-124m's midpoint,
   * docs/PLANNING.md section 3). */
  if (!md->bound_only || md->bound_exact) ilp_early_need(md, t, &on, last_fwd, h->need[1], h->issue[1], bytes);
}

/* t homed as `how` has static windows: the step writes it (a device copy
 * never written lives to its last use, which a re-run can move). */
static bool modelled(const Ilp *md, int t, Decision how, Decision *dec, HomeCopies *h) {
  if (!plan_home_allowed(md->g, t, how)) return false;
  dec[t] = how;
  plan_home_copies(md->g, md->d, dec, NULL, t, h);
  dec[t] = DEC_NONE;
  return h->last_write >= 0 && h->need[0] >= 0 && (how != DEC_HOST_REFETCH || h->need[1] >= 0);
}

static void push_copy(Ilp *md, int s, const HomeCopy *c, int *cap) {
  if (!ilp_push((void **)&md->hcopy[s], md->nhcopy[s], &cap[s], sizeof(HomeCopy))) {
    md->failed = true;
    return;
  }
  md->hcopy[s][md->nhcopy[s]++] = *c;
}

/* t's copies homed as `how` (h: plan_home_copies' answer): host's one
 * prefetch and its copy back; host-refetch adds its second window's
 * prefetch. */
static void add_copies(Ilp *md, int t, Decision how, const HomeCopies *h, int *cap) {
  double h2d = cost_h2d_seconds(md->d, md->g->tensors[t].bytes) * 1e6, d2h = cost_d2h_seconds(md->d, md->g->tensors[t].bytes) * 1e6;
  HomeCopy c[3];
  int stream[3], n = 0;
  if (how == DEC_HOST) {
    c[n] = (HomeCopy){t, h->issue[0], h->need[0], -1, false, h2d}, stream[n++] = 1;
    c[n] = (HomeCopy){t, h->last_write, h->wait_op, -1, false, d2h}, stream[n++] = 0;
  } else {
    c[n] = (HomeCopy){t, h->issue[1], h->need[1], -1, true, h2d}, stream[n++] = 1;
  }
  for (int i = 0; i < n; i++) push_copy(md, stream[i], &c[i], cap);
}

/* Queue order among copies issued together: by due op, then as the
 * builder lists them (tensor, then window). */
static int cmp_copy(const void *a, const void *b) {
  const HomeCopy *x = a, *y = b;
  if (x->issue != y->issue) return x->issue - y->issue;
  if (x->due != y->due) return x->due - y->due;
  if (x->t != y->t) return x->t - y->t;
  return (int)x->refetch - (int)y->refetch;
}

/* Each stream's copies in queue order, and grouped by due op. */
static void order_copies(Ilp *md) {
  int n = md->g->nops;
  for (int s = 0; s < 2; s++) {
    if (md->nhcopy[s]) qsort(md->hcopy[s], (size_t)md->nhcopy[s], sizeof(HomeCopy), cmp_copy);
    md->hdue_first[s] = util_xcalloc((size_t)n + 2, sizeof(int));
    md->hdue[s] = util_xcalloc((size_t)md->nhcopy[s] + 1, sizeof(int));
    int *fill = util_xcalloc((size_t)n + 1, sizeof(int));
    if (!md->hdue_first[s] || !md->hdue[s] || !fill) {
      md->failed = true;
      free(fill);
      return;
    }
    for (int i = 0; i < md->nhcopy[s]; i++) md->hdue_first[s][md->hcopy[s][i].due + 1]++;
    for (int b = 0; b < n; b++) md->hdue_first[s][b + 1] += md->hdue_first[s][b];
    for (int i = 0; i < md->nhcopy[s]; i++) {
      int b = md->hcopy[s][i].due;
      md->hdue[s][md->hdue_first[s][b] + fill[b]++] = i;
    }
    free(fill);
  }
  /* Each host optimizer's grad copy, which its host op waits for. */
  for (int i = 0; i < md->nhcopy[0]; i++) {
    int t = md->hcopy[0][i].t;
    if (md->colX[t] >= 0) md->xcopy[plan_host_optimizer_op(md->g, t)] = i;
  }
}

/* What a home's copies take of the compute stream where copies take a
 * share of it (sim.c charges it at each copy's issue), us: host's
 * prefetch and copy back, host-refetch's two prefetches and copy back. */
static double copies_share(const Ilp *md, int t, Decision how) {
  if (md->min_memory) return 0;
  int64_t bytes = md->g->tensors[t].bytes;
  double h2d = cost_h2d_seconds(md->d, bytes), d2h = cost_d2h_seconds(md->d, bytes);
  return md->d->copy_compute_share * ((how == DEC_HOST_REFETCH ? 2 : 1) * h2d + d2h) * 1e6;
}

/* ------------------------------------------------------------ the host optimizer */

/* The last op but `skip` that reads or writes t, -1 if none. */
static int last_use_but(const Graph *g, int t, int skip) {
  for (int i = g->nops - 1; i >= 0; i--) {
    const Op *o = &g->ops[i];
    for (int k = 0; i != skip && k < o->ninputs + o->noutputs; k++)
      if ((k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs]) == t) return i;
  }
  return -1;
}

/* What grad gr's optimizer op `op` on the host changes of its operand t,
 * homed: from position *from to *to t is on the device no longer (its
 * last window ends at its last use on the device, or at the last re-run
 * of a forward reader after it; or t has no window at all), its copy back
 * goes (*back) and its first prefetch too where it has no use left on the
 * device (*fetch). *host: t may only be homed as host with it
 * (host-refetch's second window would have no static use left: the
 * re-runs alone would decide it). False where another write would decide
 * the change. dec: all DEC_NONE, returned so. */
static bool operand_change(const Ilp *md, int gr, int op, int t, Decision *dec, int *from, int *to, bool *back, bool *fetch,
                           bool *host) {
  const Graph *g = md->g;
  HomeCopies h[2], f[2];
  for (int x = 0; x < 2; x++) {
    dec[gr] = x ? DEC_HOST_OPTIMIZER : DEC_NONE;
    dec[t] = DEC_HOST;
    plan_home_copies(g, md->d, dec, NULL, t, &h[x]);
    dec[t] = DEC_HOST_REFETCH;
    if (md->colF[t] >= 0) plan_home_copies(g, md->d, dec, NULL, t, &f[x]);
  }
  dec[gr] = dec[t] = DEC_NONE;
  int last = last_use_but(g, t, op);
  if (h[1].last_write >= 0 || (h[1].need[0] >= 0 && (h[1].need[0] != h[0].need[0] || h[1].issue[0] != h[0].issue[0])))
    return false;
  *host = md->colF[t] < 0 || f[1].need[1] < 0;
  if (!*host && (f[1].need[1] != f[0].need[1] || f[1].issue[1] != f[0].issue[1] || f[0].wait_op != h[0].wait_op)) return false;
  *back = true, *fetch = h[1].need[0] < 0;
  *to = md->grp_comp[h[0].wait_op];
  *from = *fetch ? md->grp_first[h[0].issue[0]] : md->grp_comp[last] + 1;
  return *fetch ? last < 0 : last >= 0;
}

/* The operands of op but gr, each once, into ops: how many. */
static int operands(const Graph *g, int op, int gr, int *ops) {
  const Op *o = &g->ops[op];
  int n = 0;
  for (int k = 0; k < o->ninputs + o->noutputs; k++) {
    int t = k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs], i = 0;
    while (i < n && ops[i] != t) i++;
    if (t != gr && i == n) ops[n++] = t;
  }
  return n;
}

/* Grad gr's column X (its optimizer op on the host), where the model can
 * say exactly what it changes: the grad's device bytes end at the wait of
 * its copy to the host, which joins the copy queue; each operand's last
 * window ends at its last use on the device (or it has none) and its copy
 * back goes (operand_change); the op's workspace and device time go, its
 * host time joins the host stream (ilp_eval_stalls); X <= H + F of each
 * operand. dec: all DEC_NONE, returned so. */
static void build_x(Ilp *md, int gr, Decision *dec, int *cap) {
  const Graph *g = md->g;
  int op = plan_host_optimizer_op(g, gr);
  const Op *o = &g->ops[op];
  int *ops = util_xcalloc((size_t)(o->ninputs + o->noutputs) + 1, sizeof *ops), *from = NULL, *to = NULL;
  bool *back = NULL, *fetch = NULL, *host = NULL;
  int n = ops ? operands(g, op, gr, ops) : 0;
  from = util_xcalloc((size_t)n + 1, sizeof *from), to = util_xcalloc((size_t)n + 1, sizeof *to);
  back = util_xcalloc((size_t)n + 1, sizeof *back), fetch = util_xcalloc((size_t)n + 1, sizeof *fetch);
  host = util_xcalloc((size_t)n + 1, sizeof *host);
  if (!ops || !from || !to || !back || !fetch || !host) {
    md->failed = true;
    goto out;
  }
  double gone_us = 0;
  for (int i = 0; i < n; i++) {
    int t = ops[i];
    if (md->colH[t] < 0 || !operand_change(md, gr, op, t, dec, &from[i], &to[i], &back[i], &fetch[i], &host[i])) goto out;
    gone_us += (back[i] ? cost_d2h_seconds(md->d, g->tensors[t].bytes) : 0) + (fetch[i] ? cost_h2d_seconds(md->d, g->tensors[t].bytes) : 0);
  }
  HomeCopies hg;
  dec[gr] = DEC_HOST_OPTIMIZER;
  plan_home_copies(g, md->d, dec, NULL, gr, &hg);
  dec[gr] = DEC_NONE;
  if (hg.last_write < 0 || hg.wait_op < 0) goto out;
  int64_t bytes = g->tensors[gr].bytes;
  double d2h = cost_d2h_seconds(md->d, bytes);
  double obj = md->min_memory ? 0 : -ilp_op_us(md, op) + md->d->copy_compute_share * (d2h - gone_us) * 1e6;
  int x = md->colX[gr] = ilp_new_col(md, 0, 1, obj, true);
  md->xgrad[op] = gr;
  Lin off = ilp_var(md, x);
  off.c[0] = -1;
  ilp_term(md, md->grp_comp[hg.wait_op] + 1, md->npos - 1, &off, bytes);
  if (o->workspace > 0) ilp_term(md, md->grp_comp[op], md->grp_comp[op], &off, o->workspace);
  push_copy(md, 0, &(HomeCopy){gr, hg.last_write, hg.wait_op, -1, false, d2h * 1e6}, cap);
  Lin on = ilp_var(md, x);
  for (int i = 0; i < n; i++) {
    int t = ops[i];
    ilp_term(md, from[i], to[i], &off, g->tensors[t].bytes);
    /* A bound model that is not exact leaves it out, as F's early need
     * (home_terms): it only adds bytes; with it the relaxation took 1,737
     * simplex iterations at gpt2-124m's midpoint, 1,572 without, the same
     * bound. */
    if (!fetch[i] && (!md->bound_only || md->bound_exact)) ilp_extension(md, t, from[i], &on, g->tensors[t].bytes);
    for (int s = 0; s < 2; s++)
      for (int k = 0; k < md->nhcopy[s]; k++) {
        HomeCopy *c = &md->hcopy[s][k];
        if (c->t == t && !c->refetch && (s ? fetch[i] : back[i])) c->gone = gr;
      }
    md->xneed[t] = gr, md->xhost[t] = host[i];
    int cols[3] = {x, md->colH[t], md->colF[t]};
    double v[3] = {1, -1, -1};
    if (milp_add_row(&md->m, -HUGE_VAL, 0, host[i] ? 2 : 3, cols, v) < 0) md->failed = true;
  }
out:
  free(ops), free(from), free(to), free(back), free(fetch), free(host);
}

void ilp_build_homes(Ilp *md) {
  const Graph *g = md->g;
  int n = g->ntensors;
  md->colH = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colF = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colX = util_xcalloc((size_t)n + 1, sizeof(int));
  md->xneed = util_xcalloc((size_t)n + 1, sizeof(int));
  md->xhost = util_xcalloc((size_t)n + 1, sizeof(bool));
  md->xgrad = util_xcalloc((size_t)g->nops + 1, sizeof(int));
  md->xcopy = util_xcalloc((size_t)g->nops + 1, sizeof(int));
  Decision *dec = util_xcalloc((size_t)n + 1, sizeof(Decision));
  if (!md->colH || !md->colF || !md->colX || !md->xneed || !md->xhost || !md->xgrad || !md->xcopy || !dec) {
    md->failed = true;
    free(dec);
    return;
  }
  for (int t = 0; t < n; t++) md->colH[t] = md->colF[t] = md->colX[t] = md->xneed[t] = -1, dec[t] = DEC_NONE;
  for (int i = 0; i < g->nops; i++) md->xgrad[i] = md->xcopy[i] = -1;
  int cap[2] = {0, 0};
  /* A unified_memory device's host home is the same memory: nothing to
   * model (plan_homes.c never homes there either). */
  for (int t = 0; md->homes && !md->d->unified_memory && t < n; t++) {
    HomeCopies h;
    if (!modelled(md, t, DEC_HOST, dec, &h)) continue;
    md->colH[t] = ilp_new_col(md, 0, 1, copies_share(md, t, DEC_HOST), true);
    home_terms(md, t, DEC_HOST, &h, md->colH[t]);
    add_copies(md, t, DEC_HOST, &h, cap);
    if (!modelled(md, t, DEC_HOST_REFETCH, dec, &h)) continue;
    md->colF[t] = ilp_new_col(md, 0, 1, copies_share(md, t, DEC_HOST_REFETCH), true);
    home_terms(md, t, DEC_HOST_REFETCH, &h, md->colF[t]);
    add_copies(md, t, DEC_HOST_REFETCH, &h, cap);
    int cols[2] = {md->colH[t], md->colF[t]};
    double one[2] = {1, 1};
    if (milp_add_row(&md->m, 0, 1, 2, cols, one) < 0) md->failed = true;
  }
  /* The host optimizer where the device gives host compute. */
  for (int t = 0; md->homes && !md->d->unified_memory && md->d->host_memory_gbps > 0 && !md->failed && t < n; t++)
    if (plan_host_optimizer_op(g, t) >= 0) build_x(md, t, dec, cap);
  free(dec);
  if (!md->failed) order_copies(md);
}

int ilp_eval_homes(const Ilp *md, const Decision *dec, double *x) {
  const Graph *g = md->g;
  /* A solve's model reads every home as the device's, as the activations'
   * solve always has (a hint's homes are plan_homes.c's). */
  if (!md->homes) return 0;
  for (int t = 0; t < g->ntensors; t++) {
    if (!graph_is_resident(&g->tensors[t]) || dec[t] == DEC_NONE || dec[t] == DEC_KEEP) continue;
    int col = dec[t] == DEC_HOST ? md->colH[t] : dec[t] == DEC_HOST_REFETCH ? md->colF[t] : md->colX[t];
    if (col < 0) return -1; /* a home or host optimizer outside the columns */
    x[col] = 1;
  }
  /* A host optimizer's operands are host-homed (its rows X <= H + F). */
  for (int t = 0; t < g->ntensors; t++)
    if (md->xneed[t] >= 0 && dec[md->xneed[t]] == DEC_HOST_OPTIMIZER && dec[t] != DEC_HOST &&
        (dec[t] != DEC_HOST_REFETCH || md->xhost[t]))
      return -1;
  return 0;
}

int64_t ilp_host_bytes(const Ilp *md, const double *x) {
  int64_t sum = 0;
  for (int t = 0; t < md->g->ntensors; t++) {
    double on = (md->colO[t] >= 0 ? x[md->colO[t]] : 0) + (md->colH[t] >= 0 ? x[md->colH[t]] : 0) +
                (md->colF[t] >= 0 ? x[md->colF[t]] : 0) + (md->colX[t] >= 0 ? x[md->colX[t]] : 0);
    if (on > 0.5) sum += plan_host_share(md->g, t);
  }
  return sum;
}

/* ------------------------------------------------------------ the bound over homes */

/* Simplex iterations times nonzeros for the bound's relaxation: counted
 * work, so the bound does not depend on the machine. Less than the ilp's
 * own 7e9 (solve.c): where the count runs out the primal simplex has
 * proven nothing, and far below the midpoints it does not finish
 * (llama3-8b at 42,455,265,284 bytes: 29,659 iterations, 62 s, no bound;
 * gpt2-1558m at 6,786,590,468: 14,168, 34 s), while at bench_ilp's points
 * it takes at most 5,395 iterations of 494,058 nonzeros (gpt2-1558m). */
#define HOMES_BOUND_LP_WORK 3e9

/* Whether md's columns hold every home and host optimizer the rule around
 * the ilp may choose (plan_home_allowed): a bound of its vectors is a
 * bound of the rule's plans only then. */
static bool covers_homes(const Ilp *md) {
  const Graph *g = md->g;
  for (int t = 0; t < g->ntensors; t++) {
    if (plan_home_allowed(g, t, DEC_HOST) && md->colH[t] < 0) return false;
    if (plan_home_allowed(g, t, DEC_HOST_REFETCH) && md->colF[t] < 0) return false;
    if (md->d->host_memory_gbps > 0 && plan_home_allowed(g, t, DEC_HOST_OPTIMIZER) && md->colX[t] < 0) return false;
  }
  return true;
}

/* The decisions x rounds to, into dec: each stashed tensor's largest
 * column, each home its larger column at 1/2 or more (F before H), each
 * host optimizer whose X is at 1/2 or more and whose operands are then
 * homed as its rows require; the rest DEC_NONE. */
static void round_point(const Ilp *md, const double *x, Decision *dec) {
  const Graph *g = md->g;
  for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
  ilp_decisions_from_x(md, x, dec);
  for (int t = 0; t < g->ntensors; t++)
    if (md->colF[t] >= 0 && x[md->colF[t]] >= 0.5) dec[t] = DEC_HOST_REFETCH;
    else if (md->colH[t] >= 0 && x[md->colH[t]] >= 0.5) dec[t] = DEC_HOST;
  for (int t = 0; t < g->ntensors; t++) {
    bool homed = md->colX[t] >= 0 && x[md->colX[t]] >= 0.5;
    for (int u = 0; homed && u < g->ntensors; u++)
      homed = md->xneed[u] != t || dec[u] == DEC_HOST || (dec[u] == DEC_HOST_REFETCH && !md->xhost[u]);
    if (homed) dec[t] = DEC_HOST_OPTIMIZER;
  }
}

/* The MILP's branch and bound, counted work (its solution and bound do
 * not depend on the machine): simplex iterations times nonzeros, and
 * nodes. On bench_ilp's gpt2-tiny and llama-tiny points it raises the
 * relaxation's bound by 0.1-0.3%, and at 5 of their 10 points its
 * solution leads to a faster plan than the exact model's relaxation
 * point does; 2,000 nodes took 2-8 times as long, for plans faster at 4
 * of the 10 by at most 0.3% and slower at one by 1.0%. Only on graphs
 * of at most HOMES_MILP_OPS ops: unet's exact model (216 ops, 152,909
 * nonzeros) took 15,857 simplex iterations for its relaxation (22.4 ->
 * 34.4 s CPU at bench_ilp's f = 0), and its tree about 1 s a node, with
 * no solution at f = 0 to 0.75 (docs/PLANNING.md section 3, "The MILP
 * over homes"). */
#define HOMES_MILP_WORK 1e8
#define HOMES_MILP_NODES 100
#define HOMES_MILP_OPS 200

/* The bound model at budget solved: exact, as a MILP (hs->integral and
 * hs->exact_point answered), else its relaxation (hs->point); its bound
 * (0: none claimed). */
static double solve_bound(const Graph *g, const Device *d, int64_t budget, bool exact, HomesSolve *hs) {
  Ilp md;
  Err e;
  if (ilp_build_homes_bound(&md, g, d, budget, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, exact, &e)) return 0;
  double bound = 0;
  if (covers_homes(&md)) {
    /* The queue rows go in lazily, as in the ilp's relaxation: each is
     * in once the point violates it, so the optimum meets them all (and
     * all are in before a tree). */
    long lp_iterations = (long)(HOMES_BOUND_LP_WORK / fmax(1, (double)(md.m.nnz - md.queue_nnz)));
    MilpOptions mo = {.solver = "glpk", .quiet = true, .lp_only = !exact, .lazy_first = md.queue_rows[0],
                      .lazy_end = md.queue_rows[1], .lp_iterations = lp_iterations, .node_limit = HOMES_MILP_NODES,
                      .tree_iterations = (long)fmax(1, HOMES_MILP_WORK / fmax(1, (double)md.m.nnz))};
    MilpResult r;
    if (milp_solve(&md.m, &mo, &r, &e) == 0) {
      bool relaxed = !isnan(r.lp_x[md.m.ncols]);
      /* The relaxation's optimum, or the tree's bound over the integral
       * vectors (at least that), or what the count left proven (milp.c's
       * partial bound, 0 where none); infeasible: no claim. */
      if (r.status != MILP_INFEASIBLE && r.status != MILP_FAILED && isfinite(r.bound)) bound = r.bound;
      Decision *point = exact ? hs->exact_point : hs->point;
      if (point && relaxed && r.status != MILP_INFEASIBLE) {
        round_point(&md, r.lp_x, point);
        *(exact ? &hs->exact_rounded : &hs->rounded) = true;
      }
      if (exact && (r.status == MILP_OPTIMAL || r.status == MILP_FEASIBLE)) {
        round_point(&md, r.x, hs->integral);
        hs->solved = true, hs->optimal = r.status == MILP_OPTIMAL, hs->objective = r.objective;
      }
      hs->simplex_iterations += r.simplex_iterations, hs->nodes += r.nodes;
      milp_result_free(&r);
    }
  }
  ilp_free(&md);
  return bound;
}

double plan_ilp_homes_bound(const Graph *g, const Device *d, int64_t budget, HomesSolve *hs) {
  hs->rounded = hs->exact_rounded = hs->solved = hs->optimal = false;
  hs->lp_bound = hs->milp_bound = hs->objective = 0;
  /* Where copies take a share of the compute stream the window rows are
   * not bounds of the queues (docs/PLANNING.md section 4); on a
   * unified_memory device nothing is homed. */
  if (d->unified_memory || d->copy_compute_share > 0) return 0;
  hs->lp_bound = solve_bound(g, d, budget, false, hs);
  if (hs->integral && g->nops <= HOMES_MILP_OPS) hs->milp_bound = solve_bound(g, d, budget, true, hs);
  return fmax(hs->lp_bound, hs->milp_bound);
}

/* ------------------------------------------------------------ the search over homes */

/* How many evaluations the search over homes may spend per decision it
 * moves (stashed tensors and home columns), as a polish does per stashed
 * tensor: counted work, so the plan does not depend on the machine. */
#define HOMES_EVALS_PER_UNIT 16

/* The homes or places unit t may take in the model: a home's device,
 * host and, where it has the column, host-refetch; where `places`, a host
 * optimizer's device or host. How many, into alt (0: not a unit). */
static int home_choices(const Ilp *md, int t, bool places, Decision *alt) {
  int n = 0;
  if (md->colH[t] < 0 && (!places || md->colX[t] < 0)) return 0;
  alt[n++] = DEC_NONE;
  if (md->colX[t] >= 0) {
    alt[n++] = DEC_HOST_OPTIMIZER;
    return n;
  }
  alt[n++] = DEC_HOST;
  if (md->colF[t] >= 0) alt[n++] = DEC_HOST_REFETCH;
  return n;
}

/* The choices unit u (a stashed tensor, a home column or, where
 * `places`, a host optimizer) may take in the model, into alt: how many
 * (0: not a unit). */
static int unit_choices(const Ilp *md, int u, bool places, Decision *alt) {
  if (md->colH[u] >= 0 || md->colX[u] >= 0) return home_choices(md, u, places, alt);
  if (md->colK[u] < 0) return 0;
  int n = 0;
  alt[n++] = DEC_KEEP;
  alt[n++] = DEC_RECOMPUTE;
  if (ilp_offload_allowed(md, u)) alt[n++] = DEC_OFFLOAD;
  return n;
}

/* cur with unit t taking choice a and what the model then requires: a
 * host optimizer's operands host-homed (those on the device as
 * host-refetch where they may be, else host; a host-refetch one that may
 * not be as host), and an operand brought back to the device takes its
 * host optimizer back to the device. */
static void take(const Ilp *md, Decision *cur, int t, Decision a) {
  cur[t] = a;
  if (md->xneed[t] >= 0 && a == DEC_NONE) cur[md->xneed[t]] = DEC_NONE;
  if (a != DEC_HOST_OPTIMIZER) return;
  for (int u = 0; u < md->g->ntensors; u++) {
    if (md->xneed[u] != t) continue;
    if (cur[u] == DEC_NONE) cur[u] = md->colF[u] >= 0 && !md->xhost[u] ? DEC_HOST_REFETCH : DEC_HOST;
    if (cur[u] == DEC_HOST_REFETCH && md->xhost[u]) cur[u] = DEC_HOST;
  }
}

/* First-improvement descent over single home changes and, where
 * `places`, host-optimizer changes (each with what it requires). Whether
 * best improved. */
static bool home_moves(const Ilp *md, Candidate *best, int64_t limit, double *x, Decision *cur, bool places, long *evals,
                       double deadline) {
  const Graph *g = md->g;
  bool improved = false;
  for (int t = 0; t < g->ntensors && *evals > 0 && util_now() < deadline; t++) {
    Decision alt[3];
    int na = home_choices(md, t, places, alt);
    for (int a = 0; a < na && *evals > 0; a++) {
      if (alt[a] == best->dec[t]) continue;
      memcpy(cur, best->dec, (size_t)g->ntensors * sizeof *cur);
      take(md, cur, t, alt[a]);
      double before = best->objective;
      (*evals)--;
      ilp_consider(md, best, cur, limit, x);
      improved |= best->objective < before - 1e-9;
    }
  }
  return improved;
}

/* A change that is faster but over the limit (a home back on the device,
 * its copies gone; a tensor kept instead of recomputed; an optimizer op
 * moved between device and host), paid for by one other change that
 * frees bytes: a kept tensor recomputed or offloaded, a home on the device
 * moved to the host, or an optimizer op to the host. The best such pair
 * that fits and is faster is taken. Neither change alone pays where the
 * pair does: one takes the memory the other gives up; the activations'
 * exchanges (search.c) pay with re-runs and offloads only. Whether best
 * improved. */
static bool home_exchanges(const Ilp *md, Candidate *best, int64_t limit, double *x, Decision *cur, bool places,
                           long *evals, double deadline) {
  const Graph *g = md->g;
  int n = g->ntensors;
  size_t size = (size_t)n * sizeof *cur;
  Decision *top = util_xcalloc((size_t)n + 1, sizeof *top), *gain = util_xcalloc((size_t)n + 1, sizeof *gain);
  double top_obj = best->objective;
  bool found = false;
  for (int t = 0; top && gain && t < n && *evals > 0 && util_now() < deadline; t++) {
    Decision alt[3];
    int na = unit_choices(md, t, places, alt);
    for (int a = 0; a < na && *evals > 0; a++) {
      if (alt[a] == best->dec[t]) continue;
      memcpy(gain, best->dec, size);
      take(md, gain, t, alt[a]);
      int64_t peak;
      double obj;
      (*evals)--;
      /* A gainer: faster, over the limit (what fits was the descent's). */
      if (ilp_eval_within(md, gain, x, top_obj - 1e-9, INT64_MAX, &peak, &obj) != 1 || peak <= limit) continue;
      for (int u = 0; u < n && *evals > 0; u++) {
        Decision pay[3];
        int np = u == t || (gain[u] != DEC_KEEP && gain[u] != DEC_NONE) ? 0 : unit_choices(md, u, places, pay);
        for (int k = 0; k < np && *evals > 0; k++) {
          if (pay[k] == DEC_NONE || pay[k] == DEC_KEEP) continue;
          memcpy(cur, gain, size);
          take(md, cur, u, pay[k]);
          int64_t pk;
          double o;
          (*evals)--;
          if (ilp_host_fits(md, cur) && ilp_eval_within(md, cur, x, top_obj - 1e-9, limit, &pk, &o) == 1) {
            memcpy(top, cur, size);
            top_obj = o, found = true;
          }
        }
      }
    }
  }
  double before = best->objective;
  if (found) ilp_consider(md, best, top, limit, x);
  free(top), free(gain);
  return best->objective < before - 1e-9;
}

/* One optimizer op moved back to the device and another to the host, each
 * with what it requires (take): where the host stream has room for only
 * a few updates, which ones is a choice single moves cannot revise (each
 * half of the swap alone is slower: one more update on the device, or one
 * more on a full host stream). The best swap that fits and is faster is
 * taken. Whether best improved. */
static bool host_swaps(const Ilp *md, Candidate *best, int64_t limit, double *x, Decision *cur, long *evals, double deadline) {
  const Graph *g = md->g;
  int n = g->ntensors;
  size_t size = (size_t)n * sizeof *cur;
  Decision *top = util_xcalloc((size_t)n + 1, sizeof *top);
  double top_obj = best->objective;
  bool found = false;
  for (int t = 0; top && t < n && *evals > 0 && util_now() < deadline; t++) {
    if (md->colX[t] < 0 || best->dec[t] != DEC_HOST_OPTIMIZER) continue;
    for (int u = 0; u < n && *evals > 0; u++) {
      if (md->colX[u] < 0 || best->dec[u] == DEC_HOST_OPTIMIZER) continue;
      memcpy(cur, best->dec, size);
      take(md, cur, t, DEC_NONE);
      take(md, cur, u, DEC_HOST_OPTIMIZER);
      int64_t peak;
      double obj;
      (*evals)--;
      if (ilp_host_fits(md, cur) && ilp_eval_within(md, cur, x, top_obj - 1e-9, limit, &peak, &obj) == 1) {
        memcpy(top, cur, size);
        top_obj = obj, found = true;
      }
    }
  }
  double before = best->objective;
  if (found) ilp_consider(md, best, top, limit, x);
  free(top);
  return best->objective < before - 1e-9;
}

/* ------------------------------------------------------------ public */

int plan_ilp_homes_search(const Graph *g, const Device *d, int64_t budget, Decision *dec, double deadline) {
  Ilp md;
  Err e;
  if (ilp_build_with_homes(&md, g, d, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, &e)) return -1;
  md.host_limit = plan_host_limit(d);
  int n = g->ntensors, rc = -1;
  double *x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  Decision *cur = util_xcalloc((size_t)n + 1, sizeof *cur), *bestd = util_xcalloc((size_t)n + 1, sizeof *bestd);
  Candidate best = {.dec = bestd};
  if (!x || !cur || !bestd) goto out;
  ilp_consider(&md, &best, dec, budget, x);
  rc = 0;
  if (!best.ok) goto out; /* outside the model, or over the budget */
  double start = best.objective;
  long units = g->nstashed;
  for (int t = 0; t < n; t++) units += md.colH[t] >= 0 || md.colX[t] >= 0;
  long evals = HOMES_EVALS_PER_UNIT * units;
  /* The activations' descent and exchanges, then the homes', until
   * neither finds a faster vector within the budget; first with the
   * optimizer ops where the start has them, then moving them too (a host
   * optimizer that is faster where it is taken first can keep the
   * descent from homes that are faster still: test_exhaustive's homes-2). */
  for (int places = 0; places < 2; places++)
    for (bool moved = true; moved && evals > 0 && util_now() < deadline;) {
      double before = best.objective;
      ilp_improve(&md, &best, budget, x, deadline, evals, true);
      evals -= g->nstashed; /* the descent counts its own; its share of the whole */
      moved = home_moves(&md, &best, budget, x, cur, places, &evals, deadline) ||
              home_exchanges(&md, &best, budget, x, cur, places, &evals, deadline) ||
              (places && host_swaps(&md, &best, budget, x, cur, &evals, deadline)) || best.objective < before - 1e-9;
    }
  if (best.objective < start - 1e-9) {
    memcpy(dec, best.dec, (size_t)n * sizeof *dec);
    rc = 1;
  }
out:
  free(x), free(cur), free(bestd);
  ilp_free(&md);
  return rc;
}
