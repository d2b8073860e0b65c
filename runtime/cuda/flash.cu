/*
 * flash.cu - flash attention on the tensor cores for bf16 at head sizes 64
 * and 128: the wmma kernels and the mma.sync ones of flash_mma.cuh (the
 * default; RATION_CUDA_ATTENTION=wmma selects the wmma kernels).
 */
#include "cuda.cuh"

using namespace nvcuda;

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

bool rt_cuda_flash_fits(const rt_View *const *v, int n, const AttnShape &s) {
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
  if (e != cudaSuccess) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, op, "shared memory: %s", cudaGetErrorString(e));
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
  return rt_cuda_launched(err, errlen, "attention");
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
  return rt_cuda_launched(err, errlen, OP);
}

#include "flash_mma.cuh"

int rt_cuda_flash_forward(const rt_View *y, const rt_View *lse, const rt_View *qkv, const AttnShape &s,
                          cudaStream_t stream, char *err, size_t errlen) {
  if (fa_use_mma())
    return s.hd == 64 ? fa_mma_forward<64>(y, lse, qkv, s, stream, err, errlen)
                      : fa_mma_forward<128>(y, lse, qkv, s, stream, err, errlen);
  return s.hd == 64 ? fa_forward<64>(y, lse, qkv, s, stream, err, errlen)
                    : fa_forward<128>(y, lse, qkv, s, stream, err, errlen);
}

int rt_cuda_flash_backward(const rt_View *dqkv, const rt_View *dy, const rt_View *qkv, const rt_View *y,
                           const rt_View *lse, float *D, const AttnShape &s, cudaStream_t stream, char *err,
                           size_t errlen) {
  if (fa_use_mma())
    return s.hd == 64 ? fa_mma_backward<64>(dqkv, dy, qkv, y, lse, D, s, stream, err, errlen)
                      : fa_mma_backward<128>(dqkv, dy, qkv, y, lse, D, s, stream, err, errlen);
  return s.hd == 64 ? fa_backward<64>(dqkv, dy, qkv, y, lse, D, s, stream, err, errlen)
                    : fa_backward<128>(dqkv, dy, qkv, y, lse, D, s, stream, err, errlen);
}
