/*
 * rt_cpu.c - the CPU backend. Compute runs on the caller's thread and the
 * kernels' pool (rt_pool.c), which it hands every kernel; the D2H, H2D
 * and host streams are each a real thread draining a FIFO of jobs (copy,
 * fill, a host op's kernel, record an event, wait for an event), so a wait missing from a
 * schedule is a real race, not a modelled one. In debug mode every copy
 * starts after a random delay, which makes such races show up. An idle
 * copy thread polls the rings for a while before it sleeps, so that
 * issuing a copy seldom costs the compute thread a wake-up (see Cpu). Job
 * rings and arenas are allocated at open; the step path only enqueues.
 * It injects the faults a device shows (rt_fault.c): a copy or kernel
 * that fails on its stream and is reported at the next wait or
 * synchronize, a lost device, a copy or kernel that never completes; every
 * wait of the calling thread ends at the caller's timeout (rt_Options).
 */
#include "kernels_fast.h"
#include "rt_backend.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* JOB_FAIL: a copy that fails on its stream (injected); JOB_HANG: one
 * that never completes (injected): its thread waits until close. */
enum { JOB_COPY, JOB_FILL, JOB_RECORD, JOB_WAIT, JOB_FAIL, JOB_HANG, JOB_KERNEL };
enum { RING = 4096 };
/* Polling (see Cpu), in ns: an idle copy thread looks at the rings
 * without pause for SPIN_NS, then every DOZE_NS (a sleep; the timer may
 * fire up to DOZE_LATE_NS late) until POLL_NS have passed, then sleeps
 * until woken. A look later than promised by more than POLL_GAP_NS means
 * the poller was preempted. Measured on offload-all schedules (bench/
 * RESULTS.md): a longer spin costs a core for little; without the doze the
 * compute thread still wakes a copy thread 25-36 times a step. */
enum { SPIN_NS = 200000, DOZE_NS = 50000, DOZE_LATE_NS = 100000, POLL_NS = 20000000, POLL_GAP_NS = 50000 };

typedef struct Job {
  int kind, byte, event;
  void *dst;
  const void *src;
  int64_t bytes;
  uint64_t target;
} Job;

/* The ring, the flags and the event counters are written under Cpu.mu;
 * those a poller reads without it are atomic. */
typedef struct Stream {
  struct Cpu *owner;
  pthread_t thread;
  pthread_cond_t cv; /* this thread's own: a job queued, an event it waits for done, stop */
  bool started, busy;
  atomic_int count;
  atomic_bool idle;    /* asleep until a job is queued */
  atomic_bool blocked; /* asleep until event wait_event reaches wait_target: in a
                          JOB_WAIT, or idle with such a JOB_WAIT first in its queue */
  atomic_int wait_event;
  _Atomic uint64_t wait_target;
  Job ring[RING];
  int head;
  unsigned seed;
  double copied_bytes, copy_seconds; /* measured memcpy work, for profiles */
} Stream;

/* A wake-up of a thread sleeping on another core costs the waker about
 * 13 us on this machine's VM (the inter-processor interrupt; the syscall
 * itself is 0.1 us), and the compute thread would pay it for nearly every
 * copy step. So a copy thread that runs out of work first polls the rings
 * of both streams (SPIN_NS, POLL_NS above): while one polls, the compute
 * thread only queues (no syscall), and the poller itself wakes the other
 * stream's thread when that one sleeps with work it can start. One thread
 * polls at a time, so compute and a poller fit the two cores; a poller
 * that finds itself preempted (the cores are contended) stops at once, and
 * the compute thread wakes threads itself whenever the poller is not
 * looking when it promised to. Sleeping threads use a condition variable
 * each and are woken only when what they wait for is there. */
typedef struct Cpu {
  pthread_mutex_t mu;
  pthread_cond_t cv_host; /* the calling thread: an event done, a stream idle, ring space */
  int host_waiting;       /* the calling thread is asleep on cv_host */
  atomic_bool stop;
  bool debug;
  unsigned delay_us;
  unsigned char *dev, *host;
  uint64_t *issued;        /* per event: records issued */
  _Atomic uint64_t *done;  /* per event: records completed */
  atomic_int poller;       /* the stream whose thread polls, or 0 */
  atomic_llong next_look_ns; /* by when the poller will have looked at the rings again */
  Stream streams[4];       /* [RT_STREAM_D2H], [RT_STREAM_H2D], [RT_STREAM_HOST] are threads */
  rt_Pool *pool;           /* the kernels' threads; NULL: the reference kernels */
  char kernels[256];       /* rt_Stats.kernels */
  unsigned timeout_ms;     /* the calling thread's waits end after this long; 0 never */
  bool lost;               /* the device is lost (injected): every call fails */
  bool compute_hung;       /* a kernel never completes (injected): nothing after it on
                              the compute stream does */
  char async_err[160];     /* a failure on a stream, not yet reported (under mu) */
} Cpu;

static void *xalloc_arena(int64_t bytes) {
  size_t n = (size_t)((bytes + 255) / 256 * 256);
  if (n == 0) n = 256;
  void *p = rt_fault_hit(RT_FAULT_ALLOC) ? NULL : aligned_alloc(256, n);
  if (p) memset(p, 0, n);
  return p;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void copy_delay(unsigned *seed, unsigned fixed_us) {
  /* Mostly short, sometimes long enough to let compute run many ops ahead. */
  unsigned r = (unsigned)rand_r(seed);
  long us = fixed_us ? (long)fixed_us : (r % 8 == 0) ? (long)(r % 2000) : (long)(r % 100);
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Takes mu without sleeping on it while its holder runs on the other
 * core: sleeping there would make the holder's unlock a wake-up. */
static void lock(Cpu *c) {
  for (int i = 0; i < 1000; i++) {
    if (pthread_mutex_trylock(&c->mu) == 0) return;
    sched_yield();
  }
  pthread_mutex_lock(&c->mu);
}

/* A sleeping stream thread whose wait is over: idle with a job queued that
 * it can start, or blocked on an event now done. */
static bool wakeable(Cpu *c, Stream *st) {
  if (atomic_load(&st->blocked))
    return atomic_load(&c->done[atomic_load(&st->wait_event)]) >= atomic_load(&st->wait_target);
  return atomic_load(&st->idle) && atomic_load(&st->count) > 0;
}

/* An idle stream whose first job waits for an event not yet done is left
 * asleep, marked blocked on it: the event's completion wakes it (one
 * wake-up, not two). Called with mu held. */
static void mark_blocked(Cpu *c, Stream *st) {
  if (!atomic_load(&st->idle) || atomic_load(&st->blocked) || atomic_load(&st->count) == 0) return;
  const Job *j = &st->ring[st->head];
  if (j->kind == JOB_WAIT && atomic_load(&c->done[j->event]) < j->target) {
    atomic_store(&st->wait_event, j->event);
    atomic_store(&st->wait_target, j->target);
    atomic_store(&st->blocked, true);
  }
}

/* Whether a poller will see to sleeping threads: one polls and is not
 * late, by more than POLL_GAP_NS, for the look it promised. */
static bool poller_alive(Cpu *c) {
  return atomic_load(&c->poller) != 0 && now_ns() - atomic_load(&c->next_look_ns) < POLL_GAP_NS;
}

/* Marks ST awake when it sleeps with its wait over, and says whether to
 * signal it (after unlocking, so that it does not find mu still held and
 * sleep again on it). Marked awake here, so a second caller before it runs
 * signals no second time. Called with mu held. */
static bool claim_wake(Cpu *c, Stream *st) {
  if (!wakeable(c, st)) return false;
  atomic_store(&st->idle, false);
  atomic_store(&st->blocked, false);
  return true;
}

/* A copy thread with nothing to do, unless the other one polls already,
 * looks at both rings until its own wait is over (READY), waking the other
 * stream's thread when that one sleeps with its wait over; for at most
 * POLL_NS, and not once it finds itself preempted. Called and returns with
 * mu held. */
static void poll_streams(Cpu *c, Stream *st, int self, bool (*ready)(Cpu *, Stream *, const Job *), const Job *j) {
  int none = 0;
  /* The host stream never polls: a poller wakes only the other copy stream. */
  if (self == RT_STREAM_HOST || ready(c, st, j) || !atomic_compare_exchange_strong(&c->poller, &none, self)) return;
  Stream *other = &c->streams[self == RT_STREAM_D2H ? RT_STREAM_H2D : RT_STREAM_D2H];
  long long t0 = now_ns(), promised = t0;
  atomic_store(&c->next_look_ns, t0);
  pthread_mutex_unlock(&c->mu);
  for (;;) {
    long long t = now_ns();
    if (t - promised > POLL_GAP_NS || t - t0 > POLL_NS) break;
    bool doze = t - t0 > SPIN_NS;
    promised = doze ? t + DOZE_NS + DOZE_LATE_NS : t;
    atomic_store(&c->next_look_ns, promised);
    if (ready(c, st, j) || atomic_load(&c->stop)) break;
    if (wakeable(c, other)) {
      lock(c);
      bool wake = claim_wake(c, other);
      pthread_mutex_unlock(&c->mu);
      if (wake) pthread_cond_signal(&other->cv);
    }
    if (doze) nanosleep(&(struct timespec){0, (long)DOZE_NS}, NULL);
    else sched_yield();
  }
  /* The compute thread may have left a wake-up to this poller up to here;
   * it sees the poller gone (seq_cst) or its work is found below. */
  atomic_store(&c->poller, 0);
  lock(c);
  if (claim_wake(c, other)) pthread_cond_signal(&other->cv);
}

static bool has_job(Cpu *c, Stream *st, const Job *j) {
  (void)j;
  return atomic_load(&st->count) > 0 || atomic_load(&c->stop);
}

static bool event_reached(Cpu *c, Stream *st, const Job *j) {
  (void)st;
  return atomic_load(&c->done[j->event]) >= j->target;
}

/* Wakes whoever sleeps until an event completes. Called with mu held by a
 * stream thread (a wake-up costs that thread, not compute). */
static void event_done(Cpu *c) {
  if (c->host_waiting) pthread_cond_signal(&c->cv_host);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++)
    if (claim_wake(c, &c->streams[s])) pthread_cond_signal(&c->streams[s].cv);
}

static void *stream_main(void *arg) {
  Stream *st = arg;
  Cpu *c = st->owner;
  int self = (int)(st - c->streams);
  lock(c);
  for (;;) {
    poll_streams(c, st, self, has_job, NULL);
    while (atomic_load(&st->count) == 0 && !atomic_load(&c->stop)) {
      atomic_store(&st->idle, true);
      pthread_cond_wait(&st->cv, &c->mu);
      atomic_store(&st->idle, false);
      atomic_store(&st->blocked, false); /* as marked by mark_blocked, if woken spuriously */
    }
    if (atomic_load(&st->count) == 0) break;
    Job j = st->ring[st->head];
    st->head = (st->head + 1) % RING;
    atomic_fetch_sub(&st->count, 1);
    st->busy = true;
    if (atomic_load(&st->count) == RING - 1 && c->host_waiting) pthread_cond_signal(&c->cv_host); /* ring space */
    if (j.kind == JOB_WAIT) {
      poll_streams(c, st, self, event_reached, &j);
      while (atomic_load(&c->done[j.event]) < j.target && !atomic_load(&c->stop)) {
        atomic_store(&st->wait_event, j.event);
        atomic_store(&st->wait_target, j.target);
        atomic_store(&st->blocked, true);
        pthread_cond_wait(&st->cv, &c->mu);
        atomic_store(&st->blocked, false);
      }
    } else if (j.kind == JOB_FAIL) {
      snprintf(c->async_err, sizeof c->async_err, "%s stream: a copy failed asynchronously (injected fault)",
               self == RT_STREAM_D2H ? "D2H" : "H2D");
    } else if (j.kind == JOB_KERNEL) {
      pthread_mutex_unlock(&c->mu);
      char kerr[128] = ""; /* leaves room in async_err for the prefix */
      const rt_HostOp *op = j.src; /* JOB_KERNEL: a host op */
      int krc = op->fn(op->args, kerr, sizeof kerr);
      lock(c);
      if (krc != 0 && !c->async_err[0])
        snprintf(c->async_err, sizeof c->async_err, "host stream: a host op failed: %s", kerr[0] ? kerr : "no message");
    } else if (j.kind == JOB_HANG) {
      while (!atomic_load(&c->stop)) pthread_cond_wait(&st->cv, &c->mu);
    } else if (j.kind == JOB_RECORD) {
      if (atomic_load(&c->done[j.event]) < j.target) atomic_store(&c->done[j.event], j.target);
      event_done(c);
    } else {
      pthread_mutex_unlock(&c->mu);
      if (j.kind == JOB_COPY) {
        if (c->debug) copy_delay(&st->seed, c->delay_us);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        memcpy(j.dst, j.src, (size_t)j.bytes);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        /* Only this thread writes them; readers wait for the stream to idle. */
        st->copied_bytes += (double)j.bytes;
        st->copy_seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      } else {
        memset(j.dst, j.byte, (size_t)j.bytes);
      }
      lock(c);
    }
    st->busy = false;
    if (atomic_load(&st->count) == 0 && c->host_waiting) pthread_cond_signal(&c->cv_host); /* cpu_sync */
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* The calling thread sleeps until a stream signals it. Called with mu held. */
static void host_wait(Cpu *c) {
  c->host_waiting++;
  pthread_cond_wait(&c->cv_host, &c->mu);
  c->host_waiting--;
}

/* When a wait of the calling thread begun now must end (timeout_ms set). */
static bool deadline_of(const Cpu *c, struct timespec *d) {
  if (!c->timeout_ms) return false;
  clock_gettime(CLOCK_MONOTONIC, d);
  d->tv_sec += c->timeout_ms / 1000;
  d->tv_nsec += (long)(c->timeout_ms % 1000) * 1000000L;
  if (d->tv_nsec >= 1000000000L) d->tv_sec++, d->tv_nsec -= 1000000000L;
  return true;
}

/* host_wait until DEADLINE (when HAS one); false once it passed. */
static bool host_wait_until(Cpu *c, bool has, const struct timespec *deadline) {
  if (!has) {
    host_wait(c);
    return true;
  }
  c->host_waiting++;
  int rc = pthread_cond_timedwait(&c->cv_host, &c->mu, deadline);
  c->host_waiting--;
  return rc != ETIMEDOUT;
}

static int timed_out(const Cpu *c, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "timed out after %u ms waiting for %s (a copy or kernel that never completes)", c->timeout_ms,
           what);
  return RT_ETIMEOUT;
}

/* Every call of the calling thread starts here: a lost device fails it
 * (injected at the call RT_FAULT_LOST counts to). */
static int gone(Cpu *c, char *err, size_t errlen) {
  if (!c->lost && !rt_fault_hit(RT_FAULT_LOST)) return RT_OK;
  c->lost = true;
  snprintf(err, errlen, "device lost (injected fault)");
  return RT_ELOST;
}

/* A failure on a stream that no wait reported yet: reported once, here.
 * Called with mu held. */
static int take_async(Cpu *c, char *err, size_t errlen) {
  if (!c->async_err[0]) return RT_OK;
  snprintf(err, errlen, "%s", c->async_err);
  c->async_err[0] = '\0';
  return RT_EBACKEND;
}

/* Queues a job without waking the stream's thread: cpu_flush does, once for
 * all the jobs of a step (its waits, the copy, its record). */
static int enqueue(Cpu *c, int stream, Job j, char *err, size_t errlen) {
  Stream *st = &c->streams[stream];
  struct timespec deadline;
  bool has = deadline_of(c, &deadline);
  lock(c);
  while (atomic_load(&st->count) == RING) {
    if (claim_wake(c, st)) pthread_cond_signal(&st->cv);
    if (!host_wait_until(c, has, &deadline)) {
      pthread_mutex_unlock(&c->mu);
      return timed_out(c, stream == RT_STREAM_D2H ? "room on the D2H stream" : "room on the H2D stream", err, errlen);
    }
  }
  st->ring[(st->head + atomic_load(&st->count)) % RING] = j;
  atomic_fetch_add(&st->count, 1);
  pthread_mutex_unlock(&c->mu);
  return RT_OK;
}

/* Lets STREAM's thread start on its queued jobs: nothing to do when it is
 * awake or a poller will wake it; else a wake-up, unless its first job
 * waits for an event not yet done (that event's completion wakes it). */
static void cpu_flush(void *ctx, int stream) {
  Cpu *c = ctx;
  Stream *st = &c->streams[stream];
  lock(c);
  mark_blocked(c, st);
  bool wake = (!poller_alive(c) || stream == RT_STREAM_HOST) && claim_wake(c, st);
  pthread_mutex_unlock(&c->mu);
  if (wake) pthread_cond_signal(&st->cv);
}

static void cpu_close(void *ctx) {
  Cpu *c = ctx;
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  atomic_store(&c->stop, true);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++) pthread_cond_signal(&c->streams[s].cv);
  pthread_mutex_unlock(&c->mu);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++)
    if (c->streams[s].started) pthread_join(c->streams[s].thread, NULL);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++) pthread_cond_destroy(&c->streams[s].cv);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_host);
  rt_pool_close(c->pool);
  free(c->dev);
  free(c->host);
  free(c->issued);
  free(c->done);
  free(c);
}

static int cpu_open(void **ctx, int64_t arena_bytes, int64_t host_bytes, int nevents, bool debug, unsigned seed,
                    unsigned delay_us, void **dev, void **host, char *err, size_t errlen) {
  Cpu *c = rt_calloc(1, sizeof *c);
  *ctx = NULL;
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return RT_ENOMEM;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t monotonic;
  pthread_condattr_init(&monotonic);
  pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC); /* timeouts are not moved by clock changes */
  pthread_cond_init(&c->cv_host, &monotonic);
  pthread_condattr_destroy(&monotonic);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++) pthread_cond_init(&c->streams[s].cv, NULL);
  c->debug = debug;
  c->delay_us = delay_us;
  c->dev = xalloc_arena(arena_bytes);
  c->host = xalloc_arena(host_bytes);
  c->issued = rt_calloc((size_t)nevents + 1, sizeof *c->issued);
  c->done = rt_calloc((size_t)nevents + 1, sizeof *c->done);
  if (!c->dev || !c->host || !c->issued || !c->done) {
    cpu_close(c);
    snprintf(err, errlen, "cannot allocate arenas of %lld + %lld bytes", (long long)arena_bytes,
             (long long)host_bytes);
    return RT_ENOMEM;
  }
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++) {
    c->streams[s].owner = c;
    c->streams[s].seed = seed * 2654435761u + (unsigned)s;
    if (rt_fault_hit(RT_FAULT_ALLOC) || pthread_create(&c->streams[s].thread, NULL, stream_main, &c->streams[s]) != 0) {
      cpu_close(c);
      snprintf(err, errlen, "cannot start a stream thread");
      return RT_EBACKEND;
    }
    c->streams[s].started = true;
  }
  *ctx = c;
  *dev = c->dev;
  *host = c->host;
  return RT_OK;
}

static rt_KernelFn cpu_find_kernel(const char *type) {
  return rt_kernel_find(type);
}

int rt_cpu_configure(void *ctx, int threads, bool reference, char *err, size_t errlen) {
  Cpu *c = ctx;
  if (reference) {
    snprintf(c->kernels, sizeof c->kernels, "reference");
    return RT_OK;
  }
  char perr[128] = "";
  if (rt_pool_open(&c->pool, threads, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "kernel threads: %s", perr);
    return threads < 0 ? RT_EINVAL : RT_ENOMEM;
  }
  int n = rt_pool_threads(c->pool);
  snprintf(c->kernels, sizeof c->kernels, "fast, %d thread%s, %s", n, n == 1 ? "" : "s", rt_sgemm_name());
  return RT_OK;
}

const char *rt_cpu_kernels_name(void *ctx) {
  return ((Cpu *)ctx)->kernels;
}

static void *cpu_kernel_ctx(void *ctx) {
  return ((Cpu *)ctx)->pool;
}

static int cpu_launch(void *ctx, rt_KernelFn fn, const rt_KernelArgs *a, bool profile, char *err, size_t errlen) {
  Cpu *c = ctx;
  (void)profile; /* compute is synchronous on the CPU: always exact */
  int rc = gone(c, err, errlen);
  if (rc != RT_OK || c->compute_hung) return rc;
  if (rt_fault_hit(RT_FAULT_HANG)) {
    c->compute_hung = true;
    return RT_OK;
  }
  if (rt_fault_hit(RT_FAULT_ASYNC)) {
    lock(c);
    snprintf(c->async_err, sizeof c->async_err, "compute stream: a kernel failed asynchronously (injected fault)");
    pthread_mutex_unlock(&c->mu);
    return RT_OK;
  }
  char kerr[256] = "";
  rc = fn(a, kerr, sizeof kerr);
  if (rc != 0) {
    snprintf(err, errlen, "kernel failed: %s", kerr[0] ? kerr : "no message");
    return RT_EKERNEL;
  }
  return RT_OK;
}

static int cpu_host_launch(void *ctx, rt_HostOp *op, char *err, size_t errlen) {
  Cpu *c = ctx;
  int rc = gone(c, err, errlen);
  if (rc != RT_OK) return rc;
  return enqueue(c, RT_STREAM_HOST, (Job){.kind = JOB_KERNEL, .src = op}, err, errlen);
}

static int cpu_copy(void *ctx, int stream, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  Cpu *c = ctx;
  int rc = gone(c, err, errlen);
  if (rc != RT_OK) return rc;
  if (stream == RT_STREAM_COMPUTE) {
    if (!c->compute_hung) memcpy(dst, src, (size_t)bytes);
    return RT_OK;
  }
  int kind = rt_fault_hit(RT_FAULT_HANG) ? JOB_HANG : rt_fault_hit(RT_FAULT_ASYNC) ? JOB_FAIL : JOB_COPY;
  return enqueue(c, stream, (Job){.kind = kind, .dst = dst, .src = src, .bytes = bytes}, err, errlen);
}

static int cpu_fill(void *ctx, int stream, void *dst, int byte, int64_t bytes, char *err, size_t errlen) {
  Cpu *c = ctx;
  int rc = gone(c, err, errlen);
  if (rc != RT_OK) return rc;
  if (stream == RT_STREAM_COMPUTE) {
    if (!c->compute_hung) memset(dst, byte, (size_t)bytes);
    return RT_OK;
  }
  return enqueue(c, stream, (Job){.kind = JOB_FILL, .dst = dst, .byte = byte, .bytes = bytes}, err, errlen);
}

static int cpu_record(void *ctx, int stream, int event, char *err, size_t errlen) {
  Cpu *c = ctx;
  int rc = gone(c, err, errlen);
  if (rc != RT_OK) return rc;
  lock(c);
  uint64_t target = ++c->issued[event];
  bool wake[4] = {false, false, false, false};
  if (stream == RT_STREAM_COMPUTE && !c->compute_hung) {
    atomic_store(&c->done[event], target);
    /* The calling thread is the only host waiter: only streams can sleep
     * here. A poller looks at the copy streams only, never the host's. */
    bool polled = poller_alive(c);
    for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++)
      wake[s] = (!polled || s == RT_STREAM_HOST) && claim_wake(c, &c->streams[s]);
  }
  pthread_mutex_unlock(&c->mu);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++)
    if (wake[s]) pthread_cond_signal(&c->streams[s].cv);
  if (stream == RT_STREAM_COMPUTE) return RT_OK;
  return enqueue(c, stream, (Job){.kind = JOB_RECORD, .event = event, .target = target}, err, errlen);
}

/* The compute stream waiting blocks the calling thread until EVENT is
 * done, or the deadline; then a failure on a stream surfaces, as CUDA
 * reports one at the next synchronizing call. */
static int cpu_wait(void *ctx, int stream, int event, char *err, size_t errlen) {
  Cpu *c = ctx;
  int rc = gone(c, err, errlen);
  if (rc != RT_OK) return rc;
  struct timespec deadline;
  bool has = deadline_of(c, &deadline);
  lock(c);
  uint64_t target = c->issued[event];
  if (stream == RT_STREAM_COMPUTE) {
    while (rc == RT_OK && atomic_load(&c->done[event]) < target)
      if (!host_wait_until(c, has, &deadline)) rc = timed_out(c, "a copy stream's event", err, errlen);
    if (rc == RT_OK) rc = take_async(c, err, errlen);
  }
  pthread_mutex_unlock(&c->mu);
  if (stream == RT_STREAM_COMPUTE) return rc;
  return enqueue(c, stream, (Job){.kind = JOB_WAIT, .event = event, .target = target}, err, errlen);
}

static int cpu_sync(void *ctx, char *err, size_t errlen) {
  Cpu *c = ctx;
  int rc = gone(c, err, errlen);
  if (rc != RT_OK) return rc;
  struct timespec deadline;
  bool has = deadline_of(c, &deadline);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST; s++) cpu_flush(c, s);
  lock(c);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_HOST && rc == RT_OK; s++)
    while (rc == RT_OK && (atomic_load(&c->streams[s].count) > 0 || c->streams[s].busy))
      if (!host_wait_until(c, has, &deadline))
        rc = timed_out(c, s == RT_STREAM_D2H ? "the D2H stream" : s == RT_STREAM_H2D ? "the H2D stream" : "the host stream",
                       err, errlen);
  /* A hung kernel: nothing on the compute stream completes again. */
  while (rc == RT_OK && c->compute_hung)
    if (!host_wait_until(c, has, &deadline)) rc = timed_out(c, "the compute stream", err, errlen);
  if (rc == RT_OK) rc = take_async(c, err, errlen);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static int cpu_transfer(void *ctx, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  int rc = gone(ctx, err, errlen);
  if (rc == RT_OK) memcpy(dst, src, (size_t)bytes);
  return rc;
}

static void cpu_set_timeout(void *ctx, unsigned ms) {
  ((Cpu *)ctx)->timeout_ms = ms;
}

static void cpu_copy_totals(void *ctx, int stream, double *bytes, double *seconds) {
  Cpu *c = ctx;
  pthread_mutex_lock(&c->mu);
  *bytes = stream == RT_STREAM_COMPUTE ? 0 : c->streams[stream].copied_bytes;
  *seconds = stream == RT_STREAM_COMPUTE ? 0 : c->streams[stream].copy_seconds;
  pthread_mutex_unlock(&c->mu);
}

const rt_Backend rt_backend_cpu = {
    .name = "cpu",
    .warm_up = false,
    .open = cpu_open,
    .close = cpu_close,
    .find_kernel = cpu_find_kernel,
    .kernel_ctx = cpu_kernel_ctx,
    .launch = cpu_launch,
    .host_launch = cpu_host_launch,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .record = cpu_record,
    .wait = cpu_wait,
    .sync = cpu_sync,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .copy_totals = cpu_copy_totals,
    .flush = cpu_flush,
    .set_timeout = cpu_set_timeout,
};
