/*
 * ration.h - the public API of libration: open an emitted schedule on a
 * backend (CPU or CUDA), bind inputs and parameters, run training steps,
 * read measurements, close. Every function returns a status (RT_OK or a
 * negative rt_Status) and leaves a one-line message; nothing here exits.
 *
 * The schedule ABI block below is also written, byte for byte, into every
 * emitted NAME.sched.h (compiler/emit_c.c), so a schedule compiles on its
 * own and a program may include both headers in any order.
 */
#ifndef RATION_RUNTIME_H
#define RATION_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

/* RATION-SCHED-ABI-BEGIN */
#ifndef RATION_SCHED_ABI
#define RATION_SCHED_ABI 4
enum { RT_SCHED_MAX_RANK = 8 };
enum { RT_SPACE_DEVICE = 0, RT_SPACE_HOST = 1 };
/* RT_STEP_ZERO (to): fill a grad's device home with zeros before its
 * first use; a grad without one is zeroed at the step's start. */
enum { RT_STEP_COMPUTE = 0, RT_STEP_OFFLOAD = 1, RT_STEP_OFFLOAD_WAIT = 2,
       RT_STEP_PREFETCH = 3, RT_STEP_PREFETCH_WAIT = 4, RT_STEP_ZERO = 5,
       RT_STEP_HOST_COMPUTE = 6, RT_STEP_HOST_WAIT = 7 };
/* ABI 4: RT_STREAM_HOST runs host_compute steps (an op over host
 * buffers, io0 as a compute step's) on the host. */
enum { RT_STREAM_COMPUTE = 0, RT_STREAM_D2H = 1, RT_STREAM_H2D = 2, RT_STREAM_HOST = 3 };
/* kind: 0 input, 1 param, 2 grad, 3 optstate, 4 activation;
 * dtype: 0 f32, 1 bf16, 2 f16, 3 i32, 4 i64, 5 u8 */
typedef struct rt_SchedTensor {
  const char *name;
  int32_t dtype, kind, rank, is_output;
  int64_t shape[RT_SCHED_MAX_RANK];
  int64_t bytes;
} rt_SchedTensor;
/* ABI 3: home is 1 on the buffer that holds a resident tensor between
 * steps (its device buffer, or the host buffer of a host-homed one). */
typedef struct rt_SchedBuffer {
  int32_t tensor, workspace_of, space, home;
  int64_t bytes, offset;
} rt_SchedBuffer;
typedef struct rt_SchedAttr {
  const char *key;
  double num;
  const char *str;
} rt_SchedAttr;
typedef struct rt_SchedOp {
  const char *name, *type;
  int32_t phase, nin, nout, io0, nattr, attr0;
  int64_t workspace;
} rt_SchedOp;
/* A step runs on one stream after waiting for the steps waits[wait0 ..
 * wait0+nwait) (on other streams) to complete; event >= 0 marks a step that
 * some later step waits for. io0 indexes step_io: inputs then outputs. */
typedef struct rt_SchedStep {
  int32_t kind, stream, op, recompute, io0, workspace, from, to;
  int32_t wait0, nwait, event;
} rt_SchedStep;
typedef struct rt_Schedule {
  int32_t abi;
  const char *name, *ration_version, *graph_name, *graph_sha256, *device;
  const char *strategy, *solver_status;
  double solver_gap, predicted_step_seconds;
  int64_t budget_bytes, arena_bytes, host_bytes, alignment, peak_live_bytes;
  int32_t ntensors, nbuffers, nops, nsteps, nevents;
  const rt_SchedTensor *tensors;
  const rt_SchedBuffer *buffers;
  const rt_SchedOp *ops;
  const int32_t *op_io;
  const rt_SchedAttr *attrs;
  const rt_SchedStep *steps;
  const int32_t *step_io;
  const int32_t *waits;
  /* ABI 2: the lengths of the flat tables, so that every index in them is
   * checked against the table it points into. */
  int32_t nop_io, nattrs, nstep_io, nwaits;
} rt_Schedule;
#endif
/* RATION-SCHED-ABI-END */

#ifdef __cplusplus
extern "C" {
#endif

/* The ration release this libration belongs to: a schedule emitted by
 * another is stale (rt_Options.graph). The same as compiler/ration.h's,
 * which the tests include beside this one (a difference does not compile). */
#define RATION_VERSION "0.1.0"

/* The input tensor that holds what the backend keeps on the device for the
 * whole run (the CUDA backend's status word and cuBLASLt workspace): the
 * planner adds it when the device profile has runtime_bytes, so the budget
 * counts it and the arena holds it. */
#define RT_RUNTIME_TENSOR "ration.runtime"

typedef enum rt_Status {
  RT_OK = 0,
  RT_EINVAL = -1,    /* bad argument: unknown tensor, wrong size, NULL */
  RT_ENOMEM = -2,    /* an arena or a table could not be allocated at open */
  RT_EBACKEND = -3,  /* the backend failed (thread, stream, device call) */
  RT_EKERNEL = -4,   /* no kernel for an op type, or a kernel failed */
  RT_ESCHEDULE = -5, /* the schedule is malformed (wrong ABI, bad ids) */
  RT_EDEBUG = -6,    /* debug mode caught a read outside the plan's occupancy */
  RT_EUNAVAIL = -7,  /* the backend is not built in or has no device */
  RT_ELOST = -8,     /* the device was lost (or a fault left its context unusable): the
                        session can only be closed */
  RT_ETIMEOUT = -9,  /* a wait or synchronize outlasted rt_Options.timeout_ms (a step or copy
                        that never completes): the session can only be closed */
  RT_ESTALE = -10    /* the schedule was planned from another graph, or by another ration
                        version, than rt_Options.graph and this libration */
} rt_Status;

typedef enum rt_BackendKind { RT_BACKEND_AUTO, RT_BACKEND_CPU, RT_BACKEND_CUDA } rt_BackendKind;

enum {
  RT_OPEN_DEBUG = 1u,  /* random copy delays, NaN on death, occupancy checks */
  RT_OPEN_PROFILE = 2u, /* per-op times measured exactly (the CUDA backend syncs per op) */
  RT_OPEN_WARMUP = 4u,  /* run the schedule once at open on zeroed arenas, then zero them:
                           per-shape kernel plans are chosen before the first step (the
                           CUDA backend always does this) */
  RT_OPEN_ATOMIC = 8u,  /* a failed rt_step leaves params and optimizer state as they were,
                           even when an optimizer op fails: they are copied to host memory
                           before the optimizer ops of every step (their bytes again in host
                           memory, and a copy per step). Without it a failure before the
                           optimizer ops changes nothing either; one among them says how many
                           had run. */
  RT_OPEN_REFERENCE = 16u /* the CPU backend runs the reference kernels (one thread, the loops
                             the tests check against) instead of its fast ones;
                             RATION_KERNELS=reference in the environment sets it */
};

typedef struct rt_Options {
  rt_BackendKind backend; /* AUTO: CUDA when built in and a device exists, else CPU */
  unsigned flags;         /* RT_OPEN_*; RATION_DEBUG=1 in the environment adds DEBUG */
  unsigned seed;          /* debug-mode copy delays */
  unsigned delay_us;      /* debug mode: 0 delays each copy at random (up to 2 ms),
                             else exactly this long */
  int threads;            /* CPU backend: threads its kernels run on, the calling thread
                             included; 0 every core the process may run on. Losses, grads
                             and weights do not depend on it (the work is split by shape) */
  const char *graph;      /* the ration-graph file the caller expects the schedule to be
                             planned from, or NULL: rt_open fails with RT_ESTALE unless
                             the file's sha256 is the schedule's and the schedule was
                             emitted by this libration's ration version */
  unsigned timeout_ms;    /* watchdog: a wait or synchronize still not done after this
                             long fails with RT_ETIMEOUT; 0 waits for ever */
} rt_Options;

typedef struct rt_Session rt_Session;

typedef struct rt_Stats {
  const char *backend;
  const char *kernels;       /* which kernels run: on the CPU "reference", or the fast ones
                                with their thread count and GEMM ("fast, 2 threads, OpenBLAS
                                0.3.21 ..."); on CUDA the backend's name */
  int64_t arena_bytes, host_bytes;
  int64_t live_high_water;   /* max live device bytes over every step run */
  int64_t steps;             /* training steps run */
  double step_seconds;       /* the last step: wall clock on the CPU backend; on CUDA, events from
                                its start on the compute stream to the end of every stream's work */
  double kernel_seconds;     /* the last step: time inside kernels (-1: not measured, the CUDA
                                backend outside RT_OPEN_PROFILE, whose kernels run asynchronously) */
  double wait_seconds;       /* the last step: compute stream blocked on copies (-1 on CUDA) */
  double overhead_seconds;   /* the last step: the executor's own cost, as CPU time of the
                                calling thread outside kernels (not inflated by copy threads
                                or other processes competing for the cores) */
  int64_t host_high_water;   /* max live host-arena bytes over every step run (offloaded
                                activations, host-homed params and optimizer state) */
} rt_Stats;

/* Opens SCHED: allocates the device and host arenas once, looks up every
 * kernel, prepares every step's arguments. On failure *out is NULL and err
 * holds the message. */
int rt_open(const rt_Schedule *sched, const rt_Options *opt, rt_Session **out,
            char *err, size_t errlen);
void rt_close(rt_Session *s);
/* The last error message of this session ("" if none). */
const char *rt_error(const rt_Session *s);
const char *rt_status_name(int status);

/* The ration version this libration belongs to ("0.1.0"). */
const char *rt_version(void);

/* Tensor index by name, or -1. */
int rt_tensor_index(const rt_Session *s, const char *name);
/* Copies the caller's tensor into or out of the named tensor's resident
 * buffer. The caller says what its data is: DTYPE (the schedule's codes,
 * rt_SchedTensor.dtype), RANK and SHAPE, and BYTES; all must be the
 * schedule's tensor's exactly (RT_EINVAL otherwise, even when only the
 * byte count matches). Only inputs, params, grads, optimizer state and
 * graph outputs have a resident buffer; call between steps. */
int rt_write(rt_Session *s, const char *tensor, int dtype, int rank, const int64_t *shape, const void *src,
             size_t bytes);
int rt_read(rt_Session *s, const char *tensor, int dtype, int rank, const int64_t *shape, void *dst,
            size_t bytes);

/* The schedule the session runs. */
const rt_Schedule *rt_schedule(const rt_Session *s);
/* Writes every param (and its f32 master copy) from SEED: norm gains 1,
 * biases 0, everything else normal(0, STDDEV) (GPT-2 uses 0.02). */
int rt_init_params(rt_Session *s, uint64_t seed, double stddev);

/* Runs one whole training step (grads zeroed first, optimizer step t =
 * steps run + 1) and waits for it to finish. */
int rt_step(rt_Session *s);

int rt_stats(const rt_Session *s, rt_Stats *st);
/* Measured seconds of graph op OP (its non-recompute step): of the last 64
 * steps run, the first (cold) one left out when there are more, its mean
 * over those whose step time lies between the quartiles (a spike that slows
 * a few whole steps is left out); -1 when it never ran. */
double rt_op_seconds(const rt_Session *s, int op);
/* Writes a ration-costs/1 file: {"format":"ration-costs/1","ops":{NAME: time_us}},
 * plus, when the backend measured copies in the steps after the first,
 * "d2h_gbps" and "h2d_gbps" (medians of each step's bandwidth) and
 * "copy_compute_share" (the compute stream's seconds spent issuing copies
 * over the copies' seconds: on the CPU backend, how much of a copy's time
 * its thread takes from compute). Atomic: an unnamed file next to PATH,
 * synced, then named and renamed over it by a child process; on failure
 * PATH is as it was, and a kill at any point leaves the old file or the
 * whole new one and no temporary. */
int rt_write_profile(rt_Session *s, const char *path);

/* Fault injection for tests (Lua's ltests idea): from the arming call on,
 * the Nth event of a kind fails as the system would make it fail; 0 never.
 * Counts are process-wide and restart at 0 when armed. */
enum {
  RT_FAULT_ALLOC,  /* an allocation libration makes (tables, arenas, threads) fails */
  RT_FAULT_COPY,   /* a schedule copy (offload or prefetch) fails as it is issued */
  RT_FAULT_KERNEL, /* a kernel launch fails as it is issued */
  RT_FAULT_ASYNC,  /* a copy or kernel is accepted but fails on its stream: the error
                      surfaces at a later wait or synchronize, as CUDA reports faults */
  RT_FAULT_LOST,   /* at a backend call, the device is lost: that call and every later
                      one fail with RT_ELOST */
  RT_FAULT_HANG,   /* a copy or kernel never completes: only the watchdog
                      (rt_Options.timeout_ms) ends the wait for it */
  RT_FAULT_STALL,  /* rt_write_profile stops for a second at a stage of its write (the
                      temporary opened, written, synced, linked): tests kill it there */
  RT_FAULT_KINDS
};
/* Arms KIND to fail at its Nth event from now (0 disarms it). The CPU
 * backend injects ASYNC, LOST and HANG; the others are backend-neutral. */
void rt_fault_arm(int kind, long nth);
/* Events of KIND counted since it was last armed. */
long rt_fault_count(int kind);
/* Disarms every kind, then arms the Nth allocation, copy and kernel launch. */
void rt_fault_inject(long alloc_nth, long copy_nth, long kernel_nth);
/* What was counted since the last rt_fault_inject (NULL to skip one). */
void rt_fault_counts(long *allocs, long *copies, long *kernels);

#ifdef __cplusplus
}
#endif
#endif
