/*
 * kernels_fast.h - internal to libration: what the CPU kernels
 * (kernels_cpu.c) share with their fast path (kernels_fast.c): the
 * reference GEMM, the ops' argument structs, the fast matmul and attention
 * that run on the CPU backend's pool through BLAS, and the fast norms,
 * elementwise ops, cross-entropy and AdamW (vectorized loops).
 */
#ifndef RT_KERNELS_FAST_H
#define RT_KERNELS_FAST_H

#include "kernels.h"
#include "rt_pool.h"

/* A GEMM operand read through strides: element (i,j) is at i*s0 + j*s1. */
typedef struct rt_Operand {
  const rt_View *v;
  int64_t s0, s1;
} rt_Operand;

/* The reference GEMM: out (M x N, row-major) = [out +] A B [+ bias], each
 * element summed over k in ascending order. */
void rt_gemm_ref(const rt_View *out, int accumulate, const rt_View *bias, const rt_Operand *A,
                 const rt_Operand *B, int64_t M, int64_t N, int64_t K);

/* C (M x N, row-major, ldc N) = [C +] op(A) op(B) on f32 arrays, op
 * transposing when TA or TB is set; on the calling thread only. OpenBLAS
 * (Debian's pthread build, loaded at first use and pinned to one thread:
 * the pool's threads call it side by side) when it can be loaded, else
 * rt_gemm_ref. */
void rt_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
              int64_t ldb, int accumulate, float *C);
/* What rt_sgemm runs: OpenBLAS's configuration ("OpenBLAS 0.3.21 ...") or
 * "built-in GEMM". */
const char *rt_sgemm_name(void);

typedef struct rt_AttnShape {
  int64_t B, T, NH, KVH, hd, row; /* row: elements per token of qkv */
  float scale;
} rt_AttnShape;

/* layernorm and rmsnorm, forward and backward (y is dx in the backward,
 * b is db, and dw the weight's gradient); rmsnorm has no mean and no b. */
typedef struct rt_Norm {
  const rt_View *y, *x, *w, *b, *dy, *dw;
  float *mean, *rstd;
  int64_t N, C;
  float eps;
} rt_Norm;

/* crossentropy: rows are LD long, of which the first V are the vocabulary
 * (a padded vocabulary's other columns are not classes). */
typedef struct rt_CrossEntropy {
  const rt_View *dlogits, *logits;
  float *lse;
  const int32_t *tgt;
  int64_t N, V, LD, M; /* M: the rows the mean is over */
} rt_CrossEntropy;

typedef struct rt_AdamW {
  const rt_View *param, *param_out, *m_out, *v_out, *master_out, *grad;
  const float *m, *v, *master;
  float lr, beta1, beta2, eps, wd, bc1, bc2;
} rt_AdamW;

/* rope, or its backward (sign -1: the inverse rotation) */
typedef struct rt_Rope {
  const rt_View *out, *in;
  const rt_AttnShape *s;
  double theta;
  float sign;
} rt_Rope;

/* Kernels' bodies once their arguments are checked, on POOL's threads. */
void rt_fast_matmul_forward(rt_Pool *pool, const rt_View *y, const rt_View *x, const rt_View *w,
                            const rt_View *bias, int64_t N, int64_t C, int64_t OC);
/* dx and dw, either NULL when not wanted (dbias is the caller's). */
void rt_fast_matmul_backward(rt_Pool *pool, const rt_View *dx, const rt_View *dw, const rt_View *dy,
                             const rt_View *x, const rt_View *w, int64_t N, int64_t C, int64_t OC);
/* 0 when done, 1 when the shapes need more scratch than a thread has (the
 * caller runs the reference loops). */
int rt_fast_attention_forward(rt_Pool *pool, const rt_View *y, float *lse, const rt_View *qkv,
                              const rt_AttnShape *s);
int rt_fast_attention_backward(rt_Pool *pool, const rt_View *dqkv, const rt_View *dy, const rt_View *qkv,
                               const rt_View *y, const float *lse, const rt_AttnShape *s);
/* The same return: 1 when a row of C elements does not fit a thread's
 * scratch. RMS selects rmsnorm (K's mean and b unused). The backward
 * computes dx when K's y is set, dw (and db) when K's dw is. */
int rt_fast_norm_forward(rt_Pool *pool, const rt_Norm *k, int rms);
int rt_fast_norm_backward(rt_Pool *pool, const rt_Norm *k, int rms);
/* lse per row (the loss is the caller's), or dlogits when K's dlogits is
 * set; 1 when a row does not fit a thread's scratch. */
int rt_fast_crossentropy(rt_Pool *pool, const rt_CrossEntropy *k);
/* Elementwise, N elements: y = a + b; gelu (tanh form) of x, or when DY is
 * set its backward into y (dx); swiglu of gu [.., 2F] into y [.., F], or
 * when DY is set its backward into y (dgu); AdamW's update. */
void rt_fast_add(rt_Pool *pool, const rt_View *y, const rt_View *a, const rt_View *b, int64_t n);
void rt_fast_gelu(rt_Pool *pool, const rt_View *y, const rt_View *x, const rt_View *dy, int64_t n);
void rt_fast_swiglu(rt_Pool *pool, const rt_View *y, const rt_View *gu, const rt_View *dy, int64_t N, int64_t F);
void rt_fast_adamw(rt_Pool *pool, const rt_AdamW *h, int64_t n);
/* rope with each position's angles computed once for all the batch (the
 * reference's values, so its bits); 1 when a row does not fit a thread's
 * scratch. */
int rt_fast_rope(rt_Pool *pool, const rt_Rope *k);
/* dbias += dy summed over its N rows of OC, rows in order (the reference's bits). */
void rt_fast_dbias(rt_Pool *pool, const rt_View *dbias, const rt_View *dy, int64_t N, int64_t OC);

#endif
