/*
 * test_milp.c - milp.c's relaxation warm-started from a looser problem
 * (MilpOptions.loose_ub): on random memory-limited LPs shaped like the
 * planner's (fractions of tensors freed at a cost, live bytes per position
 * under a limit) it reaches the same optimum as the primal from scratch, and
 * when its iteration count stops it early, the bound it reports is still a
 * lower bound of that optimum and no lower than the looser problem's (or 0,
 * no bound, when it stopped before the looser problem was solved).
 */
#include "ration.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

#define NT 24 /* tensors */
#define NP 10 /* positions */

/* x_t in [0,1] frees bytes[t] at every position t lives through, for
 * cost[t] * x_t; M_p = sum of the bytes still live at p <= limit. Returns the
 * keep-all peak (the limit where nothing need be freed). */
static double build(MilpModel *m, unsigned seed, double limit_share, double **loose, double loose_share) {
  memset(m, 0, sizeof *m);
  srand(seed);
  double bytes[NT], cost[NT];
  int first[NT], last[NT];
  for (int t = 0; t < NT; t++) {
    bytes[t] = 1 + rand() % 64;
    cost[t] = 1 + rand() % 100;
    first[t] = rand() % NP;
    last[t] = first[t] + rand() % (NP - first[t]);
  }
  double peak = 0;
  for (int p = 0; p < NP; p++) {
    double live = 0;
    for (int t = 0; t < NT; t++) live += first[t] <= p && p <= last[t] ? bytes[t] : 0;
    peak = fmax(peak, live);
  }
  for (int t = 0; t < NT; t++) milp_add_col(m, 0, 1, cost[t], true);
  for (int p = 0; p < NP; p++) {
    int cols[NT + 1], n = 0;
    double vals[NT + 1], live = 0;
    cols[n] = milp_add_col(m, -HUGE_VAL, limit_share * peak, 0, false), vals[n++] = 1;
    for (int t = 0; t < NT; t++)
      if (first[t] <= p && p <= last[t]) cols[n] = t, vals[n++] = bytes[t], live += bytes[t];
    milp_add_row(m, live, live, n, cols, vals); /* M_p + freed = live */
  }
  *loose = malloc((size_t)m->ncols * sizeof(double));
  for (int c = 0; c < m->ncols; c++) (*loose)[c] = c < NT ? m->col_ub[c] : loose_share * peak;
  return peak;
}

static int relax(const MilpModel *m, const double *loose, long iterations, MilpResult *r) {
  MilpOptions o = {.solver = "glpk", .quiet = true, .lp_only = true, .lp_iterations = iterations, .loose_ub = loose};
  Err e;
  return milp_solve(m, &o, r, &e);
}

int main(void) {
  T_CASE("the dual simplex from a looser problem's basis reaches the primal's optimum") {
    for (unsigned seed = 1; seed <= 40; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.35 + 0.01 * (seed % 30), &loose, 0.9);
      MilpResult plain, warm;
      T_CHECK(relax(&m, NULL, 0, &plain) == 0 && relax(&m, loose, 0, &warm) == 0);
      T_CHECKF(plain.status == warm.status, "seed %u: %d vs %d", seed, plain.status, warm.status);
      if (plain.status == MILP_FEASIBLE)
        T_CHECKF(fabs(plain.bound - warm.bound) <= 1e-7 * fmax(1, fabs(plain.bound)), "seed %u: %.9g vs %.9g", seed,
                 plain.bound, warm.bound);
      milp_result_free(&plain), milp_result_free(&warm);
      milp_model_free(&m);
      free(loose);
    }
  }
  T_CASE("a warm start stopped by its iteration count reports a valid bound") {
    int stopped = 0, above_loose = 0;
    for (unsigned seed = 1; seed <= 20; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.4, &loose, 0.7);
      MilpResult full, loose_lp;
      MilpModel lm = m; /* the looser problem alone: its optimum is the floor */
      lm.col_ub = loose;
      T_CHECK(relax(&m, NULL, 0, &full) == 0 && relax(&lm, NULL, 0, &loose_lp) == 0);
      if (full.status != MILP_FEASIBLE || loose_lp.status != MILP_FEASIBLE) continue;
      for (long it = 1; it <= 60; it++) {
        MilpResult r;
        T_CHECK(relax(&m, loose, it, &r) == 0);
        if (r.status == MILP_NO_SOLUTION) {
          stopped++;
          above_loose += r.bound > loose_lp.bound + 1e-9;
          /* 0: stopped before the looser problem was solved, no bound */
          T_CHECKF(r.bound <= full.bound + 1e-7 * fmax(1, full.bound) &&
                       (r.bound == 0 || r.bound >= loose_lp.bound - 1e-7 * fmax(1, loose_lp.bound)),
                   "seed %u, %ld iterations: bound %.9g, optimum %.9g, looser %.9g", seed, it, r.bound, full.bound, loose_lp.bound);
        } else {
          T_CHECKF(r.status == MILP_FEASIBLE && fabs(r.bound - full.bound) <= 1e-7 * fmax(1, full.bound),
                   "seed %u, %ld iterations: status %d bound %.9g, optimum %.9g", seed, it, r.status, r.bound, full.bound);
        }
        milp_result_free(&r);
      }
      milp_result_free(&full), milp_result_free(&loose_lp);
      milp_model_free(&m);
      free(loose);
    }
    /* The check above is not empty: caps stopped solves, and some of the
     * bounds came from the dual's own basis, above the looser optimum. */
    T_CHECKF(stopped > 0 && above_loose > 0, "%d stopped, %d above the looser optimum", stopped, above_loose);
  }
  T_DONE();
}
