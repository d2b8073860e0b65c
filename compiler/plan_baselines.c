/*
 * plan_baselines.c - the strategies that training frameworks use today,
 * reimplemented over ration's schedule family so that the ILP is compared
 * with them on the same simulator and the same budget:
 *
 *   checkpoint-layers  keep each layer's inputs, recompute everything else
 *                      stashed inside the layer (Hugging Face's
 *                      gradient_checkpointing, torch.utils.checkpoint per block)
 *   sqrt-n             keep the inputs of every ceil(sqrt(L))-th layer only
 *                      (Chen et al. 2016, "Training deep nets with sublinear
 *                      memory cost")
 *   offload-all        every stashed tensor offloaded and prefetched
 *   knapsack           PyTorch's activation_memory_budget: a 0/1 knapsack
 *                      picks the saved set that maximises the recompute time
 *                      it avoids under a cap on saved activation bytes
 *
 * None of them looks at the real peak: their decisions are fixed by the
 * graph (and, for knapsack, by a byte cap on what is saved), and plan_make
 * then reports the plan infeasible when the simulated arena exceeds the
 * budget. That is what these methods do in practice and what the ILP fixes.
 */
#include "ration.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- layers */

/* Length of a layer prefix "lN" / "e1" / "d3" (letters then digits, before
 * the first '.'), the model generator's naming convention; 0 if none. */
static size_t layer_prefix(const char *name) {
  size_t i = 0;
  while (isalpha((unsigned char)name[i])) i++;
  if (i == 0 || !isdigit((unsigned char)name[i])) return 0;
  while (isdigit((unsigned char)name[i])) i++;
  return name[i] == '.' ? i : 0;
}

/* A forward activation after whose producer no other earlier activation is
 * read by a later forward op: the whole forward state passes through it,
 * like the residual stream between blocks. */
static void find_cuts(const Graph *g, bool *cut) {
  int last_fwd = -1;
  for (int i = 0; i < g->nops; i++)
    if (g->ops[i].phase == PHASE_FORWARD) last_fwd = i;
  /* reach[i] = the latest forward reader of any activation produced at or
   * before op i, excluding op i's own outputs; a prefix maximum. */
  int reach = -1;
  for (int i = 0; i <= last_fwd; i++) {
    const Op *o = &g->ops[i];
    if (o->phase != PHASE_FORWARD) continue;
    int own = -1, nact = 0, which = -1;
    for (int k = 0; k < o->noutputs; k++) {
      const Tensor *t = &g->tensors[o->outputs[k]];
      if (graph_is_resident(t) || t->last_fwd_read <= i) continue;
      nact++;
      which = o->outputs[k];
      if (t->last_fwd_read > own) own = t->last_fwd_read;
    }
    if (nact == 1 && reach <= i) cut[which] = true;
    if (own > reach) reach = own;
  }
}

/* Segment (layer) of every forward op, -1 for ops outside any layer; the
 * number of layers is returned. Named layers when the graph uses the
 * convention, else segments that start after each structural cut. */
static int find_layers(const Graph *g, int *seg) {
  int nlayers = 0;
  for (int i = 0; i < g->nops; i++) {
    seg[i] = -1;
    if (g->ops[i].phase != PHASE_FORWARD) continue;
    const char *name = g->ops[i].name;
    size_t len = layer_prefix(name);
    if (!len) continue;
    for (int j = 0; j < i && seg[i] < 0; j++)
      if (seg[j] >= 0 && layer_prefix(g->ops[j].name) == len && !strncmp(g->ops[j].name, name, len)) seg[i] = seg[j];
    if (seg[i] < 0) seg[i] = nlayers++;
  }
  if (nlayers > 0) return nlayers;
  bool *cut = util_xcalloc((size_t)g->ntensors, sizeof *cut);
  if (!cut) return -1;
  find_cuts(g, cut);
  for (int i = 0; i < g->nops; i++) {
    if (g->ops[i].phase != PHASE_FORWARD) continue;
    seg[i] = nlayers;
    for (int k = 0; k < g->ops[i].noutputs; k++)
      if (cut[g->ops[i].outputs[k]]) {
        nlayers++;
        break;
      }
  }
  free(cut);
  /* Ops after the last cut form a layer of their own. */
  for (int i = 0; i < g->nops; i++)
    if (seg[i] == nlayers) return nlayers + 1;
  return nlayers;
}

/* Keeps a stashed tensor when it leaves its layer (read by a forward op
 * of another segment, or of a layer in keep_layer) or lives outside layers;
 * recomputes the rest. keep_layer NULL means every layer keeps its inputs. */
static void decide_by_layers(const Graph *g, const int *seg, const bool *keep_layer, Decision *dec) {
  for (int s = 0; s < g->nstashed; s++) {
    int t = g->stashed[s];
    int home = seg[g->tensors[t].producer];
    bool keep = home < 0;
    for (int i = 0; i < g->nops && !keep; i++) {
      const Op *o = &g->ops[i];
      if (o->phase != PHASE_FORWARD || seg[i] == home) continue;
      bool reads = false;
      for (int k = 0; k < o->ninputs; k++) reads |= o->inputs[k] == t;
      if (reads && (seg[i] < 0 || !keep_layer || keep_layer[seg[i]])) keep = true;
    }
    dec[t] = keep ? DEC_KEEP : DEC_RECOMPUTE;
  }
}

int plan_decide_checkpoint_layers(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec,
                                  SolverInfo *si, Err *e) {
  (void)d, (void)o, (void)si;
  int *seg = util_xcalloc((size_t)g->nops, sizeof *seg);
  if (!seg || find_layers(g, seg) < 0) {
    free(seg);
    return err_set(e, "%s: out of memory", g->path);
  }
  decide_by_layers(g, seg, NULL, dec);
  free(seg);
  return 0;
}

int plan_decide_sqrt_n(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si,
                       Err *e) {
  (void)d, (void)o, (void)si;
  int *seg = util_xcalloc((size_t)g->nops, sizeof *seg);
  int nlayers = seg ? find_layers(g, seg) : -1;
  bool *keep_layer = nlayers >= 0 ? util_xcalloc((size_t)nlayers + 1, sizeof *keep_layer) : NULL;
  if (!keep_layer) {
    free(seg);
    return err_set(e, "%s: out of memory", g->path);
  }
  /* Segments of ceil(sqrt(L)) layers: about sqrt(L) checkpoints, and each
   * backward segment recomputes about sqrt(L) layers. */
  int every = (int)ceil(sqrt((double)nlayers));
  if (every < 1) every = 1;
  for (int l = 0; l < nlayers; l += every) keep_layer[l] = true;
  decide_by_layers(g, seg, keep_layer, dec);
  free(keep_layer);
  free(seg);
  return 0;
}

int plan_decide_offload_all(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si,
                            Err *e) {
  (void)d, (void)o, (void)si, (void)e;
  for (int s = 0; s < g->nstashed; s++) dec[g->stashed[s]] = DEC_OFFLOAD;
  return 0;
}

/* ----------------------------------------------------------- knapsack */

/* Byte weights are scaled to this many units (rounded up, so the cap is
 * never exceeded), as PyTorch's dp_knapsack quantizes memory. */
#define KNAPSACK_UNITS 2000

int plan_decide_knapsack(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si,
                         Err *e) {
  (void)si;
  /* Items are producer ops: re-running one regenerates all its outputs, so
   * its stashed outputs are saved or dropped together. */
  int n = 0;
  int *item_op = util_xcalloc((size_t)g->nstashed + 1, sizeof *item_op);
  int64_t *bytes = util_xcalloc((size_t)g->nstashed + 1, sizeof *bytes);
  if (!item_op || !bytes) {
    free(item_op);
    free(bytes);
    return err_set(e, "%s: out of memory", g->path);
  }
  int64_t stashed_total = 0;
  for (int s = 0; s < g->nstashed; s++) {
    int t = g->stashed[s], op = g->tensors[t].producer;
    if (n == 0 || item_op[n - 1] != op) item_op[n++] = op, bytes[n - 1] = 0;
    bytes[n - 1] += g->tensors[t].bytes;
    stashed_total += g->tensors[t].bytes;
  }
  /* The cap is on saved activation bytes, not on the peak: whatever keep-all
   * holds besides its stash is taken as fixed, and the stash gets the rest
   * of the budget. Recompute transients and backward buffers are not seen,
   * which is why the simulated peak can land over the budget. */
  int64_t keep_all = plan_keep_all_peak(g, d, e);
  int rc = -1;
  double *best = NULL;
  unsigned char *take = NULL;
  int *w = NULL;
  if (keep_all < 0) goto out;
  int64_t cap = o->budget_bytes - (keep_all - stashed_total);
  if (cap >= stashed_total) {
    for (int s = 0; s < g->nstashed; s++) dec[g->stashed[s]] = DEC_KEEP;
    rc = 0;
    goto out;
  }
  int units = cap > 0 ? KNAPSACK_UNITS : 0;
  best = util_xcalloc((size_t)units + 1, sizeof *best);
  take = util_xcalloc((size_t)n * ((size_t)units + 1), 1);
  w = util_xcalloc((size_t)n, sizeof *w);
  if (!best || !take || !w) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  for (int i = 0; i < n; i++) {
    double scaled = units ? ceil((double)bytes[i] * units / (double)cap) : 1;
    w[i] = scaled > units + 1 ? units + 1 : (int)scaled;
  }
  /* Classic DP over capacity, descending so each item is used once;
   * take[i][c] records the choice for the backtrack. */
  for (int i = 0; i < n; i++) {
    double value = cost_op_seconds(g, d, item_op[i]);
    for (int c = units; c >= w[i]; c--)
      if (best[c - w[i]] + value > best[c]) {
        best[c] = best[c - w[i]] + value;
        take[(size_t)i * ((size_t)units + 1) + (size_t)c] = 1;
      }
  }
  for (int s = 0; s < g->nstashed; s++) dec[g->stashed[s]] = DEC_RECOMPUTE;
  for (int i = n - 1, c = units; i >= 0; i--)
    if (take[(size_t)i * ((size_t)units + 1) + (size_t)c]) {
      c -= w[i];
      for (int s = 0; s < g->nstashed; s++)
        if (g->tensors[g->stashed[s]].producer == item_op[i]) dec[g->stashed[s]] = DEC_KEEP;
    }
  rc = 0;
out:
  free(item_op);
  free(bytes);
  free(best);
  free(take);
  free(w);
  return rc;
}
