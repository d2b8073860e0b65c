/*
 * homes.c - host homes of params and optimizer state as columns of the
 * ILP: per candidate tensor a binary H (its home on the host, one device
 * window) and, for a param the forward leaves unchanged, F (host-refetch,
 * two windows), with their exact device-memory terms, their copies on the
 * copy streams (queued with the offloaded activations' by ilp_eval_stalls)
 * and the compute their copies take on a device with copy_compute_share
 * (docs/PLANNING.md section 3, "Host homes"). The windows and copies are
 * the builder's static positions (plan_home_copies with every optimizer
 * op on the device), so a vector with homes has the simulator's peak to
 * the byte. Only the evaluated model has them (ilp_build_with_homes): a
 * solve decides the activations alone and plan_homes.c decides the homes.
 */
#include "ilp.h"

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
  ilp_early_need(md, t, &on, last_fwd, h->need[1], h->issue[1], bytes);
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

/* t's copies homed as `how` (h: plan_home_copies' answer): host's one
 * prefetch and its copy back; host-refetch adds its second window's
 * prefetch. */
static void add_copies(Ilp *md, int t, Decision how, const HomeCopies *h, int *cap) {
  double h2d = cost_h2d_seconds(md->d, md->g->tensors[t].bytes) * 1e6, d2h = cost_d2h_seconds(md->d, md->g->tensors[t].bytes) * 1e6;
  HomeCopy c[3];
  int stream[3], n = 0;
  if (how == DEC_HOST) {
    c[n] = (HomeCopy){t, h->issue[0], h->need[0], false, h2d}, stream[n++] = 1;
    c[n] = (HomeCopy){t, h->last_write, h->wait_op, false, d2h}, stream[n++] = 0;
  } else {
    c[n] = (HomeCopy){t, h->issue[1], h->need[1], true, h2d}, stream[n++] = 1;
  }
  for (int i = 0; i < n; i++) {
    int s = stream[i];
    if (!ilp_push((void **)&md->hcopy[s], md->nhcopy[s], &cap[s], sizeof(HomeCopy))) {
      md->failed = true;
      return;
    }
    md->hcopy[s][md->nhcopy[s]++] = c[i];
  }
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

void ilp_build_homes(Ilp *md) {
  const Graph *g = md->g;
  int n = g->ntensors;
  md->colH = util_xcalloc((size_t)n + 1, sizeof(int));
  md->colF = util_xcalloc((size_t)n + 1, sizeof(int));
  Decision *dec = util_xcalloc((size_t)n + 1, sizeof(Decision));
  if (!md->colH || !md->colF || !dec) {
    md->failed = true;
    free(dec);
    return;
  }
  for (int t = 0; t < n; t++) md->colH[t] = md->colF[t] = -1, dec[t] = DEC_NONE;
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
    int col = dec[t] == DEC_HOST ? md->colH[t] : dec[t] == DEC_HOST_REFETCH ? md->colF[t] : -1;
    if (col < 0) return -1; /* a home outside the columns, or the host optimizer */
    x[col] = 1;
  }
  return 0;
}

int64_t ilp_host_bytes(const Ilp *md, const double *x) {
  int64_t sum = 0;
  for (int t = 0; t < md->g->ntensors; t++) {
    double on = (md->colO[t] >= 0 ? x[md->colO[t]] : 0) + (md->colH[t] >= 0 ? x[md->colH[t]] : 0) +
                (md->colF[t] >= 0 ? x[md->colF[t]] : 0);
    if (on > 0.5) sum += plan_host_share(md->g, t);
  }
  return sum;
}

/* ------------------------------------------------------------ the search over homes */

/* How many evaluations the search over homes may spend per decision it
 * moves (stashed tensors and home columns), as a polish does per stashed
 * tensor: counted work, so the plan does not depend on the machine. */
#define HOMES_EVALS_PER_UNIT 16

/* The homes t may take in the model: device, host and, where it has the
 * column, host-refetch. How many, into alt. */
static int home_choices(const Ilp *md, int t, Decision *alt) {
  int n = 0;
  alt[n++] = DEC_NONE;
  alt[n++] = DEC_HOST;
  if (md->colF[t] >= 0) alt[n++] = DEC_HOST_REFETCH;
  return n;
}

/* First-improvement descent over single home changes. Whether best
 * improved. */
static bool home_moves(const Ilp *md, Candidate *best, int64_t limit, double *x, Decision *cur, long *evals, double deadline) {
  const Graph *g = md->g;
  bool improved = false;
  for (int t = 0; t < g->ntensors && *evals > 0 && util_now() < deadline; t++) {
    if (md->colH[t] < 0) continue;
    Decision alt[3];
    int na = home_choices(md, t, alt);
    for (int a = 0; a < na && *evals > 0; a++) {
      if (alt[a] == best->dec[t]) continue;
      memcpy(cur, best->dec, (size_t)g->ntensors * sizeof *cur);
      cur[t] = alt[a];
      double before = best->objective;
      (*evals)--;
      ilp_consider(md, best, cur, limit, x);
      improved |= best->objective < before - 1e-9;
    }
  }
  return improved;
}

/* The choices unit u (a stashed tensor or a home column) may take in the
 * model, into alt: how many (0: not a unit). */
static int unit_choices(const Ilp *md, int u, Decision *alt) {
  if (md->colH[u] >= 0) return home_choices(md, u, alt);
  if (md->colK[u] < 0) return 0;
  int n = 0;
  alt[n++] = DEC_KEEP;
  alt[n++] = DEC_RECOMPUTE;
  if (ilp_offload_allowed(md, u)) alt[n++] = DEC_OFFLOAD;
  return n;
}

/* A change that is faster but over the limit (a home back on the device,
 * its copies gone; a tensor kept instead of recomputed), paid for by one
 * other change that frees bytes: a kept tensor recomputed or offloaded,
 * or a home on the device moved to the host. The best such pair that fits
 * and is faster is taken. Neither change alone pays where the pair does:
 * one takes the memory the other gives up; the activations' exchanges
 * (search.c) pay with re-runs and offloads only. Whether best improved. */
static bool home_exchanges(const Ilp *md, Candidate *best, int64_t limit, double *x, Decision *cur, long *evals,
                           double deadline) {
  const Graph *g = md->g;
  int n = g->ntensors;
  Decision *top = util_xcalloc((size_t)n + 1, sizeof *top);
  double top_obj = best->objective;
  bool found = false;
  for (int t = 0; top && t < n && *evals > 0 && util_now() < deadline; t++) {
    Decision alt[3];
    int na = unit_choices(md, t, alt);
    for (int a = 0; a < na && *evals > 0; a++) {
      if (alt[a] == best->dec[t]) continue;
      memcpy(cur, best->dec, (size_t)n * sizeof *cur);
      cur[t] = alt[a];
      int64_t peak;
      double obj;
      (*evals)--;
      /* A gainer: faster, over the limit (what fits was the descent's). */
      if (ilp_eval_within(md, cur, x, top_obj - 1e-9, INT64_MAX, &peak, &obj) != 1 || peak <= limit) continue;
      for (int u = 0; u < n && *evals > 0; u++) {
        Decision pay[3];
        int np = u == t || (cur[u] != DEC_KEEP && cur[u] != DEC_NONE) ? 0 : unit_choices(md, u, pay);
        for (int k = 0; k < np && *evals > 0; k++) {
          if (pay[k] == DEC_NONE || pay[k] == DEC_KEEP) continue;
          cur[u] = pay[k];
          int64_t pk;
          double o;
          (*evals)--;
          if (ilp_host_fits(md, cur) && ilp_eval_within(md, cur, x, top_obj - 1e-9, limit, &pk, &o) == 1) {
            memcpy(top, cur, (size_t)n * sizeof *top);
            top_obj = o, found = true;
          }
        }
        cur[u] = best->dec[u];
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
  if (!best.ok) goto out; /* outside the model (the host optimizer), or over the budget */
  double start = best.objective;
  long units = g->nstashed;
  for (int t = 0; t < n; t++) units += md.colH[t] >= 0;
  long evals = HOMES_EVALS_PER_UNIT * units;
  /* The activations' descent and exchanges, then the homes', until
   * neither finds a faster vector within the budget. */
  for (bool moved = true; moved && evals > 0 && util_now() < deadline;) {
    double before = best.objective;
    ilp_improve(&md, &best, budget, x, deadline, evals, true);
    evals -= g->nstashed; /* the descent counts its own; its share of the whole */
    moved = home_moves(&md, &best, budget, x, cur, &evals, deadline) ||
            home_exchanges(&md, &best, budget, x, cur, &evals, deadline) || best.objective < before - 1e-9;
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
