/*
 * rt.c - libration's executor: runs an emitted schedule's steps over a
 * backend (rt_backend.h). Everything a step needs (kernel pointers, views,
 * argument structs, occupancy lists) is built once at rt_open, so rt_step
 * allocates nothing. It tracks buffer occupancy as the steps run: the live
 * bytes high-water mark is measured, not copied from the plan, and in debug
 * mode every read is checked against that occupancy and every dying buffer
 * is filled with NaN so that a schedule bug shows as a wrong result.
 */
#define _GNU_SOURCE /* O_TMPFILE, pipe2 */
#include "rt_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ST_EMPTY, ST_PENDING, ST_VALID, ST_DEAD }; /* debug: a buffer's state within a step */
/* Profiles keep the times of the last SAMPLES steps (the first, cold one
 * left out). An op's time is its mean over the central steps, those whose
 * step time lies between the quartiles: a load spike that slows a few whole
 * steps is left out, while the preemptions that every step meets on a
 * loaded machine (a few ms here and there, in some op each time) stay in,
 * so the ops add up to a typical step; per-op medians would drop those. */
enum { SAMPLES = 64 };
enum { CS_D2H, CS_H2D, CS_SHARE, CS_KINDS }; /* per-step copy figures */

/* What one pass over the steps measured on the calling thread. */
typedef struct StepTimes {
  double kernel;  /* inside kernels */
  double wait;    /* blocked on copy-stream events */
  double issue;   /* issuing copy-stream steps and recording events they wait
                     for (enqueueing; on two cores the copy thread it wakes
                     may take the caller's core meanwhile) */
  int opt_ran;    /* optimizer ops run */
} StepTimes;

struct rt_Session {
  const rt_Schedule *sc;
  const rt_Backend *be;
  void *ctx;
  unsigned char *dev, *host;
  bool debug, profile;
  rt_KernelFn *fn;     /* per op */
  rt_Attr *attrs;      /* flat, as sc->attrs */
  rt_View *views;      /* flat, as sc->step_io */
  rt_KernelArgs *args; /* per step (compute steps) */
  rt_HostOp *host_ops; /* per step (host_compute steps) */
  int *first, *last;   /* per buffer: occupancy [first, last] in steps */
  int *born_start, *born, *die_start, *die; /* per step, CSR */
  int *home;           /* per tensor: the buffer rt_read/rt_write use, or -1 */
  int *grads, ngrads;  /* grads' homes zeroed at the start of every step (those without a zero step) */
  int *resident;       /* per buffer: occupied for the whole step (a home, but a zeroed grad's) */
  int *persist;        /* per buffer: readable after the step (resident or a graph output) */
  int *op_step;        /* per op: its non-recompute step */
  double *op_samples; /* per op: SAMPLES kernel seconds of the steps after the first (ring) */
  double step_samples[SAMPLES]; /* the same steps' wall-clock seconds */
  double *op_first;    /* per op: kernel seconds in the first step (cold caches) */
  double copy_samples[CS_KINDS][SAMPLES]; /* per step after the first: d2h and h2d GB/s, copy
                                             share (issue seconds / copy seconds); -1 no copies */
  double copied[3], copy_sec[3]; /* per stream: the backend's totals at the last step's end */
  unsigned char *state;
  /* RT_OPEN_ATOMIC: the resident buffers the optimizer ops write, copied to
   * host memory before the first of them runs in each step. */
  int opt_first;       /* step index of the first optimizer-phase compute step, or -1 */
  int *snap, nsnap;    /* buffer ids */
  unsigned char *snap_data;
  bool snap_taken;
  int64_t live, hwm, nrun;
  int64_t host_live, host_hwm; /* the same for the host arena */
  double kernel_cpu;   /* this step: the calling thread's CPU seconds inside kernels */
  rt_Stats stats; /* the last step's times */
  char err[512];
  int dead;            /* RT_ELOST or RT_ETIMEOUT once the backend said so, else 0 */
  char dead_why[512];  /* the message that killed the session */
};

static int prepare_snapshot(rt_Session *s, bool atomic);

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: what the executor itself costs, whatever
 * else (copy threads, other processes) competes for the cores. */
static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(rt_Session *s, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(rt_Session *s, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  /* One line, whatever bytes the schedule's names hold. */
  for (char *c = s->err; *c; c++)
    if ((unsigned char)*c < 32 || *c == 127) *c = '?';
  return status;
}

static const char *const dtype_names[] = {"f32", "bf16", "f16", "i32", "i64", "u8"};

/* "f32 [2, 3]" into OUT; a dtype outside the table by its number. */
static void describe(char *out, size_t n, int dtype, int rank, const int64_t *shape) {
  int at = dtype >= RT_F32 && dtype <= RT_U8 ? snprintf(out, n, "%s [", dtype_names[dtype])
                                              : snprintf(out, n, "dtype %d [", dtype);
  for (int d = 0; d < rank && d < RT_MAX_RANK && shape && at > 0 && (size_t)at < n; d++)
    at += snprintf(out + at, n - (size_t)at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at > 0 && (size_t)at < n) snprintf(out + at, n - (size_t)at, rank > RT_MAX_RANK || rank < 0 ? "...]" : "]");
}

/* A backend status RC: a lost device or a wait past the watchdog leaves
 * work that may still run on the arenas, so the session is dead from then
 * on (every call but rt_close fails the same way). */
static int backend_failed(rt_Session *s, int rc) {
  if ((rc == RT_ELOST || rc == RT_ETIMEOUT) && !s->dead) {
    s->dead = rc;
    snprintf(s->dead_why, sizeof s->dead_why, "%.*s; the session can only be closed", (int)sizeof s->dead_why - 40,
             s->err);
    snprintf(s->err, sizeof s->err, "%s", s->dead_why);
  }
  return rc;
}

const char *rt_status_name(int status) {
  switch (status) {
  case RT_OK: return "ok";
  case RT_EINVAL: return "invalid argument";
  case RT_ENOMEM: return "out of memory";
  case RT_EBACKEND: return "backend failure";
  case RT_EKERNEL: return "kernel failure";
  case RT_ESCHEDULE: return "malformed schedule";
  case RT_EDEBUG: return "debug check failed";
  case RT_EUNAVAIL: return "backend unavailable";
  case RT_ELOST: return "device lost";
  case RT_ETIMEOUT: return "timed out";
  case RT_ESTALE: return "stale schedule";
  }
  return "unknown status";
}

const char *rt_error(const rt_Session *s) {
  return s ? s->err : "no session";
}

static const char *buffer_name(const rt_Session *s, int b) {
  const rt_SchedBuffer *bf = &s->sc->buffers[b];
  if (bf->tensor >= 0) return s->sc->tensors[bf->tensor].name;
  return "(workspace)";
}

/* ------------------------------------------------------------ validation */

/* [start, start + n) lies inside a table of LEN entries (int64: the sum of
 * two int32 fields cannot wrap). */
static bool span_ok(int64_t start, int64_t n, int64_t len) {
  return start >= 0 && n >= 0 && start + n <= len;
}

static const char *or_unnamed(const char *name) {
  return name ? name : "?";
}

static const int rt_dtype_bytes[] = {4, 2, 2, 4, 8, 1}; /* RT_F32 .. RT_U8 */

/* The schedule's header: ABI first (an older struct is shorter: nothing
 * past abi is read before it matches), then the strings, every count and
 * table length, every table present, arenas in range. */
static int check_header(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  if (c->abi != RATION_SCHED_ABI)
    return fail(s, RT_ESCHEDULE, "schedule ABI %d, this libration reads %d: plan it again with ration %s",
                (int)c->abi, RATION_SCHED_ABI, RATION_VERSION);
  const char *name = or_unnamed(c->name);
  if (!c->name || !c->ration_version || !c->graph_name || !c->graph_sha256 || !c->device || !c->strategy ||
      !c->solver_status)
    return fail(s, RT_ESCHEDULE, "schedule %s: a provenance string is missing", name);
  /* Each event marks a step: no more events than steps. */
  if (c->ntensors < 0 || c->nbuffers < 0 || c->nops < 0 || c->nsteps < 0 || c->nevents < 0 || c->nop_io < 0 ||
      c->nattrs < 0 || c->nstep_io < 0 || c->nwaits < 0 || c->nevents > c->nsteps)
    return fail(s, RT_ESCHEDULE, "schedule %s: a negative count or table length, or more events than steps", name);
  if (!c->tensors || !c->buffers || !c->ops || !c->steps || !c->op_io || !c->step_io || !c->waits || !c->attrs)
    return fail(s, RT_ESCHEDULE, "schedule %s: missing tables", name);
  /* Arena sizes are rounded up to the alignment, so they stay well inside int64. */
  if (c->arena_bytes < 0 || c->host_bytes < 0 || c->arena_bytes > (INT64_C(1) << 60) || c->host_bytes > (INT64_C(1) << 60))
    return fail(s, RT_ESCHEDULE, "schedule %s: arena of %lld bytes or host arena of %lld bytes out of range", name,
                (long long)c->arena_bytes, (long long)c->host_bytes);
  return RT_OK;
}

/* A tensor's bytes are its shape's elements times its dtype's size: the
 * kernels size their loops by the shape, the buffers by the bytes. */
static int check_tensors(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  for (int i = 0; i < c->ntensors; i++) {
    const rt_SchedTensor *t = &c->tensors[i];
    if (!t->name || t->dtype < RT_F32 || t->dtype > RT_U8 || t->kind < 0 || t->kind > 4 || t->rank < 0 ||
        t->rank > RT_MAX_RANK || (t->is_output != 0 && t->is_output != 1))
      return fail(s, RT_ESCHEDULE, "tensor %d: bad name, dtype, kind, rank or output flag", i);
    int64_t bytes = rt_dtype_bytes[t->dtype];
    for (int d = 0; d < t->rank; d++)
      if (t->shape[d] < 1 || t->shape[d] > (INT64_C(1) << 60) / bytes)
        return fail(s, RT_ESCHEDULE, "tensor %d (%s): dimension %d is %lld", i, t->name, d, (long long)t->shape[d]);
      else
        bytes *= t->shape[d];
    for (int d = t->rank; d < RT_MAX_RANK; d++)
      if (t->shape[d] != 0) return fail(s, RT_ESCHEDULE, "tensor %d (%s): a dimension past its rank", i, t->name);
    if (bytes != t->bytes)
      return fail(s, RT_ESCHEDULE, "tensor %d (%s): %lld bytes, its shape and dtype make %lld", i, t->name,
                  (long long)t->bytes, (long long)bytes);
  }
  return RT_OK;
}

/* Exactly one home per resident tensor (input, param, grad, optimizer state). */
static int check_homes(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  unsigned char *n = rt_calloc((size_t)c->ntensors + 1, 1);
  if (!n) return fail(s, RT_ENOMEM, "out of memory");
  int rc = RT_OK;
  for (int i = 0; i < c->nbuffers && rc == RT_OK; i++)
    if (c->buffers[i].home && n[c->buffers[i].tensor]++)
      rc = fail(s, RT_ESCHEDULE, "buffer %d: a second home for tensor %s", i, c->tensors[c->buffers[i].tensor].name);
  for (int t = 0; t < c->ntensors && rc == RT_OK; t++)
    if (c->tensors[t].kind != 4 && !n[t]) rc = fail(s, RT_ESCHEDULE, "tensor %d (%s) has no home buffer", t, c->tensors[t].name);
  free(n);
  return rc;
}

static int check_buffers(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  for (int i = 0; i < c->nbuffers; i++) {
    const rt_SchedBuffer *b = &c->buffers[i];
    int64_t cap = b->space == RT_SPACE_HOST ? c->host_bytes : c->arena_bytes;
    /* A buffer holds a tensor or is an op's workspace, never both. */
    if (b->tensor < -1 || b->tensor >= c->ntensors || b->workspace_of < -1 || b->workspace_of >= c->nops ||
        (b->tensor >= 0) == (b->workspace_of >= 0) ||
        (b->space != RT_SPACE_DEVICE && b->space != RT_SPACE_HOST) || b->bytes < 0 || b->offset < 0 ||
        b->offset > cap - b->bytes)
      return fail(s, RT_ESCHEDULE, "buffer %d: bad tensor, workspace op, space or byte range", i);
    if (b->tensor >= 0 && b->bytes != c->tensors[b->tensor].bytes)
      return fail(s, RT_ESCHEDULE, "buffer %d: %lld bytes for tensor %s of %lld", i, (long long)b->bytes,
                  c->tensors[b->tensor].name, (long long)c->tensors[b->tensor].bytes);
    /* A home holds a resident tensor (not an activation); on the host
     * not an input's (the trainer writes inputs to the device; a grad's
     * home is on the host where a host op runs its optimizer). */
    int kind = b->tensor >= 0 ? c->tensors[b->tensor].kind : 4;
    if ((b->home != 0 && b->home != 1) || (b->home && kind == 4) ||
        (b->home && b->space == RT_SPACE_HOST && kind == 0))
      return fail(s, RT_ESCHEDULE, "buffer %d: bad home flag", i);
  }
  return check_homes(s);
}

static int check_ops(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  for (int i = 0; i < c->nops; i++) {
    const rt_SchedOp *o = &c->ops[i];
    if (!o->name || !o->type || o->phase < 0 || o->phase > 2 || o->workspace < 0 ||
        !span_ok(o->io0, (int64_t)o->nin + o->nout, c->nop_io) || o->nin < 0 || o->nout < 0 ||
        !span_ok(o->attr0, o->nattr, c->nattrs))
      return fail(s, RT_ESCHEDULE, "op %d (%s): bad phase, workspace, operands or attributes", i,
                  or_unnamed(o->name));
    for (int k = 0; k < o->nin + o->nout; k++)
      if (c->op_io[o->io0 + k] < 0 || c->op_io[o->io0 + k] >= c->ntensors)
        return fail(s, RT_ESCHEDULE, "op %s: bad tensor id", o->name);
    for (int k = 0; k < o->nattr; k++)
      if (!c->attrs[o->attr0 + k].key) return fail(s, RT_ESCHEDULE, "op %s: attribute %d has no key", o->name, k);
  }
  return RT_OK;
}

/* Buffer B exists and lies in SPACE. */
static bool buffer_in(const rt_Schedule *c, int b, int space) {
  return b >= 0 && b < c->nbuffers && c->buffers[b].space == space;
}

/* A compute step runs on the compute stream over device buffers, a
 * host_compute step on the host stream over host buffers, without
 * workspace or recompute. */
static int check_compute_step(rt_Session *s, int i) {
  const rt_Schedule *c = s->sc;
  const rt_SchedStep *st = &c->steps[i];
  bool host = st->kind == RT_STEP_HOST_COMPUTE;
  if (st->op < 0 || st->op >= c->nops || st->stream != (host ? RT_STREAM_HOST : RT_STREAM_COMPUTE) ||
      (st->recompute != 0 && (host || st->recompute != 1)) || st->from != -1 || st->to != -1)
    return fail(s, RT_ESCHEDULE, "step %d: bad %s step", i, host ? "host_compute" : "compute");
  const rt_SchedOp *o = &c->ops[st->op];
  if (!span_ok(st->io0, (int64_t)o->nin + o->nout, c->nstep_io))
    return fail(s, RT_ESCHEDULE, "step %d (%s): operands outside step_io", i, o->name);
  for (int k = 0; k < o->nin + o->nout; k++) {
    int b = c->step_io[st->io0 + k];
    if (!buffer_in(c, b, host ? RT_SPACE_HOST : RT_SPACE_DEVICE) || c->buffers[b].tensor != c->op_io[o->io0 + k])
      return fail(s, RT_ESCHEDULE, "step %d (%s): operand %d is not a %s buffer of %s", i, o->name, k,
                  host ? "host" : "device", c->tensors[c->op_io[o->io0 + k]].name);
  }
  if (host && st->workspace != -1) return fail(s, RT_ESCHEDULE, "step %d (%s): a host op has no workspace", i, o->name);
  if (st->workspace == -1 ? o->workspace > 0
                          : !buffer_in(c, st->workspace, RT_SPACE_DEVICE) ||
                                c->buffers[st->workspace].workspace_of != st->op ||
                                c->buffers[st->workspace].bytes < o->workspace)
    return fail(s, RT_ESCHEDULE, "step %d (%s): bad workspace buffer", i, o->name);
  return RT_OK;
}

static int check_steps(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  for (int i = 0; i < c->nsteps; i++) {
    const rt_SchedStep *st = &c->steps[i];
    if (st->stream < RT_STREAM_COMPUTE || st->stream > RT_STREAM_HOST || !span_ok(st->wait0, st->nwait, c->nwaits) ||
        st->event < -1 || st->event >= c->nevents)
      return fail(s, RT_ESCHEDULE, "step %d: bad stream, waits or event", i);
    /* Each kind on its stream (as the emitter's sync table puts it). */
    static const int stream_of[] = {RT_STREAM_COMPUTE, RT_STREAM_D2H,     RT_STREAM_COMPUTE, RT_STREAM_H2D,
                                    RT_STREAM_COMPUTE, RT_STREAM_COMPUTE, RT_STREAM_HOST,    RT_STREAM_COMPUTE};
    if (st->kind >= RT_STEP_COMPUTE && st->kind <= RT_STEP_HOST_WAIT && st->stream != stream_of[st->kind])
      return fail(s, RT_ESCHEDULE, "step %d: kind %d on stream %d", i, (int)st->kind, (int)st->stream);
    for (int k = 0; k < st->nwait; k++) {
      int w = c->waits[st->wait0 + k];
      if (w < 0 || w >= i || c->steps[w].event < 0)
        return fail(s, RT_ESCHEDULE, "step %d: waits for step %d, which is not an earlier recorded step", i, w);
    }
    int rc = RT_OK;
    /* What only compute steps use is -1 (0) on the others (a host wait
     * names its op). */
    bool runs = st->kind == RT_STEP_COMPUTE || st->kind == RT_STEP_HOST_COMPUTE;
    if (!runs && ((st->kind != RT_STEP_HOST_WAIT && st->op != -1) || st->recompute != 0 || st->io0 != -1 ||
                  st->workspace != -1))
      return fail(s, RT_ESCHEDULE, "step %d: a copy or wait step with compute fields", i);
    switch (st->kind) {
    case RT_STEP_COMPUTE:
    case RT_STEP_HOST_COMPUTE: rc = check_compute_step(s, i); break;
    case RT_STEP_HOST_WAIT: {
      /* It waits for the host_compute step of its op. */
      bool waits_op = false;
      for (int k = 0; k < st->nwait; k++) {
        const rt_SchedStep *w = &c->steps[c->waits[st->wait0 + k]];
        waits_op |= w->kind == RT_STEP_HOST_COMPUTE && w->op == st->op;
      }
      if (st->op < 0 || st->op >= c->nops || !waits_op || st->from != -1 || st->to != -1)
        rc = fail(s, RT_ESCHEDULE, "step %d: bad host_compute_wait", i);
      break;
    }
    case RT_STEP_OFFLOAD:
    case RT_STEP_PREFETCH: {
      bool off = st->kind == RT_STEP_OFFLOAD;
      int src = off ? RT_SPACE_DEVICE : RT_SPACE_HOST, dst = off ? RT_SPACE_HOST : RT_SPACE_DEVICE;
      if (!buffer_in(c, st->from, src) || !buffer_in(c, st->to, dst) ||
          c->buffers[st->from].bytes != c->buffers[st->to].bytes)
        rc = fail(s, RT_ESCHEDULE, "step %d: bad copy", i);
      break;
    }
    case RT_STEP_OFFLOAD_WAIT:
      if (st->from < 0 || st->from >= c->nbuffers || st->to < -1 || st->to >= c->nbuffers)
        rc = fail(s, RT_ESCHEDULE, "step %d: bad offload_wait", i);
      break;
    case RT_STEP_PREFETCH_WAIT:
      if (st->to < 0 || st->to >= c->nbuffers || st->from < -1 || st->from >= c->nbuffers)
        rc = fail(s, RT_ESCHEDULE, "step %d: bad prefetch_wait", i);
      break;
    case RT_STEP_ZERO: /* a grad's device buffer: its home, or the host optimizer's accumulator */
      if (st->stream != RT_STREAM_COMPUTE || st->from != -1 || st->to < 0 || st->to >= c->nbuffers ||
          c->buffers[st->to].space != RT_SPACE_DEVICE || c->buffers[st->to].tensor < 0 ||
          c->tensors[c->buffers[st->to].tensor].kind != 2)
        rc = fail(s, RT_ESCHEDULE, "step %d: bad zero step (only a grad's device buffer is zeroed)", i);
      break;
    default: rc = fail(s, RT_ESCHEDULE, "step %d: unknown kind %d", i, (int)st->kind);
    }
    if (rc != RT_OK) return rc;
  }
  return RT_OK;
}

/* Every id and count in the tables is checked once here, against the
 * lengths the schedule gives its tables, so rt_step can trust them. */
static int validate(rt_Session *s) {
  int rc = check_header(s);
  if (rc == RT_OK) rc = check_tensors(s);
  if (rc == RT_OK) rc = check_buffers(s);
  if (rc == RT_OK) rc = check_ops(s);
  if (rc == RT_OK) rc = check_steps(s);
  return rc;
}

/* With rt_Options.graph: the schedule was planned from that file, by this
 * libration's ration version. */
static int check_fresh(rt_Session *s, const char *graph) {
  const rt_Schedule *c = s->sc;
  if (!graph) return RT_OK;
  if (strcmp(c->ration_version, RATION_VERSION))
    return fail(s, RT_ESTALE, "schedule %s was emitted by ration %.40s, this libration is %s: plan it again",
                c->name, c->ration_version, RATION_VERSION);
  char hex[65];
  if (rt_sha256_file(graph, hex) != 0)
    return fail(s, RT_EINVAL, "%s: cannot read the expected graph: %s", graph, strerror(errno));
  if (strcmp(hex, c->graph_sha256))
    return fail(s, RT_ESTALE, "schedule %s was planned from graph sha256 %.64s, %s has %s: plan it again", c->name,
                c->graph_sha256, graph, hex);
  return RT_OK;
}

static void touch(rt_Session *s, int b, int step, bool write) {
  if (write && s->first[b] < 0) s->first[b] = step;
  if (step > s->last[b]) s->last[b] = step;
}

/* Occupancy as the plan semantics define it (and sim_occupancy computes):
 * from a buffer's first write to its last use; inputs, params, grads and
 * optimizer state for the whole step, except a grad with a zero step: from
 * there; a graph output's first residency to the step's end. */
static int derive_occupancy(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  int nb = c->nbuffers, ns = c->nsteps;
  for (int b = 0; b < nb; b++) s->first[b] = s->last[b] = -1;
  for (int i = 0; i < ns; i++) {
    const rt_SchedStep *st = &c->steps[i];
    if (st->kind == RT_STEP_HOST_WAIT) continue;
    if (st->kind == RT_STEP_COMPUTE || st->kind == RT_STEP_HOST_COMPUTE) {
      const rt_SchedOp *o = &c->ops[st->op];
      for (int k = 0; k < o->nin + o->nout; k++) touch(s, c->step_io[st->io0 + k], i, k >= o->nin);
      if (st->workspace >= 0) touch(s, st->workspace, i, true);
      /* A graph output's first residency is read by the trainer after the step. */
      for (int k = 0; k < o->nout && !st->recompute && st->kind == RT_STEP_COMPUTE; k++) {
        int b = c->step_io[st->io0 + o->nin + k];
        if (c->tensors[c->buffers[b].tensor].is_output) s->persist[b] = 1;
      }
    } else if (st->kind == RT_STEP_OFFLOAD || st->kind == RT_STEP_PREFETCH) {
      touch(s, st->from, i, false);
      touch(s, st->to, i, true);
    } else if (st->kind == RT_STEP_ZERO) {
      if (s->last[st->to] >= 0)
        return fail(s, RT_ESCHEDULE, "step %d: zeroes buffer %d (%s) after its first use", i, st->to,
                    buffer_name(s, st->to));
      touch(s, st->to, i, true);
    } else {
      touch(s, st->kind == RT_STEP_OFFLOAD_WAIT ? st->from : st->to, i, false);
    }
  }
  for (int t = 0; t < c->ntensors; t++) s->home[t] = -1;
  for (int b = 0; b < nb; b++) {
    const rt_SchedBuffer *bf = &c->buffers[b];
    if (bf->home) { /* a resident tensor's, on the device or the host */
      bool zeroed = s->first[b] >= 0 && c->steps[s->first[b]].kind == RT_STEP_ZERO;
      s->resident[b] = !zeroed;
      s->persist[b] = 1;
      if (!zeroed) s->first[b] = 0;
      s->last[b] = ns - 1;
      s->home[bf->tensor] = b;
    } else if (bf->tensor >= 0 && bf->space == RT_SPACE_DEVICE && c->tensors[bf->tensor].kind == 4 && s->persist[b]) {
      s->last[b] = ns - 1;
      s->home[bf->tensor] = b;
    }
  }
  for (int b = 0; b < nb; b++)
    if (s->first[b] < 0 && s->last[b] >= 0)
      return fail(s, RT_ESCHEDULE, "buffer %d (%s) is read at step %d but never written", b, buffer_name(s, b),
                  s->last[b]);
  /* CSR lists of births and deaths per step. */
  int nborn = 0, ndie = 0;
  for (int b = 0; b < nb; b++)
    if (s->first[b] >= 0) nborn++, ndie++;
  s->born = rt_calloc((size_t)nborn + 1, sizeof *s->born);
  s->die = rt_calloc((size_t)ndie + 1, sizeof *s->die);
  if (!s->born || !s->die) return fail(s, RT_ENOMEM, "out of memory");
  for (int b = 0; b < nb; b++)
    if (s->first[b] >= 0) s->born_start[s->first[b] + 1]++, s->die_start[s->last[b] + 1]++;
  for (int i = 0; i < ns; i++) s->born_start[i + 1] += s->born_start[i], s->die_start[i + 1] += s->die_start[i];
  int *fb = rt_calloc((size_t)ns + 1, sizeof *fb), *fd = rt_calloc((size_t)ns + 1, sizeof *fd);
  if (!fb || !fd) {
    free(fb);
    free(fd);
    return fail(s, RT_ENOMEM, "out of memory");
  }
  for (int b = 0; b < nb; b++)
    if (s->first[b] >= 0) {
      s->born[s->born_start[s->first[b]] + fb[s->first[b]]++] = b;
      s->die[s->die_start[s->last[b]] + fd[s->last[b]]++] = b;
    }
  free(fb);
  free(fd);
  return RT_OK;
}

static int build_steps(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  int nattr = 0, nio = 0;
  for (int o = 0; o < c->nops; o++)
    if (c->ops[o].attr0 + c->ops[o].nattr > nattr) nattr = c->ops[o].attr0 + c->ops[o].nattr;
  for (int i = 0; i < c->nsteps; i++)
    if (c->steps[i].kind == RT_STEP_COMPUTE || c->steps[i].kind == RT_STEP_HOST_COMPUTE) {
      const rt_SchedOp *o = &c->ops[c->steps[i].op];
      if (c->steps[i].io0 + o->nin + o->nout > nio) nio = c->steps[i].io0 + o->nin + o->nout;
    }
  s->attrs = rt_calloc((size_t)nattr + 1, sizeof *s->attrs);
  s->views = rt_calloc((size_t)nio + 1, sizeof *s->views);
  if (!s->attrs || !s->views) return fail(s, RT_ENOMEM, "out of memory");
  for (int i = 0; i < nattr; i++) {
    s->attrs[i].key = c->attrs[i].key;
    s->attrs[i].num = c->attrs[i].num;
  }
  for (int o = 0; o < c->nops; o++) {
    s->op_step[o] = -1;
    s->fn[o] = s->be->find_kernel(c->ops[o].type);
  }
  /* A host op runs the CPU kernel of its type, whatever the backend. */
  for (int i = 0; i < c->nsteps; i++)
    if (c->steps[i].kind == RT_STEP_HOST_COMPUTE) s->fn[c->steps[i].op] = rt_kernel_find(c->ops[c->steps[i].op].type);
  for (int i = 0; i < c->nsteps; i++) {
    const rt_SchedStep *st = &c->steps[i];
    bool host = st->kind == RT_STEP_HOST_COMPUTE;
    if (st->kind != RT_STEP_COMPUTE && !host) continue;
    const rt_SchedOp *o = &c->ops[st->op];
    if (!s->fn[st->op])
      return fail(s, RT_EKERNEL, "no %s kernel for op type '%s' (op %s)", s->be->name, o->type, o->name);
    if (!st->recompute) s->op_step[st->op] = i;
    for (int k = 0; k < o->nin + o->nout; k++) {
      int b = c->step_io[st->io0 + k];
      const rt_SchedTensor *t = &c->tensors[c->buffers[b].tensor];
      rt_View *v = &s->views[st->io0 + k];
      v->data = (host ? s->host : s->dev) + c->buffers[b].offset;
      v->dtype = (rt_DType)t->dtype;
      v->rank = t->rank;
      v->numel = 1;
      for (int d = 0; d < t->rank; d++) v->shape[d] = t->shape[d], v->numel *= t->shape[d];
    }
    rt_KernelArgs *a = &s->args[i];
    a->in = &s->views[st->io0];
    a->nin = o->nin;
    a->out = &s->views[st->io0 + o->nin];
    a->nout = o->nout;
    if (st->workspace >= 0) {
      a->workspace = s->dev + c->buffers[st->workspace].offset;
      a->workspace_bytes = c->buffers[st->workspace].bytes;
    }
    a->attrs = &s->attrs[o->attr0];
    a->nattrs = o->nattr;
    s->host_ops[i] = (rt_HostOp){s->fn[st->op], a, NULL};
    /* A host op runs the reference kernel beside compute's threads. */
    a->backend_ctx = s->be->kernel_ctx && !host ? s->be->kernel_ctx(s->ctx) : NULL;
  }
  s->ngrads = 0;
  for (int t = 0; t < c->ntensors; t++)
    if (c->tensors[t].kind == 2 && s->home[t] >= 0 && s->resident[s->home[t]] &&
        c->buffers[s->home[t]].space == RT_SPACE_DEVICE) /* a host optimizer's home is the copy's */
      s->grads[s->ngrads++] = s->home[t];
  return RT_OK;
}

static int run_steps(rt_Session *s, StepTimes *tm);

/* The backend's own bytes, where the plan put them (a device buffer of the
 * tensor RT_RUNTIME_TENSOR); without that tensor the backend gets none. */
static int give_runtime_bytes(rt_Session *s) {
  int t = rt_tensor_index(s, RT_RUNTIME_TENSOR), b = t >= 0 ? s->home[t] : -1;
  if (b < 0 || !s->be->set_runtime) return RT_OK;
  const rt_SchedBuffer *bf = &s->sc->buffers[b]; /* an input's home is a device buffer */
  return s->be->set_runtime(s->ctx, s->dev + bf->offset, bf->bytes, s->err, sizeof s->err);
}

static void reset_states(rt_Session *s) {
  for (int b = 0; b < s->sc->nbuffers; b++) s->state[b] = s->resident[b] ? ST_VALID : ST_EMPTY;
  for (int g = 0; g < s->ngrads; g++) s->state[s->grads[g]] = ST_VALID; /* zeroed at the step's start */
  s->live = s->host_live = 0;
}

/* Runs the whole schedule once on zeroed arenas (every kernel is defined on
 * zeros), then zeroes them again: kernels that pick an algorithm per shape
 * on first use (cuBLASLt matmuls) pick it here, at open, not on the first
 * training step. */
static int warm_up(rt_Session *s) {
  const rt_Schedule *c = s->sc;
  char serr[256];
  int rc = RT_OK;
  for (int pass = 0; pass < 2 && rc == RT_OK; pass++) {
    rc = s->be->fill(s->ctx, RT_STREAM_COMPUTE, s->dev, 0, c->arena_bytes, s->err, sizeof s->err);
    if (rc == RT_OK) rc = s->be->fill(s->ctx, RT_STREAM_COMPUTE, s->host, 0, c->host_bytes, s->err, sizeof s->err);
    if (rc == RT_OK && pass == 0) {
      StepTimes tm = {0, 0, 0, 0};
      for (int i = 0; i < c->nsteps; i++) s->args[i].step = 1;
      reset_states(s);
      rc = run_steps(s, &tm);
    }
    int src = s->be->sync(s->ctx, serr, sizeof serr);
    if (rc == RT_OK && src != RT_OK) rc = fail(s, src, "%s", serr);
  }
  s->live = s->hwm = s->host_live = s->host_hwm = 0;
  return rc;
}

int rt_open(const rt_Schedule *sched, const rt_Options *opt, rt_Session **out, char *err, size_t errlen) {
  *out = NULL;
  rt_Session *s = rt_calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "out of memory");
    return RT_ENOMEM;
  }
  int rc = RT_OK;
  rt_Options o = {.backend = RT_BACKEND_AUTO, .seed = 1};
  if (opt) o = *opt;
  const char *dbg = getenv("RATION_DEBUG");
  if (dbg && !strcmp(dbg, "1")) o.flags |= RT_OPEN_DEBUG;
  const char *kernels = getenv("RATION_KERNELS");
  if (kernels && !strcmp(kernels, "reference")) o.flags |= RT_OPEN_REFERENCE;
  s->debug = (o.flags & RT_OPEN_DEBUG) != 0;
  s->profile = (o.flags & RT_OPEN_PROFILE) != 0;
  s->sc = sched;
  if (!sched) {
    rc = fail(s, RT_EINVAL, "no schedule");
    goto done;
  }
  if ((rc = validate(s)) != RT_OK || (rc = check_fresh(s, o.graph)) != RT_OK) goto done;
  char berr[256] = "";
  if (o.backend == RT_BACKEND_CPU) {
    s->be = &rt_backend_cpu;
  } else {
    s->be = rt_backend_cuda_get(berr, sizeof berr);
    if (!s->be && o.backend == RT_BACKEND_CUDA) {
      rc = fail(s, RT_EUNAVAIL, "CUDA backend: %s", berr);
      goto done;
    }
    if (!s->be) s->be = &rt_backend_cpu;
  }
  const rt_Schedule *c = sched;
  size_t nb = (size_t)c->nbuffers + 1, ns = (size_t)c->nsteps + 1, no = (size_t)c->nops + 1;
  s->fn = rt_calloc(no, sizeof *s->fn);
  s->args = rt_calloc(ns, sizeof *s->args);
  s->host_ops = rt_calloc(ns, sizeof *s->host_ops);
  s->first = rt_calloc(nb, sizeof *s->first);
  s->last = rt_calloc(nb, sizeof *s->last);
  s->born_start = rt_calloc(ns + 1, sizeof *s->born_start);
  s->die_start = rt_calloc(ns + 1, sizeof *s->die_start);
  s->home = rt_calloc((size_t)c->ntensors + 1, sizeof *s->home);
  s->grads = rt_calloc((size_t)c->ntensors + (size_t)c->nbuffers + 1, sizeof *s->grads);
  s->resident = rt_calloc(nb, sizeof *s->resident);
  s->persist = rt_calloc(nb, sizeof *s->persist);
  s->op_step = rt_calloc(no, sizeof *s->op_step);
  s->op_samples = rt_calloc(no * SAMPLES, sizeof *s->op_samples);
  s->op_first = rt_calloc(no, sizeof *s->op_first);
  s->state = rt_calloc(nb, sizeof *s->state);
  if (!s->fn || !s->args || !s->host_ops || !s->first || !s->last || !s->born_start || !s->die_start || !s->home || !s->grads ||
      !s->resident || !s->persist || !s->op_step || !s->op_samples || !s->op_first || !s->state) {
    rc = fail(s, RT_ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = derive_occupancy(s)) != RT_OK) goto done;
  void *dev = NULL, *host = NULL;
  rc = s->be->open(&s->ctx, c->arena_bytes, c->host_bytes, c->nevents, s->debug, o.seed, o.delay_us, &dev, &host, s->err,
                   sizeof s->err);
  if (rc != RT_OK) {
    s->ctx = NULL;
    goto done;
  }
  s->dev = dev;
  s->host = host;
  if (s->be->set_timeout) s->be->set_timeout(s->ctx, o.timeout_ms);
  if ((rc = give_runtime_bytes(s)) != RT_OK) goto done;
  if (s->be == &rt_backend_cpu &&
      (rc = rt_cpu_configure(s->ctx, o.threads, (o.flags & RT_OPEN_REFERENCE) != 0, s->err, sizeof s->err)) != RT_OK)
    goto done;
  if ((rc = build_steps(s)) != RT_OK) goto done;
  if ((rc = prepare_snapshot(s, (o.flags & RT_OPEN_ATOMIC) != 0)) != RT_OK) goto done;
  if (((o.flags & RT_OPEN_WARMUP) || s->be->warm_up) && (rc = warm_up(s)) != RT_OK) goto done;
  if (s->debug) {
    /* Nothing but resident state may be read before it is written. */
    for (int b = 0; b < c->nbuffers; b++)
      if (!s->resident[b] && c->buffers[b].bytes > 0) {
        unsigned char *base = c->buffers[b].space == RT_SPACE_HOST ? s->host : s->dev;
        rc = s->be->fill(s->ctx, RT_STREAM_COMPUTE, base + c->buffers[b].offset, 0xff, c->buffers[b].bytes,
                         s->err, sizeof s->err);
        if (rc != RT_OK) goto done;
      }
    rc = s->be->sync(s->ctx, s->err, sizeof s->err);
  }
done:
  if (rc != RT_OK) {
    snprintf(err, errlen, "%s", s->err);
    rt_close(s);
    return rc;
  }
  *out = s;
  return RT_OK;
}

void rt_close(rt_Session *s) {
  if (!s) return;
  if (s->ctx) s->be->close(s->ctx);
  free(s->fn);
  free(s->attrs);
  free(s->views);
  free(s->args);
  free(s->host_ops);
  free(s->first);
  free(s->last);
  free(s->born_start);
  free(s->born);
  free(s->die_start);
  free(s->die);
  free(s->home);
  free(s->grads);
  free(s->resident);
  free(s->persist);
  free(s->op_step);
  free(s->op_samples);
  free(s->op_first);
  free(s->state);
  free(s->snap);
  free(s->snap_data);
  free(s);
}

const rt_Schedule *rt_schedule(const rt_Session *s) {
  return s ? s->sc : NULL;
}

int rt_tensor_index(const rt_Session *s, const char *name) {
  if (!s || !name) return -1;
  for (int t = 0; t < s->sc->ntensors; t++)
    if (!strcmp(s->sc->tensors[t].name, name)) return t;
  return -1;
}

const char *rt_version(void) {
  return RATION_VERSION;
}

static unsigned char *buffer_ptr(const rt_Session *s, int b) {
  const rt_SchedBuffer *bf = &s->sc->buffers[b];
  return (bf->space == RT_SPACE_HOST ? s->host : s->dev) + bf->offset;
}

/* The caller's tensor (DTYPE, RANK, SHAPE, BYTES) is exactly the schedule's
 * TENSOR, which has a buffer that lives across steps: *b. */
static int resident_buffer(rt_Session *s, const char *tensor, int dtype, int rank, const int64_t *shape,
                           size_t bytes, int *b) {
  if (!s) return RT_EINVAL;
  if (s->dead) return fail(s, s->dead, "%s", s->dead_why);
  int t = rt_tensor_index(s, tensor);
  if (t < 0) return fail(s, RT_EINVAL, "no tensor '%s' in schedule %s", tensor ? tensor : "(null)", s->sc->name);
  const rt_SchedTensor *T = &s->sc->tensors[t];
  if (s->home[t] < 0)
    return fail(s, RT_EINVAL, "tensor '%s' has no buffer that lives across steps (not an input, param, grad, "
                "optimizer state or graph output)", tensor);
  if ((int64_t)bytes != T->bytes)
    return fail(s, RT_EINVAL, "tensor '%s' has %lld bytes, not %zu", tensor, (long long)T->bytes, bytes);
  bool same = dtype == T->dtype && rank == T->rank && (rank == 0 || shape);
  for (int d = 0; same && d < rank; d++) same = shape[d] == T->shape[d];
  if (!same) {
    char want[200], got[200];
    describe(want, sizeof want, T->dtype, T->rank, T->shape);
    describe(got, sizeof got, dtype, rank, shape);
    return fail(s, RT_EINVAL, "tensor '%s' is %s, not %s", tensor, want, got);
  }
  *b = s->home[t];
  return RT_OK;
}

int rt_write(rt_Session *s, const char *tensor, int dtype, int rank, const int64_t *shape, const void *src,
             size_t bytes) {
  int b, rc = resident_buffer(s, tensor, dtype, rank, shape, bytes, &b);
  if (rc != RT_OK) return rc;
  rc = s->be->upload(s->ctx, buffer_ptr(s, b), src, (int64_t)bytes, s->err, sizeof s->err);
  return backend_failed(s, rc);
}

int rt_read(rt_Session *s, const char *tensor, int dtype, int rank, const int64_t *shape, void *dst,
            size_t bytes) {
  int b, rc = resident_buffer(s, tensor, dtype, rank, shape, bytes, &b);
  if (rc != RT_OK) return rc;
  rc = s->be->download(s->ctx, dst, buffer_ptr(s, b), (int64_t)bytes, s->err, sizeof s->err);
  return backend_failed(s, rc);
}

static const char *state_name(int st) {
  return st == ST_EMPTY ? "not yet written" : st == ST_PENDING ? "still being prefetched" : "dead";
}

static const char *step_desc(const rt_Session *s, int i) {
  const rt_SchedStep *st = &s->sc->steps[i];
  switch (st->kind) {
  case RT_STEP_COMPUTE:
  case RT_STEP_HOST_COMPUTE:
  case RT_STEP_HOST_WAIT: return s->sc->ops[st->op].name;
  case RT_STEP_OFFLOAD: return "offload";
  case RT_STEP_OFFLOAD_WAIT: return "offload_wait";
  case RT_STEP_PREFETCH: return "prefetch";
  case RT_STEP_ZERO: return "zero";
  default: return "prefetch_wait";
  }
}

/* Debug: a read of buffer b at step i must find it written and alive. */
static int check_read(rt_Session *s, int i, int b) {
  if (s->state[b] == ST_VALID) return RT_OK;
  return fail(s, RT_EDEBUG, "step %d (%s) reads buffer %d (%s), which is %s", i, step_desc(s, i), b,
              buffer_name(s, b), state_name(s->state[b]));
}

/* Debug: a buffer becoming occupied must not share bytes with an occupied one. */
static int check_birth(rt_Session *s, int i, int b) {
  const rt_SchedBuffer *x = &s->sc->buffers[b];
  for (int k = 0; k < s->sc->nbuffers; k++) {
    const rt_SchedBuffer *y = &s->sc->buffers[k];
    if (k == b || y->space != x->space || (s->state[k] != ST_VALID && s->state[k] != ST_PENDING)) continue;
    if (y->offset < x->offset + x->bytes && x->offset < y->offset + y->bytes && x->bytes > 0 && y->bytes > 0)
      return fail(s, RT_EDEBUG, "step %d (%s): buffer %d (%s) becomes occupied over buffer %d (%s), still occupied",
                  i, step_desc(s, i), b, buffer_name(s, b), k, buffer_name(s, k));
  }
  return RT_OK;
}

/* Names the step in a failure's message. */
static int step_failed(rt_Session *s, int rc, int i) {
  char why[sizeof s->err];
  snprintf(why, sizeof why, "%s", s->err);
  return fail(s, rc, "step %d (%s): %s", i, step_desc(s, i), why);
}

/* RT_OPEN_ATOMIC: what the optimizer ops are about to overwrite, to host memory. */
static int take_snapshot(rt_Session *s) {
  int rc = s->be->sync(s->ctx, s->err, sizeof s->err);
  unsigned char *at = s->snap_data;
  for (int k = 0; k < s->nsnap && rc == RT_OK; k++) {
    const rt_SchedBuffer *bf = &s->sc->buffers[s->snap[k]];
    rc = s->be->download(s->ctx, at, buffer_ptr(s, s->snap[k]), bf->bytes, s->err, sizeof s->err);
    at += bf->bytes;
  }
  s->snap_taken = rc == RT_OK;
  return rc;
}

static int restore_snapshot(rt_Session *s, char *err, size_t errlen) {
  int rc = RT_OK;
  const unsigned char *at = s->snap_data;
  for (int k = 0; k < s->nsnap && rc == RT_OK; k++) {
    const rt_SchedBuffer *bf = &s->sc->buffers[s->snap[k]];
    rc = s->be->upload(s->ctx, buffer_ptr(s, s->snap[k]), at, bf->bytes, err, errlen);
    at += bf->bytes;
  }
  return rc;
}

/* The first optimizer-phase compute step and, with RT_OPEN_ATOMIC, the
 * resident buffers written from there on and the host memory to hold them. */
static int prepare_snapshot(rt_Session *s, bool atomic) {
  const rt_Schedule *c = s->sc;
  s->opt_first = -1;
  for (int i = 0; i < c->nsteps && s->opt_first < 0; i++)
    if ((c->steps[i].kind == RT_STEP_COMPUTE || c->steps[i].kind == RT_STEP_HOST_COMPUTE) &&
        c->ops[c->steps[i].op].phase == 2)
      s->opt_first = i;
  if (!atomic || s->opt_first < 0) return RT_OK;
  s->snap = rt_calloc((size_t)c->nbuffers + 1, sizeof *s->snap);
  unsigned char *seen = rt_calloc((size_t)c->nbuffers + 1, 1);
  int64_t bytes = 0;
  if (!s->snap || !seen) {
    free(seen);
    return fail(s, RT_ENOMEM, "out of memory");
  }
  for (int i = s->opt_first; i < c->nsteps; i++) {
    const rt_SchedStep *st = &c->steps[i];
    if (st->kind != RT_STEP_COMPUTE && st->kind != RT_STEP_HOST_COMPUTE) continue;
    const rt_SchedOp *o = &c->ops[st->op];
    for (int k = o->nin; k < o->nin + o->nout; k++) {
      /* The written tensor's home: a host-homed one's copy back comes later. */
      int b = s->home[c->buffers[c->step_io[st->io0 + k]].tensor];
      if (b < 0 || !s->resident[b] || seen[b]) continue;
      seen[b] = 1;
      s->snap[s->nsnap++] = b;
      bytes += c->buffers[b].bytes;
    }
  }
  free(seen);
  s->snap_data = rt_calloc((size_t)bytes + 1, 1);
  if (!s->snap_data)
    return fail(s, RT_ENOMEM, "cannot allocate %lld bytes of host memory for RT_OPEN_ATOMIC", (long long)bytes);
  return RT_OK;
}

/* Compute step I's kernel, between its two device marks when MARKED. */
static int launch_op(rt_Session *s, int i, bool marked) {
  const rt_Backend *be = s->be;
  int rc = marked ? be->mark(s->ctx, i, false, s->err, sizeof s->err) : RT_OK;
  if (rc == RT_OK)
    rc = be->launch(s->ctx, s->fn[s->sc->steps[i].op], &s->args[i], s->profile && !marked, s->err, sizeof s->err);
  if (rc == RT_OK && marked) rc = be->mark(s->ctx, i, true, s->err, sizeof s->err);
  return rc;
}

/* Compute step I ran DT seconds: the step's kernel time, and its op's
 * sample unless I is a recompute. */
static void record_op_time(rt_Session *s, StepTimes *tm, int i, double dt) {
  const rt_SchedStep *st = &s->sc->steps[i];
  tm->kernel += dt;
  if (st->recompute) return;
  if (s->nrun == 1) s->op_first[st->op] = dt;
  else s->op_samples[(size_t)st->op * SAMPLES + (size_t)(s->nrun - 2) % SAMPLES] = dt;
}

/* Before compute or host_compute step I runs its op: in debug mode its
 * inputs are written and alive; with RT_OPEN_ATOMIC, before the first
 * optimizer op, the snapshot. */
static int before_op(rt_Session *s, int i) {
  const rt_SchedStep *st = &s->sc->steps[i];
  const rt_SchedOp *o = &s->sc->ops[st->op];
  int rc;
  if (s->debug)
    for (int k = 0; k < o->nin; k++)
      if ((rc = check_read(s, i, s->sc->step_io[st->io0 + k])) != RT_OK) return rc;
  return i == s->opt_first && s->nsnap > 0 ? take_snapshot(s) : RT_OK;
}

static int run_steps(rt_Session *s, StepTimes *tm) {
  const rt_Schedule *c = s->sc;
  const rt_Backend *be = s->be;
  char *err = s->err;
  size_t el = sizeof s->err;
  int rc;
  double t0 = 0;
  for (int g = 0; g < s->ngrads; g++) {
    const rt_SchedBuffer *bf = &c->buffers[s->grads[g]];
    if ((rc = be->fill(s->ctx, RT_STREAM_COMPUTE, s->dev + bf->offset, 0, bf->bytes, err, el)) != RT_OK) return rc;
  }
  for (int i = 0; i < c->nsteps; i++) {
    const rt_SchedStep *st = &c->steps[i];
    double q0 = st->stream != RT_STREAM_COMPUTE ? now_seconds() : 0;
    for (int k = s->born_start[i]; k < s->born_start[i + 1]; k++) {
      int b = s->born[k];
      *(c->buffers[b].space == RT_SPACE_DEVICE ? &s->live : &s->host_live) += c->buffers[b].bytes;
      if (s->debug && (rc = check_birth(s, i, b)) != RT_OK) return rc;
    }
    if (s->live > s->hwm) s->hwm = s->live;
    if (s->host_live > s->host_hwm) s->host_hwm = s->host_live;
    for (int k = 0; k < st->nwait; k++) {
      int w = c->waits[st->wait0 + k];
      if (st->stream == RT_STREAM_COMPUTE) t0 = now_seconds();
      if ((rc = be->wait(s->ctx, st->stream, c->steps[w].event, err, el)) != RT_OK) return rc;
      if (st->stream == RT_STREAM_COMPUTE) tm->wait += now_seconds() - t0;
    }
    switch (st->kind) {
    case RT_STEP_COMPUTE: {
      const rt_SchedOp *o = &c->ops[st->op];
      const int32_t *io = &c->step_io[st->io0];
      if ((rc = before_op(s, i)) != RT_OK) return rc;
      bool marked = s->profile && be->mark;
      /* The thread CPU clock is read inside the op's wall-clock window: that
       * read is a system call which updates the scheduler's accounting, and
       * a thread whose slice is used up is preempted on its return. Outside
       * the window, those waits (a quarter of a step at 2 threads on a
       * loaded 2-core VM) fell between ops, where no profile counts them. */
      t0 = now_seconds();
      double c0 = thread_cpu_seconds();
      if (rt_fault_hit(RT_FAULT_KERNEL)) rc = fail(s, RT_EKERNEL, "kernel failed: injected fault");
      else rc = launch_op(s, i, marked);
      s->kernel_cpu += thread_cpu_seconds() - c0;
      double dt = now_seconds() - t0;
      if (rc != RT_OK) return step_failed(s, rc, i);
      if (o->phase == 2) tm->opt_ran++;
      if (!marked) record_op_time(s, tm, i, dt);
      if (s->debug) {
        for (int k = 0; k < o->nout; k++) s->state[io[o->nin + k]] = ST_VALID;
        if (st->workspace >= 0) s->state[st->workspace] = ST_VALID;
      }
      break;
    }
    case RT_STEP_OFFLOAD:
    case RT_STEP_PREFETCH:
      if (s->debug) {
        if ((rc = check_read(s, i, st->from)) != RT_OK) return rc;
        s->state[st->to] = st->kind == RT_STEP_OFFLOAD ? ST_VALID : ST_PENDING;
      }
      if (rt_fault_hit(RT_FAULT_COPY)) rc = fail(s, RT_EBACKEND, "copy failed: injected fault");
      else rc = be->copy(s->ctx, st->stream, buffer_ptr(s, st->to), buffer_ptr(s, st->from), c->buffers[st->to].bytes,
                         err, el);
      if (rc != RT_OK) return step_failed(s, rc, i);
      break;
    case RT_STEP_HOST_COMPUTE: {
      /* On the host stream, after the waits above: the op's own thread. */
      if ((rc = before_op(s, i)) != RT_OK) return rc;
      if ((rc = be->host_launch(s->ctx, &s->host_ops[i], err, el)) != RT_OK) return step_failed(s, rc, i);
      if (c->ops[st->op].phase == 2) tm->opt_ran++;
      break;
    }
    case RT_STEP_PREFETCH_WAIT:
      if (s->debug) {
        if (s->state[st->to] != ST_PENDING)
          return fail(s, RT_EDEBUG, "step %d: prefetch_wait for buffer %d (%s), which no prefetch is filling", i,
                      st->to, buffer_name(s, st->to));
        s->state[st->to] = ST_VALID;
      }
      break;
    case RT_STEP_ZERO:
      if (s->debug) s->state[st->to] = ST_VALID;
      if ((rc = be->fill(s->ctx, st->stream, buffer_ptr(s, st->to), 0, c->buffers[st->to].bytes, err, el)) != RT_OK)
        return step_failed(s, rc, i);
      break;
    default: /* offload_wait, host_compute_wait: the wait above is all it does */
      break;
    }
    for (int k = s->die_start[i]; k < s->die_start[i + 1]; k++) {
      int b = s->die[k];
      *(c->buffers[b].space == RT_SPACE_DEVICE ? &s->live : &s->host_live) -= c->buffers[b].bytes;
      if (s->debug && !s->persist[b]) {
        s->state[b] = ST_DEAD;
        if ((rc = be->fill(s->ctx, st->stream, buffer_ptr(s, b), 0xff, c->buffers[b].bytes, err, el)) != RT_OK)
          return rc;
      }
    }
    /* A compute-stream record may wake a copy thread waiting for it, which
     * then takes the caller's core as the issue of a copy does. */
    if (st->event >= 0 && st->stream == RT_STREAM_COMPUTE) q0 = now_seconds();
    if (st->event >= 0 && (rc = be->record(s->ctx, st->stream, st->event, err, el)) != RT_OK) return rc;
    if (st->stream != RT_STREAM_COMPUTE && be->flush) be->flush(s->ctx, st->stream);
    if (st->stream != RT_STREAM_COMPUTE || st->event >= 0) tm->issue += now_seconds() - q0;
  }
  return RT_OK;
}

/* This step's copies, from the backend's running totals (the streams are
 * idle after a step): each direction's bandwidth, and the copies' share of
 * the compute stream, what issuing them cost it over how long they ran. */
static void record_copies(rt_Session *s, double issue, bool ok) {
  if (!s->be->copy_totals) return;
  double bytes[3] = {0, 0, 0}, sec[3] = {0, 0, 0};
  for (int st = RT_STREAM_D2H; st <= RT_STREAM_H2D; st++) {
    double b, t;
    s->be->copy_totals(s->ctx, st, &b, &t);
    bytes[st] = b - s->copied[st], sec[st] = t - s->copy_sec[st];
    s->copied[st] = b, s->copy_sec[st] = t;
  }
  if (!ok || s->nrun < 2) return;
  size_t at = (size_t)(s->nrun - 2) % SAMPLES;
  s->copy_samples[CS_D2H][at] = bytes[RT_STREAM_D2H] > 0 && sec[RT_STREAM_D2H] > 0 ? bytes[RT_STREAM_D2H] / sec[RT_STREAM_D2H] / 1e9 : -1;
  s->copy_samples[CS_H2D][at] = bytes[RT_STREAM_H2D] > 0 && sec[RT_STREAM_H2D] > 0 ? bytes[RT_STREAM_H2D] / sec[RT_STREAM_H2D] / 1e9 : -1;
  double copy = sec[RT_STREAM_D2H] + sec[RT_STREAM_H2D];
  s->copy_samples[CS_SHARE][at] = copy > 0 ? issue / copy : -1;
}

int rt_step(rt_Session *s) {
  if (!s) return RT_EINVAL;
  if (s->dead) return fail(s, s->dead, "%s", s->dead_why);
  const rt_Schedule *c = s->sc;
  s->err[0] = '\0';
  s->nrun++;
  for (int i = 0; i < c->nsteps; i++) s->args[i].step = s->nrun;
  reset_states(s);
  StepTimes tm = {0, 0, 0, 0};
  s->snap_taken = false;
  s->kernel_cpu = 0;
  const rt_Backend *be = s->be;
  double c0 = thread_cpu_seconds(), t0 = now_seconds();
  int rc = be->span ? be->span(s->ctx, false, s->err, sizeof s->err) : RT_OK;
  if (rc == RT_OK) rc = run_steps(s, &tm);
  if (rc == RT_OK && be->span) rc = be->span(s->ctx, true, s->err, sizeof s->err);
  double t1 = now_seconds();
  char serr[256];
  /* After a lost device or a timeout nothing more is waited for. */
  bool dead = rc == RT_ELOST || rc == RT_ETIMEOUT;
  int src = dead ? RT_OK : be->sync(s->ctx, serr, sizeof serr);
  double t2 = now_seconds(), c2 = thread_cpu_seconds();
  if (rc == RT_OK && src != RT_OK) rc = fail(s, src, "%s", serr);
  if (rc == RT_ELOST || rc == RT_ETIMEOUT) {
    s->nrun--;
    return backend_failed(s, rc);
  }
  double span = rc == RT_OK && be->span ? be->span_seconds(s->ctx) : -1;
  if (rc == RT_OK && s->profile && s->be->mark)
    for (int i = 0; i < c->nsteps; i++)
      if (c->steps[i].kind == RT_STEP_COMPUTE) record_op_time(s, &tm, i, s->be->marked_seconds(s->ctx, i));
  if (rc != RT_OK) {
    s->nrun--;
    if (src == RT_OK) record_copies(s, tm.issue, false); /* a failed step's copies are no sample */
    size_t n = strlen(s->err);
    if (s->snap_taken) {
      if (restore_snapshot(s, serr, sizeof serr) != RT_OK)
        snprintf(s->err + n, sizeof s->err - n, "; restoring the parameters failed too: %s", serr);
    } else if (tm.opt_ran > 0) {
      snprintf(s->err + n, sizeof s->err - n, " (%d optimizer ops had already updated their parameters)", tm.opt_ran);
    }
    return rc;
  }
  bool device_timed = span >= 0;
  s->stats.step_seconds = device_timed ? span : t2 - t0;
  s->stats.kernel_seconds = !device_timed || s->profile ? tm.kernel : -1;
  s->stats.wait_seconds = !device_timed ? tm.wait + (t2 - t1) : -1;
  s->stats.overhead_seconds = (c2 - c0) - s->kernel_cpu;
  record_copies(s, tm.issue, true);
  if (s->nrun > 1) s->step_samples[(size_t)(s->nrun - 2) % SAMPLES] = s->stats.step_seconds;
  return RT_OK;
}

int rt_stats(const rt_Session *s, rt_Stats *st) {
  if (!s || !st) return RT_EINVAL;
  *st = s->stats;
  st->backend = s->be->name;
  st->kernels = s->be == &rt_backend_cpu ? rt_cpu_kernels_name(s->ctx) : s->be->name;
  st->arena_bytes = s->sc->arena_bytes;
  st->host_bytes = s->sc->host_bytes;
  st->live_high_water = s->hwm;
  st->host_high_water = s->host_hwm;
  st->steps = s->nrun;
  return RT_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of the non-negative values among the N in V (-1: none). */
static double median(const double *v, int n) {
  double x[SAMPLES];
  int m = 0;
  for (int i = 0; i < n && m < SAMPLES; i++)
    if (v[i] >= 0) x[m++] = v[i];
  if (m == 0) return -1;
  qsort(x, (size_t)m, sizeof *x, cmp_double);
  return m % 2 ? x[m / 2] : 0.5 * (x[m / 2 - 1] + x[m / 2]);
}

/* Steps after the first whose samples are kept. */
static int sampled(const rt_Session *s) {
  return s->nrun - 1 < SAMPLES ? (int)s->nrun - 1 : SAMPLES;
}

/* The ring slots of the central steps (see SAMPLES); at least the median. */
static int central_steps(const rt_Session *s, int *slot) {
  int n = sampled(s), m = 0;
  double x[SAMPLES];
  memcpy(x, s->step_samples, (size_t)n * sizeof *x);
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  double lo = x[(n - 1) / 4], hi = x[(3 * (n - 1) + 3) / 4];
  for (int i = 0; i < n; i++)
    if (s->step_samples[i] >= lo && s->step_samples[i] <= hi) slot[m++] = i;
  return m;
}

double rt_op_seconds(const rt_Session *s, int op) {
  if (!s || op < 0 || op >= s->sc->nops || s->nrun == 0 || s->op_step[op] < 0) return -1;
  if (s->nrun == 1) return s->op_first[op];
  int slot[SAMPLES], m = central_steps(s, slot);
  double sum = 0;
  for (int i = 0; i < m; i++) sum += s->op_samples[(size_t)op * SAMPLES + (size_t)slot[i]];
  return sum / m;
}

static void json_str(FILE *f, const char *x) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)x; *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c < 32) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  }
  fputc('"', f);
}

/* The profile's text, into a memory stream. */
static void put_profile(rt_Session *s, FILE *f) {
  fprintf(f, "{\"format\": \"ration-costs/1\", \"schedule\": ");
  json_str(f, s->sc->name);
  fprintf(f, ", \"backend\": ");
  json_str(f, s->be->name);
  fprintf(f, ", \"steps\": %lld,\n \"ops\": {", (long long)s->nrun);
  int n = 0;
  for (int o = 0; o < s->sc->nops; o++) {
    double sec = rt_op_seconds(s, o);
    if (sec < 0) continue;
    fprintf(f, "%s\n  ", n++ ? "," : "");
    json_str(f, s->sc->ops[o].name);
    fprintf(f, ": %.3f", sec * 1e6);
  }
  fprintf(f, "\n }");
  /* What the simulator's copies need, measured while compute ran: each
   * direction's bandwidth and the share of a copy's time the compute stream
   * loses to it (the medians over the steps after the first). */
  static const char *const keys[CS_KINDS] = {"d2h_gbps", "h2d_gbps", "copy_compute_share"};
  for (int k = 0; k < CS_KINDS && s->nrun > 1 && s->be->copy_totals; k++) {
    double v = median(s->copy_samples[k], sampled(s));
    if (v >= 0) fprintf(f, ",\n \"%s\": %.4f", keys[k], v);
  }
  fprintf(f, "\n}\n");
}

/* RT_FAULT_STALL: a stage of the write where a test kills the process. */
static void stall_point(void) {
  if (rt_fault_hit(RT_FAULT_STALL)) nanosleep(&(struct timespec){1, 0}, NULL);
}

/* PATH.tmp.PID.N, N counting the process's attempts, so two writers never
 * share a temporary. */
static bool temp_name(const char *path, char *tmp, size_t len) {
  static atomic_uint serial;
  return (size_t)snprintf(tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&serial, 1u)) < len;
}

/* An unnamed file in PATH's directory (O_TMPFILE: a process killed before
 * it is linked leaves nothing), or where the file system has none, the
 * named temporary TMP (*named set). */
static int open_unnamed(const char *path, char *tmp, size_t len, bool *named) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  size_t n = slash && slash > path ? (size_t)(slash - path) : 1; /* "/x": the root; "x": "." */
  *named = false;
  if (n >= sizeof dir || !temp_name(path, tmp, len)) return errno = ENAMETOOLONG, -1;
  memcpy(dir, slash ? path : ".", n);
  dir[n] = '\0';
  int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  *named = true;
  return open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
}

/* Names the unnamed file FD as TMP (unless NAMED already), then renames TMP
 * over PATH; on failure TMP is gone. Only calls safe in a forked child.
 * Returns 0 or an errno. */
static int commit_profile(int fd, bool named, const char *tmp, const char *path) {
  char proc[64] = "/proc/self/fd/";
  int k = 14, digits[12], nd = 0;
  for (int v = fd; nd == 0 || v > 0; v /= 10) digits[nd++] = v % 10;
  while (nd > 0) proc[k++] = (char)('0' + digits[--nd]);
  proc[k] = '\0';
  if (!named && linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) return errno;
  stall_point();
  int rc = rename(tmp, path) == 0 ? 0 : errno;
  if (rc) unlink(tmp);
  return rc;
}

/* The commit in a child that ignores the terminal's signals: a kill of the
 * caller between naming the file and renaming it cannot leave the named
 * temporary behind. Without a child (fork failed) it runs here. */
static int commit_in_child(int fd, bool named, const char *tmp, const char *path) {
  int pipefd[2] = {-1, -1};
  pid_t pid = pipe2(pipefd, O_CLOEXEC) == 0 ? fork() : -1;
  if (pid < 0) {
    if (pipefd[0] >= 0) close(pipefd[0]), close(pipefd[1]);
    return commit_profile(fd, named, tmp, path);
  }
  if (pid == 0) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int rc = commit_profile(fd, named, tmp, path);
    _exit(write(pipefd[1], &rc, sizeof rc) == sizeof rc ? 0 : 1);
  }
  close(pipefd[1]);
  int rc = EIO, status;
  ssize_t got;
  do got = read(pipefd[0], &rc, sizeof rc);
  while (got < 0 && errno == EINTR);
  close(pipefd[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) continue;
  if (got != sizeof rc) rc = EIO, unlink(tmp);
  return rc;
}

/* Written to an unnamed file in PATH's directory, synced, then named and
 * renamed over PATH by a child process: a reader sees the old file or the
 * whole new one, never half of it, and a kill at any point leaves no
 * temporary (tests/test_rt_faults.c kills it at each stage). On failure
 * PATH is as it was. */
int rt_write_profile(rt_Session *s, const char *path) {
  if (!s || !path) return RT_EINVAL;
  if (s->nrun == 0) return fail(s, RT_EINVAL, "no step has run: nothing to profile");
  char *text = NULL, tmp[4200];
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem) return fail(s, RT_ENOMEM, "out of memory");
  put_profile(s, mem);
  if (fclose(mem) != 0) {
    free(text);
    return fail(s, RT_ENOMEM, "out of memory");
  }
  bool named;
  int fd = open_unnamed(path, tmp, sizeof tmp, &named), err = 0;
  if (fd < 0) err = errno;
  stall_point(); /* the file open */
  for (size_t at = 0; !err && at < len;) {
    ssize_t n = write(fd, text + at, len - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) err = n < 0 ? errno : EIO;
    else at += (size_t)n;
  }
  free(text);
  if (!err) stall_point(); /* written */
  if (!err && fsync(fd) != 0) err = errno;
  if (!err) stall_point(); /* synced */
  if (!err) err = commit_in_child(fd, named, tmp, path);
  else if (named) unlink(tmp);
  if (fd >= 0) close(fd);
  if (err) return fail(s, RT_EINVAL, "%s: write failed: %s", path, strerror(err));
  return RT_OK;
}

/* Replaced by the CUDA backend's definition when it is linked in. */
__attribute__((weak)) const rt_Backend *rt_backend_cuda_get(char *err, size_t errlen) {
  snprintf(err, errlen, "libration was built without CUDA");
  return NULL;
}
