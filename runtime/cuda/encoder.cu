/*
 * encoder.cu - the token (and position) embedding, forward and backward:
 * encoder and embedding. RATION_CUDA_KERNELS=next sorts the token ids for
 * the backward (gpu/KERNELS.md).
 */
#include "cuda.cuh"

#include <cub/device/device_radix_sort.cuh>

__global__ void encoder_forward_k(DV x, const int *tok, DV wte, DV wpe, int64_t N, int64_t T, int64_t C,
                                  int64_t V, int *status) {
  GRID_STRIDE(i, N * C) {
    int64_t n = i / C, c = i % C;
    int t = tok[n];
    if (t < 0 || t >= V) {
      *status = 1;
      continue;
    }
    float v = ld(wte, (int64_t)t * C + c);
    if (wpe.p) v += ld(wpe, (n % T) * C + c);
    st(x, i, v);
  }
}

/* A block per vocabulary id lists, in token order, the positions holding
 * it (a block-wide prefix sum over each chunk of positions), then each
 * thread adds the listed dx rows of its columns in order in a register and
 * updates dwte once: every dwte element sums its tokens in order, with no
 * atomics, and a frequent token costs one pass over its positions rather
 * than a chain of read-modify-writes. The list lives in dynamic shared
 * memory and is flushed when full. */
#define ENC_LIST 4096

/* Each sum rounds to dwte's type after every token, as the CPU's += does. */
__device__ void encoder_flush(DV dwte, DV dx, const int *list, int listed, int64_t t, int64_t C) {
  for (int64_t c = threadIdx.x; c < C; c += THREADS) {
    float acc = ld(dwte, t * C + c);
    for (int i = 0; i < listed; i++) acc = rounded(dwte, acc + ld(dx, (int64_t)list[i] * C + c));
    st(dwte, t * C + c, acc);
  }
}

__global__ void encoder_backward_wte_k(DV dwte, DV dx, const int *tok, int64_t N, int64_t C, int64_t V,
                                       int *status) {
  extern __shared__ int list[];
  __shared__ int warp_count[THREADS / 32];
  __shared__ int listed;
  const int64_t id = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();
  for (int64_t base = 0; base < N; base += THREADS) {
    int64_t n = base + threadIdx.x;
    int t = n < N ? tok[n] : -1;
    if (id == 0 && n < N && (t < 0 || t >= V)) *status = 1;
    bool mine = n < N && t == id;
    unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int before = listed, total = 0;
    for (int w = 0; w < THREADS / 32; w++) {
      if (w == warp) before += total;
      total += warp_count[w];
    }
    bool full = listed + total > ENC_LIST;
    if (full) { /* add what is listed, then list this chunk from the start */
      encoder_flush(dwte, dx, list, listed, id, C);
      before -= listed;
    }
    __syncthreads();
    if (mine) list[before + __popc(ballot & ((1u << lane) - 1u))] = (int)n;
    __syncthreads();
    if (threadIdx.x == 0) listed = (full ? 0 : listed) + total;
    __syncthreads();
  }
  if (listed) encoder_flush(dwte, dx, list, listed, id, C);
}

__global__ void encoder_backward_wpe_k(DV dwpe, DV dx, int64_t N, int64_t T, int64_t C) {
  GRID_STRIDE(i, T * C) {
    int64_t t = i / C, c = i % C;
    float s = 0.0f;
    for (int64_t n = t; n < N; n += T) s += ld(dx, n * C + c);
    st(dwpe, i, ld(dwpe, i) + s);
  }
}

/* -------------------------------------------- encoder backward, next */

/* A stable radix sort of (token id, position) pairs (cub, stable, so equal
 * ids keep token order), then a block per run of equal ids adds the run's
 * dx rows in token order. Each dwte element sums exactly the tokens the
 * scan kernel above sums, in the same order, rounding to dwte's type after
 * every token as the CPU's += does: bitwise its result, with N x C reads
 * instead of V x N. */
#define NEXT_ENC_THREADS 128

/* key[n] = tok[n] where it is a valid id, else V (sorted last, added to
 * nothing, reported in the status word); pos[n] = n. */
__global__ void next_encoder_keys_k(unsigned *key, unsigned *pos, const int *tok, int64_t N, int64_t V, int *status) {
  GRID_STRIDE(n, N) {
    int t = tok[n];
    bool bad = t < 0 || t >= V;
    if (bad) *status = 1;
    key[n] = bad ? (unsigned)V : (unsigned)t;
    pos[n] = (unsigned)n;
  }
}

/* Block i starts work only where sorted position i begins a run of equal
 * ids: it adds that run's dx rows, in token order, to the id's dwte row. */
__global__ void next_encoder_runs_k(DV dwte, DV dx, const unsigned *key, const unsigned *pos, int64_t N,
                                    int64_t C, int64_t V) {
  const int64_t i = blockIdx.x;
  const unsigned id = key[i];
  if (id >= V || (i > 0 && key[i - 1] == id)) return;
  int64_t end = i + 1;
  while (end < N && key[end] == id) end++;
  const int64_t row = (int64_t)id * C;
  for (int64_t c = (int64_t)threadIdx.x * NEXT_VEC; c < C; c += (int64_t)blockDim.x * NEXT_VEC) {
    float acc[NEXT_VEC], d[NEXT_VEC];
    ld8(dwte, row + c, acc);
#pragma unroll 4 /* a long run's loads in flight together; the adds stay in order */
    for (int64_t j = i; j < end; j++) {
      ld8(dx, (int64_t)pos[j] * C + c, d);
      for (int k = 0; k < NEXT_VEC; k++) acc[k] = rounded(dwte, acc[k] + d[k]);
    }
    st8(dwte, row + c, acc);
  }
}

/* Bits that hold every key 0..V. */
static int key_bits(int64_t V) {
  int b = 1;
  while (b < 32 && ((int64_t)1 << b) <= V) b++;
  return b;
}

/* Sorts and sums in the cuBLASLt workspace; 1 (nothing launched) where
 * the rows do not suit vector loads or the scratch does not fit. */
static int next_encoder_backward(rt_CudaKernelCtx *k, const rt_View *dwte, const rt_View *dx, const int *tok,
                                 int64_t N, int64_t C) {
  int64_t V = dwte->shape[0];
  if (!vec_ok(dwte, C) || !vec_ok(dx, C) || N <= 0 || N >= ((int64_t)1 << 31) || V >= ((int64_t)1 << 31)) return 1;
  size_t temp = 0, lists = 4 * ((size_t)N * sizeof(unsigned) + 256);
  if (cub::DeviceRadixSort::SortPairs(NULL, temp, (const unsigned *)NULL, (unsigned *)NULL, (const unsigned *)NULL,
                                      (unsigned *)NULL, (int)N, 0, key_bits(V), k->stream) != cudaSuccess ||
      !k->lt_ws || lists + temp > k->lt_ws_bytes)
    return 1;
  size_t stride = ((size_t)N * sizeof(unsigned) + 255) & ~(size_t)255;
  unsigned char *ws = (unsigned char *)k->lt_ws;
  unsigned *key = (unsigned *)ws, *pos = (unsigned *)(ws + stride);
  unsigned *skey = (unsigned *)(ws + 2 * stride), *spos = (unsigned *)(ws + 3 * stride);
  next_encoder_keys_k<<<nblocks(N, THREADS), THREADS, 0, k->stream>>>(key, pos, tok, N, V, k->status);
  /* The keys kernel wrote only scratch and the status word: the scan
   * kernel can still run in its place. */
  if (cub::DeviceRadixSort::SortPairs(ws + 4 * stride, temp, key, skey, pos, spos, (int)N, 0, key_bits(V),
                                      k->stream) != cudaSuccess)
    return 1;
  next_encoder_runs_k<<<(unsigned)N, NEXT_ENC_THREADS, 0, k->stream>>>(dv(dwte), dv(dx), skey, spos, N, C, V);
  return 0;
}

static int encoder_common(const rt_KernelArgs *a, char *err, size_t errlen, int with_pos, const char *OP) {
  REQUIRE(a->nout == 1 && a->nin == (with_pos ? 3 : 2), "want %d inputs and 1 output", with_pos ? 3 : 2);
  const rt_View *x = &a->out[0], *tok = &a->in[0], *wte = &a->in[1];
  const rt_View *wpe = with_pos ? &a->in[2] : NULL;
  REQUIRE(tok->dtype == RT_I32 && tok->rank >= 1, "tokens must be i32");
  REQUIRE(is_float(x) && is_float(wte) && (!wpe || is_float(wpe)), "x, wte, wpe must be float");
  int64_t N = tok->numel, T = last_dim(tok), C = last_dim(x);
  REQUIRE(wte->rank == 2 && wte->shape[1] == C && x->numel == N * C, "x must be [B,T,C], wte [V,C]");
  REQUIRE(!wpe || (wpe->rank == 2 && wpe->shape[1] == C && wpe->shape[0] >= T), "wpe must be [>=T,C]");
  rt_CudaKernelCtx *c = ctx_of(a);
  encoder_forward_k<<<nblocks(N * C, THREADS), THREADS, 0, c->stream>>>(
      dv(x), (const int *)tok->data, dv(wte), wpe ? dv(wpe) : dv_none(), N, T, C, wte->shape[0], c->status);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_encoder(const rt_KernelArgs *a, char *err, size_t errlen) { return encoder_common(a, err, errlen, 1, "encoder"); }
int rt_cuda_k_embedding(const rt_KernelArgs *a, char *err, size_t errlen) { return encoder_common(a, err, errlen, 0, "embedding"); }

static int encoder_backward_common(const rt_KernelArgs *a, char *err, size_t errlen, int with_pos, const char *OP) {
  REQUIRE(a->nin == 2 && a->nout == (with_pos ? 2 : 1), "want 2 inputs and %d outputs", with_pos ? 2 : 1);
  const rt_View *dx = &a->in[0], *tok = &a->in[1], *dwte = &a->out[0];
  const rt_View *dwpe = with_pos ? &a->out[1] : NULL;
  REQUIRE(tok->dtype == RT_I32 && tok->rank >= 1, "tokens must be i32");
  REQUIRE(is_float(dx) && is_float(dwte) && (!dwpe || is_float(dwpe)), "dx, dwte, dwpe must be float");
  int64_t N = tok->numel, T = last_dim(tok), C = last_dim(dx);
  REQUIRE(dwte->rank == 2 && dwte->shape[1] == C && dx->numel == N * C, "dx must be [B,T,C], dwte [V,C]");
  REQUIRE(!dwpe || (dwpe->rank == 2 && dwpe->shape[1] == C && dwpe->shape[0] >= T), "dwpe must be [>=T,C]");
  rt_CudaKernelCtx *c = ctx_of(a);
  if (!rt_cuda_next_kernel(OP) || next_encoder_backward(c, dwte, dx, (const int *)tok->data, N, C))
    encoder_backward_wte_k<<<(unsigned)dwte->shape[0], THREADS, ENC_LIST * sizeof(int), c->stream>>>(
        dv(dwte), dv(dx), (const int *)tok->data, N, C, dwte->shape[0], c->status);
  if (dwpe) encoder_backward_wpe_k<<<nblocks(T * C, THREADS), THREADS, 0, c->stream>>>(dv(dwpe), dv(dx), N, T, C);
  return rt_cuda_launched(err, errlen, OP);
}

int rt_cuda_k_encoder_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_backward_common(a, err, errlen, 1, "encoder_backward");
}
int rt_cuda_k_embedding_backward(const rt_KernelArgs *a, char *err, size_t errlen) {
  return encoder_backward_common(a, err, errlen, 0, "embedding_backward");
}
