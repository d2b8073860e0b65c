/*
 * cuda.cuh - what the CUDA kernels of runtime/cuda/ share: the kernel
 * context, error reporting, device storage (loads and stores of f32, bf16
 * and f16 views), row and column reductions, the attention shape, and one
 * entry point per op type of docs/OPS.md (rt_cuda_k_<op>, listed in
 * context.cu's table). The kernels have the semantics of the CPU
 * reference (kernels_cpu.c), which gpu/kernels_check.c checks them
 * against, and mirror it loop for loop: the same two-pass attention (dq
 * per query row, dk/dv per key row, no atomics), the same column sums for
 * weight gradients in row order, the loss mean summed in double. Row
 * reductions use one warp per row and a fixed shuffle tree, so every
 * kernel is deterministic. Compiled with --fmad=false so that a*b+c rounds
 * twice, as on the CPU.
 */
#ifndef RATION_CUDA_CUH
#define RATION_CUDA_CUH

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
#define PLAN_CAP 128

/* ------------------------------------------------------------- context */

/* A cuBLASLt product's shape, operands' alignment (bytes, at most 256) and
 * workspace size, and what the heuristic chose for them. */
typedef struct {
  int64_t m, n, k, lda, ldb, ldc;
  int dtype, ta, tb, bias, beta;
  uint32_t align_a, align_b, align_c;
  size_t ws_bytes;
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

static inline rt_CudaKernelCtx *ctx_of(const rt_KernelArgs *a) { return (rt_CudaKernelCtx *)a->backend_ctx; }

/* "OP: message" into err; returns code. */
int rt_cuda_fail(char *err, size_t errlen, int code, const char *op, const char *fmt, ...);
/* RT_KERNEL_EDEVICE with CUDA's message if the last launch failed, else 0. */
int rt_cuda_launched(char *err, size_t errlen, const char *op);

#define REQUIRE(cond, ...) \
  do { if (!(cond)) return rt_cuda_fail(err, errlen, RT_KERNEL_EARGS, OP, __VA_ARGS__); } while (0)

/* ------------------------------------------------------ device storage */

typedef struct {
  void *p;
  int dt;
} DV;

static inline DV dv(const rt_View *v) {
  DV d = {v->data, (int)v->dtype};
  return d;
}
static inline DV dv_none(void) {
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

static inline unsigned nblocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

#define GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#define WARP_ROW() \
  const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32; \
  const int lane = threadIdx.x % 32

static inline int is_float(const rt_View *v) { return v->dtype == RT_F32 || v->dtype == RT_BF16 || v->dtype == RT_F16; }
static inline int64_t last_dim(const rt_View *v) { return v->rank > 0 ? v->shape[v->rank - 1] : 1; }

/* x rounded to V's storage type, as storing it and loading it back would. */
__device__ __forceinline__ float rounded(DV v, float x) {
  if (v.dt == RT_F32) return x;
  if (v.dt == RT_F16) return __half2float(__float2half_rn(x));
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  return __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

/* --------------------------------------------------------- column sums */

/* What a row contributes to rt_cuda_colsum's sums (colsum.cu). */
enum { COLSUM_DY, COLSUM_DY_XHAT_LN, COLSUM_DY_XHAT_RMS };

/* out0[c] += sum over N rows of dy[n,c] * f(n,c) (f = 1, or x-hat for
 * layernorm and rmsnorm); with out1, out1[c] += the sum of dy[n,c]. */
void rt_cuda_colsum(rt_CudaKernelCtx *k, DV out0, DV out1, DV dy, DV x, const float *mean, const float *rstd,
                    int64_t N, int64_t C, int mode);
/* out0[c] += CHUNKS partial sums part0[chunk, c] in chunk order; with
 * out1, out1[c] += part1's. */
void rt_cuda_colsum_finish(rt_CudaKernelCtx *k, DV out0, DV out1, const float *part0, const float *part1, int64_t C,
                           int chunks);

/* -------------------------------------------------- the next kernels */

/* Whether OP runs its next kernel (gpu/KERNELS.md: encoder.cu, norms.cu,
 * pointwise.cu, matmul.cu), opt-in until gpu-check passes them on a GPU:
 * RATION_CUDA_KERNELS=next selects every one, a list of op types (comma
 * or space separated, e.g. "layernorm,gelu") those ops' alone, so that a
 * check can run the ones that passed and keep the default for the rest.
 * Each falls back to the default kernel where its assumptions fail. */
bool rt_cuda_next_kernel(const char *op);

#define NEXT_VEC 8 /* elements a lane loads at once: 16 bytes of bf16, two 16-byte loads of f32 */

/* Vector loads need rows of whole vectors at 16-byte aligned addresses. */
static inline bool vec_ok(const rt_View *v, int64_t C) {
  return v->dtype != RT_F16 && C % NEXT_VEC == 0 && ((uintptr_t)v->data & 15u) == 0;
}

/* v[i .. i+8) as floats; i a multiple of 8. */
__device__ __forceinline__ void ld8(DV v, int64_t i, float *out) {
  if (v.dt == RT_F32) {
    const float4 *p = (const float4 *)((const float *)v.p + i);
    float4 a = p[0], b = p[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    uint4 q = *(const uint4 *)((const unsigned short *)v.p + i);
    unsigned w[4] = {q.x, q.y, q.z, q.w};
    for (int k = 0; k < 4; k++) {
      out[2 * k] = __uint_as_float(w[k] << 16);
      out[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
}

/* bf16 bits of x, as st() rounds them. */
__device__ __forceinline__ unsigned bf16_bits(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* v[i .. i+8) = in, rounded as st() rounds. */
__device__ __forceinline__ void st8(DV v, int64_t i, const float *in) {
  if (v.dt == RT_F32) {
    float4 *p = (float4 *)((float *)v.p + i);
    p[0] = make_float4(in[0], in[1], in[2], in[3]);
    p[1] = make_float4(in[4], in[5], in[6], in[7]);
  } else {
    uint4 q;
    q.x = bf16_bits(in[0]) | bf16_bits(in[1]) << 16;
    q.y = bf16_bits(in[2]) | bf16_bits(in[3]) << 16;
    q.z = bf16_bits(in[4]) | bf16_bits(in[5]) << 16;
    q.w = bf16_bits(in[6]) | bf16_bits(in[7]) << 16;
    *(uint4 *)((unsigned short *)v.p + i) = q;
  }
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

/* Reads heads, kv_heads and QKV's shape into S (attention.cu). */
int rt_cuda_attn_shape(const rt_KernelArgs *a, const rt_View *qkv, AttnShape *s, char *err, size_t errlen,
                       const char *OP);
/* Flash attention on the tensor cores (flash.cu), for bf16 views at
 * 16-byte aligned addresses with head sizes 64 or 128: whether V[0..N)
 * suit it, and the forward and backward passes (D: B x NH x T floats of
 * workspace). */
bool rt_cuda_flash_fits(const rt_View *const *v, int n, const AttnShape &s);
int rt_cuda_flash_forward(const rt_View *y, const rt_View *lse, const rt_View *qkv, const AttnShape &s,
                          cudaStream_t stream, char *err, size_t errlen);
int rt_cuda_flash_backward(const rt_View *dqkv, const rt_View *dy, const rt_View *qkv, const rt_View *y,
                           const rt_View *lse, float *D, const AttnShape &s, cudaStream_t stream, char *err,
                           size_t errlen);

/* --------------------------------------------------------- entry points */

#define RT_CUDA_KERNEL_DECL(op) int rt_cuda_k_##op(const rt_KernelArgs *a, char *err, size_t errlen);
RT_BUILTIN_KERNELS(RT_CUDA_KERNEL_DECL)

#endif
