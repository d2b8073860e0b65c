/*
 * plan_ilp.c - the `ilp` strategy: one MILP over keep / recompute / offload
 * per stashed tensor that models the schedule family of schedule.c exactly
 * (docs/PLANNING.md derives every column and row). Memory is counted at
 * every compute step of every possible schedule (the only steps where live
 * bytes can rise), so the model's peak for any decision vector equals the
 * simulator's to the byte; the objective is compute + recompute + an
 * estimate of copy stalls.
 *
 * Columns: K/R/O per stashed tensor (binary, one-hot); Y[q][c] = "forward op
 * q has been re-run by its c-th candidate op" (continuous, but pinned to 0/1
 * by rows from both sides, so exact for integral decisions); W (trigger
 * products in Y's upper rows); product columns (lower-bounded ANDs, exact
 * at their minimum, which the memory rows prefer); M per step position (live
 * bytes, a running sum) and, when minimizing memory, one peak column.
 */
#include "ration.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Columns of a Lin: a product's factor holds at most 2 (eq, at_or_after),
 * an AND at most 3 factors, so an AND's row holds at most 1 + 3 x 2; the
 * rows that grow with the graph (build_reruns' upper rows) are Rows. */
#define LIN_MAX 8
#define ILP_UNIT 1048576.0 /* memory rows in MiB */
#define ILP_NODES 200        /* nodes of a search, at most */
#define ILP_CHEAP_NNZ 150000 /* models under this many nonzeros: the tree is counted in simplex iterations, */
#define ILP_TREE_WORK 2e8    /* ... this many over the nonzeros, and searches to ILP_GAP; */
#define ILP_NODE_WORK 1e6    /* larger ones: in nodes, at most this many over the nonzeros */
#define ILP_TREE_MIN_NODES 2 /* ... and no tree at all for this many or fewer */
#define ILP_NEIGHBOURHOOD_WORK 5e7 /* nonzeros times nodes in the LP's neighbourhood (gpt2-124m: all 200) */
#define ILP_LP_WORK 7e9      /* simplex iterations times nonzeros for the relaxation */
#define ILP_EVALS_PER_TENSOR 6 /* descent evaluations */
#define ILP_EXCHANGE_EVALS_PER_TENSOR 10 /* ... and more where exchanges follow */
#define ILP_GAP 0.001        /* relative gap at which branch and bound stops */
#define ILP_GOOD_GAP 0.01    /* ... and, on models of ILP_CHEAP_NNZ or more, the neighbourhoods and the tree are skipped */
#define ILP_PROOF_GAP 0.01   /* a tree that ends above it is followed by one with cuts, */
#define ILP_PROOF_WORK 8e9   /* ... counted like the first (ILP_TREE_WORK) */
#define ILP_KICKS 8          /* kicks guided by the relaxation where the plan is still over ILP_PROOF_GAP, */
#define ILP_KICK_TENSORS 2   /* ... each moving this many tensors, after */
#define ILP_PAIR_TENSORS 40  /* ... every pair among this many of the relaxation's strongest preferences */

/* A small linear expression over columns with a constant. */
typedef struct Lin {
  int n;
  int col[LIN_MAX];
  double c[LIN_MAX];
  double k;
} Lin;

typedef struct Event {
  int pos, col; /* col -1: constant */
  int64_t bytes;
} Event;

typedef struct Prod {
  int col;
  int nf;
  int first; /* index into the model's factor pool */
} Prod;

/* A row of any length with a constant (grown by doubling). */
typedef struct Row {
  int n, cap;
  int *col;
  double *c;
  double k;
} Row;

/* A live condition that is an OR of ANDs (of at most 3) 0/1 expressions,
 * one AND per consumer of a tensor, so as many as the graph has (a
 * conditioning tensor read by every block). Consecutive positions with the
 * same condition share one column (Run), which keeps the model to one
 * column per change of the condition, not per step. */
typedef struct Sig {
  int ng, cap;
  int *nf;
  Lin (*f)[3];
} Sig;

typedef struct Run {
  Sig sig;
  int p0;
  bool open;
} Run;

typedef struct Window {
  int stream, a, b0, b, col; /* copies issued at or after a, due from b0 to b, on top of the previous window's */
  double cap;
} Window;

typedef struct Fifo {
  int stream, i0, it, b; /* queue positions i0..it end with tensor fifo[it], due before/after op b */
  double cap;
} Fifo;

/* Groups items (windows or queue rows) by the op b they end at, a counting
 * sort: by_b[first[b] .. first[b+1]) are the indices of the items with that
 * b, in their original order. b is the int at b_offset in each item. */
static bool group_by_op(const void *items, int count, size_t stride, size_t b_offset, int nops, int **first,
                        int **by_b) {
  *first = util_xcalloc((size_t)nops + 2, sizeof(int));
  *by_b = util_xcalloc((size_t)count + 1, sizeof(int));
  int *fill = util_xcalloc((size_t)nops + 1, sizeof(int));
  bool ok = *first && *by_b && fill;
  if (ok) {
    const char *base = items;
    for (int i = 0; i < count; i++) (*first)[*(const int *)(base + (size_t)i * stride + b_offset) + 1]++;
    for (int b = 0; b < nops; b++) (*first)[b + 1] += (*first)[b];
    for (int i = 0; i < count; i++) {
      int b = *(const int *)(base + (size_t)i * stride + b_offset);
      (*by_b)[(*first)[b] + fill[b]++] = i;
    }
  }
  free(fill);
  return ok;
}

typedef struct Ilp {
  const Graph *g;
  const Device *d;
  MilpModel m;
  bool min_memory;
  int depth; /* pulls reach at most this many ops before an op's own need; <= 0: unbounded */
  int *colK, *colR, *colO; /* per tensor, -1 */
  int *cand_first, *cand_n; /* per op, into cand_t / ycol */
  int *cand_t, *ycol, ncand;
  int npos;
  int *pos_op, *pos_q; /* q -1: the op's own compute step */
  int *grp_first, *grp_comp; /* per op: first position and compute position */
  int *cons_first, *cons_n, *cons; /* per tensor: forward ops reading it */
  Event *ev;
  int nev, cap_ev;
  Prod *prod;
  int nprod, cap_prod;
  Lin *fac;
  int nfac, cap_fac;
  /* The factors packed for ilp_eval (a Lin is mostly empty slots): factor
   * i is fac_k[i] + sum over fac_first[i] <= j < fac_first[i + 1] of
   * fac_c[j] * x[fac_col[j]]. */
  double *fac_k, *fac_c;
  int *fac_first, *fac_col;
  int *mcol; /* per position */
  int *obj_cols, nobj_cols; /* the columns with an objective coefficient, for objective_of */
  int peak_col;
  int *col_q;        /* running stall sum per op (build_stalls) */
  double *t_end;     /* compute end of each op without stalls */
  int *wait_at, *issue_at; /* per offloadable tensor: its static copy points */
  double *copy_us[2];
  int *due_first[2], *due_list[2]; /* per op: offloadable tensors due there, per stream */
  Window *win;
  int nwin, cap_win;
  int *win_first, *win_by_b; /* windows grouped by their end op */
  int nfifo[2], *fifo[2];    /* offloadable tensors in each stream's queue order */
  Fifo *frow;                /* queue rows (build_stalls) */
  int nfrow, cap_frow, *frow_first, *frow_by_b;
  int queue_rows[2]; /* the queue rows: [first, end) of the model's rows */
  int queue_nnz;     /* ... and their nonzeros */
  Decision *const *excluded; /* decision vectors the model must not return (no-good rows) */
  int nexcluded;
  Run run; /* scratch of the memory terms */
  Sig sig;
  Lin *ors; /* ... an OR's terms (cap: nors) */
  int nors;
  Row up;   /* ... and a re-run's upper row */
  int64_t host_limit; /* plan_host_bound of a returned vector is at most this (limit_host) */
  bool failed;
} Ilp;

/* ------------------------------------------------------------ helpers */

static Lin var(Ilp *md, int col);
static void term(Ilp *md, int p0, int p1, const Lin *l, int64_t bytes);

static Lin lin_const(double k) {
  Lin l;
  memset(&l, 0, sizeof l);
  l.k = k;
  return l;
}

static void lin_add(Ilp *md, Lin *l, int col, double c) {
  if (col < 0 || c == 0) return;
  for (int i = 0; i < l->n; i++)
    if (l->col[i] == col) {
      l->c[i] += c;
      return;
    }
  if (l->n == LIN_MAX) {
    md->failed = true;
    return;
  }
  l->col[l->n] = col;
  l->c[l->n++] = c;
}

static void lin_addl(Ilp *md, Lin *l, const Lin *b, double s) {
  for (int i = 0; i < b->n; i++) lin_add(md, l, b->col[i], s * b->c[i]);
  l->k += s * b->k;
}

/* Room for n entries in two parallel arrays of *cap entries (of a and b
 * bytes each), grown by doubling. */
static bool reserve2(void **x, size_t a, void **y, size_t b, int *cap, int n) {
  if (n <= *cap) return true;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < n) nc *= 2;
  void *nx = realloc(*x, (size_t)nc * a);
  if (nx) *x = nx;
  void *ny = realloc(*y, (size_t)nc * b);
  if (ny) *y = ny;
  if (!nx || !ny) return false;
  *cap = nc;
  return true;
}

static bool row_reserve(Row *r, int n) {
  return reserve2((void **)&r->col, sizeof(int), (void **)&r->c, sizeof(double), &r->cap, n);
}

static void row_addl(Ilp *md, Row *r, const Lin *b, double s) {
  for (int i = 0; i < b->n; i++) {
    int j = 0;
    while (j < r->n && r->col[j] != b->col[i]) j++;
    if (j == r->n) {
      if (!row_reserve(r, r->n + 1)) {
        md->failed = true;
        return;
      }
      r->col[j] = b->col[i], r->c[j] = 0, r->n++;
    }
    r->c[j] += s * b->c[i];
  }
  r->k += s * b->k;
}

static bool lin_is_zero(const Lin *l) {
  for (int i = 0; i < l->n; i++)
    if (l->c[i] != 0) return false;
  return l->k == 0;
}

static bool lin_is_const(const Lin *l) {
  for (int i = 0; i < l->n; i++)
    if (l->c[i] != 0) return false;
  return true;
}

static void add_row(Ilp *md, double lb, double ub, int n, const int *col, const double *c, double k) {
  bool constant = true;
  for (int i = 0; i < n && constant; i++) constant = c[i] == 0;
  if (constant) return;
  if (milp_add_row(&md->m, lb > -HUGE_VAL ? lb - k : lb, ub < HUGE_VAL ? ub - k : ub, n, col, c) < 0) md->failed = true;
}

static void row_lin(Ilp *md, double lb, double ub, const Lin *l) { add_row(md, lb, ub, l->n, l->col, l->c, l->k); }

static int new_col(Ilp *md, double lb, double ub, double obj, bool integer) {
  int c = milp_add_col(&md->m, lb, ub, obj, integer);
  if (c < 0) md->failed = true;
  return c;
}

/* Room for index n in *arr (*cap elements, grown by doubling). */
static bool push(void **arr, int n, int *cap, size_t elem) {
  if (n < *cap) return true;
  int nc = *cap ? *cap : 1024;
  while (nc <= n) nc *= 2;
  void *p = realloc(*arr, (size_t)nc * elem);
  if (!p) return false;
  *arr = p;
  *cap = nc;
  return true;
}

/* AND of 0/1 expressions: a column z >= sum(f) - (n-1), z >= 0. Memory rows
 * only ever want z small, so z sits at the AND. */
static Lin and_of(Ilp *md, const Lin *f, int n) {
  Lin keep[4];
  int nk = 0;
  for (int i = 0; i < n; i++) {
    if (lin_is_const(&f[i])) {
      if (f[i].k < 0.5) return lin_const(0);
      continue;
    }
    keep[nk++] = f[i];
  }
  if (nk == 0) return lin_const(1);
  if (nk == 1) return keep[0];
  int z = new_col(md, 0, 1, 0, false);
  Lin row = lin_const(0);
  lin_add(md, &row, z, 1);
  for (int i = 0; i < nk; i++) lin_addl(md, &row, &keep[i], -1);
  row_lin(md, 1.0 - nk, HUGE_VAL, &row);
  if (!push((void **)&md->prod, md->nprod, &md->cap_prod, sizeof(Prod)) ||
      !push((void **)&md->fac, md->nfac + nk, &md->cap_fac, sizeof(Lin))) {
    md->failed = true;
    return lin_const(0);
  }
  md->prod[md->nprod++] = (Prod){z, nk, md->nfac};
  for (int i = 0; i < nk; i++) md->fac[md->nfac++] = keep[i];
  Lin l = lin_const(0);
  lin_add(md, &l, z, 1);
  return l;
}

static Lin var(Ilp *md, int col) {
  Lin l = lin_const(0);
  lin_add(md, &l, col, 1);
  return l;
}

/* OR of 0/1 expressions as one column z >= each; at its minimum, z is the
 * OR. Factors exist before z, so evaluation in creation order works. */
static Lin or_of(Ilp *md, const Lin *f, int n) {
  int nk = 0;
  for (int i = 0; i < n; i++) {
    if (lin_is_const(&f[i]) && f[i].k > 0.5) return lin_const(1);
    if (!lin_is_const(&f[i])) nk++;
  }
  if (nk == 0) return lin_const(0);
  if (nk == 1)
    for (int i = 0; i < n; i++)
      if (!lin_is_const(&f[i])) return f[i];
  if (!push((void **)&md->prod, md->nprod, &md->cap_prod, sizeof(Prod)) ||
      !push((void **)&md->fac, md->nfac + nk, &md->cap_fac, sizeof(Lin))) {
    md->failed = true;
    return lin_const(0);
  }
  int z = new_col(md, 0, 1, 0, false);
  md->prod[md->nprod++] = (Prod){z, -nk, md->nfac};
  for (int i = 0; i < n; i++) {
    if (lin_is_const(&f[i])) continue;
    Lin r = var(md, z);
    lin_addl(md, &r, &f[i], -1);
    row_lin(md, 0, HUGE_VAL, &r);
    md->fac[md->nfac++] = f[i];
  }
  return var(md, z);
}

static bool sig_reserve(Sig *s, int n) {
  return reserve2((void **)&s->nf, sizeof(int), (void **)&s->f, sizeof *s->f, &s->cap, n);
}

static void sig_free(Sig *s) { free(s->nf), free(s->f); }

static void sig_add(Ilp *md, Sig *s, const Lin *f, int n) {
  if (!sig_reserve(s, s->ng + 1)) {
    md->failed = true;
    return;
  }
  Lin g[3];
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (lin_is_const(&f[i])) {
      if (f[i].k < 0.5) return;
      continue;
    }
    g[k++] = f[i];
  }
  if (k == 0) g[k++] = lin_const(1);
  for (int i = 0; i < k; i++) s->f[s->ng][i] = g[i];
  s->nf[s->ng++] = k;
}

static void run_flush(Ilp *md, Run *r, int p1, int64_t bytes) {
  if (r->open && r->sig.ng) {
    if (r->sig.ng > md->nors) {
      Lin *ors = realloc(md->ors, (size_t)r->sig.ng * sizeof(Lin));
      if (!ors) {
        md->failed = true;
        r->open = false;
        return;
      }
      md->ors = ors, md->nors = r->sig.ng;
    }
    for (int i = 0; i < r->sig.ng; i++) md->ors[i] = and_of(md, r->sig.f[i], r->sig.nf[i]);
    Lin l = or_of(md, md->ors, r->sig.ng);
    term(md, r->p0, p1, &l, bytes);
  }
  r->open = false;
}

static bool lin_equal(const Lin *a, const Lin *b) {
  if (a->n != b->n || a->k != b->k) return false;
  for (int i = 0; i < a->n; i++)
    if (a->col[i] != b->col[i] || a->c[i] != b->c[i]) return false;
  return true;
}

static bool sig_equal(const Sig *a, const Sig *b) {
  if (a->ng != b->ng) return false;
  for (int i = 0; i < a->ng; i++) {
    if (a->nf[i] != b->nf[i]) return false;
    for (int j = 0; j < a->nf[i]; j++)
      if (!lin_equal(&a->f[i][j], &b->f[i][j])) return false;
  }
  return true;
}

static void sig_copy(Ilp *md, Sig *dst, const Sig *src) {
  if (!sig_reserve(dst, src->ng)) {
    md->failed = true;
    dst->ng = 0;
    return;
  }
  dst->ng = src->ng;
  for (int i = 0; i < src->ng; i++) {
    dst->nf[i] = src->nf[i];
    for (int j = 0; j < src->nf[i]; j++) dst->f[i][j] = src->f[i][j];
  }
}

static void run_step(Ilp *md, Run *r, const Sig *s, int p, int64_t bytes) {
  if (r->open && sig_equal(&r->sig, s)) return;
  run_flush(md, r, p - 1, bytes);
  sig_copy(md, &r->sig, s);
  r->p0 = p;
  r->open = true;
}

/* Largest candidate index of op q at or before op j, -1 if none. */
static int cand_le(const Ilp *md, int q, int j) {
  int lo = 0, hi = md->cand_n[q] - 1, best = -1;
  const int *t = md->cand_t + md->cand_first[q];
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (t[mid] <= j) best = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  return best;
}

/* "q has been re-run by op j (inclusive)". */
static Lin yle(Ilp *md, int q, int j) {
  int c = cand_le(md, q, j);
  return c < 0 ? lin_const(0) : var(md, md->ycol[md->cand_first[q] + c]);
}

static Lin ylt(Ilp *md, int q, int j) { return yle(md, q, j - 1); }

static Lin rr(Ilp *md, int q) { return md->cand_n[q] ? var(md, md->ycol[md->cand_first[q] + md->cand_n[q] - 1]) : lin_const(0); }

/* "q is re-run exactly in op j's prelude". */
static Lin eq(Ilp *md, int q, int j) {
  Lin l = yle(md, q, j);
  Lin b = ylt(md, q, j);
  lin_addl(md, &l, &b, -1);
  return l;
}

/* "q's re-run step is at or after position p". */
static Lin at_or_after(Ilp *md, int q, int p) {
  int j = md->pos_op[p], x = md->pos_q[p];
  Lin l = rr(md, q);
  Lin b = x >= 0 && q >= x ? ylt(md, q, j) : yle(md, q, j);
  lin_addl(md, &l, &b, -1);
  return l;
}

/* "q's re-run step is strictly before position p". */
static Lin started_before(Ilp *md, int q, int p) {
  int j = md->pos_op[p], x = md->pos_q[p];
  return x < 0 || q < x ? yle(md, q, j) : ylt(md, q, j);
}

/* bytes * l live at positions [p0, p1]. */
static void term(Ilp *md, int p0, int p1, const Lin *l, int64_t bytes) {
  if (p0 > p1 || bytes == 0 || lin_is_zero(l)) return;
  if (!push((void **)&md->ev, md->nev + 2 * (l->n + 1), &md->cap_ev, sizeof(Event))) {
    md->failed = true;
    return;
  }
  for (int i = -1; i < l->n; i++) {
    double c = i < 0 ? l->k : l->c[i];
    if (c == 0) continue;
    int col = i < 0 ? -1 : l->col[i];
    int64_t b = (int64_t)llround(c) * bytes;
    md->ev[md->nev++] = (Event){p0, col, b};
    if (p1 + 1 < md->npos) md->ev[md->nev++] = (Event){p1 + 1, col, -b};
  }
}

static bool regen(const Ilp *md, int t) { return plan_regenerable(md->g, t); }

static bool decided(const Ilp *md, int t) { return md->colK[t] >= 0; }

/* Offload is still a choice for t (remove_dominated fixes some O at 0). */
static bool offload_allowed(const Ilp *md, int t) { return md->colO[t] >= 0 && md->m.col_ub[md->colO[t]] > 0; }

/* ------------------------------------------------------------ structure */

static int build_consumers(Ilp *md) {
  const Graph *g = md->g;
  md->cons_first = util_xcalloc((size_t)g->ntensors + 1, sizeof(int));
  md->cons_n = util_xcalloc((size_t)g->ntensors + 1, sizeof(int));
  int total = 0;
  for (int i = 0; i < g->nops; i++)
    if (g->ops[i].phase == PHASE_FORWARD) total += g->ops[i].ninputs;
  md->cons = util_xcalloc((size_t)total + 1, sizeof(int));
  if (!md->cons_first || !md->cons_n || !md->cons) return -1;
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    if (o->phase != PHASE_FORWARD) continue;
    for (int k = 0; k < o->ninputs; k++) {
      bool dup = false;
      for (int k2 = 0; k2 < k; k2++) dup = dup || o->inputs[k2] == o->inputs[k];
      if (!dup) md->cons_n[o->inputs[k]]++;
    }
  }
  for (int t = 1; t < g->ntensors; t++) md->cons_first[t] = md->cons_first[t - 1] + md->cons_n[t - 1];
  memset(md->cons_n, 0, (size_t)g->ntensors * sizeof(int));
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    if (o->phase != PHASE_FORWARD) continue;
    for (int k = 0; k < o->ninputs; k++) {
      bool dup = false;
      for (int k2 = 0; k2 < k; k2++) dup = dup || o->inputs[k2] == o->inputs[k];
      int t = o->inputs[k];
      if (!dup) md->cons[md->cons_first[t] + md->cons_n[t]++] = i;
    }
  }
  return 0;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Candidate re-run ops of every forward op, consumers before producers. */
static int build_candidates(Ilp *md) {
  const Graph *g = md->g;
  int n = g->nops;
  md->cand_first = util_xcalloc((size_t)n + 1, sizeof(int));
  md->cand_n = util_xcalloc((size_t)n + 1, sizeof(int));
  int *mark = util_xcalloc((size_t)n + 1, sizeof(int)), *tmp = util_xcalloc((size_t)n + 1, sizeof(int));
  int **sets = util_xcalloc((size_t)n + 1, sizeof(int *));
  int rc = -1;
  if (!md->cand_first || !md->cand_n || !mark || !tmp || !sets) goto out;
  for (int i = 0; i < n; i++) mark[i] = -1;
  for (int q = n - 1; q >= 0; q--) {
    const Op *o = &g->ops[q];
    if (o->phase != PHASE_FORWARD) continue;
    /* With a depth bound, pulls reach at most depth ops before q's own
     * first need (ops that only feed intermediates take their consumers'). */
    int cnt = 0, own = INT32_MAX;
    for (int k = 0; k < o->noutputs; k++) {
      const Tensor *tv = &g->tensors[o->outputs[k]];
      if (regen(md, o->outputs[k]) && tv->stashed && tv->first_bwd_read < own) own = tv->first_bwd_read;
    }
    int lo = md->depth > 0 && own != INT32_MAX ? own - md->depth : INT32_MIN;
#define ADD(k) do { if (mark[k] != q && (k) >= lo) { mark[k] = q; tmp[cnt++] = (k); } } while (0)
    for (int k = 0; k < o->noutputs; k++) {
      int v = o->outputs[k];
      if (!regen(md, v)) continue;
      const Tensor *tv = &g->tensors[v];
      if (tv->stashed) ADD(tv->first_bwd_read);
      for (int c = 0; c < md->cons_n[v]; c++) {
        int q2 = md->cons[md->cons_first[v] + c];
        for (int i = 0; i < md->cand_n[q2]; i++) {
          int t = sets[q2][i];
          if (!tv->stashed || t <= tv->first_bwd_read) ADD(t);
        }
      }
    }
#undef ADD
    if (!cnt) continue;
    qsort(tmp, (size_t)cnt, sizeof(int), cmp_int);
    if (!(sets[q] = util_xcalloc((size_t)cnt, sizeof(int)))) goto out;
    memcpy(sets[q], tmp, (size_t)cnt * sizeof(int));
    md->cand_n[q] = cnt;
    md->ncand += cnt;
  }
  md->cand_t = util_xcalloc((size_t)md->ncand + 1, sizeof(int));
  md->ycol = util_xcalloc((size_t)md->ncand + 1, sizeof(int));
  if (!md->cand_t || !md->ycol) goto out;
  int at = 0;
  for (int q = 0; q < n; q++) {
    md->cand_first[q] = at;
    if (md->cand_n[q]) memcpy(md->cand_t + at, sets[q], (size_t)md->cand_n[q] * sizeof(int));
    at += md->cand_n[q];
  }
  rc = 0;
out:
  if (sets)
    for (int i = 0; i < n; i++) free(sets[i]);
  free(sets);
  free(mark);
  free(tmp);
  return rc;
}

typedef struct PosKey {
  int op, q;
} PosKey;

static int cmp_pos(const void *a, const void *b) {
  const PosKey *x = a, *y = b;
  if (x->op != y->op) return x->op - y->op;
  return x->q - y->q;
}

/* Every compute step any schedule of the family can have, in step order. */
static int build_positions(Ilp *md) {
  const Graph *g = md->g;
  int n = g->nops;
  md->npos = n + md->ncand;
  PosKey *keys = util_xcalloc((size_t)md->npos + 1, sizeof(PosKey));
  md->pos_op = util_xcalloc((size_t)md->npos + 1, sizeof(int));
  md->pos_q = util_xcalloc((size_t)md->npos + 1, sizeof(int));
  md->grp_first = util_xcalloc((size_t)n + 1, sizeof(int));
  md->grp_comp = util_xcalloc((size_t)n + 1, sizeof(int));
  if (!keys || !md->pos_op || !md->pos_q || !md->grp_first || !md->grp_comp) {
    free(keys);
    return -1;
  }
  int k = 0;
  for (int j = 0; j < n; j++) keys[k++] = (PosKey){j, INT32_MAX};
  for (int q = 0; q < n; q++)
    for (int c = 0; c < md->cand_n[q]; c++) keys[k++] = (PosKey){md->cand_t[md->cand_first[q] + c], q};
  qsort(keys, (size_t)md->npos, sizeof *keys, cmp_pos);
  for (int p = 0; p < md->npos; p++) {
    md->pos_op[p] = keys[p].op;
    md->pos_q[p] = keys[p].q == INT32_MAX ? -1 : keys[p].q;
    if (md->pos_q[p] < 0) md->grp_comp[keys[p].op] = p;
  }
  for (int p = md->npos - 1; p >= 0; p--) md->grp_first[md->pos_op[p]] = p;
  free(keys);
  return 0;
}

static int pos_of_rerun(const Ilp *md, int j, int q) {
  int lo = md->grp_first[j], hi = md->grp_comp[j] - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (md->pos_q[mid] == q) return mid;
    if (md->pos_q[mid] < q) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* ------------------------------------------------------------ columns */

static double op_us(const Ilp *md, int op) { return cost_op_seconds(md->g, md->d, op) * 1e6; }

static void build_decisions(Ilp *md) {
  const Graph *g = md->g;
  for (int t = 0; t < g->ntensors; t++) md->colK[t] = md->colR[t] = md->colO[t] = -1;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (!regen(md, t)) continue;
    md->colK[t] = new_col(md, 0, 1, 0, true);
    md->colR[t] = new_col(md, 0, 1, 0, true);
    /* A device whose copies take a share of the compute stream (a CPU
     * backend's profile) charges it at each copy's issue: one offload and
     * one prefetch per offloaded tensor (sim.c). */
    int64_t bytes = g->tensors[t].bytes;
    double share = md->min_memory ? 0
                   : md->d->copy_compute_share * (cost_d2h_seconds(md->d, bytes) + cost_h2d_seconds(md->d, bytes)) * 1e6;
    md->colO[t] = new_col(md, 0, 1, share, true);
    Lin one = lin_const(0);
    lin_add(md, &one, md->colK[t], 1);
    lin_add(md, &one, md->colR[t], 1);
    lin_add(md, &one, md->colO[t], 1);
    row_lin(md, 1, 1, &one);
  }
}

/* Copy stalls (docs/PLANNING.md, "Stalls"): s[b] >= 0 is the stall at op
 * b (the waits after it and in its prelude), Q[b] their running sum. A
 * window [a, b] of one copy stream: the copies issued in it and due in it
 * need their copy time, which the compute between a and b and the stalls
 * inside the window must cover (interval capacity of a FIFO queue). Each
 * window is a running sum C over b for one a. Windows reach as far as
 * every copy of the stream together could still be late, but only those
 * that no other window implies become rows: a busy queue spans layers
 * (llama3.2-1b: one MLP activation takes 5.4 ms to copy, 27 ops at the
 * model's mean op time), and 96-op windows let the LP spread offloads
 * the queues cannot carry. On graphs over ILP_WINDOW_GRAPH_OPS ops windows
 * stop at ILP_WINDOW_OPS: gpt2-1558m's short ops under 2 ms copies keep
 * 108,112 windows unbounded (35,188 within 96 ops), and its relaxation no
 * longer finishes within its count. Static approximations: prefetches are
 * timed for each tensor's first backward reader, re-runs add no time to
 * hide copies behind. */
#define ILP_FIFO 24
#define ILP_WINDOW_OPS 96
#define ILP_WINDOW_GRAPH_OPS 1000

static double t_before(const Ilp *md, int i) { return i > 0 ? md->t_end[i - 1] : 0; }

/* Stream 0 (D2H): issued after op p, due at the wait after op w. Stream 1
 * (H2D): issued at the start of op issue's group, due before op f. Times
 * are compute without stalls; the stalls before the issue (Q[a-1]) and by
 * the due op (Q[b]) add to them. */
static int issue_op(const Ilp *md, int stream, int t) { return stream ? md->issue_at[t] : md->g->tensors[t].producer; }
static int due_op(const Ilp *md, int stream, int t) { return stream ? md->g->tensors[t].first_bwd_read : md->wait_at[t]; }
static double issue_time(const Ilp *md, int stream, int a) { return stream ? t_before(md, a) : md->t_end[a]; }
static double due_time(const Ilp *md, int stream, int b) { return stream ? t_before(md, b) : md->t_end[b]; }

/* A round trip, offload after the producer and prefetch back before the
 * first backward reader: how far its two copies overrun the compute
 * between. */
static double round_trip_late(const Ilp *md, int t) {
  int p = md->g->tensors[t].producer, f = md->g->tensors[t].first_bwd_read;
  return md->copy_us[0][t] + md->copy_us[1][t] - (due_time(md, 1, f) - issue_time(md, 0, p));
}

static bool in_window(const Ilp *md, int stream, int t, int a, int b) {
  return issue_op(md, stream, t) >= a && due_op(md, stream, t) == b;
}

static void add_window(Ilp *md, int stream, int a, int b0, int b, int c, double cap) {
  if (!push((void **)&md->win, md->nwin, &md->cap_win, sizeof(Window))) {
    md->failed = true;
    return;
  }
  md->win[md->nwin++] = (Window){stream, a, b0, b, c, cap};
}

static void build_stalls(Ilp *md) {
  const Graph *g = md->g;
  const Device *d = md->d;
  int n = g->nops, nt = g->ntensors;
  if (md->min_memory) return;
  md->t_end = util_xcalloc((size_t)n + 1, sizeof(double));
  md->col_q = util_xcalloc((size_t)n + 1, sizeof(int));
  md->wait_at = util_xcalloc((size_t)nt + 1, sizeof(int));
  md->issue_at = util_xcalloc((size_t)nt + 1, sizeof(int));
  md->copy_us[0] = util_xcalloc((size_t)nt + 1, sizeof(double));
  md->copy_us[1] = util_xcalloc((size_t)nt + 1, sizeof(double));
  int *cols = util_xcalloc((size_t)nt + 4, sizeof(int));
  double *vals = util_xcalloc((size_t)nt + 4, sizeof(double));
  int *due_of = util_xcalloc((size_t)nt + 1, sizeof(int)); /* per tensor, one stream's due op */
  if (!md->t_end || !md->col_q || !md->wait_at || !md->issue_at || !md->copy_us[0] || !md->copy_us[1] || !cols || !vals ||
      !due_of) {
    md->failed = true;
    goto out;
  }
  for (int i = 0; i < n; i++) md->t_end[i] = (i ? md->t_end[i - 1] : 0) + op_us(md, i);
  for (int t = 0; t < nt; t++) {
    if (md->colO[t] < 0) continue;
    md->wait_at[t] = plan_offload_wait_op(g, d, t);
    md->issue_at[t] = plan_prefetch_issue_op(g, d, t, g->tensors[t].first_bwd_read);
    md->copy_us[0][t] = cost_d2h_seconds(d, g->tensors[t].bytes) * 1e6;
    md->copy_us[1][t] = cost_h2d_seconds(d, g->tensors[t].bytes) * 1e6;
  }
  for (int stream = 0; stream < 2; stream++) {
    md->due_first[stream] = util_xcalloc((size_t)n + 2, sizeof(int));
    md->due_list[stream] = util_xcalloc((size_t)nt + 1, sizeof(int));
    if (!md->due_first[stream] || !md->due_list[stream]) {
      md->failed = true;
      goto out;
    }
    for (int t = 0; t < nt; t++)
      if (md->colO[t] >= 0) md->due_first[stream][due_op(md, stream, t) + 1]++;
    for (int b = 0; b < n; b++) md->due_first[stream][b + 1] += md->due_first[stream][b];
    int *fill = util_xcalloc((size_t)n + 1, sizeof(int));
    if (!fill) {
      md->failed = true;
      goto out;
    }
    for (int t = 0; t < nt; t++) {
      if (md->colO[t] < 0) continue;
      int b = due_op(md, stream, t);
      md->due_list[stream][md->due_first[stream][b] + fill[b]++] = t;
    }
    free(fill);
  }
  for (int b = 0; b < n; b++) {
    md->col_q[b] = new_col(md, 0, HUGE_VAL, b == n - 1 ? 1 : 0, false);
    if (b) { /* Q[b] >= Q[b-1]: s[b] = Q[b] - Q[b-1] >= 0 */
      cols[0] = md->col_q[b], vals[0] = 1, cols[1] = md->col_q[b - 1], vals[1] = -1;
      if (milp_add_row(&md->m, 0, HUGE_VAL, 2, cols, vals) < 0) md->failed = true;
    }
  }
  char *start = util_xcalloc((size_t)n + 1, 1), *due = util_xcalloc((size_t)n + 1, 1);
  double *latest = util_xcalloc((size_t)n + 1, sizeof(double)); /* per due op: the most of a later window start */
  if (!start || !due || !latest) {
    free(start), free(due), free(latest);
    md->failed = true;
    goto out;
  }
  for (int stream = 0; stream < 2; stream++) {
    memset(start, 0, (size_t)n);
    memset(due, 0, (size_t)n);
    for (int t = 0; t < nt; t++) {
      if (md->colO[t] < 0) continue;
      start[issue_op(md, stream, t)] = 1;
      due[due_op(md, stream, t)] = 1;
    }
    double total = 0;
    int reach = n > ILP_WINDOW_GRAPH_OPS ? ILP_WINDOW_OPS : n;
    for (int t = 0; t < nt; t++)
      if (md->colO[t] >= 0) total += md->copy_us[stream][t];
    for (int b = 0; b < n; b++) latest[b] = -HUGE_VAL;
    for (int a = n - 1; a >= 0; a--) {
      if (!start[a]) continue;
      int prev = -1, k = 0, b0 = a;
      double sum = 0, most = -HUGE_VAL;
      for (int b = a; b < n; b++) {
        if (!due[b]) continue;
        double cap = due_time(md, stream, b) - issue_time(md, stream, a);
        if (cap > total || b - a > reach) break; /* later ones cannot bind (cap over every copy together), or out of reach */
        int k0 = k;
        for (int i = md->due_first[stream][b]; i < md->due_first[stream][b + 1]; i++) {
          int t = md->due_list[stream][i];
          if (in_window(md, stream, t, a, b)) cols[k] = md->colO[t], vals[k] = -md->copy_us[stream][t], sum -= vals[k++];
        }
        if (k == k0) continue;
        /* Kept only if no window implies it: one ending earlier (b') does
         * when copies(a, b) - copies(a, b') <= the compute from b' to b even
         * with every copy offloaded, and one starting later (a') when
         * copies(a, b) - copies(a', b) <= the compute from a to a' (its Q[a'-1]
         * is no less). So each row must exceed the most of copies - end time
         * of the earlier ends, and of copies + start time of the later
         * starts; and it must be able to bind at all. */
        double past_end = sum - due_time(md, stream, b), before_start = sum + issue_time(md, stream, a);
        bool keep = sum > cap && past_end > most && before_start > latest[b];
        most = fmax(most, past_end);
        latest[b] = fmax(latest[b], before_start);
        if (!keep) continue;
        int c = new_col(md, 0, HUGE_VAL, 0, false);
        cols[k] = c, vals[k++] = 1;
        if (prev >= 0) cols[k] = prev, vals[k++] = -1;
        if (milp_add_row(&md->m, 0, 0, k, cols, vals) < 0) md->failed = true;
        prev = c;
        /* Q[b] - Q[a-1] - C >= -cap */
        k = 0;
        cols[k] = md->col_q[b], vals[k++] = 1;
        if (a) cols[k] = md->col_q[a - 1], vals[k++] = -1;
        cols[k] = c, vals[k++] = -1;
        if (milp_add_row(&md->m, -cap, HUGE_VAL, k, cols, vals) < 0) md->failed = true;
        add_window(md, stream, a, b0, b, c, cap);
        b0 = b + 1, k = 0;
      }
    }
  }
  free(start), free(due), free(latest);
  if (!group_by_op(md->win, md->nwin, sizeof *md->win, offsetof(Window, b), n, &md->win_first, &md->win_by_b)) {
    md->failed = true;
    goto out;
  }
  /* Queue order: a copy finishes after every copy queued before it, even
   * those due later. For offloaded t and each start a within ILP_FIFO ops
   * before its issue: Q[due] - Q[a-1] >= copies queued from a up to t - the
   * compute in between, relaxed by big when t stays. big need only cover
   * the copies due after t (the others are bounded as in a window) and
   * what the queued copies exceed the compute by (the row is void below
   * 0): the smaller of the two, not the queue's whole copy time, keeps the
   * LP's row from vanishing at a fractional O_t (gpt2-tiny at its smallest
   * budget: LP bound 637.8 -> 642.9 us). Evaluated like the windows
   * (eval_stalls). */
  md->queue_rows[0] = md->m.nrows;
  int nnz0 = md->m.nnz;
  for (int stream = 0; stream < 2; stream++) {
    int *q = md->fifo[stream] = util_xcalloc((size_t)nt + 1, sizeof(int));
    if (!q) {
      md->failed = true;
      goto out;
    }
    for (int t = 0; t < nt; t++) due_of[t] = md->colO[t] >= 0 ? due_op(md, stream, t) : -1;
    int k = 0;
    for (int a = 0; a < n; a++) {
      int k0 = k;
      if (stream == 0) {
        const Op *op = &g->ops[a];
        for (int i = 0; i < op->noutputs; i++)
          if (md->colO[op->outputs[i]] >= 0) q[k++] = op->outputs[i];
      } else {
        for (int i = 0; i < g->nstashed; i++)
          if (md->colO[g->stashed[i]] >= 0 && md->issue_at[g->stashed[i]] == a) q[k++] = g->stashed[i];
      }
      plan_queue_order(q + k0, k - k0, due_of); /* as the schedule issues them */
    }
    md->nfifo[stream] = k;
    for (int it = 0; it < k; it++) {
      int t = q[it], issue = issue_op(md, stream, t), b = due_op(md, stream, t);
      for (int i0 = it; i0 >= 0; i0--) {
        int a = issue_op(md, stream, q[i0]);
        if (issue - a > ILP_FIFO) break;
        if (i0 > 0 && issue_op(md, stream, q[i0 - 1]) == a) continue;
        double cap = due_time(md, stream, b) - issue_time(md, stream, a), big = 0;
        int nn = 0;
        cols[nn] = md->col_q[b], vals[nn++] = 1;
        if (a) cols[nn] = md->col_q[a - 1], vals[nn++] = -1;
        double late = 0;
        for (int i = i0; i <= it; i++) {
          cols[nn] = md->colO[q[i]], vals[nn++] = -md->copy_us[stream][q[i]];
          if (i < it) big += md->copy_us[stream][q[i]];
          if (i < it && due_op(md, stream, q[i]) > b) late += md->copy_us[stream][q[i]];
        }
        if (big + md->copy_us[stream][t] <= cap) continue; /* never binds */
        big = fmin(late, fmax(0, big - cap));
        vals[nn - 1] -= big;
        if (milp_add_row(&md->m, -cap - big, HUGE_VAL, nn, cols, vals) < 0) md->failed = true;
        if (!push((void **)&md->frow, md->nfrow, &md->cap_frow, sizeof(Fifo))) {
          md->failed = true;
          goto out;
        }
        md->frow[md->nfrow++] = (Fifo){stream, i0, it, b, cap};
      }
    }
  }
  md->queue_rows[1] = md->m.nrows;
  md->queue_nnz = md->m.nnz - nnz0;
  if (!group_by_op(md->frow, md->nfrow, sizeof *md->frow, offsetof(Fifo, b), n, &md->frow_first, &md->frow_by_b)) {
    md->failed = true;
    goto out;
  }
  for (int t = 0; t < nt; t++) {
    if (md->colO[t] < 0) continue;
    int p = g->tensors[t].producer, f = g->tensors[t].first_bwd_read;
    double late = round_trip_late(md, t);
    /* Q[f] - Q[p-1] >= late * O: at O = 0 or 1 the same as >= copies * O -
     * cap, and at a fraction no weaker (the hull of the two points). */
    if (late <= 0) continue;
    int k = 0;
    cols[k] = md->col_q[f], vals[k++] = 1;
    if (p) cols[k] = md->col_q[p - 1], vals[k++] = -1;
    cols[k] = md->colO[t], vals[k++] = -late;
    if (milp_add_row(&md->m, 0, HUGE_VAL, k, cols, vals) < 0) md->failed = true;
  }
out:
  free(cols), free(vals), free(due_of);
}

/* ------------------------------------------------------------ cuts */

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
    if (issue_op(md, w->stream, t) < w->a || due_op(md, w->stream, t) > w->b || !offload_allowed(md, t)) continue;
    mir_item(r, md->colO[t], md->copy_us[w->stream][t], x[md->colO[t]]);
  }
}

/* Queue row f as a c-MIR row (us): the copies queued from i0 up to it,
 * the last one's coefficient raised by the row's relaxation. */
static void mir_fifo(const Ilp *md, const Fifo *f, const double *x, Mir *r) {
  const int *q = md->fifo[f->stream];
  int a = issue_op(md, f->stream, q[f->i0]);
  double big = 0, late = 0;
  for (int i = f->i0; i < f->it; i++) {
    big += md->copy_us[f->stream][q[i]];
    if (due_op(md, f->stream, q[i]) > f->b) late += md->copy_us[f->stream][q[i]];
  }
  big = fmin(late, fmax(0, big - f->cap));
  r->n = r->ns = 0;
  r->beta = f->cap + big, r->s0 = 0;
  r->scol[r->ns] = md->col_q[f->b], r->sw[r->ns++] = 1;
  if (a) r->scol[r->ns] = md->col_q[a - 1], r->sw[r->ns++] = -1;
  for (int i = f->i0; i <= f->it; i++)
    if (offload_allowed(md, q[i]))
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

static void separate(void *ctx, const double *x, MilpModel *cuts) {
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

/* Q for one decision vector: the least the rows allow (windows, round
 * trips and queue rows, each a bound of the FIFO streams), raised to what
 * the streams actually do: each runs its copies in queue order, a prefetch
 * also waits for its own offload, and an offloaded copy's lateness at its
 * due op is a stall there. The rows are bounds, so the stalls the model
 * reports for a plan are the queues' own (docs/PLANNING.md 4). parts
 * selects the rows, the queues or both (the test hook compares the two). */
enum { STALL_ROWS = 1, STALL_QUEUES = 2 };

/* The offloaded tensors of one decision vector, per stream: by due op
 * (due_list's order: [due_first[b], due_first[b + 1]) of due) and in queue
 * order (the copy times of those before queue position k start at
 * queued_first[k]), so that the sums below walk only copies that happen,
 * in the order the full walks would add them. */
typedef struct Offloaded {
  int *due_first[2], *due[2];
  int *queued_first[2];
  double *queued_us[2];
} Offloaded;

static bool offloaded_of(const Ilp *md, const Decision *dec, Offloaded *o) {
  int n = md->g->nops;
  bool ok = true;
  for (int s = 0; s < 2; s++) {
    int nf = md->nfifo[s], nd = md->due_first[s][n];
    o->due_first[s] = util_xcalloc((size_t)n + 1, sizeof(int));
    o->due[s] = util_xcalloc((size_t)nd + 1, sizeof(int));
    o->queued_first[s] = util_xcalloc((size_t)nf + 1, sizeof(int));
    o->queued_us[s] = util_xcalloc((size_t)nf + 1, sizeof(double));
    if (!o->due_first[s] || !o->due[s] || !o->queued_first[s] || !o->queued_us[s]) {
      ok = false;
      continue;
    }
    int m = 0;
    for (int b = 0; b < n; b++) {
      o->due_first[s][b] = m;
      for (int k = md->due_first[s][b]; k < md->due_first[s][b + 1]; k++)
        if (dec[md->due_list[s][k]] == DEC_OFFLOAD) o->due[s][m++] = md->due_list[s][k];
    }
    o->due_first[s][n] = m;
    m = 0;
    for (int k = 0; k < nf; k++) {
      o->queued_first[s][k] = m;
      if (dec[md->fifo[s][k]] == DEC_OFFLOAD) o->queued_us[s][m++] = md->copy_us[s][md->fifo[s][k]];
    }
    o->queued_first[s][nf] = m;
  }
  return ok;
}

static void offloaded_free(Offloaded *o) {
  for (int s = 0; s < 2; s++) free(o->due_first[s]), free(o->due[s]), free(o->queued_first[s]), free(o->queued_us[s]);
}

static void eval_stalls(const Ilp *md, const Decision *dec, int parts, double *x) {
  const Graph *g = md->g;
  int n = g->nops, nt = g->ntensors;
  if (!md->col_q) return;
  double *q = util_xcalloc((size_t)n + 1, sizeof(double)), *finish = util_xcalloc(2 * (size_t)nt + 1, sizeof(double));
  Offloaded off = {0};
  if (!q || !finish || !offloaded_of(md, dec, &off)) {
    free(q), free(finish), offloaded_free(&off);
    return;
  }
  /* The running sums C of each window start, then Q[b] as the largest
   * Q[a-1] + C - cap over the windows and round trips ending at b. */
  double cval = 0;
  int last_a = -1, last_s = -1;
  for (int i = 0; i < md->nwin; i++) {
    const Window *w = &md->win[i];
    if (w->a != last_a || w->stream != last_s) cval = 0, last_a = w->a, last_s = w->stream;
    for (int k = off.due_first[w->stream][w->b0]; k < off.due_first[w->stream][w->b + 1]; k++) {
      int t = off.due[w->stream][k];
      if (issue_op(md, w->stream, t) >= w->a) cval += md->copy_us[w->stream][t];
    }
    x[w->col] = cval;
  }
  int next[2] = {0, 0};
  double busy[2] = {0, 0}; /* when each stream is done with its queue so far */
  for (int b = 0; b < n; b++) {
    double v = b ? q[b - 1] : 0;
    for (int stream = 0; stream < 2 && (parts & STALL_QUEUES); stream++)
      for (; next[stream] < md->nfifo[stream] && issue_op(md, stream, md->fifo[stream][next[stream]]) == b; next[stream]++) {
        int t = md->fifo[stream][next[stream]];
        if (dec[t] != DEC_OFFLOAD) continue;
        double start = fmax(busy[stream], issue_time(md, stream, b) + v);
        if (stream) start = fmax(start, finish[t]);
        finish[stream * nt + t] = busy[stream] = start + md->copy_us[stream][t];
      }
    for (int stream = 0; stream < 2 && (parts & STALL_QUEUES); stream++)
      for (int k = off.due_first[stream][b]; k < off.due_first[stream][b + 1]; k++)
        v = fmax(v, finish[stream * nt + off.due[stream][k]] - due_time(md, stream, b));
    if (!(parts & STALL_ROWS)) {
      q[b] = x[md->col_q[b]] = v;
      continue;
    }
    for (int i = md->win_first[b]; i < md->win_first[b + 1]; i++) {
      const Window *w = &md->win[md->win_by_b[i]];
      double base = w->a ? q[w->a - 1] : 0;
      if (base + x[w->col] - w->cap > v) v = base + x[w->col] - w->cap;
    }
    for (int k = off.due_first[1][b]; k < off.due_first[1][b + 1]; k++) {
      int t = off.due[1][k], p = g->tensors[t].producer;
      v = fmax(v, (p ? q[p - 1] : 0) + round_trip_late(md, t));
    }
    for (int i = md->frow_first[b]; i < md->frow_first[b + 1]; i++) {
      const Fifo *f = &md->frow[md->frow_by_b[i]];
      const int *fq = md->fifo[f->stream];
      if (dec[fq[f->it]] != DEC_OFFLOAD) continue;
      int a = f->stream ? md->issue_at[fq[f->i0]] : g->tensors[fq[f->i0]].producer;
      double sum = 0;
      for (int k = off.queued_first[f->stream][f->i0]; k < off.queued_first[f->stream][f->it + 1]; k++)
        sum += off.queued_us[f->stream][k];
      double base = a ? q[a - 1] : 0;
      if (base + sum - f->cap > v) v = base + sum - f->cap;
    }
    q[b] = v;
    x[md->col_q[b]] = v;
  }
  free(q), free(finish), offloaded_free(&off);
}

/* Y rows: each forward op is re-run at the first op whose prelude needs one
 * of its dead outputs, directly or through another re-run (schedule.c). */
static void build_reruns(Ilp *md) {
  const Graph *g = md->g;
  for (int q = 0; q < g->nops; q++)
    for (int c = 0; c < md->cand_n[q]; c++) {
      bool last = c == md->cand_n[q] - 1;
      md->ycol[md->cand_first[q] + c] = new_col(md, 0, 1, last && !md->min_memory ? op_us(md, q) : 0, false);
    }
  for (int q = 0; q < g->nops; q++) {
    const Op *o = &g->ops[q];
    for (int c = 0; c < md->cand_n[q]; c++) {
      int k = md->cand_t[md->cand_first[q] + c];
      Lin y = var(md, md->ycol[md->cand_first[q] + c]);
      Lin prev = ylt(md, q, k);
      Row *up = &md->up; /* y - prev - triggers <= 0: a trigger per output and consumer */
      up->n = 0, up->k = 0;
      row_addl(md, up, &y, 1);
      row_addl(md, up, &prev, -1);
      if (c > 0) {
        Lin mono = y;
        lin_addl(md, &mono, &prev, -1);
        row_lin(md, 0, HUGE_VAL, &mono);
      }
      for (int kk = 0; kk < o->noutputs; kk++) {
        int v = o->outputs[kk];
        if (!regen(md, v)) continue;
        const Tensor *tv = &g->tensors[v];
        if (tv->stashed && decided(md, v) && tv->first_bwd_read == k) {
          Lin own = y;
          lin_add(md, &own, md->colR[v], -1);
          row_lin(md, 0, HUGE_VAL, &own);
          row_addl(md, up, &(Lin){.n = 1, .col = {md->colR[v]}, .c = {1}}, -1);
        }
        for (int cc = 0; cc < md->cons_n[v]; cc++) {
          int q2 = md->cons[md->cons_first[v] + cc];
          if (cand_le(md, q2, k) < 0 || md->cand_t[md->cand_first[q2] + cand_le(md, q2, k)] != k) continue;
          if (tv->stashed && (!decided(md, v) || k > tv->first_bwd_read)) continue;
                    Lin e2 = eq(md, q2, k);
          if (!tv->stashed) {
            row_addl(md, up, &e2, -1);
          } else {
            int w = new_col(md, 0, 1, 0, false);
            Lin a = var(md, w);
            lin_addl(md, &a, &e2, -1);
            row_lin(md, -HUGE_VAL, 0, &a);
            Lin b = var(md, w);
            lin_add(md, &b, md->colR[v], -1);
            row_lin(md, -HUGE_VAL, 0, &b);
            row_addl(md, up, &(Lin){.n = 1, .col = {w}, .c = {1}}, -1);
            if (!push((void **)&md->prod, md->nprod, &md->cap_prod, sizeof(Prod)) ||
                !push((void **)&md->fac, md->nfac + 2, &md->cap_fac, sizeof(Lin))) {
              md->failed = true;
              return;
            }
            md->prod[md->nprod++] = (Prod){w, 2, md->nfac};
            md->fac[md->nfac++] = e2;
            md->fac[md->nfac++] = var(md, md->colR[v]);
          }
        }
      }
      add_row(md, -HUGE_VAL, 0, up->n, up->col, up->c, up->k);
    }
  }
  /* A consumer re-run pulls q in with it. Outside q's (truncated) candidate
   * set this row, with the upper rows, forbids the decisions instead. */
  for (int q = 0; q < g->nops; q++) {
    const Op *o = &g->ops[q];
    if (o->phase != PHASE_FORWARD) continue;
    for (int kk = 0; kk < o->noutputs; kk++) {
      int v = o->outputs[kk];
      if (!regen(md, v)) continue;
      const Tensor *tv = &g->tensors[v];
      if (tv->stashed && !decided(md, v)) continue;
      for (int cc = 0; cc < md->cons_n[v]; cc++) {
        int q2 = md->cons[md->cons_first[v] + cc];
        for (int c2 = 0; c2 < md->cand_n[q2]; c2++) {
          int k = md->cand_t[md->cand_first[q2] + c2];
          if (tv->stashed && k > tv->first_bwd_read) break;
          Lin low = yle(md, q, k); /* y >= y2 (+ R - 1) */
          lin_add(md, &low, md->ycol[md->cand_first[q2] + c2], -1);
          if (tv->stashed) lin_add(md, &low, md->colR[v], -1);
          row_lin(md, tv->stashed ? -1 : 0, HUGE_VAL, &low);
        }
      }
    }
  }
}

/* ------------------------------------------------------------ memory */

/* The latest position at which one of t's forward consumers can re-run
 * (and so read t), -1 if none can. */
static int last_consumer_rerun(const Ilp *md, int t) {
  int last = -1;
  for (int c = 0; c < md->cons_n[t]; c++) {
    int q2 = md->cons[md->cons_first[t] + c];
    if (md->cand_n[q2]) {
      int pq = pos_of_rerun(md, md->cand_t[md->cand_first[q2] + md->cand_n[q2] - 1], q2);
      if (pq > last) last = pq;
    }
  }
  return last;
}

/* Live from position p0 on while one of t's forward consumers still has to
 * re-run (a re-run reads t, so it extends t's residency). */
static void extension(Ilp *md, int t, int p0, const Lin *alive, int64_t bytes) {
  int last = last_consumer_rerun(md, t);
  Run *run = &md->run;
  Sig *sg = &md->sig;
  run->open = false;
  for (int p = p0; p <= last; p++) {
    sg->ng = 0;
    for (int c = 0; c < md->cons_n[t]; c++) {
      Lin a = at_or_after(md, md->cons[md->cons_first[t] + c], p);
      Lin f[2] = {*alive, a};
      sig_add(md, sg, f, 2);
    }
    run_step(md, run, sg, p, bytes);
  }
  run_flush(md, run, last, bytes);
}

static void build_memory(Ilp *md) {
  const Graph *g = md->g;
  int n = g->nops, last_pos = md->npos - 1;
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *x = &g->tensors[t];
    Lin one = lin_const(1);
    if (graph_is_resident(x)) {
      term(md, 0, last_pos, &one, x->bytes);
      continue;
    }
    if (x->producer < 0) continue;
    int p = x->producer, lr = x->last_read > p ? x->last_read : p;
    int p0 = md->grp_comp[p];
    if (x->is_output) {
      term(md, p0, last_pos, &one, x->bytes);
      continue;
    }
    if (!regen(md, t)) {
      term(md, p0, md->grp_comp[lr], &one, x->bytes);
      continue;
    }
    if (!x->stashed) { /* an intermediate: forward residency, then re-runs */
      term(md, p0, md->grp_comp[lr], &one, x->bytes);
    } else {
      int lfr = x->last_fwd_read > p ? x->last_fwd_read : p;
      Lin k = var(md, md->colK[t]), r = var(md, md->colR[t]), o = var(md, md->colO[t]);
      term(md, p0, md->grp_comp[lr], &k, x->bytes);
      term(md, p0, md->grp_comp[lfr], &r, x->bytes);
      term(md, p0, md->grp_comp[plan_offload_wait_op(g, md->d, t)], &o, x->bytes);
      /* A kept tensor stays while a later re-run still reads it. */
      if (lr + 1 < n) extension(md, t, md->grp_first[lr + 1], &k, x->bytes);
      /* The prefetched copy: from the issue point of its first need. */
      int f = x->first_bwd_read, w = plan_offload_wait_op(g, md->d, t);
      int issue_f = plan_prefetch_issue_op(g, md->d, t, f);
      term(md, md->grp_first[issue_f], md->grp_comp[lr], &o, x->bytes);
      if (lr + 1 < n) extension(md, t, md->grp_first[lr + 1], &o, x->bytes);
      /* Earlier when a consumer's re-run needs it first. */
      int minc = f;
      for (int c = 0; c < md->cons_n[t]; c++) {
        int q2 = md->cons[md->cons_first[t] + c];
        if (md->cand_n[q2] && md->cand_t[md->cand_first[q2]] < minc) minc = md->cand_t[md->cand_first[q2]];
      }
      Run *run = &md->run;
      Sig *sg = &md->sig;
      run->open = false;
      int m = minc - 1;
      for (int j = w + 1; j < issue_f; j++) {
        while (m + 1 <= f - 1 && plan_prefetch_issue_op(g, md->d, t, m + 1) <= j) m++;
        sg->ng = 0;
        for (int c = 0; m >= minc && c < md->cons_n[t]; c++) {
          Lin fct[2] = {o, yle(md, md->cons[md->cons_first[t] + c], m)};
          sig_add(md, sg, fct, 2);
        }
        for (int pp = md->grp_first[j]; pp <= md->grp_comp[j]; pp++) run_step(md, run, sg, pp, x->bytes);
      }
      if (issue_f > w + 1) run_flush(md, run, md->grp_comp[issue_f - 1], x->bytes);
    }
  }
  /* Workspace of every op at its own step. */
  for (int j = 0; j < n; j++) {
    Lin one = lin_const(1);
    if (g->ops[j].workspace > 0) term(md, md->grp_comp[j], md->grp_comp[j], &one, g->ops[j].workspace);
  }
  /* Re-runs: the write step, then the regenerated residencies. */
  for (int q = 0; q < n; q++) {
    if (!md->cand_n[q]) continue;
    const Op *o = &g->ops[q];
    int64_t written = o->workspace;
    for (int k = 0; k < o->noutputs; k++)
      if (!graph_is_resident(&g->tensors[o->outputs[k]])) written += g->tensors[o->outputs[k]].bytes;
    int nregen = 0;
    for (int k = 0; k < o->noutputs; k++) nregen += regen(md, o->outputs[k]);
    for (int c = 0; c < md->cand_n[q]; c++) {
      int j = md->cand_t[md->cand_first[q] + c], pq = pos_of_rerun(md, j, q);
      Lin e = eq(md, q, j);
      term(md, pq, pq, &e, written);
    }
    int first = pos_of_rerun(md, md->cand_t[md->cand_first[q]], q);
    for (int k = 0; k < o->noutputs; k++) {
      int v = o->outputs[k];
      if (!regen(md, v)) continue;
      const Tensor *tv = &g->tensors[v];
      Lin rv = tv->stashed ? var(md, md->colR[v]) : lin_const(1);
      int lr = tv->last_read;
      if (tv->stashed) {
        int f = tv->first_bwd_read;
        /* Pulled early by a consumer's re-run: live once started. */
        Run *run = &md->run;
        Sig *sg = &md->sig;
        run->open = false;
        for (int p = first + 1; p < md->grp_comp[f]; p++) {
          sg->ng = 0;
          if (md->pos_q[p] != q) {
            Lin fct[2] = {started_before(md, q, p), rv};
            sig_add(md, sg, fct, nregen == 1 ? 1 : 2);
          }
          run_step(md, run, sg, p, tv->bytes);
        }
        run_flush(md, run, md->grp_comp[f] - 1, tv->bytes);
        term(md, md->grp_comp[f], md->grp_comp[lr], &rv, tv->bytes);
      }
      /* After its last graph reader (intermediates: always), only while a
       * consumer's re-run still reads it. */
      int from = tv->stashed ? md->grp_first[lr + 1 < n ? lr + 1 : lr] : first + 1;
      if (tv->stashed && lr + 1 >= n) continue;
      int lastp = last_consumer_rerun(md, v);
      Run *run = &md->run;
      Sig *sg = &md->sig;
      run->open = false;
      for (int p = from; p <= lastp; p++) {
        sg->ng = 0;
        Lin st = started_before(md, q, p);
        for (int cc = 0; md->pos_q[p] != q && cc < md->cons_n[v]; cc++) {
          Lin f3[3] = {st, at_or_after(md, md->cons[md->cons_first[v] + cc], p), rv};
          sig_add(md, sg, f3, 3);
        }
        run_step(md, run, sg, p, tv->bytes);
      }
      run_flush(md, run, lastp, tv->bytes);
    }
  }
}

static int cmp_event(const void *a, const void *b) {
  const Event *x = a, *y = b;
  if (x->pos != y->pos) return x->pos - y->pos;
  return x->col - y->col;
}

/* M[p] = M[p-1] + (what starts at p) - (what ended at p-1). */
static void build_rows(Ilp *md, int64_t budget) {
  qsort(md->ev, (size_t)md->nev, sizeof(Event), cmp_event);
  md->mcol = util_xcalloc((size_t)md->npos + 1, sizeof(int));
  int *cols = util_xcalloc((size_t)md->nev + 2, sizeof(int));
  double *vals = util_xcalloc((size_t)md->nev + 2, sizeof(double));
  if (!md->mcol || !cols || !vals) {
    md->failed = true;
    free(cols), free(vals);
    return;
  }
  md->peak_col = md->min_memory ? new_col(md, 0, HUGE_VAL, 1, false) : -1;
  int e = 0;
  for (int p = 0; p < md->npos; p++) {
    md->mcol[p] = new_col(md, -HUGE_VAL, md->min_memory ? HUGE_VAL : (double)budget / ILP_UNIT, 0, false);
    int n = 0;
    double cst = 0;
    cols[n] = md->mcol[p], vals[n++] = 1;
    if (p) cols[n] = md->mcol[p - 1], vals[n++] = -1;
    for (; e < md->nev && md->ev[e].pos == p; e++) {
      if (md->ev[e].col < 0) {
        cst += (double)md->ev[e].bytes;
        continue;
      }
      if (n && cols[n - 1] == md->ev[e].col) vals[n - 1] -= (double)md->ev[e].bytes;
      else cols[n] = md->ev[e].col, vals[n++] = -(double)md->ev[e].bytes;
    }
    /* The rows count MiB: bytes would leave GLPK coefficients of 1e10. */
    for (int i = p ? 2 : 1; i < n; i++) vals[i] /= ILP_UNIT;
    cst /= ILP_UNIT;
    if (milp_add_row(&md->m, cst, cst, n, cols, vals) < 0) md->failed = true;
    if (md->min_memory) {
      int c2[2] = {md->mcol[p], md->peak_col};
      double v2[2] = {1, -1};
      if (milp_add_row(&md->m, -HUGE_VAL, 0, 2, c2, v2) < 0) md->failed = true;
    }
  }
  free(cols);
  free(vals);
}

static void ilp_free(Ilp *md) {
  milp_model_free(&md->m);
  free(md->colK), free(md->colR), free(md->colO);
  free(md->cand_first), free(md->cand_n), free(md->cand_t), free(md->ycol);
  free(md->pos_op), free(md->pos_q), free(md->grp_first), free(md->grp_comp);
  free(md->cons_first), free(md->cons_n), free(md->cons);
  free(md->ev), free(md->prod), free(md->fac), free(md->mcol);
  free(md->fac_k), free(md->fac_c), free(md->fac_first), free(md->fac_col), free(md->obj_cols);
  free(md->col_q), free(md->t_end), free(md->wait_at), free(md->issue_at), free(md->copy_us[0]), free(md->copy_us[1]);
  free(md->win), free(md->win_first), free(md->win_by_b), free(md->fifo[0]), free(md->fifo[1]), free(md->frow);
  free(md->frow_first), free(md->frow_by_b);
  free(md->due_first[0]), free(md->due_first[1]), free(md->due_list[0]), free(md->due_list[1]);
  sig_free(&md->sig), sig_free(&md->run.sig), free(md->ors), free(md->up.col), free(md->up.c);
}

static void pack_for_eval(Ilp *md) {
  int terms = 0;
  for (int i = 0; i < md->nfac; i++) terms += md->fac[i].n;
  md->fac_k = util_xcalloc((size_t)md->nfac + 1, sizeof(double));
  md->fac_first = util_xcalloc((size_t)md->nfac + 1, sizeof(int));
  md->fac_c = util_xcalloc((size_t)terms + 1, sizeof(double));
  md->fac_col = util_xcalloc((size_t)terms + 1, sizeof(int));
  if (!md->fac_k || !md->fac_first || !md->fac_c || !md->fac_col) {
    md->failed = true;
    return;
  }
  int j = 0;
  for (int i = 0; i < md->nfac; i++) {
    const Lin *l = &md->fac[i];
    md->fac_k[i] = l->k;
    md->fac_first[i] = j;
    for (int k = 0; k < l->n; k++, j++) md->fac_c[j] = l->c[k], md->fac_col[j] = l->col[k];
  }
  md->fac_first[md->nfac] = j;
  md->obj_cols = util_xcalloc((size_t)md->m.ncols + 1, sizeof(int));
  if (!md->obj_cols) {
    md->failed = true;
    return;
  }
  for (int c = 0; c < md->m.ncols; c++)
    if (md->m.obj[c] != 0) md->obj_cols[md->nobj_cols++] = c;
}

static int ilp_build(Ilp *md, const Graph *g, const Device *d, int64_t budget, bool min_memory, int depth, Err *e) {
  memset(md, 0, sizeof *md);
  md->depth = depth;
  md->g = g;
  md->d = d;
  md->min_memory = min_memory;
  md->host_limit = INT64_MAX;
  int n = g->ntensors;
  md->colK = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colR = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colO = util_xcalloc((size_t)n + 1, sizeof(int));

  if (!md->colK || !md->colR || !md->colO || build_consumers(md) || build_candidates(md) ||
      build_positions(md))
    goto oom;
  build_decisions(md);
  build_stalls(md);
  build_reruns(md);
  build_memory(md);
  build_rows(md, budget);
  pack_for_eval(md);
  if (md->failed || md->m.failed) goto oom;
  if (!min_memory)
    for (int i = 0; i < g->nops; i++) md->m.obj_offset += op_us(md, i);
  return 0;
oom:
  ilp_free(md);
  return err_set(e, "%s: out of memory while building the ILP", g->path);
}

/* ------------------------------------------------------------ evaluation */

/* Every column's value for one decision vector, and the peak of the rows.
 * -1 when the decisions re-run an op outside its candidates (cannot happen
 * for the full candidate sets) or are incomplete. */
static int ilp_eval(const Ilp *md, const Decision *dec, double *x, int64_t *peak) {
  const Graph *g = md->g;
  int *rerun = util_xcalloc((size_t)g->nops + 1, sizeof(int)), *need = util_xcalloc((size_t)g->ntensors + 1, sizeof(int));
  int rc = -1;
  if (!rerun || !need || plan_family_positions(g, dec, rerun, need)) goto out;
  memset(x, 0, (size_t)md->m.ncols * sizeof(double));
  for (int t = 0; t < g->ntensors; t++) {
    if (md->colK[t] < 0) continue;
    x[md->colK[t]] = dec[t] == DEC_KEEP;
    x[md->colR[t]] = dec[t] == DEC_RECOMPUTE;
    x[md->colO[t]] = dec[t] == DEC_OFFLOAD;
  }
  for (int q = 0; q < g->nops; q++) {
    if (rerun[q] >= 0) {
      int c = cand_le(md, q, rerun[q]);
      if (c < 0 || md->cand_t[md->cand_first[q] + c] != rerun[q]) goto out;
    }
    for (int c = 0; c < md->cand_n[q]; c++)
      x[md->ycol[md->cand_first[q] + c]] = rerun[q] >= 0 && rerun[q] <= md->cand_t[md->cand_first[q] + c];
  }
  eval_stalls(md, dec, STALL_ROWS | STALL_QUEUES, x);
  /* Products in creation order: factors only use earlier columns. Every
   * factor is 0 or 1 here, so an AND ends at its first 0 and an OR at its
   * first 1 (the descent's evaluations are most of a solve's time). */
  for (int i = 0; i < md->nprod; i++) {
    const Prod *pr = &md->prod[i];
    bool and = pr->nf > 0, v = and;
    for (int f = pr->first, end = f + (and ? pr->nf : -pr->nf); f < end && v == and; f++) {
      double sum = md->fac_k[f];
      for (int j = md->fac_first[f]; j < md->fac_first[f + 1]; j++) sum += md->fac_c[j] * x[md->fac_col[j]];
      v = sum > 0.5;
    }
    x[pr->col] = v;
  }
  int64_t live = 0, best = INT64_MIN;
  int e = 0;
  for (int p = 0; p < md->npos; p++) {
    for (; e < md->nev && md->ev[e].pos == p; e++)
      if (md->ev[e].col < 0 || x[md->ev[e].col] > 0.5) live += md->ev[e].bytes;
    x[md->mcol[p]] = (double)live / ILP_UNIT;
    if (live > best) best = live;
  }
  if (md->peak_col >= 0) x[md->peak_col] = (double)best / ILP_UNIT;
  *peak = best;
  rc = 0;
out:
  free(rerun);
  free(need);
  return rc;
}

static void decisions_from_x(const Ilp *md, const double *x, Decision *dec) {
  const Graph *g = md->g;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (md->colK[t] < 0) {
      dec[t] = DEC_KEEP;
      continue;
    }
    double k = x[md->colK[t]], r = x[md->colR[t]], o = x[md->colO[t]];
    dec[t] = k >= r && k >= o ? DEC_KEEP : r >= o ? DEC_RECOMPUTE : DEC_OFFLOAD;
  }
}

/* The point's fractions carried along the stashed (production) order,
 * bytes-weighted, so that consecutive half-offloads become every other
 * tensor offloaded and a window's copy bytes stay what the point spends
 * there, within a tensor. */
static void decisions_diffused(const Ilp *md, const double *x, Decision *dec) {
  const Graph *g = md->g;
  double carry[3] = {0, 0, 0};
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (md->colK[t] < 0) {
      dec[t] = DEC_KEEP;
      continue;
    }
    double bytes = fmax(1, (double)g->tensors[t].bytes), v[3] = {x[md->colK[t]], x[md->colR[t]], x[md->colO[t]]};
    int pick = 0;
    double pick_score = -HUGE_VAL;
    for (int d = 0; d < 3; d++) {
      double score = v[d] + carry[d] / bytes;
      if (v[d] > 1e-6 && score > pick_score + 1e-9) pick = d, pick_score = score;
    }
    for (int d = 0; d < 3; d++) carry[d] += (v[d] - (d == pick)) * bytes;
    dec[t] = (Decision)(DEC_KEEP + pick);
  }
}

static double objective_of(const Ilp *md, const double *x) {
  double v = md->m.obj_offset;
  for (int i = 0; i < md->nobj_cols; i++) v += md->m.obj[md->obj_cols[i]] * x[md->obj_cols[i]];
  return v;
}

/* ------------------------------------------------------------ public */

/* The model without a memory limit, evaluated at dec into *x: 0, or -1
 * with e set and nothing left to free. */
static int eval_unlimited(Ilp *md, const Graph *g, const Device *d, const Decision *dec, double **x, int64_t *peak, Err *e) {
  if (ilp_build(md, g, d, INT64_MAX / 4, false, 0, e)) return -1;
  *x = util_xcalloc((size_t)md->m.ncols + 1, sizeof(double));
  int rc = !*x ? err_set(e, "%s: out of memory", g->path)
               : ilp_eval(md, dec, *x, peak) ? err_set(e, "%s: decisions outside the ILP's model", g->path) : 0;
  if (rc) free(*x), ilp_free(md);
  return rc;
}

int plan_ilp_stalls(const Graph *g, const Device *d, const Decision *dec, double *rows_us, double *queues_us,
                    double *lp_us, Err *e) {
  Ilp md;
  double *x;
  int64_t peak;
  if (eval_unlimited(&md, g, d, dec, &x, &peak, e)) return -1;
  int last = md.col_q[g->nops - 1], rc = 0;
  eval_stalls(&md, dec, STALL_ROWS, x);
  *rows_us = x[last];
  eval_stalls(&md, dec, STALL_QUEUES, x);
  *queues_us = x[last];
  if (lp_us) {
    /* The decisions and re-runs fixed, the LP's least Q[last]: the rows'
     * least stalls found by the simplex rather than by the forward pass. */
    for (int t = 0; t < g->ntensors; t++) {
      if (md.colK[t] < 0) continue;
      int cols[3] = {md.colK[t], md.colR[t], md.colO[t]};
      for (int k = 0; k < 3; k++) md.m.col_lb[cols[k]] = md.m.col_ub[cols[k]] = x[cols[k]];
    }
    for (int i = 0; i < md.ncand; i++) md.m.col_lb[md.ycol[i]] = md.m.col_ub[md.ycol[i]] = x[md.ycol[i]];
    MilpOptions mo = {.solver = "glpk", .lp_only = true, .quiet = true};
    MilpResult r = {0};
    rc = milp_solve(&md.m, &mo, &r, e);
    if (rc == 0 && isnan(r.lp_x[md.m.ncols])) rc = err_set(e, "%s: the stall LP has no optimum", g->path);
    if (rc == 0) *lp_us = r.lp_x[last];
    milp_result_free(&r);
  }
  free(x);
  ilp_free(&md);
  return rc;
}

int64_t plan_ilp_predicted_peak(const Graph *g, const Device *d, const Decision *dec, Err *e) {
  Ilp md;
  double *x;
  int64_t peak;
  if (eval_unlimited(&md, g, d, dec, &x, &peak, e)) return -1;
  if (milp_violation(&md.m, x) > 1e-9)
    err_set(e, "%s: the ILP's rows reject the decisions' own schedule (violation %g)", g->path, milp_violation(&md.m, x)), peak = -1;
  free(x);
  ilp_free(&md);
  return peak;
}

typedef struct Candidate {
  Decision *dec;
  double objective;
  int64_t peak;
  bool ok;
} Candidate;

static bool is_excluded(const Ilp *md, const Decision *dec) {
  const Graph *g = md->g;
  for (int k = 0; k < md->nexcluded; k++) {
    int i = 0;
    while (i < g->nstashed && (md->colK[g->stashed[i]] < 0 || md->excluded[k][g->stashed[i]] == dec[g->stashed[i]])) i++;
    if (i == g->nstashed) return true;
  }
  return false;
}

/* Every excluded vector: sum over decided tensors of its decision's column
 * <= their count - 1 (at least one differs). */
static void add_exclusions(Ilp *md) {
  const Graph *g = md->g;
  int *cols = util_xcalloc((size_t)g->nstashed + 1, sizeof(int));
  double *vals = util_xcalloc((size_t)g->nstashed + 1, sizeof(double));
  for (int k = 0; cols && vals && k < md->nexcluded; k++) {
    int n = 0;
    for (int i = 0; i < g->nstashed; i++) {
      int t = g->stashed[i];
      if (md->colK[t] < 0) continue;
      Decision dv = md->excluded[k][t];
      cols[n] = dv == DEC_KEEP ? md->colK[t] : dv == DEC_RECOMPUTE ? md->colR[t] : md->colO[t];
      vals[n++] = 1;
    }
    if (milp_add_row(&md->m, -HUGE_VAL, n - 1, n, cols, vals) < 0) md->failed = true;
  }
  if (!cols || !vals) md->failed = true;
  free(cols), free(vals);
}

static bool host_fits(const Ilp *md, const Decision *dec) { return plan_host_bound(md->g, dec) <= md->host_limit; }

/* A vector the model may return whatever its peak: not excluded, and its
 * offloads within host memory. */
static bool admissible(const Ilp *md, const Decision *dec) { return !is_excluded(md, dec) && host_fits(md, dec); }

/* Keeps the better of best and an evaluated decision vector (by model
 * objective among the admissible ones within the memory limit). */
static void offer(const Ilp *md, Candidate *best, const Decision *dec, int64_t peak, double obj, int64_t limit) {
  if (peak > limit || (best->ok && obj >= best->objective - 1e-9) || !admissible(md, dec)) return;
  memcpy(best->dec, dec, (size_t)md->g->ntensors * sizeof(Decision));
  best->objective = obj;
  best->peak = peak;
  best->ok = true;
}

static void consider(const Ilp *md, Candidate *best, const Decision *dec, int64_t limit, double *x) {
  int64_t peak;
  if (ilp_eval(md, dec, x, &peak) == 0) offer(md, best, dec, peak, objective_of(md, x), limit);
}

/* One decision change, scored around the vector it was tried on. */
typedef struct Move {
  int t;
  Decision to;
  double delta; /* objective change, us */
  int64_t peak;
  double rank; /* sort key, ascending */
} Move;

static int cmp_move(const void *a, const void *b) {
  const Move *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->t != y->t) return x->t - y->t;
  return (int)x->to - (int)y->to;
}

#define ILP_GAINERS 16 /* gainers that fail before an exchange gives up */
#define ILP_PAYERS 12  /* payers tried per step, the cheapest per byte */
#define ILP_STEPS 12   /* payers taken per gainer, at most */

/* Every single change from best: gainers (faster but over the limit),
 * sorted by their gain; payers (from keep, no faster), sorted by cost per
 * byte. Both arrays hold 2 * nstashed. */
static void score_moves(const Ilp *md, const Candidate *best, int64_t limit, double *x, Decision *cur, long *evals,
                        Move *gain, int *ngain, Move *pay, int *npay) {
  const Graph *g = md->g;
  *ngain = *npay = 0;
  memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
  for (int i = 0; i < g->nstashed && *evals > 0; i++) {
    int t = g->stashed[i];
    if (md->colK[t] < 0) continue;
    Decision was = cur[t];
    for (int dd = DEC_KEEP; dd <= DEC_OFFLOAD; dd++) {
      if (dd == (int)was || (dd == DEC_OFFLOAD && !offload_allowed(md, t))) continue;
      cur[t] = (Decision)dd;
      int64_t pk;
      (*evals)--;
      if (ilp_eval(md, cur, x, &pk)) continue;
      Move mv = {.t = t, .to = (Decision)dd, .delta = objective_of(md, x) - best->objective, .peak = pk};
      if (mv.delta < -1e-9 && pk > limit) mv.rank = mv.delta, gain[(*ngain)++] = mv;
      else if (was == DEC_KEEP && mv.delta >= -1e-9) mv.rank = mv.delta / fmax(1, (double)g->tensors[t].bytes), pay[(*npay)++] = mv;
    }
    cur[t] = was;
  }
  qsort(gain, (size_t)*ngain, sizeof(Move), cmp_move);
  qsort(pay, (size_t)*npay, sizeof(Move), cmp_move);
}

/* Pays for the gainer, applied to cur at (peak, obj): each step takes, among
 * the cheapest payers per byte (half of them re-runs, half offloads: small
 * offloads are free alone and crowd out every re-run), the one that lowers
 * the peak at the least cost per byte here (offloads next to each other
 * share a copy queue, so their single costs do not add), until it fits or
 * the gain is spent. */
static void pay_for(const Ilp *md, Decision *cur, const Move *gainer, const Move *pay, int npay, int64_t limit, double base,
                    double *x, long *evals, int64_t *peak, double *obj) {
  for (int step = 0; step < ILP_STEPS && *peak > limit && *obj < base - 1e-9 && *evals > 0; step++) {
    int pick = -1;
    double pick_score = HUGE_VAL, pick_obj = 0;
    int64_t pick_peak = 0;
    int tried[3] = {0, 0, 0};
    for (int b = 0; b < npay && tried[DEC_RECOMPUTE] + tried[DEC_OFFLOAD] < ILP_PAYERS && *evals > 0; b++) {
      int t = pay[b].t;
      if (t == gainer->t || cur[t] != DEC_KEEP || tried[pay[b].to] == ILP_PAYERS / 2) continue;
      cur[t] = pay[b].to;
      if (!host_fits(md, cur)) {
        cur[t] = DEC_KEEP;
        continue;
      }
      tried[pay[b].to]++;
      int64_t pk;
      (*evals)--;
      if (ilp_eval(md, cur, x, &pk) == 0 && pk < *peak) {
        double o = objective_of(md, x), score = (o - *obj) / (double)(*peak - pk);
        if (score < pick_score) pick = b, pick_score = score, pick_obj = o, pick_peak = pk;
      }
      cur[t] = DEC_KEEP;
    }
    if (pick < 0) return;
    cur[pay[pick].t] = pay[pick].to;
    *peak = pick_peak, *obj = pick_obj;
  }
}

/* Exchanges at a local optimum of single changes: a gainer (a re-run or an
 * offload taken back, faster but over the memory limit) paid for by
 * payers that free bytes. Single changes cannot move an offload to another
 * layer or trade one costly re-run for two cheap ones; this can. Measured
 * on llama3-8b at the midpoint: the LP's rounded point polished by single
 * changes ends 1.7% above the bound, with exchanges 0.25%. Returns true
 * when best improved. */
static bool exchange(const Ilp *md, Candidate *best, int64_t limit, double *x, long *evals, double deadline) {
  const Graph *g = md->g;
  Decision *cur = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Move *gain = util_xcalloc((size_t)g->nstashed * 2 + 1, sizeof(Move)), *pay = util_xcalloc((size_t)g->nstashed * 2 + 1, sizeof(Move));
  bool improved = false;
  int ngain, npay;
  if (cur && gain && pay) score_moves(md, best, limit, x, cur, evals, gain, &ngain, pay, &npay);
  /* After an accepted exchange the scores are stale but their order
   * still guides: each gainer is evaluated again where it is tried. */
  for (int a = 0, failed = 0; cur && gain && pay && a < ngain && failed < ILP_GAINERS && *evals > 0 && util_now() < deadline;
       a++) {
    double base = best->objective;
    if (cur[gain[a].t] == gain[a].to) continue;
    cur[gain[a].t] = gain[a].to;
    int64_t peak;
    (*evals)--;
    if (ilp_eval(md, cur, x, &peak) == 0) {
      double obj = objective_of(md, x);
      pay_for(md, cur, &gain[a], pay, npay, limit, base, x, evals, &peak, &obj);
      if (peak <= limit && obj < base - 1e-9) consider(md, best, cur, limit, x);
    }
    if (best->objective < base - 1e-9) improved = true;
    else failed++;
    memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
  }
  free(cur), free(gain), free(pay);
  return improved;
}

/* First-improvement descent over single decision changes, judged by the
 * exact evaluation; with exchanges at its local optima when asked: a strong
 * incumbent for branch and bound, which GLPK's own heuristics rarely find
 * on these models. */
static void improve(const Ilp *md, Candidate *best, int64_t limit, double *x, double deadline, long evals, bool exchanges) {
  const Graph *g = md->g;
  if (!best->ok) return;
  Decision *cur = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  if (!cur) return;
  do {
    memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
    for (bool moved = true; moved && evals > 0 && util_now() < deadline;) {
      moved = false;
      for (int i = 0; i < g->nstashed && evals > 0 && util_now() < deadline; i++, evals -= 2) {
        int t = g->stashed[i];
        if (md->colK[t] < 0) continue;
        Decision was = cur[t];
        for (int dd = DEC_KEEP; dd <= DEC_OFFLOAD; dd++) {
          if (dd == (int)was) continue;
          cur[t] = (Decision)dd;
          double before = best->objective;
          consider(md, best, cur, limit, x);
          if (best->objective < before - 1e-9) {
            was = cur[t];
            moved = true;
          }
        }
        cur[t] = was;
        memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
      }
    }
  } while (exchanges && evals > 0 && util_now() < deadline && exchange(md, best, limit, x, &evals, deadline));
  free(cur);
}

/* Every limit of a solve is counted work (evaluations, simplex iterations,
 * nodes), so a plan is a function of its inputs and options on an idle or a
 * busy machine. --time-limit adds a deadline (CLOCK_MONOTONIC seconds) over
 * the whole command that cuts the counted work short; without it the
 * deadline is HUGE_VAL and no clock decides anything. */
static double deadline_of(const PlanOptions *o, double start) {
  return o->time_limit <= 0 ? HUGE_VAL : o->deadline > 0 ? o->deadline : start + o->time_limit;
}

static bool out_of_time(double deadline) { return deadline < HUGE_VAL && util_now() >= deadline; }

static const char *const baselines[] = {"keep-all", "checkpoint-layers", "sqrt-n", "offload-all", "knapsack"};

/* One solve at a memory limit: the MILP warm-started from the best
 * baseline, the LP relaxation rounded if the MILP found nothing. */
/* Starting points: every baseline in the strategy table, and everything
 * offloaded (reaches memory no baseline may, needs no re-run). */
static int starts(const Graph *g, const Device *d, const PlanOptions *o, int64_t limit, Decision **out) {
  int n = 0;
  PlanOptions bo = *o;
  bo.budget_bytes = limit;
  for (size_t b = 0; b < sizeof baselines / sizeof baselines[0] + 1; b++) {
    Decision *dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
    if (!dec) break;
    for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
    bool ok = false;
    if (b < sizeof baselines / sizeof baselines[0]) {
      const PlanStrategy *s = plan_find_strategy(baselines[b]);
      Err ignore;
      SolverInfo bsi = {.name = "none", .status = "not_used"};
      bo.strategy = baselines[b];
      ok = s && s->decide(g, d, &bo, dec, &bsi, &ignore) == 0;
    } else {
      for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = DEC_OFFLOAD;
      ok = true;
    }
    if (ok) out[n++] = dec;
    else free(dec);
  }
  return n;
}

/* Graphs up to this many ops get the full pull closure; larger ones a
 * bounded depth (docs/PLANNING.md, "Scale"). */
#define ILP_FULL_OPS 300
#define ILP_DEPTH 24

/* Starts within the budget and the hook's polished candidates, kept for
 * the final choice by simulation (the model's best may simulate slower, or
 * not fit by arena, where another one does). */
#define ILP_POOL 16
typedef struct Pool {
  Candidate c[ILP_POOL];
  int n;
} Pool;

/* A candidate the pool does not hold yet, while it has room. */
static void pool_add(Pool *pool, const Graph *g, const Candidate *k) {
  if (!pool || pool->n == ILP_POOL) return;
  for (int i = 0; i < pool->n; i++)
    if (!memcmp(pool->c[i].dec, k->dec, (size_t)g->ntensors * sizeof(Decision))) return;
  Candidate *pc = &pool->c[pool->n++];
  memcpy(pc->dec, k->dec, (size_t)g->ntensors * sizeof(Decision));
  pc->peak = k->peak;
  pc->objective = k->objective;
  pc->ok = true;
}

/* Dominated choices, removed before the solve (not in ilp_build, whose
 * rows must accept any decision vector for plan_ilp_predicted_peak): an
 * offload whose prefetch is issued right after its wait frees nothing at
 * any compute step (the original lives through the wait op's step, the
 * copy from the next op's, and a pull's earlier need cannot issue it
 * earlier), re-runs the same ops as keep, and only adds copy time. Keep is
 * never worse, so O is fixed at 0 (on the H100 profile: 2 of gpt2-124m's
 * 162 stashed tensors, 3 of llama3-8b's 357, 11 of unet's 94). */
static void remove_dominated(Ilp *md) {
  const Graph *g = md->g;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i], fbr = g->tensors[t].first_bwd_read;
    if (md->colO[t] >= 0 && plan_prefetch_issue_op(g, md->d, t, fbr) <= plan_offload_wait_op(g, md->d, t) + 1)
      md->m.col_ub[md->colO[t]] = 0;
  }
}

/* Host memory (docs/PLANNING.md, "Host memory"), like remove_dominated
 * added before the solve only: the offloaded tensors' aligned bytes are at
 * most plan_host_limit, one row, and a tensor that alone exceeds it is
 * never offloaded (every tensor, on a unified_memory device). Every vector the search returns is checked against it
 * too (admissible). */
static void limit_host(Ilp *md) {
  const Graph *g = md->g;
  md->host_limit = plan_host_limit(md->d);
  if (md->host_limit == INT64_MAX) return;
  int *cols = util_xcalloc((size_t)g->nstashed + 1, sizeof(int));
  double *vals = util_xcalloc((size_t)g->nstashed + 1, sizeof(double));
  if (!cols || !vals) {
    md->failed = true;
    free(cols), free(vals);
    return;
  }
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (!offload_allowed(md, t)) continue;
    int64_t bytes = plan_host_share(g, t);
    if (bytes > md->host_limit) md->m.col_ub[md->colO[t]] = 0;
    else cols[n] = md->colO[t], vals[n++] = (double)bytes / ILP_UNIT;
  }
  if (n && milp_add_row(&md->m, -HUGE_VAL, (double)md->host_limit / ILP_UNIT, n, cols, vals) < 0) md->failed = true;
  free(cols), free(vals);
}

/* Offloads the model forbids (remove_dominated) become keeps. */
static void keep_forbidden_offloads(const Ilp *md, Decision *dec) {
  for (int i = 0; i < md->g->nstashed; i++) {
    int t = md->g->stashed[i];
    if (dec[t] == DEC_OFFLOAD && md->colO[t] >= 0 && !offload_allowed(md, t)) dec[t] = DEC_KEEP;
  }
}

/* Branch-and-bound nodes without --time-limit: a node re-solves an LP of
 * the model's size, so large models get fewer. */
static long node_limit(const MilpModel *m, double work) {
  double n = work / fmax(1, (double)m->nnz);
  return n >= ILP_NODES ? ILP_NODES : n < 1 ? 1 : (long)n;
}

/* Column upper bounds with the memory rows' limit halfway to the keep-all
 * peak (the keep-all start's, as the model evaluated it; < 0: not known):
 * the looser problem whose basis warm-starts the relaxation's dual simplex
 * (milp.c's relax), for budgets that only plans with offloads meet, where
 * the primal's first phase is long (docs/PLANNING.md 5.3). NULL when
 * keep-all fits. */
static double *loose_bounds(const Ilp *md, int64_t limit, int64_t keep_all) {
  if (keep_all < 0 || keep_all <= limit) return NULL;
  double *ub = util_xcalloc((size_t)md->m.ncols + 1, sizeof(double));
  if (!ub) return NULL;
  memcpy(ub, md->m.col_ub, (size_t)md->m.ncols * sizeof(double));
  for (int p = 0; p < md->npos; p++) ub[md->mcol[p]] = (double)(limit + (keep_all - limit) / 2) / ILP_UNIT;
  return ub;
}

/* The solver's hook for its own solutions and the LP's point (milp.c's
 * polish): the decisions read from x (rounded two ways, each repaired to
 * the limit where over it) are improved by the descent with exchanges,
 * offered to the pool, and written back as the exact columns of the
 * improved decisions. */
typedef struct Polish {
  const Ilp *md;
  int64_t limit;
  double *x; /* scratch, ncols */
  long evals;
  double deadline;
  Candidate c;
  bool exchanged; /* a candidate went through the exchanges */
  Pool *pool;
  Candidate searched; /* what search_x ended at, when ok */
} Polish;

/* Decisions rounded from a point whose offloads overflow host memory: the
 * offloads the point takes least become re-runs (which free the same
 * device bytes) until the rest fit. */
static void fit_host(const Ilp *md, const double *cols, Decision *dec) {
  const Graph *g = md->g;
  while (!host_fits(md, dec)) {
    int pick = -1;
    for (int i = 0; i < g->nstashed; i++) {
      int t = g->stashed[i];
      if (dec[t] == DEC_OFFLOAD && md->colO[t] >= 0 && (pick < 0 || cols[md->colO[t]] < cols[md->colO[pick]])) pick = t;
    }
    if (pick < 0) return;
    dec[pick] = DEC_RECOMPUTE;
  }
}

/* Decisions rounded from a fractional point whose peak is over the limit:
 * the tensors the point keeps least go, one at a time, to the choice it
 * prefers after keep, while that lowers the peak, until it fits. One
 * evaluation per tensor at most, in the point's own order. */
static void repair(const Ilp *md, const double *cols, Decision *dec, int64_t limit, double *x) {
  const Graph *g = md->g;
  fit_host(md, cols, dec);
  int64_t peak;
  if (ilp_eval(md, dec, x, &peak) || peak <= limit) return;
  int *order = util_xcalloc((size_t)g->nstashed + 1, sizeof(int)), n = 0;
  if (!order) return;
  for (int i = 0; i < g->nstashed; i++)
    if (md->colK[g->stashed[i]] >= 0 && dec[g->stashed[i]] == DEC_KEEP) order[n++] = g->stashed[i];
  for (int i = 1; i < n; i++) /* insertion sort by the point's K, ties by tensor: deterministic */
    for (int j = i; j > 0; j--) {
      int a = order[j - 1], b = order[j];
      if (cols[md->colK[a]] < cols[md->colK[b]] || (cols[md->colK[a]] == cols[md->colK[b]] && a < b)) break;
      order[j - 1] = b, order[j] = a;
    }
  for (int i = 0; i < n && peak > limit; i++) {
    int t = order[i];
    dec[t] = offload_allowed(md, t) && cols[md->colO[t]] > cols[md->colR[t]] ? DEC_OFFLOAD : DEC_RECOMPUTE;
    if (!host_fits(md, dec)) dec[t] = DEC_RECOMPUTE;
    int64_t pk;
    if (ilp_eval(md, dec, x, &pk) == 0 && pk < peak) peak = pk;
    else dec[t] = DEC_KEEP;
  }
  free(order);
}

typedef struct Doubt {
  int t;
  Decision to;  /* the relaxation's choice among the other two */
  double pull;  /* its value there less its value at the plan's choice */
} Doubt;

static int cmp_doubt(const void *a, const void *b) {
  const Doubt *x = a, *y = b;
  if (x->pull != y->pull) return x->pull > y->pull ? -1 : 1;
  return x->t - y->t;
}

/* The tensors whose decision in best the relaxation's point does not take
 * whole, each with the choice the point prefers among the other two. */
static int doubts(const Ilp *md, const Candidate *best, const double *point, Doubt *out) {
  const Graph *g = md->g;
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i], at = best->dec[t] - DEC_KEEP, to = -1;
    if (md->colK[t] < 0) continue;
    double v[3] = {point[md->colK[t]], point[md->colR[t]], point[md->colO[t]]};
    if (v[at] >= 1 - 1e-6) continue;
    for (int d = 0; d < 3; d++)
      if (d != at && (d != DEC_OFFLOAD - DEC_KEEP || offload_allowed(md, t)) && (to < 0 || v[d] > v[to])) to = d;
    if (to >= 0) out[n++] = (Doubt){t, (Decision)(DEC_KEEP + to), v[to] - v[at]};
  }
  return n;
}

/* Every pair of the most doubted tensors moved together to the point's
 * choice, the best pair taken if it beats best. Neither change alone need
 * pay (the descent tried each) where the pair does: one tensor takes the
 * copy time or the memory the other gives up, which the exchanges (memory
 * only, for a change over the budget) do not try. unet at f = 0: the plan
 * recomputed d2.b1.conv.y (a 629 us convolution) and offloaded d2.b2.act.y;
 * each flip alone is slower or over the budget, the swap 1.5% faster. */
static bool pairs(const Ilp *md, Candidate *best, const double *point, int64_t limit, double *x, long *evals,
                  double deadline) {
  const Graph *g = md->g;
  Doubt *d = util_xcalloc((size_t)g->nstashed + 1, sizeof(Doubt));
  Decision *cur = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  bool improved = false;
  if (d && cur) {
    int n = doubts(md, best, point, d);
    qsort(d, (size_t)n, sizeof(Doubt), cmp_doubt);
    if (n > ILP_PAIR_TENSORS) n = ILP_PAIR_TENSORS;
    memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
    double top = best->objective;
    int pi = -1, pj = -1;
    for (int i = 0; i < n && *evals > 0 && util_now() < deadline; i++) {
      cur[d[i].t] = d[i].to;
      for (int j = i + 1; j < n && *evals > 0; j++) {
        cur[d[j].t] = d[j].to;
        int64_t pk;
        double obj;
        (*evals)--;
        if (ilp_eval(md, cur, x, &pk) == 0 && pk <= limit && (obj = objective_of(md, x)) < top - 1e-9 && admissible(md, cur))
          top = obj, pi = i, pj = j;
        cur[d[j].t] = best->dec[d[j].t];
      }
      cur[d[i].t] = best->dec[d[i].t];
    }
    if (pi >= 0) {
      cur[d[pi].t] = d[pi].to, cur[d[pj].t] = d[pj].to;
      consider(md, best, cur, limit, x);
      improved = true;
    }
  }
  free(d), free(cur);
  return improved;
}

/* Kicks guided by the relaxation (an iterated local search around the
 * best plan): where it is still more than ILP_PROOF_GAP above the bound,
 * ILP_KICK_TENSORS of the tensors whose decision in the best plan the LP's
 * point does not take whole move to the choice the point prefers among
 * the others; the result is repaired in the point's keep order and
 * polished with exchanges, and replaces the best plan if faster. The
 * descent cannot leave its local optimum by single changes and exchanges;
 * the point says which way to jump. The pair moves go first, until no
 * pair is faster. The doubted tensors are taken again from each new best
 * plan, as its decisions are what the next kick moves. Deterministic: a
 * fixed-seed generator. */
static void kick(const Ilp *md, Candidate *best, const double *point, double bound, int64_t limit, double *x, double deadline,
                 long evals) {
  const Graph *g = md->g;
  Decision *kicked = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *polished = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Doubt *doubted = util_xcalloc((size_t)g->nstashed + 1, sizeof(Doubt));
  uint64_t seed = 0x9e3779b97f4a7c15u;
  for (long pair_evals = evals; (best->objective - bound) > ILP_PROOF_GAP * best->objective &&
                                pairs(md, best, point, limit, x, &pair_evals, deadline);)
    improve(md, best, limit, x, deadline, evals, true);
  for (int round = 0; kicked && polished && doubted && round < ILP_KICKS &&
                      (best->objective - bound) > ILP_PROOF_GAP * best->objective && util_now() < deadline;
       round++) {
    int ndoubted = doubts(md, best, point, doubted);
    if (!ndoubted) break;
    memcpy(kicked, best->dec, (size_t)g->ntensors * sizeof(Decision));
    for (int i = 0; i < ILP_KICK_TENSORS; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      const Doubt *k = &doubted[(seed >> 33) % (uint64_t)ndoubted];
      kicked[k->t] = k->to;
    }
    repair(md, point, kicked, limit, x);
    Candidate c = {.dec = polished};
    consider(md, &c, kicked, limit, x);
    if (!c.ok) continue;
    improve(md, &c, limit, x, deadline, evals, true);
    if (c.objective < best->objective - 1e-9) {
      memcpy(best->dec, c.dec, (size_t)g->ntensors * sizeof(Decision));
      best->objective = c.objective, best->peak = c.peak;
    }
  }
  free(kicked), free(polished), free(doubted);
}

/* MilpOptions.search: the pair moves and kicks around the incumbent
 * before the proof tree, so that it proves the gap of the better plan. */
static bool search_x(void *ctx, double *cols, const double *point, double bound) {
  Polish *p = ctx;
  Candidate *c = &p->searched;
  Decision *dec = util_xcalloc((size_t)p->md->g->ntensors + 1, sizeof(Decision));
  if (!dec) return false;
  decisions_from_x(p->md, cols, dec);
  c->ok = false;
  consider(p->md, c, dec, p->limit, p->x);
  free(dec);
  if (!c->ok) return false;
  double before = c->objective;
  kick(p->md, c, point, bound, p->limit, p->x, p->deadline, p->evals);
  int64_t pk;
  if (c->objective >= before - 1e-9) return false;
  pool_add(p->pool, p->md->g, c);
  return ilp_eval(p->md, c->dec, cols, &pk) == 0;
}

static bool polish_x(void *ctx, double *cols) {
  Polish *p = ctx;
  Decision *dec = util_xcalloc((size_t)p->md->g->ntensors + 1, sizeof(Decision));
  if (!dec) return false;
  /* Both roundings, each repaired: the diffused one is the better start
   * where the point spreads offloads over many tensors (llama3-8b at the
   * midpoint: 588,114 us repaired against 607,785; polished, 0.25% and
   * 1.1% above the bound); on an integral point they agree. */
  p->c.ok = false;
  for (int diffused = 0; diffused < 2; diffused++) {
    if (diffused) decisions_diffused(p->md, cols, dec);
    else decisions_from_x(p->md, cols, dec);
    repair(p->md, cols, dec, p->limit, p->x);
    consider(p->md, &p->c, dec, p->limit, p->x);
  }
  free(dec);
  if (!p->c.ok) return false;
  improve(p->md, &p->c, p->limit, p->x, p->deadline, p->evals, true);
  p->exchanged = true;
  pool_add(p->pool, p->md->g, &p->c);
  int64_t pk;
  return ilp_eval(p->md, p->c.dec, cols, &pk) == 0;
}

static int stashed_with(const Graph *g, const Decision *dec, Decision which) {
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) n += dec[g->stashed[i]] == which;
  return n;
}

/* What a solve does, as flags: it minimizes the step time (GOAL_TIME) or
 * the peak (GOAL_MEMORY), with the MILP or, GOAL_QUICK, from the starts and
 * the descent alone: a start for the time solve when none of the baselines
 * fits, where the MILP's seconds would buy bytes nobody asked for; and a
 * fragmentation round after the relaxation did not finish, as its tightened
 * rows would not let it finish either. */
enum { GOAL_TIME = 0, GOAL_MEMORY = 1, GOAL_QUICK = 2 };

/* 0: solved (best->ok when something fits; *relaxed when the LP
 * relaxation finished); 1: no start fits the limit, so there is nothing to
 * start from (the caller has the memory-minimizing plan to offer as extra);
 * -1: error. */
static int solve_at(const Graph *g, const Device *d, const PlanOptions *o, int64_t limit, int goal,
                    const Decision *extra, Decision *const *excluded, int nexcluded, double deadline, Candidate *best,
                    Pool *pool, SolverInfo *si, bool *relaxed, double tree_work, Err *e) {
  *relaxed = false;
  Decision *st[sizeof baselines / sizeof baselines[0] + 3];
  int nst = starts(g, d, o, limit, st);
  const Decision *more[2] = {extra, o->hint};
  for (int i = 0; i < 2; i++)
    if (more[i] && (st[nst] = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision))))
      memcpy(st[nst++], more[i], (size_t)g->ntensors * sizeof(Decision));
  int depth = g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH;
  Ilp md;
  int rc = -1;
  double *x = NULL, *loose = NULL;
  Decision *tmp = NULL, *searched = NULL;
  if (ilp_build(&md, g, d, limit, goal & GOAL_MEMORY, depth, e)) {
    for (int i = 0; i < nst; i++) free(st[i]);
    return -1;
  }
  md.excluded = excluded;
  md.nexcluded = nexcluded;
  add_exclusions(&md);
  remove_dominated(&md);
  limit_host(&md);
  x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  tmp = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  searched = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  if (!x || !tmp || !searched || md.failed || md.m.failed) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  best->ok = false;
  bool recompute_only_fits = false;
  int64_t keep_all_peak = -1;
  for (int i = 0; i < nst; i++) {
    int64_t pk;
    bool modelled = ilp_eval(&md, st[i], x, &pk) == 0;
    double obj = modelled ? objective_of(&md, x) : NAN;
    if (modelled) offer(&md, best, st[i], pk, obj, limit);
    if (modelled && pk <= limit && stashed_with(g, st[i], DEC_OFFLOAD) == 0) recompute_only_fits = true;
    if (modelled && stashed_with(g, st[i], DEC_KEEP) == g->nstashed) keep_all_peak = pk;
    /* Starts outside a depth-bounded model still go to the simulator. */
    if (!modelled || pk <= o->budget_bytes)
      pool_add(pool, g, &(Candidate){.dec = st[i], .peak = modelled ? pk : -1, .objective = obj});
  }
  if (!best->ok && !(goal & GOAL_MEMORY)) {
    rc = 1;
    goto out;
  }
  /* A descent from the best start: the starting solution. The work is
   * counted (deadline_of), so the same inputs give the same plan. */
  long evals = ILP_EVALS_PER_TENSOR * (long)g->nstashed;
  long xevals = (ILP_EVALS_PER_TENSOR + ILP_EXCHANGE_EVALS_PER_TENSOR) * (long)g->nstashed;
  bool cheap_tree = md.m.nnz < ILP_CHEAP_NNZ;
  long nodes = !cheap_tree ? node_limit(&md.m, ILP_NODE_WORK) : 0;
  improve(&md, best, limit, x, deadline, evals, false);
  if (goal & GOAL_QUICK) {
    snprintf(si->status, sizeof si->status, "feasible");
    si->objective = best->objective;
    si->seconds = si->bound = 0;
    rc = 0;
    goto out;
  }
  if (best->ok) {
    /* The start must respect the dominance bounds to be accepted. */
    keep_forbidden_offloads(&md, best->dec);
    int64_t pk;
    md.m.start = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
    if (md.m.start && ilp_eval(&md, best->dec, md.m.start, &pk) == 0) best->objective = objective_of(&md, md.m.start);
  }
  Polish pol = {.md = &md, .limit = limit, .x = x, .evals = xevals, .pool = pool, .deadline = deadline, .c = {.dec = tmp},
                .searched = {.dec = searched}};
  /* The largest models (no tree): where only plans that offload fit, the
   * relaxation is warm-started from a looser one (loose_bounds) and no
   * neighbourhood follows, as its own LP is as tight (llama3-8b at its
   * smallest budget: 64 + 26 s, nothing found); elsewhere only the first
   * neighbourhood: the second found nothing at llama3-8b's f = 0.2-0.4
   * for 6-14 s each, while the first took f = 0.3 from 590,290 to 585,527
   * us. */
  bool no_tree = !cheap_tree && nodes <= ILP_TREE_MIN_NODES;
  /* There the relaxation is the whole proof and its count binds: the queue
   * rows (45% of gpt2-1558m's nonzeros) go in lazily (milp.c), and the count
   * is over the rest. */
  bool lazy = no_tree;
  loose = no_tree && !recompute_only_fits && !(goal & GOAL_MEMORY) ? loose_bounds(&md, limit, keep_all_peak) : NULL;
  MilpOptions mo = {.solver = o->solver ? o->solver : "glpk", .time_limit = deadline < HUGE_VAL ? fmax(0.01, deadline - util_now()) : 0,
                    .mip_gap = ILP_GAP, .quiet = o->quiet, .node_limit = nodes,
                    .tree_iterations = cheap_tree ? (long)fmax(1, tree_work / fmax(1, (double)md.m.nnz)) : 0,
                    .neighbourhood_nodes = node_limit(&md.m, ILP_NEIGHBOURHOOD_WORK),
                    .good_gap = !cheap_tree ? ILP_GOOD_GAP : 0,
                    .skip_tree = no_tree, .loose_ub = loose,
                    .lazy_first = md.queue_rows[0], .lazy_end = lazy ? md.queue_rows[1] : 0, .neighbourhoods = !no_tree ? 2 : loose ? 0 : 1,
                    .lp_iterations = (long)(ILP_LP_WORK / fmax(1, (double)(md.m.nnz - (lazy ? md.queue_nnz : 0)))),
                    .polish = polish_x, .polish_ctx = &pol, .search = search_x,
                    .separate = separate, .separate_ctx = &md, .proof_gap = ILP_PROOF_GAP,
                    .proof_iterations = cheap_tree ? (long)fmax(1, tree_work * (ILP_PROOF_WORK / ILP_TREE_WORK) / fmax(1, (double)md.m.nnz)) : 0};
  MilpResult r;
  if (milp_solve(&md.m, &mo, &r, e)) goto out;
  if (r.status == MILP_FAILED) {
    /* The plans found before it still stand, with what was proven. */
    if (!best->ok) {
      err_set(e, "%s: %s", g->path, r.failure);
      milp_result_free(&r);
      goto out;
    }
    snprintf(si->note, sizeof si->note, "%s", r.failure);
    if (!isfinite(r.bound)) r.bound = 0;
  }
  snprintf(si->name, sizeof si->name, "%s", mo.solver);
  bool have = r.status == MILP_OPTIMAL || r.status == MILP_FEASIBLE || r.status == MILP_TIME_LIMIT;
  if (have) {
    decisions_from_x(&md, r.x, tmp);
    consider(&md, best, tmp, limit, x);
  }
  /* The LP relaxation rounded to the largest of K/R/O: a fallback when
   * branch and bound found nothing in time. */
  if (!isnan(r.lp_x[md.m.ncols])) {
    decisions_from_x(&md, r.lp_x, tmp);
    consider(&md, best, tmp, limit, x);
  }
  /* The solver's candidates went through the exchanges in the hook; the
   * starts alone (no LP point) did not. */
  improve(&md, best, limit, x, deadline, pol.exchanged ? evals : xevals, !pol.exchanged);
  /* Not again where the plan is the one the search before the proof tree
   * ended at. */
  bool searched_already = pol.searched.ok && !memcmp(pol.searched.dec, best->dec, (size_t)g->ntensors * sizeof(Decision));
  if (best->ok && !isnan(r.lp_x[md.m.ncols]) && r.status != MILP_INFEASIBLE && !searched_already)
    kick(&md, best, r.lp_x, r.bound, limit, x, deadline, xevals);
  bool timed_out = r.status == MILP_TIME_LIMIT || out_of_time(deadline);
  snprintf(si->status, sizeof si->status, "%s", r.status == MILP_OPTIMAL ? "optimal" : timed_out ? "time_limit" : "feasible");
  si->seconds = r.seconds;
  *relaxed = !isnan(r.lp_x[md.m.ncols]);
  si->bound = r.status == MILP_INFEASIBLE ? 0 : r.bound;
  if (best->ok) {
    si->objective = best->objective;
    si->bound = r.status == MILP_INFEASIBLE ? best->objective : fmin(r.bound, best->objective);
    si->gap = fabs(si->objective) > 0 ? (si->objective - si->bound) / fabs(si->objective) : 0;
    if (si->gap < 1e-12) si->gap = 0;
    if (r.status == MILP_OPTIMAL && si->gap > mo.mip_gap) snprintf(si->status, sizeof si->status, "feasible");
  }
  milp_result_free(&r);
  rc = 0;
out:
  for (int i = 0; i < nst; i++) free(st[i]);
  free(x);
  free(loose);
  free(tmp), free(searched);
  ilp_free(&md);
  return rc;
}

/* The memory-minimizing solve (goal GOAL_MEMORY, with GOAL_QUICK or not):
 * its decisions and their arena; note: GLPK's failure inside it, if any (a
 * SolverInfo note: the plan is the least found before it, not proven the
 * least); *proven (when not NULL): the peak below which no plan of the
 * schedule family exists, as far as this solve proved it (its bound, where
 * the model is the whole family: no depth bound; else 0). */
static int min_memory_plan(const Graph *g, const Device *d, const PlanOptions *o, int goal, double deadline, Decision *out,
                           int64_t *arena, int64_t *proven, char *note, Err *e) {
  Candidate c = {.dec = out};
  SolverInfo si = {.name = "none", .status = "not_used"};
  bool relaxed;
  *arena = -1;
  if (proven) *proven = 0;
  note[0] = 0;
  if (solve_at(g, d, o, INT64_MAX / 4, goal, NULL, NULL, 0, deadline, &c, NULL, &si, &relaxed, ILP_TREE_WORK,
               e) ||
      !c.ok)
    return -1;
  /* The bound is in MiB through GLPK's tolerances: a millionth below it. */
  if (proven && g->nops <= ILP_FULL_OPS && si.bound > 0) *proven = (int64_t)floor(si.bound * ILP_UNIT * (1 - 1e-6));
  Plan *p = plan_from_decisions(g, d, c.dec, e);
  if (!p) return -1;
  *arena = p->arena_bytes;
  plan_free(p);
  snprintf(note, sizeof si.note, "%s", si.note);
  return 0;
}

/* The peak below which no plan exists: every resident byte and the largest
 * working set of one op, or what the memory-minimizing solve proved. */
static int64_t proven_least_peak(const Graph *g, int64_t solved) {
  int64_t resident, working;
  int at;
  if (info_lower_bound(g, &resident, &working, &at)) return solved;
  return resident + working > solved ? resident + working : solved;
}

static int64_t min_budget(const Graph *g, const Device *d, const PlanOptions *o, char *note, Err *e) {
  Decision *dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  int64_t arena = -1;
  note[0] = 0;
  if (!dec) return err_set(e, "%s: out of memory", g->path);
  min_memory_plan(g, d, o, GOAL_MEMORY, deadline_of(o, util_now()), dec, &arena, NULL, note, e);
  free(dec);
  return arena;
}

double plan_ilp_objective(const Graph *g, const Device *d, const Decision *dec) {
  Ilp md;
  Err e;
  double v = -1;
  if (ilp_build(&md, g, d, INT64_MAX / 4, false, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, &e)) return -1;
  double *x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  int64_t peak;
  if (x && ilp_eval(&md, dec, x, &peak) == 0) v = objective_of(&md, x);
  free(x);
  ilp_free(&md);
  return v;
}

/* Single (and on the smallest graphs, paired) decision changes judged by
 * the simulator itself: the model's stall estimate is not the simulator's
 * (docs/PLANNING.md), and on small graphs the simulator is cheap. */
#define ILP_POLISH_MAX 64
#define ILP_ROUNDS 6        /* solves with tightened rows after an arena over the budget */
#define ILP_EXCLUDE_MAX 24  /* ... and on small graphs, answers excluded one by one first */
#define ILP_PAIRS_MAX 16

/* Every op once, us: what any plan's step takes at least. */
static double compute_us(const Graph *g, const Device *d) {
  double us = 0;
  for (int i = 0; i < g->nops; i++) us += cost_op_seconds(g, d, i) * 1e6;
  return us;
}

static bool try_plan(const Graph *g, const Device *d, int64_t budget, const Decision *dec, double *step) {
  Err e;
  Plan *p = plan_from_decisions(g, d, dec, &e);
  bool ok = p && plan_fits(p, d, budget);
  if (ok) *step = p->predicted.step_seconds;
  plan_free(p);
  return ok;
}

/* Whether the changes by the simulator below may move t to dec: an
 * offload only where the model has one (limit_host; never on a
 * unified_memory device, where a layout's luck could otherwise buy one). */
static bool may_take(const Graph *g, const Device *d, int t, int dec) {
  return dec != DEC_OFFLOAD || plan_host_share(g, t) <= plan_host_limit(d);
}

/* The memory-minimizing solve minimizes peak live bytes; the arena adds
 * fragmentation. On small graphs, single changes that lower the arena may
 * still reach the budget. Returns the smallest arena reached. */
static int64_t shrink_arena(const Graph *g, const Device *d, int64_t budget, Decision *dec, int64_t arena, double deadline) {
  if (g->nstashed > ILP_POLISH_MAX) return arena;
  for (bool moved = true; moved && arena > budget && !out_of_time(deadline);) {
    moved = false;
    for (int i = 0; i < g->nstashed && !moved; i++) {
      int t = g->stashed[i];
      Decision was = dec[t];
      for (int a = DEC_KEEP; a <= DEC_OFFLOAD && !moved; a++) {
        if (a == (int)was || !may_take(g, d, t, a)) continue;
        dec[t] = (Decision)a;
        Err e;
        Plan *p = plan_from_decisions(g, d, dec, &e);
        if (p && p->arena_bytes < arena && plan_fits(p, d, INT64_MAX)) arena = p->arena_bytes, moved = true;
        else dec[t] = was;
        plan_free(p);
      }
    }
  }
  return arena;
}

static bool polish(const Graph *g, const Device *d, int64_t budget, Decision *dec, double *best, double deadline) {
  if (g->nstashed > ILP_POLISH_MAX) return false;
  bool any = false;
  for (bool moved = true; moved && util_now() < deadline;) {
    moved = false;
    for (int i = 0; i < g->nstashed && !moved && util_now() < deadline; i++) {
      int t = g->stashed[i];
      Decision was = dec[t];
      for (int a = DEC_KEEP; a <= DEC_OFFLOAD && !moved; a++) {
        if (a == (int)was || !may_take(g, d, t, a)) continue;
        dec[t] = (Decision)a;
        double st;
        if (try_plan(g, d, budget, dec, &st) && st < *best * (1 - 1e-12)) *best = st, moved = any = true;
        else dec[t] = was;
      }
    }
    for (int i = 0; g->nstashed <= ILP_PAIRS_MAX && i < g->nstashed && !moved && util_now() < deadline; i++)
      for (int j = i + 1; j < g->nstashed && !moved; j++) {
        int t = g->stashed[i], u = g->stashed[j];
        Decision wt = dec[t], wu = dec[u];
        for (int a = DEC_KEEP; a <= DEC_OFFLOAD && !moved; a++)
          for (int b = DEC_KEEP; b <= DEC_OFFLOAD && !moved; b++) {
            if (a == (int)wt || b == (int)wu || !may_take(g, d, t, a) || !may_take(g, d, u, b)) continue;
            dec[t] = (Decision)a, dec[u] = (Decision)b;
            double st;
            if (try_plan(g, d, budget, dec, &st) && st < *best * (1 - 1e-12)) *best = st, moved = any = true;
            else dec[t] = wt, dec[u] = wu;
          }
      }
  }
  return any;
}

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
  keep_forbidden_offloads(md, dec);
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
  remove_dominated(&md);
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
    separate(&md, point, &cuts);
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

int plan_ilp_pair_step(const Graph *g, const Device *d, int64_t budget, const Decision *dec, const Decision *prefer,
                       Decision *out, double *objective, Err *e) {
  Ilp md;
  if (ilp_build(&md, g, d, budget, false, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, e)) return -1;
  int nc = md.m.ncols, rc = -1;
  double *x = util_xcalloc((size_t)nc + 1, sizeof(double)), *point = util_xcalloc((size_t)nc + 1, sizeof(double));
  Candidate best = {.dec = out};
  if (!x || !point) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  for (int t = 0; t < g->ntensors; t++)
    if (md.colK[t] >= 0)
      point[prefer[t] == DEC_KEEP ? md.colK[t] : prefer[t] == DEC_RECOMPUTE ? md.colR[t] : md.colO[t]] = 1;
  consider(&md, &best, dec, budget, x);
  if (!best.ok) {
    err_set(e, "%s: the decisions do not fit %lld bytes", g->path, (long long)budget);
    goto out;
  }
  long evals = LONG_MAX;
  pairs(&md, &best, point, budget, x, &evals, HUGE_VAL);
  *objective = best.objective;
  rc = 0;
out:
  free(x), free(point);
  ilp_free(&md);
  return rc;
}

int64_t plan_ilp_min_budget(const Graph *g, const Device *d, const PlanOptions *o, char *note, Err *e) {
  return min_budget(g, d, o, note, e);
}

/* No plan at the budget: "infeasible" only where proven (the budget is
 * below least, a peak no plan of the family gets under); else what was not
 * found. Either way the smallest budget this run planned (planned, its
 * arena, < 0: none), and whether that is only the least found before GLPK
 * failed (note). */
static void no_plan_error(const Graph *g, const Device *d, int64_t budget, int64_t least, int64_t planned, const char *note,
                          Err *e) {
  char b1[32], b2[32], b3[32], proof[160] = "", smallest[sizeof ((SolverInfo *)0)->note + 160] = "";
  if (budget < least)
    snprintf(proof, sizeof proof, ": no plan below %" PRId64 " bytes (%s) exists in the schedule family", least,
             util_fmt_bytes(least, b2, sizeof b2));
  if (planned >= 0)
    snprintf(smallest, sizeof smallest, "; the smallest budget planned is %" PRId64 " bytes (%s)%s%s%s", planned,
             util_fmt_bytes(planned, b3, sizeof b3), note[0] ? " (the least found before " : "", note, note[0] ? ")" : "");
  if (proof[0])
    err_set(e, "%s: budget %" PRId64 " bytes (%s) is infeasible on %s%s%s", g->path, budget,
            util_fmt_bytes(budget, b1, sizeof b1), d->name, proof, smallest);
  else
    err_set(e, "%s: no plan found at %" PRId64 " bytes (%s) on %s%s", g->path, budget, util_fmt_bytes(budget, b1, sizeof b1),
            d->name, smallest);
}

int plan_decide_ilp(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e) {
  Candidate c = {.dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision))};
  Decision *best = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *mm = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *repaired = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *excluded[ILP_EXCLUDE_MAX];
  int nexcluded = 0;
  Pool pool;
  memset(&pool, 0, sizeof pool);
  bool oom = !c.dec || !best || !mm || !repaired;
  for (int i = 0; i < ILP_POOL; i++) oom |= !(pool.c[i].dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision)));
  int rc = -1;
  if (oom) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  int64_t limit = o->budget_bytes;
  double start = util_now(), deadline = deadline_of(o, start), best_s = HUGE_VAL;
  /* Keep-all costs no recompute and no stall: when it fits, nothing is
   * faster and the bound (pure compute) proves it. */
  for (int i = 0; i < g->nstashed; i++) best[g->stashed[i]] = DEC_KEEP;
  if (try_plan(g, d, o->budget_bytes, best, &best_s)) {
    double compute = compute_us(g, d);
    snprintf(si->name, sizeof si->name, "%s", o->solver ? o->solver : "glpk");
    snprintf(si->status, sizeof si->status, "optimal");
    si->objective = si->bound = compute;
    si->gap = 0;
    si->seconds = 0; /* no solver ran; and the plan file stays byte-identical */
    memcpy(dec, best, (size_t)g->ntensors * sizeof(Decision));
    rc = 0;
    goto out;
  }
  best_s = HUGE_VAL;
  /* Fragmentation: an arena over the budget tightens the rows and
   * re-solves, while the solver's answer would beat the best that fits. */
  /* The first round's (later rounds' tightened rows do not bound this
   * budget's problem); when its relaxation did not finish, the later rounds
   * use the starts and the descent alone, as theirs would not either. */
  double bound = 0;
  bool relaxed = false;
  bool picked = false;
  /* When no start fits, the memory-minimizing plan is the start (and,
   * should the solve find nothing better, the answer). */
  int64_t mm_arena = -1, mm_proven = 0;
  int mm_goal = GOAL_TIME; /* GOAL_TIME: none computed yet */
  bool mm_ok = false;
  char mm_note[sizeof si->note] = "";
  for (int round = 0; round < ILP_ROUNDS + (g->nstashed <= ILP_POLISH_MAX ? ILP_EXCLUDE_MAX : 0); round++) {
    if (round > 0 && out_of_time(deadline)) break;
    SolverInfo rsi = *si;
    pool.n = 0;
    int goal = round > 0 && !relaxed ? GOAL_TIME | GOAL_QUICK : GOAL_TIME;
    bool rel = false;
    /* Later rounds get less of the tree: each excludes one plan from the
     * last round's problem and re-proves much of it (llama-tiny at f = 0.2:
     * 24 rounds, 120 s with the whole count each; 550.01 us in 13.7 s so,
     * 554.77 us with a count shared by all rounds). */
    int s = solve_at(g, d, o, limit, goal, mm_ok ? mm : NULL, excluded, nexcluded, deadline, &c, &pool, &rsi, &rel,
                     ILP_TREE_WORK / (round + 1), e);
    if (s < 0) goto out;
    if (s > 0) { /* the quick one first; the MILP's if that does not fit either */
      Err e2;
      if (mm_goal == GOAL_MEMORY) break;
      mm_goal = mm_ok ? GOAL_MEMORY : GOAL_MEMORY | GOAL_QUICK;
      mm_ok = min_memory_plan(g, d, o, mm_goal, deadline, mm, &mm_arena, &mm_proven, mm_note, &e2) == 0;
      if (!mm_ok) break;
      round--;
      continue;
    }
    if (round == 0) bound = rsi.bound, relaxed = rel;
    /* The objective estimates stalls; the simulator has the last word
     * among the solution and the starts (so no baseline is ever better). */
    const Candidate *pick = NULL;
    int64_t c_arena = -1;
    double c_step = HUGE_VAL;
    for (int i = c.ok ? -1 : 0; i < pool.n; i++) {
      const Candidate *k = i < 0 ? &c : &pool.c[i];
      Plan *p = plan_from_decisions(g, d, k->dec, e);
      if (!p) goto out;
      int64_t arena = p->arena_bytes, peak = p->predicted.peak_live_bytes;
      double step = p->predicted.step_seconds;
      bool fits = plan_fits(p, d, o->budget_bytes);
      plan_free(p);
      if (k->peak >= 0 && peak != k->peak) {
        err_set(e, "%s: internal error: the ILP predicts a peak of %" PRId64 " bytes, the simulator %" PRId64, g->path,
                k->peak, peak);
        goto out;
      }
      if (i < 0) c_arena = arena, c_step = step;
      if (fits && step < best_s * (1 - 1e-12)) pick = k, best_s = step;
    }
    if (pick || !picked) *si = rsi;
    /* Small graphs: the answer's own neighbours with a smaller arena. */
    if (!pick && c.ok && c_arena > o->budget_bytes && g->nstashed <= ILP_POLISH_MAX) {
      memcpy(repaired, c.dec, (size_t)g->ntensors * sizeof(Decision));
      double step;
      if (shrink_arena(g, d, o->budget_bytes, repaired, c_arena, deadline) <= o->budget_bytes &&
          try_plan(g, d, o->budget_bytes, repaired, &step) && step < best_s * (1 - 1e-12)) {
        memcpy(best, repaired, (size_t)g->ntensors * sizeof(Decision));
        best_s = step, picked = true;
        *si = rsi;
        if (!strcmp(si->status, "optimal")) snprintf(si->status, sizeof si->status, "feasible");
      }
    }
    if (pick) {
      picked = true;
      memcpy(best, pick->dec, (size_t)g->ntensors * sizeof(Decision));
      if (pick != &c) {
        /* A start the simulator preferred: not the solver's optimum. */
        if (!strcmp(si->status, "optimal")) snprintf(si->status, sizeof si->status, "feasible");
      }
    }
    /* Tighter rows only raise the model's objective: stop once the
     * solver's answer fits or simulates no faster than what does. */
    if (!c.ok || c_arena <= o->budget_bytes || c_step >= best_s) break;
    /* Small graphs: exclude that answer and ask for the next best (their
     * layouts can be far over the peak, and for another plan at the same
     * peak not at all). Otherwise by the excess, doubled each round:
     * fragmentation is not linear in the limit, and the same few bytes
     * again often change nothing. */
    if (g->nstashed <= ILP_POLISH_MAX && nexcluded < ILP_EXCLUDE_MAX &&
        (excluded[nexcluded] = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision)))) {
      memcpy(excluded[nexcluded++], c.dec, (size_t)g->ntensors * sizeof(Decision));
    } else {
      if (round >= ILP_ROUNDS) break;
      limit -= (c_arena - o->budget_bytes) << round;
    }
    c.ok = false;
  }
  if (!picked) {
    /* The memory-minimizing solve fits whenever anything in the model does. */
    int64_t m = -1;
    Err e2;
    if (mm_goal != GOAL_MEMORY)
      mm_goal = GOAL_MEMORY, mm_ok = min_memory_plan(g, d, o, mm_goal, deadline, mm, &mm_arena, &mm_proven, mm_note, &e2) == 0;
    if (mm_ok) {
      memcpy(best, mm, (size_t)g->ntensors * sizeof(Decision));
      m = mm_arena > o->budget_bytes ? shrink_arena(g, d, o->budget_bytes, best, mm_arena, deadline) : mm_arena;
    }
    if (m >= 0 && m <= o->budget_bytes && try_plan(g, d, o->budget_bytes, best, &best_s)) {
      snprintf(si->status, sizeof si->status, "feasible");
      if (!si->note[0]) snprintf(si->note, sizeof si->note, "%s", mm_note);
    } else {
      no_plan_error(g, d, o->budget_bytes, proven_least_peak(g, mm_goal == GOAL_MEMORY ? mm_proven : 0), m, mm_note, e);
      goto out;
    }
  }
  if (polish(g, d, o->budget_bytes, best, &best_s, deadline) && !strcmp(si->status, "optimal"))
    snprintf(si->status, sizeof si->status, "feasible");
  /* One objective: the returned plan's simulated step time. Where the
   * model's differs (docs/PLANNING.md section 4: stalls it can only
   * bound), the model's optimum is not this plan's, so not "optimal". */
  si->objective = best_s * 1e6;
  if (fabs(plan_ilp_objective(g, d, best) - si->objective) > 1e-6 * si->objective && !strcmp(si->status, "optimal"))
    snprintf(si->status, sizeof si->status, "feasible");
  /* The relaxation's bound where it finished, and never below the compute
   * alone (every plan runs every op once): a real bound either way. */
  si->bound = fmin(fmax(bound, compute_us(g, d)), si->objective);
  si->gap = si->objective > 0 ? fmax(0, (si->objective - si->bound) / si->objective) : 0;
  si->seconds = util_now() - start;
  if (out_of_time(deadline) && strcmp(si->status, "optimal")) snprintf(si->status, sizeof si->status, "time_limit");
  if (si->gap < 1e-12) si->gap = 0;
  memcpy(dec, best, (size_t)g->ntensors * sizeof(Decision));
  rc = 0;
out:
  free(c.dec);
  free(best);
  free(mm);
  free(repaired);
  for (int i = 0; i < nexcluded; i++) free(excluded[i]);
  for (int i = 0; i < ILP_POOL; i++) free(pool.c[i].dec);
  return rc;
}
