/*
 * sync.c - the one place where a plan's cross-stream waits are derived.
 *
 * A plan's steps run on four FIFO streams (compute, D2H, H2D, host). Any two
 * steps on different streams that touch overlapping bytes of one arena,
 * at least one of them writing, must be ordered, or the runtime races: a
 * prefetch must not overwrite bytes the compute stream still reads, an
 * offload must not fill host bytes a prefetch still copies out, the compute
 * stream must not reuse bytes a D2H copy still reads. On top of those byte
 * hazards come the plan's own sync points (offload after everything issued
 * before it on compute; offload_wait and prefetch_wait make compute wait for
 * their copy). Waits already implied by an earlier wait (tracked with a
 * vector clock per stream) are dropped, so the emitted tables carry exactly
 * the waits a backend must honour, and every backend honours the same ones.
 */
#include "ration.h"

#include <stdlib.h>
#include <string.h>

typedef struct Access {
  int last_any[SYNC_STREAMS];   /* last step on each stream touching the buffer */
  int last_write[SYNC_STREAMS]; /* last step on each stream writing it */
} Access;

int sync_step_stream(StepKind k) {
  switch (k) {
  case STEP_OFFLOAD: return SYNC_D2H;
  case STEP_PREFETCH: return SYNC_H2D;
  case STEP_HOST_COMPUTE: return SYNC_HOST;
  default: return SYNC_COMPUTE; /* compute and both *_wait sync points */
  }
}

/* For every buffer, the buffers of the same space whose byte ranges overlap
 * it (itself included), as a CSR list. Sorting by offset keeps it linear in
 * the number of overlapping pairs. */
typedef struct Overlaps {
  int *start, *list;
} Overlaps;

static _Thread_local const Plan *g_sort_plan; /* qsort has no context argument in C11 */
static int by_space_offset(const void *a, const void *b) {
  const Buffer *x = &g_sort_plan->buffers[*(const int *)a], *y = &g_sort_plan->buffers[*(const int *)b];
  if (x->space != y->space) return x->space < y->space ? -1 : 1;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

static int overlaps_build(const Plan *p, Overlaps *o) {
  int n = p->nbuffers;
  int *order = util_xcalloc((size_t)n + 1, sizeof *order);
  int *count = util_xcalloc((size_t)n + 1, sizeof *count);
  o->start = util_xcalloc((size_t)n + 1, sizeof *o->start);
  o->list = NULL;
  if (!order || !count || !o->start) goto fail;
  for (int i = 0; i < n; i++) order[i] = i;
  g_sort_plan = p;
  qsort(order, (size_t)n, sizeof *order, by_space_offset);
  /* Two passes over the sorted sweep: count, then fill. */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      o->start[0] = 0;
      for (int i = 0; i < n; i++) o->start[i + 1] = o->start[i] + count[i];
      o->list = util_xcalloc((size_t)o->start[n] + 1, sizeof *o->list);
      if (!o->list) goto fail;
      memset(count, 0, (size_t)n * sizeof *count);
    }
    for (int i = 0; i < n; i++) {
      const Buffer *a = &p->buffers[order[i]];
      if (a->bytes <= 0) continue;
      for (int j = i; j < n; j++) {
        const Buffer *b = &p->buffers[order[j]];
        if (b->space != a->space || b->offset >= a->offset + a->bytes) break;
        if (b->bytes <= 0) continue;
        int x = order[i], y = order[j];
        if (pass == 1) o->list[o->start[x] + count[x]] = y;
        count[x]++;
        if (x != y) {
          if (pass == 1) o->list[o->start[y] + count[y]] = x;
          count[y]++;
        }
      }
    }
  }
  free(order);
  free(count);
  return 0;
fail:
  free(order);
  free(count);
  free(o->start);
  free(o->list);
  return -1;
}

static void add_cand(int *cand, int *ncand, int step) {
  if (step < 0) return;
  for (int i = 0; i < *ncand; i++)
    if (cand[i] == step) return;
  cand[(*ncand)++] = step;
}

static int cmp_int(const void *a, const void *b) {
  return *(const int *)a - *(const int *)b;
}

int sync_derive(const Plan *p, const Graph *g, SyncTable *t, Err *e) {
  memset(t, 0, sizeof *t);
  int ns = p->nsteps, nb = p->nbuffers;
  Overlaps ov = {0};
  Access *acc = util_xcalloc((size_t)nb + 1, sizeof *acc);
  int (*clock)[SYNC_STREAMS] = util_xcalloc((size_t)ns + 1, sizeof *clock);
  int *offload_of = util_xcalloc((size_t)nb + 1, sizeof *offload_of);
  int *prefetch_of = util_xcalloc((size_t)nb + 1, sizeof *prefetch_of);
  int *host_of = util_xcalloc((size_t)g->nops + 1, sizeof *host_of); /* op -> its host_compute step */
  t->stream = util_xcalloc((size_t)ns + 1, sizeof *t->stream);
  t->wait_start = util_xcalloc((size_t)ns + 1, sizeof *t->wait_start);
  t->event = util_xcalloc((size_t)ns + 1, sizeof *t->event);
  int cap = 0, *cand = NULL, rc = -1;
  if (!acc || !clock || !offload_of || !prefetch_of || !host_of || !t->stream || !t->wait_start || !t->event ||
      overlaps_build(p, &ov) < 0)
    goto nomem;
  t->nsteps = ns;
  for (int i = 0; i < g->nops; i++) host_of[i] = -1;
  for (int b = 0; b < nb; b++) {
    offload_of[b] = prefetch_of[b] = -1;
    for (int y = 0; y < SYNC_STREAMS; y++) acc[b].last_any[y] = acc[b].last_write[y] = -1;
  }
  int frontier[SYNC_STREAMS][SYNC_STREAMS]; /* frontier[x][y]: last y step known done on x */
  for (int x = 0; x < SYNC_STREAMS; x++)
    for (int y = 0; y < SYNC_STREAMS; y++) frontier[x][y] = -1;
  int last_compute = -1, wcap = 0;
  for (int s = 0; s < ns; s++) {
    const Step *st = &p->steps[s];
    int x = sync_step_stream(st->kind);
    t->stream[s] = x;
    t->event[s] = -1;
    int reads[64], nreads = 0, writes[64], nwrites = 0;
    if (st->kind == STEP_COMPUTE || st->kind == STEP_HOST_COMPUTE) {
      const Op *op = &g->ops[st->op];
      if (op->ninputs > 64 || op->noutputs + 1 > 64) {
        err_set(e, "%s: op %s has too many operands", g->path ? g->path : g->name, op->name);
        goto fail;
      }
      for (int i = 0; i < op->ninputs; i++) reads[nreads++] = st->inputs[i];
      for (int i = 0; i < op->noutputs; i++) writes[nwrites++] = st->outputs[i];
      if (st->workspace >= 0) writes[nwrites++] = st->workspace;
    } else if (st->kind == STEP_OFFLOAD || st->kind == STEP_PREFETCH) {
      reads[nreads++] = st->from;
      writes[nwrites++] = st->to;
    } else if (st->kind == STEP_ZERO) {
      writes[nwrites++] = st->to; /* over bytes a copy may still use */
    }
    int need = 3 + nreads * SYNC_STREAMS;
    for (int i = 0; i < nwrites; i++)
      need += (ov.start[writes[i] + 1] - ov.start[writes[i]]) * SYNC_STREAMS;
    if (need > cap) {
      free(cand);
      cap = need * 2;
      cand = util_xcalloc((size_t)cap, sizeof *cand);
      if (!cand) goto nomem;
    }
    int nc = 0;
    /* The plan's sync points. */
    if (st->kind == STEP_OFFLOAD) {
      add_cand(cand, &nc, last_compute);
      offload_of[st->from] = s;
    } else if (st->kind == STEP_OFFLOAD_WAIT) {
      add_cand(cand, &nc, offload_of[st->from]);
    } else if (st->kind == STEP_PREFETCH) {
      prefetch_of[st->to] = s;
    } else if (st->kind == STEP_PREFETCH_WAIT) {
      add_cand(cand, &nc, prefetch_of[st->to]);
    } else if (st->kind == STEP_HOST_COMPUTE) {
      /* Issued where the compute stream reaches it, as an offload is. */
      add_cand(cand, &nc, last_compute);
      host_of[st->op] = s;
    } else if (st->kind == STEP_HOST_WAIT) {
      add_cand(cand, &nc, host_of[st->op]);
    }
    /* Byte hazards: read after write, and write after anything. */
    for (int i = 0; i < nreads; i++)
      for (int y = 0; y < SYNC_STREAMS; y++)
        if (y != x) add_cand(cand, &nc, acc[reads[i]].last_write[y]);
    for (int i = 0; i < nwrites; i++)
      for (int k = ov.start[writes[i]]; k < ov.start[writes[i] + 1]; k++)
        for (int y = 0; y < SYNC_STREAMS; y++)
          if (y != x) add_cand(cand, &nc, acc[ov.list[k]].last_any[y]);
    /* Keep only waits not implied by this stream's frontier or by another
     * candidate (whose completion already covers it). */
    int kept = 0;
    for (int i = 0; i < nc; i++) {
      int c = cand[i], y = t->stream[c];
      if (y == x || frontier[x][y] >= c) continue;
      bool implied = false;
      for (int j = 0; j < nc && !implied; j++)
        if (j != i && cand[j] != c && t->stream[cand[j]] != x && clock[cand[j]][y] >= c) implied = true;
      if (!implied) cand[kept++] = c;
    }
    /* A host wait names the step it waits for (rt_open checks), implied or not. */
    if (st->kind == STEP_HOST_WAIT && host_of[st->op] >= 0) {
      bool named = false;
      for (int i = 0; i < kept; i++) named |= cand[i] == host_of[st->op];
      if (!named) cand[kept++] = host_of[st->op];
    }
    qsort(cand, (size_t)kept, sizeof *cand, cmp_int);
    if (t->nwaits + kept > wcap) {
      wcap = (t->nwaits + kept) * 2 + 16;
      int *nw = realloc(t->waits, (size_t)wcap * sizeof *nw);
      if (!nw) goto nomem;
      t->waits = nw;
    }
    t->wait_start[s] = t->nwaits;
    for (int i = 0; i < kept; i++) {
      t->waits[t->nwaits++] = cand[i];
      for (int y = 0; y < SYNC_STREAMS; y++)
        if (clock[cand[i]][y] > frontier[x][y]) frontier[x][y] = clock[cand[i]][y];
    }
    frontier[x][x] = s;
    memcpy(clock[s], frontier[x], sizeof clock[s]);
    /* Record this step's accesses; the *_wait points are the compute
     * stream's last touch of their buffer. */
    for (int i = 0; i < nreads; i++) acc[reads[i]].last_any[x] = s;
    for (int i = 0; i < nwrites; i++) acc[writes[i]].last_any[x] = acc[writes[i]].last_write[x] = s;
    if (st->kind == STEP_OFFLOAD_WAIT) acc[st->from].last_any[x] = s;
    if (st->kind == STEP_PREFETCH_WAIT) acc[st->to].last_any[x] = s;
    if (x == SYNC_COMPUTE) last_compute = s;
  }
  t->wait_start[ns] = t->nwaits;
  /* Events: one per step that is waited for, numbered in step order. */
  for (int i = 0; i < t->nwaits; i++) t->event[t->waits[i]] = -2;
  for (int s = 0; s < ns; s++)
    if (t->event[s] == -2) t->event[s] = t->nevents++;
  rc = 0;
  goto out;
nomem:
  err_set(e, "%s: out of memory deriving stream waits", g->path ? g->path : g->name);
fail:
  sync_free(t);
out:
  free(cand);
  free(acc);
  free(clock);
  free(offload_of);
  free(prefetch_of);
  free(host_of);
  free(ov.start);
  free(ov.list);
  return rc;
}

void sync_free(SyncTable *t) {
  free(t->stream);
  free(t->wait_start);
  free(t->waits);
  free(t->event);
  memset(t, 0, sizeof *t);
}
