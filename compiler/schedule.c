/*
 * schedule.c - the schedule family: turns one decision per stashed tensor
 * (keep, recompute, offload) into the plan's steps and buffers. Every
 * strategy goes through here, so a plan is a function of its decisions and
 * any strategy that models memory models this one builder.
 *
 * For graph op i the builder emits, in order:
 *   1. prefetches whose issue point is op i,
 *   2. for each input not on the device: a prefetch_wait (offloaded) or the
 *      recursive re-run of its producer (recomputed, or a forward
 *      intermediate a recompute needs), each forward op re-run at most once
 *      per residency: a regenerated tensor stays until its last reader,
 *   3. the op itself (with its workspace buffer),
 *   4. offloads of its outputs decided "offload",
 *   5. offload_waits whose point is op i.
 * Static points (plan_offload_wait_op, plan_prefetch_issue_op) depend only on
 * the graph, the device and the op that first needs the tensor, so that an
 * ILP can know them in advance.
 */
#include "ration.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int plan_offload_wait_op(const Graph *g, const Device *d, int tensor) {
  const Tensor *t = &g->tensors[tensor];
  double copy = cost_d2h_seconds(d, t->bytes), covered = 0;
  int w = t->producer;
  /* Hold the device bytes just long enough for the copy to overlap forward
   * compute, and at least until the last forward reader. */
  while (covered < copy && w + 1 < g->nops && g->ops[w + 1].phase == PHASE_FORWARD) {
    w++;
    covered += cost_op_seconds(g, d, w);
  }
  return w > t->last_fwd_read ? w : t->last_fwd_read;
}

int plan_prefetch_issue_op(const Graph *g, const Device *d, int tensor, int need_op) {
  double copy = cost_h2d_seconds(d, g->tensors[tensor].bytes), covered = 0;
  int wait_op = plan_offload_wait_op(g, d, tensor);
  int k = need_op;
  /* Issue as late as still hides the copy behind the ops before the need. */
  while (covered < copy && k - 1 > wait_op) {
    k--;
    covered += cost_op_seconds(g, d, k);
  }
  return k;
}

typedef struct Builder {
  Plan *p;
  const Graph *g;
  const Device *d;
  bool final_pass;
  int *cur;         /* tensor -> device buffer holding it, -1 if none */
  int *dead_after;  /* tensor -> op after which its first residency is dead */
  bool *renewed;    /* tensor -> cur is a recomputed or prefetched residency */
  int *host_buf;    /* tensor -> host buffer of its offload, -1 */
  int *prefetch_buf;/* tensor -> device buffer its prefetch fills, -1 */
  int *need_op;     /* tensor -> op whose prelude first needed it back, -1 */
  int *issue_op;    /* tensor -> op whose prelude issues its prefetch, -1 */
  int *wait_op;     /* tensor -> op after which its offload_wait sits, -1 */
  int *offload_src; /* tensor -> device buffer its offload reads, -1 */
  Err *e;
} Builder;

static int oom(Builder *b) { return err_set(b->e, "%s: out of memory while scheduling", b->g->path); }

static bool on_device(const Builder *b, int t, int op) {
  const Tensor *x = &b->g->tensors[t];
  if (graph_is_resident(x)) return true;
  if (b->cur[t] < 0) return false;
  return b->renewed[t] || op <= b->dead_after[t];
}

static int emit_compute(Builder *b, int op, bool recompute, int at_op);

/* Brings tensor t back to the device before op at_op reads it. */
static int ensure(Builder *b, int t, int at_op) {
  if (on_device(b, t, at_op)) return 0;
  const Graph *g = b->g;
  if (b->p->decisions[t] == DEC_OFFLOAD && b->host_buf[t] >= 0) {
    if (b->need_op[t] < 0) b->need_op[t] = at_op;
    if (!b->final_pass) {
      /* First pass: only learn where it is needed; the buffer is a stand-in. */
      int id = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_DEVICE);
      if (id < 0) return oom(b);
      b->cur[t] = id;
      b->renewed[t] = true;
      return 0;
    }
    Step *s = plan_add_step(b->p, STEP_PREFETCH_WAIT);
    if (!s) return oom(b);
    s->to = b->prefetch_buf[t];
    b->cur[t] = b->prefetch_buf[t];
    b->renewed[t] = true;
    return 0;
  }
  int producer = g->tensors[t].producer;
  if (producer < 0 || g->ops[producer].phase != PHASE_FORWARD)
    return err_set(b->e, "%s: tensors[%d]: \"%s\" is needed at op \"%s\" but cannot be brought back", g->path, t,
                   g->tensors[t].name, g->ops[at_op].name);
  return emit_compute(b, producer, true, at_op);
}

static int emit_compute(Builder *b, int op, bool recompute, int at_op) {
  const Graph *g = b->g;
  const Op *o = &g->ops[op];
  for (int k = 0; k < o->ninputs; k++)
    if (ensure(b, o->inputs[k], at_op)) return -1;
  int *in = util_xcalloc((size_t)o->ninputs, sizeof(int)), *out = util_xcalloc((size_t)o->noutputs, sizeof(int));
  if (!in || !out) {
    free(in);
    free(out);
    return oom(b);
  }
  for (int k = 0; k < o->ninputs; k++) in[k] = b->cur[o->inputs[k]];
  for (int k = 0; k < o->noutputs; k++) {
    int t = o->outputs[k];
    if (graph_is_resident(&g->tensors[t])) {
      out[k] = b->cur[t];
      continue;
    }
    /* A re-run writes every output; one already on the device keeps its
     * residency and the new copy is transient. */
    bool had = recompute && on_device(b, t, at_op);
    out[k] = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_DEVICE);
    if (out[k] < 0) {
      free(in);
      free(out);
      return oom(b);
    }
    if (!had) {
      b->cur[t] = out[k];
      b->renewed[t] = recompute;
    }
  }
  int ws = -1;
  if (o->workspace > 0 && (ws = plan_add_buffer(b->p, -1, op, o->workspace, SPACE_DEVICE)) < 0) {
    free(in);
    free(out);
    return oom(b);
  }
  Step *s = plan_add_step(b->p, STEP_COMPUTE);
  if (!s) {
    free(in);
    free(out);
    return oom(b);
  }
  s->op = op;
  s->recompute = recompute;
  s->inputs = in;
  s->outputs = out;
  s->workspace = ws;
  return 0;
}

static int emit_op(Builder *b, int i) {
  const Graph *g = b->g;
  if (b->final_pass)
    for (int k = 0; k < g->nstashed; k++) {
      int t = g->stashed[k];
      if (b->issue_op[t] != i) continue;
      int id = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_DEVICE);
      Step *s = id < 0 ? NULL : plan_add_step(b->p, STEP_PREFETCH);
      if (!s) return oom(b);
      s->from = b->host_buf[t];
      s->to = id;
      b->prefetch_buf[t] = id;
    }
  if (emit_compute(b, i, false, i)) return -1;
  const Op *o = &g->ops[i];
  for (int k = 0; k < o->noutputs; k++) {
    int t = o->outputs[k];
    if (b->p->decisions[t] != DEC_OFFLOAD) continue;
    int host = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_HOST);
    Step *s = host < 0 ? NULL : plan_add_step(b->p, STEP_OFFLOAD);
    if (!s) return oom(b);
    s->from = b->cur[t];
    s->to = host;
    b->host_buf[t] = host;
    b->offload_src[t] = b->cur[t];
  }
  for (int k = 0; k < g->nstashed; k++) {
    int t = g->stashed[k];
    if (b->wait_op[t] != i || b->host_buf[t] < 0) continue;
    Step *s = plan_add_step(b->p, STEP_OFFLOAD_WAIT);
    if (!s) return oom(b);
    s->from = b->offload_src[t];
  }
  return 0;
}

static void reset_plan(Plan *p) {
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].inputs);
    free(p->steps[i].outputs);
  }
  p->nsteps = 0;
  p->nbuffers = 0;
}

/* One pass over the graph; resident tensors get their buffers first. */
static int build_pass(Builder *b) {
  const Graph *g = b->g;
  int n = g->ntensors;
  reset_plan(b->p);
  for (int t = 0; t < n; t++) {
    b->cur[t] = b->host_buf[t] = b->prefetch_buf[t] = b->offload_src[t] = -1;
    b->renewed[t] = false;
  }
  for (int t = 0; t < n; t++) {
    if (!graph_is_resident(&g->tensors[t])) continue;
    b->cur[t] = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_DEVICE);
    if (b->cur[t] < 0) return oom(b);
  }
  for (int i = 0; i < g->nops; i++)
    if (emit_op(b, i)) return -1;
  return 0;
}

int plan_build_schedule(Plan *p, const Graph *g, const Device *d, Err *e) {
  int n = g->ntensors;
  Builder b = {.p = p, .g = g, .d = d, .e = e};
  int **ints[] = {&b.cur, &b.dead_after, &b.host_buf, &b.prefetch_buf, &b.need_op, &b.issue_op, &b.wait_op,
                  &b.offload_src};
  int rc = -1;
  bool ok = (b.renewed = util_xcalloc((size_t)n, sizeof(bool))) != NULL;
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
    ok = (*ints[k] = util_xcalloc((size_t)n, sizeof(int))) != NULL && ok;
  if (!ok) {
    oom(&b);
    goto out;
  }
  for (int t = 0; t < n; t++) {
    const Tensor *x = &g->tensors[t];
    b.need_op[t] = b.issue_op[t] = b.wait_op[t] = -1;
    b.dead_after[t] = INT_MAX;
    if (x->is_output || graph_is_resident(x)) continue;
    switch (p->decisions[t]) {
    case DEC_KEEP: break;
    case DEC_RECOMPUTE: b.dead_after[t] = x->last_fwd_read > x->producer ? x->last_fwd_read : x->producer; break;
    case DEC_OFFLOAD: b.dead_after[t] = b.wait_op[t] = plan_offload_wait_op(g, d, t); break;
    default:
      /* Forward intermediates nobody stashes die after their last reader,
       * so a recompute that needs one re-runs its producer too. */
      if (x->producer >= 0 && g->ops[x->producer].phase == PHASE_FORWARD && x->last_read >= 0)
        b.dead_after[t] = x->last_read;
      break;
    }
  }
  if (build_pass(&b)) goto out;
  bool any_prefetch = false;
  for (int t = 0; t < n; t++)
    if (b.need_op[t] >= 0) {
      b.issue_op[t] = plan_prefetch_issue_op(g, d, t, b.need_op[t]);
      any_prefetch = true;
    }
  if (any_prefetch) {
    b.final_pass = true;
    if (build_pass(&b)) goto out;
  }
  rc = 0;
out:
  free(b.renewed);
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) free(*ints[k]);
  return rc;
}
