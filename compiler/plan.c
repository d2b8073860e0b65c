/*
 * plan.c - the Plan object and the end-to-end planning driver: a strategy
 * picks decisions, the schedule builder turns them into steps, layout gives
 * offsets, the simulator predicts time and peak, and the budget is checked.
 */
#include "ration.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Plan *plan_new(const Graph *g) {
  Plan *p = util_xcalloc(1, sizeof *p);
  if (!p) return NULL;
  p->decisions = util_xcalloc((size_t)g->ntensors, sizeof *p->decisions);
  if (!p->decisions) {
    free(p);
    return NULL;
  }
  for (int t = 0; t < g->ntensors; t++) p->decisions[t] = DEC_NONE;
  snprintf(p->graph_name, sizeof p->graph_name, "%s", g->name);
  memcpy(p->graph_sha256, g->sha256, sizeof p->graph_sha256);
  p->alignment = PLAN_ALIGNMENT;
  snprintf(p->solver.name, sizeof p->solver.name, "none");
  snprintf(p->solver.status, sizeof p->solver.status, "not_used");
  return p;
}

void plan_free(Plan *p) {
  if (!p) return;
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].inputs);
    free(p->steps[i].outputs);
  }
  free(p->steps);
  free(p->buffers);
  free(p->decisions);
  free(p->path);
  free(p);
}

static bool grow(void **arr, int count, int *cap, size_t elem) {
  if (count < *cap) return true;
  if (count >= PLAN_MAX_ENTRIES) return false;
  int bigger_cap = *cap ? *cap * 2 : 64;
  void *bigger = realloc(*arr, (size_t)bigger_cap * elem);
  if (!bigger) return false;
  *arr = bigger;
  *cap = bigger_cap;
  return true;
}

int plan_add_buffer(Plan *p, int tensor, int workspace_of, int64_t bytes, Space space) {
  if (!grow((void **)&p->buffers, p->nbuffers, &p->buffers_cap, sizeof *p->buffers)) return -1;
  Buffer *b = &p->buffers[p->nbuffers];
  b->tensor = tensor;
  b->workspace_of = workspace_of;
  b->bytes = bytes;
  b->space = space;
  b->offset = 0;
  b->home = false;
  return p->nbuffers++;
}

Step *plan_add_step(Plan *p, StepKind kind) {
  if (!grow((void **)&p->steps, p->nsteps, &p->steps_cap, sizeof *p->steps)) return NULL;
  Step *s = &p->steps[p->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->op = s->from = s->to = s->workspace = -1;
  return s;
}

const char *plan_step_kind_name(StepKind k) {
  static const char *const names[STEP_KIND_COUNT] = {"compute",       "offload", "offload_wait",      "prefetch",
                                                     "prefetch_wait", "zero",    "host_compute", "host_compute_wait"};
  return k >= 0 && k < STEP_KIND_COUNT ? names[k] : "?";
}

const char *plan_decision_name(Decision d) {
  switch (d) {
  case DEC_KEEP: return "keep";
  case DEC_RECOMPUTE: return "recompute";
  case DEC_OFFLOAD: return "offload";
  case DEC_HOST: return "host";
  case DEC_HOST_REFETCH: return "host-refetch";
  case DEC_HOST_OPTIMIZER: return "host-optimizer";
  default: return "none";
  }
}

bool plan_home_allowed(const Graph *g, int t, Decision d) {
  const Tensor *x = &g->tensors[t];
  if (!graph_is_resident(x)) return false;
  if (d == DEC_NONE) return true;
  if (d == DEC_HOST_OPTIMIZER) return plan_host_optimizer_op(g, t) >= 0;
  if (x->kind != KIND_PARAM && x->kind != KIND_OPTSTATE) return false;
  if (d == DEC_HOST) return true;
  if (d != DEC_HOST_REFETCH || x->kind != KIND_PARAM || x->last_fwd_read < 0) return false;
  /* The forward leaves it unchanged (its copy can be dropped, not written
   * back) and something after the forward uses it. */
  bool used_after = false;
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    for (int k = 0; k < o->noutputs; k++)
      if (o->outputs[k] == t && o->phase == PHASE_FORWARD) return false;
    for (int k = 0; k < o->ninputs + o->noutputs && !used_after; k++)
      used_after = o->phase != PHASE_FORWARD && (k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs]) == t;
  }
  return used_after;
}

int plan_host_optimizer_op(const Graph *g, int t) {
  const Tensor *grad = &g->tensors[t];
  /* One reader, in the optimizer phase. */
  if (grad->kind != KIND_GRAD || grad->first_read < 0 || grad->first_read != grad->last_read) return -1;
  int op = grad->first_read;
  const Op *o = &g->ops[op];
  if (o->phase != PHASE_OPTIMIZER) return -1;
  for (int k = 0; k < o->ninputs + o->noutputs; k++) {
    int x = k < o->ninputs ? o->inputs[k] : o->outputs[k - o->ninputs];
    if (x != t && !plan_home_allowed(g, x, DEC_HOST)) return -1;
    /* Nothing after it reads or writes its operands on the device (an EMA
     * reads the param after its AdamW). */
    if (g->tensors[x].last_read > op || g->tensors[x].last_write > op) return -1;
  }
  return op;
}

bool plan_op_on_host(const Graph *g, const Decision *dec, int op) {
  const Op *o = &g->ops[op];
  if (o->phase != PHASE_OPTIMIZER) return false;
  for (int k = 0; k < o->ninputs; k++)
    if (g->tensors[o->inputs[k]].kind == KIND_GRAD && dec[o->inputs[k]] == DEC_HOST_OPTIMIZER) return true;
  return false;
}

void plan_mark_homes(Plan *p, const Graph *g) {
  for (int b = 0; b < p->nbuffers; b++) {
    Buffer *bf = &p->buffers[b];
    if (bf->space == SPACE_DEVICE || bf->tensor < 0 || !graph_is_resident(&g->tensors[bf->tensor])) bf->home = false;
  }
  bool *homed = util_xcalloc((size_t)g->ntensors + 1, sizeof *homed);
  if (!homed) return; /* sim_check then finds no home and says so */
  for (int b = 0; b < p->nbuffers; b++)
    if (p->buffers[b].home) homed[p->buffers[b].tensor] = true;
  for (int b = 0; b < p->nbuffers; b++) {
    Buffer *bf = &p->buffers[b];
    if (bf->space != SPACE_DEVICE || bf->tensor < 0 || !graph_is_resident(&g->tensors[bf->tensor]) || homed[bf->tensor])
      continue;
    bf->home = homed[bf->tensor] = true;
  }
  free(homed);
}

int plan_finish(Plan *p, const Graph *g, const Device *d, Err *e) {
  SimResult r;
  if (layout_assign(p, g, e) || sim_run(p, g, d, false, &r, e)) return -1;
  p->predicted.step_seconds = r.step_seconds;
  p->predicted.compute_seconds = r.compute_seconds;
  p->predicted.recompute_seconds = r.recompute_seconds;
  p->predicted.stall_seconds = r.stall_seconds;
  p->predicted.peak_live_bytes = r.peak_live_bytes;
  sim_result_free(&r);
  return 0;
}

/* A host optimizer needs its other operands host-homed and a device that
 * prices host compute; -1 with e set where grad t's decision lacks them. */
static int plan_host_optimizer_unmet(const Graph *g, const Device *d, const Decision *dec, int t, Err *e) {
  if (dec[t] != DEC_HOST_OPTIMIZER) return 0;
  if (!(d->host_memory_gbps > 0))
    return err_set(e, "%s: tensors[%d]: \"%s\" cannot take decision host-optimizer: device %s gives no host compute "
                      "(host_memory_gbps)", g->path, t, g->tensors[t].name, d->name);
  const Op *o = &g->ops[plan_host_optimizer_op(g, t)];
  for (int k = 0; k < o->ninputs; k++) {
    int x = o->inputs[k];
    if (x != t && dec[x] != DEC_HOST && dec[x] != DEC_HOST_REFETCH)
      return err_set(e, "%s: tensors[%d]: \"%s\" cannot take decision host-optimizer: \"%s\", which \"%s\" updates, "
                        "is not host-homed", g->path, t, g->tensors[t].name, g->tensors[x].name, o->name);
  }
  return 0;
}

Plan *plan_schedule_decisions(const Graph *g, const Device *d, const Decision *dec, Err *e) {
  Plan *p = plan_new(g);
  if (!p) {
    err_set(e, "%s: out of memory", g->path);
    return NULL;
  }
  snprintf(p->device, sizeof p->device, "%s", d->name);
  /* No budget yet: plan_make checks the arena against it afterwards. */
  p->budget_bytes = INT64_MAX;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (dec[t] != DEC_KEEP && dec[t] != DEC_RECOMPUTE && dec[t] != DEC_OFFLOAD) {
      err_set(e, "%s: tensors[%d]: no decision for stashed tensor \"%s\"", g->path, t, g->tensors[t].name);
      plan_free(p);
      return NULL;
    }
    p->decisions[t] = dec[t];
  }
  for (int t = 0; t < g->ntensors; t++) {
    /* Only a home decision means something for a resident tensor (a
     * vector filled with one stashed decision throughout says nothing). */
    if (!graph_is_resident(&g->tensors[t]) || (dec[t] != DEC_HOST && dec[t] != DEC_HOST_REFETCH && dec[t] != DEC_HOST_OPTIMIZER))
      continue;
    if (!plan_home_allowed(g, t, dec[t]) || plan_host_optimizer_unmet(g, d, dec, t, e)) {
      if (!plan_home_allowed(g, t, dec[t]))
        err_set(e, "%s: tensors[%d]: \"%s\" cannot take decision %s", g->path, t, g->tensors[t].name,
                plan_decision_name(dec[t]));
      plan_free(p);
      return NULL;
    }
    p->decisions[t] = dec[t];
  }
  if (plan_build_schedule(p, g, d, e)) {
    plan_free(p);
    return NULL;
  }
  return p;
}

Plan *plan_from_decisions(const Graph *g, const Device *d, const Decision *dec, Err *e) {
  Plan *p = plan_schedule_decisions(g, d, dec, e);
  if (p && plan_finish(p, g, d, e)) {
    plan_free(p);
    return NULL;
  }
  return p;
}

int64_t plan_keep_all_peak(const Graph *g, const Device *d, Err *e) {
  /* The peak is a property of the schedule's occupancy, not of where the
   * buffers sit: no layout, whose search is the slow part on a large graph
   * (a chain of 200,000 ops spent most of `info` there). */
  Plan *p = plan_new(g);
  if (!p) return err_set(e, "%s: out of memory", g->path);
  for (int i = 0; i < g->nstashed; i++) p->decisions[g->stashed[i]] = DEC_KEEP;
  int64_t peak = -1;
  int *first = NULL, *last = NULL;
  if (plan_build_schedule(p, g, d, e) == 0) {
    SimResult r = {0};
    first = util_xcalloc((size_t)p->nbuffers, sizeof(int));
    last = util_xcalloc((size_t)p->nbuffers, sizeof(int));
    if (!first || !last || sim_occupancy(p, g, first, last) || sim_live(p, first, last, &r))
      err_set(e, "%s: out of memory", g->path);
    else
      peak = r.peak_live_bytes;
  }
  free(first);
  free(last);
  plan_free(p);
  return peak;
}

/* The bytes the budget counts: the arena, and the host arena too where it
 * is the same memory. */
static int64_t budgeted_bytes(const Plan *p, const Device *d) {
  return d->unified_memory ? p->arena_bytes + p->host_bytes : p->arena_bytes;
}

bool plan_fits(const Plan *p, const Device *d, int64_t budget) {
  return budgeted_bytes(p, d) <= budget && (d->host_memory <= 0 || p->host_bytes <= d->host_memory);
}

int64_t plan_host_share(const Graph *g, int t) {
  return (g->tensors[t].bytes + PLAN_ALIGNMENT - 1) / PLAN_ALIGNMENT * PLAN_ALIGNMENT;
}

int64_t plan_host_bound(const Graph *g, const Decision *dec) {
  int64_t sum = 0;
  for (int i = 0; i < g->nstashed; i++)
    if (dec[g->stashed[i]] == DEC_OFFLOAD) sum += plan_host_share(g, g->stashed[i]);
  /* A host home is occupied for the whole step. */
  for (int t = 0; t < g->ntensors; t++)
    if (graph_is_resident(&g->tensors[t]) && (dec[t] == DEC_HOST || dec[t] == DEC_HOST_REFETCH || dec[t] == DEC_HOST_OPTIMIZER))
      sum += plan_host_share(g, t);
  return sum;
}

/* The top buffer's end rounded up to the alignment is the bound, so a
 * host_memory that is a multiple of it is met exactly. */
int64_t plan_host_limit(const Device *d) {
  if (d->unified_memory) return 0;
  return d->host_memory <= 0 ? INT64_MAX : d->host_memory / PLAN_ALIGNMENT * PLAN_ALIGNMENT;
}

void plan_add_work(SolverInfo *to, const SolverInfo *from) {
  to->simplex_iterations += from->simplex_iterations;
  to->nodes += from->nodes;
}

void plan_settle_solver(SolverInfo *si, double step_seconds, double bound_us, bool timed_out) {
  si->objective = step_seconds * 1e6;
  si->bound = fmin(bound_us, si->objective);
  si->gap = si->objective > 0 ? (si->objective - si->bound) / si->objective : 0;
  if (si->gap < 1e-12) si->gap = 0;
  snprintf(si->status, sizeof si->status, "%s", si->gap <= PLAN_OPTIMAL_GAP ? "optimal" : timed_out ? "time_limit" : "feasible");
}

bool plan_past_deadline(const PlanOptions *o) { return o->time_limit > 0 && o->deadline > 0 && util_now() >= o->deadline; }

/* Whether dec puts a resident tensor's home or its optimizer on the host:
 * outside what device_homes_only allows. */
static bool has_homes(const Graph *g, const Decision *dec) {
  for (int t = 0; t < g->ntensors; t++)
    if (graph_is_resident(&g->tensors[t]) && (dec[t] == DEC_HOST || dec[t] == DEC_HOST_REFETCH || dec[t] == DEC_HOST_OPTIMIZER))
      return true;
  return false;
}

/* The ilp strategy's plan P (or none, e set) against the hint, its own
 * plan at a smaller budget (report.c's sweep), judged whole, homes and
 * host optimizer included: where the hint fits this budget and simulates
 * a faster step, or where P is missing, the hint's plan is returned, its
 * solver fields settled against a bound over the family (the hint may
 * lie outside what SI's bound covers). So more memory never buys a slower
 * plan. */
static Plan *judge_hint(const Graph *g, const Device *d, const PlanOptions *o, Plan *p, SolverInfo *si, Err *e) {
  Err he = {{0}};
  Plan *h = plan_from_decisions(g, d, o->hint, &he);
  if (!h || !plan_fits(h, d, o->budget_bytes) || (p && h->predicted.step_seconds >= p->predicted.step_seconds)) {
    plan_free(h);
    return p;
  }
  double bound = plan_homes_bound_us(g, d, o);
  if (p) bound = fmin(bound, si->bound);
  plan_free(p);
  plan_settle_solver(si, h->predicted.step_seconds, bound, plan_past_deadline(o));
  e->msg[0] = '\0';
  return h;
}

Plan *plan_make(const Graph *g, const Device *d, const PlanOptions *o, Err *e) {
  const PlanStrategy *s = plan_find_strategy(o->strategy);
  if (!s) {
    err_set(e, "--strategy: unknown strategy \"%s\"", o->strategy);
    return NULL;
  }
  int64_t keep_all_peak = plan_keep_all_peak(g, d, e);
  if (keep_all_peak < 0) return NULL;
  Decision *dec = util_xcalloc((size_t)g->ntensors, sizeof *dec);
  if (!dec) {
    err_set(e, "%s: out of memory", g->path);
    return NULL;
  }
  for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
  SolverInfo si = {.name = "none", .status = "not_used"};
  Plan *p = NULL;
  /* One deadline over every solve the strategy runs (the homes rule runs
   * several), from here when the caller set none. */
  PlanOptions timed = *o;
  if (timed.time_limit > 0 && timed.deadline <= 0) timed.deadline = util_now() + timed.time_limit;
  layout_memo_enter(); /* the strategy's searches and the plan built from its answer share it */
  if (s->build) p = s->build(g, d, &timed, &si, e);
  else if (s->decide(g, d, &timed, dec, &si, e) == 0) p = plan_from_decisions(g, d, dec, e);
  free(dec);
  if (o->hint && s->decide == plan_decide_placed && !(o->device_homes_only && has_homes(g, o->hint)))
    p = judge_hint(g, d, &timed, p, &si, e);
  layout_memo_leave();
  if (!p) return NULL;
  snprintf(p->strategy, sizeof p->strategy, "%s", s->name);
  p->budget_bytes = o->budget_bytes;
  p->solver = si;
  p->predicted.keep_all_peak_bytes = keep_all_peak;
  if (p->arena_bytes > o->budget_bytes) {
    char b1[32], b2[32];
    err_set(e, "%s: strategy %s needs an arena of %" PRId64 " bytes (%s) (peak live %" PRId64
               " bytes) but the budget is %" PRId64 " bytes (%s)",
            g->path, s->name, p->arena_bytes, util_fmt_bytes(p->arena_bytes, b1, sizeof b1),
            p->predicted.peak_live_bytes, o->budget_bytes, util_fmt_bytes(o->budget_bytes, b2, sizeof b2));
    plan_free(p);
    return NULL;
  }
  if (budgeted_bytes(p, d) > o->budget_bytes) {
    char b1[32], b2[32];
    int64_t both = budgeted_bytes(p, d);
    err_set(e, "%s: strategy %s needs an arena of %" PRId64 " bytes and a host arena of %" PRId64
               " bytes in the same memory (%s has unified_memory), %" PRId64 " bytes (%s), but the budget is %" PRId64
               " bytes (%s)",
            g->path, s->name, p->arena_bytes, p->host_bytes, d->name, both, util_fmt_bytes(both, b1, sizeof b1),
            o->budget_bytes, util_fmt_bytes(o->budget_bytes, b2, sizeof b2));
    plan_free(p);
    return NULL;
  }
  if (!plan_fits(p, d, o->budget_bytes)) {
    char b1[32], b2[32];
    err_set(e, "%s: strategy %s needs a host arena of %" PRId64 " bytes (%s) but %s's host_memory is %" PRId64
               " bytes (%s)",
            g->path, s->name, p->host_bytes, util_fmt_bytes(p->host_bytes, b1, sizeof b1), d->name, d->host_memory,
            util_fmt_bytes(d->host_memory, b2, sizeof b2));
    plan_free(p);
    return NULL;
  }
  return p;
}
