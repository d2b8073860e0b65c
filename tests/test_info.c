/*
 * test_info.c - `ration info`'s numbers: the lower bound on any plan's peak
 * by hand on tests/data/mlp.json, never above the keep-all peak on every
 * checked-in model, and the report's figures.
 */
#include "ration.h"
#include "test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  Err e = {{0}};
  Graph *g = graph_load("tests/data/mlp.json", &e);
  Device *d = device_load("tests/data/dev.json", &e);
  T_CASE("fixtures load") T_CHECKF(g && d, "%s", e.msg);
  if (!g || !d) T_DONE();
  /* Resident all step: x 32 + tgt 8 + w1 64 + w2 48 + m1 64 + v1 64 = 280;
   * dw2 48 from fc2_bw, its first user, and dw1 64 from fc1_bw. Largest:
   * fc2_bw with 280 + 48 resident and dy 24 + a 16 + da 16 + workspace 64
   * (fc1_bw: 392 + dh 16 = 408; loss_bw: 280 + y 24 + lse 8 + dy 24 = 336). */
  T_CASE("lower bound by hand") {
    int64_t res, ws;
    int at;
    T_CHECK(info_lower_bound(g, &res, &ws, &at) == 0);
    T_CHECKF(res == 328 && ws == 120 && at == graph_find_op(g, "fc2_bw"), "%lld %lld %d", (long long)res,
             (long long)ws, at);
  }
  /* Keep-all: at fc2_bw the live activations are h, a, loss (an output),
   * dy, da and the workspace: 16+16+4+24+16+64 = 140 over the 328 resident
   * bytes there (dw1 is not yet: 64 below the peak with every grad live
   * all step). */
  T_CASE("keep-all peak by hand") {
    int64_t peak = plan_keep_all_peak(g, d, &e);
    T_CHECKF(peak == 328 + 140, "%lld %s", (long long)peak, e.msg);
  }
  T_CASE("report") {
    Buf out = {0};
    T_CHECKF(info_report(g, d, &out, &e) == 0, "%s", e.msg);
    const char *want[] = {"ops 9: forward 4 backward 4 optimizer 1",
                          "tensors 16: input 2 param 2 grad 2 optstate 2 activation 8",
                          "params", "(112 bytes)", "stashed (4 tensors)", "(64 bytes)",
                          "keep-all", "(468 bytes)", "lower bound", "(448 bytes)", "largest op (fc2_bw)",
                          "device test-gpu"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
      T_CHECKF(out.data && strstr(out.data, want[i]), "missing \"%s\" in:\n%s", want[i], out.data);
    /* Compute time: the sum of cost_op_seconds over the ops. */
    double total = 0;
    for (int i = 0; i < g->nops; i++) total += cost_op_seconds(g, d, i);
    char line[64];
    snprintf(line, sizeof line, "compute time %.6g s", total);
    T_CHECKF(out.data && strstr(out.data, line), "missing \"%s\"", line);
    buf_free(&out);
  }
  graph_free(g);
  device_free(d);

  Device *h100 = device_load("budgets/h100-sxm-80g.json", &e);
  T_CASE("budgets/h100-sxm-80g.json loads") T_CHECKF(h100 != NULL, "%s", e.msg);
  if (!h100) T_DONE();
  DIR *dir = opendir("models");
  struct dirent *de;
  int checked = 0;
  while (dir && (de = readdir(dir))) {
    size_t n = strlen(de->d_name);
    if (n < 6 || strcmp(de->d_name + n - 5, ".json")) continue;
    char path[512];
    snprintf(path, sizeof path, "models/%s", de->d_name);
    g = graph_load(path, &e);
    int64_t res = 0, ws = 0, peak = -1;
    int at;
    if (g && info_lower_bound(g, &res, &ws, &at) == 0) peak = plan_keep_all_peak(g, h100, &e);
    T_CASE(path) T_CHECKF(g && peak >= res + ws && res + ws > 0, "%s lb %lld keep-all %lld", g ? "" : e.msg,
                          (long long)(res + ws), (long long)peak);
    graph_free(g);
    checked++;
  }
  if (dir) closedir(dir);
  device_free(h100);
  T_CASE("models checked") T_CHECK(checked >= 5);
  T_DONE();
}
