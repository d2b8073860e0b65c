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

/* Rows per block of a GEMM of ROWS x N over K: blocks of at least 128 rows
 * (OpenBLAS 0.3.21 on one thread, gpt2-6l384's products: 86 GFLOP/s in
 * blocks of 64 rows, 90 in blocks of 128, 97 whole) and 2^20 multiply-adds,
 * in a power-of-two count up to RT_POOL_MAX_TASKS so that they share out
 * evenly over 2^k threads. Shape only, never the thread count. */
static int64_t mm_chunk(int64_t rows, int64_t k, int64_t n) {
  int64_t tasks = 1;
  while (2 * tasks <= RT_POOL_MAX_TASKS && rows / (2 * tasks) >= 128 && rows * k * n / (2 * tasks) >= (1 << 20))
    tasks *= 2;
  return (rows + tasks - 1) / tasks;
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
  int64_t N, C, OC, chunk, chunk_w, ntasks_w;
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
  Matmul k = {y, x, w, bias, NULL, NULL, NULL, N, C, OC, mm_chunk(N, C, OC), 0, 0};
  rt_pool_run(pool, (N + k.chunk - 1) / k.chunk, matmul_forward_task, &k);
}

/* Tasks [0, ntasks_w) are row blocks of dw += dy^T x, the rest row blocks
 * of dx = dy w: dw's blocks first, since they are fewer and often larger
 * (a whole small dw against dx's row blocks), so that the threads that
 * finish first share out dx's. */
static void matmul_backward_task(void *arg, int64_t task, float *scratch) {
  const Matmul *k = arg;
  (void)scratch;
  int64_t N = k->N, C = k->C, OC = k->OC;
  if (task >= k->ntasks_w) {
    int64_t r0 = (task - k->ntasks_w) * k->chunk, m = N - r0 < k->chunk ? N - r0 : k->chunk;
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
  int64_t o0 = task * k->chunk_w, m = OC - o0 < k->chunk_w ? OC - o0 : k->chunk_w;
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
  Matmul k = {NULL, x, w, NULL, dx, dw, dy, N, C, OC, mm_chunk(N, OC, C), mm_chunk(OC, N, C), 0};
  k.ntasks_w = dw ? (OC + k.chunk_w - 1) / k.chunk_w : 0;
  rt_pool_run(pool, k.ntasks_w + (dx ? (N + k.chunk - 1) / k.chunk : 0), matmul_backward_task, &k);
}

/* -------------------------------------------------------- vectorized loops */

/* The loops below are written for the compiler to vectorize: f32 arrays
 * behind restrict pointers, no calls, branches as selects, sums over eight
 * lanes added pairwise at the end (a fixed order: one running sum cannot be
 * vectorized without reordering it). On x86-64 GCC builds each VEC_CLONES
 * function twice, for the baseline and for AVX2, and the loader picks the
 * copy the CPU runs best. C11 mode never contracts a * b + c into an FMA
 * and neither copy reorders a sum, so both give the same bits. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VEC_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define VEC_CLONES
#endif
/* Helpers inlined into every copy, so that they are vectorized with it. */
#define VEC_INLINE static inline __attribute__((always_inline))

typedef float v8 __attribute__((vector_size(8 * sizeof(float))));

/* Elements per block of an elementwise op: a few blocks of f32 staging
 * (bf16 operands converted) stay in the L1 cache. */
enum { EB = 2048 };

VEC_INLINE float sum8(const float *restrict x, int64_t n) {
  v8 s = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 a;
    memcpy(&a, x + i, sizeof a);
    s += a;
  }
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) r += x[i];
  return r;
}

/* e^x within 1.2 ulp over [-87, 88] (clamped there: no infinities, no
 * subnormals), NaN for NaN: x = k ln2 + r with |r| <= ln2/2, e^r by its
 * Taylor series to r^7 (the next term is below 6e-9 of it), times 2^k
 * built in the exponent bits. k is rounded by adding 1.5 * 2^23, whose
 * float then holds k in its low mantissa bits. */
VEC_INLINE float exp_vec(float x) {
  x = x > 88.0f ? 88.0f : x;
  x = x < -87.0f ? -87.0f : x;
  float t = x * 1.44269504088896341f + 12582912.0f, k = t - 12582912.0f;
  float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f; /* ln2 in two parts */
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t bits, scale_bits;
  memcpy(&bits, &t, sizeof bits);
  scale_bits = (bits - 0x4b400000u + 127u) << 23;
  float scale;
  memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

/* tanh(u) = 1 - 2 / (1 + e^2u): within 2e-7 of tanh over [-10, 10]. */
VEC_INLINE float tanh_vec(float u) { return 1.0f - 2.0f / (1.0f + exp_vec(2.0f * u)); }
VEC_INLINE float sigmoid_vec(float g) { return 1.0f / (1.0f + exp_vec(-g)); }

static VEC_CLONES void bf16_to_f32_n(float *restrict d, const uint16_t *restrict h, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(d + i, &u, sizeof u);
  }
}

/* rt_f32_to_bf16, element by element. */
static VEC_CLONES void f32_to_bf16_n(uint16_t *restrict h, const float *restrict s, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, s + i, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x0040u;
    h[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

/* N elements of V from element OFF as f32: V's own memory when it is f32,
 * else converted into BUF. */
static const float *load_f32(const rt_View *v, int64_t off, int64_t n, float *buf) {
  if (v->dtype == RT_F32) return (const float *)v->data + off;
  if (v->dtype == RT_BF16) bf16_to_f32_n(buf, (const uint16_t *)v->data + off, n);
  else
    for (int64_t i = 0; i < n; i++) buf[i] = rt_load(v, off + i);
  return buf;
}

/* Where to compute elements bound for V from OFF: V's memory when it is
 * f32, else BUF, which store_f32 then writes to V. */
static float *dst_f32(const rt_View *v, int64_t off, float *buf) {
  return v->dtype == RT_F32 ? (float *)v->data + off : buf;
}

static void store_f32(const rt_View *v, int64_t off, const float *src, int64_t n) {
  if (v->dtype == RT_F32) {
    float *d = (float *)v->data + off;
    if (d != src) memcpy(d, src, (size_t)n * sizeof *d);
  } else if (v->dtype == RT_BF16) {
    f32_to_bf16_n((uint16_t *)v->data + off, src, n);
  } else {
    for (int64_t i = 0; i < n; i++) rt_store(v, off + i, src[i]);
  }
}

/* A kernel's work as ranges [i0, i1) of N items in chunks of at least
 * GRAIN, each on a pool thread with that thread's scratch. */
static void spans_run(rt_Pool *pool, int64_t n, int64_t grain, rt_PoolScratchRange fn, const void *ctx) {
  rt_pool_ranges(pool, n, grain, NULL, fn, ctx);
}

/* Elements per chunk of an elementwise op, rows of C per chunk of a row op. */
#define FAST_GRAIN 16384
static int64_t rows_grain(int64_t C) { return C >= FAST_GRAIN ? 1 : FAST_GRAIN / (C > 0 ? C : 1); }

/* ------------------------------------------------------------ elementwise */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static VEC_CLONES void add_n(float *restrict y, const float *restrict a, const float *restrict b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static VEC_CLONES void gelu_n(float *restrict y, const float *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i], u = GELU_K * (v + 0.044715f * v * v * v);
    y[i] = 0.5f * v * (1.0f + tanh_vec(u));
  }
}

static VEC_CLONES void gelu_backward_n(float *restrict dx, const float *restrict x, const float *restrict dy,
                                       int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i], u = GELU_K * (v + 0.044715f * v * v * v), th = tanh_vec(u);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
  }
}

static VEC_CLONES void swiglu_n(float *restrict y, const float *restrict g, const float *restrict u, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = g[i] * sigmoid_vec(g[i]) * u[i];
}

static VEC_CLONES void swiglu_backward_n(float *restrict dg, float *restrict du, const float *restrict g,
                                         const float *restrict u, const float *restrict d, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float sg = sigmoid_vec(g[i]);
    dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
    du[i] = d[i] * g[i] * sg;
  }
}

/* y from x (and b: add's second operand, or dy in a backward); rows of F
 * for swiglu. */
typedef enum { OP_ADD, OP_GELU, OP_GELU_BACKWARD } ElemOp;
typedef struct {
  const rt_View *y, *x, *b;
  int64_t F;
  ElemOp op;
} Elem;

static void elem_span(const void *ctx, int64_t i0, int64_t i1, float *scratch) {
  const Elem *k = ctx;
  for (int64_t o = i0; o < i1; o += EB) {
    int64_t n = i1 - o < EB ? i1 - o : EB;
    const float *x = load_f32(k->x, o, n, scratch), *b = k->b ? load_f32(k->b, o, n, scratch + EB) : NULL;
    float *y = dst_f32(k->y, o, scratch + 2 * EB);
    switch (k->op) {
    case OP_ADD: add_n(y, x, b, n); break;
    case OP_GELU: gelu_n(y, x, n); break;
    case OP_GELU_BACKWARD: gelu_backward_n(y, x, b, n); break;
    }
    store_f32(k->y, o, y, n);
  }
}

void rt_fast_add(rt_Pool *pool, const rt_View *y, const rt_View *a, const rt_View *b, int64_t n) {
  Elem k = {y, a, b, 0, OP_ADD};
  spans_run(pool, n, FAST_GRAIN, elem_span, &k);
}

void rt_fast_gelu(rt_Pool *pool, const rt_View *y, const rt_View *x, const rt_View *dy, int64_t n) {
  Elem k = {y, x, dy, 0, dy ? OP_GELU_BACKWARD : OP_GELU};
  spans_run(pool, n, FAST_GRAIN, elem_span, &k);
}

/* Rows [n0, n1): gate and up are the two halves of a row of gu. */
static void swiglu_span(const void *ctx, int64_t n0, int64_t n1, float *scratch) {
  const Elem *k = ctx;
  int64_t F = k->F;
  for (int64_t r = n0; r < n1; r++)
    for (int64_t f = 0; f < F; f += EB) {
      int64_t n = F - f < EB ? F - f : EB, o = r * 2 * F + f;
      const float *g = load_f32(k->x, o, n, scratch), *u = load_f32(k->x, o + F, n, scratch + EB);
      if (k->b) {
        float *dg = dst_f32(k->y, o, scratch + 3 * EB), *du = dst_f32(k->y, o + F, scratch + 4 * EB);
        swiglu_backward_n(dg, du, g, u, load_f32(k->b, r * F + f, n, scratch + 2 * EB), n);
        store_f32(k->y, o, dg, n);
        store_f32(k->y, o + F, du, n);
      } else {
        float *y = dst_f32(k->y, r * F + f, scratch + 2 * EB);
        swiglu_n(y, g, u, n);
        store_f32(k->y, r * F + f, y, n);
      }
    }
}

void rt_fast_swiglu(rt_Pool *pool, const rt_View *y, const rt_View *gu, const rt_View *dy, int64_t N, int64_t F) {
  Elem k = {y, gu, dy, F, OP_ADD}; /* op unused: swiglu_span is its own */
  spans_run(pool, N, rows_grain(2 * F), swiglu_span, &k);
}

/* ------------------------------------------------------------------ norms */

VEC_INLINE float sum_sq_dev8(const float *restrict x, float m, int64_t n) {
  v8 s = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 a;
    memcpy(&a, x + i, sizeof a);
    a -= m;
    s += a * a;
  }
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) r += (x[i] - m) * (x[i] - m);
  return r;
}

static VEC_CLONES void layernorm_row(float *restrict y, const float *restrict x, const float *restrict w,
                                     const float *restrict b, int64_t C, float eps, float *mean, float *rstd) {
  float m = sum8(x, C) / (float)C;
  float r = 1.0f / sqrtf(sum_sq_dev8(x, m, C) / (float)C + eps);
  for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) * r * w[c] + b[c];
  *mean = m;
  *rstd = r;
}

static VEC_CLONES void rmsnorm_row(float *restrict y, const float *restrict x, const float *restrict w, int64_t C,
                                   float eps, float *rstd) {
  float r = 1.0f / sqrtf(sum_sq_dev8(x, 0.0f, C) / (float)C + eps);
  for (int64_t c = 0; c < C; c++) y[c] = x[c] * r * w[c];
  *rstd = r;
}

/* dx of one row; M is 0 for rmsnorm, which has no mean sum (sd). */
static VEC_CLONES void norm_backward_row(float *restrict dx, const float *restrict dy, const float *restrict x,
                                         const float *restrict w, int64_t C, float m, float r, int rms) {
  v8 s1 = {0}, s2 = {0};
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    v8 d, xv, wv;
    memcpy(&d, dy + c, sizeof d);
    memcpy(&xv, x + c, sizeof xv);
    memcpy(&wv, w + c, sizeof wv);
    v8 dn = d * wv;
    s1 += dn;
    s2 += dn * ((xv - m) * r);
  }
  float sd = ((s1[0] + s1[1]) + (s1[2] + s1[3])) + ((s1[4] + s1[5]) + (s1[6] + s1[7]));
  float sdx = ((s2[0] + s2[1]) + (s2[2] + s2[3])) + ((s2[4] + s2[5]) + (s2[6] + s2[7]));
  for (; c < C; c++) {
    float dn = dy[c] * w[c];
    sd += dn;
    sdx += dn * ((x[c] - m) * r);
  }
  sd = rms ? 0.0f : sd / (float)C;
  sdx /= (float)C;
  for (c = 0; c < C; c++) dx[c] = (dy[c] * w[c] - sd - (x[c] - m) * r * sdx) * r;
}

/* One row's terms of a norm's weight gradient (when SW is set: dy times
 * the normalized x) and of a bias gradient (when SB is set: dy). */
static VEC_CLONES void col_sums_row(float *restrict sw, float *restrict sb, const float *restrict dy,
                                    const float *restrict x, float m, float r, int64_t n) {
  if (sw)
    for (int64_t c = 0; c < n; c++) sw[c] += dy[c] * ((x[c] - m) * r);
  if (sb)
    for (int64_t c = 0; c < n; c++) sb[c] += dy[c];
}

/* Scratch of a norm's row task: w, b, x, dy and the output row. */
static int64_t norm_scratch(int64_t C) { return 5 * C; }

typedef struct {
  const rt_Norm *k;
  int rms;
} NormTask;

static void norm_forward_span(const void *ctx, int64_t n0, int64_t n1, float *scratch) {
  const rt_Norm *k = ((const NormTask *)ctx)->k;
  int rms = ((const NormTask *)ctx)->rms;
  int64_t C = k->C;
  const float *w = load_f32(k->w, 0, C, scratch), *b = rms ? NULL : load_f32(k->b, 0, C, scratch + C);
  for (int64_t n = n0; n < n1; n++) {
    const float *x = load_f32(k->x, n * C, C, scratch + 2 * C);
    float *y = dst_f32(k->y, n * C, scratch + 3 * C);
    if (rms) rmsnorm_row(y, x, w, C, k->eps, &k->rstd[n]);
    else layernorm_row(y, x, w, b, C, k->eps, &k->mean[n], &k->rstd[n]);
    store_f32(k->y, n * C, y, C);
  }
}

int rt_fast_norm_forward(rt_Pool *pool, const rt_Norm *k, int rms) {
  if (norm_scratch(k->C) > RT_POOL_SCRATCH_FLOATS) return 1;
  NormTask t = {k, rms};
  spans_run(pool, k->N, rows_grain(k->C), norm_forward_span, &t);
  return 0;
}

static void norm_backward_span(const void *ctx, int64_t n0, int64_t n1, float *scratch) {
  const rt_Norm *k = ((const NormTask *)ctx)->k;
  int rms = ((const NormTask *)ctx)->rms;
  int64_t C = k->C;
  const float *w = load_f32(k->w, 0, C, scratch);
  for (int64_t n = n0; n < n1; n++) {
    const float *x = load_f32(k->x, n * C, C, scratch + C), *dy = load_f32(k->dy, n * C, C, scratch + 2 * C);
    float *dx = dst_f32(k->y, n * C, scratch + 3 * C);
    norm_backward_row(dx, dy, x, w, C, rms ? 0.0f : k->mean[n], k->rstd[n], rms);
    store_f32(k->y, n * C, dx, C);
  }
}

/* Columns per pass of the column sums (kept in the L1 cache). */
#define COLS 256

/* Gradients summed over N rows of C per column: dw += dy (x - mean) rstd
 * (no mean: rmsnorm) when dw is set, db += dy when db is. */
typedef struct {
  const rt_View *dw, *db, *dy, *x;
  const float *mean, *rstd;
  int64_t N, C;
} ColSums;

/* Columns [c0, c1): every row's terms in row order, as the reference. */
static void col_sums_span(const void *ctx, int64_t c0, int64_t c1, float *scratch) {
  const ColSums *k = ctx;
  int64_t C = k->C;
  float *sw = scratch, *sb = scratch + COLS, *buf = scratch + 2 * COLS, *out = buf + 2 * COLS;
  for (int64_t cb = c0; cb < c1; cb += COLS) {
    int64_t cn = c1 - cb < COLS ? c1 - cb : COLS;
    memset(sw, 0, 2 * COLS * sizeof *sw);
    for (int64_t n = 0; n < k->N; n++) {
      const float *dy = load_f32(k->dy, n * C + cb, cn, buf);
      const float *x = k->dw ? load_f32(k->x, n * C + cb, cn, buf + COLS) : NULL;
      col_sums_row(k->dw ? sw : NULL, k->db ? sb : NULL, dy, x, k->mean ? k->mean[n] : 0.0f,
                   k->rstd ? k->rstd[n] : 0.0f, cn);
    }
    for (int g = 0; g < 2; g++) {
      const rt_View *grad = g ? k->db : k->dw;
      if (!grad) continue;
      const float *cur = load_f32(grad, cb, cn, buf), *sum = g ? sb : sw;
      for (int64_t c = 0; c < cn; c++) out[c] = cur[c] + sum[c];
      store_f32(grad, cb, out, cn);
    }
  }
}

static void col_sums_run(rt_Pool *pool, const ColSums *k) {
  int64_t grain = FAST_GRAIN / (k->N > 0 ? k->N : 1);
  spans_run(pool, k->C, grain < 64 ? 64 : grain, col_sums_span, k);
}

void rt_fast_dbias(rt_Pool *pool, const rt_View *dbias, const rt_View *dy, int64_t N, int64_t OC) {
  ColSums k = {NULL, dbias, dy, NULL, NULL, NULL, N, OC};
  col_sums_run(pool, &k);
}

int rt_fast_norm_backward(rt_Pool *pool, const rt_Norm *k, int rms) {
  if (norm_scratch(k->C) > RT_POOL_SCRATCH_FLOATS) return 1;
  NormTask t = {k, rms};
  if (k->y) spans_run(pool, k->N, rows_grain(k->C), norm_backward_span, &t);
  if (k->dw) {
    ColSums cs = {k->dw, rms ? NULL : k->b, k->dy, k->x, rms ? NULL : k->mean, k->rstd, k->N, k->C};
    col_sums_run(pool, &cs);
  }
  return 0;
}

/* ----------------------------------------------------------- crossentropy */

static VEC_CLONES float max_n(const float *restrict x, int64_t n) {
  float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) m8[j] = x[i + j] > m8[j] ? x[i + j] : m8[j];
  float m = m8[0];
  for (int j = 1; j < 8; j++) m = m8[j] > m ? m8[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

/* The sum of e^(x - shift), the terms left in TMP. */
static VEC_CLONES float sum_exp_n(float *restrict tmp, const float *restrict x, float shift, int64_t n) {
  for (int64_t i = 0; i < n; i++) tmp[i] = exp_vec(x[i] - shift);
  return sum8(tmp, n);
}

static VEC_CLONES void scaled_exp_n(float *restrict y, const float *restrict x, float shift, float scale, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = exp_vec(x[i] - shift) * scale;
}

static void crossentropy_span(const void *ctx, int64_t n0, int64_t n1, float *scratch) {
  const rt_CrossEntropy *k = ctx;
  int64_t V = k->V;
  float inv = 1.0f / (float)k->M;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * k->LD;
    const float *l = load_f32(k->logits, o, V, scratch);
    if (!k->dlogits) {
      float mx = max_n(l, V);
      k->lse[n] = mx + logf(sum_exp_n(scratch + V, l, mx, V));
      continue;
    }
    float *d = dst_f32(k->dlogits, o, scratch + V);
    scaled_exp_n(d, l, k->lse[n], inv, V);
    int32_t t = k->tgt[n];
    d[t] = (exp_vec(l[t] - k->lse[n]) - 1.0f) * inv;
    store_f32(k->dlogits, o, d, V);
    for (int64_t v = V; v < k->LD; v++) rt_store(k->dlogits, o + v, 0.0f);
  }
}

int rt_fast_crossentropy(rt_Pool *pool, const rt_CrossEntropy *k) {
  if (2 * k->V > RT_POOL_SCRATCH_FLOATS) return 1;
  spans_run(pool, k->N, rows_grain(k->V), crossentropy_span, k);
  return 0;
}

/* ------------------------------------------------------------------- rope */

/* Positions [t0, t1) of every sequence of the batch: a position's cos and
 * sin once, then its rows. */
static void rope_span(const void *ctx, int64_t t0, int64_t t1, float *scratch) {
  const rt_Rope *k = ctx;
  const rt_AttnShape *s = k->s;
  int64_t hd = s->hd, half = hd / 2, nrot = s->NH + s->KVH, row = s->row;
  float *cs = scratch, *sn = cs + half, *xb = sn + half, *yb = xb + row;
  for (int64_t t = t0; t < t1; t++) {
    for (int64_t i = 0; i < half; i++) {
      double ang = (double)t * pow(k->theta, -(double)(2 * i) / (double)hd);
      cs[i] = (float)cos(ang);
      sn[i] = k->sign * (float)sin(ang);
    }
    for (int64_t b = 0; b < s->B; b++) {
      int64_t o = (b * s->T + t) * row;
      const float *x = load_f32(k->in, o, row, xb);
      float *y = dst_f32(k->out, o, yb);
      for (int64_t h = 0; h < nrot; h++)
        for (int64_t i = 0; i < half; i++) {
          float x0 = x[h * hd + 2 * i], x1 = x[h * hd + 2 * i + 1];
          y[h * hd + 2 * i] = x0 * cs[i] - x1 * sn[i];
          y[h * hd + 2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      memcpy(y + nrot * hd, x + nrot * hd, (size_t)(row - nrot * hd) * sizeof *y);
      store_f32(k->out, o, y, row);
    }
  }
}

int rt_fast_rope(rt_Pool *pool, const rt_Rope *k) {
  const rt_AttnShape *s = k->s;
  if (s->hd + 2 * s->row > RT_POOL_SCRATCH_FLOATS) return 1;
  int64_t per_position = s->B * s->row;
  spans_run(pool, s->T, per_position >= FAST_GRAIN ? 1 : FAST_GRAIN / per_position, rope_span, k);
  return 0;
}

/* ------------------------------------------------------------------ adamw */

/* Into the fresh P, M, V (scratch: the state's own memory may be read and
 * written by the same op, in place). */
static VEC_CLONES void adamw_n(float *restrict po, float *restrict mo, float *restrict vo, const float *restrict p,
                               const float *restrict m, const float *restrict v, const float *restrict g,
                               const rt_AdamW *h, int64_t n) {
  float b1 = h->beta1, b2 = h->beta2, c1 = 1.0f - h->beta1, c2 = 1.0f - h->beta2;
  float bc1 = h->bc1, bc2 = h->bc2, lr = h->lr, eps = h->eps, wd = h->wd;
  for (int64_t i = 0; i < n; i++) {
    float mi = b1 * m[i] + c1 * g[i], vi = b2 * v[i] + c2 * g[i] * g[i];
    float mh = mi / bc1, vh = vi / bc2;
    po[i] = p[i] - lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    mo[i] = mi;
    vo[i] = vi;
  }
}

static void adamw_span(const void *ctx, int64_t i0, int64_t i1, float *scratch) {
  const rt_AdamW *h = ctx;
  float *po = scratch + 2 * EB, *mo = scratch + 3 * EB, *vo = scratch + 4 * EB;
  for (int64_t o = i0; o < i1; o += EB) {
    int64_t n = i1 - o < EB ? i1 - o : EB;
    const float *g = load_f32(h->grad, o, n, scratch);
    const float *p = h->master ? h->master + o : load_f32(h->param, o, n, scratch + EB);
    adamw_n(po, mo, vo, p, h->m + o, h->v + o, g, h, n);
    memcpy((float *)h->m_out->data + o, mo, (size_t)n * sizeof *mo);
    memcpy((float *)h->v_out->data + o, vo, (size_t)n * sizeof *vo);
    if (h->master) memcpy((float *)h->master_out->data + o, po, (size_t)n * sizeof *po);
    store_f32(h->param_out, o, po, n);
  }
}

void rt_fast_adamw(rt_Pool *pool, const rt_AdamW *h, int64_t n) {
  spans_run(pool, n, FAST_GRAIN, adamw_span, h);
}

/* ------------------------------------------------------------- attention */

/* Query rows per block: the block's scores (QB x keys) are one GEMM. */
#define QB 64

/* One row of scores: scaled, then e^(x - max) in place; returns their
 * sum, the max in *MX. */
static VEC_CLONES float softmax_row(float *restrict x, int64_t n, float scale, float *mx) {
  for (int64_t u = 0; u < n; u++) x[u] *= scale;
  float m = max_n(x, n);
  for (int64_t u = 0; u < n; u++) x[u] = exp_vec(x[u] - m);
  *mx = m;
  return sum8(x, n);
}

/* One row of the backward: P from the scores and the row's lse L, and
 * dS = P (dP - D) scale in place of dP. */
static VEC_CLONES void attention_grad_row(float *restrict p, float *restrict dp, int64_t n, float scale, float L,
                                          float D) {
  for (int64_t u = 0; u < n; u++) {
    p[u] = exp_vec(p[u] * scale - L);
    dp[u] = p[u] * (dp[u] - D) * scale;
  }
}

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
      float *row = S + i * nk, mx, sum = softmax_row(row, t0 + i + 1, s->scale, &mx);
      int64_t t = t0 + i;
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
      const float *yt = load_f32(at->y, (b * T + t) * yrow + h * hd, hd, dQ);
      float d = 0.0f;
      for (int64_t i = 0; i < hd; i++) d += dY[t * hd + i] * yt[i];
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
        attention_grad_row(p, dp, t + 1, s->scale, L[t], D[t]);
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
