/*
 * test_model.c - `ration model`'s graphs: exact parameter counts of known
 * models, the op contract of docs/OPS.md (every backward op reads what its
 * formula needs, from the right forward op), single producers before first
 * use, no dead activations, the stashed set of a layer, cost formulas,
 * determinism, and that every family loads through graph_parse.
 */
#include "ration.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static ModelConfig cfg(const char *family) {
  ModelConfig c;
  Err e;
  model_defaults(family, &c, &e);
  return c;
}

static ModelConfig tiny(const char *family) {
  ModelConfig c = cfg(family);
  c.layers = 3;
  c.dim = 64;
  c.heads = 4;
  c.kv_heads = strcmp(family, "llama") ? 0 : 2;
  c.ffn = strcmp(family, "llama") ? 0 : 192;
  c.vocab = 256;
  c.seq = 32;
  c.batch = 2;
  c.dtype = DT_F32;
  if (!strcmp(family, "unet")) {
    c.layers = 3;
    c.seq = 32;
  }
  return c;
}

/* An index over the JSON graph, independent of the generator's structures. */
typedef struct G {
  cJSON *root, *tensors, *ops;
  int nt, no;
  cJSON **t, **o;
} G;

static bool g_load(G *g, const ModelConfig *c) {
  Buf b = {0};
  Err e = {{0}};
  memset(g, 0, sizeof *g);
  if (model_build(c, &b, &e)) {
    printf("  model_build: %s\n", e.msg);
    return false;
  }
  g->root = cJSON_ParseWithLength(b.data, b.len);
  buf_free(&b);
  if (!g->root) return false;
  g->tensors = cJSON_GetObjectItem(g->root, "tensors");
  g->ops = cJSON_GetObjectItem(g->root, "ops");
  g->nt = cJSON_GetArraySize(g->tensors);
  g->no = cJSON_GetArraySize(g->ops);
  g->t = calloc((size_t)g->nt, sizeof *g->t);
  g->o = calloc((size_t)g->no, sizeof *g->o);
  for (int i = 0; i < g->nt; i++) g->t[i] = cJSON_GetArrayItem(g->tensors, i);
  for (int i = 0; i < g->no; i++) g->o[i] = cJSON_GetArrayItem(g->ops, i);
  return true;
}

static void g_free(G *g) {
  cJSON_Delete(g->root);
  free(g->t);
  free(g->o);
}

static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(cJSON_GetObjectItem(o, k)); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(cJSON_GetObjectItem(o, k)); }

static int tfind(const G *g, const char *name) {
  for (int i = 0; i < g->nt; i++)
    if (!strcmp(str(g->t[i], "name"), name)) return i;
  return -1;
}

static int ofind(const G *g, const char *name) {
  for (int i = 0; i < g->no; i++)
    if (!strcmp(str(g->o[i], "name"), name)) return i;
  return -1;
}

static int64_t numel(const cJSON *t) {
  int64_t n = 1;
  const cJSON *d;
  cJSON_ArrayForEach(d, cJSON_GetObjectItem(t, "shape")) n *= (int64_t)d->valuedouble;
  return n;
}

static int64_t tbytes(const cJSON *t) {
  const char *dt = str(t, "dtype");
  return numel(t) * (!strcmp(dt, "bf16") || !strcmp(dt, "f16") ? 2 : 4);
}

static bool same_shape(const cJSON *a, const cJSON *b) {
  char *sa = cJSON_PrintUnformatted(cJSON_GetObjectItem(a, "shape"));
  char *sb = cJSON_PrintUnformatted(cJSON_GetObjectItem(b, "shape"));
  bool same = !strcmp(sa, sb) && !strcmp(str(a, "dtype"), str(b, "dtype"));
  free(sa);
  free(sb);
  return same;
}

static const char *io(const cJSON *op, const char *list, int k) {
  return cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(op, list), k));
}
static int nio(const cJSON *op, const char *list) { return cJSON_GetArraySize(cJSON_GetObjectItem(op, list)); }

static int64_t params_of(const G *g) {
  int64_t n = 0;
  for (int i = 0; i < g->nt; i++)
    if (!strcmp(str(g->t[i], "kind"), "param")) n += numel(g->t[i]);
  return n;
}

/* Every activation: one producer, before its first reader; read by someone
 * or a graph output. Resident tensors: never written in the forward phase,
 * grads only by backward ops, params and optimizer state only by adamw,
 * inputs never. */
static void check_dataflow(const G *g) {
  int *prod = malloc(sizeof(int) * (size_t)g->nt), *nprod = calloc((size_t)g->nt, sizeof(int));
  int *first_read = malloc(sizeof(int) * (size_t)g->nt);
  for (int i = 0; i < g->nt; i++) prod[i] = first_read[i] = -1;
  for (int i = 0; i < g->nt; i++) T_CHECKF(tfind(g, str(g->t[i], "name")) == i, "duplicate %s", str(g->t[i], "name"));
  for (int i = 0; i < g->no; i++) {
    const cJSON *op = g->o[i];
    const char *phase = str(op, "phase"), *type = str(op, "type");
    T_CHECKF(ofind(g, str(op, "name")) == i, "duplicate op %s", str(op, "name"));
    for (int k = 0; k < nio(op, "inputs"); k++) {
      int t = tfind(g, io(op, "inputs", k));
      T_CHECKF(t >= 0, "%s reads unknown %s", str(op, "name"), io(op, "inputs", k));
      if (t >= 0 && first_read[t] < 0) first_read[t] = i;
    }
    for (int k = 0; k < nio(op, "outputs"); k++) {
      int t = tfind(g, io(op, "outputs", k));
      T_CHECKF(t >= 0, "%s writes unknown %s", str(op, "name"), io(op, "outputs", k));
      if (t < 0) continue;
      const char *kind = str(g->t[t], "kind");
      if (!strcmp(kind, "activation")) {
        nprod[t]++;
        prod[t] = k ? -2 - i : i; /* a statistic, output k > 0, is -2 - op */
      } else if (!strcmp(kind, "grad")) {
        T_CHECKF(!strcmp(phase, "backward"), "%s writes grad %s", str(op, "name"), str(g->t[t], "name"));
      } else {
        T_CHECKF((!strcmp(type, "adamw") || !strcmp(type, "ema")) && strcmp(kind, "input"), "%s writes %s %s",
                 str(op, "name"), kind, str(g->t[t], "name"));
      }
    }
  }
  for (int i = 0; i < g->nt; i++) {
    if (strcmp(str(g->t[i], "kind"), "activation")) continue;
    const char *n = str(g->t[i], "name");
    T_CHECKF(nprod[i] == 1, "%s has %d producers", n, nprod[i]);
    /* Unread: the loss, or a statistic (mean, rstd) only a backward that
     * is not there (nothing upstream trains) would read. */
    int p = prod[i] < -1 ? -2 - prod[i] : prod[i];
    T_CHECKF(first_read[i] > p || (first_read[i] < 0 && (!strcmp(n, "loss") || prod[i] < -1)),
             "%s read at %d, produced at %d", n, first_read[i], p);
  }
  const cJSON *outs = cJSON_GetObjectItem(g->root, "outputs");
  T_CHECK(cJSON_GetArraySize(outs) == 1 && !strcmp(cJSON_GetArrayItem(outs, 0)->valuestring, "loss"));
  free(prod);
  free(nprod);
  free(first_read);
}

/* docs/OPS.md, restated: what each backward op reads, as tokens over its
 * forward op F: "dy" (a backward-made gradient shaped like F's first output),
 * "iK" F's input K, "oK" F's output K. */
static const struct {
  const char *bwd, *reads;
} contract[] = {
    {"encoder_backward", "dy i0"},
    {"embedding_backward", "dy i0"},
    {"layernorm_backward", "dy i0 i1 o1 o2"},
    {"rmsnorm_backward", "dy i0 i1 o1"},
    {"matmul_backward", "dy i0 i1"},
    {"attention_backward", "dy i0 o0 o1"},
    {"rope_backward", "dy"},
    {"gelu_backward", "dy i0"},
    {"swiglu_backward", "dy i0"},
    {"crossentropy_backward", "i0 o1 i1"},
    {"conv2d_backward", "dy i0 i1"},
    {"downsample_backward", "dy i0 i1"},
    {"group_norm_backward", "dy i0 i1 o1 o2"},
    {"silu_backward", "dy i0"},
    {"upsample_backward", "dy"},
    {"concat_backward", "dy"},
    {"mse_loss_backward", "i0 i1"},
    {"lora_add_backward", "dy"},
};

static bool frozen(const cJSON *t) { return cJSON_IsTrue(cJSON_GetObjectItem(t, "frozen")); }

static void check_backward(const G *g) {
  int nbwd = 0;
  for (int i = 0; i < g->no; i++) {
    const cJSON *op = g->o[i];
    /* concat_rows stacks --loss-chunks' blocks of dh: no forward op. */
    if (strcmp(str(op, "phase"), "backward") || !strcmp(str(op, "type"), "add") || !strcmp(str(op, "type"), "concat_rows"))
      continue;
    nbwd++;
    const char *type = str(op, "type"), *reads = NULL;
    for (size_t r = 0; r < sizeof contract / sizeof contract[0]; r++)
      if (!strcmp(contract[r].bwd, type)) reads = contract[r].reads;
    T_CHECKF(reads != NULL, "unexpected backward type %s", type);
    int f = strncmp(str(op, "name"), "bwd.", 4) ? -1 : ofind(g, str(op, "name") + 4);
    T_CHECKF(f >= 0 && f < i, "%s has no forward op", str(op, "name"));
    if (!reads || f < 0) continue;
    const cJSON *F = g->o[f];
    T_CHECKF(strlen(type) == strlen(str(F, "type")) + 9 && !strncmp(type, str(F, "type"), strlen(str(F, "type"))),
             "%s is %s but forward is %s", str(op, "name"), type, str(F, "type"));
    int k = 0;
    for (const char *r = reads; *r; r += r[2] ? 3 : 2, k++) {
      const char *got = io(op, "inputs", k);
      if (!got) {
        T_CHECKF(0, "%s: input %d missing", str(op, "name"), k);
        break;
      }
      if (r[0] == 'd') {
        int dy = tfind(g, got), y = tfind(g, io(F, "outputs", 0));
        int p = -1;
        for (int j = 0; j < i; j++)
          for (int m = 0; m < nio(g->o[j], "outputs"); m++)
            if (!strcmp(io(g->o[j], "outputs", m), got)) p = j;
        T_CHECKF(dy >= 0 && y >= 0 && same_shape(g->t[dy], g->t[y]), "%s: dy %s", str(op, "name"), got);
        T_CHECKF(p >= 0 && !strcmp(str(g->o[p], "phase"), "backward"), "%s: dy %s not made by backward", str(op, "name"),
                 got);
      } else {
        const char *want = io(F, r[0] == 'i' ? "inputs" : "outputs", r[1] - '0');
        T_CHECKF(want && !strcmp(got, want), "%s input %d: %s, want %s", str(op, "name"), k, got, want ? want : "?");
      }
    }
    T_CHECKF(k == nio(op, "inputs"), "%s reads %d tensors, the contract %d", str(op, "name"), nio(op, "inputs"), k);
    /* Outputs: the gradients of F's inputs that are not graph inputs or
     * integers (a block of the targets) (nor
     * lora_add's y, whose gradient is dy), in order, or those attribute
     * "grads" names, never a frozen param's; a param's is its grad tensor,
     * an activation's shaped like it. */
    const cJSON *grads = cJSON_GetObjectItem(cJSON_GetObjectItem(op, "attrs"), "grads");
    int m = 0;
    for (int j = 0; j < nio(F, "inputs"); j++) {
      int x = tfind(g, io(F, "inputs", j));
      const char *kind = str(g->t[x], "kind");
      if (!strcmp(kind, "input") || !strcmp(str(g->t[x], "dtype"), "i32") || (j == 0 && !strcmp(type, "lora_add_backward")))
        continue;
      bool listed = !grads || ((int)grads->valuedouble >> j & 1);
      T_CHECKF(!listed || !frozen(g->t[x]), "%s: a gradient for frozen %s", str(op, "name"), str(g->t[x], "name"));
      if (!listed) continue;
      const char *got = io(op, "outputs", m++);
      if (!got) break;
      if (!strcmp(kind, "param")) {
        char want[256];
        snprintf(want, sizeof want, "grad.%s", str(g->t[x], "name"));
        T_CHECKF(!strcmp(got, want), "%s output %s, want %s", str(op, "name"), got, want);
      } else {
        int d = tfind(g, got);
        T_CHECKF(same_shape(g->t[d], g->t[x]) && !strcmp(str(g->t[d], "kind"), "activation"), "%s output %s",
                 str(op, "name"), got);
      }
    }
    T_CHECKF(m == nio(op, "outputs"), "%s has %d outputs, want %d", str(op, "name"), nio(op, "outputs"), m);
  }
  T_CHECK(nbwd > 0);
}

/* One AdamW per trained param over exactly its grad and state, then (with
 * an EMA) its ema op; a frozen param has neither, nor a grad. */
static void check_optimizer(const G *g, bool bf16, bool ema) {
  int nparams = 0, nema = 0;
  for (int i = 0; i < g->nt; i++) {
    if (strcmp(str(g->t[i], "kind"), "param")) continue;
    const char *p = str(g->t[i], "name");
    char name[256], want[5][256];
    snprintf(name, sizeof name, "adamw.%s", p);
    int o = ofind(g, name);
    snprintf(want[1], 256, "grad.%s", p);
    if (frozen(g->t[i])) {
      T_CHECKF(o < 0 && tfind(g, want[1]) < 0, "frozen %s has an optimizer or a grad", p);
      continue;
    }
    nparams++;
    snprintf(name, sizeof name, "ema.%s", p);
    int eo = ofind(g, name), et = tfind(g, name);
    T_CHECKF(ema == (eo >= 0 && et >= 0), "%s: ema op %d, state %d", p, eo, et);
    if (eo >= 0 && et >= 0) {
      nema++;
      snprintf(want[4], 256, "adam.master.%s", p);
      T_CHECKF(eo == o + 1 && nio(g->o[eo], "inputs") == 2 && !strcmp(io(g->o[eo], "inputs", 0), name) &&
                   !strcmp(io(g->o[eo], "inputs", 1), bf16 ? want[4] : p) && !strcmp(io(g->o[eo], "outputs", 0), name) &&
                   !strcmp(str(g->t[et], "dtype"), "f32") && !strcmp(str(g->t[et], "kind"), "optstate"),
               "%s: ema op", p);
    }
    snprintf(name, sizeof name, "adamw.%s", p);
    T_CHECKF(o >= 0, "no %s", name);
    if (o < 0) continue;
    snprintf(want[0], 256, "%s", p);
    snprintf(want[1], 256, "grad.%s", p);
    snprintf(want[2], 256, "adam.m.%s", p);
    snprintf(want[3], 256, "adam.v.%s", p);
    snprintf(want[4], 256, "adam.master.%s", p);
    int nin = bf16 ? 5 : 4;
    T_CHECK(nio(g->o[o], "inputs") == nin && nio(g->o[o], "outputs") == nin - 1);
    for (int k = 0; k < nin && k < nio(g->o[o], "inputs"); k++) T_CHECK(!strcmp(io(g->o[o], "inputs", k), want[k]));
    for (int k = 0; k + 1 < nin && k < nio(g->o[o], "outputs"); k++)
      T_CHECK(!strcmp(io(g->o[o], "outputs", k), want[k ? k + 1 : 0]));
    for (int k = 2; k < nin; k++) {
      int t = tfind(g, want[k]);
      T_CHECKF(t >= 0 && !strcmp(str(g->t[t], "dtype"), "f32") && !strcmp(str(g->t[t], "kind"), "optstate") &&
                   numel(g->t[t]) == numel(g->t[i]),
               "%s", want[k]);
    }
    int gt = tfind(g, want[1]);
    T_CHECK(gt >= 0 && same_shape(g->t[gt], g->t[i]) && !strcmp(str(g->t[gt], "kind"), "grad"));
    int writers = 0;
    for (int j = 0; j < g->no; j++)
      for (int k = 0; k < nio(g->o[j], "outputs"); k++) writers += !strcmp(io(g->o[j], "outputs", k), want[1]);
    T_CHECKF(writers >= 1, "%s never written", want[1]);
  }
  int nadam = 0, nemaops = 0;
  for (int j = 0; j < g->no; j++) nadam += !strcmp(str(g->o[j], "type"), "adamw");
  for (int j = 0; j < g->no; j++) nemaops += !strcmp(str(g->o[j], "type"), "ema");
  T_CHECK(nadam == nparams && nemaops == nema);
}

/* Activations produced forward and read after the forward, named with prefix. */
static int stashed_with_prefix(const G *g, const char *prefix, const char **names, int max) {
  int n = 0;
  for (int i = 0; i < g->nt; i++) {
    const char *tn = str(g->t[i], "name");
    if (strcmp(str(g->t[i], "kind"), "activation") || strncmp(tn, prefix, strlen(prefix))) continue;
    bool fwd = false, later = false;
    for (int j = 0; j < g->no; j++) {
      bool f = !strcmp(str(g->o[j], "phase"), "forward");
      for (int k = 0; k < nio(g->o[j], "outputs"); k++) fwd |= f && !strcmp(io(g->o[j], "outputs", k), tn);
      for (int k = 0; k < nio(g->o[j], "inputs"); k++) later |= !f && !strcmp(io(g->o[j], "inputs", k), tn);
    }
    if (fwd && later && n < max) names[n++] = tn;
  }
  return n;
}

static bool same_set(const char **got, int n, const char *const *want, int m) {
  if (n != m) return false;
  for (int i = 0; i < m; i++) {
    bool found = false;
    for (int j = 0; j < n; j++) found |= !strcmp(got[j], want[i]);
    if (!found) return false;
  }
  return true;
}

static void check_all(const ModelConfig *c) {
  G g;
  T_CHECK(g_load(&g, c));
  if (!g.root) return;
  check_dataflow(&g);
  check_backward(&g);
  check_optimizer(&g, c->dtype == DT_BF16, c->ema_decay > 0);
  ModelStats s;
  Err e;
  T_CHECK(model_stats(c, &s, &e) == 0 && s.params == params_of(&g) && s.nops == g.no && s.ntensors == g.nt);
  g_free(&g);
}

int main(void) {
  T_CASE("gpt2 124M has 124,439,808 parameters") {
    ModelConfig c = cfg("gpt2");
    Err e;
    T_CHECK(model_param_count(&c, &e) == 124439808);
    c.batch = 1;
    c.seq = 64;
    c.layers = 12;
    G g;
    /* wpe is [seq, C]: the count needs the full 1024 positions. */
    c.seq = 1024;
    T_CHECK(g_load(&g, &c) && params_of(&g) == 124439808);
    g_free(&g);
  }
  T_CASE("llama3 8B and 3.2 1B parameter counts") {
    ModelConfig c = cfg("llama");
    Err e;
    T_CHECK(c.layers == 32 && c.dim == 4096 && c.heads == 32 && c.kv_heads == 8 && c.ffn == 14336 && c.vocab == 128256);
    T_CHECK(model_param_count(&c, &e) == 8030261248LL);
    c.seq = 16;
    G g;
    T_CHECK(g_load(&g, &c) && params_of(&g) == 8030261248LL);
    g_free(&g);
    c.layers = 16;
    c.dim = 2048;
    c.ffn = 8192;
    c.tied = true;
    T_CHECK(model_param_count(&c, &e) == 1235814400LL);
    T_CHECK(g_load(&g, &c) && params_of(&g) == 1235814400LL && tfind(&g, "lm_head.w") < 0);
    g_free(&g);
  }
  T_CASE("gpt2 graph: dataflow, backward contract, optimizer") {
    ModelConfig c = tiny("gpt2");
    check_all(&c);
    c.dtype = DT_BF16;
    check_all(&c);
  }
  T_CASE("llama graph: dataflow, backward contract, optimizer (tied and untied)") {
    ModelConfig c = tiny("llama");
    check_all(&c);
    c.dtype = DT_BF16;
    c.tied = true;
    check_all(&c);
  }
  T_CASE("unet graph: dataflow, backward contract, optimizer") {
    ModelConfig c = tiny("unet");
    check_all(&c);
    c.dtype = DT_BF16;
    check_all(&c);
  }
  T_CASE("gpt2 layer stashes exactly its 13 tensors") {
    ModelConfig c = tiny("gpt2");
    G g;
    T_CHECK(g_load(&g, &c));
    const char *got[64];
    static const char *const want[] = {"l1.x",      "l1.ln1.y",    "l1.ln1.mean", "l1.ln1.rstd", "l1.qkv.y",
                                       "l1.attn.y", "l1.attn.lse", "l1.res1.y",   "l1.ln2.y",    "l1.ln2.mean",
                                       "l1.ln2.rstd", "l1.fc.y",   "l1.gelu.y"};
    int n = stashed_with_prefix(&g, "l1.", got, 64);
    T_CHECKF(same_set(got, n, want, 13), "%d stashed", n);
    g_free(&g);
  }
  T_CASE("llama layer stashes exactly its 11 tensors") {
    ModelConfig c = tiny("llama");
    G g;
    T_CHECK(g_load(&g, &c));
    const char *got[64];
    static const char *const want[] = {"l1.x",        "l1.ln1.y", "l1.ln1.rstd", "l1.rope.y", "l1.attn.y", "l1.attn.lse",
                                       "l1.res1.y",   "l1.ln2.y", "l1.ln2.rstd", "l1.w13.y",  "l1.swiglu.y"};
    int n = stashed_with_prefix(&g, "l1.", got, 64);
    T_CHECKF(same_set(got, n, want, 11), "%d stashed", n);
    g_free(&g);
  }
  T_CASE("tied lm head: wte's grad has two accumulating writers") {
    ModelConfig cs[2] = {tiny("gpt2"), tiny("llama")};
    cs[1].tied = true;
    for (int m = 0; m < 2; m++) {
      G g;
      T_CHECK(g_load(&g, &cs[m]));
      int w = 0;
      for (int j = 0; j < g.no; j++)
        for (int k = 0; k < nio(g.o[j], "outputs"); k++) w += !strcmp(io(g.o[j], "outputs", k), "grad.wte");
      T_CHECK(w == 2);
      T_CHECK(!strcmp(io(g.o[ofind(&g, "lm_head")], "inputs", 1), "wte"));
      g_free(&g);
    }
  }
  T_CASE("dtypes and kinds: stats f32, tokens i32, activations in the model dtype") {
    ModelConfig c = tiny("llama");
    c.dtype = DT_BF16;
    G g;
    T_CHECK(g_load(&g, &c));
    for (int i = 0; i < g.nt; i++) {
      const char *n = str(g.t[i], "name"), *dt = str(g.t[i], "dtype"), *kind = str(g.t[i], "kind");
      size_t l = strlen(n);
      bool stat = (l > 5 && !strcmp(n + l - 5, ".rstd")) || (l > 4 && !strcmp(n + l - 4, ".lse")) || !strcmp(n, "loss");
      if (!strcmp(n, "tokens") || !strcmp(n, "targets"))
        T_CHECK(!strcmp(dt, "i32") && !strcmp(kind, "input"));
      else if (stat || !strncmp(n, "adam.", 5))
        T_CHECKF(!strcmp(dt, "f32"), "%s is %s", n, dt);
      else
        T_CHECKF(!strcmp(dt, "bf16"), "%s is %s", n, dt);
    }
    int loss = tfind(&g, "loss");
    T_CHECK(loss >= 0 && numel(g.t[loss]) == 1);
    g_free(&g);
  }
  T_CASE("costs follow the OPS.md formulas") {
    ModelConfig c = cfg("gpt2");
    c.layers = 2;
    c.batch = 4;
    c.seq = 128;
    c.dtype = DT_BF16;
    G g;
    T_CHECK(g_load(&g, &c));
    int64_t B = 4, T = 128, C = 768, NH = 12, hd = 64, V = 50257;
    const cJSON *qkv = g.o[ofind(&g, "l0.qkv")];
    T_CHECK(num(qkv, "flops") == (double)(2 * B * T * C * 3 * C));
    T_CHECK(num(qkv, "bytes") == (double)(2 * (B * T * C + 3 * C * C + 3 * C + B * T * 3 * C)));
    const cJSON *qb = g.o[ofind(&g, "bwd.l0.qkv")];
    T_CHECK(num(qb, "flops") == (double)(4 * B * T * C * 3 * C));
    /* dy, x, w read; dx written; dw and dbias read and written (+=). */
    T_CHECK(num(qb, "bytes") == (double)(2 * (B * T * 3 * C + B * T * C + 3 * C * C + B * T * C + 2 * 3 * C * C + 2 * 3 * C)));
    const cJSON *ab = g.o[ofind(&g, "bwd.l1.attn")];
    T_CHECK(num(ab, "workspace") == (double)(B * T * NH * hd * 4));
    T_CHECK(num(ab, "flops") == (double)(5 * B * NH * T * T * hd));
    T_CHECK(num(g.o[ofind(&g, "l1.attn")], "flops") == (double)(2 * B * NH * T * T * hd));
    T_CHECK(num(g.o[ofind(&g, "lm_head")], "flops") == (double)(2 * B * T * C * V));
    for (int i = 0; i < g.no; i++)
      if (strcmp(str(g.o[i], "type"), "attention_backward"))
        T_CHECKF(num(g.o[i], "workspace") == 0, "%s", str(g.o[i], "name"));
    /* Elementwise and norm ops: bytes = inputs + outputs exactly. */
    const char *plain[] = {"l0.ln1", "l0.gelu", "l0.res1", "ce", "bwd.l0.gelu", "acc.l0.x", "adamw.l0.fc.w"};
    for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++) {
      const cJSON *op = g.o[ofind(&g, plain[k])];
      int64_t want = 0;
      for (int j = 0; j < nio(op, "inputs"); j++) want += tbytes(g.t[tfind(&g, io(op, "inputs", j))]);
      for (int j = 0; j < nio(op, "outputs"); j++) want += tbytes(g.t[tfind(&g, io(op, "outputs", j))]);
      T_CHECKF(num(op, "bytes") == (double)want, "%s", plain[k]);
    }
    T_CHECK(num(g.o[ofind(&g, "l0.gelu")], "flops") == (double)(8 * B * T * 4 * C));
    g_free(&g);
  }
  T_CASE("unet: encoder outputs are concatenated into the decoder and live long") {
    ModelConfig c = cfg("unet");
    G g;
    T_CHECK(g_load(&g, &c));
    int nfwd = 0;
    for (int i = 0; i < g.no; i++) nfwd += !strcmp(str(g.o[i], "phase"), "forward");
    for (int lvl = 0; lvl < c.layers; lvl++) {
      char skip[64], cat[64], down[64];
      snprintf(skip, sizeof skip, "e%d.b2.conv.y", lvl);
      snprintf(cat, sizeof cat, "d%d.cat", lvl);
      snprintf(down, sizeof down, "bwd.e%d.down", lvl);
      int ci = ofind(&g, cat), pi = -1;
      for (int j = 0; j < g.no; j++)
        if (nio(g.o[j], "outputs") && !strcmp(io(g.o[j], "outputs", 0), skip)) pi = j;
      T_CHECK(ci >= 0 && pi >= 0 && !strcmp(io(g.o[ci], "inputs", 1), skip));
      /* Produced in the encoder, consumed in the decoder. */
      if (lvl == 0) T_CHECK(ci - pi > nfwd / 2);
      if (lvl + 1 < c.layers) T_CHECK(ofind(&g, down) >= 0 && !strcmp(io(g.o[ofind(&g, down)], "inputs", 1), skip));
    }
    g_free(&g);
  }
  T_CASE("same config, byte-identical text; every family loads with graph_parse") {
    const char *fam[] = {"gpt2", "llama", "unet"};
    for (int f = 0; f < 3; f++) {
      ModelConfig c = tiny(fam[f]);
      Buf a = {0}, b = {0};
      Err e;
      T_CHECK(model_build(&c, &a, &e) == 0 && model_build(&c, &b, &e) == 0);
      T_CHECK(a.len == b.len && a.data && !memcmp(a.data, b.data, a.len));
      Graph *g = graph_parse("mem.json", a.data, a.len, &e);
      T_CHECKF(g != NULL, "%s: %s", fam[f], g ? "" : e.msg);
      ModelStats s;
      T_CHECK(model_stats(&c, &s, &e) == 0);
      if (g) {
        int64_t st = 0;
        for (int k = 0; k < g->nstashed; k++) st += g->tensors[g->stashed[k]].bytes;
        T_CHECK(g->nstashed == s.nstashed && st == s.stashed_bytes && g->nops == s.nops);
        graph_free(g);
      }
      buf_free(&a);
      buf_free(&b);
    }
  }
  T_CASE("checked-in models load and validate; published parameter counts") {
    static const struct {
      const char *path;
      int64_t params; /* 0: not a published model */
    } files[] = {{"models/gpt2-tiny.json", 0},          {"models/llama-tiny.json", 0},
                 {"models/gpt2-124m.json", 124439808},   {"models/gpt2-1558m.json", 1557611200},
                 {"models/llama3.2-1b.json", 1235814400}, {"models/llama3-8b.json", 8030261248LL},
                 {"models/unet.json", 0}};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
      Err e;
      Graph *g = graph_load(files[f].path, &e);
      T_CHECKF(g != NULL, "%s", g ? "" : e.msg);
      if (!g) continue;
      int64_t params = 0;
      for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].kind == KIND_PARAM) params += g->tensors[i].bytes / graph_dtype_size(g->tensors[i].dtype);
      T_CHECKF(!files[f].params || params == files[f].params, "%s: %lld params", files[f].path, (long long)params);
      T_CHECK(g->nstashed > 0 && graph_find_tensor(g, "loss") >= 0);
      graph_free(g);
    }
  }
  T_CASE("--lora: base frozen, adapters A [r,C] and B [W,r] per target, the exact trainable count") {
    unsigned all = MODEL_LORA_Q | MODEL_LORA_K | MODEL_LORA_V | MODEL_LORA_O | MODEL_LORA_UP | MODEL_LORA_DOWN;
    for (int f = 0; f < 2; f++) {
      ModelConfig c = tiny(f ? "llama" : "gpt2");
      c.lora_rank = 4;
      c.lora_targets = f ? all | MODEL_LORA_GATE : all;
      c.ema_decay = f ? 0.999 : 0;
      check_all(&c);
      G g;
      T_CHECK(g_load(&g, &c));
      int64_t C = 64, F = f ? 192 : 256, KV = f ? 32 : 64, r = 4, trained = 0, frozen_n = 0;
      /* q: C, k and v: KV heads' width, o: C, gate and up: F, down: C. */
      int64_t width_sum = C + 2 * KV + C + (f ? 2 * F : F) + C;
      int64_t in_sum = 4 * C + (f ? 2 * C : C) + F; /* A's input dim per target */
      for (int i = 0; i < g.nt; i++)
        if (!strcmp(str(g.t[i], "kind"), "param")) *(frozen(g.t[i]) ? &frozen_n : &trained) += numel(g.t[i]);
      ModelConfig base = tiny(f ? "llama" : "gpt2");
      T_CHECKF(trained == 3 * r * (width_sum + in_sum), "%s: %lld trained", c.family, (long long)trained);
      T_CHECK(frozen_n == model_param_count(&base, &(Err){{0}}));
      /* Nothing upstream of the first adapter trains: no backward there. */
      T_CHECK(ofind(&g, f ? "bwd.embedding" : "bwd.encoder") < 0 && ofind(&g, "bwd.l0.ln1") < 0 &&
              ofind(&g, "bwd.l0.qkv") < 0);
      /* Layer 0's adapters: dA only; layer 1's frozen qkv: dx only. */
      const cJSON *a0 = g.o[ofind(&g, "bwd.l0.qkv.lora_q.a")], *b0 = g.o[ofind(&g, "bwd.l1.qkv")];
      T_CHECK(num(cJSON_GetObjectItem(a0, "attrs"), "grads") == 2 && nio(a0, "outputs") == 1);
      T_CHECK(nio(b0, "outputs") == 1 && num(b0, "flops") == (double)(2 * 2 * 32 * C * (C + 2 * KV)));
      const cJSON *la = g.o[ofind(&g, "l0.qkv.lora_v")];
      T_CHECK(num(cJSON_GetObjectItem(la, "attrs"), "offset") == (double)(C + KV) &&
              num(cJSON_GetObjectItem(la, "attrs"), "scale") == 1.0 && num(la, "flops") == (double)(2 * 2 * 32 * KV));
      g_free(&g);
    }
    ModelConfig c = tiny("llama");
    c.lora_rank = 8;
    c.lora_alpha = 16;
    G g;
    T_CHECK(g_load(&g, &c));
    int q = ofind(&g, "l1.qkv.lora_q"), v = ofind(&g, "l1.qkv.lora_v");
    T_CHECK(q >= 0 && v >= 0 && ofind(&g, "l1.qkv.lora_k") < 0 && ofind(&g, "l1.attproj.lora_o") < 0);
    T_CHECK(num(cJSON_GetObjectItem(g.o[q], "attrs"), "scale") == 2.0);
    g_free(&g);
    unsigned bits;
    Err e = {{0}};
    T_CHECK(model_lora_targets("q,v,down", &bits, &e) == 0 && bits == (MODEL_LORA_Q | MODEL_LORA_V | MODEL_LORA_DOWN));
    T_CHECK(model_lora_targets("q,,v", &bits, &e) < 0 && strstr(e.msg, "''"));
    T_CHECK(model_lora_targets("qkv", &bits, &e) < 0 && strstr(e.msg, "'qkv'"));
  }
  T_CASE("--loss-chunks: K blocks of logits, each block's backward right after its loss, no [B,T,V] tensor") {
    for (int f = 0; f < 3; f++) {
      ModelConfig c = tiny(f == 1 ? "llama" : "gpt2");
      c.loss_chunks = f == 2 ? 2 : 4;
      c.lora_rank = f == 2 ? 4 : 0; /* a frozen lm head: dx only */
      c.vocab = 300;                /* no other tensor is [N, 300] */
      check_all(&c);
      G g;
      T_CHECK(g_load(&g, &c));
      int64_t N = 2 * 32, R = N / c.loss_chunks, V = 300, C = 64;
      for (int i = 0; i < g.nt; i++)
        T_CHECKF(strcmp(str(g.t[i], "kind"), "activation") || numel(g.t[i]) != N * V, "%s is the whole logits",
                 str(g.t[i], "name"));
      for (int k = 0; k < c.loss_chunks; k++) {
        char n[64];
        snprintf(n, sizeof n, "ce.c%d", k);
        int ce = ofind(&g, n);
        snprintf(n, sizeof n, "logits.c%d", k);
        int lg = tfind(&g, n);
        T_CHECK(ce >= 0 && lg >= 0 && numel(g.t[lg]) == R * V && num(cJSON_GetObjectItem(g.o[ce], "attrs"), "mean_over") == N);
        if (ce < 0) continue;
        T_CHECK(!strcmp(str(g.o[ce + 1], "type"), "crossentropy_backward") &&
                !strcmp(str(g.o[ce + 2], "type"), "matmul_backward") && nio(g.o[ce + 2], "outputs") == (f == 2 ? 1 : 2));
        T_CHECK(num(g.o[ce - 1], "flops") == (double)(2 * R * C * V) && num(g.o[ce + 2], "flops") == (double)(2 * R * C * V * (f == 2 ? 1 : 2)));
      }
      int acc = ofind(&g, "acc.lnf.y");
      T_CHECK(acc >= 0 && nio(g.o[acc], "inputs") == c.loss_chunks && !strcmp(io(g.o[acc], "outputs", 0), "grad.lnf.y") &&
              !strcmp(str(g.o[acc + 1], "name"), "bwd.lnf"));
      const cJSON *sl = g.o[ofind(&g, "lnf.y.c1")];
      T_CHECK(num(cJSON_GetObjectItem(sl, "attrs"), "offset") == (double)(R * C) && num(sl, "bytes") == (double)(2 * R * C * 4));
      g_free(&g);
    }
  }
  T_CASE("--ema on a bf16 full fine-tune: an ema op of the master after each adamw") {
    ModelConfig c = tiny("gpt2");
    c.dtype = DT_BF16;
    c.ema_decay = 0.99;
    check_all(&c);
  }
  T_CASE("bad configs are refused with a message") {
    Err e = {{0}};
    ModelConfig c;
    T_CHECK(model_defaults("resnet", &c, &e) < 0 && strstr(e.msg, "resnet"));
    c = tiny("gpt2");
    c.heads = 5;
    T_CHECK(model_build(&c, &(Buf){0}, &e) < 0 && strstr(e.msg, "--heads"));
    c = tiny("llama");
    c.kv_heads = 3;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--kv-heads"));
    c = tiny("llama");
    c.seq = 0;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--seq"));
    c = tiny("unet");
    c.dim = 48;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--dim"));
    c = tiny("unet");
    c.seq = 34;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--seq"));
    c = tiny("gpt2");
    c.dtype = DT_I32;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "i32"));
    c = cfg("llama");
    c.vocab = 1 << 24;
    c.dim = 1 << 24;
    c.heads = 1;
    c.kv_heads = 1;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "overflow"));
    c = tiny("gpt2");
    c.layers = 1 << 20;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--layers"));
    c = tiny("gpt2");
    c.lora_rank = 4;
    c.lora_targets = MODEL_LORA_GATE;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "gate"));
    c = tiny("unet");
    c.lora_rank = 4;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--lora"));
    c = tiny("gpt2");
    c.lora_alpha = 8;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "need --lora"));
    c = tiny("gpt2");
    c.loss_chunks = 3; /* 64 rows */
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "divide"));
    c = tiny("gpt2");
    c.loss_chunks = 32;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--loss-chunks"));
    c = tiny("gpt2");
    c.ema_decay = 1;
    T_CHECK(model_param_count(&c, &e) < 0 && strstr(e.msg, "--ema"));
  }
  T_DONE();
}
