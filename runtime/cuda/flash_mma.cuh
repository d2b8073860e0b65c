/*
 * flash_mma.cuh - flash attention with every score in registers: mma.sync
 * m16n8k16 (bf16 products, f32 sums) on tiles in shared memory, included
 * by flash.cu beside the wmma kernels, whose shapes, rounding and
 * order of sums it keeps (P and dS rounded to bf16 for the second
 * product, l summed from the rounded P, dq per query tile and dk/dv per
 * key tile, no atomics), so it is deterministic run to run.
 *
 * Why a second kernel: the wmma fragments' layout is opaque, so the wmma
 * kernels store every 16x16 score tile to shared memory and read it back
 * for the softmax, two lanes a row. mma.sync's layout is documented: lane
 * l holds rows l/4 and l/4+8 of a 16-row tile, columns 2(l%4) and
 * 2(l%4)+1 of each 8 wide n-tile, and that accumulator layout is the
 * layout of the A operand of the next product, so P and dS go from one
 * mma to the next in registers, and a row's max and sum need two shuffles
 * within its quad of lanes.
 *
 * It is the default for bf16 at head sizes 64 and 128 since it passed
 * gpu-check on an H200 (every attention case against the CPU reference,
 * bitwise run to run, gpt2-124m's step 25% faster than with wmma);
 * RATION_CUDA_ATTENTION=wmma selects the wmma kernels instead.
 */

#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* d(16x8, f32) += a(16x16) b(16x8). */
__device__ __forceinline__ void fa_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t fa_ld2(const bf16 *p) { return *(const uint32_t *)p; }

/* Two bf16 into one register, the lower column in the low half. */
__device__ __forceinline__ uint32_t fa_pack(bf16 lo, bf16 hi) {
  return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}
__device__ __forceinline__ uint32_t fa_packf(float lo, float hi) {
  return fa_pack(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
}

/* A operand: rows r0..r0+15, columns k0..k0+15 of a row-major tile. */
__device__ __forceinline__ void fa_frag_a(uint32_t *a, const bf16 *t, int ld, int r0, int k0) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  a[0] = fa_ld2(t + (r0 + g) * ld + k0 + 2 * c);
  a[1] = fa_ld2(t + (r0 + g + 8) * ld + k0 + 2 * c);
  a[2] = fa_ld2(t + (r0 + g) * ld + k0 + 8 + 2 * c);
  a[3] = fa_ld2(t + (r0 + g + 8) * ld + k0 + 8 + 2 * c);
}

/* B operand transposed from rows: B[k][n] = t[n0 + n][k0 + k], for the
 * products with a tile's transpose (Q K^T, dY V^T). */
__device__ __forceinline__ void fa_frag_bt(uint32_t *b, const bf16 *t, int ld, int n0, int k0) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  b[0] = fa_ld2(t + (n0 + g) * ld + k0 + 2 * c);
  b[1] = fa_ld2(t + (n0 + g) * ld + k0 + 8 + 2 * c);
}

/* B operand as stored: B[k][n] = t[k0 + k][n0 + n] (P V, dS K). */
__device__ __forceinline__ void fa_frag_b(uint32_t *b, const bf16 *t, int ld, int k0, int n0) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  const bf16 *p = t + (k0 + 2 * c) * ld + n0 + g;
  b[0] = fa_pack(p[0], p[ld]);
  b[1] = fa_pack(p[8 * ld], p[9 * ld]);
}

/* The accumulators of n-tiles 2kk and 2kk+1 as the A operand of the
 * product over their 16 columns. */
__device__ __forceinline__ void fa_acc_as_a(uint32_t *a, const float *lo, const float *hi) {
  a[0] = fa_packf(lo[0], lo[1]);
  a[1] = fa_packf(lo[2], lo[3]);
  a[2] = fa_packf(hi[0], hi[1]);
  a[3] = fa_packf(hi[2], hi[3]);
}

/* Sum and max over the four lanes of a row's quad. */
__device__ __forceinline__ float fa_quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float fa_quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Rows t (output row) of a warp's 16 x HD accumulators, times scale, as
 * bf16 pairs. */
template <int HD>
__device__ void fa_store_acc(bf16 *dst, int64_t stride, int64_t first, int64_t T, const float (*acc)[4], float s0,
                             float s1) {
  const int g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  for (int half = 0; half < 2; half++) {
    int64_t t = first + g + 8 * half;
    if (t >= T) continue;
    float sc = half ? s1 : s0;
    for (int n = 0; n < HD / 8; n++)
      *(uint32_t *)(dst + t * stride + n * 8 + 2 * c) = fa_packf(acc[n][2 * half] * sc, acc[n][2 * half + 1] * sc);
  }
}

/* x += a X^T and y += b Y^T over NT n-tiles of the other side's tiles X
 * and Y: the two score products of the backward kernels. */
template <int HD, int NT>
__device__ __forceinline__ void fa_scores2(float (*x)[4], float (*y)[4], const uint32_t (*a)[4], const uint32_t (*b)[4],
                                           const bf16 *X, const bf16 *Y) {
  for (int nt = 0; nt < NT; nt++)
    for (int kk = 0; kk < HD / 16; kk++) {
      uint32_t xb[2], yb[2];
      fa_frag_bt(xb, X, HD + 8, nt * 8, kk * 16);
      fa_frag_bt(yb, Y, HD + 8, nt * 8, kk * 16);
      fa_mma(x[nt], a[kk], xb[0], xb[1]);
      fa_mma(y[nt], b[kk], yb[0], yb[1]);
    }
}

/* acc(16 x HD) += p(16 x KN, accumulators, rounded to bf16 here) v, v a
 * KN x HD tile: the second product of every kernel. */
template <int HD, int KN>
__device__ __forceinline__ void fa_accumulate_pv(float (*acc)[4], const float (*p)[4], const bf16 *v) {
  for (int kk = 0; kk < KN / 16; kk++) {
    uint32_t pa[4];
    fa_acc_as_a(pa, p[2 * kk], p[2 * kk + 1]);
    for (int n = 0; n < HD / 8; n++) {
      uint32_t vb[2];
      fa_frag_b(vb, v, HD + 8, kk * 16, n * 8);
      fa_mma(acc[n], pa, vb[0], vb[1]);
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(FA_THREADS) flash_mma_forward_k(bf16 *y, float *lse, const bf16 *qkv, AttnShape s) {
  const int LD = HD + 8;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  bf16 *Qs = (bf16 *)fa_smem, *Ks = Qs + FA_TILE * LD, *Vs = Ks + FA_TILE * LD;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  const int64_t qt = blockIdx.x, b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, grp = h / (s.NH / s.KVH);
  const int64_t q0 = qt * FA_TILE, t0 = q0 + warp * 16 + g, t1 = t0 + 8;
  const bf16 *base = qkv + b * s.T * s.row;
  const float sl2 = s.scale * FA_LOG2E;
  fa_load_tile<HD>(Qs, base + h * HD, s.row, q0, s.T);
  __syncthreads();
  uint32_t qf[HD / 16][4];
  for (int kk = 0; kk < HD / 16; kk++) fa_frag_a(qf[kk], Qs, LD, warp * 16, kk * 16);
  float o[HD / 8][4] = {}, m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  for (int64_t kt = 0; kt <= qt; kt++) {
    __syncthreads();
    fa_load_tile<HD>(Ks, base + (s.NH + grp) * HD, s.row, kt * FA_TILE, s.T);
    fa_load_tile<HD>(Vs, base + (s.NH + s.KVH + grp) * HD, s.row, kt * FA_TILE, s.T);
    __syncthreads();
    float sc[FA_TILE / 8][4] = {};
    for (int nt = 0; nt < FA_TILE / 8; nt++)
      for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t kb[2];
        fa_frag_bt(kb, Ks, LD, nt * 8, kk * 16);
        fa_mma(sc[nt], qf[kk], kb[0], kb[1]);
      }
    /* Scores in log2 units, masked: causal, and keys past T. */
    float mx0 = -INFINITY, mx1 = -INFINITY;
    for (int nt = 0; nt < FA_TILE / 8; nt++)
      for (int e = 0; e < 4; e++) {
        int64_t u = kt * FA_TILE + nt * 8 + 2 * c + (e & 1), t = e < 2 ? t0 : t1;
        float v = u <= t && u < s.T ? sc[nt][e] * sl2 : -INFINITY;
        sc[nt][e] = v;
        if (e < 2) mx0 = fmaxf(mx0, v);
        else mx1 = fmaxf(mx1, v);
      }
    float mn0 = fmaxf(m0, fa_quad_max(mx0)), mn1 = fmaxf(m1, fa_quad_max(mx1));
    float a0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), a1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
    float sum0 = 0.0f, sum1 = 0.0f;
    for (int nt = 0; nt < FA_TILE / 8; nt++)
      for (int e = 0; e < 4; e++) {
        float mn = e < 2 ? mn0 : mn1;
        /* Rounded here, so that l sums the probabilities the product uses. */
        float p = __bfloat162float(__float2bfloat16_rn(mn == -INFINITY ? 0.0f : exp2f(sc[nt][e] - mn)));
        sc[nt][e] = p;
        if (e < 2) sum0 += p;
        else sum1 += p;
      }
    l0 = l0 * a0 + fa_quad_sum(sum0);
    l1 = l1 * a1 + fa_quad_sum(sum1);
    m0 = mn0, m1 = mn1;
    for (int n = 0; n < HD / 8; n++) o[n][0] *= a0, o[n][1] *= a0, o[n][2] *= a1, o[n][3] *= a1;
    fa_accumulate_pv<HD, FA_TILE>(o, sc, Vs);
  }
  fa_store_acc<HD>(y + b * s.T * s.NH * HD + h * HD, s.NH * HD, q0 + warp * 16, s.T, o, 1.0f / l0, 1.0f / l1);
  if (c == 0) {
    float *L = lse + (b * s.NH + h) * s.T;
    if (t0 < s.T) L[t0] = (m0 + log2f(l0)) * FA_LN2;
    if (t1 < s.T) L[t1] = (m1 + log2f(l1)) * FA_LN2;
  }
}

/* dq for 64 query rows: over the key tiles at or before them, dS = P (dP -
 * D) with dP = dY V^T, dq += dS K. */
template <int HD>
__global__ void __launch_bounds__(FA_THREADS) flash_mma_backward_q_k(bf16 *dqkv, const bf16 *dy, const bf16 *qkv,
                                                                      const float *lse, const float *D, AttnShape s) {
  const int LD = HD + 8;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  bf16 *Qs = (bf16 *)fa_smem, *DYs = Qs + FA_TILE * LD, *Ks = DYs + FA_TILE * LD, *Vs = Ks + FA_TILE * LD;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  const int64_t qt = blockIdx.x, b = blockIdx.y / s.NH, h = blockIdx.y % s.NH, grp = h / (s.NH / s.KVH);
  const int64_t q0 = qt * FA_TILE, t0 = q0 + warp * 16 + g, t1 = t0 + 8, stat = (b * s.NH + h) * s.T;
  const bf16 *base = qkv + b * s.T * s.row;
  const float sl2 = s.scale * FA_LOG2E;
  fa_load_tile<HD>(Qs, base + h * HD, s.row, q0, s.T);
  fa_load_tile<HD>(DYs, dy + b * s.T * s.NH * HD + h * HD, s.NH * HD, q0, s.T);
  __syncthreads();
  uint32_t qf[HD / 16][4], dyf[HD / 16][4];
  for (int kk = 0; kk < HD / 16; kk++) {
    fa_frag_a(qf[kk], Qs, LD, warp * 16, kk * 16);
    fa_frag_a(dyf[kk], DYs, LD, warp * 16, kk * 16);
  }
  const float L0 = t0 < s.T ? lse[stat + t0] * FA_LOG2E : 0.0f, L1 = t1 < s.T ? lse[stat + t1] * FA_LOG2E : 0.0f;
  const float D0 = t0 < s.T ? D[stat + t0] : 0.0f, D1 = t1 < s.T ? D[stat + t1] : 0.0f;
  float dq[HD / 8][4] = {};
  for (int64_t kt = 0; kt <= qt; kt++) {
    __syncthreads();
    fa_load_tile<HD>(Ks, base + (s.NH + grp) * HD, s.row, kt * FA_TILE, s.T);
    fa_load_tile<HD>(Vs, base + (s.NH + s.KVH + grp) * HD, s.row, kt * FA_TILE, s.T);
    __syncthreads();
    float sc[FA_TILE / 8][4] = {}, dp[FA_TILE / 8][4] = {};
    fa_scores2<HD, FA_TILE / 8>(sc, dp, qf, dyf, Ks, Vs);
    for (int nt = 0; nt < FA_TILE / 8; nt++)
      for (int e = 0; e < 4; e++) {
        int64_t u = kt * FA_TILE + nt * 8 + 2 * c + (e & 1), t = e < 2 ? t0 : t1;
        float p = u <= t && t < s.T ? exp2f(sc[nt][e] * sl2 - (e < 2 ? L0 : L1)) : 0.0f;
        sc[nt][e] = p * (dp[nt][e] - (e < 2 ? D0 : D1));
      }
    fa_accumulate_pv<HD, FA_TILE>(dq, sc, Ks);
  }
  fa_store_acc<HD>(dqkv + b * s.T * s.row + h * HD, s.row, q0 + warp * 16, s.T, dq, s.scale, s.scale);
}

/* dk and dv for 64 key rows of one kv head, over the group's query heads
 * and the QN-row query tiles at or after them: S^T = K Q^T, dP^T = V dY^T,
 * dv += P^T dY, dk += dS^T Q. QN is 32 for head dim 128, which keeps the
 * accumulators of both sides in registers. */
template <int HD, int QN>
__global__ void __launch_bounds__(FA_THREADS) flash_mma_backward_kv_k(bf16 *dqkv, const bf16 *dy, const bf16 *qkv,
                                                                       const float *lse, const float *D, AttnShape s) {
  const int LD = HD + 8;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  bf16 *Ks = (bf16 *)fa_smem, *Vs = Ks + FA_TILE * LD, *Qs = Vs + FA_TILE * LD, *DYs = Qs + QN * LD;
  float *Ls = (float *)(DYs + QN * LD), *Ds = Ls + QN;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, c = threadIdx.x % 4;
  const int64_t kt = blockIdx.x, b = blockIdx.y / s.KVH, grp = blockIdx.y % s.KVH, rep = s.NH / s.KVH;
  const int64_t k0 = kt * FA_TILE, u0 = k0 + warp * 16 + g, u1 = u0 + 8;
  const bf16 *base = qkv + b * s.T * s.row;
  const float sl2 = s.scale * FA_LOG2E;
  fa_load_tile<HD>(Ks, base + (s.NH + grp) * HD, s.row, k0, s.T);
  fa_load_tile<HD>(Vs, base + (s.NH + s.KVH + grp) * HD, s.row, k0, s.T);
  __syncthreads();
  uint32_t kf[HD / 16][4], vf[HD / 16][4];
  for (int kk = 0; kk < HD / 16; kk++) {
    fa_frag_a(kf[kk], Ks, LD, warp * 16, kk * 16);
    fa_frag_a(vf[kk], Vs, LD, warp * 16, kk * 16);
  }
  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  const int64_t ntiles = (s.T + QN - 1) / QN;
  for (int64_t h = grp * rep; h < (grp + 1) * rep; h++)
    for (int64_t qt = k0 / QN; qt < ntiles; qt++) {
      const int64_t q0 = qt * QN;
      __syncthreads();
      fa_load_tile<HD, QN>(Qs, base + h * HD, s.row, q0, s.T);
      fa_load_tile<HD, QN>(DYs, dy + b * s.T * s.NH * HD + h * HD, s.NH * HD, q0, s.T);
      for (int i = threadIdx.x; i < QN; i += FA_THREADS) {
        bool in = q0 + i < s.T;
        Ls[i] = in ? lse[(b * s.NH + h) * s.T + q0 + i] * FA_LOG2E : 0.0f;
        Ds[i] = in ? D[(b * s.NH + h) * s.T + q0 + i] : 0.0f;
      }
      __syncthreads();
      float st[QN / 8][4] = {}, dpt[QN / 8][4] = {};
      fa_scores2<HD, QN / 8>(st, dpt, kf, vf, Qs, DYs);
      for (int nt = 0; nt < QN / 8; nt++)
        for (int e = 0; e < 4; e++) {
          int i = nt * 8 + 2 * c + (e & 1);
          int64_t t = q0 + i, u = e < 2 ? u0 : u1;
          float p = u <= t && t < s.T && u < s.T ? exp2f(st[nt][e] * sl2 - Ls[i]) : 0.0f;
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - Ds[i]);
        }
      fa_accumulate_pv<HD, QN>(dv, st, DYs);
      fa_accumulate_pv<HD, QN>(dk, dpt, Qs);
    }
  bf16 *out = dqkv + b * s.T * s.row;
  fa_store_acc<HD>(out + (s.NH + grp) * HD, s.row, k0 + warp * 16, s.T, dk, s.scale, s.scale);
  fa_store_acc<HD>(out + (s.NH + s.KVH + grp) * HD, s.row, k0 + warp * 16, s.T, dv, 1.0f, 1.0f);
}

static bool fa_use_mma(void) {
  static int use = -1;
  if (use < 0) {
    const char *v = getenv("RATION_CUDA_ATTENTION");
    use = !(v && !strcmp(v, "wmma"));
  }
  return use;
}

template <int HD>
static int fa_mma_forward(const rt_View *y, const rt_View *lse, const rt_View *qkv, const AttnShape &s,
                          cudaStream_t st_, char *err, size_t errlen) {
  size_t smem = 3 * FA_TILE * (HD + 8) * sizeof(bf16);
  int rc = fa_prepare(flash_mma_forward_k<HD>, smem, err, errlen, "attention");
  if (rc) return rc;
  dim3 grid((unsigned)((s.T + FA_TILE - 1) / FA_TILE), (unsigned)(s.B * s.NH));
  flash_mma_forward_k<HD><<<grid, FA_THREADS, smem, st_>>>((bf16 *)y->data, (float *)lse->data,
                                                           (const bf16 *)qkv->data, s);
  return rt_cuda_launched(err, errlen, "attention");
}

template <int HD>
static int fa_mma_backward(const rt_View *dqkv, const rt_View *dy, const rt_View *qkv, const rt_View *y,
                           const rt_View *lse, float *D, const AttnShape &s, cudaStream_t st_, char *err,
                           size_t errlen) {
  const int QN = HD == 64 ? 64 : 32;
  const char *OP = "attention_backward";
  size_t smem_q = 4 * FA_TILE * (HD + 8) * sizeof(bf16);
  size_t smem_kv = (2 * FA_TILE + 2 * QN) * (HD + 8) * sizeof(bf16) + 2 * QN * sizeof(float);
  int rc = fa_prepare(flash_mma_backward_q_k<HD>, smem_q, err, errlen, OP);
  if (!rc) rc = fa_prepare(flash_mma_backward_kv_k<HD, QN>, smem_kv, err, errlen, OP);
  if (rc) return rc;
  flash_backward_d_k<<<nblocks(s.B * s.NH * s.T, WARPS_PER_BLOCK), THREADS, 0, st_>>>(D, dv(dy), dv(y), s);
  unsigned tiles = (unsigned)((s.T + FA_TILE - 1) / FA_TILE);
  const bf16 *dyp = (const bf16 *)dy->data, *qp = (const bf16 *)qkv->data;
  const float *lp = (const float *)lse->data;
  flash_mma_backward_q_k<HD><<<dim3(tiles, (unsigned)(s.B * s.NH)), FA_THREADS, smem_q, st_>>>(
      (bf16 *)dqkv->data, dyp, qp, lp, D, s);
  flash_mma_backward_kv_k<HD, QN><<<dim3(tiles, (unsigned)(s.B * s.KVH)), FA_THREADS, smem_kv, st_>>>(
      (bf16 *)dqkv->data, dyp, qp, lp, D, s);
  return rt_cuda_launched(err, errlen, OP);
}
