/*
 * solve.c - the ilp's driver: plan_decide_ilp (keep-all, the starts, the
 * solves at the budget and their rounds against fragmentation, the
 * simulator's last word, the memory-minimizing fallback) and the smallest
 * budget (docs/PLANNING.md sections 5 and 6).
 */
#include "ilp.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ILP_NODES 200        /* nodes of a search, at most */
#define ILP_CHEAP_NNZ 150000 /* models under this many nonzeros: the tree is counted in simplex iterations, */
#define ILP_TREE_WORK 2e8    /* ... this many over the nonzeros, and searches to ILP_GAP; */
#define ILP_NODE_WORK 1e6    /* larger ones: in nodes, at most this many over the nonzeros */
#define ILP_TREE_MIN_NODES 2 /* ... and no tree at all for this many or fewer */
#define ILP_NEIGHBOURHOOD_WORK 5e7 /* nonzeros times nodes in the LP's neighbourhood (gpt2-124m: all 200) */
/* ... without GLPK's feasibility pump on models whose tree is counted in
 * simplex iterations (ILP_CHEAP_NNZ): the pump's iterations are not
 * counted, and on skips-16 of bench/gen_graph.py it took 69 of the 70 s
 * CPU of the memory solve (its two neighbourhoods: 141 and 154 s on a
 * loaded machine), where without it they take 4 s each and find the same
 * plans. The large models keep it (llama3-8b: a first solution in 30
 * nodes instead of 80). */
#define ILP_LP_WORK 7e9      /* simplex iterations times nonzeros for the relaxation */
#define ILP_EVALS_PER_TENSOR 6 /* descent evaluations */
#define ILP_EXCHANGE_EVALS_PER_TENSOR 10 /* ... and more where exchanges follow */
#define ILP_GAP PLAN_OPTIMAL_GAP /* relative gap at which branch and bound stops (a plan within it is "optimal") */
#define ILP_GOOD_GAP 0.01    /* ... and, on models of ILP_CHEAP_NNZ or more, the neighbourhoods and the tree are skipped */
/* The time solve's first tree stops within this of its bound; the proof
 * tree (with cuts, to ILP_PROOF_GAP) takes it from there. Past it GLPK's
 * dives raise the bound slowly and rarely find a better plan: chain-16 of
 * bench/gen_graph.py at its smallest budget reached 2% in 0.5 s of a tree
 * that ran its whole count (12 s) and ended 1.0% above its bound with the
 * plan it started from. The memory solve's tree runs to ILP_GAP: the
 * smallest budget is the least peak it finds. */
#define ILP_DIVE_GAP 0.02
/* The memory solve's first tree branches by Driebeck-Tomlin for this share
 * of its count, then starts again from the root on the most fractional
 * column with the rest (MilpOptions.dt_iterations). The peak objective is
 * degenerate, and on cond-16 of bench/gen_graph.py Driebeck-Tomlin's few
 * informative choices led the tree astray: its whole count (4,640 simplex
 * iterations, 15 s CPU) left the bound at 50.81 MiB against the plan's
 * 51.80, and the proof tree then took 110 s; on the most fractional
 * column the tree proves that plan optimal in 1,731 iterations (2.8 s).
 * On gpt2-tiny and llama-tiny Driebeck-Tomlin proves theirs in 172 and
 * 398 iterations, under this share, where the most fractional column
 * needs over 7,000 and a proof tree: their trees are unchanged. */
#define ILP_DT_SHARE 0.125
#define ILP_PROOF_WORK 8e9   /* the tree with cuts after one that ends above ILP_PROOF_GAP, counted like the first (ILP_TREE_WORK) */
/* ... and it starts only where the first tree and the search leave at most
 * this gap: further out, its bound does not reach the proof gap within its
 * count (the farthest it has closed: unet at f = 0, whose plan, 37,714.0
 * us, was 5.7% above the root's bound, 35,576.7; gpt2-tiny's smallest
 * budget starts it 4.3% above), and on the larger structures of bench/gen_graph.py a node
 * re-solves an LP of the whole model: cond-16 (seed 1) at its smallest
 * budget, 11% above, ran its proof tree's 60,400 iterations for minutes
 * (about 4 ms each). */
#define ILP_PROOF_REACH 0.08

/* ------------------------------------------------------------ counted work and the starts */

/* Every limit of a solve is counted work (evaluations, simplex iterations,
 * nodes), so a plan is a function of its inputs and options on an idle or a
 * busy machine. --time-limit adds a deadline (CLOCK_MONOTONIC seconds) over
 * the whole command that cuts the counted work short; without it the
 * deadline is HUGE_VAL and no clock decides anything. */
static double deadline_of(const PlanOptions *o, double start) {
  return o->time_limit <= 0 ? HUGE_VAL : o->deadline > 0 ? o->deadline : start + o->time_limit;
}


static const char *const baselines[] = {"keep-all", "checkpoint-layers", "sqrt-n", "offload-all", "knapsack"};

/* The starting points at LIMIT, into OUT, returned as their count: the
 * decisions of each strategy in baselines[] that succeeds, and every
 * stashed tensor offloaded (reaches memory no baseline may, needs no
 * re-run). solve_at adds its extra decisions and the hint to them. */
static int starts(const Graph *g, const Device *d, const PlanOptions *o, int64_t limit, Decision **out) {
  int n = 0;
  PlanOptions bo = *o;
  bo.budget_bytes = limit;
  for (size_t b = 0; b < sizeof baselines / sizeof baselines[0] + 1; b++) {
    Decision *dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
    if (!dec) break;
    for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
    bool ok = false;
    if (b < sizeof baselines / sizeof baselines[0]) {
      const PlanStrategy *s = plan_find_strategy(baselines[b]);
      Err ignore;
      SolverInfo bsi = {.name = "none", .status = "not_used"};
      bo.strategy = baselines[b];
      ok = s && s->decide(g, d, &bo, dec, &bsi, &ignore) == 0;
    } else {
      for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = DEC_OFFLOAD;
      ok = true;
    }
    if (ok) out[n++] = dec;
    else free(dec);
  }
  return n;
}

/* ------------------------------------------------------------ the model's restrictions */

/* Every excluded vector: sum over decided tensors of its decision's column
 * <= their count - 1 (at least one differs). */
static void add_exclusions(Ilp *md) {
  const Graph *g = md->g;
  int *cols = util_xcalloc((size_t)g->nstashed + 1, sizeof(int));
  double *vals = util_xcalloc((size_t)g->nstashed + 1, sizeof(double));
  for (int k = 0; cols && vals && k < md->nexcluded; k++) {
    int n = 0;
    for (int i = 0; i < g->nstashed; i++) {
      int t = g->stashed[i];
      if (md->colK[t] < 0) continue;
      Decision dv = md->excluded[k][t];
      cols[n] = dv == DEC_KEEP ? md->colK[t] : dv == DEC_RECOMPUTE ? md->colR[t] : md->colO[t];
      vals[n++] = 1;
    }
    if (milp_add_row(&md->m, -HUGE_VAL, n - 1, n, cols, vals) < 0) md->failed = true;
  }
  if (!cols || !vals) md->failed = true;
  free(cols), free(vals);
}

/* Dominated choices, removed before the solve (not in ilp_build, whose
 * rows must accept any decision vector for plan_ilp_predicted_peak): an
 * offload whose prefetch is issued right after its wait frees nothing at
 * any compute step (the original lives through the wait op's step, the
 * copy from the next op's, and a pull's earlier need cannot issue it
 * earlier), re-runs the same ops as keep, and only adds copy time. Keep is
 * never worse, so O is fixed at 0 (on the H100 profile: 2 of gpt2-124m's
 * 162 stashed tensors, 3 of llama3-8b's 357, 11 of unet's 94). */
void ilp_remove_dominated(Ilp *md) {
  const Graph *g = md->g;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i], fbr = g->tensors[t].first_bwd_read;
    if (md->colO[t] >= 0 && plan_prefetch_issue_op(g, md->d, t, fbr) <= plan_offload_wait_op(g, md->d, t) + 1)
      md->m.col_ub[md->colO[t]] = 0;
  }
}

/* Host memory (docs/PLANNING.md, "Host memory"), like ilp_remove_dominated
 * added before the solve only: the offloaded tensors' aligned bytes are at
 * most plan_host_limit, one row, and a tensor that alone exceeds it is
 * never offloaded (every tensor, on a unified_memory device). Every vector the search returns is checked against it
 * too (admissible). */
static void limit_host(Ilp *md) {
  const Graph *g = md->g;
  md->host_limit = plan_host_limit(md->d);
  if (md->host_limit == INT64_MAX) return;
  int *cols = util_xcalloc((size_t)g->nstashed + 1, sizeof(int));
  double *vals = util_xcalloc((size_t)g->nstashed + 1, sizeof(double));
  if (!cols || !vals) {
    md->failed = true;
    free(cols), free(vals);
    return;
  }
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (!ilp_offload_allowed(md, t)) continue;
    int64_t bytes = plan_host_share(g, t);
    if (bytes > md->host_limit) md->m.col_ub[md->colO[t]] = 0;
    else cols[n] = md->colO[t], vals[n++] = (double)bytes / ILP_UNIT;
  }
  if (n && milp_add_row(&md->m, -HUGE_VAL, (double)md->host_limit / ILP_UNIT, n, cols, vals) < 0) md->failed = true;
  free(cols), free(vals);
}

/* Offloads the model forbids (ilp_remove_dominated) become keeps. */
void ilp_keep_forbidden_offloads(const Ilp *md, Decision *dec) {
  for (int i = 0; i < md->g->nstashed; i++) {
    int t = md->g->stashed[i];
    if (dec[t] == DEC_OFFLOAD && md->colO[t] >= 0 && !ilp_offload_allowed(md, t)) dec[t] = DEC_KEEP;
  }
}

/* The least peak of any plan with every resident tensor on the device
 * (the ILP's model): every resident byte and the largest working set of one
 * op (info_lower_bound); 0 when unknown. */
static int64_t info_least_peak(const Graph *g) {
  int64_t resident, working;
  int at;
  return info_lower_bound(g, &resident, &working, &at) ? 0 : resident + working;
}

/* ------------------------------------------------------------ one solve */

/* Branch-and-bound nodes without --time-limit: a node re-solves an LP of
 * the model's size, so large models get fewer. */
static long node_limit(const MilpModel *m, double work) {
  double n = work / fmax(1, (double)m->nnz);
  return n >= ILP_NODES ? ILP_NODES : n < 1 ? 1 : (long)n;
}

/* Column upper bounds with the memory rows' limit halfway to the keep-all
 * peak (the keep-all start's, as the model evaluated it; < 0: not known):
 * the looser problem whose basis warm-starts the relaxation's dual simplex
 * (milp.c's relax), for budgets that only plans with offloads meet, where
 * the primal's first phase is long (docs/PLANNING.md 5.3). NULL when
 * keep-all fits. */
static double *loose_bounds(const Ilp *md, int64_t limit, int64_t keep_all) {
  if (keep_all < 0 || keep_all <= limit) return NULL;
  double *ub = util_xcalloc((size_t)md->m.ncols + 1, sizeof(double));
  if (!ub) return NULL;
  memcpy(ub, md->m.col_ub, (size_t)md->m.ncols * sizeof(double));
  for (int p = 0; p < md->npos; p++) ub[md->mcol[p]] = (double)(limit + (keep_all - limit) / 2) / ILP_UNIT;
  return ub;
}

static int stashed_with(const Graph *g, const Decision *dec, Decision which) {
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) n += dec[g->stashed[i]] == which;
  return n;
}

/* What a solve does, as flags: it minimizes the step time (GOAL_TIME) or
 * the peak (GOAL_MEMORY), with the MILP or, GOAL_QUICK, from the starts and
 * the descent alone: a start for the time solve when none of the baselines
 * fits, where the MILP's seconds would buy bytes nobody asked for; and a
 * fragmentation round after the relaxation did not finish, as its tightened
 * rows would not let it finish either. GOAL_TIGHTENED: a fragmentation
 * round's solve, whose answer must lay out within the budget. */
enum { GOAL_TIME = 0, GOAL_MEMORY = 1, GOAL_QUICK = 2, GOAL_NO_PROOF = 4, GOAL_DEFER_PROOF = 8, GOAL_TIGHTENED = 16 };

/* The relaxation's optimal basis from one round of the time solve, for
 * the next: a round against fragmentation changes only the memory
 * columns' bounds (ilp_build_rows), so the basis stays dual feasible and
 * the dual simplex goes on from it (MilpOptions.warm_basis), where the
 * round would solve its relaxation from scratch (llama3-8b at f = 0: 21 s
 * a round). Kept with the model's shape it belongs to. */
typedef struct Warm {
  int *basis;
  int nrows, ncols, nnz;
  int64_t host_limit; /* the model's (limit_host) */
} Warm;

/* Within one planning run (plan_ilp_bases_enter/leave: the homes rule's
 * many ilp runs) the last optimal basis of each model carries from one
 * run to the next, as from round to round, for the models whose
 * relaxation is the whole proof (no tree): the homes rule solves the same
 * homes at other activation budgets, which change the memory columns'
 * bounds only (llama80-32k of bench/bench_large.sh at its smallest
 * budget: a relaxation that stopped at its count after 66.5 s finished in
 * 142 dual iterations, 1.4 s, from the run before it). A model is its
 * shape and its host memory: from a run with other homes (less host
 * memory) the warm start's vertex led elsewhere (llama3-8b at bench_ilp's
 * f = 0, the one-home solve from the all-device one's basis: 617,753 ->
 * 633,678 us). Not where a tree follows: it starts from the relaxation's
 * vertex, which a warm start can move among equal optima (encdec-4 seed 2
 * of bench/gen_graph.py at f = 0.1: 1,870.8 -> 1,873.1 us). Per thread,
 * so that runs on other threads never see each other's bases and a plan
 * stays a function of its inputs. */
#define ILP_RUN_BASES 4
static _Thread_local Warm run_bases[ILP_RUN_BASES];
static _Thread_local int run_depth;

void plan_ilp_bases_enter(void) { run_depth++; }

void plan_ilp_bases_leave(void) {
  if (--run_depth > 0) return;
  for (int i = 0; i < ILP_RUN_BASES; i++) free(run_bases[i].basis), run_bases[i] = (Warm){.basis = NULL};
}

static bool same_model(const Warm *w, const Ilp *md) {
  return w->nrows == md->m.nrows && w->ncols == md->m.ncols && w->nnz == md->m.nnz && w->host_limit == md->host_limit;
}

/* The basis kept for MD's model, or NULL. */
static const int *warm_basis(const Warm *warm, int nwarm, const Ilp *md) {
  for (int i = 0; i < nwarm; i++)
    if (warm[i].basis && same_model(&warm[i], md)) return warm[i].basis;
  return NULL;
}

/* BASIS (taken) as the one kept for MD's model: in that model's slot,
 * else an empty one, else the first (the oldest: slots fill in order). */
static void keep_basis(Warm *warm, int nwarm, const Ilp *md, int *basis) {
  int at = 0;
  while (at < nwarm && warm[at].basis && !same_model(&warm[at], md)) at++;
  if (at == nwarm) {
    at = nwarm - 1;
    free(warm[0].basis);
    memmove(warm, warm + 1, (size_t)(nwarm - 1) * sizeof *warm);
  } else {
    free(warm[at].basis);
  }
  warm[at] = (Warm){.basis = basis, .nrows = md->m.nrows, .ncols = md->m.ncols, .nnz = md->m.nnz, .host_limit = md->host_limit};
}

/* 0: solved (best->ok when something fits; *relaxed when the LP
 * relaxation finished); 1: no start fits the limit, so there is nothing to
 * start from (the caller has the memory-minimizing plan to offer as extra);
 * -1: error. OWN (or NULL): the last round's basis, in and out; RUN (or
 * NULL): the planning run's bases by model shape (run_bases). */
static int solve_at(const Graph *g, const Device *d, const PlanOptions *o, int64_t limit, int goal,
                    const Decision *extra, Decision *const *excluded, int nexcluded, double deadline, Candidate *best,
                    Pool *pool, SolverInfo *si, bool *relaxed, double tree_work, Warm *own, Warm *run, Err *e) {
  *relaxed = false;
  si->simplex_iterations = si->nodes = 0;
  Decision *st[sizeof baselines / sizeof baselines[0] + 3];
  int nst = starts(g, d, o, limit, st);
  const Decision *more[2] = {extra, o->hint};
  for (int i = 0; i < 2; i++)
    if (more[i] && (st[nst] = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision))))
      memcpy(st[nst++], more[i], (size_t)g->ntensors * sizeof(Decision));
  int depth = g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH;
  Ilp md;
  int rc = -1;
  double *x = NULL, *loose = NULL;
  Decision *tmp = NULL, *searched = NULL;
  double built = util_now();
  if (ilp_build(&md, g, d, limit, goal & GOAL_MEMORY, depth, e)) {
    for (int i = 0; i < nst; i++) free(st[i]);
    return -1;
  }
  md.excluded = excluded;
  md.nexcluded = nexcluded;
  add_exclusions(&md);
  ilp_remove_dominated(&md);
  limit_host(&md);
  built = util_now() - built;
  x = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
  tmp = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  searched = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  if (!x || !tmp || !searched || md.failed || md.m.failed) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  best->ok = false;
  bool recompute_only_fits = false;
  int64_t keep_all_peak = -1;
  for (int i = 0; i < nst; i++) {
    int64_t pk;
    bool modelled = ilp_eval(&md, st[i], x, &pk) == 0;
    double obj = modelled ? ilp_objective_of(&md, x) : NAN;
    if (modelled) ilp_offer(&md, best, st[i], pk, obj, limit);
    if (modelled && pk <= limit && stashed_with(g, st[i], DEC_OFFLOAD) == 0) recompute_only_fits = true;
    if (modelled && stashed_with(g, st[i], DEC_KEEP) == g->nstashed) keep_all_peak = pk;
    /* Starts outside a depth-bounded model still go to the simulator. */
    if (!modelled || pk <= o->budget_bytes)
      ilp_pool_add(pool, g, &(Candidate){.dec = st[i], .peak = modelled ? pk : -1, .objective = obj});
  }
  if (!best->ok && !(goal & GOAL_MEMORY)) {
    rc = 1;
    goto out;
  }
  /* A descent from the best start: the starting solution. The work is
   * counted (deadline_of), so the same inputs give the same plan. */
  long evals = ILP_EVALS_PER_TENSOR * (long)g->nstashed;
  long xevals = (ILP_EVALS_PER_TENSOR + ILP_EXCHANGE_EVALS_PER_TENSOR) * (long)g->nstashed;
  bool cheap_tree = md.m.nnz < ILP_CHEAP_NNZ;
  long nodes = !cheap_tree ? node_limit(&md.m, ILP_NODE_WORK) : 0;
  ilp_improve(&md, best, limit, x, deadline, evals, false);
  /* A memory solve whose descent ends within ILP_GAP of the least peak of
   * any plan (info_least_peak) is done: its MILP runs to that gap, and on
   * the largest graphs its relaxation runs out of its count without a
   * bound (a llama of 80 layers at Llama-3-70B's dimensions: 25 of the 34
   * s CPU of `--budget 1`, for the descent's plan, 0.03% above that
   * peak). */
  int64_t least = goal & GOAL_MEMORY ? info_least_peak(g) : 0;
  if ((goal & GOAL_MEMORY) && best->ok && least > 0 && (double)best->peak <= (double)least * (1 + ILP_GAP)) {
    snprintf(si->status, sizeof si->status, "optimal");
    si->objective = best->objective;
    si->bound = (double)least / ILP_UNIT;
    si->seconds = 0;
    rc = 0;
    goto out;
  }
  if (goal & GOAL_QUICK) {
    snprintf(si->status, sizeof si->status, "feasible");
    si->objective = best->objective;
    si->seconds = si->bound = 0;
    rc = 0;
    goto out;
  }
  if (best->ok) {
    /* The start must respect the dominance bounds to be accepted. */
    ilp_keep_forbidden_offloads(&md, best->dec);
    int64_t pk;
    md.m.start = util_xcalloc((size_t)md.m.ncols + 1, sizeof(double));
    if (md.m.start && ilp_eval(&md, best->dec, md.m.start, &pk) == 0) best->objective = ilp_objective_of(&md, md.m.start);
  }
  Polish pol = {.md = &md, .limit = limit, .x = x, .evals = xevals, .pool = pool, .deadline = deadline, .c = {.dec = tmp},
                .searched = {.dec = searched}};
  /* The largest models (no tree): where only plans that offload fit, the
   * relaxation is warm-started from a looser one (loose_bounds) and no
   * neighbourhood follows, as its own LP is as tight (llama3-8b at its
   * smallest budget: 64 + 26 s, nothing found); elsewhere only the first
   * neighbourhood: the second found nothing at llama3-8b's f = 0.2-0.4
   * for 6-14 s each, while the first took f = 0.3 from 590,290 to 585,527
   * us. */
  bool no_tree = !cheap_tree && nodes <= ILP_TREE_MIN_NODES;
  /* There the relaxation is the whole proof and its count binds: the queue
   * rows (45% of gpt2-1558m's nonzeros) go in lazily (milp.c), and the count
   * is over the rest. */
  bool carried = no_tree && run;
  const int *basis = own ? warm_basis(own, 1, &md) : NULL;
  if (!basis && carried) basis = warm_basis(run, ILP_RUN_BASES, &md);
  bool warm_start = basis != NULL;
  bool lazy = no_tree && !warm_start; /* a basis has every row in */
  loose = no_tree && !recompute_only_fits && !(goal & GOAL_MEMORY) ? loose_bounds(&md, limit, keep_all_peak) : NULL;
  MilpOptions mo = {.solver = o->solver ? o->solver : "glpk", .time_limit = deadline < HUGE_VAL ? fmax(0.01, deadline - util_now()) : 0,
                    .build_seconds = built,
                    .mip_gap = ILP_GAP, .quiet = o->quiet, .node_limit = nodes,
                    .tree_iterations = cheap_tree ? (long)fmax(1, tree_work / fmax(1, (double)md.m.nnz)) : 0,
                    .neighbourhood_nodes = node_limit(&md.m, ILP_NEIGHBOURHOOD_WORK), .no_pump = cheap_tree,
                    .good_gap = !cheap_tree ? ILP_GOOD_GAP : 0,
                    .skip_tree = no_tree, .loose_ub = warm_start ? NULL : loose, .warm_basis = basis,
                    .lazy_first = md.queue_rows[0], .lazy_end = lazy ? md.queue_rows[1] : 0, .neighbourhoods = !no_tree ? 2 : loose ? 0 : 1,
                    .lp_iterations = (long)(ILP_LP_WORK / fmax(1, (double)(md.m.nnz - (lazy ? md.queue_nnz : 0)))),
                    .polish = ilp_polish_x, .polish_ctx = &pol, .search = ilp_search_x,
                    .separate = goal & GOAL_NO_PROOF ? NULL : ilp_separate, .separate_ctx = &md,
                    .proof_gap = ILP_PROOF_GAP, .proof_reach = ILP_PROOF_REACH, .defer_proof = goal & GOAL_DEFER_PROOF,
                    .dive_gap = goal & GOAL_MEMORY ? 0 : ILP_DIVE_GAP,
                    .dt_iterations = goal & GOAL_MEMORY && cheap_tree ? (long)fmax(1, ILP_DT_SHARE * tree_work / fmax(1, (double)md.m.nnz)) : 0,
                    .proof_iterations = cheap_tree ? (long)fmax(1, tree_work * (ILP_PROOF_WORK / ILP_TREE_WORK) / fmax(1, (double)md.m.nnz)) : 0};
  MilpResult r;
  if (milp_solve(&md.m, &mo, &r, e)) goto out;
  if (r.basis && carried) {
    size_t size = ((size_t)md.m.nrows + md.m.ncols) * sizeof *r.basis;
    int *copy = util_xcalloc(size + 1, 1);
    if (copy) keep_basis(run, ILP_RUN_BASES, &md, memcpy(copy, r.basis, size));
  }
  if (r.basis && own) {
    keep_basis(own, 1, &md, r.basis);
    r.basis = NULL;
  }
  if (r.status == MILP_FAILED) {
    /* The plans found before it still stand, with what was proven. */
    if (!best->ok) {
      err_set(e, "%s: %s", g->path, r.failure);
      milp_result_free(&r);
      goto out;
    }
    snprintf(si->note, sizeof si->note, "%s", r.failure);
    if (!isfinite(r.bound)) r.bound = 0;
  }
  snprintf(si->name, sizeof si->name, "%s", mo.solver);
  bool have = r.status == MILP_OPTIMAL || r.status == MILP_FEASIBLE || r.status == MILP_TIME_LIMIT;
  if (have) {
    ilp_decisions_from_x(&md, r.x, tmp);
    ilp_consider(&md, best, tmp, limit, x);
  }
  /* The LP relaxation rounded to the largest of K/R/O: a fallback when
   * branch and bound found nothing in time. */
  if (!isnan(r.lp_x[md.m.ncols])) {
    ilp_decisions_from_x(&md, r.lp_x, tmp);
    ilp_consider(&md, best, tmp, limit, x);
  }
  /* The solver's candidates went through the exchanges in the hook; the
   * starts alone (no LP point) did not. */
  ilp_improve(&md, best, limit, x, deadline, pol.exchanged ? evals : xevals, !pol.exchanged);
  /* Not again where the plan is the one the search before the proof tree
   * ended at. Nor in a fragmentation round on a graph without a tree: the
   * kicks take the answer to the tightened model's optimum, whose live
   * bytes sit at the lowered limit again, and its layout overshoots as far
   * as the first answer's or further (llama3-8b at its smallest all-device
   * budget on h100-sxm-80g: the all-device rounds' answers 607 and 503 MB
   * over with the kicks, 84 and 69 MB without; the same plan, 50.4 -> 44.0
   * CPU s). */
  bool searched_already = pol.searched.ok && !memcmp(pol.searched.dec, best->dec, (size_t)g->ntensors * sizeof(Decision));
  bool kicks = !(no_tree && (goal & GOAL_TIGHTENED));
  if (best->ok && !isnan(r.lp_x[md.m.ncols]) && r.status != MILP_INFEASIBLE && !searched_already && kicks)
    ilp_kick(&md, best, r.lp_x, r.bound, limit, x, deadline, xevals);
  bool timed_out = r.status == MILP_TIME_LIMIT || r.out_of_time || ilp_out_of_time(deadline);
  snprintf(si->status, sizeof si->status, "%s", r.status == MILP_OPTIMAL ? "optimal" : timed_out ? "time_limit" : "feasible");
  si->seconds = r.seconds;
  si->simplex_iterations = r.simplex_iterations, si->nodes = r.nodes;
  si->proof_deferred = r.proof_deferred;
  *relaxed = !isnan(r.lp_x[md.m.ncols]);
  si->bound = r.status == MILP_INFEASIBLE ? 0 : r.bound;
  if (best->ok) {
    si->objective = best->objective;
    si->bound = r.status == MILP_INFEASIBLE ? best->objective : fmin(r.bound, best->objective);
    si->gap = fabs(si->objective) > 0 ? (si->objective - si->bound) / fabs(si->objective) : 0;
    if (si->gap < 1e-12) si->gap = 0;
    if (r.status == MILP_OPTIMAL && si->gap > mo.mip_gap) snprintf(si->status, sizeof si->status, "feasible");
  }
  milp_result_free(&r);
  rc = 0;
out:
  for (int i = 0; i < nst; i++) free(st[i]);
  free(x);
  free(loose);
  free(tmp), free(searched);
  ilp_free(&md);
  return rc;
}

/* The memory-minimizing solve (goal GOAL_MEMORY, with GOAL_QUICK or not):
 * its decisions and their arena; note: GLPK's failure inside it, if any (a
 * SolverInfo note: the plan is the least found before it, not proven the
 * least); *proven (when not NULL): the peak below which no plan of the
 * schedule family exists, as far as this solve proved it (its bound, where
 * the model is the whole family: no depth bound; else 0). Where params and
 * optimizer state may be host-homed, a refusal claims the homes' bound
 * (proven_least_peak), never this solve's, so it runs no proof tree
 * (cond-16 of bench/gen_graph.py seed 3 on h100-sxm-80g: `--budget 1`
 * took 285.6 CPU s, nearly all in that tree, and 6.1 s without it, naming
 * the same smallest budget; the same on the checked-in models and the
 * hold-outs). */
static int min_memory_plan(const Graph *g, const Device *d, const PlanOptions *o, int goal, double deadline, Decision *out,
                           int64_t *arena, int64_t *proven, char *note, SolverInfo *work, Err *e) {
  Candidate c = {.dec = out};
  SolverInfo si = {.name = "none", .status = "not_used"};
  bool relaxed;
  *arena = -1;
  if (proven) *proven = 0;
  note[0] = 0;
  if (plan_homes_least_peak(g, d, o) >= 0) goal |= GOAL_NO_PROOF;
  int rc = solve_at(g, d, o, INT64_MAX / 4, goal, NULL, NULL, 0, deadline, &c, NULL, &si, &relaxed, ILP_TREE_WORK, NULL, NULL, e);
  if (work) plan_add_work(work, &si);
  if (rc || !c.ok) return -1;
  /* The bound is in MiB through GLPK's tolerances: a millionth below it. */
  if (proven && g->nops <= ILP_FULL_OPS && si.bound > 0) *proven = (int64_t)floor(si.bound * ILP_UNIT * (1 - 1e-6));
  Plan *p = plan_from_decisions(g, d, c.dec, e);
  if (!p) return -1;
  *arena = p->arena_bytes;
  plan_free(p);
  snprintf(note, sizeof si.note, "%s", si.note);
  return 0;
}

/* min_memory_plan, or o->least_plan where it may stand in for that
 * solve with GOAL_MEMORY: the solve is the same but for the host limit's
 * row, which that plan meets (chain64 of bench/bench_large.sh at
 * `--budget 1`: the homes rule's solve at the smallest budget repeated
 * it, 1,809 simplex iterations and a tree). Nothing is proven by this run
 * then. */
static int least_memory_plan(const Graph *g, const Device *d, const PlanOptions *o, int goal, double deadline, Decision *out,
                             int64_t *arena, int64_t *proven, char *note, SolverInfo *work, Err *e) {
  if (goal != GOAL_MEMORY || !o->least_plan || plan_host_bound(g, o->least_plan) > plan_host_limit(d))
    return min_memory_plan(g, d, o, goal, deadline, out, arena, proven, note, work, e);
  memcpy(out, o->least_plan, (size_t)g->ntensors * sizeof(Decision));
  *arena = o->least_arena, *proven = 0;
  note[0] = 0;
  return 0;
}

/* The peak below which no plan exists: every resident byte and the largest
 * working set of one op, or what the memory-minimizing solve proved. Both
 * hold only with everything resident on the device: where the ilp strategy
 * may still host-home params and optimizer state, its own weaker bound. */
static int64_t proven_least_peak(const Graph *g, const Device *d, const PlanOptions *o, int64_t solved) {
  int64_t homes = plan_homes_least_peak(g, d, o), least = info_least_peak(g);
  if (homes >= 0) return homes;
  return least > solved ? least : solved;
}

static int64_t min_budget(const Graph *g, const Device *d, const PlanOptions *o, char *note, Err *e) {
  Decision *dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  int64_t arena = -1;
  note[0] = 0;
  if (!dec) return err_set(e, "%s: out of memory", g->path);
  min_memory_plan(g, d, o, GOAL_MEMORY, deadline_of(o, util_now()), dec, &arena, NULL, note, NULL, e);
  free(dec);
  return arena;
}

/* ------------------------------------------------------------ the rounds */

#define ILP_ROUNDS 6        /* solves with tightened rows after an arena over the budget */
#define ILP_LIMIT_STEP 4096 /* ... no closer to a limit where nothing fit than this */
#define ILP_EXCLUDE_MAX 24  /* ... and on small graphs, answers excluded one by one first */
#define ILP_TWINS_MAX (ILP_ROUNDS + ILP_EXCLUDE_MAX) /* answers repaired, at most one a round */
#define ILP_SAME_STEP_MAX 2 /* answers in a row at the last one's step, none fitting, before giving up the rounds */
#define ILP_FINISH_PLANS (ILP_POOL + 6) /* plans built after the last solve: the pool, the answer, polish's, the caller's */

/* Every op once, us: what any plan's step takes at least. */
static double compute_us(const Graph *g, const Device *d) {
  double us = 0;
  for (int i = 0; i < g->nops; i++) us += cost_op_seconds(g, d, i) * 1e6;
  return us;
}

/* ------------------------------------------------------------ public */

int64_t plan_ilp_min_budget(const Graph *g, const Device *d, const PlanOptions *o, char *note, Err *e) {
  return min_budget(g, d, o, note, e);
}

int64_t plan_ilp_repair_arena(const Graph *g, const Device *d, int64_t budget, Decision *dec, int64_t arena) {
  return ilp_repair(g, d, budget, dec, arena, true, HUGE_VAL, NULL);
}

/* No plan at the budget: "infeasible" only where proven (the budget is
 * below least, a peak no plan of the family gets under); else what was not
 * found. Either way the smallest budget this run planned (planned, its
 * arena, < 0: none), and whether that is only the least found before GLPK
 * failed (note). */
static void no_plan_error(const Graph *g, const Device *d, int64_t budget, int64_t least, int64_t planned, const char *note,
                          Err *e) {
  char b1[32], b2[32], b3[32], proof[160] = "", smallest[sizeof ((SolverInfo *)0)->note + 160] = "";
  if (budget < least)
    snprintf(proof, sizeof proof, ": no plan below %" PRId64 " bytes (%s) exists in the schedule family", least,
             util_fmt_bytes(least, b2, sizeof b2));
  if (planned >= 0)
    snprintf(smallest, sizeof smallest, "; the smallest budget planned is %" PRId64 " bytes (%s)%s%s%s", planned,
             util_fmt_bytes(planned, b3, sizeof b3), note[0] ? " (the least found before " : "", note, note[0] ? ")" : "");
  if (proof[0])
    err_set(e, "%s: budget %" PRId64 " bytes (%s) is infeasible on %s%s%s", g->path, budget,
            util_fmt_bytes(budget, b1, sizeof b1), d->name, proof, smallest);
  else
    err_set(e, "%s: no plan found at %" PRId64 " bytes (%s) on %s%s", g->path, budget, util_fmt_bytes(budget, b1, sizeof b1),
            d->name, smallest);
}

/* A round's answer and pool built into plans on util_parallel_for's
 * threads (each plan its own), then judged in their order. */
typedef struct {
  const Graph *g;
  const Device *d;
  const Candidate *c;
  const Pool *pool;
  int first;                 /* -1: the answer c first, 0: the pool alone */
  Plan *plan[ILP_POOL + 1];  /* [i + 1]: candidate i's (c at -1) */
  Err err[ILP_POOL + 1];
} Built;

static void build_one(void *ctx, int j) {
  Built *b = ctx;
  int i = b->first + j;
  b->plan[i + 1] = plan_from_decisions(b->g, b->d, i < 0 ? b->c->dec : b->pool->c[i].dec, &b->err[i + 1]);
}

static void free_built(Built *b) {
  for (int i = 0; i <= ILP_POOL; i++) plan_free(b->plan[i]), b->plan[i] = NULL;
}

/* A round's answer as the simulator has it. */
typedef struct Twin {
  double step;
  int64_t arena, peak;
} Twin;

static int decide_ilp(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e) {
  si->min_budget_known = false, si->proof_deferred = false;
  Candidate c = {.dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision))};
  Decision *best = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *mm = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *repaired = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *excluded[ILP_EXCLUDE_MAX];
  int nexcluded = 0;
  Twin twins[ILP_TWINS_MAX]; /* the answers repaired so far */
  int ntwins = 0;
  SolverInfo work = {.simplex_iterations = 0}; /* every solve's, added up */
  Warm own = {.basis = NULL}; /* this run's rounds' */
  /* The first-change and the fastest repairs of this budget's answers. */
  Repairs repairs[2] = {{.ntensors = g->ntensors}, {.ntensors = g->ntensors}};
  Pool pool;
  memset(&pool, 0, sizeof pool);
  bool oom = !c.dec || !best || !mm || !repaired;
  for (int i = 0; i < ILP_POOL; i++) oom |= !(pool.c[i].dec = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision)));
  int rc = -1;
  if (oom) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  int64_t limit = o->budget_bytes;
  /* The rounds' limits: the last whose answer overshot the budget by its
   * layout, and the highest where no start fit. */
  int64_t above = limit, too_low = INT64_MIN;
  double start = util_now(), deadline = deadline_of(o, start), best_s = HUGE_VAL;
  /* Keep-all costs no recompute and no stall: when it fits, nothing is
   * faster and the bound (pure compute) proves it. */
  for (int i = 0; i < g->nstashed; i++) best[g->stashed[i]] = DEC_KEEP;
  bool keep_all_fits = ilp_try_plan(g, d, o->budget_bytes, best, HUGE_VAL, &best_s);
  /* The solves stop early enough for what follows them to end by the
   * deadline: simulating the pool, polishing, and the caller's plan and
   * its files, each about one plan's build, timed on keep-all's just now
   * (at the machine's present load). */
  deadline -= ILP_FINISH_PLANS * (util_now() - start);
  if (keep_all_fits) {
    double compute = compute_us(g, d);
    snprintf(si->name, sizeof si->name, "%s", o->solver ? o->solver : "glpk");
    snprintf(si->status, sizeof si->status, "optimal");
    si->objective = si->bound = compute;
    si->gap = 0;
    si->seconds = 0; /* no solver ran; and the plan file stays byte-identical */
    memcpy(dec, best, (size_t)g->ntensors * sizeof(Decision));
    rc = 0;
    goto out;
  }
  best_s = HUGE_VAL;
  /* Fragmentation: an arena over the budget tightens the rows and
   * re-solves, while the solver's answer would beat the best that fits. */
  /* The first round's (later rounds' tightened rows do not bound this
   * budget's problem); when its relaxation did not finish, the later rounds
   * use the starts and the descent alone, as theirs would not either. */
  double bound = 0, least_us = compute_us(g, d);
  bool relaxed = false, deferred = false;
  bool picked = false;
  double polished_s = HUGE_VAL; /* the step of the plan polish last left */
  double last_step = HUGE_VAL;  /* the last answer's, and how many before it were the same */
  int same_step = 0;
  /* When no start fits, the memory-minimizing plan is the start (and,
   * should the solve find nothing better, the answer). */
  int64_t mm_arena = -1, mm_proven = 0;
  int mm_goal = GOAL_TIME; /* GOAL_TIME: none computed yet */
  bool mm_ok = false;
  char mm_note[sizeof si->note] = "";
  for (int round = 0; round < ILP_ROUNDS + (g->nstashed <= ILP_POLISH_MAX ? ILP_EXCLUDE_MAX : 0); round++) {
    if (round > 0 && ilp_out_of_time(deadline)) break;
    SolverInfo rsi = *si;
    pool.n = 0;
    int goal = round > 0 && !relaxed ? GOAL_TIME | GOAL_QUICK | GOAL_TIGHTENED
               : round > 0                ? GOAL_TIME | GOAL_NO_PROOF | GOAL_TIGHTENED
               : o->no_proof              ? GOAL_TIME | GOAL_NO_PROOF
               : o->defer_proof           ? GOAL_TIME | GOAL_DEFER_PROOF
                                          : GOAL_TIME;
    bool rel = false;
    /* Later rounds get less of the tree: each excludes one plan from the
     * last round's problem and re-proves much of it (llama-tiny at f = 0.2:
     * 24 rounds, 120 s with the whole count each; 550.01 us in 13.7 s so,
     * 554.77 us with a count shared by all rounds). */
    int s = solve_at(g, d, o, limit, goal, mm_ok ? mm : NULL, excluded, nexcluded, deadline, &c, &pool, &rsi, &rel,
                     ILP_TREE_WORK / (round + 1), &own, run_depth > 0 ? run_bases : NULL, e);
    plan_add_work(&work, &rsi);
    if (s < 0) goto out;
    if (s > 0) { /* the quick one first; the MILP's if that does not fit either */
      Err e2;
      if (mm_goal == GOAL_MEMORY) {
        if (round == 0 || above - limit <= ILP_LIMIT_STEP) break;
        /* A lowered limit below every plan, the smallest-peak one included:
         * the budget's window of peaks can be narrower than the layout's
         * overshoot (gpt2-1558m near keep-all: peaks 24,976.6 to 24,980.0
         * MB, keep-all's layout 8 MB over its peak), so halfway back up,
         * to the answers between. */
        too_low = limit;
        limit += (above - limit) / 2;
        continue;
      }
      mm_goal = mm_ok ? GOAL_MEMORY : GOAL_MEMORY | GOAL_QUICK;
      mm_ok = least_memory_plan(g, d, o, mm_goal, deadline, mm, &mm_arena, &mm_proven, mm_note, &work, &e2) == 0;
      if (!mm_ok) break;
      round--;
      continue;
    }
    if (round == 0) bound = rsi.bound, relaxed = rel, deferred = rsi.proof_deferred;
    /* The objective estimates stalls; the simulator has the last word
     * among the solution and the starts (so no baseline is ever better). */
    const Candidate *pick = NULL;
    int64_t c_arena = -1;
    double c_step = HUGE_VAL;
    Built built = {.g = g, .d = d, .c = &c, .pool = &pool, .first = c.ok ? -1 : 0};
    util_parallel_for(pool.n - built.first, build_one, &built);
    for (int i = built.first; i < pool.n; i++) {
      const Candidate *k = i < 0 ? &c : &pool.c[i];
      Plan *p = built.plan[i + 1];
      built.plan[i + 1] = NULL;
      if (!p) {
        *e = built.err[i + 1];
        free_built(&built);
        goto out;
      }
      int64_t arena = p->arena_bytes, peak = p->predicted.peak_live_bytes;
      double step = p->predicted.step_seconds;
      bool fits = plan_fits(p, d, o->budget_bytes);
      plan_free(p);
      if (k->peak >= 0 && peak != k->peak) {
        err_set(e, "%s: internal error: the ILP predicts a peak of %" PRId64 " bytes, the simulator %" PRId64, g->path,
                k->peak, peak);
        free_built(&built);
        goto out;
      }
      if (i < 0) c_arena = arena, c_step = step;
      if (fits && step < best_s * (1 - 1e-12)) pick = k, best_s = step;
    }
    if (pick || !picked) *si = rsi;
    /* Small graphs: the answer's own neighbours with a smaller arena, by
     * the fastest changes and by the first: neither greedy ends at the
     * faster plan everywhere (the first alone took gpt2-tiny's smallest
     * budget ten rounds; the fastest alone ended a 1-layer llama of
     * test_exhaustive at its smallest budget above its optimum). Not an
     * answer at the step, arena and peak of one repaired before: the
     * rounds meet twins, the same plan with two tensors of one shape
     * trading decisions, and a twin's repairs end where its first's did
     * (gpt2-tiny at 40,660,740 bytes: rounds 2 and 5, 4.5 and 2.3 s of
     * repairs each, to the arenas of rounds 1 and 4). */
    bool twin = false;
    for (int i = 0; i < ntwins; i++)
      twin |= c.ok && twins[i].step == c_step && twins[i].arena == c_arena && twins[i].peak == c.peak;
    if (!twin && !pick && c.ok && c_arena > o->budget_bytes && g->nstashed <= ILP_POLISH_MAX && ntwins < ILP_TWINS_MAX)
      twins[ntwins++] = (Twin){.step = c_step, .arena = c_arena, .peak = c.peak};
    for (int fastest = 1; fastest >= 0 && !twin && !pick && c.ok && c_arena > o->budget_bytes && g->nstashed <= ILP_POLISH_MAX;
         fastest--) {
      memcpy(repaired, c.dec, (size_t)g->ntensors * sizeof(Decision));
      double step;
      int64_t reached = ilp_repair(g, d, o->budget_bytes, repaired, c_arena, fastest, deadline, &repairs[fastest]);
      if (reached <= o->budget_bytes && ilp_try_plan(g, d, o->budget_bytes, repaired, best_s * (1 - 1e-12), &step)) {
        memcpy(best, repaired, (size_t)g->ntensors * sizeof(Decision));
        best_s = step, picked = true;
        *si = rsi;
        if (!strcmp(si->status, "optimal")) snprintf(si->status, sizeof si->status, "feasible");
      }
    }
    if (pick) {
      picked = true;
      memcpy(best, pick->dec, (size_t)g->ntensors * sizeof(Decision));
      if (pick != &c) {
        /* A start the simulator preferred: not the solver's optimum. */
        if (!strcmp(si->status, "optimal")) snprintf(si->status, sizeof si->status, "feasible");
      }
    }
    /* What fits, polished before the stopping test below: the next
     * round's answer must beat the plan this run would return, not the
     * unpolished one (cond-4 seed 1 of bench/gen_graph.py at its smallest
     * budget: 23 rounds, 0.9 s each, to reach 2.7% above the bound, where
     * polish took the first round's plan within 2%). Once per plan. */
    if (best_s < polished_s && c.ok && c_arena > o->budget_bytes && ilp_polish(g, d, o->budget_bytes, best, &best_s, deadline) &&
        !strcmp(si->status, "optimal"))
      snprintf(si->status, sizeof si->status, "feasible");
    if (best_s < polished_s) polished_s = best_s;
    /* Tighter rows only raise the model's objective: stop once the
     * solver's answer fits or simulates no faster than what does, or once
     * what fits is within ILP_DIVE_GAP of the first round's bound (the gap
     * the plan reports) and the answer that does not fit would gain less
     * than ILP_PROOF_GAP: each round costs a whole solve. cond-4 seed 2 of
     * bench/gen_graph.py at its smallest budget ran all 25 rounds, 2.4 s
     * each, for a plan found by the thirteenth, 1.84% above the bound
     * (timestamps per round; the rounds' answers were 0.5-1.4% faster by
     * the simulator but 0.1-2% over the budget by their layout); now 14.
     * The gap alone stopped test_promises' 40% point at a plan 0.7% slower. */
    if (!c.ok || c_arena <= o->budget_bytes || c_step >= best_s) break;
    /* Nothing fits yet and the excluded answers repeat one step time: the
     * solver is walking plans of the same objective whose layouts all
     * overshoot (cond-4 seed 3 of bench/gen_graph.py at 53,617,920 bytes:
     * 25 answers at 1,876.695 us, 0.6-0.9 MB over, 1.5 s each, before the
     * memory-minimizing plan). */
    same_step = c_step == last_step ? same_step + 1 : 0;
    last_step = c_step;
    if (!picked && g->nstashed <= ILP_POLISH_MAX && same_step >= ILP_SAME_STEP_MAX) break;
    /* Small graphs, whose answers are excluded one by one, stop at a small
     * gain whatever the bound: the next answers walk plans within a
     * percent of this one, each repaired at the cost of hundreds of
     * layouts, and the bound of a plan with homes is loose (gpt2-tiny's
     * all-home solves at its smallest budget: 17 and 22 rounds after the
     * plan that stood, answers 0.04-1.1% faster and 52-288 KB over by
     * their layout, none repaired to a faster plan; the same plan, 554 ->
     * 156 CPU s). */
    if (picked && c_step >= best_s * (1 - ILP_PROOF_GAP) &&
        (g->nstashed <= ILP_POLISH_MAX || best_s * 1e6 * (1 - ILP_DIVE_GAP) <= fmax(bound, least_us)))
      break;
    /* Small graphs: exclude that answer and ask for the next best (their
     * layouts can be far over the peak, and for another plan at the same
     * peak not at all). Otherwise by the excess, doubled each round:
     * fragmentation is not linear in the limit, and the same few bytes
     * again often change nothing. */
    if (g->nstashed <= ILP_POLISH_MAX && nexcluded < ILP_EXCLUDE_MAX &&
        (excluded[nexcluded] = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision)))) {
      memcpy(excluded[nexcluded++], c.dec, (size_t)g->ntensors * sizeof(Decision));
    } else {
      if (round >= ILP_ROUNDS) break;
      /* An answer proven optimal (its objective at the bound) whose peak
       * is within the lowered limit is optimal there too: that round's
       * solve would answer it again and lower the limit the same way
       * (gpt2-1558m at f = 0: keep-all's decisions at the bound, 1.5 MB
       * over by their layout, solved three times). So the limit goes on
       * down without it. */
      bool proven = rsi.bound > 0 && rsi.bound >= rsi.objective;
      for (;;) {
        above = limit;
        limit -= (c_arena - o->budget_bytes) << round;
        if (!proven || c.peak > limit || round + 1 >= ILP_ROUNDS) break;
        round++;
      }
      if (limit <= too_low) limit = too_low + (above - too_low) / 2;
    }
    c.ok = false;
  }
  if (!picked) {
    /* The memory-minimizing solve fits whenever anything in the model does. */
    int64_t m = -1;
    Err e2;
    if (mm_goal != GOAL_MEMORY)
      mm_goal = GOAL_MEMORY, mm_ok = least_memory_plan(g, d, o, mm_goal, deadline, mm, &mm_arena, &mm_proven, mm_note, &work, &e2) == 0;
    if (mm_ok) {
      memcpy(best, mm, (size_t)g->ntensors * sizeof(Decision));
      m = mm_arena > o->budget_bytes ? ilp_repair(g, d, o->budget_bytes, best, mm_arena, false, deadline, &repairs[0]) : mm_arena;
    }
    if (m >= 0 && m <= o->budget_bytes && ilp_try_plan(g, d, o->budget_bytes, best, HUGE_VAL, &best_s)) {
      snprintf(si->status, sizeof si->status, "feasible");
      if (!si->note[0]) snprintf(si->note, sizeof si->note, "%s", mm_note);
    } else {
      /* min_memory_plan with GOAL_MEMORY, as plan_ilp_min_budget's. */
      si->min_budget_known = true;
      si->min_budget = mm_ok ? mm_arena : -1;
      if (mm_ok) memcpy(dec, mm, (size_t)g->ntensors * sizeof(Decision)); /* the plan of that budget */
      no_plan_error(g, d, o->budget_bytes, proven_least_peak(g, d, o, mm_goal == GOAL_MEMORY ? mm_proven : 0), m, mm_note, e);
      goto out;
    }
  }
  if (ilp_polish(g, d, o->budget_bytes, best, &best_s, deadline) && !strcmp(si->status, "optimal"))
    snprintf(si->status, sizeof si->status, "feasible");
  /* One objective: the returned plan's simulated step time. Where the
   * model's differs (docs/PLANNING.md section 4: stalls it can only
   * bound), the model's optimum is not this plan's, so not "optimal". */
  si->objective = best_s * 1e6;
  if (!strcmp(si->status, "optimal") && fabs(plan_ilp_objective(g, d, best) - si->objective) > 1e-6 * si->objective)
    snprintf(si->status, sizeof si->status, "feasible");
  /* The relaxation's bound where it finished, and never below the compute
   * alone (every plan runs every op once): a real bound either way. */
  si->bound = fmin(fmax(bound, least_us), si->objective);
  si->gap = si->objective > 0 ? fmax(0, (si->objective - si->bound) / si->objective) : 0;
  si->seconds = util_now() - start;
  si->proof_deferred = deferred;
  if (ilp_out_of_time(deadline) && strcmp(si->status, "optimal")) snprintf(si->status, sizeof si->status, "time_limit");
  if (si->gap < 1e-12) si->gap = 0;
  memcpy(dec, best, (size_t)g->ntensors * sizeof(Decision));
  rc = 0;
out:
  si->simplex_iterations = work.simplex_iterations, si->nodes = work.nodes;
  free(c.dec);
  free(best);
  free(mm);
  free(repaired);
  free(own.basis);
  ilp_repairs_free(&repairs[0]);
  ilp_repairs_free(&repairs[1]);
  for (int i = 0; i < nexcluded; i++) free(excluded[i]);
  for (int i = 0; i < ILP_POOL; i++) free(pool.c[i].dec);
  return rc;
}

/* The rounds, repairs and polish lay out thousands of plans, many of the
 * same buffers: each is packed once (layout_memo_enter). */
int plan_decide_ilp(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e) {
  layout_memo_enter();
  int rc = decide_ilp(g, d, o, dec, si, e);
  layout_memo_leave();
  /* The rounds decide stashed tensors alone, in vectors whose other
   * entries are DEC_KEEP (zeroed). A resident tensor kept is on the
   * device, DEC_NONE: the search over homes reads DEC_KEEP as no home
   * and took no host optimizer from such a vector (gpt2-1558m at
   * keep-all's arena: keep-all, 5% slower than the host optimizer's plan
   * at bench_ilp's f = 0.75). On a refusal too: dec is then the
   * memory-minimizing plan, which the homes rule starts from. */
  for (int t = 0; t < g->ntensors; t++)
    if (!g->tensors[t].stashed) dec[t] = DEC_NONE;
  return rc;
}
