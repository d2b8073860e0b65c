/*
 * ilp.h - the `ilp` strategy's internals, shared by the files of
 * compiler/ilp/ and by nothing else: the rest of the compiler calls the
 * plan_decide_ilp and plan_ilp_* API of ration.h. One MILP over keep /
 * recompute / offload per stashed tensor that models the schedule family
 * of schedule.c exactly (docs/PLANNING.md derives every column and row).
 * Memory is counted at every compute step of every possible schedule (the
 * only steps where live bytes can rise), so the model's peak for any
 * decision vector equals the simulator's to the byte; the objective is
 * compute + recompute + an estimate of copy stalls.
 *
 * Columns: K/R/O per stashed tensor (binary, one-hot); Y[q][c] = "forward op
 * q has been re-run by its c-th candidate op" (continuous, but pinned to 0/1
 * by rows from both sides, so exact for integral decisions); W (trigger
 * products in Y's upper rows); product columns (lower-bounded ANDs, exact
 * at their minimum, which the memory rows prefer); M per step position (live
 * bytes, a running sum) and, when minimizing memory, one peak column.
 *
 * One file per concern; this header's sections declare what each file
 * gives the others:
 *   model.c   the model's vocabulary (Lin, Row, Sig, Run), its structure
 *             (consumers, candidates, positions), the columns, the re-run
 *             rows, and building and freeing it
 *   memory.c  the memory rows
 *   homes.c   the host homes' and host optimizers' columns, their memory
 *             terms and copies, and the search over them
 *   stalls.c  the copy-stall rows and a decision vector's stalls
 *   cuts.c    the c-MIR cuts of branch and bound
 *   eval.c    a decision vector's columns, objective and peak
 *   search.c  the heuristics judged by that evaluation
 *   repair.c  the changes judged by the simulator and the layout
 *   solve.c   the driver: plan_decide_ilp, the smallest budget
 */
#ifndef RATION_ILP_H
#define RATION_ILP_H

#include "ration.h"

#include <math.h>

/* Columns of a Lin: a product's factor holds at most 2 (ilp_eq, ilp_at_or_after),
 * an AND at most 3 factors, so an AND's row holds at most 1 + 3 x 2; the
 * rows that grow with the graph (build_reruns' upper rows) are Rows. */
#define LIN_MAX 8
#define ILP_UNIT 1048576.0 /* memory rows in MiB */

/* A tree that ends above it is followed by one with cuts (solve.c); the
 * kicks go on while the plan is above it (search.c). */
#define ILP_PROOF_GAP 0.01

/* The incremental evaluation's state (eval.c), one per model. */
typedef struct EvalCache EvalCache;

/* A small linear expression over columns with a constant. */
typedef struct Lin {
  int n;
  int col[LIN_MAX];
  double c[LIN_MAX];
  double k;
} Lin;

typedef struct Event {
  int pos, col; /* col -1: constant */
  int64_t bytes;
} Event;

typedef struct Prod {
  int col;
  int nf;
  int first; /* index into the model's factor pool */
} Prod;

/* A row of any length with a constant (grown by doubling). */
typedef struct Row {
  int n, cap;
  int *col;
  double *c;
  double k;
} Row;

/* A live condition that is an OR of ANDs (of at most 3) 0/1 expressions,
 * one AND per consumer of a tensor, so as many as the graph has (a
 * conditioning tensor read by every block). Consecutive positions with the
 * same condition share one column (Run), which keeps the model to one
 * column per change of the condition, not per step. */
typedef struct Sig {
  int ng, cap;
  int *nf;
  Lin (*f)[3];
} Sig;

typedef struct Run {
  Sig sig;
  int p0;
  bool open;
} Run;

typedef struct Window {
  int stream, a, b0, b, col; /* copies issued at or after a, due from b0 to b, on top of the previous window's */
  double cap;
} Window;

typedef struct Fifo {
  int stream, i0, it, b; /* queue positions i0..it end with tensor fifo[it], due before/after op b */
  double cap;
} Fifo;

/* One copy a host home or a host optimizer adds on a copy stream
 * (homes.c): stream 1 a window's prefetch from the home, stream 0 the copy
 * back after the last write (a grad's: its copy to the host optimizer);
 * issued at op `issue` (stream 1: at the start of its group; 0: after it)
 * and due at op `due` (1: in its prelude; 0: after it), as
 * plan_home_copies places them. `refetch`: host-refetch's second window,
 * which host does not have. `gone`: the grad whose host optimizer takes
 * the copy away (its op reads and writes the home itself), -1. */
typedef struct HomeCopy {
  int t, issue, due, gone;
  bool refetch;
  double us;
} HomeCopy;

typedef struct Ilp {
  const Graph *g;
  const Device *d;
  MilpModel m;
  bool min_memory;
  int depth; /* pulls reach at most this many ops before an op's own need; <= 0: unbounded */
  int *colK, *colR, *colO; /* per tensor, -1 */
  int *colH, *colF;         /* per resident tensor: host home, host-refetch home (homes.c), -1 */
  int *colX;                /* per grad: its optimizer op on the host (homes.c), -1 */
  int *xneed;               /* per tensor: the grad whose X needs it host-homed, -1 */
  bool *xhost;              /* per tensor: ... homed as host (host-refetch's second window would follow the re-runs) */
  int *xgrad, *xcopy;       /* per op: the grad whose X runs it on the host, its copy's index in hcopy[0]; -1 */
  bool homes;               /* the home columns are built (ilp_build_with_homes) */
  bool bound_only;          /* ... relaxed for a bound of the family at a budget (ilp_build_homes_bound) */
  bool bound_exact;         /* ... with its memory rows the evaluated model's and every op a window end */
  HomeCopy *hcopy[2];       /* per stream, the home copies in queue order (issue op, due op, tensor, window) */
  int nhcopy[2];
  int *hdue_first[2], *hdue[2]; /* per stream and op b: the indices into hcopy due at b */
  int *cand_first, *cand_n; /* per op, into cand_t / ycol */
  int *cand_t, *ycol, ncand;
  int npos;
  int *pos_op, *pos_q; /* q -1: the op's own compute step */
  int *grp_first, *grp_comp; /* per op: first position and compute position */
  int *cons_first, *cons_n, *cons; /* per tensor: forward ops reading it */
  Event *ev;
  int nev, cap_ev;
  Prod *prod;
  int nprod, cap_prod;
  Lin *fac;
  int nfac, cap_fac;
  /* The factors packed for ilp_eval (a Lin is mostly empty slots): factor
   * i is fac_k[i] + sum over fac_first[i] <= j < fac_first[i + 1] of
   * fac_c[j] * x[fac_col[j]]. */
  double *fac_k, *fac_c;
  int *fac_first, *fac_col;
  /* The events packed for ilp_eval, per position p: the constants' sum
   * pos_const[p], then the column events [pos_ev_first[p],
   * pos_ev_first[p + 1]) of pev_col and pev_bytes, one per column (its
   * events at p summed). */
  int64_t *pos_const, *pev_bytes;
  int *pos_ev_first, *pev_col;
  int *mcol; /* per position */
  int *obj_cols, nobj_cols; /* the columns with an objective coefficient, for ilp_objective_of */
  int peak_col;
  int *col_q;        /* running stall sum per op (ilp_build_stalls) */
  double *t_end;     /* compute end of each op without stalls */
  int *wait_at, *issue_at; /* per offloadable tensor: its static copy points */
  double *copy_us[2];
  int *due_first[2], *due_list[2]; /* per op: offloadable tensors due there, per stream */
  Window *win;
  int nwin, cap_win;
  int *win_first;            /* windows grouped by their end op: win_b[win_first[b] ... win_first[b + 1]) end at b */
  Window *win_b;             /* win in that order, for ilp_eval_stalls' passes over it */
  int *win_b_prev;           /* ... and the index there of each one's previous window in its group (-1: none) */
  int nfifo[2], *fifo[2];    /* offloadable tensors in each stream's queue order */
  Fifo *frow;                /* queue rows (ilp_build_stalls) */
  int nfrow, cap_frow, *frow_first, *frow_by_b;
  int queue_rows[2]; /* the queue rows: [first, end) of the model's rows */
  int queue_nnz;     /* ... and their nonzeros */
  Decision *const *excluded; /* decision vectors the model must not return (no-good rows) */
  int nexcluded;
  Run run; /* scratch of the memory terms */
  Sig sig;
  Lin *ors; /* ... an OR's terms (cap: nors) */
  int nors;
  Row up;   /* ... and a re-run's upper row */
  int64_t host_limit; /* plan_host_bound of a returned vector is at most this (limit_host) */
  EvalCache *cache;   /* ilp_eval_within's base vector and indexes: mutable through a const Ilp */
  bool failed;
} Ilp;

/* What ilp_eval_stalls computes: the stall rows, the copy queues, or both. */
enum { STALL_ROWS = 1, STALL_QUEUES = 2 };

typedef struct Candidate {
  Decision *dec;
  double objective;
  int64_t peak;
  bool ok;
} Candidate;

/* Graphs up to this many ops get the full pull closure; larger ones a
 * bounded depth (docs/PLANNING.md, "Scale"). */
#define ILP_FULL_OPS 300
#define ILP_DEPTH 24

/* Starts within the budget and the hook's polished candidates, kept for
 * the final choice by simulation (the model's best may simulate slower, or
 * not fit by arena, where another one does). */
#define ILP_POOL 16
typedef struct Pool {
  Candidate c[ILP_POOL];
  int n;
} Pool;

/* The solver's hook for its own solutions and the LP's point (milp.c's
 * polish): the decisions read from x (rounded two ways, each repaired to
 * the limit where over it) are improved by the descent with exchanges,
 * offered to the pool, and written back as the exact columns of the
 * improved decisions. */
typedef struct Polish {
  const Ilp *md;
  int64_t limit;
  double *x; /* scratch, ncols */
  long evals;
  double deadline;
  Candidate c;
  bool exchanged; /* a candidate went through the exchanges */
  Pool *pool;
  Candidate searched; /* what ilp_search_x ended at, when ok */
} Polish;

/* ------------------------------------------------------------ model.c */

/* The vocabulary the rows are written in, the structure they index, and
 * the model as a whole. */
Lin ilp_lin_const(double k);
int ilp_new_col(Ilp *md, double lb, double ub, double obj, bool integer);
bool ilp_push(void **arr, int n, int *cap, size_t elem);
Lin ilp_var(Ilp *md, int col);
void ilp_sig_add(Ilp *md, Sig *s, const Lin *f, int n);
void ilp_run_flush(Ilp *md, Run *r, int p1, int64_t bytes);
void ilp_run_step(Ilp *md, Run *r, const Sig *s, int p, int64_t bytes);
int ilp_cand_le(const Ilp *md, int q, int j);
Lin ilp_yle(Ilp *md, int q, int j);
Lin ilp_eq(Ilp *md, int q, int j);
Lin ilp_at_or_after(Ilp *md, int q, int p);
Lin ilp_started_before(Ilp *md, int q, int p);
void ilp_term(Ilp *md, int p0, int p1, const Lin *l, int64_t bytes);
bool ilp_regen(const Ilp *md, int t);
bool ilp_offload_allowed(const Ilp *md, int t);
int ilp_pos_of_rerun(const Ilp *md, int j, int q);
double ilp_op_us(const Ilp *md, int op);
void ilp_free(Ilp *md);
/* A solve's model: every resident tensor on the device (no home columns). */
int ilp_build(Ilp *md, const Graph *g, const Device *d, int64_t budget, bool min_memory, int depth, Err *e);
/* The model without a memory limit, with the home columns (homes.c): what
 * a plan's predicted peak and objective are evaluated in. */
int ilp_build_with_homes(Ilp *md, const Graph *g, const Device *d, int depth, Err *e);
/* The model with the home columns at a budget, relaxed so that its LP's
 * optimum bounds the objective of every decision vector of the family
 * that fits (homes, host optimizers and activations together): the
 * windows count the home copies and the host stream has rows
 * (ilp_build_home_windows). Not `exact`: F's early need and X's
 * extension are left out (homes.c) and the windows end at a grid of ops,
 * for a cheaper relaxation. `exact`: both terms in, so that its memory
 * rows are the evaluated model's, and every op ends windows, so that its
 * stall rows differ from the evaluation only by the windows' static
 * approximations; what plan_ilp_homes_bound solves as a MILP
 * (docs/PLANNING.md section 3, "The MILP over homes"). */
int ilp_build_homes_bound(Ilp *md, const Graph *g, const Device *d, int64_t budget, int depth, bool exact, Err *e);

/* ------------------------------------------------------------ memory.c */

/* Called by ilp_build, in this order. */
void ilp_build_memory(Ilp *md);
void ilp_build_rows(Ilp *md, int64_t budget);
/* A prefetched copy of t (alive: its condition) needed at op `need`,
 * issued at op `issue` (plan_prefetch_issue_after(bytes, need, after)):
 * live earlier, from the issue point of a forward consumer's re-run that
 * needs it first (the re-run's op, by Y). */
void ilp_early_need(Ilp *md, int t, const Lin *alive, int after, int need, int issue, int64_t bytes);
/* Live (alive) from position p0 on while one of t's forward consumers
 * still has to re-run (a re-run reads t, so it extends t's residency). */
void ilp_extension(Ilp *md, int t, int p0, const Lin *alive, int64_t bytes);

/* ------------------------------------------------------------ homes.c */

/* Called by ilp_build after the memory terms: colH, colF and colX, and
 * where md->homes the columns H and F of the params and optimizer state
 * the step writes, X of the optimizer ops the host may run, their terms,
 * H + F <= 1 and X <= H + F of each of its op's operands. */
void ilp_build_homes(Ilp *md);
/* Sets the home and host-optimizer columns of dec in x (after the
 * decisions' columns): -1 for a home or host optimizer the model has no
 * column for, or a host optimizer whose operands are not host-homed. A
 * solve's model (no home columns) reads every home as the device's. */
int ilp_eval_homes(const Ilp *md, const Decision *dec, double *x);
/* The host row's bytes at x: every offloaded tensor, host home and host
 * optimizer's grad, its bytes aligned (plan_host_share). */
int64_t ilp_host_bytes(const Ilp *md, const double *x);

/* ------------------------------------------------------------ stalls.c */

/* A copy stream's issue and due op of an offloadable tensor (stream 0:
 * offload, 1: prefetch), the stall rows, and the stalls of a vector. */
int ilp_issue_op(const Ilp *md, int stream, int t);
int ilp_due_op(const Ilp *md, int stream, int t);
void ilp_build_stalls(Ilp *md);
/* A bound model's windows (ilp_build_stalls builds none there), over the
 * offloaded activations' copies and the home copies together, one row
 * per stream over all its copies, and the host stream's rows; after
 * ilp_build_homes. */
void ilp_build_home_windows(Ilp *md);
/* rerun: plan_family_positions' re-run ops of dec, whose time comes
 * before a host op (NULL: none counted). Returns Q at the last op, or a
 * lower bound of it at least stop_at where the pass stopped early. */
double ilp_eval_stalls(const Ilp *md, const Decision *dec, const int *rerun, int parts, double stop_at, double *x);

/* ------------------------------------------------------------ cuts.c */

/* MilpOptions.separate. */
void ilp_separate(void *ctx, const double *x, MilpModel *cuts);

/* ------------------------------------------------------------ eval.c */

/* One decision vector's columns and peak, the decisions read from a
 * point, and a point's objective. */
int ilp_eval(const Ilp *md, const Decision *dec, double *x, int64_t *peak);
/* ilp_eval for a vector its caller takes only if its objective is below
 * obj_cap and its peak at most peak_cap: 1 (*peak and *obj as ilp_eval
 * and ilp_objective_of give them, bit for bit) when both hold, 0 when
 * either fails, -1 as ilp_eval. obj NULL: the peak alone is asked for
 * (obj_cap unused). Incremental: a vector a few decisions away from the
 * last one evaluated whole is evaluated from that one's columns (x:
 * scratch of ncols, unspecified on return). */
int ilp_eval_within(const Ilp *md, const Decision *dec, double *x, double obj_cap, int64_t peak_cap, int64_t *peak,
                    double *obj);
EvalCache *ilp_eval_cache_new(void);
void ilp_eval_cache_free(EvalCache *c);
void ilp_decisions_from_x(const Ilp *md, const double *x, Decision *dec);
double ilp_objective_of(const Ilp *md, const double *x);

/* ------------------------------------------------------------ search.c */

/* Candidates kept by the model's objective, the descent, the kicks, the
 * pool, and the solver's hooks (MilpOptions.polish and .search). */
void ilp_offer(const Ilp *md, Candidate *best, const Decision *dec, int64_t peak, double obj, int64_t limit);
/* Whether dec's host arena (plan_host_bound) is within md's host limit. */
bool ilp_host_fits(const Ilp *md, const Decision *dec);
void ilp_consider(const Ilp *md, Candidate *best, const Decision *dec, int64_t limit, double *x);
void ilp_improve(const Ilp *md, Candidate *best, int64_t limit, double *x, double deadline, long evals, bool exchanges);
void ilp_pool_add(Pool *pool, const Graph *g, const Candidate *k);
void ilp_kick(const Ilp *md, Candidate *best, const double *point, double bound, int64_t limit, double *x, double deadline,
              long evals);
bool ilp_search_x(void *ctx, double *cols, const double *point, double bound);
bool ilp_polish_x(void *ctx, double *cols);

/* ------------------------------------------------------------ repair.c */

/* Changes judged by the simulator itself: the model's stall estimate is
 * not the simulator's (docs/PLANNING.md), and on small graphs the
 * simulator is cheap. Graphs with more stashed tensors get none. */
#define ILP_POLISH_MAX 64

static inline bool ilp_out_of_time(double deadline) { return deadline < HUGE_VAL && util_now() >= deadline; }

/* Whether DEC's plan fits the budget and steps under BELOW (HUGE_VAL: any
 * step): its step into *step. */
bool ilp_try_plan(const Graph *g, const Device *d, int64_t budget, const Decision *dec, double below, double *step);

/* The repairs of one budget: from each state a repair passed through
 * (decisions and arena) to where it ended. */
typedef struct Repairs {
  int ntensors, n, cap;
  Decision *from, *to;
  int64_t *from_arena, *arena;
} Repairs;
void ilp_repairs_free(Repairs *r);
/* DEC, whose arena ARENA is over the budget, changed one decision at a
 * time while its arena falls, by the fastest change (FASTEST: one that
 * fits if any does, else the fastest that lowers the arena) or the first
 * that lowers it; the arena reached. MEMO (or NULL): the repairs of this
 * budget so far, of the same kind; a repair that reaches a state of one
 * ends where that one did (a step is a function of the state alone). */
int64_t ilp_repair(const Graph *g, const Device *d, int64_t budget, Decision *dec, int64_t arena, bool fastest, double deadline,
                   Repairs *memo);
/* Single changes, then pairs on the smallest graphs, that keep DEC within
 * the budget and make it faster than *best, until none does: whether any
 * did (DEC and *best then the faster plan's). */
bool ilp_polish(const Graph *g, const Device *d, int64_t budget, Decision *dec, double *best, double deadline);

/* ------------------------------------------------------------ solve.c */

/* The restrictions a solve adds that a check of the model must add too. */
void ilp_remove_dominated(Ilp *md);
void ilp_keep_forbidden_offloads(const Ilp *md, Decision *dec);

#endif
