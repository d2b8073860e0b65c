/*
 * rt_pool.c - the CPU kernels' worker threads. Kernels run back to back
 * within a step, a few microseconds apart, and waking a sleeping thread
 * costs about 13 us on this machine's VM (docs/RUNTIME.md), more than
 * many small kernels take: so a worker that runs out of tasks keeps
 * looking for the next run for SPIN_NS before it sleeps, and the caller
 * signals only when some worker sleeps.
 *
 * A run is published by its generation number: odd while the caller
 * changes the run's fields, even once they are set. A worker announces
 * itself (active) before it reads the fields and checks the generation
 * again after; the caller, having made it odd, waits for active to drop to
 * 0 before it changes anything. So no worker ever takes a task of one run
 * with the function of another.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "rt_pool.h"

#include "rt_backend.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { SPIN_NS = 300000 };

typedef struct Worker {
  struct rt_Pool *pool;
  pthread_t thread;
  float *scratch;
  bool started;
} Worker;

struct rt_Pool {
  int n; /* threads, the caller's included */
  Worker *w;
  float *scratch; /* n * RT_POOL_SCRATCH_FLOATS: slot 0 the caller's */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;
  atomic_int active, sleepers;
  atomic_bool stop;
  rt_PoolTask fn;
  void *arg;
  int64_t ntasks;
  atomic_llong next, done;
};

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int rt_pool_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}

int64_t rt_pool_chunk(int64_t n, int64_t grain) {
  if (grain < 1) grain = 1;
  int64_t tasks = (n + grain - 1) / grain;
  if (tasks > RT_POOL_MAX_TASKS) tasks = RT_POOL_MAX_TASKS;
  if (tasks < 1) tasks = 1;
  return (n + tasks - 1) / tasks > 0 ? (n + tasks - 1) / tasks : 1;
}

typedef struct {
  rt_PoolRange plain;
  rt_PoolScratchRange with_scratch;
  const void *ctx;
  int64_t n, chunk;
} Ranges;

static void range_task(void *arg, int64_t task, float *scratch) {
  const Ranges *r = arg;
  int64_t i0 = task * r->chunk, i1 = i0 + r->chunk < r->n ? i0 + r->chunk : r->n;
  if (r->with_scratch) r->with_scratch(r->ctx, i0, i1, scratch);
  else r->plain(r->ctx, i0, i1);
}

void rt_pool_ranges(rt_Pool *p, int64_t n, int64_t grain, rt_PoolRange plain,
                    rt_PoolScratchRange with_scratch, const void *ctx) {
  Ranges r = {plain, with_scratch, ctx, n, rt_pool_chunk(n, grain)};
  rt_pool_run(p, (n + r.chunk - 1) / r.chunk, range_task, &r);
}

static void take_tasks(rt_Pool *p, float *scratch) {
  int64_t i;
  while ((i = atomic_fetch_add(&p->next, 1)) < p->ntasks) {
    p->fn(p->arg, i, scratch);
    atomic_fetch_add(&p->done, 1);
  }
}

static void *worker_main(void *arg) {
  Worker *w = arg;
  rt_Pool *p = w->pool;
  unsigned seen = atomic_load(&p->gen);
  for (;;) {
    unsigned g = atomic_load(&p->gen);
    long long t0 = 0;
    for (int spins = 0; (g == seen || (g & 1u)) && !atomic_load(&p->stop); spins++) {
      if ((spins & 255) == 0) {
        long long t = now_ns();
        if (t0 == 0) t0 = t;
        else if (t - t0 > SPIN_NS) {
          pthread_mutex_lock(&p->mu);
          atomic_fetch_add(&p->sleepers, 1);
          while (((g = atomic_load(&p->gen)) == seen || (g & 1u)) && !atomic_load(&p->stop))
            pthread_cond_wait(&p->cv, &p->mu);
          atomic_fetch_sub(&p->sleepers, 1);
          pthread_mutex_unlock(&p->mu);
          break;
        }
      }
      cpu_relax();
      g = atomic_load(&p->gen);
    }
    if (atomic_load(&p->stop)) break;
    atomic_fetch_add(&p->active, 1);
    if (atomic_load(&p->gen) == g) {
      take_tasks(p, w->scratch);
      seen = g;
    }
    atomic_fetch_sub(&p->active, 1);
  }
  return NULL;
}

void rt_pool_run(rt_Pool *p, int64_t ntasks, rt_PoolTask fn, void *arg) {
  if (ntasks <= 0) return;
  if (!p || p->n == 1 || ntasks == 1) {
    float *scratch = p ? p->scratch : NULL;
    for (int64_t i = 0; i < ntasks; i++) fn(arg, i, scratch);
    return;
  }
  /* gen is odd here (closed): no worker reads the fields. */
  p->fn = fn;
  p->arg = arg;
  p->ntasks = ntasks;
  atomic_store(&p->done, 0);
  atomic_store(&p->next, 0);
  atomic_fetch_add(&p->gen, 1); /* even: open */
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
  take_tasks(p, p->scratch);
  for (int spins = 0; atomic_load(&p->done) < ntasks; spins++) {
    if (spins > 1000) sched_yield(); /* a worker holding a task was preempted */
    else cpu_relax();
  }
  atomic_fetch_add(&p->gen, 1); /* odd: closed */
  while (atomic_load(&p->active) > 0) cpu_relax();
}

int rt_pool_threads(const rt_Pool *p) { return p ? p->n : 1; }

void rt_pool_close(rt_Pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++)
    if (p->w[i].started) pthread_join(p->w[i].thread, NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->w);
  free(p->scratch);
  free(p);
}

int rt_pool_open(rt_Pool **out, int threads, char *err, size_t errlen) {
  *out = NULL;
  if (threads < 0) {
    snprintf(err, errlen, "threads %d: want 0 (every core) or more", threads);
    return -1;
  }
  rt_Pool *p = rt_calloc(1, sizeof *p);
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  p->n = threads ? threads : rt_pool_cores();
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  atomic_store(&p->gen, 1u);
  p->w = rt_calloc((size_t)p->n, sizeof *p->w);
  p->scratch = rt_calloc((size_t)p->n * (size_t)RT_POOL_SCRATCH_FLOATS, sizeof *p->scratch);
  if (!p->w || !p->scratch) {
    p->n = 1;
    rt_pool_close(p);
    snprintf(err, errlen, "cannot allocate %d threads' scratch", threads);
    return -1;
  }
  for (int i = 1; i < p->n; i++) {
    p->w[i].pool = p;
    p->w[i].scratch = p->scratch + (size_t)i * (size_t)RT_POOL_SCRATCH_FLOATS;
    if (rt_fault_hit(RT_FAULT_ALLOC) || pthread_create(&p->w[i].thread, NULL, worker_main, &p->w[i]) != 0) {
      rt_pool_close(p);
      snprintf(err, errlen, "cannot start a kernel thread");
      return -1;
    }
    p->w[i].started = true;
  }
  *out = p;
  return 0;
}
