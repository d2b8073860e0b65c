/*
 * test_keepall.c - keep-all on every checked-in model: the plan passes the
 * simulator's checks, its peak is the keep-all peak, and the static layout's
 * arena is within 2% of peak live bytes (the lower bound of any layout).
 */
#include "ration.h"
#include "test.h"

#include <glob.h>
#include <stdlib.h>

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  Err e;
  Device *d = device_load("budgets/h100-sxm-80g.json", &e);
  glob_t gl;
  if (!d || glob("models/*.json", 0, NULL, &gl) != 0) {
    printf("FAIL setup\nRESULT 0 1\n");
    return 1;
  }
  T_CASE("there are checked-in models") T_CHECK(gl.gl_pathc >= 7);
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    char name[512];
    snprintf(name, sizeof name, "keep-all on %s: valid, arena within 2%% of peak", gl.gl_pathv[i]);
    T_CASE(name) {
      Graph *g = graph_load(gl.gl_pathv[i], &e);
      T_CHECKF(g != NULL, "%s", e.msg);
      if (!g) continue;
      PlanOptions o = {.strategy = "keep-all", .budget_bytes = INT64_MAX, .quiet = true};
      Plan *p = plan_make(g, d, &o, &e);
      T_CHECKF(p != NULL, "%s", e.msg);
      if (p) {
        SimResult r;
        T_CHECKF(sim_run(p, g, d, false, &r, &e) == 0, "%s", e.msg);
        T_CHECK(r.peak_live_bytes == p->predicted.peak_live_bytes);
        T_CHECK(r.peak_live_bytes == p->predicted.keep_all_peak_bytes);
        T_CHECK(r.recompute_seconds == 0 && r.stall_seconds == 0);
        double frag = (double)p->arena_bytes / (double)r.peak_live_bytes;
        printf("  arena/peak %.5f (arena %lld, peak %lld)\n", frag, (long long)p->arena_bytes,
               (long long)r.peak_live_bytes);
        T_CHECK(frag <= 1.02);
        sim_result_free(&r);
      }
      plan_free(p);
      graph_free(g);
    }
  }
  globfree(&gl);
  device_free(d);
  T_DONE();
}
