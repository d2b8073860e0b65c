/*
 * rt_backend.h - libration's internal backend vtable: what the executor
 * (rt.c) needs from a device. Four FIFO streams (RT_STREAM_*), events that
 * one stream records and another waits for, two arenas allocated once at
 * open. Every call returns 0 or a negative rt_Status with a message in err.
 */
#ifndef RT_BACKEND_H
#define RT_BACKEND_H

#include <stdbool.h>

#include "kernels.h"
#include "ration.h"

/* A host_compute step: its CPU kernel, its arguments and a field the
 * backend fills. */
typedef struct rt_HostOp {
  rt_KernelFn fn;
  const rt_KernelArgs *args;
  void *backend;
} rt_HostOp;

typedef struct rt_Backend {
  const char *name;
  bool warm_up; /* rt_open runs the schedule once (RT_OPEN_WARMUP) */
  /* Allocates the device arena (*dev) and host arena (*host), both zeroed,
   * the streams and NEVENTS events. DEBUG: every copy starts after a delay,
   * DELAY_US long or, when 0, random (seeded by SEED). */
  int (*open)(void **ctx, int64_t arena_bytes, int64_t host_bytes, int nevents, bool debug,
              unsigned seed, unsigned delay_us, void **dev, void **host, char *err, size_t errlen);
  void (*close)(void *ctx);
  rt_KernelFn (*find_kernel)(const char *type);
  void *(*kernel_ctx)(void *ctx);
  /* Runs FN on the compute stream; PROFILE: return only once it finished. */
  int (*launch)(void *ctx, rt_KernelFn fn, const rt_KernelArgs *a, bool profile, char *err, size_t errlen);
  /* Runs OP (a CPU kernel over host memory) on the host stream
   * (RT_STREAM_HOST): a thread of its own, ordered with the other streams
   * by events; a failure is reported at the next wait or synchronize. OP
   * lives as long as the session; the backend may use its ctx field. */
  int (*host_launch)(void *ctx, rt_HostOp *op, char *err, size_t errlen);
  int (*copy)(void *ctx, int stream, void *dst, const void *src, int64_t bytes, char *err, size_t errlen);
  int (*fill)(void *ctx, int stream, void *dst, int byte, int64_t bytes, char *err, size_t errlen);
  int (*record)(void *ctx, int stream, int event, char *err, size_t errlen);
  /* STREAM waits (the caller blocks when STREAM is compute on a synchronous
   * backend) until the last record of EVENT issued before this call completed. */
  int (*wait)(void *ctx, int stream, int event, char *err, size_t errlen);
  /* Every stream idle; reports the first asynchronous failure. */
  int (*sync)(void *ctx, char *err, size_t errlen);
  /* Synchronous copies between caller memory and an arena, streams idle. */
  int (*upload)(void *ctx, void *dst, const void *src, int64_t bytes, char *err, size_t errlen);
  int (*download)(void *ctx, void *dst, const void *src, int64_t bytes, char *err, size_t errlen);
  /* Bytes copied on STREAM and the seconds the copies took, since open
   * (NULL: not measured). Call with the streams idle. */
  void (*copy_totals)(void *ctx, int stream, double *bytes, double *seconds);
  /* Lets the jobs issued on STREAM so far start; sync flushes too. The
   * executor calls it once per copy-stream step (NULL: jobs start when
   * issued). */
  void (*flush)(void *ctx, int stream);
  /* Ops timed on the device, for RT_OPEN_PROFILE (NULL: launch blocks until
   * the op finished and the host clock times it). mark records the start
   * (END false) or the end of compute step SLOT in the compute stream's
   * order; once the streams are idle, marked_seconds is the time between
   * the two marks of SLOT's last launch. */
  int (*mark)(void *ctx, int slot, bool end, char *err, size_t errlen);
  double (*marked_seconds)(void *ctx, int slot);
  /* A step timed on the device (NULL: by the host clock around it and the
   * final sync): span records its start (END false) on the compute stream,
   * or its end once every stream's work so far is done; once the streams
   * are idle, span_seconds is the time between the two. Kernels run
   * asynchronously on such a backend, so outside RT_OPEN_PROFILE the host
   * cannot split a step into kernel and wait time. */
  int (*span)(void *ctx, bool end, char *err, size_t errlen);
  double (*span_seconds)(void *ctx);
  /* The arena bytes the plan set aside for the backend itself (the tensor
   * RT_RUNTIME_TENSOR), before anything runs (NULL: it needs none). */
  int (*set_runtime)(void *ctx, void *bytes, int64_t n, char *err, size_t errlen);
  /* The watchdog (rt_Options.timeout_ms): a wait or synchronize still not
   * done after MS fails with RT_ETIMEOUT (0: never). A lost device fails
   * every call with RT_ELOST. */
  void (*set_timeout)(void *ctx, unsigned ms);
} rt_Backend;

/* Fault injection (rt_fault.c): rt_fault_hit counts one event of KIND
 * (RT_FAULT_*, ration.h) and says whether it is the one armed to fail.
 * Every allocation libration makes goes through rt_calloc (or asks
 * rt_fault_hit first). */
bool rt_fault_hit(int kind);
void *rt_calloc(size_t n, size_t size);

/* The SHA-256 of the file at PATH as 64 hex digits (rt_sha256.c); -1 with
 * errno when it cannot be read. */
int rt_sha256_file(const char *path, char hex[65]);

extern const rt_Backend rt_backend_cpu;
/* The CPU backend's kernels, chosen once after open: the reference ones,
 * or the fast ones on THREADS threads (0: every core). */
int rt_cpu_configure(void *ctx, int threads, bool reference, char *err, size_t errlen);
/* What the CPU backend runs, for rt_Stats.kernels. */
const char *rt_cpu_kernels_name(void *ctx);
/* The CUDA backend when libration was built with it and a device exists,
 * else NULL with the reason in err. */
const rt_Backend *rt_backend_cuda_get(char *err, size_t errlen);

#endif
