/*
 * test_runtime.c - the runtime proves plans. For every executable graph
 * (models/gpt2-tiny.json, models/llama-tiny.json) and
 * every strategy the planner has, at budgets from keep-all down to where
 * the strategy stops being feasible: emit the C schedule, compile it on its
 * own (-std=c99 -Wall -Wextra -Werror) into a shared object, load it, run
 * 3 training steps on the CPU backend in debug mode (random copy delays,
 * NaN on death, occupancy checks), and require
 *   - params, grads, optimizer state and losses bitwise equal to keep-all,
 *   - the runtime's live high-water mark equal to sim_run's peak,
 *   - frozen params (LoRA's base weights) bitwise unchanged by the steps.
 * Graphs `ration model` writes with --lora, --ema and --loss-chunks are
 * proven the same way against the ilp (recompute and offload) at its
 * smallest budget, halfway, and just under keep-all.
 * (A dropped wait racing for real is shown on hand-built plans in
 * test_rt_hand.c.)
 */
#include "ration.h"
#include "test.h"

#include "../runtime/ration.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NSTEPS = 3 };

static char tmpdir[256];

typedef struct Result {
  unsigned char *blob; /* resident state after the steps, then the losses */
  size_t n;
  int64_t hwm, host_hwm;
  int frozen, frozen_moved; /* frozen params, and how many the steps changed */
  int status;
  char err[600];
} Result;

static uint64_t rng;
static uint64_t next_u64(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}

/* Largest token id every embedding and loss op accepts. */
static int64_t vocab(const rt_Schedule *s) {
  int64_t v = 1 << 30;
  for (int o = 0; o < s->nops; o++) {
    const rt_SchedOp *op = &s->ops[o];
    int64_t x = -1;
    if (!strcmp(op->type, "encoder") || !strcmp(op->type, "embedding"))
      x = s->tensors[s->op_io[op->io0 + 1]].shape[0];
    if (!strcmp(op->type, "crossentropy")) {
      const rt_SchedTensor *t = &s->tensors[s->op_io[op->io0]];
      x = t->shape[t->rank - 1];
    }
    if (x > 0 && x < v) v = x;
  }
  return v;
}

static int fill_tensor(rt_Session *ss, const rt_SchedTensor *t, int64_t v, bool params) {
  unsigned char *buf = malloc((size_t)t->bytes);
  if (!buf) return -1;
  for (int64_t i = 0; i < t->bytes; i += (t->dtype == 1 || t->dtype == 2) ? 2 : 4) {
    uint64_t r = next_u64();
    if (t->dtype == 3) {
      int32_t x = (int32_t)(r % (uint64_t)v);
      memcpy(buf + i, &x, 4);
    } else {
      float x = params ? (float)((double)(r >> 11) / 9007199254740992.0 * 0.4 - 0.2) : 0.0f;
      if (t->dtype == 0) memcpy(buf + i, &x, 4);
      else {
        uint32_t u;
        memcpy(&u, &x, 4);
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(buf + i, &h, 2);
      }
    }
  }
  int rc = rt_write(ss, t->name, t->dtype, t->rank, t->shape, buf, (size_t)t->bytes);
  free(buf);
  return rc;
}

/* Whether the params graph G marks frozen have the values in WAS (their
 * bytes in schedule order); counts them into r. */
static void check_frozen(rt_Session *ss, const rt_Schedule *s, const Graph *g, unsigned char *was, bool save,
                         Result *r) {
  size_t at = 0;
  for (int t = 0; t < s->ntensors && r->status == RT_OK; t++) {
    int gi = graph_find_tensor(g, s->tensors[t].name);
    if (s->tensors[t].kind != 1 || gi < 0 || !g->tensors[gi].frozen) continue;
    size_t n = (size_t)s->tensors[t].bytes;
    unsigned char *now = malloc(n);
    const rt_SchedTensor *T = &s->tensors[t];
    r->status = now ? rt_read(ss, T->name, T->dtype, T->rank, T->shape, now, n) : RT_ENOMEM;
    if (r->status == RT_OK && save) memcpy(was + at, now, n), r->frozen++;
    else if (r->status == RT_OK && memcmp(was + at, now, n)) r->frozen_moved++;
    free(now);
    at += n;
  }
}

/* Runs NSTEPS steps of schedule S from a fixed initial state and batches:
 * the resident state after them, then the losses, in r->blob. FLAGS:
 * RT_OPEN_*; DELAY_US 0 means random copy delays in debug mode. */
static void run_steps(const rt_Schedule *s, const Graph *g, unsigned delay_us, unsigned flags, int nsteps, Result *r) {
  memset(r, 0, sizeof *r);
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = flags, .seed = 7, .delay_us = delay_us};
  rt_Session *ss;
  r->status = rt_open(s, &o, &ss, r->err, sizeof r->err);
  if (r->status != RT_OK) return;
  rng = 0x1234567ull;
  int64_t v = vocab(s);
  for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
    if (s->tensors[t].kind == 1)
      r->status = fill_tensor(ss, &s->tensors[t], v, true);
  size_t total = 0;
  for (int t = 0; t < s->ntensors; t++)
    if (s->tensors[t].kind >= 1 && s->tensors[t].kind <= 3) total += (size_t)s->tensors[t].bytes;
  r->blob = calloc(total + nsteps * sizeof(float) + 1, 1);
  unsigned char *frozen = malloc(total + 1);
  check_frozen(ss, s, g, frozen, true, r);
  for (int step = 0; step < nsteps && r->status == RT_OK; step++) {
    for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
      if (s->tensors[t].kind == 0) r->status = fill_tensor(ss, &s->tensors[t], v, false);
    if (r->status == RT_OK) r->status = rt_step(ss);
    for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
      if (s->tensors[t].is_output && s->tensors[t].bytes == 4)
        r->status = rt_read(ss, s->tensors[t].name, s->tensors[t].dtype, s->tensors[t].rank, s->tensors[t].shape,
                            r->blob + total + (size_t)step * 4, 4);
  }
  size_t at = 0;
  for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
    if (s->tensors[t].kind >= 1 && s->tensors[t].kind <= 3) {
      r->status = rt_read(ss, s->tensors[t].name, s->tensors[t].dtype, s->tensors[t].rank, s->tensors[t].shape,
                          r->blob + at, (size_t)s->tensors[t].bytes);
      at += (size_t)s->tensors[t].bytes;
    }
  r->n = total + nsteps * sizeof(float);
  check_frozen(ss, s, g, frozen, false, r);
  free(frozen);
  rt_Stats st;
  rt_stats(ss, &st);
  r->hwm = st.live_high_water;
  r->host_hwm = st.host_high_water;
  if (r->status != RT_OK) snprintf(r->err, sizeof r->err, "%s", rt_error(ss));
  rt_close(ss);
}

/* NSTEPS debug-mode steps. */
static void run_schedule(const rt_Schedule *s, const Graph *g, unsigned delay_us, Result *r) {
  run_steps(s, g, delay_us, RT_OPEN_DEBUG, NSTEPS, r);
}

/* Emits, compiles alone and loads plan P; the handle stays open. */
static const rt_Schedule *load_plan(const Plan *p, const Graph *g, const char *name, void **handle, char *why,
                                    size_t wn) {
  Buf c = {0}, h = {0};
  Err e = {{0}};
  const rt_Schedule *s = NULL;
  char path[600], cmd[2400], ident[256];
  *handle = NULL;
  if (emit_c_source(p, g, name, &c, &e) < 0 || emit_c_header(p, g, name, &h, &e) < 0) {
    snprintf(why, wn, "emit: %.500s", e.msg);
    goto done;
  }
  snprintf(path, sizeof path, "%s/%s.sched.c", tmpdir, name);
  if (util_write_file_atomic(path, c.data, c.len, &e) < 0) goto fail_e;
  snprintf(path, sizeof path, "%s/%s.sched.h", tmpdir, name);
  if (util_write_file_atomic(path, h.data, h.len, &e) < 0) goto fail_e;
  snprintf(cmd, sizeof cmd,
           "cc -std=c99 -Wall -Wextra -Werror -O0 -fPIC -shared -o %s/%s.so %s/%s.sched.c 2>%s/%s.cc.log", tmpdir,
           name, tmpdir, name, tmpdir, name);
  if (system(cmd) != 0) {
    snprintf(why, wn, "%s.sched.c does not compile alone (see %s/%s.cc.log)", name, tmpdir, name);
    goto done;
  }
  snprintf(path, sizeof path, "%s/%s.so", tmpdir, name);
  *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) {
    snprintf(why, wn, "dlopen: %s", dlerror());
    goto done;
  }
  emit_c_ident(name, ident, sizeof ident);
  snprintf(cmd, sizeof cmd, "ration_schedule_%s", ident);
  const rt_Schedule *(*entry)(void) = (const rt_Schedule *(*)(void))dlsym(*handle, cmd);
  if (!entry) snprintf(why, wn, "no symbol %.200s", cmd);
  else s = entry();
  goto done;
fail_e:
  snprintf(why, wn, "%.500s", e.msg);
done:
  buf_free(&c);
  buf_free(&h);
  return s;
}

static Plan *try_plan(const Graph *g, const Device *d, const char *strategy, int64_t budget) {
  PlanOptions po = {.strategy = strategy, .solver = "glpk", .budget_bytes = budget, .quiet = true};
  Err e = {{0}};
  return plan_make(g, d, &po, &e);
}

/* The smallest budget the strategy meets: the one its infeasibility error
 * names when it names one (the ilp does), else found by bisection to within
 * 2% of keep-all; -1 when it cannot even meet 130% of the keep-all peak.
 * *AT: the strategy's plan at that budget (NULL with -1), so that callers
 * need not plan it again. */
static int64_t smallest_feasible(const Graph *g, const Device *d, const char *strategy, int64_t keep_peak, Plan **at) {
  PlanOptions po = {.strategy = strategy, .solver = "glpk", .budget_bytes = 1, .quiet = true};
  Err e = {{0}};
  Plan *p = plan_make(g, d, &po, &e);
  const char *named = strstr(e.msg, "the smallest budget planned is ");
  long long m;
  plan_free(p);
  if (named && sscanf(named + strlen("the smallest budget planned is "), "%lld", &m) == 1 &&
      (*at = try_plan(g, d, strategy, (int64_t)m)))
    return (int64_t)m;
  int64_t lo = 0, hi = keep_peak + keep_peak / 20;
  *at = try_plan(g, d, strategy, hi);
  if (!*at) *at = try_plan(g, d, strategy, hi = keep_peak + keep_peak * 3 / 10);
  if (!*at) return -1;
  while (hi - lo > keep_peak / 50) {
    int64_t mid = lo + (hi - lo) / 2;
    if ((p = try_plan(g, d, strategy, mid))) hi = mid, plan_free(*at), *at = p;
    else lo = mid;
  }
  return hi;
}

/* The graph and the device, or false (a failed case) with neither. */
static bool load_pair(const char *graph_path, const char *device_path, Graph **g, Device **d) {
  Err e = {{0}};
  *g = graph_load(graph_path, &e);
  *d = *g ? device_load(device_path, &e) : NULL;
  T_CASE(graph_path) T_CHECKF(*g && *d, "%s", e.msg);
  if (*g && *d) return true;
  graph_free(*g);
  device_free(*d);
  return false;
}

/* What proving a graph on a device finds that prove_homes needs again for
 * the same pair, so that it is planned and run once. */
typedef struct {
  Result ref;        /* keep-all's NSTEPS debug steps */
  bool have_ref;     /* they ran (else why says what failed) */
  char why[800];
  Decision *ilp_mid; /* the ilp's decisions halfway from its smallest budget to keep-all, or NULL */
} Proven;

static Decision *copy_decisions(const Plan *p, const Graph *g) {
  Decision *dec = calloc((size_t)g->ntensors + 1, sizeof *dec);
  if (dec) memcpy(dec, p->decisions, (size_t)g->ntensors * sizeof *dec);
  return dec;
}

static void proven_free(Proven *pv) {
  free(pv->ref.blob);
  free(pv->ilp_mid);
}

/* Every strategy, or only keep-all and ONLY, which must then recompute and
 * offload in one plan at least. PV (or NULL): what prove_homes reuses. */
static void prove_graph(const char *graph_path, const char *device_path, const char *only, Proven *pv,
                        int *planned) {
  bool mixed = false;
  Err e = {{0}};
  Graph *g;
  Device *d;
  if (!load_pair(graph_path, device_path, &g, &d)) return;
  int64_t keep_peak = plan_keep_all_peak(g, d, &e);
  int nfrozen = 0;
  for (int i = 0; i < g->ntensors; i++) nfrozen += g->tensors[i].frozen;
  Result ref = {0};
  bool have_ref = false;
  for (const PlanStrategy *st = plan_strategies; st->name; st++) {
    bool keep = !strcmp(st->name, "keep-all");
    if (!strcmp(st->name, "exact") && g->nops > 80) continue; /* exact MILP: small graphs only */
    if (only && !keep && strcmp(st->name, only)) continue;
    /* keep-all once; every other strategy at its smallest feasible budget,
     * halfway to keep-all, and just under keep-all. */
    Plan *smallest = NULL;
    int64_t lo = keep ? 2 * keep_peak : smallest_feasible(g, d, st->name, keep_peak, &smallest);
    int64_t budgets[3] = {lo, lo + (keep_peak - lo) / 2, keep_peak - keep_peak / 20};
    for (int bi = 0; bi < (keep ? 1 : 3) && lo > 0; bi++) {
      if (bi > 0 && budgets[bi] <= budgets[bi - 1]) continue;
      Plan *p = bi == 0 && smallest ? smallest : try_plan(g, d, st->name, budgets[bi]);
      if (!p) continue; /* a strategy need not be monotone in the budget */
      if (pv && !pv->ilp_mid && !strcmp(st->name, "ilp") && budgets[bi] == budgets[1])
        pv->ilp_mid = copy_decisions(p, g);
      bool rec = false, off = false;
      for (int i = 0; i < g->ntensors; i++) {
        rec |= p->decisions[i] == DEC_RECOMPUTE;
        off |= p->decisions[i] == DEC_OFFLOAD;
      }
      mixed |= rec && off;
      char name[200], label[300], why[800] = "";
      int pct = (int)(100.0 * (double)budgets[bi] / (double)keep_peak);
      snprintf(name, sizeof name, "%s_%s_%d", g->name, st->name, bi);
      snprintf(label, sizeof label, "%s %s at %d%% of the keep-all peak%s: 3 debug steps", g->name, st->name, pct,
               bi == 0 && !keep ? " (its smallest)" : "");
      SimResult sr;
      Err se = {{0}};
      int simrc = sim_run(p, g, d, false, &sr, &se);
      void *h;
      const rt_Schedule *s = load_plan(p, g, name, &h, why, sizeof why);
      Result r = {0};
      if (s) run_schedule(s, g, 0, &r);
      T_CASE(label) {
        T_CHECKF(simrc == 0, "sim_run: %s", se.msg);
        T_CHECKF(s != NULL, "%s", why);
        T_CHECKF(!s || r.status == RT_OK, "run: %s: %s", rt_status_name(r.status), r.err);
        T_CHECKF(r.frozen == nfrozen && r.frozen_moved == 0, "%d of %d frozen params changed (graph: %d)",
                 r.frozen_moved, r.frozen, nfrozen);
        if (s && r.status == RT_OK && simrc == 0)
          T_CHECKF(r.hwm == sr.peak_live_bytes, "runtime high-water %lld, simulator peak %lld", (long long)r.hwm,
                   (long long)sr.peak_live_bytes);
        if (s && r.status == RT_OK && keep) {
          ref = r;
          have_ref = true;
          r.blob = NULL;
        } else if (s && r.status == RT_OK) {
          T_CHECKF(have_ref && ref.n == r.n && !memcmp(ref.blob, r.blob, r.n),
                   "params, grads, optimizer state or losses differ from keep-all after %d steps", NSTEPS);
          (*planned)++;
        }
      }
      free(r.blob);
      if (h) dlclose(h);
      if (simrc == 0) sim_result_free(&sr);
      plan_free(p);
    }
  }
  if (only) T_CASE(graph_path) T_CHECKF(mixed, "no %s plan both recomputes and offloads", only);
  if (pv) {
    pv->ref = ref;
    pv->have_ref = have_ref;
    if (!have_ref) snprintf(pv->why, sizeof pv->why, "the keep-all plan did not run");
  } else {
    free(ref.blob);
  }
  graph_free(g);
  device_free(d);
}

/* Every param host-homed (host-refetch where it is read in the forward and
 * again after it, else host) and every optimizer state host-homed, over the
 * stashed decisions BASE, and with HOST_OPT every grad whose optimizer op
 * may run on the host decided so (*nhost of them): the plan from those
 * decisions. */
static Plan *homed_plan(const Graph *g, const Device *d, const Decision *base, bool host_opt, int *nhomed, int *nhost,
                        Err *e) {
  Decision *dec = calloc((size_t)g->ntensors + 1, sizeof *dec);
  *nhomed = *nhost = 0;
  for (int t = 0; t < g->ntensors; t++) {
    dec[t] = base ? base[t] : g->tensors[t].stashed ? DEC_KEEP : DEC_NONE;
    if (!graph_is_resident(&g->tensors[t])) continue;
    dec[t] = plan_home_allowed(g, t, DEC_HOST_REFETCH) ? DEC_HOST_REFETCH
             : plan_home_allowed(g, t, DEC_HOST)       ? DEC_HOST
             : host_opt && plan_home_allowed(g, t, DEC_HOST_OPTIMIZER) ? DEC_HOST_OPTIMIZER
                                                       : DEC_NONE;
    *nhomed += dec[t] != DEC_NONE && dec[t] != DEC_HOST_OPTIMIZER;
    *nhost += dec[t] == DEC_HOST_OPTIMIZER;
  }
  Plan *p = plan_from_decisions(g, d, dec, e);
  free(dec);
  return p;
}

/* For a pair prove_graph has not proven: keep-all's steps and the ilp's
 * decisions at the midpoint between its smallest budget and keep-all. */
static void learn_homes_base(const Graph *g, const Device *d, int64_t keep_peak, const Plan *keep, Proven *pv) {
  Plan *smallest = NULL;
  int64_t lo = smallest_feasible(g, d, "ilp", keep_peak, &smallest);
  plan_free(smallest);
  Plan *ilp = lo > 0 ? try_plan(g, d, "ilp", lo + (keep_peak - lo) / 2) : NULL;
  pv->ilp_mid = ilp ? copy_decisions(ilp, g) : NULL;
  plan_free(ilp);
  void *h = NULL;
  const rt_Schedule *s = keep ? load_plan(keep, g, "homes_ref", &h, pv->why, sizeof pv->why) : NULL;
  if (s) run_schedule(s, g, 0, &pv->ref);
  pv->have_ref = s && pv->ref.status == RT_OK;
  if (s && !pv->have_ref) snprintf(pv->why, sizeof pv->why, "%s", pv->ref.err);
  if (h) dlclose(h);
}

/* Params and optimizer state host-homed (homed_plan), over keep-all's
 * stashed decisions and over the ilp's at the midpoint between its smallest
 * budget and keep-all, each with the optimizer on the device and, where
 * the graph lets it (no EMA reading a param after its update), on the
 * host: 3 debug steps bitwise equal to keep-all, the runtime's device and
 * host high-water marks equal to the simulator's peaks, and over keep-all
 * the device peak below keep-all's by at least the optimizer state (which
 * is on the device only around its update, or never). PROVEN: what
 * prove_graph found for the same pair, or NULL to find it here. */
static void prove_homes(const char *graph_path, const char *device_path, const Proven *proven, int *planned) {
  Err e = {{0}};
  Graph *g;
  Device *d;
  if (!load_pair(graph_path, device_path, &g, &d)) return;
  int64_t keep_peak = plan_keep_all_peak(g, d, &e), optstate = 0, most = 0;
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].kind == KIND_OPTSTATE) {
      optstate += g->tensors[t].bytes;
      most = g->tensors[t].bytes > most ? g->tensors[t].bytes : most;
    }
  Plan *keep = try_plan(g, d, "keep-all", 2 * keep_peak);
  Proven own = {0};
  if (!proven) learn_homes_base(g, d, keep_peak, keep, &own);
  const Proven *pv = proven ? proven : &own;
  const Result *ref = &pv->ref;
  void *h = NULL;
  char why[800] = "";
  T_CASE("keep-all reference runs") T_CHECKF(pv->have_ref, "%s", pv->why);
  for (int v = 0; v < 4; v++) {
    int nhomed = 0, nhost = 0, k = v % 2;
    bool host_opt = v >= 2;
    const Decision *ilp = pv->ilp_mid;
    Plan *p = homed_plan(g, d, k ? ilp : keep->decisions, host_opt, &nhomed, &nhost, &e);
    if (host_opt && p && nhost == 0) {
      /* Only where an EMA reads every updated param after its update. */
      bool ema = false;
      for (int i = 0; i < g->nops; i++) ema |= strcmp(g->ops[i].type, "ema") == 0;
      T_CASE("no optimizer op may run on the host only with an EMA") T_CHECKF(ema, "%s", g->name);
      plan_free(p);
      continue;
    }
    char label[400], name[64];
    snprintf(label, sizeof label, "%s on %s: params and optimizer state host-homed over %s, optimizer on the %s, "
             "3 debug steps", g->name, d->name, k ? "the ilp's decisions at its midpoint" : "keep-all",
             host_opt ? "host" : "device");
    snprintf(name, sizeof name, "homes_%d", v);
    SimResult sr;
    Err se = {{0}};
    int simrc = p ? sim_run(p, g, d, false, &sr, &se) : -1;
    Result r = {0};
    const rt_Schedule *s = p ? load_plan(p, g, name, &h, why, sizeof why) : NULL;
    if (s) run_schedule(s, g, 0, &r);
    T_CASE(label) {
      T_CHECKF(p && nhomed > 0 && (k == 0 || ilp), "%s", e.msg);
      T_CHECKF(simrc == 0, "sim_run: %s", se.msg);
      T_CHECKF(s && r.status == RT_OK, "%s %s", why, r.err);
      if (simrc == 0 && s && r.status == RT_OK) {
        T_CHECKF(r.hwm == sr.peak_live_bytes, "runtime device high-water %lld, simulator %lld", (long long)r.hwm,
                 (long long)sr.peak_live_bytes);
        T_CHECKF(r.host_hwm == sr.peak_host_bytes, "runtime host high-water %lld, simulator %lld",
                 (long long)r.host_hwm, (long long)sr.peak_host_bytes);
        T_CHECKF(pv->have_ref && ref->n == r.n && !memcmp(ref->blob, r.blob, r.n),
                 "params, grads, optimizer state or losses differ from keep-all after %d steps", NSTEPS);
        if (k == 0)
          T_CHECKF(sr.peak_live_bytes <= keep_peak - optstate + most, "peak %lld, keep-all %lld, optimizer state %lld",
                   (long long)sr.peak_live_bytes, (long long)keep_peak, (long long)optstate);
        printf("# %s: %d host-homed, %d optimizer ops on the host, device peak %lld (keep-all %lld), host peak %lld\n",
               label, nhomed, nhost, (long long)sr.peak_live_bytes, (long long)keep_peak, (long long)sr.peak_host_bytes);
        (*planned)++;
      }
    }
    free(r.blob);
    if (h) dlclose(h);
    h = NULL;
    if (simrc == 0) sim_result_free(&sr);
    plan_free(p);
  }
  proven_free(&own);
  plan_free(keep);
  graph_free(g);
  device_free(d);
}

/* Largest |a - b| over the largest |b| of n f32 values. */
static double rel_err(const float *a, const float *b, int64_t n) {
  double d = 0, m = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
  }
  return d / m;
}

/* gpt2-tiny with --loss-chunks 4 against itself unchunked: its keep-all
 * peak lower by at least the 3/4 of the logits it never holds; one step
 * (reference kernels) with every grad, param and optimizer state bitwise
 * equal except the lm head's (tied wte: its dw sums over the rows in 4
 * parts) and the loss (4 partial means added), which agree to f32. */
static void prove_loss_chunks(const char *device_path) {
  ModelConfig c[2];
  Graph *g[2] = {NULL, NULL};
  Plan *p[2] = {NULL, NULL};
  void *h[2] = {NULL, NULL};
  const rt_Schedule *s[2] = {NULL, NULL};
  Result r[2] = {{0}, {0}};
  int64_t peak[2] = {0, 0};
  Err e = {{0}};
  Device *d = device_load(device_path, &e);
  char why[800] = "";
  for (int k = 0; k < 2; k++) {
    c[k] = (ModelConfig){.family = "gpt2", .name = k ? "gpt2_chunks4" : "gpt2_chunks1", .layers = 4, .dim = 64,
                         .heads = 4, .vocab = 256, .seq = 128, .batch = 8, .dtype = DT_F32, .tied = true, .eps = 1e-5,
                         .lr = 1e-3, .weight_decay = 0.1, .loss_chunks = k ? 4 : 0};
    Buf b = {0};
    if (d && model_build(&c[k], &b, &e) == 0) g[k] = graph_parse(c[k].name, b.data, b.len, &e);
    buf_free(&b);
    if (g[k]) peak[k] = plan_keep_all_peak(g[k], d, &e);
    if (g[k] && peak[k] > 0) p[k] = try_plan(g[k], d, "keep-all", 2 * peak[k]);
    if (p[k]) s[k] = load_plan(p[k], g[k], c[k].name, &h[k], why, sizeof why);
    if (s[k]) run_steps(s[k], g[k], 0, RT_OPEN_DEBUG | RT_OPEN_REFERENCE, 1, &r[k]);
  }
  int64_t N = 8 * 128, R = N / 4, V = 256, saved = (N - R) * V * 4;
  T_CASE("gpt2-tiny --loss-chunks 4: keep-all peak lower by at least 3/4 of the logits (786,432 bytes)") {
    T_CHECKF(g[0] && g[1] && peak[0] > 0 && peak[1] > 0, "%s", e.msg);
    T_CHECKF(peak[0] - peak[1] >= saved, "peaks %lld unchunked, %lld chunked", (long long)peak[0], (long long)peak[1]);
    printf("# keep-all peak %lld -> %lld bytes (-%lld; the logits 4 blocks never hold: %lld)\n", (long long)peak[0],
           (long long)peak[1], (long long)(peak[0] - peak[1]), (long long)saved);
  }
  T_CASE("gpt2-tiny --loss-chunks 4 vs unchunked, one step: bitwise but the lm head's dw and the loss") {
    T_CHECKF(s[0] && s[1], "%s", why);
    T_CHECKF(r[0].status == RT_OK && r[1].status == RT_OK && r[0].n == r[1].n, "%s %s", r[0].err, r[1].err);
    if (s[0] && s[1] && r[0].status == RT_OK && r[1].status == RT_OK && r[0].n == r[1].n) {
      size_t at = 0;
      int same = 0, close = 0;
      for (int t0 = 0, t1 = 0; t0 < s[0]->ntensors; t0++) {
        const rt_SchedTensor *T = &s[0]->tensors[t0];
        if (T->kind < 1 || T->kind > 3) continue;
        while (t1 < s[1]->ntensors && (s[1]->tensors[t1].kind < 1 || s[1]->tensors[t1].kind > 3)) t1++;
        T_CHECKF(t1 < s[1]->ntensors && !strcmp(T->name, s[1]->tensors[t1].name), "resident %s", T->name);
        t1++;
        if (!memcmp(r[0].blob + at, r[1].blob + at, (size_t)T->bytes)) {
          same++;
        } else {
          double err = rel_err((const float *)(r[1].blob + at), (const float *)(r[0].blob + at), T->bytes / 4);
          T_CHECKF(strstr(T->name, "wte") && err < 1e-5, "%s differs (%g)", T->name, err);
          close++;
        }
        at += (size_t)T->bytes;
      }
      double lerr = rel_err((const float *)(r[1].blob + at), (const float *)(r[0].blob + at), 1);
      T_CHECKF(lerr < 1e-6, "loss differs by %g", lerr);
      printf("# %d resident tensors bitwise equal, %d (wte's) within 1e-5, loss within %.2g\n", same, close, lerr);
      T_CHECK(same > 40 && close >= 1 && close <= 4);
    }
  }
  for (int k = 0; k < 2; k++) {
    free(r[k].blob);
    if (h[k]) dlclose(h[k]);
    plan_free(p[k]);
    graph_free(g[k]);
  }
  device_free(d);
}

/* Graph tensor T's resident value (the runtime's dtype codes are the graph's). */
static int read_tensor(rt_Session *ss, const Tensor *T, void *dst) {
  return rt_read(ss, T->name, (int)T->dtype, T->rank, T->shape, dst, (size_t)T->bytes);
}

/* An EMA graph's keep-all schedule, NSTEPS debug steps one at a time from
 * rt_init_params (an EMA starts equal to its param): each ema.P after them
 * equals decay * ema + (1 - decay) * P formed here in f32, in that order,
 * from P's value after each step, bitwise. */
static void prove_ema(const char *graph_path, const char *device_path) {
  Err e = {{0}};
  Graph *g = graph_load(graph_path, &e);
  Device *d = g ? device_load(device_path, &e) : NULL;
  Plan *p = d ? try_plan(g, d, "keep-all", 2 * plan_keep_all_peak(g, d, &e)) : NULL;
  void *h = NULL;
  char why[800] = "";
  const rt_Schedule *s = p ? load_plan(p, g, "ema_direct", &h, why, sizeof why) : NULL;
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = RT_OPEN_DEBUG, .seed = 7};
  rt_Session *ss = NULL;
  int rc = s ? rt_open(s, &o, &ss, why, sizeof why) : RT_EINVAL;
  if (rc == RT_OK) rc = rt_init_params(ss, 42, 0.02);
  enum { MAX_EMA = 64 };
  int nema = 0, bad = 0, state[MAX_EMA], src[MAX_EMA];
  float decay[MAX_EMA], *want[MAX_EMA];
  for (int i = 0; rc == RT_OK && i < g->nops && nema < MAX_EMA; i++) {
    const Op *op = &g->ops[i];
    if (strcmp(op->type, "ema")) continue;
    state[nema] = op->inputs[0];
    src[nema] = op->inputs[1];
    decay[nema] = (float)op->attrs[0].num;
    T_CHECK(op->nattrs == 1 && !strcmp(op->attrs[0].key, "decay") && g->tensors[src[nema]].dtype == DT_F32);
    want[nema] = malloc((size_t)g->tensors[state[nema]].bytes);
    rc = read_tensor(ss, &g->tensors[state[nema]], want[nema]);
    nema++;
  }
  int64_t most = 0;
  for (int t = 0; g && t < g->ntensors; t++) most = g->tensors[t].bytes > most ? g->tensors[t].bytes : most;
  float *now = malloc((size_t)most + 4);
  rng = 0x1234567ull;
  int64_t v = s ? vocab(s) : 0;
  for (int step = 0; step < NSTEPS && rc == RT_OK; step++) {
    for (int t = 0; t < s->ntensors && rc == RT_OK; t++)
      if (s->tensors[t].kind == 0) rc = fill_tensor(ss, &s->tensors[t], v, false);
    if (rc == RT_OK) rc = rt_step(ss);
    for (int k = 0; k < nema && rc == RT_OK; k++) {
      const Tensor *P = &g->tensors[src[k]];
      rc = read_tensor(ss, P, now);
      float dk = decay[k], ck = 1.0f - decay[k];
      for (int64_t i = 0; rc == RT_OK && i < P->bytes / 4; i++) want[k][i] = dk * want[k][i] + ck * now[i];
    }
  }
  for (int k = 0; k < nema && rc == RT_OK; k++) {
    const Tensor *E = &g->tensors[state[k]];
    rc = read_tensor(ss, E, now);
    bad += rc == RT_OK && memcmp(now, want[k], (size_t)E->bytes) != 0;
  }
  T_CASE("--ema: each ema.P after 3 steps is decay * ema + (1 - decay) * P in f32 from P after each step, bitwise") {
    T_CHECKF(rc == RT_OK && nema > 0, "%s %s %s", e.msg, why, ss ? rt_error(ss) : "");
    T_CHECKF(bad == 0, "%d of %d EMAs differ", bad, nema);
  }
  free(now);
  for (int k = 0; k < nema; k++) free(want[k]);
  if (ss) rt_close(ss);
  if (h) dlclose(h);
  plan_free(p);
  graph_free(g);
  device_free(d);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/ration-test-runtime-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    printf("cannot make a temporary directory\n");
    return 1;
  }
  int planned = 0;
  Proven gpt2_cpu = {0};
  prove_graph("models/gpt2-tiny.json", "budgets/cpu.json", NULL, &gpt2_cpu, &planned);
  prove_graph("models/llama-tiny.json", "budgets/cpu.json", NULL, NULL, &planned);
  /* gpt2 LoRA on every target it has, with an EMA; llama LoRA on q and v
   * (the default) with an EMA; gpt2 LoRA with the loss in 4 row blocks. */
  /* The cpu profile with copies 50 times slower: offloading costs, so the
   * ilp recomputes some tensors and offloads others. */
  char slow[300];
  snprintf(slow, sizeof slow, "%s/cpu-slow-copies.json", tmpdir);
  static const char slow_json[] =
      "{\"format\": \"ration-device/1\", \"name\": \"cpu-slow-copies\", \"memory\": \"8GiB\", \"reserve\": 0,\n"
      " \"peak_tflops\": {\"bf16\": 0.02, \"f32\": 0.02}, \"hbm_gbps\": 10, \"h2d_gbps\": 0.1, \"d2h_gbps\": 0.1,\n"
      " \"launch_us\": 1, \"host_memory\": \"8GiB\", \"host_memory_gbps\": 5, \"host_cores\": 2}\n";
  Err e = {{0}};
  T_CASE("slow-copy device written") T_CHECKF(util_write_file_atomic(slow, slow_json, sizeof slow_json - 1, &e) == 0, "%s", e.msg);
  prove_loss_chunks("budgets/cpu.json");
  ModelConfig variants[3];
  variants[0] = (ModelConfig){.family = "gpt2", .name = "gpt2_lora", .layers = 2, .dim = 64, .heads = 4, .vocab = 256,
                              .seq = 64, .batch = 4, .dtype = DT_F32, .tied = true, .eps = 1e-5, .lr = 1e-3,
                              .weight_decay = 0.1, .lora_rank = 4, .lora_targets = MODEL_LORA_Q | MODEL_LORA_K |
                              MODEL_LORA_V | MODEL_LORA_O | MODEL_LORA_UP | MODEL_LORA_DOWN, .ema_decay = 0.9};
  variants[1] = (ModelConfig){.family = "llama", .name = "llama_lora", .layers = 2, .dim = 64, .heads = 4,
                              .kv_heads = 2, .ffn = 96, .vocab = 256, .seq = 64, .batch = 4, .dtype = DT_F32,
                              .eps = 1e-5, .theta = 10000, .lr = 1e-3, .weight_decay = 0.1, .lora_rank = 4,
                              .ema_decay = 0.99};
  variants[2] = variants[0];
  variants[2].name = "gpt2_lora_chunks";
  variants[2].loss_chunks = 4;
  variants[2].ema_decay = 0;
  for (int i = 0; i < 3; i++) {
    char path[400];
    Buf b = {0};
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, variants[i].name);
    T_CASE(variants[i].name) T_CHECKF(model_build(&variants[i], &b, &e) == 0 && util_write_file_atomic(path, b.data, b.len, &e) == 0,
                          "%s", e.msg);
    buf_free(&b);
    Proven pv = {0};
    prove_graph(path, slow, "ilp", &pv, &planned);
    if (variants[i].ema_decay > 0) prove_ema(path, "budgets/cpu.json");
    prove_homes(path, slow, &pv, &planned);
    proven_free(&pv);
  }
  prove_homes("models/gpt2-tiny.json", "budgets/cpu.json", &gpt2_cpu, &planned);
  proven_free(&gpt2_cpu);
  prove_homes("models/llama-tiny.json", slow, NULL, &planned);
  printf("# %d planned schedules proven against keep-all\n", planned);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  T_DONE();
}
