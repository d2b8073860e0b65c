/*
 * test_cost.c - the cost model's formulas on hand-computed cases: roofline
 * with the dtype of the first floating output, the f32 fallback, measured
 * times replacing the model, copy times, and a profile overriding ops and
 * copy figures, all or nothing.
 */
#include "ration.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A ration-costs/1 file with the given members after "format", in a fresh
 * temporary path (written to path). */
static bool write_costs(char path[64], const char *members) {
  snprintf(path, 64, "/tmp/ration-test-cost-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return false;
  FILE *f = fdopen(fd, "w");
  if (!f) return close(fd), false;
  fprintf(f, "{\"format\": \"ration-costs/1\", %s}", members);
  return fclose(f) == 0;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

int main(void) {
  Err e = {{0}};
  Graph *g = graph_load("tests/data/mlp.json", &e);
  Device *d = device_load("tests/data/dev.json", &e);
  T_CASE("fixtures load") T_CHECKF(g && d, "%s", e.msg);
  if (!g || !d) T_DONE();
  /* dev.json: bf16 2e6 flop/s, f32 1e6 flop/s, 1e6 B/s, launch 1.5 us. */
  T_CASE("memory-bound bf16 op") T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc1")), 113.5e-6));
  T_CASE("measured time replaces the model") T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "act")), 2.5e-6));
  T_CASE("memory-bound f32 op") T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc2")), 89.5e-6));
  T_CASE("compute-bound at bf16 rate") T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "act_bw")), 61.5e-6));
  T_CASE("first floating output decides") T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc2_bw")), 161.5e-6));
  T_CASE("grad output runs at f32") T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc1_bw")), 129.5e-6));
  T_CASE("copy times") {
    T_CHECK(near(cost_d2h_seconds(d, 1000), 4e-3));
    T_CHECK(near(cost_h2d_seconds(d, 1000), 2e-3));
    T_CHECK(cost_h2d_seconds(d, 0) == 0);
  }
  T_CASE("host op time: bytes over the host's bandwidth, no launch, measured device time ignored") {
    /* dev.json's host: 2e6 B/s; act is measured on the device. */
    const Op *fc1 = &g->ops[graph_find_op(g, "fc1")], *act = &g->ops[graph_find_op(g, "act")];
    T_CHECK(fc1->bytes > 0 && near(cost_host_op_seconds(g, d, graph_find_op(g, "fc1")), fc1->bytes / 2e6));
    T_CHECK(near(cost_host_op_seconds(g, d, graph_find_op(g, "act")), act->bytes / 2e6));
    Device none = *d;
    none.host_memory_gbps = 0;
    T_CHECK(cost_host_op_seconds(g, &none, graph_find_op(g, "fc1")) == -1);
  }
  T_CASE("f16 and integer ops fall back to f32") {
    const char *t = "{\"format\": \"ration-graph/1\", \"tensors\": ["
                    "{\"name\": \"a\", \"shape\": [4], \"dtype\": \"f16\"},"
                    "{\"name\": \"b\", \"shape\": [4], \"dtype\": \"i32\"}],"
                    "\"ops\": [{\"name\": \"p\", \"type\": \"x\", \"phase\": \"forward\", \"inputs\": [],"
                    " \"outputs\": [\"a\"], \"flops\": 100},"
                    "{\"name\": \"q\", \"type\": \"x\", \"phase\": \"forward\", \"inputs\": [],"
                    " \"outputs\": [\"b\"], \"flops\": 100, \"bytes\": 10}]}";
    Graph *h = graph_parse("h.json", t, strlen(t), &e);
    T_CHECKF(h != NULL, "%s", e.msg);
    if (h) {
      T_CHECK(near(cost_op_seconds(h, d, 0), 101.5e-6));
      T_CHECK(near(cost_op_seconds(h, d, 1), 101.5e-6));
    }
    graph_free(h);
  }
  T_CASE("profile overrides the ops it names") {
    double fc2 = cost_op_seconds(g, d, graph_find_op(g, "fc2"));
    T_CHECKF(cost_load_profile(g, NULL, "tests/data/mlp.costs.json", &e) == 0, "%s", e.msg);
    T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc1")), 10e-6));
    T_CHECK(cost_op_seconds(g, d, graph_find_op(g, "act_bw")) == 0);
    T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "loss_bw")), 7.25e-6));
    T_CHECK(cost_op_seconds(g, d, graph_find_op(g, "fc2")) == fc2);
    T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "act")), 2.5e-6));
  }
  T_CASE("profile with copy figures: both bandwidths and the share go into the device") {
    char path[64];
    T_CHECK(write_costs(path, "\"ops\": {\"fc1\": 12}, \"d2h_gbps\": 3.5, \"h2d_gbps\": 7, \"copy_compute_share\": 0.25"));
    T_CHECKF(cost_load_profile(g, d, path, &e) == 0, "%s", e.msg);
    T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc1")), 12e-6));
    T_CHECK(d->d2h_gbps == 3.5 && d->h2d_gbps == 7 && d->copy_compute_share == 0.25);
    unlink(path);
  }
  T_CASE("profile with a bad copy figure: one error with its JSON path, neither graph nor device changed") {
    char path[64];
    T_CHECK(write_costs(path, "\"ops\": {\"fc1\": 99}, \"h2d_gbps\": 0"));
    T_CHECK(cost_load_profile(g, d, path, &e) == -1);
    T_CHECKF(strstr(e.msg, path) && strstr(e.msg, "h2d_gbps") && strstr(e.msg, "must be > 0"), "%s", e.msg);
    T_CHECK(near(cost_op_seconds(g, d, graph_find_op(g, "fc1")), 12e-6));
    T_CHECK(d->d2h_gbps == 3.5 && d->h2d_gbps == 7 && d->copy_compute_share == 0.25);
    unlink(path);
  }
  graph_free(g);
  device_free(d);
  T_DONE();
}
