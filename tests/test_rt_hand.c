/*
 * test_rt_hand.c - the emitter, the wait derivation and the CPU runtime on
 * hand-built plans, independent of the planner: tiny gpt2 and llama graphs
 * (model_build) planned as keep-all, as offload-everything-stashed with
 * each prefetch landing on the bytes its tensor left (so prefetches must
 * wait for the compute stream), as recompute-every-single-output-op, and as
 * keep-all whose grads are zeroed right before their first user (a zero
 * step) instead of at the step's start.
 * Each schedule is emitted, compiled alone with -std=c99 -Wall -Wextra
 * -Werror, loaded and run for 3 steps in debug mode; the results must be
 * bitwise equal to keep-all, the live high-water mark must equal the peak
 * computed here from the plan, and dropping a wait must break the run.
 */
#include "ration.h"
#include "test.h"

#include "../runtime/ration.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NSTEPS = 3, LONG_STEPS = 300, HAND_KEEP, HAND_OFFLOAD, HAND_RECOMPUTE, HAND_ZERO };

static char tmpdir[256];

static Graph *tiny_graph(const char *family) {
  ModelConfig c;
  Err e;
  if (model_defaults(family, &c, &e)) return NULL;
  c.layers = 2, c.dim = 32, c.heads = 4, c.vocab = 256, c.seq = 16, c.batch = 2, c.dtype = DT_F32;
  c.kv_heads = strcmp(family, "llama") ? 0 : 2;
  c.ffn = strcmp(family, "llama") ? 0 : 96;
  Buf b = {0};
  if (model_build(&c, &b, &e)) return NULL;
  Graph *g = graph_parse(family, b.data, b.len, &e);
  buf_free(&b);
  return g;
}

static int add_buffer(Plan *p, int t, int ws, int64_t bytes, Space sp, int64_t off) {
  Buffer *nb = realloc(p->buffers, (size_t)(p->nbuffers + 1) * sizeof *nb);
  if (!nb) return -1;
  p->buffers = nb;
  p->buffers[p->nbuffers] = (Buffer){t, ws, bytes, sp, off, false}; /* homes: plan_mark_homes */
  return p->nbuffers++;
}

static Step *add_step(Plan *p, StepKind k) {
  Step *ns = realloc(p->steps, (size_t)(p->nsteps + 1) * sizeof *ns);
  if (!ns) return NULL;
  p->steps = ns;
  Step *s = &p->steps[p->nsteps++];
  memset(s, 0, sizeof *s);
  s->kind = k;
  s->workspace = s->from = s->to = -1;
  return s;
}

static void free_plan(Plan *p) {
  for (int i = 0; i < p->nsteps; i++) {
    free(p->steps[i].inputs);
    free(p->steps[i].outputs);
  }
  free(p->steps);
  free(p->buffers);
  free(p);
}

static void compute(Plan *p, const Graph *g, int o, bool recompute, const int *cur, int64_t *off) {
  const Op *op = &g->ops[o];
  Step *s = add_step(p, STEP_COMPUTE);
  s->op = o;
  s->recompute = recompute;
  s->inputs = calloc((size_t)op->ninputs + 1, sizeof(int));
  s->outputs = calloc((size_t)op->noutputs + 1, sizeof(int));
  for (int k = 0; k < op->ninputs; k++) s->inputs[k] = cur[op->inputs[k]];
  for (int k = 0; k < op->noutputs; k++) s->outputs[k] = cur[op->outputs[k]];
  if (op->workspace > 0) {
    s->workspace = add_buffer(p, -1, o, op->workspace, SPACE_DEVICE, *off);
    *off += util_align_up(op->workspace, 256);
  }
}

/* Every tensor gets its own bytes; an offloaded tensor's prefetch and a
 * recomputed tensor's second residency reuse the bytes of the first. */
static Plan *hand_plan(const Graph *g, int how) {
  Plan *p = calloc(1, sizeof *p);
  snprintf(p->graph_name, sizeof p->graph_name, "%s", g->name);
  snprintf(p->graph_sha256, sizeof p->graph_sha256, "%s", g->sha256);
  snprintf(p->device, sizeof p->device, "test");
  static const char *const strategies[] = {"keep-all", "hand-offload", "hand-recompute", "hand-zero"};
  snprintf(p->strategy, sizeof p->strategy, "%s", strategies[how - HAND_KEEP]);
  int *home = calloc((size_t)g->ntensors, sizeof *home), *cur = calloc((size_t)g->ntensors, sizeof *cur);
  int *state = calloc((size_t)g->ntensors, sizeof *state), *host = calloc((size_t)g->ntensors, sizeof *host);
  int64_t off = 0, hoff = 0;
  for (int t = 0; t < g->ntensors; t++) {
    cur[t] = home[t] = add_buffer(p, t, -1, g->tensors[t].bytes, SPACE_DEVICE, off);
    off += util_align_up(g->tensors[t].bytes, 256);
  }
  for (int o = 0; o < g->nops; o++) {
    const Op *op = &g->ops[o];
    for (int k = 0; k < op->ninputs; k++) {
      int t = op->inputs[k];
      if (state[t] != 1 || op->phase == PHASE_FORWARD) continue;
      state[t] = 2;
      cur[t] = add_buffer(p, t, -1, g->tensors[t].bytes, SPACE_DEVICE, p->buffers[home[t]].offset);
      if (how == HAND_OFFLOAD) {
        Step *s = add_step(p, STEP_PREFETCH);
        s->from = host[t];
        s->to = cur[t];
        s = add_step(p, STEP_PREFETCH_WAIT);
        s->to = cur[t];
      } else {
        compute(p, g, g->tensors[t].producer, true, cur, &off);
      }
    }
    /* Written by hand: the grads op o uses first, in operand order. */
    for (int k = 0; k < op->ninputs + op->noutputs && how == HAND_ZERO; k++) {
      int t = k < op->ninputs ? op->inputs[k] : op->outputs[k - op->ninputs];
      if (g->tensors[t].kind != KIND_GRAD || state[t] == 4) continue;
      add_step(p, STEP_ZERO)->to = home[t];
      state[t] = 4;
    }
    compute(p, g, o, false, cur, &off);
    for (int t = 0; t < g->ntensors && how != HAND_KEEP && how != HAND_ZERO; t++) {
      const Tensor *T = &g->tensors[t];
      int last_fwd = T->last_fwd_read > T->producer ? T->last_fwd_read : T->producer;
      if (!T->stashed || state[t] != 0 || last_fwd != o) continue;
      if (how == HAND_RECOMPUTE) {
        /* Only single-output producers whose inputs stay resident or kept. */
        const Op *pr = &g->ops[T->producer];
        bool ok = pr->noutputs == 1;
        for (int k = 0; k < pr->ninputs; k++)
          if (g->tensors[pr->inputs[k]].kind == KIND_ACTIVATION && state[pr->inputs[k]] != 0 &&
              state[pr->inputs[k]] != 3)
            ok = false;
        if (!ok) continue;
        state[t] = 1;
        for (int k = 0; k < pr->ninputs; k++) /* the recompute reads them: keep them */
          if (g->tensors[pr->inputs[k]].kind == KIND_ACTIVATION) state[pr->inputs[k]] = 3;
        continue;
      }
      host[t] = add_buffer(p, t, -1, T->bytes, SPACE_HOST, hoff);
      hoff += util_align_up(T->bytes, 256);
      Step *s = add_step(p, STEP_OFFLOAD);
      s->from = home[t];
      s->to = host[t];
      s = add_step(p, STEP_OFFLOAD_WAIT);
      s->from = home[t];
      state[t] = 1;
    }
  }
  p->arena_bytes = p->budget_bytes = off;
  p->host_bytes = hoff;
  p->alignment = 256;
  plan_mark_homes(p, g); /* each resident tensor's first buffer */
  free(home);
  free(cur);
  free(state);
  free(host);
  return p;
}

/* The plan's peak live bytes, straight from the semantics: a resident
 * tensor's buffer is occupied all step, a zeroed grad's from its zero step. */
static int64_t plan_peak(const Plan *p, const Graph *g) {
  int *first = malloc((size_t)p->nbuffers * sizeof *first), *last = malloc((size_t)p->nbuffers * sizeof *last);
  bool *zeroed = calloc((size_t)p->nbuffers + 1, sizeof *zeroed);
  for (int b = 0; b < p->nbuffers; b++) first[b] = last[b] = -1;
#define USE(b, s, w) do { if ((w) && first[b] < 0) first[b] = (s); if ((s) > last[b]) last[b] = (s); } while (0)
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (st->kind == STEP_COMPUTE) {
      for (int k = 0; k < g->ops[st->op].ninputs; k++) USE(st->inputs[k], s, false);
      for (int k = 0; k < g->ops[st->op].noutputs; k++) USE(st->outputs[k], s, true);
      if (st->workspace >= 0) USE(st->workspace, s, true);
    } else if (st->kind == STEP_OFFLOAD || st->kind == STEP_PREFETCH) {
      USE(st->from, s, false);
      USE(st->to, s, true);
    } else if (st->kind == STEP_ZERO) {
      USE(st->to, s, true);
      zeroed[st->to] = true;
    } else {
      USE(st->kind == STEP_OFFLOAD_WAIT ? st->from : st->to, s, false);
    }
  }
#undef USE
  int64_t peak = 0;
  for (int s = 0; s < p->nsteps; s++) {
    int64_t live = 0;
    for (int b = 0; b < p->nbuffers; b++) {
      const Buffer *bf = &p->buffers[b];
      if (bf->space != SPACE_DEVICE) continue;
      bool whole = bf->tensor >= 0 && graph_is_resident(&g->tensors[bf->tensor]) && !zeroed[b];
      bool to_end = bf->tensor >= 0 && (g->tensors[bf->tensor].is_output || zeroed[b]) && first[b] >= 0;
      if (whole || (first[b] >= 0 && first[b] <= s && (s <= last[b] || to_end))) live += bf->bytes;
    }
    if (live > peak) peak = live;
  }
  free(first);
  free(last);
  free(zeroed);
  return peak;
}

typedef struct Result {
  unsigned char *blob;
  size_t n;
  int64_t hwm;
  int status;
  char err[600];
} Result;

static void run(const rt_Schedule *s, unsigned delay_us, unsigned flags, int nsteps, Result *r) {
  memset(r, 0, sizeof *r);
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = flags, .seed = 11, .delay_us = delay_us};
  rt_Session *ss;
  if ((r->status = rt_open(s, &o, &ss, r->err, sizeof r->err)) != RT_OK) return;
  r->status = rt_init_params(ss, 5, 0.02);
  size_t total = (size_t)nsteps * 4;
  for (int t = 0; t < s->ntensors; t++)
    if (s->tensors[t].kind >= 1 && s->tensors[t].kind <= 3) total += (size_t)s->tensors[t].bytes;
  r->blob = calloc(total, 1);
  r->n = total;
  uint64_t x = 99;
  for (int step = 0; step < nsteps && r->status == RT_OK; step++) {
    for (int t = 0; t < s->ntensors && r->status == RT_OK; t++) {
      if (s->tensors[t].kind != 0) continue;
      int32_t v[4096];
      for (int64_t i = 0; i < s->tensors[t].bytes / 4 && i < 4096; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[i] = (int32_t)(x % 256);
      }
      r->status = rt_write(ss, s->tensors[t].name, s->tensors[t].dtype, s->tensors[t].rank, s->tensors[t].shape, v,
                           (size_t)s->tensors[t].bytes);
    }
    if (r->status == RT_OK) r->status = rt_step(ss);
    if (r->status == RT_OK) r->status = rt_read(ss, "loss", DT_F32, 1, (int64_t[]){1}, r->blob + step * 4, 4);
  }
  size_t at = (size_t)nsteps * 4;
  for (int t = 0; t < s->ntensors && r->status == RT_OK; t++)
    if (s->tensors[t].kind >= 1 && s->tensors[t].kind <= 3) {
      r->status = rt_read(ss, s->tensors[t].name, s->tensors[t].dtype, s->tensors[t].rank, s->tensors[t].shape,
                          r->blob + at, (size_t)s->tensors[t].bytes);
      at += (size_t)s->tensors[t].bytes;
    }
  rt_Stats st;
  rt_stats(ss, &st);
  r->hwm = st.live_high_water;
  if (r->status != RT_OK) snprintf(r->err, sizeof r->err, "%s", rt_error(ss));
  rt_close(ss);
}

static const rt_Schedule *emit_and_load(const Plan *p, const Graph *g, const char *name, void **h, char *why) {
  Buf c = {0}, hd = {0}, c2 = {0};
  Err e = {{0}};
  char path[512], cmd[1600], ident[128];
  *h = NULL;
  if (emit_c_source(p, g, name, &c, &e) || emit_c_header(p, g, name, &hd, &e) || emit_c_source(p, g, name, &c2, &e)) {
    snprintf(why, 700, "emit: %.600s", e.msg);
    return NULL;
  }
  bool same = c.len == c2.len && !memcmp(c.data, c2.data, c.len);
  snprintf(path, sizeof path, "%s/%s.sched.c", tmpdir, name);
  util_write_file_atomic(path, c.data, c.len, &e);
  snprintf(path, sizeof path, "%s/%s.sched.h", tmpdir, name);
  util_write_file_atomic(path, hd.data, hd.len, &e);
  buf_free(&c);
  buf_free(&c2);
  buf_free(&hd);
  if (!same) {
    snprintf(why, 700, "emitting twice gave different bytes");
    return NULL;
  }
  snprintf(cmd, sizeof cmd, "cc -std=c99 -Wall -Wextra -Werror -O0 -fPIC -shared -o %s/%s.so %s/%s.sched.c", tmpdir,
           name, tmpdir, name);
  if (system(cmd) != 0) {
    snprintf(why, 700, "%s.sched.c does not compile alone", name);
    return NULL;
  }
  snprintf(path, sizeof path, "%s/%s.so", tmpdir, name);
  if (!(*h = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    snprintf(why, 700, "dlopen: %s", dlerror());
    return NULL;
  }
  emit_c_ident(name, ident, sizeof ident);
  snprintf(cmd, sizeof cmd, "ration_schedule_%s", ident);
  const rt_Schedule *(*entry)(void) = (const rt_Schedule *(*)(void))dlsym(*h, cmd);
  return entry ? entry() : NULL;
}

/* Runs S with the waits of a step of KIND dropped and copies slowed:
 * true when the run goes wrong (an error or different bytes). */
static bool breaks_without_wait(const rt_Schedule *s, int kind, const Result *ref) {
  int victim = -1;
  for (int i = 0; i < s->nsteps && victim < 0; i++)
    if (s->steps[i].kind == kind && s->steps[i].nwait > 0 && i + 1 < s->nsteps &&
        s->steps[i + 1].kind == RT_STEP_COMPUTE)
      victim = i; /* no later wait on the same stream covers for it */
  if (victim < 0) return false;
  rt_SchedStep *steps = malloc((size_t)s->nsteps * sizeof *steps);
  memcpy(steps, s->steps, (size_t)s->nsteps * sizeof *steps);
  steps[victim].nwait = 0;
  rt_Schedule broken = *s;
  broken.steps = steps;
  Result r;
  run(&broken, 3000, RT_OPEN_DEBUG, NSTEPS, &r);
  bool wrong = r.status != RT_OK || r.n != ref->n || memcmp(r.blob, ref->blob, r.n) != 0;
  free(r.blob);
  free(steps);
  return wrong;
}

static void prove(const char *family) {
  Graph *g = tiny_graph(family);
  T_CASE(family) T_CHECK(g != NULL);
  if (!g) return;
  Result ref = {0}, ref_long = {0};
  static const char *const names[] = {"keep", "offload", "recompute", "zero"};
  for (int how = HAND_KEEP; how <= HAND_ZERO; how++) {
    Plan *p = hand_plan(g, how);
    char name[64], label[128], why[700] = "";
    snprintf(name, sizeof name, "%s_%s", family, names[how - HAND_KEEP]);
    snprintf(label, sizeof label, "%s: hand %s plan, 3 debug steps", family, names[how - HAND_KEEP]);
    void *h;
    const rt_Schedule *s = emit_and_load(p, g, name, &h, why);
    Result r = {0};
    if (s) run(s, 0, RT_OPEN_DEBUG, NSTEPS, &r);
    int copies = 0;
    for (int i = 0; i < p->nsteps; i++) copies += p->steps[i].kind == STEP_OFFLOAD;
    T_CASE(label) {
      T_CHECKF(s != NULL, "%s", why);
      T_CHECKF(!s || r.status == RT_OK, "%s: %s", rt_status_name(r.status), r.err);
      if (s && r.status == RT_OK) {
        T_CHECKF(r.hwm == plan_peak(p, g), "high-water %lld, plan peak %lld", (long long)r.hwm,
                 (long long)plan_peak(p, g));
        if (how == HAND_KEEP) ref = r, r.blob = NULL, run(s, 0, 0, LONG_STEPS, &ref_long);
        else T_CHECKF(ref.blob && ref.n == r.n && !memcmp(ref.blob, r.blob, r.n), "results differ from keep-all");
        if (how == HAND_OFFLOAD) T_CHECK(copies > 3 && s->nevents > 0 && p->host_bytes > 0);
        if (how != HAND_KEEP) T_CHECKF(r.hwm < ref.hwm, "hwm %lld not below keep-all's %lld", (long long)r.hwm, (long long)ref.hwm);
      }
    }
    if (how == HAND_OFFLOAD && s && r.status == RT_OK) {
      char l2[160];
      Result rw;
      run(s, 0, RT_OPEN_DEBUG | RT_OPEN_WARMUP, NSTEPS, &rw);
      snprintf(l2, sizeof l2, "%s: a warm-up run at open changes nothing", family);
      T_CASE(l2) T_CHECKF(rw.status == RT_OK && rw.n == r.n && !memcmp(rw.blob, r.blob, r.n) && rw.hwm == r.hwm,
                          "%s", rw.err);
      free(rw.blob);
      /* No delays: the copy threads sleep, poll and wake each other at the
       * pace of the copies themselves, a handoff lost or early shows. */
      run(s, 0, 0, LONG_STEPS, &rw);
      snprintf(l2, sizeof l2, "%s: %d steps at full speed, bitwise equal to keep-all's", family, LONG_STEPS);
      T_CASE(l2) T_CHECKF(rw.status == RT_OK && ref_long.status == RT_OK && ref_long.blob && rw.n == ref_long.n &&
                              !memcmp(rw.blob, ref_long.blob, rw.n),
                          "%s%s", rw.err, ref_long.err);
      free(rw.blob);
      snprintf(l2, sizeof l2, "%s: dropping an offload_wait's wait is a real race, caught", family);
      T_CASE(l2) T_CHECK(breaks_without_wait(s, RT_STEP_OFFLOAD_WAIT, &ref));
      snprintf(l2, sizeof l2, "%s: dropping a prefetch_wait's wait is a real race, caught", family);
      T_CASE(l2) T_CHECK(breaks_without_wait(s, RT_STEP_PREFETCH_WAIT, &ref));
      /* Each prefetch lands on the bytes its tensor's first residency left
       * at its offload_wait (a compute-stream step): by then the H2D stream
       * must have waited, directly, for a compute step at or after it. */
      int unguarded = 0, h2d_seen = -1;
      for (int i = 0; i < s->nsteps; i++) {
        const rt_SchedStep *st = &s->steps[i];
        if (st->stream != RT_STREAM_H2D) continue;
        for (int k = 0; k < st->nwait; k++) {
          int w = s->waits[st->wait0 + k];
          if (s->steps[w].stream == RT_STREAM_COMPUTE && w > h2d_seen) h2d_seen = w;
        }
        int t = s->buffers[st->to].tensor, left = -1;
        for (int j = 0; j < i; j++)
          if (s->steps[j].kind == RT_STEP_OFFLOAD_WAIT && s->buffers[s->steps[j].from].tensor == t) left = j;
        unguarded += left < 0 || h2d_seen < left;
      }
      snprintf(l2, sizeof l2, "%s: prefetches wait for the compute stream", family);
      T_CASE(l2) T_CHECKF(unguarded == 0, "%d prefetches without a compute wait", unguarded);
    }
    free(r.blob);
    if (h) dlclose(h);
    free_plan(p);
  }
  free(ref.blob);
  free(ref_long.blob);
  graph_free(g);
}

/* The ABI block of every emitted header is runtime/ration.h's, verbatim;
 * emit_c_compare names what changed between two emissions. */
static void check_text(void) {
  Graph *g = tiny_graph("gpt2");
  Plan *p = g ? hand_plan(g, HAND_OFFLOAD) : NULL;
  Buf h = {0}, a = {0}, b = {0}, why = {0};
  Err e = {{0}};
  size_t n;
  char *rh = util_read_file("runtime/ration.h", &n, &e);
  T_CASE("emitted header carries runtime/ration.h's schedule ABI block verbatim") {
    T_CHECK(p && rh && emit_c_header(p, g, "x", &h, &e) == 0);
    char *lo = rh ? strstr(rh, "/* RATION-SCHED-ABI-BEGIN */") : NULL;
    char *hi = rh ? strstr(rh, "/* RATION-SCHED-ABI-END */") : NULL;
    T_CHECK(lo && hi && hi > lo);
    if (lo && hi && h.data) {
      hi[strlen("/* RATION-SCHED-ABI-END */")] = '\0';
      T_CHECK(strstr(h.data, lo) != NULL);
    }
  }
  T_CASE("emit_c_compare: same text, changed budget, changed step") {
    T_CHECK(p && emit_c_source(p, g, "x", &a, &e) == 0);
    T_CHECK(emit_c_compare(a.data, a.data, &why) == 0 && why.len == 0);
    int64_t budget = p->budget_bytes;
    p->budget_bytes = budget + 4096;
    T_CHECK(emit_c_source(p, g, "x", &b, &e) == 0);
    T_CHECK(emit_c_compare(a.data, b.data, &why) == 1);
    T_CHECKF(why.data && strstr(why.data, "budget bytes") && !strstr(why.data, "step"), "%s", why.data);
    p->budget_bytes = budget;
    /* The step that reads the offloaded copy now reads the first residency. */
    int victim = -1;
    for (int i = 0; i < p->nsteps && victim < 0; i++)
      if (p->steps[i].kind == STEP_PREFETCH) victim = i;
    T_CHECK(victim > 0);
    if (victim > 0) {
      int old = p->steps[victim].from;
      p->steps[victim].from = old + 1;
      buf_free(&b);
      buf_free(&why);
      T_CHECK(emit_c_source(p, g, "x", &b, &e) == 0 && emit_c_compare(a.data, b.data, &why) == 1);
      char want[64];
      snprintf(want, sizeof want, "step %d: was 'prefetch %d ->", victim, old);
      T_CHECKF(why.data && strstr(why.data, want), "got '%s', want '%s'", why.data, want);
      p->steps[victim].from = old;
    }
  }
  free(rh);
  buf_free(&h);
  buf_free(&a);
  buf_free(&b);
  buf_free(&why);
  if (p) free_plan(p);
  graph_free(g);
}

int main(void) {
  check_text();
  snprintf(tmpdir, sizeof tmpdir, "/tmp/ration-test-rt-hand-XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  prove("gpt2");
  prove("llama");
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  T_DONE();
}
