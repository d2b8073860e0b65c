/*
 * homes.c - host homes of params and optimizer state as columns of the
 * ILP: per candidate tensor a binary H (its home on the host, one device
 * window) and, for a param the forward leaves unchanged, F (host-refetch,
 * two windows), with their exact device-memory terms (docs/PLANNING.md
 * section 3, "Host homes"). The windows are the builder's static positions
 * (plan_home_copies with every optimizer op on the device), so a vector
 * with homes has the simulator's peak to the byte. Only the evaluated
 * model has them (ilp_build_with_homes): the objective and the copy-stall
 * rows do not count a home's copies yet, so a solve decides the
 * activations alone and plan_homes.c decides the homes.
 */
#include "ilp.h"

#include <stdlib.h>

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
  /* A unified_memory device's host home is the same memory: nothing to
   * model (plan_homes.c never homes there either). */
  for (int t = 0; md->homes && !md->d->unified_memory && t < n; t++) {
    HomeCopies h;
    if (!modelled(md, t, DEC_HOST, dec, &h)) continue;
    md->colH[t] = ilp_new_col(md, 0, 1, 0, true);
    home_terms(md, t, DEC_HOST, &h, md->colH[t]);
    if (!modelled(md, t, DEC_HOST_REFETCH, dec, &h)) continue;
    md->colF[t] = ilp_new_col(md, 0, 1, 0, true);
    home_terms(md, t, DEC_HOST_REFETCH, &h, md->colF[t]);
    int cols[2] = {md->colH[t], md->colF[t]};
    double one[2] = {1, 1};
    if (milp_add_row(&md->m, 0, 1, 2, cols, one) < 0) md->failed = true;
  }
  free(dec);
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
