/*
 * repair.c - decision changes judged by the simulator and the layout
 * themselves, where the model's answer is not yet the plan: the model's
 * peak is exact, but the arena adds the layout's fragmentation and the
 * model's stalls are an estimate (docs/PLANNING.md section 5). An answer
 * over the budget by its layout is repaired by single changes that lower
 * its arena, the first found or the fastest by the simulator; each repair
 * is remembered, so that another answer whose repair reaches the same
 * decisions ends where that one did at once. A plan that fits is polished
 * by single and, on the smallest graphs, paired changes that make it
 * faster.
 */
#include "ilp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ILP_PAIRS_MAX 16 /* stashed tensors up to which polish tries pairs of changes */

/* ------------------------------------------------------------ one plan */

/* DEC's plan built up to its schedule, or NULL where its arena cannot be
 * at most CAP (its layout's lower bound is over it) or its step cannot be
 * under BELOW (sim_step_bound; HUGE_VAL: any step) or on error: the
 * layout's search, most of a plan's build near the smallest budget, is
 * paid only for a plan that may be kept. The changes judged by the
 * simulator below keep only plans within such limits, so this gives them
 * the same answers. */
static Plan *scheduled_within(const Graph *g, const Device *d, const Decision *dec, int64_t cap, double below) {
  Err e;
  Plan *p = plan_schedule_decisions(g, d, dec, &e);
  if (p && (layout_device_lower_bound(p, g) > cap || (below < HUGE_VAL && sim_step_bound(p, g, d) >= below))) {
    plan_free(p);
    p = NULL;
  }
  return p;
}

/* The same laid out and simulated. */
static Plan *plan_within(const Graph *g, const Device *d, const Decision *dec, int64_t cap, double below) {
  Err e;
  Plan *p = scheduled_within(g, d, dec, cap, below);
  if (p && plan_finish(p, g, d, &e)) {
    plan_free(p);
    p = NULL;
  }
  return p;
}

bool ilp_try_plan(const Graph *g, const Device *d, int64_t budget, const Decision *dec, double below, double *step) {
  Plan *p = plan_within(g, d, dec, budget, below);
  bool ok = p && plan_fits(p, d, budget) && p->predicted.step_seconds < below;
  if (ok) *step = p->predicted.step_seconds;
  plan_free(p);
  return ok;
}

/* Whether the changes by the simulator may move t to dec: an offload only
 * where the model has one (limit_host; never on a unified_memory device,
 * where a layout's luck could otherwise buy one). */
static bool may_take(const Graph *g, const Device *d, int t, int dec) {
  return dec != DEC_OFFLOAD || plan_host_share(g, t) <= plan_host_limit(d);
}

/* ------------------------------------------------------------ repairs */

/* A single change: stashed tensor t to TO; ORDER: its place in the scan,
 * which breaks ties between equal steps as the scan would. Where the
 * fastest-change repair built its plan up to the schedule: that plan P,
 * its layout's lower bound LB and its step's BOUND (sim_step_bound). */
typedef struct {
  int t;
  Decision to;
  double bound;
  int order;
  int64_t lb;
  Plan *p;
} Change;

/* Every single change of DEC the repairs may take, in scan order, into
 * CH (3 per stashed tensor at most): how many. */
static int single_changes(const Graph *g, const Device *d, const Decision *dec, Change *ch) {
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    for (int a = DEC_KEEP; a <= DEC_OFFLOAD; a++)
      if (a != (int)dec[t] && may_take(g, d, t, a)) ch[n] = (Change){.t = t, .to = (Decision)a, .order = n}, n++;
  }
  return n;
}

/* ------------------------------------------------------------ changes judged side by side */

/* Changes of one decision built and judged on util_parallel_for's threads,
 * each from its own copy of the decisions, a batch at a time; the scans
 * below take the first or the fastest in their order, as one thread
 * would, so the plan is the same on any number of threads. */
typedef struct {
  const Graph *g;
  const Device *d;
  const Decision *dec; /* the decisions every change is made to */
  Change *ch;
  int64_t cap;         /* plan_within's */
  double below;
  int64_t budget;      /* ilp_try_plan's */
  /* The batch: its changes' places in ch, and per change whether it is
   * taken, with its arena (first_change) or step (polish). */
  int batch[UTIL_MAX_THREADS];
  bool ok[UTIL_MAX_THREADS];
  int64_t arena[UTIL_MAX_THREADS];
  double step[UTIL_MAX_THREADS];
} Batch;

/* DEC with change CH into a fresh copy (NULL out of memory). */
static Decision *changed(const Graph *g, const Decision *dec, const Change *ch) {
  Decision *c = util_xcalloc((size_t)g->ntensors + 1, sizeof *c);
  if (c) memcpy(c, dec, (size_t)g->ntensors * sizeof *c), c[ch->t] = ch->to;
  return c;
}

/* Change I of all of b->ch scheduled: its plan, its layout's lower bound
 * and its step's (sim_step_bound), for fastest_change. */
static void schedule_one(void *ctx, int i) {
  Batch *b = ctx;
  Change *c = &b->ch[i];
  Decision *dec = changed(b->g, b->dec, c);
  Err e;
  c->p = dec ? plan_schedule_decisions(b->g, b->d, dec, &e) : NULL;
  c->lb = c->p ? layout_device_lower_bound(c->p, b->g) : INT64_MAX;
  c->bound = c->p ? fmax(0, sim_step_bound(c->p, b->g, b->d)) : HUGE_VAL;
  free(dec);
}

/* A scheduled change laid out and simulated (its plan freed where that fails). */
static void finish_one(void *ctx, int i) {
  Batch *b = ctx;
  Change *c = &b->ch[b->batch[i]];
  Err e;
  if (c->p && plan_finish(c->p, b->g, b->d, &e)) plan_free(c->p), c->p = NULL;
}

/* Taken where its plan's arena is within cap and it fits a device
 * (plan_within), for first_change. */
static void arena_one(void *ctx, int i) {
  Batch *b = ctx;
  Decision *dec = changed(b->g, b->dec, &b->ch[b->batch[i]]);
  Plan *p = dec ? plan_within(b->g, b->d, dec, b->cap, HUGE_VAL) : NULL;
  b->ok[i] = p && p->arena_bytes <= b->cap && plan_fits(p, b->d, INT64_MAX);
  b->arena[i] = b->ok[i] ? p->arena_bytes : -1;
  plan_free(p);
  free(dec);
}

/* Taken where it fits the budget with a step under below (ilp_try_plan), for polish. */
static void step_one(void *ctx, int i) {
  Batch *b = ctx;
  Decision *dec = changed(b->g, b->dec, &b->ch[b->batch[i]]);
  b->ok[i] = dec && ilp_try_plan(b->g, b->d, b->budget, dec, b->below, &b->step[i]);
  free(dec);
}

/* The first of the N changes in b->ch, in their order, that JUDGE takes,
 * judged a batch of util_threads() at a time; its place in the batch
 * into *at. -1: none, or the deadline passed. */
static int first_taken(Batch *b, int n, void (*judge)(void *ctx, int i), double deadline, int *at) {
  int threads = util_threads();
  for (int k = 0; k < n && !ilp_out_of_time(deadline); k += threads) {
    int m = n - k < threads ? n - k : threads;
    for (int i = 0; i < m; i++) b->batch[i] = k + i;
    util_parallel_for(m, judge, b);
    for (int i = 0; i < m; i++)
      if (b->ok[i]) return *at = i, k + i;
  }
  return -1;
}

/* The first single change that lowers the arena (the memory-minimizing
 * solve's plan: only the arena matters there), into dec and *arena:
 * whether there was one. CH: scratch for every change. */
static bool first_change(const Graph *g, const Device *d, Decision *dec, int64_t *arena, Change *ch) {
  Batch b = {.g = g, .d = d, .dec = dec, .ch = ch, .cap = *arena - 1};
  int at, k = first_taken(&b, single_changes(g, d, dec, ch), arena_one, HUGE_VAL, &at);
  if (k < 0) return false;
  dec[ch[k].t] = ch[k].to, *arena = b.arena[at];
  return true;
}

static int by_bound(const void *a, const void *b) {
  const Change *x = a, *y = b;
  if (x->bound != y->bound) return x->bound < y->bound ? -1 : 1;
  return (x->order > y->order) - (x->order < y->order);
}

/* Among the single changes that lower the arena, one that fits the budget
 * if any does, the fastest by the simulator (ties: the first in the scan),
 * into dec and *arena: whether there was one. CH: scratch for every
 * change. The answers sit at the peak limit and their layouts 66-315 KB
 * over it (gpt2-tiny at its smallest budget); the first change that
 * lowers the arena is mostly a slow one, so a repaired answer beat the
 * plan in hand only in the tenth round, where the fastest ones do in the
 * second (2026-11-29). */
static bool fastest_change(const Graph *g, const Device *d, int64_t budget, Decision *dec, int64_t *arena, Change *ch) {
  /* The changes that may lower the arena, by their steps' bounds, their
   * plans kept: each is laid out only while it may still be taken. */
  int all = single_changes(g, d, dec, ch), n = 0, threads = util_threads();
  Batch b = {.g = g, .d = d, .dec = dec, .ch = ch};
  util_parallel_for(all, schedule_one, &b);
  for (int k = 0; k < all; k++) {
    if (ch[k].lb > *arena - 1) {
      plan_free(ch[k].p);
      continue;
    }
    ch[n++] = ch[k];
  }
  qsort(ch, (size_t)n, sizeof *ch, by_bound);
  int take = -1;
  double take_step = HUGE_VAL;
  int64_t take_arena = *arena;
  /* Laid out a batch at a time, from the first one the scan needs: what it
   * then skips is only work spent. */
  bool *finished = util_xcalloc((size_t)n + 1, sizeof *finished);
  for (int k = 0; finished && k < n; k++) {
    bool taken_fits = take_arena <= budget;
    /* Its step and order are at least its bound's: behind the one taken,
     * it can be taken instead only by fitting where that does not. */
    bool behind = take >= 0 && (ch[k].bound > take_step || (ch[k].bound == take_step && ch[k].order > ch[take].order));
    if (behind && taken_fits) break;
    if (ch[k].lb > (behind || taken_fits ? budget : *arena - 1)) continue;
    if (!finished[k]) {
      int m = 0;
      for (int j = k; j < n && m < threads; j++)
        if (!finished[j]) b.batch[m++] = j, finished[j] = true;
      util_parallel_for(m, finish_one, &b);
    }
    Plan *p = ch[k].p;
    if (!p) continue;
    if (p->arena_bytes < *arena && plan_fits(p, d, INT64_MAX)) {
      double step = p->predicted.step_seconds;
      bool fits = p->arena_bytes <= budget;
      bool faster = step < take_step || (step == take_step && ch[k].order < ch[take].order);
      if ((fits && !taken_fits) || (fits == taken_fits && faster)) take = k, take_step = step, take_arena = p->arena_bytes;
    }
  }
  for (int k = 0; k < n; k++) plan_free(ch[k].p);
  free(finished);
  if (take < 0) return false;
  dec[ch[take].t] = ch[take].to;
  *arena = take_arena;
  return true;
}

/* The repair that passed through decisions DEC at arena ARENA, or -1. */
static int repairs_find(const Repairs *r, const Decision *dec, int64_t arena, size_t size) {
  for (int i = 0; i < r->n; i++)
    if (r->from_arena[i] == arena && !memcmp(r->from + (size_t)i * r->ntensors, dec, size)) return i;
  return -1;
}

static void repairs_add(Repairs *r, const Decision *from, int64_t from_arena, const Decision *to, int64_t arena) {
  size_t nt = (size_t)r->ntensors;
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    Decision *f = realloc(r->from, (size_t)cap * nt * sizeof *f);
    if (f) r->from = f;
    Decision *t = realloc(r->to, (size_t)cap * nt * sizeof *t);
    if (t) r->to = t;
    int64_t *fa = realloc(r->from_arena, (size_t)cap * sizeof *fa);
    if (fa) r->from_arena = fa;
    int64_t *a = realloc(r->arena, (size_t)cap * sizeof *a);
    if (a) r->arena = a;
    if (!f || !t || !fa || !a) return; /* not remembered: repaired again when met */
    r->cap = cap;
  }
  memcpy(r->from + (size_t)r->n * nt, from, nt * sizeof *from);
  memcpy(r->to + (size_t)r->n * nt, to, nt * sizeof *to);
  r->from_arena[r->n] = from_arena;
  r->arena[r->n++] = arena;
}

void ilp_repairs_free(Repairs *r) {
  free(r->from);
  free(r->to);
  free(r->from_arena);
  free(r->arena);
  *r = (Repairs){.ntensors = r->ntensors};
}

int64_t ilp_repair(const Graph *g, const Device *d, int64_t budget, Decision *dec, int64_t arena, bool fastest, double deadline,
                   Repairs *memo) {
  if (g->nstashed > ILP_POLISH_MAX) return arena;
  size_t nt = (size_t)g->ntensors, size = nt * sizeof *dec;
  Change *ch = util_xcalloc(3 * (size_t)g->nstashed + 1, sizeof *ch);
  Decision *path = NULL; /* the decisions and arena at each step's start */
  int64_t *path_arena = NULL;
  int npath = 0, cap = 0;
  bool ended = ch != NULL; /* a repair cut short is not remembered */
  for (bool moved = ended; moved && arena > budget;) {
    if (ilp_out_of_time(deadline)) {
      ended = false;
      break;
    }
    int seen = memo ? repairs_find(memo, dec, arena, size) : -1;
    if (seen >= 0) {
      memcpy(dec, memo->to + (size_t)seen * nt, size);
      arena = memo->arena[seen];
      break;
    }
    if (memo && npath == cap) {
      cap = cap ? 2 * cap : 8;
      Decision *grown = realloc(path, (size_t)cap * size);
      if (grown) path = grown;
      int64_t *grown_arena = realloc(path_arena, (size_t)cap * sizeof *path_arena);
      if (grown_arena) path_arena = grown_arena;
      if (!grown || !grown_arena) memo = NULL;
    }
    if (memo) memcpy(path + (size_t)npath * nt, dec, size), path_arena[npath++] = arena;
    moved = fastest ? fastest_change(g, d, budget, dec, &arena, ch) : first_change(g, d, dec, &arena, ch);
  }
  for (int i = 0; memo && ended && i < npath; i++) repairs_add(memo, path + (size_t)i * nt, path_arena[i], dec, arena);
  free(path);
  free(path_arena);
  free(ch);
  return arena;
}

/* ------------------------------------------------------------ polish */

bool ilp_polish(const Graph *g, const Device *d, int64_t budget, Decision *dec, double *best, double deadline) {
  if (g->nstashed > ILP_POLISH_MAX) return false;
  bool any = false;
  Change *ch = util_xcalloc(3 * (size_t)g->nstashed + 1, sizeof *ch);
  for (bool moved = ch != NULL; moved && !ilp_out_of_time(deadline);) {
    /* The first single change in scan order that is faster is taken. */
    Batch batch = {.g = g, .d = d, .dec = dec, .ch = ch, .budget = budget, .below = *best * (1 - 1e-12)};
    int at, k = first_taken(&batch, single_changes(g, d, dec, ch), step_one, deadline, &at);
    moved = k >= 0;
    if (moved) dec[ch[k].t] = ch[k].to, *best = batch.step[at], any = true;
    for (int i = 0; g->nstashed <= ILP_PAIRS_MAX && i < g->nstashed && !moved && !ilp_out_of_time(deadline); i++)
      for (int j = i + 1; j < g->nstashed && !moved; j++) {
        int t = g->stashed[i], u = g->stashed[j];
        Decision wt = dec[t], wu = dec[u];
        for (int a = DEC_KEEP; a <= DEC_OFFLOAD && !moved; a++)
          for (int b = DEC_KEEP; b <= DEC_OFFLOAD && !moved; b++) {
            if (a == (int)wt || b == (int)wu || !may_take(g, d, t, a) || !may_take(g, d, u, b)) continue;
            dec[t] = (Decision)a, dec[u] = (Decision)b;
            double st;
            if (ilp_try_plan(g, d, budget, dec, *best * (1 - 1e-12), &st)) *best = st, moved = any = true;
            else dec[t] = wt, dec[u] = wu;
          }
      }
  }
  free(ch);
  return any;
}
