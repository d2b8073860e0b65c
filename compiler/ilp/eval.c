/*
 * eval.c - one decision vector in the ILP model: every column's value, its
 * peak (equal to the simulator's), its objective, the decisions read back
 * from a point, and the public queries built on them: the predicted peak,
 * the objective and the stalls (docs/PLANNING.md sections 3 and 4).
 */
#include "ilp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The decision columns and the re-run columns Y of one decision vector,
 * every other column 0. -1 when the decisions re-run an op outside its
 * candidates (cannot happen for the full candidate sets) or are
 * incomplete. */
static int eval_decisions(const Ilp *md, const Decision *dec, double *x) {
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
  if (ilp_eval_homes(md, dec, x)) goto out;
  for (int q = 0; q < g->nops; q++) {
    if (rerun[q] >= 0) {
      int c = ilp_cand_le(md, q, rerun[q]);
      if (c < 0 || md->cand_t[md->cand_first[q] + c] != rerun[q]) goto out;
    }
    for (int c = 0; c < md->cand_n[q]; c++)
      x[md->ycol[md->cand_first[q] + c]] = rerun[q] >= 0 && rerun[q] <= md->cand_t[md->cand_first[q] + c];
  }
  rc = 0;
out:
  free(rerun);
  free(need);
  return rc;
}

/* The product columns, then the running sum M[p] of the memory rows and
 * their peak; the sum stops as soon as it is over cap (the peak then is
 * only known to be over it). Products in creation order: factors only use
 * earlier columns. Every factor is 0 or 1 here, so an AND ends at its
 * first 0 and an OR at its first 1 (the descent's evaluations are most of
 * a solve's time). */
static int64_t eval_peak(const Ilp *md, double *x, int64_t cap) {
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
  for (int p = 0; p < md->npos; p++) {
    live += md->pos_const[p];
    /* Without a branch: x is 0 or 1, so which way it goes is a coin flip. */
    for (int e = md->pos_ev_first[p]; e < md->pos_ev_first[p + 1]; e++) live += md->pev_bytes[e] & -(int64_t)(x[md->pev_col[e]] > 0.5);
    x[md->mcol[p]] = (double)live / ILP_UNIT;
    if (live > best) best = live;
    if (best > cap) return best;
  }
  if (md->peak_col >= 0) x[md->peak_col] = (double)best / ILP_UNIT;
  return best;
}

/* Every column's value for one decision vector, and the peak of the rows;
 * -1 as eval_decisions. */
int ilp_eval(const Ilp *md, const Decision *dec, double *x, int64_t *peak) {
  if (eval_decisions(md, dec, x)) return -1;
  ilp_eval_stalls(md, dec, STALL_ROWS | STALL_QUEUES, x);
  *peak = eval_peak(md, x, INT64_MAX);
  return 0;
}

int ilp_eval_within(const Ilp *md, const Decision *dec, double *x, double obj_cap, int64_t peak_cap, int64_t *peak,
                    double *obj) {
  if (eval_decisions(md, dec, x)) return -1;
  /* Q is 0 in x until the stalls are evaluated, and Q >= 0 enters the sum
   * with coefficient 1: the objective without it is no larger (rounding is
   * monotone), so a vector already at the cap without it is at the cap. */
  if (obj && ilp_objective_of(md, x) >= obj_cap) return 0;
  if ((*peak = eval_peak(md, x, peak_cap)) > peak_cap) return 0;
  if (!obj) return 1;
  ilp_eval_stalls(md, dec, STALL_ROWS | STALL_QUEUES, x);
  *obj = ilp_objective_of(md, x);
  return *obj < obj_cap;
}

void ilp_decisions_from_x(const Ilp *md, const double *x, Decision *dec) {
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

double ilp_objective_of(const Ilp *md, const double *x) {
  double v = md->m.obj_offset;
  for (int i = 0; i < md->nobj_cols; i++) v += md->m.obj[md->obj_cols[i]] * x[md->obj_cols[i]];
  return v;
}

/* ------------------------------------------------------------ public */

/* The model without a memory limit, evaluated at dec into *x: 0, or -1
 * with e set and nothing left to free. */
static int eval_unlimited(Ilp *md, const Graph *g, const Device *d, const Decision *dec, double **x, int64_t *peak, Err *e) {
  if (ilp_build_with_homes(md, g, d, 0, e)) return -1;
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
  ilp_eval_stalls(&md, dec, STALL_ROWS, x);
  *rows_us = x[last];
  ilp_eval_stalls(&md, dec, STALL_QUEUES, x);
  *queues_us = x[last];
  if (lp_us) {
    /* The decisions and re-runs fixed, the LP's least Q[last]: the rows'
     * least stalls found by the simplex rather than by the forward pass. */
    for (int t = 0; t < g->ntensors; t++) {
      if (md.colK[t] < 0) continue;
      int cols[3] = {md.colK[t], md.colR[t], md.colO[t]};
      for (int k = 0; k < 3; k++) md.m.col_lb[cols[k]] = md.m.col_ub[cols[k]] = x[cols[k]];
    }
    for (int t = 0; t < g->ntensors; t++) { /* the homes too: a free home column is not a fixed plan */
      if (md.colH[t] >= 0) md.m.col_lb[md.colH[t]] = md.m.col_ub[md.colH[t]] = x[md.colH[t]];
      if (md.colF[t] >= 0) md.m.col_lb[md.colF[t]] = md.m.col_ub[md.colF[t]] = x[md.colF[t]];
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

double plan_ilp_objective(const Graph *g, const Device *d, const Decision *dec) {
  Ilp md;
  Err e;
  double v = -1;
  if (ilp_build_with_homes(&md, g, d, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, &e)) return -1;
  double *x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  int64_t peak;
  if (x && ilp_eval(&md, dec, x, &peak) == 0) v = ilp_objective_of(&md, x);
  free(x);
  ilp_free(&md);
  return v;
}
