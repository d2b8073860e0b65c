/*
 * kernels_next.cuh - the next CUDA kernels for the encoder and layernorm
 * backward, included by kernels_cuda.cu and selected by
 * RATION_CUDA_KERNELS=next until gpu-check passes them on a GPU (none has
 * run them yet); gpu/KERNELS.md gives each one's bytes, today's time and
 * the predicted time.
 *
 * encoder_backward: a stable radix sort of (token id, position) pairs
 * (cub::DeviceRadixSort, stable, so equal ids keep token order), then a
 * block per run of equal ids adds the run's dx rows in token order. Each
 * dwte element sums exactly the tokens the scan kernel sums, in the same
 * order, rounding to dwte's type after every token as the CPU's += does:
 * bitwise the scan kernel's result, with N x C reads instead of V x N.
 *
 * layernorm_backward: a warp per row holds the row's dy and x in
 * registers (16-byte loads), so dx reads each element once; the same warp
 * adds dy * x-hat and dy for its columns over the rows it owns, the
 * block's warps add theirs in warp order in shared memory, and a second
 * launch adds the blocks' partial sums in block order: dw/db without a
 * second read of dy and x. Rows go to warps by a fixed stride, so every
 * sum has one order whatever the run. The sums are f32 as in the CPU
 * reference, in a different association (lanes, then a butterfly; rows
 * by warp, then by block), which the check's per-dtype tolerance covers.
 *
 * gelu, gelu_backward and add have their 16-byte-load versions beside
 * the default ones in kernels_cuda.cu, under the same variable.
 *
 * All fall back to the default kernels where their assumptions fail:
 * rows not a multiple of 8 elements or not 16-byte aligned, C above
 * NEXT_LN_MAX_C, or scratch that does not fit the cuBLASLt workspace.
 */

#include <cub/device/device_radix_sort.cuh>

#define NEXT_VEC 8 /* elements a lane loads at once: 16 bytes of bf16, two 16-byte loads of f32 */
#define NEXT_LN_VECS 4 /* vectors per lane: rows up to 32 x 4 x 8 = 1024 elements */
#define NEXT_LN_MAX_C (32 * NEXT_LN_VECS * NEXT_VEC)
#define NEXT_LN_BLOCKS 256 /* blocks of partial column sums; their order fixes the sum's */
#define NEXT_ENC_THREADS 128

static bool next_kernels(void) {
  static int use = -1;
  if (use < 0) {
    const char *v = getenv("RATION_CUDA_KERNELS");
    use = v && !strcmp(v, "next");
  }
  return use;
}

/* Vector loads need rows of whole vectors at 16-byte aligned addresses. */
static bool vec_ok(const rt_View *v, int64_t C) {
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

/* ----------------------------------------------------- encoder backward */

/* key[n] = tok[n] where it is a valid id, else V (sorted last, added to
 * nothing, reported in the status word); pos[n] = n. */
__global__ void next_encoder_keys_k(unsigned *key, unsigned *pos, const int *tok, int64_t N, int64_t V, int *status) {
  GRID_STRIDE(n, N) {
    int t = tok[n];
    bool bad = t < 0 || t >= V;
    if (bad) *status = 1;
    key[n] = bad ? (unsigned)V : (unsigned)t;
    pos[n] = (unsigned)n;
  }
}

/* Block i starts work only where sorted position i begins a run of equal
 * ids: it adds that run's dx rows, in token order, to the id's dwte row. */
__global__ void next_encoder_runs_k(DV dwte, DV dx, const unsigned *key, const unsigned *pos, int64_t N,
                                    int64_t C, int64_t V) {
  const int64_t i = blockIdx.x;
  const unsigned id = key[i];
  if (id >= V || (i > 0 && key[i - 1] == id)) return;
  int64_t end = i + 1;
  while (end < N && key[end] == id) end++;
  const int64_t row = (int64_t)id * C;
  for (int64_t c = (int64_t)threadIdx.x * NEXT_VEC; c < C; c += (int64_t)blockDim.x * NEXT_VEC) {
    float acc[NEXT_VEC], d[NEXT_VEC];
    ld8(dwte, row + c, acc);
#pragma unroll 4 /* a long run's loads in flight together; the adds stay in order */
    for (int64_t j = i; j < end; j++) {
      ld8(dx, (int64_t)pos[j] * C + c, d);
      for (int k = 0; k < NEXT_VEC; k++) acc[k] = rounded(dwte, acc[k] + d[k]);
    }
    st8(dwte, row + c, acc);
  }
}

/* Bits that hold every key 0..V. */
static int key_bits(int64_t V) {
  int b = 1;
  while (b < 32 && ((int64_t)1 << b) <= V) b++;
  return b;
}

/* Sorts and sums in the cuBLASLt workspace; 1 (nothing launched) where
 * the rows do not suit vector loads or the scratch does not fit. */
static int next_encoder_backward(rt_CudaKernelCtx *k, const rt_View *dwte, const rt_View *dx, const int *tok,
                                 int64_t N, int64_t C) {
  int64_t V = dwte->shape[0];
  if (!vec_ok(dwte, C) || !vec_ok(dx, C) || N <= 0 || N >= ((int64_t)1 << 31) || V >= ((int64_t)1 << 31)) return 1;
  size_t temp = 0, lists = 4 * ((size_t)N * sizeof(unsigned) + 256);
  if (cub::DeviceRadixSort::SortPairs(NULL, temp, (const unsigned *)NULL, (unsigned *)NULL, (const unsigned *)NULL,
                                      (unsigned *)NULL, (int)N, 0, key_bits(V), k->stream) != cudaSuccess ||
      !k->lt_ws || lists + temp > k->lt_ws_bytes)
    return 1;
  size_t stride = ((size_t)N * sizeof(unsigned) + 255) & ~(size_t)255;
  unsigned char *ws = (unsigned char *)k->lt_ws;
  unsigned *key = (unsigned *)ws, *pos = (unsigned *)(ws + stride);
  unsigned *skey = (unsigned *)(ws + 2 * stride), *spos = (unsigned *)(ws + 3 * stride);
  next_encoder_keys_k<<<nblocks(N, THREADS), THREADS, 0, k->stream>>>(key, pos, tok, N, V, k->status);
  /* The keys kernel wrote only scratch and the status word: the scan
   * kernel can still run in its place. */
  if (cub::DeviceRadixSort::SortPairs(ws + 4 * stride, temp, key, skey, pos, spos, (int)N, 0, key_bits(V),
                                      k->stream) != cudaSuccess)
    return 1;
  next_encoder_runs_k<<<(unsigned)N, NEXT_ENC_THREADS, 0, k->stream>>>(dv(dwte), dv(dx), skey, spos, N, C, V);
  return 0;
}

/* --------------------------------------------------- layernorm backward */

/* part[blockIdx.x, c] = the block's warps' s[c] added in warp order. */
__device__ void block_partial(float *part, const float (*s)[NEXT_VEC], float (*sums)[NEXT_LN_MAX_C], int64_t C) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int v = 0; v < NEXT_LN_VECS; v++) {
    int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
    if (c >= C) continue;
    for (int e = 0; e < NEXT_VEC; e++) sums[warp][c + e] = s[v][e];
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += THREADS) {
    float t = 0.0f;
    for (int k = 0; k < WARPS_PER_BLOCK; k++) t += sums[k][c];
    part[blockIdx.x * C + c] = t;
  }
  __syncthreads();
}

/* dx for the rows of warp w (rows w, w + warps, ...); with part0, the
 * block's sums of dy * x-hat and dy for every column into
 * part0/part1[blockIdx.x, c]. */
__global__ void __launch_bounds__(THREADS) next_layernorm_backward_k(DV dx, float *part0, float *part1, DV dy, DV x,
                                                                     DV w, const float *mean, const float *rstd,
                                                                     int64_t N, int64_t C) {
  __shared__ float sums[WARPS_PER_BLOCK][NEXT_LN_MAX_C];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t warps = (int64_t)gridDim.x * WARPS_PER_BLOCK;
  float wv[NEXT_LN_VECS][NEXT_VEC], s0[NEXT_LN_VECS][NEXT_VEC], s1[NEXT_LN_VECS][NEXT_VEC];
#pragma unroll
  for (int v = 0; v < NEXT_LN_VECS; v++) {
    int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
    for (int e = 0; e < NEXT_VEC; e++) s0[v][e] = s1[v][e] = 0.0f;
    if (c < C) ld8(w, c, wv[v]);
  }
  for (int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + warp; row < N; row += warps) {
    const int64_t o = row * C;
    const float m = mean[row], r = rstd[row];
    float d[NEXT_LN_VECS][NEXT_VEC], xh[NEXT_LN_VECS][NEXT_VEC], sd = 0.0f, sdx = 0.0f;
#pragma unroll
    for (int v = 0; v < NEXT_LN_VECS; v++) {
      int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
      if (c >= C) continue;
      ld8(dy, o + c, d[v]);
      ld8(x, o + c, xh[v]);
      for (int e = 0; e < NEXT_VEC; e++) { /* each product rounds as the CPU reference's does */
        float xm = xh[v][e] - m, dn = d[v][e] * wv[v][e];
        xh[v][e] = xm * r;
        sd += dn;
        sdx += dn * xm * r;
        s0[v][e] += d[v][e] * xh[v][e];
        s1[v][e] += d[v][e];
      }
    }
    if (!dx.p) continue;
    sd = warp_sum(sd) / (float)C;
    sdx = warp_sum(sdx) / (float)C;
#pragma unroll
    for (int v = 0; v < NEXT_LN_VECS; v++) {
      int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
      if (c >= C) continue;
      float out[NEXT_VEC];
      for (int e = 0; e < NEXT_VEC; e++) out[e] = (d[v][e] * wv[v][e] - sd - xh[v][e] * sdx) * r;
      st8(dx, o + c, out);
    }
  }
  if (!part0) return;
  block_partial(part0, s0, sums, C);
  block_partial(part1, s1, sums, C);
}

/* 1 (nothing launched) where the rows do not suit this kernel. */
static int next_layernorm_backward(rt_CudaKernelCtx *k, const rt_View *dx, const rt_View *dw, const rt_View *db,
                                   const rt_View *dy, const rt_View *x, const rt_View *w, const float *mean,
                                   const float *rstd, int64_t N, int64_t C) {
  bool rows_ok = C > 0 && C <= NEXT_LN_MAX_C && vec_ok(dy, C) && vec_ok(x, C) && vec_ok(w, C) && (!dx || vec_ok(dx, C));
  size_t part_bytes = 2 * (size_t)NEXT_LN_BLOCKS * (size_t)C * sizeof(float);
  if (!rows_ok || (dw && (!k->lt_ws || part_bytes > k->lt_ws_bytes))) return 1;
  float *part0 = dw ? (float *)k->lt_ws : NULL, *part1 = part0 ? part0 + NEXT_LN_BLOCKS * C : NULL;
  next_layernorm_backward_k<<<NEXT_LN_BLOCKS, THREADS, 0, k->stream>>>(dx ? dv(dx) : dv_none(), part0, part1,
                                                                      dv(dy), dv(x), dv(w), mean, rstd, N, C);
  if (dw)
    colsum_finish_k<<<nblocks(C, THREADS), THREADS, 0, k->stream>>>(dv(dw), dv(db), part0, part1, C,
                                                                    NEXT_LN_BLOCKS);
  return 0;
}
