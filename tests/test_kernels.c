/*
 * test_kernels.c - the CPU kernels against finite differences of their own
 * forwards, bf16 storage against f32, adamw against its scalar formula,
 * matmul against a naive loop, determinism and the registry, and the
 * fast kernels (run on a pool) against the reference ones. With
 * `--dump DIR` it instead writes every case's inputs and outputs for
 * tests/torch_kernels.py (run by tests/t_kernels_torch.sh).
 */
#include "kernels_fast.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------ utilities */

static void *allocs[4096];
static int nallocs;

static void *xcalloc(size_t n) {
  void *p = calloc(n ? n : 1, 1);
  if (!p || nallocs == (int)(sizeof allocs / sizeof allocs[0])) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  allocs[nallocs++] = p;
  return p;
}

static void free_all(void) {
  while (nallocs) free(allocs[--nallocs]);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
/* Uniform in [-1, 1), rounded to bf16 so that f32 and bf16 runs see the
 * same values. */
static float rnd(void) {
  float f = (float)((double)(next_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  return rt_bf16_to_f32(rt_f32_to_bf16(f));
}

static int dtype_size(rt_DType d) { return d == RT_F32 || d == RT_I32 ? 4 : 2; }

static rt_View mkview(rt_DType dt, int rank, const int64_t *shape) {
  rt_View v;
  memset(&v, 0, sizeof v);
  v.dtype = dt;
  v.rank = rank;
  v.numel = 1;
  for (int i = 0; i < rank; i++) {
    v.shape[i] = shape[i];
    v.numel *= shape[i];
  }
  v.data = xcalloc((size_t)v.numel * (size_t)dtype_size(dt));
  return v;
}

/* The kernels' backend_ctx: NULL runs the reference kernels, a pool the
 * fast ones. */
static rt_Pool *kctx;

static int call(const char *type, const rt_View *out, int nout, const rt_View *in, int nin,
                const rt_Attr *attrs, int nattrs, void *ws, int64_t wsb, int64_t step, char *err) {
  rt_KernelFn fn = rt_kernel_find(type);
  if (!fn) {
    snprintf(err, 256, "no kernel %s", type);
    return -100;
  }
  rt_KernelArgs a = {out, nout, in, nin, ws, wsb, attrs, nattrs, step, kctx};
  err[0] = 0;
  return fn(&a, err, 256);
}

/* ----------------------------------------------------------- grad cases */

typedef struct {
  char kind; /* 'f' model float, 's' f32 statistic, 'i' i32 index, '-' unused */
  int rank;
  int64_t shape[4];
  int hi; /* indices are drawn from [0, hi) */
} TSpec;

enum { SRC_DY = -1, SRC_OUT = 100 };

typedef struct {
  const char *name, *fwd, *bwd;
  int nin;
  TSpec in[5];
  int nout;
  TSpec out[4];
  int proj;    /* the forward output the loss projects */
  int unit_dy; /* the loss is that (scalar) output itself: no dy input */
  int nbin;
  int bin[6]; /* SRC_DY, a forward input k, or SRC_OUT + k */
  int nbout;
  int wrt[4]; /* the forward input each backward output is the gradient of */
  int acc[4]; /* 1 when that output accumulates */
  rt_Attr attrs[4];
  int nattrs;
  int64_t ws;
  int bf16_inexact; /* an output is rounded more than once (scatter into bf16) */
} GradCase;

#define F3(a, b, c) {'f', 3, {a, b, c}, 0}
#define F2(a, b) {'f', 2, {a, b}, 0}
#define F1(a) {'f', 1, {a}, 0}
#define S2(a, b) {'s', 2, {a, b}, 0}
#define S3(a, b, c) {'s', 3, {a, b, c}, 0}
#define I2(a, b, hi) {'i', 2, {a, b}, hi}

static const GradCase cases[] = {
  {"encoder", "encoder", "encoder_backward", 3, {I2(2, 4, 5), F2(5, 6), F2(4, 6)}, 1, {F3(2, 4, 6)},
   0, 0, 2, {SRC_DY, 0}, 2, {1, 2}, {1, 1}, {{0}}, 0, 0, 1},
  {"embedding", "embedding", "embedding_backward", 2, {I2(2, 4, 3), F2(3, 6)}, 1, {F3(2, 4, 6)},
   0, 0, 2, {SRC_DY, 0}, 1, {1}, {1}, {{0}}, 0, 0, 1},
  {"layernorm", "layernorm", "layernorm_backward", 3, {F3(2, 3, 7), F1(7), F1(7)}, 3,
   {F3(2, 3, 7), S2(2, 3), S2(2, 3)}, 0, 0, 5, {SRC_DY, 0, 1, SRC_OUT + 1, SRC_OUT + 2}, 3,
   {0, 1, 2}, {0, 1, 1}, {{"eps", 1e-5}}, 1, 0, 0},
  {"rmsnorm", "rmsnorm", "rmsnorm_backward", 2, {F3(2, 3, 7), F1(7)}, 2, {F3(2, 3, 7), S2(2, 3)}, 0,
   0, 4, {SRC_DY, 0, 1, SRC_OUT + 1}, 2, {0, 1}, {0, 1}, {{"eps", 1e-5}}, 1, 0, 0},
  {"matmul", "matmul", "matmul_backward", 2, {F3(2, 3, 5), F2(4, 5)}, 1, {F3(2, 3, 4)}, 0, 0, 3,
   {SRC_DY, 0, 1}, 2, {0, 1}, {0, 1}, {{0}}, 0, 0, 0},
  {"matmul_bias", "matmul", "matmul_backward", 3, {F3(2, 3, 5), F2(4, 5), F1(4)}, 1, {F3(2, 3, 4)},
   0, 0, 3, {SRC_DY, 0, 1}, 3, {0, 1, 2}, {0, 1, 1}, {{0}}, 0, 0, 0},
  {"attention_mha", "attention", "attention_backward", 1, {F3(2, 5, 24)}, 2,
   {F3(2, 5, 8), S3(2, 2, 5)}, 0, 0, 4, {SRC_DY, 0, SRC_OUT + 0, SRC_OUT + 1}, 1, {0}, {0},
   {{"heads", 2}, {"kv_heads", 2}}, 2, 2 * 5 * 8 * 4, 0},
  {"attention_gqa", "attention", "attention_backward", 1, {F3(2, 5, 32)}, 2,
   {F3(2, 5, 16), S3(2, 4, 5)}, 0, 0, 4, {SRC_DY, 0, SRC_OUT + 0, SRC_OUT + 1}, 1, {0}, {0},
   {{"heads", 4}, {"kv_heads", 2}}, 2, 2 * 5 * 16 * 4, 0},
  {"rope", "rope", "rope_backward", 1, {F3(2, 5, 32)}, 1, {F3(2, 5, 32)}, 0, 0, 1, {SRC_DY}, 1, {0},
   {0}, {{"heads", 4}, {"kv_heads", 2}, {"theta", 100.0}}, 3, 0, 0},
  {"gelu", "gelu", "gelu_backward", 1, {F3(2, 3, 5)}, 1, {F3(2, 3, 5)}, 0, 0, 2, {SRC_DY, 0}, 1,
   {0}, {0}, {{0}}, 0, 0, 0},
  {"swiglu", "swiglu", "swiglu_backward", 1, {F3(2, 3, 8)}, 1, {F3(2, 3, 4)}, 0, 0, 2, {SRC_DY, 0},
   1, {0}, {0}, {{0}}, 0, 0, 0},
  {"crossentropy", "crossentropy", "crossentropy_backward", 2, {F3(2, 3, 7), I2(2, 3, 7)}, 2,
   {{'s', 1, {1}, 0}, S2(2, 3)}, 0, 1, 3, {0, SRC_OUT + 1, 1}, 1, {0}, {0}, {{0}}, 0, 0, 0},
  /* A padded vocabulary: 7 classes in rows of 9; the last 2 get no gradient. */
  {"crossentropy_padded", "crossentropy", "crossentropy_backward", 2, {F3(2, 3, 9), I2(2, 3, 7)}, 2,
   {{'s', 1, {1}, 0}, S2(2, 3)}, 0, 1, 3, {0, SRC_OUT + 1, 1}, 1, {0}, {0}, {{"vocab", 7}}, 1, 0, 0},
  /* Larger shapes: long sums, kv heads shared by 4 query heads. */
  {"matmul_big", "matmul", "matmul_backward", 3, {F3(2, 16, 64), F2(48, 64), F1(48)}, 1,
   {F3(2, 16, 48)}, 0, 0, 3, {SRC_DY, 0, 1}, 3, {0, 1, 2}, {0, 1, 1}, {{0}}, 0, 0, 0},
  {"attention_big", "attention", "attention_backward", 1, {F3(2, 16, 96)}, 2,
   {F3(2, 16, 64), S3(2, 4, 16)}, 0, 0, 4, {SRC_DY, 0, SRC_OUT + 0, SRC_OUT + 1}, 1, {0}, {0},
   {{"heads", 4}, {"kv_heads", 1}}, 2, 2 * 16 * 64 * 4, 0},
  /* Frozen weights (LoRA): attribute "grads" leaves gradients out. */
  {"layernorm_dx", "layernorm", "layernorm_backward", 3, {F3(2, 3, 7), F1(7), F1(7)}, 3,
   {F3(2, 3, 7), S2(2, 3), S2(2, 3)}, 0, 0, 5, {SRC_DY, 0, 1, SRC_OUT + 1, SRC_OUT + 2}, 1,
   {0}, {0}, {{"eps", 1e-5}, {"grads", 1}}, 2, 0, 0},
  {"rmsnorm_dx", "rmsnorm", "rmsnorm_backward", 2, {F3(2, 3, 7), F1(7)}, 2, {F3(2, 3, 7), S2(2, 3)}, 0,
   0, 4, {SRC_DY, 0, 1, SRC_OUT + 1}, 1, {0}, {0}, {{"eps", 1e-5}, {"grads", 1}}, 2, 0, 0},
  {"matmul_dx", "matmul", "matmul_backward", 3, {F3(2, 3, 5), F2(4, 5), F1(4)}, 1, {F3(2, 3, 4)},
   0, 0, 3, {SRC_DY, 0, 1}, 1, {0}, {0}, {{"grads", 1}}, 1, 0, 0},
  {"matmul_dw", "matmul", "matmul_backward", 2, {F3(2, 3, 5), F2(4, 5)}, 1, {F3(2, 3, 4)}, 0, 0, 3,
   {SRC_DY, 0, 1}, 1, {1}, {1}, {{"grads", 2}}, 1, 0, 0},
  /* One of 4 row blocks of a batch of 24 rows (--loss-chunks): the mean over all 24. */
  {"crossentropy_block", "crossentropy", "crossentropy_backward", 2, {F3(2, 3, 7), I2(2, 3, 7)}, 2,
   {{'s', 1, {1}, 0}, S2(2, 3)}, 0, 1, 3, {0, SRC_OUT + 1, 1}, 1, {0}, {0}, {{"mean_over", 24}}, 1, 0, 0},
  /* A LoRA adapter's output v added, scaled, into columns 2..4 of y. */
  {"lora_add", "lora_add", "lora_add_backward", 2, {F3(2, 3, 7), F3(2, 3, 3)}, 1, {F3(2, 3, 7)}, 0, 0, 1,
   {SRC_DY}, 1, {1}, {0}, {{"scale", 1.5}, {"offset", 2}}, 2, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct {
  const GradCase *c;
  rt_DType fdt;
  rt_View in[5], out[4], dy, bin[6], bout[4], prefill[4];
  void *ws;
} Inst;

static rt_View spec_view(const TSpec *s, rt_DType fdt) {
  rt_DType dt = s->kind == 'f' ? fdt : s->kind == 'i' ? RT_I32 : RT_F32;
  return mkview(dt, s->rank, s->shape);
}

static void fill_rand(const rt_View *v) {
  for (int64_t i = 0; i < v->numel; i++) rt_store(v, i, rnd());
}

/* Inputs depend only on the seed, whatever the storage dtype. */
static void inst_make(Inst *t, const GradCase *c, rt_DType fdt, uint64_t seed) {
  memset(t, 0, sizeof *t);
  t->c = c;
  t->fdt = fdt;
  rng = seed;
  for (int i = 0; i < c->nin; i++) {
    t->in[i] = spec_view(&c->in[i], fdt);
    if (c->in[i].kind == 'i')
      for (int64_t j = 0; j < t->in[i].numel; j++) ((int32_t *)t->in[i].data)[j] = (int32_t)(next_u64() % (uint64_t)c->in[i].hi);
    else
      fill_rand(&t->in[i]);
  }
  for (int i = 0; i < c->nout; i++) t->out[i] = spec_view(&c->out[i], fdt);
  t->dy = spec_view(&c->out[c->proj], fdt);
  if (c->unit_dy) rt_store(&t->dy, 0, 1.0f);
  else fill_rand(&t->dy);
  for (int i = 0; i < c->nbin; i++) {
    int s = c->bin[i];
    t->bin[i] = s == SRC_DY ? t->dy : s >= SRC_OUT ? t->out[s - SRC_OUT] : t->in[s];
  }
  for (int i = 0; i < c->nbout; i++) {
    t->bout[i] = spec_view(&c->in[c->wrt[i]], fdt);
    t->prefill[i] = spec_view(&c->in[c->wrt[i]], fdt);
    if (c->acc[i]) fill_rand(&t->prefill[i]);
    else for (int64_t j = 0; j < t->prefill[i].numel; j++) rt_store(&t->prefill[i], j, NAN);
  }
  if (c->ws) t->ws = xcalloc((size_t)c->ws);
}

static int run_fwd(Inst *t, char *err) {
  const GradCase *c = t->c;
  return call(c->fwd, t->out, c->nout, t->in, c->nin, c->attrs, c->nattrs, NULL, 0, 1, err);
}

static size_t vbytes(const rt_View *v) { return (size_t)v->numel * (size_t)dtype_size(v->dtype); }

/* Accumulating outputs start from their prefill, the others from NaN. */
static int run_bwd(Inst *t, char *err) {
  const GradCase *c = t->c;
  for (int i = 0; i < c->nbout; i++) memcpy(t->bout[i].data, t->prefill[i].data, vbytes(&t->bout[i]));
  return call(c->bwd, t->bout, c->nbout, t->bin, c->nbin, c->attrs, c->nattrs, t->ws, c->ws, 1, err);
}

static double proj_loss(const Inst *t) {
  const rt_View *y = &t->out[t->c->proj];
  double L = 0.0;
  for (int64_t i = 0; i < y->numel; i++) L += (double)rt_load(&t->dy, i) * (double)rt_load(y, i);
  return L;
}

/* Central differences of the projected loss vs the backward kernel. */
static void check_fd(const GradCase *c, double *worst) {
  Inst t;
  char err[256];
  inst_make(&t, c, RT_F32, 1234);
  T_CHECKF(run_fwd(&t, err) == 0, "%s", err);
  T_CHECKF(run_bwd(&t, err) == 0, "%s", err);
  double maxerr = 0.0, maxg = 0.0;
  int bad = 0;
  for (int o = 0; o < c->nbout; o++) {
    const rt_View *x = &t.in[c->wrt[o]];
    float *xd = x->data;
    for (int64_t j = 0; j < x->numel; j++) {
      float x0 = xd[j], h = 1e-2f;
      xd[j] = x0 + h;
      T_CHECK(run_fwd(&t, err) == 0);
      double lp = proj_loss(&t), hp = (double)xd[j] - x0;
      xd[j] = x0 - h;
      T_CHECK(run_fwd(&t, err) == 0);
      double lm = proj_loss(&t), hm = x0 - (double)xd[j];
      xd[j] = x0;
      double fd = (lp - lm) / (hp + hm);
      double an = (double)rt_load(&t.bout[o], j) - (c->acc[o] ? (double)rt_load(&t.prefill[o], j) : 0.0);
      double e = fabs(fd - an);
      if (e > maxerr) maxerr = e;
      if (fabs(an) > maxg) maxg = fabs(an);
      if (!(e <= 1e-3 + 1e-2 * fabs(an)) && bad++ < 5)
        printf("  %s: grad %d [%lld]: fd %.6g backward %.6g\n", c->name, o, (long long)j, fd, an);
    }
  }
  T_CHECKF(bad == 0, "%s: %d gradient elements off", c->name, bad);
  T_CHECKF(maxg > 1e-3, "%s: gradients are all ~0, the check would be vacuous", c->name);
  printf("  %-14s max |fd - backward| = %.3g (max |grad| %.3g)\n", c->name, maxerr, maxg);
  if (maxerr > *worst) *worst = maxerr;
}

/* With identical input values, a bf16 run does the same f32 math and only
 * rounds on store: its outputs are exactly the f32 run's, rounded. */
static void check_bf16(const GradCase *c) {
  Inst a, b;
  char err[256];
  inst_make(&a, c, RT_F32, 99);
  inst_make(&b, c, RT_BF16, 99);
  T_CHECKF(run_fwd(&a, err) == 0 && run_fwd(&b, err) == 0, "%s", err);
  int mism = 0;
  double maxrel = 0.0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      /* The backward reads forward outputs: give both runs the same values. */
      for (int o = 0; o < c->nout; o++)
        if (c->out[o].kind == 'f')
          for (int64_t j = 0; j < a.out[o].numel; j++)
            rt_store(&a.out[o], j, rt_bf16_to_f32(rt_f32_to_bf16(rt_load(&a.out[o], j))));
      T_CHECKF(run_bwd(&a, err) == 0 && run_bwd(&b, err) == 0, "%s", err);
    }
    int n = pass ? c->nbout : c->nout;
    for (int o = 0; o < n; o++) {
      const rt_View *x = pass ? &a.bout[o] : &a.out[o], *y = pass ? &b.bout[o] : &b.out[o];
      for (int64_t j = 0; j < x->numel; j++) {
        float fx = rt_load(x, j), fy = rt_load(y, j);
        float want = y->dtype == RT_BF16 ? rt_bf16_to_f32(rt_f32_to_bf16(fx)) : fx;
        if (memcmp(&want, &fy, sizeof want) != 0) mism++;
        double rel = fabs((double)fx - fy) / (fabs((double)fx) + 1e-3);
        if (rel > maxrel) maxrel = rel;
      }
    }
  }
  if (c->bf16_inexact) T_CHECKF(maxrel < 3e-2, "%s: bf16 rel err %g", c->name, maxrel);
  else T_CHECKF(mism == 0, "%s: %d bf16 outputs differ from bf16(f32 output)", c->name, mism);
}

static void check_determinism(const GradCase *c) {
  for (int d = 0; d < 2; d++) {
    Inst a, b;
    char err[256];
    rt_DType dt = d ? RT_BF16 : RT_F32;
    inst_make(&a, c, dt, 7);
    inst_make(&b, c, dt, 7);
    /* b's outputs start as garbage: a kernel must not depend on them. */
    for (int o = 0; o < c->nout; o++) memset(b.out[o].data, 0x5a, vbytes(&b.out[o]));
    T_CHECKF(run_fwd(&a, err) == 0 && run_fwd(&b, err) == 0, "%s", err);
    T_CHECKF(run_bwd(&a, err) == 0 && run_bwd(&b, err) == 0, "%s", err);
    T_CHECKF(run_bwd(&b, err) == 0, "%s", err); /* again, from the same prefill */
    for (int o = 0; o < c->nout; o++)
      T_CHECKF(memcmp(a.out[o].data, b.out[o].data, vbytes(&a.out[o])) == 0, "%s out %d", c->name, o);
    for (int o = 0; o < c->nbout; o++)
      T_CHECKF(memcmp(a.bout[o].data, b.bout[o].data, vbytes(&a.bout[o])) == 0, "%s bout %d", c->name, o);
  }
}

/* ------------------------------------------------------- specific tests */

static void test_matmul_naive(void) {
  /* Sizes straddle every block edge of the blocked GEMM. */
  int64_t N = 70, C = 150, OC = 90;
  rt_View x = mkview(RT_F32, 2, (int64_t[]){N, C}), w = mkview(RT_F32, 2, (int64_t[]){OC, C});
  rt_View b = mkview(RT_F32, 1, (int64_t[]){OC}), y = mkview(RT_F32, 2, (int64_t[]){N, OC});
  rt_View dy = mkview(RT_F32, 2, (int64_t[]){N, OC}), dx = mkview(RT_F32, 2, (int64_t[]){N, C});
  rt_View dw = mkview(RT_F32, 2, (int64_t[]){OC, C}), db = mkview(RT_F32, 1, (int64_t[]){OC});
  fill_rand(&x), fill_rand(&w), fill_rand(&b), fill_rand(&dy), fill_rand(&dw), fill_rand(&db);
  float *dw0 = xcalloc(sizeof(float) * (size_t)(OC * C)), *db0 = xcalloc(sizeof(float) * (size_t)OC);
  memcpy(dw0, dw.data, sizeof(float) * (size_t)(OC * C));
  memcpy(db0, db.data, sizeof(float) * (size_t)OC);
  char err[256];
  rt_View in[3] = {x, w, b}, outs[3] = {dx, dw, db}, bin[3] = {dy, x, w};
  T_CHECKF(call("matmul", &y, 1, in, 3, NULL, 0, NULL, 0, 1, err) == 0, "%s", err);
  T_CHECKF(call("matmul_backward", outs, 3, bin, 3, NULL, 0, NULL, 0, 1, err) == 0, "%s", err);
  const float *X = x.data, *W = w.data, *Bv = b.data, *Y = y.data, *DY = dy.data, *DX = dx.data,
              *DW = dw.data, *DB = db.data;
  int bad = 0;
  /* The kernel sums over k in ascending order like these loops: bitwise equal. */
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      float s = 0.0f;
      for (int64_t k = 0; k < C; k++) s += X[n * C + k] * W[o * C + k];
      s += Bv[o];
      bad += memcmp(&s, &Y[n * OC + o], sizeof s) != 0;
    }
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      float s = 0.0f;
      for (int64_t o = 0; o < OC; o++) s += DY[n * OC + o] * W[o * C + c];
      bad += memcmp(&s, &DX[n * C + c], sizeof s) != 0;
    }
  for (int64_t o = 0; o < OC; o++) {
    for (int64_t c = 0; c < C; c++) {
      float s = 0.0f;
      for (int64_t n = 0; n < N; n++) s += DY[n * OC + o] * X[n * C + c];
      s = dw0[o * C + c] + s;
      bad += memcmp(&s, &DW[o * C + c], sizeof s) != 0;
    }
    float s = 0.0f;
    for (int64_t n = 0; n < N; n++) s += DY[n * OC + o];
    s = db0[o] + s;
    bad += memcmp(&s, &DB[o], sizeof s) != 0;
  }
  T_CHECKF(bad == 0, "%d matmul elements differ from the naive loop", bad);
}

static float adamw_ref(float *p, float *m, float *v, float g, int t, float lr, float b1, float b2,
                       float eps, float wd) {
  *m = b1 * *m + (1 - b1) * g;
  *v = b2 * *v + (1 - b2) * g * g;
  float mh = *m / (float)(1.0 - pow(b1, t)), vh = *v / (float)(1.0 - pow(b2, t));
  *p = *p - lr * (mh / (sqrtf(vh) + eps) + wd * *p);
  return *p;
}

static void test_adamw(int with_master) {
  int64_t n = 37;
  rt_DType pdt = with_master ? RT_BF16 : RT_F32;
  rt_View p = mkview(pdt, 1, &n), g = mkview(pdt, 1, &n), m = mkview(RT_F32, 1, &n),
          v = mkview(RT_F32, 1, &n), ms = mkview(RT_F32, 1, &n);
  float rp[37], rm[37] = {0}, rv[37] = {0};
  for (int i = 0; i < n; i++) {
    rp[i] = rnd();
    rt_store(&p, i, rp[i]);
    rt_store(&ms, i, rp[i]);
  }
  rt_Attr at[5] = {{"lr", 0.01}, {"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-6}, {"weight_decay", 0.1}};
  char err[256];
  double maxerr = 0.0;
  for (int step = 1; step <= 5; step++) {
    for (int i = 0; i < n; i++) rt_store(&g, i, rnd());
    rt_View in[5] = {p, g, m, v, ms}, out[4] = {p, m, v, ms};
    T_CHECKF(call("adamw", out, with_master ? 4 : 3, in, with_master ? 5 : 4, at, 5, NULL, 0, step, err) == 0,
             "%s", err);
    for (int i = 0; i < n; i++) {
      float want = adamw_ref(&rp[i], &rm[i], &rv[i], rt_load(&g, i), step, 0.01f, 0.8f, 0.95f, 1e-6f, 0.1f);
      float got = with_master ? ((float *)ms.data)[i] : rt_load(&p, i);
      double e = fabs((double)want - got) + fabs((double)rm[i] - ((float *)m.data)[i]) +
                 fabs((double)rv[i] - ((float *)v.data)[i]);
      if (e > maxerr) maxerr = e;
      if (with_master) T_CHECK(((uint16_t *)p.data)[i] == rt_f32_to_bf16(got));
    }
  }
  T_CHECKF(maxerr < 1e-6, "adamw differs from the formula by %g", maxerr);
  rt_View in[4] = {p, g, m, v}, out[3] = {p, m, v};
  T_CHECK(call("adamw", out, 3, in, 4, at, 5, NULL, 0, 0, err) == RT_KERNEL_EARGS && strstr(err, "step"));
}

/* ema = decay * ema + (1 - decay) * param in f32, that order: bitwise, for
 * f32 and bf16 params, over steps, on the reference path and (POOL, with
 * more elements than one chunk) the fast one; and the arguments it refuses. */
static void test_ema(rt_Pool *pool) {
  int64_t n = pool ? 3 * 8192 + 41 : 41;
  kctx = pool;
  for (int bf = 0; bf < 2; bf++) {
    rt_View e = mkview(RT_F32, 1, &n), p = mkview(bf ? RT_BF16 : RT_F32, 1, &n);
    float *want = xcalloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) ((float *)e.data)[i] = want[i] = rnd();
    rt_Attr at[1] = {{"decay", 0.9}};
    char err[256];
    int bad = 0;
    for (int step = 1; step <= 3; step++) {
      for (int i = 0; i < n; i++) rt_store(&p, i, rnd());
      rt_View in[2] = {e, p}, out[1] = {e};
      T_CHECKF(call("ema", out, 1, in, 2, at, 1, NULL, 0, step, err) == 0, "%s", err);
      float d = 0.9f, c = 1.0f - d;
      for (int i = 0; i < n; i++) {
        want[i] = d * want[i] + c * rt_load(&p, i);
        bad += memcmp(&want[i], (float *)e.data + i, sizeof(float)) != 0;
      }
    }
    T_CHECKF(bad == 0, "%d ema elements differ from the formula (%s param)", bad, bf ? "bf16" : "f32");
    rt_Attr bad_decay[1] = {{"decay", 1.5}};
    rt_View in[2] = {e, p}, out[1] = {e};
    T_CHECK(call("ema", out, 1, in, 2, bad_decay, 1, NULL, 0, 1, err) == RT_KERNEL_EARGS && strstr(err, "decay"));
    rt_View in_bf[2] = {p, p}, out_bf[1] = {p};
    if (bf) T_CHECK(call("ema", out_bf, 1, in_bf, 2, at, 1, NULL, 0, 1, err) == RT_KERNEL_EARGS && strstr(err, "f32"));
  }
  kctx = NULL;
}

static const char *dtname(rt_DType d) { return d == RT_F32 ? "f32" : d == RT_BF16 ? "bf16" : "i32"; }

/* slice and concat_rows: row blocks out and back, any dtype, bitwise. */
static void test_slice_concat(void) {
  const rt_DType dts[3] = {RT_F32, RT_BF16, RT_I32};
  char err[256];
  for (int d = 0; d < 3; d++) {
    int64_t xs[3] = {4, 6, 5}, bs[2] = {6, 5};
    rt_View x = mkview(dts[d], 3, xs), y = mkview(dts[d], 3, xs), blk[4];
    for (int64_t i = 0; i < x.numel; i++) rt_store(&x, i, dts[d] == RT_I32 ? (float)(i * 7 % 13) : rnd());
    for (int k = 0; k < 4; k++) {
      blk[k] = mkview(dts[d], 2, bs);
      rt_Attr at[1] = {{"offset", (double)(k * 30)}};
      T_CHECKF(call("slice", &blk[k], 1, &x, 1, at, 1, NULL, 0, 1, err) == 0, "%s", err);
    }
    T_CHECKF(call("concat_rows", &y, 1, blk, 4, NULL, 0, NULL, 0, 1, err) == 0, "%s", err);
    T_CHECKF(memcmp(x.data, y.data, vbytes(&x)) == 0, "%s: the blocks do not stack back into x", dtname(dts[d]));
    T_CHECK(!memcmp((char *)x.data + 2 * vbytes(&blk[0]), blk[2].data, vbytes(&blk[2])));
    rt_Attr past[1] = {{"offset", 91}};
    T_CHECK(call("slice", &blk[0], 1, &x, 1, past, 1, NULL, 0, 1, err) == RT_KERNEL_EARGS && strstr(err, "offset"));
    T_CHECK(call("concat_rows", &y, 1, blk, 3, NULL, 0, NULL, 0, 1, err) == RT_KERNEL_EARGS && strstr(err, "elements"));
  }
}

static void test_grads_attr(void) {
  int64_t xs[2] = {3, 5}, ws[2] = {4, 5}, ys[2] = {3, 4};
  rt_View x = mkview(RT_F32, 2, xs), w = mkview(RT_F32, 2, ws), dy = mkview(RT_F32, 2, ys), dx = mkview(RT_F32, 2, xs);
  rt_View in[3] = {dy, x, w}, out[2] = {dx, dx};
  char err[256];
  const double masks[] = {8, 3, 0.5, 1e300};
  for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
    rt_Attr at[1] = {{"grads", masks[i]}};
    T_CHECKF(call("matmul_backward", out, 1, in, 3, at, 1, NULL, 0, 1, err) == RT_KERNEL_EARGS && strstr(err, "grads"),
             "grads %g with 1 output: %s", masks[i], err);
  }
  rt_Attr ln[1] = {{"grads", 2}}; /* dw without db */
  int64_t c = 5, r = 3;
  rt_View lw = mkview(RT_F32, 1, &c), st = mkview(RT_F32, 1, &r);
  rt_View lin[5] = {dx, x, lw, st, st}, lout[1] = {lw};
  T_CHECK(call("layernorm_backward", lout, 1, lin, 5, ln, 1, NULL, 0, 1, err) == RT_KERNEL_EARGS);
}

static void test_bf16_convert(void) {
  T_CHECK(rt_f32_to_bf16(1.0f) == 0x3f80);
  T_CHECK(rt_f32_to_bf16(-2.0f) == 0xc000);
  /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even wins (1.0). */
  T_CHECK(rt_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);
  /* 1 + 3*2^-8 ties between 0x3f81 and 0x3f82: even (0x3f82). */
  T_CHECK(rt_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
  T_CHECK(rt_f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536) == 0x3f81);
  T_CHECK(rt_f32_to_bf16(INFINITY) == 0x7f80);
  T_CHECK(rt_f32_to_bf16(3.4e38f) == 0x7f80); /* rounds past the largest bf16 */
  T_CHECK(isnan(rt_bf16_to_f32(rt_f32_to_bf16(NAN))));
  T_CHECK(rt_bf16_to_f32(0x3fc0) == 1.5f);
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = rt_bf16_to_f32((uint16_t)h);
    if (!isnan(f) && rt_f32_to_bf16(f) != h) bad++;
  }
  T_CHECKF(bad == 0, "%d bf16 values do not round-trip", bad);
  T_CHECK(rt_f32_to_f16(1.0f) == 0x3c00 && rt_f16_to_f32(0x3c00) == 1.0f);
  T_CHECK(rt_f32_to_f16(65504.0f) == 0x7bff && rt_f32_to_f16(65520.0f) == 0x7c00);
  T_CHECK(rt_f32_to_f16(5.9604645e-8f) == 0x0001 && rt_f16_to_f32(0x0001) == 5.9604645e-8f);
  bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = rt_f16_to_f32((uint16_t)h);
    if (!isnan(f) && rt_f32_to_f16(f) != h) bad++;
  }
  T_CHECKF(bad == 0, "%d f16 values do not round-trip", bad);
}

static int custom_calls;
static int k_custom(const rt_KernelArgs *a, char *err, size_t errlen) {
  (void)err, (void)errlen;
  custom_calls++;
  return a->nin;
}

static void test_registry(void) {
  const char *types[] = {"encoder", "encoder_backward", "embedding", "embedding_backward", "layernorm",
                         "layernorm_backward", "rmsnorm", "rmsnorm_backward", "matmul", "matmul_backward",
                         "attention", "attention_backward", "rope", "rope_backward", "gelu", "gelu_backward",
                         "swiglu", "swiglu_backward", "add", "crossentropy", "crossentropy_backward", "adamw",
                         "lora_add", "lora_add_backward", "ema", "slice", "concat_rows"};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) T_CHECKF(rt_kernel_find(types[i]), "%s", types[i]);
  T_CHECK(rt_kernel_find("conv2d") == NULL);
  T_CHECK(rt_kernel_find("my_op") == NULL);
  T_CHECK(rt_kernel_register("my_op", k_custom) == 0);
  rt_KernelArgs a = {NULL, 0, NULL, 3, NULL, 0, NULL, 0, 1, NULL};
  T_CHECK(rt_kernel_find("my_op") == k_custom && rt_kernel_find("my_op")(&a, NULL, 0) == 3 && custom_calls == 1);
  rt_KernelFn gelu = rt_kernel_find("gelu");
  T_CHECK(rt_kernel_register("gelu", k_custom) == 0 && rt_kernel_find("gelu") == k_custom);
  T_CHECK(rt_kernel_register("gelu", gelu) == 0 && rt_kernel_find("gelu") == gelu);
  char longname[RT_KERNEL_NAME_MAX + 2];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  T_CHECK(rt_kernel_register(longname, k_custom) == -1);
  T_CHECK(rt_kernel_register("", k_custom) == -1 && rt_kernel_register("z", NULL) == -1);
  rt_Attr at[2] = {{"eps", 0.5}, {"heads", 4}};
  rt_KernelArgs b = {NULL, 0, NULL, 0, NULL, 0, at, 2, 1, NULL};
  T_CHECK(rt_attr(&b, "heads", 1) == 4 && rt_attr(&b, "theta", 7) == 7);
}

static void test_errors(void) {
  char err[256];
  rt_View x = mkview(RT_F32, 2, (int64_t[]){2, 3}), w = mkview(RT_F32, 2, (int64_t[]){4, 5});
  rt_View y = mkview(RT_F32, 2, (int64_t[]){2, 4});
  rt_View in[2] = {x, w};
  T_CHECK(call("matmul", &y, 1, in, 2, NULL, 0, NULL, 0, 1, err) == RT_KERNEL_EARGS && strncmp(err, "matmul: ", 8) == 0);
  T_CHECK(call("matmul", &y, 1, in, 1, NULL, 0, NULL, 0, 1, err) == RT_KERNEL_EARGS);
  rt_View tok = mkview(RT_I32, 2, (int64_t[]){1, 2}), wte = mkview(RT_F32, 2, (int64_t[]){3, 4});
  rt_View e = mkview(RT_F32, 3, (int64_t[]){1, 2, 4});
  ((int32_t *)tok.data)[1] = 3;
  rt_View ein[2] = {tok, wte};
  T_CHECK(call("embedding", &e, 1, ein, 2, NULL, 0, NULL, 0, 1, err) == RT_KERNEL_EVALUE && strstr(err, "token 3"));
  /* attention_backward without its workspace */
  rt_View qkv = mkview(RT_F32, 3, (int64_t[]){1, 2, 12}), ay = mkview(RT_F32, 3, (int64_t[]){1, 2, 4});
  rt_View lse = mkview(RT_F32, 3, (int64_t[]){1, 1, 2}), dq = mkview(RT_F32, 3, (int64_t[]){1, 2, 12});
  rt_View bin[4] = {ay, qkv, ay, lse};
  rt_Attr at[1] = {{"heads", 1}};
  T_CHECK(call("attention_backward", &dq, 1, bin, 4, at, 1, NULL, 0, 1, err) == RT_KERNEL_EARGS && strstr(err, "workspace"));
  rt_Attr bad[2] = {{"heads", 3}, {"kv_heads", 2}};
  rt_View aout[2] = {ay, lse};
  T_CHECK(call("attention", aout, 2, &qkv, 1, bad, 2, NULL, 0, 1, err) == RT_KERNEL_EARGS);
}

static void test_add(void) {
  rt_View a = mkview(RT_BF16, 1, (int64_t[]){9}), b = mkview(RT_F32, 1, (int64_t[]){9});
  rt_View y = mkview(RT_F32, 1, (int64_t[]){9});
  fill_rand(&a), fill_rand(&b);
  rt_View in[2] = {a, b};
  char err[256];
  T_CHECK(call("add", &y, 1, in, 2, NULL, 0, NULL, 0, 1, err) == 0);
  int bad = 0;
  for (int i = 0; i < 9; i++) bad += rt_load(&y, i) != rt_load(&a, i) + rt_load(&b, i);
  T_CHECK(bad == 0);
}

/* Causal: perturbing a later token must not change earlier outputs. */
static void test_attention_causal(void) {
  Inst t;
  char err[256];
  inst_make(&t, &cases[7], RT_F32, 5);
  T_CHECK(run_fwd(&t, err) == 0);
  rt_View y0 = mkview(RT_F32, 3, t.out[0].shape);
  memcpy(y0.data, t.out[0].data, vbytes(&y0));
  int64_t T = 5, row = 32, yrow = 16;
  for (int64_t j = 4 * row; j < 5 * row; j++) ((float *)t.in[0].data)[j] += 0.5f; /* b=0, t=4 */
  T_CHECK(run_fwd(&t, err) == 0);
  T_CHECK(memcmp(y0.data, t.out[0].data, (size_t)(4 * yrow) * sizeof(float)) == 0);
  T_CHECK(memcmp(y0.data, t.out[0].data, (size_t)(5 * yrow) * sizeof(float)) != 0);
  T_CHECK(memcmp((float *)y0.data + T * yrow, (float *)t.out[0].data + T * yrow, (size_t)(T * yrow) * sizeof(float)) == 0);
}


/* ------------------------------------------------------ the fast kernels */

/* Shapes past every block edge of the fast path: more rows than a matmul
 * block, a ragged last query block (T = 150 against 64), layernorm wider
 * than a column chunk, elementwise ops over several chunks. */
static const GradCase fast_cases[] = {
  {"encoder", "encoder", "encoder_backward", 3, {I2(4, 64, 50), F2(50, 96), F2(64, 96)}, 1,
   {F3(4, 64, 96)}, 0, 0, 2, {SRC_DY, 0}, 2, {1, 2}, {1, 1}, {{0}}, 0, 0, 1},
  {"embedding", "embedding", "embedding_backward", 2, {I2(4, 64, 30), F2(30, 96)}, 1, {F3(4, 64, 96)},
   0, 0, 2, {SRC_DY, 0}, 1, {1}, {1}, {{0}}, 0, 0, 1},
  {"layernorm", "layernorm", "layernorm_backward", 3, {F3(4, 40, 300), F1(300), F1(300)}, 3,
   {F3(4, 40, 300), S2(4, 40), S2(4, 40)}, 0, 0, 5, {SRC_DY, 0, 1, SRC_OUT + 1, SRC_OUT + 2}, 3,
   {0, 1, 2}, {0, 1, 1}, {{"eps", 1e-5}}, 1, 0, 0},
  {"rmsnorm", "rmsnorm", "rmsnorm_backward", 2, {F3(4, 40, 300), F1(300)}, 2, {F3(4, 40, 300), S2(4, 40)},
   0, 0, 4, {SRC_DY, 0, 1, SRC_OUT + 1}, 2, {0, 1}, {0, 1}, {{"eps", 1e-5}}, 1, 0, 0},
  {"matmul", "matmul", "matmul_backward", 3, {F3(4, 100, 96), F2(80, 96), F1(80)}, 1, {F3(4, 100, 80)},
   0, 0, 3, {SRC_DY, 0, 1}, 3, {0, 1, 2}, {0, 1, 1}, {{0}}, 0, 0, 0},
  {"attention", "attention", "attention_backward", 1, {F3(2, 150, 128)}, 2,
   {F3(2, 150, 64), S3(2, 4, 150)}, 0, 0, 4, {SRC_DY, 0, SRC_OUT + 0, SRC_OUT + 1}, 1, {0}, {0},
   {{"heads", 4}, {"kv_heads", 2}}, 2, 2 * 150 * 64 * 4, 0},
  {"rope", "rope", "rope_backward", 1, {F3(2, 150, 128)}, 1, {F3(2, 150, 128)}, 0, 0, 1, {SRC_DY}, 1,
   {0}, {0}, {{"heads", 4}, {"kv_heads", 2}, {"theta", 100.0}}, 3, 0, 0},
  {"gelu", "gelu", "gelu_backward", 1, {F3(4, 100, 96)}, 1, {F3(4, 100, 96)}, 0, 0, 2, {SRC_DY, 0}, 1,
   {0}, {0}, {{0}}, 0, 0, 0},
  {"swiglu", "swiglu", "swiglu_backward", 1, {F3(4, 100, 96)}, 1, {F3(4, 100, 48)}, 0, 0, 2, {SRC_DY, 0},
   1, {0}, {0}, {{0}}, 0, 0, 0},
  {"crossentropy", "crossentropy", "crossentropy_backward", 2, {F3(4, 100, 77), I2(4, 100, 77)}, 2,
   {{'s', 1, {1}, 0}, S2(4, 100)}, 0, 1, 3, {0, SRC_OUT + 1, 1}, 1, {0}, {0}, {{0}}, 0, 0, 0},
  {"matmul_dx", "matmul", "matmul_backward", 3, {F3(4, 100, 96), F2(80, 96), F1(80)}, 1, {F3(4, 100, 80)},
   0, 0, 3, {SRC_DY, 0, 1}, 1, {0}, {0}, {{"grads", 1}}, 1, 0, 0},
  {"matmul_dw", "matmul", "matmul_backward", 2, {F3(4, 100, 96), F2(8, 96)}, 1, {F3(4, 100, 8)}, 0, 0, 3,
   {SRC_DY, 0, 1}, 1, {1}, {1}, {{"grads", 2}}, 1, 0, 0},
  {"lora_add", "lora_add", "lora_add_backward", 2, {F3(4, 100, 96), F3(4, 100, 32)}, 1, {F3(4, 100, 96)}, 0, 0,
   1, {SRC_DY}, 1, {1}, {0}, {{"scale", 2.0}, {"offset", 64}}, 2, 0, 0},
  {"layernorm_dx", "layernorm", "layernorm_backward", 3, {F3(4, 40, 300), F1(300), F1(300)}, 3,
   {F3(4, 40, 300), S2(4, 40), S2(4, 40)}, 0, 0, 5, {SRC_DY, 0, 1, SRC_OUT + 1, SRC_OUT + 2}, 1, {0}, {0},
   {{"eps", 1e-5}, {"grads", 1}}, 2, 0, 0},
  {"layernorm_dw", "layernorm", "layernorm_backward", 3, {F3(4, 40, 300), F1(300), F1(300)}, 3,
   {F3(4, 40, 300), S2(4, 40), S2(4, 40)}, 0, 0, 5, {SRC_DY, 0, 1, SRC_OUT + 1, SRC_OUT + 2}, 2, {1, 2}, {1, 1},
   {{"eps", 1e-5}, {"grads", 6}}, 2, 0, 0},
  {"rmsnorm_dw", "rmsnorm", "rmsnorm_backward", 2, {F3(4, 40, 300), F1(300)}, 2, {F3(4, 40, 300), S2(4, 40)},
   0, 0, 4, {SRC_DY, 0, 1, SRC_OUT + 1}, 1, {1}, {1}, {{"eps", 1e-5}, {"grads", 2}}, 2, 0, 0},
};
#define NFAST ((int)(sizeof fast_cases / sizeof fast_cases[0]))

/* Largest |x - y| over X's largest |x| (at least 1). */
static double rel_diff(const rt_View *x, const rt_View *y) {
  double d = 0.0, m = 1.0;
  for (int64_t j = 0; j < x->numel; j++) {
    double a = rt_load(x, j), b = rt_load(y, j);
    if (fabs(a - b) > d || a != a || b != b) d = a != a || b != b ? INFINITY : fabs(a - b);
    if (fabs(a) > m) m = fabs(a);
  }
  return d / m;
}

/* The fast kernels (a pool of 1 and of 2 threads) against the reference
 * (no pool): within the dtype's tolerance, forward and backward (the
 * backward fed the reference's forward outputs), and bitwise equal to each
 * other whatever the thread count. */
static void check_fast(const GradCase *c, rt_DType dt, rt_Pool *p1, rt_Pool *p2) {
  Inst r, f1, f2;
  char err[256];
  double tol = dt == RT_F32 ? 2e-5 : 1.6e-2, worst = 0.0;
  inst_make(&r, c, dt, 31);
  inst_make(&f1, c, dt, 31);
  inst_make(&f2, c, dt, 31);
  kctx = NULL;
  T_CHECKF(run_fwd(&r, err) == 0, "%s", err);
  kctx = p1;
  T_CHECKF(run_fwd(&f1, err) == 0, "%s", err);
  kctx = p2;
  T_CHECKF(run_fwd(&f2, err) == 0, "%s", err);
  for (int o = 0; o < c->nout; o++) {
    double d = rel_diff(&r.out[o], &f1.out[o]);
    if (d > worst) worst = d;
    T_CHECKF(d <= tol, "%s %s forward output %d: %g", c->name, dtname(dt), o, d);
    T_CHECKF(memcmp(f1.out[o].data, f2.out[o].data, vbytes(&f1.out[o])) == 0, "%s: 1 and 2 threads differ", c->name);
    memcpy(f1.out[o].data, r.out[o].data, vbytes(&r.out[o]));
    memcpy(f2.out[o].data, r.out[o].data, vbytes(&r.out[o]));
  }
  kctx = NULL;
  T_CHECKF(run_bwd(&r, err) == 0, "%s", err);
  kctx = p1;
  T_CHECKF(run_bwd(&f1, err) == 0, "%s", err);
  kctx = p2;
  T_CHECKF(run_bwd(&f2, err) == 0, "%s", err);
  kctx = NULL;
  for (int o = 0; o < c->nbout; o++) {
    double d = rel_diff(&r.bout[o], &f1.bout[o]);
    if (d > worst) worst = d;
    T_CHECKF(d <= tol, "%s %s backward output %d: %g", c->name, dtname(dt), o, d);
    T_CHECKF(memcmp(f1.bout[o].data, f2.bout[o].data, vbytes(&f1.bout[o])) == 0, "%s: 1 and 2 threads differ", c->name);
  }
  printf("  %-12s %-4s max |fast - reference| / max |reference| = %.3g\n", c->name, dtname(dt), worst);
}

/* add and adamw: their fast loops compute the reference's formula in its
 * order, so the outputs equal the reference's bitwise (a pool of 1 and of 2
 * threads); adamw in place over 3 steps, its params in DT (bf16 with an f32
 * master), over more elements than one chunk and a ragged last block. */
static void check_fast_add_adamw(rt_DType dt, rt_Pool *p1, rt_Pool *p2) {
  int64_t n = 3 * 16384 + 77;
  rt_Pool *pools[3] = {NULL, p1, p2};
  rt_View a = mkview(RT_BF16, 1, &n), b = mkview(RT_F32, 1, &n), y[3];
  fill_rand(&a), fill_rand(&b);
  char err[256];
  int master = dt == RT_BF16;
  rt_View p[3], m[3], v[3], ms[3], g = mkview(dt, 1, &n);
  rt_Attr at[5] = {{"lr", 0.01}, {"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-6}, {"weight_decay", 0.1}};
  for (int k = 0; k < 3; k++) {
    kctx = pools[k];
    y[k] = mkview(dt, 1, &n);
    rt_View in[2] = {a, b};
    T_CHECKF(call("add", &y[k], 1, in, 2, NULL, 0, NULL, 0, 1, err) == 0, "%s", err);
    p[k] = mkview(dt, 1, &n), m[k] = mkview(RT_F32, 1, &n), v[k] = mkview(RT_F32, 1, &n), ms[k] = mkview(RT_F32, 1, &n);
    rng = 0x1234567ull;
    for (int64_t i = 0; i < n; i++) {
      float w = rnd();
      rt_store(&p[k], i, w);
      rt_store(&ms[k], i, w);
    }
    for (int step = 1; step <= 3; step++) {
      fill_rand(&g);
      rt_View ain[5] = {p[k], g, m[k], v[k], ms[k]}, aout[4] = {p[k], m[k], v[k], ms[k]};
      T_CHECKF(call("adamw", aout, 3 + master, ain, 4 + master, at, 5, NULL, 0, step, err) == 0, "%s", err);
    }
  }
  kctx = NULL;
  for (int k = 1; k < 3; k++) {
    T_CHECKF(memcmp(y[0].data, y[k].data, vbytes(&y[0])) == 0, "add %s, %d thread(s): not the reference's bits",
             dtname(dt), k);
    T_CHECKF(memcmp(p[0].data, p[k].data, vbytes(&p[0])) == 0 && memcmp(m[0].data, m[k].data, vbytes(&m[0])) == 0 &&
                 memcmp(v[0].data, v[k].data, vbytes(&v[0])) == 0 && memcmp(ms[0].data, ms[k].data, vbytes(&ms[0])) == 0,
             "adamw %s, %d thread(s): not the reference's bits", dtname(dt), k);
  }
}

/* ---------------------------------------------------------------- dump */

static int dump_view(FILE *man, const char *dir, const char *cname, const char *role, int idx,
                     const rt_View *v) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.%s%d.bin", dir, cname, role, idx);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t n = fwrite(v->data, 1, vbytes(v), f);
  if (fclose(f) != 0 || n != vbytes(v)) return -1;
  fprintf(man, "tensor %s %s %d %s %s.%s%d.bin %d", cname, role, idx, dtname(v->dtype), cname, role, idx, v->rank);
  for (int i = 0; i < v->rank; i++) fprintf(man, " %lld", (long long)v->shape[i]);
  fprintf(man, "\n");
  return 0;
}

static int dump_all(const char *dir) {
  char path[1024], err[256];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *man = fopen(path, "w");
  if (!man) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  int rc = 0;
  for (int i = 0; i < NCASES && !rc; i++) {
    const GradCase *c = &cases[i];
    Inst t;
    inst_make(&t, c, RT_F32, 4242 + (uint64_t)i);
    if (run_fwd(&t, err) || run_bwd(&t, err)) {
      fprintf(stderr, "%s: %s\n", c->name, err);
      rc = 1;
      break;
    }
    fprintf(man, "case %s %s %s", c->name, c->fwd, c->bwd);
    for (int k = 0; k < c->nattrs; k++) fprintf(man, " %s=%.17g", c->attrs[k].key, c->attrs[k].num);
    fprintf(man, "\n");
    for (int k = 0; k < c->nin && !rc; k++) rc = dump_view(man, dir, c->name, "in", k, &t.in[k]);
    for (int k = 0; k < c->nout && !rc; k++) rc = dump_view(man, dir, c->name, "out", k, &t.out[k]);
    if (!rc) rc = dump_view(man, dir, c->name, "dy", 0, &t.dy);
    for (int k = 0; k < c->nbout && !rc; k++) {
      rc = dump_view(man, dir, c->name, "grad", c->wrt[k], &t.bout[k]);
      if (!rc && c->acc[k]) rc = dump_view(man, dir, c->name, "prefill", c->wrt[k], &t.prefill[k]);
    }
  }
  if (fclose(man) != 0) rc = 1;
  free_all();
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--dump") == 0) return dump_all(argv[2]);
  T_CASE("registry: built-ins, custom types, override, attrs") test_registry();
  T_CASE("bf16/f16 conversions round to nearest even and round-trip") test_bf16_convert();
  T_CASE("kernels reject bad arity, shapes, tokens, missing workspace") test_errors();
  double worst = 0.0;
  for (int i = 0; i < NCASES; i++) {
    char name[128];
    snprintf(name, sizeof name, "%s: backward matches finite differences", cases[i].name);
    T_CASE(name) check_fd(&cases[i], &worst);
  }
  printf("  worst |fd - backward| over all cases: %.3g\n", worst);
  for (int i = 0; i < NCASES; i++) {
    char name[128];
    snprintf(name, sizeof name, "%s: bf16 storage = f32 math rounded on store", cases[i].name);
    T_CASE(name) check_bf16(&cases[i]);
  }
  for (int i = 0; i < NCASES; i++) {
    char name[128];
    snprintf(name, sizeof name, "%s: bitwise deterministic (f32 and bf16)", cases[i].name);
    T_CASE(name) check_determinism(&cases[i]);
  }
  T_CASE("matmul and its backward equal naive loops bitwise across block edges") test_matmul_naive();
  T_CASE("adamw matches the scalar formula over 5 steps (f32)") test_adamw(0);
  T_CASE("adamw with an f32 master and bf16 params") test_adamw(1);
  T_CASE("slice and concat_rows: 4 row blocks out and back, f32, bf16, i32, bitwise") test_slice_concat();
  T_CASE("ema is decay * ema + (1 - decay) * param in f32, bitwise, over 3 steps") test_ema(NULL);
  T_CASE("a \"grads\" attribute that does not match the outputs is refused") test_grads_attr();
  T_CASE("add, mixed storage") test_add();
  T_CASE("attention is causal and per-batch") test_attention_causal();
  rt_Pool *p1 = NULL, *p2 = NULL;
  char perr[128];
  T_CASE("kernel pools of 1 and 2 threads open") {
    T_CHECKF(rt_pool_open(&p1, 1, perr, sizeof perr) == 0 && rt_pool_open(&p2, 2, perr, sizeof perr) == 0, "%s", perr);
  }
  for (int i = 0; p1 && p2 && i < NFAST; i++)
    for (int d = 0; d < 2; d++) {
      char name[160];
      snprintf(name, sizeof name, "%s %s: fast kernels within tolerance of the reference, 1 and 2 threads bitwise equal",
               fast_cases[i].name, d ? "bf16" : "f32");
      T_CASE(name) check_fast(&fast_cases[i], d ? RT_BF16 : RT_F32, p1, p2);
    }
  for (int d = 0; p1 && p2 && d < 2; d++) {
    char name[160];
    snprintf(name, sizeof name, "add and adamw %s: fast kernels equal the reference bitwise, 1 and 2 threads",
             d ? "bf16" : "f32");
    T_CASE(name) check_fast_add_adamw(d ? RT_BF16 : RT_F32, p1, p2);
  }
  if (p2) T_CASE("ema on 2 threads, 24,617 elements: the formula bitwise") test_ema(p2);
  printf("  GEMM: %s\n", rt_sgemm_name());
  rt_pool_close(p1);
  rt_pool_close(p2);
  free_all();
  T_DONE();
}
