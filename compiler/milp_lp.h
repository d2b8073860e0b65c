/*
 * milp_lp.h - GLPK's LP steps that milp.c runs itself, for speed, with
 * GLPK's own results (milp_lp.c).
 */
#ifndef RATION_MILP_LP_H
#define RATION_MILP_LP_H

#include <glpk.h>
#include <stdbool.h>

/* glp_scale_prob(P, GLP_SF_AUTO)'s factors, set on P; false (P unchanged)
 * when out of memory. */
bool milp_lp_scale(glp_prob *P);

/* glp_simplex(P, smcp) with smcp->presolve on: the same steps, the same
 * return code and solution, the presolved problem scaled by
 * milp_lp_scale. */
int milp_lp_presolved(glp_prob *P, const glp_smcp *smcp);

#endif
