/*
 * milp.c - a solver-neutral mixed-integer program (columns with bounds,
 * integrality and objective; sparse rows with two-sided bounds; an optional
 * starting solution) and its two back ends: GLPK (the default) and COIN-OR
 * CBC through its C interface. Planners build one MilpModel and never touch a
 * solver API, so both solvers see the same model.
 *
 * GLPK: the LP relaxation is solved first by the simplex with its presolver,
 * then branch and bound starts from that basis without the MIP presolver, so
 * that the tree works on the original columns and the starting solution can
 * be handed over as a heuristic solution (glp_ios_heur_sol) and the
 * caller's cuts (MilpOptions.separate) are rows over the model's columns;
 * those only go into a second tree, where the first left the gap above
 * o->proof_gap. CBC (milp_cbc.c) gets neither the neighbourhoods nor the
 * cuts.
 *
 * GLPK calls abort on its own internal errors unless glp_error_hook takes
 * them: glpk_solve does, so that a failure inside GLPK (seen once, a
 * failed assertion in the primal simplex on an experimental model) ends
 * the solve with MILP_FAILED, GLPK's own text (which would otherwise go
 * to the terminal) and the bound proven so far (an lp_only solve: an
 * error), and the library never aborts. No GLPK object lives
 * outside one glpk_solve, so the glp_free_env that follows frees nothing
 * of anyone else's.
 */
#include "ration.h"
#include "milp.h"

#include <glpk.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool grow(void **arr, int need, int *cap, size_t elem) {
  if (need <= *cap) return true;
  int n = *cap ? *cap : 256;
  while (n < need) n *= 2;
  void *p = realloc(*arr, (size_t)n * elem);
  if (!p) return false;
  *arr = p;
  *cap = n;
  return true;
}

int milp_add_col(MilpModel *m, double lb, double ub, double obj, bool integer) {
  if (m->failed) return -1;
  if (m->ncols == m->cap_cols) {
    int n = m->cap_cols ? 2 * m->cap_cols : 256;
    double *a = realloc(m->col_lb, (size_t)n * sizeof(double));
    if (a) m->col_lb = a;
    double *b = a ? realloc(m->col_ub, (size_t)n * sizeof(double)) : NULL;
    if (b) m->col_ub = b;
    double *c = b ? realloc(m->obj, (size_t)n * sizeof(double)) : NULL;
    if (c) m->obj = c;
    bool *d = c ? realloc(m->col_int, (size_t)n * sizeof(bool)) : NULL;
    if (!d) return m->failed = true, -1;
    m->col_int = d;
    m->cap_cols = n;
  }
  int c = m->ncols++;
  m->col_lb[c] = lb;
  m->col_ub[c] = ub;
  m->obj[c] = obj;
  m->col_int[c] = integer;
  return c;
}

int milp_add_row(MilpModel *m, double lb, double ub, int n, const int *cols, const double *vals) {
  if (m->failed) return -1;
  int cap = m->cap_rows;
  if (!grow((void **)&m->row_lb, m->nrows + 1, &cap, sizeof(double)) ||
      !grow((void **)&m->row_ub, m->nrows + 1, &m->cap_rows, sizeof(double)))
    return m->failed = true, -1;
  int r = m->nrows++;
  m->row_lb[r] = lb;
  m->row_ub[r] = ub;
  for (int k = 0; k < n; k++)
    if (milp_add_term(m, r, cols[k], vals[k])) return -1;
  return r;
}

int milp_add_term(MilpModel *m, int row, int col, double val) {
  if (m->failed) return -1;
  if (val == 0) return 0;
  int cap = m->cap_nz, cap2 = m->cap_nz;
  if (!grow((void **)&m->nz_row, m->nnz + 1, &cap, sizeof(int)) || !grow((void **)&m->nz_col, m->nnz + 1, &cap2, sizeof(int)) ||
      !grow((void **)&m->nz_val, m->nnz + 1, &m->cap_nz, sizeof(double)))
    return m->failed = true, -1;
  m->nz_row[m->nnz] = row;
  m->nz_col[m->nnz] = col;
  m->nz_val[m->nnz] = val;
  m->nnz++;
  return 0;
}

void milp_model_free(MilpModel *m) {
  free(m->obj);
  free(m->col_lb);
  free(m->col_ub);
  free(m->col_int);
  free(m->row_lb);
  free(m->row_ub);
  free(m->nz_row);
  free(m->nz_col);
  free(m->nz_val);
  free(m->start);
  memset(m, 0, sizeof *m);
}

double milp_violation(const MilpModel *m, const double *x) {
  double worst = 0;
  double *act = util_xcalloc((size_t)m->nrows + 1, sizeof(double));
  if (!act) return INFINITY;
  for (int k = 0; k < m->nnz; k++) act[m->nz_row[k]] += m->nz_val[k] * x[m->nz_col[k]];
  for (int r = 0; r < m->nrows; r++) {
    double scale = 1 + fabs(m->row_lb[r] > -HUGE_VAL ? m->row_lb[r] : 0) + fabs(m->row_ub[r] < HUGE_VAL ? m->row_ub[r] : 0);
    if (act[r] < m->row_lb[r] && (m->row_lb[r] - act[r]) / scale > worst) worst = (m->row_lb[r] - act[r]) / scale;
    if (act[r] > m->row_ub[r] && (act[r] - m->row_ub[r]) / scale > worst) worst = (act[r] - m->row_ub[r]) / scale;
  }
  for (int c = 0; c < m->ncols; c++) {
    if (x[c] < m->col_lb[c] - 1e-9 && m->col_lb[c] - x[c] > worst) worst = m->col_lb[c] - x[c];
    if (x[c] > m->col_ub[c] + 1e-9 && x[c] - m->col_ub[c] > worst) worst = x[c] - m->col_ub[c];
  }
  free(act);
  return worst;
}

double milp_objective(const MilpModel *m, const double *x) {
  double v = m->obj_offset;
  for (int c = 0; c < m->ncols; c++) v += m->obj[c] * x[c];
  return v;
}

static double rel_gap(double inc, double bound) {
  double d = fabs(inc - bound);
  return d <= 1e-12 ? 0 : d / fmax(fabs(inc), 1e-12);
}

/* ------------------------------------------------------------- GLPK */

/* Cut rounds at the root, and none below it: cuts made at a node stay in
 * its whole subtree, so the LPs grow with depth, each node costs more
 * pivots and GLPK's basis grows ill-conditioned. With 3 rounds a node, the
 * proof tree on unet at its smallest budget failed (singular basis,
 * glp_intopt GLP_EFAIL) 25,400 pivots in, at bound 36,047.1 us; with root
 * cuts alone the same count ran out at 36,366.6 (docs/PLANNING.md 5). */
#define MILP_ROOT_CUT_ROUNDS 50
#define MILP_ROOT_CUTS_TAKEN 90 /* at most, a round (GLPK's own figure at the root) */
/* The proof tree's target is the incumbent less this share of the proof
 * gap: a tree that proves its target ends inside the gap, not on it (a
 * bound of exactly 1% below reads as 0.0100000006 from the plan file's
 * rounded figures). unet f = 0: bound 37,338.0 instead of 37,336.8 us
 * (its best node passed 1% first, where the callback stops the tree). */
#define MILP_PROOF_SHARE 0.99
/* GLPK's setup of a relaxation (loading, scaling, presolve, the first
 * factorization) over the wall time of building its model: 20-30x
 * measured on gpt2-124m, unet and llama3.2-1b at loads of 10 to 18 on 2
 * cores. */
#define GLPK_SETUP_BUILDS 40

/* The lazy rows' terms, row by row, and which are in P. */
typedef struct LazyRows {
  int first, n;   /* the model's rows first .. first + n - 1 */
  int *start;     /* per row, where its terms start in term (n + 1) */
  int *term;      /* the model's triplet indices, row by row */
  int *cols;      /* glp_set_mat_row's arrays (1-based) */
  double *vals;
  char *active;   /* per row, in P */
} LazyRows;

static void lazy_free(LazyRows *z) {
  free(z->start), free(z->term), free(z->cols), free(z->vals), free(z->active);
  *z = (LazyRows){0};
}

/* glpk_branch's copy of the node's matrix rows (row i's terms at
 * row_first[i] .. row_first[i + 1] - 1 of col / val), basis statuses and
 * basis header (head[i]: the variable basic in row i, GLPK's numbering). */
typedef struct BranchCache {
  int *row_first, *col, *row_stat, *col_stat, *ind, *head;
  double *val, *row_val;
  int cap_rows, cap_nz, cap_val, cap_stat_rows, cap_stat_cols, cap_ind, cap_row_val, cap_head;
} BranchCache;

/* Everything a GLPK solve allocates that lives across a call into GLPK,
 * on the heap. GLPK reports its own failures (a failed assertion inside
 * the simplex, a bad argument) through glp_error_hook, whose only way
 * back is a longjmp out of GLPK's frames; what is here is then freed, and
 * the solve ends with MILP_FAILED (or an error) instead of an abort. */
typedef struct GlpkOwned {
  jmp_buf back;
  char said[512]; /* what GLPK printed (only its error text: its output is off otherwise) */
  double proven;  /* the best bound proven so far (the columns' bounds alone before the relaxation) */
  LazyRows lazy;
  int *ia, *ja; /* glpk_load's matrix */
  double *ar;
  double *sub, *nb, *target_x;
  int *row_stat, *col_stat;
  double *heur_x;                 /* the callback's start for the tree */
  double *cut_x, *cut_val, *cut_alfa; /* ... and its cut rounds */
  int *cut_first;
  struct CutRating *cut_rate;
  double *rho, *alfa, *tab_val, *tab_unit; /* glpk_branch's */
  int *tab_ind;
  BranchCache bc;
  int *cut_ind;
  MilpModel cuts;
  int64_t iterations, nodes; /* the solve's work so far, every problem's */
  bool scaled; /* glp_scale_prob has run on the problem (ensure_scaled) */
} GlpkOwned;

/* GLPK's scaling of the loaded problem, GLP_SF_AUTO, done where the
 * problem's own simplex, a copy of it or a change of its matrix first
 * needs it, rather than at load: the presolver reads the problem unscaled
 * (and scales what it builds), so a relaxation it solves never uses these
 * factors, and where nothing follows it on the problem itself (gpt2-124m at
 * its midpoint: no tree) the scaling's passes over the matrix were an
 * eighth of the run. The factors depend only on the matrix, which is the
 * loaded one until then: the same factors wherever it runs. */
static void ensure_scaled(glp_prob *P, GlpkOwned *w) {
  /* milp_lp_scale sets the factors GLPK's passes would end at; where a
   * factorization exists GLPK's own passes run, as they also say whether
   * it still holds. */
  if (!w->scaled && (glp_bf_exists(P) || !milp_lp_scale(P))) glp_scale_prob(P, GLP_SF_AUTO);
  w->scaled = true;
}

static void owned_free(GlpkOwned *w) {
  lazy_free(&w->lazy);
  free(w->ia), free(w->ja), free(w->ar), free(w->sub), free(w->nb), free(w->target_x), free(w->row_stat), free(w->col_stat);
  free(w->heur_x), free(w->cut_x), free(w->cut_val), free(w->cut_alfa), free(w->cut_ind), free(w->cut_first), free(w->cut_rate);
  free(w->rho), free(w->alfa), free(w->tab_val), free(w->tab_unit), free(w->tab_ind);
  free(w->bc.row_first), free(w->bc.col), free(w->bc.row_stat), free(w->bc.col_stat), free(w->bc.ind), free(w->bc.val);
  free(w->bc.head);
  free(w->bc.row_val);
  milp_model_free(&w->cuts);
}

typedef struct GlpkCb {
  GlpkOwned *own;
  const MilpModel *m;
  const MilpOptions *o;
  const double *start; /* ncols values handed to the tree, or NULL */
  /* The proof tree's start is the incumbent with its objective lowered to
   * the target (glpk_target): then what GLPK finds at or above target is
   * the stand-in, and the incumbent's own objective is real. */
  double target, real;
  long node_limit, iteration_limit;
  double t0, last_print, bound;
  bool gave_start, stopped, counted_out;
  bool whole; /* the tree is over the whole model, not a neighbourhood: its bound bounds the solve, its progress is printed */
  bool cuts; /* the tree works on the model's own columns (no presolver): the caller's cuts apply */
  bool most_fractional; /* it branches on the most fractional column, not by Driebeck-Tomlin */
  long nodes;
  int created; /* the tree's nodes so far */
  int iterations0; /* the problem's simplex count when the tree began */
  int cut_rounds; /* at the root so far */
} GlpkCb;

/* GLPK's most fractional column (the one nearest to x.5, the first of
 * ties) and its branch toward the nearer integer; 0 when none. */
static int most_fractional(glp_tree *T, int n, int *next) {
  glp_prob *P = glp_ios_get_prob(T);
  int chosen = 0;
  double most = DBL_MAX;
  for (int j = 1; j <= n; j++) {
    if (!glp_ios_can_branch(T, j)) continue;
    double x = glp_get_col_prim(P, j), half = floor(x) + 0.5;
    if (most > fabs(x - half)) {
      chosen = j, most = fabs(x - half);
      *next = x < half ? GLP_DN_BRNCH : GLP_UP_BRNCH;
    }
  }
  return chosen;
}

/* The node's matrix by rows and its basis statuses, read from GLPK once
 * per branching instead of once per fractional column: on cond-16 of
 * bench/gen_graph.py, the memory-minimizing tree (hundreds of
 * fractional columns a node) spent 36% of its samples (perf) in those
 * three calls; read once, the same tree (4,640 simplex iterations, the
 * same bound) took 15.4 s CPU instead of 19.4. Grown, never shrunk, over a
 * solve (GlpkOwned). */
static bool branch_cache(glp_prob *P, BranchCache *bc) {
  int m = glp_get_num_rows(P), n = glp_get_num_cols(P);
  if (!grow((void **)&bc->row_first, m + 2, &bc->cap_rows, sizeof(int)) ||
      !grow((void **)&bc->row_stat, m + 1, &bc->cap_stat_rows, sizeof(int)) ||
      !grow((void **)&bc->col_stat, n + 1, &bc->cap_stat_cols, sizeof(int)) ||
      !grow((void **)&bc->ind, n + 1, &bc->cap_ind, sizeof(int)) ||
      !grow((void **)&bc->row_val, n + 1, &bc->cap_row_val, sizeof(double)) ||
      !grow((void **)&bc->head, m + 1, &bc->cap_head, sizeof(int)))
    return false;
  bc->row_first[1] = 0;
  for (int i = 1; i <= m; i++) {
    int len = glp_get_mat_row(P, i, bc->ind, bc->row_val), at = bc->row_first[i];
    if (!grow((void **)&bc->col, at + len, &bc->cap_nz, sizeof(int)) ||
        !grow((void **)&bc->val, at + len, &bc->cap_val, sizeof(double)))
      return false;
    if (len > 0) {
      memcpy(bc->col + at, bc->ind + 1, (size_t)len * sizeof(int));
      memcpy(bc->val + at, bc->row_val + 1, (size_t)len * sizeof(double));
    }
    bc->row_first[i + 1] = at + len;
    bc->row_stat[i] = glp_get_row_stat(P, i);
    bc->head[i] = glp_get_bhead(P, i);
  }
  for (int k = 1; k <= n; k++) bc->col_stat[k] = glp_get_col_stat(P, k);
  return true;
}

/* glp_transform_row from the node's matrix by rows (bc): a row over the
 * columns, a (n + 1), expressed in the nonbasic variables, its terms over
 * the basic columns through B^-T, then summed over the rows where that is
 * not zero, instead of GLPK's pass over every nonbasic column of the
 * matrix. Writes the row (GLPK's numbering: rows 1..m, columns
 * m+1..m+n) to ind / val and returns its length; rho (m + 1) and alfa
 * (n + 1) are scratch. With a = e_j for a basic column j, the simplex
 * tableau's row of j (glp_eval_tab_row). */
static int row_in_nonbasics(glp_prob *P, const BranchCache *bc, const double *a, double *rho, double *alfa, int *ind,
                            double *val) {
  int m = glp_get_num_rows(P), n = glp_get_num_cols(P);
  for (int i = 1; i <= m; i++) {
    int k = bc->head[i];
    rho[i] = k <= m ? 0 : a[k - m];
  }
  glp_btran(P, rho);
  memcpy(alfa, a, ((size_t)n + 1) * sizeof(double));
  for (int i = 1; i <= m; i++) {
    if (rho[i] == 0) continue;
    for (int t = bc->row_first[i]; t < bc->row_first[i + 1]; t++) alfa[bc->col[t]] += rho[i] * bc->val[t];
  }
  int len = 0;
  for (int i = 1; i <= m; i++)
    if (bc->row_stat[i] != GLP_BS && rho[i] != 0) len++, ind[len] = i, val[len] = -rho[i];
  for (int j = 1; j <= n; j++)
    if (bc->col_stat[j] != GLP_BS && alfa[j] != 0) len++, ind[len] = m + j, val[len] = alfa[j];
  return len;
}

/* Driebeck-Tomlin branching, as GLPK's own (GLP_BR_DTH): for every
 * fractional column, the objective's change in one dual simplex step
 * toward each branch, from its row of the simplex tableau; the column
 * whose larger change is largest, its branch of the smaller change next;
 * when no change reaches 1e-6 (1 + 0.001 |z|), the most fractional column
 * (most_fractional), which is GLPK's choice then too: left to GLPK, it
 * would first compute every tableau row again, only to reach the same
 * fallback: the memory-minimizing tree, whose peak objective leaves most
 * changes at 0, spent 9 of 20 stack samples in GLPK's tableau rows on
 * cond-16 of bench/gen_graph.py, 4 of 24 this way (the one row a node
 * GLPK computes for itself). GLPK computes each tableau
 * row with glp_eval_tab_row, which reads
 * every non-basic column of the matrix: 22% of unet f = 0's run. Here the
 * row is summed over the rows where B^-T e_p is not zero. Measured side
 * by side: the same trees, unet f = 0 in 38.0 s instead of 45.3 (56,526
 * simplex iterations in its proof tree either way), gpt2-tiny f = 0.1 in
 * 8.4 instead of 12.4 (bench/RESULTS.md). Leaves the choice to GLPK when
 * out of memory. */
static void glpk_branch(glp_tree *T, GlpkOwned *w) {
  glp_prob *P = glp_ios_get_prob(T);
  int m = glp_get_num_rows(P), n = glp_get_num_cols(P);
  double *rho = w->rho = util_xcalloc((size_t)m + 1, sizeof(double));
  double *alfa = w->alfa = util_xcalloc((size_t)n + 1, sizeof(double));
  int *ind = w->tab_ind = util_xcalloc((size_t)m + n + 1, sizeof(int));
  double *val = w->tab_val = util_xcalloc((size_t)m + n + 1, sizeof(double));
  double *unit = w->tab_unit = util_xcalloc((size_t)n + 1, sizeof(double));
  bool computed = rho && alfa && ind && val && unit && branch_cache(P, &w->bc);
  const BranchCache *bc = &w->bc;
  int chosen = 0, next = GLP_NO_BRNCH;
  double degrad = -1;
  for (int j = 1; computed && j <= n; j++) {
    if (!glp_ios_can_branch(T, j)) continue;
    double x = glp_get_col_prim(P, j);
    unit[j] = 1;
    int len = row_in_nonbasics(P, bc, unit, rho, alfa, ind, val);
    unit[j] = 0;
    double dz[2]; /* down, up */
    for (int up = 0; up < 2; up++) {
      int q = glp_dual_rtest(P, len, ind, val, up ? 1 : -1, 1e-9);
      if (!q) {
        dz[up] = DBL_MAX; /* that branch has no feasible point */
        continue;
      }
      int k = ind[q];
      double step = ((up ? ceil(x) : floor(x)) - x) / val[q];
      /* An integer column entering moves by a whole step (Tomlin). */
      if (k > m && glp_get_col_kind(P, k - m) != GLP_CV && fabs(step - floor(step + 0.5)) > 1e-3)
        step = step > 0 ? ceil(step) : floor(step);
      int stat = k <= m ? bc->row_stat[k] : bc->col_stat[k - m];
      double d = k <= m ? glp_get_row_dual(P, k) : glp_get_col_dual(P, k - m);
      /* Round-off in a degenerate basis: no reduced cost of the wrong sign. */
      if ((stat == GLP_NL && d < 0) || (stat == GLP_NU && d > 0) || stat == GLP_NF) d = 0;
      dz[up] = d * step;
    }
    if (degrad < fabs(dz[0]) || degrad < fabs(dz[1])) {
      chosen = j;
      next = fabs(dz[0]) < fabs(dz[1]) ? GLP_DN_BRNCH : GLP_UP_BRNCH;
      degrad = fmax(fabs(dz[0]), fabs(dz[1]));
      if (degrad == DBL_MAX) break;
    }
  }
  if (computed && chosen && degrad < 1e-6 * (1 + 0.001 * fabs(glp_get_obj_val(P)))) chosen = most_fractional(T, n, &next);
  if (computed && chosen) glp_ios_branch_upon(T, chosen, next);
  free(rho), free(alfa), free(ind), free(val), free(unit);
  w->rho = w->alfa = w->tab_val = w->tab_unit = NULL, w->tab_ind = NULL;
}

/* One cut of a round as GLPK's ios_process_cuts rates it: its efficacy
 * (violation over its norm) and the least rise of the objective one dual
 * simplex step toward it gives (deg), after its row was expressed in the
 * nonbasic variables. */
typedef struct CutRating {
  int row; /* in GlpkOwned.cuts */
  double eff, deg;
  bool taken;
} CutRating;

/* GLPK's order of the cuts (glpios11.c's fcmp): by the objective's rise,
 * then by efficacy where neither has one. */
static int cut_rating_cmp(const void *pa, const void *pb) {
  const CutRating *a = pa, *b = pb;
  if (a->deg == 0 && b->deg == 0) return (a->eff < b->eff) - (a->eff > b->eff);
  return (a->deg < b->deg) - (a->deg > b->deg);
}

/* The cosine of the angle between two cuts' normals (glpios11.c's
 * parallel), work (n + 1) zero on entry and on return. */
static double cut_cosine(const MilpModel *cuts, const int *first, int a, int b, double *work) {
  double s = 0, sa = 0, sb = 0;
  for (int k = first[a + 1] - 1; k >= first[a]; k--) work[cuts->nz_col[k] + 1] = cuts->nz_val[k], sa += cuts->nz_val[k] * cuts->nz_val[k];
  for (int k = first[b + 1] - 1; k >= first[b]; k--) s += work[cuts->nz_col[k] + 1] * cuts->nz_val[k], sb += cuts->nz_val[k] * cuts->nz_val[k];
  for (int k = first[a]; k < first[a + 1]; k++) work[cuts->nz_col[k] + 1] = 0;
  double norms = sqrt(sa) * sqrt(sb);
  return s / (norms < DBL_EPSILON * DBL_EPSILON ? DBL_EPSILON : norms);
}

/* The caller's cuts for the root's LP point, the ones GLPK would take
 * (ios_process_cuts: at most 90 at the root, by the objective's rise,
 * then efficacy; none that rates under 0.01 in both or is within a cosine
 * of 0.9 of one taken), put into the node's problem directly, as GLPK's
 * driver allows at this call. Handed to its local pool instead, GLPK
 * expresses each cut in the nonbasic variables by a pass over every
 * column of the matrix (glp_transform_row): on a 16-layer llama (459 ops)
 * at rtx4090-24g's budget that was 36% of the run's CPU, 13 rounds of 129
 * cuts each costing 3.5 s. Here the pass is over the rows the cut's B^-T
 * reaches, from the node's matrix read once per round (branch_cache),
 * equal to GLPK's to rounding; the rule, the order and the terms are
 * GLPK's (its pool keeps a cut's terms last first). */
static void glpk_add_cuts(glp_tree *T, GlpkCb *cb) {
  if (glp_ios_up_node(T, glp_ios_curr_node(T)) || ++cb->cut_rounds > MILP_ROOT_CUT_ROUNDS) return;
  glp_prob *P = glp_ios_get_prob(T);
  const MilpModel *m = cb->m;
  GlpkOwned *w = cb->own;
  int rows = glp_get_num_rows(P), n = glp_get_num_cols(P);
  double *x = w->cut_x = util_xcalloc((size_t)n + 1, sizeof(double));
  int *ind = w->cut_ind = util_xcalloc((size_t)rows + n + 2, sizeof(int));
  double *val = w->cut_val = util_xcalloc((size_t)rows + n + 2, sizeof(double));
  double *a = w->alfa = util_xcalloc((size_t)n + 1, sizeof(double));
  double *alfa = w->cut_alfa = util_xcalloc((size_t)n + 1, sizeof(double));
  double *rho = w->rho = util_xcalloc((size_t)rows + 1, sizeof(double));
  MilpModel *cuts = &w->cuts;
  bool ok = x && ind && val && a && alfa && rho;
  if (ok) {
    for (int c = 0; c < m->ncols; c++) x[c] = glp_get_col_prim(P, c + 1);
    cb->o->separate(cb->o->separate_ctx, x, cuts);
  }
  int nc = cuts->failed ? 0 : cuts->nrows;
  CutRating *rate = w->cut_rate = nc ? util_xcalloc((size_t)nc, sizeof(CutRating)) : NULL;
  int *first = w->cut_first = nc ? util_xcalloc((size_t)nc + 1, sizeof(int)) : NULL;
  ok = ok && nc > 0 && rate && first && branch_cache(P, &w->bc);
  for (int k = 0, r = 0; ok && r < nc; r++) {
    first[r] = k;
    double norm2 = 0;
    bool outside = false;
    for (; k < cuts->nnz && cuts->nz_row[k] == r; k++) {
      int c = cuts->nz_col[k];
      if (c < 0 || c >= n) outside = true;
      else a[c + 1] = cuts->nz_val[k], norm2 += cuts->nz_val[k] * cuts->nz_val[k];
    }
    if (outside) { /* the caller's bug: GLPK's own check of the row ends the solve (glpk_fatal) */
      int len = 0;
      for (int t = first[r]; t < k && len < n; t++) len++, ind[len] = cuts->nz_col[t] + 1, val[len] = cuts->nz_val[t];
      glp_set_mat_row(P, glp_add_rows(P, 1), len, ind, val);
    }
    if (norm2 < DBL_EPSILON * DBL_EPSILON) norm2 = DBL_EPSILON;
    int len = row_in_nonbasics(P, &w->bc, a, rho, alfa, ind, val);
    for (int t = first[r]; t < k; t++) a[cuts->nz_col[t] + 1] = 0;
    bool upper = cuts->row_ub[r] < HUGE_VAL;
    double rhs = upper ? cuts->row_ub[r] : cuts->row_lb[r], y = 0;
    for (int t = 1; t <= len; t++) y += val[t] * (ind[t] <= rows ? glp_get_row_prim(P, ind[t]) : glp_get_col_prim(P, ind[t] - rows));
    rate[r] = (CutRating){.row = r};
    if (upper ? y <= rhs : y >= rhs) continue; /* not violated at the point */
    int piv = glp_dual_rtest(P, len, ind, val, upper ? -1 : 1, 1e-9);
    if (!piv) { /* no dual feasible adjacent basis */
      rate[r].eff = 1, rate[r].deg = DBL_MAX;
      continue;
    }
    double dx = (rhs - y) / val[piv];
    double dz = (ind[piv] <= rows ? glp_get_row_dual(P, ind[piv]) : glp_get_col_dual(P, ind[piv] - rows)) * dx;
    rate[r].eff = fabs(rhs - y) / sqrt(norm2);
    rate[r].deg = dz < 0.01 ? 0 : dz;
  }
  if (ok) {
    first[nc] = cuts->nnz;
    qsort(rate, (size_t)nc, sizeof *rate, cut_rating_cmp);
    memset(a, 0, ((size_t)n + 1) * sizeof(double));
    for (int k = 0; k < nc && k < MILP_ROOT_CUTS_TAKEN; k++) {
      if (rate[k].deg < 0.01 && rate[k].eff < 0.01) continue;
      int kk = 0;
      while (kk < k && !(rate[kk].taken && cut_cosine(cuts, first, rate[k].row, rate[kk].row, a) > 0.90)) kk++;
      if (kk < k) continue;
      rate[k].taken = true;
      int r = rate[k].row, len = 0;
      for (int t = first[r + 1] - 1; t >= first[r]; t--) len++, ind[len] = cuts->nz_col[t] + 1, val[len] = cuts->nz_val[t];
      int i = glp_add_rows(P, 1);
      glp_set_mat_row(P, i, len, ind, val);
      bool upper = cuts->row_ub[r] < HUGE_VAL;
      glp_set_row_bnds(P, i, upper ? GLP_UP : GLP_LO, upper ? cuts->row_ub[r] : cuts->row_lb[r], upper ? cuts->row_ub[r] : cuts->row_lb[r]);
    }
  }
  milp_model_free(cuts); /* zeroes it for the next round */
  free(x), free(ind), free(val), free(a), free(alfa), free(rho), free(rate), free(first);
  w->cut_x = w->cut_val = w->alfa = w->cut_alfa = w->rho = NULL, w->cut_ind = w->cut_first = NULL, w->cut_rate = NULL;
}

static void glpk_callback(glp_tree *T, void *info) {
  GlpkCb *cb = info;
  int reason = glp_ios_reason(T);
  glp_ios_tree_size(T, NULL, NULL, &cb->created);
  if (reason == GLP_IHEUR && !cb->gave_start && cb->start) {
    cb->gave_start = true;
    double *x1 = cb->own->heur_x = util_xcalloc((size_t)cb->m->ncols + 1, sizeof(double));
    if (x1) {
      memcpy(x1 + 1, cb->start, (size_t)cb->m->ncols * sizeof(double));
      glp_ios_heur_sol(T, x1);
      free(x1);
      cb->own->heur_x = NULL;
    }
  }
  if (reason == GLP_ICUTGEN && cb->cuts && cb->o->separate) glpk_add_cuts(T, cb);
  if (reason == GLP_IBRANCH && cb->most_fractional) {
    int next, j = most_fractional(T, glp_get_num_cols(glp_ios_get_prob(T)), &next);
    if (j) glp_ios_branch_upon(T, j, next);
  } else if (reason == GLP_IBRANCH) {
    glpk_branch(T, cb->own);
  }
  bool over_iterations =
      cb->iteration_limit > 0 && glp_get_it_cnt(glp_ios_get_prob(T)) - cb->iterations0 > cb->iteration_limit;
  if (reason == GLP_ISELECT && ((cb->node_limit > 0 && ++cb->nodes > cb->node_limit) || over_iterations)) {
    cb->counted_out = true;
    glp_ios_terminate(T);
    return;
  }
  if (cb->o->time_limit > 0 && util_now() - cb->t0 > cb->o->time_limit) {
    cb->stopped = true;
    glp_ios_terminate(T);
    return;
  }
  int best = glp_ios_best_node(T);
  if (best) cb->bound = glp_ios_node_bound(T, best) + cb->m->obj_offset;
  if (cb->whole) cb->own->proven = fmax(cb->own->proven, cb->bound);
  /* The tree with cuts is there to prove: it stops at the proof gap (of
   * the whole objective; GLPK's own gap leaves out the constant); the
   * first at the caller's dive gap, where it has one. */
  glp_prob *P = glp_ios_get_prob(T);
  double inc = glp_mip_obj_val(P) + cb->m->obj_offset;
  if (inc >= cb->target) inc = cb->real;
  double enough = cb->cuts ? cb->o->proof_gap : cb->o->dive_gap;
  if (cb->whole && (cb->cuts || enough > 0) && (glp_mip_status(P) == GLP_FEAS || glp_mip_status(P) == GLP_OPT) &&
      rel_gap(inc, cb->bound) <= enough) {
    glp_ios_terminate(T);
    return;
  }
  /* ... so it takes the node of the least bound next: GLPK would go on
   * with a child of the node just branched on (a dive), which raises the
   * tree's bound only once the dive ends. Measured alone at unet f = 0
   * with the 24x count: bound 36,757.7 us diving, 36,935.1 this way, in
   * 36.1 and 34.6 s. */
  if (reason == GLP_ISELECT && cb->cuts && best) glp_ios_select_node(T, best);
  double t = util_now() - cb->t0;
  if (cb->whole && !cb->o->quiet && t > 1 && t - cb->last_print >= 1) {
    cb->last_print = t;
    if (glp_mip_status(P) == GLP_FEAS || glp_mip_status(P) == GLP_OPT) {
      fprintf(stderr, "ilp: incumbent %.6g bound %.6g gap %.3f%% %.1f s\n", inc, cb->bound,
              100 * rel_gap(inc, cb->bound), t);
    } else {
      fprintf(stderr, "ilp: incumbent none bound %.6g %.1f s\n", cb->bound, t);
    }
  }
}

/* The proof tree is there to show that no solution is below the target,
 * the incumbent less proof_gap of it. GLPK stops a node's dual simplex
 * once its objective passes the incumbent's (glp_smcp obj_ul), prunes the
 * nodes at it and fixes columns by their reduced costs against it; handed
 * the incumbent itself, it spends those on nodes between the target and
 * the incumbent, none of which the proof needs. So the tree's start is a
 * stand-in: the incumbent with one continuous column of the objective
 * moved until its objective is just above the target (GLPK checks a
 * heuristic solution's integrality, not its rows). At unet f = 0 the tree
 * proves 1% in under 400 nodes (55,530 simplex iterations); with the plan
 * as GLPK's incumbent, the same bound took about 945 nodes and 114,000
 * iterations (docs/PLANNING.md 5 step 6). Writes the stand-in to x (ncols
 * values) and returns the target (the whole objective), or HUGE_VAL when
 * no continuous column has a cost. */
static double glpk_target(const MilpModel *m, const double *start, double start_obj, double gap, double tol_obj,
                          double *x) {
  int col = -1;
  for (int c = 0; c < m->ncols; c++)
    if (!m->col_int[c] && m->obj[c] != 0 && (col < 0 || fabs(m->obj[c]) > fabs(m->obj[col]))) col = c;
  if (col < 0) return HUGE_VAL;
  double target = start_obj - gap * fabs(start_obj), own = target - m->obj_offset;
  /* GLPK prunes a node whose bound is within tol_obj (1 + |obj|) of its
   * incumbent's obj: twice that above the target, what it prunes is at or
   * above the target. */
  double stand_in = own + 2 * tol_obj * (1 + fabs(own));
  memcpy(x, start, (size_t)m->ncols * sizeof(double));
  x[col] += (stand_in - (start_obj - m->obj_offset)) / m->obj[col];
  return target;
}

/* GLPK's solution is the stand-in (a heuristic solution is kept as given). */
static bool is_stand_in(glp_prob *P, const double *x, int ncols) {
  for (int c = 0; c < ncols; c++)
    if (glp_mip_col_val(P, c + 1) != x[c]) return false;
  return true;
}

static int bound_type(double lb, double ub) {
  return lb > -HUGE_VAL ? (ub < HUGE_VAL ? (lb == ub ? GLP_FX : GLP_DB) : GLP_LO) : (ub < HUGE_VAL ? GLP_UP : GLP_FR);
}

static void set_col_bounds(glp_prob *P, int c, double lb, double ub) {
  glp_set_col_bnds(P, c + 1, bound_type(lb, ub), lb > -HUGE_VAL ? lb : 0, ub < HUGE_VAL ? ub : 0);
}

static bool is_lazy(const MilpOptions *o, int r) { return r >= o->lazy_first && r < o->lazy_end; }

static void set_row_bounds(glp_prob *P, int r, double lb, double ub) {
  glp_set_row_bnds(P, r + 1, bound_type(lb, ub), lb > -HUGE_VAL ? lb : 0, ub < HUGE_VAL ? ub : 0);
}

/* The model's rows, lazy ones empty and free until activated (empty, so
 * that neither the scaling nor the presolved problem sees them). */
static glp_prob *glpk_load(const MilpModel *m, const MilpOptions *o, GlpkOwned *w) {
  glp_prob *P = glp_create_prob();
  glp_set_obj_dir(P, GLP_MIN);
  if (m->ncols) glp_add_cols(P, m->ncols);
  if (m->nrows) glp_add_rows(P, m->nrows);
  for (int c = 0; c < m->ncols; c++) {
    double lb = m->col_lb[c], ub = m->col_ub[c];
    set_col_bounds(P, c, lb, ub);
    glp_set_obj_coef(P, c + 1, m->obj[c]);
    if (m->col_int[c]) glp_set_col_kind(P, c + 1, GLP_IV);
  }
  for (int r = 0; r < m->nrows; r++)
    if (!is_lazy(o, r)) set_row_bounds(P, r, m->row_lb[r], m->row_ub[r]);
  int *ia = w->ia = util_xcalloc((size_t)m->nnz + 1, sizeof(int)), *ja = w->ja = util_xcalloc((size_t)m->nnz + 1, sizeof(int));
  double *ar = w->ar = util_xcalloc((size_t)m->nnz + 1, sizeof(double));
  if (!ia || !ja || !ar) {
    glp_delete_prob(P);
    return NULL;
  }
  int nz = 0;
  for (int k = 0; k < m->nnz; k++)
    if (!is_lazy(o, m->nz_row[k])) nz++, ia[nz] = m->nz_row[k] + 1, ja[nz] = m->nz_col[k] + 1, ar[nz] = m->nz_val[k];
  glp_load_matrix(P, nz, ia, ja, ar);
  free(ia), free(ja), free(ar);
  w->ia = w->ja = NULL, w->ar = NULL;
  return P;
}

static void glpk_set_time_limit(glp_iocp *iocp, const MilpOptions *o, double t0) {
  if (o->time_limit <= 0) return;
  double left = o->time_limit - (util_now() - t0);
  iocp->tm_lim = left > 0.001 ? (int)fmin(left * 1000, 2e9) : 1;
}

/* The LP's neighbourhood (relaxation-induced): the integer columns the LP
 * left integral (and, given an incumbent, where the incumbent agrees: so
 * the incumbent itself is in it) are fixed there and a small MILP decides
 * the rest. On the planner's models the LP leaves a few dozen of hundreds
 * of decisions fractional, and this finds in a fraction of a second what branch and
 * bound from the LP's basis does not find in minutes. Its work is counted
 * in nodes like the main tree's. */
static bool glpk_neighbourhood(glp_prob *P, const MilpModel *m, const MilpOptions *o, const double *incumbent, long nodes,
                               double t0, GlpkOwned *w, double *x) {
  ensure_scaled(P, w);
  glp_prob *S = glp_create_prob();
  glp_copy_prob(S, P, GLP_OFF);
  int iterations0 = glp_get_it_cnt(S);
  int free_ints = 0;
  for (int c = 0; c < m->ncols; c++) {
    if (!m->col_int[c]) continue;
    double v = glp_get_col_prim(P, c + 1);
    if (fabs(v - round(v)) <= 1e-9 && (!incumbent || fabs(incumbent[c] - round(v)) <= 1e-9))
      glp_set_col_bnds(S, c + 1, GLP_FX, round(v), round(v));
    else free_ints++;
  }
  /* No heuristic start for it: with the presolver on, its tree works on
   * other columns. The incumbent is in the neighbourhood anyway. */
  GlpkCb cb = {.own = w, .m = m, .o = o, .node_limit = nodes, .t0 = t0};
  glp_iocp iocp;
  glp_init_iocp(&iocp);
  iocp.msg_lev = GLP_MSG_OFF;
  iocp.presolve = GLP_ON; /* the fixed columns and what they decide go away */
  iocp.cb_func = glpk_callback;
  iocp.cb_info = &cb;
  iocp.mip_gap = o->mip_gap;
  iocp.fp_heur = o->no_pump ? GLP_OFF : GLP_ON; /* measured: the first solution within fewer nodes (llama3-8b: 30 instead of 80) */
  glpk_set_time_limit(&iocp, o, t0);
  bool found = false;
  if (free_ints > 0) {
    glp_intopt(S, &iocp);
    int st = glp_mip_status(S);
    if (st == GLP_OPT || st == GLP_FEAS) {
      for (int c = 0; c < m->ncols; c++) x[c] = glp_mip_col_val(S, c + 1);
      found = true;
    }
  }
  w->iterations += glp_get_it_cnt(S) - iterations0;
  w->nodes += cb.created;
  glp_delete_prob(S);
  return found;
}

/* The LP relaxation, glp_simplex's return code. With o->loose_ub, first
 * the problem at those (looser) column bounds by the primal simplex; its
 * optimal basis stays dual feasible when the bounds are put back, and the
 * dual simplex goes on from there. Where a tight memory limit makes the
 * primal's first phase long, that is faster (llama3-8b at its smallest
 * budget: 13,023 iterations, 27 s, where the primal needs over 38,000; see
 * docs/PLANNING.md 5.3). When the dual stops at the iteration count, *bound
 * still gets a valid lower bound: the dual's objective if its basis is dual
 * feasible, else the looser problem's optimum; 0 (the result's "none")
 * when the looser problem did not finish either. */
static int relax(glp_prob *P, const MilpModel *m, const MilpOptions *o, glp_smcp *smcp, double *bound, GlpkOwned *w) {
  double t0 = util_now();
  *bound = 0;
  if (o->warm_basis) {
    for (int i = 0; i < m->nrows; i++) glp_set_row_stat(P, i + 1, o->warm_basis[i]);
    for (int c = 0; c < m->ncols; c++) glp_set_col_stat(P, c + 1, o->warm_basis[m->nrows + c]);
    glp_smcp dual = *smcp;
    dual.meth = GLP_DUALP; /* the primal takes over should the basis not be dual feasible */
    dual.presolve = GLP_OFF;
    ensure_scaled(P, w);
    int rc = glp_simplex(P, &dual);
    if ((rc == GLP_EITLIM || rc == GLP_ETMLIM) && glp_get_dual_stat(P) == GLP_FEAS) *bound = glp_get_obj_val(P) + m->obj_offset;
    if (rc != GLP_EBADB && rc != GLP_ESING && rc != GLP_ECOND) return rc;
    glp_std_basis(P); /* not a basis of this model: from scratch */
  }
  if (!o->loose_ub) return milp_lp_presolved(P, smcp);
  for (int c = 0; c < m->ncols; c++)
    if (o->loose_ub[c] != m->col_ub[c]) set_col_bounds(P, c, m->col_lb[c], o->loose_ub[c]);
  int rc = milp_lp_presolved(P, smcp);
  bool loose_ok = rc == 0 && glp_get_status(P) == GLP_OPT;
  double loose_obj = glp_get_obj_val(P) + m->obj_offset;
  for (int c = 0; c < m->ncols; c++)
    if (o->loose_ub[c] != m->col_ub[c]) set_col_bounds(P, c, m->col_lb[c], m->col_ub[c]);
  if (!loose_ok) return rc ? rc : GLP_EFAIL;
  glp_smcp dual = *smcp;
  dual.it_lim = smcp->it_lim - glp_get_it_cnt(P); /* the count is shared, */
  if (smcp->tm_lim < INT_MAX) dual.tm_lim = (int)(smcp->tm_lim - 1000 * (util_now() - t0)); /* ... and the time */
  if (dual.it_lim <= 0 || dual.tm_lim <= 0) {
    *bound = loose_obj;
    return dual.it_lim <= 0 ? GLP_EITLIM : GLP_ETMLIM;
  }
  dual.meth = GLP_DUAL;
  dual.presolve = GLP_OFF; /* the presolver would drop the basis */
  ensure_scaled(P, w);
  rc = glp_simplex(P, &dual);
  if (rc == GLP_EITLIM || rc == GLP_ETMLIM)
    *bound = glp_get_dual_stat(P) == GLP_FEAS ? fmax(loose_obj, glp_get_obj_val(P) + m->obj_offset) : loose_obj;
  return rc;
}

/* Nothing allocated when there are none. */
static bool lazy_new(const MilpModel *m, const MilpOptions *o, LazyRows *z) {
  *z = (LazyRows){.first = o->lazy_first, .n = o->lazy_end - o->lazy_first};
  if (z->n <= 0) {
    z->n = 0;
    return true;
  }
  z->start = util_xcalloc((size_t)z->n + 1, sizeof(int));
  z->cols = util_xcalloc((size_t)m->ncols + 1, sizeof(int));
  z->vals = util_xcalloc((size_t)m->ncols + 1, sizeof(double));
  z->active = util_xcalloc((size_t)z->n, 1);
  if (!z->start || !z->cols || !z->vals || !z->active) return false;
  for (int k = 0; k < m->nnz; k++)
    if (is_lazy(o, m->nz_row[k])) z->start[m->nz_row[k] - z->first + 1]++;
  for (int i = 0; i < z->n; i++) z->start[i + 1] += z->start[i];
  z->term = util_xcalloc((size_t)z->start[z->n] + 1, sizeof(int));
  int *fill = util_xcalloc((size_t)z->n + 1, sizeof(int));
  if (!z->term || !fill) {
    free(fill);
    return false;
  }
  for (int k = 0; k < m->nnz; k++)
    if (is_lazy(o, m->nz_row[k])) {
      int i = m->nz_row[k] - z->first;
      z->term[z->start[i] + fill[i]++] = k;
    }
  free(fill);
  return true;
}

/* A lazy row's terms and bounds into P. Its auxiliary variable is basic, so
 * its dual is 0 and the basis stays dual feasible. */
static void activate(glp_prob *P, const MilpModel *m, LazyRows *z, int i) {
  int n = 0, row = z->first + i;
  for (int j = z->start[i]; j < z->start[i + 1]; j++) {
    int k = z->term[j];
    n++, z->cols[n] = m->nz_col[k] + 1, z->vals[n] = m->nz_val[k];
  }
  glp_set_mat_row(P, row + 1, n, z->cols, z->vals);
  set_row_bounds(P, row, m->row_lb[row], m->row_ub[row]);
  z->active[i] = 1;
}

/* The lazy rows after the relaxation: each round activates the ones its
 * point violates (beyond GLPK's own relative feasibility tolerance, 1e-7)
 * and the dual simplex goes on from the optimal basis, in the same
 * iteration count. Once the point violates none, the rest go in too: it
 * meets them, so the basis stays optimal. When the count or the time runs
 * out in a round, *bound gets the last round's optimum, a bound of the
 * whole problem as its rows are a subset. glp_simplex's code. */
static int add_lazy_rows(glp_prob *P, const MilpModel *m, GlpkOwned *w, const glp_smcp *smcp, double t0, double *bound) {
  LazyRows *z = &w->lazy;
  if (!z->n) return 0;
  ensure_scaled(P, w); /* before any row gets its terms */
  glp_smcp dual = *smcp;
  dual.meth = GLP_DUAL;
  dual.presolve = GLP_OFF; /* the presolver would drop the basis */
  int rc = 0;
  for (;;) {
    int added = 0;
    for (int i = 0; i < z->n; i++) {
      if (z->active[i]) continue;
      double act = 0;
      for (int j = z->start[i]; j < z->start[i + 1]; j++) act += m->nz_val[z->term[j]] * glp_get_col_prim(P, m->nz_col[z->term[j]] + 1);
      int row = z->first + i;
      double tol = 1e-7 * (1 + fabs(act));
      if (act >= m->row_lb[row] - tol && act <= m->row_ub[row] + tol) continue;
      activate(P, m, z, i);
      added++;
    }
    if (!added) break;
    *bound = glp_get_obj_val(P) + m->obj_offset;
    if (smcp->it_lim < INT_MAX) dual.it_lim = smcp->it_lim - glp_get_it_cnt(P);
    if (smcp->tm_lim < INT_MAX) dual.tm_lim = (int)(smcp->tm_lim - 1000 * (util_now() - t0));
    if (dual.it_lim <= 0 || dual.tm_lim <= 0) {
      rc = dual.it_lim <= 0 ? GLP_EITLIM : GLP_ETMLIM;
      break;
    }
    rc = glp_simplex(P, &dual);
    if (rc != 0 || glp_get_status(P) != GLP_OPT) break;
  }
  if (rc == 0 && glp_get_status(P) == GLP_OPT) {
    for (int i = 0; i < z->n; i++)
      if (!z->active[i]) activate(P, m, z, i);
    dual.it_lim = INT_MAX;
    rc = glp_simplex(P, &dual); /* no pivots: the basis is optimal already, glp_intopt wants it marked so */
  }
  return rc;
}

/* The root's optimal basis again (row_stat, col_stat): a second
 * glp_intopt needs one. */
static bool restore_root(glp_prob *P, const MilpModel *m, const int *row_stat, const int *col_stat, const glp_smcp *smcp,
                         GlpkOwned *w) {
  ensure_scaled(P, w);
  for (int i = 0; i < m->nrows; i++) glp_set_row_stat(P, i + 1, row_stat[i]);
  for (int c = 0; c < m->ncols; c++) glp_set_col_stat(P, c + 1, col_stat[c]);
  glp_smcp warm = *smcp;
  warm.presolve = GLP_OFF;
  warm.it_lim = INT_MAX;
  return glp_simplex(P, &warm) == 0 && glp_get_status(P) == GLP_OPT;
}

/* The solve, with what it allocates in w (freed by the caller). */
static int glpk_run(const MilpModel *m, const MilpOptions *o, MilpResult *r, Err *e, GlpkOwned *w) {
  /* Loading the model, GLPK's scaling, its presolver and the first
   * factorization do not watch the clock: with a time limit, the
   * relaxation starts only when their estimate, GLPK_SETUP_BUILDS times the
   * model's build (timed by the caller, so at the machine's present load),
   * ends within the limit. */
  if (o->time_limit > 0 && GLPK_SETUP_BUILDS * o->build_seconds > o->time_limit) {
    r->status = MILP_NO_SOLUTION;
    r->out_of_time = true;
    return 0;
  }
  double t0 = util_now();
  glp_prob *P = glpk_load(m, o, w);
  if (!P || !lazy_new(m, o, &w->lazy)) {
    if (P) glp_delete_prob(P);
    return err_set(e, "milp: out of memory");
  }
  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_OFF;
  smcp.presolve = GLP_ON;
  if (o->time_limit > 0) smcp.tm_lim = (int)fmin(o->time_limit * 1000, 2e9);
  if (o->lp_iterations > 0) smcp.it_lim = (int)fmin((double)o->lp_iterations, 2e9);
  double partial_bound;
  int rc = relax(P, m, o, &smcp, &partial_bound, w);
  if (rc == 0 && glp_get_status(P) == GLP_OPT) rc = add_lazy_rows(P, m, w, &smcp, t0, &partial_bound);
  if (rc == GLP_ENOPFS || (rc == 0 && glp_get_status(P) == GLP_NOFEAS)) {
    r->status = MILP_INFEASIBLE;
    goto done;
  }
  if (rc == GLP_EITLIM || rc == GLP_ETMLIM) {
    r->status = MILP_NO_SOLUTION;
    r->out_of_time = rc == GLP_ETMLIM;
    r->bound = partial_bound;
    goto done;
  }
  if (rc != 0 || glp_get_status(P) != GLP_OPT) {
    /* Presolve hides the basis when it proves nothing; solve plainly. */
    smcp.presolve = GLP_OFF;
    ensure_scaled(P, w);
    rc = glp_simplex(P, &smcp);
    if (rc == 0 && glp_get_status(P) == GLP_OPT) rc = add_lazy_rows(P, m, w, &smcp, t0, &partial_bound);
    if (rc != 0 || glp_get_status(P) != GLP_OPT) {
      r->status = glp_get_status(P) == GLP_NOFEAS ? MILP_INFEASIBLE : MILP_NO_SOLUTION;
      goto done;
    }
  }
  lazy_free(&w->lazy); /* all in P now */
  if ((r->basis = util_xcalloc((size_t)(m->nrows + m->ncols) + 1, sizeof(int)))) {
    for (int i = 0; i < m->nrows; i++) r->basis[i] = glp_get_row_stat(P, i + 1);
    for (int c = 0; c < m->ncols; c++) r->basis[m->nrows + c] = glp_get_col_stat(P, c + 1);
  }
  r->bound = w->proven = glp_get_obj_val(P) + m->obj_offset;
  for (int c = 0; c < m->ncols; c++) r->lp_x[c] = glp_get_col_prim(P, c + 1);
  r->lp_x[m->ncols] = 0;
  if (o->lp_only) {
    for (int c = 0; c < m->ncols; c++) r->x[c] = glp_get_col_prim(P, c + 1);
    r->objective = r->bound;
    r->status = MILP_FEASIBLE;
    goto done;
  }
  /* The best of the caller's start, the LP's point and its neighbourhood. */
  double *sub = w->sub = util_xcalloc((size_t)m->ncols + 1, sizeof(double));
  double *nb = w->nb = util_xcalloc((size_t)m->ncols + 1, sizeof(double));
  if (!sub || !nb) {
    glp_delete_prob(P);
    return err_set(e, "milp: out of memory");
  }
  const double *start = m->start;
  double start_obj = m->start ? milp_objective(m, m->start) : HUGE_VAL;
  /* Every candidate is judged by the caller's polish (its own exact
   * evaluation: the rows' least stalls can be below the queues' own). First
   * the LP's point, rounded and repaired: where that is within the good gap
   * no neighbourhood is needed (gpt2-124m at the midpoint: 0.84% above the
   * bound without the 0.7 s one costs). Then up to o->neighbourhoods
   * neighbourhoods: around the LP alone, then around the LP and the
   * incumbent, which finds what the first misses when the LP's fixings
   * leave only poor solutions (unet at f = 0.3: 36,933 -> 33,501 us
   * polished; 33,224 with all 200 nodes). */
  for (int pass = -1; pass < o->neighbourhoods && rel_gap(start_obj, r->bound) > o->mip_gap; pass++) {
    bool found;
    if (pass < 0) {
      if (!o->polish) continue;
      memcpy(nb, r->lp_x, (size_t)m->ncols * sizeof(double));
      found = true;
    } else {
      if (start && rel_gap(start_obj, r->bound) <= o->good_gap) break;
      if (pass == 1 && !start) break;
      if (pass == 1 && start != sub) memcpy(sub, start, (size_t)m->ncols * sizeof(double));
      /* The second gets a quarter of the nodes: where it helps, it helps
       * early (unet at f = 0.3 within 50), and on the large models a node
       * costs a second. */
      long nodes = pass && o->neighbourhood_nodes ? (o->neighbourhood_nodes + 3) / 4 : o->neighbourhood_nodes;
      found = glpk_neighbourhood(P, m, o, pass ? sub : NULL, nodes, t0, w, nb);
    }
    if (found && (!o->polish || o->polish(o->polish_ctx, nb)) && milp_objective(m, nb) < start_obj && milp_violation(m, nb) <= 1e-6) {
      memcpy(sub, nb, (size_t)m->ncols * sizeof(double));
      start = sub, start_obj = milp_objective(m, sub);
    }
  }
  if (start && !o->quiet && util_now() - t0 > 1)
    fprintf(stderr, "ilp: incumbent %.6g bound %.6g gap %.3f%% %.1f s\n", start_obj, r->bound,
            100 * rel_gap(start_obj, r->bound), util_now() - t0);
  if (start && (o->skip_tree || rel_gap(start_obj, r->bound) <= fmax(o->mip_gap, o->good_gap))) {
    /* Within the gap of the LP bound, or no tree asked for: the start stands. */
    memcpy(r->x, start, (size_t)m->ncols * sizeof(double));
    r->objective = start_obj;
    r->status = rel_gap(start_obj, r->bound) <= o->mip_gap ? MILP_OPTIMAL : MILP_FEASIBLE;
    goto done;
  }
  /* Branch and bound, and where it leaves more than o->proof_gap, a second
   * tree with the caller's cuts from the best solution: it proves where the
   * first cannot (llama-tiny at f = 0.1), while the first's plans stay
   * (with cuts from the start, its nodes cost more and fewer plans turn
   * up: gpt2-tiny at f = 0.3 ended 0.87% slower). That tree starts from
   * the caller's search around the best solution, with a stand-in at the
   * target as GLPK's incumbent (glpk_target). */
  int *row_stat = w->row_stat = util_xcalloc((size_t)m->nrows + 1, sizeof(int));
  int *col_stat = w->col_stat = util_xcalloc((size_t)m->ncols + 1, sizeof(int));
  if (!row_stat || !col_stat) {
    glp_delete_prob(P);
    return err_set(e, "milp: out of memory");
  }
  for (int i = 0; i < m->nrows; i++) row_stat[i] = glp_get_row_stat(P, i + 1);
  for (int c = 0; c < m->ncols; c++) col_stat[c] = glp_get_col_stat(P, c + 1);
  double root_bound = r->bound;
  /* tree 0: the first tree, by Driebeck-Tomlin (for o->dt_iterations
   * where set); 1: where that ran out of them before it closed the gap,
   * the first tree again from the root on the most fractional column, with
   * the rest of its count; 2: the proof tree. */
  long dt_used = 0;
  bool dt_out = false;
  for (int tree = 0; tree < 3; tree++) {
    if (tree == 1) {
      if (!dt_out || r->status == MILP_OPTIMAL || r->status == MILP_TIME_LIMIT || r->status == MILP_INFEASIBLE) continue;
      if (r->status == MILP_FEASIBLE) memcpy(sub, r->x, (size_t)m->ncols * sizeof(double)), start = sub, start_obj = r->objective;
      if (!restore_root(P, m, row_stat, col_stat, &smcp, w)) break;
    }
    if (tree == 2) {
      if (!o->separate || r->status == MILP_OPTIMAL || r->status == MILP_TIME_LIMIT || r->status == MILP_INFEASIBLE ||
          (r->status == MILP_FEASIBLE && rel_gap(r->objective, r->bound) <= o->proof_gap))
        break;
      if (r->status == MILP_FEASIBLE) memcpy(sub, r->x, (size_t)m->ncols * sizeof(double)), start = sub, start_obj = r->objective;
      /* The caller's search around the incumbent first, so that the tree
       * has less to prove (unet at f = 0: its pair moves, 38,299.2 ->
       * 37,714.0 us, came after the tree until 2026-11-23, which then had
       * to prove 1% of the slower plan). */
      if (o->search && start) {
        if (start != sub) memcpy(sub, start, (size_t)m->ncols * sizeof(double)), start = sub;
        memcpy(nb, sub, (size_t)m->ncols * sizeof(double));
        double found;
        if (o->search(o->polish_ctx, nb, r->lp_x, r->bound) && (found = milp_objective(m, nb)) < start_obj &&
            milp_violation(m, nb) <= 1e-6) {
          memcpy(sub, nb, (size_t)m->ncols * sizeof(double));
          memcpy(r->x, nb, (size_t)m->ncols * sizeof(double));
          r->objective = start_obj = found;
          r->status = MILP_FEASIBLE;
          if (rel_gap(start_obj, r->bound) <= o->proof_gap) break;
        }
      }
      /* Out of the proof tree's reach: its bound moves a few percent in
       * its count at most (unet at f = 0: from 5.7%), and on the larger models
       * of bench/gen_graph.py a node costs a model's LP. */
      if (start && o->proof_reach > 0 && rel_gap(start_obj, r->bound) > o->proof_reach) break;
      if (o->defer_proof) {
        r->proof_deferred = true;
        break;
      }
      if (!restore_root(P, m, row_stat, col_stat, &smcp, w)) break;
    }
    long first = o->dt_iterations > 0 && (o->tree_iterations <= 0 || o->dt_iterations < o->tree_iterations) ? o->dt_iterations
                                                                                                           : o->tree_iterations;
    GlpkCb cb = {.own = w, .m = m, .o = o, .start = start, .node_limit = o->node_limit,
                 .iteration_limit = tree == 2 ? o->proof_iterations : tree == 1 ? (long)fmax(1, (double)(o->tree_iterations - dt_used)) : first,
                 .t0 = t0, .bound = root_bound, .whole = true, .cuts = tree == 2, .most_fractional = tree == 1, .target = HUGE_VAL};
    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = GLP_MSG_OFF;
    iocp.presolve = GLP_OFF;
    iocp.cb_func = glpk_callback;
    iocp.cb_info = &cb;
    iocp.mip_gap = o->mip_gap;
    if (tree == 2 && start && (w->target_x || (w->target_x = util_xcalloc((size_t)m->ncols + 1, sizeof(double))))) {
      cb.target = glpk_target(m, start, start_obj, MILP_PROOF_SHARE * o->proof_gap, iocp.tol_obj, w->target_x);
      /* It runs until the target is proven, not to GLPK's gap of the stand-in. */
      if (cb.target < HUGE_VAL) cb.start = w->target_x, cb.real = start_obj, iocp.mip_gap = 0;
    }
    iocp.br_tech = GLP_BR_DTH;
    iocp.bt_tech = GLP_BT_BLB;
    /* Measured on these models: pseudocost branching spends its first
     * seconds in strong-branching LPs, and GLPK's own cut generators and
     * heuristics never paid for themselves; the starting solution does. */
    glpk_set_time_limit(&iocp, o, t0);
    cb.iterations0 = glp_get_it_cnt(P);
    ensure_scaled(P, w);
    rc = glp_intopt(P, &iocp);
    w->nodes += cb.created;
    if (tree == 0) dt_used = glp_get_it_cnt(P) - cb.iterations0, dt_out = cb.counted_out && first < o->tree_iterations;
    int st = glp_mip_status(P);
    bool solved = st == GLP_OPT || st == GLP_FEAS;
    if (solved && cb.target < HUGE_VAL && is_stand_in(P, w->target_x, m->ncols)) {
      /* Nothing below the target turned up; a tree that ran out of nodes
       * pruned every one at the stand-in's objective, so it proved it. */
      if (rc == 0 && st == GLP_OPT) cb.bound = fmax(cb.bound, cb.target);
      solved = false;
    }
    MilpStatus stopped = (rc == GLP_ETMLIM || cb.stopped) && !cb.counted_out ? MILP_TIME_LIMIT : MILP_FEASIBLE;
    double bound = fmax(cb.bound, root_bound);
    if (solved) {
      for (int c = 0; c < m->ncols; c++) nb[c] = glp_mip_col_val(P, c + 1);
      double obj = glp_mip_obj_val(P) + m->obj_offset;
      /* Judged like every other candidate, by the caller's evaluation. */
      if (o->polish && o->polish(o->polish_ctx, nb)) obj = milp_objective(m, nb);
      memcpy(r->x, nb, (size_t)m->ncols * sizeof(double));
      r->objective = obj;
      if (rc == 0 && st == GLP_OPT) {
        r->status = MILP_OPTIMAL;
        /* Within mip_gap of the best node: the bound is what closed it. */
        r->bound = fmin(obj, bound);
      } else {
        r->status = stopped;
        r->bound = bound;
      }
    } else if (st == GLP_NOFEAS) {
      r->status = MILP_INFEASIBLE;
    } else {
      r->status = MILP_NO_SOLUTION;
      r->bound = bound;
    }
    /* A tree stopped by its node or time limit before it took the start as
     * its incumbent has nothing better: the start stands (gpt2-1558m at
     * f = 0.6 lost a polished 33,514 us that way and returned 34,283). */
    if (start && st != GLP_NOFEAS && (!solved || r->objective > start_obj)) {
      memcpy(r->x, start, (size_t)m->ncols * sizeof(double));
      r->objective = start_obj;
      r->status = stopped;
      r->bound = fmin(start_obj, bound);
    }
    root_bound = fmax(root_bound, fmin(r->bound, r->objective));
    w->proven = fmax(w->proven, root_bound);
  }
done:
  r->seconds = util_now() - t0;
  w->iterations += glp_get_it_cnt(P);
  glp_delete_prob(P);
  return 0;
}

/* GLPK's printing, kept for the error line instead of the terminal, its
 * lines joined by "; ". */
static int glpk_heard(void *info, const char *text) {
  GlpkOwned *w = info;
  size_t n = strlen(w->said);
  for (; *text && n + 3 < sizeof w->said; text++)
    if (*text != '\n') w->said[n++] = *text;
    else w->said[n++] = ';', w->said[n++] = ' ';
  w->said[n] = '\0';
  return 1;
}

/* GLPK's state after one of its own errors is undefined: all of it goes,
 * and the solve goes back to glpk_solve (GLPK calls abort if this
 * returns). */
static void glpk_fatal(void *info) {
  glp_free_env();
  longjmp(((GlpkOwned *)info)->back, 1);
}

/* The least objective over the columns' bounds alone (-HUGE_VAL where it
 * is unbounded): the bound before anything is solved. */
static double box_bound(const MilpModel *m) {
  double b = m->obj_offset;
  for (int c = 0; c < m->ncols; c++)
    if (m->obj[c] != 0) b += fmin(m->obj[c] * m->col_lb[c], m->obj[c] * m->col_ub[c]);
  return isnan(b) ? -HUGE_VAL : b;
}

static int glpk_solve(const MilpModel *m, const MilpOptions *o, MilpResult *r, Err *e) {
  GlpkOwned *w = util_xcalloc(1, sizeof *w);
  if (!w) return err_set(e, "milp: out of memory");
  double t0 = util_now();
  w->proven = box_bound(m);
  int rc;
  if (setjmp(w->back)) {
    size_t n = strlen(w->said);
    if (n >= 2 && !strcmp(w->said + n - 2, "; ")) w->said[n - 2] = '\0';
    snprintf(r->failure, sizeof r->failure, "milp: GLPK failed inside the solve: %s", w->said);
    /* What was proven still holds, and the caller has seen every solution
     * through its polish: it may keep its best. */
    if (!o->lp_only) {
      r->status = MILP_FAILED;
      r->bound = w->proven;
      r->seconds = util_now() - t0;
      rc = 0;
    } else {
      rc = err_set(e, "%s", r->failure);
    }
  } else {
    glp_error_hook(glpk_fatal, w);
    glp_term_hook(glpk_heard, w);
    glp_term_out(GLP_OFF);
    rc = glpk_run(m, o, r, e, w);
  }
  glp_error_hook(NULL, NULL);
  glp_term_hook(NULL, NULL);
  r->simplex_iterations = w->iterations, r->nodes = w->nodes;
  owned_free(w);
  free(w);
  return rc;
}

int milp_solve(const MilpModel *m, const MilpOptions *o, MilpResult *r, Err *e) {
  memset(r, 0, sizeof *r);
  if (m->failed) return err_set(e, "milp: out of memory while building the model");
  r->x = util_xcalloc((size_t)m->ncols + 1, sizeof(double));
  r->lp_x = util_xcalloc((size_t)m->ncols + 1, sizeof(double));
  if (!r->x || !r->lp_x) {
    milp_result_free(r);
    return err_set(e, "milp: out of memory");
  }
  r->lp_x[m->ncols] = NAN; /* set when the relaxation was solved */
  int rc;
  if (!strcmp(o->solver, "glpk")) rc = glpk_solve(m, o, r, e);
  else if (!strcmp(o->solver, "cbc")) rc = milp_cbc_solve(m, o, r, e);
  else rc = err_set(e, "--solver: unknown solver \"%s\" (glpk or cbc)", o->solver);
  if (rc == 0 && (r->status == MILP_OPTIMAL || r->status == MILP_FEASIBLE || r->status == MILP_TIME_LIMIT)) {
    r->gap = rel_gap(r->objective, r->bound);
    if (r->bound > r->objective) r->bound = r->objective;
  }
  if (rc) milp_result_free(r);
  return rc;
}

void milp_result_free(MilpResult *r) {
  free(r->x);
  free(r->lp_x);
  free(r->basis);
  r->x = r->lp_x = NULL;
  r->basis = NULL;
}
