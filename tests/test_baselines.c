/*
 * test_baselines.c - the baselines decide what their descriptions say:
 * checkpoint-layers keeps exactly the tensors that leave a layer (found by
 * the lN. naming convention, or structurally on a graph without it),
 * sqrt-n keeps only every ceil(sqrt(L))-th layer's inputs, offload-all
 * offloads everything, and knapsack saves all when its byte cap allows,
 * nothing when the cap is gone, and otherwise at most the cap.
 */
#include "ration.h"
#include "test.h"

#include <stdlib.h>

static Decision *decide(const Graph *g, const Device *d, const char *name, int64_t budget) {
  Decision *dec = calloc((size_t)g->ntensors, sizeof *dec);
  PlanOptions o = {.strategy = name, .budget_bytes = budget, .quiet = true};
  SolverInfo si = {.name = "none"};
  Err e;
  for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
  if (plan_find_strategy(name)->decide(g, d, &o, dec, &si, &e)) {
    printf("  %s: %s\n", name, e.msg);
    free(dec);
    return NULL;
  }
  return dec;
}

static bool starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Residual blocks without layer names: x -> a = f(x) -> r = x + a -> ... */
static const char *unnamed =
    "{\"format\": \"ration-graph/1\", \"name\": \"res\", \"outputs\": [\"loss\"], \"tensors\": ["
    "{\"name\": \"in\", \"shape\": [64], \"dtype\": \"f32\", \"kind\": \"input\"},"
    "{\"name\": \"w\", \"shape\": [64], \"dtype\": \"f32\", \"kind\": \"param\"},"
    "{\"name\": \"gw\", \"shape\": [64], \"dtype\": \"f32\", \"kind\": \"grad\"},"
    "{\"name\": \"x0\", \"shape\": [64], \"dtype\": \"f32\"}, {\"name\": \"a0\", \"shape\": [64], \"dtype\": \"f32\"},"
    "{\"name\": \"b0\", \"shape\": [64], \"dtype\": \"f32\"}, {\"name\": \"x1\", \"shape\": [64], \"dtype\": \"f32\"},"
    "{\"name\": \"a1\", \"shape\": [64], \"dtype\": \"f32\"}, {\"name\": \"b1\", \"shape\": [64], \"dtype\": \"f32\"},"
    "{\"name\": \"x2\", \"shape\": [64], \"dtype\": \"f32\"}, {\"name\": \"loss\", \"shape\": [1], \"dtype\": \"f32\"},"
    "{\"name\": \"g2\", \"shape\": [64], \"dtype\": \"f32\"}, {\"name\": \"g1\", \"shape\": [64], \"dtype\": \"f32\"}],"
    "\"ops\": ["
    "{\"name\": \"embed\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"in\", \"w\"], \"outputs\": [\"x0\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"f0\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"x0\"], \"outputs\": [\"a0\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"g0\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"a0\"], \"outputs\": [\"b0\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"r0\", \"type\": \"add\", \"phase\": \"forward\", \"inputs\": [\"x0\", \"b0\"], \"outputs\": [\"x1\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"f1\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"x1\"], \"outputs\": [\"a1\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"g1\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"a1\"], \"outputs\": [\"b1\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"r1\", \"type\": \"add\", \"phase\": \"forward\", \"inputs\": [\"x1\", \"b1\"], \"outputs\": [\"x2\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"head\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"x2\"], \"outputs\": [\"loss\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"bh\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"x2\"], \"outputs\": [\"g2\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"b1\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"g2\", \"x1\", \"a1\"], \"outputs\": [\"g1\"], \"flops\": 1e6, \"bytes\": 0},"
    "{\"name\": \"b0\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"g1\", \"x0\", \"a0\"], \"outputs\": [\"gw\"], \"flops\": 1e6, \"bytes\": 0}]}";

int main(void) {
  Err e;
  Graph *g = graph_load("models/gpt2-tiny.json", &e);
  Device *d = g ? device_load("budgets/h100-sxm-80g.json", &e) : NULL;
  if (!g || !d) {
    printf("FAIL setup: %s\nRESULT 0 1\n", e.msg);
    return 1;
  }
  T_CASE("checkpoint-layers on gpt2-tiny: keeps the layer inputs and what is outside the layers") {
    Decision *dec = decide(g, d, "checkpoint-layers", INT64_MAX / 4);
    T_CHECK(dec != NULL);
    int kept = 0;
    for (int s = 0; dec && s < g->nstashed; s++) {
      const char *n = g->tensors[g->stashed[s]].name;
      /* lN.x is layer N's input, lnf.x the last layer's output; the head's
       * tensors (lnf.*, logits, ce.*) are outside every layer. */
      bool want_keep = (n[0] == 'l' && n[1] >= '0' && n[1] <= '9' && strstr(n, ".x") && !strchr(strchr(n, '.') + 1, '.')) ||
                       starts(n, "lnf.") || starts(n, "logits") || starts(n, "ce.");
      T_CHECKF((dec[g->stashed[s]] == DEC_KEEP) == want_keep, "%s: %s", n, plan_decision_name(dec[g->stashed[s]]));
      T_CHECKF(dec[g->stashed[s]] == DEC_KEEP || dec[g->stashed[s]] == DEC_RECOMPUTE, "%s", n);
      kept += dec[g->stashed[s]] == DEC_KEEP;
    }
    T_CHECKF(kept == 4 + 6, "kept %d", kept); /* l0.x..l3.x; lnf.x y mean rstd, logits, ce.lse */
    free(dec);
  }
  T_CASE("sqrt-n on gpt2-tiny (4 layers): keeps the inputs of layers 0 and 2 only") {
    Decision *dec = decide(g, d, "sqrt-n", INT64_MAX / 4);
    T_CHECK(dec != NULL);
    for (int i = 0; dec && i < 4; i++) {
      char n[16];
      snprintf(n, sizeof n, "l%d.x", i);
      int t = graph_find_tensor(g, n);
      T_CHECKF(t >= 0 && dec[t] == (i % 2 == 0 ? DEC_KEEP : DEC_RECOMPUTE), "%s", n);
    }
    T_CHECK(dec && dec[graph_find_tensor(g, "l0.fc.y")] == DEC_RECOMPUTE);
    T_CHECK(dec && dec[graph_find_tensor(g, "logits")] == DEC_KEEP);
    free(dec);
  }
  T_CASE("offload-all offloads every stashed tensor") {
    Decision *dec = decide(g, d, "offload-all", INT64_MAX / 4);
    int n = 0;
    for (int s = 0; dec && s < g->nstashed; s++) n += dec[g->stashed[s]] == DEC_OFFLOAD;
    T_CHECK(dec && n == g->nstashed);
    free(dec);
  }
  T_CASE("knapsack: everything saved when the cap allows, nothing without a cap, the cap held between") {
    int64_t k = plan_keep_all_peak(g, d, &e), stash = 0;
    for (int s = 0; s < g->nstashed; s++) stash += g->tensors[g->stashed[s]].bytes;
    Decision *all = decide(g, d, "knapsack", k), *none = decide(g, d, "knapsack", k - stash);
    int nall = 0, nnone = 0;
    for (int s = 0; all && none && s < g->nstashed; s++) {
      nall += all[g->stashed[s]] == DEC_KEEP;
      nnone += none[g->stashed[s]] == DEC_RECOMPUTE;
    }
    T_CHECK(all && none && nall == g->nstashed && nnone == g->nstashed);
    for (int q = 1; q < 4; q++) {
      int64_t cap = stash * q / 4;
      Decision *dec = decide(g, d, "knapsack", k - stash + cap);
      int64_t saved = 0;
      for (int s = 0; dec && s < g->nstashed; s++) {
        int t = g->stashed[s];
        if (dec[t] == DEC_KEEP) saved += g->tensors[t].bytes;
        T_CHECK(dec[t] == DEC_KEEP || dec[t] == DEC_RECOMPUTE);
      }
      T_CHECKF(dec && saved <= cap && saved > 0, "cap %lld, saved %lld", (long long)cap, (long long)saved);
      free(dec);
    }
    free(all);
    free(none);
  }
  T_CASE("without layer names, layers are found at the residual cuts") {
    Graph *u = graph_parse("res.json", unnamed, strlen(unnamed), &e);
    T_CHECKF(u != NULL, "%s", e.msg);
    Decision *dec = u ? decide(u, d, "checkpoint-layers", INT64_MAX / 4) : NULL;
    /* Cuts: x0 (after embed), x1, x2; a0 and a1 are inside a block. */
    T_CHECK(dec && dec[graph_find_tensor(u, "x0")] == DEC_KEEP && dec[graph_find_tensor(u, "x1")] == DEC_KEEP &&
            dec[graph_find_tensor(u, "x2")] == DEC_KEEP);
    T_CHECK(dec && dec[graph_find_tensor(u, "a0")] == DEC_RECOMPUTE && dec[graph_find_tensor(u, "a1")] == DEC_RECOMPUTE);
    free(dec);
    graph_free(u);
  }
  device_free(d);
  graph_free(g);
  T_DONE();
}
