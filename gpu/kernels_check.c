/*
 * kernels_check.c - every CUDA kernel of runtime/cuda/ against
 * the CPU reference kernel of the same type (runtime/kernels_cpu.c), on the
 * same inputs, in f32 and bf16 storage, at small and gpt2-124m-like shapes
 * (odd leading dimension V = 50257 included). Per case it prints
 *
 *   PASS|FAIL type dtype shape: max|gpu-cpu|/max|cpu| = E (tol T), det=yes|NO, GPU us
 *
 * det: two GPU runs from the same inputs are bitwise identical (the
 * executor's recompute-equals-keep-all property needs it). Outputs that
 * accumulate (+=) start from the same random values on both sides; outputs
 * that are overwritten start from the same garbage, so a kernel that skips
 * an element shows. The GPU time is the kernel's, from CUDA events. Inputs
 * are fresh every run (the seed is printed; KCHECK_SEED=N repeats it;
 * KCHECK_OPS="a b" checks only those op types; RATION_CUDA_KERNELS picks the
 * next kernels of those it names, runtime/cuda/cuda.cuh). Each case prints its GB/s:
 * its inputs' and outputs' bytes over its time, the figure that matters for
 * the memory-bound ops. Exit 0 when every case passes.
 *
 * Build (needs only gcc, the runtime sources and the CUDA toolkit):
 *   gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I$CUDA/include \
 *     gpu/kernels_check.c BUILD/libration_cuda.a BUILD/libration.a \
 *     -L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 -lcublasLt -lcudart -lstdc++ -lm -lpthread
 * (libration_cuda.a need not be linked whole here: nothing replaces a stub.)
 */
#include "kernels.h"
#include "kernels_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  char kind; /* 'f' case dtype, 's' f32, 'p' f32 >= 0, 'i' i32 index in [0, hi) */
  int rank;
  int64_t shape[4];
  int64_t hi;
} Spec;

typedef struct {
  const char *type;
  int nin, nout;
  Spec in[5], out[4];
  int alias[4]; /* output k is input alias[k] (in place), or -1 */
  rt_Attr attrs[4];
  int nattrs;
  int64_t ws;
  int64_t step;
  int derive; /* inputs filled by a CPU forward first: see derive_inputs */
} Case;

#define F(...) {'f', sizeof((int64_t[]){__VA_ARGS__}) / 8, {__VA_ARGS__}, 0}
#define S(...) {'s', sizeof((int64_t[]){__VA_ARGS__}) / 8, {__VA_ARGS__}, 0}
#define P(...) {'p', sizeof((int64_t[]){__VA_ARGS__}) / 8, {__VA_ARGS__}, 0}
#define I(hi, ...) {'i', sizeof((int64_t[]){__VA_ARGS__}) / 8, {__VA_ARGS__}, hi}
#define NOALIAS {-1, -1, -1, -1}
#define HEADS(nh, kvh) {{"heads", nh}, {"kv_heads", kvh}, {"theta", 10000.0}}
#define ADAM {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.95}, {"weight_decay", 0.1}}
enum { D_NONE, D_LN, D_RMS, D_ATTN, D_CE };

/* qkv rows: (NH + 2 KVH) * hd. */
static const Case cases[] = {
  {"encoder", 3, 1, {I(300, 2, 64), F(300, 96), F(64, 96)}, {F(2, 64, 96)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"encoder_backward", 2, 2, {F(2, 64, 96), I(300, 2, 64)}, {F(300, 96), F(64, 96)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"embedding", 2, 1, {I(300, 2, 64), F(300, 96)}, {F(2, 64, 96)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"embedding_backward", 2, 1, {F(2, 64, 96), I(300, 2, 64)}, {F(300, 96)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"encoder_backward", 2, 2, {F(4, 1024, 768), I(256, 4, 1024)}, {F(50257, 768), F(1024, 768)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"layernorm", 3, 3, {F(4, 64, 768), F(768), F(768)}, {F(4, 64, 768), S(4, 64), S(4, 64)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_NONE},
  {"layernorm_backward", 5, 3, {F(4, 64, 768), F(4, 64, 768), F(768), S(4, 64), S(4, 64)}, {F(4, 64, 768), F(768), F(768)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_LN},
  {"rmsnorm", 2, 2, {F(4, 64, 768), F(768)}, {F(4, 64, 768), S(4, 64)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_NONE},
  {"rmsnorm_backward", 4, 2, {F(4, 64, 768), F(4, 64, 768), F(768), S(4, 64)}, {F(4, 64, 768), F(768)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_RMS},
  {"matmul", 3, 1, {F(4, 64, 96), F(160, 96), F(160)}, {F(4, 64, 160)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul", 2, 1, {F(2, 128, 768), F(2304, 768)}, {F(2, 128, 2304)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul", 2, 1, {F(1, 64, 768), F(50257, 768)}, {F(1, 64, 50257)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul_backward", 3, 3, {F(4, 64, 160), F(4, 64, 96), F(160, 96)}, {F(4, 64, 96), F(160, 96), F(160)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul_backward", 3, 2, {F(2, 128, 3072), F(2, 128, 768), F(3072, 768)}, {F(2, 128, 768), F(3072, 768)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul_backward", 3, 2, {F(1, 64, 50257), F(1, 64, 768), F(50257, 768)}, {F(1, 64, 768), F(50257, 768)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"attention", 1, 2, {F(2, 128, 12 * 64)}, {F(2, 128, 4 * 64), S(2, 4, 128)}, NOALIAS, HEADS(4, 4), 3, 0, 1, D_NONE},
  {"attention_backward", 4, 1, {F(2, 128, 4 * 64), F(2, 128, 12 * 64), F(2, 128, 4 * 64), S(2, 4, 128)}, {F(2, 128, 12 * 64)}, NOALIAS, HEADS(4, 4), 3, 2 * 128 * 4 * 64 * 4, 1, D_ATTN},
  {"attention", 1, 2, {F(2, 96, 8 * 32)}, {F(2, 96, 4 * 32), S(2, 4, 96)}, NOALIAS, HEADS(4, 2), 3, 0, 1, D_NONE},
  {"attention_backward", 4, 1, {F(2, 96, 4 * 32), F(2, 96, 8 * 32), F(2, 96, 4 * 32), S(2, 4, 96)}, {F(2, 96, 8 * 32)}, NOALIAS, HEADS(4, 2), 3, 2 * 96 * 4 * 32 * 4, 1, D_ATTN},
  {"attention", 1, 2, {F(1, 160, 8 * 128)}, {F(1, 160, 4 * 128), S(1, 4, 160)}, NOALIAS, HEADS(4, 2), 3, 0, 1, D_NONE},
  {"attention_backward", 4, 1, {F(1, 160, 4 * 128), F(1, 160, 8 * 128), F(1, 160, 4 * 128), S(1, 4, 160)}, {F(1, 160, 8 * 128)}, NOALIAS, HEADS(4, 2), 3, 1 * 160 * 4 * 4, 1, D_ATTN},
  {"attention", 1, 2, {F(2, 1024, 36 * 64)}, {F(2, 1024, 12 * 64), S(2, 12, 1024)}, NOALIAS, HEADS(12, 12), 3, 0, 1, D_NONE},
  {"attention_backward", 4, 1, {F(2, 1024, 12 * 64), F(2, 1024, 36 * 64), F(2, 1024, 12 * 64), S(2, 12, 1024)}, {F(2, 1024, 36 * 64)}, NOALIAS, HEADS(12, 12), 3, 2 * 1024 * 12 * 4, 1, D_ATTN},
  {"layernorm_backward", 5, 3, {F(8, 1024, 768), F(8, 1024, 768), F(768), S(8, 1024), S(8, 1024)}, {F(8, 1024, 768), F(768), F(768)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_LN},
  {"matmul_backward", 3, 3, {F(2, 1024, 3072), F(2, 1024, 768), F(3072, 768)}, {F(2, 1024, 768), F(3072, 768), F(3072)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"crossentropy", 2, 2, {F(2, 1024, 50304), I(50257, 2, 1024)}, {S(1), S(2, 1024)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"rope", 1, 1, {F(2, 64, 8 * 64)}, {F(2, 64, 8 * 64)}, NOALIAS, HEADS(4, 2), 3, 0, 1, D_NONE},
  {"rope_backward", 1, 1, {F(2, 64, 8 * 64)}, {F(2, 64, 8 * 64)}, NOALIAS, HEADS(4, 2), 3, 0, 1, D_NONE},
  {"gelu", 1, 1, {F(4, 64, 384)}, {F(4, 64, 384)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"gelu_backward", 2, 1, {F(4, 64, 384), F(4, 64, 384)}, {F(4, 64, 384)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"swiglu", 1, 1, {F(4, 64, 384)}, {F(4, 64, 192)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"swiglu_backward", 2, 1, {F(4, 64, 192), F(4, 64, 384)}, {F(4, 64, 384)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"add", 2, 1, {F(4, 64, 96), F(4, 64, 96)}, {F(4, 64, 96)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"crossentropy", 2, 2, {F(2, 64, 300), I(300, 2, 64)}, {S(1), S(2, 64)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"crossentropy", 2, 2, {F(1, 256, 50257), I(50257, 1, 256)}, {S(1), S(1, 256)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"crossentropy_backward", 3, 1, {F(1, 256, 50257), S(1, 256), I(50257, 1, 256)}, {F(1, 256, 50257)}, NOALIAS, {{0}}, 0, 0, 1, D_CE},
  {"adamw", 4, 3, {F(1000, 77), F(1000, 77), S(1000, 77), P(1000, 77)}, {F(1000, 77), S(1000, 77), P(1000, 77)}, {0, 2, 3, -1}, ADAM, 4, 0, 3, D_NONE},
  {"adamw", 5, 4, {F(1000, 77), F(1000, 77), S(1000, 77), P(1000, 77), S(1000, 77)}, {F(1000, 77), S(1000, 77), P(1000, 77), S(1000, 77)}, {0, 2, 3, 4}, ADAM, 4, 0, 3, D_NONE},
  /* Frozen weights (LoRA): backward ops with some gradients left out. */
  {"layernorm_backward", 5, 1, {F(4, 64, 768), F(4, 64, 768), F(768), S(4, 64), S(4, 64)}, {F(4, 64, 768)}, NOALIAS, {{"grads", 1}}, 1, 0, 1, D_LN},
  {"rmsnorm_backward", 4, 1, {F(4, 64, 768), F(4, 64, 768), F(768), S(4, 64)}, {F(4, 64, 768)}, NOALIAS, {{"grads", 1}}, 1, 0, 1, D_RMS},
  {"matmul_backward", 3, 1, {F(4, 64, 160), F(4, 64, 96), F(160, 96)}, {F(4, 64, 96)}, NOALIAS, {{"grads", 1}}, 1, 0, 1, D_NONE},
  {"matmul_backward", 3, 1, {F(2, 128, 16), F(2, 128, 768), F(16, 768)}, {F(16, 768)}, NOALIAS, {{"grads", 2}}, 1, 0, 1, D_NONE},
  {"lora_add", 2, 1, {F(2, 128, 2304), F(2, 128, 768)}, {F(2, 128, 2304)}, NOALIAS, {{"scale", 2.0}, {"offset", 1536}}, 2, 0, 1, D_NONE},
  {"lora_add_backward", 1, 1, {F(2, 128, 2304)}, {F(2, 128, 768)}, NOALIAS, {{"scale", 2.0}, {"offset", 1536}}, 2, 0, 1, D_NONE},
  {"ema", 2, 1, {S(1000, 77), F(1000, 77)}, {S(1000, 77)}, {0, -1, -1, -1}, {{"decay", 0.999}}, 1, 0, 1, D_NONE},
  /* --loss-chunks: a row block of the batch, the mean over all rows, the blocks stacked back. */
  {"slice", 1, 1, {F(2, 1024, 768)}, {F(512, 768)}, NOALIAS, {{"offset", 768 * 1024}}, 1, 0, 1, D_NONE},
  {"crossentropy", 2, 2, {F(256, 50257), I(50257, 256)}, {S(1), S(256)}, NOALIAS, {{"mean_over", 2048}}, 1, 0, 1, D_NONE},
  {"crossentropy_backward", 3, 1, {F(256, 50257), S(256), I(50257, 256)}, {F(256, 50257)}, NOALIAS, {{"mean_over", 2048}}, 1, 0, 1, D_CE},
  /* The next layernorm forward: a row of 1,024 (every lane's 4 vectors),
   * one of 200 (lanes left idle), one of 100 (not whole vectors: the
   * default kernel), and gpt2-124m's batch (a bandwidth figure). */
  {"layernorm", 3, 3, {F(4, 64, 1024), F(1024), F(1024)}, {F(4, 64, 1024), S(4, 64), S(4, 64)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_NONE},
  {"layernorm", 3, 3, {F(4, 64, 200), F(200), F(200)}, {F(4, 64, 200), S(4, 64), S(4, 64)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_NONE},
  {"layernorm", 3, 3, {F(4, 64, 100), F(100), F(100)}, {F(4, 64, 100), S(4, 64), S(4, 64)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_NONE},
  {"layernorm", 3, 3, {F(8, 1024, 768), F(768), F(768)}, {F(8, 1024, 768), S(8, 1024), S(8, 1024)}, NOALIAS, {{"eps", 1e-5}}, 1, 0, 1, D_NONE},
  /* Rows that are not whole 16-byte vectors (the next matmul stages them
   * through padded rows in the workspace): several blocks of rows forward
   * and of columns for dw, the last one narrower; a bias over such rows. */
  {"matmul", 2, 1, {F(1, 512, 64), F(50257, 64)}, {F(1, 512, 50257)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul", 3, 1, {F(2, 256, 64), F(1001, 64), F(1001)}, {F(2, 256, 1001)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul_backward", 3, 2, {F(1, 512, 50257), F(1, 512, 64), F(50257, 64)}, {F(1, 512, 64), F(50257, 64)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"matmul_backward", 3, 3, {F(2, 256, 1001), F(2, 256, 64), F(1001, 64)}, {F(2, 256, 64), F(1001, 64), F(1001)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
  {"concat_rows", 4, 1, {F(256, 768), F(256, 768), F(256, 768), F(256, 768)}, {F(1024, 768)}, NOALIAS, {{0}}, 0, 0, 1, D_NONE},
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { /* [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int esize(rt_DType d) { return d == RT_BF16 || d == RT_F16 ? 2 : 4; }

static rt_View mkview(const Spec *s, rt_DType fdt) {
  rt_View v;
  memset(&v, 0, sizeof v);
  v.dtype = s->kind == 'f' ? fdt : s->kind == 'i' ? RT_I32 : RT_F32;
  v.rank = s->rank;
  v.numel = 1;
  for (int d = 0; d < s->rank; d++) v.shape[d] = s->shape[d], v.numel *= s->shape[d];
  v.data = calloc((size_t)v.numel, (size_t)esize(v.dtype));
  if (!v.data) {
    fprintf(stderr, "out of host memory\n");
    exit(2);
  }
  return v;
}

static void fill(const rt_View *v, const Spec *s, double scale) {
  for (int64_t i = 0; i < v->numel; i++) {
    if (s->kind == 'i') ((int32_t *)v->data)[i] = (int32_t)((uint64_t)((uniform() + 1.0) * 0.5 * (double)s->hi) % (uint64_t)s->hi);
    else if (s->kind == 'p') rt_store(v, i, (float)(scale * fabs(uniform())));
    else rt_store(v, i, (float)(scale * uniform()));
  }
}

static size_t vbytes(const rt_View *v) { return (size_t)v->numel * (size_t)esize(v->dtype); }

static int cpu_run(const char *type, const rt_View *out, int nout, const rt_View *in, int nin, const Case *c, void *ws,
                   char *err) {
  rt_KernelFn fn = rt_kernel_find(type);
  if (!fn) return snprintf(err, 256, "no CPU kernel %s", type), -100;
  rt_KernelArgs a = {out, nout, in, nin, ws, c->ws, c->attrs, c->nattrs, c->step, NULL};
  return fn(&a, err, 256);
}

/* Backward inputs that only make sense as a forward's outputs (statistics),
 * computed by the CPU forward on this case's own inputs. */
static int derive_inputs(const Case *c, rt_View *in, rt_DType fdt, char *err) {
  if (c->derive == D_NONE) return 0;
  Spec sb = {'f', 1, {in[2].numel}, 0};
  if (c->derive == D_LN) { /* in: dy x w mean rstd; layernorm(x, w, b=0) -> y, mean, rstd */
    rt_View b = mkview(&sb, fdt), y = mkview(&c->in[1], fdt);
    rt_View fin[3] = {in[1], in[2], b}, fout[3] = {y, in[3], in[4]};
    int rc = cpu_run("layernorm", fout, 3, fin, 3, c, NULL, err);
    free(b.data), free(y.data);
    return rc;
  }
  if (c->derive == D_RMS) { /* in: dy x w rstd */
    rt_View y = mkview(&c->in[1], fdt);
    rt_View fin[2] = {in[1], in[2]}, fout[2] = {y, in[3]};
    int rc = cpu_run("rmsnorm", fout, 2, fin, 2, c, NULL, err);
    free(y.data);
    return rc;
  }
  if (c->derive == D_ATTN) { /* in: dy qkv y lse */
    rt_View fout[2] = {in[2], in[3]};
    return cpu_run("attention", fout, 2, &in[1], 1, c, NULL, err);
  }
  /* D_CE, in: logits lse targets */
  Spec sl = {'s', 1, {1}, 0};
  rt_View loss = mkview(&sl, RT_F32);
  rt_View fin[2] = {in[0], in[2]}, fout[2] = {loss, in[1]};
  int rc = cpu_run("crossentropy", fout, 2, fin, 2, c, NULL, err);
  free(loss.data);
  return rc;
}

#define CK(x)                                                                 \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      snprintf(err, 256, "%s: %s", #x, cudaGetErrorString(e_));               \
      return -200;                                                            \
    }                                                                         \
  } while (0)

static cudaStream_t ctx_stream; /* the stream the kernel context launches on */
static double last_us;          /* the last GPU run's kernel time, from events */

/* One GPU run: inputs and initial outputs uploaded, kernel, results down. */
static int gpu_run(rt_CudaKernelCtx *ctx, const Case *c, const rt_View *in, const rt_View *out0, rt_View *res,
                   char *err) {
  rt_View din[5], dout[4];
  void *dws = NULL;
  int rc = 0;
  for (int k = 0; k < c->nin; k++) {
    din[k] = in[k];
    CK(cudaMalloc(&din[k].data, vbytes(&in[k])));
    CK(cudaMemcpy(din[k].data, in[k].data, vbytes(&in[k]), cudaMemcpyHostToDevice));
  }
  for (int k = 0; k < c->nout; k++) {
    dout[k] = out0[k];
    if (c->alias[k] >= 0) {
      dout[k].data = din[c->alias[k]].data;
    } else {
      CK(cudaMalloc(&dout[k].data, vbytes(&out0[k])));
      CK(cudaMemcpy(dout[k].data, out0[k].data, vbytes(&out0[k]), cudaMemcpyHostToDevice));
    }
  }
  if (c->ws) CK(cudaMalloc(&dws, (size_t)c->ws));
  rt_KernelFn fn = rt_cuda_kernel_find(c->type);
  rt_KernelArgs a = {dout, c->nout, din, c->nin, dws, c->ws, c->attrs, c->nattrs, c->step, ctx};
  if (!fn) rc = (snprintf(err, 256, "no CUDA kernel"), -100);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, ctx_stream));
  if (!rc) rc = fn(&a, err, 256);
  CK(cudaEventRecord(e1, ctx_stream));
  CK(cudaDeviceSynchronize());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  last_us = 1e3 * ms;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!rc) rc = rt_cuda_kernel_ctx_status(ctx, err, 256);
  for (int k = 0; k < c->nout && !rc; k++)
    CK(cudaMemcpy(res[k].data, dout[k].data, vbytes(&res[k]), cudaMemcpyDeviceToHost));
  for (int k = 0; k < c->nin; k++) cudaFree(din[k].data);
  for (int k = 0; k < c->nout; k++)
    if (c->alias[k] < 0) cudaFree(dout[k].data);
  cudaFree(dws);
  return rc;
}

static void shape_str(const Case *c, char *s, size_t n) {
  size_t at = 0;
  for (int k = 0; k < c->nin && at < n; k++) {
    at += (size_t)snprintf(s + at, n - at, "%s[", k ? " " : "");
    for (int d = 0; d < c->in[k].rank && at < n; d++)
      at += (size_t)snprintf(s + at, n - at, "%s%lld", d ? "," : "", (long long)c->in[k].shape[d]);
    if (at < n) at += (size_t)snprintf(s + at, n - at, "]");
  }
}

/* Whether word is one of list's space-separated words. */
static int listed(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

int main(void) {
  /* Fresh inputs every run; KCHECK_SEED=N repeats one. */
  const char *seed = getenv("KCHECK_SEED");
  rng = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
  if (!rng) rng = 1;
  printf("seed %llu\n", (unsigned long long)rng);
  rt_CudaKernelCtx *ctx = NULL;
  char err[256] = "";
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess || !(ctx_stream = stream) ||
      rt_cuda_kernel_ctx_create(&ctx, stream, err, sizeof err) != 0) {
    printf("FAIL context: %s\n", err[0] ? err : "no CUDA device");
    return 1;
  }
  /* The runtime bytes a GPU profile plans (32 MiB): the status word and the
   * cuBLASLt workspace, as rt_open hands them over. */
  void *runtime_bytes = NULL;
  if (cudaMalloc(&runtime_bytes, 32u << 20) != cudaSuccess ||
      rt_cuda_kernel_ctx_set_runtime(ctx, runtime_bytes, 32 << 20, err, sizeof err) != 0) {
    printf("FAIL runtime bytes: %s\n", err);
    return 1;
  }
  int failed = 0, n = 0;
  const char *only = getenv("KCHECK_OPS");
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const Case *c = &cases[ci];
    if (only && !listed(only, c->type)) continue;
    for (int di = 0; di < 2; di++) {
      rt_DType fdt = di ? RT_BF16 : RT_F32;
      rt_View in[5], out0[4], cpu[4], g1[4], g2[4];
      for (int k = 0; k < c->nin; k++) {
        in[k] = mkview(&c->in[k], fdt);
        fill(&in[k], &c->in[k], 1.0);
      }
      char sh[160];
      shape_str(c, sh, sizeof sh);
      int rc = derive_inputs(c, in, fdt, err);
      for (int k = 0; k < c->nout; k++) {
        out0[k] = mkview(&c->out[k], fdt);
        cpu[k] = mkview(&c->out[k], fdt), g1[k] = mkview(&c->out[k], fdt), g2[k] = mkview(&c->out[k], fdt);
        if (c->alias[k] >= 0) memcpy(out0[k].data, in[c->alias[k]].data, vbytes(&out0[k]));
        else fill(&out0[k], &c->out[k], 0.5); /* accumulators' start; garbage for the rest */
      }
      /* The GPU runs first: the CPU run writes the aliased inputs in place. */
      if (!rc) rc = gpu_run(ctx, c, in, out0, g1, err);
      if (!rc) rc = gpu_run(ctx, c, in, out0, g2, err);
      if (!rc) {
        for (int k = 0; k < c->nout; k++) {
          memcpy(cpu[k].data, out0[k].data, vbytes(&out0[k]));
          if (c->alias[k] >= 0) cpu[k].data = in[c->alias[k]].data; /* in place, as the executor runs it */
        }
        rc = cpu_run(c->type, cpu, c->nout, in, c->nin, c, c->ws ? calloc(1, (size_t)c->ws) : NULL, err);
      }
      n++;
      if (rc) {
        printf("FAIL %s %s %s: %s\n", c->type, di ? "bf16" : "f32", sh, err);
        failed++;
      } else {
        double worst = 0, tol = di ? 1.6e-2 : 1e-4;
        int det = 1, finite = 1;
        for (int k = 0; k < c->nout; k++) {
          double mx = 0, e = 0;
          for (int64_t i = 0; i < cpu[k].numel; i++) mx = fmax(mx, fabs(rt_load(&cpu[k], i)));
          for (int64_t i = 0; i < cpu[k].numel; i++) {
            double a = rt_load(&g1[k], i), b = rt_load(&cpu[k], i);
            if (!isfinite(a) && isfinite(b)) finite = 0;
            e = fmax(e, fabs(a - b));
          }
          if (mx > 0) e /= mx;
          worst = fmax(worst, e);
          if (memcmp(g1[k].data, g2[k].data, vbytes(&g1[k])) != 0) det = 0;
        }
        /* Every input read once and every output written once: what a
         * memory-bound kernel must move at the least (read-modify-write
         * accumulators move their bytes twice, counted once here). */
        double moved = 0;
        for (int k = 0; k < c->nin; k++) moved += (double)vbytes(&in[k]);
        for (int k = 0; k < c->nout; k++) moved += (double)vbytes(&out0[k]);
        int ok = worst <= tol && det && finite;
        failed += !ok;
        printf("%s %s %s %s: max|gpu-cpu|/max|cpu| = %.2e (tol %.0e), det=%s%s, %.1f us, %.0f GB/s\n",
               ok ? "PASS" : "FAIL", c->type, di ? "bf16" : "f32", sh, worst, tol, det ? "yes" : "NO",
               finite ? "" : ", NON-FINITE", last_us, last_us > 0 ? moved / (last_us * 1e3) : 0.0);
      }
      for (int k = 0; k < c->nin; k++) free(in[k].data);
      for (int k = 0; k < c->nout; k++) {
        free(out0[k].data), free(g1[k].data), free(g2[k].data);
        if (c->alias[k] < 0) free(cpu[k].data);
      }
      fflush(stdout);
    }
  }
  /* A token outside [0, V) is reported after the stream syncs, forward and
   * backward (the sorting backward of RATION_CUDA_KERNELS=next reports it
   * from its own kernel). */
  for (int backward = 0; backward < 2; backward++) {
    Spec st = I(1, 1, 8), sw = F(4, 8), sx = F(1, 8, 8);
    rt_View tok = mkview(&st, RT_I32), w = mkview(&sw, RT_F32), x = mkview(&sx, RT_F32);
    ((int32_t *)tok.data)[3] = 7; /* V = 4 */
    Case fwd = {"embedding", 2, 1, {st, sw}, {sx}, NOALIAS, {{0}}, 0, 0, 1, D_NONE};
    Case bwd = {"embedding_backward", 2, 1, {sx, st}, {sw}, NOALIAS, {{0}}, 0, 0, 1, D_NONE};
    rt_View in[2] = {backward ? x : tok, backward ? tok : w}, res[1] = {backward ? w : x};
    int rc = gpu_run(ctx, backward ? &bwd : &fwd, in, res, res, err);
    n++;
    const char *what = backward ? "embedding_backward" : "embedding";
    if (rc == RT_KERNEL_EVALUE) printf("PASS bad token reported by %s: %s\n", what, err);
    else printf("FAIL bad token reported by %s: rc %d %s\n", what, rc, err), failed++;
    free(tok.data), free(w.data), free(x.data);
  }
  rt_cuda_kernel_ctx_destroy(ctx);
  cudaFree(runtime_bytes);
  cudaStreamDestroy(stream);
  printf("%d cases, %d failed\n", n, failed);
  return failed != 0;
}
