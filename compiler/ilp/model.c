/*
 * model.c - the ILP model itself: the vocabulary its rows are written in
 * (Lin, Row, Sig, Run: linear expressions, AND and OR columns, runs of
 * equal conditions), its structure (each forward op's consumers and
 * re-run candidates, the step positions of every schedule of the family),
 * the decision columns, the re-run rows, and building and freeing the
 * whole (docs/PLANNING.md section 3: "Columns", "Re-run rows").
 */
#include "ilp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

Lin ilp_lin_const(double k) {
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

int ilp_new_col(Ilp *md, double lb, double ub, double obj, bool integer) {
  int c = milp_add_col(&md->m, lb, ub, obj, integer);
  if (c < 0) md->failed = true;
  return c;
}

/* Room for index n in *arr (*cap elements, grown by doubling). */
bool ilp_push(void **arr, int n, int *cap, size_t elem) {
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
      if (f[i].k < 0.5) return ilp_lin_const(0);
      continue;
    }
    keep[nk++] = f[i];
  }
  if (nk == 0) return ilp_lin_const(1);
  if (nk == 1) return keep[0];
  int z = ilp_new_col(md, 0, 1, 0, false);
  Lin row = ilp_lin_const(0);
  lin_add(md, &row, z, 1);
  for (int i = 0; i < nk; i++) lin_addl(md, &row, &keep[i], -1);
  row_lin(md, 1.0 - nk, HUGE_VAL, &row);
  if (!ilp_push((void **)&md->prod, md->nprod, &md->cap_prod, sizeof(Prod)) ||
      !ilp_push((void **)&md->fac, md->nfac + nk, &md->cap_fac, sizeof(Lin))) {
    md->failed = true;
    return ilp_lin_const(0);
  }
  md->prod[md->nprod++] = (Prod){z, nk, md->nfac};
  for (int i = 0; i < nk; i++) md->fac[md->nfac++] = keep[i];
  Lin l = ilp_lin_const(0);
  lin_add(md, &l, z, 1);
  return l;
}

Lin ilp_var(Ilp *md, int col) {
  Lin l = ilp_lin_const(0);
  lin_add(md, &l, col, 1);
  return l;
}

/* OR of 0/1 expressions as one column z >= each; at its minimum, z is the
 * OR. Factors exist before z, so evaluation in creation order works. */
static Lin or_of(Ilp *md, const Lin *f, int n) {
  int nk = 0;
  for (int i = 0; i < n; i++) {
    if (lin_is_const(&f[i]) && f[i].k > 0.5) return ilp_lin_const(1);
    if (!lin_is_const(&f[i])) nk++;
  }
  if (nk == 0) return ilp_lin_const(0);
  if (nk == 1)
    for (int i = 0; i < n; i++)
      if (!lin_is_const(&f[i])) return f[i];
  if (!ilp_push((void **)&md->prod, md->nprod, &md->cap_prod, sizeof(Prod)) ||
      !ilp_push((void **)&md->fac, md->nfac + nk, &md->cap_fac, sizeof(Lin))) {
    md->failed = true;
    return ilp_lin_const(0);
  }
  int z = ilp_new_col(md, 0, 1, 0, false);
  md->prod[md->nprod++] = (Prod){z, -nk, md->nfac};
  for (int i = 0; i < n; i++) {
    if (lin_is_const(&f[i])) continue;
    Lin r = ilp_var(md, z);
    lin_addl(md, &r, &f[i], -1);
    row_lin(md, 0, HUGE_VAL, &r);
    md->fac[md->nfac++] = f[i];
  }
  return ilp_var(md, z);
}

static bool sig_reserve(Sig *s, int n) {
  return reserve2((void **)&s->nf, sizeof(int), (void **)&s->f, sizeof *s->f, &s->cap, n);
}

static void sig_free(Sig *s) { free(s->nf), free(s->f); }

void ilp_sig_add(Ilp *md, Sig *s, const Lin *f, int n) {
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
  if (k == 0) g[k++] = ilp_lin_const(1);
  for (int i = 0; i < k; i++) s->f[s->ng][i] = g[i];
  s->nf[s->ng++] = k;
}

void ilp_run_flush(Ilp *md, Run *r, int p1, int64_t bytes) {
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
    ilp_term(md, r->p0, p1, &l, bytes);
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

void ilp_run_step(Ilp *md, Run *r, const Sig *s, int p, int64_t bytes) {
  if (r->open && sig_equal(&r->sig, s)) return;
  ilp_run_flush(md, r, p - 1, bytes);
  sig_copy(md, &r->sig, s);
  r->p0 = p;
  r->open = true;
}

/* Largest candidate index of op q at or before op j, -1 if none. */
int ilp_cand_le(const Ilp *md, int q, int j) {
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
Lin ilp_yle(Ilp *md, int q, int j) {
  int c = ilp_cand_le(md, q, j);
  return c < 0 ? ilp_lin_const(0) : ilp_var(md, md->ycol[md->cand_first[q] + c]);
}

static Lin ylt(Ilp *md, int q, int j) { return ilp_yle(md, q, j - 1); }

static Lin rr(Ilp *md, int q) { return md->cand_n[q] ? ilp_var(md, md->ycol[md->cand_first[q] + md->cand_n[q] - 1]) : ilp_lin_const(0); }

/* "q is re-run exactly in op j's prelude". */
Lin ilp_eq(Ilp *md, int q, int j) {
  Lin l = ilp_yle(md, q, j);
  Lin b = ylt(md, q, j);
  lin_addl(md, &l, &b, -1);
  return l;
}

/* "q's re-run step is at or after position p". */
Lin ilp_at_or_after(Ilp *md, int q, int p) {
  int j = md->pos_op[p], x = md->pos_q[p];
  Lin l = rr(md, q);
  Lin b = x >= 0 && q >= x ? ylt(md, q, j) : ilp_yle(md, q, j);
  lin_addl(md, &l, &b, -1);
  return l;
}

/* "q's re-run step is strictly before position p". */
Lin ilp_started_before(Ilp *md, int q, int p) {
  int j = md->pos_op[p], x = md->pos_q[p];
  return x < 0 || q < x ? ilp_yle(md, q, j) : ylt(md, q, j);
}

/* bytes * l live at positions [p0, p1]. */
void ilp_term(Ilp *md, int p0, int p1, const Lin *l, int64_t bytes) {
  if (p0 > p1 || bytes == 0 || lin_is_zero(l)) return;
  if (!ilp_push((void **)&md->ev, md->nev + 2 * (l->n + 1), &md->cap_ev, sizeof(Event))) {
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

bool ilp_regen(const Ilp *md, int t) { return plan_regenerable(md->g, t); }

static bool decided(const Ilp *md, int t) { return md->colK[t] >= 0; }

/* Offload is still a choice for t (ilp_remove_dominated fixes some O at 0). */
bool ilp_offload_allowed(const Ilp *md, int t) { return md->colO[t] >= 0 && md->m.col_ub[md->colO[t]] > 0; }

/* ------------------------------------------------------------ structure */

/* Whether input K of O also appears earlier among its inputs: an op
 * consumes a tensor once however many of its inputs name it. */
static bool repeated_input(const Op *o, int k) {
  for (int k2 = 0; k2 < k; k2++)
    if (o->inputs[k2] == o->inputs[k]) return true;
  return false;
}

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
      if (!repeated_input(o, k)) md->cons_n[o->inputs[k]]++;
    }
  }
  for (int t = 1; t < g->ntensors; t++) md->cons_first[t] = md->cons_first[t - 1] + md->cons_n[t - 1];
  memset(md->cons_n, 0, (size_t)g->ntensors * sizeof(int));
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    if (o->phase != PHASE_FORWARD) continue;
    for (int k = 0; k < o->ninputs; k++) {
      int t = o->inputs[k];
      if (!repeated_input(o, k)) md->cons[md->cons_first[t] + md->cons_n[t]++] = i;
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
      if (ilp_regen(md, o->outputs[k]) && tv->stashed && tv->first_bwd_read < own) own = tv->first_bwd_read;
    }
    int lo = md->depth > 0 && own != INT32_MAX ? own - md->depth : INT32_MIN;
#define ADD(k) do { if (mark[k] != q && (k) >= lo) { mark[k] = q; tmp[cnt++] = (k); } } while (0)
    for (int k = 0; k < o->noutputs; k++) {
      int v = o->outputs[k];
      if (!ilp_regen(md, v)) continue;
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

int ilp_pos_of_rerun(const Ilp *md, int j, int q) {
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

double ilp_op_us(const Ilp *md, int op) { return cost_op_seconds(md->g, md->d, op) * 1e6; }

static void build_decisions(Ilp *md) {
  const Graph *g = md->g;
  for (int t = 0; t < g->ntensors; t++) md->colK[t] = md->colR[t] = md->colO[t] = -1;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (!ilp_regen(md, t)) continue;
    md->colK[t] = ilp_new_col(md, 0, 1, 0, true);
    md->colR[t] = ilp_new_col(md, 0, 1, 0, true);
    /* A device whose copies take a share of the compute stream (a CPU
     * backend's profile) charges it at each copy's issue: one offload and
     * one prefetch per offloaded tensor (sim.c). */
    int64_t bytes = g->tensors[t].bytes;
    double share = md->min_memory ? 0
                   : md->d->copy_compute_share * (cost_d2h_seconds(md->d, bytes) + cost_h2d_seconds(md->d, bytes)) * 1e6;
    md->colO[t] = ilp_new_col(md, 0, 1, share, true);
    Lin one = ilp_lin_const(0);
    lin_add(md, &one, md->colK[t], 1);
    lin_add(md, &one, md->colR[t], 1);
    lin_add(md, &one, md->colO[t], 1);
    row_lin(md, 1, 1, &one);
  }
}

/* ------------------------------------------------------------ re-run rows */

/* Y rows: each forward op is re-run at the first op whose prelude needs one
 * of its dead outputs, directly or through another re-run (schedule.c). */
static void build_reruns(Ilp *md) {
  const Graph *g = md->g;
  for (int q = 0; q < g->nops; q++)
    for (int c = 0; c < md->cand_n[q]; c++) {
      bool last = c == md->cand_n[q] - 1;
      md->ycol[md->cand_first[q] + c] = ilp_new_col(md, 0, 1, last && !md->min_memory ? ilp_op_us(md, q) : 0, false);
    }
  for (int q = 0; q < g->nops; q++) {
    const Op *o = &g->ops[q];
    for (int c = 0; c < md->cand_n[q]; c++) {
      int k = md->cand_t[md->cand_first[q] + c];
      Lin y = ilp_var(md, md->ycol[md->cand_first[q] + c]);
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
        if (!ilp_regen(md, v)) continue;
        const Tensor *tv = &g->tensors[v];
        if (tv->stashed && decided(md, v) && tv->first_bwd_read == k) {
          Lin own = y;
          lin_add(md, &own, md->colR[v], -1);
          row_lin(md, 0, HUGE_VAL, &own);
          row_addl(md, up, &(Lin){.n = 1, .col = {md->colR[v]}, .c = {1}}, -1);
        }
        for (int cc = 0; cc < md->cons_n[v]; cc++) {
          int q2 = md->cons[md->cons_first[v] + cc];
          if (ilp_cand_le(md, q2, k) < 0 || md->cand_t[md->cand_first[q2] + ilp_cand_le(md, q2, k)] != k) continue;
          if (tv->stashed && (!decided(md, v) || k > tv->first_bwd_read)) continue;
                    Lin e2 = ilp_eq(md, q2, k);
          if (!tv->stashed) {
            row_addl(md, up, &e2, -1);
          } else {
            int w = ilp_new_col(md, 0, 1, 0, false);
            Lin a = ilp_var(md, w);
            lin_addl(md, &a, &e2, -1);
            row_lin(md, -HUGE_VAL, 0, &a);
            Lin b = ilp_var(md, w);
            lin_add(md, &b, md->colR[v], -1);
            row_lin(md, -HUGE_VAL, 0, &b);
            row_addl(md, up, &(Lin){.n = 1, .col = {w}, .c = {1}}, -1);
            if (!ilp_push((void **)&md->prod, md->nprod, &md->cap_prod, sizeof(Prod)) ||
                !ilp_push((void **)&md->fac, md->nfac + 2, &md->cap_fac, sizeof(Lin))) {
              md->failed = true;
              return;
            }
            md->prod[md->nprod++] = (Prod){w, 2, md->nfac};
            md->fac[md->nfac++] = e2;
            md->fac[md->nfac++] = ilp_var(md, md->colR[v]);
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
      if (!ilp_regen(md, v)) continue;
      const Tensor *tv = &g->tensors[v];
      if (tv->stashed && !decided(md, v)) continue;
      for (int cc = 0; cc < md->cons_n[v]; cc++) {
        int q2 = md->cons[md->cons_first[v] + cc];
        for (int c2 = 0; c2 < md->cand_n[q2]; c2++) {
          int k = md->cand_t[md->cand_first[q2] + c2];
          if (tv->stashed && k > tv->first_bwd_read) break;
          Lin low = ilp_yle(md, q, k); /* y >= y2 (+ R - 1) */
          lin_add(md, &low, md->ycol[md->cand_first[q2] + c2], -1);
          if (tv->stashed) lin_add(md, &low, md->colR[v], -1);
          row_lin(md, tv->stashed ? -1 : 0, HUGE_VAL, &low);
        }
      }
    }
  }
}

/* ------------------------------------------------------------ the model */

void ilp_free(Ilp *md) {
  milp_model_free(&md->m);
  free(md->colK), free(md->colR), free(md->colO), free(md->colH), free(md->colF);
  free(md->colX), free(md->xneed), free(md->xhost), free(md->xgrad), free(md->xcopy);
  for (int s = 0; s < 2; s++) free(md->hcopy[s]), free(md->hdue_first[s]), free(md->hdue[s]);
  free(md->cand_first), free(md->cand_n), free(md->cand_t), free(md->ycol);
  free(md->pos_op), free(md->pos_q), free(md->grp_first), free(md->grp_comp);
  free(md->cons_first), free(md->cons_n), free(md->cons);
  free(md->ev), free(md->prod), free(md->fac), free(md->mcol);
  free(md->fac_k), free(md->fac_c), free(md->fac_first), free(md->fac_col), free(md->obj_cols);
  free(md->pos_const), free(md->pev_bytes), free(md->pos_ev_first), free(md->pev_col);
  free(md->col_q), free(md->t_end), free(md->wait_at), free(md->issue_at), free(md->copy_us[0]), free(md->copy_us[1]);
  free(md->win), free(md->win_first), free(md->fifo[0]), free(md->fifo[1]), free(md->frow);
  free(md->win_b), free(md->win_b_prev), free(md->frow_first), free(md->frow_by_b);
  free(md->due_first[0]), free(md->due_first[1]), free(md->due_list[0]), free(md->due_list[1]);
  sig_free(&md->sig), sig_free(&md->run.sig), free(md->ors), free(md->up.col), free(md->up.c);
  ilp_eval_cache_free(md->cache);
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
  md->pos_const = util_xcalloc((size_t)md->npos + 1, sizeof(int64_t));
  md->pos_ev_first = util_xcalloc((size_t)md->npos + 1, sizeof(int));
  md->pev_bytes = util_xcalloc((size_t)md->nev + 1, sizeof(int64_t));
  md->pev_col = util_xcalloc((size_t)md->nev + 1, sizeof(int));
  if (!md->pos_const || !md->pos_ev_first || !md->pev_bytes || !md->pev_col) {
    md->failed = true;
    return;
  }
  /* The events are sorted by position, then column (ilp_build_rows). */
  int np = 0;
  for (int p = 0, e = 0; p < md->npos; p++) {
    md->pos_ev_first[p] = np;
    for (; e < md->nev && md->ev[e].pos == p; e++) {
      const Event *ev = &md->ev[e];
      if (ev->col < 0) md->pos_const[p] += ev->bytes;
      else if (np > md->pos_ev_first[p] && md->pev_col[np - 1] == ev->col) md->pev_bytes[np - 1] += ev->bytes;
      else md->pev_col[np] = ev->col, md->pev_bytes[np++] = ev->bytes;
    }
  }
  md->pos_ev_first[md->npos] = np;
  md->obj_cols = util_xcalloc((size_t)md->m.ncols + 1, sizeof(int));
  if (!md->obj_cols) {
    md->failed = true;
    return;
  }
  for (int c = 0; c < md->m.ncols; c++)
    if (md->m.obj[c] != 0) md->obj_cols[md->nobj_cols++] = c;
}

static int build(Ilp *md, const Graph *g, const Device *d, int64_t budget, bool min_memory, int depth, bool homes,
                 bool bound_only, bool bound_exact, Err *e) {
  memset(md, 0, sizeof *md);
  md->homes = homes;
  md->bound_only = bound_only;
  md->bound_exact = bound_exact;
  md->depth = depth;
  md->g = g;
  md->d = d;
  md->min_memory = min_memory;
  md->host_limit = INT64_MAX;
  int n = g->ntensors;
  md->colK = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colR = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colO = util_xcalloc((size_t)n + 1, sizeof(int));
  md->cache = ilp_eval_cache_new();

  if (!md->colK || !md->colR || !md->colO || !md->cache || build_consumers(md) || build_candidates(md) ||
      build_positions(md))
    goto oom;
  build_decisions(md);
  ilp_build_stalls(md);
  build_reruns(md);
  ilp_build_memory(md);
  ilp_build_homes(md);
  if (bound_only) ilp_build_home_windows(md);
  ilp_build_rows(md, budget);
  pack_for_eval(md);
  if (md->failed || md->m.failed) goto oom;
  if (!min_memory)
    for (int i = 0; i < g->nops; i++) md->m.obj_offset += ilp_op_us(md, i);
  return 0;
oom:
  ilp_free(md);
  return err_set(e, "%s: out of memory while building the ILP", g->path);
}

int ilp_build(Ilp *md, const Graph *g, const Device *d, int64_t budget, bool min_memory, int depth, Err *e) {
  return build(md, g, d, budget, min_memory, depth, false, false, false, e);
}

int ilp_build_with_homes(Ilp *md, const Graph *g, const Device *d, int depth, Err *e) {
  return build(md, g, d, INT64_MAX / 4, false, depth, true, false, false, e);
}

int ilp_build_homes_bound(Ilp *md, const Graph *g, const Device *d, int64_t budget, int depth, bool exact, Err *e) {
  return build(md, g, d, budget, false, depth, true, true, exact, e);
}
