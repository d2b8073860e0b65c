/*
 * emit_json.c - writes NAME.plan.json (ration-plan/1): what the planner
 * decided, for tools and checks. One buffer and one step per line so that a
 * checked-in plan diffs readably; byte-identical for identical inputs.
 */
#include "ration.h"

#include <inttypes.h>
#include <stdio.h>

void emit_json_string(Buf *out, const char *s) {
  buf_printf(out, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') buf_printf(out, "\\%c", *c);
    else if (*c < 0x20) buf_printf(out, "\\u%04x", *c);
    else buf_printf(out, "%c", *c);
  }
  buf_printf(out, "\"");
}

static void emit_ids(Buf *out, const int *ids, int n) {
  buf_printf(out, "[");
  for (int k = 0; k < n; k++) buf_printf(out, "%s%d", k ? ", " : "", ids[k]);
  buf_printf(out, "]");
}

int emit_plan_json(const Plan *p, const Graph *g, Buf *out) {
  buf_printf(out, "{\n  \"format\": \"ration-plan/1\",\n  \"graph\": {\"name\": ");
  emit_json_string(out, p->graph_name);
  buf_printf(out, ", \"sha256\": \"%s\"},\n  \"device\": ", p->graph_sha256);
  emit_json_string(out, p->device);
  buf_printf(out, ", \"strategy\": ");
  emit_json_string(out, p->strategy);
  buf_printf(out, ",\n  \"budget_bytes\": %" PRId64 ", \"arena_bytes\": %" PRId64 ", \"host_bytes\": %" PRId64
                  ", \"alignment\": %" PRId64 ",\n",
             p->budget_bytes, p->arena_bytes, p->host_bytes, p->alignment);
  const Predicted *pr = &p->predicted;
  buf_printf(out,
             "  \"predicted\": {\"step_seconds\": %.9g, \"compute_seconds\": %.9g, \"recompute_seconds\": %.9g, "
             "\"stall_seconds\": %.9g, \"peak_live_bytes\": %" PRId64 ", \"keep_all_peak_bytes\": %" PRId64 "},\n",
             pr->step_seconds, pr->compute_seconds, pr->recompute_seconds, pr->stall_seconds, pr->peak_live_bytes,
             pr->keep_all_peak_bytes);
  const SolverInfo *si = &p->solver;
  buf_printf(out, "  \"solver\": {\"name\": ");
  emit_json_string(out, si->name);
  buf_printf(out, ", \"status\": ");
  emit_json_string(out, si->status);
  buf_printf(out,
             ", \"objective\": %.9g, \"bound\": %.9g, \"gap\": %.9g, \"seconds\": %.3f, \"simplex_iterations\": %" PRId64
             ", \"nodes\": %" PRId64 "},\n",
             si->objective, si->bound, si->gap, si->seconds, si->simplex_iterations, si->nodes);
  buf_printf(out, "  \"decisions\": {");
  /* A plan read from a file may leave tensors undecided: they stay unlisted. */
  int listed = 0;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (p->decisions[t] == DEC_NONE) continue;
    buf_printf(out, "%s\n    ", listed++ ? "," : "");
    emit_json_string(out, g->tensors[t].name);
    buf_printf(out, ": \"%s\"", plan_decision_name(p->decisions[t]));
  }
  /* Host-homed resident tensors; the others are on the device, as before. */
  for (int t = 0; t < g->ntensors; t++) {
    if (!graph_is_resident(&g->tensors[t]) || p->decisions[t] == DEC_NONE) continue;
    buf_printf(out, "%s\n    ", listed++ ? "," : "");
    emit_json_string(out, g->tensors[t].name);
    buf_printf(out, ": \"%s\"", plan_decision_name(p->decisions[t]));
  }
  buf_printf(out, "%s},\n  \"buffers\": [", listed ? "\n  " : "");
  for (int b = 0; b < p->nbuffers; b++) {
    const Buffer *bf = &p->buffers[b];
    buf_printf(out, "%s\n    {\"id\": %d, \"tensor\": ", b ? "," : "", b);
    if (bf->tensor >= 0) emit_json_string(out, g->tensors[bf->tensor].name);
    else {
      buf_printf(out, "null, \"workspace_of\": ");
      emit_json_string(out, g->ops[bf->workspace_of].name);
    }
    buf_printf(out, ", \"bytes\": %" PRId64 ", \"space\": \"%s\", \"offset\": %" PRId64 "%s}", bf->bytes,
               bf->space == SPACE_DEVICE ? "device" : "host", bf->offset,
               bf->home && bf->space == SPACE_HOST ? ", \"home\": true" : "");
  }
  buf_printf(out, "\n  ],\n  \"steps\": [");
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    buf_printf(out, "%s\n    {\"do\": \"%s\"", s ? "," : "", plan_step_kind_name(st->kind));
    switch (st->kind) {
    case STEP_COMPUTE: {
      const Op *o = &g->ops[st->op];
      buf_printf(out, ", \"op\": ");
      emit_json_string(out, o->name);
      buf_printf(out, ", \"recompute\": %s, \"inputs\": ", st->recompute ? "true" : "false");
      emit_ids(out, st->inputs, o->ninputs);
      buf_printf(out, ", \"outputs\": ");
      emit_ids(out, st->outputs, o->noutputs);
      if (st->workspace >= 0) buf_printf(out, ", \"workspace\": %d", st->workspace);
      break;
    }
    case STEP_OFFLOAD:
    case STEP_PREFETCH: buf_printf(out, ", \"from\": %d, \"to\": %d", st->from, st->to); break;
    case STEP_OFFLOAD_WAIT: buf_printf(out, ", \"from\": %d", st->from); break;
    case STEP_PREFETCH_WAIT:
    case STEP_ZERO: buf_printf(out, ", \"to\": %d", st->to); break;
    case STEP_HOST_COMPUTE:
      buf_printf(out, ", \"op\": ");
      emit_json_string(out, g->ops[st->op].name);
      buf_printf(out, ", \"inputs\": ");
      emit_ids(out, st->inputs, g->ops[st->op].ninputs);
      buf_printf(out, ", \"outputs\": ");
      emit_ids(out, st->outputs, g->ops[st->op].noutputs);
      break;
    case STEP_HOST_WAIT:
      buf_printf(out, ", \"op\": ");
      emit_json_string(out, g->ops[st->op].name);
      break;
    case STEP_KIND_COUNT: break;
    }
    buf_printf(out, "}");
  }
  buf_printf(out, "\n  ]\n}\n");
  return out->failed ? -1 : 0;
}
