/*
 * attention.cu - causal attention with grouped kv heads, forward and
 * backward, and rope. bf16 at head sizes 64 and 128 runs flash-style on
 * the tensor cores (flash.cu); every other case runs here, a warp per
 * query row (dq) or key row (dk, dv), two passes, no atomics.
 */
#include "cuda.cuh"

#define HD_PER_LANE (CU_MAX_HD / 32)

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

int rt_cuda_attn_shape(const rt_KernelArgs *a, const rt_View *qkv, AttnShape *s, char *err, size_t errlen,
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

int rt_cuda_k_attention(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "attention";
  REQUIRE(a->nin == 1 && a->nout == 2, "want 1 input (qkv) and 2 outputs (y, lse)");
  AttnShape s;
  int rc = rt_cuda_attn_shape(a, &a->in[0], &s, err, errlen, OP);
  if (rc) return rc;
  const rt_View *y = &a->out[0], *lse = &a->out[1];
  REQUIRE(is_float(y) && y->numel == s.B * s.T * s.NH * s.hd, "y must be float [B,T,NH hd]");
  REQUIRE(lse->dtype == RT_F32 && lse->numel == s.B * s.NH * s.T, "lse must be f32 [B,NH,T]");
  const rt_View *fv[] = {y, &a->in[0]};
  if (rt_cuda_flash_fits(fv, 2, s))
    return rt_cuda_flash_forward(y, lse, &a->in[0], s, ctx_of(a)->stream, err, errlen);
  attention_forward_k<<<nblocks(s.B * s.NH * s.T, WARPS_PER_BLOCK), THREADS, 0, ctx_of(a)->stream>>>(
      dv(y), (float *)lse->data, dv(&a->in[0]), s);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_attention_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "attention_backward";
  REQUIRE(a->nin == 4 && a->nout == 1, "want 4 inputs (dy, qkv, y, lse) and 1 output (dqkv)");
  AttnShape s;
  int rc = rt_cuda_attn_shape(a, &a->in[1], &s, err, errlen, OP);
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
  if (rt_cuda_flash_fits(fv, 4, s))
    return rt_cuda_flash_backward(dqkv, dy, &a->in[1], y, lse, D, s, st_, err, errlen);
  const float *lp = (const float *)lse->data;
  attention_backward_q_k<<<nblocks(s.B * s.NH * s.T, WARPS_PER_BLOCK), THREADS, 0, st_>>>(
      dv(dqkv), D, dv(dy), dv(&a->in[1]), dv(y), lp, s);
  attention_backward_kv_k<<<nblocks(s.B * s.KVH * s.T, WARPS_PER_BLOCK), THREADS, 0, st_>>>(
      dv(dqkv), D, dv(dy), dv(&a->in[1]), lp, s);
  return rt_cuda_launched(err, errlen, OP);
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
  int rc = rt_cuda_attn_shape(a, &a->in[0], &s, err, errlen, OP);
  if (rc) return rc;
  REQUIRE(s.hd % 2 == 0, "head dim %lld must be even", (long long)s.hd);
  REQUIRE(is_float(&a->out[0]) && a->out[0].numel == a->in[0].numel, "output must be float, shaped as input");
  int64_t n = s.B * s.T * ((s.hd / 2) * (s.NH + s.KVH) + s.KVH * s.hd);
  rope_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(&a->out[0]), dv(&a->in[0]), s,
                                                                  rt_attr(a, "theta", 10000.0), sign);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_rope(const rt_KernelArgs *a, char *err, size_t errlen) { return rope_common(a, err, errlen, 1.0f, "rope"); }
int rt_cuda_k_rope_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return rope_common(a, err, errlen, -1.0f, "rope_backward");
}
