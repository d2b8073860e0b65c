/*
 * info.c - `ration info`: what a graph asks of a device before any planning.
 * Counts, the bytes that are resident whatever the plan does, the stashed
 * bytes the planner decides about, the keep-all peak, a lower bound on the
 * peak of any plan, and the compute time on a device.
 */
#include "ration.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* The keep-all schedule has no copies, so its peak does not depend on the
 * device; without one, unit rates let the simulator run. */
static const Device unit_device = {
    .name = "none", .peak_tflops = {1, 1, 1, 1, 1, 1}, .hbm_gbps = 1, .h2d_gbps = 1, .d2h_gbps = 1};

int info_lower_bound(const Graph *g, int64_t *resident, int64_t *working_set, int *at_op) {
  int64_t res = 0, best = -1, best_res = 0, best_ws = 0;
  int best_op = -1;
  /* Resident bytes on the device at op i: res plus, from its start op on, a
   * grad's (plan_grad_start_op), which grad_from adds at that op. */
  int64_t *grad_from = util_xcalloc((size_t)g->nops + 1, sizeof *grad_from);
  if (!grad_from) return -1;
  for (int t = 0; t < g->ntensors; t++) {
    if (!graph_is_resident(&g->tensors[t])) continue;
    int z = plan_grad_start_op(g, t);
    *(z >= 0 ? &grad_from[z] : &res) += g->tensors[t].bytes;
  }
  /* An op's activation inputs, outputs and workspace are on the device
   * together while it runs; a tensor named twice counts once. */
  char *seen = util_xcalloc((size_t)g->ntensors, 1);
  if (!seen) {
    free(grad_from);
    return -1;
  }
  for (int i = 0; i < g->nops; i++) {
    const Op *op = &g->ops[i];
    int64_t ws = op->workspace;
    res += grad_from[i];
    for (int side = 0; side < 2; side++) {
      const int *ids = side ? op->outputs : op->inputs;
      int n = side ? op->noutputs : op->ninputs;
      for (int k = 0; k < n; k++) {
        const Tensor *t = &g->tensors[ids[k]];
        if (graph_is_resident(t) || seen[ids[k]]) continue;
        seen[ids[k]] = 1;
        ws += t->bytes;
      }
    }
    for (int side = 0; side < 2; side++) {
      const int *ids = side ? op->outputs : op->inputs;
      int n = side ? op->noutputs : op->ninputs;
      for (int k = 0; k < n; k++) seen[ids[k]] = 0;
    }
    if (res + ws > best) best = res + ws, best_res = res, best_ws = ws, best_op = i;
  }
  free(seen);
  free(grad_from);
  if (best_op < 0) best_res = res; /* no ops: every resident byte, no working set */
  *resident = best_res;
  *working_set = best_ws;
  *at_op = best_op;
  return 0;
}

static void line_bytes(Buf *out, const char *label, int64_t bytes) {
  char h[32];
  buf_printf(out, "  %-22s %12s  (%" PRId64 " bytes)\n", label, util_fmt_bytes(bytes, h, sizeof h), bytes);
}

int info_report(const Graph *g, const Device *d, Buf *out, Err *e) {
  int by_phase[PHASE_COUNT] = {0}, by_kind[KIND_COUNT] = {0};
  int64_t kind_bytes[KIND_COUNT] = {0}, stashed_bytes = 0;
  for (int i = 0; i < g->nops; i++) by_phase[g->ops[i].phase]++;
  for (int t = 0; t < g->ntensors; t++) {
    by_kind[g->tensors[t].kind]++;
    kind_bytes[g->tensors[t].kind] += g->tensors[t].bytes;
  }
  for (int i = 0; i < g->nstashed; i++) stashed_bytes += g->tensors[g->stashed[i]].bytes;
  int64_t resident, working, keep_all = plan_keep_all_peak(g, d ? d : &unit_device, e);
  int at_op;
  if (keep_all < 0) return -1;
  if (info_lower_bound(g, &resident, &working, &at_op)) return err_set(e, "%s: out of memory", g->path);

  buf_printf(out, "graph %s (%s)\n  sha256 %s\n", g->name, g->path, g->sha256);
  buf_printf(out, "ops %d:", g->nops);
  for (int p = 0; p < PHASE_COUNT; p++) buf_printf(out, " %s %d", graph_phase_name((Phase)p), by_phase[p]);
  buf_printf(out, "\ntensors %d:", g->ntensors);
  for (int k = 0; k < KIND_COUNT; k++) buf_printf(out, " %s %d", graph_kind_name((Kind)k), by_kind[k]);
  buf_printf(out, "\nbytes\n");
  line_bytes(out, "params", kind_bytes[KIND_PARAM]);
  line_bytes(out, "grads", kind_bytes[KIND_GRAD]);
  line_bytes(out, "optimizer state", kind_bytes[KIND_OPTSTATE]);
  line_bytes(out, "inputs", kind_bytes[KIND_INPUT]);
  line_bytes(out, "activations", kind_bytes[KIND_ACTIVATION]);
  char label[64];
  snprintf(label, sizeof label, "stashed (%d tensors)", g->nstashed);
  line_bytes(out, label, stashed_bytes);
  buf_printf(out, "peak\n");
  line_bytes(out, "keep-all", keep_all);
  line_bytes(out, "lower bound", resident + working);
  line_bytes(out, "  resident there", resident);
  const char *op = at_op >= 0 ? g->ops[at_op].name : "none";
  int fit = (int)util_utf8_prefix(op, sizeof label - sizeof "  largest op ()");
  snprintf(label, sizeof label, "  largest op (%.*s)", fit, op);
  line_bytes(out, label, working);
  if (d) {
    double by[PHASE_COUNT] = {0}, total = 0;
    for (int i = 0; i < g->nops; i++) {
      double s = cost_op_seconds(g, d, i);
      by[g->ops[i].phase] += s;
      total += s;
    }
    char h[32];
    buf_printf(out, "device %s (%s): memory %s", d->name, d->path ? d->path : "", util_fmt_bytes(d->memory, h, sizeof h));
    buf_printf(out, ", budget %s", util_fmt_bytes(d->memory - d->reserve, h, sizeof h));
    if (d->unified_memory) buf_printf(out, ", host memory the same (unified_memory)");
    else if (d->host_memory > 0) buf_printf(out, ", host memory %s", util_fmt_bytes(d->host_memory, h, sizeof h));
    buf_printf(out, "\n");
    buf_printf(out, "  compute time %.6g s:", total);
    for (int p = 0; p < PHASE_COUNT; p++) buf_printf(out, " %s %.6g s", graph_phase_name((Phase)p), by[p]);
    buf_printf(out, "\n");
  }
  return out->failed ? err_set(e, "%s: out of memory", g->path) : 0;
}
