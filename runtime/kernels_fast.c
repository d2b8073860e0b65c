/*
 * kernels_fast.c - the CPU backend's matmul and attention: row blocks of
 * every product through a tuned single-threaded GEMM (OpenBLAS), spread
 * over the pool's threads. Each output element is computed by one GEMM
 * call whose shape depends only on the op's shapes, so results do not
 * depend on the thread count or on which thread ran which block, and
 * recomputing an op gives its bits again. They differ from the reference
 * loops (kernels_cpu.c) by summation order only.
 */
#include "kernels_fast.h"

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

/* ------------------------------------------------------------------ GEMM */

/* Debian's OpenBLAS built for threads: it takes a lock around its buffer
 * allocation, so the pool's threads may call it at once (the serial build
 * does not). Pinned to one thread of its own per call. */
#if defined(__x86_64__)
#define OPENBLAS_DIR "/usr/lib/x86_64-linux-gnu/openblas-pthread/"
#elif defined(__aarch64__)
#define OPENBLAS_DIR "/usr/lib/aarch64-linux-gnu/openblas-pthread/"
#endif

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*SgemmFn)(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);

static SgemmFn blas_sgemm;
static char blas_name[192] = "built-in GEMM";
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_load(void) {
#ifdef OPENBLAS_DIR
  void *h = dlopen(OPENBLAS_DIR "libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
  SgemmFn f = (SgemmFn)dlsym(h, "cblas_sgemm");
  if (!set_threads || !f) {
    dlclose(h);
    return;
  }
  set_threads(1);
  blas_sgemm = f;
  snprintf(blas_name, sizeof blas_name, "%s", config ? config() : "OpenBLAS");
#endif
}

const char *rt_sgemm_name(void) {
  pthread_once(&blas_once, blas_load);
  return blas_name;
}

static rt_View f32_view(const float *p) {
  rt_View v = {(void *)p, RT_F32, 1, {0}, 0};
  return v;
}

void rt_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
              int64_t ldb, int accumulate, float *C) {
  pthread_once(&blas_once, blas_load);
  if (M <= 0 || N <= 0) return;
  if (blas_sgemm && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX) {
    blas_sgemm(CBLAS_ROW_MAJOR, ta ? CBLAS_TRANS : CBLAS_NO_TRANS, tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M,
               (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)N);
    return;
  }
  rt_View av = f32_view(A), bv = f32_view(B), cv = f32_view(C);
  rt_Operand ao = {&av, ta ? 1 : lda, ta ? lda : 1}, bo = {&bv, tb ? 1 : ldb, tb ? ldb : 1};
  rt_gemm_ref(&cv, accumulate, NULL, &ao, &bo, M, N, K);
}

/* ---------------------------------------------------------------- matmul */

/* Rows per block: at least 32, and enough work (2^20 multiply-adds) to
 * outweigh handing the block to a thread and packing the other operand. */
static int64_t mm_grain(int64_t k, int64_t n) {
  int64_t g = (int64_t)1 << 20;
  g /= (k * n > 0 ? k * n : 1);
  return g < 32 ? 32 : g;
}

static int all_f32(const rt_View *a, const rt_View *b, const rt_View *c) {
  return a->dtype == RT_F32 && b->dtype == RT_F32 && c->dtype == RT_F32;
}

/* V from element OFF on. */
static rt_View sub(const rt_View *v, int64_t off) {
  rt_View s = *v;
  s.data = (char *)v->data + off * (v->dtype == RT_F32 || v->dtype == RT_I32 ? 4 : 2);
  s.numel -= off;
  return s;
}

typedef struct {
  const rt_View *y, *x, *w, *bias, *dx, *dw, *dy;
  int64_t N, C, OC, chunk, chunk_w, ntasks_x;
} Matmul;

static void matmul_forward_task(void *arg, int64_t task, float *scratch) {
  const Matmul *k = arg;
  (void)scratch;
  int64_t r0 = task * k->chunk, m = k->N - r0 < k->chunk ? k->N - r0 : k->chunk;
  if (all_f32(k->x, k->w, k->y) && (!k->bias || k->bias->dtype == RT_F32)) {
    float *y = (float *)k->y->data + r0 * k->OC;
    rt_sgemm(0, 1, m, k->OC, k->C, (const float *)k->x->data + r0 * k->C, k->C, k->w->data, k->C, 0, y);
    if (k->bias) {
      const float *b = k->bias->data;
      for (int64_t i = 0; i < m; i++)
        for (int64_t o = 0; o < k->OC; o++) y[i * k->OC + o] += b[o];
    }
    return;
  }
  rt_View xs = sub(k->x, r0 * k->C), ys = sub(k->y, r0 * k->OC);
  rt_Operand A = {&xs, k->C, 1}, B = {k->w, 1, k->C};
  rt_gemm_ref(&ys, 0, k->bias, &A, &B, m, k->OC, k->C);
}

void rt_fast_matmul_forward(rt_Pool *pool, const rt_View *y, const rt_View *x, const rt_View *w,
                            const rt_View *bias, int64_t N, int64_t C, int64_t OC) {
  Matmul k = {y, x, w, bias, NULL, NULL, NULL, N, C, OC, rt_pool_chunk(N, mm_grain(C, OC)), 0, 0};
  rt_pool_run(pool, (N + k.chunk - 1) / k.chunk, matmul_forward_task, &k);
}

/* Tasks [0, ntasks_x) are row blocks of dx = dy w, the rest row blocks
 * of dw += dy^T x. */
static void matmul_backward_task(void *arg, int64_t task, float *scratch) {
  const Matmul *k = arg;
  (void)scratch;
  int64_t N = k->N, C = k->C, OC = k->OC;
  if (task < k->ntasks_x) {
    int64_t r0 = task * k->chunk, m = N - r0 < k->chunk ? N - r0 : k->chunk;
    if (all_f32(k->dy, k->w, k->dx)) {
      rt_sgemm(0, 0, m, C, OC, (const float *)k->dy->data + r0 * OC, OC, k->w->data, C, 0,
               (float *)k->dx->data + r0 * C);
      return;
    }
    rt_View dys = sub(k->dy, r0 * OC), dxs = sub(k->dx, r0 * C);
    rt_Operand A = {&dys, OC, 1}, B = {k->w, C, 1};
    rt_gemm_ref(&dxs, 0, NULL, &A, &B, m, C, OC);
    return;
  }
  int64_t o0 = (task - k->ntasks_x) * k->chunk_w, m = OC - o0 < k->chunk_w ? OC - o0 : k->chunk_w;
  if (all_f32(k->dy, k->x, k->dw)) {
    rt_sgemm(1, 0, m, C, N, (const float *)k->dy->data + o0, OC, k->x->data, C, 1, (float *)k->dw->data + o0 * C);
    return;
  }
  rt_View dys = sub(k->dy, o0), dws = sub(k->dw, o0 * C);
  rt_Operand A = {&dys, 1, OC}, B = {k->x, C, 1};
  rt_gemm_ref(&dws, 1, NULL, &A, &B, m, C, N);
}

void rt_fast_matmul_backward(rt_Pool *pool, const rt_View *dx, const rt_View *dw, const rt_View *dy,
                             const rt_View *x, const rt_View *w, int64_t N, int64_t C, int64_t OC) {
  Matmul k = {NULL, x, w, NULL, dx, dw, dy, N, C, OC, rt_pool_chunk(N, mm_grain(OC, C)),
              rt_pool_chunk(OC, mm_grain(N, C)), 0};
  k.ntasks_x = dx ? (N + k.chunk - 1) / k.chunk : 0;
  rt_pool_run(pool, k.ntasks_x + (dw ? (OC + k.chunk_w - 1) / k.chunk_w : 0), matmul_backward_task, &k);
}

/* ------------------------------------------------------------- attention */

/* Query rows per block: the block's scores (QB x keys) are one GEMM. */
#define QB 64

typedef struct {
  const rt_View *y, *qkv, *dy, *dqkv;
  const float *lse_in;
  float *lse;
  const rt_AttnShape *s;
} Attn;

/* N rows of HD elements, the first at element OFF of V and each STRIDE
 * after the last, into DST as f32. */
static void load_rows(float *dst, const rt_View *v, int64_t off, int64_t stride, int64_t n, int64_t hd) {
  for (int64_t t = 0; t < n; t++) {
    const int64_t o = off + t * stride;
    float *d = dst + t * hd;
    if (v->dtype == RT_F32) memcpy(d, (const float *)v->data + o, (size_t)hd * sizeof *d);
    else
      for (int64_t i = 0; i < hd; i++) d[i] = rt_load(v, o + i);
  }
}

static void store_rows(const rt_View *v, int64_t off, int64_t stride, const float *src, int64_t n, int64_t hd,
                       float scale) {
  for (int64_t t = 0; t < n; t++)
    for (int64_t i = 0; i < hd; i++) rt_store(v, off + t * stride + i, src[t * hd + i] * scale);
}

static int64_t fwd_scratch(const rt_AttnShape *s) { return 3 * s->T * s->hd + QB * s->T + QB * s->hd + QB; }
static int64_t bwd_scratch(const rt_AttnShape *s) {
  return 6 * s->T * s->hd + 2 * QB * s->T + s->T + QB * s->hd;
}

/* Head b * NH + h: per block of query rows, the scores against every key
 * up to the block's last row, a causal softmax per row, then P V. */
static void attention_forward_task(void *arg, int64_t bh, float *scratch) {
  const Attn *at = arg;
  const rt_AttnShape *s = at->s;
  int64_t T = s->T, hd = s->hd, NH = s->NH, b = bh / NH, h = bh % NH, g = h / (NH / s->KVH);
  float *Q = scratch, *K = Q + T * hd, *V = K + T * hd, *S = V + T * hd, *Yb = S + QB * T, *sums = Yb + QB * hd;
  int64_t base = b * T * s->row;
  load_rows(Q, at->qkv, base + h * hd, s->row, T, hd);
  load_rows(K, at->qkv, base + (NH + g) * hd, s->row, T, hd);
  load_rows(V, at->qkv, base + (NH + s->KVH + g) * hd, s->row, T, hd);
  for (int64_t t0 = 0; t0 < T; t0 += QB) {
    int64_t m = T - t0 < QB ? T - t0 : QB, nk = t0 + m;
    rt_sgemm(0, 1, m, nk, hd, Q + t0 * hd, hd, K, hd, 0, S);
    for (int64_t i = 0; i < m; i++) {
      float *row = S + i * nk, mx = -INFINITY, sum = 0.0f;
      int64_t t = t0 + i;
      for (int64_t u = 0; u <= t; u++) {
        row[u] *= s->scale;
        if (row[u] > mx) mx = row[u];
      }
      for (int64_t u = 0; u <= t; u++) {
        row[u] = expf(row[u] - mx);
        sum += row[u];
      }
      for (int64_t u = t + 1; u < nk; u++) row[u] = 0.0f;
      sums[i] = 1.0f / sum;
      at->lse[(b * NH + h) * T + t] = mx + logf(sum);
    }
    rt_sgemm(0, 0, m, hd, nk, S, nk, V, hd, 0, Yb);
    for (int64_t i = 0; i < m; i++)
      store_rows(at->y, (b * T + t0 + i) * NH * hd + h * hd, 0, Yb + i * hd, 1, hd, sums[i]);
  }
}

int rt_fast_attention_forward(rt_Pool *pool, const rt_View *y, float *lse, const rt_View *qkv,
                              const rt_AttnShape *s) {
  if (fwd_scratch(s) > RT_POOL_SCRATCH_FLOATS) return 1;
  Attn at = {y, qkv, NULL, NULL, NULL, lse, s};
  rt_pool_run(pool, s->B * s->NH, attention_forward_task, &at);
  return 0;
}

/* kv head b * KVH + g: dk and dv summed over its query heads in order, each
 * head's query blocks in order; dq per query block. */
static void attention_backward_task(void *arg, int64_t bg, float *scratch) {
  const Attn *at = arg;
  const rt_AttnShape *s = at->s;
  int64_t T = s->T, hd = s->hd, NH = s->NH, KVH = s->KVH, rep = NH / KVH, b = bg / KVH, g = bg % KVH;
  int64_t yrow = NH * hd, base = b * T * s->row;
  float *K = scratch, *V = K + T * hd, *dK = V + T * hd, *dV = dK + T * hd, *Q = dV + T * hd, *dY = Q + T * hd;
  float *S = dY + T * hd, *dP = S + QB * T, *D = dP + QB * T, *dQ = D + T;
  load_rows(K, at->qkv, base + (NH + g) * hd, s->row, T, hd);
  load_rows(V, at->qkv, base + (NH + KVH + g) * hd, s->row, T, hd);
  memset(dK, 0, (size_t)(2 * T * hd) * sizeof *dK);
  for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
    load_rows(Q, at->qkv, base + h * hd, s->row, T, hd);
    load_rows(dY, at->dy, b * T * yrow + h * hd, yrow, T, hd);
    for (int64_t t = 0; t < T; t++) {
      float d = 0.0f;
      for (int64_t i = 0; i < hd; i++) d += dY[t * hd + i] * rt_load(at->y, (b * T + t) * yrow + h * hd + i);
      D[t] = d;
    }
    const float *L = at->lse_in + (b * NH + h) * T;
    for (int64_t t0 = 0; t0 < T; t0 += QB) {
      int64_t m = T - t0 < QB ? T - t0 : QB, nk = t0 + m;
      rt_sgemm(0, 1, m, nk, hd, Q + t0 * hd, hd, K, hd, 0, S);
      rt_sgemm(0, 1, m, nk, hd, dY + t0 * hd, hd, V, hd, 0, dP);
      for (int64_t i = 0; i < m; i++) {
        int64_t t = t0 + i;
        float *p = S + i * nk, *dp = dP + i * nk;
        for (int64_t u = 0; u <= t; u++) {
          p[u] = expf(p[u] * s->scale - L[t]);
          dp[u] = p[u] * (dp[u] - D[t]) * s->scale;
        }
        for (int64_t u = t + 1; u < nk; u++) p[u] = dp[u] = 0.0f;
      }
      rt_sgemm(0, 0, m, hd, nk, dP, nk, K, hd, 0, dQ);
      store_rows(at->dqkv, base + t0 * s->row + h * hd, s->row, dQ, m, hd, 1.0f);
      rt_sgemm(1, 0, nk, hd, m, dP, nk, Q + t0 * hd, hd, 1, dK);
      rt_sgemm(1, 0, nk, hd, m, S, nk, dY + t0 * hd, hd, 1, dV);
    }
  }
  store_rows(at->dqkv, base + (NH + g) * hd, s->row, dK, T, hd, 1.0f);
  store_rows(at->dqkv, base + (NH + KVH + g) * hd, s->row, dV, T, hd, 1.0f);
}

int rt_fast_attention_backward(rt_Pool *pool, const rt_View *dqkv, const rt_View *dy, const rt_View *qkv,
                               const rt_View *y, const float *lse, const rt_AttnShape *s) {
  if (bwd_scratch(s) > RT_POOL_SCRATCH_FLOATS) return 1;
  Attn at = {y, qkv, dy, dqkv, lse, NULL, s};
  rt_pool_run(pool, s->B * s->KVH, attention_backward_task, &at);
  return 0;
}
