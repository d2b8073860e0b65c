/*
 * milp_lp.c - two of GLPK's LP steps done here, with GLPK's own results:
 * its automatic scaling (glp_scale_prob with GLP_SF_AUTO) and the
 * presolved simplex that scales what its presolver builds.
 *
 * GLPK's scaling walks the matrix through its linked row and column lists
 * in every pass (up to 15 geometric-mean rounds, each with its ratio
 * checks, then an equilibration), with a cache miss per element: on
 * gpt2-124m's midpoint a fifth of the presolved relaxation's time, and on
 * gpt2-1558m near keep-all's arena a third of the run (docs/PLANNING.md
 * 5.3). Here the matrix is read once into packed rows and columns and the
 * same passes run over those. Every factor is the same product and
 * quotient of the same doubles in the same order (the minima and maxima
 * do not depend on the order in which elements are visited), so the
 * factors are GLPK's bit for bit, and so are the simplex's pivots after
 * them: test_milp compares the factors with glp_scale_prob's on the
 * planner's models, and the plans are byte-identical.
 */
#include "milp.h"

#include "ration.h"

#include <math.h>
#include <stdlib.h>

/* One orientation of the matrix: line i's elements are first[i] ..
 * first[i + 1] - 1, each the index of the crossing line and |a|. */
typedef struct Lines {
  int count;
  int *first, *cross;
  double *mag;
} Lines;

/* The least and the most |a| * (own * cross) over line i's elements; 1 and
 * 1 for an empty line, as GLPK counts it. */
static void line_range(const Lines *l, int i, const double *own, const double *cross, double *lo, double *hi) {
  double a = 1, b = 1;
  for (int k = l->first[i]; k < l->first[i + 1]; k++) {
    double v = l->mag[k] * (own[i] * cross[l->cross[k]]);
    if (k == l->first[i] || v < a) a = v;
    if (k == l->first[i] || v > b) b = v;
  }
  *lo = a, *hi = b;
}

/* The largest ratio of most to least over the lines (1 with none). */
static double worst_ratio(const Lines *l, const double *own, const double *cross) {
  double worst = 1;
  for (int i = 0; i < l->count; i++) {
    double lo, hi;
    line_range(l, i, own, cross, &lo, &hi);
    if (i == 0 || hi / lo > worst) worst = hi / lo;
  }
  return worst;
}

/* The matrix's least and most scaled |a|, over its rows (an empty row
 * counts as 1). */
static void matrix_range(const Lines *rows, const double *r, const double *s, double *lo, double *hi) {
  *lo = *hi = 1;
  for (int i = 0; i < rows->count; i++) {
    double a, b;
    line_range(rows, i, r, s, &a, &b);
    if (i == 0 || a < *lo) *lo = a;
    if (i == 0 || b > *hi) *hi = b;
  }
}

/* Each line's factor divided by the geometric mean of its least and most
 * (geometric) or by its most (equilibration). */
static void scale_lines(const Lines *l, double *own, const double *cross, bool geometric) {
  for (int i = 0; i < l->count; i++) {
    double lo, hi;
    line_range(l, i, own, cross, &lo, &hi);
    own[i] = geometric ? own[i] / sqrt(lo * hi) : own[i] / hi;
  }
}

/* Rows then columns, or columns first where the rows' worst ratio is the
 * larger, as GLPK orders each pass. */
static void scale_pass(const Lines *rows, const Lines *cols, double *r, double *s, bool columns_first, bool geometric) {
  for (int pass = 0; pass < 2; pass++) {
    if ((pass == 1) == columns_first) scale_lines(rows, r, s, geometric);
    else scale_lines(cols, s, r, geometric);
  }
}

/* GLP_SF_AUTO: nothing where every |a| is within [0.1, 10]; else up to 15
 * geometric-mean passes while each improves the matrix's ratio by 10%,
 * then one equilibration. */
static void auto_factors(const Lines *rows, const Lines *cols, double *r, double *s) {
  double lo, hi;
  matrix_range(rows, r, s, &lo, &hi);
  if (lo >= 0.10 && hi <= 10.0) return;
  bool columns_first = worst_ratio(rows, r, s) > worst_ratio(cols, s, r);
  double ratio = 0;
  for (int k = 1; k <= 15; k++) {
    double last = ratio;
    matrix_range(rows, r, s, &lo, &hi);
    ratio = hi / lo;
    if (k > 1 && ratio > 0.90 * last) break;
    scale_pass(rows, cols, r, s, columns_first, true);
  }
  scale_pass(rows, cols, r, s, worst_ratio(rows, r, s) > worst_ratio(cols, s, r), false);
}

static void lines_free(Lines *l) { free(l->first), free(l->cross), free(l->mag); }

static bool lines_alloc(Lines *l, int count, int nnz) {
  l->count = count;
  l->first = util_xcalloc((size_t)count + 2, sizeof(int));
  l->cross = util_xcalloc((size_t)nnz + 1, sizeof(int));
  l->mag = util_xcalloc((size_t)nnz + 1, sizeof(double));
  return l->first && l->cross && l->mag;
}

bool milp_lp_scale(glp_prob *P) {
  int m = glp_get_num_rows(P), n = glp_get_num_cols(P), nnz = glp_get_num_nz(P);
  Lines rows = {0}, cols = {0};
  int *ind = util_xcalloc((size_t)n + 1, sizeof(int)), *fill = util_xcalloc((size_t)n + 1, sizeof(int));
  double *val = util_xcalloc((size_t)n + 1, sizeof(double)), *r = util_xcalloc((size_t)m + 1, sizeof(double));
  double *s = util_xcalloc((size_t)n + 1, sizeof(double));
  bool ok = ind && fill && val && r && s && lines_alloc(&rows, m, nnz) && lines_alloc(&cols, n, nnz);
  if (ok) {
    for (int i = 0; i < m; i++) {
      int len = glp_get_mat_row(P, i + 1, ind, val);
      rows.first[i + 1] = rows.first[i] + len;
      for (int k = 1; k <= len; k++) {
        rows.cross[rows.first[i] + k - 1] = ind[k] - 1;
        rows.mag[rows.first[i] + k - 1] = fabs(val[k]);
        cols.first[ind[k]]++;
      }
    }
    for (int j = 0; j < n; j++) cols.first[j + 1] += cols.first[j];
    for (int i = 0; i < m; i++)
      for (int k = rows.first[i]; k < rows.first[i + 1]; k++) {
        int j = rows.cross[k], at = cols.first[j] + fill[j]++;
        cols.cross[at] = i, cols.mag[at] = rows.mag[k];
      }
    for (int i = 0; i < m; i++) r[i] = 1;
    for (int j = 0; j < n; j++) s[j] = 1;
    auto_factors(&rows, &cols, r, s);
    for (int i = 0; i < m; i++) glp_set_rii(P, i + 1, r[i]);
    for (int j = 0; j < n; j++) glp_set_sjj(P, j + 1, s[j]);
  }
  lines_free(&rows), lines_free(&cols);
  free(ind), free(fill), free(val), free(r), free(s);
  return ok;
}

/* What glp_simplex checks before its presolver: an empty matrix or a
 * double bound the wrong way round (GLP_EBOUND). */
static bool plain_cases(glp_prob *P) {
  if (glp_get_num_nz(P) == 0) return true;
  for (int i = 1; i <= glp_get_num_rows(P); i++)
    if (glp_get_row_type(P, i) == GLP_DB && glp_get_row_lb(P, i) >= glp_get_row_ub(P, i)) return true;
  for (int j = 1; j <= glp_get_num_cols(P); j++)
    if (glp_get_col_type(P, j) == GLP_DB && glp_get_col_lb(P, j) >= glp_get_col_ub(P, j)) return true;
  return false;
}

/* glp_simplex's presolved path through GLPK's public preprocessor calls:
 * load, preprocess, build, scale, an advanced basis, the simplex on the
 * built problem (the iteration count carried over and back), and the
 * solution recovered only where that one is optimal. A built problem
 * with nothing in it, or no nonzero, goes to glp_simplex itself (GLPK
 * finishes those its own way), as do the cases it rejects first. */
int milp_lp_presolved(glp_prob *P, const glp_smcp *smcp) {
  if (plain_cases(P)) return glp_simplex(P, smcp);
  glp_prep *prep = glp_npp_alloc_wksp();
  glp_npp_load_prob(prep, P, GLP_SOL, GLP_OFF);
  int rc = glp_npp_preprocess1(prep, GLP_OFF);
  if (rc) {
    glp_npp_free_wksp(prep);
    return rc;
  }
  glp_prob *lp = glp_create_prob();
  glp_npp_build_prob(prep, lp);
  if (glp_get_num_nz(lp) == 0) {
    glp_delete_prob(lp);
    glp_npp_free_wksp(prep);
    return glp_simplex(P, smcp);
  }
  glp_bfcp bfcp;
  glp_get_bfcp(P, &bfcp);
  glp_set_bfcp(lp, &bfcp);
  if (!milp_lp_scale(lp)) glp_scale_prob(lp, GLP_SF_AUTO);
  glp_adv_basis(lp, 0);
  glp_smcp plain = *smcp;
  plain.presolve = GLP_OFF;
  glp_set_it_cnt(lp, glp_get_it_cnt(P));
  rc = glp_simplex(lp, &plain);
  glp_set_it_cnt(P, glp_get_it_cnt(lp));
  if (rc == 0 && glp_get_prim_stat(lp) == GLP_FEAS && glp_get_dual_stat(lp) == GLP_FEAS) {
    glp_npp_postprocess(prep, lp);
    glp_npp_obtain_sol(prep, P);
  } else if (rc == 0) {
    rc = glp_get_prim_stat(lp) == GLP_NOFEAS ? GLP_ENOPFS : glp_get_dual_stat(lp) == GLP_NOFEAS ? GLP_ENODFS : GLP_EFAIL;
  }
  glp_delete_prob(lp);
  glp_npp_free_wksp(prep);
  return rc;
}
