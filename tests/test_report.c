/*
 * test_report.c - reports tell the truth: the memory timeline's kinds add
 * up to the simulator's live bytes at every step and put each byte where it
 * belongs; every number of report.csv is what re-planning that point and
 * re-simulating the plan gives, and every infeasible cell is one where
 * plan_make refuses; the budget points are m + f(k - m); infeasible points
 * are written as such in all three outputs.
 */
#include "ration.h"
#include "test.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Checks the timeline of decisions `dec` on g; returns the per-kind maxima. */
static void check_timeline(const Graph *g, const Device *d, Decision dec, int64_t maxima[REPORT_KINDS]) {
  Err e;
  Decision *all = calloc((size_t)g->ntensors, sizeof *all);
  for (int t = 0; t < g->ntensors; t++) all[t] = dec;
  Plan *p = plan_from_decisions(g, d, all, &e);
  free(all);
  T_CHECKF(p != NULL, "%s", e.msg);
  if (!p) return;
  SimResult r;
  T_CHECKF(sim_run(p, g, d, true, &r, &e) == 0, "%s", e.msg);
  int64_t *tl = report_timeline(p, g, &e);
  T_CHECKF(tl != NULL, "%s", e.msg);
  /* Params, optimizer state and inputs are on the device at every step;
   * a grad from its zero step (docs/PLANNING.md 1.3) to the end. */
  int64_t resident[REPORT_KINDS] = {0};
  int *grad_from = calloc((size_t)g->ntensors + 1, sizeof *grad_from);
  for (int s = 0; grad_from && s < p->nsteps; s++)
    if (p->steps[s].kind == STEP_ZERO) grad_from[p->buffers[p->steps[s].to].tensor] = s;
  for (int t = 0; t < g->ntensors; t++) {
    Kind k = g->tensors[t].kind;
    if (k == KIND_PARAM) resident[REPORT_PARAMS] += g->tensors[t].bytes;
    if (k == KIND_OPTSTATE) resident[REPORT_OPTSTATE] += g->tensors[t].bytes;
    if (k == KIND_INPUT) resident[REPORT_INPUTS] += g->tensors[t].bytes;
  }
  memset(maxima, 0, sizeof(int64_t) * REPORT_KINDS);
  int bad_sum = -1, bad_resident = -1;
  for (int s = 0; tl && s < p->nsteps; s++) {
    int64_t sum = 0;
    for (int k = 0; k < REPORT_KINDS; k++) {
      int64_t v = tl[(size_t)s * REPORT_KINDS + k];
      sum += v;
      if (v > maxima[k]) maxima[k] = v;
      if (v < 0) bad_sum = s;
    }
    if (sum != r.live_bytes[s] && bad_sum < 0) bad_sum = s;
    resident[REPORT_GRADS] = 0;
    for (int t = 0; grad_from && t < g->ntensors; t++)
      if (g->tensors[t].kind == KIND_GRAD && grad_from[t] <= s) resident[REPORT_GRADS] += g->tensors[t].bytes;
    for (int k = REPORT_PARAMS; k <= REPORT_INPUTS; k++)
      if (tl[(size_t)s * REPORT_KINDS + k] != resident[k] && bad_resident < 0) bad_resident = s;
  }
  free(grad_from);
  T_CHECKF(bad_sum < 0, "kinds do not add up to the simulator's live bytes at step %d", bad_sum);
  T_CHECKF(bad_resident < 0, "resident kinds are not the resident tensors' bytes at step %d", bad_resident);
  free(tl);
  sim_result_free(&r);
  plan_free(p);
}

/* The CSV's fields of one line (no field here holds a comma but the last). */
static int split_csv(char *line, char **f, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    if (*p == '"') {
      char *w = ++p;
      f[n++] = w;
      for (; *p; p++) {
        if (*p == '"' && p[1] == '"') *w++ = '"', p++;
        else if (*p == '"') break;
        else *w++ = *p;
      }
      if (*p) p++;
      *w = 0;
      if (*p != ',') break;
      p++;
    } else {
      f[n++] = p;
      char *c = strchr(p, ',');
      if (!c) break;
      *c = 0;
      p = c + 1;
    }
  }
  return n;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* Sweeps g and checks the points and every number of the CSV. */
static void check_sweep(const Graph *g, const Device *d, const char **names, int nnames) {
  Err e;
  ReportOptions ro = {.npoints = 6, .strategies = names, .nstrategies = nnames};
  Report r;
  char what[256];
  snprintf(what, sizeof what, "%s: sweep over %s", g->name, names ? "the table less the MILP strategies" : "every strategy of the table");
  int rc = report_sweep(&r, g, d, &ro, &e);
  T_CASE(what) {
    T_CHECKF(rc == 0, "%s", e.msg);
    int n = 0;
    while (plan_strategies[n].name) n++;
    T_CHECK(r.nstrategies == (names ? nnames : n) && r.npoints == 6);
  }
  if (rc) return;
  int64_t k = r.keep_all_bytes;
  T_CASE("budget points: m + f(k - m), first m, last the keep-all peak, m the smallest arena of any strategy") {
    T_CHECK(r.budgets[0] == r.min_budget && r.budgets[5] == k);
    for (int i = 1; i < 6; i++) {
      int64_t want = r.min_budget + (int64_t)((double)(k - r.min_budget) * i / 5.0);
      T_CHECKF(llabs(r.budgets[i] - want) <= 1, "point %d: %" PRId64 " want %" PRId64, i, r.budgets[i], want);
    }
    /* Some strategy meets m, and no strategy's plan is smaller. */
    bool met = false;
    for (int j = 0; j < r.nstrategies; j++) {
      met = met || r.cells[j].feasible;
      for (int i = 0; i < 6; i++)
        if (r.cells[i * r.nstrategies + j].feasible) T_CHECK(r.cells[i * r.nstrategies + j].arena_bytes >= r.min_budget);
    }
    T_CHECK(met);
    T_CHECK(r.cells[5 * r.nstrategies].feasible); /* keep-all at k */
  }
  for (int j = 0; j < r.nstrategies; j++) {
    if (strcmp(r.strategies[j], "ilp")) continue;
    T_CASE("ilp: a larger budget never gives a slower plan (each point starts from the last)") {
      double last = HUGE_VAL;
      for (int i = 0; i < 6; i++) {
        const ReportCell *c = &r.cells[i * r.nstrategies + j];
        if (!c->feasible) continue;
        T_CHECKF(c->predicted.step_seconds <= last * (1 + 1e-12), "point %d: %.9g after %.9g", i,
                 c->predicted.step_seconds, last);
        last = c->predicted.step_seconds;
      }
    }
  }

  Buf csv = {0};
  T_CASE("every CSV number is what re-planning and re-simulating gives") {
    T_CHECK(report_csv(&r, &csv) == 0);
    char *text = util_strdup(csv.data ? csv.data : "");
    int rows = 0, feasible = 0, mismatches = 0;
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    T_CHECK(line && !strncmp(line, "graph,device,point,fraction,budget_bytes,strategy,feasible,step_seconds", 70));
    while ((line = strtok_r(NULL, "\n", &save))) {
      char *f[24];
      int n = split_csv(line, f, 24);
      T_CHECKF(n == 20, "row %d has %d fields", rows, n);
      if (n != 20) break;
      rows++;
      PlanOptions o = {.strategy = f[5], .budget_bytes = strtoll(f[4], NULL, 10), .quiet = true};
      T_CHECK(!strcmp(f[0], g->name) && !strcmp(f[1], d->name));
      Plan *p = plan_make(g, d, &o, &e);
      if (!strcmp(f[6], "0")) {
        T_CHECKF(p == NULL, "row %d (%s at %s) says infeasible but plan_make made a plan", rows, f[5], f[4]);
        T_CHECK(f[7][0] == 0 && f[12][0] == 0 && f[19][0] != 0);
        plan_free(p);
        continue;
      }
      feasible++;
      T_CHECKF(p != NULL, "row %d: %s", rows, e.msg);
      if (!p) continue;
      SimResult s;
      T_CHECKF(sim_run(p, g, d, false, &s, &e) == 0, "%s", e.msg);
      char want[6][64];
      snprintf(want[0], 64, "%.17g", s.step_seconds);
      snprintf(want[1], 64, "%.17g", s.compute_seconds);
      snprintf(want[2], 64, "%.17g", s.recompute_seconds);
      snprintf(want[3], 64, "%.17g", s.stall_seconds);
      snprintf(want[4], 64, "%" PRId64, s.peak_live_bytes);
      snprintf(want[5], 64, "%" PRId64, p->arena_bytes);
      const char *got[6] = {f[7], f[8], f[9], f[10], f[12], f[13]};
      for (int c = 0; c < 6; c++)
        if (strcmp(got[c], want[c])) {
          mismatches++;
          printf("  row %d (%s at %s) column %d: csv %s, re-simulated %s\n", rows, f[5], f[4], c, got[c], want[c]);
        }
      double over = s.step_seconds / r.keep_all->predicted.step_seconds - 1;
      T_CHECK(fabs(strtod(f[11], NULL) - over) < 1e-6);
      T_CHECK(strtoll(f[14], NULL, 10) == p->host_bytes && !strcmp(f[16], p->solver.status));
      sim_result_free(&s);
      plan_free(p);
    }
    T_CHECK(rows == 6 * r.nstrategies);
    T_CHECK(feasible > 0 && mismatches == 0);
    printf("  %s: %d rows, %d feasible, re-simulated\n", g->name, rows, feasible);
    free(text);
  }
  report_free(&r);
  buf_free(&csv);

  report_free(&r);
  buf_free(&csv);

}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  Err e;
  Device *d = device_load("budgets/h100-sxm-80g.json", &e);
  Graph *g = graph_load("models/gpt2-tiny.json", &e);
  if (!d || !g) {
    printf("FAIL setup: %s\nRESULT 0 1\n", e.msg);
    return 1;
  }
  int64_t mx[REPORT_KINDS];
  T_CASE("timeline, keep-all: kinds add up to live bytes; kept, nothing recomputed or moved") {
    check_timeline(g, d, DEC_KEEP, mx);
    T_CHECK(mx[REPORT_KEPT] > 0 && mx[REPORT_PARAMS] > 0 && mx[REPORT_OPTSTATE] > 0);
    T_CHECK(mx[REPORT_RECOMPUTED] == 0 && mx[REPORT_PREFETCHED] == 0 && mx[REPORT_IN_FLIGHT] == 0);
  }
  T_CASE("timeline, all recomputed: kinds add up; recomputed bytes, nothing kept or moved") {
    check_timeline(g, d, DEC_RECOMPUTE, mx);
    T_CHECK(mx[REPORT_RECOMPUTED] > 0);
    T_CHECK(mx[REPORT_KEPT] == 0 && mx[REPORT_PREFETCHED] == 0 && mx[REPORT_IN_FLIGHT] == 0);
  }
  T_CASE("timeline, all offloaded: kinds add up; copies in flight and prefetched bytes") {
    check_timeline(g, d, DEC_OFFLOAD, mx);
    T_CHECK(mx[REPORT_IN_FLIGHT] > 0 && mx[REPORT_PREFETCHED] > 0);
    T_CHECK(mx[REPORT_KEPT] == 0 && mx[REPORT_RECOMPUTED] == 0);
  }

  /* Every strategy on a small graph; on a real one all but the two MILP
   * strategies (exact and ilp take seconds to minutes per point there). */
  Graph *mlp = graph_load("tests/data/mlp.json", &e);
  Device *dev = device_load("tests/data/dev.json", &e);
  const char *names[64];
  int nnames = 0;
  for (const PlanStrategy *st = plan_strategies; st->name && nnames < 64; st++)
    if (strcmp(st->name, "exact") && strcmp(st->name, "ilp")) names[nnames++] = st->name;
  T_CASE("setup: the small graph") T_CHECKF(mlp && dev, "%s", e.msg);
  if (mlp && dev) check_sweep(mlp, dev, NULL, 0);
  check_sweep(g, d, names, nnames);
  graph_free(mlp);
  device_free(dev);

  Report r;
  int64_t k = 0;
  T_CASE("k is what keep-all needs: its arena, at least its peak") {
    T_CHECKF(report_sweep(&r, g, d, &(ReportOptions){.strategies = names, .nstrategies = 1}, &e) == 0, "%s", e.msg);
    k = r.keep_all_bytes;
    T_CHECK(k == r.keep_all->arena_bytes && k >= r.keep_all->predicted.peak_live_bytes);
    report_free(&r);
  }
  T_CASE("infeasible cells are written as infeasible in all three outputs, never as numbers") {
    /* 4 KiB is below anything; keep-all is infeasible at 90% of its peak. */
    int64_t budgets[3] = {4096, k / 10 * 9, k};
    ReportOptions o2 = {.budgets = budgets, .nbudgets = 3, .strategies = names, .nstrategies = nnames};
    T_CHECKF(report_sweep(&r, g, d, &o2, &e) == 0, "%s", e.msg);
    int infeasible = 0;
    for (int c = 0; c < r.npoints * r.nstrategies; c++) infeasible += !r.cells[c].feasible;
    T_CHECK(!r.cells[r.nstrategies].feasible && strstr(r.cells[r.nstrategies].note, "keep-all") != NULL);
    T_CHECK(report_best(&r, 0) < 0 && report_best(&r, 2) >= 0);
    Buf html = {0}, md = {0}, csv2 = {0};
    T_CHECK(report_html(&r, &html) == 0 && report_md(&r, &md) == 0 && report_csv(&r, &csv2) == 0);
    T_CHECKF(count(html.data, "<td>infeasible</td>") == infeasible, "%d in the html, %d cells",
             count(html.data, "<td>infeasible</td>"), infeasible);
    T_CHECK(count(md.data, "| infeasible |") == infeasible);
    T_CHECK(count(csv2.data, ",0,,,,,,,,,,,,") == infeasible);
    T_CHECK(strstr(html.data, "infeasible: no plan") != NULL);
    T_CHECK(strstr(md.data, "infeasible: no strategy has a plan") != NULL);
    T_CHECK(r.timeline != NULL && r.timeline_point >= 1);
    buf_free(&csv2);
    buf_free(&html);
    buf_free(&md);
    report_free(&r);
  }
  T_CASE("report.md and report.html show each plan's host bytes beside its arena") {
    int64_t budgets[1] = {k};
    ReportOptions o4 = {.budgets = budgets, .nbudgets = 1, .strategies = names, .nstrategies = nnames};
    T_CHECKF(report_sweep(&r, g, d, &o4, &e) == 0, "%s", e.msg);
    Buf html = {0}, md = {0};
    T_CHECK(report_html(&r, &html) == 0 && report_md(&r, &md) == 0);
    T_CHECK(strstr(md.data, "| arena | host | solver status |") && strstr(html.data, "<th>arena</th><th>host</th>"));
    ReportUnit u = report_unit(k);
    bool offloads = false;
    for (int j = 0; j < r.nstrategies; j++) {
      const ReportCell *c = &r.cells[j];
      if (!c->feasible) continue;
      offloads |= c->host_bytes > 0;
      char want_md[128], want_html[160];
      snprintf(want_md, sizeof want_md, "| %.2f %s | %.2f %s | %.2f %s | %s |", (double)c->predicted.peak_live_bytes / u.bytes,
               u.name, (double)c->arena_bytes / u.bytes, u.name, (double)c->host_bytes / u.bytes, u.name, c->solver.status);
      snprintf(want_html, sizeof want_html, "<td>%.2f %s</td><td>%.2f %s</td><td class=\"s\">%s</td>",
               (double)c->arena_bytes / u.bytes, u.name, (double)c->host_bytes / u.bytes, u.name, c->solver.status);
      T_CHECKF(strstr(html.data, want_html) != NULL, "%s: no %s", r.strategies[j], want_html);
      T_CHECKF(strstr(md.data, want_md) != NULL, "%s: no %s", r.strategies[j], want_md);
    }
    T_CHECK(offloads);
    buf_free(&html);
    buf_free(&md);
    report_free(&r);
  }
  T_CASE("an unknown strategy is an error naming it") {
    const char *bad[1] = {"no-such"};
    ReportOptions o3 = {.strategies = bad, .nstrategies = 1};
    T_CHECK(report_sweep(&r, g, d, &o3, &e) < 0 && strstr(e.msg, "no-such"));
  }
  graph_free(g);
  device_free(d);
  T_DONE();
}
