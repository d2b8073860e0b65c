/*
 * milp_cbc.c - the MILP solved by COIN-OR CBC (--solver cbc, and the exact
 * strategy), through CBC's C interface.
 *
 * CBC is loaded at its first use, not linked: its libraries pull in a
 * LAPACK, which Debian resolves to OpenBLAS, whose constructor starts a
 * worker thread per core in every process that links it. That thread cost
 * every `ration` command about 0.1 s of CPU (mostly system time), over
 * 10% of a midpoint plan of gpt2-124m, for a solver only `--solver cbc`
 * and the exact strategy use. The function pointers take the types of the
 * header's declarations, so a changed interface fails to compile.
 */
#include "milp.h"

#include <coin/Cbc_C_Interface.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Debian's coinor-libcbc3 soname; the development link as a fallback. */
static const char *const cbc_libraries[] = {"libCbcSolver.so.3", "libCbcSolver.so"};

#define CBC_FUNCTIONS(X)                                                                                         \
  X(Cbc_newModel) X(Cbc_loadProblem) X(Cbc_setInteger) X(Cbc_setContinuous) X(Cbc_setLogLevel)                 \
  X(Cbc_setParameter) X(Cbc_setMaximumSeconds) X(Cbc_setMaximumNodes) X(Cbc_setMIPStartI) X(Cbc_solve)          \
  X(Cbc_getColSolution) X(Cbc_getBestPossibleObjValue) X(Cbc_isProvenOptimal) X(Cbc_isProvenInfeasible)         \
  X(Cbc_getObjValue) X(Cbc_isSecondsLimitReached) X(Cbc_getIterationCount) X(Cbc_getNodeCount) X(Cbc_deleteModel)

#define CBC_POINTER(name) __typeof__(&name) name;
static struct {
  CBC_FUNCTIONS(CBC_POINTER)
} cbc;
#undef CBC_POINTER

static pthread_once_t cbc_once = PTHREAD_ONCE_INIT;
static char cbc_error[256]; /* why CBC could not be loaded; empty once it is */

static void cbc_load(void) {
  void *h = NULL;
  for (size_t i = 0; !h && i < sizeof cbc_libraries / sizeof *cbc_libraries; i++)
    h = dlopen(cbc_libraries[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(cbc_error, sizeof cbc_error, "cannot load CBC (%s): %s", cbc_libraries[0], why ? why : "not found");
    return;
  }
  /* dlsym's void * to a function pointer: POSIX guarantees it, C11 does
   * not say, so through memcpy. */
#define CBC_RESOLVE(name)                                                                                        \
  do {                                                                                                           \
    void *f = dlsym(h, #name);                                                                                   \
    if (!f) {                                                                                                    \
      snprintf(cbc_error, sizeof cbc_error, "CBC (%s) has no %s", cbc_libraries[0], #name);                      \
      dlclose(h);                                                                                                \
      return;                                                                                                    \
    }                                                                                                            \
    memcpy(&cbc.name, &f, sizeof f);                                                                             \
  } while (0);
  CBC_FUNCTIONS(CBC_RESOLVE)
#undef CBC_RESOLVE
}

int milp_cbc_solve(const MilpModel *m, const MilpOptions *o, MilpResult *r, Err *e) {
  pthread_once(&cbc_once, cbc_load);
  if (cbc_error[0]) return err_set(e, "milp: %s", cbc_error);
  double t0 = util_now();
  int *start = util_xcalloc((size_t)m->ncols + 1, sizeof(int)), *index = util_xcalloc((size_t)m->nnz + 1, sizeof(int));
  double *value = util_xcalloc((size_t)m->nnz + 1, sizeof(double));
  int *fill = util_xcalloc((size_t)m->ncols + 1, sizeof(int));
  if (!start || !index || !value || !fill) {
    free(start), free(index), free(value), free(fill);
    return err_set(e, "milp: out of memory");
  }
  for (int k = 0; k < m->nnz; k++) start[m->nz_col[k] + 1]++;
  for (int c = 0; c < m->ncols; c++) start[c + 1] += start[c];
  for (int k = 0; k < m->nnz; k++) {
    int c = m->nz_col[k], at = start[c] + fill[c]++;
    index[at] = m->nz_row[k];
    value[at] = m->nz_val[k];
  }
  Cbc_Model *model = cbc.Cbc_newModel();
  if (!model) {
    free(start), free(index), free(value), free(fill);
    return err_set(e, "milp: CBC could not create a model");
  }
  cbc.Cbc_loadProblem(model, m->ncols, m->nrows, start, index, value, m->col_lb, m->col_ub, m->obj, m->row_lb, m->row_ub);
  free(start), free(index), free(value), free(fill);
  for (int c = 0; c < m->ncols; c++)
    if (m->col_int[c]) cbc.Cbc_setInteger(model, c);
  cbc.Cbc_setLogLevel(model, 0);
  cbc.Cbc_setParameter(model, "threads", "1");
  if (o->mip_gap > 0) { /* else CBC's own */
    char gap[32];
    snprintf(gap, sizeof gap, "%g", o->mip_gap);
    cbc.Cbc_setParameter(model, "ratioGap", gap);
  }
  cbc.Cbc_setParameter(model, "timeMode", "elapsed"); /* --time-limit is wall-clock seconds */
  if (o->time_limit > 0) cbc.Cbc_setMaximumSeconds(model, o->time_limit);
  if (o->node_limit > 0) cbc.Cbc_setMaximumNodes(model, (int)fmin((double)o->node_limit, INT_MAX));
  if (m->start) {
    int *idx = util_xcalloc((size_t)m->ncols + 1, sizeof(int));
    if (idx) {
      for (int c = 0; c < m->ncols; c++) idx[c] = c;
      cbc.Cbc_setMIPStartI(model, m->ncols, idx, m->start);
      free(idx);
    }
  }
  if (o->lp_only)
    for (int c = 0; c < m->ncols; c++) cbc.Cbc_setContinuous(model, c);
  cbc.Cbc_solve(model);
  const double *x = cbc.Cbc_getColSolution(model);
  double bound = cbc.Cbc_getBestPossibleObjValue(model) + m->obj_offset;
  bool has = x && (cbc.Cbc_isProvenOptimal(model) || cbc.Cbc_getObjValue(model) < 1e50) && !cbc.Cbc_isProvenInfeasible(model);
  if (cbc.Cbc_isProvenInfeasible(model)) {
    r->status = MILP_INFEASIBLE;
  } else if (has) {
    memcpy(r->x, x, (size_t)m->ncols * sizeof(double));
    r->objective = milp_objective(m, r->x);
    r->bound = o->lp_only ? r->objective : fmin(bound, r->objective);
    r->status = cbc.Cbc_isProvenOptimal(model) ? (o->lp_only ? MILP_FEASIBLE : MILP_OPTIMAL)
                : cbc.Cbc_isSecondsLimitReached(model) ? MILP_TIME_LIMIT : MILP_FEASIBLE;
  } else {
    r->status = MILP_NO_SOLUTION;
    r->bound = bound;
  }
  r->simplex_iterations = cbc.Cbc_getIterationCount(model), r->nodes = cbc.Cbc_getNodeCount(model);
  cbc.Cbc_deleteModel(model);
  r->seconds = util_now() - t0;
  return 0;
}

