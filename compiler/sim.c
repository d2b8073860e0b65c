/*
 * sim.c - the ground truth. Checks a plan against every rule of DESIGN.md's
 * plan semantics, then replays it: live device bytes at every step (the
 * number the runtime's high-water mark must equal) and the step time on
 * four FIFO streams (compute, D2H, H2D, and the host's, which runs the ops
 * a plan puts on the host, each after its inputs' copies landed), where stalls are waits that
 * actually happen, not estimates. A device with a measured
 * copy_compute_share (a CPU backend's profile) also loses that share of
 * each copy's time on the compute stream where the copy is issued; it
 * counts as stall, compute time lost to copies.
 */
#include "ration.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *plan_name(const Plan *p) { return p->path ? p->path : "plan"; }

static bool valid_buffer(const Plan *p, int id) { return id >= 0 && id < p->nbuffers; }

int sim_occupancy(const Plan *p, const Graph *g, int *first, int *last) {
  int end = p->nsteps - 1;
  for (int b = 0; b < p->nbuffers; b++) {
    bool home = p->buffers[b].home; /* holds a resident tensor across steps */
    first[b] = home ? 0 : -1;
    last[b] = home ? end : -1;
  }
#define TOUCH(id, s) do { if (!valid_buffer(p, id)) return -1; \
    if (first[id] < 0) first[id] = (s); \
    if (last[id] < (s)) last[id] = (s); } while (0)
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    switch (st->kind) {
    case STEP_COMPUTE: {
      if (st->op < 0 || st->op >= g->nops) return -1;
      const Op *o = &g->ops[st->op];
      for (int k = 0; k < o->noutputs; k++) {
        TOUCH(st->outputs[k], s);
        const Buffer *bf = &p->buffers[st->outputs[k]];
        /* A graph output's first residency is read by the trainer after the step. */
        if (!st->recompute && bf->tensor >= 0 && g->tensors[bf->tensor].is_output) last[st->outputs[k]] = end;
      }
      for (int k = 0; k < o->ninputs; k++) TOUCH(st->inputs[k], s);
      if (st->workspace >= 0) TOUCH(st->workspace, s);
      break;
    }
    case STEP_OFFLOAD:
    case STEP_PREFETCH:
      TOUCH(st->from, s);
      TOUCH(st->to, s);
      break;
    case STEP_OFFLOAD_WAIT: TOUCH(st->from, s); break;
    case STEP_PREFETCH_WAIT: TOUCH(st->to, s); break;
    case STEP_ZERO:
      /* A zeroed grad's buffer is occupied from its zero step, not from
       * the step's start (sim_check: nothing touches it before). */
      if (!valid_buffer(p, st->to)) return -1;
      first[st->to] = s;
      if (last[st->to] < s) last[st->to] = s;
      break;
    case STEP_HOST_COMPUTE: {
      if (st->op < 0 || st->op >= g->nops) return -1;
      const Op *o = &g->ops[st->op];
      for (int k = 0; k < o->ninputs; k++) TOUCH(st->inputs[k], s);
      for (int k = 0; k < o->noutputs; k++) TOUCH(st->outputs[k], s);
      break;
    }
    case STEP_HOST_WAIT: break;
    case STEP_KIND_COUNT: return -1;
    }
  }
#undef TOUCH
  /* A host buffer whose offload was waited for lives at least until then. */
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (st->kind != STEP_OFFLOAD_WAIT) continue;
    for (int k = 0; k < s; k++)
      if (p->steps[k].kind == STEP_OFFLOAD && p->steps[k].from == st->from && last[p->steps[k].to] < s)
        last[p->steps[k].to] = s;
  }
  return 0;
}

/* A buffer a zero step may name: a grad's device buffer (its home, or the
 * one the backward accumulates into beside a host optimizer's home). */
static bool zeroable(const Plan *p, const Graph *g, int b) {
  const Buffer *bf = &p->buffers[b];
  return bf->space == SPACE_DEVICE && bf->tensor >= 0 && g->tensors[bf->tensor].kind == KIND_GRAD;
}

/* Per-buffer state while replaying the steps in order. */
enum { B_EMPTY, B_WRITTEN, B_FILLING, B_DEAD };

typedef struct Check {
  const Plan *p;
  const Graph *g;
  Err *e;
  int *state;
  int *offload_of;    /* host buffer -> step index of the offload filling it */
  int *offload_waited;/* host buffer -> 1 once that offload was waited for */
  int *pending;       /* device buffer -> step index of an un-waited offload from it */
  int *prefetch_of;   /* device buffer -> step index of its prefetch */
  /* Host-homed tensors: the last compute step writing each tensor and the
   * buffer it wrote, and the copy back to the home (step, device buffer). */
  int *wrote_at, *wrote_buf, *back_at, *back_from;
  int *host_at;      /* tensor -> the host_compute step that updated its home, -1 */
  int *host_pending; /* op -> its host_compute step until its wait, -1 */
} Check;

static int fail(Check *c, int s, const char *fmt, const char *a, const char *b) {
  char what[512];
  snprintf(what, sizeof what, fmt, a, b);
  return err_set(c->e, "%s: steps[%d]: %s", plan_name(c->p), s, what);
}

static const char *tname(const Check *c, int buf) {
  int t = c->p->buffers[buf].tensor;
  return t >= 0 ? c->g->tensors[t].name : "(workspace)";
}

static int check_read(Check *c, int s, int id) {
  char idbuf[32];
  snprintf(idbuf, sizeof idbuf, "%d", id);
  if (c->state[id] == B_EMPTY) return fail(c, s, "reads buffer %s (\"%s\") before anything wrote it", idbuf, tname(c, id));
  if (c->state[id] == B_FILLING)
    return fail(c, s, "reads buffer %s (\"%s\") before its prefetch_wait", idbuf, tname(c, id));
  if (c->state[id] == B_DEAD) return fail(c, s, "reads buffer %s (\"%s\") after its offload_wait", idbuf, tname(c, id));
  return 0;
}

static int check_write(Check *c, int s, int id) {
  char idbuf[32];
  snprintf(idbuf, sizeof idbuf, "%d", id);
  const Buffer *bf = &c->p->buffers[id];
  bool resident = bf->tensor >= 0 && graph_is_resident(&c->g->tensors[bf->tensor]);
  if (!resident && c->state[id] != B_EMPTY)
    return fail(c, s, "writes buffer %s (\"%s\") a second time", idbuf, tname(c, id));
  if (bf->space != SPACE_DEVICE) return fail(c, s, "computes into host buffer %s (\"%s\")", idbuf, tname(c, id));
  /* A resident tensor is updated in place: a device copy of a host-homed
   * one holds its value (is prefetched), a zeroed grad's home is zeroed,
   * before anything writes it. */
  if (resident && c->state[id] != B_WRITTEN)
    return fail(c, s, bf->home ? "writes buffer %s (\"%s\") before its zero step" : "writes buffer %s (\"%s\") before its prefetch_wait",
                idbuf, tname(c, id));
  if (resident) c->wrote_at[bf->tensor] = s, c->wrote_buf[bf->tensor] = id;
  c->state[id] = B_WRITTEN;
  return 0;
}

static int check_compute(Check *c, int s, int *next_op) {
  const Plan *p = c->p;
  const Graph *g = c->g;
  const Step *st = &p->steps[s];
  char a[64], b[300];
  if (st->op < 0 || st->op >= g->nops) {
    snprintf(a, sizeof a, "%d", st->op);
    return fail(c, s, "unknown op %s%s", a, "");
  }
  const Op *o = &g->ops[st->op];
  if (st->recompute) {
    if (o->phase != PHASE_FORWARD) return fail(c, s, "recomputes \"%s\", which is not a forward op%s", o->name, "");
  } else if (st->op != *next_op) {
    if (*next_op >= g->nops) return fail(c, s, "runs \"%s\" again after the last op%s", o->name, "");
    if (st->op < *next_op) return fail(c, s, "runs \"%s\" a second time (not as a recompute)%s", o->name, "");
    return fail(c, s, "runs \"%s\" before \"%s\": ops missing or out of graph order", o->name, g->ops[*next_op].name);
  } else {
    (*next_op)++;
  }
  for (int k = 0; k < o->ninputs; k++) {
    int id = st->inputs[k];
    snprintf(b, sizeof b, "%s", g->tensors[o->inputs[k]].name);
    if (!valid_buffer(p, id) || p->buffers[id].tensor != o->inputs[k])
      return fail(c, s, "input %s is not a buffer of \"%s\"", (snprintf(a, sizeof a, "%d", k), a), b);
    if (p->buffers[id].space != SPACE_DEVICE) return fail(c, s, "reads host buffer of \"%s\"%s", b, "");
    if (check_read(c, s, id)) return -1;
  }
  for (int k = 0; k < o->noutputs; k++) {
    int id = st->outputs[k];
    snprintf(b, sizeof b, "%s", g->tensors[o->outputs[k]].name);
    if (!valid_buffer(p, id) || p->buffers[id].tensor != o->outputs[k])
      return fail(c, s, "output %s is not a buffer of \"%s\"", (snprintf(a, sizeof a, "%d", k), a), b);
    if (check_write(c, s, id)) return -1;
  }
  if (o->workspace > 0) {
    int id = st->workspace;
    if (!valid_buffer(p, id) || p->buffers[id].workspace_of != st->op || p->buffers[id].bytes < o->workspace ||
        p->buffers[id].space != SPACE_DEVICE)
      return fail(c, s, "\"%s\" needs a device workspace buffer of its own%s", o->name, "");
    if (check_write(c, s, id)) return -1;
  } else if (st->workspace >= 0) {
    return fail(c, s, "\"%s\" declares no workspace but the step names one%s", o->name, "");
  }
  return 0;
}

static int check_copy(Check *c, int s) {
  const Plan *p = c->p;
  const Step *st = &p->steps[s];
  char a[32];
  switch (st->kind) {
  case STEP_OFFLOAD:
    if (!valid_buffer(p, st->from) || !valid_buffer(p, st->to)) return fail(c, s, "offload names an unknown buffer%s%s", "", "");
    if (p->buffers[st->from].space != SPACE_DEVICE || p->buffers[st->to].space != SPACE_HOST ||
        p->buffers[st->from].tensor != p->buffers[st->to].tensor || p->buffers[st->from].tensor < 0 ||
        p->buffers[st->from].bytes != p->buffers[st->to].bytes)
      return fail(c, s, "offload must copy a device buffer to a host buffer of the same tensor (\"%s\")%s", tname(c, st->from), "");
    if (check_read(c, s, st->from)) return -1;
    if (p->buffers[st->to].home) {
      /* The copy back of a host-homed tensor: once per step. */
      int t = p->buffers[st->to].tensor;
      if (c->back_at[t] >= 0) return fail(c, s, "copies \"%s\" back to its home a second time%s", tname(c, st->to), "");
      c->back_at[t] = s, c->back_from[t] = st->from;
    } else if (c->state[st->to] != B_EMPTY) {
      return fail(c, s, "offload overwrites host buffer of \"%s\"%s", tname(c, st->to), "");
    }
    if (c->host_at[p->buffers[st->to].tensor] >= 0)
      return fail(c, s, "copies \"%s\" over the update a host op made in its home%s", tname(c, st->to), "");
    c->state[st->to] = B_WRITTEN;
    c->offload_of[st->to] = s;
    c->offload_waited[st->to] = 0;
    c->pending[st->from] = s;
    return 0;
  case STEP_OFFLOAD_WAIT:
    if (!valid_buffer(p, st->from) || c->pending[st->from] < 0) {
      snprintf(a, sizeof a, "%d", st->from);
      return fail(c, s, "offload_wait for buffer %s, which has no offload in flight%s", a, "");
    }
    c->offload_waited[p->steps[c->pending[st->from]].to] = 1;
    c->pending[st->from] = -1;
    c->state[st->from] = B_DEAD;
    return 0;
  case STEP_PREFETCH:
    if (!valid_buffer(p, st->from) || !valid_buffer(p, st->to)) return fail(c, s, "prefetch names an unknown buffer%s%s", "", "");
    if (p->buffers[st->from].space != SPACE_HOST || p->buffers[st->to].space != SPACE_DEVICE ||
        p->buffers[st->from].tensor != p->buffers[st->to].tensor || p->buffers[st->from].bytes != p->buffers[st->to].bytes)
      return fail(c, s, "prefetch must copy a host buffer to a device buffer of the same tensor (\"%s\")%s", tname(c, st->from), "");
    if (c->offload_of[st->from] < 0 && !p->buffers[st->from].home)
      return fail(c, s, "prefetch of \"%s\" from a host buffer no offload filled%s", tname(c, st->from), "");
    if (p->buffers[st->from].home && c->back_at[p->buffers[st->from].tensor] >= 0)
      return fail(c, s, "prefetch of \"%s\" from its home after the step copied it back%s", tname(c, st->from), "");
    if (c->host_at[p->buffers[st->from].tensor] >= 0)
      return fail(c, s, "prefetch of \"%s\" from its home after a host op updated it (the next step's to fetch)%s",
                  tname(c, st->from), "");
    if (!c->offload_waited[st->from])
      return fail(c, s, "prefetch of \"%s\" before its offload completed (no offload_wait before it)%s", tname(c, st->from), "");
    if (c->state[st->to] != B_EMPTY) return fail(c, s, "prefetch into buffer of \"%s\" that was already written%s", tname(c, st->to), "");
    c->state[st->to] = B_FILLING;
    c->prefetch_of[st->to] = s;
    return 0;
  case STEP_PREFETCH_WAIT:
    if (!valid_buffer(p, st->to) || c->prefetch_of[st->to] < 0 || c->state[st->to] != B_FILLING) {
      snprintf(a, sizeof a, "%d", st->to);
      return fail(c, s, "prefetch_wait for buffer %s, which has no prefetch in flight%s", a, "");
    }
    c->state[st->to] = B_WRITTEN;
    return 0;
  case STEP_ZERO:
    /* Only a grad's device home, once, before anything uses it (its state
     * is empty until then: sim_check marks the zeroed homes so). */
    snprintf(a, sizeof a, "%d", st->to);
    if (!valid_buffer(p, st->to) || !zeroable(p, c->g, st->to))
      return fail(c, s, "zero step for buffer %s, which is not a grad's device buffer%s", a, "");
    if (c->state[st->to] != B_EMPTY) return fail(c, s, "zeroes buffer %s (\"%s\") a second time", a, tname(c, st->to));
    c->state[st->to] = B_WRITTEN;
    return 0;
  default: return fail(c, s, "unknown step kind%s%s", "", "");
  }
}

/* An op run on the host: in graph order like a compute, over its
 * operands' host homes, each holding the step's value (what the device
 * wrote was copied back and the copy waited for); waited for once. */
static int check_host_compute(Check *c, int s, int *next_op) {
  const Plan *p = c->p;
  const Graph *g = c->g;
  const Step *st = &p->steps[s];
  char a[32];
  if (st->op < 0 || st->op >= g->nops || st->op != *next_op) {
    snprintf(a, sizeof a, "%d", st->op);
    return fail(c, s, "host_compute of op %s out of graph order%s", a, "");
  }
  (*next_op)++;
  const Op *o = &g->ops[st->op];
  for (int k = 0; k < o->ninputs + o->noutputs; k++) {
    int x = k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs];
    int id = k < o->ninputs ? st->inputs[k] : st->outputs[k - o->ninputs];
    if (!valid_buffer(p, id) || p->buffers[id].tensor != x || p->buffers[id].space != SPACE_HOST || !p->buffers[id].home)
      return fail(c, s, "host_compute of \"%s\" must read and write the host homes of its operands (\"%s\")", o->name,
                  g->tensors[x].name);
    if (k >= o->ninputs) {
      c->host_at[x] = s;
      continue;
    }
    if (c->wrote_at[x] >= 0 && (c->back_at[x] < c->wrote_at[x] || c->back_from[x] != c->wrote_buf[x]))
      return fail(c, s, "host_compute reads the home of \"%s\" before the value the device wrote is copied there%s",
                  g->tensors[x].name, "");
    if (!c->offload_waited[id])
      return fail(c, s, "host_compute reads the home of \"%s\" before its copy landed (no offload_wait before it)%s",
                  g->tensors[x].name, "");
  }
  c->host_pending[st->op] = s;
  return 0;
}

static int check_host_wait(Check *c, int s) {
  const Step *st = &c->p->steps[s];
  char a[32];
  snprintf(a, sizeof a, "%d", st->op);
  if (st->op < 0 || st->op >= c->g->nops || c->host_pending[st->op] < 0)
    return fail(c, s, "host_compute_wait for op %s, which has no host_compute in flight%s", a, "");
  c->host_pending[st->op] = -1;
  return 0;
}

/* Counts of occupied buffers over byte ranges: a segment tree over the
 * elementary ranges between the plan's distinct offsets, with range add
 * and range max. */
typedef struct Cover {
  int *max, *add, n;
} Cover;

static void cover_add(Cover *c, int node, int l, int r, int ql, int qr, int v) {
  if (qr <= l || r <= ql) return;
  if (ql <= l && r <= qr) {
    c->max[node] += v;
    c->add[node] += v;
    return;
  }
  int mid = (l + r) / 2;
  cover_add(c, 2 * node, l, mid, ql, qr, v);
  cover_add(c, 2 * node + 1, mid, r, ql, qr, v);
  int a = c->max[2 * node], b = c->max[2 * node + 1];
  c->max[node] = (a > b ? a : b) + c->add[node];
}

static int cover_max(const Cover *c, int node, int l, int r, int ql, int qr) {
  if (qr <= l || r <= ql) return 0;
  if (ql <= l && r <= qr) return c->max[node];
  int mid = (l + r) / 2, a = cover_max(c, 2 * node, l, mid, ql, qr), b = cover_max(c, 2 * node + 1, mid, r, ql, qr);
  return (a > b ? a : b) + c->add[node];
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static _Thread_local const int *sort_key; /* qsort has no context argument in C11 */
static int by_key_then_id(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  if (sort_key[x] != sort_key[y]) return sort_key[x] < sort_key[y] ? -1 : 1;
  return x - y;
}

static int coord(const int64_t *xs, int n, int64_t v) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (xs[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool bytes_meet(const Buffer *a, const Buffer *b) {
  return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* No two buffers of one space that overlap in bytes are occupied at once:
 * a sweep over the steps that adds each buffer's byte range when it
 * becomes occupied and removes it after its last step, so a plan of n
 * buffers is checked in O(n log n) however many share an offset. */
static int check_overlaps(const Plan *p, const Graph *g, const int *first, const int *last, Err *e) {
  int nb = p->nbuffers, *by_first = util_xcalloc((size_t)nb, sizeof(int)), *by_last = util_xcalloc((size_t)nb, sizeof(int));
  int64_t *xs = util_xcalloc(2 * (size_t)nb, sizeof *xs);
  Cover c = {util_xcalloc(8 * (size_t)nb + 4, sizeof(int)), util_xcalloc(8 * (size_t)nb + 4, sizeof(int)), 0};
  int rc = -1;
  if (!by_first || !by_last || !xs || !c.max || !c.add) {
    err_set(e, "%s: out of memory", plan_name(p));
    goto out;
  }
  for (int space = SPACE_DEVICE; space <= SPACE_HOST; space++) {
    int n = 0, nx = 0;
    for (int b = 0; b < nb; b++) {
      const Buffer *bf = &p->buffers[b];
      if ((int)bf->space != space || first[b] < 0 || bf->bytes == 0) continue;
      by_first[n] = by_last[n] = b, n++;
      xs[nx++] = bf->offset, xs[nx++] = bf->offset + bf->bytes;
    }
    qsort(xs, (size_t)nx, sizeof *xs, cmp_i64);
    int m = 0;
    for (int i = 0; i < nx; i++)
      if (m == 0 || xs[i] != xs[m - 1]) xs[m++] = xs[i];
    memset(c.max, 0, (8 * (size_t)nb + 4) * sizeof(int));
    memset(c.add, 0, (8 * (size_t)nb + 4) * sizeof(int));
    sort_key = first;
    qsort(by_first, (size_t)n, sizeof(int), by_key_then_id);
    sort_key = last;
    qsort(by_last, (size_t)n, sizeof(int), by_key_then_id);
    for (int i = 0, r = 0; i < n; i++) {
      int b = by_first[i], s = first[b];
      const Buffer *bf = &p->buffers[b];
      for (; r < n && last[by_last[r]] < s; r++) {
        const Buffer *gone = &p->buffers[by_last[r]];
        cover_add(&c, 1, 0, m - 1, coord(xs, m, gone->offset), coord(xs, m, gone->offset + gone->bytes), -1);
      }
      int lo = coord(xs, m, bf->offset), hi = coord(xs, m, bf->offset + bf->bytes);
      if (cover_max(&c, 1, 0, m - 1, lo, hi) == 0) {
        cover_add(&c, 1, 0, m - 1, lo, hi, 1);
        continue;
      }
      /* Found at the step s: name the occupied buffer it meets. */
      int a = 0;
      for (; a < nb; a++)
        if (a != b && (int)p->buffers[a].space == space && p->buffers[a].bytes > 0 && first[a] >= 0 &&
            first[a] <= s && last[a] >= s && bytes_meet(&p->buffers[a], bf))
          break;
      if (a == nb) a = b; /* the count found one; this keeps the index in range */
      const char *na = p->buffers[a].tensor >= 0 ? g->tensors[p->buffers[a].tensor].name : "(workspace)";
      const char *nbn = bf->tensor >= 0 ? g->tensors[bf->tensor].name : "(workspace)";
      err_set(e, "%s: steps[%d]: buffers %d (\"%s\") and %d (\"%s\") overlap in %s bytes while both are occupied",
              plan_name(p), s, a < b ? a : b, a < b ? na : nbn, a < b ? b : a, a < b ? nbn : na,
              space == SPACE_DEVICE ? "device" : "host");
      goto out;
    }
  }
  rc = 0;
out:
  free(by_first);
  free(by_last);
  free(xs);
  free(c.max);
  free(c.add);
  return rc;
}

static int check_buffers(const Plan *p, const Graph *g, Err *e) {
  int64_t host_end = 0, total[2] = {0, 0};
  for (int b = 0; b < p->nbuffers; b++) {
    const Buffer *bf = &p->buffers[b];
    int64_t end;
    /* Live bytes are sums of buffer bytes: bounding the total keeps every
     * later sum exact. */
    if (bf->bytes < 0 || (bf->space != SPACE_DEVICE && bf->space != SPACE_HOST) ||
        !util_add_i64(total[bf->space], bf->bytes, &total[bf->space]))
      return err_set(e, "%s: buffers[%d].bytes: the buffers add up to more than 2^63 bytes", plan_name(p), b);
    if (bf->offset < 0 || !util_add_i64(bf->offset, bf->bytes, &end))
      return err_set(e, "%s: buffers[%d].offset: %" PRId64 " is not a valid offset", plan_name(p), b, bf->offset);
    if (bf->tensor >= 0 && bf->bytes != g->tensors[bf->tensor].bytes)
      return err_set(e, "%s: buffers[%d].bytes: %" PRId64 " but tensor \"%s\" has %" PRId64 " bytes", plan_name(p), b,
                     bf->bytes, g->tensors[bf->tensor].name, g->tensors[bf->tensor].bytes);
    if (bf->space == SPACE_DEVICE && end > p->arena_bytes)
      return err_set(e, "%s: buffers[%d].offset: buffer ends at byte %" PRId64 ", past the arena (%" PRId64 " bytes)",
                     plan_name(p), b, end, p->arena_bytes);
    if (bf->space == SPACE_HOST && end > host_end) host_end = end;
  }
  /* One home per resident tensor, nothing else has one, and only params
   * and optimizer state live on the host between steps. */
  int *homes = util_xcalloc((size_t)g->ntensors + 1, sizeof *homes);
  if (!homes) return err_set(e, "%s: out of memory", plan_name(p));
  int bad = -1;
  for (int b = 0; b < p->nbuffers && bad < 0; b++) {
    const Buffer *bf = &p->buffers[b];
    if (!bf->home) continue;
    if (bf->tensor < 0 || !graph_is_resident(&g->tensors[bf->tensor]) || homes[bf->tensor]++ ||
        (bf->space == SPACE_HOST && !plan_home_allowed(g, bf->tensor, DEC_HOST) &&
         !plan_home_allowed(g, bf->tensor, DEC_HOST_OPTIMIZER)))
      bad = b;
  }
  for (int t = 0; t < g->ntensors && bad < 0; t++)
    if (graph_is_resident(&g->tensors[t]) && !homes[t]) {
      free(homes);
      return err_set(e, "%s: buffers: resident tensor \"%s\" has no home buffer", plan_name(p), g->tensors[t].name);
    }
  free(homes);
  if (bad >= 0)
    return err_set(e, "%s: buffers[%d].home: only one buffer of a resident tensor is its home, on the host only for a "
                      "param or optimizer state, or a grad whose optimizer op may run on the host", plan_name(p), bad);
  if (host_end > p->host_bytes)
    return err_set(e, "%s: host_bytes: %" PRId64 " but host buffers reach byte %" PRId64, plan_name(p), p->host_bytes, host_end);
  if (p->arena_bytes > p->budget_bytes)
    return err_set(e, "%s: arena_bytes: %" PRId64 " is over the budget of %" PRId64 " bytes", plan_name(p), p->arena_bytes,
                   p->budget_bytes);
  return 0;
}

int sim_check(const Plan *p, const Graph *g, Err *e) {
  if (check_buffers(p, g, e)) return -1;
  int n = p->nbuffers;
  Check c = {.p = p, .g = g, .e = e};
  int **arrays[] = {&c.state, &c.offload_of, &c.offload_waited, &c.pending, &c.prefetch_of};
  int **by_tensor[] = {&c.wrote_at, &c.wrote_buf, &c.back_at, &c.back_from, &c.host_at};
  bool ok = true;
  for (size_t k = 0; k < sizeof arrays / sizeof arrays[0]; k++)
    ok = (*arrays[k] = util_xcalloc((size_t)n + 1, sizeof(int))) != NULL && ok;
  for (size_t k = 0; k < sizeof by_tensor / sizeof by_tensor[0]; k++)
    ok = (*by_tensor[k] = util_xcalloc((size_t)g->ntensors + 1, sizeof(int))) != NULL && ok;
  ok = (c.host_pending = util_xcalloc((size_t)g->nops + 1, sizeof(int))) != NULL && ok;
  int rc = -1;
  if (!ok) {
    err_set(e, "%s: out of memory", plan_name(p));
    goto out;
  }
  for (int b = 0; b < n; b++) {
    c.offload_of[b] = c.pending[b] = c.prefetch_of[b] = -1;
    const Buffer *bf = &p->buffers[b];
    /* A home holds its tensor's value from the step before. */
    if (bf->home) c.state[b] = B_WRITTEN, c.offload_waited[b] = 1;
  }
  /* A zeroed grad's buffer holds nothing until its zero step. */
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (st->kind == STEP_ZERO && valid_buffer(p, st->to) && zeroable(p, g, st->to)) c.state[st->to] = B_EMPTY;
  }
  for (int t = 0; t < g->ntensors; t++) c.wrote_at[t] = c.wrote_buf[t] = c.back_at[t] = c.back_from[t] = c.host_at[t] = -1;
  for (int i = 0; i < g->nops; i++) c.host_pending[i] = -1;
  int next_op = 0;
  for (int s = 0; s < p->nsteps; s++) {
    StepKind k = p->steps[s].kind;
    int r = k == STEP_COMPUTE        ? check_compute(&c, s, &next_op)
            : k == STEP_HOST_COMPUTE ? check_host_compute(&c, s, &next_op)
            : k == STEP_HOST_WAIT    ? check_host_wait(&c, s)
                                     : check_copy(&c, s);
    if (r) goto out;
  }
  for (int i = 0; i < g->nops; i++)
    if (c.host_pending[i] >= 0) {
      err_set(e, "%s: steps[%d]: host_compute of \"%s\" is never waited for", plan_name(p), c.host_pending[i], g->ops[i].name);
      goto out;
    }
  if (next_op < g->nops) {
    err_set(e, "%s: steps: op \"%s\" never runs", plan_name(p), g->ops[next_op].name);
    goto out;
  }
  for (int b = 0; b < n; b++)
    if (c.pending[b] >= 0) {
      err_set(e, "%s: steps[%d]: offload of \"%s\" is never waited for", plan_name(p), c.pending[b], tname(&c, b));
      goto out;
    }
  for (int b = 0; b < n; b++) {
    int t = p->buffers[b].tensor;
    if (!p->buffers[b].home || p->buffers[b].space != SPACE_HOST || c.wrote_at[t] < 0) continue;
    /* What the step wrote into a host-homed tensor reaches its home. */
    if (c.back_at[t] < c.wrote_at[t] || c.back_from[t] != c.wrote_buf[t]) {
      err_set(e, "%s: steps[%d]: \"%s\" is written into buffer %d but not copied back to its home after that",
              plan_name(p), c.wrote_at[t], g->tensors[t].name, c.wrote_buf[t]);
      goto out;
    }
  }
  int *first = c.offload_of, *last = c.prefetch_of; /* reuse the scratch */
  if (sim_occupancy(p, g, first, last)) {
    err_set(e, "%s: steps: unknown buffer", plan_name(p));
    goto out;
  }
  rc = check_overlaps(p, g, first, last, e);
out:
  for (size_t k = 0; k < sizeof arrays / sizeof arrays[0]; k++) free(*arrays[k]);
  for (size_t k = 0; k < sizeof by_tensor / sizeof by_tensor[0]; k++) free(*by_tensor[k]);
  free(c.host_pending);
  return rc;
}

void sim_result_free(SimResult *r) {
  free(r->live_bytes);
  r->live_bytes = NULL;
}

/* End time of the last step, before step s, that used bytes overlapping
 * buffer `to`: a prefetch may not overwrite them earlier. */
static double bytes_free_at(const Plan *p, const int *first, const int *last, const double *done, int to, int s) {
  const Buffer *t = &p->buffers[to];
  double at = 0;
  for (int b = 0; b < p->nbuffers; b++) {
    const Buffer *o = &p->buffers[b];
    if (b == to || o->space != SPACE_DEVICE || first[b] < 0 || last[b] >= s) continue;
    if (o->offset < t->offset + t->bytes && t->offset < o->offset + o->bytes && done[last[b]] > at) at = done[last[b]];
  }
  return at;
}

int sim_live(const Plan *p, const int *first, const int *last, SimResult *r) {
  int ns = p->nsteps;
  int64_t *delta = util_xcalloc((size_t)ns + 1, sizeof(int64_t)), *host_delta = util_xcalloc((size_t)ns + 1, sizeof(int64_t));
  if (!delta || !host_delta) {
    free(delta);
    free(host_delta);
    return -1;
  }
  for (int b = 0; b < p->nbuffers; b++) {
    if (first[b] < 0) continue;
    int64_t *dl = p->buffers[b].space == SPACE_DEVICE ? delta : host_delta;
    dl[first[b]] += p->buffers[b].bytes;
    dl[last[b] + 1] -= p->buffers[b].bytes;
  }
  int64_t live = 0, host = 0;
  r->peak_step = 0;
  for (int s = 0; s < ns; s++) {
    live += delta[s];
    host += host_delta[s];
    if (r->live_bytes) r->live_bytes[s] = live;
    if (live > r->peak_live_bytes) r->peak_live_bytes = live, r->peak_step = s;
    if (host > r->peak_host_bytes) r->peak_host_bytes = host;
  }
  r->nsteps = ns;
  free(delta);
  free(host_delta);
  return 0;
}

/* The replay of a checked plan into r. LAYOUT_FREE: a prefetch does not
 * wait for the bytes it overwrites to be done with (the one place offsets
 * enter the times), which only takes waits away. */
static int replay(const Plan *p, const Graph *g, const Device *d, bool with_trace, bool layout_free, SimResult *r, Err *e) {
  memset(r, 0, sizeof *r);
  int n = p->nbuffers, ns = p->nsteps;
  int *first = util_xcalloc((size_t)n, sizeof(int)), *last = util_xcalloc((size_t)n, sizeof(int));
  double *done = util_xcalloc((size_t)ns, sizeof(double)), *copy_end = util_xcalloc((size_t)n, sizeof(double));
  double *host_end = util_xcalloc((size_t)g->nops + 1, sizeof(double)); /* by op */
  r->live_bytes = with_trace ? util_xcalloc((size_t)ns, sizeof(int64_t)) : NULL;
  int rc = -1;
  if (!first || !last || !done || !copy_end || !host_end || (with_trace && !r->live_bytes)) {
    err_set(e, "%s: out of memory", plan_name(p));
    goto out;
  }
  sim_occupancy(p, g, first, last);
  if (sim_live(p, first, last, r)) {
    err_set(e, "%s: out of memory", plan_name(p));
    goto out;
  }
  double compute = 0, d2h = 0, h2d = 0, host = 0;
  for (int s = 0; s < ns; s++) {
    const Step *st = &p->steps[s];
    switch (st->kind) {
    case STEP_COMPUTE: {
      double t = cost_op_seconds(g, d, st->op);
      compute += t;
      if (st->recompute) r->recompute_seconds += t;
      else r->compute_seconds += t;
      done[s] = compute;
      break;
    }
    case STEP_OFFLOAD: {
      double start = d2h > compute ? d2h : compute, t = cost_d2h_seconds(d, p->buffers[st->from].bytes);
      d2h = start + t;
      compute += d->copy_compute_share * t;
      r->stall_seconds += d->copy_compute_share * t;
      copy_end[st->to] = d2h;
      copy_end[st->from] = d2h;
      done[s] = d2h;
      break;
    }
    case STEP_PREFETCH: {
      double start = h2d;
      if (copy_end[st->from] > start) start = copy_end[st->from];
      double bytes_ready = layout_free ? 0 : bytes_free_at(p, first, last, done, st->to, s);
      if (bytes_ready > start) start = bytes_ready;
      double t = cost_h2d_seconds(d, p->buffers[st->to].bytes);
      h2d = start + t;
      compute += d->copy_compute_share * t;
      r->stall_seconds += d->copy_compute_share * t;
      copy_end[st->to] = h2d;
      done[s] = h2d;
      break;
    }
    case STEP_ZERO: /* like the step-start zeroing it replaces, not timed */
    case STEP_KIND_COUNT: done[s] = compute; break;
    case STEP_OFFLOAD_WAIT:
    case STEP_PREFETCH_WAIT: {
      double ready = copy_end[st->kind == STEP_OFFLOAD_WAIT ? st->from : st->to];
      if (ready > compute) {
        r->stall_seconds += ready - compute;
        compute = ready;
      }
      done[s] = compute;
      break;
    }
    case STEP_HOST_COMPUTE: {
      /* Issued where the compute stream reaches it, after its inputs' copies. */
      double start = host > compute ? host : compute, t = cost_host_op_seconds(g, d, st->op);
      if (t < 0) {
        err_set(e, "%s: steps[%d]: runs \"%s\" on the host, but device %s gives no host compute (host_memory_gbps)",
                plan_name(p), s, g->ops[st->op].name, d->name);
        goto out;
      }
      for (int k = 0; k < g->ops[st->op].ninputs; k++)
        if (copy_end[st->inputs[k]] > start) start = copy_end[st->inputs[k]];
      host = start + t;
      r->host_seconds += t;
      host_end[st->op] = host;
      done[s] = host;
      break;
    }
    case STEP_HOST_WAIT:
      if (host_end[st->op] > compute) {
        r->stall_seconds += host_end[st->op] - compute;
        compute = host_end[st->op];
      }
      done[s] = compute;
      break;
    }
  }
  r->step_seconds = compute;
  if (host > r->step_seconds) r->step_seconds = host;
  if (d2h > r->step_seconds) r->step_seconds = d2h;
  if (h2d > r->step_seconds) r->step_seconds = h2d;
  rc = 0;
out:
  free(first);
  free(last);
  free(done);
  free(copy_end);
  free(host_end);
  if (rc) sim_result_free(r);
  return rc;
}

int sim_run(const Plan *p, const Graph *g, const Device *d, bool with_trace, SimResult *r, Err *e) {
  memset(r, 0, sizeof *r);
  return sim_check(p, g, e) ? -1 : replay(p, g, d, with_trace, false, r, e);
}

double sim_step_bound(const Plan *p, const Graph *g, const Device *d) {
  SimResult r;
  Err e;
  if (replay(p, g, d, false, true, &r, &e)) return -1;
  sim_result_free(&r);
  return r.step_seconds;
}
