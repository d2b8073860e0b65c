/*
 * milp.h - the MILP component's internal header: what milp.c calls in its
 * neighbours, one section per file.
 */
#ifndef RATION_MILP_H
#define RATION_MILP_H

#include "ration.h"

#include <glpk.h>
#include <stdbool.h>

/* ------------------------------------------------------------ milp_lp.c */

/* GLPK's LP steps that milp.c runs itself, for speed, with GLPK's own
 * results. */

/* glp_scale_prob(P, GLP_SF_AUTO)'s factors, set on P; false (P unchanged)
 * when out of memory. */
bool milp_lp_scale(glp_prob *P);

/* glp_simplex(P, smcp) with smcp->presolve on: the same steps, the same
 * return code and solution, the presolved problem scaled by
 * milp_lp_scale. */
int milp_lp_presolved(glp_prob *P, const glp_smcp *smcp);

/* ----------------------------------------------------------- milp_cbc.c */

/* The model solved by COIN-OR CBC, loaded at its first use; an error when
 * the library cannot be loaded. */
int milp_cbc_solve(const MilpModel *m, const MilpOptions *o, MilpResult *r, Err *e);

#endif
