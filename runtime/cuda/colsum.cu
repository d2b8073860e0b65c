/*
 * colsum.cu - deterministic column sums over rows, for the weight and
 * bias gradients of layernorm, rmsnorm and matmul.
 */
#include "cuda.cuh"

/* Column sums over N rows, deterministic, in two launches: blocks of
 * 32 x 32 threads each own 32 columns of one chunk of rows (each thread
 * sums every 32nd row of the chunk in order, then row group 0 adds the 32
 * partial sums in order) and write one partial sum per chunk; then a
 * thread per column adds the chunks' partial sums in order. The partial
 * sums live in the cuBLASLt workspace, which only this stream's matmuls
 * use, in stream order; without room there, one chunk of all the rows adds
 * its sums to the outputs itself. */
#define COLSUM_TILE 32
#define COLSUM_BLOCKS 528 /* 4 per multiprocessor of an H100 */
#define COLSUM_MAX_CHUNKS 64

__device__ __forceinline__ float block_column_total(float v, float (*part)[COLSUM_TILE + 1]) {
  part[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.y == 0)
    for (int r = 0; r < COLSUM_TILE; r++) s += part[r][threadIdx.x];
  __syncthreads();
  return s;
}

/* part0[chunk, c] = sum over the chunk's rows of dy[n,c] * f(n,c) (f = 1,
 * or x-hat for layernorm and rmsnorm); part1[chunk, c] the sum of dy. With
 * no partial sums (one chunk): out0[c] += the first, out1[c] += the second. */
__global__ void colsum_part_k(float *part0, float *part1, DV out0, DV out1, DV dy, DV x, const float *mean,
                              const float *rstd, int64_t N, int64_t C, int64_t rows, int mode) {
  __shared__ float part[COLSUM_TILE][COLSUM_TILE + 1];
  int64_t c = (int64_t)blockIdx.x * COLSUM_TILE + threadIdx.x, n0 = (int64_t)blockIdx.y * rows;
  int64_t n1 = n0 + rows < N ? n0 + rows : N;
  float s0 = 0.0f, s1 = 0.0f;
  if (c < C)
    for (int64_t n = n0 + threadIdx.y; n < n1; n += COLSUM_TILE) {
      float d = ld(dy, n * C + c);
      if (mode == COLSUM_DY) {
        s0 += d;
      } else {
        float xh = mode == COLSUM_DY_XHAT_LN ? (ld(x, n * C + c) - mean[n]) * rstd[n] : ld(x, n * C + c) * rstd[n];
        s0 += d * xh;
        s1 += d;
      }
    }
  s0 = block_column_total(s0, part);
  s1 = block_column_total(s1, part);
  if (threadIdx.y != 0 || c >= C) return;
  if (part0) {
    part0[blockIdx.y * C + c] = s0;
    part1[blockIdx.y * C + c] = s1;
  } else {
    st(out0, c, ld(out0, c) + s0);
    if (out1.p) st(out1, c, ld(out1, c) + s1);
  }
}

/* out0[c] += the chunks' part0 in order; with out1, out1[c] += part1's. */
__global__ void colsum_finish_k(DV out0, DV out1, const float *part0, const float *part1, int64_t C, int chunks) {
  GRID_STRIDE(c, C) {
    float s0 = 0.0f, s1 = 0.0f;
    for (int k = 0; k < chunks; k++) s0 += part0[k * C + c], s1 += part1[k * C + c];
    st(out0, c, ld(out0, c) + s0);
    if (out1.p) st(out1, c, ld(out1, c) + s1);
  }
}

void rt_cuda_colsum(rt_CudaKernelCtx *k, DV out0, DV out1, DV dy, DV x, const float *mean, const float *rstd,
                    int64_t N, int64_t C, int mode) {
  int64_t tiles = (C + COLSUM_TILE - 1) / COLSUM_TILE, chunks = COLSUM_BLOCKS / tiles;
  int64_t fit = (int64_t)(k->lt_ws_bytes / (2 * sizeof(float))) / (C > 0 ? C : 1);
  chunks = chunks > COLSUM_MAX_CHUNKS ? COLSUM_MAX_CHUNKS : chunks;
  chunks = chunks > fit ? fit : chunks;
  if (chunks < 2) chunks = 1;
  int64_t rows = (N + chunks - 1) / chunks;
  float *part0 = chunks > 1 ? (float *)k->lt_ws : NULL, *part1 = part0 ? part0 + chunks * C : NULL;
  colsum_part_k<<<dim3((unsigned)tiles, (unsigned)chunks), dim3(COLSUM_TILE, COLSUM_TILE), 0, k->stream>>>(
      part0, part1, out0, out1, dy, x, mean, rstd, N, C, rows, mode);
  if (part0)
    rt_cuda_colsum_finish(k, out0, out1, part0, part1, C, (int)chunks);
}

void rt_cuda_colsum_finish(rt_CudaKernelCtx *k, DV out0, DV out1, const float *part0, const float *part1, int64_t C,
                           int chunks) {
  colsum_finish_k<<<nblocks(C, THREADS), THREADS, 0, k->stream>>>(out0, out1, part0, part1, C, chunks);
}
