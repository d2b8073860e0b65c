/*
 * schedule.c - the schedule family: turns one decision per stashed tensor
 * (keep, recompute, offload) into the plan's steps and buffers. Every
 * strategy goes through here, so a plan is a function of its decisions and
 * any strategy that models memory models this one builder (docs/PLANNING.md
 * writes the family down; compiler/ilp/ models it exactly).
 *
 * First the dynamic positions are derived (plan_family_positions): walking
 * the non-forward ops in order, the forward ops that must be re-run in each
 * op's prelude (its inputs that are not on the device, closed over the
 * re-runs' own inputs) and the op whose prelude first needs each offloaded
 * tensor back. A forward op is re-run at most once: its recomputed outputs
 * and the forward intermediates it regenerates stay on the device until the
 * last step that reads them. Then for graph op i the builder emits, in order:
 *   1. prefetches whose static issue point is op i (plan_prefetch_issue_op),
 *      soonest needed first,
 *   2. prefetch_waits of the offloaded tensors first needed at op i,
 *   3. the re-runs of op i's prelude, in graph order,
 *   4. zero steps of the grads op i uses first (plan_grad_start_op), then
 *      the op itself (with its workspace buffer),
 *   5. offloads of its outputs decided "offload", soonest waited for first,
 *   6. offload_waits whose static point is op i (plan_offload_wait_op).
 * Copies on one stream run in issue order, so a copy issued with others
 * but needed later would make the earlier-needed ones wait behind it
 * (llama-tiny at its smallest budget: a layer's 10.5 us attention input
 * ahead of its 5.2 us residual, needed 4 ops sooner, stalled 10.2 us).
 * An op the decisions put on the host (a grad decided host-optimizer) is a
 * host_compute over its operands' host homes in its place at step 4, the
 * grad's copy to its home is issued after its last accumulation and waited
 * for before that op, and each host op's wait ends the step.
 * A re-run writes every output of its op; outputs that are kept, offloaded
 * or graph outputs get a transient copy (occupied at that step only), so
 * only recomputed tensors and intermediates change residency.
 */
#include "ration.h"

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

void plan_queue_order(int *tensors, int n, const int *due) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && due[tensors[j - 1]] > due[tensors[j]]; j--) {
      int t = tensors[j];
      tensors[j] = tensors[j - 1];
      tensors[j - 1] = t;
    }
}

int plan_prefetch_issue_after(const Graph *g, const Device *d, int64_t bytes, int need_op, int after_op) {
  double copy = cost_h2d_seconds(d, bytes), covered = 0;
  int k = need_op;
  /* Issue as late as still hides the copy behind the ops before the need. */
  while (covered < copy && k - 1 > after_op) {
    k--;
    covered += cost_op_seconds(g, d, k);
  }
  return k;
}

int plan_prefetch_issue_op(const Graph *g, const Device *d, int tensor, int need_op) {
  return plan_prefetch_issue_after(g, d, g->tensors[tensor].bytes, need_op, plan_offload_wait_op(g, d, tensor));
}

void plan_home_copies(const Graph *g, const Device *d, const Decision *dec, const int *rerun_at, int t, HomeCopies *h) {
  int first = -1, last = -1, first_after_fwd = -1, last_fwd = -1;
  h->last_write = -1;
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    if (plan_op_on_host(g, dec, i)) continue; /* it reads and writes the home itself */
    bool uses = false;
    for (int k = 0; k < o->ninputs; k++) uses |= o->inputs[k] == t;
    for (int k = 0; k < o->noutputs; k++)
      if (o->outputs[k] == t) uses = true, h->last_write = i;
    /* A forward op re-run in a backward prelude reads it there. */
    int at = uses && o->phase == PHASE_FORWARD && rerun_at ? rerun_at[i] : -1;
    if (uses && first < 0) first = i;
    if (uses) last = i > last ? i : last;
    if (uses && o->phase == PHASE_FORWARD) last_fwd = i;
    if (uses && o->phase != PHASE_FORWARD && (first_after_fwd < 0 || i < first_after_fwd)) first_after_fwd = i;
    if (at >= 0 && (first_after_fwd < 0 || at < first_after_fwd)) first_after_fwd = at;
    if (at > last) last = at;
  }
  /* A grad whose optimizer runs on the host is zeroed on the device and
   * only copied to its home. */
  bool to_host_optimizer = dec[t] == DEC_HOST_OPTIMIZER;
  h->need[0] = to_host_optimizer ? -1 : first;
  h->need[1] = dec[t] == DEC_HOST_REFETCH ? first_after_fwd : -1;
  /* The second window's prefetch comes after the first window's last use. */
  for (int k = 0; k < 2; k++)
    h->issue[k] = h->need[k] < 0 ? -1 : plan_prefetch_issue_after(g, d, g->tensors[t].bytes, h->need[k], k ? last_fwd : -1);
  h->wait_op = -1;
  if (h->last_write < 0) return;
  /* Hold the device copy until the copy back has had the following ops'
   * device time to run, and at least until its last reader. Every op's
   * device time counts, on the host or not: where each copy is waited for
   * then depends on no other op's place, so the ilp models a host
   * optimizer op by its own terms alone (compiler/ilp/homes.c). */
  double copy = cost_d2h_seconds(d, g->tensors[t].bytes), covered = 0;
  int w = h->last_write;
  while (covered < copy && w + 1 < g->nops) covered += cost_op_seconds(g, d, ++w);
  /* The host optimizer reads the copy: it is waited for before that op. */
  int host_op = to_host_optimizer ? plan_host_optimizer_op(g, t) : -1;
  if (host_op >= 0 && w >= host_op) w = host_op - 1;
  h->wait_op = w > last ? w : last;
}

int plan_grad_start_op(const Graph *g, int t) {
  /* A grad holds nothing before its first accumulation: its bytes are
   * taken from there (zeroed, as 0 + x is what the accumulation computes)
   * and held to the end of the step, where the optimizer has read it. */
  return g->tensors[t].kind == KIND_GRAD ? g->tensors[t].first_use : -1;
}

bool plan_regenerable(const Graph *g, int t) {
  const Tensor *x = &g->tensors[t];
  return x->kind == KIND_ACTIVATION && !x->is_output && x->producer >= 0 &&
         g->ops[x->producer].phase == PHASE_FORWARD;
}

/* On the device in the backward prelude of an op, before its re-runs. */
static bool available(const Graph *g, const Decision *dec, const int *rerun_at, const int *need_op, int t) {
  if (!plan_regenerable(g, t)) return true;
  Decision d = g->tensors[t].stashed ? dec[t] : DEC_RECOMPUTE; /* intermediates are dead after forward */
  if (d == DEC_KEEP) return true;
  if (d == DEC_OFFLOAD) return need_op[t] >= 0;
  return rerun_at[g->tensors[t].producer] >= 0;
}

/* The op it marks for a re-run at op at, or -1. */
static int demand(const Graph *g, const Decision *dec, int *rerun_at, int *need_op, int t, int at) {
  if (available(g, dec, rerun_at, need_op, t)) return -1;
  if (g->tensors[t].stashed && dec[t] == DEC_OFFLOAD) {
    need_op[t] = at;
    return -1;
  }
  rerun_at[g->tensors[t].producer] = at;
  return g->tensors[t].producer;
}

int plan_family_positions(const Graph *g, const Decision *dec, int *rerun_at, int *need_op) {
  for (int i = 0; i < g->nops; i++) rerun_at[i] = -1;
  for (int t = 0; t < g->ntensors; t++) need_op[t] = -1;
  for (int i = 0; i < g->nstashed; i++) {
    Decision d = dec[g->stashed[i]];
    if (d != DEC_KEEP && d != DEC_RECOMPUTE && d != DEC_OFFLOAD) return -1;
  }
  for (int j = 0; j < g->nops; j++) {
    const Op *o = &g->ops[j];
    if (o->phase == PHASE_FORWARD) continue;
    int hi = -1, lo = g->nops; /* the ops marked for a re-run at j lie in [lo, hi] */
    for (int k = 0; k < o->ninputs; k++) {
      int q = demand(g, dec, rerun_at, need_op, o->inputs[k], j);
      if (q >= 0) hi = q > hi ? q : hi, lo = q < lo ? q : lo;
    }
    /* Producers precede consumers, so one downward sweep closes the set. */
    for (int q = hi; q >= lo; q--) {
      if (rerun_at[q] != j) continue;
      const Op *r = &g->ops[q];
      for (int k = 0; k < r->ninputs; k++) {
        int p = demand(g, dec, rerun_at, need_op, r->inputs[k], j);
        if (p >= 0 && p < lo) lo = p;
      }
    }
  }
  return 0;
}

/* Items grouped by a key, each group in the items' order: group k is
 * items[start[k] .. start[k + 1]). Lets the builder visit what belongs to
 * op i without a pass over every op or every stashed tensor at each op. */
typedef struct Groups {
  int *start, *items;
} Groups;

/* Groups ids[0..n) (or 0..n when ids is NULL) by key[id] in [0, nkeys);
 * an id whose key is negative is in no group. */
static int group_by(Groups *gr, const int *ids, int n, const int *key, int nkeys) {
  gr->start = util_xcalloc((size_t)nkeys + 2, sizeof(int));
  gr->items = util_xcalloc((size_t)n, sizeof(int));
  if (!gr->start || !gr->items) return -1;
  for (int i = 0; i < n; i++) {
    int k = key[ids ? ids[i] : i];
    if (k >= 0) gr->start[k + 2]++;
  }
  for (int k = 2; k < nkeys + 2; k++) gr->start[k] += gr->start[k - 1];
  /* Filling group k advances start[k + 1] from its beginning to its end,
   * which is the beginning of group k + 1. */
  for (int i = 0; i < n; i++) {
    int id = ids ? ids[i] : i, k = key[id];
    if (k >= 0) gr->items[gr->start[k + 1]++] = id;
  }
  return 0;
}

static void groups_free(Groups *gr) {
  free(gr->start);
  free(gr->items);
}

typedef struct Builder {
  Plan *p;
  const Graph *g;
  const Device *d;
  int *cur;         /* tensor -> device buffer holding it, -1 if none */
  int *rerun_at;    /* op -> op whose prelude re-runs it, -1 */
  int *need_op;     /* tensor -> op whose prelude waits for its prefetch, -1 */
  int *issue_op;    /* tensor -> op whose prelude issues its prefetch, -1 */
  int *wait_op;     /* tensor -> op after which its offload_wait sits, -1 */
  int *host_buf;    /* tensor -> host buffer of its offload (or its home), -1 */
  int *prefetch_buf;/* tensor -> device buffer its prefetch fills, -1 */
  int *offload_src; /* tensor -> device buffer its offload reads, -1 */
  int *batch;       /* the copies one op issues, in queue order */
  /* Host-homed tensors: window n + 2t + k is tensor t's k-th device
   * window; copy back n + t. Stashed tensors' copies keep their ids, so one
   * queue orders both (due: the op that needs the copy). */
  int *win_issue, *win_need, *win_buf; /* by window - n */
  int *back_at, *back_wait;            /* by tensor: last write, wait op, -1 */
  int *due;                            /* by copy id */
  /* By op: stashed tensors by issue_op, need_op and wait_op; ops by rerun_at;
   * windows by issue and need; copies back by last write and wait. */
  Groups issued, needed, waited, reruns, win_issued, win_needed, backs, back_waited;
  Err *e;
} Builder;

static int oom(Builder *b) {
  if (b->p->nsteps >= PLAN_MAX_ENTRIES || b->p->nbuffers >= PLAN_MAX_ENTRIES)
    return err_set(b->e, "%s: the schedule needs more than %d steps or buffers (the limit)", b->g->path, PLAN_MAX_ENTRIES);
  return err_set(b->e, "%s: out of memory while scheduling", b->g->path);
}

static int emit_compute(Builder *b, int op, bool recompute) {
  const Graph *g = b->g;
  const Op *o = &g->ops[op];
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
    out[k] = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_DEVICE);
    if (out[k] < 0) {
      free(in);
      free(out);
      return oom(b);
    }
    /* A re-run regenerates only what was dead: recomputed tensors and
     * intermediates; anything else gets a transient copy. */
    bool renew = !recompute || (plan_regenerable(g, t) && (!g->tensors[t].stashed || b->p->decisions[t] == DEC_RECOMPUTE));
    if (renew) b->cur[t] = out[k];
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

/* An op run on the host: it reads and writes its operands' homes. */
static int emit_host_compute(Builder *b, int op) {
  const Op *o = &b->g->ops[op];
  int *in = util_xcalloc((size_t)o->ninputs, sizeof(int)), *out = util_xcalloc((size_t)o->noutputs, sizeof(int));
  Step *s = in && out ? plan_add_step(b->p, STEP_HOST_COMPUTE) : NULL;
  if (!s) {
    free(in);
    free(out);
    return oom(b);
  }
  for (int k = 0; k < o->ninputs; k++) in[k] = b->host_buf[o->inputs[k]];
  for (int k = 0; k < o->noutputs; k++) out[k] = b->host_buf[o->outputs[k]];
  s->op = op;
  s->inputs = in;
  s->outputs = out;
  return 0;
}

/* Window id W's prefetch: a new device buffer filled from the host. */
static int emit_prefetch(Builder *b, int w) {
  const Graph *g = b->g;
  int n = g->ntensors, t = w < n ? w : (w - n) / 2;
  int id = plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_DEVICE);
  Step *s = id < 0 ? NULL : plan_add_step(b->p, STEP_PREFETCH);
  if (!s) return oom(b);
  s->from = b->host_buf[t];
  s->to = id;
  if (w < n) b->prefetch_buf[t] = id;
  else b->win_buf[w - n] = id;
  return 0;
}

static int emit_prefetch_wait(Builder *b, int buf, int t) {
  Step *s = plan_add_step(b->p, STEP_PREFETCH_WAIT);
  if (!s) return oom(b);
  s->to = buf;
  b->cur[t] = buf;
  return 0;
}

/* Copy id C's offload: stashed tensor C's to a new host buffer, or
 * host-homed tensor C - n's back to its home. */
static int emit_offload(Builder *b, int c) {
  const Graph *g = b->g;
  int n = g->ntensors, t = c < n ? c : c - n;
  int host = c < n ? plan_add_buffer(b->p, t, -1, g->tensors[t].bytes, SPACE_HOST) : b->host_buf[t];
  Step *s = host < 0 ? NULL : plan_add_step(b->p, STEP_OFFLOAD);
  if (!s) return oom(b);
  s->from = b->cur[t];
  s->to = host;
  b->host_buf[t] = host;
  b->offload_src[t] = b->cur[t];
  return 0;
}

static int emit_offload_wait(Builder *b, int t) {
  Step *s = plan_add_step(b->p, STEP_OFFLOAD_WAIT);
  if (!s) return oom(b);
  s->from = b->offload_src[t];
  return 0;
}

int plan_add_grad_zeros(Plan *p, const Graph *g, int op, const int *home) {
  const Op *o = &g->ops[op];
  int n = o->ninputs + o->noutputs;
  for (int k = 0; k < n; k++) {
    int t = k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs];
    bool again = false; /* named twice by the op: zeroed once */
    for (int j = 0; j < k; j++) again |= (j < o->ninputs ? o->inputs[j] : o->outputs[j - o->ninputs]) == t;
    if (again || plan_grad_start_op(g, t) != op) continue;
    Step *s = plan_add_step(p, STEP_ZERO);
    if (!s) return -1;
    s->to = home[t];
  }
  return 0;
}

static int emit_op(Builder *b, int i) {
  const Graph *g = b->g;
  int n = 0, nt = g->ntensors;
  for (int k = b->issued.start[i]; k < b->issued.start[i + 1]; k++) b->batch[n++] = b->issued.items[k];
  for (int k = b->win_issued.start[i]; k < b->win_issued.start[i + 1]; k++) b->batch[n++] = b->win_issued.items[k] + nt;
  for (int k = 0; k < n; k++) b->due[b->batch[k]] = b->batch[k] < nt ? b->need_op[b->batch[k]] : b->win_need[b->batch[k] - nt];
  plan_queue_order(b->batch, n, b->due);
  for (int k = 0; k < n; k++)
    if (emit_prefetch(b, b->batch[k])) return -1;
  for (int k = b->needed.start[i]; k < b->needed.start[i + 1]; k++)
    if (emit_prefetch_wait(b, b->prefetch_buf[b->needed.items[k]], b->needed.items[k])) return -1;
  for (int k = b->win_needed.start[i]; k < b->win_needed.start[i + 1]; k++) {
    int w = b->win_needed.items[k];
    if (emit_prefetch_wait(b, b->win_buf[w], w / 2)) return -1;
  }
  for (int k = b->reruns.start[i]; k < b->reruns.start[i + 1]; k++)
    if (b->reruns.items[k] < i && emit_compute(b, b->reruns.items[k], true)) return -1;
  if (plan_add_grad_zeros(b->p, g, i, b->cur)) return oom(b);
  if (plan_op_on_host(g, b->p->decisions, i) ? emit_host_compute(b, i) : emit_compute(b, i, false)) return -1;
  const Op *o = &g->ops[i];
  n = 0;
  for (int k = 0; k < o->noutputs; k++)
    if (b->wait_op[o->outputs[k]] >= 0) b->batch[n++] = o->outputs[k];
  for (int k = b->backs.start[i]; k < b->backs.start[i + 1]; k++) b->batch[n++] = b->backs.items[k] + nt;
  for (int k = 0; k < n; k++) b->due[b->batch[k]] = b->batch[k] < nt ? b->wait_op[b->batch[k]] : b->back_wait[b->batch[k] - nt];
  plan_queue_order(b->batch, n, b->due);
  for (int k = 0; k < n; k++)
    if (emit_offload(b, b->batch[k])) return -1;
  for (int k = b->waited.start[i]; k < b->waited.start[i + 1]; k++)
    if (b->host_buf[b->waited.items[k]] >= 0 && emit_offload_wait(b, b->waited.items[k])) return -1;
  for (int k = b->back_waited.start[i]; k < b->back_waited.start[i + 1]; k++)
    if (emit_offload_wait(b, b->back_waited.items[k])) return -1;
  return 0;
}

/* The host-homed tensors' windows and copies back. */
static int home_positions(Builder *b) {
  const Graph *g = b->g;
  int n = g->ntensors;
  for (int t = 0; t < n; t++) {
    b->back_at[t] = b->back_wait[t] = -1;
    b->win_issue[2 * t] = b->win_issue[2 * t + 1] = b->win_need[2 * t] = b->win_need[2 * t + 1] = -1;
    Decision d = b->p->decisions[t];
    if (!graph_is_resident(&g->tensors[t]) || (d != DEC_HOST && d != DEC_HOST_REFETCH && d != DEC_HOST_OPTIMIZER)) continue;
    HomeCopies h;
    plan_home_copies(g, b->d, b->p->decisions, b->rerun_at, t, &h);
    for (int k = 0; k < 2; k++) b->win_issue[2 * t + k] = h.issue[k], b->win_need[2 * t + k] = h.need[k];
    b->back_at[t] = h.last_write;
    b->back_wait[t] = h.wait_op;
  }
  return group_by(&b->win_issued, NULL, 2 * n, b->win_issue, g->nops) ||
                 group_by(&b->win_needed, NULL, 2 * n, b->win_need, g->nops) ||
                 group_by(&b->backs, NULL, n, b->back_at, g->nops) ||
                 group_by(&b->back_waited, NULL, n, b->back_wait, g->nops)
             ? -1
             : 0;
}

int plan_build_schedule(Plan *p, const Graph *g, const Device *d, Err *e) {
  int n = g->ntensors;
  Builder b = {.p = p, .g = g, .d = d, .e = e};
  int **ints[] = {&b.cur, &b.need_op, &b.issue_op, &b.wait_op, &b.host_buf, &b.prefetch_buf, &b.offload_src,
                  &b.back_at, &b.back_wait};
  int **wide[] = {&b.batch, &b.due, &b.win_issue, &b.win_need, &b.win_buf}; /* 3n: every copy id */
  Groups *groups[] = {&b.issued, &b.needed, &b.waited, &b.reruns, &b.win_issued, &b.win_needed, &b.backs, &b.back_waited};
  int rc = -1;
  bool ok = (b.rerun_at = util_xcalloc((size_t)g->nops + 1, sizeof(int))) != NULL;
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
    ok = (*ints[k] = util_xcalloc((size_t)n + 1, sizeof(int))) != NULL && ok;
  for (size_t k = 0; k < sizeof wide / sizeof wide[0]; k++)
    ok = (*wide[k] = util_xcalloc(3 * (size_t)n + 1, sizeof(int))) != NULL && ok;
  if (!ok) {
    oom(&b);
    goto out;
  }
  if (plan_family_positions(g, p->decisions, b.rerun_at, b.need_op)) {
    err_set(e, "%s: a stashed tensor has no decision", g->path);
    goto out;
  }
  for (int t = 0; t < n; t++) {
    b.cur[t] = b.host_buf[t] = b.prefetch_buf[t] = b.offload_src[t] = -1;
    b.issue_op[t] = b.need_op[t] >= 0 ? plan_prefetch_issue_op(g, d, t, b.need_op[t]) : -1;
    bool offloaded = g->tensors[t].stashed && plan_regenerable(g, t) && p->decisions[t] == DEC_OFFLOAD;
    b.wait_op[t] = offloaded ? plan_offload_wait_op(g, d, t) : -1;
  }
  if (group_by(&b.issued, g->stashed, g->nstashed, b.issue_op, g->nops) ||
      group_by(&b.needed, g->stashed, g->nstashed, b.need_op, g->nops) ||
      group_by(&b.waited, g->stashed, g->nstashed, b.wait_op, g->nops) ||
      group_by(&b.reruns, NULL, g->nops, b.rerun_at, g->nops) || home_positions(&b)) {
    oom(&b);
    goto out;
  }
  /* Each resident tensor's home: a device buffer, or a host-homed one's
   * host buffer (its device windows come with their prefetches). */
  for (int t = 0; t < n; t++) {
    if (!graph_is_resident(&g->tensors[t])) continue;
    Decision dt = p->decisions[t];
    bool host = dt == DEC_HOST || dt == DEC_HOST_REFETCH || dt == DEC_HOST_OPTIMIZER;
    int id = plan_add_buffer(p, t, -1, g->tensors[t].bytes, host ? SPACE_HOST : SPACE_DEVICE);
    /* A grad for the host optimizer also has a device buffer that the
     * backward accumulates into, zeroed before its first use like a
     * device home (plan_add_grad_zeros). */
    int dev = id >= 0 && dt == DEC_HOST_OPTIMIZER ? plan_add_buffer(p, t, -1, g->tensors[t].bytes, SPACE_DEVICE) : -2;
    if (id < 0 || dev == -1) {
      oom(&b);
      goto out;
    }
    p->buffers[id].home = true;
    *(host ? &b.host_buf[t] : &b.cur[t]) = id;
    if (dev >= 0) b.cur[t] = dev;
  }
  for (int i = 0; i < g->nops; i++)
    if (emit_op(&b, i)) goto out;
  /* The step ends when the host ops it ran are done. */
  for (int i = 0; i < g->nops; i++) {
    if (!plan_op_on_host(g, p->decisions, i)) continue;
    Step *st = plan_add_step(p, STEP_HOST_WAIT);
    if (!st) {
      oom(&b);
      goto out;
    }
    st->op = i;
  }
  rc = 0;
out:
  for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++) groups_free(groups[k]);
  free(b.rerun_at);
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) free(*ints[k]);
  for (size_t k = 0; k < sizeof wide / sizeof wide[0]; k++) free(*wide[k]);
  return rc;
}
