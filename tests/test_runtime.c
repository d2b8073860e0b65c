/*
 * test_runtime.c - the runtime proves plans. For every executable graph
 * (models/gpt2-tiny.json, models/llama-tiny.json) and
 * every strategy the planner has, at budgets from keep-all down to where
 * the strategy stops being feasible: emit the C schedule, compile it on its
 * own (-std=c99 -Wall -Wextra -Werror) into a shared object, load it, run
 * 3 training steps on the CPU backend in debug mode (random copy delays,
 * NaN on death, occupancy checks), and require
 *   - params, grads, optimizer state and losses bitwise equal to keep-all,
 *   - the runtime's live high-water mark equal to sim_run's peak.
 * (A dropped wait racing for real is shown on hand-built plans in
 * test_rt_hand.c.)
 */
#include "ration.h"
#include "test.h"

#include "../runtime/ration.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NSTEPS = 3 };

static char tmpdir[256];

typedef struct Result {
  unsigned char *blob; /* resident state after the steps, then the losses */
  size_t n;
  int64_t hwm;
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
  int rc = rt_write(ss, t->name, buf, (size_t)t->bytes);
  free(buf);
  return rc;
}

/* Runs NSTEPS steps of schedule S from a fixed initial state and batches. */
/* Debug mode always; DELAY_US 0 means random copy delays. */
static void run_schedule(const rt_Schedule *s, unsigned delay_us, Result *r) {
  memset(r, 0, sizeof *r);
  rt_Options o = {RT_BACKEND_CPU, RT_OPEN_DEBUG, 7, delay_us, 0};
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
  r->blob = calloc(total + NSTEPS * sizeof(float) + 1, 1);
  for (int step = 0; step < NSTEPS && r->status == RT_OK; step++) {
    for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
      if (s->tensors[t].kind == 0) r->status = fill_tensor(ss, &s->tensors[t], v, false);
    if (r->status == RT_OK) r->status = rt_step(ss);
    for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
      if (s->tensors[t].is_output && s->tensors[t].bytes == 4)
        r->status = rt_read(ss, s->tensors[t].name, r->blob + total + (size_t)step * 4, 4);
  }
  size_t at = 0;
  for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
    if (s->tensors[t].kind >= 1 && s->tensors[t].kind <= 3) {
      r->status = rt_read(ss, s->tensors[t].name, r->blob + at, (size_t)s->tensors[t].bytes);
      at += (size_t)s->tensors[t].bytes;
    }
  r->n = total + NSTEPS * sizeof(float);
  rt_Stats st;
  rt_stats(ss, &st);
  r->hwm = st.live_high_water;
  if (r->status != RT_OK) snprintf(r->err, sizeof r->err, "%s", rt_error(ss));
  rt_close(ss);
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
  PlanOptions po = {.strategy = strategy, .solver = "glpk", .budget_bytes = budget, .time_limit = 5.0, .quiet = true};
  Err e = {{0}};
  return plan_make(g, d, &po, &e);
}

/* The smallest budget the strategy meets: the one its infeasibility error
 * names when it names one (the ilp does), else found by bisection to within
 * 2% of keep-all; -1 when it cannot even meet 130% of the keep-all peak. */
static int64_t smallest_feasible(const Graph *g, const Device *d, const char *strategy, int64_t keep_peak) {
  PlanOptions po = {.strategy = strategy, .solver = "glpk", .budget_bytes = 1, .time_limit = 5.0, .quiet = true};
  Err e = {{0}};
  Plan *p = plan_make(g, d, &po, &e);
  const char *named = strstr(e.msg, "the smallest budget planned is ");
  long long m;
  plan_free(p);
  if (named && sscanf(named + strlen("the smallest budget planned is "), "%lld", &m) == 1 &&
      (p = try_plan(g, d, strategy, (int64_t)m))) {
    plan_free(p);
    return (int64_t)m;
  }
  int64_t lo = 0, hi = keep_peak + keep_peak / 20;
  p = try_plan(g, d, strategy, hi);
  if (!p) p = try_plan(g, d, strategy, hi = keep_peak + keep_peak * 3 / 10);
  if (!p) return -1;
  plan_free(p);
  while (hi - lo > keep_peak / 50) {
    int64_t mid = lo + (hi - lo) / 2;
    if ((p = try_plan(g, d, strategy, mid))) hi = mid, plan_free(p);
    else lo = mid;
  }
  return hi;
}

static void prove_graph(const char *graph_path, const char *device_path, int *planned) {
  Err e = {{0}};
  Graph *g = graph_load(graph_path, &e);
  Device *d = g ? device_load(device_path, &e) : NULL;
  T_CASE(graph_path) T_CHECKF(g && d, "%s", e.msg);
  if (!g || !d) {
    graph_free(g);
    device_free(d);
    return;
  }
  int64_t keep_peak = plan_keep_all_peak(g, d, &e);
  Result ref = {0};
  bool have_ref = false;
  for (const PlanStrategy *st = plan_strategies; st->name; st++) {
    bool keep = !strcmp(st->name, "keep-all");
    if (!strcmp(st->name, "exact") && g->nops > 80) continue; /* exact MILP: small graphs only */
    /* keep-all once; every other strategy at its smallest feasible budget,
     * halfway to keep-all, and just under keep-all. */
    int64_t lo = keep ? 2 * keep_peak : smallest_feasible(g, d, st->name, keep_peak);
    int64_t budgets[3] = {lo, lo + (keep_peak - lo) / 2, keep_peak - keep_peak / 20};
    for (int bi = 0; bi < (keep ? 1 : 3) && lo > 0; bi++) {
      if (bi > 0 && budgets[bi] <= budgets[bi - 1]) continue;
      Plan *p = try_plan(g, d, st->name, budgets[bi]);
      if (!p) continue; /* a strategy need not be monotone in the budget */
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
      if (s) run_schedule(s, 0, &r);
      T_CASE(label) {
        T_CHECKF(simrc == 0, "sim_run: %s", se.msg);
        T_CHECKF(s != NULL, "%s", why);
        T_CHECKF(!s || r.status == RT_OK, "run: %s: %s", rt_status_name(r.status), r.err);
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
  free(ref.blob);
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
  prove_graph("models/gpt2-tiny.json", "budgets/cpu.json", &planned);
  prove_graph("models/llama-tiny.json", "budgets/cpu.json", &planned);
  printf("# %d planned schedules proven against keep-all\n", planned);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  T_DONE();
}
