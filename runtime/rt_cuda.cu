/*
 * rt_cuda.cu - the CUDA backend of libration: the four schedule streams are
 * CUDA streams (the host stream's ops run as host functions on it, CUDA's
 * own host thread, over the pinned host arena), schedule events are CUDA events (recorded and waited for
 * exactly where the emitted tables say), the device arena is one cudaMalloc
 * and the host arena one cudaMallocHost, both made at open. Kernels are the
 * CUDA kernels of kernels_cuda.h, launched on the compute stream with the
 * cuBLASLt context created once at open. In debug mode every copy is
 * preceded by a spin kernel on its stream, so a missing wait races for real.
 * Built into libration_cuda.a only when nvcc exists; link that archive
 * whole (-Wl,--whole-archive) to replace rt.c's "not built" stub.
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "kernels_cuda.h"
#include "rt_backend.h"
}

namespace {

struct Cuda {
  cudaStream_t st[4];
  cudaEvent_t *ev;
  int nevents;
  unsigned char *dev, *host;
  unsigned char *host_dev; /* the host arena as the device addresses it */
  size_t host_size;
  rt_CudaKernelCtx *kctx;
  cudaEvent_t *marks; /* RT_OPEN_PROFILE: a start and an end event per compute step */
  int nmarks;
  cudaEvent_t span[2], joined[3]; /* a step's start and end; the other streams' last work */
  char host_err[160];       /* a host op's failure, written by the host function */
  volatile int host_failed; /* set after host_err; reported at the next synchronize */
  bool debug;
  unsigned seed, delay_us;
  unsigned timeout_ms; /* rt_Options.timeout_ms: a synchronize polls until then; 0 blocks */
  bool hung;           /* a synchronize timed out: close waits for nothing */
};

/* Errors after which the context is unusable (a kernel's fault, the device
 * gone): the session can only be closed. */
bool cuda_sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorECCUncorrectable:
  case cudaErrorDevicesUnavailable:
  case cudaErrorNoDevice: return true;
  default: return false;
  }
}

int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "CUDA %s: %s", what, cudaGetErrorString(e));
  return cuda_sticky(e) ? RT_ELOST : RT_EBACKEND;
}

#define CK(call, what)                                              \
  do {                                                              \
    cudaError_t e_ = (call);                                        \
    if (e_ != cudaSuccess) return cuda_fail(e_, what, err, errlen); \
  } while (0)

/* Fills N bytes; DST may be the device view of the pinned host arena. */
__global__ void fill_kernel(unsigned char *dst, int byte, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = (unsigned char)byte;
}

/* Holds a copy stream back for about NS nanoseconds of device time. */
__global__ void spin_kernel(long long ns) {
  long long start = clock64();
  while (clock64() - start < ns) {
  }
}

void cuda_close(void *ctx) {
  Cuda *c = (Cuda *)ctx;
  if (!c) return;
  for (int s = 0; s < 4 && !c->hung; s++)
    if (c->st[s]) cudaStreamSynchronize(c->st[s]);
  if (c->kctx) rt_cuda_kernel_ctx_destroy(c->kctx);
  for (int i = 0; c->ev && i < c->nevents; i++)
    if (c->ev[i]) cudaEventDestroy(c->ev[i]);
  for (int i = 0; i < 2 * c->nmarks; i++)
    if (c->marks[i]) cudaEventDestroy(c->marks[i]);
  for (int i = 0; i < 2; i++)
    if (c->span[i]) cudaEventDestroy(c->span[i]);
  for (int i = 0; i < 3; i++)
    if (c->joined[i]) cudaEventDestroy(c->joined[i]);
  free(c->marks);
  for (int s = 0; s < 4; s++)
    if (c->st[s]) cudaStreamDestroy(c->st[s]);
  if (c->dev) cudaFree(c->dev);
  if (c->host) cudaFreeHost(c->host);
  free(c->ev);
  free(c);
}

int cuda_open_inner(Cuda *c, int64_t arena_bytes, int64_t host_bytes, char *err, size_t errlen) {
  for (int s = 0; s < 4; s++) CK(cudaStreamCreateWithFlags(&c->st[s], cudaStreamNonBlocking), "stream");
  for (int i = 0; i < c->nevents; i++) CK(cudaEventCreateWithFlags(&c->ev[i], cudaEventDisableTiming), "event");
  for (int i = 0; i < 2; i++) CK(cudaEventCreate(&c->span[i]), "event");
  for (int i = 0; i < 3; i++) CK(cudaEventCreateWithFlags(&c->joined[i], cudaEventDisableTiming), "event");
  size_t db = (size_t)(arena_bytes > 0 ? arena_bytes : 256);
  CK(cudaMalloc((void **)&c->dev, db), "cudaMalloc of the device arena");
  CK(cudaMemset(c->dev, 0, db), "memset");
  if (host_bytes > 0) { /* a plan without offloads pins no host memory */
    c->host_size = (size_t)host_bytes;
    CK(cudaMallocHost((void **)&c->host, c->host_size), "cudaMallocHost of the host arena");
    memset(c->host, 0, c->host_size);
    CK(cudaHostGetDevicePointer((void **)&c->host_dev, c->host, 0), "device view of the host arena");
  }
  char kerr[256] = "";
  if (rt_cuda_kernel_ctx_create(&c->kctx, (void *)c->st[RT_STREAM_COMPUTE], kerr, sizeof kerr) != 0) {
    c->kctx = NULL;
    snprintf(err, errlen, "CUDA kernel context: %s", kerr);
    return RT_EBACKEND;
  }
  return RT_OK;
}

int cuda_open(void **ctx, int64_t arena_bytes, int64_t host_bytes, int nevents, bool debug, unsigned seed,
              unsigned delay_us, void **dev, void **host, char *err, size_t errlen) {
  *ctx = NULL;
  Cuda *c = (Cuda *)calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return RT_ENOMEM;
  }
  c->nevents = nevents;
  c->ev = (cudaEvent_t *)calloc((size_t)nevents + 1, sizeof *c->ev);
  c->debug = debug;
  c->seed = seed;
  c->delay_us = delay_us;
  int rc = c->ev ? cuda_open_inner(c, arena_bytes, host_bytes, err, errlen) : RT_ENOMEM;
  if (rc != RT_OK) {
    if (rc == RT_ENOMEM) snprintf(err, errlen, "out of memory");
    cuda_close(c);
    return rc;
  }
  *ctx = c;
  *dev = c->dev;
  *host = c->host;
  return RT_OK;
}

rt_KernelFn cuda_find_kernel(const char *type) {
  return rt_cuda_kernel_find(type);
}

void *cuda_kernel_ctx(void *ctx) {
  return ((Cuda *)ctx)->kctx;
}

int cuda_launch(void *ctx, rt_KernelFn fn, const rt_KernelArgs *a, bool profile, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  char kerr[256] = "";
  if (rt_cuda_kernel_ctx_ready(c->kctx, kerr, sizeof kerr) != 0 || fn(a, kerr, sizeof kerr) != 0) {
    snprintf(err, errlen, "kernel failed: %s", kerr[0] ? kerr : "no message");
    return RT_EKERNEL;
  }
  if (profile) CK(cudaStreamSynchronize(c->st[RT_STREAM_COMPUTE]), "kernel");
  return RT_OK;
}

/* A host op on CUDA's host thread: it must call no CUDA function. */
void CUDART_CB cuda_host_op(void *data) {
  rt_HostOp *op = (rt_HostOp *)data;
  Cuda *c = (Cuda *)op->backend;
  char kerr[128] = "";
  if (op->fn(op->args, kerr, sizeof kerr) != 0 && !c->host_failed) {
    snprintf(c->host_err, sizeof c->host_err, "host op failed: %s", kerr[0] ? kerr : "no message");
    __sync_synchronize();
    c->host_failed = 1;
  }
}

int cuda_host_launch(void *ctx, rt_HostOp *op, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  op->backend = c;
  CK(cudaLaunchHostFunc(c->st[RT_STREAM_HOST], cuda_host_op, op), "host op");
  return RT_OK;
}

int cuda_copy(void *ctx, int stream, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  if (c->debug && stream != RT_STREAM_COMPUTE) {
    unsigned r = (unsigned)rand_r(&c->seed);
    long long us = c->delay_us ? (long long)c->delay_us : (r % 8 == 0) ? (long long)(r % 2000) : (long long)(r % 100);
    spin_kernel<<<1, 1, 0, c->st[stream]>>>(us * 1500); /* ~1.5 GHz clock */
    CK(cudaGetLastError(), "debug delay");
  }
  CK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, c->st[stream]), "copy");
  return RT_OK;
}

int cuda_fill(void *ctx, int stream, void *dst, int byte, int64_t bytes, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  unsigned char *p = (unsigned char *)dst;
  if (bytes <= 0) return RT_OK;
  if (p >= c->host && p < c->host + c->host_size) {
    /* Pinned host bytes, in stream order: a kernel writing through the
     * device's mapping of them (cudaMemset takes device memory only). */
    size_t n = (size_t)bytes, blocks = (n + 255) / 256;
    fill_kernel<<<(unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, c->st[stream]>>>(c->host_dev + (p - c->host), byte, n);
    CK(cudaGetLastError(), "host fill");
  } else {
    CK(cudaMemsetAsync(dst, byte, (size_t)bytes, c->st[stream]), "memset");
  }
  return RT_OK;
}

int cuda_record(void *ctx, int stream, int event, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  CK(cudaEventRecord(c->ev[event], c->st[stream]), "event record");
  return RT_OK;
}

int cuda_wait(void *ctx, int stream, int event, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  CK(cudaStreamWaitEvent(c->st[stream], c->ev[event], 0), "stream wait");
  return RT_OK;
}

int cuda_set_runtime(void *ctx, void *bytes, int64_t n, char *err, size_t errlen) {
  char kerr[256] = "";
  if (rt_cuda_kernel_ctx_set_runtime(((Cuda *)ctx)->kctx, bytes, n, kerr, sizeof kerr) == 0) return RT_OK;
  snprintf(err, errlen, "CUDA kernel context: %s", kerr);
  return RT_EBACKEND;
}

/* The events of slots up to SLOT are made on first use: only profiled
 * sessions need them. */
int cuda_mark(void *ctx, int slot, bool end, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  if (slot >= c->nmarks) {
    int n = slot + 1 > 2 * c->nmarks ? slot + 1 : 2 * c->nmarks;
    cudaEvent_t *m = (cudaEvent_t *)realloc(c->marks, 2 * (size_t)n * sizeof *m);
    if (!m) {
      snprintf(err, errlen, "out of memory");
      return RT_ENOMEM;
    }
    memset(m + 2 * c->nmarks, 0, 2 * (size_t)(n - c->nmarks) * sizeof *m);
    c->marks = m;
    c->nmarks = n;
  }
  cudaEvent_t *e = &c->marks[2 * slot + (end ? 1 : 0)];
  if (!*e) CK(cudaEventCreate(e), "profile event");
  CK(cudaEventRecord(*e, c->st[RT_STREAM_COMPUTE]), "profile event record");
  return RT_OK;
}

double cuda_marked_seconds(void *ctx, int slot) {
  Cuda *c = (Cuda *)ctx;
  float ms = 0;
  if (slot >= c->nmarks || !c->marks[2 * slot] || !c->marks[2 * slot + 1] ||
      cudaEventElapsedTime(&ms, c->marks[2 * slot], c->marks[2 * slot + 1]) != cudaSuccess)
    return -1;
  return 1e-3 * ms;
}

/* The end waits for the copy and host streams, so the span covers every
 * copy and host op the step issued, waited for or not. */
int cuda_span(void *ctx, bool end, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  cudaStream_t compute = c->st[RT_STREAM_COMPUTE];
  if (end)
    for (int k = 0; k < 3; k++) {
      CK(cudaEventRecord(c->joined[k], c->st[RT_STREAM_D2H + k]), "step end");
      CK(cudaStreamWaitEvent(compute, c->joined[k], 0), "step end");
    }
  CK(cudaEventRecord(c->span[end ? 1 : 0], compute), "step span");
  return RT_OK;
}

double cuda_span_seconds(void *ctx) {
  Cuda *c = (Cuda *)ctx;
  float ms = 0;
  return cudaEventElapsedTime(&ms, c->span[0], c->span[1]) == cudaSuccess ? 1e-3 * ms : -1;
}

/* Stream S idle: blocking, or with the watchdog polled every 20 us until
 * the deadline (a kernel or copy that never completes). */
int cuda_stream_idle(Cuda *c, int s, const struct timespec *t0, char *err, size_t errlen) {
  if (!c->timeout_ms) {
    CK(cudaStreamSynchronize(c->st[s]), "synchronize");
    return RT_OK;
  }
  for (;;) {
    cudaError_t e = cudaStreamQuery(c->st[s]);
    if (e == cudaSuccess) return RT_OK;
    if (e != cudaErrorNotReady) return cuda_fail(e, "synchronize", err, errlen);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double ms = 1e3 * (double)(t.tv_sec - t0->tv_sec) + 1e-6 * (double)(t.tv_nsec - t0->tv_nsec);
    if (ms > (double)c->timeout_ms) {
      c->hung = true;
      snprintf(err, errlen, "timed out after %u ms waiting for stream %d (a copy or kernel that never completes)",
               c->timeout_ms, s);
      return RT_ETIMEOUT;
    }
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
}

int cuda_sync(void *ctx, char *err, size_t errlen) {
  Cuda *c = (Cuda *)ctx;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int s = 0; s < 4; s++) {
    int rc = cuda_stream_idle(c, s, &t0, err, errlen);
    if (rc != RT_OK) return rc;
  }
  if (c->host_failed) {
    __sync_synchronize();
    snprintf(err, errlen, "%s", c->host_err);
    c->host_failed = 0;
    return RT_EKERNEL;
  }
  char kerr[256] = "";
  if (rt_cuda_kernel_ctx_status(c->kctx, kerr, sizeof kerr) != 0) {
    snprintf(err, errlen, "kernel failed: %s", kerr);
    return RT_EKERNEL;
  }
  return RT_OK;
}

/* The arena's side of an upload or download is a device buffer or, for a
 * host-homed tensor, the pinned host arena: unified addressing tells which. */
int cuda_upload(void *ctx, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  (void)ctx;
  CK(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDefault), "upload");
  return RT_OK;
}

int cuda_download(void *ctx, void *dst, const void *src, int64_t bytes, char *err, size_t errlen) {
  (void)ctx;
  CK(cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDefault), "download");
  return RT_OK;
}

void cuda_set_timeout(void *ctx, unsigned ms) {
  ((Cuda *)ctx)->timeout_ms = ms;
}

/* warm_up: cuBLASLt descriptors and algorithms are chosen per shape on a
 * matmul's first call, so rt_open runs the schedule once. */
const rt_Backend cuda_backend = {
    "cuda",    true,        cuda_open, cuda_close, cuda_find_kernel, cuda_kernel_ctx, cuda_launch, cuda_host_launch,
    cuda_copy, cuda_fill,   cuda_record, cuda_wait, cuda_sync,       cuda_upload,     cuda_download,
    NULL, /* copy rates: not measured on the GPU yet */
    NULL, /* flush: a CUDA stream starts what it is given */
    cuda_mark, cuda_marked_seconds, cuda_span, cuda_span_seconds, cuda_set_runtime, cuda_set_timeout,
};

} // namespace

extern "C" const rt_Backend *rt_backend_cuda_get(char *err, size_t errlen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "no CUDA device: %s", cudaGetErrorString(e));
    return NULL;
  }
  if (n == 0) {
    snprintf(err, errlen, "no CUDA device");
    return NULL;
  }
  return &cuda_backend;
}
