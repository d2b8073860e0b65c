/*
 * kernels_cuda.cu - the CUDA kernels, one per op type of docs/OPS.md with the
 * semantics of the CPU reference (kernels_cpu.c), which the tests check and
 * which these mirror loop for loop: the same two-pass attention (dq per
 * query row, dk/dv per key row, no atomics), the same column sums for
 * weight gradients in row order, the loss mean summed in double. Row
 * reductions use one warp per row and a fixed shuffle tree, so every kernel
 * is deterministic. Matmuls go through cuBLASLt with a plan (descriptors,
 * layouts, algorithm) chosen once per shape and cached in the context.
 * Compiled with --fmad=false so that a*b+c rounds twice, as on the CPU.
 */
extern "C" {
#include "kernels.h"
#include "kernels_cuda.h"
}

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 256
#define WARPS_PER_BLOCK (THREADS / 32)
/* Head dims up to 256: each lane of the row's warp keeps hd/32 values of
 * q, dq, dk, dv in registers. */
#define CU_MAX_HD 256
#define HD_PER_LANE (CU_MAX_HD / 32)
#define PLAN_CAP 128
#define STATUS_BYTES 256 /* the status word's share of the runtime bytes, aligned for cuBLASLt */

using namespace nvcuda;

/* ------------------------------------------------------------- context */

typedef struct {
  int64_t m, n, k, lda, ldb, ldc;
  int dtype, ta, tb, bias, beta;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} Plan;

struct rt_CudaKernelCtx {
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void *lt_ws; /* in the runtime bytes; NULL: none */
  size_t lt_ws_bytes;
  int *status; /* device word: nonzero once a kernel saw a bad index */
  bool own_status; /* allocated here, not in the runtime bytes */
  Plan plans[PLAN_CAP];
  int nplans;
};

static int fail(char *err, size_t errlen, int code, const char *op, const char *fmt, ...) {
  if (err && errlen) {
    int n = snprintf(err, errlen, "%s: ", op);
    if (n >= 0 && (size_t)n < errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return code;
}

#define REQUIRE(cond, ...) \
  do { if (!(cond)) return fail(err, errlen, RT_KERNEL_EARGS, OP, __VA_ARGS__); } while (0)

static int launched(char *err, size_t errlen, const char *op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(err, errlen, RT_KERNEL_EDEVICE, op, "%s", cudaGetErrorString(e));
  return 0;
}

extern "C" int rt_cuda_kernel_ctx_create(rt_CudaKernelCtx **out, void *stream, char *err, size_t errlen) {
  const char *OP = "cuda kernels";
  rt_CudaKernelCtx *c = (rt_CudaKernelCtx *)calloc(1, sizeof *c);
  *out = NULL;
  if (!c) return fail(err, errlen, RT_KERNEL_EDEVICE, OP, "out of host memory");
  c->stream = (cudaStream_t)stream;
  if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
    free(c);
    return fail(err, errlen, RT_KERNEL_EDEVICE, OP, "cublasLtCreate failed");
  }
  *out = c;
  return 0;
}

extern "C" int rt_cuda_kernel_ctx_set_runtime(rt_CudaKernelCtx *c, void *bytes, int64_t n, char *err, size_t errlen) {
  if (c->status || n < STATUS_BYTES) return 0;
  cudaError_t e = cudaMemset(bytes, 0, sizeof(int));
  if (e != cudaSuccess) return fail(err, errlen, RT_KERNEL_EDEVICE, "cuda kernels", "%s", cudaGetErrorString(e));
  c->status = (int *)bytes;
  c->lt_ws = n > STATUS_BYTES ? (unsigned char *)bytes + STATUS_BYTES : NULL;
  c->lt_ws_bytes = (size_t)(n - STATUS_BYTES);
  return 0;
}

extern "C" int rt_cuda_kernel_ctx_ready(rt_CudaKernelCtx *c, char *err, size_t errlen) {
  if (c->status) return 0;
  cudaError_t e = cudaMalloc((void **)&c->status, sizeof(int));
  if (e == cudaSuccess) e = cudaMemset(c->status, 0, sizeof(int));
  if (e != cudaSuccess) {
    if (c->status) cudaFree(c->status);
    c->status = NULL;
    return fail(err, errlen, RT_KERNEL_EDEVICE, "cuda kernels", "status word: %s", cudaGetErrorString(e));
  }
  c->own_status = true;
  return 0;
}

extern "C" void rt_cuda_kernel_ctx_destroy(rt_CudaKernelCtx *c) {
  if (!c) return;
  for (int i = 0; i < c->nplans; i++) {
    Plan *p = &c->plans[i];
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
  }
  if (c->lt) cublasLtDestroy(c->lt);
  if (c->own_status) cudaFree(c->status);
  free(c);
}

extern "C" int rt_cuda_kernel_ctx_status(rt_CudaKernelCtx *c, char *err, size_t errlen) {
  int h = 0;
  if (!c->status) return 0;
  cudaError_t e = cudaMemcpy(&h, c->status, sizeof h, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && h) e = cudaMemset(c->status, 0, sizeof(int));
  if (e != cudaSuccess) return fail(err, errlen, RT_KERNEL_EDEVICE, "cuda kernels", "%s", cudaGetErrorString(e));
  if (h) return fail(err, errlen, RT_KERNEL_EVALUE, "cuda kernels", "a token or target id was outside [0, V)");
  return 0;
}

static rt_CudaKernelCtx *ctx_of(const rt_KernelArgs *a) { return (rt_CudaKernelCtx *)a->backend_ctx; }

/* ------------------------------------------------------ device storage */

typedef struct {
  void *p;
  int dt;
} DV;

static DV dv(const rt_View *v) {
  DV d = {v->data, (int)v->dtype};
  return d;
}
static DV dv_none(void) {
  DV d = {NULL, RT_F32};
  return d;
}

__device__ __forceinline__ float ld(DV v, int64_t i) {
  if (v.dt == RT_F32) return ((const float *)v.p)[i];
  unsigned short h = ((const unsigned short *)v.p)[i];
  if (v.dt == RT_BF16) return __uint_as_float((unsigned)h << 16);
  return __half2float(__ushort_as_half(h));
}

/* bf16: round to nearest even, NaN stays quiet NaN: rt_f32_to_bf16's bits. */
__device__ __forceinline__ void st(DV v, int64_t i, float x) {
  if (v.dt == RT_F32) {
    ((float *)v.p)[i] = x;
  } else if (v.dt == RT_BF16) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = (u >> 16) | 0x40u;
    else u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    ((unsigned short *)v.p)[i] = (unsigned short)u;
  } else {
    ((unsigned short *)v.p)[i] = __half_as_ushort(__float2half_rn(x));
  }
}

/* XOR butterfly: every lane ends with the same value, formed by the same
 * tree whatever the run. */
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

static unsigned nblocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

#define GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#define WARP_ROW() \
  const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32; \
  const int lane = threadIdx.x % 32

/* Column sums over N rows, deterministic, in two launches: blocks of
 * 32 x 32 threads each own 32 columns of one chunk of rows (each thread
 * sums every 32nd row of the chunk in order, then row group 0 adds the 32
 * partial sums in order) and write one partial sum per chunk; then a
 * thread per column adds the chunks' partial sums in order. The partial
 * sums live in the cuBLASLt workspace, which only this stream's matmuls
 * use, in stream order; without room there, one chunk of all the rows adds
 * its sums to the outputs itself. COLSUM_* says what a row contributes. */
enum { COLSUM_DY, COLSUM_DY_XHAT_LN, COLSUM_DY_XHAT_RMS };
#define COLSUM_TILE 32
#define COLSUM_BLOCKS 528 /* 4 per multiprocessor of an H100 */
#define COLSUM_MAX_CHUNKS 64

__device__ __forceinline__ float block_column_total(float v, float (*part)[COLSUM_TILE + 1]) {
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.y == 0)
    for (int r = 0; r < COLSUM_TILE; r++) s += part[r][threadIdx.x];
  __syncthreads();
  return s;
}

/* part0[chunk, c] = sum over the chunk's rows of dy[n,c] * f(n,c) (f = 1,
 * or x-hat for layernorm and rmsnorm); part1[chunk, c] the sum of dy. With
 * no partial sums (one chunk): out0[c] += the first, out1[c] += the second. */
__global__ void colsum_part_k(float *part0, float *part1, DV out0, DV out1, DV dy, DV x, const float *mean,
                              const float *rstd, int64_t N, int64_t C, int64_t rows, int mode) {
  __shared__ float part[COLSUM_TILE][COLSUM_TILE + 1];
  int64_t c = (int64_t)blockIdx.x * COLSUM_TILE + threadIdx.x, n0 = (int64_t)blockIdx.y * rows;
  int64_t n1 = n0 + rows < N ? n0 + rows : N;
  float s0 = 0.0f, s1 = 0.0f;
  if (c < C)
    for (int64_t n = n0 + threadIdx.y; n < n1; n += COLSUM_TILE) {
      float d = ld(dy, n * C + c);
      if (mode == COLSUM_DY) {
        s0 += d;
      } else {
        float xh = mode == COLSUM_DY_XHAT_LN ? (ld(x, n * C + c) - mean[n]) * rstd[n] : ld(x, n * C + c) * rstd[n];
        s0 += d * xh;
        s1 += d;
      }
    }
  s0 = block_column_total(s0, part);
  s1 = block_column_total(s1, part);
  if (threadIdx.y != 0 || c >= C) return;
  if (part0) {
    part0[blockIdx.y * C + c] = s0;
    part1[blockIdx.y * C + c] = s1;
  } else {
    st(out0, c, ld(out0, c) + s0);
    if (out1.p) st(out1, c, ld(out1, c) + s1);
  }
}

/* out0[c] += the chunks' part0 in order; with out1, out1[c] += part1's. */
__global__ void colsum_finish_k(DV out0, DV out1, const float *part0, const float *part1, int64_t C, int chunks) {
  GRID_STRIDE(c, C) {
    float s0 = 0.0f, s1 = 0.0f;
    for (int k = 0; k < chunks; k++) s0 += part0[k * C + c], s1 += part1[k * C + c];
    st(out0, c, ld(out0, c) + s0);
    if (out1.p) st(out1, c, ld(out1, c) + s1);
  }
}

static void colsum(rt_CudaKernelCtx *k, DV out0, DV out1, DV dy, DV x, const float *mean, const float *rstd,
                   int64_t N, int64_t C, int mode) {
  int64_t tiles = (C + COLSUM_TILE - 1) / COLSUM_TILE, chunks = COLSUM_BLOCKS / tiles;
  int64_t fit = (int64_t)(k->lt_ws_bytes / (2 * sizeof(float))) / (C > 0 ? C : 1);
  chunks = chunks > COLSUM_MAX_CHUNKS ? COLSUM_MAX_CHUNKS : chunks;
  chunks = chunks > fit ? fit : chunks;
  if (chunks < 2) chunks = 1;
  int64_t rows = (N + chunks - 1) / chunks;
  float *part0 = chunks > 1 ? (float *)k->lt_ws : NULL, *part1 = part0 ? part0 + chunks * C : NULL;
  colsum_part_k<<<dim3((unsigned)tiles, (unsigned)chunks), dim3(COLSUM_TILE, COLSUM_TILE), 0, k->stream>>>(
      part0, part1, out0, out1, dy, x, mean, rstd, N, C, rows, mode);
  if (part0)
    colsum_finish_k<<<nblocks(C, THREADS), THREADS, 0, k->stream>>>(out0, out1, part0, part1, C, (int)chunks);
}

static int is_float(const rt_View *v) { return v->dtype == RT_F32 || v->dtype == RT_BF16 || v->dtype == RT_F16; }
static int64_t last_dim(const rt_View *v) { return v->rank > 0 ? v->shape[v->rank - 1] : 1; }

/* ------------------------------------------------------------- encoder */

__global__ void encoder_forward_k(DV x, const int *tok, DV wte, DV wpe, int64_t N, int64_t T, int64_t C,
                                  int64_t V, int *status) {
  GRID_STRIDE(i, N * C) {
    int64_t n = i / C, c = i % C;
    int t = tok[n];
    if (t < 0 || t >= V) {
      *status = 1;
      continue;
    }
    float v = ld(wte, (int64_t)t * C + c);
    if (wpe.p) v += ld(wpe, (n % T) * C + c);
    st(x, i, v);
  }
}

/* A block per vocabulary id lists, in token order, the positions holding
 * it (a block-wide prefix sum over each chunk of positions), then each
 * thread adds the listed dx rows of its columns in order in a register and
 * updates dwte once: every dwte element sums its tokens in order, with no
 * atomics, and a frequent token costs one pass over its positions rather
 * than a chain of read-modify-writes. The list lives in dynamic shared
 * memory and is flushed when full. */
#define ENC_LIST 4096

/* x rounded to V's storage type, as storing it and loading it back would. */
__device__ __forceinline__ float rounded(DV v, float x) {
  if (v.dt == RT_F32) return x;
  if (v.dt == RT_F16) return __half2float(__float2half_rn(x));
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

/* Each sum rounds to dwte's type after every token, as the CPU's += does. */
__device__ void encoder_flush(DV dwte, DV dx, const int *list, int listed, int64_t t, int64_t C) {
  for (int64_t c = threadIdx.x; c < C; c += THREADS) {
    float acc = ld(dwte, t * C + c);
    for (int i = 0; i < listed; i++) acc = rounded(dwte, acc + ld(dx, (int64_t)list[i] * C + c));
    st(dwte, t * C + c, acc);
  }
}

__global__ void encoder_backward_wte_k(DV dwte, DV dx, const int *tok, int64_t N, int64_t C, int64_t V,
                                       int *status) {
  extern __shared__ int list[];
  __shared__ int warp_count[THREADS / 32];
  __shared__ int listed;
  const int64_t id = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();
  for (int64_t base = 0; base < N; base += THREADS) {
    int64_t n = base + threadIdx.x;
    int t = n < N ? tok[n] : -1;
    if (id == 0 && n < N && (t < 0 || t >= V)) *status = 1;
    bool mine = n < N && t == id;
    unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int before = listed, total = 0;
    for (int w = 0; w < THREADS / 32; w++) {
      if (w == warp) before += total;
      total += warp_count[w];
    }
    bool full = listed + total > ENC_LIST;
    if (full) { /* add what is listed, then list this chunk from the start */
      encoder_flush(dwte, dx, list, listed, id, C);
      before -= listed;
    }
    __syncthreads();
    if (mine) list[before + __popc(ballot & ((1u << lane) - 1u))] = (int)n;
    __syncthreads();
    if (threadIdx.x == 0) listed = (full ? 0 : listed) + total;
    __syncthreads();
  }
  if (listed) encoder_flush(dwte, dx, list, listed, id, C);
}

__global__ void encoder_backward_wpe_k(DV dwpe, DV dx, int64_t N, int64_t T, int64_t C) {
  GRID_STRIDE(i, T * C) {
    int64_t t = i / C, c = i % C;
    float s = 0.0f;
    for (int64_t n = t; n < N; n += T) s += ld(dx, n * C + c);
    st(dwpe, i, ld(dwpe, i) + s);
  }
}

#include "kernels_next.cuh"

static int encoder_common(const rt_KernelArgs *a, char *err, size_t errlen, int with_pos, const char *OP) {
  REQUIRE(a->nout == 1 && a->nin == (with_pos ? 3 : 2), "want %d inputs and 1 output", with_pos ? 3 : 2);
  const rt_View *x = &a->out[0], *tok = &a->in[0], *wte = &a->in[1];
  const rt_View *wpe = with_pos ? &a->in[2] : NULL;
  REQUIRE(tok->dtype == RT_I32 && tok->rank >= 1, "tokens must be i32");
  REQUIRE(is_float(x) && is_float(wte) && (!wpe || is_float(wpe)), "x, wte, wpe must be float");
  int64_t N = tok->numel, T = last_dim(tok), C = last_dim(x);
  REQUIRE(wte->rank == 2 && wte->shape[1] == C && x->numel == N * C, "x must be [B,T,C], wte [V,C]");
  REQUIRE(!wpe || (wpe->rank == 2 && wpe->shape[1] == C && wpe->shape[0] >= T), "wpe must be [>=T,C]");
  rt_CudaKernelCtx *c = ctx_of(a);
  encoder_forward_k<<<nblocks(N * C, THREADS), THREADS, 0, c->stream>>>(
      dv(x), (const int *)tok->data, dv(wte), wpe ? dv(wpe) : dv_none(), N, T, C, wte->shape[0], c->status);
  return launched(err, errlen, OP);
}

static int k_encoder(const rt_KernelArgs *a, char *err, size_t errlen) { return encoder_common(a, err, errlen, 1, "encoder"); }
static int k_embedding(const rt_KernelArgs *a, char *err, size_t errlen) { return encoder_common(a, err, errlen, 0, "embedding"); }

static int encoder_backward_common(const rt_KernelArgs *a, char *err, size_t errlen, int with_pos, const char *OP) {
  REQUIRE(a->nin == 2 && a->nout == (with_pos ? 2 : 1), "want 2 inputs and %d outputs", with_pos ? 2 : 1);
  const rt_View *dx = &a->in[0], *tok = &a->in[1], *dwte = &a->out[0];
  const rt_View *dwpe = with_pos ? &a->out[1] : NULL;
  REQUIRE(tok->dtype == RT_I32 && tok->rank >= 1, "tokens must be i32");
  REQUIRE(is_float(dx) && is_float(dwte) && (!dwpe || is_float(dwpe)), "dx, dwte, dwpe must be float");
  int64_t N = tok->numel, T = last_dim(tok), C = last_dim(dx);
  REQUIRE(dwte->rank == 2 && dwte->shape[1] == C && dx->numel == N * C, "dx must be [B,T,C], dwte [V,C]");
  REQUIRE(!dwpe || (dwpe->rank == 2 && dwpe->shape[1] == C && dwpe->shape[0] >= T), "dwpe must be [>=T,C]");
  rt_CudaKernelCtx *c = ctx_of(a);
  if (!next_kernels() || next_encoder_backward(c, dwte, dx, (const int *)tok->data, N, C))
    encoder_backward_wte_k<<<(unsigned)dwte->shape[0], THREADS, ENC_LIST * sizeof(int), c->stream>>>(
        dv(dwte), dv(dx), (const int *)tok->data, N, C, dwte->shape[0], c->status);
  if (dwpe) encoder_backward_wpe_k<<<nblocks(T * C, THREADS), THREADS, 0, c->stream>>>(dv(dwpe), dv(dx), N, T, C);
  return launched(err, errlen, OP);
}

static int k_encoder_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_backward_common(a, err, errlen, 1, "encoder_backward");
}
static int k_embedding_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_backward_common(a, err, errlen, 0, "embedding_backward");
}

/* --------------------------------------------------------------- norms */

__global__ void layernorm_forward_k(DV y, float *mean, float *rstd, DV x, DV w, DV b, int64_t N, int64_t C,
                                    float eps) {
  WARP_ROW();
  if (row >= N) return;
  int64_t o = row * C;
  float m = 0.0f;
  for (int64_t c = lane; c < C; c += 32) m += ld(x, o + c);
  m = warp_sum(m) / (float)C;
  float v = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float d = ld(x, o + c) - m;
    v += d * d;
  }
  v = warp_sum(v) / (float)C;
  float r = 1.0f / sqrtf(v + eps);
  for (int64_t c = lane; c < C; c += 32) {
    float xh = (ld(x, o + c) - m) * r;
    st(y, o + c, xh * ld(w, c) + ld(b, c));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_dx_k(DV dx, DV dy, DV x, DV w, const float *mean, const float *rstd,
                                        int64_t N, int64_t C) {
  WARP_ROW();
  if (row >= N) return;
  int64_t o = row * C;
  float m = mean[row], r = rstd[row], sd = 0.0f, sdx = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float dn = ld(dy, o + c) * ld(w, c);
    sd += dn;
    sdx += dn * (ld(x, o + c) - m) * r;
  }
  sd = warp_sum(sd) / (float)C;
  sdx = warp_sum(sdx) / (float)C;
  for (int64_t c = lane; c < C; c += 32) {
    float xh = (ld(x, o + c) - m) * r;
    float dn = ld(dy, o + c) * ld(w, c);
    st(dx, o + c, (dn - sd - xh * sdx) * r);
  }
}

static int k_layernorm(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "layernorm";
  REQUIRE(a->nin == 3 && a->nout == 3, "want 3 inputs (x, w, b) and 3 outputs (y, mean, rstd)");
  const rt_View *x = &a->in[0], *w = &a->in[1], *b = &a->in[2];
  const rt_View *y = &a->out[0], *mean = &a->out[1], *rstd = &a->out[2];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(x) && is_float(w) && is_float(b) && is_float(y), "x, w, b, y must be float");
  REQUIRE(mean->dtype == RT_F32 && rstd->dtype == RT_F32, "mean and rstd must be f32");
  REQUIRE(w->numel == C && b->numel == C && y->numel == x->numel && mean->numel == N && rstd->numel == N,
          "shapes must be x,y [B,T,C], w,b [C], mean,rstd [B,T]");
  layernorm_forward_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
      dv(y), (float *)mean->data, (float *)rstd->data, dv(x), dv(w), dv(b), N, C, (float)rt_attr(a, "eps", 1e-5));
  return launched(err, errlen, OP);
}

static int k_layernorm_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "layernorm_backward";
  const rt_View *g[3];
  REQUIRE(a->nin == 5 && rt_grad_outputs(a, 3, g) == 0 && !g[1] == !g[2],
          "want 5 inputs (dy, x, w, mean, rstd) and outputs (dx, dw, db) or those \"grads\" names");
  const rt_View *dy = &a->in[0], *x = &a->in[1], *w = &a->in[2], *mean = &a->in[3], *rstd = &a->in[4];
  const rt_View *dx = g[0], *dw = g[1], *db = g[2];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(dy) && is_float(x) && is_float(w) && (!dx || is_float(dx)) && (!dw || (is_float(dw) && is_float(db))),
          "dy, x, w, dx, dw, db must be float");
  REQUIRE(mean->dtype == RT_F32 && rstd->dtype == RT_F32, "mean and rstd must be f32");
  REQUIRE(dy->numel == x->numel && (!dx || dx->numel == x->numel) && w->numel == C && (!dw || dw->numel == C) &&
          (!db || db->numel == C) && mean->numel == N && rstd->numel == N, "shapes do not match layernorm's");
  cudaStream_t s = ctx_of(a)->stream;
  const float *mp = (const float *)mean->data, *rp = (const float *)rstd->data;
  if (next_kernels() && !next_layernorm_backward(ctx_of(a), dx, dw, db, dy, x, w, mp, rp, N, C))
    return launched(err, errlen, OP);
  if (dx)
    layernorm_backward_dx_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, s>>>(dv(dx), dv(dy), dv(x), dv(w), mp, rp, N, C);
  if (dw) colsum(ctx_of(a), dv(dw), dv(db), dv(dy), dv(x), mp, rp, N, C, COLSUM_DY_XHAT_LN);
  return launched(err, errlen, OP);
}

__global__ void rmsnorm_forward_k(DV y, float *rstd, DV x, DV w, int64_t N, int64_t C, float eps) {
  WARP_ROW();
  if (row >= N) return;
  int64_t o = row * C;
  float ss = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float v = ld(x, o + c);
    ss += v * v;
  }
  float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
  for (int64_t c = lane; c < C; c += 32) st(y, o + c, ld(x, o + c) * r * ld(w, c));
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_dx_k(DV dx, DV dy, DV x, DV w, const float *rstd, int64_t N, int64_t C) {
  WARP_ROW();
  if (row >= N) return;
  int64_t o = row * C;
  float r = rstd[row], s = 0.0f;
  for (int64_t c = lane; c < C; c += 32) s += ld(dy, o + c) * ld(w, c) * (ld(x, o + c) * r);
  s = warp_sum(s) / (float)C;
  for (int64_t c = lane; c < C; c += 32) {
    float xh = ld(x, o + c) * r;
    st(dx, o + c, (ld(dy, o + c) * ld(w, c) - xh * s) * r);
  }
}

static int k_rmsnorm(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "rmsnorm";
  REQUIRE(a->nin == 2 && a->nout == 2, "want 2 inputs (x, w) and 2 outputs (y, rstd)");
  const rt_View *x = &a->in[0], *w = &a->in[1], *y = &a->out[0], *rstd = &a->out[1];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(x) && is_float(w) && is_float(y) && rstd->dtype == RT_F32, "x, w, y must be float and rstd f32");
  REQUIRE(w->numel == C && y->numel == x->numel && rstd->numel == N, "shapes must be x,y [B,T,C], w [C], rstd [B,T]");
  rmsnorm_forward_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
      dv(y), (float *)rstd->data, dv(x), dv(w), N, C, (float)rt_attr(a, "eps", 1e-5));
  return launched(err, errlen, OP);
}

static int k_rmsnorm_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "rmsnorm_backward";
  const rt_View *g[2];
  REQUIRE(a->nin == 4 && rt_grad_outputs(a, 2, g) == 0,
          "want 4 inputs (dy, x, w, rstd) and outputs (dx, dw) or those \"grads\" names");
  const rt_View *dy = &a->in[0], *x = &a->in[1], *w = &a->in[2], *rstd = &a->in[3], *dx = g[0], *dw = g[1];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(dy) && is_float(x) && is_float(w) && (!dx || is_float(dx)) && (!dw || is_float(dw)) &&
          rstd->dtype == RT_F32, "dy, x, w, dx, dw must be float and rstd f32");
  REQUIRE(dy->numel == x->numel && (!dx || dx->numel == x->numel) && w->numel == C && (!dw || dw->numel == C) &&
          rstd->numel == N, "shapes do not match rmsnorm's");
  cudaStream_t s = ctx_of(a)->stream;
  const float *rp = (const float *)rstd->data;
  if (dx) rmsnorm_backward_dx_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, s>>>(dv(dx), dv(dy), dv(x), dv(w), rp, N, C);
  if (dw) colsum(ctx_of(a), dv(dw), dv_none(), dv(dy), dv(x), NULL, rp, N, C, COLSUM_DY_XHAT_RMS);
  return launched(err, errlen, OP);
}

/* -------------------------------------------------------------- matmul */

static cudaDataType_t lt_type(int dt) {
  return dt == RT_F32 ? CUDA_R_32F : dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The plan for one product shape, made on first use and kept: cuBLASLt's
 * heuristic runs once per shape, not per step. */
static int plan_get(rt_CudaKernelCtx *c, const Plan *key, Plan **out, char *err, size_t errlen) {
  const char *OP = "matmul";
  for (int i = 0; i < c->nplans; i++) {
    Plan *p = &c->plans[i];
    if (p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda && p->ldb == key->ldb &&
        p->ldc == key->ldc && p->dtype == key->dtype && p->ta == key->ta && p->tb == key->tb &&
        p->bias == key->bias && p->beta == key->beta) {
      *out = p;
      return 0;
    }
  }
  if (c->nplans == PLAN_CAP) return fail(err, errlen, RT_KERNEL_EDEVICE, OP, "more than %d matmul shapes", PLAN_CAP);
  Plan *p = &c->plans[c->nplans];
  *p = *key;
  cudaDataType_t t = lt_type(key->dtype);
  cublasOperation_t opa = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ok = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return fail(err, errlen, RT_KERNEL_EDEVICE, OP, "cublasLtMatmulDescCreate failed");
  ok = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS;
  if (ok && key->bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    ok = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS;
  }
  /* Stored operands are column-major matrices of (rows, cols, ld). */
  ok = ok &&
       cublasLtMatrixLayoutCreate(&p->la, t, (uint64_t)(key->ta ? key->k : key->m), (uint64_t)(key->ta ? key->m : key->k),
                                  key->lda) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&p->lb, t, (uint64_t)(key->tb ? key->n : key->k), (uint64_t)(key->tb ? key->k : key->n),
                                  key->ldb) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&p->lc, t, (uint64_t)key->m, (uint64_t)key->n, key->ldc) == CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int nres = 0;
  size_t wsb = c->lt_ws_bytes;
  ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres) ==
           CUBLAS_STATUS_SUCCESS &&
       nres > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (!ok) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
    return fail(err, errlen, RT_KERNEL_EDEVICE, OP, "no cuBLASLt algorithm for %lldx%lldx%lld", (long long)key->m,
                (long long)key->n, (long long)key->k);
  }
  p->algo = res.algo;
  c->nplans++;
  *out = p;
  return 0;
}

/* Column-major D(m,n) = op(A) op(B) (+ beta D) (+ bias[m]). */
static int lt_matmul(rt_CudaKernelCtx *c, int64_t m, int64_t n, int64_t k, const void *A, int ta, int64_t lda,
                     const void *B, int tb, int64_t ldb, void *D, int64_t ldc, int dtype, int beta1,
                     const void *bias, char *err, size_t errlen) {
  Plan key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.dtype = dtype, key.ta = ta, key.tb = tb, key.bias = bias != NULL, key.beta = beta1;
  Plan *p = NULL;
  int rc = plan_get(c, &key, &p, err, errlen);
  if (rc) return rc;
  if (bias && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                  CUBLAS_STATUS_SUCCESS)
    return fail(err, errlen, RT_KERNEL_EDEVICE, "matmul", "cannot set the bias pointer");
  float alpha = 1.0f, beta = beta1 ? 1.0f : 0.0f;
  if (cublasLtMatmul(c->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo, c->lt_ws,
                     c->lt_ws_bytes, c->stream) != CUBLAS_STATUS_SUCCESS)
    return fail(err, errlen, RT_KERNEL_EDEVICE, "matmul", "cublasLtMatmul failed");
  return 0;
}

static int k_matmul(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "matmul";
  REQUIRE((a->nin == 2 || a->nin == 3) && a->nout == 1, "want inputs (x, w[, bias]) and 1 output");
  const rt_View *x = &a->in[0], *w = &a->in[1], *bias = a->nin == 3 ? &a->in[2] : NULL, *y = &a->out[0];
  REQUIRE(is_float(x) && w->dtype == x->dtype && y->dtype == x->dtype && (!bias || bias->dtype == x->dtype),
          "x, w, bias, y must share one float dtype on CUDA");
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(w->rank == 2 && w->shape[1] == C, "w must be [OC, C] with C the last dim of x");
  int64_t OC = w->shape[0];
  REQUIRE(last_dim(y) == OC && y->numel == N * OC && (!bias || bias->numel == OC), "y must be [.., OC], bias [OC]");
  /* row-major y[N,OC] = x w^T is column-major y^T(OC,N) = w^T(stored) ^T x^T */
  return lt_matmul(ctx_of(a), OC, N, C, w->data, 1, C, x->data, 0, C, y->data, OC, x->dtype, 0,
                   bias ? bias->data : NULL, err, errlen);
}

static int k_matmul_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "matmul_backward";
  const rt_View *g[3];
  REQUIRE(a->nin == 3 && a->nout >= 1 && rt_grad_outputs(a, 3, g) == 0,
          "want inputs (dy, x, w) and outputs (dx, dw[, dbias]) or those \"grads\" names");
  const rt_View *dy = &a->in[0], *x = &a->in[1], *w = &a->in[2], *dx = g[0], *dw = g[1], *dbias = g[2];
  REQUIRE(is_float(x) && dy->dtype == x->dtype && w->dtype == x->dtype && (!dx || dx->dtype == x->dtype) &&
          (!dw || dw->dtype == x->dtype) && (!dbias || is_float(dbias)),
          "dy, x, w, dx, dw must share one float dtype on CUDA");
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(w->rank == 2 && w->shape[1] == C, "w must be [OC, C] with C the last dim of x");
  int64_t OC = w->shape[0];
  REQUIRE(dy->numel == N * OC && (!dx || dx->numel == x->numel) && (!dw || dw->numel == w->numel) &&
          (!dbias || dbias->numel == OC), "shapes do not match matmul's");
  rt_CudaKernelCtx *c = ctx_of(a);
  /* dx^T(C,N) = w^T(C,OC) dy^T(OC,N); dw^T(C,OC) += x^T(C,N) dy(N,OC) */
  int rc = 0;
  if (dx) rc = lt_matmul(c, C, N, OC, w->data, 0, C, dy->data, 0, OC, dx->data, C, x->dtype, 0, NULL, err, errlen);
  if (!rc && dw)
    rc = lt_matmul(c, C, OC, N, x->data, 0, C, dy->data, 1, OC, dw->data, C, x->dtype, 1, NULL, err, errlen);
  if (rc || !dbias) return rc;
  colsum(c, dv(dbias), dv_none(), dv(dy), dv_none(), NULL, NULL, N, OC, COLSUM_DY);
  return launched(err, errlen, OP);
}

/* ----------------------------------------------------------- attention */

typedef struct {
  int64_t B, T, NH, KVH, hd, row;
  float scale;
} AttnShape;

__device__ __forceinline__ int64_t q_off(const AttnShape &s, int64_t b, int64_t t, int64_t h) {
  return (b * s.T + t) * s.row + h * s.hd;
}
__device__ __forceinline__ int64_t k_off(const AttnShape &s, int64_t b, int64_t t, int64_t g) {
  return (b * s.T + t) * s.row + (s.NH + g) * s.hd;
}
__device__ __forceinline__ int64_t v_off(const AttnShape &s, int64_t b, int64_t t, int64_t g) {
  return (b * s.T + t) * s.row + (s.NH + s.KVH + g) * s.hd;
}

/* A warp per query row; lane l holds dims l, l+32, ... of its vectors. */
__device__ __forceinline__ void load_lanes(float *r, DV v, int64_t off, int64_t hd, int lane) {
  for (int j = 0; j < HD_PER_LANE; j++) {
    int64_t d = lane + 32 * j;
    r[j] = d < hd ? ld(v, off + d) : 0.0f;
  }
}
__device__ __forceinline__ float dot_lanes(const float *r, DV v, int64_t off, int64_t hd, int lane) {
  float p = 0.0f;
  for (int j = 0; j < HD_PER_LANE; j++) {
    int64_t d = lane + 32 * j;
    if (d < hd) p += r[j] * ld(v, off + d);
  }
  return warp_sum(p);
}

__global__ void attention_forward_k(DV y, float *lse, DV qkv, AttnShape s) {
  WARP_ROW();
  if (row >= s.B * s.NH * s.T) return;
  int64_t t = row % s.T, h = (row / s.T) % s.NH, b = row / (s.T * s.NH), g = h / (s.NH / s.KVH);
  float q[HD_PER_LANE], acc[HD_PER_LANE];
  load_lanes(q, qkv, q_off(s, b, t, h), s.hd, lane);
  float mx = -INFINITY;
  for (int64_t u = 0; u <= t; u++) mx = fmaxf(mx, dot_lanes(q, qkv, k_off(s, b, u, g), s.hd, lane) * s.scale);
  float sum = 0.0f;
  for (int j = 0; j < HD_PER_LANE; j++) acc[j] = 0.0f;
  for (int64_t u = 0; u <= t; u++) {
    float p = expf(dot_lanes(q, qkv, k_off(s, b, u, g), s.hd, lane) * s.scale - mx);
    sum += p;
    int64_t vo = v_off(s, b, u, g);
    for (int j = 0; j < HD_PER_LANE; j++) {
      int64_t d = lane + 32 * j;
      if (d < s.hd) acc[j] += p * ld(qkv, vo + d);
    }
  }
  int64_t yo = (b * s.T + t) * s.NH * s.hd + h * s.hd;
  for (int j = 0; j < HD_PER_LANE; j++) {
    int64_t d = lane + 32 * j;
    if (d < s.hd) st(y, yo + d, acc[j] / sum);
  }
  if (lane == 0) lse[(b * s.NH + h) * s.T + t] = mx + logf(sum);
}

/* Pass A: per query row, D = dy.y (to the workspace) and dq. */
__global__ void attention_backward_q_k(DV dqkv, float *D, DV dy, DV qkv, DV y, const float *lse, AttnShape s) {
  WARP_ROW();
  if (row >= s.B * s.NH * s.T) return;
  int64_t t = row % s.T, h = (row / s.T) % s.NH, b = row / (s.T * s.NH), g = h / (s.NH / s.KVH);
  float q[HD_PER_LANE], dyt[HD_PER_LANE], dq[HD_PER_LANE];
  int64_t yo = (b * s.T + t) * s.NH * s.hd + h * s.hd;
  load_lanes(q, qkv, q_off(s, b, t, h), s.hd, lane);
  load_lanes(dyt, dy, yo, s.hd, lane);
  float Dt = dot_lanes(dyt, y, yo, s.hd, lane);
  int64_t r = (b * s.NH + h) * s.T + t;
  float L = lse[r];
  if (lane == 0) D[r] = Dt;
  for (int j = 0; j < HD_PER_LANE; j++) dq[j] = 0.0f;
  for (int64_t u = 0; u <= t; u++) {
    int64_t ko = k_off(s, b, u, g);
    float p = expf(dot_lanes(q, qkv, ko, s.hd, lane) * s.scale - L);
    float dp = dot_lanes(dyt, qkv, v_off(s, b, u, g), s.hd, lane);
    float ds = p * (dp - Dt);
    for (int j = 0; j < HD_PER_LANE; j++) {
      int64_t d = lane + 32 * j;
      if (d < s.hd) dq[j] += ds * ld(qkv, ko + d);
    }
  }
  int64_t qo = q_off(s, b, t, h);
  for (int j = 0; j < HD_PER_LANE; j++) {
    int64_t d = lane + 32 * j;
    if (d < s.hd) st(dqkv, qo + d, dq[j] * s.scale);
  }
}

/* Pass B: per key row, dk and dv over the group's query heads and the
 * queries at or after it. */
__global__ void attention_backward_kv_k(DV dqkv, const float *D, DV dy, DV qkv, const float *lse, AttnShape s) {
  WARP_ROW();
  if (row >= s.B * s.KVH * s.T) return;
  int64_t u = row % s.T, g = (row / s.T) % s.KVH, b = row / (s.T * s.KVH), rep = s.NH / s.KVH;
  float k[HD_PER_LANE], v[HD_PER_LANE], dk[HD_PER_LANE], dvv[HD_PER_LANE];
  load_lanes(k, qkv, k_off(s, b, u, g), s.hd, lane);
  load_lanes(v, qkv, v_off(s, b, u, g), s.hd, lane);
  for (int j = 0; j < HD_PER_LANE; j++) dk[j] = dvv[j] = 0.0f;
  for (int64_t h = g * rep; h < (g + 1) * rep; h++)
    for (int64_t t = u; t < s.T; t++) {
      int64_t qo = q_off(s, b, t, h), yo = (b * s.T + t) * s.NH * s.hd + h * s.hd, r = (b * s.NH + h) * s.T + t;
      float p = expf(dot_lanes(k, qkv, qo, s.hd, lane) * s.scale - lse[r]);
      float ds = p * (dot_lanes(v, dy, yo, s.hd, lane) - D[r]);
      for (int j = 0; j < HD_PER_LANE; j++) {
        int64_t d = lane + 32 * j;
        if (d < s.hd) {
          dk[j] += ds * ld(qkv, qo + d);
          dvv[j] += p * ld(dy, yo + d);
        }
      }
    }
  int64_t ko = k_off(s, b, u, g), vo = v_off(s, b, u, g);
  for (int j = 0; j < HD_PER_LANE; j++) {
    int64_t d = lane + 32 * j;
    if (d < s.hd) {
      st(dqkv, ko + d, dk[j] * s.scale);
      st(dqkv, vo + d, dvv[j]);
    }
  }
}

static int attn_shape(const rt_KernelArgs *a, const rt_View *qkv, AttnShape *s, char *err, size_t errlen,
                      const char *OP) {
  double nh = rt_attr(a, "heads", 0), kvh = rt_attr(a, "kv_heads", nh);
  REQUIRE(nh >= 1 && kvh >= 1 && nh == (int64_t)nh && kvh == (int64_t)kvh, "attrs heads/kv_heads missing or bad");
  s->NH = (int64_t)nh;
  s->KVH = (int64_t)kvh;
  REQUIRE(s->NH % s->KVH == 0, "heads %lld not a multiple of kv_heads %lld", (long long)s->NH, (long long)s->KVH);
  REQUIRE(qkv->rank == 3 && is_float(qkv), "qkv must be float [B,T,(NH+2KVH)hd]");
  s->B = qkv->shape[0];
  s->T = qkv->shape[1];
  s->row = qkv->shape[2];
  REQUIRE(s->row % (s->NH + 2 * s->KVH) == 0, "last dim %lld not divisible by heads + 2 kv_heads", (long long)s->row);
  s->hd = s->row / (s->NH + 2 * s->KVH);
  REQUIRE(s->hd >= 1 && s->hd <= CU_MAX_HD, "head dim %lld outside [1, %d]", (long long)s->hd, CU_MAX_HD);
  s->scale = 1.0f / sqrtf((float)s->hd);
  return 0;
}

/* --------------------------------------------- attention on tensor cores */

/* bf16 storage with head dims of 64 or 128 runs flash-style on the tensor
 * cores (wmma, 16x16x16 bf16 products into f32): a block takes 64 query
 * rows (or, for dk and dv, 64 key rows) of one head, four warps of 16 rows
 * each, and walks the other side's 64-row tiles in order, so no T x T
 * matrix reaches global memory and no atomics are needed: every output is
 * summed in a fixed order, run after run. Scores and their softmax stay in
 * f32 in shared memory; the probabilities and dS are rounded to bf16 for
 * the second product, as flash attention does, which the bf16 tolerance of
 * the kernel check covers. The backward pass is two kernels: dq per query
 * tile, dk and dv per key tile (each recomputes P). */
#define FA_TILE 64
#define FA_WARPS 4
#define FA_THREADS (32 * FA_WARPS)
#define FA_SLD (FA_TILE + 4) /* f32 score rows, padded against bank conflicts */
#define FA_PLD (FA_TILE + 8) /* bf16 probability rows */

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

/* Rows first..first+ROWS-1 of one head's HD columns, 16 bytes at a time,
 * into a shared tile with rows of HD+8; rows at or past T are zeros. */
template <int HD, int ROWS = FA_TILE>
__device__ void fa_load_tile(bf16 *tile, const bf16 *src, int64_t row_stride, int64_t first, int64_t T) {
  const int per_row = HD / 8;
  for (int i = threadIdx.x; i < ROWS * per_row; i += FA_THREADS) {
    int r = i / per_row, v = i % per_row;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (first + r < T) x = ((const uint4 *)(src + (first + r) * row_stride))[v];
    *(uint4 *)(tile + r * (HD + 8) + v * 8) = x;
  }
}

/* out(16 x 64, f32, row stride FA_SLD) = a(16 x HD) b^T, b a 64 x HD tile. */
template <int HD>
__device__ void fa_scores(float *out, const bf16 *a, const bf16 *b) {
  for (int n = 0; n < FA_TILE / 16; n++) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < HD / 16; k++) {
      FragA fa;
      FragBt fb;
      wmma::load_matrix_sync(fa, a + k * 16, HD + 8);
      wmma::load_matrix_sync(fb, b + n * 16 * (HD + 8) + k * 16, HD + 8);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, FA_SLD, wmma::mem_row_major);
  }
}

/* acc[n] += p(16 x 64, bf16, row stride FA_PLD) v, v a 64 x HD tile. */
template <int HD>
__device__ void fa_accumulate(FragC *acc, const bf16 *p, const bf16 *v) {
  for (int k = 0; k < FA_TILE / 16; k++) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + k * 16, FA_PLD);
    for (int n = 0; n < HD / 16; n++) {
      FragB fb;
      wmma::load_matrix_sync(fb, v + k * 16 * (HD + 8) + n * 16, HD + 8);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

/* A warp's 16 x HD result to global rows (bf16), through its f32 stage:
 * row r of the warp goes to dst + (first + r) * stride, times SCALE. */
template <int HD>
__device__ void fa_store_rows(bf16 *dst, int64_t stride, int64_t first, int64_t T, FragC *acc, float *stage,
                              float scale) {
  for (int n = 0; n < HD / 16; n++) wmma::store_matrix_sync(stage + n * 16, acc[n], HD + 4, wmma::mem_row_major);
  __syncwarp();
  int lane = threadIdx.x % 32;
  for (int i = lane; i < 16 * HD; i += 32) {
    int r = i / HD, d = i % HD;
    if (first + r < T) dst[(first + r) * stride + d] = __float2bfloat16_rn(stage[r * (HD + 4) + d] * scale);
  }
  __syncwarp();
}

template <int HD>
struct FaSmem {
  static const int tile = FA_TILE * (HD + 8); /* bf16 elements of one 64-row tile */
  static const int scores = FA_WARPS * 16 * FA_SLD; /* f32, 16 rows a warp */
  static const int probs = FA_WARPS * 16 * FA_PLD;   /* bf16 */
  static const int stage = FA_WARPS * 16 * (HD + 4); /* f32 */
};

template <int HD>
__global__ void __launch_bounds__(FA_THREADS) flash_forward_k(bf16 *y, float *lse, const bf16 *qkv, AttnShape s) {
  typedef FaSmem<HD> M;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  bf16 *Qs = (bf16 *)fa_smem, *Ks = Qs + M::tile, *Vs = Ks + M::tile;
  float *S = (float *)(Vs + M::tile), *O = S + M::scores;
  bf16 *P = (bf16 *)(O + M::stage);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t qt = blockIdx.x, b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, g = h / (s.NH / s.KVH);
  const int64_t q0 = qt * FA_TILE, t = q0 + warp * 16 + r;
  const bf16 *base = qkv + b * s.T * s.row;
  fa_load_tile<HD>(Qs, base + h * HD, s.row, q0, s.T);
  float *Sw = S + warp * 16 * FA_SLD, *Ow = O + warp * 16 * (HD + 4);
  bf16 *Pw = P + warp * 16 * FA_PLD;
  for (int i = lane; i < 16 * (HD + 4); i += 32) Ow[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    __syncthreads();
    fa_load_tile<HD>(Ks, base + (s.NH + g) * HD, s.row, kt * FA_TILE, s.T);
    fa_load_tile<HD>(Vs, base + (s.NH + s.KVH + g) * HD, s.row, kt * FA_TILE, s.T);
    __syncthreads();
    fa_scores<HD>(Sw, Qs + warp * 16 * (HD + 8), Ks);
    __syncwarp();
    /* Row r's online softmax, lanes 2r and 2r+1 holding 32 columns each. */
    float mx = -INFINITY;
    for (int j = 0; j < 32; j++) {
      int64_t u = kt * FA_TILE + half * 32 + j;
      if (u <= t && u < s.T) mx = fmaxf(mx, Sw[r * FA_SLD + half * 32 + j] * s.scale);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float mnew = fmaxf(m, mx), alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew), sum = 0.0f;
    for (int j = 0; j < 32; j++) {
      int64_t u = kt * FA_TILE + half * 32 + j;
      float p = 0.0f;
      if (u <= t && u < s.T) p = expf(Sw[r * FA_SLD + half * 32 + j] * s.scale - mnew);
      bf16 pb = __float2bfloat16_rn(p);
      Pw[r * FA_PLD + half * 32 + j] = pb;
      sum += __bfloat162float(pb);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = mnew;
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++) Ow[r * (HD + 4) + d] *= alpha;
    __syncwarp();
    FragC acc[HD / 16];
    for (int n = 0; n < HD / 16; n++) wmma::load_matrix_sync(acc[n], Ow + n * 16, HD + 4, wmma::mem_row_major);
    fa_accumulate<HD>(acc, Pw, Vs);
    for (int n = 0; n < HD / 16; n++) wmma::store_matrix_sync(Ow + n * 16, acc[n], HD + 4, wmma::mem_row_major);
    __syncwarp();
  }
  if (t < s.T) {
    bf16 *yr = y + (b * s.T + t) * s.NH * HD + h * HD;
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); d++)
      yr[d] = __float2bfloat16_rn(Ow[r * (HD + 4) + d] / l);
    if (half == 0) lse[(b * s.NH + h) * s.T + t] = m + logf(l);
  }
}

/* D = dy . y per query row of each head (a warp a row), for both backward
 * kernels. */
__global__ void flash_backward_d_k(float *D, DV dy, DV y, AttnShape s) {
  WARP_ROW();
  if (row >= s.B * s.NH * s.T) return;
  int64_t t = row % s.T, h = (row / s.T) % s.NH, b = row / (s.T * s.NH);
  int64_t yo = (b * s.T + t) * s.NH * s.hd + h * s.hd;
  float p = 0.0f;
  for (int64_t d = lane; d < s.hd; d += 32) p += ld(dy, yo + d) * ld(y, yo + d);
  p = warp_sum(p);
  if (lane == 0) D[(b * s.NH + h) * s.T + t] = p;
}

/* dq for 64 query rows: sum over key tiles of dS K, dS = P (dP - D). */
template <int HD>
__global__ void __launch_bounds__(FA_THREADS) flash_backward_q_k(bf16 *dqkv, const bf16 *dy, const bf16 *qkv,
                                                                  const float *lse, const float *D, AttnShape s) {
  typedef FaSmem<HD> M;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  bf16 *Qs = (bf16 *)fa_smem, *DYs = Qs + M::tile, *Ks = DYs + M::tile, *Vs = Ks + M::tile;
  float *S = (float *)(Vs + M::tile), *DP = S + M::scores;
  bf16 *DS = (bf16 *)(DP + M::scores);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t qt = blockIdx.x, b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, g = h / (s.NH / s.KVH);
  const int64_t q0 = qt * FA_TILE, t = q0 + warp * 16 + r, stat = (b * s.NH + h) * s.T + t;
  const bf16 *base = qkv + b * s.T * s.row;
  fa_load_tile<HD>(Qs, base + h * HD, s.row, q0, s.T);
  fa_load_tile<HD>(DYs, dy + b * s.T * s.NH * HD + h * HD, s.NH * HD, q0, s.T);
  const float L = t < s.T ? lse[stat] : 0.0f, Dt = t < s.T ? D[stat] : 0.0f;
  float *Sw = S + warp * 16 * FA_SLD, *DPw = DP + warp * 16 * FA_SLD;
  bf16 *DSw = DS + warp * 16 * FA_PLD;
  FragC acc[HD / 16];
  for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
  for (int64_t kt = 0; kt <= qt; kt++) {
    __syncthreads();
    fa_load_tile<HD>(Ks, base + (s.NH + g) * HD, s.row, kt * FA_TILE, s.T);
    fa_load_tile<HD>(Vs, base + (s.NH + s.KVH + g) * HD, s.row, kt * FA_TILE, s.T);
    __syncthreads();
    fa_scores<HD>(Sw, Qs + warp * 16 * (HD + 8), Ks);
    fa_scores<HD>(DPw, DYs + warp * 16 * (HD + 8), Vs);
    __syncwarp();
    for (int j = 0; j < 32; j++) {
      int c = half * 32 + j;
      int64_t u = kt * FA_TILE + c;
      float ds = 0.0f;
      if (u <= t && t < s.T) ds = expf(Sw[r * FA_SLD + c] * s.scale - L) * (DPw[r * FA_SLD + c] - Dt);
      DSw[r * FA_PLD + c] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    fa_accumulate<HD>(acc, DSw, Ks);
  }
  __syncthreads(); /* the stage below overlaps other warps' scores */
  fa_store_rows<HD>(dqkv + b * s.T * s.row + h * HD, s.row, q0 + warp * 16, s.T, acc, S + warp * 16 * (HD + 4),
                    s.scale);
}

/* dk and dv for 64 key rows of one kv head: sums over the group's query
 * heads and the query tiles at or after them, S^T and dP^T computed from
 * the key side. */
template <int HD>
__global__ void __launch_bounds__(FA_THREADS) flash_backward_kv_k(bf16 *dqkv, const bf16 *dy, const bf16 *qkv,
                                                                   const float *lse, const float *D, AttnShape s) {
  typedef FaSmem<HD> M;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  bf16 *Ks = (bf16 *)fa_smem, *Vs = Ks + M::tile, *Qs = Vs + M::tile, *DYs = Qs + M::tile;
  float *ST = (float *)(DYs + M::tile), *DPT = ST + M::scores;
  bf16 *PT = (bf16 *)(DPT + M::scores), *DST = PT + M::probs;
  float *Ls = (float *)(DST + M::probs), *Ds = Ls + FA_TILE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int64_t kt = blockIdx.x, b = blockIdx.y / s.KVH, g = blockIdx.y % s.KVH, rep = s.NH / s.KVH;
  const int64_t k0 = kt * FA_TILE, u = k0 + warp * 16 + r;
  const bf16 *base = qkv + b * s.T * s.row;
  fa_load_tile<HD>(Ks, base + (s.NH + g) * HD, s.row, k0, s.T);
  fa_load_tile<HD>(Vs, base + (s.NH + s.KVH + g) * HD, s.row, k0, s.T);
  float *STw = ST + warp * 16 * FA_SLD, *DPTw = DPT + warp * 16 * FA_SLD;
  bf16 *PTw = PT + warp * 16 * FA_PLD, *DSTw = DST + warp * 16 * FA_PLD;
  FragC dk[HD / 16], dvv[HD / 16];
  for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dvv[n], 0.0f);
  const int64_t ntiles = (s.T + FA_TILE - 1) / FA_TILE;
  for (int64_t h = g * rep; h < (g + 1) * rep; h++)
    for (int64_t qt = kt; qt < ntiles; qt++) {
      const int64_t q0 = qt * FA_TILE;
      __syncthreads();
      fa_load_tile<HD>(Qs, base + h * HD, s.row, q0, s.T);
      fa_load_tile<HD>(DYs, dy + b * s.T * s.NH * HD + h * HD, s.NH * HD, q0, s.T);
      for (int i = threadIdx.x; i < FA_TILE; i += FA_THREADS) {
        bool in = q0 + i < s.T;
        Ls[i] = in ? lse[(b * s.NH + h) * s.T + q0 + i] : 0.0f;
        Ds[i] = in ? D[(b * s.NH + h) * s.T + q0 + i] : 0.0f;
      }
      __syncthreads();
      fa_scores<HD>(STw, Ks + warp * 16 * (HD + 8), Qs);
      fa_scores<HD>(DPTw, Vs + warp * 16 * (HD + 8), DYs);
      __syncwarp();
      for (int j = 0; j < 32; j++) {
        int c = half * 32 + j;
        int64_t t = q0 + c;
        float p = 0.0f, ds = 0.0f;
        if (u <= t && t < s.T && u < s.T) {
          p = expf(STw[r * FA_SLD + c] * s.scale - Ls[c]);
          ds = p * (DPTw[r * FA_SLD + c] - Ds[c]);
        }
        PTw[r * FA_PLD + c] = __float2bfloat16_rn(p);
        DSTw[r * FA_PLD + c] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
      fa_accumulate<HD>(dvv, PTw, DYs);
      fa_accumulate<HD>(dk, DSTw, Qs);
    }
  __syncthreads(); /* the stage below overlaps other warps' scores */
  float *stage = ST + warp * 16 * (HD + 4);
  bf16 *out = dqkv + b * s.T * s.row;
  fa_store_rows<HD>(out + (s.NH + g) * HD, s.row, k0 + warp * 16, s.T, dk, stage, s.scale);
  fa_store_rows<HD>(out + (s.NH + s.KVH + g) * HD, s.row, k0 + warp * 16, s.T, dvv, stage, 1.0f);
}

static bool fa_fits(const rt_View *const *v, int n, const AttnShape &s) {
  if (s.hd != 64 && s.hd != 128) return false;
  if (s.row % 8 != 0) return false;
  for (int i = 0; i < n; i++)
    if (v[i]->dtype != RT_BF16 || (uintptr_t)v[i]->data % 16 != 0) return false;
  return true;
}

/* Launches KERNEL with SMEM bytes of dynamic shared memory, raising its
 * limit on first use. */
template <typename K>
static int fa_prepare(K kernel, size_t smem, char *err, size_t errlen, const char *op) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return fail(err, errlen, RT_KERNEL_EDEVICE, op, "shared memory: %s", cudaGetErrorString(e));
  return 0;
}

template <int HD>
static int fa_forward(const rt_View *y, const rt_View *lse, const rt_View *qkv, const AttnShape &s, cudaStream_t st_,
                      char *err, size_t errlen) {
  typedef FaSmem<HD> M;
  size_t smem = 3 * M::tile * sizeof(bf16) + (M::scores + M::stage) * sizeof(float) + M::probs * sizeof(bf16);
  int rc = fa_prepare(flash_forward_k<HD>, smem, err, errlen, "attention");
  if (rc) return rc;
  dim3 grid((unsigned)((s.T + FA_TILE - 1) / FA_TILE), (unsigned)(s.B * s.NH));
  flash_forward_k<HD><<<grid, FA_THREADS, smem, st_>>>((bf16 *)y->data, (float *)lse->data, (const bf16 *)qkv->data, s);
  return launched(err, errlen, "attention");
}

template <int HD>
static int fa_backward(const rt_View *dqkv, const rt_View *dy, const rt_View *qkv, const rt_View *y, const rt_View *lse,
                       float *D, const AttnShape &s, cudaStream_t st_, char *err, size_t errlen) {
  typedef FaSmem<HD> M;
  const char *OP = "attention_backward";
  size_t smem_q = 4 * M::tile * sizeof(bf16) + 2 * M::scores * sizeof(float) + M::probs * sizeof(bf16);
  size_t smem_kv = smem_q + M::probs * sizeof(bf16) + 2 * FA_TILE * sizeof(float);
  int rc = fa_prepare(flash_backward_q_k<HD>, smem_q, err, errlen, OP);
  if (!rc) rc = fa_prepare(flash_backward_kv_k<HD>, smem_kv, err, errlen, OP);
  if (rc) return rc;
  flash_backward_d_k<<<nblocks(s.B * s.NH * s.T, WARPS_PER_BLOCK), THREADS, 0, st_>>>(D, dv(dy), dv(y), s);
  unsigned tiles = (unsigned)((s.T + FA_TILE - 1) / FA_TILE);
  const bf16 *dyp = (const bf16 *)dy->data, *qp = (const bf16 *)qkv->data;
  const float *lp = (const float *)lse->data;
  flash_backward_q_k<HD><<<dim3(tiles, (unsigned)(s.B * s.NH)), FA_THREADS, smem_q, st_>>>((bf16 *)dqkv->data, dyp,
                                                                                          qp, lp, D, s);
  flash_backward_kv_k<HD><<<dim3(tiles, (unsigned)(s.B * s.KVH)), FA_THREADS, smem_kv, st_>>>((bf16 *)dqkv->data,
                                                                                             dyp, qp, lp, D, s);
  return launched(err, errlen, OP);
}

#include "flash_mma.cuh"

static int k_attention(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "attention";
  REQUIRE(a->nin == 1 && a->nout == 2, "want 1 input (qkv) and 2 outputs (y, lse)");
  AttnShape s;
  int rc = attn_shape(a, &a->in[0], &s, err, errlen, OP);
  if (rc) return rc;
  const rt_View *y = &a->out[0], *lse = &a->out[1];
  REQUIRE(is_float(y) && y->numel == s.B * s.T * s.NH * s.hd, "y must be float [B,T,NH hd]");
  REQUIRE(lse->dtype == RT_F32 && lse->numel == s.B * s.NH * s.T, "lse must be f32 [B,NH,T]");
  const rt_View *fv[] = {y, &a->in[0]};
  if (fa_fits(fv, 2, s) && fa_use_mma())
    return s.hd == 64 ? fa_mma_forward<64>(y, lse, &a->in[0], s, ctx_of(a)->stream, err, errlen)
                      : fa_mma_forward<128>(y, lse, &a->in[0], s, ctx_of(a)->stream, err, errlen);
  if (fa_fits(fv, 2, s))
    return s.hd == 64 ? fa_forward<64>(y, lse, &a->in[0], s, ctx_of(a)->stream, err, errlen)
                      : fa_forward<128>(y, lse, &a->in[0], s, ctx_of(a)->stream, err, errlen);
  attention_forward_k<<<nblocks(s.B * s.NH * s.T, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
      dv(y), (float *)lse->data, dv(&a->in[0]), s);
  return launched(err, errlen, OP);
}

static int k_attention_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "attention_backward";
  REQUIRE(a->nin == 4 && a->nout == 1, "want 4 inputs (dy, qkv, y, lse) and 1 output (dqkv)");
  AttnShape s;
  int rc = attn_shape(a, &a->in[1], &s, err, errlen, OP);
  if (rc) return rc;
  const rt_View *dy = &a->in[0], *y = &a->in[2], *lse = &a->in[3], *dqkv = &a->out[0];
  int64_t ny = s.B * s.T * s.NH * s.hd;
  REQUIRE(is_float(dy) && is_float(y) && dy->numel == ny && y->numel == ny, "dy, y must be float [B,T,NH hd]");
  REQUIRE(lse->dtype == RT_F32 && lse->numel == s.B * s.NH * s.T, "lse must be f32 [B,NH,T]");
  REQUIRE(is_float(dqkv) && dqkv->numel == a->in[1].numel, "dqkv must be float, shaped as qkv");
  REQUIRE(a->workspace && a->workspace_bytes >= s.B * s.NH * s.T * (int64_t)sizeof(float),
          "workspace of %lld bytes needed", (long long)(s.B * s.NH * s.T * (int64_t)sizeof(float)));
  cudaStream_t st_ = ctx_of(a)->stream;
  float *D = (float *)a->workspace;
  const rt_View *fv[] = {dy, &a->in[1], y, dqkv};
  if (fa_fits(fv, 4, s) && fa_use_mma())
    return s.hd == 64 ? fa_mma_backward<64>(dqkv, dy, &a->in[1], y, lse, D, s, st_, err, errlen)
                      : fa_mma_backward<128>(dqkv, dy, &a->in[1], y, lse, D, s, st_, err, errlen);
  if (fa_fits(fv, 4, s))
    return s.hd == 64 ? fa_backward<64>(dqkv, dy, &a->in[1], y, lse, D, s, st_, err, errlen)
                      : fa_backward<128>(dqkv, dy, &a->in[1], y, lse, D, s, st_, err, errlen);
  const float *lp = (const float *)lse->data;
  attention_backward_q_k<<<nblocks(s.B * s.NH * s.T, WARPS_PER_BLOCK), THREADS, 0, st_>>>(
      dv(dqkv), D, dv(dy), dv(&a->in[1]), dv(y), lp, s);
  attention_backward_kv_k<<<nblocks(s.B * s.KVH * s.T, WARPS_PER_BLOCK), THREADS, 0, st_>>>(
      dv(dqkv), D, dv(dy), dv(&a->in[1]), lp, s);
  return launched(err, errlen, OP);
}

/* ---------------------------------------------------------------- rope */

/* One thread per (b, t, pair i, head); the angle is formed in double as on
 * the CPU. */
__global__ void rope_k(DV out, DV in, AttnShape s, double theta, float sign) {
  int64_t half = s.hd / 2, nrot = s.NH + s.KVH, nv = s.row - nrot * s.hd;
  int64_t per_tok = half * nrot + nv;
  GRID_STRIDE(i, s.B * s.T * per_tok) {
    int64_t bt = i / per_tok, r = i % per_tok, t = bt % s.T, o = bt * s.row;
    if (r >= half * nrot) {
      int64_t e = o + nrot * s.hd + (r - half * nrot);
      st(out, e, ld(in, e));
      continue;
    }
    int64_t pi = r / nrot, h = r % nrot;
    double ang = (double)t * pow(theta, -(double)(2 * pi) / (double)s.hd);
    float c = (float)cos(ang), sn = sign * (float)sin(ang);
    int64_t e = o + h * s.hd + 2 * pi;
    float x0 = ld(in, e), x1 = ld(in, e + 1);
    st(out, e, x0 * c - x1 * sn);
    st(out, e + 1, x0 * sn + x1 * c);
  }
}

static int rope_common(const rt_KernelArgs *a, char *err, size_t errlen, float sign, const char *OP) {
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input and 1 output");
  AttnShape s;
  int rc = attn_shape(a, &a->in[0], &s, err, errlen, OP);
  if (rc) return rc;
  REQUIRE(s.hd % 2 == 0, "head dim %lld must be even", (long long)s.hd);
  REQUIRE(is_float(&a->out[0]) && a->out[0].numel == a->in[0].numel, "output must be float, shaped as input");
  int64_t n = s.B * s.T * ((s.hd / 2) * (s.NH + s.KVH) + s.KVH * s.hd);
  rope_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(&a->out[0]), dv(&a->in[0]), s,
                                                                  rt_attr(a, "theta", 10000.0), sign);
  return launched(err, errlen, OP);
}

static int k_rope(const rt_KernelArgs *a, char *err, size_t errlen) { return rope_common(a, err, errlen, 1.0f, "rope"); }
static int k_rope_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return rope_common(a, err, errlen, -1.0f, "rope_backward");
}

/* ------------------------------------------------- pointwise operators */

#define GELU_K 0.7978845608028654f

__device__ __forceinline__ float gelu_of(float v) {
  float u = GELU_K * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.0f + tanhf(u));
}

/* d gelu / dx at v. */
__device__ __forceinline__ float gelu_slope(float v) {
  float u = GELU_K * (v + 0.044715f * v * v * v);
  float th = tanhf(u);
  float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
  return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
}

__global__ void gelu_forward_k(DV y, DV x, int64_t n) {
  GRID_STRIDE(i, n) st(y, i, gelu_of(ld(x, i)));
}

__global__ void gelu_backward_k(DV dx, DV dy, DV x, int64_t n) {
  GRID_STRIDE(i, n) st(dx, i, ld(dy, i) * gelu_slope(ld(x, i)));
}

/* RATION_CUDA_KERNELS=next (gpu/KERNELS.md): the same arithmetic as the
 * kernels above, element for element, with 16-byte loads and stores, so
 * bitwise their results. a and b: x (gelu), dy and x (gelu_backward), the
 * two addends (add). */
enum { PW_GELU, PW_GELU_BACKWARD, PW_ADD };

template <int OP>
__global__ void pointwise8_k(DV y, DV a, DV b, int64_t vectors) {
  GRID_STRIDE(i, vectors) {
    float p[NEXT_VEC], q[NEXT_VEC], r[NEXT_VEC];
    ld8(a, i * NEXT_VEC, p);
    if (OP != PW_GELU) ld8(b, i * NEXT_VEC, q);
    for (int e = 0; e < NEXT_VEC; e++)
      r[e] = OP == PW_GELU ? gelu_of(p[e]) : OP == PW_GELU_BACKWARD ? p[e] * gelu_slope(q[e]) : p[e] + q[e];
    st8(y, i * NEXT_VEC, r);
  }
}

/* Whether the vector kernel ran: only when selected and every view is
 * whole aligned vectors. */
template <int OP>
static bool pointwise8(cudaStream_t s, const rt_View *y, const rt_View *a, const rt_View *b) {
  int64_t n = y->numel;
  if (!next_kernels() || !vec_ok(y, n) || !vec_ok(a, n) || (b && !vec_ok(b, n))) return false;
  pointwise8_k<OP><<<nblocks(n / NEXT_VEC, THREADS), THREADS, 0, s>>>(dv(y), dv(a), b ? dv(b) : dv_none(),
                                                                     n / NEXT_VEC);
  return true;
}

static int k_gelu(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "gelu";
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input and 1 output");
  int64_t n = a->in[0].numel;
  REQUIRE(is_float(&a->in[0]) && is_float(&a->out[0]) && a->out[0].numel == n, "x and y must be float and the same size");
  if (!pointwise8<PW_GELU>(ctx_of(a)->stream, &a->out[0], &a->in[0], NULL))
    gelu_forward_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(&a->out[0]), dv(&a->in[0]), n);
  return launched(err, errlen, OP);
}

static int k_gelu_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "gelu_backward";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs (dy, x) and 1 output (dx)");
  int64_t n = a->in[1].numel;
  REQUIRE(is_float(&a->in[0]) && is_float(&a->in[1]) && is_float(&a->out[0]) && a->in[0].numel == n &&
          a->out[0].numel == n, "dy, x, dx must be float and the same size");
  if (!pointwise8<PW_GELU_BACKWARD>(ctx_of(a)->stream, &a->out[0], &a->in[0], &a->in[1]))
    gelu_backward_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(&a->out[0]), dv(&a->in[0]),
                                                                             dv(&a->in[1]), n);
  return launched(err, errlen, OP);
}

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_k(DV y, DV gu, int64_t N, int64_t F) {
  GRID_STRIDE(i, N * F) {
    int64_t n = i / F, f = i % F;
    float g = ld(gu, n * 2 * F + f), u = ld(gu, n * 2 * F + F + f);
    st(y, i, g * sigmoid(g) * u);
  }
}

__global__ void swiglu_backward_k(DV dgu, DV dy, DV gu, int64_t N, int64_t F) {
  GRID_STRIDE(i, N * F) {
    int64_t n = i / F, f = i % F;
    float g = ld(gu, n * 2 * F + f), u = ld(gu, n * 2 * F + F + f);
    float d = ld(dy, i), sg = sigmoid(g);
    st(dgu, n * 2 * F + f, d * u * sg * (1.0f + g * (1.0f - sg)));
    st(dgu, n * 2 * F + F + f, d * g * sg);
  }
}

static int k_swiglu(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "swiglu";
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input (gu) and 1 output (y)");
  const rt_View *gu = &a->in[0], *y = &a->out[0];
  int64_t F = last_dim(y), N = F ? y->numel / F : 0;
  REQUIRE(is_float(gu) && is_float(y) && last_dim(gu) == 2 * F && gu->numel == 2 * y->numel,
          "gu must be float [.., 2F] and y [.., F]");
  swiglu_forward_k<<<nblocks(N * F, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(y), dv(gu), N, F);
  return launched(err, errlen, OP);
}

static int k_swiglu_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "swiglu_backward";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs (dy, gu) and 1 output (dgu)");
  const rt_View *dy = &a->in[0], *gu = &a->in[1], *dgu = &a->out[0];
  int64_t F = last_dim(dy), N = F ? dy->numel / F : 0;
  REQUIRE(is_float(dy) && is_float(gu) && is_float(dgu) && last_dim(gu) == 2 * F && gu->numel == 2 * dy->numel &&
          dgu->numel == gu->numel, "dy [.., F], gu and dgu [.., 2F], float");
  swiglu_backward_k<<<nblocks(N * F, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(dgu), dv(dy), dv(gu), N, F);
  return launched(err, errlen, OP);
}

__global__ void add_k(DV y, DV x, DV z, int64_t n) {
  GRID_STRIDE(i, n) st(y, i, ld(x, i) + ld(z, i));
}

static int k_add(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "add";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs and 1 output");
  const rt_View *x = &a->in[0], *z = &a->in[1], *y = &a->out[0];
  REQUIRE(is_float(x) && is_float(z) && is_float(y) && x->numel == y->numel && z->numel == y->numel,
          "a, b, y must be float and the same size");
  if (!pointwise8<PW_ADD>(ctx_of(a)->stream, y, x, z))
    add_k<<<nblocks(y->numel, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(y), dv(x), dv(z), y->numel);
  return launched(err, errlen, OP);
}

/* ------------------------------------------------------------ lora_add */

/* out = base, with columns [off, off + W) plus scale * v (kernels_cpu.c). */
__global__ void lora_add_k(DV out, DV base, DV v, float scale, int64_t N, int64_t OC, int64_t W, int64_t off) {
  GRID_STRIDE(i, N * OC) {
    float y = ld(base, i);
    int64_t n = i / OC, j = i % OC - off;
    if (j >= 0 && j < W) y = y + scale * ld(v, n * W + j);
    st(out, i, y);
  }
}

/* dv[n, j] = scale * dy[n, off + j] */
__global__ void lora_add_backward_k(DV dv_, DV dy, float scale, int64_t N, int64_t OC, int64_t W, int64_t off) {
  GRID_STRIDE(i, N * W) st(dv_, i, scale * ld(dy, i / W * OC + off + i % W));
}

static int lora_shape(const rt_KernelArgs *a, const rt_View *y, const rt_View *v, int64_t *N, int64_t *OC, int64_t *W,
                      int64_t *off, char *err, size_t errlen, const char *OP) {
  *OC = last_dim(y), *W = last_dim(v), *N = *OC ? y->numel / *OC : 0;
  double o = rt_attr(a, "offset", 0.0);
  REQUIRE(is_float(y) && is_float(v) && *W > 0 && v->numel == *N * *W, "y [.., OC] and v [.., W] must be float, same rows");
  REQUIRE(o >= 0 && o == (double)(int64_t)o && (int64_t)o + *W <= *OC, "offset %g + W %lld exceeds OC %lld", o,
          (long long)*W, (long long)*OC);
  *off = (int64_t)o;
  return 0;
}

static int k_lora_add(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "lora_add";
  REQUIRE(a->nin == 2 && a->nout == 1, "want inputs (y, v) and 1 output");
  int64_t N, OC, W, off;
  int rc = lora_shape(a, &a->in[0], &a->in[1], &N, &OC, &W, &off, err, errlen, OP);
  if (rc) return rc;
  REQUIRE(is_float(&a->out[0]) && a->out[0].numel == a->in[0].numel, "the output must be float, y's size");
  lora_add_k<<<nblocks(N * OC, THREADS), THREADS, 0, ctx_of(a)->stream>>>(
      dv(&a->out[0]), dv(&a->in[0]), dv(&a->in[1]), (float)rt_attr(a, "scale", 1.0), N, OC, W, off);
  return launched(err, errlen, OP);
}

static int k_lora_add_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "lora_add_backward";
  REQUIRE(a->nin == 1 && a->nout == 1, "want input dy and output dv");
  int64_t N, OC, W, off;
  int rc = lora_shape(a, &a->in[0], &a->out[0], &N, &OC, &W, &off, err, errlen, OP);
  if (rc) return rc;
  lora_add_backward_k<<<nblocks(N * W, THREADS), THREADS, 0, ctx_of(a)->stream>>>(
      dv(&a->out[0]), dv(&a->in[0]), (float)rt_attr(a, "scale", 1.0), N, OC, W, off);
  return launched(err, errlen, OP);
}

/* -------------------------------------------------------- crossentropy */

/* Block-wide reductions in a fixed tree: every thread ends with the value. */
__device__ float block_sum(float v, float *scratch) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < (int)(blockDim.x / 32); w++) s += scratch[w];
  __syncthreads();
  return s;
}
__device__ float block_max(float v, float *scratch) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < (int)(blockDim.x / 32); w++) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

/* A block per row: the row's max, then the sum of exponentials. Rows are
 * LD long, of which the first V are the vocabulary (kernels_cpu.c). */
__global__ void crossentropy_lse_k(float *lse, DV logits, int64_t V, int64_t LD) {
  __shared__ float scratch[THREADS / 32];
  int64_t o = (int64_t)blockIdx.x * LD;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += THREADS) mx = fmaxf(mx, ld(logits, o + v));
  mx = block_max(mx, scratch);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += THREADS) s += expf(ld(logits, o + v) - mx);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) lse[blockIdx.x] = mx + logf(s);
}

/* The mean over rows, in double: each thread sums every THREADS-th row in
 * order, then one thread adds the partial sums in order. */
__global__ void crossentropy_loss_k(float *loss, const float *lse, DV logits, const int *tgt, int64_t N, int64_t V,
                                    int64_t LD, int64_t M, int *status) {
  __shared__ double part[THREADS];
  double total = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += THREADS) {
    int t = tgt[n];
    if (t < 0 || t >= V) {
      *status = 1;
      continue;
    }
    total += (double)(lse[n] - ld(logits, n * LD + t));
  }
  part[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int i = 0; i < THREADS; i++) sum += part[i];
    loss[0] = (float)(sum / (double)M);
  }
}

/* A block per row. */
__global__ void crossentropy_backward_k(DV dl, DV logits, const float *lse, const int *tgt, int64_t V, int64_t LD,
                                        int64_t M, int *status) {
  int64_t n = blockIdx.x, o = n * LD;
  float inv = 1.0f / (float)M, L = lse[n];
  int t = tgt[n];
  if (threadIdx.x == 0 && (t < 0 || t >= V)) *status = 1;
  for (int64_t v = threadIdx.x; v < LD; v += THREADS) {
    float p = v < V ? expf(ld(logits, o + v) - L) : 0.0f;
    st(dl, o + v, v < V ? (p - (v == t ? 1.0f : 0.0f)) * inv : 0.0f);
  }
}


static int k_crossentropy(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "crossentropy";
  REQUIRE(a->nin == 2 && a->nout == 2, "want 2 inputs (logits, targets) and 2 outputs (loss, lse)");
  const rt_View *logits = &a->in[0], *tgt = &a->in[1], *loss = &a->out[0], *lse = &a->out[1];
  int64_t V = last_dim(logits), N = V ? logits->numel / V : 0;
  REQUIRE(is_float(logits) && tgt->dtype == RT_I32 && tgt->numel == N && N > 0,
          "logits must be float [B,T,V], targets i32 [B,T]");
  REQUIRE(loss->dtype == RT_F32 && loss->numel == 1 && lse->dtype == RT_F32 && lse->numel == N,
          "loss must be f32 [1], lse f32 [B,T]");
  int64_t nv = rt_vocab(a, V);
  REQUIRE(nv > 0, "attribute vocab %g must be an integer in [1, %lld]", rt_attr(a, "vocab", 0), (long long)V);
  int64_t M = rt_mean_over(a, N);
  REQUIRE(M > 0, "attribute mean_over %g must be an integer >= 1", rt_attr(a, "mean_over", 0));
  rt_CudaKernelCtx *c = ctx_of(a);
  crossentropy_lse_k<<<(unsigned)N, THREADS, 0, c->stream>>>((float *)lse->data, dv(logits), nv, V);
  crossentropy_loss_k<<<1, THREADS, 0, c->stream>>>((float *)loss->data, (const float *)lse->data, dv(logits),
                                               (const int *)tgt->data, N, nv, V, M, c->status);
  return launched(err, errlen, OP);
}

static int k_crossentropy_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "crossentropy_backward";
  REQUIRE(a->nin == 3 && a->nout == 1, "want 3 inputs (logits, lse, targets) and 1 output (dlogits)");
  const rt_View *logits = &a->in[0], *lse = &a->in[1], *tgt = &a->in[2], *dl = &a->out[0];
  int64_t V = last_dim(logits), N = V ? logits->numel / V : 0;
  REQUIRE(is_float(logits) && is_float(dl) && dl->numel == logits->numel, "logits, dlogits must be float [B,T,V]");
  REQUIRE(lse->dtype == RT_F32 && lse->numel == N && tgt->dtype == RT_I32 && tgt->numel == N && N > 0,
          "lse must be f32 [B,T], targets i32 [B,T]");
  int64_t nv = rt_vocab(a, V);
  REQUIRE(nv > 0, "attribute vocab %g must be an integer in [1, %lld]", rt_attr(a, "vocab", 0), (long long)V);
  int64_t M = rt_mean_over(a, N);
  REQUIRE(M > 0, "attribute mean_over %g must be an integer >= 1", rt_attr(a, "mean_over", 0));
  rt_CudaKernelCtx *c = ctx_of(a);
  crossentropy_backward_k<<<(unsigned)N, THREADS, 0, c->stream>>>(
      dv(dl), dv(logits), (const float *)lse->data, (const int *)tgt->data, nv, V, M, c->status);
  return launched(err, errlen, OP);
}

/* --------------------------------------------------------------- adamw */

typedef struct {
  float lr, beta1, beta2, eps, wd, bc1, bc2;
} AdamW;

__global__ void adamw_k(DV param_out, DV param, const float *m, const float *v, const float *master, float *m_out,
                        float *v_out, float *master_out, DV grad, int64_t n, AdamW h) {
  GRID_STRIDE(i, n) {
    float g = ld(grad, i);
    float p = master ? master[i] : ld(param, i);
    float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    float mh = mi / h.bc1, vh = vi / h.bc2;
    p -= h.lr * (mh / (sqrtf(vh) + h.eps) + h.wd * p);
    m_out[i] = mi;
    v_out[i] = vi;
    if (master) master_out[i] = p;
    st(param_out, i, p);
  }
}

static int k_adamw(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "adamw";
  REQUIRE((a->nin == 4 && a->nout == 3) || (a->nin == 5 && a->nout == 4),
          "want inputs (param, grad, m, v[, master]) and outputs (param, m, v[, master])");
  const rt_View *grad = &a->in[1];
  int64_t n = a->in[0].numel;
  for (int i = 0; i < a->nout; i++) {
    const rt_View *in = &a->in[i == 0 ? 0 : i + 1], *out = &a->out[i];
    REQUIRE(in->numel == n && out->numel == n && in->dtype == out->dtype, "state %d: shapes or dtypes differ", i);
    REQUIRE(i == 0 ? is_float(out) : out->dtype == RT_F32, "param must be float, m, v and master f32");
  }
  REQUIRE(is_float(grad) && grad->numel == n, "grad must be float, param's size");
  REQUIRE(a->step >= 1, "step %lld: the step number is 1-based", (long long)a->step);
  AdamW h;
  double b1 = rt_attr(a, "beta1", 0.9), b2 = rt_attr(a, "beta2", 0.999);
  h.lr = (float)rt_attr(a, "lr", 1e-3);
  h.beta1 = (float)b1;
  h.beta2 = (float)b2;
  h.eps = (float)rt_attr(a, "eps", 1e-8);
  h.wd = (float)rt_attr(a, "weight_decay", 0.01);
  h.bc1 = (float)(1.0 - pow(b1, (double)a->step));
  h.bc2 = (float)(1.0 - pow(b2, (double)a->step));
  int wm = a->nin == 5;
  adamw_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(
      dv(&a->out[0]), dv(&a->in[0]), (const float *)a->in[2].data, (const float *)a->in[3].data,
      wm ? (const float *)a->in[4].data : NULL, (float *)a->out[1].data, (float *)a->out[2].data,
      wm ? (float *)a->out[3].data : NULL, dv(grad), n, h);
  return launched(err, errlen, OP);
}

/* ---------------------------------------------------- slice, concat_rows */

static int copy_d2d(const rt_KernelArgs *a, void *dst, const void *src, int64_t bytes, char *err, size_t errlen,
                    const char *op) {
  cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, ctx_of(a)->stream);
  return e == cudaSuccess ? 0 : fail(err, errlen, RT_KERNEL_EDEVICE, op, "%s", cudaGetErrorString(e));
}

/* y = the numel(y) elements of x from element `offset` on (kernels_cpu.c). */
static int k_slice(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "slice";
  REQUIRE(a->nin == 1 && a->nout == 1, "want input x and output y");
  const rt_View *x = &a->in[0], *y = &a->out[0];
  double off = rt_attr(a, "offset", 0.0);
  REQUIRE(x->dtype == y->dtype, "x and y must share a dtype");
  REQUIRE(off >= 0 && off == (double)(int64_t)off && (int64_t)off + y->numel <= x->numel,
          "offset %g + %lld elements exceeds x's %lld", off, (long long)y->numel, (long long)x->numel);
  int64_t es = rt_dtype_size(x->dtype);
  return copy_d2d(a, y->data, (const char *)x->data + (int64_t)off * es, y->numel * es, err, errlen, OP);
}

/* y = x_0, x_1, ... one after another. */
static int k_concat_rows(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "concat_rows";
  REQUIRE(a->nin >= 1 && a->nout == 1, "want inputs x_0.. and output y");
  const rt_View *y = &a->out[0];
  int64_t n = 0, es = rt_dtype_size(y->dtype);
  for (int i = 0; i < a->nin; i++) {
    REQUIRE(a->in[i].dtype == y->dtype, "input %d's dtype is not y's", i);
    n += a->in[i].numel;
  }
  REQUIRE(n == y->numel, "inputs hold %lld elements, y %lld", (long long)n, (long long)y->numel);
  char *at = (char *)y->data;
  for (int i = 0; i < a->nin; i++) {
    int rc = copy_d2d(a, at, a->in[i].data, a->in[i].numel * es, err, errlen, OP);
    if (rc) return rc;
    at += a->in[i].numel * es;
  }
  return 0;
}

/* ----------------------------------------------------------------- ema */

__global__ void ema_k(float *out, const float *ema, DV param, float d, int64_t n) {
  float c = 1.0f - d;
  GRID_STRIDE(i, n) out[i] = d * ema[i] + c * ld(param, i);
}

static int k_ema(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "ema";
  REQUIRE(a->nin == 2 && a->nout == 1, "want inputs (ema, param) and output ema");
  const rt_View *e = &a->in[0], *p = &a->in[1], *out = &a->out[0];
  double decay = rt_attr(a, "decay", -1.0);
  REQUIRE(e->dtype == RT_F32 && out->dtype == RT_F32 && is_float(p) && e->numel == p->numel && out->numel == p->numel,
          "ema f32 and param float, the same size");
  REQUIRE(decay >= 0 && decay <= 1, "attribute decay %g must be in [0, 1]", decay);
  ema_k<<<nblocks(p->numel, THREADS), THREADS, 0, ctx_of(a)->stream>>>((float *)out->data, (const float *)e->data,
                                                                       dv(p), (float)decay, p->numel);
  return launched(err, errlen, OP);
}

/* ------------------------------------------------------------ registry */

static const rt_KernelEntry cuda_kernels[] = {
  RT_BUILTIN_KERNELS(RT_KERNEL_ENTRY)
  {NULL, NULL},
};

/* Custom CUDA kernels, looked up before the built-ins so that they can
 * replace them; registered before steps run, as on the CPU. */
#define CUSTOM_CAP 64
static rt_KernelSlot custom[CUSTOM_CAP];
static int ncustom;

extern "C" int rt_cuda_kernel_register(const char *type, rt_KernelFn fn) {
  return rt_kernel_slot_put(custom, &ncustom, CUSTOM_CAP, type, fn);
}

extern "C" rt_KernelFn rt_cuda_kernel_find(const char *type) {
  if (!type) return NULL;
  rt_KernelFn fn = rt_kernel_slot_find(custom, ncustom, type);
  if (fn) return fn;
  for (const rt_KernelEntry *e = cuda_kernels; e->type; e++)
    if (strcmp(e->type, type) == 0) return e->fn;
  return NULL;
}
