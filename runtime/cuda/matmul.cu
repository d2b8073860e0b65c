/*
 * matmul.cu - matmul and its backward through cuBLASLt, with a plan
 * (descriptors, layouts, algorithm) chosen once per shape, operand
 * alignment and workspace and kept in the context; the bias gradient by a
 * deterministic column sum. RATION_CUDA_KERNELS=next stages products
 * whose rows are not whole 16-byte vectors (gpt2's vocabulary of 50,257)
 * through padded rows in the workspace (gpu/KERNELS.md).
 */
#include "cuda.cuh"

static cudaDataType_t lt_type(int dt) {
  return dt == RT_F32 ? CUDA_R_32F : dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The largest power of two up to 256 that divides P's address: what the
 * heuristic must assume of the operand (it assumes 256 unless told). */
static uint32_t alignment_of(const void *p) {
  uint32_t a = 256;
  while (a > 1 && (uintptr_t)p % a) a >>= 1;
  return a;
}

static bool same_plan(const Plan *p, const Plan *key) {
  return p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda && p->ldb == key->ldb &&
         p->ldc == key->ldc && p->dtype == key->dtype && p->ta == key->ta && p->tb == key->tb &&
         p->bias == key->bias && p->beta == key->beta && p->align_a == key->align_a && p->align_b == key->align_b &&
         p->align_c == key->align_c && p->ws_bytes == key->ws_bytes;
}

#define LT_RESULTS 8 /* heuristic results asked for; the first that cuBLASLt says works is taken */

/* The heuristic's first working algorithm for P's descriptors, told the
 * operands' real alignment and the workspace P may use; 0 or -1. */
static int choose_algo(rt_CudaKernelCtx *c, Plan *p) {
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res[LT_RESULTS];
  int nres = 0;
  uint32_t align_d = p->align_c;
  bool ok = cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
  const struct {
    cublasLtMatmulPreferenceAttributes_t attr;
    const void *v;
    size_t n;
  } prefs[] = {
    {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->ws_bytes, sizeof p->ws_bytes},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->align_a, sizeof p->align_a},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->align_b, sizeof p->align_b},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->align_c, sizeof p->align_c},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d},
  };
  for (size_t i = 0; ok && i < sizeof prefs / sizeof prefs[0]; i++)
    ok = cublasLtMatmulPreferenceSetAttribute(pref, prefs[i].attr, prefs[i].v, prefs[i].n) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, LT_RESULTS, res, &nres) ==
                 CUBLAS_STATUS_SUCCESS;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  for (int i = 0; ok && i < nres; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= p->ws_bytes) {
      p->algo = res[i].algo;
      return 0;
    }
  return -1;
}

/* The plan for one product, made on first use and kept: cuBLASLt's
 * heuristic runs once per shape, not per step. */
static int plan_get(rt_CudaKernelCtx *c, const Plan *key, Plan **out, char *err, size_t errlen) {
  const char *OP = "matmul";
  for (int i = 0; i < c->nplans; i++)
    if (same_plan(&c->plans[i], key)) {
      *out = &c->plans[i];
      return 0;
    }
  if (c->nplans == PLAN_CAP) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, OP, "more than %d matmul shapes", PLAN_CAP);
  Plan *p = &c->plans[c->nplans];
  *p = *key;
  cudaDataType_t t = lt_type(key->dtype);
  cublasOperation_t opa = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ok = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  if (!ok) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, OP, "cublasLtMatmulDescCreate failed");
  ok = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) == CUBLAS_STATUS_SUCCESS;
  if (ok && key->bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    ok = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS;
  }
  /* Stored operands are column-major matrices of (rows, cols, ld). */
  ok = ok &&
       cublasLtMatrixLayoutCreate(&p->la, t, (uint64_t)(key->ta ? key->k : key->m), (uint64_t)(key->ta ? key->m : key->k),
                                  key->lda) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&p->lb, t, (uint64_t)(key->tb ? key->n : key->k), (uint64_t)(key->tb ? key->k : key->n),
                                  key->ldb) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&p->lc, t, (uint64_t)key->m, (uint64_t)key->n, key->ldc) == CUBLAS_STATUS_SUCCESS;
  if (!ok || choose_algo(c, p) != 0) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, OP, "no working cuBLASLt algorithm for %lldx%lldx%lld (ld %lld %lld %lld)",
                        (long long)key->m, (long long)key->n, (long long)key->k, (long long)key->lda,
                        (long long)key->ldb, (long long)key->ldc);
  }
  c->nplans++;
  *out = p;
  return 0;
}

/* Column-major D(m,n) = op(A) op(B) (+ beta D) (+ bias[m]), with WS_BYTES
 * of workspace at WS. */
static int lt_matmul(rt_CudaKernelCtx *c, int64_t m, int64_t n, int64_t k, const void *A, int ta, int64_t lda,
                     const void *B, int tb, int64_t ldb, void *D, int64_t ldc, int dtype, int beta1,
                     const void *bias, void *ws, size_t ws_bytes, char *err, size_t errlen) {
  Plan key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.dtype = dtype, key.ta = ta, key.tb = tb, key.bias = bias != NULL, key.beta = beta1;
  key.align_a = alignment_of(A), key.align_b = alignment_of(B), key.align_c = alignment_of(D);
  key.ws_bytes = ws ? ws_bytes : 0;
  Plan *p = NULL;
  int rc = plan_get(c, &key, &p, err, errlen);
  if (rc) return rc;
  if (bias && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                  CUBLAS_STATUS_SUCCESS)
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "matmul", "cannot set the bias pointer");
  float alpha = 1.0f, beta = beta1 ? 1.0f : 0.0f;
  if (cublasLtMatmul(c->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo, ws,
                     key.ws_bytes, c->stream) != CUBLAS_STATUS_SUCCESS)
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "matmul", "cublasLtMatmul failed");
  return 0;
}

/* ------------------------------------------------- staged products, next */

/* A row-major operand of W elements a row whose rows are not whole 16-byte
 * vectors gives cuBLASLt a leading dimension no tensor-core kernel takes
 * (gpt2's logits, W = 50,257): the next kernels copy it in blocks into
 * rows padded to 16 bytes in the first part of the workspace (the rest
 * stays cuBLASLt's) and run each block's product there. Each output element
 * is still one product over the whole k, in one cuBLASLt call: the blocks
 * split only the rows (forward, dx) or the columns (dw) of the output. */
#define STAGE_ALIGN 256

typedef struct {
  unsigned char *buf; /* the staging rows */
  size_t bytes;
  void *ws; /* what is left for cuBLASLt */
  size_t ws_bytes;
} Stage;

/* The staging area for rows of W elements of ES bytes, or false where the
 * rows are already whole vectors, the op's next kernel is not selected or
 * the workspace holds no padded row. The padding is never read: every
 * product is told the real row length. */
static bool stage_for(rt_CudaKernelCtx *c, const char *op, int64_t W, int64_t es, Stage *s) {
  if (!rt_cuda_next_kernel(op) || (W * es) % 16 == 0 || !c->lt_ws) return false;
  size_t cut = c->lt_ws_bytes / 4 * 3 / STAGE_ALIGN * STAGE_ALIGN;
  s->buf = (unsigned char *)c->lt_ws, s->bytes = cut;
  s->ws = s->buf + cut, s->ws_bytes = c->lt_ws_bytes - cut;
  return cut >= (size_t)(W * es + 16);
}

static int64_t padded(int64_t W, int64_t es) { return (W * es + 15) / 16 * 16 / es; }

static int copy_rows(rt_CudaKernelCtx *c, void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width,
                     int64_t rows, char *err, size_t errlen, const char *op) {
  cudaError_t e = cudaMemcpy2DAsync(dst, (size_t)dpitch, src, (size_t)spitch, (size_t)width, (size_t)rows,
                                    cudaMemcpyDeviceToDevice, c->stream);
  return e == cudaSuccess ? 0 : rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, op, "%s", cudaGetErrorString(e));
}

/* y[N,OC] = x[N,C] w^T (+ bias) by blocks of rows computed into padded rows, then copied to y. */
static int staged_forward(rt_CudaKernelCtx *c, const Stage *s, const rt_View *x, const rt_View *w, const void *bias,
                          const rt_View *y, int64_t N, int64_t C, int64_t OC, char *err, size_t errlen) {
  int64_t es = rt_dtype_size(x->dtype), P = padded(OC, es), R = (int64_t)(s->bytes / (size_t)(P * es));
  for (int64_t n0 = 0; n0 < N; n0 += R) {
    int64_t rows = N - n0 < R ? N - n0 : R;
    int rc = lt_matmul(c, OC, rows, C, w->data, 1, C, (const char *)x->data + n0 * C * es, 0, C, s->buf, P, x->dtype,
                       0, bias, s->ws, s->ws_bytes, err, errlen);
    if (!rc) rc = copy_rows(c, (char *)y->data + n0 * OC * es, OC * es, s->buf, P * es, OC * es, rows, err, errlen, "matmul");
    if (rc) return rc;
  }
  return 0;
}

/* dx[N,C] = dy[N,OC] w by blocks of dy's rows copied into padded rows. */
static int staged_dx(rt_CudaKernelCtx *c, const Stage *s, const rt_View *dy, const rt_View *w, const rt_View *dx,
                     int64_t N, int64_t C, int64_t OC, char *err, size_t errlen) {
  int64_t es = rt_dtype_size(dy->dtype), P = padded(OC, es), R = (int64_t)(s->bytes / (size_t)(P * es));
  for (int64_t n0 = 0; n0 < N; n0 += R) {
    int64_t rows = N - n0 < R ? N - n0 : R;
    int rc = copy_rows(c, s->buf, P * es, (const char *)dy->data + n0 * OC * es, OC * es, OC * es, rows, err, errlen,
                       "matmul_backward");
    if (!rc)
      rc = lt_matmul(c, C, rows, OC, w->data, 0, C, s->buf, 0, P, (char *)dx->data + n0 * C * es, C, dy->dtype, 0,
                     NULL, s->ws, s->ws_bytes, err, errlen);
    if (rc) return rc;
  }
  return 0;
}

/* Columns of dy a block of staged_dw takes (whole 16-byte vectors of N
 * rows); 0 where not one vector fits. */
static int64_t dw_block_cols(const Stage *s, int64_t N, int64_t es) {
  int64_t vec = 16 / es;
  return N > 0 ? (int64_t)(s->bytes / (size_t)(N * es)) / vec * vec : 0;
}

/* dw[OC,C] += dy^T x by blocks of dy's columns copied into rows of their
 * own; each dw element is still one product over all N rows. */
static int staged_dw(rt_CudaKernelCtx *c, const Stage *s, const rt_View *dy, const rt_View *x, const rt_View *dw,
                     int64_t N, int64_t C, int64_t OC, char *err, size_t errlen) {
  int64_t es = rt_dtype_size(dy->dtype), Wb = dw_block_cols(s, N, es);
  for (int64_t o0 = 0; o0 < OC; o0 += Wb) {
    int64_t cols = OC - o0 < Wb ? OC - o0 : Wb, P = padded(cols, es);
    int rc = copy_rows(c, s->buf, P * es, (const char *)dy->data + o0 * es, OC * es, cols * es, N, err, errlen,
                       "matmul_backward");
    if (!rc)
      rc = lt_matmul(c, C, cols, N, x->data, 0, C, s->buf, 1, P, (char *)dw->data + o0 * C * es, C, dy->dtype, 1,
                     NULL, s->ws, s->ws_bytes, err, errlen);
    if (rc) return rc;
  }
  return 0;
}

/* ------------------------------------------------------------ entry points */

int rt_cuda_k_matmul(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "matmul";
  REQUIRE((a->nin == 2 || a->nin == 3) && a->nout == 1, "want inputs (x, w[, bias]) and 1 output");
  const rt_View *x = &a->in[0], *w = &a->in[1], *bias = a->nin == 3 ? &a->in[2] : NULL, *y = &a->out[0];
  REQUIRE(is_float(x) && w->dtype == x->dtype && y->dtype == x->dtype && (!bias || bias->dtype == x->dtype),
          "x, w, bias, y must share one float dtype on CUDA");
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(w->rank == 2 && w->shape[1] == C, "w must be [OC, C] with C the last dim of x");
  int64_t OC = w->shape[0];
  REQUIRE(last_dim(y) == OC && y->numel == N * OC && (!bias || bias->numel == OC), "y must be [.., OC], bias [OC]");
  rt_CudaKernelCtx *c = ctx_of(a);
  Stage s;
  if (stage_for(c, OP, OC, rt_dtype_size(x->dtype), &s))
    return staged_forward(c, &s, x, w, bias ? bias->data : NULL, y, N, C, OC, err, errlen);
  /* row-major y[N,OC] = x w^T is column-major y^T(OC,N) = w^T(stored) ^T x^T */
  return lt_matmul(c, OC, N, C, w->data, 1, C, x->data, 0, C, y->data, OC, x->dtype, 0, bias ? bias->data : NULL,
                   c->lt_ws, c->lt_ws_bytes, err, errlen);
}

int rt_cuda_k_matmul_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "matmul_backward";
  const rt_View *g[3];
  REQUIRE(a->nin == 3 && a->nout >= 1 && rt_grad_outputs(a, 3, g) == 0,
          "want inputs (dy, x, w) and outputs (dx, dw[, dbias]) or those \"grads\" names");
  const rt_View *dy = &a->in[0], *x = &a->in[1], *w = &a->in[2], *dx = g[0], *dw = g[1], *dbias = g[2];
  REQUIRE(is_float(x) && dy->dtype == x->dtype && w->dtype == x->dtype && (!dx || dx->dtype == x->dtype) &&
          (!dw || dw->dtype == x->dtype) && (!dbias || is_float(dbias)),
          "dy, x, w, dx, dw must share one float dtype on CUDA");
  int64_t C = last_dim(x), N = C ? x->numel / C : 0;
  REQUIRE(w->rank == 2 && w->shape[1] == C, "w must be [OC, C] with C the last dim of x");
  int64_t OC = w->shape[0];
  REQUIRE(dy->numel == N * OC && (!dx || dx->numel == x->numel) && (!dw || dw->numel == w->numel) &&
          (!dbias || dbias->numel == OC), "shapes do not match matmul's");
  rt_CudaKernelCtx *c = ctx_of(a);
  int64_t es = rt_dtype_size(x->dtype);
  Stage s;
  bool staged = stage_for(c, OP, OC, es, &s);
  /* dx^T(C,N) = w^T(C,OC) dy^T(OC,N); dw^T(C,OC) += x^T(C,N) dy(N,OC) */
  int rc = 0;
  if (dx)
    rc = staged ? staged_dx(c, &s, dy, w, dx, N, C, OC, err, errlen)
                : lt_matmul(c, C, N, OC, w->data, 0, C, dy->data, 0, OC, dx->data, C, x->dtype, 0, NULL, c->lt_ws,
                            c->lt_ws_bytes, err, errlen);
  if (!rc && dw)
    rc = staged && dw_block_cols(&s, N, es) > 0
             ? staged_dw(c, &s, dy, x, dw, N, C, OC, err, errlen)
             : lt_matmul(c, C, OC, N, x->data, 0, C, dy->data, 1, OC, dw->data, C, x->dtype, 1, NULL, c->lt_ws,
                         c->lt_ws_bytes, err, errlen);
  if (rc || !dbias) return rc;
  rt_cuda_colsum(c, dv(dbias), dv_none(), dv(dy), dv_none(), NULL, NULL, N, OC, COLSUM_DY);
  return rt_cuda_launched(err, errlen, OP);
}
