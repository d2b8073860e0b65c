/*
 * matmul.cu - matmul and its backward through cuBLASLt, with a plan
 * (descriptors, layouts, algorithm) chosen once per shape, operand
 * alignment and workspace and kept in the context; the bias gradient by a
 * deterministic column sum.
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
  /* dx^T(C,N) = w^T(C,OC) dy^T(OC,N); dw^T(C,OC) += x^T(C,N) dy(N,OC) */
  int rc = 0;
  if (dx)
    rc = lt_matmul(c, C, N, OC, w->data, 0, C, dy->data, 0, OC, dx->data, C, x->dtype, 0, NULL, c->lt_ws,
                   c->lt_ws_bytes, err, errlen);
  if (!rc && dw)
    rc = lt_matmul(c, C, OC, N, x->data, 0, C, dy->data, 1, OC, dw->data, C, x->dtype, 1, NULL, c->lt_ws,
                   c->lt_ws_bytes, err, errlen);
  if (rc || !dbias) return rc;
  rt_cuda_colsum(c, dv(dbias), dv_none(), dv(dy), dv_none(), NULL, NULL, N, OC, COLSUM_DY);
  return rt_cuda_launched(err, errlen, OP);
}
