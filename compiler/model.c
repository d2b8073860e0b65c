/*
 * model.c - `ration model`: the joint training graph (forward, backward,
 * AdamW) of a gpt2, llama or unet configuration as ration-graph/1 JSON.
 *
 * The forward pass is written per family; the backward pass is derived from
 * it by one rule table (docs/OPS.md), so every tensor a backward op reads is
 * a real input of that op and the planner's liveness is real. Costs follow
 * the formulas of docs/OPS.md "Costs", computed from shapes alone.
 */
#include "ration.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL_NAME_LEN 96
/* Also the most --loss-chunks: concat_rows reads one input per chunk. */
#define MODEL_MAX_IO 16
#define MODEL_MAX_ATTRS 5
/* Keeps every count, shape product and flop total far from int64 overflow. */
#define MODEL_MAX_DIM (1 << 24)
/* Bounds the builder's tensor and op arrays, sized per layer. */
#define MODEL_MAX_LAYERS 4096

typedef struct MTensor {
  char name[MODEL_NAME_LEN];
  int rank;
  int64_t shape[GRAPH_MAX_RANK];
  int64_t numel, bytes;
  DType dtype;
  Kind kind;
  int grad;    /* a param's grad tensor, else -1 */
  int ema;     /* a param's EMA state, else -1 */
  bool frozen; /* a param that does not train (LoRA's base weights) */
} MTensor;

typedef struct MAttr {
  const char *key;
  double val;
} MAttr;

typedef struct MOp {
  char name[MODEL_NAME_LEN];
  const char *type;
  Phase phase;
  int nin, nout, nattrs;
  int in[MODEL_MAX_IO], out[MODEL_MAX_IO];
  MAttr attrs[MODEL_MAX_ATTRS];
  int64_t flops, bytes, workspace;
} MOp;

typedef struct Builder {
  const ModelConfig *c;
  MTensor *t;
  int nt, capt;
  MOp *o;
  int no, capo;
  Phase phase;
  bool freeze; /* params made now are frozen (LoRA base weights) */
  /* --loss-chunks: ops [loss_first, loss_end) are the chunked classifier,
   * loss and their backward, which give loss_x (lnf's output) its whole
   * gradient loss_dx; else loss_first is -1. */
  int loss_first, loss_end, loss_x, loss_dx;
  bool full;   /* capacity exceeded: a bug in the capacity estimate */
  bool overflow;
} Builder;

typedef struct Shape {
  int rank;
  int64_t d[GRAPH_MAX_RANK];
} Shape;
#define SHAPE(...) ((Shape){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), {__VA_ARGS__}})

static int64_t mul(Builder *b, int64_t x, int64_t y) {
  int64_t r;
  if (!util_mul_i64(x, y, &r)) {
    b->overflow = true;
    return 0;
  }
  return r;
}

static void vname(char *dst, const char *fmt, va_list ap) {
  if (vsnprintf(dst, MODEL_NAME_LEN, fmt, ap) >= MODEL_NAME_LEN) dst[MODEL_NAME_LEN - 1] = 0;
}

static int new_tensor(Builder *b, Kind kind, DType dt, Shape s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int new_tensor(Builder *b, Kind kind, DType dt, Shape s, const char *fmt, ...) {
  if (b->nt == b->capt) {
    b->full = true;
    return b->capt - 1;
  }
  MTensor *t = &b->t[b->nt];
  va_list ap;
  va_start(ap, fmt);
  vname(t->name, fmt, ap);
  va_end(ap);
  t->rank = s.rank;
  t->numel = 1;
  for (int i = 0; i < s.rank; i++) {
    t->shape[i] = s.d[i];
    t->numel = mul(b, t->numel, s.d[i]);
  }
  t->bytes = mul(b, t->numel, graph_dtype_size(dt));
  t->dtype = dt;
  t->kind = kind;
  t->grad = t->ema = -1;
  t->frozen = false;
  return b->nt++;
}

static Shape shape_of(const Builder *b, int t) {
  Shape s = {b->t[t].rank, {0}};
  memcpy(s.d, b->t[t].shape, sizeof s.d);
  return s;
}

/* A weight with its grad, AdamW moments, (bf16 only) f32 master copy and
 * (--ema) EMA; a frozen one (while b->freeze) is the weight alone. */
static int param(Builder *b, Shape s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int param(Builder *b, Shape s, const char *fmt, ...) {
  char name[MODEL_NAME_LEN];
  va_list ap;
  va_start(ap, fmt);
  vname(name, fmt, ap);
  va_end(ap);
  DType dt = b->c->dtype;
  int p = new_tensor(b, KIND_PARAM, dt, s, "%s", name);
  if (b->freeze) {
    b->t[p].frozen = true;
    return p;
  }
  int g = new_tensor(b, KIND_GRAD, dt, s, "grad.%s", name);
  new_tensor(b, KIND_OPTSTATE, DT_F32, s, "adam.m.%s", name);
  new_tensor(b, KIND_OPTSTATE, DT_F32, s, "adam.v.%s", name);
  if (dt != DT_F32) new_tensor(b, KIND_OPTSTATE, DT_F32, s, "adam.master.%s", name);
  b->t[p].grad = g;
  if (b->c->ema_decay > 0) b->t[p].ema = new_tensor(b, KIND_OPTSTATE, DT_F32, s, "ema.%s", name);
  return p;
}

static MOp *new_op(Builder *b, const char *type, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static MOp *new_op(Builder *b, const char *type, const char *fmt, ...) {
  if (b->no == b->capo) {
    b->full = true;
    b->no--;
  }
  MOp *o = &b->o[b->no++];
  memset(o, 0, sizeof *o);
  va_list ap;
  va_start(ap, fmt);
  vname(o->name, fmt, ap);
  va_end(ap);
  o->type = type;
  o->phase = b->phase;
  return o;
}

static void op_in(Builder *b, MOp *o, int t) {
  if (o->nin == MODEL_MAX_IO) b->full = true;
  else o->in[o->nin++] = t;
}

static void op_out(Builder *b, MOp *o, int t) {
  if (o->nout == MODEL_MAX_IO) b->full = true;
  else o->out[o->nout++] = t;
}

static void op_attr(Builder *b, MOp *o, const char *key, double val) {
  if (o->nattrs == MODEL_MAX_ATTRS) b->full = true;
  else o->attrs[o->nattrs++] = (MAttr){key, val};
}

static double op_attr_get(const MOp *o, const char *key) {
  for (int i = 0; i < o->nattrs; i++)
    if (strcmp(o->attrs[i].key, key) == 0) return o->attrs[i].val;
  return 0;
}

/* ------------------------------------------------------------ forward ops */

static int act(Builder *b, DType dt, Shape s, const char *prefix, const char *suffix) {
  return new_tensor(b, KIND_ACTIVATION, dt, s, "%s.%s", prefix, suffix);
}

/* layernorm (with bias) or rmsnorm over the last dim of x. */
static int norm(Builder *b, const char *p, int x, bool rms) {
  Shape s = shape_of(b, x), stat = s;
  stat.rank--;
  int64_t C = s.d[s.rank - 1];
  int w = param(b, SHAPE(C), "%s.w", p);
  int bias = rms ? -1 : param(b, SHAPE(C), "%s.b", p);
  int y = act(b, b->c->dtype, s, p, "y");
  int mean = rms ? -1 : act(b, DT_F32, stat, p, "mean");
  int rstd = act(b, DT_F32, stat, p, "rstd");
  MOp *o = new_op(b, rms ? "rmsnorm" : "layernorm", "%s", p);
  op_in(b, o, x);
  op_in(b, o, w);
  if (!rms) op_in(b, o, bias);
  op_out(b, o, y);
  if (!rms) op_out(b, o, mean);
  op_out(b, o, rstd);
  op_attr(b, o, "eps", b->c->eps);
  return y;
}

/* y = x w^T (+ bias); w is created as "<p>.w" unless a shared one is given. */
static int matmul(Builder *b, const char *p, int x, int64_t oc, bool bias, int shared_w) {
  Shape s = shape_of(b, x);
  int64_t C = s.d[s.rank - 1];
  int w = shared_w >= 0 ? shared_w : param(b, SHAPE(oc, C), "%s.w", p);
  int bb = bias ? param(b, SHAPE(oc), "%s.b", p) : -1;
  s.d[s.rank - 1] = oc;
  int y = strcmp(p, "lm_head") ? act(b, b->c->dtype, s, p, "y")
                                 : new_tensor(b, KIND_ACTIVATION, b->c->dtype, s, "logits");
  MOp *o = new_op(b, "matmul", "%s", p);
  op_in(b, o, x);
  op_in(b, o, w);
  if (bias) op_in(b, o, bb);
  op_out(b, o, y);
  return y;
}

static unsigned lora_targets(const ModelConfig *c) {
  return c->lora_targets ? c->lora_targets : MODEL_LORA_Q | MODEL_LORA_V;
}

/* With --lora and TARGET selected: a LoRA adapter on columns [off, off +
 * width) of projection y = x w^T (PEFT's layout and init): u = x A^T with
 * A [r, C], v = u B^T with B [width, r] (zero at init, runtime/rt_init.c),
 * and y + (alpha / r) v, where only A and B train. Else y itself. */
static int adapt(Builder *b, const char *p, const char *target, unsigned bit, int x, int y, int64_t off,
                 int64_t width) {
  const ModelConfig *c = b->c;
  if (!c->lora_rank || !(lora_targets(c) & bit)) return y;
  char n[MODEL_NAME_LEN], nb[MODEL_NAME_LEN];
  snprintf(n, sizeof n, "%s.lora_%s", p, target);
  snprintf(nb, sizeof nb, "%s.lora_%s.a", p, target);
  b->freeze = false;
  int u = matmul(b, nb, x, c->lora_rank, false, -1);
  snprintf(nb, sizeof nb, "%s.lora_%s.b", p, target);
  int v = matmul(b, nb, u, width, false, -1);
  b->freeze = true;
  int out = act(b, c->dtype, shape_of(b, y), n, "y");
  MOp *o = new_op(b, "lora_add", "%s", n);
  op_in(b, o, y);
  op_in(b, o, v);
  op_out(b, o, out);
  op_attr(b, o, "scale", (c->lora_alpha > 0 ? c->lora_alpha : c->lora_rank) / c->lora_rank);
  op_attr(b, o, "offset", (double)off);
  return out;
}

/* One input, one output of the same dtype; out_shape NULL keeps x's shape. */
static int unary(Builder *b, const char *type, const char *p, int x, const Shape *out_shape) {
  int y = act(b, b->c->dtype, out_shape ? *out_shape : shape_of(b, x), p, "y");
  MOp *o = new_op(b, type, "%s", p);
  op_in(b, o, x);
  op_out(b, o, y);
  return y;
}

static int binary(Builder *b, const char *type, const char *opname, int x, int y2, Shape s, const char *out) {
  int y = new_tensor(b, KIND_ACTIVATION, b->c->dtype, s, "%s", out);
  MOp *o = new_op(b, type, "%s", opname);
  op_in(b, o, x);
  op_in(b, o, y2);
  op_out(b, o, y);
  return y;
}

/* --loss-chunks K: logits, loss and their gradient K row blocks at a time,
 * each block's backward right after its loss, so one block's logits and
 * dlogits are live at a time, never the whole [B,T,V]. Per block k: slices
 * of h (lnf.y) and targets, lm_head.c<k> (matmul on w), ce.c<k>
 * (crossentropy, its mean over all B*T rows: attribute mean_over), then
 * bwd.ce.c<k> and bwd.lm_head.c<k> (dh block; dw accumulated across
 * blocks). After the blocks: loss = the blocks' losses summed in order
 * (adds), and grad.lnf.y = the dh blocks stacked (concat_rows). */
static void chunked_loss(Builder *b, int h, int targets, int w, int64_t vocab) {
  const ModelConfig *c = b->c;
  int K = c->loss_chunks;
  int64_t C = b->t[h].shape[b->t[h].rank - 1], N = b->t[h].numel / C, R = N / K, V = b->t[w].shape[0];
  int dh[MODEL_MAX_IO], loss = -1;
  b->loss_first = b->no;
  b->loss_x = h;
  for (int k = 0; k < K; k++) {
    b->phase = PHASE_FORWARD;
    int hk = new_tensor(b, KIND_ACTIVATION, c->dtype, SHAPE(R, C), "lnf.y.c%d", k);
    int tk = new_tensor(b, KIND_ACTIVATION, DT_I32, SHAPE(R), "targets.c%d", k);
    int logits = new_tensor(b, KIND_ACTIVATION, c->dtype, SHAPE(R, V), "logits.c%d", k);
    int lk = new_tensor(b, KIND_ACTIVATION, DT_F32, SHAPE(1), "loss.c%d", k);
    int lse = new_tensor(b, KIND_ACTIVATION, DT_F32, SHAPE(R), "ce.c%d.lse", k);
    const int sliced[2][3] = {{h, hk, (int)C}, {targets, tk, 1}};
    for (int s = 0; s < 2; s++) {
      MOp *o = new_op(b, "slice", "%s", b->t[sliced[s][1]].name);
      op_in(b, o, sliced[s][0]);
      op_out(b, o, sliced[s][1]);
      op_attr(b, o, "offset", (double)(k * R * sliced[s][2]));
    }
    MOp *o = new_op(b, "matmul", "lm_head.c%d", k);
    op_in(b, o, hk);
    op_in(b, o, w);
    op_out(b, o, logits);
    o = new_op(b, "crossentropy", "ce.c%d", k);
    op_in(b, o, logits);
    op_in(b, o, tk);
    op_out(b, o, lk);
    op_out(b, o, lse);
    op_attr(b, o, "mean_over", (double)N);
    if (V > vocab) op_attr(b, o, "vocab", (double)vocab);
    b->phase = PHASE_BACKWARD;
    int dlogits = new_tensor(b, KIND_ACTIVATION, c->dtype, SHAPE(R, V), "grad.logits.c%d", k);
    o = new_op(b, "crossentropy_backward", "bwd.ce.c%d", k);
    op_in(b, o, logits);
    op_in(b, o, lse);
    op_in(b, o, tk);
    op_out(b, o, dlogits);
    op_attr(b, o, "mean_over", (double)N);
    if (V > vocab) op_attr(b, o, "vocab", (double)vocab);
    dh[k] = new_tensor(b, KIND_ACTIVATION, c->dtype, SHAPE(R, C), "grad.lnf.y.c%d", k);
    o = new_op(b, "matmul_backward", "bwd.lm_head.c%d", k);
    op_in(b, o, dlogits);
    op_in(b, o, hk);
    op_in(b, o, w);
    op_out(b, o, dh[k]);
    if (b->t[w].frozen) op_attr(b, o, "grads", 1);
    else op_out(b, o, b->t[w].grad);
    if (k == 0) {
      loss = lk;
      continue;
    }
    b->phase = PHASE_FORWARD;
    int sum = k + 1 < K ? new_tensor(b, KIND_ACTIVATION, DT_F32, SHAPE(1), "loss.sum%d", k)
                        : new_tensor(b, KIND_ACTIVATION, DT_F32, SHAPE(1), "loss");
    o = new_op(b, "add", "%s", b->t[sum].name);
    op_in(b, o, loss);
    op_in(b, o, lk);
    op_out(b, o, sum);
    loss = sum;
  }
  b->phase = PHASE_BACKWARD;
  b->loss_dx = new_tensor(b, KIND_ACTIVATION, c->dtype, shape_of(b, h), "grad.%s", b->t[h].name);
  MOp *o = new_op(b, "concat_rows", "acc.%s", b->t[h].name);
  for (int k = 0; k < K; k++) op_in(b, o, dh[k]);
  op_out(b, o, b->loss_dx);
  b->loss_end = b->no;
  b->phase = PHASE_FORWARD;
}

static void loss_op(Builder *b, const char *type, const char *opname, int y, int target, bool with_lse) {
  int loss = new_tensor(b, KIND_ACTIVATION, DT_F32, SHAPE(1), "loss");
  MOp *o = new_op(b, type, "%s", opname);
  op_in(b, o, y);
  op_in(b, o, target);
  op_out(b, o, loss);
  if (with_lse) {
    Shape s = shape_of(b, y);
    s.rank--;
    op_out(b, o, new_tensor(b, KIND_ACTIVATION, DT_F32, s, "%s.lse", opname));
  }
}

/* ------------------------------------------------------------ families */

static void build_lm(Builder *b, bool llama) {
  const ModelConfig *c = b->c;
  int64_t B = c->batch, T = c->seq, C = c->dim, NH = c->heads;
  /* A padded vocabulary (llm.c's): rows of wte and logits rounded up for
   * aligned matmuls; crossentropy's "vocab" says how many are classes. */
  int64_t V = c->vocab_pad > 1 ? (c->vocab + c->vocab_pad - 1) / c->vocab_pad * c->vocab_pad : c->vocab;
  int64_t KVH = c->kv_heads, hd = C / NH, F = c->ffn;
  int tokens = new_tensor(b, KIND_INPUT, DT_I32, SHAPE(B, T), "tokens");
  int targets = new_tensor(b, KIND_INPUT, DT_I32, SHAPE(B, T), "targets");
  b->freeze = c->lora_rank > 0;
  int wte = param(b, SHAPE(V, C), "wte");
  char p[MODEL_NAME_LEN];

  int x = new_tensor(b, KIND_ACTIVATION, c->dtype, SHAPE(B, T, C), "l0.x");
  if (llama) {
    MOp *o = new_op(b, "embedding", "embedding");
    op_in(b, o, tokens);
    op_in(b, o, wte);
    op_out(b, o, x);
  } else {
    int wpe = param(b, SHAPE(T, C), "wpe");
    MOp *o = new_op(b, "encoder", "encoder");
    op_in(b, o, tokens);
    op_in(b, o, wte);
    op_in(b, o, wpe);
    op_out(b, o, x);
  }

  for (int l = 0; l < c->layers; l++) {
    snprintf(p, sizeof p, "l%d.ln1", l);
    int h = norm(b, p, x, llama);
    snprintf(p, sizeof p, "l%d.qkv", l);
    int qkv = matmul(b, p, h, (NH + 2 * KVH) * hd, !llama, -1);
    qkv = adapt(b, p, "q", MODEL_LORA_Q, h, qkv, 0, NH * hd);
    qkv = adapt(b, p, "k", MODEL_LORA_K, h, qkv, NH * hd, KVH * hd);
    qkv = adapt(b, p, "v", MODEL_LORA_V, h, qkv, (NH + KVH) * hd, KVH * hd);
    if (llama) {
      snprintf(p, sizeof p, "l%d.rope", l);
      qkv = unary(b, "rope", p, qkv, NULL);
      op_attr(b, &b->o[b->no - 1], "heads", (double)NH);
      op_attr(b, &b->o[b->no - 1], "kv_heads", (double)KVH);
      op_attr(b, &b->o[b->no - 1], "theta", c->theta);
    }
    snprintf(p, sizeof p, "l%d.attn", l);
    int atty = act(b, c->dtype, SHAPE(B, T, NH * hd), p, "y");
    int lse = act(b, DT_F32, SHAPE(B, NH, T), p, "lse");
    MOp *o = new_op(b, "attention", "%s", p);
    op_in(b, o, qkv);
    op_out(b, o, atty);
    op_out(b, o, lse);
    op_attr(b, o, "heads", (double)NH);
    op_attr(b, o, "kv_heads", (double)KVH);
    snprintf(p, sizeof p, "l%d.attproj", l);
    int proj = matmul(b, p, atty, C, !llama, -1);
    proj = adapt(b, p, "o", MODEL_LORA_O, atty, proj, 0, C);
    char opn[MODEL_NAME_LEN], out[MODEL_NAME_LEN];
    snprintf(opn, sizeof opn, "l%d.res1", l);
    snprintf(out, sizeof out, "l%d.res1.y", l);
    int res1 = binary(b, "add", opn, x, proj, SHAPE(B, T, C), out);
    snprintf(p, sizeof p, "l%d.ln2", l);
    h = norm(b, p, res1, llama);
    int mlp;
    if (llama) {
      snprintf(p, sizeof p, "l%d.w13", l);
      int gu = matmul(b, p, h, 2 * F, false, -1);
      gu = adapt(b, p, "gate", MODEL_LORA_GATE, h, gu, 0, F);
      gu = adapt(b, p, "up", MODEL_LORA_UP, h, gu, F, F);
      snprintf(p, sizeof p, "l%d.swiglu", l);
      Shape fs = SHAPE(B, T, F);
      int s = unary(b, "swiglu", p, gu, &fs);
      snprintf(p, sizeof p, "l%d.w2", l);
      mlp = matmul(b, p, s, C, false, -1);
      mlp = adapt(b, p, "down", MODEL_LORA_DOWN, s, mlp, 0, C);
    } else {
      snprintf(p, sizeof p, "l%d.fc", l);
      int fc = matmul(b, p, h, F, true, -1);
      fc = adapt(b, p, "up", MODEL_LORA_UP, h, fc, 0, F);
      snprintf(p, sizeof p, "l%d.gelu", l);
      int g = unary(b, "gelu", p, fc, NULL);
      snprintf(p, sizeof p, "l%d.fcproj", l);
      mlp = matmul(b, p, g, C, true, -1);
      mlp = adapt(b, p, "down", MODEL_LORA_DOWN, g, mlp, 0, C);
    }
    snprintf(opn, sizeof opn, "l%d.res2", l);
    if (l + 1 < c->layers) snprintf(out, sizeof out, "l%d.x", l + 1);
    else snprintf(out, sizeof out, "lnf.x");
    x = binary(b, "add", opn, res1, mlp, SHAPE(B, T, C), out);
  }
  int h = norm(b, "lnf", x, llama);
  bool tied = !llama || c->tied;
  if (c->loss_chunks > 1) {
    chunked_loss(b, h, targets, tied ? wte : param(b, SHAPE(V, C), "lm_head.w"), c->vocab);
    return;
  }
  int logits = matmul(b, "lm_head", h, V, false, tied ? wte : -1);
  loss_op(b, "crossentropy", "ce", logits, targets, true);
  if (V > c->vocab) op_attr(b, &b->o[b->no - 1], "vocab", (double)c->vocab);
}

static int unet_block(Builder *b, const char *p, int x, int64_t oc) {
  char n[MODEL_NAME_LEN];
  Shape s = shape_of(b, x);
  int64_t B = s.d[0], IC = s.d[1];
  snprintf(n, sizeof n, "%s.gn", p);
  int w = param(b, SHAPE(IC), "%s.w", n);
  int bias = param(b, SHAPE(IC), "%s.b", n);
  int y = act(b, b->c->dtype, s, n, "y");
  int mean = act(b, DT_F32, SHAPE(B, 32), n, "mean");
  int rstd = act(b, DT_F32, SHAPE(B, 32), n, "rstd");
  MOp *o = new_op(b, "group_norm", "%s", n);
  op_in(b, o, x);
  op_in(b, o, w);
  op_in(b, o, bias);
  op_out(b, o, y);
  op_out(b, o, mean);
  op_out(b, o, rstd);
  op_attr(b, o, "groups", 32);
  op_attr(b, o, "eps", b->c->eps);
  snprintf(n, sizeof n, "%s.act", p);
  y = unary(b, "silu", n, y, NULL);
  snprintf(n, sizeof n, "%s.conv", p);
  int cw = param(b, SHAPE(oc, IC, 3, 3), "%s.w", n);
  int cb = param(b, SHAPE(oc), "%s.b", n);
  s.d[1] = oc;
  int out = act(b, b->c->dtype, s, n, "y");
  o = new_op(b, "conv2d", "%s", n);
  op_in(b, o, y);
  op_in(b, o, cw);
  op_in(b, o, cb);
  op_out(b, o, out);
  op_attr(b, o, "kernel", 3);
  op_attr(b, o, "stride", 1);
  op_attr(b, o, "pad", 1);
  return out;
}

static void build_unet(Builder *b) {
  const ModelConfig *c = b->c;
  int64_t B = c->batch, S = c->seq, L = c->layers;
  int64_t ch[16];
  for (int i = 0; i < L; i++) ch[i] = (int64_t)c->dim * (i < 2 ? 1 << i : 4);
  int image = new_tensor(b, KIND_INPUT, c->dtype, SHAPE(B, 3, S, S), "image");
  int target = new_tensor(b, KIND_INPUT, c->dtype, SHAPE(B, 3, S, S), "target");
  char p[MODEL_NAME_LEN];

  int w = param(b, SHAPE(ch[0], 3, 3, 3), "in.conv.w");
  int bias = param(b, SHAPE(ch[0]), "in.conv.b");
  int x = new_tensor(b, KIND_ACTIVATION, c->dtype, SHAPE(B, ch[0], S, S), "in.conv.y");
  MOp *o = new_op(b, "conv2d", "in.conv");
  op_in(b, o, image);
  op_in(b, o, w);
  op_in(b, o, bias);
  op_out(b, o, x);
  op_attr(b, o, "kernel", 3);
  op_attr(b, o, "stride", 1);
  op_attr(b, o, "pad", 1);

  int skip[16];
  for (int i = 0; i < L; i++) {
    snprintf(p, sizeof p, "e%d.b1", i);
    x = unet_block(b, p, x, ch[i]);
    snprintf(p, sizeof p, "e%d.b2", i);
    x = skip[i] = unet_block(b, p, x, ch[i]);
    if (i + 1 < L) {
      Shape s = shape_of(b, x);
      int64_t side = s.d[2] / 2;
      snprintf(p, sizeof p, "e%d.down", i);
      int dw = param(b, SHAPE(ch[i], ch[i], 3, 3), "%s.w", p);
      int db = param(b, SHAPE(ch[i]), "%s.b", p);
      int y = act(b, c->dtype, SHAPE(B, ch[i], side, side), p, "y");
      o = new_op(b, "downsample", "%s", p);
      op_in(b, o, x);
      op_in(b, o, dw);
      op_in(b, o, db);
      op_out(b, o, y);
      op_attr(b, o, "kernel", 3);
      op_attr(b, o, "stride", 2);
      op_attr(b, o, "pad", 1);
      x = y;
    }
  }
  x = unet_block(b, "mid", x, ch[L - 1]);
  for (int i = (int)L - 1; i >= 0; i--) {
    if (i + 1 < L) {
      Shape s = shape_of(b, x);
      s.d[2] *= 2;
      s.d[3] *= 2;
      snprintf(p, sizeof p, "d%d.up", i);
      x = unary(b, "upsample", p, x, &s);
      op_attr(b, &b->o[b->no - 1], "scale", 2);
    }
    Shape s = shape_of(b, x);
    s.d[1] += ch[i];
    char opn[MODEL_NAME_LEN], out[MODEL_NAME_LEN];
    snprintf(opn, sizeof opn, "d%d.cat", i);
    snprintf(out, sizeof out, "d%d.cat.y", i);
    x = binary(b, "concat", opn, x, skip[i], s, out);
    op_attr(b, &b->o[b->no - 1], "axis", 1);
    snprintf(p, sizeof p, "d%d.b1", i);
    x = unet_block(b, p, x, ch[i]);
    snprintf(p, sizeof p, "d%d.b2", i);
    x = unet_block(b, p, x, ch[i]);
  }
  x = unet_block(b, "out", x, 3);
  loss_op(b, "mse_loss", "mse", x, target, false);
}

/* ------------------------------------------------------------ backward */

enum { R_END = -1, R_DY = 99 };
#define R_IN(k) (k)
#define R_OUT(k) (10 + (k))

/* Backward op per forward type: what it reads (dy, forward inputs, forward
 * outputs, in order) and the slot names of the forward inputs, used to name
 * partial gradients. Its outputs are the gradients of the forward inputs
 * that need one (not graph inputs, frozen params or what only they feed),
 * in input order; an op that leaves some out says which it has in
 * attribute "grads" (docs/OPS.md). pass_first: the gradient of input 0 is
 * dy itself, no output. */
static const struct Rule {
  const char *type, *bwd;
  int reads[6];
  const char *slot[3];
  bool copy_attrs, pass_first;
} rules[] = {
    {"encoder", "encoder_backward", {R_DY, R_IN(0), R_END}, {"tokens", "wte", "wpe"}, false, false},
    {"embedding", "embedding_backward", {R_DY, R_IN(0), R_END}, {"tokens", "wte", NULL}, false, false},
    {"layernorm", "layernorm_backward", {R_DY, R_IN(0), R_IN(1), R_OUT(1), R_OUT(2), R_END}, {"x", "w", "b"}, false, false},
    {"rmsnorm", "rmsnorm_backward", {R_DY, R_IN(0), R_IN(1), R_OUT(1), R_END}, {"x", "w", NULL}, false, false},
    {"matmul", "matmul_backward", {R_DY, R_IN(0), R_IN(1), R_END}, {"x", "w", "bias"}, false, false},
    {"attention", "attention_backward", {R_DY, R_IN(0), R_OUT(0), R_OUT(1), R_END}, {"qkv", NULL, NULL}, true, false},
    {"rope", "rope_backward", {R_DY, R_END}, {"qkv", NULL, NULL}, true, false},
    {"gelu", "gelu_backward", {R_DY, R_IN(0), R_END}, {"x", NULL, NULL}, false, false},
    {"swiglu", "swiglu_backward", {R_DY, R_IN(0), R_END}, {"gu", NULL, NULL}, false, false},
    {"crossentropy", "crossentropy_backward", {R_IN(0), R_OUT(1), R_IN(1), R_END}, {"logits", "targets", NULL}, true, false},
    {"conv2d", "conv2d_backward", {R_DY, R_IN(0), R_IN(1), R_END}, {"x", "w", "b"}, true, false},
    {"downsample", "downsample_backward", {R_DY, R_IN(0), R_IN(1), R_END}, {"x", "w", "b"}, true, false},
    {"group_norm", "group_norm_backward", {R_DY, R_IN(0), R_IN(1), R_OUT(1), R_OUT(2), R_END}, {"x", "w", "b"}, true, false},
    {"silu", "silu_backward", {R_DY, R_IN(0), R_END}, {"x", NULL, NULL}, false, false},
    {"upsample", "upsample_backward", {R_DY, R_END}, {"x", NULL, NULL}, true, false},
    {"concat", "concat_backward", {R_DY, R_END}, {"x", "skip", NULL}, true, false},
    {"mse_loss", "mse_loss_backward", {R_IN(0), R_IN(1), R_END}, {"y", "target", NULL}, false, false},
    {"lora_add", "lora_add_backward", {R_DY, R_END}, {"y", "v", NULL}, true, true},
};

/* The backward types whose kernels take attribute "grads". */
static bool partial_grads_ok(const char *bwd) {
  return !strcmp(bwd, "matmul_backward") || !strcmp(bwd, "layernorm_backward") || !strcmp(bwd, "rmsnorm_backward");
}

static const struct Rule *rule_for(const char *type) {
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (strcmp(rules[i].type, type) == 0) return &rules[i];
  return NULL;
}

typedef struct GradState {
  int *g;     /* current gradient tensor of each activation, -1 before any */
  int *total; /* contributions expected */
  int *left;  /* contributions still to come */
} GradState;

/* Adds one gradient contribution to activation x; the last of several is
 * summed with the others by a backward `add`. */
static void contribute(Builder *b, GradState *gs, int x, int gt) {
  gs->left[x]--;
  if (gs->g[x] < 0) {
    gs->g[x] = gt;
    return;
  }
  int sum, k = gs->total[x] - gs->left[x];
  const char *xn = b->t[x].name;
  MOp *o;
  if (gs->left[x] == 0) {
    sum = new_tensor(b, KIND_ACTIVATION, b->t[x].dtype, shape_of(b, x), "grad.%s", xn);
    o = new_op(b, "add", "acc.%s", xn);
  } else {
    sum = new_tensor(b, KIND_ACTIVATION, b->t[x].dtype, shape_of(b, x), "grad.%s.sum%d", xn, k);
    o = new_op(b, "add", "acc.%s.%d", xn, k);
  }
  op_in(b, o, gs->g[x]);
  op_in(b, o, gt);
  op_out(b, o, sum);
  gs->g[x] = sum;
}

/* Adds the optimizer phase: AdamW per trained param, then its EMA. */
static void build_optimizer(Builder *b) {
  b->phase = PHASE_OPTIMIZER;
  for (int i = 0; i < b->nt; i++) {
    if (b->t[i].kind != KIND_PARAM || b->t[i].grad < 0) continue;
    MOp *o = new_op(b, "adamw", "adamw.%s", b->t[i].name);
    /* param, grad, m, v (, master) were created in that order. */
    bool master = b->t[i].dtype != DT_F32;
    op_in(b, o, i);
    op_in(b, o, b->t[i].grad);
    op_in(b, o, i + 2);
    op_in(b, o, i + 3);
    if (master) op_in(b, o, i + 4);
    op_out(b, o, i);
    op_out(b, o, i + 2);
    op_out(b, o, i + 3);
    if (master) op_out(b, o, i + 4);
    op_attr(b, o, "lr", b->c->lr);
    op_attr(b, o, "beta1", 0.9);
    op_attr(b, o, "beta2", 0.95);
    op_attr(b, o, "eps", 1e-8);
    /* Decay matrices and embeddings, not gains and biases (GPT-2 practice). */
    op_attr(b, o, "weight_decay", b->t[i].rank >= 2 ? b->c->weight_decay : 0);
    if (b->t[i].ema < 0) continue;
    /* The EMA follows the value the optimizer keeps: the master when there is one. */
    o = new_op(b, "ema", "ema.%s", b->t[i].name);
    op_in(b, o, b->t[i].ema);
    op_in(b, o, master ? i + 4 : i);
    op_out(b, o, b->t[i].ema);
    op_attr(b, o, "decay", b->c->ema_decay);
  }
}

static int build_backward(Builder *b, Err *e) {
  int nfwd = b->no;
  GradState gs = {util_xcalloc((size_t)b->capt, sizeof(int)), util_xcalloc((size_t)b->capt, sizeof(int)),
                  util_xcalloc((size_t)b->capt, sizeof(int))};
  /* need[t]: t is a trained param or an activation computed from one. */
  bool *need = util_xcalloc((size_t)b->capt, sizeof(bool));
  int rc = 0;
  if (!gs.g || !gs.total || !gs.left || !need) {
    rc = err_set(e, "model %s: out of memory", b->c->family);
    goto done;
  }
  for (int i = 0; i < b->nt; i++) need[i] = b->t[i].kind == KIND_PARAM && !b->t[i].frozen;
  for (int i = 0; i < nfwd; i++) {
    if (b->o[i].phase != PHASE_FORWARD) continue;
    bool any = false;
    for (int k = 0; k < b->o[i].nin; k++) any |= need[b->o[i].in[k]];
    for (int k = 0; k < b->o[i].nout; k++) need[b->o[i].out[k]] = any;
  }
  /* A chunked loss section made its own backward: the rest starts below it. */
  if (b->loss_first >= 0) nfwd = b->loss_first;
  for (int i = 0; i < b->capt; i++) gs.g[i] = -1;
  for (int i = 0; i < nfwd; i++)
    for (int k = 0; k < b->o[i].nin; k++)
      if (b->t[b->o[i].in[k]].kind == KIND_ACTIVATION) gs.total[b->o[i].in[k]]++;
  if (b->loss_first >= 0) gs.total[b->loss_x] = 1;
  memcpy(gs.left, gs.total, (size_t)b->capt * sizeof(int));
  if (b->loss_first >= 0) contribute(b, &gs, b->loss_x, b->loss_dx);

  b->phase = PHASE_BACKWARD;
  for (int i = nfwd - 1; i >= 0; i--) {
    /* Copied: new_op may not move b->o, but the struct is read after it. */
    MOp f = b->o[i];
    bool any = false;
    for (int k = 0; k < f.nin; k++) any |= need[f.in[k]];
    if (!any) continue; /* nothing upstream trains */
    int dy = -1;
    const struct Rule *r = rule_for(f.type);
    bool is_loss = r && r->reads[0] != R_DY;
    if (!is_loss) {
      dy = gs.g[f.out[0]];
      if (dy < 0 || gs.left[f.out[0]] != 0) {
        rc = err_set(e, "model %s: op %s does not reach the loss", b->c->family, f.name);
        goto done;
      }
    }
    if (strcmp(f.type, "add") == 0) {
      for (int k = 0; k < 2; k++)
        if (need[f.in[k]]) contribute(b, &gs, f.in[k], dy);
      continue;
    }
    if (!r) {
      rc = err_set(e, "model %s: no backward rule for op type %s", b->c->family, f.type);
      goto done;
    }
    if (r->pass_first && need[f.in[0]]) contribute(b, &gs, f.in[0], dy);
    MOp *o = new_op(b, r->bwd, "bwd.%s", f.name);
    for (int k = 0; r->reads[k] != R_END; k++) {
      int s = r->reads[k];
      op_in(b, o, s == R_DY ? dy : s >= 10 ? f.out[s - 10] : f.in[s]);
    }
    if (r->copy_attrs)
      for (int k = 0; k < f.nattrs; k++) op_attr(b, o, f.attrs[k].key, f.attrs[k].val);
    int partial[MODEL_MAX_IO];
    unsigned mask = 0, all = 0;
    for (int k = 0; k < f.nin; k++) {
      int x = f.in[k];
      partial[k] = -1;
      if (b->t[x].kind == KIND_INPUT || (k == 0 && r->pass_first)) continue;
      all |= 1u << k;
      if (!need[x]) continue;
      mask |= 1u << k;
      if (b->t[x].kind == KIND_PARAM) {
        op_out(b, o, b->t[x].grad);
      } else {
        if (gs.total[x] == 1)
          partial[k] = new_tensor(b, KIND_ACTIVATION, b->t[x].dtype, shape_of(b, x), "grad.%s", b->t[x].name);
        else
          partial[k] = new_tensor(b, KIND_ACTIVATION, b->t[x].dtype, shape_of(b, x), "grad.%s.%s", f.name,
                                  r->slot[k] ? r->slot[k] : "in");
        op_out(b, o, partial[k]);
      }
    }
    if (mask != all) {
      if (!partial_grads_ok(r->bwd)) {
        rc = err_set(e, "model %s: %s cannot leave out a gradient (op %s)", b->c->family, r->bwd, f.name);
        goto done;
      }
      op_attr(b, o, "grads", mask);
    }
    for (int k = 0; k < f.nin; k++)
      if (partial[k] >= 0) contribute(b, &gs, f.in[k], partial[k]);
  }
  build_optimizer(b);
done:
  free(gs.g);
  free(gs.total);
  free(gs.left);
  free(need);
  return rc;
}

/* ------------------------------------------------------------ costs */

static int64_t sum_bytes(Builder *b, const MOp *o) {
  int64_t s = 0;
  for (int k = 0; k < o->nin; k++) s += b->t[o->in[k]].bytes;
  for (int k = 0; k < o->nout; k++) {
    const MTensor *t = &b->t[o->out[k]];
    /* An accumulated gradient is read and written. */
    s += t->kind == KIND_GRAD ? 2 * t->bytes : t->bytes;
  }
  return s;
}

static void cost(Builder *b, MOp *o) {
  char base[32];
  size_t n = strlen(o->type);
  bool bwd = n > 9 && strcmp(o->type + n - 9, "_backward") == 0;
  snprintf(base, sizeof base, "%.*s", (int)(bwd ? n - 9 : n), o->type);
  /* The forward op's activation x: backward ops read dy, of x's size (the
   * loss ops' backward reads y itself) first. */
  const MTensor *x = &b->t[o->in[0]];
  o->bytes = sum_bytes(b, o);
  o->flops = 0;
  if (!strcmp(base, "encoder") || !strcmp(base, "embedding")) {
    /* Gathers and scatters touch only the B*T rows of wte named by tokens,
     * as many bytes as the activation; wpe is read or accumulated whole. */
    bool enc = !strcmp(base, "encoder");
    const MTensor *act_x = bwd ? x : &b->t[o->out[0]], *tok = &b->t[o->in[bwd ? 1 : 0]];
    int64_t wpe = enc ? b->t[bwd ? o->out[1] : o->in[2]].bytes : 0;
    o->bytes = bwd ? tok->bytes + 3 * act_x->bytes + 2 * wpe : tok->bytes + 2 * act_x->bytes + wpe;
    o->flops = mul(b, act_x->numel, (enc ? 1 : 0) + (bwd ? 1 : 0));
  } else if (!strcmp(base, "matmul")) {
    const MTensor *in = &b->t[o->in[bwd ? 1 : 0]], *w = &b->t[o->in[bwd ? 2 : 1]];
    int64_t f = mul(b, mul(b, 2, in->numel), w->shape[0]);
    /* The backward's products: dx (an activation) and dw (a rank-2 grad). */
    int prods = 0;
    for (int k = 0; bwd && k < o->nout; k++) {
      const MTensor *g = &b->t[o->out[k]];
      prods += g->kind == KIND_ACTIVATION || g->rank == 2;
    }
    o->flops = mul(b, f, bwd ? prods : 1);
  } else if (!strcmp(base, "slice")) {
    o->bytes = mul(b, 2, b->t[o->out[0]].bytes); /* reads only the rows it copies */
  } else if (!strcmp(base, "lora_add")) {
    /* Per adapter output element: scale and add; the backward scales. */
    o->flops = bwd ? b->t[o->out[0]].numel : mul(b, 2, b->t[o->in[1]].numel);
  } else if (!strcmp(base, "conv2d") || !strcmp(base, "downsample")) {
    const MTensor *y = bwd ? x : &b->t[o->out[0]], *w = &b->t[o->in[bwd ? 2 : 1]];
    int64_t f = mul(b, mul(b, mul(b, 2, y->numel), w->shape[1]), w->shape[2] * w->shape[3]);
    bool dx = bwd && b->t[o->out[0]].kind == KIND_ACTIVATION;
    o->flops = mul(b, f, dx ? 2 : 1);
  } else if (!strcmp(base, "attention")) {
    const MTensor *qkv = &b->t[o->in[bwd ? 1 : 0]];
    int64_t NH = (int64_t)op_attr_get(o, "heads"), KVH = (int64_t)op_attr_get(o, "kv_heads");
    int64_t B = qkv->shape[0], T = qkv->shape[1], hd = qkv->shape[2] / (NH + 2 * KVH);
    /* Causal: half of the T x T scores; 2 matmuls forward, 5 backward. */
    int64_t half = mul(b, mul(b, mul(b, mul(b, B, NH), T), T), hd);
    o->flops = mul(b, half, bwd ? 5 : 2);
    if (bwd) o->workspace = mul(b, mul(b, mul(b, mul(b, B, T), NH), hd), 4);
  } else if (!strcmp(base, "rope")) {
    int64_t NH = (int64_t)op_attr_get(o, "heads"), KVH = (int64_t)op_attr_get(o, "kv_heads");
    o->flops = mul(b, 3, x->numel / (NH + 2 * KVH) * (NH + KVH));
  } else if (!strcmp(base, "swiglu")) {
    /* Per element of the [B,T,F] output. */
    o->flops = mul(b, b->t[o->in[bwd ? 1 : 0]].numel / 2, bwd ? 10 : 5);
  } else if (!strcmp(base, "upsample")) {
    o->flops = bwd ? mul(b, b->t[o->out[0]].numel, 3) : 0;
  } else if (!strcmp(base, "adamw")) {
    o->flops = mul(b, x->numel, 12);
  } else if (!strcmp(base, "ema")) {
    o->flops = mul(b, x->numel, 3);
  } else {
    static const struct {
      const char *type;
      int fwd, bwd;
    } per_element[] = {
        {"layernorm", 8, 14}, {"rmsnorm", 4, 8}, {"group_norm", 8, 14}, {"gelu", 8, 12},    {"silu", 4, 8},
        {"add", 1, 1},        {"concat", 0, 0},  {"crossentropy", 4, 3}, {"mse_loss", 3, 2},
    };
    for (size_t i = 0; i < sizeof per_element / sizeof per_element[0]; i++)
      if (!strcmp(base, per_element[i].type))
        o->flops = mul(b, x->numel, bwd ? per_element[i].bwd : per_element[i].fwd);
  }
}

/* ------------------------------------------------------------ public */

static const char *const family_names[] = {"gpt2", "llama", "unet"};
static const char *const lora_target_names[] = {"q", "k", "v", "o", "gate", "up", "down"};

int model_lora_targets(const char *list, unsigned *bits, Err *e) {
  *bits = 0;
  for (const char *p = list;;) {
    size_t n = strcspn(p, ",");
    size_t k = 0;
    while (k < sizeof lora_target_names / sizeof lora_target_names[0] &&
           (strlen(lora_target_names[k]) != n || strncmp(p, lora_target_names[k], n)))
      k++;
    if (k == sizeof lora_target_names / sizeof lora_target_names[0])
      return err_set(e, "model: --lora-targets: unknown target '%.*s' (q, k, v, o, gate, up, down)", (int)n, p);
    *bits |= 1u << k;
    if (!p[n]) return 0;
    p += n + 1;
  }
}

int model_defaults(const char *family, ModelConfig *c, Err *e) {
  memset(c, 0, sizeof *c);
  if (!strcmp(family, "gpt2")) {
    *c = (ModelConfig){.family = "gpt2", .layers = 12, .dim = 768, .heads = 12, .vocab = 50257, .seq = 1024,
                       .batch = 8, .dtype = DT_BF16, .tied = true, .eps = 1e-5, .lr = 3e-4, .weight_decay = 0.1};
  } else if (!strcmp(family, "llama")) {
    *c = (ModelConfig){.family = "llama", .layers = 32, .dim = 4096, .heads = 32, .kv_heads = 8, .ffn = 14336,
                       .vocab = 128256, .seq = 8192, .batch = 1, .dtype = DT_BF16, .eps = 1e-5, .theta = 500000,
                       .lr = 3e-4, .weight_decay = 0.1};
  } else if (!strcmp(family, "unet")) {
    *c = (ModelConfig){.family = "unet", .layers = 4, .dim = 64, .seq = 256, .batch = 8, .dtype = DT_BF16,
                       .eps = 1e-5, .lr = 3e-4, .weight_decay = 0.1};
  } else {
    return err_set(e, "model: unknown family '%s' (gpt2, llama, unet)", family);
  }
  return 0;
}

static int check_config(const ModelConfig *c, ModelConfig *out, Err *e) {
  *out = *c;
  const char *f = c->family ? c->family : "";
  bool known = false;
  for (size_t i = 0; i < sizeof family_names / sizeof family_names[0]; i++) known |= !strcmp(f, family_names[i]);
  if (!known) return err_set(e, "model: unknown family '%s' (gpt2, llama, unet)", f);
  bool lm = strcmp(f, "unet") != 0;
  if (!out->name) out->name = f;
  if (lm && out->kv_heads == 0) out->kv_heads = out->heads;
  if (!strcmp(f, "gpt2") && out->ffn == 0) out->ffn = 4 * out->dim;
  const struct {
    const char *opt;
    int v, max;
    bool used;
  } dims[] = {{"--layers", out->layers, MODEL_MAX_LAYERS, true},
              {"--dim", out->dim, MODEL_MAX_DIM, true},
              {"--heads", out->heads, MODEL_MAX_DIM, lm},
              {"--kv-heads", out->kv_heads, MODEL_MAX_DIM, lm},
              {"--ffn", out->ffn, MODEL_MAX_DIM, lm},
              {"--vocab", out->vocab, MODEL_MAX_DIM, lm},
              {"--vocab-pad", out->vocab_pad ? out->vocab_pad : 1, MODEL_MAX_DIM, lm},
              {"--seq", out->seq, MODEL_MAX_DIM, true},
              {"--batch", out->batch, MODEL_MAX_DIM, true}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].used && (dims[i].v < 1 || dims[i].v > dims[i].max))
      return err_set(e, "model %s: %s %d is out of range 1..%d", f, dims[i].opt, dims[i].v, dims[i].max);
  if (out->dtype != DT_F32 && out->dtype != DT_BF16)
    return err_set(e, "model %s: --dtype %s is not f32 or bf16", f, graph_dtype_name(out->dtype));
  if (!(out->eps > 0) || !(out->lr >= 0) || !(out->weight_decay >= 0))
    return err_set(e, "model %s: eps must be > 0, lr and weight decay >= 0", f);
  if (out->lora_rank < 0 || out->lora_rank > MODEL_MAX_DIM)
    return err_set(e, "model %s: --lora %d is out of range 1..%d", f, out->lora_rank, MODEL_MAX_DIM);
  if (out->lora_rank && !lm) return err_set(e, "model %s: --lora is for gpt2 and llama", f);
  if (!(out->lora_alpha >= 0)) return err_set(e, "model %s: --lora-alpha must be > 0", f);
  if (!out->lora_rank && (out->lora_alpha > 0 || out->lora_targets))
    return err_set(e, "model %s: --lora-alpha and --lora-targets need --lora RANK", f);
  if (out->lora_rank && !strcmp(f, "gpt2") && (lora_targets(out) & MODEL_LORA_GATE))
    return err_set(e, "model gpt2: --lora-targets gate: gpt2's MLP has no gate (up is fc, down fcproj)");
  if (!(out->ema_decay >= 0 && out->ema_decay < 1)) return err_set(e, "model %s: --ema decay must be in (0, 1)", f);
  if (out->loss_chunks < 0 || out->loss_chunks > MODEL_MAX_IO)
    return err_set(e, "model %s: --loss-chunks %d is out of range 1..%d", f, out->loss_chunks, MODEL_MAX_IO);
  if (out->loss_chunks > 1 && !lm) return err_set(e, "model %s: --loss-chunks is for gpt2 and llama", f);
  if (out->loss_chunks > 1 && ((int64_t)out->batch * out->seq) % out->loss_chunks)
    return err_set(e, "model %s: --loss-chunks %d does not divide batch x seq = %lld rows", f, out->loss_chunks,
                   (long long)out->batch * out->seq);
  if (lm) {
    if (out->dim % out->heads) return err_set(e, "model %s: --dim %d is not a multiple of --heads %d", f, out->dim, out->heads);
    if (out->heads % out->kv_heads)
      return err_set(e, "model %s: --heads %d is not a multiple of --kv-heads %d", f, out->heads, out->kv_heads);
    if (!strcmp(f, "gpt2") && out->kv_heads != out->heads)
      return err_set(e, "model gpt2: --kv-heads must equal --heads (gpt2 has no grouped-query attention)");
    if (!strcmp(f, "llama") && (out->dim / out->heads) % 2)
      return err_set(e, "model llama: head dim %d must be even for rope", out->dim / out->heads);
    if (!strcmp(f, "llama") && !(out->theta > 0)) return err_set(e, "model llama: rope theta must be > 0");
  } else {
    if (out->layers > 8) return err_set(e, "model unet: --layers %d (resolution levels) exceeds 8", out->layers);
    if (out->dim % 32) return err_set(e, "model unet: --dim %d is not a multiple of 32 (group_norm groups)", out->dim);
    if (out->seq % (1 << (out->layers - 1)))
      return err_set(e, "model unet: --seq %d (image side) is not divisible by 2^(levels-1) = %d", out->seq,
                     1 << (out->layers - 1));
  }
  return 0;
}

/* Builds the graph into b; the caller frees b->t and b->o. */
static int build(const ModelConfig *cin, ModelConfig *c, Builder *b, Err *e) {
  memset(b, 0, sizeof *b);
  if (check_config(cin, c, e)) return -1;
  b->c = c;
  b->capt = 4096 + 256 * c->layers;
  b->capo = 2048 + 128 * c->layers;
  b->t = util_xcalloc((size_t)b->capt, sizeof *b->t);
  b->o = util_xcalloc((size_t)b->capo, sizeof *b->o);
  if (!b->t || !b->o) return err_set(e, "model %s: out of memory", c->family);
  b->phase = PHASE_FORWARD;
  b->loss_first = -1;
  if (!strcmp(c->family, "unet")) build_unet(b);
  else build_lm(b, !strcmp(c->family, "llama"));
  if (build_backward(b, e)) return -1;
  for (int i = 0; i < b->no; i++) cost(b, &b->o[i]);
  if (b->full) return err_set(e, "model %s: graph exceeds the builder's capacity", c->family);
  if (b->overflow) return err_set(e, "model %s: sizes overflow 64-bit integers", c->family);
  return 0;
}

static void builder_free(Builder *b) {
  free(b->t);
  free(b->o);
}

static cJSON *names_json(const Builder *b, const int *idx, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(b->t[idx[i]].name));
  return a;
}

static cJSON *tensor_json(const MTensor *t) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", t->name);
  cJSON *s = cJSON_AddArrayToObject(j, "shape");
  for (int i = 0; i < t->rank; i++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->shape[i]));
  cJSON_AddStringToObject(j, "dtype", graph_dtype_name(t->dtype));
  cJSON_AddStringToObject(j, "kind", graph_kind_name(t->kind));
  if (t->frozen) cJSON_AddBoolToObject(j, "frozen", true);
  return j;
}

static cJSON *op_json(const Builder *b, const MOp *o) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", o->name);
  cJSON_AddStringToObject(j, "type", o->type);
  cJSON_AddStringToObject(j, "phase", graph_phase_name(o->phase));
  cJSON_AddItemToObject(j, "inputs", names_json(b, o->in, o->nin));
  cJSON_AddItemToObject(j, "outputs", names_json(b, o->out, o->nout));
  if (o->nattrs) {
    cJSON *a = cJSON_AddObjectToObject(j, "attrs");
    for (int i = 0; i < o->nattrs; i++) cJSON_AddNumberToObject(a, o->attrs[i].key, o->attrs[i].val);
  }
  cJSON_AddNumberToObject(j, "flops", (double)o->flops);
  cJSON_AddNumberToObject(j, "bytes", (double)o->bytes);
  cJSON_AddNumberToObject(j, "workspace", (double)o->workspace);
  return j;
}

/* Prints one cJSON item (then frees it) as a line of the output. */
static void emit_item(Buf *out, cJSON *j, const char *sep) {
  char *s = j ? cJSON_PrintUnformatted(j) : NULL;
  if (!s) out->failed = true;
  else buf_printf(out, "%s%s", sep, s);
  free(s);
  cJSON_Delete(j);
}

int model_build(const ModelConfig *cin, Buf *out, Err *e) {
  ModelConfig c;
  Builder b;
  int rc = build(cin, &c, &b, e);
  if (rc == 0) {
    cJSON *name = cJSON_CreateString(c.name);
    char *ns = name ? cJSON_PrintUnformatted(name) : NULL;
    buf_printf(out, "{\"format\":\"ration-graph/1\",\"name\":%s,\"outputs\":[\"loss\"],\n\"tensors\":[\n",
               ns ? ns : "\"\"");
    free(ns);
    cJSON_Delete(name);
    /* Resident kinds first, then activations in production order. */
    static const Kind order[] = {KIND_INPUT, KIND_PARAM, KIND_GRAD, KIND_OPTSTATE, KIND_ACTIVATION};
    const char *sep = "";
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
      for (int i = 0; i < b.nt; i++)
        if (b.t[i].kind == order[k]) {
          emit_item(out, tensor_json(&b.t[i]), sep);
          sep = ",\n";
        }
    buf_printf(out, "\n],\n\"ops\":[\n");
    for (int i = 0; i < b.no; i++) emit_item(out, op_json(&b, &b.o[i]), i ? ",\n" : "");
    buf_printf(out, "\n]}\n");
    if (out->failed) rc = err_set(e, "model %s: out of memory", c.family);
  }
  builder_free(&b);
  return rc;
}

int model_stats(const ModelConfig *cin, ModelStats *s, Err *e) {
  ModelConfig c;
  Builder b;
  memset(s, 0, sizeof *s);
  int rc = build(cin, &c, &b, e);
  if (rc == 0) {
    s->ntensors = b.nt;
    s->nops = b.no;
    for (int i = 0; i < b.nt; i++)
      if (b.t[i].kind == KIND_PARAM) {
        s->params += b.t[i].numel;
        s->param_bytes += b.t[i].bytes;
      }
    /* Stashed: an activation produced forward and read after the forward. */
    bool *fwd_out = util_xcalloc((size_t)b.nt, sizeof *fwd_out), *counted = util_xcalloc((size_t)b.nt, 1);
    if (!fwd_out || !counted) rc = err_set(e, "model %s: out of memory", c.family);
    for (int i = 0; rc == 0 && i < b.no; i++)
      for (int k = 0; k < (b.o[i].phase == PHASE_FORWARD ? b.o[i].nout : b.o[i].nin); k++) {
        int t = b.o[i].phase == PHASE_FORWARD ? b.o[i].out[k] : b.o[i].in[k];
        if (b.o[i].phase == PHASE_FORWARD) fwd_out[t] = b.t[t].kind == KIND_ACTIVATION;
        else if (fwd_out[t] && !counted[t]) {
          counted[t] = true;
          s->nstashed++;
          s->stashed_bytes += b.t[t].bytes;
        }
      }
    free(fwd_out);
    free(counted);
  }
  builder_free(&b);
  return rc;
}

int64_t model_param_count(const ModelConfig *c, Err *e) {
  ModelStats s;
  return model_stats(c, &s, e) ? -1 : s.params;
}
