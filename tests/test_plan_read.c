/*
 * test_plan_read.c - reading ration-plan/1 back: a hand-written plan loads
 * with every field and passes the simulator's checks, and plans the planner
 * writes read back to the same Plan (re-emitting gives the same bytes).
 * The rejections are in tests/bad/CASES (test_graph.c, t_bad_input.sh).
 */
#include "ration.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

/* HOMED: every param and optimizer state host-homed on top of the
 * strategy's decisions (host-refetch where allowed). */
static void round_trip(const char *graph_path, const char *strategy, bool homed) {
  Err e = {{0}};
  Graph *g = graph_load(graph_path, &e);
  Device *d = device_load("budgets/h100-sxm-80g.json", &e);
  Plan *p = NULL, *q = NULL;
  Buf a = {0}, b = {0};
  if (g && d) {
    PlanOptions o = {.strategy = strategy, .solver = "glpk", .budget_bytes = d->memory - d->reserve, .quiet = true};
    p = plan_make(g, d, &o, &e);
  }
  for (int t = 0; homed && p && t < g->ntensors; t++)
    if (plan_home_allowed(g, t, DEC_HOST))
      p->decisions[t] = plan_home_allowed(g, t, DEC_HOST_REFETCH) ? DEC_HOST_REFETCH : DEC_HOST;
  if (homed && p) {
    Plan *h = plan_from_decisions(g, d, p->decisions, &e);
    if (h) h->budget_bytes = p->budget_bytes;
    plan_free(p);
    p = h;
  }
  if (p && emit_plan_json(p, g, &a) == 0) q = plan_parse("rt.plan.json", a.data, a.len, g, &e);
  if (q) emit_plan_json(q, g, &b);
  char name[256];
  snprintf(name, sizeof name, "%s %s%s: emit, read, emit gives the same bytes and homes", graph_path, strategy,
           homed ? ", params and optimizer state host-homed" : "");
  T_CASE(name) {
    T_CHECKF(q != NULL, "%s", e.msg);
    T_CHECK(a.len > 0 && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    T_CHECK(q && p && q->nbuffers == p->nbuffers && q->nsteps == p->nsteps);
    T_CHECK(q && p && memcmp(q->decisions, p->decisions, (size_t)g->ntensors * sizeof *q->decisions) == 0);
    T_CHECK(q && sim_check(q, g, &e) == 0);
    int nhome = 0, host_homes = 0;
    for (int i = 0; q && p && i < q->nbuffers && i < p->nbuffers; i++) {
      T_CHECK(q->buffers[i].home == p->buffers[i].home);
      nhome += q->buffers[i].home;
      host_homes += q->buffers[i].home && q->buffers[i].space == SPACE_HOST;
    }
    T_CHECK(nhome > 0 && (host_homes > 0) == homed);
  }
  buf_free(&a);
  buf_free(&b);
  plan_free(p);
  plan_free(q);
  device_free(d);
  graph_free(g);
}

int main(void) {
  Err e = {{0}};
  Graph *g = graph_load("tests/data/mlp.json", &e);
  Plan *p = g ? plan_load("tests/data/mlp.plan.json", g, &e) : NULL;
  T_CASE("hand-written plan loads") T_CHECKF(p != NULL, "%s", e.msg);
  if (p) {
    T_CASE("header fields") {
      T_CHECK(strcmp(p->graph_name, "mlp") == 0 && strcmp(p->graph_sha256, g->sha256) == 0);
      T_CHECK(strcmp(p->device, "test-gpu") == 0 && strcmp(p->strategy, "keep-all") == 0);
      T_CHECK(p->budget_bytes == 1044480 && p->arena_bytes == 4352 && p->host_bytes == 0 && p->alignment == 256);
      T_CHECK(p->predicted.peak_live_bytes == 532 && p->predicted.step_seconds == 0.001);
      T_CHECK(strcmp(p->solver.name, "none") == 0 && strcmp(p->solver.status, "not_used") == 0);
      T_CHECK(p->path && strcmp(p->path, "tests/data/mlp.plan.json") == 0);
    }
    T_CASE("decisions") {
      for (int t = 0; t < g->ntensors; t++)
        T_CHECKF(p->decisions[t] == (g->tensors[t].stashed ? DEC_KEEP : DEC_NONE), "%s", g->tensors[t].name);
    }
    T_CASE("buffers") {
      T_CHECK(p->nbuffers == 17);
      for (int i = 0; i < 16 && i < p->nbuffers; i++)
        T_CHECK(p->buffers[i].tensor == i && p->buffers[i].workspace_of == -1 &&
                p->buffers[i].bytes == g->tensors[i].bytes && p->buffers[i].offset == 256 * i &&
                p->buffers[i].space == SPACE_DEVICE);
      T_CHECK(p->nbuffers == 17 && p->buffers[16].tensor == -1 &&
              p->buffers[16].workspace_of == graph_find_op(g, "fc2_bw") && p->buffers[16].bytes == 64);
    }
    T_CASE("steps") {
      T_CHECK(p->nsteps == g->nops);
      for (int s = 0; s < p->nsteps; s++) {
        const Step *st = &p->steps[s];
        const Op *op = &g->ops[s];
        T_CHECK(st->kind == STEP_COMPUTE && st->op == s && !st->recompute);
        for (int k = 0; k < op->ninputs; k++) T_CHECK(st->inputs[k] == op->inputs[k]);
        for (int k = 0; k < op->noutputs; k++) T_CHECK(st->outputs[k] == op->outputs[k]);
        T_CHECK(st->workspace == (op->workspace ? 16 : -1) && st->from == -1 && st->to == -1);
      }
    }
    T_CASE("the simulator accepts it") T_CHECKF(sim_check(p, g, &e) == 0, "%s", e.msg);
  }
  plan_free(p);
  graph_free(g);
  round_trip("tests/data/mlp.json", "keep-all", false);
  round_trip("models/gpt2-tiny.json", "keep-all", false);
  round_trip("models/unet.json", "keep-all", false);
  round_trip("models/gpt2-tiny.json", "offload-all", true);
  round_trip("models/llama-tiny.json", "keep-all", true);
  T_DONE();
}
