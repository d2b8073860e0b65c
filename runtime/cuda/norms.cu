/*
 * norms.cu - layernorm and rmsnorm, forward and backward: a warp per row,
 * the weight gradients by deterministic column sums (colsum.cu).
 * RATION_CUDA_KERNELS=next runs layernorm's forward with the row in
 * registers and its backward in one pass (gpu/KERNELS.md).
 */
#include "cuda.cuh"

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

/* -------------------------------------------- layernorm backward, next */

/* A warp per row holds the row's dy and x in registers (16-byte loads),
 * so dx reads each element once; the same warp adds dy * x-hat and dy for
 * its columns over the rows it owns, the block's warps add theirs in warp
 * order in shared memory, and a second launch adds the blocks' partial
 * sums in block order: dw/db without a second read of dy and x. Rows go
 * to warps by a fixed stride, so every sum has one order whatever the
 * run. The sums are f32 as in the CPU reference, in a different
 * association (lanes, then a butterfly; rows by warp, then by block),
 * which the check's per-dtype tolerance covers. */
#define NEXT_LN_VECS 4 /* vectors per lane: rows up to 32 x 4 x 8 = 1024 elements */
#define NEXT_LN_MAX_C (32 * NEXT_LN_VECS * NEXT_VEC)
#define NEXT_LN_BLOCKS 256 /* blocks of partial column sums; their order fixes the sum's */

/* Whether rows of C elements in the N views V (NULLs skipped) suit the
 * next kernels: whole aligned vectors that fit a warp's registers. */
static bool next_rows_fit(const rt_View *const *v, int n, int64_t C) {
  if (C <= 0 || C > NEXT_LN_MAX_C) return false;
  for (int i = 0; i < n; i++)
    if (v[i] && !vec_ok(v[i], C)) return false;
  return true;
}

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
  const rt_View *rows[] = {dy, x, w, dx};
  bool rows_ok = next_rows_fit(rows, 4, C);
  size_t part_bytes = 2 * (size_t)NEXT_LN_BLOCKS * (size_t)C * sizeof(float);
  if (!rows_ok || (dw && (!k->lt_ws || part_bytes > k->lt_ws_bytes))) return 1;
  float *part0 = dw ? (float *)k->lt_ws : NULL, *part1 = part0 ? part0 + NEXT_LN_BLOCKS * C : NULL;
  next_layernorm_backward_k<<<NEXT_LN_BLOCKS, THREADS, 0, k->stream>>>(dx ? dv(dx) : dv_none(), part0, part1,
                                                                      dv(dy), dv(x), dv(w), mean, rstd, N, C);
  if (dw)
    rt_cuda_colsum_finish(k, dv(dw), dv(db), part0, part1, C, NEXT_LN_BLOCKS);
  return 0;
}

/* --------------------------------------------- layernorm forward, next */

/* A warp per row loads the row once with 16-byte loads and keeps it in
 * registers: the mean, then the variance of (x - mean), then y from the
 * registers, as the CPU reference's three passes over the row compute them
 * (the same products and differences; the sums associated differently:
 * lane partials, then a butterfly). y is written with 16-byte stores. */
__global__ void __launch_bounds__(THREADS) next_layernorm_forward_k(DV y, float *mean, float *rstd, DV x, DV w, DV b,
                                                                    int64_t N, int64_t C, float eps) {
  WARP_ROW();
  if (row >= N) return;
  const int64_t o = row * C;
  float xv[NEXT_LN_VECS][NEXT_VEC], m = 0.0f, var = 0.0f;
#pragma unroll
  for (int v = 0; v < NEXT_LN_VECS; v++) {
    int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
    if (c >= C) continue;
    ld8(x, o + c, xv[v]);
    for (int e = 0; e < NEXT_VEC; e++) m += xv[v][e];
  }
  m = warp_sum(m) / (float)C;
#pragma unroll
  for (int v = 0; v < NEXT_LN_VECS; v++) {
    int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
    if (c >= C) continue;
    for (int e = 0; e < NEXT_VEC; e++) {
      float d = xv[v][e] - m;
      var += d * d;
    }
  }
  var = warp_sum(var) / (float)C;
  const float r = 1.0f / sqrtf(var + eps);
#pragma unroll
  for (int v = 0; v < NEXT_LN_VECS; v++) {
    int64_t c = ((int64_t)v * 32 + lane) * NEXT_VEC;
    if (c >= C) continue;
    float wv[NEXT_VEC], bv[NEXT_VEC], out[NEXT_VEC];
    ld8(w, c, wv);
    ld8(b, c, bv);
    for (int e = 0; e < NEXT_VEC; e++) out[e] = (xv[v][e] - m) * r * wv[e] + bv[e];
    st8(y, o + c, out);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

int rt_cuda_k_layernorm(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "layernorm";
  REQUIRE(a->nin == 3 && a->nout == 3, "want 3 inputs (x, w, b) and 3 outputs (y, mean, rstd)");
  const rt_View *x = &a->in[0], *w = &a->in[1], *b = &a->in[2];
  const rt_View *y = &a->out[0], *mean = &a->out[1], *rstd = &a->out[2];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(x) && is_float(w) && is_float(b) && is_float(y), "x, w, b, y must be float");
  REQUIRE(mean->dtype == RT_F32 && rstd->dtype == RT_F32, "mean and rstd must be f32");
  REQUIRE(w->numel == C && b->numel == C && y->numel == x->numel && mean->numel == N && rstd->numel == N,
          "shapes must be x,y [B,T,C], w,b [C], mean,rstd [B,T]");
  float eps = (float)rt_attr(a, "eps", 1e-5);
  const rt_View *rows[] = {y, x, w, b};
  if (rt_cuda_next_kernel(OP) && next_rows_fit(rows, 4, C))
    next_layernorm_forward_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
        dv(y), (float *)mean->data, (float *)rstd->data, dv(x), dv(w), dv(b), N, C, eps);
  else
    layernorm_forward_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
        dv(y), (float *)mean->data, (float *)rstd->data, dv(x), dv(w), dv(b), N, C, eps);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_layernorm_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
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
  if (rt_cuda_next_kernel(OP) && !next_layernorm_backward(ctx_of(a), dx, dw, db, dy, x, w, mp, rp, N, C))
    return rt_cuda_launched(err, errlen, OP);
  if (dx)
    layernorm_backward_dx_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, s>>>(dv(dx), dv(dy), dv(x), dv(w), mp, rp, N, C);
  if (dw) rt_cuda_colsum(ctx_of(a), dv(dw), dv(db), dv(dy), dv(x), mp, rp, N, C, COLSUM_DY_XHAT_LN);
  return rt_cuda_launched(err, errlen, OP);
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

int rt_cuda_k_rmsnorm(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "rmsnorm";
  REQUIRE(a->nin == 2 && a->nout == 2, "want 2 inputs (x, w) and 2 outputs (y, rstd)");
  const rt_View *x = &a->in[0], *w = &a->in[1], *y = &a->out[0], *rstd = &a->out[1];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(x) && is_float(w) && is_float(y) && rstd->dtype == RT_F32, "x, w, y must be float and rstd f32");
  REQUIRE(w->numel == C && y->numel == x->numel && rstd->numel == N, "shapes must be x,y [B,T,C], w [C], rstd [B,T]");
  rmsnorm_forward_k<<<nblocks(N, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
      dv(y), (float *)rstd->data, dv(x), dv(w), N, C, (float)rt_attr(a, "eps", 1e-5));
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_rmsnorm_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
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
  if (dw) rt_cuda_colsum(ctx_of(a), dv(dw), dv_none(), dv(dy), dv(x), NULL, rp, N, C, COLSUM_DY_XHAT_RMS);
  return rt_cuda_launched(err, errlen, OP);
}
