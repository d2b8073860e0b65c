/*
 * rt_init.c - deterministic parameter initialization for graphs of the op
 * set (docs/OPS.md), so that trainers, tests and the PyTorch cross-check
 * start from the same weights: a param's first use decides its value
 * (norm gain 1, bias 0, a LoRA adapter's B 0 as PEFT has it, anything else
 * GPT-2 style normal(0, stddev)), and an f32 master copy or EMA starts equal
 * to its param.
 */
#include "kernels.h"
#include "ration.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_PARAM = 1 };

typedef struct Rng {
  uint64_t s;
} Rng;

static uint64_t rng_next(Rng *r) { /* xorshift64*: the same stream on every platform */
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ull;
}

static double rng_uniform(Rng *r) {
  return (double)((rng_next(r) >> 11) + 1) * (1.0 / 9007199254740993.0); /* (0, 1] */
}

static double rng_normal(Rng *r) {
  double u = rng_uniform(r), v = rng_uniform(r);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Whether op o's first output is read by a lora_add as its adapter input:
 * o is the matmul by LoRA's B. */
static bool feeds_lora_adapter(const rt_Schedule *sc, const rt_SchedOp *o) {
  int y = sc->op_io[o->io0 + o->nin];
  for (int k = 0; k < sc->nops; k++)
    if (!strcmp(sc->ops[k].type, "lora_add") && sc->ops[k].nin == 2 && sc->op_io[sc->ops[k].io0 + 1] == y) return true;
  return false;
}

/* -1: random; else the constant a param starts at, from its first use. */
static double first_use_fill(const rt_Schedule *sc, int t) {
  for (int o = 0; o < sc->nops; o++) {
    const rt_SchedOp *op = &sc->ops[o];
    for (int k = 0; k < op->nin; k++) {
      if (sc->op_io[op->io0 + k] != t) continue;
      bool norm = !strcmp(op->type, "layernorm") || !strcmp(op->type, "rmsnorm");
      if (norm && k == 1) return 1.0;
      if ((!strcmp(op->type, "layernorm") && k == 2) || (!strcmp(op->type, "matmul") && k == 2)) return 0.0;
      if (!strcmp(op->type, "matmul") && k == 1 && op->nout == 1 && feeds_lora_adapter(sc, op)) return 0.0;
      return -1.0;
    }
  }
  return -1.0;
}

static int view_of(const rt_SchedTensor *t, void *data, rt_View *v) {
  if (t->dtype != RT_F32 && t->dtype != RT_BF16 && t->dtype != RT_F16) return -1;
  int64_t n = t->bytes / (t->dtype == RT_F32 ? 4 : 2);
  *v = (rt_View){data, (rt_DType)t->dtype, 1, {n}, n};
  return 0;
}

int rt_init_params(rt_Session *s, uint64_t seed, double stddev) {
  const rt_Schedule *sc = rt_schedule(s);
  if (!sc) return RT_EINVAL;
  int64_t most = 0;
  for (int t = 0; t < sc->ntensors; t++)
    if (sc->tensors[t].bytes > most) most = sc->tensors[t].bytes;
  void *raw = malloc((size_t)most + 1), *master = malloc((size_t)most * 2 + 1);
  int rc = (raw && master) ? RT_OK : RT_ENOMEM;
  Rng r = {seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
  for (int t = 0; t < sc->ntensors && rc == RT_OK; t++) {
    const rt_SchedTensor *T = &sc->tensors[t];
    rt_View v;
    if (T->kind != KIND_PARAM || view_of(T, raw, &v) < 0) continue;
    double fill = first_use_fill(sc, t);
    for (int64_t i = 0; i < v.numel; i++) rt_store(&v, i, fill >= 0 ? (float)fill : (float)(stddev * rng_normal(&r)));
    rc = rt_write(s, T->name, T->dtype, T->rank, T->shape, raw, (size_t)T->bytes);
    /* Copies of T: an adamw op's master (its fifth input, when its first
     * is T), an ema op's state (its first input, when its second is T or
     * T's master; adamw comes first in the graph). */
    int copies_of[2] = {t, -1};
    for (int o = 0; o < sc->nops && rc == RT_OK; o++) {
      const rt_SchedOp *op = &sc->ops[o];
      int to;
      if (!strcmp(op->type, "adamw") && op->nin >= 5 && sc->op_io[op->io0] == t) {
        to = sc->op_io[op->io0 + 4];
        copies_of[1] = to;
      } else if (!strcmp(op->type, "ema") && op->nin == 2 &&
                 (sc->op_io[op->io0 + 1] == copies_of[0] || sc->op_io[op->io0 + 1] == copies_of[1])) {
        to = sc->op_io[op->io0];
      } else {
        continue;
      }
      const rt_SchedTensor *M = &sc->tensors[to];
      rt_View mv;
      if (view_of(M, master, &mv) < 0 || mv.numel != v.numel) continue;
      for (int64_t i = 0; i < v.numel; i++) rt_store(&mv, i, rt_load(&v, i));
      rc = rt_write(s, M->name, M->dtype, M->rank, M->shape, master, (size_t)M->bytes);
    }
  }
  free(raw);
  free(master);
  return rc;
}
