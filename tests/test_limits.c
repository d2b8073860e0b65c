/*
 * test_limits.c - sizes past the limits get a clear error, never a wrapped
 * number: a plan whose buffers add up past 2^63 bytes (sim_check sums
 * them), a negative buffer size, a rank past GRAPH_MAX_RANK, and the
 * largest graph a plan file can describe (2^53 bytes) planning end to end
 * with every byte count exact in the JSON it writes. The SAN build runs this
 * with UBSan, which would flag any signed overflow on the way.
 */
#include "ration.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  Err e = {{0}};
  Graph *g = graph_load("tests/data/mlp.json", &e);
  Device *d = device_load("tests/data/dev.json", &e);
  T_CASE("fixtures load") T_CHECKF(g && d, "%s", e.msg);
  if (!g || !d) T_DONE();
  PlanOptions o = {.strategy = "keep-all", .budget_bytes = JSON_MAX_BYTES, .quiet = true};
  Plan *p = plan_make(g, d, &o, &e);
  T_CASE("keep-all plan of mlp") T_CHECKF(p && sim_check(p, g, &e) == 0, "%s", e.msg);
  if (p) {
    /* 1100 workspace buffers of 2^53 bytes each: 2^63 and more in all. */
    int first = p->nbuffers;
    for (int k = 0; k < 1100; k++) {
      int id = plan_add_buffer(p, -1, 0, JSON_MAX_BYTES, SPACE_DEVICE);
      if (id >= 0) p->buffers[id].offset = 0;
    }
    p->arena_bytes = p->budget_bytes = JSON_MAX_BYTES; /* each buffer alone fits */
    e.msg[0] = 0;
    int rc = sim_check(p, g, &e);
    T_CASE("buffers adding up past 2^63 bytes: a clear error")
      T_CHECKF(rc < 0 && strstr(e.msg, "the buffers add up to more than 2^63 bytes"), "%s", e.msg);
    SimResult r;
    T_CASE("sim_run refuses it too") T_CHECK(sim_run(p, g, d, true, &r, &e) < 0);
    p->nbuffers = first + 1;
    p->buffers[first].bytes = -5;
    T_CASE("a negative buffer size: a clear error")
      T_CHECKF(sim_check(p, g, &e) < 0 && strstr(e.msg, "buffers["), "%s", e.msg);
    p->nbuffers = first;
    plan_free(p);
  }
  const char *rank9 = "{\"format\": \"ration-graph/1\", \"tensors\": [{\"name\": \"t\", \"shape\": [1,1,1,1,1,1,1,1,1], "
                      "\"dtype\": \"f32\", \"kind\": \"param\"}], \"ops\": []}";
  Graph *g9 = graph_parse("r.json", rank9, strlen(rank9), &e);
  T_CASE("rank 9: a clear error")
    T_CHECKF(!g9 && !strcmp(e.msg, "r.json: tensors[0].shape: rank 9 is over the limit of 8"), "%s", e.msg);
  graph_free(g9);

  /* One activation of 2^52 bytes and its consumer: planned, written, read back exactly. */
  const char *big = "{\"format\": \"ration-graph/1\", \"tensors\": ["
                    "{\"name\": \"x\", \"shape\": [1024], \"dtype\": \"u8\", \"kind\": \"input\"},"
                    "{\"name\": \"h\", \"shape\": [67108864, 67108864], \"dtype\": \"u8\"},"
                    "{\"name\": \"y\", \"shape\": [4], \"dtype\": \"f32\"}],"
                    "\"ops\": [{\"name\": \"f\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"x\"], \"outputs\": [\"h\"]},"
                    "{\"name\": \"b\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"h\"], \"outputs\": [\"y\"]}],"
                    "\"outputs\": [\"y\"]}";
  Graph *gb = graph_parse("big.json", big, strlen(big), &e);
  Plan *pb = gb ? plan_make(gb, d, &o, &e) : NULL;
  Buf j = {0};
  Plan *back = pb && emit_plan_json(pb, gb, &j) == 0 ? plan_parse("big.plan.json", j.data, j.len, gb, &e) : NULL;
  T_CASE("a 2^52-byte activation plans, and its plan reads back exactly")
    T_CHECKF(back && back->arena_bytes == pb->arena_bytes && pb->arena_bytes >= (1LL << 52) &&
             back->predicted.peak_live_bytes == pb->predicted.peak_live_bytes, "%s", e.msg);
  buf_free(&j);
  plan_free(back);
  plan_free(pb);
  graph_free(gb);
  device_free(d);
  graph_free(g);
  T_DONE();
}
