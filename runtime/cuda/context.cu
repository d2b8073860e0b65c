/*
 * context.cu - the CUDA kernels' context (the compute stream, the cuBLASLt
 * handle and its workspace, the status word that kernels set on a bad
 * token id), their error reporting, and the table that maps each op type
 * of docs/OPS.md to its kernel, custom kernels first.
 */
#include "cuda.cuh"

#define STATUS_BYTES 256 /* the status word's share of the runtime bytes, aligned for cuBLASLt */

int rt_cuda_fail(char *err, size_t errlen, int code, const char *op, const char *fmt, ...) {
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

int rt_cuda_launched(char *err, size_t errlen, const char *op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, op, "%s", cudaGetErrorString(e));
  return 0;
}

extern "C" int rt_cuda_kernel_ctx_create(rt_CudaKernelCtx **out, void *stream, char *err, size_t errlen) {
  const char *OP = "cuda kernels";
  rt_CudaKernelCtx *c = (rt_CudaKernelCtx *)calloc(1, sizeof *c);
  *out = NULL;
  if (!c) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, OP, "out of host memory");
  c->stream = (cudaStream_t)stream;
  if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
    free(c);
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, OP, "cublasLtCreate failed");
  }
  *out = c;
  return 0;
}

extern "C" int rt_cuda_kernel_ctx_set_runtime(rt_CudaKernelCtx *c, void *bytes, int64_t n, char *err, size_t errlen) {
  if (c->status || n < STATUS_BYTES) return 0;
  cudaError_t e = cudaMemset(bytes, 0, sizeof(int));
  if (e != cudaSuccess) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "cuda kernels", "%s", cudaGetErrorString(e));
  c->status = (int *)bytes;
  c->lt_ws = n > STATUS_BYTES ? (unsigned char *)bytes + STATUS_BYTES : NULL;
  c->lt_ws_bytes = (size_t)(n - STATUS_BYTES);
  return 0;
}

extern "C" int rt_cuda_kernel_ctx_ready(rt_CudaKernelCtx *c, char *err, size_t errlen) {
  if (c->status) return 0;
  cudaError_t e = cudaMalloc((void **)&c->status, sizeof(int));
  if (e == cudaSuccess) e = cudaMemset(c->status, 0, sizeof(int));
  if (e != cudaSuccess) {
    if (c->status) cudaFree(c->status);
    c->status = NULL;
    return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "cuda kernels", "status word: %s", cudaGetErrorString(e));
  }
  c->own_status = true;
  return 0;
}

extern "C" void rt_cuda_kernel_ctx_destroy(rt_CudaKernelCtx *c) {
  if (!c) return;
  for (int i = 0; i < c->nplans; i++) {
    Plan *p = &c->plans[i];
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->desc);
  }
  if (c->lt) cublasLtDestroy(c->lt);
  if (c->own_status) cudaFree(c->status);
  free(c);
}

extern "C" int rt_cuda_kernel_ctx_status(rt_CudaKernelCtx *c, char *err, size_t errlen) {
  int h = 0;
  if (!c->status) return 0;
  cudaError_t e = cudaMemcpy(&h, c->status, sizeof h, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && h) e = cudaMemset(c->status, 0, sizeof(int));
  if (e != cudaSuccess) return rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, "cuda kernels", "%s", cudaGetErrorString(e));
  if (h) return rt_cuda_fail(err, errlen, RT_KERNEL_EVALUE, "cuda kernels", "a token or target id was outside [0, V)");
  return 0;
}

/* Whether WORD is one of LIST's words (separated by commas or spaces). */
static bool word_listed(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; *p;) {
    size_t k = strcspn(p, ", ");
    if (k == n && !strncmp(p, word, n)) return true;
    p += k;
    p += strspn(p, ", ");
  }
  return false;
}

bool rt_cuda_next_kernel(const char *op) {
  static const char *list;
  static bool read;
  if (!read) {
    list = getenv("RATION_CUDA_KERNELS");
    read = true;
  }
  return list && (!strcmp(list, "next") || word_listed(list, op));
}

/* ------------------------------------------------------------ registry */

#define CUDA_KERNEL_ENTRY(op) {#op, rt_cuda_k_##op},
static const rt_KernelEntry cuda_kernels[] = {
  RT_BUILTIN_KERNELS(CUDA_KERNEL_ENTRY)
  {NULL, NULL},
};

/* Custom CUDA kernels, looked up before the built-ins so that they can
 * replace them; registered before steps run, as on the CPU. */
#define CUSTOM_CAP 64
static rt_KernelSlot custom[CUSTOM_CAP];
static int ncustom;

extern "C" int rt_cuda_kernel_register(const char *type, rt_KernelFn fn) {
  return rt_kernel_slot_put(custom, &ncustom, CUSTOM_CAP, type, fn);
}

extern "C" rt_KernelFn rt_cuda_kernel_find(const char *type) {
  if (!type) return NULL;
  rt_KernelFn fn = rt_kernel_slot_find(custom, ncustom, type);
  if (fn) return fn;
  for (const rt_KernelEntry *e = cuda_kernels; e->type; e++)
    if (strcmp(e->type, type) == 0) return e->fn;
  return NULL;
}
