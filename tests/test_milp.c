/*
 * test_milp.c - milp.c's relaxation warm-started from a looser problem
 * (MilpOptions.loose_ub): on random memory-limited LPs shaped like the
 * planner's (fractions of tensors freed at a cost, live bytes per position
 * under a limit) it reaches the same optimum as the primal from scratch, and
 * when its iteration count stops it early, the bound it reports is still a
 * lower bound of that optimum and no lower than the looser problem's (or 0,
 * no bound, when it stopped before the looser problem was solved). And its
 * lazy rows (MilpOptions.lazy_first/lazy_end): left out until the point
 * violates them, they give the same optimum as the eager model, with a
 * point and a solution that meet them all, and a valid bound when the count
 * stops the rounds. And a failure inside GLPK (here a cut over a column the
 * model does not have, which GLPK treats as fatal) is not an abort: the
 * solve ends with MILP_FAILED, GLPK's reason and the bound proven before it
 * (at least the relaxation's, at most the optimum), and GLPK solves again
 * afterwards. The caller's cuts are asked for at the root of the tree
 * alone. And the proof tree, whose incumbent in GLPK is a stand-in at its
 * target, returns a real solution (never the stand-in) within its proof
 * gap of a bound at most the optimum, after the caller's search. And the
 * relaxation's optimal basis (MilpResult.basis, every row in, lazy ones
 * too) warm-starts a solve of the same rows under tighter column bounds
 * (MilpOptions.warm_basis): the same optimum, in fewer iterations. And
 * milp_lp.c's scaling and presolved simplex are GLPK's own: the same
 * factors and the same pivots, bit for bit.
 */
#include "milp.h"
#include "ration.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* The positions [LAZY_FIRST, LAZY_END) as lazy rows (the model's rows are
 * its positions), in the middle, so row indices past them must stay right. */
#define LAZY_FIRST 3
#define LAZY_END 8

static int solve(const MilpModel *m, bool lazy, bool lp_only, const double *loose, long iterations, MilpResult *r) {
  MilpOptions o = {.solver = "glpk", .quiet = true, .lp_only = lp_only, .lp_iterations = iterations, .loose_ub = loose,
                   .lazy_first = lazy ? LAZY_FIRST : 0, .lazy_end = lazy ? LAZY_END : 0};
  Err e;
  return milp_solve(m, &o, r, &e);
}

static bool same(double a, double b) { return fabs(a - b) <= 1e-7 * fmax(1, fabs(b)); }

/* A caller's cut generator that adds x_col <= 1 each time it is asked:
 * over a column of the model, a cut that cuts nothing (the column's bound
 * again); over one past the model's, a bug GLPK treats as fatal. It counts
 * the calls and, given ref, how far the farthest point asked at is from it. */
typedef struct Probe {
  int col, ncols, calls;
  const double *ref;
  double farthest;
} Probe;

static void probe_cut(void *ctx, const double *x, MilpModel *cuts) {
  Probe *a = ctx;
  double val = 1;
  a->calls++;
  for (int c = 0; a->ref && c < a->ncols; c++) a->farthest = fmax(a->farthest, fabs(x[c] - a->ref[c]));
  milp_add_row(cuts, -HUGE_VAL, 1, 1, &a->col, &val);
}

/* A stall column, like the planner's: the freed tensors' copy time over a
 * capacity is waited for, at a cost. */
static void add_stall(MilpModel *m, unsigned seed) {
  int cols[NT + 1], n = 0;
  double vals[NT + 1], total = 0;
  srand(seed * 7919);
  int s = milp_add_col(m, 0, HUGE_VAL, 3, false);
  cols[n] = s, vals[n++] = 1;
  for (int t = 0; t < NT; t++) {
    double w = 1 + rand() % 20;
    cols[n] = t, vals[n++] = -w, total += w;
  }
  milp_add_row(m, -0.3 * total, HUGE_VAL, n, cols, vals); /* s >= sum w_t x_t - 0.3 total */
}

/* The continuous columns of x from its binaries: each row holds one,
 * with coefficient 1, at the least its row and bound allow. */
static void complete(const MilpModel *m, double *x) {
  for (int r = 0; r < m->nrows; r++) {
    double sum = 0;
    int own = -1;
    for (int k = 0; k < m->nnz; k++)
      if (m->nz_row[k] == r) {
        if (m->col_int[m->nz_col[k]]) sum += m->nz_val[k] * x[m->nz_col[k]];
        else own = m->nz_col[k];
      }
    x[own] = fmax(m->col_lb[own], m->row_lb[r] - sum);
  }
}

/* MilpOptions.search that hands back a given solution, counting calls. */
typedef struct Searcher {
  const double *to;
  int ncols, calls;
} Searcher;

static bool search_to(void *ctx, double *x, const double *lp_x, double bound) {
  Searcher *s = ctx;
  (void)lp_x, (void)bound;
  s->calls++;
  memcpy(x, s->to, (size_t)s->ncols * sizeof(double));
  return true;
}

/* The model without its lazy rows: their positions' M_p columns left free. */
static void drop_lazy(const MilpModel *m, MilpModel *out, double *row_lb, double *row_ub) {
  *out = *m;
  memcpy(row_lb, m->row_lb, (size_t)m->nrows * sizeof(double));
  memcpy(row_ub, m->row_ub, (size_t)m->nrows * sizeof(double));
  for (int p = LAZY_FIRST; p < LAZY_END; p++) row_lb[p] = -HUGE_VAL, row_ub[p] = HUGE_VAL;
  out->row_lb = row_lb, out->row_ub = row_ub;
}

/* A random model with a stall column and an objective constant, and its
 * optimum (best): whether it was solved to optimality. */
static bool stall_model(MilpModel *m, unsigned seed, double offset, double **loose, MilpResult *best) {
  build(m, seed, 0.35, loose, 0.9);
  add_stall(m, seed);
  m->obj_offset = offset;
  return solve(m, false, false, NULL, 0, best) == 0 && best->status == MILP_OPTIMAL;
}

/* m as a GLPK problem, every row in. */
static glp_prob *to_glpk(const MilpModel *m) {
  glp_prob *P = glp_create_prob();
  glp_add_cols(P, m->ncols), glp_add_rows(P, m->nrows);
  for (int c = 0; c < m->ncols; c++) {
    double lb = m->col_lb[c], ub = m->col_ub[c];
    glp_set_col_bnds(P, c + 1, lb > -HUGE_VAL ? (ub < HUGE_VAL ? GLP_DB : GLP_LO) : (ub < HUGE_VAL ? GLP_UP : GLP_FR),
                     lb > -HUGE_VAL ? lb : 0, ub < HUGE_VAL ? ub : 0);
    glp_set_obj_coef(P, c + 1, m->obj[c]);
  }
  for (int r = 0; r < m->nrows; r++) {
    double lb = m->row_lb[r], ub = m->row_ub[r];
    glp_set_row_bnds(P, r + 1, lb > -HUGE_VAL ? (ub < HUGE_VAL ? (lb == ub ? GLP_FX : GLP_DB) : GLP_LO) : (ub < HUGE_VAL ? GLP_UP : GLP_FR),
                     lb > -HUGE_VAL ? lb : 0, ub < HUGE_VAL ? ub : 0);
  }
  int *ia = calloc((size_t)m->nnz + 1, sizeof(int)), *ja = calloc((size_t)m->nnz + 1, sizeof(int));
  double *ar = calloc((size_t)m->nnz + 1, sizeof(double));
  for (int k = 0; k < m->nnz; k++) ia[k + 1] = m->nz_row[k] + 1, ja[k + 1] = m->nz_col[k] + 1, ar[k + 1] = m->nz_val[k];
  glp_load_matrix(P, m->nnz, ia, ja, ar);
  free(ia), free(ja), free(ar);
  return P;
}

/* Whether milp_lp_scale sets glp_scale_prob's factors exactly, and
 * milp_lp_presolved ends where glp_simplex with its presolver does: the
 * same return code, iterations, status, objective and point. */
static bool scaling_is_glpks(const MilpModel *m, const char *what) {
  glp_prob *a = to_glpk(m), *b = to_glpk(m);
  glp_scale_prob(a, GLP_SF_AUTO);
  bool scaled = milp_lp_scale(b), moved = false;
  for (int i = 1; i <= m->nrows; i++) scaled &= glp_get_rii(a, i) == glp_get_rii(b, i), moved |= glp_get_rii(a, i) != 1;
  for (int j = 1; j <= m->ncols; j++) scaled &= glp_get_sjj(a, j) == glp_get_sjj(b, j), moved |= glp_get_sjj(a, j) != 1;
  T_CHECKF(scaled && moved, "%s: the factors %s", what, moved ? "differ from GLPK's" : "were all 1");
  glp_delete_prob(a), glp_delete_prob(b);
  a = to_glpk(m), b = to_glpk(m);
  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_OFF;
  smcp.presolve = GLP_ON;
  int ra = glp_simplex(a, &smcp), rb = milp_lp_presolved(b, &smcp);
  bool same_lp = ra == rb && glp_get_it_cnt(a) == glp_get_it_cnt(b) && glp_get_status(a) == glp_get_status(b) &&
                 glp_get_obj_val(a) == glp_get_obj_val(b);
  for (int j = 1; j <= m->ncols; j++) same_lp &= glp_get_col_prim(a, j) == glp_get_col_prim(b, j);
  T_CHECKF(same_lp, "%s: rc %d/%d, %d/%d iterations, status %d/%d, objective %.17g/%.17g", what, ra, rb, glp_get_it_cnt(a),
           glp_get_it_cnt(b), glp_get_status(a), glp_get_status(b), glp_get_obj_val(a), glp_get_obj_val(b));
  glp_delete_prob(a), glp_delete_prob(b);
  return scaled && same_lp;
}

int main(void) {
  glp_term_out(GLP_OFF);
  T_CASE("milp_lp.c: GLPK's scaling factors and presolved simplex, bit for bit") {
    int same_all = 0;
    for (unsigned seed = 1; seed <= 20; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.35, &loose, 0.9);
      add_stall(&m, seed);
      char what[32];
      snprintf(what, sizeof what, "seed %u", seed);
      same_all += scaling_is_glpks(&m, what);
      milp_model_free(&m);
      free(loose);
    }
    /* GLPK counts an empty row or column as 1 in its ratios; magnitudes
     * over ten decades need every geometric pass. */
    MilpModel w = {0};
    int cols[4];
    double vals[4] = {1e-4, 3e5, 7, 2e-2};
    for (int c = 0; c < 5; c++) milp_add_col(&w, 0, 1 + c, c % 3 ? -1 : 2, false);
    for (int r = 0; r < 6; r++) {
      for (int k = 0; k < 4; k++) cols[k] = (r + k) % 4, vals[k] *= 3.7 + r;
      milp_add_row(&w, -HUGE_VAL, 10 + r, r == 2 ? 0 : 1 + r % 3, cols, vals);
    }
    same_all += scaling_is_glpks(&w, "wide, with an empty row and column");
    milp_model_free(&w);
    T_CHECKF(same_all == 21, "%d of 21 the same", same_all);
  }
  T_CASE("the dual simplex from a looser problem's basis reaches the primal's optimum") {
    for (unsigned seed = 1; seed <= 40; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.35 + 0.01 * (seed % 30), &loose, 0.9);
      MilpResult plain, warm;
      T_CHECK(solve(&m, false, true, NULL, 0, &plain) == 0 && solve(&m, false, true, loose, 0, &warm) == 0);
      T_CHECKF(plain.status == warm.status, "seed %u: %d vs %d", seed, plain.status, warm.status);
      if (plain.status == MILP_FEASIBLE)
        T_CHECKF(same(warm.bound, plain.bound), "seed %u: %.9g vs %.9g", seed, plain.bound, warm.bound);
      milp_result_free(&plain), milp_result_free(&warm);
      milp_model_free(&m);
      free(loose);
    }
  }
  T_CASE("the dual simplex from an earlier solve's basis under looser bounds reaches the optimum, in fewer iterations") {
    long from_scratch = 0, from_basis = 0;
    int solved = 0;
    for (unsigned seed = 1; seed <= 40; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.35 + 0.01 * (seed % 30), &loose, 0.9);
      MilpModel lm = m; /* a fragmentation round's last solve: the same rows, a higher limit */
      lm.col_ub = loose;
      MilpResult plain, earlier, warm;
      T_CHECK(solve(&m, false, true, NULL, 0, &plain) == 0 && solve(&lm, seed % 2, true, NULL, 0, &earlier) == 0);
      if (earlier.status == MILP_FEASIBLE) {
        T_CHECKF(earlier.basis != NULL, "seed %u: no basis", seed);
        MilpOptions o = {.solver = "glpk", .quiet = true, .lp_only = true, .warm_basis = earlier.basis};
        Err e;
        T_CHECK(milp_solve(&m, &o, &warm, &e) == 0);
        T_CHECKF(plain.status == warm.status, "seed %u: %d vs %d", seed, plain.status, warm.status);
        if (plain.status == MILP_FEASIBLE) {
          T_CHECKF(same(warm.bound, plain.bound), "seed %u: %.9g vs %.9g", seed, plain.bound, warm.bound);
          from_scratch += plain.simplex_iterations, from_basis += warm.simplex_iterations, solved++;
        }
        milp_result_free(&warm);
      }
      milp_result_free(&plain), milp_result_free(&earlier);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(solved > 0 && from_basis < from_scratch, "%d solved: %ld iterations from the basis, %ld from scratch", solved,
             from_basis, from_scratch);
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
      T_CHECK(solve(&m, false, true, NULL, 0, &full) == 0 && solve(&lm, false, true, NULL, 0, &loose_lp) == 0);
      if (full.status != MILP_FEASIBLE || loose_lp.status != MILP_FEASIBLE) continue;
      for (long it = 1; it <= 60; it++) {
        MilpResult r;
        T_CHECK(solve(&m, false, true, loose, it, &r) == 0);
        if (r.status == MILP_NO_SOLUTION) {
          stopped++;
          above_loose += r.bound > loose_lp.bound + 1e-9;
          /* 0: stopped before the looser problem was solved, no bound */
          T_CHECKF(r.bound <= full.bound + 1e-7 * fmax(1, full.bound) &&
                       (r.bound == 0 || r.bound >= loose_lp.bound - 1e-7 * fmax(1, loose_lp.bound)),
                   "seed %u, %ld iterations: bound %.9g, optimum %.9g, looser %.9g", seed, it, r.bound, full.bound, loose_lp.bound);
        } else {
          T_CHECKF(r.status == MILP_FEASIBLE && same(r.bound, full.bound),
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
  T_CASE("lazy rows: the eager relaxation's optimum, at a point that meets every row") {
    int bound_by_lazy = 0;
    for (unsigned seed = 1; seed <= 40; seed++) {
      MilpModel m, without;
      double *loose, row_lb[NP], row_ub[NP];
      build(&m, seed, 0.35 + 0.01 * (seed % 30), &loose, 0.9);
      drop_lazy(&m, &without, row_lb, row_ub);
      MilpResult eager, lazy, warm, none;
      T_CHECK(solve(&m, false, true, NULL, 0, &eager) == 0 && solve(&m, true, true, NULL, 0, &lazy) == 0 &&
              solve(&m, true, true, loose, 0, &warm) == 0 && solve(&without, false, true, NULL, 0, &none) == 0);
      T_CHECKF(eager.status == lazy.status && eager.status == warm.status, "seed %u: %d, %d, %d", seed, eager.status,
               lazy.status, warm.status);
      if (eager.status == MILP_FEASIBLE) {
        T_CHECKF(same(lazy.bound, eager.bound) && same(warm.bound, eager.bound), "seed %u: %.9g, %.9g against %.9g", seed,
                 lazy.bound, warm.bound, eager.bound);
        T_CHECKF(milp_violation(&m, lazy.lp_x) <= 1e-6 && milp_violation(&m, warm.lp_x) <= 1e-6, "seed %u: %g, %g", seed,
                 milp_violation(&m, lazy.lp_x), milp_violation(&m, warm.lp_x));
        bound_by_lazy += none.bound < eager.bound - 1e-6 * fmax(1, eager.bound);
      }
      milp_result_free(&eager), milp_result_free(&lazy), milp_result_free(&warm), milp_result_free(&none);
      milp_model_free(&m);
      free(loose);
    }
    /* Not empty: at some seeds the lazy rows bind (without them the optimum is lower). */
    T_CHECKF(bound_by_lazy > 0, "lazy rows bound at %d seeds", bound_by_lazy);
  }
  T_CASE("lazy rows: branch and bound gets them all, and the same optimum") {
    for (unsigned seed = 1; seed <= 60; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.3 + 0.01 * (seed % 30), &loose, 0.9);
      MilpResult eager, lazy;
      T_CHECK(solve(&m, false, false, NULL, 0, &eager) == 0 && solve(&m, true, false, NULL, 0, &lazy) == 0);
      T_CHECKF(eager.status == lazy.status, "seed %u: %d vs %d", seed, eager.status, lazy.status);
      if (eager.status == MILP_OPTIMAL)
        T_CHECKF(same(lazy.objective, eager.objective) && milp_violation(&m, lazy.x) <= 1e-6,
                 "seed %u: %.9g against %.9g, violation %g", seed, lazy.objective, eager.objective, milp_violation(&m, lazy.x));
      milp_result_free(&eager), milp_result_free(&lazy);
      milp_model_free(&m);
      free(loose);
    }
  }
  T_CASE("a first tree started again on the most fractional column proves the same optimum") {
    int trees = 0;
    for (unsigned seed = 1; seed <= 60; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.3 + 0.01 * (seed % 30), &loose, 0.9);
      MilpOptions o = {.solver = "glpk", .quiet = true};
      MilpResult dt, again;
      Err e;
      T_CHECK(milp_solve(&m, &o, &dt, &e) == 0);
      /* One iteration of Driebeck-Tomlin, then the rest of a count that
       * does not bind on the most fractional column. */
      o.tree_iterations = 1000000, o.dt_iterations = 1;
      T_CHECK(milp_solve(&m, &o, &again, &e) == 0);
      T_CHECKF(dt.status == again.status, "seed %u: %d vs %d", seed, dt.status, again.status);
      if (dt.status == MILP_OPTIMAL) {
        bool fractional = false; /* the relaxation's point: a tree was needed */
        for (int t = 0; t < NT; t++) fractional |= fabs(dt.lp_x[t] - round(dt.lp_x[t])) > 1e-6;
        trees += fractional;
        T_CHECKF(same(again.objective, dt.objective) && milp_violation(&m, again.x) <= 1e-6 && again.bound <= again.objective + 1e-7,
                 "seed %u: %.9g against %.9g, violation %g, bound %.9g", seed, again.objective, dt.objective,
                 milp_violation(&m, again.x), again.bound);
      }
      milp_result_free(&dt), milp_result_free(&again);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(trees > 0, "%d solves needed a tree", trees);
  }
  T_CASE("lazy rows stopped by the iteration count: a valid bound") {
    int stopped_in_rounds = 0;
    for (unsigned seed = 1; seed <= 20; seed++) {
      MilpModel m, without;
      double *loose, row_lb[NP], row_ub[NP];
      build(&m, seed, 0.4, &loose, 0.7);
      drop_lazy(&m, &without, row_lb, row_ub);
      MilpResult full, none;
      T_CHECK(solve(&m, false, true, NULL, 0, &full) == 0 && solve(&without, false, true, NULL, 0, &none) == 0);
      if (full.status != MILP_FEASIBLE || none.status != MILP_FEASIBLE) goto next;
      for (long it = 1; it <= 60; it++) {
        MilpResult r;
        T_CHECK(solve(&m, true, true, NULL, it, &r) == 0);
        if (r.status == MILP_NO_SOLUTION) {
          stopped_in_rounds += r.bound != 0;
          /* 0: stopped in the first solve; else between the optimum without
           * the lazy rows and the optimum with them */
          T_CHECKF(r.bound == 0 || (r.bound >= none.bound - 1e-7 * fmax(1, none.bound) &&
                                    r.bound <= full.bound + 1e-7 * fmax(1, full.bound)),
                   "seed %u, %ld iterations: bound %.9g, optimum %.9g, without the lazy rows %.9g", seed, it, r.bound,
                   full.bound, none.bound);
        } else {
          T_CHECKF(r.status == MILP_FEASIBLE && same(r.bound, full.bound), "seed %u, %ld iterations: status %d bound %.9g, optimum %.9g",
                   seed, it, r.status, r.bound, full.bound);
        }
        milp_result_free(&r);
      }
    next:
      milp_result_free(&full), milp_result_free(&none);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(stopped_in_rounds > 0, "%d solves stopped in the rounds", stopped_in_rounds);
  }
  T_CASE("the caller's cuts are asked for at the root alone, however many nodes the tree needs") {
    int branched = 0;
    for (unsigned seed = 1; seed <= 20; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.35, &loose, 0.9);
      MilpResult best, lp, r;
      T_CHECK(solve(&m, false, false, NULL, 0, &best) == 0 && solve(&m, false, true, NULL, 0, &lp) == 0);
      Probe a = {.col = 0, .ncols = m.ncols, .ref = lp.lp_x};
      /* A first tree stopped at once leaves a gap, so the tree with the
       * caller's cuts runs, and to the optimum. */
      MilpOptions o = {.solver = "glpk", .quiet = true, .tree_iterations = 1, .proof_gap = 1e-9, .proof_iterations = 1000000,
                       .separate = probe_cut, .separate_ctx = &a};
      Err e = {0};
      T_CHECK(milp_solve(&m, &o, &r, &e) == 0);
      if (best.status == MILP_OPTIMAL && lp.bound < best.objective - 1e-6 * fmax(1, best.objective)) {
        /* The root's bound is below the optimum and the cuts cut nothing:
         * the tree had to branch, and no node below the root was asked. */
        branched += a.calls > 0;
        T_CHECKF(r.status != MILP_FAILED && same(r.objective, best.objective), "seed %u: status %d, %.9g against %.9g", seed,
                 r.status, r.objective, best.objective);
        T_CHECKF(a.farthest < 1e-7, "seed %u: asked %d times, at a point %.3g from the root's", seed, a.calls, a.farthest);
      }
      milp_result_free(&best), milp_result_free(&lp), milp_result_free(&r);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(branched > 0, "no tree with cuts had to branch");
  }
  T_CASE("a failure inside GLPK ends the solve with its reason and the bound so far, and GLPK solves again after it") {
    Probe bad = {.col = 1000};
    int failed = 0;
    for (unsigned seed = 1; seed <= 20; seed++) {
      MilpModel m;
      double *loose;
      build(&m, seed, 0.35, &loose, 0.9);
      MilpResult before, lp, r, after;
      T_CHECK(solve(&m, false, false, NULL, 0, &before) == 0);
      T_CHECK(solve(&m, false, true, NULL, 0, &lp) == 0);
      /* A first tree stopped at once leaves a gap, so the tree with the
       * caller's cuts runs. */
      MilpOptions o = {.solver = "glpk", .quiet = true, .tree_iterations = 1, .proof_gap = 1e-9, .proof_iterations = 1000,
                       .separate = probe_cut, .separate_ctx = &bad};
      Err e = {0};
      int calls0 = bad.calls, rc = milp_solve(&m, &o, &r, &e);
      if (bad.calls > calls0) {
        failed++;
        T_CHECKF(rc == 0 && r.status == MILP_FAILED && strstr(r.failure, "GLPK failed") && strstr(r.failure, "out of range") &&
                     !strchr(r.failure, '\n'),
                 "seed %u: rc %d status %d, \"%s\" \"%s\"", seed, rc, rc ? -1 : (int)r.status, r.failure, e.msg);
        T_CHECKF(rc == 0 && !isnan(r.lp_x[m.ncols]) && r.bound >= lp.bound - 1e-7 * fmax(1, lp.bound) &&
                     r.bound <= before.objective + 1e-7 * fmax(1, before.objective),
                 "seed %u: bound %.9g, relaxation %.9g, optimum %.9g", seed, rc ? NAN : r.bound, lp.bound, before.objective);
        if (failed == 1) printf("  %s\n", r.failure);
      }
      if (rc == 0) milp_result_free(&r);
      T_CHECK(solve(&m, false, false, NULL, 0, &after) == 0);
      T_CHECKF(after.status == before.status && same(after.objective, before.objective), "seed %u: %.9g after, %.9g before",
               seed, after.objective, before.objective);
      milp_result_free(&before), milp_result_free(&lp), milp_result_free(&after);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(failed > 0, "the cut generator never ran");
  }
  T_CASE("the proof tree proves its gap of the incumbent and returns a real solution, never its stand-in at the target") {
    int proved = 0, found = 0;
    for (unsigned seed = 1; seed <= 30; seed++) {
      MilpModel m;
      double *loose;
      MilpResult best, lp;
      T_CHECK(stall_model(&m, seed, 200, &loose, &best)); /* 200: the planner's constant compute, outside GLPK's objective */
      T_CHECK(solve(&m, false, true, NULL, 0, &lp) == 0);
      const double gap = 0.02, tol = 1e-7 * fmax(1, best.objective);
      /* Incumbents: everything freed (far above the optimum, which the
       * tree must then find below the target); the optimum with 0.5% more
       * stall (the optimum is above the target: only the proof is left,
       * and the tree ends out of nodes); and for the caller's search, which
       * hands back the optimum, everything freed again. */
      double *all = calloc((size_t)m.ncols + 1, sizeof(double)), *near = calloc((size_t)m.ncols + 1, sizeof(double));
      for (int t = 0; t < NT; t++) all[t] = 1;
      complete(&m, all);
      memcpy(near, best.x, (size_t)m.ncols * sizeof(double));
      near[m.ncols - 1] += 0.005 * best.objective / m.obj[m.ncols - 1];
      for (int k = 0; k < 3; k++) {
        Searcher sr = {.to = best.x, .ncols = m.ncols};
        Probe idle = {.col = 0};
        m.start = k == 1 ? near : all;
        MilpOptions o = {.solver = "glpk", .quiet = true, .tree_iterations = 1, .proof_gap = gap, .proof_iterations = 1000000,
                         .separate = probe_cut, .separate_ctx = &idle, .search = k == 2 ? search_to : NULL, .polish_ctx = &sr};
        MilpResult r;
        Err e = {0};
        T_CHECK(milp_solve(&m, &o, &r, &e) == 0 && r.status == MILP_FEASIBLE);
        T_CHECKF(milp_violation(&m, r.x) <= 1e-6 && fabs(milp_objective(&m, r.x) - r.objective) <= tol,
                 "seed %u k %d: the solution is %.3g off its rows, objective %.9g, reported %.9g", seed, k,
                 milp_violation(&m, r.x), milp_objective(&m, r.x), r.objective);
        T_CHECKF(r.bound <= best.objective + tol && r.objective - r.bound <= gap * r.objective + tol,
                 "seed %u k %d: %.9g, bound %.9g, optimum %.9g", seed, k, r.objective, r.bound, best.objective);
        if (k == 0) found += r.objective < milp_objective(&m, all) * (1 - gap);
        if (k == 1) proved += lp.bound < milp_objective(&m, near) * (1 - gap) - tol;
        if (k == 2)
          T_CHECKF(sr.calls == 1 && fabs(r.objective - best.objective) <= tol, "seed %u: searched %d times, %.9g, optimum %.9g",
                   seed, sr.calls, r.objective, best.objective);
        milp_result_free(&r);
      }
      m.start = NULL;
      free(all), free(near);
      milp_result_free(&best), milp_result_free(&lp);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(proved > 0 && found > 0, "proved %d, found %d", proved, found);
  }
  T_CASE("the proof tree starts only within its reach of the first tree's bound; the bound reported without it is still one") {
    int skipped = 0, ran = 0;
    for (unsigned seed = 1; seed <= 20; seed++) {
      MilpModel m;
      double *loose;
      MilpResult best;
      T_CHECK(stall_model(&m, seed, 0, &loose, &best));
      const double tol = 1e-7 * fmax(1, best.objective);
      double *all = calloc((size_t)m.ncols + 1, sizeof(double));
      for (int t = 0; t < NT; t++) all[t] = 1;
      complete(&m, all);
      m.start = all; /* far above the optimum: the first tree, stopped at once, leaves a wide gap */
      for (int k = 0; k < 2; k++) {
        Probe a = {.col = 0};
        /* k 0: a reach below any gap left (the proof tree must not start);
         * 1: no reach (it starts wherever a gap is left). */
        MilpOptions o = {.solver = "glpk", .quiet = true, .tree_iterations = 1, .proof_gap = 1e-9, .proof_iterations = 1000000,
                         .proof_reach = k == 0 ? 1e-12 : 0, .separate = probe_cut, .separate_ctx = &a};
        MilpResult r;
        Err e = {0};
        T_CHECK(milp_solve(&m, &o, &r, &e) == 0);
        bool gap_left = r.status == MILP_FEASIBLE || r.status == MILP_OPTIMAL;
        T_CHECKF(gap_left && milp_violation(&m, r.x) <= 1e-6 && fabs(milp_objective(&m, r.x) - r.objective) <= tol &&
                     r.bound <= best.objective + tol && r.objective >= best.objective - tol,
                 "seed %u k %d: status %d, %.9g (rows off by %.3g), bound %.9g, optimum %.9g", seed, k, r.status, r.objective,
                 gap_left ? milp_violation(&m, r.x) : -1, r.bound, best.objective);
        if (k == 0) {
          T_CHECKF(a.calls == 0 || r.objective - r.bound <= 1e-12 * fabs(r.objective) + tol,
                   "seed %u: the proof tree ran (%d cut rounds) %.9g above its bound", seed, a.calls, r.objective - r.bound);
          skipped += a.calls == 0 && r.objective - r.bound > tol;
        } else {
          ran += a.calls > 0;
        }
        milp_result_free(&r);
      }
      m.start = NULL;
      free(all);
      milp_result_free(&best);
      milp_model_free(&m);
      free(loose);
    }
    T_CHECKF(skipped > 0 && ran > 0, "skipped %d, ran %d", skipped, ran);
  }
  T_DONE();
}
