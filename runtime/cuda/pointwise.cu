/*
 * pointwise.cu - the elementwise ops (gelu, swiglu, add, lora_add, each
 * with its backward) and the copies (slice, concat_rows).
 * RATION_CUDA_KERNELS=next runs gelu, gelu_backward and add with 16-byte
 * loads (gpu/KERNELS.md).
 */
#include "cuda.cuh"

#define GELU_K 0.7978845608028654f

__device__ __forceinline__ float gelu_of(float v) {
  float u = GELU_K * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.0f + tanhf(u));
}

/* d gelu / dx at v. */
__device__ __forceinline__ float gelu_slope(float v) {
  float u = GELU_K * (v + 0.044715f * v * v * v);
  float th = tanhf(u);
  float du = GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
  return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
}

__global__ void gelu_forward_k(DV y, DV x, int64_t n) {
  GRID_STRIDE(i, n) st(y, i, gelu_of(ld(x, i)));
}

__global__ void gelu_backward_k(DV dx, DV dy, DV x, int64_t n) {
  GRID_STRIDE(i, n) st(dx, i, ld(dy, i) * gelu_slope(ld(x, i)));
}

/* RATION_CUDA_KERNELS=next (gpu/KERNELS.md): the same arithmetic as the
 * kernels above, element for element, with 16-byte loads and stores, so
 * bitwise their results. a and b: x (gelu), dy and x (gelu_backward), the
 * two addends (add). */
enum { PW_GELU, PW_GELU_BACKWARD, PW_ADD };

template <int OP>
__global__ void pointwise8_k(DV y, DV a, DV b, int64_t vectors) {
  GRID_STRIDE(i, vectors) {
    float p[NEXT_VEC], q[NEXT_VEC], r[NEXT_VEC];
    ld8(a, i * NEXT_VEC, p);
    if (OP != PW_GELU) ld8(b, i * NEXT_VEC, q);
    for (int e = 0; e < NEXT_VEC; e++)
      r[e] = OP == PW_GELU ? gelu_of(p[e]) : OP == PW_GELU_BACKWARD ? p[e] * gelu_slope(q[e]) : p[e] + q[e];
    st8(y, i * NEXT_VEC, r);
  }
}

/* Whether the vector kernel ran: only when op's next kernel is selected
 * and every view is whole aligned vectors. */
template <int OP>
static bool pointwise8(const char *op, cudaStream_t s, const rt_View *y, const rt_View *a, const rt_View *b) {
  int64_t n = y->numel;
  if (!rt_cuda_next_kernel(op) || !vec_ok(y, n) || !vec_ok(a, n) || (b && !vec_ok(b, n))) return false;
  pointwise8_k<OP><<<nblocks(n / NEXT_VEC, THREADS), THREADS, 0, s>>>(dv(y), dv(a), b ? dv(b) : dv_none(),
                                                                     n / NEXT_VEC);
  return true;
}

int rt_cuda_k_gelu(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "gelu";
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input and 1 output");
  int64_t n = a->in[0].numel;
  REQUIRE(is_float(&a->in[0]) && is_float(&a->out[0]) && a->out[0].numel == n, "x and y must be float and the same size");
  if (!pointwise8<PW_GELU>(OP, ctx_of(a)->stream, &a->out[0], &a->in[0], NULL))
    gelu_forward_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(&a->out[0]), dv(&a->in[0]), n);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_gelu_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "gelu_backward";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs (dy, x) and 1 output (dx)");
  int64_t n = a->in[1].numel;
  REQUIRE(is_float(&a->in[0]) && is_float(&a->in[1]) && is_float(&a->out[0]) && a->in[0].numel == n &&
          a->out[0].numel == n, "dy, x, dx must be float and the same size");
  if (!pointwise8<PW_GELU_BACKWARD>(OP, ctx_of(a)->stream, &a->out[0], &a->in[0], &a->in[1]))
    gelu_backward_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(&a->out[0]), dv(&a->in[0]),
                                                                             dv(&a->in[1]), n);
  return rt_cuda_launched(err, errlen, OP);
}

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_k(DV y, DV gu, int64_t N, int64_t F) {
  GRID_STRIDE(i, N * F) {
    int64_t n = i / F, f = i % F;
    float g = ld(gu, n * 2 * F + f), u = ld(gu, n * 2 * F + F + f);
    st(y, i, g * sigmoid(g) * u);
  }
}

__global__ void swiglu_backward_k(DV dgu, DV dy, DV gu, int64_t N, int64_t F) {
  GRID_STRIDE(i, N * F) {
    int64_t n = i / F, f = i % F;
    float g = ld(gu, n * 2 * F + f), u = ld(gu, n * 2 * F + F + f);
    float d = ld(dy, i), sg = sigmoid(g);
    st(dgu, n * 2 * F + f, d * u * sg * (1.0f + g * (1.0f - sg)));
    st(dgu, n * 2 * F + F + f, d * g * sg);
  }
}

int rt_cuda_k_swiglu(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "swiglu";
  REQUIRE(a->nin == 1 && a->nout == 1, "want 1 input (gu) and 1 output (y)");
  const rt_View *gu = &a->in[0], *y = &a->out[0];
  int64_t F = last_dim(y), N = F ? y->numel / F : 0;
  REQUIRE(is_float(gu) && is_float(y) && last_dim(gu) == 2 * F && gu->numel == 2 * y->numel,
          "gu must be float [.., 2F] and y [.., F]");
  swiglu_forward_k<<<nblocks(N * F, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(y), dv(gu), N, F);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_swiglu_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "swiglu_backward";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs (dy, gu) and 1 output (dgu)");
  const rt_View *dy = &a->in[0], *gu = &a->in[1], *dgu = &a->out[0];
  int64_t F = last_dim(dy), N = F ? dy->numel / F : 0;
  REQUIRE(is_float(dy) && is_float(gu) && is_float(dgu) && last_dim(gu) == 2 * F && gu->numel == 2 * dy->numel &&
          dgu->numel == gu->numel, "dy [.., F], gu and dgu [.., 2F], float");
  swiglu_backward_k<<<nblocks(N * F, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(dgu), dv(dy), dv(gu), N, F);
  return rt_cuda_launched(err, errlen, OP);
}

__global__ void add_k(DV y, DV x, DV z, int64_t n) {
  GRID_STRIDE(i, n) st(y, i, ld(x, i) + ld(z, i));
}

int rt_cuda_k_add(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "add";
  REQUIRE(a->nin == 2 && a->nout == 1, "want 2 inputs and 1 output");
  const rt_View *x = &a->in[0], *z = &a->in[1], *y = &a->out[0];
  REQUIRE(is_float(x) && is_float(z) && is_float(y) && x->numel == y->numel && z->numel == y->numel,
          "a, b, y must be float and the same size");
  if (!pointwise8<PW_ADD>(OP, ctx_of(a)->stream, y, x, z))
    add_k<<<nblocks(y->numel, THREADS), THREADS, 0, ctx_of(a)->stream>>>(dv(y), dv(x), dv(z), y->numel);
  return rt_cuda_launched(err, errlen, OP);
}

/* ------------------------------------------------------------ lora_add */

/* out = base, with columns [off, off + W) plus scale * v (kernels_cpu.c). */
__global__ void lora_add_k(DV out, DV base, DV v, float scale, int64_t N, int64_t OC, int64_t W, int64_t off) {
  GRID_STRIDE(i, N * OC) {
    float y = ld(base, i);
    int64_t n = i / OC, j = i % OC - off;
    if (j >= 0 && j < W) y = y + scale * ld(v, n * W + j);
    st(out, i, y);
  }
}

/* dv[n, j] = scale * dy[n, off + j] */
__global__ void lora_add_backward_k(DV dv_, DV dy, float scale, int64_t N, int64_t OC, int64_t W, int64_t off) {
  GRID_STRIDE(i, N * W) st(dv_, i, scale * ld(dy, i / W * OC + off + i % W));
}

static int lora_shape(const rt_KernelArgs *a, const rt_View *y, const rt_View *v, int64_t *N, int64_t *OC, int64_t *W,
                      int64_t *off, char *err, size_t errlen, const char *OP) {
  *OC = last_dim(y), *W = last_dim(v), *N = *OC ? y->numel / *OC : 0;
  double o = rt_attr(a, "offset", 0.0);
  REQUIRE(is_float(y) && is_float(v) && *W > 0 && v->numel == *N * *W, "y [.., OC] and v [.., W] must be float, same rows");
  REQUIRE(o >= 0 && o == (double)(int64_t)o && (int64_t)o + *W <= *OC, "offset %g + W %lld exceeds OC %lld", o,
          (long long)*W, (long long)*OC);
  *off = (int64_t)o;
  return 0;
}

int rt_cuda_k_lora_add(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "lora_add";
  REQUIRE(a->nin == 2 && a->nout == 1, "want inputs (y, v) and 1 output");
  int64_t N, OC, W, off;
  int rc = lora_shape(a, &a->in[0], &a->in[1], &N, &OC, &W, &off, err, errlen, OP);
  if (rc) return rc;
  REQUIRE(is_float(&a->out[0]) && a->out[0].numel == a->in[0].numel, "the output must be float, y's size");
  lora_add_k<<<nblocks(N * OC, THREADS), THREADS, 0, ctx_of(a)->stream>>>(
      dv(&a->out[0]), dv(&a->in[0]), dv(&a->in[1]), (float)rt_attr(a, "scale", 1.0), N, OC, W, off);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_lora_add_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "lora_add_backward";
  REQUIRE(a->nin == 1 && a->nout == 1, "want input dy and output dv");
  int64_t N, OC, W, off;
  int rc = lora_shape(a, &a->in[0], &a->out[0], &N, &OC, &W, &off, err, errlen, OP);
  if (rc) return rc;
  lora_add_backward_k<<<nblocks(N * W, THREADS), THREADS, 0, ctx_of(a)->stream>>>(
      dv(&a->out[0]), dv(&a->in[0]), (float)rt_attr(a, "scale", 1.0), N, OC, W, off);
  return rt_cuda_launched(err, errlen, OP);
}

static int copy_d2d(const rt_KernelArgs *a, void *dst, const void *src, int64_t bytes, char *err, size_t errlen,
                    const char *op) {
  cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToDevice, ctx_of(a)->stream);
  return e == cudaSuccess ? 0 : rt_cuda_fail(err, errlen, RT_KERNEL_EDEVICE, op, "%s", cudaGetErrorString(e));
}

/* y = the numel(y) elements of x from element `offset` on (kernels_cpu.c). */
int rt_cuda_k_slice(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "slice";
  REQUIRE(a->nin == 1 && a->nout == 1, "want input x and output y");
  const rt_View *x = &a->in[0], *y = &a->out[0];
  double off = rt_attr(a, "offset", 0.0);
  REQUIRE(x->dtype == y->dtype, "x and y must share a dtype");
  REQUIRE(off >= 0 && off == (double)(int64_t)off && (int64_t)off + y->numel <= x->numel,
          "offset %g + %lld elements exceeds x's %lld", off, (long long)y->numel, (long long)x->numel);
  int64_t es = rt_dtype_size(x->dtype);
  return copy_d2d(a, y->data, (const char *)x->data + (int64_t)off * es, y->numel * es, err, errlen, OP);
}

/* y = x_0, x_1, ... one after another. */
int rt_cuda_k_concat_rows(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "concat_rows";
  REQUIRE(a->nin >= 1 && a->nout == 1, "want inputs x_0.. and output y");
  const rt_View *y = &a->out[0];
  int64_t n = 0, es = rt_dtype_size(y->dtype);
  for (int i = 0; i < a->nin; i++) {
    REQUIRE(a->in[i].dtype == y->dtype, "input %d's dtype is not y's", i);
    n += a->in[i].numel;
  }
  REQUIRE(n == y->numel, "inputs hold %lld elements, y %lld", (long long)n, (long long)y->numel);
  char *at = (char *)y->data;
  for (int i = 0; i < a->nin; i++) {
    int rc = copy_d2d(a, at, a->in[i].data, a->in[i].numel * es, err, errlen, OP);
    if (rc) return rc;
    at += a->in[i].numel * es;
  }
  return 0;
}
