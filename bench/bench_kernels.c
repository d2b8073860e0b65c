/*
 * bench_kernels.c - single-thread throughput of the CPU reference kernels
 * that dominate a training step (matmul and its backward, attention and
 * its backward) at GPT-2 small layer sizes, f32 and bf16 storage.
 * Build and run: see bench/RESULTS.md.
 */
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rt_View mk(rt_DType dt, int rank, const int64_t *shape) {
  rt_View v = {0};
  v.dtype = dt;
  v.rank = rank;
  v.numel = 1;
  for (int i = 0; i < rank; i++) v.shape[i] = shape[i], v.numel *= shape[i];
  v.data = calloc((size_t)v.numel, dt == RT_F32 ? 4 : 2);
  for (int64_t i = 0; i < v.numel; i++) rt_store(&v, i, (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
  return v;
}

static double run(const char *type, rt_View *out, int nout, rt_View *in, int nin, rt_Attr *at, int nat,
                  void *ws, int64_t wsb, int reps) {
  rt_KernelArgs a = {out, nout, in, nin, ws, wsb, at, nat, 1, NULL};
  char err[256];
  rt_KernelFn fn = rt_kernel_find(type);
  if (fn(&a, err, sizeof err)) { fprintf(stderr, "%s\n", err); exit(1); }
  double t0 = now();
  for (int r = 0; r < reps; r++) fn(&a, err, sizeof err);
  return (now() - t0) / reps;
}

int main(void) {
  int64_t B = 4, T = 128, C = 768, OC = 3072, NH = 12, hd = 64;
  for (int d = 0; d < 2; d++) {
    rt_DType dt = d ? RT_BF16 : RT_F32;
    const char *dn = d ? "bf16" : "f32";
    rt_View x = mk(dt, 3, (int64_t[]){B, T, C}), w = mk(dt, 2, (int64_t[]){OC, C}), b = mk(dt, 1, (int64_t[]){OC});
    rt_View y = mk(dt, 3, (int64_t[]){B, T, OC}), dx = mk(dt, 3, (int64_t[]){B, T, C}), dw = mk(dt, 2, (int64_t[]){OC, C});
    rt_View db = mk(dt, 1, (int64_t[]){OC});
    rt_View in[3] = {x, w, b}, bin[3] = {y, x, w}, bout[3] = {dx, dw, db};
    double fl = 2.0 * B * T * C * OC;
    double t = run("matmul", &y, 1, in, 3, NULL, 0, NULL, 0, 3);
    printf("matmul           %s  [%lld,%lld,%lld] x [%lld,%lld]^T  %8.2f ms  %6.2f GFLOP/s\n", dn,
           (long long)B, (long long)T, (long long)C, (long long)OC, (long long)C, t * 1e3, fl / t * 1e-9);
    t = run("matmul_backward", bout, 3, bin, 3, NULL, 0, NULL, 0, 3);
    printf("matmul_backward  %s  same shapes                   %8.2f ms  %6.2f GFLOP/s\n", dn, t * 1e3, 2 * fl / t * 1e-9);
    rt_View qkv = mk(dt, 3, (int64_t[]){B, T, 3 * C}), ay = mk(dt, 3, (int64_t[]){B, T, C});
    rt_View lse = mk(RT_F32, 3, (int64_t[]){B, NH, T}), dqkv = mk(dt, 3, (int64_t[]){B, T, 3 * C});
    rt_Attr at[2] = {{"heads", (double)NH}, {"kv_heads", (double)NH}};
    rt_View aout[2] = {ay, lse}, ain[4] = {ay, qkv, ay, lse};
    int64_t wsb = B * T * NH * hd * 4;
    void *ws = malloc((size_t)wsb);
    /* causal: T(T+1)/2 score rows, 2 hd-long products each (qk, pv) */
    double afl = 2.0 * B * NH * (T * (T + 1) / 2) * hd * 2;
    t = run("attention", aout, 2, &qkv, 1, at, 2, NULL, 0, 3);
    printf("attention        %s  B=%lld T=%lld NH=%lld hd=%lld     %8.2f ms  %6.2f GFLOP/s (useful)\n", dn,
           (long long)B, (long long)T, (long long)NH, (long long)hd, t * 1e3, afl / t * 1e-9);
    t = run("attention_backward", &dqkv, 1, ain, 4, at, 2, ws, wsb, 3);
    printf("attention_bwd    %s  same shapes                   %8.2f ms  %6.2f GFLOP/s (useful, 2x fwd)\n", dn,
           t * 1e3, 2 * afl / t * 1e-9);
  }
  return 0;
}
