/*
 * rt_cpu.c - the CPU backend. Compute runs on the caller's thread; the D2H
 * and H2D streams are each a real thread draining a FIFO of jobs (copy,
 * fill, record an event, wait for an event), so a wait missing from a
 * schedule is a real race, not a modelled one. In debug mode every copy
 * starts after a random delay, which makes such races show up. Job rings
 * and arenas are allocated at open; the step path only enqueues.
 */
#include "rt_backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { JOB_COPY, JOB_FILL, JOB_RECORD, JOB_WAIT };
enum { RING = 4096 };

typedef struct Job {
  int kind, byte, event;
  void *dst;
  const void *src;
  int64_t bytes;
  uint64_t target;
} Job;

typedef struct Stream {
  struct Cpu *owner;
  pthread_t thread;
  pthread_cond_t cv; /* this thread's own: a job queued, an event it waits for done, stop */
  bool started, busy;
  bool idle;         /* asleep until a job is queued */
  bool blocked;      /* asleep until an event completes: in a JOB_WAIT, or idle
                        with a JOB_WAIT for it first in its queue */
  Job ring[RING];
  int head, count;
  unsigned seed;
  double copied_bytes, copy_seconds; /* measured memcpy work, for profiles */
} Stream;

/* Every thread sleeps on a condition variable of its own and is woken only
 * when what it waits for may have happened: on two cores a wake-up that
 * finds nothing to do is a context switch taken from compute. */
typedef struct Cpu {
  pthread_mutex_t mu;
  pthread_cond_t cv_host; /* the calling thread: an event done, a stream idle, ring space */
  int host_waiting;       /* the calling thread is asleep on cv_host */
  bool stop, debug;
  unsigned delay_us;
  unsigned char *dev, *host;
  uint64_t *issued, *done; /* per event: records issued, records completed */
  Stream streams[3];       /* [RT_STREAM_D2H], [RT_STREAM_H2D] are threads */
} Cpu;

static void *xalloc_arena(int64_t bytes) {
  size_t n = (size_t)((bytes + 255) / 256 * 256);
  if (n == 0) n = 256;
  void *p = rt_fault_hit(RT_FAULT_ALLOC) ? NULL : aligned_alloc(256, n);
  if (p) memset(p, 0, n);
  return p;
}

static void copy_delay(unsigned *seed, unsigned fixed_us) {
  /* Mostly short, sometimes long enough to let compute run many ops ahead. */
  unsigned r = (unsigned)rand_r(seed);
  long us = fixed_us ? (long)fixed_us : (r % 8 == 0) ? (long)(r % 2000) : (long)(r % 100);
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Wakes whoever sleeps until an event completes. Called with mu held. A
 * sleeper is marked awake by its waker, so that a second call before it
 * runs does not signal (a syscall) again. */
static void event_done(Cpu *c) {
  if (c->host_waiting) pthread_cond_signal(&c->cv_host);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++)
    if (c->streams[s].blocked) {
      c->streams[s].blocked = c->streams[s].idle = false;
      pthread_cond_signal(&c->streams[s].cv);
    }
}

static void *stream_main(void *arg) {
  Stream *st = arg;
  Cpu *c = st->owner;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (st->count == 0 && !c->stop) {
      st->idle = true;
      pthread_cond_wait(&st->cv, &c->mu);
      st->idle = false;
    }
    if (st->count == 0) break;
    Job j = st->ring[st->head];
    st->head = (st->head + 1) % RING;
    st->count--;
    st->busy = true;
    if (st->count == RING - 1 && c->host_waiting) pthread_cond_signal(&c->cv_host); /* ring space */
    if (j.kind == JOB_WAIT) {
      while (c->done[j.event] < j.target) {
        st->blocked = true;
        pthread_cond_wait(&st->cv, &c->mu);
        st->blocked = false;
      }
    } else if (j.kind == JOB_RECORD) {
      if (c->done[j.event] < j.target) c->done[j.event] = j.target;
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
      pthread_mutex_lock(&c->mu);
    }
    st->busy = false;
    if (st->count == 0 && c->host_waiting) pthread_cond_signal(&c->cv_host); /* cpu_sync */
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

/* Queues a job without waking the stream's thread: cpu_flush does, once for
 * all the jobs of a step (its waits, the copy, its record), as a wake-up is
 * a syscall on the caller's thread, and on two cores often a context switch
 * taken from compute. */
static void enqueue(Cpu *c, int stream, Job j) {
  Stream *st = &c->streams[stream];
  pthread_mutex_lock(&c->mu);
  while (st->count == RING) {
    if (st->idle) {
      st->idle = false;
      pthread_cond_signal(&st->cv);
    }
    host_wait(c);
  }
  st->ring[(st->head + st->count) % RING] = j;
  st->count++;
  pthread_mutex_unlock(&c->mu);
}

/* Wakes STREAM's thread when it sleeps with jobs queued. When the first of
 * them waits for an event not yet done, the thread is left asleep, marked
 * blocked, and the event's completion wakes it (one wake-up, not two). The
 * signal comes after the unlock, so the woken thread does not find the
 * mutex still held and sleep again on it; the thread is marked awake here,
 * so a second flush before it runs signals no second time. */
static void cpu_flush(void *ctx, int stream) {
  Cpu *c = ctx;
  Stream *st = &c->streams[stream];
  pthread_mutex_lock(&c->mu);
  bool wake = st->idle && st->count > 0;
  if (wake) {
    const Job *j = &st->ring[st->head];
    if (j->kind == JOB_WAIT && c->done[j->event] < j->target) st->blocked = true, wake = false;
    else st->idle = false;
  }
  pthread_mutex_unlock(&c->mu);
  if (wake) pthread_cond_signal(&st->cv);
}

static void cpu_close(void *ctx) {
  Cpu *c = ctx;
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++) pthread_cond_signal(&c->streams[s].cv);
  pthread_mutex_unlock(&c->mu);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++)
    if (c->streams[s].started) pthread_join(c->streams[s].thread, NULL);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++) pthread_cond_destroy(&c->streams[s].cv);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_host);
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
  pthread_cond_init(&c->cv_host, NULL);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++) pthread_cond_init(&c->streams[s].cv, NULL);
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
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++) {
    c->streams[s].owner = c;
    c->streams[s].seed = seed * 2654435761u + (unsigned)s;
    if (rt_fault_hit(RT_FAULT_ALLOC) || pthread_create(&c->streams[s].thread, NULL, stream_main, &c->streams[s]) != 0) {
      cpu_close(c);
      snprintf(err, errlen, "cannot start a copy-stream thread");
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

static int cpu_launch(void *ctx, rt_KernelFn fn, const rt_KernelArgs *a, bool profile, char *err, size_t errlen) {
  (void)ctx;
  (void)profile; /* compute is synchronous on the CPU: always exact */
  char kerr[256] = "";
  int rc = fn(a, kerr, sizeof kerr);
  if (rc != 0) {
    snprintf(err, errlen, "kernel failed: %s", kerr[0] ? kerr : "no message");
    return RT_EKERNEL;
  }
  return RT_OK;
}

static int cpu_copy(void *ctx, int stream, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  if (stream == RT_STREAM_COMPUTE) memcpy(dst, src, (size_t)bytes);
  else enqueue(ctx, stream, (Job){.kind = JOB_COPY, .dst = dst, .src = src, .bytes = bytes});
  return RT_OK;
}

static int cpu_fill(void *ctx, int stream, void *dst, int byte, int64_t bytes, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  if (stream == RT_STREAM_COMPUTE) memset(dst, byte, (size_t)bytes);
  else enqueue(ctx, stream, (Job){.kind = JOB_FILL, .dst = dst, .byte = byte, .bytes = bytes});
  return RT_OK;
}

static int cpu_record(void *ctx, int stream, int event, char *err, size_t errlen) {
  Cpu *c = ctx;
  (void)err;
  (void)errlen;
  pthread_mutex_lock(&c->mu);
  uint64_t target = ++c->issued[event];
  bool wake[3] = {false, false, false};
  if (stream == RT_STREAM_COMPUTE) {
    c->done[event] = target;
    /* The calling thread is the only host waiter: only streams can sleep here. */
    for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++) {
      wake[s] = c->streams[s].blocked;
      c->streams[s].blocked = false;
    }
  }
  pthread_mutex_unlock(&c->mu);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++)
    if (wake[s]) pthread_cond_signal(&c->streams[s].cv);
  if (stream != RT_STREAM_COMPUTE) enqueue(c, stream, (Job){.kind = JOB_RECORD, .event = event, .target = target});
  return RT_OK;
}

static int cpu_wait(void *ctx, int stream, int event, char *err, size_t errlen) {
  Cpu *c = ctx;
  (void)err;
  (void)errlen;
  pthread_mutex_lock(&c->mu);
  uint64_t target = c->issued[event];
  if (stream == RT_STREAM_COMPUTE)
    while (c->done[event] < target) host_wait(c);
  pthread_mutex_unlock(&c->mu);
  if (stream != RT_STREAM_COMPUTE) enqueue(c, stream, (Job){.kind = JOB_WAIT, .event = event, .target = target});
  return RT_OK;
}

static int cpu_sync(void *ctx, char *err, size_t errlen) {
  Cpu *c = ctx;
  (void)err;
  (void)errlen;
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++) cpu_flush(c, s);
  pthread_mutex_lock(&c->mu);
  for (int s = RT_STREAM_D2H; s <= RT_STREAM_H2D; s++)
    while (c->streams[s].count > 0 || c->streams[s].busy) host_wait(c);
  pthread_mutex_unlock(&c->mu);
  return RT_OK;
}

static int cpu_transfer(void *ctx, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  (void)ctx;
  (void)err;
  (void)errlen;
  memcpy(dst, src, (size_t)bytes);
  return RT_OK;
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
    .kernel_ctx = NULL,
    .launch = cpu_launch,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .record = cpu_record,
    .wait = cpu_wait,
    .sync = cpu_sync,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .copy_totals = cpu_copy_totals,
    .flush = cpu_flush,
};
