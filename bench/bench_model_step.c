/*
 * bench_model_step.c - wall time of one training step (forward, backward,
 * AdamW) of a generated graph through the CPU reference kernels, every
 * tensor in its own buffer (no planner): the number that sizes the tiny
 * models in models/ ("a naive single-thread step takes 0.1-0.3 s").
 *
 *   bench_model_step GRAPH [STEPS]
 */
#include "kernels.h"
#include "ration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 88172645463325252ULL;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_model_step GRAPH [STEPS]\n");
    return 2;
  }
  int steps = argc > 2 ? atoi(argv[2]) : 10;
  Err e;
  Graph *g = graph_load(argv[1], &e);
  if (!g) {
    fprintf(stderr, "%s\n", e.msg);
    return 2;
  }
  rt_View *v = calloc((size_t)g->ntensors, sizeof *v);
  int64_t ws = 0;
  double flops = 0;
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = &g->tensors[i];
    v[i].dtype = (rt_DType)t->dtype;
    v[i].rank = t->rank;
    v[i].numel = 1;
    for (int d = 0; d < t->rank; d++) v[i].numel *= (v[i].shape[d] = t->shape[d]);
    v[i].data = calloc((size_t)t->bytes, 1);
    if (!v[i].data) {
      fprintf(stderr, "%s: out of memory\n", t->name);
      return 1;
    }
    /* Small random weights, unit norm gains; tokens uniform in [0, V). */
    if (t->kind == KIND_PARAM && t->dtype == DT_F32) {
      float *p = v[i].data;
      bool gain = t->rank == 1 && strstr(t->name, "ln") && strstr(t->name, ".w");
      for (int64_t k = 0; k < v[i].numel; k++) p[k] = gain ? 1.0f : 0.04f * (float)(urand() - 0.5);
    }
    if (t->kind == KIND_INPUT && t->dtype == DT_I32) {
      int wte = graph_find_tensor(g, "wte");
      int32_t *p = v[i].data;
      for (int64_t k = 0; k < v[i].numel; k++) p[k] = (int32_t)(urand() * (double)g->tensors[wte].shape[0]);
    }
  }
  for (int i = 0; i < g->nops; i++) {
    if (g->ops[i].workspace > ws) ws = g->ops[i].workspace;
    flops += g->ops[i].flops;
  }
  void *workspace = calloc((size_t)ws + 1, 1);
  int loss = graph_find_tensor(g, "loss");
  double t0 = 0, first = 0;
  for (int s = 0; s <= steps; s++) {
    if (s == 1) t0 = now(); /* step 0 warms caches and page-faults buffers in */
    for (int i = 0; i < g->ntensors; i++)
      if (g->tensors[i].kind == KIND_GRAD) memset(v[i].data, 0, (size_t)g->tensors[i].bytes);
    for (int i = 0; i < g->nops; i++) {
      Op *op = &g->ops[i];
      rt_View in[8], out[8];
      rt_Attr attrs[8];
      for (int k = 0; k < op->ninputs; k++) in[k] = v[op->inputs[k]];
      for (int k = 0; k < op->noutputs; k++) out[k] = v[op->outputs[k]];
      for (int k = 0; k < op->nattrs; k++) attrs[k] = (rt_Attr){op->attrs[k].key, op->attrs[k].num};
      rt_KernelArgs a = {out, op->noutputs, in, op->ninputs, workspace, ws, attrs, op->nattrs, s + 1, NULL};
      rt_KernelFn fn = rt_kernel_find(op->type);
      char err[256] = "no kernel for this op type";
      if (!fn || fn(&a, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", op->name, err);
        return 1;
      }
    }
    if (s == 0) first = *(float *)v[loss].data;
  }
  double per = (now() - t0) / steps;
  printf("%s: %d steps, %.4f s/step, %.3f GFLOP/step, %.2f GFLOP/s, loss %.4f -> %.4f\n", argv[1], steps, per,
         flops / 1e9, flops / per / 1e9, first, *(float *)v[loss].data);
  for (int i = 0; i < g->ntensors; i++) free(v[i].data);
  free(v);
  free(workspace);
  graph_free(g);
  return 0;
}
