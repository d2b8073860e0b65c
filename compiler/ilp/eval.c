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
 * every other column 0; rerun and need (nops and ntensors) get
 * plan_family_positions' answer. -1 when the decisions re-run an op
 * outside its candidates (cannot happen for the full candidate sets) or
 * are incomplete. */
static int eval_decisions(const Ilp *md, const Decision *dec, double *x, int *rerun, int *need) {
  const Graph *g = md->g;
  if (plan_family_positions(g, dec, rerun, need)) return -1;
  memset(x, 0, (size_t)md->m.ncols * sizeof(double));
  for (int t = 0; t < g->ntensors; t++) {
    if (md->colK[t] < 0) continue;
    x[md->colK[t]] = dec[t] == DEC_KEEP;
    x[md->colR[t]] = dec[t] == DEC_RECOMPUTE;
    x[md->colO[t]] = dec[t] == DEC_OFFLOAD;
  }
  if (ilp_eval_homes(md, dec, x)) return -1;
  for (int q = 0; q < g->nops; q++) {
    if (rerun[q] >= 0) {
      int c = ilp_cand_le(md, q, rerun[q]);
      if (c < 0 || md->cand_t[md->cand_first[q] + c] != rerun[q]) return -1;
    }
    for (int c = 0; c < md->cand_n[q]; c++)
      x[md->ycol[md->cand_first[q] + c]] = rerun[q] >= 0 && rerun[q] <= md->cand_t[md->cand_first[q] + c];
  }
  return 0;
}

/* A product column's value: every factor is 0 or 1 here, so an AND ends
 * at its first 0 and an OR at its first 1. */
static bool prod_value(const Ilp *md, const Prod *pr, const double *x) {
  bool and = pr->nf > 0, v = and;
  for (int f = pr->first, end = f + (and ? pr->nf : -pr->nf); f < end && v == and; f++) {
    double sum = md->fac_k[f];
    for (int j = md->fac_first[f]; j < md->fac_first[f + 1]; j++) sum += md->fac_c[j] * x[md->fac_col[j]];
    v = sum > 0.5;
  }
  return v;
}

/* The product columns, then the running sum M[p] of the memory rows and
 * their peak; the sum stops as soon as it is over cap (the peak then is
 * only known to be over it). Products in creation order: factors only use
 * earlier columns. live (npos, or NULL) gets each position's live bytes
 * when the sum runs to the end. */
static int64_t eval_peak(const Ilp *md, double *x, int64_t cap, int64_t *live_at) {
  for (int i = 0; i < md->nprod; i++) x[md->prod[i].col] = prod_value(md, &md->prod[i], x);
  int64_t live = 0, best = INT64_MIN;
  for (int p = 0; p < md->npos; p++) {
    live += md->pos_const[p];
    /* Without a branch: x is 0 or 1, so which way it goes is a coin flip. */
    for (int e = md->pos_ev_first[p]; e < md->pos_ev_first[p + 1]; e++) live += md->pev_bytes[e] & -(int64_t)(x[md->pev_col[e]] > 0.5);
    x[md->mcol[p]] = (double)live / ILP_UNIT;
    if (live_at) live_at[p] = live;
    if (live > best) best = live;
    if (best > cap) return best;
  }
  if (md->peak_col >= 0) x[md->peak_col] = (double)best / ILP_UNIT;
  return best;
}

/* Every column's value for one decision vector, and the peak of the rows;
 * -1 as eval_decisions. */
int ilp_eval(const Ilp *md, const Decision *dec, double *x, int64_t *peak) {
  const Graph *g = md->g;
  int *rerun = util_xcalloc((size_t)g->nops + 1, sizeof(int)), *need = util_xcalloc((size_t)g->ntensors + 1, sizeof(int));
  int rc = !rerun || !need || eval_decisions(md, dec, x, rerun, need) ? -1 : 0;
  if (rc == 0) {
    ilp_eval_stalls(md, dec, rerun, STALL_ROWS | STALL_QUEUES, HUGE_VAL, x);
    *peak = eval_peak(md, x, INT64_MAX, NULL);
  }
  free(rerun), free(need);
  return rc;
}

/* ------------------------------------------------------------ incremental evaluation */

/* The descent, the exchanges, the pairs and the repair try vectors one or
 * a few decisions away from each other; evaluated whole, each costs every
 * product, event and position of the model (llama80: 38,742 products,
 * 116,215 events, 18,426 positions). Here a vector is evaluated from a
 * base vector evaluated whole: the changed decisions' columns, the re-run
 * columns Y of the ops whose re-run moved, the products those reach (in
 * creation order, through an index of each column's readers), the live
 * bytes only where those columns have memory events (the base's live
 * bytes between them, by range maxima), and the stalls only when the set
 * of offloaded tensors or the homes changed (the stalls read nothing
 * else). In the model with homes a home or host optimizer is a change of
 * its H, F and X columns like any other (until 2026-11-29 every vector
 * whose homes differed from the base's was evaluated whole and became the
 * base: the search over homes took a quarter of gpt2-124m's CPU at its
 * smallest budget, 2.6 of 10.6 s; now 0.23 s). Integer bytes and the
 * same objective sum make every answer bit for bit the whole evaluation's
 * (test_ilp compares them over random move sequences). A vector more than
 * ILP_EVAL_NEAR decisions from the base is evaluated whole and becomes the
 * base. */
#define ILP_EVAL_NEAR 16

typedef struct LiveDelta {
  int pos;
  int64_t bytes;
} LiveDelta;

typedef struct Undo {
  int col;
  double was;
} Undo;

struct EvalCache {
  bool indexed, based;
  bool host_ops; /* the base runs optimizer ops on the host */
  int *dep_first, *dep;                /* per column: the products with a factor reading it */
  int *evc_first, *evc_pos;            /* per column: its memory events' positions and bytes */
  int64_t *evc_bytes;
  int *lg;                             /* floor(log2(n)) for n <= npos */
  Decision *dec;                       /* the base */
  double *x;                           /* its columns, the query's while one runs (undone after) */
  int *rerun, *rerun_q, *need;         /* its re-run positions, the query's, scratch of need_op */
  int64_t *live, *range_max;           /* its live bytes; range_max[k * npos + p]: the most over [p, p + 2^k) */
  int *changed, nchanged;              /* the query's tensors that differ from the base */
  Undo *undo;                          /* the query's column changes, to undo */
  int nundo, cap_undo;
  int *heap, nheap;                    /* products to evaluate again, least first */
  char *queued;
  LiveDelta *delta, *spare;            /* the query's live-byte changes; the sort's scratch */
  int ndelta, cap_delta, cap_spare;
  bool failed;
};

EvalCache *ilp_eval_cache_new(void) { return util_xcalloc(1, sizeof(EvalCache)); }

void ilp_eval_cache_free(EvalCache *c) {
  if (!c) return;
  free(c->dep_first), free(c->dep), free(c->evc_first), free(c->evc_pos), free(c->evc_bytes), free(c->lg);
  free(c->dec), free(c->x), free(c->rerun), free(c->need), free(c->rerun_q), free(c->live), free(c->range_max);
  free(c->changed), free(c->undo), free(c->heap), free(c->queued), free(c->delta), free(c->spare);
  free(c);
}

/* first[c] .. first[c + 1] of a column-major list from (col, item) pairs
 * given twice by walk (once to count, once to fill). */
typedef void (*PairWalk)(const Ilp *md, int *first, int *fill, int *items, int64_t *bytes);

static void walk_readers(const Ilp *md, int *first, int *fill, int *items, int64_t *bytes) {
  (void)bytes;
  for (int i = 0; i < md->nprod; i++) {
    const Prod *pr = &md->prod[i];
    int nf = pr->nf > 0 ? pr->nf : -pr->nf;
    for (int j = md->fac_first[pr->first]; j < md->fac_first[pr->first + nf]; j++) {
      int col = md->fac_col[j];
      if (!items) first[col + 1]++;
      else items[first[col] + fill[col]++] = i;
    }
  }
}

static void walk_events(const Ilp *md, int *first, int *fill, int *items, int64_t *bytes) {
  for (int p = 0; p < md->npos; p++)
    for (int e = md->pos_ev_first[p]; e < md->pos_ev_first[p + 1]; e++) {
      int col = md->pev_col[e];
      if (!items) {
        first[col + 1]++;
        continue;
      }
      bytes[first[col] + fill[col]] = md->pev_bytes[e];
      items[first[col] + fill[col]++] = p;
    }
}

static bool index_pairs(const Ilp *md, PairWalk walk, int **first, int **items, int64_t **bytes) {
  int nc = md->m.ncols;
  *first = util_xcalloc((size_t)nc + 2, sizeof(int));
  int *fill = util_xcalloc((size_t)nc + 1, sizeof(int));
  bool ok = *first && fill;
  if (ok) {
    walk(md, *first, fill, NULL, NULL);
    for (int c = 0; c < nc; c++) (*first)[c + 1] += (*first)[c];
    *items = util_xcalloc((size_t)(*first)[nc] + 1, sizeof(int));
    if (bytes) *bytes = util_xcalloc((size_t)(*first)[nc] + 1, sizeof(int64_t));
    ok = *items && (!bytes || *bytes);
    if (ok) walk(md, *first, fill, *items, bytes ? *bytes : NULL);
  }
  free(fill);
  return ok;
}

static bool cache_index(const Ilp *md, EvalCache *c) {
  const Graph *g = md->g;
  int np = md->npos, levels = 1;
  while ((1 << levels) <= np) levels++;
  c->lg = util_xcalloc((size_t)np + 2, sizeof(int));
  c->dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  c->x = util_xcalloc((size_t)md->m.ncols + 1, sizeof(double));
  c->rerun = util_xcalloc((size_t)g->nops + 1, sizeof(int));
  c->rerun_q = util_xcalloc((size_t)g->nops + 1, sizeof(int));
  c->need = util_xcalloc((size_t)g->ntensors + 1, sizeof(int));
  c->live = util_xcalloc((size_t)np + 1, sizeof(int64_t));
  c->range_max = util_xcalloc((size_t)np * (size_t)levels + 1, sizeof(int64_t));
  c->changed = util_xcalloc((size_t)ILP_EVAL_NEAR + 1, sizeof(int));
  c->heap = util_xcalloc((size_t)md->nprod + 1, sizeof(int));
  c->queued = util_xcalloc((size_t)md->nprod + 1, 1);
  if (!c->lg || !c->dec || !c->x || !c->rerun || !c->rerun_q || !c->need || !c->live || !c->range_max || !c->changed ||
      !c->heap || !c->queued || !index_pairs(md, walk_readers, &c->dep_first, &c->dep, NULL) ||
      !index_pairs(md, walk_events, &c->evc_first, &c->evc_pos, &c->evc_bytes))
    return false;
  for (int n = 2; n <= np; n++) c->lg[n] = c->lg[n / 2] + 1;
  c->indexed = true;
  return true;
}

/* The base's range maxima: level k holds the most over 2^k positions. */
static void build_range_max(const Ilp *md, EvalCache *c) {
  int np = md->npos;
  memcpy(c->range_max, c->live, (size_t)np * sizeof(int64_t));
  for (int k = 1; (1 << k) <= np; k++) {
    const int64_t *lo = c->range_max + (size_t)(k - 1) * np;
    int64_t *at = c->range_max + (size_t)k * np;
    for (int p = 0; p + (1 << k) <= np; p++) at[p] = lo[p] > lo[p + (1 << (k - 1))] ? lo[p] : lo[p + (1 << (k - 1))];
  }
}

static int64_t range_max(const Ilp *md, const EvalCache *c, int p0, int p1) {
  int k = c->lg[p1 - p0 + 1];
  const int64_t *at = c->range_max + (size_t)k * md->npos;
  return at[p0] > at[p1 - (1 << k) + 1] ? at[p0] : at[p1 - (1 << k) + 1];
}

static int rebase(const Ilp *md, EvalCache *c, const Decision *dec) {
  c->based = false;
  if (eval_decisions(md, dec, c->x, c->rerun, c->need)) return -1;
  ilp_eval_stalls(md, dec, c->rerun, STALL_ROWS | STALL_QUEUES, HUGE_VAL, c->x);
  eval_peak(md, c->x, INT64_MAX, c->live);
  c->host_ops = false;
  for (int t = 0; t < md->g->ntensors; t++) c->host_ops |= dec[t] == DEC_HOST_OPTIMIZER;
  build_range_max(md, c);
  memcpy(c->dec, dec, (size_t)md->g->ntensors * sizeof(Decision));
  c->based = true;
  return 0;
}

/* Whether t's decision is a home's (or a host optimizer's) with columns:
 * a resident tensor in the model with homes, with an H or an X column. */
static bool home_unit(const Ilp *md, int t) {
  return md->homes && graph_is_resident(&md->g->tensors[t]) && (md->colH[t] >= 0 || md->colX[t] >= 0);
}

/* The tensors where dec differs from the base, into c->changed; false when
 * there is no base, more than ILP_EVAL_NEAR differ, or one without
 * decision columns does. */
static bool near_base(const Ilp *md, EvalCache *c, const Decision *dec) {
  c->nchanged = 0;
  if (!c->based) return false;
  for (int t = 0; t < md->g->ntensors; t++) {
    if (dec[t] == c->dec[t]) continue;
    if ((md->colK[t] < 0 && !home_unit(md, t)) || c->nchanged == ILP_EVAL_NEAR) return false;
    c->changed[c->nchanged++] = t;
  }
  return true;
}

/* Home unit t's column that decision v sets, as ilp_eval_homes reads it:
 * -1 for none (the device), -2 for one outside the columns. */
static int home_col(const Ilp *md, int t, Decision v) {
  if (v == DEC_NONE || v == DEC_KEEP) return -1;
  int col = v == DEC_HOST ? md->colH[t] : v == DEC_HOST_REFETCH ? md->colF[t] : md->colX[t];
  return col < 0 ? -2 : col;
}

static void heap_push(EvalCache *c, int i) {
  if (c->queued[i]) return;
  c->queued[i] = 1;
  int k = c->nheap++;
  for (; k > 0 && c->heap[(k - 1) / 2] > i; k = (k - 1) / 2) c->heap[k] = c->heap[(k - 1) / 2];
  c->heap[k] = i;
}

static int heap_pop(EvalCache *c) {
  int top = c->heap[0], last = c->heap[--c->nheap], k = 0;
  for (;;) {
    int child = 2 * k + 1;
    if (child >= c->nheap) break;
    if (child + 1 < c->nheap && c->heap[child + 1] < c->heap[child]) child++;
    if (c->heap[child] >= last) break;
    c->heap[k] = c->heap[child];
    k = child;
  }
  if (c->nheap) c->heap[k] = last;
  c->queued[top] = 0;
  return top;
}

/* One column of the query: logged for the undo; where it crosses 1/2 its
 * memory events change the live bytes and its readers are evaluated again. */
static void set_col(EvalCache *c, int col, double v) {
  double was = c->x[col];
  if (was == v) return;
  if (!ilp_push((void **)&c->undo, c->nundo, &c->cap_undo, sizeof(Undo))) {
    c->failed = true;
    return;
  }
  c->undo[c->nundo++] = (Undo){col, was};
  c->x[col] = v;
  if ((was > 0.5) == (v > 0.5)) return;
  for (int e = c->evc_first[col]; e < c->evc_first[col + 1]; e++) {
    if (!ilp_push((void **)&c->delta, c->ndelta, &c->cap_delta, sizeof(LiveDelta))) {
      c->failed = true;
      return;
    }
    c->delta[c->ndelta++] = (LiveDelta){c->evc_pos[e], v > 0.5 ? c->evc_bytes[e] : -c->evc_bytes[e]};
  }
  for (int r = c->dep_first[col]; r < c->dep_first[col + 1]; r++) heap_push(c, c->dep[r]);
}

static void undo(EvalCache *c) {
  while (c->nundo > 0) c->nundo--, c->x[c->undo[c->nundo].col] = c->undo[c->nundo].was;
  while (c->nheap > 0) heap_pop(c);
  c->ndelta = 0;
}

/* The deltas by position: runs of 16 by insertion, then merged pairwise
 * through the spare array (a query has about 200: qsort's calls through
 * its comparison were 3% of gpt2-124m's midpoint). Equal positions may come
 * in any order: the peak sums them all before it compares. False when the
 * spare array cannot grow. */
#define ILP_DELTA_RUN 16

static bool sort_deltas(EvalCache *c) {
  int n = c->ndelta;
  LiveDelta *a = c->delta;
  for (int lo = 0; lo < n; lo += ILP_DELTA_RUN)
    for (int i = lo + 1; i < n && i < lo + ILP_DELTA_RUN; i++) {
      LiveDelta v = a[i];
      int j = i;
      for (; j > lo && a[j - 1].pos > v.pos; j--) a[j] = a[j - 1];
      a[j] = v;
    }
  if (n <= ILP_DELTA_RUN) return true;
  if (c->cap_spare < n) {
    LiveDelta *grown = realloc(c->spare, (size_t)n * sizeof *grown);
    if (!grown) return false;
    c->spare = grown, c->cap_spare = n;
  }
  LiveDelta *from = a, *to = c->spare;
  for (int width = ILP_DELTA_RUN; width < n; width *= 2) {
    for (int lo = 0; lo < n; lo += 2 * width) {
      int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n, i = lo, j = mid, k = lo;
      while (i < mid && j < hi) to[k++] = from[j].pos < from[i].pos ? from[j++] : from[i++];
      while (i < mid) to[k++] = from[i++];
      while (j < hi) to[k++] = from[j++];
    }
    LiveDelta *t = from;
    from = to, to = t;
  }
  if (from != a) memcpy(a, from, (size_t)n * sizeof *a);
  return true;
}

/* The query's peak: the base's live bytes plus the running sum of the
 * deltas (sorted), constant between two delta positions. */
static int64_t query_peak(const Ilp *md, EvalCache *c) {
  int64_t best = INT64_MIN, shift = 0;
  int from = 0;
  for (int i = 0; i < c->ndelta;) {
    int p = c->delta[i].pos;
    if (p > from) {
      int64_t v = range_max(md, c, from, p - 1) + shift;
      if (v > best) best = v;
    }
    for (; i < c->ndelta && c->delta[i].pos == p; i++) shift += c->delta[i].bytes;
    from = p;
  }
  int64_t v = range_max(md, c, from, md->npos - 1) + shift;
  return v > best ? v : best;
}

/* The query dec (near_base true): its changed columns onto the base's,
 * its products, peak, stalls and objective, then undone. 1, 0 or -1 as
 * ilp_eval_within. */
static int query(const Ilp *md, EvalCache *c, const Decision *dec, double *x, double obj_cap, int64_t peak_cap,
                 int64_t *peak, double *obj) {
  const Graph *g = md->g;
  bool offloads_moved = false, offloads_grew = true, reruns_moved = false, homes_moved = false;
  int rc = -1;
  for (int i = 0; i < c->nchanged; i++) {
    int t = c->changed[i];
    if (md->colK[t] < 0) {
      if (home_col(md, t, dec[t]) == -2) return -1;
      homes_moved = true;
      continue;
    }
    if (dec[t] != DEC_KEEP && dec[t] != DEC_RECOMPUTE && dec[t] != DEC_OFFLOAD) return -1;
    reruns_moved |= (dec[t] == DEC_RECOMPUTE) != (c->dec[t] == DEC_RECOMPUTE);
  }
  /* A host optimizer's operands host-homed, as ilp_eval_homes checks. */
  for (int t = 0; homes_moved && t < g->ntensors; t++)
    if (md->xneed[t] >= 0 && dec[md->xneed[t]] == DEC_HOST_OPTIMIZER && dec[t] != DEC_HOST &&
        (dec[t] != DEC_HOST_REFETCH || md->xhost[t]))
      return -1;
  /* The re-runs follow the recomputed set alone (a kept or offloaded
   * tensor never demands one: plan_family_positions). */
  if (reruns_moved && plan_family_positions(g, dec, c->rerun_q, c->need)) return -1;
  for (int i = 0; i < c->nchanged; i++) {
    int t = c->changed[i];
    if (md->colK[t] < 0) {
      int col = home_col(md, t, dec[t]), cols[3] = {md->colH[t], md->colF[t], md->colX[t]};
      for (int k = 0; k < 3; k++)
        if (cols[k] >= 0) set_col(c, cols[k], cols[k] == col);
      continue;
    }
    set_col(c, md->colK[t], dec[t] == DEC_KEEP);
    set_col(c, md->colR[t], dec[t] == DEC_RECOMPUTE);
    set_col(c, md->colO[t], dec[t] == DEC_OFFLOAD);
    offloads_moved |= (dec[t] == DEC_OFFLOAD) != (c->dec[t] == DEC_OFFLOAD);
    offloads_grew &= dec[t] == DEC_OFFLOAD || c->dec[t] != DEC_OFFLOAD;
  }
  for (int q = 0; reruns_moved && q < g->nops; q++) {
    int r = c->rerun_q[q];
    if (r == c->rerun[q]) continue;
    if (r >= 0) {
      int k = ilp_cand_le(md, q, r);
      if (k < 0 || md->cand_t[md->cand_first[q] + k] != r) goto out;
    }
    for (int k = 0; k < md->cand_n[q]; k++)
      set_col(c, md->ycol[md->cand_first[q] + k], r >= 0 && r <= md->cand_t[md->cand_first[q] + k]);
  }
  while (c->nheap > 0) {
    const Prod *pr = &md->prod[heap_pop(c)];
    set_col(c, pr->col, prod_value(md, pr, c->x));
  }
  if (c->failed || !sort_deltas(c)) goto out;
  *peak = query_peak(md, c);
  rc = 0;
  if (*peak > peak_cap) goto out;
  if (obj) {
    if (md->peak_col >= 0) set_col(c, md->peak_col, (double)*peak / ILP_UNIT);
    /* The stalls enter the objective through the last op's Q alone, which
     * only grows with the set of offloaded tensors (every copy delays the
     * others, every window sum grows): at least the base's where the set
     * grew, else at least 0. Not where copies take a share of the compute
     * stream: each added copy then also moves the later due ops, so the
     * others' lateness, and Q, can fall (its share is in the objective
     * through the offload's own column). Nor where ops run on the host:
     * the host stream's end is in Q, and the re-runs before it move it
     * too. A vector already at the cap by that bound is at it (rounding
     * is monotone). */
    int last = md->col_q ? md->col_q[g->nops - 1] : -1;
    if ((offloads_moved || homes_moved || (reruns_moved && c->host_ops)) && last >= 0) {
      if (!offloads_grew || md->d->copy_compute_share > 0 || c->host_ops || homes_moved) set_col(c, last, 0);
      double lower = c->x[last], coef = md->m.obj[last], at_lower = ilp_objective_of(md, c->x);
      if (!c->failed && at_lower >= obj_cap) goto out;
      /* The pass may stop once Q alone takes the objective to the cap; the
       * objective at that Q, summed whole, then decides (where rounding
       * leaves it short of the cap, the pass runs again to the end). */
      const int *rerun = reruns_moved ? c->rerun_q : c->rerun;
      double stop_at = coef > 0 ? lower + (obj_cap - at_lower) / coef : HUGE_VAL;
      double q = ilp_eval_stalls(md, dec, rerun, STALL_ROWS | STALL_QUEUES, stop_at, x);
      set_col(c, last, q);
      if (q >= stop_at) {
        if (!c->failed && ilp_objective_of(md, c->x) >= obj_cap) goto out;
        set_col(c, last, ilp_eval_stalls(md, dec, rerun, STALL_ROWS | STALL_QUEUES, HUGE_VAL, x));
      }
    }
    if (c->failed) {
      rc = -1;
      goto out;
    }
    *obj = ilp_objective_of(md, c->x);
  }
  rc = !obj || *obj < obj_cap;
out:
  undo(c);
  return rc;
}

int ilp_eval_within(const Ilp *md, const Decision *dec, double *x, double obj_cap, int64_t peak_cap, int64_t *peak,
                    double *obj) {
  EvalCache *c = md->cache;
  if (c->failed || (!c->indexed && !cache_index(md, c))) {
    c->failed = true;
    return -1;
  }
  if (!near_base(md, c, dec) && rebase(md, c, dec)) return -1;
  return query(md, c, dec, x, obj_cap, peak_cap, peak, obj);
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
  ilp_eval_stalls(&md, dec, NULL, STALL_ROWS, HUGE_VAL, x);
  *rows_us = x[last];
  ilp_eval_stalls(&md, dec, NULL, STALL_QUEUES, HUGE_VAL, x);
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

/* dec evaluated whole in the model with homes at the planner's depth,
 * as a plan is judged: the objective (us) and the host row's bytes; false
 * outside the model or out of memory. */
static bool eval_judged(const Graph *g, const Device *d, const Decision *dec, double *objective, int64_t *host) {
  Ilp md;
  Err e;
  bool ok = false;
  if (ilp_build_with_homes(&md, g, d, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, &e)) return false;
  double *x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  int64_t peak;
  if (x && ilp_eval(&md, dec, x, &peak) == 0) *objective = ilp_objective_of(&md, x), *host = ilp_host_bytes(&md, x), ok = true;
  free(x);
  ilp_free(&md);
  return ok;
}

double plan_ilp_objective(const Graph *g, const Device *d, const Decision *dec) {
  double v;
  int64_t host;
  return eval_judged(g, d, dec, &v, &host) ? v : -1;
}

int64_t plan_ilp_host_bytes(const Graph *g, const Device *d, const Decision *dec) {
  double v;
  int64_t host;
  return eval_judged(g, d, dec, &v, &host) ? host : -1;
}

/* One vector's incremental answers agree with the whole evaluation's
 * (rf, pf, of): the peak and objective bit for bit, and at caps just
 * below, at and just above them. */
static bool incremental_agrees(const Ilp *md, const Decision *dec, double *x, int rf, int64_t pf, double of) {
  int64_t pk;
  double o;
  int ri = ilp_eval_within(md, dec, x, HUGE_VAL, INT64_MAX, &pk, &o);
  if (rf) return ri == -1;
  if (ri != 1 || pk != pf || memcmp(&o, &of, sizeof o)) return false;
  return ilp_eval_within(md, dec, x, HUGE_VAL, pf - 1, &pk, &o) == 0 && ilp_eval_within(md, dec, x, of, INT64_MAX, &pk, &o) == 0 &&
         ilp_eval_within(md, dec, x, nextafter(of, HUGE_VAL), pf, &pk, &o) == 1 && ilp_eval_within(md, dec, x, 0, pf, &pk, NULL) == 1;
}

int plan_ilp_eval_check(const Graph *g, const Device *d, PlanIlpModel model, const Decision *decs, int n, int *differ,
                        Err *e) {
  Ilp md;
  int depth = g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH;
  if (model == PLAN_ILP_WITH_HOMES ? ilp_build_with_homes(&md, g, d, depth, e)
                                   : ilp_build(&md, g, d, INT64_MAX / 4, model == PLAN_ILP_MEMORY, depth, e))
    return -1;
  double *x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double)), *whole = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  int rc = x && whole ? 0 : err_set(e, "%s: out of memory", g->path);
  *differ = 0;
  for (int i = 0; rc == 0 && i < n; i++) {
    const Decision *dec = decs + (size_t)i * (size_t)g->ntensors;
    int64_t pf = 0;
    int rf = ilp_eval(&md, dec, whole, &pf);
    *differ += !incremental_agrees(&md, dec, x, rf, pf, rf ? 0 : ilp_objective_of(&md, whole));
  }
  free(x), free(whole);
  ilp_free(&md);
  return rc;
}
