/*
 * test_model_exec.c - the generated gpt2 and llama graphs compute the right
 * gradients: each graph is run op by op in its own order through the CPU
 * kernels (every tensor in its own buffer), and the grads it leaves behind
 * are compared with central finite differences of its loss. This is what
 * proves the derived backward wiring (residual partials summed by `acc.*`,
 * the tied lm head's two writers into grad.wte, the rope/GQA path, LoRA's
 * adapters over frozen weights, the loss in row blocks) rather than just
 * its shape. A few AdamW steps must then lower the loss.
 */
#include "kernels.h"
#include "ration.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

typedef struct Exec {
  Graph *g;
  rt_View *v;
  void *workspace;
  int64_t workspace_bytes;
  int64_t step;
} Exec;

static uint64_t rng = 88172645463325252ULL;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static Exec *exec_new(const ModelConfig *c) {
  Buf b = {0};
  Err e;
  if (model_build(c, &b, &e)) return NULL;
  Exec *x = calloc(1, sizeof *x);
  x->g = graph_parse("model.json", b.data, b.len, &e);
  buf_free(&b);
  if (!x->g) {
    printf("  %s\n", e.msg);
    free(x);
    return NULL;
  }
  Graph *g = x->g;
  x->v = calloc((size_t)g->ntensors, sizeof *x->v);
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = &g->tensors[i];
    rt_View *v = &x->v[i];
    v->dtype = (rt_DType)t->dtype;
    v->rank = t->rank;
    v->numel = 1;
    for (int d = 0; d < t->rank; d++) v->numel *= (v->shape[d] = t->shape[d]);
    v->data = calloc((size_t)t->bytes, 1);
    if (t->kind == KIND_PARAM) {
      float *p = v->data;
      bool gain = t->rank == 1 && strstr(t->name, "ln") && strstr(t->name, ".w");
      for (int64_t k = 0; k < v->numel; k++) p[k] = gain ? 1.0f + 0.1f * (float)(urand() - 0.5) : 0.2f * (float)(urand() - 0.5);
    }
    if (t->kind == KIND_INPUT) {
      int32_t *p = v->data;
      for (int64_t k = 0; k < v->numel; k++) p[k] = (int32_t)(urand() * c->vocab);
    }
  }
  for (int i = 0; i < g->nops; i++)
    if (g->ops[i].workspace > x->workspace_bytes) x->workspace_bytes = g->ops[i].workspace;
  x->workspace = calloc((size_t)x->workspace_bytes + 1, 1);
  return x;
}

static void exec_free(Exec *x) {
  for (int i = 0; i < x->g->ntensors; i++) free(x->v[i].data);
  free(x->v);
  free(x->workspace);
  graph_free(x->g);
  free(x);
}

/* Runs the ops of the given phases in graph order; with the backward, grads
 * are zeroed first because their kernels accumulate. Returns the loss, NAN on a kernel error. */
static double run(Exec *x, bool backward, bool optimizer) {
  Graph *g = x->g;
  for (int i = 0; i < g->ntensors && backward; i++)
    if (g->tensors[i].kind == KIND_GRAD) memset(x->v[i].data, 0, (size_t)g->tensors[i].bytes);
  x->step++;
  for (int i = 0; i < g->nops; i++) {
    Op *op = &g->ops[i];
    if ((op->phase == PHASE_BACKWARD && !backward) || (op->phase == PHASE_OPTIMIZER && !optimizer)) continue;
    rt_View in[16], out[16];
    rt_Attr attrs[8];
    for (int k = 0; k < op->ninputs; k++) in[k] = x->v[op->inputs[k]];
    for (int k = 0; k < op->noutputs; k++) out[k] = x->v[op->outputs[k]];
    for (int k = 0; k < op->nattrs; k++) attrs[k] = (rt_Attr){op->attrs[k].key, op->attrs[k].num};
    rt_KernelArgs a = {out, op->noutputs, in, op->ninputs, x->workspace, x->workspace_bytes, attrs, op->nattrs, x->step, NULL};
    rt_KernelFn fn = rt_kernel_find(op->type);
    char err[256] = "no kernel";
    if (!fn || fn(&a, err, sizeof err)) {
      printf("  %s: %s\n", op->name, err);
      return NAN;
    }
  }
  return *(float *)x->v[graph_find_tensor(g, "loss")].data;
}

/* Compares grad.P with (loss(P+h) - loss(P-h)) / 2h at a few elements of
 * every param; the loss's own f32 rounding bounds the achievable match. */
static void check_grads(Exec *x, int *checked, double *worst) {
  Graph *g = x->g;
  run(x, true, false);
  for (int i = 0; i < g->ntensors; i++) {
    Tensor *t = &g->tensors[i];
    if (t->kind != KIND_PARAM || t->frozen) continue;
    char gname[256];
    snprintf(gname, sizeof gname, "grad.%s", t->name);
    int gi = graph_find_tensor(g, gname);
    T_CHECK(gi >= 0);
    if (gi < 0) continue;
    float *p = x->v[i].data, *gr = x->v[gi].data;
    int64_t n = x->v[i].numel;
    for (int s = 0; s < 3; s++) {
      int64_t k = (int64_t)(urand() * (double)n);
      float keep = p[k];
      const float h = 1e-2f;
      p[k] = keep + h;
      double lp = run(x, false, false);
      p[k] = keep - h;
      double lm = run(x, false, false);
      p[k] = keep;
      double fd = (lp - lm) / (2.0 * h), an = gr[k];
      double err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-3);
      if (err > *worst) *worst = err;
      (*checked)++;
      T_CHECKF(err < 0.05, "%s[%lld]: analytic %.6g, finite difference %.6g", t->name, (long long)k, an, fd);
    }
  }
}

static ModelConfig small(const char *family, bool tied) {
  ModelConfig c;
  Err e;
  model_defaults(family, &c, &e);
  c.layers = 2;
  c.dim = 16;
  c.heads = 4;
  c.kv_heads = strcmp(family, "llama") ? 4 : 2;
  c.ffn = strcmp(family, "llama") ? 0 : 24;
  c.vocab = 11;
  c.seq = 6;
  c.batch = 2;
  c.dtype = DT_F32;
  c.tied = tied;
  c.theta = 10000;
  c.lr = 1e-2;
  return c;
}

int main(void) {
  const struct {
    const char *name, *family;
    bool tied;
    int lora, chunks;
  } cases[] = {
      {"gpt2: grads of every param match finite differences", "gpt2", true, 0, 0},
      {"llama (GQA, rope): grads match finite differences", "llama", false, 0, 0},
      {"llama, tied lm head: grads match finite differences", "llama", true, 0, 0},
      {"gpt2, loss in 3 row blocks: grads match finite differences", "gpt2", true, 0, 3},
      {"gpt2 LoRA on every target, alpha 2r, loss in 4 blocks: adapter grads match", "gpt2", true, 4, 4},
      {"llama LoRA on every target: adapter grads match finite differences", "llama", false, 4, 0},
  };
  for (size_t m = 0; m < sizeof cases / sizeof cases[0]; m++) {
    T_CASE(cases[m].name) {
      ModelConfig c = small(cases[m].family, cases[m].tied);
      c.loss_chunks = cases[m].chunks;
      c.lora_rank = cases[m].lora;
      if (c.lora_rank) {
        c.lora_alpha = 2 * c.lora_rank;
        c.lora_targets = MODEL_LORA_Q | MODEL_LORA_K | MODEL_LORA_V | MODEL_LORA_O | MODEL_LORA_UP | MODEL_LORA_DOWN;
        if (!strcmp(c.family, "llama")) c.lora_targets |= MODEL_LORA_GATE;
      }
      Exec *x = exec_new(&c);
      T_CHECK(x != NULL);
      if (!x) continue;
      int checked = 0;
      double worst = 0;
      check_grads(x, &checked, &worst);
      printf("  %d elements checked, worst relative error %.3g\n", checked, worst);
      T_CHECK(checked > 30);
      exec_free(x);
    }
  }
  T_CASE("gpt2 and llama: AdamW steps over the graph lower the loss") {
    for (int f = 0; f < 2; f++) {
      ModelConfig c = small(f ? "llama" : "gpt2", false);
      Exec *x = exec_new(&c);
      T_CHECK(x != NULL);
      if (!x) continue;
      double first = run(x, true, true), last = first;
      for (int s = 0; s < 30; s++) last = run(x, true, true);
      printf("  %s: loss %.4f -> %.4f\n", c.family, first, last);
      T_CHECK(isfinite(first) && last < first - 0.3);
      exec_free(x);
    }
  }
  T_DONE();
}
