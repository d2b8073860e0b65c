/*
 * matmul.cu - matmul and its backward through cuBLASLt, with a plan
 * (descriptors, layouts, algorithm) chosen once per shape and kept in the
 * context; the bias gradient by a deterministic column sum.
 */
#include "cuda.cuh"

static cudaDataType_t lt_type(int dt) {
  return dt == RT_F32 ? CUDA_R_32F : dt == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The plan for one product shape, made on first use and kept: cuBLASLt's
 * heuristic runs once per shape, not per step. */
static int plan_get(rt_CudaKernelCtx *c, const Plan *key, Plan **out, char *err, size_t errlen) {
  const char *OP = "matmul";
  for (int i = 0; i < c->nplans; i++) {
    Plan *p = &c->plans[i];
    if (p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda && p->ldb == key->ldb &&
        p->ldc == key->ldc && p->dtype == key->dtype && p->ta == key->ta && p->tb == key->tb &&
        p->bias == key->bias && p->beta == key->beta) {
      *out = p;
      return 0;
    }
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
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int nres = 0;
  size_t wsb = c->lt_ws_bytes;
  ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres) ==
           CUBLAS_STATUS_SUCCESS &&
       nres > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (!ok) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, OP, "no cuBLASLt algorithm for %lldx%lldx%lld", (long long)key->m,
                (long long)key->n, (long long)key->k);
  }
  p->algo = res.algo;
  c->nplans++;
  *out = p;
  return 0;
}

/* Column-major D(m,n) = op(A) op(B) (+ beta D) (+ bias[m]). */
static int lt_matmul(rt_CudaKernelCtx *c, int64_t m, int64_t n, int64_t k, const void *A, int ta, int64_t lda,
                     const void *B, int tb, int64_t ldb, void *D, int64_t ldc, int dtype, int beta1,
                     const void *bias, char *err, size_t errlen) {
  Plan key;
  memset(&key, 0, sizeof key);
  key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
  key.dtype = dtype, key.ta = ta, key.tb = tb, key.bias = bias != NULL, key.beta = beta1;
  Plan *p = NULL;
  int rc = plan_get(c, &key, &p, err, errlen);
  if (rc) return rc;
  if (bias && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                  CUBLAS_STATUS_SUCCESS)
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "matmul", "cannot set the bias pointer");
  float alpha = 1.0f, beta = beta1 ? 1.0f : 0.0f;
  if (cublasLtMatmul(c->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->lc, D, p->lc, &p->algo, c->lt_ws,
                     c->lt_ws_bytes, c->stream) != CUBLAS_STATUS_SUCCESS)
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "matmul", "cublasLtMatmul failed");
  return 0;
}

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
  /* row-major y[N,OC] = x w^T is column-major y^T(OC,N) = w^T(stored) ^T x^T */
  return lt_matmul(ctx_of(a), OC, N, C, w->data, 1, C, x->data, 0, C, y->data, OC, x->dtype, 0,
                   bias ? bias->data : NULL, err, errlen);
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
  if (dx) rc = lt_matmul(c, C, N, OC, w->data, 0, C, dy->data, 0, OC, dx->data, C, x->dtype, 0, NULL, err, errlen);
  if (!rc && dw)
    rc = lt_matmul(c, C, OC, N, x->data, 0, C, dy->data, 1, OC, dw->data, C, x->dtype, 1, NULL, err, errlen);
  if (rc || !dbias) return rc;
  rt_cuda_colsum(c, dv(dbias), dv_none(), dv(dy), dv_none(), NULL, NULL, N, OC, COLSUM_DY);
  return rt_cuda_launched(err, errlen, OP);
}
