/*
 * targets.h - the fuzz targets' bodies, shared by the libFuzzer drivers
 * (tests/fuzz/fuzz_*.c, built by `make fuzz`) and the normal suite's replay
 * of every seed and regression input (tests/test_fuzz_replay.c). Each
 * target takes one input and returns NULL, or the property the input broke:
 * a loader either loads something whose derived facts hold or fails with
 * one line naming the file; a plan that the pipeline returns passes the
 * simulator's checks, fits its budget and survives a JSON round trip;
 * rt_open on an edited schedule opens it or fails with a schedule error.
 * Crashes and sanitizer reports are the other findings.
 */
#ifndef RATION_FUZZ_TARGETS_H
#define RATION_FUZZ_TARGETS_H

#include "ration.h"
#include "sched_text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The files a target is fed are named this in error messages. */
#define FUZZ_FILE "fuzz.json"
/* The whole-pipeline target plans graphs up to this size; larger ones are
 * the loader target's business (planning cost grows with the graph). */
#define FUZZ_PLAN_MAX_BYTES 65536

static const char fuzz_device_text[] =
    "{\"format\": \"ration-device/1\", \"name\": \"fuzz\", \"memory\": \"8GiB\", \"reserve\": 0,"
    " \"peak_tflops\": {\"bf16\": 0.02, \"f32\": 0.02}, \"hbm_gbps\": 10, \"h2d_gbps\": 5,"
    " \"d2h_gbps\": 5, \"launch_us\": 1}";

static char fuzz_why[512];

__attribute__((format(printf, 1, 2))) static const char *fuzz_broke(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fuzz_why, sizeof fuzz_why, fmt, ap);
  va_end(ap);
  return fuzz_why;
}

/* A failed load: exactly one non-empty line that starts with the file name. */
static const char *fuzz_check_error(const Err *e, const char *file) {
  size_t n = strlen(file);
  if (!e->msg[0]) return "failed without a message";
  if (strchr(e->msg, '\n')) return fuzz_broke("message has a newline: %s", e->msg);
  if (strncmp(e->msg, file, n) != 0 || e->msg[n] != ':')
    return fuzz_broke("message does not start with \"%s: \": %s", file, e->msg);
  return NULL;
}

/* Everything graph_parse promises the later passes. */
static const char *fuzz_check_graph(const Graph *g) {
  int nstashed = 0;
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *x = &g->tensors[t];
    if (x->rank < 0 || x->rank > GRAPH_MAX_RANK) return fuzz_broke("tensor %d: rank %d", t, x->rank);
    int64_t bytes = graph_dtype_size(x->dtype);
    for (int k = 0; k < x->rank; k++)
      if (x->shape[k] < 1 || !util_mul_i64(bytes, x->shape[k], &bytes))
        return fuzz_broke("tensor %d: bad dim %lld accepted", t, (long long)x->shape[k]);
    if (bytes != x->bytes) return fuzz_broke("tensor %d: bytes %lld, shape says %lld", t, (long long)x->bytes, (long long)bytes);
    if (graph_find_tensor(g, x->name) != t) return fuzz_broke("tensor %d: name lookup", t);
    if (x->kind == KIND_ACTIVATION) {
      if (x->producer < 0 || x->producer >= g->nops) return fuzz_broke("activation %d without producer", t);
      if (x->first_read >= 0 && x->first_read <= x->producer) return fuzz_broke("activation %d read before produced", t);
    }
    if (x->stashed) nstashed++;
  }
  if (nstashed != g->nstashed) return fuzz_broke("%d stashed tensors, list has %d", nstashed, g->nstashed);
  for (int i = 0; i < g->nstashed; i++)
    if (g->stashed[i] < 0 || g->stashed[i] >= g->ntensors || !g->tensors[g->stashed[i]].stashed)
      return fuzz_broke("stashed[%d] is not a stashed tensor", i);
  for (int i = 0; i < g->nops; i++) {
    const Op *o = &g->ops[i];
    for (int k = 0; k < o->ninputs; k++)
      if (o->inputs[k] < 0 || o->inputs[k] >= g->ntensors) return fuzz_broke("op %d input %d out of range", i, k);
    for (int k = 0; k < o->noutputs; k++)
      if (o->outputs[k] < 0 || o->outputs[k] >= g->ntensors) return fuzz_broke("op %d output %d out of range", i, k);
    if (graph_find_op(g, o->name) != i) return fuzz_broke("op %d: name lookup", i);
  }
  return NULL;
}

static inline const char *fuzz_graph_one(const uint8_t *data, size_t size) {
  Err e = {{0}};
  Graph *g = graph_parse(FUZZ_FILE, (const char *)data, size, &e);
  const char *why = g ? fuzz_check_graph(g) : fuzz_check_error(&e, FUZZ_FILE);
  graph_free(g);
  return why;
}

static inline const char *fuzz_device_one(const uint8_t *data, size_t size) {
  Err e = {{0}};
  Device *d = device_parse(FUZZ_FILE, (const char *)data, size, &e);
  const char *why = NULL;
  if (!d)
    why = fuzz_check_error(&e, FUZZ_FILE);
  else if (!(d->memory > 0 && d->reserve >= 0 && d->reserve < d->memory && d->host_memory >= 0))
    why = fuzz_broke("memory %lld reserve %lld accepted", (long long)d->memory, (long long)d->reserve);
  else if (!(d->hbm_gbps > 0 && d->h2d_gbps > 0 && d->d2h_gbps > 0 && d->peak_tflops[DT_F32] > 0 &&
             d->launch_us >= 0))
    why = "a rate <= 0 accepted";
  device_free(d);
  return why;
}

/* The emitters' output for a plan: JSON and the C schedule; the JSON must
 * read back to a plan that emits the same bytes. */
static const char *fuzz_check_emit(const Plan *p, const Graph *g) {
  Buf j1 = {0}, c = {0}, h = {0};
  Err e = {{0}};
  const char *why = NULL;
  if (emit_plan_json(p, g, &j1)) why = "emit_plan_json failed";
  if (!why && (emit_c_source(p, g, "fuzz", &c, &e) || emit_c_header(p, g, "fuzz", &h, &e)))
    why = fuzz_broke("emit_c failed: %s", e.msg);
  if (!why) {
    Plan *q = plan_parse("fuzz.plan.json", j1.data, j1.len, g, &e);
    Buf j2 = {0};
    if (!q) why = fuzz_broke("emitted plan does not read back: %s", e.msg);
    else if (emit_plan_json(q, g, &j2) || j2.len != j1.len || memcmp(j1.data, j2.data, j1.len) != 0)
      why = "plan JSON does not round-trip byte for byte";
    buf_free(&j2);
    plan_free(q);
  }
  buf_free(&j1);
  buf_free(&c);
  buf_free(&h);
  return why;
}

/* Strategies cheap enough to run per fuzz input: not the solvers. */
static bool fuzz_cheap_strategy(const char *name) { return strcmp(name, "ilp") != 0 && strcmp(name, "exact") != 0; }

/* `ration plan` on a fuzzed graph: every cheap strategy at a few budgets. */
static inline const char *fuzz_pipeline_one(const uint8_t *data, size_t size) {
  if (size > FUZZ_PLAN_MAX_BYTES) return NULL;
  Err e = {{0}};
  Device *d = device_parse("fuzz-device.json", fuzz_device_text, sizeof fuzz_device_text - 1, &e);
  if (!d) return fuzz_broke("fixed device: %s", e.msg);
  Graph *g = graph_parse(FUZZ_FILE, (const char *)data, size, &e);
  const char *why = NULL;
  if (!g) {
    why = fuzz_check_error(&e, FUZZ_FILE);
    device_free(d);
    return why;
  }
  int64_t peak = plan_keep_all_peak(g, d, &e);
  if (peak < 0) why = fuzz_check_error(&e, FUZZ_FILE);
  /* The largest budget a plan file can carry (JSON integers stop at 2^53). */
  int64_t budgets[] = {JSON_MAX_BYTES, peak, peak - peak / 5, peak / 2};
  for (const PlanStrategy *s = plan_strategies; !why && peak >= 0 && s->name; s++) {
    if (!fuzz_cheap_strategy(s->name)) continue;
    for (size_t k = 0; !why && k < sizeof budgets / sizeof budgets[0]; k++) {
      PlanOptions o = {.strategy = s->name, .solver = "glpk", .budget_bytes = budgets[k], .quiet = true};
      Plan *p = plan_make(g, d, &o, &e);
      if (!p) {
        if (!e.msg[0] || strchr(e.msg, '\n')) why = fuzz_broke("%s: bad error \"%s\"", s->name, e.msg);
        /* Alignment pads the arena past the peak a little: only a graph far
         * inside the limit must always plan. */
        if (!why && budgets[k] == JSON_MAX_BYTES && peak <= JSON_MAX_BYTES / 2 && !strcmp(s->name, "keep-all"))
          why = fuzz_broke("keep-all failed without a budget: %s", e.msg);
        continue;
      }
      SimResult r;
      if (sim_check(p, g, &e)) why = fuzz_broke("%s: plan fails its check: %s", s->name, e.msg);
      else if (p->arena_bytes > budgets[k] || p->predicted.peak_live_bytes > p->arena_bytes)
        why = fuzz_broke("%s: arena %lld, peak %lld, budget %lld", s->name, (long long)p->arena_bytes,
                         (long long)p->predicted.peak_live_bytes, (long long)budgets[k]);
      else if (sim_run(p, g, d, false, &r, &e)) why = fuzz_broke("%s: sim_run: %s", s->name, e.msg);
      else {
        if (r.peak_live_bytes != p->predicted.peak_live_bytes) why = "predicted peak is not the simulator's";
        sim_result_free(&r);
      }
      if (!why) why = fuzz_check_emit(p, g);
      plan_free(p);
    }
  }
  graph_free(g);
  device_free(d);
  return why;
}

/* The plan loader against one fixed small graph (tests/data/mlp.json, so
 * that the seed plans' sha256 matches). */
static inline const char *fuzz_plan_one(const uint8_t *data, size_t size) {
  static Graph *g;
  static Device *d;
  Err e = {{0}};
  if (!g && !(g = graph_load("tests/data/mlp.json", &e))) return fuzz_broke("fixed graph: %s", e.msg);
  if (!d && !(d = device_parse("fuzz-device.json", fuzz_device_text, sizeof fuzz_device_text - 1, &e)))
    return fuzz_broke("fixed device: %s", e.msg);
  Plan *p = plan_parse(FUZZ_FILE, (const char *)data, size, g, &e);
  if (!p) return fuzz_check_error(&e, FUZZ_FILE);
  const char *why = NULL;
  Buf j1 = {0}, j2 = {0};
  Plan *q = NULL;
  if (emit_plan_json(p, g, &j1)) why = "emit_plan_json failed on a plan that loaded";
  else if (!(q = plan_parse("again.json", j1.data, j1.len, g, &e))) why = fuzz_broke("re-emitted plan does not load: %s", e.msg);
  else if (emit_plan_json(q, g, &j2) || j1.len != j2.len || memcmp(j1.data, j2.data, j1.len) != 0)
    why = "plan JSON does not round-trip byte for byte";
  /* A loaded plan may still break the plan rules: checking it must say so
   * cleanly, and one that passes must simulate. */
  if (!why && sim_check(p, g, &e) == 0) {
    SimResult r;
    if (sim_run(p, g, d, true, &r, &e)) why = fuzz_broke("checked plan fails to simulate: %s", e.msg);
    else if (r.peak_live_bytes > p->arena_bytes) why = "checked plan's live bytes exceed its arena";
    sim_result_free(&r);
  }
  buf_free(&j1);
  buf_free(&j2);
  plan_free(q);
  plan_free(p);
  return why;
}

/* Arenas are allocated and zeroed for real: a schedule asking for more is
 * not this target's business (rt_open refuses more than 2^60 bytes). */
#define FUZZ_ARENA_MAX (INT64_C(64) << 20)

static bool fuzz_arena_too_big(int64_t bytes) {
  return bytes > FUZZ_ARENA_MAX && bytes <= (INT64_C(1) << 60);
}

/* rt_open on the tables of an emitted .sched.c as edited (sched_text.h):
 * it opens, or fails with a schedule or kernel status, a one-line message
 * and no session; it never reads outside a table (the sanitizers). */
static inline const char *fuzz_schedule_one(const uint8_t *data, size_t size) {
  SchedText t;
  if (!sched_text_read((const char *)data, size, &t)) return NULL;
  const char *why = NULL;
  if (!fuzz_arena_too_big(t.s.arena_bytes) && !fuzz_arena_too_big(t.s.host_bytes)) {
    rt_Options o = {.backend = RT_BACKEND_CPU, .flags = RT_OPEN_REFERENCE};
    rt_Session *s = NULL;
    char err[512] = "";
    int rc = rt_open(&t.s, &o, &s, err, sizeof err);
    if (rc == RT_OK) rt_close(s);
    else if (s) why = "a failed rt_open returned a session";
    else if (rc != RT_ESCHEDULE && rc != RT_EKERNEL && rc != RT_ENOMEM) why = fuzz_broke("status %d: %s", rc, err);
    else if (!err[0] || strchr(err, '\n')) why = fuzz_broke("bad message \"%s\"", err);
  }
  sched_text_free(&t);
  return why;
}

#endif
