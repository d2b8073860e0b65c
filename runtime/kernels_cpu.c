/*
 * kernels_cpu.c - the CPU kernels: one function per op type of docs/OPS.md
 * (gpt2 and llama families, forward, backward, adamw). Math is f32,
 * storage f32 or bf16. Every loop runs in a fixed order, so a kernel gives
 * bitwise identical outputs on identical inputs: the planner's recompute
 * correctness rests on that. The CUDA kernels mirror these loops.
 *
 * Each kernel checks its arguments once and computes through functions of
 * a range of rows, columns or elements. With no pool (backend_ctx NULL)
 * one call covers the whole range: these are the reference kernels, the
 * tests' oracle. With the CPU backend's pool the ops that dominate a step
 * run their fast versions in kernels_fast.c (matmul and attention through
 * BLAS; norms, gelu, swiglu, add, cross-entropy and adamw as vectorized
 * loops), which differ from these by summation order and their exp; the
 * others run these same functions over chunks that depend only on the
 * shapes, on every thread the pool has, and give the reference's bits.
 */
#include "kernels_fast.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* Largest head dim the attention kernels take: their per-row buffers live
 * on the stack because kernels never allocate. */
#define ATTN_MAX_HD 1024
/* Columns per pass of the norms' weight-gradient sums. */
#define NORM_CHUNK 256

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

/* A kernel's work split into ranges [i0, i1) of N items, each range
 * computed by FN(CTX, i0, i1): the whole range at once without a pool,
 * else chunks of at least GRAIN items spread over its threads. */
static void par_for(const rt_KernelArgs *a, int64_t n, int64_t grain, rt_PoolRange fn, const void *ctx) {
  rt_Pool *p = a->backend_ctx;
  if (!p || n <= grain) {
    fn(ctx, 0, n);
    return;
  }
  rt_pool_ranges(p, n, grain, fn, NULL, ctx);
}

/* Elements per chunk: enough that a chunk outweighs handing it over. */
#define GRAIN 8192
static int64_t row_grain(int64_t C) { return C >= GRAIN ? 1 : GRAIN / (C > 0 ? C : 1); }

static int is_float(const rt_View *v) {
  return v->dtype == RT_F32 || v->dtype == RT_BF16 || v->dtype == RT_F16;
}

static int64_t last_dim(const rt_View *v) { return v->rank > 0 ? v->shape[v->rank - 1] : 1; }

/* A contiguous float row: the data itself when it is f32, else a converted
 * copy in buf. */
static const float *row_f32(const rt_View *v, int64_t off, int64_t n, float *buf) {
  if (v->dtype == RT_F32) return (const float *)v->data + off;
  for (int64_t i = 0; i < n; i++) buf[i] = rt_load(v, off + i);
  return buf;
}

/* Eight running sums, added pairwise at the end: a fixed order that the
 * compiler can keep in vector registers (a single running sum cannot be
 * vectorized without reassociating it). */
typedef float v8 __attribute__((vector_size(8 * sizeof(float))));

static float dot(const float *a, const float *b, int64_t n) {
  v8 s = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 x, y;
    memcpy(&x, a + i, sizeof x);
    memcpy(&y, b + i, sizeof y);
    s += x * y;
  }
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}

/* y += p * x */
static void axpy(float *y, float p, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8 xv, yv;
    memcpy(&xv, x + i, sizeof xv);
    memcpy(&yv, y + i, sizeof yv);
    yv += p * xv;
    memcpy(y + i, &yv, sizeof yv);
  }
  for (; i < n; i++) y[i] += p * x[i];
}

/* ---------------------------------------------------------------- encoder */

static int check_tokens(const int32_t *tok, int64_t n, int64_t vocab, char *err, size_t errlen,
                        const char *op) {
  for (int64_t i = 0; i < n; i++)
    if (tok[i] < 0 || tok[i] >= vocab)
      return fail(err, errlen, RT_KERNEL_EVALUE, op, "token %d at %lld outside [0, %lld)", tok[i],
                  (long long)i, (long long)vocab);
  return 0;
}

typedef struct {
  const rt_View *x, *wte, *wpe; /* x is dx in the backward, and the outputs dwte, dwpe */
  const int32_t *tok;
  int64_t N, T, C;
} Encoder;

/* x[n,:] = wte[tok[n],:] (+ wpe[n % T,:]) for rows [n0, n1) */
static void encoder_forward(const void *ctx, int64_t n0, int64_t n1) {
  const Encoder *e = ctx;
  const rt_View *x = e->x, *wte = e->wte, *wpe = e->wpe;
  const int32_t *tok = e->tok;
  int64_t T = e->T, C = e->C;
  for (int64_t n = n0; n < n1; n++) {
    int64_t ow = (int64_t)tok[n] * C, op = (n % T) * C;
    for (int64_t c = 0; c < C; c++) {
      float v = rt_load(wte, ow + c);
      if (wpe) v += rt_load(wpe, op + c);
      rt_store(x, n * C + c, v);
    }
  }
}

/* Columns [c0, c1). Rows are added in token order, so repeated tokens
 * accumulate in a fixed order. */
static void encoder_backward(const void *ctx, int64_t c0, int64_t c1) {
  const Encoder *e = ctx;
  const rt_View *dx = e->x, *dwte = e->wte, *dwpe = e->wpe;
  const int32_t *tok = e->tok;
  int64_t N = e->N, T = e->T, C = e->C;
  for (int64_t n = 0; n < N; n++) {
    int64_t ow = (int64_t)tok[n] * C;
    for (int64_t c = c0; c < c1; c++) rt_store(dwte, ow + c, rt_load(dwte, ow + c) + rt_load(dx, n * C + c));
  }
  if (!dwpe) return;
  /* dwpe[t] sums over the batch: b-outer per position keeps one order. */
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = c0; c < c1; c++) {
      float s = 0.0f;
      for (int64_t n = t; n < N; n += T) s += rt_load(dx, n * C + c);
      rt_store(dwpe, t * C + c, rt_load(dwpe, t * C + c) + s);
    }
}

static int encoder_common(const rt_KernelArgs *a, char *err, size_t errlen, int with_pos,
                          const char *OP) {
  REQUIRE(a->nout == 1 && a->nin == (with_pos ? 3 : 2), "want %d inputs and 1 output", with_pos ? 3 : 2);
  const rt_View *x = &a->out[0], *tok = &a->in[0], *wte = &a->in[1];
  const rt_View *wpe = with_pos ? &a->in[2] : NULL;
  REQUIRE(tok->dtype == RT_I32 && tok->rank >= 1, "tokens must be i32");
  REQUIRE(is_float(x) && is_float(wte) && (!wpe || is_float(wpe)), "x, wte, wpe must be float");
  int64_t N = tok->numel, T = last_dim(tok), C = last_dim(x);
  REQUIRE(wte->rank == 2 && wte->shape[1] == C && x->numel == N * C, "x must be [B,T,C], wte [V,C]");
  REQUIRE(!wpe || (wpe->rank == 2 && wpe->shape[1] == C && wpe->shape[0] >= T), "wpe must be [>=T,C]");
  int rc = check_tokens(tok->data, N, wte->shape[0], err, errlen, OP);
  if (rc) return rc;
  Encoder e = {x, wte, wpe, tok->data, N, T, C};
  par_for(a, N, row_grain(C), encoder_forward, &e);
  return 0;
}

static int k_encoder(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_common(a, err, errlen, 1, "encoder");
}

static int k_embedding(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_common(a, err, errlen, 0, "embedding");
}

static int encoder_backward_common(const rt_KernelArgs *a, char *err, size_t errlen, int with_pos,
                                   const char *OP) {
  REQUIRE(a->nin == 2 && a->nout == (with_pos ? 2 : 1), "want 2 inputs and %d outputs", with_pos ? 2 : 1);
  const rt_View *dx = &a->in[0], *tok = &a->in[1], *dwte = &a->out[0];
  const rt_View *dwpe = with_pos ? &a->out[1] : NULL;
  REQUIRE(tok->dtype == RT_I32 && tok->rank >= 1, "tokens must be i32");
  REQUIRE(is_float(dx) && is_float(dwte) && (!dwpe || is_float(dwpe)), "dx, dwte, dwpe must be float");
  int64_t N = tok->numel, T = last_dim(tok), C = last_dim(dx);
  REQUIRE(dwte->rank == 2 && dwte->shape[1] == C && dx->numel == N * C, "dx must be [B,T,C], dwte [V,C]");
  REQUIRE(!dwpe || (dwpe->rank == 2 && dwpe->shape[1] == C && dwpe->shape[0] >= T), "dwpe must be [>=T,C]");
  int rc = check_tokens(tok->data, N, dwte->shape[0], err, errlen, OP);
  if (rc) return rc;
  Encoder e = {dx, dwte, dwpe, tok->data, N, T, C};
  par_for(a, C, N >= GRAIN ? 1 : GRAIN / N, encoder_backward, &e);
  return 0;
}

static int k_encoder_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_backward_common(a, err, errlen, 1, "encoder_backward");
}

static int k_embedding_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_backward_common(a, err, errlen, 0, "embedding_backward");
}

/* -------------------------------------------------------------- layernorm */

/* layernorm and rmsnorm, forward and backward (y is dx in the backward,
 * b is db, and dw the weight's gradient); rmsnorm has no mean and no b. */
typedef rt_Norm Norm;

static void layernorm_forward(const void *ctx, int64_t n0, int64_t n1) {
  const Norm *k = ctx;
  const rt_View *y = k->y, *x = k->x, *w = k->w, *b = k->b;
  float *mean = k->mean, *rstd = k->rstd, eps = k->eps;
  int64_t C = k->C;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * C;
    float m = 0.0f;
    for (int64_t c = 0; c < C; c++) m += rt_load(x, o + c);
    m /= (float)C;
    float v = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float d = rt_load(x, o + c) - m;
      v += d * d;
    }
    v /= (float)C;
    float r = 1.0f / sqrtf(v + eps);
    for (int64_t c = 0; c < C; c++) {
      float xh = (rt_load(x, o + c) - m) * r;
      rt_store(y, o + c, xh * rt_load(w, c) + rt_load(b, c));
    }
    mean[n] = m;
    rstd[n] = r;
  }
}

/* dx for rows [n0, n1) */
static void layernorm_backward_rows(const void *ctx, int64_t n0, int64_t n1) {
  const Norm *k = ctx;
  const rt_View *dx = k->y, *dy = k->dy, *x = k->x, *w = k->w;
  const float *mean = k->mean, *rstd = k->rstd;
  int64_t C = k->C;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * C;
    float m = mean[n], r = rstd[n], sd = 0.0f, sdx = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float dn = rt_load(dy, o + c) * rt_load(w, c);
      sd += dn;
      sdx += dn * (rt_load(x, o + c) - m) * r;
    }
    sd /= (float)C;
    sdx /= (float)C;
    for (int64_t c = 0; c < C; c++) {
      float xh = (rt_load(x, o + c) - m) * r;
      float dn = rt_load(dy, o + c) * rt_load(w, c);
      rt_store(dx, o + c, (dn - sd - xh * sdx) * r);
    }
  }
}

/* dw and db for columns [cb, ce): sums over rows per column, a chunk of
 * columns at a time, keep the sums in f32 whatever the storage, and the
 * row order fixed. */
static void layernorm_backward_cols(const void *ctx, int64_t cb, int64_t ce) {
  const Norm *k = ctx;
  const rt_View *dw = k->dw, *db = k->b, *dy = k->dy, *x = k->x;
  const float *mean = k->mean, *rstd = k->rstd;
  int64_t N = k->N, C = k->C;
  for (int64_t c0 = cb; c0 < ce; c0 += NORM_CHUNK) {
    int64_t cn = ce - c0 < NORM_CHUNK ? ce - c0 : NORM_CHUNK;
    float sw[NORM_CHUNK] = {0}, sb[NORM_CHUNK] = {0};
    for (int64_t n = 0; n < N; n++) {
      int64_t o = n * C + c0;
      for (int64_t c = 0; c < cn; c++) {
        float d = rt_load(dy, o + c);
        sw[c] += d * ((rt_load(x, o + c) - mean[n]) * rstd[n]);
        sb[c] += d;
      }
    }
    for (int64_t c = 0; c < cn; c++) {
      rt_store(dw, c0 + c, rt_load(dw, c0 + c) + sw[c]);
      rt_store(db, c0 + c, rt_load(db, c0 + c) + sb[c]);
    }
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
  Norm k = {y, x, w, b, NULL, NULL, mean->data, rstd->data, N, C, (float)rt_attr(a, "eps", 1e-5)};
  if (a->backend_ctx && rt_fast_norm_forward(a->backend_ctx, &k, 0) == 0) return 0;
  par_for(a, N, row_grain(C), layernorm_forward, &k);
  return 0;
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
  Norm k = {dx, x, w, db, dy, dw, mean->data, rstd->data, N, C, 0.0f};
  if (a->backend_ctx && rt_fast_norm_backward(a->backend_ctx, &k, 0) == 0) return 0;
  if (dx) par_for(a, N, row_grain(C), layernorm_backward_rows, &k);
  if (dw) par_for(a, C, N >= GRAIN ? 1 : GRAIN / N, layernorm_backward_cols, &k);
  return 0;
}

/* ---------------------------------------------------------------- rmsnorm */

static void rmsnorm_forward(const void *ctx, int64_t n0, int64_t n1) {
  const Norm *k = ctx;
  const rt_View *y = k->y, *x = k->x, *w = k->w;
  float *rstd = k->rstd, eps = k->eps;
  int64_t C = k->C;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * C;
    float ss = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      float v = rt_load(x, o + c);
      ss += v * v;
    }
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    for (int64_t c = 0; c < C; c++) rt_store(y, o + c, rt_load(x, o + c) * r * rt_load(w, c));
    rstd[n] = r;
  }
}

static void rmsnorm_backward_rows(const void *ctx, int64_t n0, int64_t n1) {
  const Norm *k = ctx;
  const rt_View *dx = k->y, *dy = k->dy, *x = k->x, *w = k->w;
  const float *rstd = k->rstd;
  int64_t C = k->C;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * C;
    float r = rstd[n], s = 0.0f;
    for (int64_t c = 0; c < C; c++) s += rt_load(dy, o + c) * rt_load(w, c) * (rt_load(x, o + c) * r);
    s /= (float)C;
    for (int64_t c = 0; c < C; c++) {
      float xh = rt_load(x, o + c) * r;
      rt_store(dx, o + c, (rt_load(dy, o + c) * rt_load(w, c) - xh * s) * r);
    }
  }
}

static void rmsnorm_backward_cols(const void *ctx, int64_t cb, int64_t ce) {
  const Norm *k = ctx;
  const rt_View *dw = k->dw, *dy = k->dy, *x = k->x;
  const float *rstd = k->rstd;
  int64_t N = k->N;
  int64_t C = k->C;
  for (int64_t c0 = cb; c0 < ce; c0 += NORM_CHUNK) {
    int64_t cn = ce - c0 < NORM_CHUNK ? ce - c0 : NORM_CHUNK;
    float sw[NORM_CHUNK] = {0};
    for (int64_t n = 0; n < N; n++) {
      int64_t o = n * C + c0;
      for (int64_t c = 0; c < cn; c++) sw[c] += rt_load(dy, o + c) * (rt_load(x, o + c) * rstd[n]);
    }
    for (int64_t c = 0; c < cn; c++) rt_store(dw, c0 + c, rt_load(dw, c0 + c) + sw[c]);
  }
}

static int k_rmsnorm(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "rmsnorm";
  REQUIRE(a->nin == 2 && a->nout == 2, "want 2 inputs (x, w) and 2 outputs (y, rstd)");
  const rt_View *x = &a->in[0], *w = &a->in[1], *y = &a->out[0], *rstd = &a->out[1];
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(is_float(x) && is_float(w) && is_float(y) && rstd->dtype == RT_F32,
          "x, w, y must be float and rstd f32");
  REQUIRE(w->numel == C && y->numel == x->numel && rstd->numel == N,
          "shapes must be x,y [B,T,C], w [C], rstd [B,T]");
  Norm k = {y, x, w, NULL, NULL, NULL, NULL, rstd->data, N, C, (float)rt_attr(a, "eps", 1e-5)};
  if (a->backend_ctx && rt_fast_norm_forward(a->backend_ctx, &k, 1) == 0) return 0;
  par_for(a, N, row_grain(C), rmsnorm_forward, &k);
  return 0;
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
  Norm k = {dx, x, w, NULL, dy, dw, NULL, rstd->data, N, C, 0.0f};
  if (a->backend_ctx && rt_fast_norm_backward(a->backend_ctx, &k, 1) == 0) return 0;
  if (dx) par_for(a, N, row_grain(C), rmsnorm_backward_rows, &k);
  if (dw) par_for(a, C, N >= GRAIN ? 1 : GRAIN / N, rmsnorm_backward_cols, &k);
  return 0;
}

/* ----------------------------------------------------------------- matmul */

/* One blocked GEMM serves the three products of matmul and its backward:
 * C(m,n) (+)= sum_k A(m,k) B(k,n), with A and B read through strides so that
 * transposes cost nothing. Blocks of A and B are packed into f32 tiles
 * (converting bf16 on the way); the micro-kernel keeps a 4x8 tile of C in
 * vector registers. Each C element is summed over k in ascending order, the
 * same order as a naive dot product, whatever the blocking. */
#define MM_MR 4
#define MM_NR 8
#define MM_MB 64
#define MM_NB 64
#define MM_KB 128

static void pack(float *dst, int64_t ld, const rt_Operand *o, int64_t i0, int64_t ni, int64_t ni_pad,
                 int64_t j0, int64_t nj, int64_t nj_pad) {
  for (int64_t i = 0; i < ni_pad; i++) {
    float *d = dst + i * ld;
    if (i >= ni) {
      for (int64_t j = 0; j < nj_pad; j++) d[j] = 0.0f;
      continue;
    }
    int64_t base = (i0 + i) * o->s0 + j0 * o->s1;
    if (o->v->dtype == RT_F32 && o->s1 == 1) {
      const float *s = (const float *)o->v->data + base;
      for (int64_t j = 0; j < nj; j++) d[j] = s[j];
    } else if (o->v->dtype == RT_F32) {
      const float *s = (const float *)o->v->data + base;
      for (int64_t j = 0; j < nj; j++) d[j] = s[j * o->s1];
    } else {
      for (int64_t j = 0; j < nj; j++) d[j] = rt_load(o->v, base + j * o->s1);
    }
    for (int64_t j = nj; j < nj_pad; j++) d[j] = 0.0f;
  }
}

static void micro_4x8(float *acc, const float *ap, const float *bp, int64_t kb) {
  v8 c0, c1, c2, c3;
  memcpy(&c0, acc + 0 * MM_NB, sizeof c0);
  memcpy(&c1, acc + 1 * MM_NB, sizeof c1);
  memcpy(&c2, acc + 2 * MM_NB, sizeof c2);
  memcpy(&c3, acc + 3 * MM_NB, sizeof c3);
  for (int64_t k = 0; k < kb; k++) {
    v8 b;
    memcpy(&b, bp + k * MM_NB, sizeof b);
    c0 += ap[0 * MM_KB + k] * b;
    c1 += ap[1 * MM_KB + k] * b;
    c2 += ap[2 * MM_KB + k] * b;
    c3 += ap[3 * MM_KB + k] * b;
  }
  memcpy(acc + 0 * MM_NB, &c0, sizeof c0);
  memcpy(acc + 1 * MM_NB, &c1, sizeof c1);
  memcpy(acc + 2 * MM_NB, &c2, sizeof c2);
  memcpy(acc + 3 * MM_NB, &c3, sizeof c3);
}

void rt_gemm_ref(const rt_View *out, int accumulate, const rt_View *bias, const rt_Operand *A,
                 const rt_Operand *B, int64_t M, int64_t N, int64_t K) {
  _Alignas(32) float acc[MM_MB * MM_NB];
  _Alignas(32) float ap[MM_MB * MM_KB];
  _Alignas(32) float bp[MM_KB * MM_NB];
  for (int64_t n0 = 0; n0 < N; n0 += MM_NB) {
    int64_t nb = N - n0 < MM_NB ? N - n0 : MM_NB;
    int64_t nb_pad = (nb + MM_NR - 1) / MM_NR * MM_NR;
    for (int64_t m0 = 0; m0 < M; m0 += MM_MB) {
      int64_t mb = M - m0 < MM_MB ? M - m0 : MM_MB;
      int64_t mb_pad = (mb + MM_MR - 1) / MM_MR * MM_MR;
      memset(acc, 0, sizeof acc);
      for (int64_t k0 = 0; k0 < K; k0 += MM_KB) {
        int64_t kb = K - k0 < MM_KB ? K - k0 : MM_KB;
        pack(ap, MM_KB, A, m0, mb, mb_pad, k0, kb, kb);
        /* B is packed k-major: row k of the tile holds B(k, n0..). */
        for (int64_t k = 0; k < kb; k++) {
          float *d = bp + k * MM_NB;
          int64_t base = (k0 + k) * B->s0 + n0 * B->s1;
          if (B->v->dtype == RT_F32 && B->s1 == 1) {
            const float *s = (const float *)B->v->data + base;
            for (int64_t j = 0; j < nb; j++) d[j] = s[j];
          } else {
            for (int64_t j = 0; j < nb; j++) d[j] = rt_load(B->v, base + j * B->s1);
          }
          for (int64_t j = nb; j < nb_pad; j++) d[j] = 0.0f;
        }
        for (int64_t i = 0; i < mb_pad; i += MM_MR)
          for (int64_t j = 0; j < nb_pad; j += MM_NR)
            micro_4x8(acc + i * MM_NB + j, ap + i * MM_KB, bp + j, kb);
      }
      for (int64_t i = 0; i < mb; i++) {
        int64_t o = (m0 + i) * N + n0;
        for (int64_t j = 0; j < nb; j++) {
          float v = acc[i * MM_NB + j];
          if (bias) v += rt_load(bias, n0 + j);
          if (accumulate) v = rt_load(out, o + j) + v;
          rt_store(out, o + j, v);
        }
      }
    }
  }
}

/* y[n,o] = sum_c x[n,c] w[o,c] + bias[o] */
static void matmul_forward(const rt_View *y, const rt_View *x, const rt_View *w, const rt_View *bias,
                           int64_t N, int64_t C, int64_t OC) {
  rt_Operand A = {x, C, 1}, B = {w, 1, C};
  rt_gemm_ref(y, 0, bias, &A, &B, N, OC, C);
}

/* dx or dw NULL: that gradient is not wanted. */
static void matmul_backward(const rt_View *dx, const rt_View *dw, const rt_View *dy, const rt_View *x,
                            const rt_View *w, int64_t N, int64_t C, int64_t OC) {
  rt_Operand dyA = {dy, OC, 1}, wB = {w, C, 1};
  if (dx) rt_gemm_ref(dx, 0, NULL, &dyA, &wB, N, C, OC); /* dx = dy w */
  rt_Operand dyT = {dy, 1, OC}, xB = {x, C, 1};
  if (dw) rt_gemm_ref(dw, 1, NULL, &dyT, &xB, OC, C, N); /* dw += dy^T x */
}

typedef struct {
  const rt_View *dbias, *dy;
  int64_t N, OC;
} Dbias;

/* dbias[o] += sum over rows of dy[n,o], columns [o0, o1): rows outer, so
 * the row order of every column's sum is fixed and the loads contiguous. */
static void matmul_dbias(const void *ctx, int64_t o0, int64_t o1) {
  const Dbias *k = ctx;
  float s[NORM_CHUNK];
  for (int64_t c0 = o0; c0 < o1; c0 += NORM_CHUNK) {
    int64_t cn = o1 - c0 < NORM_CHUNK ? o1 - c0 : NORM_CHUNK;
    for (int64_t o = 0; o < cn; o++) s[o] = 0.0f;
    for (int64_t n = 0; n < k->N; n++)
      for (int64_t o = 0; o < cn; o++) s[o] += rt_load(k->dy, n * k->OC + c0 + o);
    for (int64_t o = 0; o < cn; o++) rt_store(k->dbias, c0 + o, rt_load(k->dbias, c0 + o) + s[o]);
  }
}

static int k_matmul(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "matmul";
  REQUIRE((a->nin == 2 || a->nin == 3) && a->nout == 1, "want inputs (x, w[, bias]) and 1 output");
  const rt_View *x = &a->in[0], *w = &a->in[1], *bias = a->nin == 3 ? &a->in[2] : NULL;
  const rt_View *y = &a->out[0];
  REQUIRE(is_float(x) && is_float(w) && is_float(y) && (!bias || is_float(bias)), "operands must be float");
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(w->rank == 2 && w->shape[1] == C, "w must be [OC, C] with C the last dim of x");
  int64_t OC = w->shape[0];
  REQUIRE(last_dim(y) == OC && y->numel == N * OC && (!bias || bias->numel == OC),
          "y must be [.., OC] with x's rows, bias [OC]");
  if (a->backend_ctx) rt_fast_matmul_forward(a->backend_ctx, y, x, w, bias, N, C, OC);
  else matmul_forward(y, x, w, bias, N, C, OC);
  return 0;
}

static int k_matmul_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "matmul_backward";
  const rt_View *g[3];
  REQUIRE(a->nin == 3 && a->nout >= 1 && rt_grad_outputs(a, 3, g) == 0,
          "want inputs (dy, x, w) and outputs (dx, dw[, dbias]) or those \"grads\" names");
  const rt_View *dy = &a->in[0], *x = &a->in[1], *w = &a->in[2], *dx = g[0], *dw = g[1], *dbias = g[2];
  REQUIRE(is_float(dy) && is_float(x) && is_float(w) && (!dx || is_float(dx)) && (!dw || is_float(dw)) &&
          (!dbias || is_float(dbias)), "operands must be float");
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(w->rank == 2 && w->shape[1] == C, "w must be [OC, C] with C the last dim of x");
  int64_t OC = w->shape[0];
  REQUIRE(dy->numel == N * OC && (!dx || dx->numel == x->numel) && (!dw || dw->numel == w->numel) &&
          (!dbias || dbias->numel == OC), "shapes do not match matmul's");
  if (a->backend_ctx) rt_fast_matmul_backward(a->backend_ctx, dx, dw, dy, x, w, N, C, OC);
  else matmul_backward(dx, dw, dy, x, w, N, C, OC);
  if (dbias && a->backend_ctx) {
    rt_fast_dbias(a->backend_ctx, dbias, dy, N, OC);
  } else if (dbias) {
    Dbias k = {dbias, dy, N, OC};
    par_for(a, OC, N >= GRAIN ? 1 : GRAIN / N, matmul_dbias, &k);
  }
  return 0;
}

/* -------------------------------------------------------------- attention */

typedef rt_AttnShape AttnShape;

static int64_t q_off(const AttnShape *s, int64_t b, int64_t t, int64_t h) {
  return (b * s->T + t) * s->row + h * s->hd;
}
static int64_t k_off(const AttnShape *s, int64_t b, int64_t t, int64_t g) {
  return (b * s->T + t) * s->row + (s->NH + g) * s->hd;
}
static int64_t v_off(const AttnShape *s, int64_t b, int64_t t, int64_t g) {
  return (b * s->T + t) * s->row + (s->NH + s->KVH + g) * s->hd;
}

typedef struct {
  const rt_View *y, *qkv, *dy, *dqkv;
  float *lse, *D; /* lse is read only in the backward */
  const AttnShape *s;
} Attn;

/* Two passes over the keys per query row (max, then exp-sum and the
 * weighted sum of values), so no T x T scores are ever stored. Heads
 * [bh0, bh1) of b * NH + h. */
static void attention_forward(const void *ctx, int64_t bh0, int64_t bh1) {
  const Attn *at = ctx;
  const rt_View *y = at->y, *qkv = at->qkv;
  const AttnShape *s = at->s;
  float qb[ATTN_MAX_HD], kb[ATTN_MAX_HD], vb[ATTN_MAX_HD], acc[ATTN_MAX_HD];
  int64_t hd = s->hd, rep = s->NH / s->KVH;
  for (int64_t bh = bh0; bh < bh1; bh++) {
    int64_t b = bh / s->NH, h = bh % s->NH, g = h / rep;
    for (int64_t t = 0; t < s->T; t++) {
      const float *q = row_f32(qkv, q_off(s, b, t, h), hd, qb);
      float mx = -INFINITY;
      for (int64_t u = 0; u <= t; u++) {
        float sc = dot(q, row_f32(qkv, k_off(s, b, u, g), hd, kb), hd) * s->scale;
        if (sc > mx) mx = sc;
      }
      float sum = 0.0f;
      for (int64_t d = 0; d < hd; d++) acc[d] = 0.0f;
      for (int64_t u = 0; u <= t; u++) {
        float p = expf(dot(q, row_f32(qkv, k_off(s, b, u, g), hd, kb), hd) * s->scale - mx);
        const float *v = row_f32(qkv, v_off(s, b, u, g), hd, vb);
        sum += p;
        axpy(acc, p, v, hd);
      }
      int64_t yo = (b * s->T + t) * s->NH * hd + h * hd;
      for (int64_t d = 0; d < hd; d++) rt_store(y, yo + d, acc[d] / sum);
      at->lse[(b * s->NH + h) * s->T + t] = mx + logf(sum);
    }
  }
}

/* Pass A runs over query rows: D = dy.y per row (kept in the workspace for
 * pass B) and dq. Pass B runs over key rows: dk and dv, summed over the
 * query heads sharing the kv head and over later queries. Each gradient is
 * summed by one loop in a fixed order: no scatter, no atomics on the GPU.
 * Pass A: heads [bh0, bh1) of b * NH + h. */
static void attention_backward_q(const void *ctx, int64_t bh0, int64_t bh1) {
  const Attn *at = ctx;
  const rt_View *dqkv = at->dqkv, *dy = at->dy, *qkv = at->qkv, *y = at->y;
  const AttnShape *s = at->s;
  float qb[ATTN_MAX_HD], kb[ATTN_MAX_HD], vb[ATTN_MAX_HD], dyb[ATTN_MAX_HD], yb[ATTN_MAX_HD];
  float g1[ATTN_MAX_HD];
  int64_t hd = s->hd, rep = s->NH / s->KVH, T = s->T, yrow = s->NH * hd;
  for (int64_t bh = bh0; bh < bh1; bh++) {
    int64_t b = bh / s->NH, h = bh % s->NH, g = h / rep;
    for (int64_t t = 0; t < T; t++) {
      const float *q = row_f32(qkv, q_off(s, b, t, h), hd, qb);
      const float *dyt = row_f32(dy, (b * T + t) * yrow + h * hd, hd, dyb);
      float Dt = dot(dyt, row_f32(y, (b * T + t) * yrow + h * hd, hd, yb), hd);
      float L = at->lse[(b * s->NH + h) * T + t];
      at->D[(b * s->NH + h) * T + t] = Dt;
      for (int64_t d = 0; d < hd; d++) g1[d] = 0.0f;
      for (int64_t u = 0; u <= t; u++) {
        const float *k = row_f32(qkv, k_off(s, b, u, g), hd, kb);
        float p = expf(dot(q, k, hd) * s->scale - L);
        float dp = dot(dyt, row_f32(qkv, v_off(s, b, u, g), hd, vb), hd);
        float ds = p * (dp - Dt);
        axpy(g1, ds, k, hd);
      }
      int64_t o = q_off(s, b, t, h);
      for (int64_t d = 0; d < hd; d++) rt_store(dqkv, o + d, g1[d] * s->scale);
    }
  }
}

/* Pass B: kv heads [bg0, bg1) of b * KVH + g. */
static void attention_backward_kv(const void *ctx, int64_t bg0, int64_t bg1) {
  const Attn *at = ctx;
  const rt_View *dqkv = at->dqkv, *dy = at->dy, *qkv = at->qkv;
  const AttnShape *s = at->s;
  float qb[ATTN_MAX_HD], kb[ATTN_MAX_HD], vb[ATTN_MAX_HD], dyb[ATTN_MAX_HD];
  float g1[ATTN_MAX_HD], g2[ATTN_MAX_HD];
  int64_t hd = s->hd, rep = s->NH / s->KVH, T = s->T, yrow = s->NH * hd;
  for (int64_t bg = bg0; bg < bg1; bg++) {
    int64_t b = bg / s->KVH, g = bg % s->KVH;
    for (int64_t u = 0; u < T; u++) {
      const float *k = row_f32(qkv, k_off(s, b, u, g), hd, kb);
      const float *v = row_f32(qkv, v_off(s, b, u, g), hd, vb);
      for (int64_t d = 0; d < hd; d++) g1[d] = g2[d] = 0.0f;
      for (int64_t h = g * rep; h < (g + 1) * rep; h++)
        for (int64_t t = u; t < T; t++) {
          const float *q = row_f32(qkv, q_off(s, b, t, h), hd, qb);
          const float *dyt = row_f32(dy, (b * T + t) * yrow + h * hd, hd, dyb);
          int64_t r = (b * s->NH + h) * T + t;
          float p = expf(dot(q, k, hd) * s->scale - at->lse[r]);
          float ds = p * (dot(dyt, v, hd) - at->D[r]);
          axpy(g1, ds, q, hd);
          axpy(g2, p, dyt, hd);
        }
      int64_t ko = k_off(s, b, u, g), vo = v_off(s, b, u, g);
      for (int64_t d = 0; d < hd; d++) {
        rt_store(dqkv, ko + d, g1[d] * s->scale);
        rt_store(dqkv, vo + d, g2[d]);
      }
    }
  }
}

static int attn_shape(const rt_KernelArgs *a, const rt_View *qkv, AttnShape *s, char *err,
                      size_t errlen, const char *OP) {
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
  REQUIRE(s->hd >= 1 && s->hd <= ATTN_MAX_HD, "head dim %lld outside [1, %d]", (long long)s->hd, ATTN_MAX_HD);
  s->scale = 1.0f / sqrtf((float)s->hd);
  return 0;
}

static int k_attention(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "attention";
  REQUIRE(a->nin == 1 && a->nout == 2, "want 1 input (qkv) and 2 outputs (y, lse)");
  AttnShape s;
  int rc = attn_shape(a, &a->in[0], &s, err, errlen, OP);
  if (rc) return rc;
  const rt_View *y = &a->out[0], *lse = &a->out[1];
  REQUIRE(is_float(y) && y->numel == s.B * s.T * s.NH * s.hd, "y must be float [B,T,NH hd]");
  REQUIRE(lse->dtype == RT_F32 && lse->numel == s.B * s.NH * s.T, "lse must be f32 [B,NH,T]");
  if (a->backend_ctx && rt_fast_attention_forward(a->backend_ctx, y, lse->data, &a->in[0], &s) == 0) return 0;
  Attn k = {y, &a->in[0], NULL, NULL, lse->data, NULL, &s};
  par_for(a, s.B * s.NH, 1, attention_forward, &k);
  return 0;
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
  if (a->backend_ctx && rt_fast_attention_backward(a->backend_ctx, dqkv, dy, &a->in[1], y, lse->data, &s) == 0)
    return 0;
  Attn k = {y, &a->in[1], dy, dqkv, (float *)lse->data, a->workspace, &s};
  par_for(a, s.B * s.NH, 1, attention_backward_q, &k);
  par_for(a, s.B * s.KVH, 1, attention_backward_kv, &k);
  return 0;
}

/* ------------------------------------------------------------------- rope */

typedef rt_Rope Rope;

/* Rotates pairs (2i, 2i+1) of every q and k head at position t by
 * t * theta^(-2i/hd); the angle is formed in double. sign -1 applies the
 * inverse rotation, which is the backward. v is copied. Rows [r0, r1) of
 * b * T + t. */
static void rope_apply(const void *ctx, int64_t r0, int64_t r1) {
  const Rope *k = ctx;
  const rt_View *out = k->out, *in = k->in;
  const AttnShape *s = k->s;
  int64_t hd = s->hd, nrot = s->NH + s->KVH;
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = r % s->T, o = r * s->row;
    for (int64_t i = 0; i < hd / 2; i++) {
      double ang = (double)t * pow(k->theta, -(double)(2 * i) / (double)hd);
      float c = (float)cos(ang), sn = k->sign * (float)sin(ang);
      for (int64_t h = 0; h < nrot; h++) {
        int64_t e = o + h * hd + 2 * i;
        float x0 = rt_load(in, e), x1 = rt_load(in, e + 1);
        rt_store(out, e, x0 * c - x1 * sn);
        rt_store(out, e + 1, x0 * sn + x1 * c);
      }
    }
    for (int64_t e = o + nrot * hd; e < o + s->row; e++) rt_store(out, e, rt_load(in, e));
  }
}

static int rope_common(const rt_KernelArgs *a, char *err, size_t errlen, float sign, const char *OP) {
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input and 1 output");
  AttnShape s;
  int rc = attn_shape(a, &a->in[0], &s, err, errlen, OP);
  if (rc) return rc;
  REQUIRE(s.hd % 2 == 0, "head dim %lld must be even", (long long)s.hd);
  REQUIRE(is_float(&a->out[0]) && a->out[0].numel == a->in[0].numel, "output must be float, shaped as input");
  Rope k = {&a->out[0], &a->in[0], &s, rt_attr(a, "theta", 10000.0), sign};
  if (a->backend_ctx && rt_fast_rope(a->backend_ctx, &k) == 0) return 0;
  par_for(a, s.B * s.T, row_grain(s.row), rope_apply, &k);
  return 0;
}

static int k_rope(const rt_KernelArgs *a, char *err, size_t errlen) {
  return rope_common(a, err, errlen, 1.0f, "rope");
}

static int k_rope_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return rope_common(a, err, errlen, -1.0f, "rope_backward");
}

/* ------------------------------------------------------- gelu, swiglu, add */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* Elementwise ops: y (dx in a backward) from x, and dy (or add's second
 * operand); N rows of F for swiglu. */
typedef struct {
  const rt_View *y, *x, *dy;
  int64_t F;
} Elem;

static void gelu_forward(const void *ctx, int64_t i0, int64_t i1) {
  const Elem *k = ctx;
  for (int64_t i = i0; i < i1; i++) {
    float v = rt_load(k->x, i);
    float u = GELU_K * (v + 0.044715f * v * v * v);
    rt_store(k->y, i, 0.5f * v * (1.0f + tanhf(u)));
  }
}

static void gelu_backward(const void *ctx, int64_t i0, int64_t i1) {
  const Elem *k = ctx;
  for (int64_t i = i0; i < i1; i++) {
    float v = rt_load(k->x, i);
    float u = GELU_K * (v + 0.044715f * v * v * v);
    float th = tanhf(u);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    float g = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    rt_store(k->y, i, rt_load(k->dy, i) * g);
  }
}

static int k_gelu(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "gelu";
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input and 1 output");
  REQUIRE(is_float(&a->in[0]) && is_float(&a->out[0]) && a->in[0].numel == a->out[0].numel,
          "x and y must be float and the same size");
  if (a->backend_ctx) {
    rt_fast_gelu(a->backend_ctx, &a->out[0], &a->in[0], NULL, a->in[0].numel);
    return 0;
  }
  Elem k = {&a->out[0], &a->in[0], NULL, 0};
  par_for(a, a->in[0].numel, GRAIN, gelu_forward, &k);
  return 0;
}

static int k_gelu_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "gelu_backward";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs (dy, x) and 1 output (dx)");
  int64_t n = a->in[1].numel;
  REQUIRE(is_float(&a->in[0]) && is_float(&a->in[1]) && is_float(&a->out[0]) &&
          a->in[0].numel == n && a->out[0].numel == n, "dy, x, dx must be float and the same size");
  if (a->backend_ctx) {
    rt_fast_gelu(a->backend_ctx, &a->out[0], &a->in[1], &a->in[0], n);
    return 0;
  }
  Elem k = {&a->out[0], &a->in[1], &a->in[0], 0};
  par_for(a, n, GRAIN, gelu_backward, &k);
  return 0;
}

static float sigmoidf(float g) { return 1.0f / (1.0f + expf(-g)); }

/* Rows [n0, n1); x is gu. */
static void swiglu_forward(const void *ctx, int64_t n0, int64_t n1) {
  const Elem *k = ctx;
  int64_t F = k->F;
  for (int64_t n = n0; n < n1; n++)
    for (int64_t f = 0; f < F; f++) {
      float g = rt_load(k->x, n * 2 * F + f), u = rt_load(k->x, n * 2 * F + F + f);
      rt_store(k->y, n * F + f, g * sigmoidf(g) * u);
    }
}

/* Rows [n0, n1); x is gu, y dgu. */
static void swiglu_backward(const void *ctx, int64_t n0, int64_t n1) {
  const Elem *k = ctx;
  int64_t F = k->F;
  for (int64_t n = n0; n < n1; n++)
    for (int64_t f = 0; f < F; f++) {
      float g = rt_load(k->x, n * 2 * F + f), u = rt_load(k->x, n * 2 * F + F + f);
      float d = rt_load(k->dy, n * F + f), sg = sigmoidf(g);
      rt_store(k->y, n * 2 * F + f, d * u * sg * (1.0f + g * (1.0f - sg)));
      rt_store(k->y, n * 2 * F + F + f, d * g * sg);
    }
}

static int k_swiglu(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "swiglu";
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input (gu) and 1 output (y)");
  const rt_View *gu = &a->in[0], *y = &a->out[0];
  int64_t F = last_dim(y), N = F ? y->numel / F : 0;
  REQUIRE(is_float(gu) && is_float(y) && last_dim(gu) == 2 * F && gu->numel == 2 * y->numel,
          "gu must be float [.., 2F] and y [.., F]");
  if (a->backend_ctx) {
    rt_fast_swiglu(a->backend_ctx, y, gu, NULL, N, F);
    return 0;
  }
  Elem k = {y, gu, NULL, F};
  par_for(a, N, row_grain(F), swiglu_forward, &k);
  return 0;
}

static int k_swiglu_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "swiglu_backward";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs (dy, gu) and 1 output (dgu)");
  const rt_View *dy = &a->in[0], *gu = &a->in[1], *dgu = &a->out[0];
  int64_t F = last_dim(dy), N = F ? dy->numel / F : 0;
  REQUIRE(is_float(dy) && is_float(gu) && is_float(dgu) && last_dim(gu) == 2 * F &&
          gu->numel == 2 * dy->numel && dgu->numel == gu->numel, "dy [.., F], gu and dgu [.., 2F], float");
  if (a->backend_ctx) {
    rt_fast_swiglu(a->backend_ctx, dgu, gu, dy, N, F);
    return 0;
  }
  Elem k = {dgu, gu, dy, F};
  par_for(a, N, row_grain(F), swiglu_backward, &k);
  return 0;
}

static void add_range(const void *ctx, int64_t i0, int64_t i1) {
  const Elem *k = ctx;
  for (int64_t i = i0; i < i1; i++) rt_store(k->y, i, rt_load(k->x, i) + rt_load(k->dy, i));
}

static int k_add(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "add";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs and 1 output");
  const rt_View *x = &a->in[0], *z = &a->in[1], *y = &a->out[0];
  REQUIRE(is_float(x) && is_float(z) && is_float(y) && x->numel == y->numel && z->numel == y->numel,
          "a, b, y must be float and the same size");
  if (a->backend_ctx) {
    rt_fast_add(a->backend_ctx, y, x, z, y->numel);
    return 0;
  }
  Elem k = {y, x, z, 0};
  par_for(a, y->numel, GRAIN, add_range, &k);
  return 0;
}

/* --------------------------------------------------------------- lora_add */

/* A LoRA adapter's output v [.., W] scaled and added to columns
 * [offset, offset + W) of the base projection y [.., OC]. */
typedef struct {
  const rt_View *out, *base, *v; /* out is dv in the backward, base dy */
  float scale;
  int64_t OC, W, off;
} LoraAdd;

/* rows [n0, n1) */
static void lora_add_forward(const void *ctx, int64_t n0, int64_t n1) {
  const LoraAdd *k = ctx;
  for (int64_t n = n0; n < n1; n++)
    for (int64_t c = 0; c < k->OC; c++) {
      float y = rt_load(k->base, n * k->OC + c);
      int64_t j = c - k->off;
      if (j >= 0 && j < k->W) y = y + k->scale * rt_load(k->v, n * k->W + j);
      rt_store(k->out, n * k->OC + c, y);
    }
}

/* dv[n, j] = scale * dy[n, offset + j] */
static void lora_add_backward(const void *ctx, int64_t n0, int64_t n1) {
  const LoraAdd *k = ctx;
  for (int64_t n = n0; n < n1; n++)
    for (int64_t j = 0; j < k->W; j++) rt_store(k->out, n * k->W + j, k->scale * rt_load(k->base, n * k->OC + k->off + j));
}

/* Checks y [N, OC] (or dy) against v [N, W] (or dv) and the attributes. */
static int lora_shape(const rt_KernelArgs *a, const rt_View *y, const rt_View *v, LoraAdd *k, char *err, size_t errlen,
                      const char *OP) {
  int64_t OC = last_dim(y), W = last_dim(v), N = OC ? y->numel / OC : 0;
  double off = rt_attr(a, "offset", 0.0);
  REQUIRE(is_float(y) && is_float(v) && W > 0 && v->numel == N * W, "y [.., OC] and v [.., W] must be float, same rows");
  REQUIRE(off >= 0 && off == (double)(int64_t)off && (int64_t)off + W <= OC, "offset %g + W %lld exceeds OC %lld", off,
          (long long)W, (long long)OC);
  k->scale = (float)rt_attr(a, "scale", 1.0);
  k->OC = OC, k->W = W, k->off = (int64_t)off;
  return 0;
}

static int k_lora_add(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "lora_add";
  REQUIRE(a->nin == 2 && a->nout == 1, "want inputs (y, v) and 1 output");
  LoraAdd k = {&a->out[0], &a->in[0], &a->in[1], 0, 0, 0, 0};
  int rc = lora_shape(a, &a->in[0], &a->in[1], &k, err, errlen, OP);
  if (rc) return rc;
  REQUIRE(is_float(&a->out[0]) && a->out[0].numel == a->in[0].numel, "the output must be float, y's size");
  par_for(a, k.OC ? a->in[0].numel / k.OC : 0, row_grain(k.OC), lora_add_forward, &k);
  return 0;
}

static int k_lora_add_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "lora_add_backward";
  REQUIRE(a->nin == 1 && a->nout == 1, "want input dy and output dv");
  LoraAdd k = {&a->out[0], &a->in[0], NULL, 0, 0, 0, 0};
  int rc = lora_shape(a, &a->in[0], &a->out[0], &k, err, errlen, OP);
  if (rc) return rc;
  par_for(a, a->out[0].numel / k.W, row_grain(k.W), lora_add_backward, &k);
  return 0;
}

/* ----------------------------------------------------------- crossentropy */

typedef rt_CrossEntropy CrossEntropy;

/* lse of rows [n0, n1) */
static void crossentropy_forward(const void *ctx, int64_t n0, int64_t n1) {
  const CrossEntropy *k = ctx;
  int64_t V = k->V;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * k->LD;
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
      float l = rt_load(k->logits, o + v);
      if (l > mx) mx = l;
    }
    float s = 0.0f;
    for (int64_t v = 0; v < V; v++) s += expf(rt_load(k->logits, o + v) - mx);
    k->lse[n] = mx + logf(s);
  }
}

static void crossentropy_backward(const void *ctx, int64_t n0, int64_t n1) {
  const CrossEntropy *k = ctx;
  int64_t V = k->V;
  float inv = 1.0f / (float)k->M;
  for (int64_t n = n0; n < n1; n++) {
    int64_t o = n * k->LD;
    for (int64_t v = 0; v < V; v++) {
      float p = expf(rt_load(k->logits, o + v) - k->lse[n]);
      rt_store(k->dlogits, o + v, (p - (v == k->tgt[n] ? 1.0f : 0.0f)) * inv);
    }
    for (int64_t v = V; v < k->LD; v++) rt_store(k->dlogits, o + v, 0.0f);
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
  int rc = check_tokens(tgt->data, N, nv, err, errlen, OP);
  if (rc) return rc;
  CrossEntropy k = {NULL, logits, lse->data, tgt->data, N, nv, V, M};
  if (!a->backend_ctx || rt_fast_crossentropy(a->backend_ctx, &k) != 0) par_for(a, N, row_grain(V), crossentropy_forward, &k);
  /* The mean loss is summed in double over rows in order: one number,
   * fixed order, and no f32 drift over B*T terms. */
  const int32_t *t = tgt->data;
  double total = 0.0;
  for (int64_t n = 0; n < N; n++) total += (double)(k.lse[n] - rt_load(logits, n * V + t[n]));
  ((float *)loss->data)[0] = (float)(total / (double)M);
  return 0;
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
  int rc = check_tokens(tgt->data, N, nv, err, errlen, OP);
  if (rc) return rc;
  CrossEntropy k = {dl, logits, lse->data, tgt->data, N, nv, V, M};
  if (!a->backend_ctx || rt_fast_crossentropy(a->backend_ctx, &k) != 0) par_for(a, N, row_grain(V), crossentropy_backward, &k);
  return 0;
}

/* ------------------------------------------------------------------ adamw */

typedef rt_AdamW AdamW;

/* torch.optim.AdamW: p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p). The
 * f32 master copy, when present, is the value updated; param gets its
 * rounding. Elements [i0, i1). */
static void adamw_update(const void *ctx, int64_t i0, int64_t i1) {
  const AdamW *h = ctx;
  const float *m = h->m, *v = h->v, *master = h->master;
  for (int64_t i = i0; i < i1; i++) {
    float g = rt_load(h->grad, i);
    float p = master ? master[i] : rt_load(h->param, i);
    float mi = h->beta1 * m[i] + (1.0f - h->beta1) * g;
    float vi = h->beta2 * v[i] + (1.0f - h->beta2) * g * g;
    float mh = mi / h->bc1, vh = vi / h->bc2;
    p -= h->lr * (mh / (sqrtf(vh) + h->eps) + h->wd * p);
    ((float *)h->m_out->data)[i] = mi;
    ((float *)h->v_out->data)[i] = vi;
    if (master) ((float *)h->master_out->data)[i] = p;
    rt_store(h->param_out, i, p);
  }
}

static int k_adamw(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "adamw";
  REQUIRE((a->nin == 4 && a->nout == 3) || (a->nin == 5 && a->nout == 4),
          "want inputs (param, grad, m, v[, master]) and outputs (param, m, v[, master])");
  /* Each output is read through its input view and written through its
   * own; element i is read before it is written, so in place is safe. */
  const rt_View *grad = &a->in[1];
  int64_t n = a->in[0].numel;
  for (int i = 0; i < a->nout; i++) {
    const rt_View *in = &a->in[i == 0 ? 0 : i + 1], *out = &a->out[i];
    REQUIRE(in->numel == n && out->numel == n && in->dtype == out->dtype, "state %d: shapes or dtypes differ", i);
    REQUIRE(i == 0 ? is_float(out) : out->dtype == RT_F32, "param must be float, m, v and master f32");
  }
  REQUIRE(is_float(grad) && grad->numel == n, "grad must be float, param's size");
  REQUIRE(a->step >= 1, "step %lld: the step number is 1-based", (long long)a->step);
  double b1 = rt_attr(a, "beta1", 0.9), b2 = rt_attr(a, "beta2", 0.999);
  AdamW h = {&a->in[0], &a->out[0], &a->out[1], &a->out[2], a->nout == 4 ? &a->out[3] : NULL, grad,
             a->in[2].data, a->in[3].data, a->nin == 5 ? a->in[4].data : NULL,
             (float)rt_attr(a, "lr", 1e-3), (float)b1, (float)b2, (float)rt_attr(a, "eps", 1e-8),
             (float)rt_attr(a, "weight_decay", 0.01), (float)(1.0 - pow(b1, (double)a->step)),
             (float)(1.0 - pow(b2, (double)a->step))};
  if (a->backend_ctx) rt_fast_adamw(a->backend_ctx, &h, n);
  else par_for(a, n, GRAIN, adamw_update, &h);
  return 0;
}

/* ------------------------------------------------------ slice, concat_rows */

/* y = the numel(y) elements of x from element `offset` on: a block of rows
 * of a row-major tensor (a chunk of the batch). Any dtype. */
static int k_slice(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "slice";
  REQUIRE(a->nin == 1 && a->nout == 1, "want input x and output y");
  const rt_View *x = &a->in[0], *y = &a->out[0];
  double off = rt_attr(a, "offset", 0.0);
  REQUIRE(x->dtype == y->dtype, "x and y must share a dtype");
  REQUIRE(off >= 0 && off == (double)(int64_t)off && (int64_t)off + y->numel <= x->numel,
          "offset %g + %lld elements exceeds x's %lld", off, (long long)y->numel, (long long)x->numel);
  int64_t es = rt_dtype_size(x->dtype);
  memcpy(y->data, (const char *)x->data + (int64_t)off * es, (size_t)(y->numel * es));
  return 0;
}

/* y = x_0, x_1, ... one after another (row blocks stacked). Any dtype. */
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
  char *at = y->data;
  for (int i = 0; i < a->nin; i++) {
    memcpy(at, a->in[i].data, (size_t)(a->in[i].numel * es));
    at += a->in[i].numel * es;
  }
  return 0;
}

/* -------------------------------------------------------------------- ema */

typedef struct {
  const rt_View *param;
  const float *ema;
  float *out;
  float decay;
} Ema;

/* ema = decay * ema + (1 - decay) * param, f32, elements [i0, i1). */
static void ema_update(const void *ctx, int64_t i0, int64_t i1) {
  const Ema *k = ctx;
  float d = k->decay, c = 1.0f - k->decay;
  for (int64_t i = i0; i < i1; i++) k->out[i] = d * k->ema[i] + c * rt_load(k->param, i);
}

static int k_ema(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "ema";
  REQUIRE(a->nin == 2 && a->nout == 1, "want inputs (ema, param) and output ema");
  const rt_View *e = &a->in[0], *p = &a->in[1], *out = &a->out[0];
  double decay = rt_attr(a, "decay", -1.0);
  REQUIRE(e->dtype == RT_F32 && out->dtype == RT_F32 && is_float(p) && e->numel == p->numel && out->numel == p->numel,
          "ema f32 and param float, the same size");
  REQUIRE(decay >= 0 && decay <= 1, "attribute decay %g must be in [0, 1]", decay);
  Ema k = {p, e->data, out->data, (float)decay};
  par_for(a, p->numel, GRAIN, ema_update, &k);
  return 0;
}

const rt_KernelEntry rt_cpu_kernels[] = {
  RT_BUILTIN_KERNELS(RT_KERNEL_ENTRY)
  {NULL, NULL},
};
