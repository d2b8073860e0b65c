/*
 * cuts.c - the c-MIR cuts that branch and bound separates from the stall
 * windows, queue rows and memory rows, and the test hook that checks them
 * (docs/PLANNING.md section 5, step 6: "Cuts").
 */
#include "ilp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Mixed-integer rounding cuts (the tree's cutting planes, Marchand and
 * Wolsey's c-MIR) of two kinds of rows, each brought to the form
 *   sum a_i y_i - s <= beta,  y_i in {0, 1} (a binary or its complement),
 *   s >= 0 a linear expression of the model's columns.
 * - A stall window [a, b]: sum c_t O_t - cap <= Q[b] - Q[a-1] = s (Q never
 *   decreases). The LP fills a window to the brim with fractions of copies
 *   (gpt2-tiny at f = 0.1: 36 tensors' worth offloaded, none stalling),
 *   where whole copies either leave compute unused or stall.
 * - A memory row at a position the LP point fills to the limit, written out
 *   from its running sum: bytes of binaries, continuous columns moved to
 *   their nearer bound (those that can only lower the row are dropped,
 *   the others go into s). The LP frees bytes by fractions of tensors
 *   where whole tensors must go.
 * For a divisor delta, with f = frac(beta / delta):
 *   sum (floor(a_i / delta) + max(0, frac(a_i / delta) - f) / (1 - f)) y_i
 *     - s / (delta (1 - f)) <= floor(beta / delta)
 * holds at every integral point. The binaries are complemented where the
 * point is above one half; the divisors tried are the coefficients of the
 * point's fractional binaries, then the best one halved three times. */
#define ILP_CUT_HALVINGS 3
#define ILP_CUTS 64             /* cuts per round and kind, the most violated */
#define ILP_CUT_EFFICACY 1e-3   /* us of stall, or MiB per GiB of the limit, a cut must cut off */

typedef struct MirItem {
  int col;
  double a, y; /* coefficient and value after complementing */
  bool flipped;
} MirItem;

typedef struct Mir {
  int n, ns;
  MirItem *it;
  int *scol; /* s = s0 + sum sw * x[scol] */
  double *sw, s0, beta;
} Mir;

typedef struct MirCut {
  double efficacy, delta;
  int row; /* the window or position it came from */
} MirCut;

/* Room for a row over every column of the model. */
static Mir mir_new(const Ilp *md) {
  size_t n = (size_t)md->m.ncols + 1;
  return (Mir){.it = util_xcalloc(n, sizeof(MirItem)), .scol = util_xcalloc(n, sizeof(int)), .sw = util_xcalloc(n, sizeof(double))};
}

static bool mir_ok(const Mir *r) { return r->it && r->scol && r->sw; }

static void mir_free(Mir *r) { free(r->it), free(r->scol), free(r->sw); }

static void mir_item(Mir *r, int col, double a, double x) {
  bool flip = x > 0.5;
  r->it[r->n++] = (MirItem){col, flip ? -a : a, flip ? 1 - x : x, flip};
  if (flip) r->beta -= a;
}

static double mir_s(const Mir *r, const double *x) {
  double s = r->s0;
  for (int k = 0; k < r->ns; k++) s += r->sw[k] * x[r->scol[k]];
  return s;
}

/* The rounded coefficient of a (already divided by the divisor) for
 * f = frac(beta / divisor). */
static double mir_round(double a, double f) { return floor(a) + fmax(0, a - floor(a) - f) / (1 - f); }

/* The cut's violation at the point in the row's units (beta's), -1 if the
 * divisor gives none. */
static double mir_violation(const Mir *r, double s, double delta) {
  double q = r->beta / delta, f = q - floor(q);
  if (f < 0.01 || f > 0.99) return -1;
  double lhs = 0;
  for (int i = 0; i < r->n; i++) lhs += mir_round(r->it[i].a / delta, f) * r->it[i].y;
  return delta * (1 - f) * (lhs - floor(q)) - s;
}

/* The most violated divisor's cut, efficacy = violation / beta's scale. */
static MirCut mir_best(const Mir *r, const double *x, double scale, int row) {
  MirCut best = {0, 0, row};
  double s = mir_s(r, x);
  for (int i = 0; i < r->n; i++) {
    if (r->it[i].y < 1e-6 || r->it[i].y > 1 - 1e-6) continue;
    double v = mir_violation(r, s, fabs(r->it[i].a)) / scale;
    if (v > best.efficacy) best.efficacy = v, best.delta = fabs(r->it[i].a);
  }
  double base = best.delta;
  for (int k = 0; base > 0 && k < ILP_CUT_HALVINGS; k++) {
    double v = mir_violation(r, s, base / (2 << k)) / scale;
    if (v > best.efficacy) best.efficacy = v, best.delta = base / (2 << k);
  }
  return best;
}

/* The cut of divisor delta as a row over the model's columns. */
static void mir_emit(const Mir *r, double delta, MilpModel *cuts, int *cols, double *vals) {
  double q = r->beta / delta, f = q - floor(q), scale = delta * (1 - f), rhs = scale * floor(q) + r->s0;
  int k = 0;
  for (int i = 0; i < r->n; i++) {
    double g = scale * mir_round(r->it[i].a / delta, f);
    if (r->it[i].flipped) rhs -= g, g = -g;
    if (g != 0) cols[k] = r->it[i].col, vals[k++] = g;
  }
  for (int j = 0; j < r->ns; j++) cols[k] = r->scol[j], vals[k++] = -r->sw[j];
  milp_add_row(cuts, -HUGE_VAL, rhs, k, cols, vals);
}

/* How far x exceeds the row before rounding, sum a_i y_i - s <= beta
 * (which must hold at every integral solution too). */
static double mir_base_excess(const Mir *r, const double *x) {
  double lhs = 0;
  for (int i = 0; i < r->n; i++) lhs += r->it[i].a * (r->it[i].flipped ? 1 - x[r->it[i].col] : x[r->it[i].col]);
  return lhs - mir_s(r, x) - r->beta;
}

/* Window w as a c-MIR row (us). */
static void mir_window(const Ilp *md, const Window *w, const double *x, Mir *r) {
  r->n = r->ns = 0;
  r->beta = w->cap, r->s0 = 0;
  r->scol[r->ns] = md->col_q[w->b], r->sw[r->ns++] = 1;
  if (w->a) r->scol[r->ns] = md->col_q[w->a - 1], r->sw[r->ns++] = -1;
  for (int i = 0; i < md->nfifo[w->stream]; i++) {
    int t = md->fifo[w->stream][i];
    if (ilp_issue_op(md, w->stream, t) < w->a || ilp_due_op(md, w->stream, t) > w->b || !ilp_offload_allowed(md, t)) continue;
    mir_item(r, md->colO[t], md->copy_us[w->stream][t], x[md->colO[t]]);
  }
}

/* Queue row f as a c-MIR row (us): the copies queued from i0 up to it,
 * the last one's coefficient raised by the row's relaxation. */
static void mir_fifo(const Ilp *md, const Fifo *f, const double *x, Mir *r) {
  const int *q = md->fifo[f->stream];
  int a = ilp_issue_op(md, f->stream, q[f->i0]);
  double big = 0, late = 0;
  for (int i = f->i0; i < f->it; i++) {
    big += md->copy_us[f->stream][q[i]];
    if (ilp_due_op(md, f->stream, q[i]) > f->b) late += md->copy_us[f->stream][q[i]];
  }
  big = fmin(late, fmax(0, big - f->cap));
  r->n = r->ns = 0;
  r->beta = f->cap + big, r->s0 = 0;
  r->scol[r->ns] = md->col_q[f->b], r->sw[r->ns++] = 1;
  if (a) r->scol[r->ns] = md->col_q[a - 1], r->sw[r->ns++] = -1;
  for (int i = f->i0; i <= f->it; i++)
    if (ilp_offload_allowed(md, q[i]))
      mir_item(r, md->colO[q[i]], md->copy_us[f->stream][q[i]] + (i == f->it ? big : 0), x[md->colO[q[i]]]);
}

/* The memory row of the position whose running sum is acc (MiB per
 * column, over the columns in touched) plus cst, as a c-MIR row. */
static void mir_memory(const Ilp *md, const double *acc, const int *touched, int ntouched, double cst, const double *x,
                       Mir *r) {
  r->n = r->ns = 0;
  r->beta = md->m.col_ub[md->mcol[0]] - cst, r->s0 = 0;
  for (int i = 0; i < ntouched; i++) {
    int c = touched[i];
    double a = acc[c], lb = md->m.col_lb[c], ub = md->m.col_ub[c];
    if (fabs(a) < 1e-9) continue;
    if (md->m.col_int[c]) {
      mir_item(r, c, a, x[c]);
      continue;
    }
    /* a (x - lb) for a > 0 and a (x - ub) for a < 0 are >= 0: dropped,
     * the row only gets looser without them. The memory rows hold no
     * column that has no such bound (products have no upper bound, but
     * only positive coefficients); a row that did would not be cut. */
    double bound = a > 0 ? lb : ub;
    if (!isfinite(bound)) {
      r->n = 0;
      return;
    }
    r->beta -= a * bound;
  }
}

static int cmp_cut(const void *a, const void *b) {
  const MirCut *x = a, *y = b;
  return (x->efficacy < y->efficacy) - (x->efficacy > y->efficacy);
}

/* The running sum of the memory rows, walked position by position: acc
 * holds each column's MiB at the current position (touched: the columns
 * it ever held), cst the constant part. */
typedef struct MemWalk {
  double *acc, cst;
  int *touched, ntouched, p, e;
} MemWalk;

static void mem_step(const Ilp *md, MemWalk *w) {
  for (; w->e < md->nev && md->ev[w->e].pos == w->p; w->e++) {
    double v = (double)md->ev[w->e].bytes / ILP_UNIT;
    int c = md->ev[w->e].col;
    if (c < 0) {
      w->cst += v;
      continue;
    }
    if (w->acc[c] == 0) w->touched[w->ntouched++] = c;
    w->acc[c] += v;
    if (w->acc[c] == 0) w->acc[c] = 1e-300; /* stays touched once */
  }
}

/* Cuts of three kinds of rows: the ILP_CUTS most violated of each. */
enum { CUT_WINDOW, CUT_QUEUE, CUT_MEMORY, CUT_KINDS };

static int cut_rows(const Ilp *md, int kind) { return kind == CUT_WINDOW ? md->nwin : kind == CUT_QUEUE ? md->nfrow : md->npos; }

/* Back to before the first position. */
static void mem_reset(const Ilp *md, MemWalk *w) {
  memset(w->acc, 0, (size_t)md->m.ncols * sizeof(double));
  w->ntouched = w->e = 0, w->cst = 0;
}

static void mir_row(const Ilp *md, int kind, int row, const MemWalk *w, const double *x, Mir *r) {
  if (kind == CUT_WINDOW) mir_window(md, &md->win[row], x, r);
  else if (kind == CUT_QUEUE) mir_fifo(md, &md->frow[row], x, r);
  else mir_memory(md, w->acc, w->touched, w->ntouched, w->cst, x, r);
}

void ilp_separate(void *ctx, const double *x, MilpModel *cuts) {
  const Ilp *md = ctx;
  int nc = md->m.ncols, most = 0;
  for (int kind = 0; kind < CUT_KINDS; kind++) most = cut_rows(md, kind) > most ? cut_rows(md, kind) : most;
  double limit = md->m.col_ub[md->mcol[0]], mem_scale = fmax(1, limit) * 1e-3; /* MiB per GiB of the limit */
  Mir r = mir_new(md);
  MirCut *found = util_xcalloc((size_t)most + 1, sizeof(MirCut));
  char *chosen = util_xcalloc((size_t)md->npos + 1, 1);
  int *cols = util_xcalloc((size_t)nc + 1, sizeof(int));
  double *vals = util_xcalloc((size_t)nc + 1, sizeof(double));
  MemWalk w = {.acc = util_xcalloc((size_t)nc + 1, sizeof(double)), .touched = util_xcalloc((size_t)nc + 1, sizeof(int))};
  if (!mir_ok(&r) || !found || !chosen || !cols || !vals || !w.acc || !w.touched) goto out;
  for (int kind = 0; kind < CUT_KINDS; kind++) {
    int nfound = 0;
    for (int i = 0; i < cut_rows(md, kind); i++) {
      if (kind == CUT_MEMORY) {
        w.p = i;
        mem_step(md, &w);
        /* Only where the point fills the limit. */
        if (x[md->mcol[i]] < limit - 1e-6 * fmax(1, limit)) continue;
      }
      mir_row(md, kind, i, &w, x, &r);
      MirCut c = mir_best(&r, x, kind == CUT_MEMORY ? mem_scale : 1, i);
      if (c.efficacy > ILP_CUT_EFFICACY) found[nfound++] = c;
    }
    qsort(found, (size_t)nfound, sizeof *found, cmp_cut);
    if (nfound > ILP_CUTS) nfound = ILP_CUTS;
    if (kind != CUT_MEMORY) {
      for (int i = 0; i < nfound; i++) {
        mir_row(md, kind, found[i].row, &w, x, &r);
        mir_emit(&r, found[i].delta, cuts, cols, vals);
      }
      continue;
    }
    /* A memory row is only at hand while walking: walk again. */
    double *delta = util_xcalloc((size_t)md->npos + 1, sizeof(double));
    if (!delta) break;
    for (int i = 0; i < nfound; i++) chosen[found[i].row] = 1, delta[found[i].row] = found[i].delta;
    mem_reset(md, &w);
    for (int p = 0; p < md->npos; p++) {
      w.p = p;
      mem_step(md, &w);
      if (!chosen[p]) continue;
      mir_row(md, kind, p, &w, x, &r);
      mir_emit(&r, delta[p], cuts, cols, vals);
    }
    free(delta);
  }
out:
  mir_free(&r);
  free(found), free(chosen), free(cols), free(vals), free(w.acc), free(w.touched);
}

/* ------------------------------------------------------------ the check (plan_ilp_cut_check) */

/* Each cut's activity at x minus its right side, from cut r0 on (the
 * cuts' nonzeros are in row order). */
static void cut_excess(const MilpModel *cuts, int r0, const double *x, double *out) {
  for (int r = r0; r < cuts->nrows; r++) out[r] = -cuts->row_ub[r];
  for (int k = 0; k < cuts->nnz; k++)
    if (cuts->nz_row[k] >= r0) out[cuts->nz_row[k]] += cuts->nz_val[k] * x[cuts->nz_col[k]];
}

/* Vector v of decs as the model takes it (offloads it forbids kept, as
 * solve_at does with its starts), evaluated into x; its peak, -1 outside
 * the model. */
static int64_t eval_vector(const Ilp *md, const Decision *decs, int v, Decision *dec, double *x) {
  const Graph *g = md->g;
  memcpy(dec, decs + (size_t)v * (size_t)g->ntensors, (size_t)g->ntensors * sizeof(Decision));
  ilp_keep_forbidden_offloads(md, dec);
  int64_t pk;
  return ilp_eval(md, dec, x, &pk) ? -1 : pk;
}

#define ILP_CUT_CHECK_POINTS 8 /* midpoints separated at, besides the LP's point; vectors whose rows are checked */

/* The most x exceeds any window, queue or memory row in the c-MIR form
 * written at point (relative to its right side). */
static double base_excess(const Ilp *md, const double *point, const double *x, MemWalk *w) {
  Mir r = mir_new(md);
  double most = mir_ok(&r) ? -HUGE_VAL : HUGE_VAL;
  for (int kind = 0; kind < CUT_KINDS && mir_ok(&r); kind++) {
    mem_reset(md, w);
    for (int i = 0; i < cut_rows(md, kind); i++) {
      if (kind == CUT_MEMORY) w->p = i, mem_step(md, w);
      mir_row(md, kind, i, w, point, &r);
      most = fmax(most, mir_base_excess(&r, x) / fmax(1, fabs(r.beta)));
    }
  }
  mir_free(&r);
  return most;
}

int plan_ilp_cut_check(const Graph *g, const Device *d, int64_t budget, const Decision *decs, int ndecs, int *ncuts,
                       int *fits, double *cut_off, double *worst, Err *e) {
  Ilp md;
  *ncuts = *fits = 0;
  *cut_off = HUGE_VAL, *worst = -HUGE_VAL;
  if (ilp_build(&md, g, d, budget, false, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, e)) return -1;
  ilp_remove_dominated(&md);
  int nc = md.m.ncols, rc = -1;
  MilpModel cuts = {0};
  MilpResult r = {0};
  double *x = util_xcalloc((size_t)nc + 1, sizeof(double)), *mid = util_xcalloc((size_t)nc + 1, sizeof(double)), *ex = NULL;
  Decision *dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  MemWalk w = {.acc = util_xcalloc((size_t)nc + 1, sizeof(double)), .touched = util_xcalloc((size_t)nc + 1, sizeof(int))};
  MilpOptions mo = {.solver = "glpk", .lp_only = true, .quiet = true};
  if (!x || !mid || !dec || !w.acc || !w.touched) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  if (milp_solve(&md.m, &mo, &r, e)) goto out;
  if (isnan(r.lp_x[nc])) {
    err_set(e, "%s: the LP relaxation at %lld bytes has no optimum", g->path, (long long)budget);
    goto out;
  }
  for (int v = -1; v < ndecs && v < ILP_CUT_CHECK_POINTS; v++) {
    const double *point = r.lp_x;
    if (v >= 0) {
      if (eval_vector(&md, decs, v, dec, x) < 0) continue;
      for (int c = 0; c < nc; c++) mid[c] = (r.lp_x[c] + x[c]) / 2;
      point = mid;
    }
    int r0 = cuts.nrows;
    ilp_separate(&md, point, &cuts);
    free(ex);
    if (!(ex = util_xcalloc((size_t)cuts.nrows + 1, sizeof(double)))) goto out;
    cut_excess(&cuts, r0, point, ex);
    for (int k = r0; k < cuts.nrows; k++) *cut_off = fmin(*cut_off, ex[k]);
  }
  for (int v = 0; v < ndecs && ex; v++) {
    int64_t pk = eval_vector(&md, decs, v, dec, x);
    if (pk < 0 || pk > budget) continue;
    cut_excess(&cuts, 0, x, ex);
    for (int k = 0; k < cuts.nrows; k++) *worst = fmax(*worst, ex[k] / fmax(1, fabs(cuts.row_ub[k])));
    /* The rows the cuts round, every one of them, written at the LP's point. */
    if (*fits < ILP_CUT_CHECK_POINTS && base_excess(&md, r.lp_x, x, &w) > 1e-7) *worst = fmax(*worst, 1);
    ++*fits;
  }
  *ncuts = cuts.nrows;
  rc = cuts.failed ? err_set(e, "%s: out of memory", g->path) : 0;
out:
  milp_result_free(&r);
  milp_model_free(&cuts);
  free(x), free(mid), free(dec), free(ex), free(w.acc), free(w.touched);
  ilp_free(&md);
  return rc;
}
