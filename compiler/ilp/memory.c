/*
 * memory.c - the memory rows of the ILP: every tensor's residency as
 * conditions times bytes over ranges of step positions (events), summed
 * into one running-sum row per position under the budget
 * (docs/PLANNING.md section 3, "Memory terms").
 */
#include "ilp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* The latest position at which one of t's forward consumers can re-run
 * (and so read t), -1 if none can. */
static int last_consumer_rerun(const Ilp *md, int t) {
  int last = -1;
  for (int c = 0; c < md->cons_n[t]; c++) {
    int q2 = md->cons[md->cons_first[t] + c];
    if (md->cand_n[q2]) {
      int pq = ilp_pos_of_rerun(md, md->cand_t[md->cand_first[q2] + md->cand_n[q2] - 1], q2);
      if (pq > last) last = pq;
    }
  }
  return last;
}

void ilp_extension(Ilp *md, int t, int p0, const Lin *alive, int64_t bytes) {
  int last = last_consumer_rerun(md, t);
  Run *run = &md->run;
  Sig *sg = &md->sig;
  run->open = false;
  for (int p = p0; p <= last; p++) {
    sg->ng = 0;
    for (int c = 0; c < md->cons_n[t]; c++) {
      Lin a = ilp_at_or_after(md, md->cons[md->cons_first[t] + c], p);
      Lin f[2] = {*alive, a};
      ilp_sig_add(md, sg, f, 2);
    }
    ilp_run_step(md, run, sg, p, bytes);
  }
  ilp_run_flush(md, run, last, bytes);
}

void ilp_early_need(Ilp *md, int t, const Lin *alive, int after, int need, int issue, int64_t bytes) {
  const Graph *g = md->g;
  int minc = need;
  for (int c = 0; c < md->cons_n[t]; c++) {
    int q2 = md->cons[md->cons_first[t] + c];
    if (md->cand_n[q2] && md->cand_t[md->cand_first[q2]] < minc) minc = md->cand_t[md->cand_first[q2]];
  }
  Run *run = &md->run;
  Sig *sg = &md->sig;
  run->open = false;
  int m = minc - 1;
  for (int j = after + 1; j < issue; j++) {
    while (m + 1 <= need - 1 && plan_prefetch_issue_after(g, md->d, bytes, m + 1, after) <= j) m++;
    sg->ng = 0;
    for (int c = 0; m >= minc && c < md->cons_n[t]; c++) {
      Lin fct[2] = {*alive, ilp_yle(md, md->cons[md->cons_first[t] + c], m)};
      ilp_sig_add(md, sg, fct, 2);
    }
    for (int pp = md->grp_first[j]; pp <= md->grp_comp[j]; pp++) ilp_run_step(md, run, sg, pp, bytes);
  }
  if (issue > after + 1) ilp_run_flush(md, run, md->grp_comp[issue - 1], bytes);
}

void ilp_build_memory(Ilp *md) {
  const Graph *g = md->g;
  int n = g->nops, last_pos = md->npos - 1;
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *x = &g->tensors[t];
    Lin one = ilp_lin_const(1);
    if (graph_is_resident(x)) { /* a grad from its zero step before its first user's own step */
      int z = plan_grad_start_op(g, t);
      ilp_term(md, z >= 0 ? md->grp_comp[z] : 0, last_pos, &one, x->bytes);
      continue;
    }
    if (x->producer < 0) continue;
    int p = x->producer, lr = x->last_read > p ? x->last_read : p;
    int p0 = md->grp_comp[p];
    if (x->is_output) {
      ilp_term(md, p0, last_pos, &one, x->bytes);
      continue;
    }
    if (!ilp_regen(md, t)) {
      ilp_term(md, p0, md->grp_comp[lr], &one, x->bytes);
      continue;
    }
    if (!x->stashed) { /* an intermediate: forward residency, then re-runs */
      ilp_term(md, p0, md->grp_comp[lr], &one, x->bytes);
    } else {
      int lfr = x->last_fwd_read > p ? x->last_fwd_read : p;
      Lin k = ilp_var(md, md->colK[t]), r = ilp_var(md, md->colR[t]), o = ilp_var(md, md->colO[t]);
      ilp_term(md, p0, md->grp_comp[lr], &k, x->bytes);
      ilp_term(md, p0, md->grp_comp[lfr], &r, x->bytes);
      ilp_term(md, p0, md->grp_comp[plan_offload_wait_op(g, md->d, t)], &o, x->bytes);
      /* A kept tensor stays while a later re-run still reads it. */
      if (lr + 1 < n) ilp_extension(md, t, md->grp_first[lr + 1], &k, x->bytes);
      /* The prefetched copy: from the issue point of its first need. */
      int f = x->first_bwd_read, w = plan_offload_wait_op(g, md->d, t);
      int issue_f = plan_prefetch_issue_op(g, md->d, t, f);
      ilp_term(md, md->grp_first[issue_f], md->grp_comp[lr], &o, x->bytes);
      if (lr + 1 < n) ilp_extension(md, t, md->grp_first[lr + 1], &o, x->bytes);
      ilp_early_need(md, t, &o, w, f, issue_f, x->bytes);
    }
  }
  /* Workspace of every op at its own step. */
  for (int j = 0; j < n; j++) {
    Lin one = ilp_lin_const(1);
    if (g->ops[j].workspace > 0) ilp_term(md, md->grp_comp[j], md->grp_comp[j], &one, g->ops[j].workspace);
  }
  /* Re-runs: the write step, then the regenerated residencies. */
  for (int q = 0; q < n; q++) {
    if (!md->cand_n[q]) continue;
    const Op *o = &g->ops[q];
    int64_t written = o->workspace;
    for (int k = 0; k < o->noutputs; k++)
      if (!graph_is_resident(&g->tensors[o->outputs[k]])) written += g->tensors[o->outputs[k]].bytes;
    int nregen = 0;
    for (int k = 0; k < o->noutputs; k++) nregen += ilp_regen(md, o->outputs[k]);
    for (int c = 0; c < md->cand_n[q]; c++) {
      int j = md->cand_t[md->cand_first[q] + c], pq = ilp_pos_of_rerun(md, j, q);
      Lin e = ilp_eq(md, q, j);
      ilp_term(md, pq, pq, &e, written);
    }
    int first = ilp_pos_of_rerun(md, md->cand_t[md->cand_first[q]], q);
    for (int k = 0; k < o->noutputs; k++) {
      int v = o->outputs[k];
      if (!ilp_regen(md, v)) continue;
      const Tensor *tv = &g->tensors[v];
      Lin rv = tv->stashed ? ilp_var(md, md->colR[v]) : ilp_lin_const(1);
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
            Lin fct[2] = {ilp_started_before(md, q, p), rv};
            ilp_sig_add(md, sg, fct, nregen == 1 ? 1 : 2);
          }
          ilp_run_step(md, run, sg, p, tv->bytes);
        }
        ilp_run_flush(md, run, md->grp_comp[f] - 1, tv->bytes);
        ilp_term(md, md->grp_comp[f], md->grp_comp[lr], &rv, tv->bytes);
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
        Lin st = ilp_started_before(md, q, p);
        for (int cc = 0; md->pos_q[p] != q && cc < md->cons_n[v]; cc++) {
          Lin f3[3] = {st, ilp_at_or_after(md, md->cons[md->cons_first[v] + cc], p), rv};
          ilp_sig_add(md, sg, f3, 3);
        }
        ilp_run_step(md, run, sg, p, tv->bytes);
      }
      ilp_run_flush(md, run, lastp, tv->bytes);
    }
  }
}

static int cmp_event(const void *a, const void *b) {
  const Event *x = a, *y = b;
  if (x->pos != y->pos) return x->pos - y->pos;
  return x->col - y->col;
}

/* M[p] = M[p-1] + (what starts at p) - (what ended at p-1). */
void ilp_build_rows(Ilp *md, int64_t budget) {
  qsort(md->ev, (size_t)md->nev, sizeof(Event), cmp_event);
  md->mcol = util_xcalloc((size_t)md->npos + 1, sizeof(int));
  int *cols = util_xcalloc((size_t)md->nev + 2, sizeof(int));
  double *vals = util_xcalloc((size_t)md->nev + 2, sizeof(double));
  if (!md->mcol || !cols || !vals) {
    md->failed = true;
    free(cols), free(vals);
    return;
  }
  md->peak_col = md->min_memory ? ilp_new_col(md, 0, HUGE_VAL, 1, false) : -1;
  int e = 0;
  for (int p = 0; p < md->npos; p++) {
    md->mcol[p] = ilp_new_col(md, -HUGE_VAL, md->min_memory ? HUGE_VAL : (double)budget / ILP_UNIT, 0, false);
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
