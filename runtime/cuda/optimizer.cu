/*
 * optimizer.cu - the optimizer phase's ops: AdamW (with f32 master weights
 * where the graph has them) and the EMA of the weights.
 */
#include "cuda.cuh"

typedef struct {
  float lr, beta1, beta2, eps, wd, bc1, bc2;
} AdamW;

__global__ void adamw_k(DV param_out, DV param, const float *m, const float *v, const float *master, float *m_out,
                        float *v_out, float *master_out, DV grad, int64_t n, AdamW h) {
  GRID_STRIDE(i, n) {
    float g = ld(grad, i);
    float p = master ? master[i] : ld(param, i);
    float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    float mh = mi / h.bc1, vh = vi / h.bc2;
    p -= h.lr * (mh / (sqrtf(vh) + h.eps) + h.wd * p);
    m_out[i] = mi;
    v_out[i] = vi;
    if (master) master_out[i] = p;
    st(param_out, i, p);
  }
}

int rt_cuda_k_adamw(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "adamw";
  REQUIRE((a->nin == 4 && a->nout == 3) || (a->nin == 5 && a->nout == 4),
          "want inputs (param, grad, m, v[, master]) and outputs (param, m, v[, master])");
  const rt_View *grad = &a->in[1];
  int64_t n = a->in[0].numel;
  for (int i = 0; i < a->nout; i++) {
    const rt_View *in = &a->in[i == 0 ? 0 : i + 1], *out = &a->out[i];
    REQUIRE(in->numel == n && out->numel == n && in->dtype == out->dtype, "state %d: shapes or dtypes differ", i);
    REQUIRE(i == 0 ? is_float(out) : out->dtype == RT_F32, "param must be float, m, v and master f32");
  }
  REQUIRE(is_float(grad) && grad->numel == n, "grad must be float, param's size");
  REQUIRE(a->step >= 1, "step %lld: the step number is 1-based", (long long)a->step);
  AdamW h;
  double b1 = rt_attr(a, "beta1", 0.9), b2 = rt_attr(a, "beta2", 0.999);
  h.lr = (float)rt_attr(a, "lr", 1e-3);
  h.beta1 = (float)b1;
  h.beta2 = (float)b2;
  h.eps = (float)rt_attr(a, "eps", 1e-8);
  h.wd = (float)rt_attr(a, "weight_decay", 0.01);
  h.bc1 = (float)(1.0 - pow(b1, (double)a->step));
  h.bc2 = (float)(1.0 - pow(b2, (double)a->step));
  int wm = a->nin == 5;
  adamw_k<<<nblocks(n, THREADS), THREADS, 0, ctx_of(a)->stream>>>(
      dv(&a->out[0]), dv(&a->in[0]), (const float *)a->in[2].data, (const float *)a->in[3].data,
      wm ? (const float *)a->in[4].data : NULL, (float *)a->out[1].data, (float *)a->out[2].data,
      wm ? (float *)a->out[3].data : NULL, dv(grad), n, h);
  return rt_cuda_launched(err, errlen, OP);
}

__global__ void ema_k(float *out, const float *ema, DV param, float d, int64_t n) {
  float c = 1.0f - d;
  GRID_STRIDE(i, n) out[i] = d * ema[i] + c * ld(param, i);
}

int rt_cuda_k_ema(const rt_KernelArgs *a, char *err, size_t errlen) {
  const char *OP = "ema";
  REQUIRE(a->nin == 2 && a->nout == 1, "want inputs (ema, param) and output ema");
  const rt_View *e = &a->in[0], *p = &a->in[1], *out = &a->out[0];
  double decay = rt_attr(a, "decay", -1.0);
  REQUIRE(e->dtype == RT_F32 && out->dtype == RT_F32 && is_float(p) && e->numel == p->numel && out->numel == p->numel,
          "ema f32 and param float, the same size");
  REQUIRE(decay >= 0 && decay <= 1, "attribute decay %g must be in [0, 1]", decay);
  ema_k<<<nblocks(p->numel, THREADS), THREADS, 0, ctx_of(a)->stream>>>((float *)out->data, (const float *)e->data,
                                                                       dv(p), (float)decay, p->numel);
  return rt_cuda_launched(err, errlen, OP);
}
