/*
 * train.c - example trainer: links one emitted schedule with libration and
 * trains a byte-level language model on a text file. Everything model
 * specific is read from the schedule's tables (which op embeds tokens,
 * which computes the loss, which params are norm weights or biases), so
 * the same file trains gpt2 and llama family graphs.
 *
 * Build: cc -DSCHED_HEADER='"NAME.sched.h"' -DSCHED_ENTRY=ration_schedule_NAME
 *        train.c NAME.sched.c libration.a -lm -lpthread
 * Run:   train [--steps N] [--threads N] [--data FILE] [--profile OUT.costs.json] [--seed S] [--sample BYTES]
 *              [--graph GRAPH.json]
 *        (--threads: the CPU backend's kernel threads, default every core; --graph: the graph the
 *        schedule must have been planned from, by this libration's ration version)
 */
#include SCHED_HEADER
#include "kernels.h"
#include "ration.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_PARAM = 1 };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { /* xorshift64*: reproducible across platforms */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static const rt_Schedule *S;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int find_op_of_type(const char *type) {
  for (int o = 0; o < S->nops; o++)
    if (!strcmp(S->ops[o].type, type)) return o;
  return -1;
}
static int op_in(int o, int k) { return S->op_io[S->ops[o].io0 + k]; }
static int op_out(int o, int k) { return S->op_io[S->ops[o].io0 + S->ops[o].nin + k]; }

/* A forward pass on the CPU kernels with the session's current weights, to
 * sample text: the schedule is a training step and has no inference mode. */
typedef struct Sampler {
  void **data; /* per tensor */
} Sampler;

static int sampler_init(Sampler *sm, rt_Session *s) {
  sm->data = calloc((size_t)S->ntensors, sizeof *sm->data);
  if (!sm->data) return -1;
  for (int o = 0; o < S->nops; o++) {
    if (S->ops[o].phase != 0) continue;
    for (int k = 0; k < S->ops[o].nin + S->ops[o].nout; k++) {
      int t = S->op_io[S->ops[o].io0 + k];
      if (!sm->data[t] && !(sm->data[t] = calloc(1, (size_t)S->tensors[t].bytes))) return -1;
    }
  }
  for (int t = 0; t < S->ntensors; t++)
    if (sm->data[t] && S->tensors[t].kind == KIND_PARAM &&
        rt_read(s, S->tensors[t].name, S->tensors[t].dtype, S->tensors[t].rank, S->tensors[t].shape, sm->data[t],
                (size_t)S->tensors[t].bytes) != RT_OK)
      return -1;
  return 0;
}

static void sampler_free(Sampler *sm) {
  for (int t = 0; t < S->ntensors; t++) free(sm->data[t]);
  free(sm->data);
}

static rt_View view_of(const Sampler *sm, int t) {
  const rt_SchedTensor *T = &S->tensors[t];
  rt_View v = {sm->data[t], (rt_DType)T->dtype, T->rank, {0}, 1};
  for (int d = 0; d < T->rank; d++) v.shape[d] = T->shape[d], v.numel *= T->shape[d];
  return v;
}

static int forward(const Sampler *sm) {
  for (int o = 0; o < S->nops; o++) {
    const rt_SchedOp *op = &S->ops[o];
    if (op->phase != 0) continue;
    rt_View views[16];
    rt_Attr attrs[16];
    if (op->nin + op->nout > 16 || op->nattr > 16) return -1;
    for (int k = 0; k < op->nin + op->nout; k++) views[k] = view_of(sm, S->op_io[op->io0 + k]);
    for (int k = 0; k < op->nattr; k++) attrs[k] = (rt_Attr){S->attrs[op->attr0 + k].key, S->attrs[op->attr0 + k].num};
    void *ws = op->workspace > 0 ? calloc(1, (size_t)op->workspace) : NULL;
    rt_KernelArgs a = {views + op->nin, op->nout, views, op->nin, ws, op->workspace, attrs, op->nattr, 1, NULL};
    char err[256];
    rt_KernelFn fn = rt_kernel_find(op->type);
    int rc = fn ? fn(&a, err, sizeof err) : -1;
    free(ws);
    if (rc != 0) return -1;
  }
  return 0;
}

/* Generates N bytes after PROMPT; context is the last T bytes, in row 0. */
static void sample(rt_Session *s, const char *prompt, int n, double temperature) {
  Sampler sm;
  if (sampler_init(&sm, s) < 0) {
    printf("(sampling failed: out of memory)\n");
    return;
  }
  int enc = find_op_of_type("encoder") >= 0 ? find_op_of_type("encoder") : find_op_of_type("embedding");
  int tok = op_in(enc, 0), logits = op_in(find_op_of_type("crossentropy"), 0);
  int64_t T = S->tensors[tok].shape[1], V = S->tensors[logits].shape[2];
  int32_t *ctx = (int32_t *)sm.data[tok];
  char out[4096];
  int len = (int)strlen(prompt);
  memcpy(out, prompt, (size_t)len);
  rt_View lv = view_of(&sm, logits);
  double *p = malloc((size_t)V * sizeof *p);
  for (int i = 0; i < n && len < (int)sizeof out - 1 && p; i++) {
    int start = len > T ? len - (int)T : 0, m = len - start;
    for (int64_t j = 0; j < T; j++) ctx[j] = j < m ? (unsigned char)out[start + j] : 0;
    if (forward(&sm) < 0) break;
    double mx = -1e30, sum = 0;
    for (int64_t v = 0; v < V; v++) {
      p[v] = rt_load(&lv, (int64_t)(m - 1) * V + v) / temperature;
      if (p[v] > mx) mx = p[v];
    }
    for (int64_t v = 0; v < V; v++) sum += (p[v] = exp(p[v] - mx));
    double r = rng_uniform() * sum;
    int64_t pick = V - 1;
    for (int64_t v = 0; v < V; v++)
      if ((r -= p[v]) <= 0) {
        pick = v;
        break;
      }
    out[len++] = (char)pick;
  }
  free(p);
  out[len] = '\0';
  for (char *c = out; *c; c++)
    if ((*c < 32 && *c != '\n') || *c == 127) *c = '?';
  printf("---- sample ----\n%s\n----------------\n", out);
  sampler_free(&sm);
}

int main(int argc, char **argv) {
  int steps = 300, sample_len = 160, threads = 0;
  const char *data_path = "/usr/share/common-licenses/GPL-3", *profile = NULL, *graph = NULL;
  unsigned seed = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data_path = argv[++i];
    else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sample") && i + 1 < argc) sample_len = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--graph") && i + 1 < argc) graph = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--steps N] [--threads N] [--data FILE] [--profile OUT] [--seed S] [--sample BYTES]"
              " [--graph GRAPH.json]\n", argv[0]);
      return 2;
    }
  }
  rng_state ^= seed * 0x2545F4914F6CDD1Dull;
  S = SCHED_ENTRY();
  FILE *f = fopen(data_path, "rb");
  if (!f) {
    fprintf(stderr, "train: cannot read %s\n", data_path);
    return 1;
  }
  static unsigned char text[1 << 20];
  size_t ntext = fread(text, 1, sizeof text, f);
  fclose(f);

  /* Opened first: rt_open checks every table before they are read here. */
  rt_Options opt = {.backend = RT_BACKEND_AUTO, .flags = profile ? RT_OPEN_PROFILE : 0u, .seed = seed,
                    .threads = threads, .graph = graph};
  rt_Session *s;
  char err[512];
  int rc = rt_open(S, &opt, &s, err, sizeof err);
  if (rc != RT_OK) {
    fprintf(stderr, "train: %s: %s\n", rt_status_name(rc), err);
    return 1;
  }
  int enc = find_op_of_type("encoder") >= 0 ? find_op_of_type("encoder") : find_op_of_type("embedding");
  int ce = find_op_of_type("crossentropy");
  if (enc < 0 || ce < 0) {
    fprintf(stderr, "train: schedule %s has no embedding or crossentropy op\n", S->name);
    rt_close(s);
    return 1;
  }
  const rt_SchedTensor *tokens = &S->tensors[op_in(enc, 0)], *targets = &S->tensors[op_in(ce, 1)];
  const rt_SchedTensor *loss = &S->tensors[op_out(ce, 0)];
  int64_t B = tokens->shape[0], T = tokens->shape[1];
  if ((int64_t)ntext < T + 2) {
    fprintf(stderr, "train: %s is too short\n", data_path);
    rt_close(s);
    return 1;
  }

  rt_Stats st;
  rt_stats(s, &st);
  int64_t nparam = 0;
  for (int t = 0; t < S->ntensors; t++)
    if (S->tensors[t].kind == KIND_PARAM) nparam += S->tensors[t].bytes;
  printf("schedule %s: graph %s, strategy %s, %lld bytes of params, %s backend, kernels: %s\n", S->name,
         S->graph_name, S->strategy, (long long)nparam, st.backend, st.kernels);
  if ((rc = rt_init_params(s, seed, 0.02)) != RT_OK) {
    fprintf(stderr, "train: %s\n", rt_error(s));
    return 1;
  }
  int32_t *tok = malloc((size_t)tokens->bytes), *tgt = malloc((size_t)targets->bytes);
  double sum_step = 0, sum_over = 0, first_loss = 0, tail_loss = 0;
  double *times = calloc((size_t)steps + 1, sizeof *times);
  int timed = 0, tail = steps < 20 ? steps : 20;
  for (int it = 1; it <= steps; it++) {
    for (int64_t b = 0; b < B; b++) {
      size_t at = (size_t)(rng_next() % (ntext - (size_t)T - 1));
      for (int64_t t = 0; t < T; t++) {
        tok[b * T + t] = text[at + (size_t)t];
        tgt[b * T + t] = text[at + (size_t)t + 1];
      }
    }
    if ((rc = rt_write(s, tokens->name, RT_I32, 2, (int64_t[]){B, T}, tok, (size_t)tokens->bytes)) != RT_OK ||
        (rc = rt_write(s, targets->name, RT_I32, 2, (int64_t[]){B, T}, tgt, (size_t)targets->bytes)) != RT_OK ||
        (rc = rt_step(s)) != RT_OK) {
      fprintf(stderr, "train: step %d: %s: %s\n", it, rt_status_name(rc), rt_error(s));
      return 1;
    }
    float l;
    rt_read(s, loss->name, RT_F32, loss->rank, loss->shape, &l, sizeof l);
    if (it == 1) first_loss = l;
    if (it > steps - tail) tail_loss += l / tail;
    rt_stats(s, &st);
    if (it > 1 && times) { /* the first step runs on cold caches */
      sum_step += st.step_seconds;
      sum_over += st.overhead_seconds;
      times[timed++] = st.step_seconds;
    }
    if (it == 1 || it % 25 == 0 || it == steps) {
      printf("step %4d  loss %.4f  (%.1f ms/step, %.0f tokens/s", it, l, 1e3 * st.step_seconds,
             (double)(B * T) / st.step_seconds);
      if (st.kernel_seconds >= 0 && st.wait_seconds >= 0) /* not split on a GPU, whose kernels run async */
        printf(": kernels %.1f, waiting for copies %.1f", 1e3 * st.kernel_seconds, 1e3 * st.wait_seconds);
      printf(")\n");
    }
  }
  printf("loss %.4f at step 1, %.4f over the last %d steps (ln 256 = %.4f)\n", first_loss, tail_loss, tail,
         log(256.0));
  if (sample_len > 0) sample(s, "The GNU General Public License ", sample_len, 0.8);
  rt_stats(s, &st);
  printf("live peak %lld bytes, budget %lld bytes, arena %lld bytes, plan's predicted peak %lld bytes%s\n",
         (long long)st.live_high_water, (long long)S->budget_bytes, (long long)st.arena_bytes,
         (long long)S->peak_live_bytes, st.live_high_water <= S->budget_bytes ? "" : "  OVER BUDGET");
  if (timed) {
    qsort(times, (size_t)timed, sizeof *times, cmp_double);
    double median = timed % 2 ? times[timed / 2] : 0.5 * (times[timed / 2 - 1] + times[timed / 2]);
    printf("step time: predicted %.3f ms, measured %.3f ms (median of %d steps; predicted/measured %.3f), "
           "%.0f tokens/s; executor overhead %.3f%% of the step\n",
           1e3 * S->predicted_step_seconds, 1e3 * median, timed, S->predicted_step_seconds / median,
           (double)(B * T) / median, 100.0 * sum_over / sum_step);
  }
  free(times);
  if (profile) {
    if ((rc = rt_write_profile(s, profile)) != RT_OK) {
      fprintf(stderr, "train: %s\n", rt_error(s));
      return 1;
    }
    printf("wrote measured op times to %s\n", profile);
  }
  free(tok);
  free(tgt);
  rt_close(s);
  return tail_loss < first_loss ? 0 : 1;
}
