/*
 * plan_homes.c - where params and optimizer state wait between steps, and
 * where the optimizer runs: the ilp strategy's outer rule (docs/PLANNING.md
 * 1.2). The activation ilp decides first. Where it finds no plan, this
 * host-homes resident tensors (docs/PLANNING.md 1.1), in a fixed order, as
 * few as the budget needs, and lets the ilp decide the activations again
 * in the device memory they free. Where it finds one on a device with host
 * compute, the same plan with the optimizer on the host (its twin) is
 * judged too, and only where that is faster is the ilp solved again in
 * the bytes the twin frees; where the twin wins, the path below the ilp's
 * smallest budget runs at the budget too, and where the ilp's plan
 * re-runs or stalls anything, the path below's first start (one home) is
 * made from that plan too. Each candidate plan is built and judged by the
 * simulator and the layout, so the plan returned is exact. Each set of
 * homes is tried with the optimizer on the device and, where the device
 * gives host compute, with every optimizer op whose optimizer state is
 * host-homed on the host: the simulator's faster step wins. Then the
 * ilp's search over homes (plan_ilp_homes_search: its model with the
 * home and host-optimizer columns, their copies, the host stream and
 * their compute share) moves homes, optimizer ops' places and
 * activations together from the winner and from the winner with its
 * optimizer ops on the device. On small graphs the simulator then refines the winner one
 * decision, or one optimizer op's homes and place, at a time.
 */
#include "ration.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host-homing candidates in the order they are taken into cand, with their
 * decision in how[t]: optimizer state first (on the device only around its
 * update, so its bytes leave the activations' peak whole), then params
 * (host-refetch where allowed: off the device between their forward and
 * backward use), each group largest first. Returns how many. */
static int home_candidates(const Graph *g, int *cand, Decision *how) {
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    int start = n;
    for (int t = 0; t < g->ntensors; t++) {
      Kind k = g->tensors[t].kind;
      if ((pass == 0) != (k == KIND_OPTSTATE) || !plan_home_allowed(g, t, DEC_HOST)) continue;
      how[t] = plan_home_allowed(g, t, DEC_HOST_REFETCH) ? DEC_HOST_REFETCH : DEC_HOST;
      int j = n++;
      for (; j > start && g->tensors[cand[j - 1]].bytes < g->tensors[t].bytes; j--) cand[j] = cand[j - 1];
      cand[j] = t;
    }
  }
  return n;
}

/* A host optimizer on grad T needs its op's params and optimizer state
 * host-homed: those on the device go to host-refetch where allowed, else
 * host. */
static void home_operands(const Graph *g, Decision *dec, int t) {
  const Op *o = &g->ops[plan_host_optimizer_op(g, t)];
  for (int k = 0; k < o->ninputs; k++) {
    int x = o->inputs[k];
    if (x != t && dec[x] == DEC_NONE)
      dec[x] = plan_home_allowed(g, x, DEC_HOST_REFETCH) ? DEC_HOST_REFETCH : DEC_HOST;
  }
}

/* Moves the optimizer to the host wherever dec host-homes an optimizer
 * op's optimizer state: the op's params host-homed too (host-refetch where
 * allowed) and its grad decided host-optimizer. How many ops moved. */
static int host_optimizer_all(const Graph *g, Decision *dec) {
  int n = 0;
  for (int t = 0; t < g->ntensors; t++) {
    int op = plan_host_optimizer_op(g, t);
    if (op < 0) continue;
    const Op *o = &g->ops[op];
    bool state_homed = true, has_state = false;
    for (int k = 0; k < o->ninputs; k++) {
      int x = o->inputs[k];
      if (g->tensors[x].kind != KIND_OPTSTATE) continue;
      has_state = true;
      state_homed &= dec[x] == DEC_HOST;
    }
    if (!has_state || !state_homed) continue;
    home_operands(g, dec, t);
    dec[t] = DEC_HOST_OPTIMIZER;
    n++;
  }
  return n;
}

/* The ilp's last answer in try_homes, shared by every search of one
 * decide_placed. Where every stashed tensor offloaded fits in the host
 * memory that every candidate homed leaves, no answer can reach the
 * ilp's host-memory row, so its solve at an activation budget is the same
 * whatever is homed, and a prefix after another at that budget takes the
 * answer (the solve at the ilp's smallest budget, which every prefix
 * falls back on: unet on h100-sxm-80g at its smallest budget, 10 s). */
typedef struct SolveMemo {
  bool usable;
  int64_t act_budget; /* -1: none */
  int64_t act_arena; /* the answer's own arena, every resident on the device */
  int rc;
  Decision *dec;
  SolverInfo si;
} SolveMemo;

typedef struct Search {
  const Graph *g;
  const Device *d;
  const PlanOptions *o;
  const int *cand;
  const Decision *how;
  Decision *act;    /* scratch: the ilp's decisions, then the homes */
  Decision *alt;    /* scratch: act with the optimizer on the host */
  Decision *best;   /* the fastest fitting decisions so far */
  double best_step; /* its simulated step; < 0: none */
  bool best_on_host; /* best runs optimizer ops on the host */
  SolverInfo si;    /* the ilp's run behind best */
  SolverInfo work;  /* every run's counted work, added up */
  const Decision *least; /* the ilp's plan at its smallest budget (its arena least_arena), or NULL */
  int64_t least_arena;
  double last_step; /* the last plan consider built: its simulated step (judge_homes: the faster of its two) */
  int64_t last_peak; /* and its live peak, the model's for its decisions */
  int last_k;       /* the last try's prefix and activation budget, and its arena: */
  int64_t last_budget, last_arena; /* a solve is not repeated */
  int64_t last_act_arena; /* the last try's ilp answer's own arena, every resident on the device (INT64_MAX: none) */
  SolveMemo *memo;
} Search;

/* A plan from DEC that fits the budget and is faster than the best so far
 * becomes the best; its arena, or -1 when there is no plan within the
 * host memory (no device budget makes that one fit). */
static int64_t consider(Search *s, const Decision *dec, const SolverInfo *si, bool on_host) {
  Err e = {{0}};
  Plan *p = plan_from_decisions(s->g, s->d, dec, &e);
  if (!p) return -1;
  int64_t arena = s->d->host_memory > 0 && p->host_bytes > s->d->host_memory ? -1 : p->arena_bytes;
  s->last_step = p->predicted.step_seconds;
  s->last_peak = p->predicted.peak_live_bytes;
  if (plan_fits(p, s->d, s->o->budget_bytes) && (s->best_step < 0 || p->predicted.step_seconds < s->best_step)) {
    s->best_step = p->predicted.step_seconds;
    s->best_on_host = on_host;
    memcpy(s->best, dec, (size_t)s->g->ntensors * sizeof *s->best);
    s->si = *si;
  }
  plan_free(p);
  return arena;
}

/* s->act (the ilp's decisions) with the first K candidates host-homed,
 * and on a device with host compute the same with every optimizer op
 * whose optimizer state is host-homed run on the host, its params
 * host-homed too (host_optimizer_all, docs/PLANNING.md 1.4): the smaller
 * arena of the two plans, or -1 when there is none. Either plan that fits
 * the budget and is faster than the best so far becomes the best. */
static int64_t judge_homes(Search *s, int k, const SolverInfo *si) {
  const Graph *g = s->g;
  /* s->act is the ilp's (plan_decide_ilp: every resident DEC_NONE). */
  for (int i = 0; i < k; i++) s->act[s->cand[i]] = s->how[s->cand[i]];
  int64_t arena = consider(s, s->act, si, false);
  double fastest = arena >= 0 ? s->last_step : HUGE_VAL;
  memcpy(s->alt, s->act, (size_t)g->ntensors * sizeof *s->alt);
  if (arena >= 0 && s->d->host_memory_gbps > 0 && host_optimizer_all(g, s->alt) > 0) {
    int64_t other = consider(s, s->alt, si, true);
    if (other >= 0 && other < arena) arena = other;
    if (other >= 0 && s->last_step < fastest) fastest = s->last_step;
  }
  s->last_step = fastest;
  return arena;
}

/* The ilp's activation decisions at ACT_BUDGET with the first K candidates
 * host-homed (their host bytes taken from host_memory), judged with the
 * optimizer on the device and on the host (judge_homes): the smaller
 * arena, or -1 when the ilp finds no plan there. */
static int64_t try_homes(Search *s, int k, int64_t home_bytes, int64_t act_budget) {
  const Graph *g = s->g;
  if (k == s->last_k && act_budget == s->last_budget) return s->last_arena;
  s->last_k = k, s->last_budget = act_budget, s->last_arena = -1, s->last_act_arena = INT64_MAX;
  Device dd = *s->d;
  if (dd.host_memory > 0 && (dd.host_memory -= home_bytes) <= 0) return -1;
  PlanOptions po = *s->o;
  po.budget_bytes = act_budget;
  po.quiet = true;
  po.hint = NULL;
  po.least_plan = s->least, po.least_arena = s->least_arena;
  po.no_proof = true; /* the bound reported is plan_homes_bound_us */
  SolverInfo si = {.name = "none", .status = "not_used"};
  Err e = {{0}};
  SolveMemo *m = s->memo;
  size_t size = (size_t)g->ntensors * sizeof *s->act;
  int rc;
  int64_t act_arena = INT64_MAX;
  if (m->usable && m->act_budget == act_budget) {
    rc = m->rc, si = m->si, act_arena = m->act_arena;
    memcpy(s->act, m->dec, size);
  } else {
    for (int t = 0; t < g->ntensors; t++) s->act[t] = DEC_NONE;
    rc = plan_decide_ilp(g, &dd, &po, s->act, &si, &e);
    plan_add_work(&s->work, &si);
    Plan *p = rc ? NULL : plan_from_decisions(g, &dd, s->act, &e);
    if (p) act_arena = p->arena_bytes;
    plan_free(p);
    if (m->usable) m->act_budget = act_budget, m->rc = rc, m->si = si, m->act_arena = act_arena, memcpy(m->dec, s->act, size);
  }
  s->last_act_arena = act_arena;
  if (rc) return -1;
  return s->last_arena = judge_homes(s, k, &si);
}

/* Single changes judged by the simulator, on graphs with at most this many
 * decisions: the prefixes' order is a rule, not an optimum, and on small
 * graphs plans are cheap (docs/PLANNING.md 1.2). */
#define HOMES_REFINE_MAX 64
/* The graphs (ops) on which the point of the bound's relaxation over homes
 * is a candidate (decide_placed). */
#define HOMES_POINT_OPS 300

/* Decision T's alternatives to try: a stashed tensor's other two, a home
 * candidate's other homes, a host-optimizer grad's toggle. How many, into
 * alt. */
static int alternatives(const Graph *g, const Decision *dec, int t, Decision *alt) {
  int n = 0;
  if (g->tensors[t].kind == KIND_GRAD) {
    if (plan_host_optimizer_op(g, t) >= 0) alt[n++] = dec[t] == DEC_HOST_OPTIMIZER ? DEC_NONE : DEC_HOST_OPTIMIZER;
    return n;
  }
  static const Decision stashed[] = {DEC_KEEP, DEC_RECOMPUTE, DEC_OFFLOAD}, homes[] = {DEC_NONE, DEC_HOST, DEC_HOST_REFETCH};
  bool is_home = g->tensors[t].kind == KIND_PARAM || g->tensors[t].kind == KIND_OPTSTATE;
  for (int i = 0; i < 3; i++) {
    Decision a = is_home ? homes[i] : stashed[i];
    if (a != dec[t] && (!is_home || plan_home_allowed(g, t, a))) alt[n++] = a;
  }
  return n;
}

/* The tensors whose decisions refine moves: stashed, home candidates and
 * host-optimizer grads (the last only with host compute). How many, into
 * units where given, or -1 when over HOMES_REFINE_MAX. */
static int refine_units(const Graph *g, const Device *d, int *units) {
  int n = 0;
  for (int t = 0; t < g->ntensors; t++) {
    bool host_opt = d->host_memory_gbps > 0 && plan_host_optimizer_op(g, t) >= 0;
    if (!g->tensors[t].stashed && !host_opt && !plan_home_allowed(g, t, DEC_HOST)) continue;
    if (n == HOMES_REFINE_MAX) return -1;
    if (units) units[n] = t;
    n++;
  }
  return n;
}

/* Whether dec runs some optimizer op on the host. */
static bool any_on_host(const Graph *g, const Decision *dec) {
  for (int t = 0; t < g->ntensors; t++)
    if (dec[t] == DEC_HOST_OPTIMIZER) return true;
  return false;
}

/* The homes an optimizer op's operands may take, at most this many of
 * them: an AdamW's param, master copy and moments. */
#define HOMES_OP_OPERANDS 4

/* Every combination of the homes of host-optimizer grad T's op's params
 * and optimizer state and of the op's place (device or host): the first
 * that fits and simulates faster than the best becomes the best. Whether
 * one did. */
static bool refine_op(Search *s, int t) {
  const Graph *g = s->g;
  static const Decision homes[] = {DEC_NONE, DEC_HOST, DEC_HOST_REFETCH};
  const Op *o = &g->ops[plan_host_optimizer_op(g, t)];
  int x[HOMES_OP_OPERANDS], nx = 0;
  long combos = 2;
  for (int k = 0; k < o->ninputs; k++) {
    if (o->inputs[k] == t || !plan_home_allowed(g, o->inputs[k], DEC_HOST)) continue;
    if (nx == HOMES_OP_OPERANDS) return false;
    x[nx++] = o->inputs[k];
    combos *= plan_home_allowed(g, o->inputs[k], DEC_HOST_REFETCH) ? 3 : 2;
  }
  for (long code = 0; code < combos; code++) {
    memcpy(s->alt, s->best, (size_t)g->ntensors * sizeof *s->alt);
    long c = code;
    s->alt[t] = c % 2 ? DEC_HOST_OPTIMIZER : DEC_NONE;
    c /= 2;
    for (int i = 0; i < nx; i++) {
      int n = plan_home_allowed(g, x[i], DEC_HOST_REFETCH) ? 3 : 2;
      s->alt[x[i]] = homes[c % n];
      c /= n;
    }
    if (!memcmp(s->alt, s->best, (size_t)g->ntensors * sizeof *s->alt)) continue;
    double before = s->best_step;
    consider(s, s->alt, &s->si, any_on_host(g, s->alt));
    if (s->best_step != before) return true;
  }
  return false;
}

/* From the search's best, changes of one decision (a host optimizer's
 * with the homes it needs), then of one optimizer op's homes and place
 * together, that fit the budget and simulate a faster step are taken, one
 * at a time, until none is or --time-limit's deadline passes. */
static void refine(Search *s) {
  const Graph *g = s->g;
  int *units = util_xcalloc((size_t)HOMES_REFINE_MAX, sizeof *units);
  int n = units ? refine_units(g, s->d, units) : -1;
  for (bool moved = n > 0; moved && !plan_past_deadline(s->o);) {
    moved = false;
    for (int i = 0; i < n && !moved; i++) {
      int t = units[i];
      Decision alt[3];
      int na = alternatives(g, s->best, t, alt);
      for (int a = 0; a < na && !moved; a++) {
        memcpy(s->alt, s->best, (size_t)g->ntensors * sizeof *s->alt);
        s->alt[t] = alt[a];
        if (alt[a] == DEC_HOST_OPTIMIZER) home_operands(g, s->alt, t);
        double before = s->best_step;
        consider(s, s->alt, &s->si, any_on_host(g, s->alt));
        moved = s->best_step != before;
      }
    }
    for (int i = 0; i < n && !moved; i++)
      if (g->tensors[units[i]].kind == KIND_GRAD) moved = refine_op(s, units[i]);
  }
  free(units);
}

/* The ilp's search over homes jointly with the stashed decisions and the
 * optimizer ops' places, in its model with homes (plan_ilp_homes_search),
 * from the best plan so far, from the same with its optimizer ops on the
 * device (where it runs some on the host: the descent from either can end
 * where the other's does not) and from START where given and not the same
 * as the best (the same start descends to the same answer): each answer is
 * judged by the simulator and the layout like every candidate; where its
 * layout overshoots the budget, the search runs again from the same start
 * with the model's limit lowered by the overshoot and under that answer's
 * peak (twice at most). */
static void model_search(Search *s, const Decision *start) {
  const Graph *g = s->g;
  int n = g->ntensors;
  size_t size = (size_t)n * sizeof(Decision);
  int64_t budget = s->o->budget_bytes;
  double deadline = s->o->time_limit > 0 && s->o->deadline > 0 ? s->o->deadline : HUGE_VAL;
  Decision *from = util_xcalloc(3 * (size_t)n + 1, sizeof *from);
  int nfrom = 0;
  if (from && s->best_step >= 0) {
    memcpy(from, s->best, size), nfrom++;
    if (any_on_host(g, s->best)) {
      memcpy(from + n, s->best, size), nfrom++;
      for (int t = 0; t < n; t++)
        if (from[n + t] == DEC_HOST_OPTIMIZER) from[n + t] = DEC_NONE;
    }
    if (start && memcmp(from, start, size)) memcpy(from + (size_t)nfrom * n, start, size), nfrom++;
  }
  for (int k = 0; k < nfrom; k++) {
    int64_t limit = budget;
    for (int round = 0; round < 3 && !plan_past_deadline(s->o); round++) {
      memcpy(s->alt, from + (size_t)k * n, size);
      if (plan_ilp_homes_search(g, s->d, limit, s->alt, deadline) != 1) break;
      double before = s->best_step;
      int64_t arena = consider(s, s->alt, &s->si, any_on_host(g, s->alt));
      if (arena <= budget || s->best_step != before) break;
      /* Under the answer's own peak: an overshoot smaller than the
       * layout's gap over that peak leaves the answer within the limit,
       * and the search gave it again (gpt2:2:256:512:4 of
       * bench/bench_least.sh on rtx4090-24g at 78,000,000 bytes: three
       * rounds to one answer, 12,420 bytes over). */
      limit -= arena - budget;
      if (limit >= s->last_peak) limit = s->last_peak - 1;
    }
  }
  free(from);
}

/* How a descent ends: on a plan that fits or is faster than the best
 * before it, on an answer that already meets the lowered activation
 * budget, or otherwise. */
typedef enum { DESCENT_FOUND, DESCENT_MET, DESCENT_OVER } Descent;

/* The first K candidates host-homed: the ilp is given ACT_BUDGET for the
 * activations, less what the plan then overshoots the budget by, up to
 * three times while above LOWEST; the last answer's own arena, every
 * resident on the device, into *MET. The descent ends where the ilp's
 * answer already meets the lowered activation budget: the best plan at a
 * budget is the best at any lower one it meets, so a solve there aims at
 * the same answer, whose homed peak lies where the activations' does not
 * (llama3.2-1b and unet on h100-sxm-80g at their smallest budgets: three
 * solves of 10 s each to the same arena, 4,096 and 45,056 bytes over). */
static Descent descend(Search *s, int k, int64_t home_bytes, int64_t act_budget, int64_t lowest, int64_t *met) {
  int64_t budget = s->o->budget_bytes;
  for (int round = 0; round < 3 && act_budget > lowest && !plan_past_deadline(s->o); round++) {
    double before = s->best_step;
    int64_t arena = try_homes(s, k, home_bytes, act_budget);
    if (arena < 0) return DESCENT_OVER;
    if ((s->best_step >= 0 && s->best_step != before) || arena <= budget) return DESCENT_FOUND;
    act_budget -= arena - budget;
    *met = s->last_act_arena;
    if (*met <= act_budget) return DESCENT_MET;
  }
  return DESCENT_OVER;
}

/* The first K candidates host-homed: the ilp is given the budget plus the
 * bytes they free (descend), and at last its smallest budget (least),
 * where its decisions are those of the plan the search names as the
 * smallest. That solve does not run where the descent's last answer
 * meets least already (the same answer, however the descent ended:
 * llama80-32k of bench/bench_large.sh at the budget its refusal names,
 * whose first prefix's answer was the memory-minimizing plan itself, its
 * arena least, and whose descent lowered the budget below least at once:
 * a second solve of 70 CPU s to that plan), and after a descent that
 * ended on an answer meeting a lower budget, only while no plan fits. */
static void search_prefix(Search *s, int k, int64_t home_bytes, int64_t least) {
  int64_t met = INT64_MAX;
  Descent end = descend(s, k, home_bytes, s->o->budget_bytes + home_bytes, least, &met);
  if (end == DESCENT_FOUND || met <= least || (end == DESCENT_MET && s->best_step >= 0)) return;
  if (s->best_step < 0 || !plan_past_deadline(s->o)) try_homes(s, k, home_bytes, least);
}

/* The device time of every op once: no plan with every op on the device
 * steps faster (plan_homes_bound_us). */
static double ops_seconds(const Graph *g, const Device *d) {
  double ops = 0;
  for (int i = 0; i < g->nops; i++) ops += cost_op_seconds(g, d, i);
  return ops;
}

/* OPS (ops_seconds) less the ops DEC runs on the host: no plan with
 * DEC's host optimizer ops steps faster, whatever its activations. */
static double device_ops_seconds(const Graph *g, const Device *d, double ops, const Decision *dec) {
  for (int t = 0; t < g->ntensors; t++)
    if (dec[t] == DEC_HOST_OPTIMIZER) ops -= cost_op_seconds(g, d, plan_host_optimizer_op(g, t));
  return ops;
}

/* The ilp met the budget with every resident on the device (DEC, its run
 * SI). Its decisions with the first k candidates host-homed (every
 * optimizer state, then half as many, and so on down to one: the largest
 * first, so a few updates leave the compute stream for a few copies), each
 * with the optimizer on the device and on the host (judge_homes), cost
 * two plans each, no solve; only where one of them is faster than the
 * ilp's plan is the ilp solved again, for the fastest k, given the device
 * bytes those homes free at the peak (far above its smallest budget: a
 * fast solve), less what its plan then overshoots (descend). A host
 * optimizer saves at most its ops' device time, which the ilp's own
 * decisions already show, so a twin no faster there skips the solve
 * (docs/PLANNING.md 1.2). NOPT: how many optimizer states lead the
 * candidates; BYTES[k]: the first k's host bytes. Returns the ilp's plan's
 * simulated step, its arena into DEVICE_ARENA_OUT (-1: no plan). */
static double host_twin(Search *s, const Decision *dec, const SolverInfo *si, int nopt, const int64_t *bytes,
                        int64_t *device_arena_out) {
  int64_t budget = s->o->budget_bytes, device_arena = consider(s, dec, si, false), arena = -1;
  *device_arena_out = device_arena;
  double device_step = s->best_step;
  int best_k = 0;
  for (int k = nopt; device_arena >= 0 && k > 0; k /= 2) {
    double before = s->best_step;
    memcpy(s->act, dec, (size_t)s->g->ntensors * sizeof *s->act);
    int64_t a = judge_homes(s, k, si);
    if (s->best_step != before) best_k = k, arena = a;
  }
  if (best_k > 0 && s->best_step != device_step && arena >= 0 && arena < device_arena)
    descend(s, best_k, bytes[best_k], budget + (device_arena - arena), budget, &(int64_t){0});
  return device_step;
}

/* The start that the path below the ilp's smallest budget and the search
 * from an ilp plan that re-runs or stalls share: one candidate host-homed
 * over the ilp's decisions DEC (its run SI; its plan's arena DEVICE_ARENA
 * and step DEVICE_STEP, as host_twin judged them; arena -1: none), judged
 * as it is (judge_homes: no solve),
 * then the ilp solved again given the device bytes the home frees at the
 * peak (descend), where it frees some (a solve given bytes the plan does
 * not have overshoots and is lowered back to the budget: gpt2-tiny at
 * f = 0 on h100-sxm-80g, two solves and 43 CPU s for a plan slower than
 * the twin's) and is predicted to gain: those bytes can take at most the
 * device plan's re-runs and stalls off its step (DEVICE_STEP less its ops'
 * device time), and where the home's copies cost its plan as much on the
 * same activations (its step less DEVICE_STEP), the solve is not paid for
 * (gpt2-124m at f = 0: 2.2 ms of re-runs and stalls against the home's
 * 4.8 ms; the solve's plan was 18.3 ms against the device plan's 14.3).
 * Nor where every plan it judges is slower than BEAT, the best plan
 * the caller has (the host twin's, in the path below): with the one
 * candidate homed, the ops whose whole optimizer state it is are the only
 * ones a plan may run on the host, so the others' device time bounds each
 * plan's step (llama-tiny on h100-sxm-80g at f = 0: a 3 CPU s solve for
 * 615.9 us against the twin's 485.9).
 * The search over homes goes on from the best plan either way. BYTES[1]:
 * the candidate's host bytes. */
static void one_home(Search *s, const Decision *dec, int64_t device_arena, double device_step, double beat,
                     const SolverInfo *si, const int64_t *bytes) {
  int64_t budget = s->o->budget_bytes;
  memcpy(s->act, dec, (size_t)s->g->ntensors * sizeof *s->act);
  int64_t arena = judge_homes(s, 1, si);
  double ops = ops_seconds(s->g, s->d), gain = device_step - ops, cost = s->last_step - device_step;
  if (device_arena < 0 || arena < 0 || arena >= device_arena || cost >= gain) return;
  memcpy(s->alt, s->act, (size_t)s->g->ntensors * sizeof *s->alt);
  host_optimizer_all(s->g, s->alt);
  if (device_ops_seconds(s->g, s->d, ops, s->alt) < beat)
    descend(s, 1, bytes[1], budget + (device_arena - arena), budget, &(int64_t){0});
}

/* The fewest candidates whose bytes cover what the ilp alone lacks (FLOOR,
 * its smallest budget or the budget itself, less the budget), else all the
 * optimizer state, else everything: the first that fits. A plan that fits
 * only with the optimizer on the host (its grads leave the device after
 * their last accumulation) may be slower than one with more homes and the
 * optimizer on the device: while the best runs optimizer ops on the host,
 * the next prefix is tried too and the faster wins. NOPT: how many
 * optimizer states lead the NCAND candidates; BYTES[k]: the first k's host
 * bytes. FIRST_JUDGED: the first prefix was judged already (one_home: the
 * floor is the budget, so it is one candidate). */
static void prefixes(Search *s, int ncand, int nopt, const int64_t *bytes, int64_t floor, bool first_judged) {
  int k1 = 1;
  while (k1 < ncand && bytes[k1] < floor - s->o->budget_bytes) k1++;
  int ks[3] = {k1, nopt > k1 ? nopt : k1, ncand};
  for (int i = first_judged; i < 3 && (s->best_step < 0 || (s->best_on_host && !plan_past_deadline(s->o))); i++)
    if (i == 0 || ks[i] > ks[i - 1]) search_prefix(s, ks[i], bytes[ks[i]], floor);
}

/* The most of the first N candidates (BYTES[k]: the first k's host bytes)
 * whose homes fit in ROOM host bytes. */
static int prefix_within(const int64_t *bytes, int n, int64_t room) {
  while (n > 0 && bytes[n] > room) n--;
  return n;
}

int64_t plan_homes_least_peak(const Graph *g, const Device *d, const PlanOptions *o) {
  int64_t resident, working, homeable = 0;
  int at;
  if (d->unified_memory || o->device_homes_only) return -1;
  if (info_lower_bound(g, &resident, &working, &at)) return 0; /* out of memory: no bound claimed */
  /* A host-homed tensor is on the device only around its uses; the op
   * that uses it then has it in its working set, which the bound leaves out
   * (so the bound stays below every plan, if not tight). */
  /* A grad whose optimizer may run on the host leaves the device after
   * its last accumulation: it may be off the device at that op too. */
  for (int t = 0; t < g->ntensors; t++)
    if (plan_home_allowed(g, t, DEC_HOST) || plan_home_allowed(g, t, DEC_HOST_OPTIMIZER)) homeable += g->tensors[t].bytes;
  return homeable > 0 ? resident - homeable + working : -1;
}

/* No prefix fits: "infeasible" only below the bound that holds with every
 * home open (plan_homes_least_peak), else what was not found; either way
 * REACH, the smallest budget this search planned. */
static void refuse(const Graph *g, const Device *d, const PlanOptions *o, int64_t reach, Err *e) {
  int64_t least = plan_homes_least_peak(g, d, o);
  char b1[32], b2[32], b3[32];
  util_fmt_bytes(o->budget_bytes, b1, sizeof b1);
  util_fmt_bytes(reach, b2, sizeof b2);
  if (o->budget_bytes < least)
    err_set(e, "%s: budget %" PRId64 " bytes (%s) is infeasible on %s: no plan below %" PRId64 " bytes (%s) exists in the"
               " schedule family, params and optimizer state on the host included; the smallest budget planned is %" PRId64
               " bytes (%s)",
            g->path, o->budget_bytes, b1, d->name, least, util_fmt_bytes(least, b3, sizeof b3), reach, b2);
  else
    err_set(e, "%s: no plan found at %" PRId64 " bytes (%s) on %s even with params and optimizer state on the host"
               "; the smallest budget planned is %" PRId64 " bytes (%s)",
            g->path, o->budget_bytes, b1, d->name, reach, b2);
}

/* Whether the optimizer may run on the host: the device gives host compute
 * and host homes are allowed. */
static bool host_compute(const Device *d, const PlanOptions *o) {
  return d->host_memory_gbps > 0 && !d->unified_memory && !o->device_homes_only;
}

double plan_homes_bound_us(const Graph *g, const Device *d, const PlanOptions *o) {
  double device = 0, host = 0;
  for (int i = 0; i < g->nops; i++) device += cost_op_seconds(g, d, i);
  bool open = host_compute(d, o);
  int *ops = open ? util_xcalloc((size_t)g->nops + 1, sizeof *ops) : NULL;
  bool *taken = open ? util_xcalloc((size_t)g->nops + 1, sizeof *taken) : NULL;
  int n = 0;
  /* The ops a host may run, by device time saved per host second, most
   * first (ties in op order). */
  for (int t = 0; ops && taken && t < g->ntensors; t++) {
    int op = plan_host_optimizer_op(g, t);
    if (op < 0 || taken[op]) continue;
    taken[op] = true;
    double c = cost_op_seconds(g, d, op), h = cost_host_op_seconds(g, d, op);
    int j = n++;
    for (; j > 0 && cost_op_seconds(g, d, ops[j - 1]) * h < c * cost_host_op_seconds(g, d, ops[j - 1]); j--) ops[j] = ops[j - 1];
    ops[j] = op;
  }
  /* Moving a share x of op i to the host: device - x c_i, host + x h_i;
   * the least of their maximum takes whole ops while the device stays the
   * longer stream, then the share of the next where the two meet. */
  for (int k = 0; k < n; k++) {
    double c = cost_op_seconds(g, d, ops[k]), h = cost_host_op_seconds(g, d, ops[k]);
    if (device - c >= host + h) {
      device -= c, host += h;
    } else {
      device -= (device - host) / (c + h) * c;
      break;
    }
  }
  free(ops);
  free(taken);
  return device * 1e6;
}

/* The point of the bound's relaxation (plan_ilp_homes_bound: homes, host
 * optimizers and activations together), rounded into POINT, or its
 * MILP's solution: repaired to
 * the budget where its layout overshoots (on graphs the repair takes),
 * then the ilp's search over homes from it, each judged like every
 * candidate; where one wins, the refinement again. The rule's homes come
 * by a fixed order and its searches from its own plans, where the
 * relaxation weighs every home's bytes against its copies and the host's
 * time at once: gpt2:2:256:512:4 (bench_least.sh) on l4-24g at the
 * ilp's smallest all-device budget m (76,408,836 bytes) 1,420.9 us by the
 * rule (1,381.5 at m - 1), 1,318.6 at both from the point. */
static void from_point(Search *s, Decision *point) {
  int64_t budget = s->o->budget_bytes;
  double before = s->best_step;
  Err e = {{0}};
  Plan *p = plan_from_decisions(s->g, s->d, point, &e);
  if (!p) return;
  if (p->arena_bytes > budget) plan_ilp_repair_arena(s->g, s->d, budget, point, p->arena_bytes);
  plan_free(p);
  consider(s, point, &s->si, any_on_host(s->g, point));
  /* No deadline: the relaxation whose point this is runs without --time-limit. */
  if (plan_ilp_homes_search(s->g, s->d, budget, point, HUGE_VAL) == 1) consider(s, point, &s->si, any_on_host(s->g, point));
  if (s->best_step != before) refine(s);
}

/* plan_decide_placed's path once; *stands: the ilp's plan is returned
 * with its solver fields. */
static int decide_placed(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e,
                         bool *stands) {
  double start = util_now();
  *stands = true;
  /* Everything on the device when the ilp meets the budget so, unless a
   * host optimizer is faster there; on a unified_memory device a host
   * home saves nothing. */
  int rc = plan_decide_ilp(g, d, o, dec, si, e);
  if (d->unified_memory || o->device_homes_only) return rc;
  if (rc == 0 && (!(d->host_memory_gbps > 0) || plan_past_deadline(o))) return rc;
  bool device_met = rc == 0;
  int n = g->ntensors;
  SolveMemo memo = {.act_budget = -1};
  Search s = {.g = g, .d = d, .o = o, .best_step = -1, .last_k = -1, .work = *si, .memo = &memo};
  int *cand = util_xcalloc((size_t)n + 1, sizeof *cand);
  Decision *how = util_xcalloc((size_t)n + 1, sizeof *how);
  s.act = util_xcalloc((size_t)n + 1, sizeof *s.act);
  s.alt = util_xcalloc((size_t)n + 1, sizeof *s.alt);
  s.best = util_xcalloc((size_t)n + 1, sizeof *s.best);
  memo.dec = util_xcalloc((size_t)n + 1, sizeof *memo.dec);
  int64_t *bytes = util_xcalloc((size_t)n + 2, sizeof *bytes); /* bytes[k]: the first k candidates' host bytes */
  rc = -1;
  if (!cand || !how || !s.act || !s.alt || !s.best || !memo.dec || !bytes) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  s.cand = cand, s.how = how;
  int ncand = home_candidates(g, cand, how), nopt = 0;
  for (int i = 0; i < ncand; i++) {
    bytes[i + 1] = bytes[i] + plan_host_share(g, cand[i]);
    nopt += g->tensors[cand[i]].kind == KIND_OPTSTATE;
  }
  /* The candidates whose homes the host memory holds at all: the rest
   * of a prefix's host bytes would leave no plan. */
  int nhost = prefix_within(bytes, ncand, plan_host_limit(d)), nopt_host = nopt < nhost ? nopt : nhost;
  int64_t offloads = 0;
  for (int i = 0; i < g->nstashed; i++) offloads += plan_host_share(g, g->stashed[i]);
  Device fewest = *d; /* the host memory left with every candidate homed */
  memo.usable = d->host_memory <= 0 || ((fewest.host_memory -= bytes[ncand]) > 0 && offloads <= plan_host_limit(&fewest));
  if (device_met) {
    /* The twins, then on small graphs single changes (one optimizer op on
     * the host can be faster where all of them are not); where nothing
     * beats the ilp's plan, it stands with its solver fields. */
    rc = 0;
    int64_t device_arena;
    double device_step = host_twin(&s, dec, si, nopt, bytes, &device_arena);
    if (s.best_step < 0) goto out;
    double twin_step = s.best_step;
    bool twin_won = memcmp(s.best, dec, (size_t)n * sizeof *dec) != 0;
    if (twin_won) {
      Decision *best = util_xcalloc((size_t)n + 1, sizeof *best);
      if (!best) {
        err_set(e, "%s: out of memory", g->path);
        rc = -1;
        goto out;
      }
      Search below = s;
      below.best = best, below.best_step = -1, below.last_k = -1;
      below.work = (SolverInfo){0};
      one_home(&below, dec, device_arena, device_step, s.best_step, si, bytes);
      prefixes(&below, nhost, nopt_host, bytes, o->budget_bytes, true);
      if (below.best_step >= 0) model_search(&below, NULL);
      plan_add_work(&s.work, &below.work);
      if (below.best_step >= 0 && below.best_step < s.best_step) {
        memcpy(s.best, below.best, (size_t)n * sizeof *best);
        s.best_step = below.best_step, s.best_on_host = below.best_on_host, s.si = below.si;
      }
      free(best);
    }
    /* Where the ilp's plan re-runs or stalls anything (its step over its
     * ops' device time), homes that free device bytes can take that off:
     * one home's start (its solve only where predicted to gain), then the
     * ilp's search over homes from the best plan so far. The search runs
     * on every graph with a home candidate, and on small graphs from the
     * ilp's plan as well. Not only where re-runs and stalls are a large
     * share of the ops' time: such a share flips between neighbouring
     * budgets, and the plan rose with the budget where it fell under it
     * (with 15%, gpt2:2:256:512:4 of bench/bench_least.sh on rtx4090-24g:
     * 642.6 us at m, 690.9 at m + 1%, 11.9% over, where the search gives
     * 609.0; docs/PLANNING.md 1.2). */
    bool small = refine_units(g, d, NULL) >= 0, slowed = ncand > 0 && device_step > ops_seconds(g, d);
    if (slowed && !twin_won) one_home(&s, dec, device_arena, device_step, s.best_step, si, bytes); /* else the path below's start */
    if (slowed || (ncand > 0 && !small)) model_search(&s, NULL);
    if (small) model_search(&s, dec);
    refine(&s);
    if (!twin_won && s.best_step == twin_step) {
      /* The ilp's plan stands with its objective, bound and gap; where
       * the rule solved again for nothing better, its counted work and
       * seconds are the whole decision's (llama80-32k of
       * bench/bench_large.sh at its all-device smallest budget: 58 s of
       * 198 s before). Where it solved nothing, they stay the ilp's (0
       * where keep-all fits, so that plan file is byte-identical from
       * run to run). */
      if (s.work.simplex_iterations != si->simplex_iterations || s.work.nodes != si->nodes) {
        si->seconds = util_now() - start;
        si->simplex_iterations = s.work.simplex_iterations, si->nodes = s.work.nodes;
      }
      goto out;
    }
    *stands = false;
  } else {
    *stands = false;
    char note[sizeof si->note] = "";
    Err me = {{0}};
    int64_t least = ncand <= 0          ? -1
                    : si->min_budget_known ? si->min_budget
                                           : plan_ilp_min_budget(g, d, o, note, &me);
    if (least < 0) goto out; /* the ilp's own error stands */
    /* Its memory-minimizing solve needs no repeat where the ilp runs again
     * (try_homes: the same solve without a hint, on less host memory). */
    if (si->min_budget_known && !o->hint) s.least = dec, s.least_arena = least;
    /* Below the bound that holds with every home open no prefix fits. */
    if (o->budget_bytes >= plan_homes_least_peak(g, d, o)) prefixes(&s, nhost, nopt_host, bytes, least, false);
    /* The ilp's memory-minimizing plan under every candidate home that
     * the host memory holds beside its offloads (kfit: where it
     * holds fewer, a smallest budget named from every home was refused
     * again there: llama80 on h100-sxm-80g), built with no solve: from its
     * arena up a budget plans (it fits there, where
     * the prefixes found nothing), and below the bound a budget is refused
     * in the time of the ilp's own refusal. The all-home solve at the
     * ilp's smallest budget (try_homes) names at most 0.5% less on the
     * checked-in models (gpt2-tiny on h100-sxm-80g: 37,847,556 bytes
     * against 38,028,036; llama-tiny 0.09%; equal on the others), and at
     * 1 byte took 290 CPU s. */
    int64_t reach = -1;
    /* Its host arena is at most plan_host_bound, its offloads' and the
     * homes' bytes, so the plan exists within the host memory. */
    int kfit = s.least ? prefix_within(bytes, nhost, plan_host_limit(d) - plan_host_bound(g, s.least)) : nhost;
    if (s.best_step < 0 && s.least) {
      memcpy(s.act, s.least, (size_t)n * sizeof *s.act);
      reach = judge_homes(&s, kfit, si);
    }
    if (s.best_step < 0) {
      /* Where the prefixes ran that solve (try_homes keeps its answer),
       * the smaller of the two; with no memory-minimizing plan, the solve. */
      if (reach < 0 || (s.last_k == nhost && s.last_budget == least)) {
        int64_t solved = try_homes(&s, nhost, bytes[nhost], least);
        if (solved > 0 && (reach < 0 || solved < reach)) reach = solved;
      }
      if (reach > 0) refuse(g, d, o, reach, e);
      goto out;
    }
    model_search(&s, NULL);
    refine(&s);
  }
  /* The solver fields say what the whole search did, of the plan it
   * returns: its simulated step against a bound over every plan the
   * search covers (docs/PLANNING.md 1.2). */
  double bound = plan_homes_bound_us(g, d, o);
  /* Its point is one more candidate on graphs of up to HOMES_POINT_OPS
   * ops, where the relaxation costs about what the plan does (bench_ilp's
   * small models and the hold-outs of bench/ab_plans.sh: within 0.4 CPU
   * s); on larger ones it costs more than the plan (gpt2-124m's midpoint
   * 0.96 -> 1.74 s, llama3-8b's 8.1 -> 14.2 s with the point) and runs
   * for the bound alone, on request (--tight-bound). */
  bool with_point = g->nops <= HOMES_POINT_OPS;
  if ((o->homes_bound || with_point) && o->time_limit <= 0) { /* its LP and tree have counts, not a deadline */
    /* There the exact model is solved as a MILP too (plan_ilp_homes_bound),
     * and its relaxation's point and its solution are two more
     * candidates, after the relaxed model's point (so the path up to
     * them is as without them, and no plan is slower): the exact
     * model's point is not always the better start (gpt2:2:256:512:4 on
     * l4-24g at m + 1%: 1,251.7 us from it, 1,243.1 from the relaxed
     * one's), and where the tree's count runs out its solution can be
     * slower than either point's plan. */
    HomesSolve hs = {.point = s.alt};
    if (with_point) {
      hs.integral = util_xcalloc((size_t)n + 1, sizeof(Decision));
      hs.exact_point = util_xcalloc((size_t)n + 1, sizeof(Decision));
    }
    bound = fmax(bound, plan_ilp_homes_bound(g, d, o->budget_bytes, &hs));
    s.work.simplex_iterations += hs.simplex_iterations, s.work.nodes += hs.nodes;
    if (hs.rounded && with_point) from_point(&s, s.alt);
    if (hs.exact_rounded) from_point(&s, hs.exact_point);
    if (hs.solved) from_point(&s, hs.integral);
    free(hs.integral), free(hs.exact_point);
  }
  memcpy(dec, s.best, (size_t)n * sizeof *dec);
  *si = s.si;
  plan_settle_solver(si, s.best_step, bound, plan_past_deadline(o));
  si->seconds = util_now() - start;
  si->simplex_iterations = s.work.simplex_iterations, si->nodes = s.work.nodes;
  e->msg[0] = '\0';
  rc = 0;
out:
  free(cand);
  free(how);
  free(s.act);
  free(s.alt);
  free(s.best);
  free(memo.dec);
  free(bytes);
  return rc;
}

/* The ilp first leaves out its proof tree where the device has host
 * compute: the tree only raises the bound, and where a plan with homes
 * wins, the bound reported is plan_homes_bound_us (gpt2-tiny on
 * h100-sxm-80g at 42,471,108 bytes: the tree took 85 of 100 s and the
 * twin's plan won). Where the ilp's plan stands, the whole path runs again
 * with the tree, so that its plan and bound are those it would have had;
 * not under --time-limit, which a second run would overrun. */
int plan_decide_placed(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e) {
  PlanOptions first = *o;
  first.defer_proof = host_compute(d, o) && o->time_limit <= 0;
  bool stands;
  layout_memo_enter(); /* the rule's many ilp runs and searches share one memo of packs */
  plan_ilp_bases_enter(); /* ... and their relaxations' bases */
  int rc = decide_placed(g, d, &first, dec, si, e, &stands);
  plan_ilp_bases_leave();
  if (rc == 0 && stands && si->proof_deferred) {
    SolverInfo deferred = *si;
    plan_ilp_bases_enter();
    rc = decide_placed(g, d, o, dec, si, e, &stands);
    plan_ilp_bases_leave();
    plan_add_work(si, &deferred);
    si->seconds += deferred.seconds;
  }
  layout_memo_leave();
  return rc;
}
