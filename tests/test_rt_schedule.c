/*
 * test_rt_schedule.c - rt_open against bad schedules, and the checks of
 * what a caller hands libration:
 *   - every field of every table row of real emitted schedules (the
 *     schedule fuzz target's seeds, read back from their text into tables
 *     of exactly their length), and every count, length, pointer and
 *     string of the struct, set in turn to values outside what the field
 *     may hold: rt_open fails with RT_ESCHEDULE (RT_EKERNEL for an unknown
 *     op type), a one-line message and no session, and (SAN=1) reads
 *     nothing outside a table;
 *   - rt_Options.graph: the schedule's own graph opens; another graph, a
 *     schedule of another ration version and an unreadable graph do not;
 *     libration's SHA-256 is the compiler's;
 *   - rt_write and rt_read refuse a tensor whose dtype or shape differs
 *     from the schedule's even when its byte count matches.
 */
#include "../runtime/rt_backend.h"
#include "fuzz/targets.h"
#include "test.h"

#include <stdio.h>
#include <unistd.h>

static const char *const seeds[] = {"tests/fuzz/seeds/gpt2-micro-offload-all.sched.c",
                                    "tests/fuzz/seeds/gpt2-micro-checkpoint-layers.sched.c",
                                    "tests/fuzz/seeds/llama-micro-offload-all.sched.c",
                                    "tests/fuzz/seeds/mlp-sqrt-n.sched.c",
                                    "tests/fuzz/seeds/gpt2-micro-host-optimizer.sched.c"};

static bool load(const char *path, SchedText *t) {
  Err e;
  size_t len;
  char *text = util_read_file(path, &len, &e);
  bool ok = text && sched_text_read(text, len, t);
  free(text);
  return ok;
}

static int open_status(const rt_Schedule *s, const char *graph, char *err, size_t n, bool *leaked) {
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = RT_OPEN_REFERENCE, .graph = graph};
  rt_Session *x = NULL;
  err[0] = '\0';
  int rc = rt_open(s, &o, &x, err, n);
  *leaked = x != NULL;
  rt_close(x);
  return rc;
}

/* Tallies of one schedule's corruptions. */
typedef struct Tally {
  const rt_Schedule *s;
  long tried, wrong;
  char first[700];
} Tally;

/* rt_open on the schedule as it is now must fail cleanly with WANT. */
static void expect_refused(Tally *t, const char *what, int want) {
  char err[512];
  bool leaked;
  int rc = open_status(t->s, NULL, err, sizeof err, &leaked);
  t->tried++;
  if (rc == want && !leaked && err[0] && !strchr(err, '\n')) return;
  if (!t->wrong++)
    snprintf(t->first, sizeof t->first, "%s: status %d (%s), session %s", what, rc, err, leaked ? "left" : "none");
}

/* Field F (WIDTH 4 or 8 bytes) set to each of the N values in turn. */
static void corrupt(Tally *t, const char *what, void *f, int width, const int64_t *bad, int n) {
  unsigned char keep[8];
  memcpy(keep, f, (size_t)width);
  for (int k = 0; k < n; k++) {
    if (width == 4) {
      int32_t v = (int32_t)bad[k];
      memcpy(f, &v, 4);
    } else {
      memcpy(f, &bad[k], 8);
    }
    char name[200];
    snprintf(name, sizeof name, "%s = %lld", what, (long long)bad[k]);
    expect_refused(t, name, RT_ESCHEDULE);
  }
  memcpy(f, keep, (size_t)width);
}

#define BAD(t, what, field, ...)                                                          \
  do {                                                                                    \
    const int64_t bad_[] = {__VA_ARGS__};                                                 \
    corrupt(t, what, &(field), (int)sizeof(field), bad_, (int)(sizeof bad_ / sizeof *bad_)); \
  } while (0)

/* A pointer field set to NULL. */
static void corrupt_ptr(Tally *t, const char *what, const void **f, int want) {
  const void *keep = *f;
  *f = NULL;
  expect_refused(t, what, want);
  *f = keep;
}

static void corrupt_tensors(Tally *t, SchedText *x) {
  rt_Schedule *s = &x->s;
  char w[64];
  for (int i = 0; i < s->ntensors; i++) {
    rt_SchedTensor *r = &x->tensors[i];
    snprintf(w, sizeof w, "tensors[%d]", i);
    corrupt_ptr(t, w, (const void **)&r->name, RT_ESCHEDULE);
    BAD(t, w, r->dtype, -1, 6, INT32_MAX);
    BAD(t, w, r->kind, -1, 5);
    BAD(t, w, r->rank, -1, 9, INT32_MIN);
    if (r->rank < RT_SCHED_MAX_RANK) BAD(t, w, r->rank, r->rank + 1);
    BAD(t, w, r->is_output, -1, 2);
    for (int d = 0; d < RT_SCHED_MAX_RANK; d++)
      if (d < r->rank) BAD(t, w, r->shape[d], 0, -1, INT64_MAX, INT64_MIN, 2 * r->shape[d]);
      else BAD(t, w, r->shape[d], 1);
    BAD(t, w, r->bytes, -1, r->bytes + 1, INT64_MAX);
  }
}

static void corrupt_buffers(Tally *t, SchedText *x) {
  rt_Schedule *s = &x->s;
  char w[64];
  for (int i = 0; i < s->nbuffers; i++) {
    rt_SchedBuffer *r = &x->buffers[i];
    int64_t cap = r->space == RT_SPACE_HOST ? s->host_bytes : s->arena_bytes;
    snprintf(w, sizeof w, "buffers[%d]", i);
    BAD(t, w, r->tensor, -2, s->ntensors, INT32_MAX, INT32_MIN);
    BAD(t, w, r->workspace_of, -2, s->nops, INT32_MAX);
    if (r->tensor >= 0) {
      BAD(t, w, r->tensor, -1);
      BAD(t, w, r->workspace_of, 0);
    } else {
      BAD(t, w, r->workspace_of, -1);
    }
    BAD(t, w, r->space, -1, 2);
    BAD(t, w, r->home, -1, 2, INT32_MAX);
    /* A second home, none, or one on an activation or on the host for an input. */
    BAD(t, w, r->home, !r->home);
    if (r->tensor >= 0 && s->tensors[r->tensor].kind == 0 && r->home) BAD(t, w, r->space, RT_SPACE_HOST);
    if (r->tensor < 0) BAD(t, w, r->home, 1);
    BAD(t, w, r->bytes, -1, INT64_MAX, cap + 1);
    BAD(t, w, r->offset, -1, INT64_MAX, cap - r->bytes + 1);
  }
}

static void corrupt_ops(Tally *t, SchedText *x) {
  rt_Schedule *s = &x->s;
  char w[64];
  for (int i = 0; i < s->nops; i++) {
    rt_SchedOp *r = &x->ops[i];
    snprintf(w, sizeof w, "ops[%d]", i);
    corrupt_ptr(t, w, (const void **)&r->name, RT_ESCHEDULE);
    corrupt_ptr(t, w, (const void **)&r->type, RT_ESCHEDULE);
    const char *type = r->type;
    r->type = "no-such-kernel";
    expect_refused(t, "an unknown op type", RT_EKERNEL);
    r->type = type;
    BAD(t, w, r->phase, -1, 3);
    BAD(t, w, r->nin, -1, INT32_MAX, INT32_MIN, s->nop_io + 1);
    BAD(t, w, r->nout, -1, INT32_MAX, INT32_MIN, s->nop_io + 1);
    BAD(t, w, r->io0, -1, s->nop_io, INT32_MAX, INT32_MIN);
    BAD(t, w, r->nattr, -1, INT32_MAX, s->nattrs + 1);
    BAD(t, w, r->attr0, -1, INT32_MAX, s->nattrs + 1);
    BAD(t, w, r->workspace, -1, INT64_MIN);
    for (int k = 0; k < r->nattr; k++) {
      snprintf(w, sizeof w, "attrs[%d].key", r->attr0 + k);
      corrupt_ptr(t, w, (const void **)&x->attrs[r->attr0 + k].key, RT_ESCHEDULE);
    }
  }
  for (int i = 0; i < s->nop_io; i++) {
    snprintf(w, sizeof w, "op_io[%d]", i);
    BAD(t, w, x->op_io[i], -1, s->ntensors, INT32_MAX);
  }
}

static void corrupt_steps(Tally *t, SchedText *x) {
  rt_Schedule *s = &x->s;
  char w[64];
  for (int i = 0; i < s->nsteps; i++) {
    rt_SchedStep *r = &x->steps[i];
    bool compute = r->kind == RT_STEP_COMPUTE;
    snprintf(w, sizeof w, "steps[%d]", i);
    BAD(t, w, r->kind, -1, RT_STEP_HOST_WAIT + 1, INT32_MAX);
    BAD(t, w, r->stream, -1, 4, r->stream == RT_STREAM_HOST ? RT_STREAM_COMPUTE : RT_STREAM_HOST);
    BAD(t, w, r->op, -2, s->nops, INT32_MIN);
    BAD(t, w, r->recompute, -1, 2);
    BAD(t, w, r->io0, -2, s->nstep_io, INT32_MAX);
    BAD(t, w, r->workspace, -2, s->nbuffers, INT32_MAX);
    BAD(t, w, r->from, -2, s->nbuffers, INT32_MAX);
    BAD(t, w, r->to, -2, s->nbuffers, INT32_MIN);
    if (compute) {
      BAD(t, w, r->stream, RT_STREAM_D2H);
      BAD(t, w, r->from, 0);
      BAD(t, w, r->to, 0);
    } else {
      BAD(t, w, r->op, 0);
      BAD(t, w, r->recompute, 1);
      BAD(t, w, r->io0, 0);
      BAD(t, w, r->workspace, 0);
    }
    BAD(t, w, r->wait0, -1, s->nwaits + 1, INT32_MAX);
    BAD(t, w, r->nwait, -1, s->nwaits + 1, INT32_MAX);
    BAD(t, w, r->event, -2, s->nevents, INT32_MAX);
  }
  for (int i = 0; i < s->nstep_io; i++) {
    snprintf(w, sizeof w, "step_io[%d]", i);
    BAD(t, w, x->step_io[i], -1, s->nbuffers, INT32_MAX);
  }
  for (int i = 0; i < s->nwaits; i++) {
    snprintf(w, sizeof w, "waits[%d]", i);
    BAD(t, w, x->waits[i], -1, s->nsteps, INT32_MAX);
  }
}

static void corrupt_header(Tally *t, SchedText *x) {
  rt_Schedule *s = &x->s;
  BAD(t, "abi", s->abi, 0, 1, RATION_SCHED_ABI + 1);
  const char **strs[7] = {&s->name, &s->ration_version, &s->graph_name, &s->graph_sha256, &s->device, &s->strategy,
                          &s->solver_status};
  for (int k = 0; k < 7; k++) corrupt_ptr(t, "a provenance string", (const void **)strs[k], RT_ESCHEDULE);
  BAD(t, "ntensors", s->ntensors, -1, 0);
  BAD(t, "nbuffers", s->nbuffers, -1, 0);
  BAD(t, "nops", s->nops, -1, 0);
  BAD(t, "nsteps", s->nsteps, -1);
  BAD(t, "nevents", s->nevents, -1, s->nsteps + 1);
  BAD(t, "nop_io", s->nop_io, -1, 0);
  if (s->nattrs > 0) BAD(t, "nattrs", s->nattrs, -1, 0);
  BAD(t, "nstep_io", s->nstep_io, -1, 0);
  if (s->nwaits > 0) BAD(t, "nwaits", s->nwaits, -1, 0);
  BAD(t, "arena_bytes", s->arena_bytes, -1, INT64_C(1) << 61, INT64_MIN);
  BAD(t, "host_bytes", s->host_bytes, -1, INT64_C(1) << 61, INT64_MIN);
  const void **tables[8] = {(const void **)&s->tensors, (const void **)&s->buffers, (const void **)&s->ops,
                            (const void **)&s->op_io,   (const void **)&s->attrs,   (const void **)&s->steps,
                            (const void **)&s->step_io, (const void **)&s->waits};
  for (int k = 0; k < 8; k++) corrupt_ptr(t, sched_tables[k], tables[k], RT_ESCHEDULE);
}

static void corruptions(void) {
  for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
    SchedText x;
    char err[512], name[300];
    bool leaked = false, loaded = load(seeds[i], &x);
    int rc = loaded ? open_status(&x.s, NULL, err, sizeof err, &leaked) : -1;
    snprintf(name, sizeof name, "%s reads back from its text and opens", seeds[i]);
    T_CASE(name) T_CHECKF(loaded && rc == RT_OK, "loaded %d, status %d: %s", loaded, rc, loaded ? err : "");
    if (rc != RT_OK) {
      if (loaded) sched_text_free(&x);
      continue;
    }
    Tally t = {&x.s, 0, 0, ""};
    corrupt_header(&t, &x);
    corrupt_tensors(&t, &x);
    corrupt_buffers(&t, &x);
    corrupt_ops(&t, &x);
    corrupt_steps(&t, &x);
    rc = open_status(&x.s, NULL, err, sizeof err, &leaked);
    snprintf(name, sizeof name, "%s: %ld corruptions of every field, each refused cleanly, the schedule intact after", seeds[i],
             t.tried);
    T_CASE(name) T_CHECKF(t.wrong == 0 && rc == RT_OK && t.tried > 1000, "%ld of %ld wrong, first %s; intact: %d",
                          t.wrong, t.tried, t.first, rc);
    sched_text_free(&x);
  }
}

/* A file of LEN bytes of a fixed pattern, hashed by libration and nettle. */
static bool same_sha256(const char *path, size_t len) {
  char *data = malloc(len + 1), mine[65] = "", want[65];
  for (size_t i = 0; data && i < len; i++) data[i] = (char)(i * 131 + 7);
  Err e;
  bool ok = data && util_write_file_atomic(path, data, len, &e) == 0 && rt_sha256_file(path, mine) == 0;
  if (ok) util_sha256_hex(data, len, want);
  free(data);
  return ok && !strcmp(mine, want);
}

static void freshness(void) {
  char tmp[] = "/tmp/ration-test-sched-XXXXXX", path[300], err[512];
  bool dir = mkdtemp(tmp) != NULL, leaked;
  snprintf(path, sizeof path, "%s/data", tmp);
  int agree = 0;
  static const size_t lens[] = {0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 70001};
  for (size_t i = 0; dir && i < sizeof lens / sizeof *lens; i++) agree += same_sha256(path, lens[i]);
  T_CASE("libration's SHA-256 of a file is nettle's, at every padding boundary")
    T_CHECKF(agree == (int)(sizeof lens / sizeof *lens), "%d of %zu agree", agree, sizeof lens / sizeof *lens);

  SchedText x;
  bool loaded = load("tests/fuzz/seeds/gpt2-micro-offload-all.sched.c", &x);
  T_CASE("a schedule opens when rt_Options.graph names the graph it was planned from") {
    T_CHECK(loaded);
    int rc = loaded ? open_status(&x.s, "tests/fuzz/seeds/gpt2-micro.json", err, sizeof err, &leaked) : -1;
    T_CHECKF(rc == RT_OK, "status %d: %s", rc, err);
  }
  T_CASE("another graph: RT_ESTALE naming both hashes") {
    int rc = loaded ? open_status(&x.s, "tests/data/mlp.json", err, sizeof err, &leaked) : -1;
    T_CHECKF(rc == RT_ESTALE && !leaked && strstr(err, x.s.graph_sha256) && strstr(err, "tests/data/mlp.json"),
             "status %d: %s", rc, err);
  }
  T_CASE("a schedule of another ration version: RT_ESTALE") {
    const char *v = loaded ? x.s.ration_version : NULL;
    if (loaded) x.s.ration_version = "0.0.9";
    int rc = loaded ? open_status(&x.s, "tests/fuzz/seeds/gpt2-micro.json", err, sizeof err, &leaked) : -1;
    if (loaded) x.s.ration_version = v;
    T_CHECKF(rc == RT_ESTALE && strstr(err, "0.0.9") && strstr(err, rt_version()), "status %d: %s", rc, err);
  }
  T_CASE("an unreadable expected graph: RT_EINVAL naming it") {
    int rc = loaded ? open_status(&x.s, "tests/no/such.json", err, sizeof err, &leaked) : -1;
    T_CHECKF(rc == RT_EINVAL && strstr(err, "tests/no/such.json"), "status %d: %s", rc, err);
  }
  T_CASE("libration and ration are one version") T_CHECK(!strcmp(rt_version(), RATION_VERSION));
  if (loaded) sched_text_free(&x);
  if (dir) unlink(path), rmdir(tmp);
}

static void shapes(void) {
  SchedText x;
  bool loaded = load("tests/fuzz/seeds/mlp-sqrt-n.sched.c", &x);
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = RT_OPEN_REFERENCE};
  rt_Session *s = NULL;
  char err[512] = "";
  int rc = loaded ? rt_open(&x.s, &o, &s, err, sizeof err) : -1;
  T_CASE("mlp opens") T_CHECKF(rc == RT_OK, "status %d: %s", rc, err);
  if (rc == RT_OK) {
    float data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8];
    /* x is f32 [2, 4]: 32 bytes, as are f32 [4, 2], f32 [8], i32 [2, 4] and f32 [2, 4, 1]. */
    const int64_t good[] = {2, 4}, swapped[] = {4, 2}, flat[] = {8}, deeper[] = {2, 4, 1};
    int w_swap = rt_write(s, "x", 0, 2, swapped, data, sizeof data);
    int w_flat = rt_write(s, "x", 0, 1, flat, data, sizeof data);
    int w_deep = rt_write(s, "x", 0, 3, deeper, data, sizeof data);
    int w_i32 = rt_write(s, "x", 3, 2, good, data, sizeof data);
    int w_null = rt_write(s, "x", 0, 2, NULL, data, sizeof data);
    T_CASE("rt_write: a tensor of the right byte count but another shape, rank or dtype is refused")
      T_CHECKF(w_swap == RT_EINVAL && w_flat == RT_EINVAL && w_deep == RT_EINVAL && w_i32 == RT_EINVAL &&
               w_null == RT_EINVAL && strstr(rt_error(s), "f32 [2, 4]"),
               "%d %d %d %d %d: %s", w_swap, w_flat, w_deep, w_i32, w_null, rt_error(s));
    int w = rt_write(s, "x", 0, 2, good, data, sizeof data);
    int r_swap = rt_read(s, "x", 0, 2, swapped, back, sizeof back);
    int r_i32 = rt_read(s, "x", 3, 2, good, back, sizeof back);
    int r = rt_read(s, "x", 0, 2, good, back, sizeof back);
    T_CASE("rt_write and rt_read of the schedule's own dtype and shape: the bytes round-trip; rt_read checks the same")
      T_CHECKF(w == RT_OK && r == RT_OK && !memcmp(data, back, sizeof data) && r_swap == RT_EINVAL && r_i32 == RT_EINVAL,
               "%d %d %d %d: %s", w, r, r_swap, r_i32, rt_error(s));
    rt_close(s);
  }
  if (loaded) sched_text_free(&x);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  corruptions();
  freshness();
  shapes();
  T_DONE();
}
