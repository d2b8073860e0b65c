/*
 * loss.cu - crossentropy over the vocabulary rows and its backward; the
 * loss mean summed in double, as on the CPU.
 */
#include "cuda.cuh"

/* Block-wide reductions in a fixed tree: every thread ends with the value. */
__device__ float block_sum(float v, float *scratch) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < (int)(blockDim.x / 32); w++) s += scratch[w];
  __syncthreads();
  return s;
}
__device__ float block_max(float v, float *scratch) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < (int)(blockDim.x / 32); w++) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

/* A block per row: the row's max, then the sum of exponentials. Rows are
 * LD long, of which the first V are the vocabulary (kernels_cpu.c). */
__global__ void crossentropy_lse_k(float *lse, DV logits, int64_t V, int64_t LD) {
  __shared__ float scratch[THREADS / 32];
  int64_t o = (int64_t)blockIdx.x * LD;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += THREADS) mx = fmaxf(mx, ld(logits, o + v));
  mx = block_max(mx, scratch);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += THREADS) s += expf(ld(logits, o + v) - mx);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) lse[blockIdx.x] = mx + logf(s);
}

/* The mean over rows, in double: each thread sums every THREADS-th row in
 * order, then one thread adds the partial sums in order. */
__global__ void crossentropy_loss_k(float *loss, const float *lse, DV logits, const int *tgt, int64_t N, int64_t V,
                                    int64_t LD, int64_t M, int *status) {
  __shared__ double part[THREADS];
  double total = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += THREADS) {
    int t = tgt[n];
    if (t < 0 || t >= V) {
      *status = 1;
      continue;
    }
    total += (double)(lse[n] - ld(logits, n * LD + t));
  }
  part[threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int i = 0; i < THREADS; i++) sum += part[i];
    loss[0] = (float)(sum / (double)M);
  }
}

/* A block per row. */
__global__ void crossentropy_backward_k(DV dl, DV logits, const float *lse, const int *tgt, int64_t V, int64_t LD,
                                        int64_t M, int *status) {
  int64_t n = blockIdx.x, o = n * LD;
  float inv = 1.0f / (float)M, L = lse[n];
  int t = tgt[n];
  if (threadIdx.x == 0 && (t < 0 || t >= V)) *status = 1;
  for (int64_t v = threadIdx.x; v < LD; v += THREADS) {
    float p = v < V ? expf(ld(logits, o + v) - L) : 0.0f;
    st(dl, o + v, v < V ? (p - (v == t ? 1.0f : 0.0f)) * inv : 0.0f);
  }
}


int rt_cuda_k_crossentropy(const rt_KernelArgs *a, char *err, size_t errlen) {
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
  rt_CudaKernelCtx *c = ctx_of(a);
  crossentropy_lse_k<<<(unsigned)N, THREADS, 0, c->stream>>>((float *)lse->data, dv(logits), nv, V);
  crossentropy_loss_k<<<1, THREADS, 0, c->stream>>>((float *)loss->data, (const float *)lse->data, dv(logits),
                                               (const int *)tgt->data, N, nv, V, M, c->status);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_crossentropy_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
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
  rt_CudaKernelCtx *c = ctx_of(a);
  crossentropy_backward_k<<<(unsigned)N, THREADS, 0, c->stream>>>(
      dv(dl), dv(logits), (const float *)lse->data, (const int *)tgt->data, nv, V, M, c->status);
  return rt_cuda_launched(err, errlen, OP);
}
