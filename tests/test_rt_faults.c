/*
 * test_rt_faults.c - fault injection through libration's public API (Lua's
 * ltests idea) on a small GPT-2 whose every stashed tensor is offloaded, so
 * a step has copies on both copy streams:
 *   - every allocation rt_open makes fails in turn: rt_open returns a
 *     status and a message and no session (the SAN build's leak checker
 *     and tests/t_valgrind.sh see that it freed what it took);
 *   - every copy of a step, and every kernel launch, fails in turn: rt_step
 *     returns the status naming the step, the params and optimizer state
 *     read back bitwise as before the step, and the next step is bitwise
 *     the step a session that never failed runs.
 * Without RT_OPEN_ATOMIC a failing optimizer op may leave earlier optimizer
 * ops' updates; the message must say so, and nothing else may change.
 * The faults a device shows later, injected by the CPU backend: each copy
 * and kernel in turn failing on its stream (reported at the next wait or
 * the step's synchronize, as CUDA reports them: RT_EBACKEND, state kept as
 * above); the device lost at each backend call of a step (RT_ELOST); a copy
 * or kernel that never completes, ended by the watchdog (rt_Options.
 * timeout_ms: RT_ETIMEOUT). After the last two the session refuses every
 * call at once and rt_close frees it all.
 * And rt_write_profile: what it writes reads back (every op's median, the
 * copy figures), two writers of one path never clobber each other's
 * temporary, a write that fails leaves no temporary behind, and a kill
 * (SIGKILL) at each stage of the write leaves the old file or the whole
 * new one and no temporary.
 */
#include "ration.h"
#include "test.h"

#include "../runtime/ration.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];
static long stride = 1; /* --stride N: every Nth event only (tests/t_valgrind.sh) */

static Graph *graph; /* the schedule's graph, for reading profiles back */

static const rt_Schedule *build_schedule(void **handle, char *why, size_t wn) {
  ModelConfig c;
  Err e = {{0}};
  Buf json = {0}, src = {0}, hdr = {0};
  Graph *g = NULL;
  Device *d = NULL;
  Plan *p = NULL;
  Decision *dec = NULL;
  const rt_Schedule *s = NULL;
  *handle = NULL;
  if (model_defaults("gpt2", &c, &e)) goto fail_e;
  c.layers = 2, c.dim = 32, c.heads = 4, c.vocab = 64, c.seq = 8, c.batch = 2, c.dtype = DT_F32;
  if (model_build(&c, &json, &e) || !(g = graph_parse("gpt2-faults", json.data, json.len, &e))) goto fail_e;
  if (!(d = device_load("budgets/cpu.json", &e))) goto fail_e;
  dec = calloc((size_t)g->ntensors, sizeof *dec);
  for (int i = 0; dec && i < g->nstashed; i++) dec[g->stashed[i]] = DEC_OFFLOAD;
  if (!dec || !(p = plan_from_decisions(g, d, dec, &e))) goto fail_e;
  snprintf(p->strategy, sizeof p->strategy, "offload-all");
  if (emit_c_source(p, g, "faults", &src, &e) || emit_c_header(p, g, "faults", &hdr, &e)) goto fail_e;
  char path[600], cmd[1600];
  snprintf(path, sizeof path, "%s/faults.sched.c", tmpdir);
  if (util_write_file_atomic(path, src.data, src.len, &e)) goto fail_e;
  snprintf(path, sizeof path, "%s/faults.sched.h", tmpdir);
  if (util_write_file_atomic(path, hdr.data, hdr.len, &e)) goto fail_e;
  snprintf(cmd, sizeof cmd, "cc -std=c99 -O0 -fPIC -shared -o %s/faults.so %s/faults.sched.c", tmpdir, tmpdir);
  if (system(cmd) != 0) {
    snprintf(why, wn, "faults.sched.c does not compile");
    goto done;
  }
  snprintf(path, sizeof path, "%s/faults.so", tmpdir);
  if (!(*handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
    snprintf(why, wn, "dlopen: %s", dlerror());
    goto done;
  }
  const rt_Schedule *(*entry)(void) = (const rt_Schedule *(*)(void))dlsym(*handle, "ration_schedule_faults");
  if (entry) s = entry();
  else snprintf(why, wn, "no entry point");
  goto done;
fail_e:
  snprintf(why, wn, "%.500s", e.msg);
done:
  free(dec);
  plan_free(p);
  device_free(d);
  if (s) graph = g;
  else graph_free(g);
  buf_free(&json);
  buf_free(&src);
  buf_free(&hdr);
  return s;
}

/* Params and optimizer state (kinds 1 and 3), concatenated. */
static size_t state_bytes(const rt_Schedule *s) {
  size_t n = 0;
  for (int t = 0; t < s->ntensors; t++)
    if (s->tensors[t].kind == 1 || s->tensors[t].kind == 3) n += (size_t)s->tensors[t].bytes;
  return n;
}

static int read_state(rt_Session *ss, const rt_Schedule *s, unsigned char *out) {
  for (int t = 0; t < s->ntensors; t++)
    if (s->tensors[t].kind == 1 || s->tensors[t].kind == 3) {
      const rt_SchedTensor *x = &s->tensors[t];
      int rc = rt_read(ss, x->name, x->dtype, x->rank, x->shape, out, (size_t)x->bytes);
      if (rc != RT_OK) return rc;
      out += s->tensors[t].bytes;
    }
  return RT_OK;
}

/* A session with fixed params and a fixed batch. */
static int open_ready(const rt_Schedule *s, unsigned flags, rt_Session **out, char *err, size_t errlen) {
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = flags, .seed = 3, .delay_us = 50};
  int rc = rt_open(s, &o, out, err, errlen);
  if (rc != RT_OK) return rc;
  rc = rt_init_params(*out, 42, 0.02);
  for (int t = 0; t < s->ntensors && rc == RT_OK; t++) {
    const rt_SchedTensor *x = &s->tensors[t];
    if (x->kind != 0 || x->dtype != 3) continue;
    int32_t *ids = malloc((size_t)x->bytes);
    if (!ids) return RT_ENOMEM;
    for (int64_t i = 0; i < x->bytes / 4; i++) ids[i] = (int32_t)((i * 7 + t) % 64);
    rc = rt_write(*out, x->name, x->dtype, x->rank, x->shape, ids, (size_t)x->bytes);
    free(ids);
  }
  if (rc != RT_OK) snprintf(err, errlen, "%s", rt_error(*out));
  return rc;
}

/* Arms fault KIND (RT_FAULT_COPY, _KERNEL or _ASYNC: copies and kernels
 * that fail on their stream) at each of its N events of a step in turn;
 * checks status, message, unchanged state and a clean next step. A failure
 * at issue names its step; one on a stream surfaces at a later wait or at
 * the step's synchronize. */
static void fail_each(const rt_Schedule *s, int kind, long n, unsigned flags, const unsigned char *after_one,
                      size_t nb) {
  unsigned char *before = malloc(nb), *now = malloc(nb);
  int bad_status = 0, changed = 0, changed_unsaid = 0, no_recover = 0, opened = 0;
  long first_bad = 0;
  char msg[600] = "";
  long tried = 0;
  for (long k = 1; k <= n && before && now; k += stride) {
    tried++;
    rt_Session *ss = NULL;
    char err[512];
    rt_fault_inject(0, 0, 0);
    if (open_ready(s, flags, &ss, err, sizeof err) != RT_OK || read_state(ss, s, before) != RT_OK) {
      rt_close(ss);
      continue;
    }
    opened++;
    rt_fault_arm(kind, k);
    int rc = rt_step(ss);
    rt_fault_inject(0, 0, 0);
    const char *m = rt_error(ss);
    int want = kind == RT_FAULT_KERNEL ? RT_EKERNEL : RT_EBACKEND;
    bool named = kind == RT_FAULT_ASYNC ? strstr(m, "asynchronously (injected fault)") != NULL
                                        : strstr(m, "injected fault") && !strncmp(m, "step ", 5);
    if (rc != want || !named) {
      if (!bad_status++) first_bad = k, snprintf(msg, sizeof msg, "status %d: %s", rc, m);
    }
    bool said = strstr(m, "optimizer ops had already updated") != NULL;
    if (read_state(ss, s, now) != RT_OK || memcmp(before, now, nb) != 0) {
      changed++;
      if (!said && !changed_unsaid++) first_bad = k, snprintf(msg, sizeof msg, "state changed: %s", m);
    } else if (rt_step(ss) != RT_OK || read_state(ss, s, now) != RT_OK || memcmp(now, after_one, nb) != 0) {
      if (!no_recover++) first_bad = k, snprintf(msg, sizeof msg, "next step differs: %s", rt_error(ss));
    }
    rt_close(ss);
  }
  const char *what = kind == RT_FAULT_COPY     ? "copy"
                     : kind == RT_FAULT_KERNEL ? "kernel"
                                               : "copy or kernel on its stream";
  const char *whats = kind == RT_FAULT_COPY     ? "copies"
                      : kind == RT_FAULT_KERNEL ? "kernels"
                                                : "copies and kernels on their streams";
  char name[200];
  snprintf(name, sizeof name, "each of %ld %s failing in turn%s: status, message, state kept, clean next step", n,
           whats, flags & RT_OPEN_ATOMIC ? " (RT_OPEN_ATOMIC)" : "");
  T_CASE(name) {
    T_CHECKF(opened == tried, "%d of %ld sessions opened", opened, tried);
    T_CHECKF(bad_status == 0 && changed_unsaid == 0 && no_recover == 0,
             "%d bad statuses, %d unsaid state changes, %d unclean next steps; first at %s %ld: %s", bad_status,
             changed_unsaid, no_recover, what, first_bad, msg);
    if (flags & RT_OPEN_ATOMIC) T_CHECKF(changed == 0, "%d failures changed the state", changed);
    else if (kind != RT_FAULT_COPY && stride == 1) T_CHECKF(changed > 0 && changed < n, "%d of %ld kernel failures changed the state (the "
                                 "optimizer's, said so)", changed, n);
  }
  printf("  %s failures: %ld, state changed by %d (said so in the message)\n", what, n, changed);
  free(before);
  free(now);
}

/* Entries of DIR whose name contains ".tmp". */
static int temporaries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *de; d && (de = readdir(d));) n += strstr(de->d_name, ".tmp") != NULL;
  if (d) closedir(d);
  return n;
}

typedef struct Writer {
  rt_Session *s;
  const char *path;
  int failed;
} Writer;

static void *write_many(void *arg) {
  Writer *w = arg;
  for (int i = 0; i < 20; i++) w->failed += rt_write_profile(w->s, w->path) != RT_OK;
  return NULL;
}

static void profiles(const rt_Schedule *s) {
  rt_Session *a = NULL, *b = NULL;
  char err[512] = "", path[600], dir[600];
  int rc = open_ready(s, RT_OPEN_PROFILE, &a, err, sizeof err);
  if (rc == RT_OK) rc = open_ready(s, RT_OPEN_PROFILE, &b, err, sizeof err);
  for (int i = 0; i < 4 && rc == RT_OK; i++)
    if ((rc = rt_step(a)) != RT_OK || (rc = rt_step(b)) != RT_OK) snprintf(err, sizeof err, "step: %s", rt_error(a));
  snprintf(path, sizeof path, "%s/p.costs.json", tmpdir);
  if (rc == RT_OK && rt_write_profile(a, path) != RT_OK) rc = -1, snprintf(err, sizeof err, "%s", rt_error(a));
  T_CASE("rt_write_profile: writes the profile, no temporary left") T_CHECKF(rc == RT_OK && temporaries(tmpdir) == 0,
                                                                         "%s; %d temporaries", err, temporaries(tmpdir));
  if (rc != RT_OK) goto done;
  Err e = {{0}};
  Device *d = device_load("budgets/cpu.json", &e);
  if (d) d->copy_compute_share = -1;
  int lrc = d ? cost_load_profile(graph, d, path, &e) : -1;
  int off = 0;
  for (int o = 0; lrc == 0 && o < graph->nops; o++) {
    double want = rt_op_seconds(a, o) * 1e6;
    if (!(want > 0) || fabs(graph->ops[o].time_us - want) > 0.0006) off++;
  }
  T_CASE("the profile reads back: every op's time, both bandwidths, the copies' compute share")
    T_CHECKF(lrc == 0 && off == 0 && d->d2h_gbps > 0 && d->h2d_gbps > 0 && d->copy_compute_share >= 0 &&
             d->d2h_gbps != 5 && d->h2d_gbps != 5,
             "%s; %d ops differ; d2h %g, h2d %g, share %g", lrc ? e.msg : "", off, d ? d->d2h_gbps : 0,
             d ? d->h2d_gbps : 0, d ? d->copy_compute_share : 0);
  device_free(d);

  /* Two sessions write the same path at once: each write whole, atomic. */
  Writer wa = {a, path, 0}, wb = {b, path, 0};
  pthread_t ta, tb;
  bool started = pthread_create(&ta, NULL, write_many, &wa) == 0;
  if (started && pthread_create(&tb, NULL, write_many, &wb) != 0) wb.failed = -1;
  else if (started) pthread_join(tb, NULL);
  if (started) pthread_join(ta, NULL);
  T_CASE("two writers of one path: every write succeeds, the file is one whole profile, no temporary left")
    T_CHECKF(started && wa.failed == 0 && wb.failed == 0 && cost_load_profile(graph, NULL, path, &e) == 0 &&
             temporaries(tmpdir) == 0, "failed %d + %d; %s; %d temporaries", wa.failed, wb.failed, e.msg,
             temporaries(tmpdir));

  snprintf(dir, sizeof dir, "%s/sub", tmpdir);
  mkdir(dir, 0700);
  rc = rt_write_profile(a, dir);
  struct stat st;
  T_CASE("rt_write_profile onto a directory: fails with a message, directory kept, no temporary left")
    T_CHECKF(rc == RT_EINVAL && strstr(rt_error(a), dir) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
             temporaries(tmpdir) == 0, "status %d: %s; %d temporaries", rc, rt_error(a), temporaries(tmpdir));
  snprintf(dir, sizeof dir, "%s/missing/p.json", tmpdir);
  rc = rt_write_profile(a, dir);
  T_CASE("rt_write_profile into a missing directory: fails with a message")
    T_CHECKF(rc == RT_EINVAL && strstr(rt_error(a), dir), "status %d: %s", rc, rt_error(a));
done:
  rt_close(a);
  rt_close(b);
}

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a failure that kills the session: a second step, a write and a
 * read fail the same way, at once, saying the session can only be closed. */
static bool stays_dead(rt_Session *ss, const rt_Schedule *s, int want) {
  const rt_SchedTensor *t = &s->tensors[0];
  unsigned char buf[64];
  double t0 = seconds_now();
  bool dead = rt_step(ss) == want && strstr(rt_error(ss), "can only be closed") &&
              (t->bytes > (int64_t)sizeof buf ||
               (rt_write(ss, t->name, t->dtype, t->rank, t->shape, buf, (size_t)t->bytes) == want &&
                rt_read(ss, t->name, t->dtype, t->rank, t->shape, buf, (size_t)t->bytes) == want));
  return dead && seconds_now() - t0 < 0.1;
}

/* The device is lost at each backend call of a step in turn: the step
 * fails with RT_ELOST, the session stays dead, rt_close frees it all. */
static void lose_device(const rt_Schedule *s) {
  rt_Session *ss = NULL;
  char err[512] = "", msg[600] = "";
  long calls = 0, bad = 0;
  rt_fault_inject(0, 0, 0);
  if (open_ready(s, 0, &ss, err, sizeof err) == RT_OK) {
    rt_fault_arm(RT_FAULT_LOST, 0);
    if (rt_step(ss) == RT_OK) calls = rt_fault_count(RT_FAULT_LOST);
  }
  rt_close(ss);
  for (long k = 1; k <= calls; k += stride) {
    ss = NULL;
    rt_fault_inject(0, 0, 0);
    if (open_ready(s, RT_OPEN_ATOMIC, &ss, err, sizeof err) != RT_OK) {
      if (!bad++) snprintf(msg, sizeof msg, "open: %s", err);
      continue;
    }
    rt_fault_arm(RT_FAULT_LOST, k);
    int rc = rt_step(ss);
    bool ok = rc == RT_ELOST && strstr(rt_error(ss), "device lost") && stays_dead(ss, s, RT_ELOST);
    if (!ok && !bad++) snprintf(msg, sizeof msg, "call %ld: status %d: %s", k, rc, rt_error(ss));
    rt_close(ss);
  }
  rt_fault_inject(0, 0, 0);
  char name[200];
  snprintf(name, sizeof name, "the device lost at each of %ld backend calls of a step: RT_ELOST, the session dead, "
           "closed cleanly", calls);
  T_CASE(name) T_CHECKF(calls > 100 && bad == 0, "%ld wrong; first %s", bad, msg);
}

/* A copy or kernel that never completes, at the first and last copy and
 * the first, a middle and the last kernel: the watchdog (timeout_ms 300)
 * fails the step with RT_ETIMEOUT after 0.3 s and not much later, the
 * session stays dead and rt_close returns. A clean session with the same
 * timeout steps as before. */
static void hang(const rt_Schedule *s, long ncopy, long nkernel) {
  long events = ncopy + nkernel, at[] = {1, 2, events / 2, events - 1, events};
  rt_Session *ss = NULL;
  char err[512] = "", msg[700] = "";
  int bad = 0;
  rt_Options o = {.backend = RT_BACKEND_CPU, .seed = 3, .delay_us = 50, .timeout_ms = 300};
  /* "Not much later": within a second and three clean steps (valgrind). */
  double clean = seconds_now();
  if (open_ready(s, 0, &ss, err, sizeof err) != RT_OK || rt_step(ss) != RT_OK) bad++;
  clean = seconds_now() - clean;
  rt_close(ss);
  for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
    rt_fault_inject(0, 0, 0);
    if (rt_open(s, &o, &ss, err, sizeof err) != RT_OK) {
      if (!bad++) snprintf(msg, sizeof msg, "open: %s", err);
      continue;
    }
    rt_fault_arm(RT_FAULT_HANG, at[i]);
    double t0 = seconds_now();
    int rc = rt_step(ss);
    double took = seconds_now() - t0;
    bool ok = rc == RT_ETIMEOUT && strstr(rt_error(ss), "timed out after 300 ms") && took >= 0.29 && took < 1.3 + 3 * clean &&
              stays_dead(ss, s, RT_ETIMEOUT);
    if (!ok && !bad++)
      snprintf(msg, sizeof msg, "event %ld of %ld: status %d after %.3f s: %s", at[i], events, rc, took, rt_error(ss));
    t0 = seconds_now();
    rt_close(ss);
    double closing = seconds_now() - t0;
    if (closing > 1 + clean && !bad++) snprintf(msg, sizeof msg, "event %ld: rt_close took %.3f s", at[i], closing);
  }
  rt_fault_inject(0, 0, 0);
  T_CASE("a copy or kernel that never completes (first and last copy, first, middle and last kernel): RT_ETIMEOUT "
         "after the 300 ms watchdog, the session dead, closed at once")
    T_CHECKF(bad == 0, "%s", msg);
  int rc = open_ready(s, 0, &ss, err, sizeof err) == RT_OK ? RT_OK : -1;
  rt_close(ss);
  o.flags = RT_OPEN_DEBUG;
  if (rc == RT_OK) rc = rt_open(s, &o, &ss, err, sizeof err);
  for (int i = 0; i < 3 && rc == RT_OK; i++) rc = rt_step(ss);
  T_CASE("with the watchdog set, clean debug steps run") T_CHECKF(rc == RT_OK, "%d: %s", rc, ss ? rt_error(ss) : err);
  rt_close(ss);
}

/* The only entry of DIR, whole: "old\n" (1), a whole profile (2), else 0. */
static int profile_state(const char *dir, const char *path) {
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *de; d && (de = readdir(d));) entries += de->d_name[0] != '.';
  if (d) closedir(d);
  Err e;
  size_t len;
  char *text = util_read_file(path, &len, &e);
  int state = 0;
  if (text && entries == 1 && !strcmp(text, "old\n")) state = 1;
  else if (text && entries == 1 && !strncmp(text, "{\"format\": \"ration-costs/1\"", 27) && len > 2 &&
           !strcmp(text + len - 2, "}\n"))
    state = 2;
  free(text);
  return state;
}

/* rt_write_profile killed (SIGKILL) while stalled at each stage of its
 * write: the file opened, written, synced, and (in its commit child) named
 * but not yet renamed. Before the rename the old file stays; at the last
 * stage the child finishes the rename; never a half file or a temporary. */
static void kill_profile(const rt_Schedule *s) {
  char dir[300], path[400];
  snprintf(dir, sizeof dir, "%s/kill", tmpdir);
  snprintf(path, sizeof path, "%s/p.costs.json", dir);
  mkdir(dir, 0700);
  char got[64] = "";
  int wrong = 0;
  for (int stage = 1; stage <= 5; stage++) {
    Err e;
    util_write_file_atomic(path, "old\n", 4, &e);
    int ready[2];
    if (pipe(ready) != 0) break;
    pid_t pid = fork();
    if (pid == 0) {
      rt_Session *ss = NULL;
      char err[512];
      if (open_ready(s, RT_OPEN_PROFILE, &ss, err, sizeof err) == RT_OK && rt_step(ss) == RT_OK &&
          rt_step(ss) == RT_OK) {
        rt_fault_arm(RT_FAULT_STALL, stage); /* stage 5: none, the write runs through */
        if (write(ready[1], "r", 1) == 1) rt_write_profile(ss, path);
      }
      _exit(0);
    }
    close(ready[1]);
    char c;
    bool started = pid > 0 && read(ready[0], &c, 1) == 1;
    close(ready[0]);
    nanosleep(&(struct timespec){0, 300000000}, NULL); /* well inside the stage's 1 s stall */
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    /* A commit child outlives its killed parent by the rest of its stall. */
    int state = 0;
    for (int i = 0; i < 40 && (state = profile_state(dir, path)) == 0; i++)
      nanosleep(&(struct timespec){0, 100000000}, NULL);
    if (stage == 4) nanosleep(&(struct timespec){1, 0}, NULL), state = profile_state(dir, path);
    int want = stage < 4 ? 1 : 2;
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", stage > 1 ? " " : "", state);
    wrong += !started || state != want;
  }
  T_CASE("rt_write_profile killed at each stage (opened, written, synced, named): the old file, then the whole "
         "new one; no half file, no temporary")
    T_CHECKF(wrong == 0, "states %s (1 old, 2 new, 0 neither or a temporary); want 1 1 1 2 2", got);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 3 && !strcmp(argv[1], "--stride")) stride = atol(argv[2]) > 0 ? atol(argv[2]) : 1;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/ration-test-faults-XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  void *handle;
  char why[600] = "";
  const rt_Schedule *s = build_schedule(&handle, why, sizeof why);
  T_CASE("offload-all schedule of a small GPT-2 builds and loads") T_CHECKF(s != NULL, "%s", why);
  if (s) {
    size_t nb = state_bytes(s);
    unsigned char *after_one = malloc(nb);
    rt_Session *ss = NULL;
    char err[512] = "";
    long nalloc = 0, ncopy = 0, nkernel = 0, nalloc_atomic = 0;
    rt_fault_inject(0, 0, 0);
    int rc = open_ready(s, RT_OPEN_ATOMIC, &ss, err, sizeof err);
    rt_fault_counts(&nalloc_atomic, NULL, NULL);
    rt_close(ss);
    rt_fault_inject(0, 0, 0);
    rc = rc ? rc : open_ready(s, 0, &ss, err, sizeof err);
    rt_fault_counts(&nalloc, NULL, NULL);
    rt_fault_inject(0, 0, 0);
    if (rc == RT_OK) rc = rt_step(ss);
    rt_fault_counts(NULL, &ncopy, &nkernel);
    if (rc == RT_OK) rc = read_state(ss, s, after_one);
    T_CASE("a clean step runs and counts its copies and kernels")
      T_CHECKF(rc == RT_OK && ncopy > 10 && nkernel > 20 && nalloc > 10 && nalloc_atomic > nalloc,
               "status %d (%s), %ld allocations (%ld atomic), %ld copies, %ld kernels", rc, ss ? rt_error(ss) : err,
               nalloc, nalloc_atomic, ncopy, nkernel);
    rt_close(ss);
    printf("  per open: %ld allocations (%ld with RT_OPEN_ATOMIC); per step: %ld copies, %ld kernels\n", nalloc,
           nalloc_atomic, ncopy, nkernel);

    /* rt_open alone: open_ready's later calls allocate nothing of libration's. */
    unsigned flag_sets[] = {0, RT_OPEN_ATOMIC | RT_OPEN_DEBUG};
    for (int f = 0; f < 2; f++) {
      long total = f ? nalloc_atomic : nalloc, fails = 0, leaks_out = 0;
      char first[600] = "";
      for (long k = 1; k <= total; k += stride) {
        rt_Session *x = (rt_Session *)&fails; /* must come back NULL */
        char e2[512] = "";
        rt_Options o = {.backend = RT_BACKEND_CPU, .flags = flag_sets[f], .seed = 3, .delay_us = 50};
        rt_fault_inject(k, 0, 0);
        int st = rt_open(s, &o, &x, e2, sizeof e2);
        rt_fault_inject(0, 0, 0);
        bool good = (st == RT_ENOMEM || st == RT_EBACKEND) && x == NULL && e2[0];
        if (!good && !fails++) snprintf(first, sizeof first, "allocation %ld: status %d, session %p, \"%s\"", k, st,
                                        (void *)x, e2);
        if (st == RT_OK) rt_close(x), leaks_out++;
      }
      char name[160];
      snprintf(name, sizeof name, "each of %ld allocations of rt_open%s failing: status, message, no session", total,
               f ? " (RT_OPEN_ATOMIC | RT_OPEN_DEBUG)" : "");
      T_CASE(name) T_CHECKF(fails == 0 && leaks_out == 0, "%ld wrong: %s", fails, first);
    }
    fail_each(s, RT_FAULT_COPY, ncopy, 0, after_one, nb);
    fail_each(s, RT_FAULT_KERNEL, nkernel, 0, after_one, nb);
    fail_each(s, RT_FAULT_COPY, ncopy, RT_OPEN_ATOMIC, after_one, nb);
    fail_each(s, RT_FAULT_KERNEL, nkernel, RT_OPEN_ATOMIC, after_one, nb);
    fail_each(s, RT_FAULT_ASYNC, ncopy + nkernel, 0, after_one, nb);
    fail_each(s, RT_FAULT_ASYNC, ncopy + nkernel, RT_OPEN_ATOMIC, after_one, nb);
    lose_device(s);
    hang(s, ncopy, nkernel);
    free(after_one);
    if (stride == 1) profiles(s), kill_profile(s);
  }
  if (handle) dlclose(handle);
  graph_free(graph);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) printf("# could not remove %s\n", tmpdir);
  T_DONE();
}
