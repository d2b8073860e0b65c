/*
 * search.c - the heuristics of the ilp, each judged by the model's exact
 * evaluation: the descent over single changes, exchanges, pair moves,
 * kicks guided by the relaxation, repair of rounded points, and the
 * solver's hooks that run them (docs/PLANNING.md section 5, steps 4 to 7).
 */
#include "ilp.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ILP_KICKS 8          /* kicks guided by the relaxation where the plan is still over ILP_PROOF_GAP, */
#define ILP_KICK_TENSORS 2   /* ... each moving this many tensors, after */
#define ILP_PAIR_TENSORS 40  /* ... every pair among this many of the relaxation's strongest preferences */

/* ------------------------------------------------------------ candidates */

static bool is_excluded(const Ilp *md, const Decision *dec) {
  const Graph *g = md->g;
  for (int k = 0; k < md->nexcluded; k++) {
    int i = 0;
    while (i < g->nstashed && (md->colK[g->stashed[i]] < 0 || md->excluded[k][g->stashed[i]] == dec[g->stashed[i]])) i++;
    if (i == g->nstashed) return true;
  }
  return false;
}

bool ilp_host_fits(const Ilp *md, const Decision *dec) { return plan_host_bound(md->g, dec) <= md->host_limit; }

/* A vector the model may return whatever its peak: not excluded, and its
 * offloads within host memory. */
static bool admissible(const Ilp *md, const Decision *dec) { return !is_excluded(md, dec) && ilp_host_fits(md, dec); }

/* Keeps the better of best and an evaluated decision vector (by model
 * objective among the admissible ones within the memory limit). */
void ilp_offer(const Ilp *md, Candidate *best, const Decision *dec, int64_t peak, double obj, int64_t limit) {
  if (peak > limit || (best->ok && obj >= best->objective - 1e-9) || !admissible(md, dec)) return;
  memcpy(best->dec, dec, (size_t)md->g->ntensors * sizeof(Decision));
  best->objective = obj;
  best->peak = peak;
  best->ok = true;
}

void ilp_consider(const Ilp *md, Candidate *best, const Decision *dec, int64_t limit, double *x) {
  int64_t peak;
  double obj;
  /* Only what ilp_offer would take is evaluated whole. */
  if (ilp_eval_within(md, dec, x, best->ok ? best->objective - 1e-9 : HUGE_VAL, limit, &peak, &obj) == 1)
    ilp_offer(md, best, dec, peak, obj, limit);
}

/* ------------------------------------------------------------ descent and exchanges */

/* One decision change, scored around the vector it was tried on. */
typedef struct Move {
  int t;
  Decision to;
  double delta; /* objective change, us */
  int64_t peak;
  double rank; /* sort key, ascending */
} Move;

static int cmp_move(const void *a, const void *b) {
  const Move *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->t != y->t) return x->t - y->t;
  return (int)x->to - (int)y->to;
}

#define ILP_GAINERS 16 /* gainers that fail before an exchange gives up */
#define ILP_PAYERS 12  /* payers tried per step, the cheapest per byte */
#define ILP_STEPS 12   /* payers taken per gainer, at most */

/* Every single change from best: gainers (faster but over the limit),
 * sorted by their gain; payers (from keep, no faster), sorted by cost per
 * byte. Both arrays hold 2 * nstashed. */
static void score_moves(const Ilp *md, const Candidate *best, int64_t limit, double *x, Decision *cur, long *evals,
                        Move *gain, int *ngain, Move *pay, int *npay) {
  const Graph *g = md->g;
  *ngain = *npay = 0;
  memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
  for (int i = 0; i < g->nstashed && *evals > 0; i++) {
    int t = g->stashed[i];
    if (md->colK[t] < 0) continue;
    Decision was = cur[t];
    for (int dd = DEC_KEEP; dd <= DEC_OFFLOAD; dd++) {
      if (dd == (int)was || (dd == DEC_OFFLOAD && !ilp_offload_allowed(md, t))) continue;
      cur[t] = (Decision)dd;
      int64_t pk;
      double obj;
      (*evals)--;
      if (ilp_eval_within(md, cur, x, HUGE_VAL, INT64_MAX, &pk, &obj) < 0) continue;
      Move mv = {.t = t, .to = (Decision)dd, .delta = obj - best->objective, .peak = pk};
      if (mv.delta < -1e-9 && pk > limit) mv.rank = mv.delta, gain[(*ngain)++] = mv;
      else if (was == DEC_KEEP && mv.delta >= -1e-9) mv.rank = mv.delta / fmax(1, (double)g->tensors[t].bytes), pay[(*npay)++] = mv;
    }
    cur[t] = was;
  }
  qsort(gain, (size_t)*ngain, sizeof(Move), cmp_move);
  qsort(pay, (size_t)*npay, sizeof(Move), cmp_move);
}

/* Pays for the gainer, applied to cur at (peak, obj): each step takes, among
 * the cheapest payers per byte (half of them re-runs, half offloads: small
 * offloads are free alone and crowd out every re-run), the one that lowers
 * the peak at the least cost per byte here (offloads next to each other
 * share a copy queue, so their single costs do not add), until it fits or
 * the gain is spent. */
static void pay_for(const Ilp *md, Decision *cur, const Move *gainer, const Move *pay, int npay, int64_t limit, double base,
                    double *x, long *evals, int64_t *peak, double *obj) {
  for (int step = 0; step < ILP_STEPS && *peak > limit && *obj < base - 1e-9 && *evals > 0; step++) {
    int pick = -1;
    double pick_score = HUGE_VAL, pick_obj = 0;
    int64_t pick_peak = 0;
    int tried[3] = {0, 0, 0};
    for (int b = 0; b < npay && tried[DEC_RECOMPUTE] + tried[DEC_OFFLOAD] < ILP_PAYERS && *evals > 0; b++) {
      int t = pay[b].t;
      if (t == gainer->t || cur[t] != DEC_KEEP || tried[pay[b].to] == ILP_PAYERS / 2) continue;
      cur[t] = pay[b].to;
      if (!ilp_host_fits(md, cur)) {
        cur[t] = DEC_KEEP;
        continue;
      }
      tried[pay[b].to]++;
      int64_t pk;
      double o;
      (*evals)--;
      if (ilp_eval_within(md, cur, x, HUGE_VAL, *peak - 1, &pk, &o) == 1) {
        double score = (o - *obj) / (double)(*peak - pk);
        if (score < pick_score) pick = b, pick_score = score, pick_obj = o, pick_peak = pk;
      }
      cur[t] = DEC_KEEP;
    }
    if (pick < 0) return;
    cur[pay[pick].t] = pay[pick].to;
    *peak = pick_peak, *obj = pick_obj;
  }
}

/* Exchanges at a local optimum of single changes: a gainer (a re-run or an
 * offload taken back, faster but over the memory limit) paid for by
 * payers that free bytes. Single changes cannot move an offload to another
 * layer or trade one costly re-run for two cheap ones; this can. Measured
 * on llama3-8b at the midpoint: the LP's rounded point polished by single
 * changes ends 1.7% above the bound, with exchanges 0.25%. Returns true
 * when best improved. */
static bool exchange(const Ilp *md, Candidate *best, int64_t limit, double *x, long *evals, double deadline) {
  const Graph *g = md->g;
  Decision *cur = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Move *gain = util_xcalloc((size_t)g->nstashed * 2 + 1, sizeof(Move)), *pay = util_xcalloc((size_t)g->nstashed * 2 + 1, sizeof(Move));
  bool improved = false;
  int ngain, npay;
  if (cur && gain && pay) score_moves(md, best, limit, x, cur, evals, gain, &ngain, pay, &npay);
  /* After an accepted exchange the scores are stale but their order
   * still guides: each gainer is evaluated again where it is tried. */
  for (int a = 0, failed = 0; cur && gain && pay && a < ngain && failed < ILP_GAINERS && *evals > 0 && util_now() < deadline;
       a++) {
    double base = best->objective;
    if (cur[gain[a].t] == gain[a].to) continue;
    cur[gain[a].t] = gain[a].to;
    int64_t peak;
    double obj;
    (*evals)--;
    if (ilp_eval_within(md, cur, x, HUGE_VAL, INT64_MAX, &peak, &obj) == 1) {
      pay_for(md, cur, &gain[a], pay, npay, limit, base, x, evals, &peak, &obj);
      if (peak <= limit && obj < base - 1e-9) ilp_consider(md, best, cur, limit, x);
    }
    if (best->objective < base - 1e-9) improved = true;
    else failed++;
    memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
  }
  free(cur), free(gain), free(pay);
  return improved;
}

/* First-improvement descent over single decision changes, judged by the
 * exact evaluation; with exchanges at its local optima when asked: a strong
 * incumbent for branch and bound, which GLPK's own heuristics rarely find
 * on these models. */
void ilp_improve(const Ilp *md, Candidate *best, int64_t limit, double *x, double deadline, long evals, bool exchanges) {
  const Graph *g = md->g;
  if (!best->ok) return;
  Decision *cur = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  if (!cur) return;
  do {
    memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
    for (bool moved = true; moved && evals > 0 && util_now() < deadline;) {
      moved = false;
      for (int i = 0; i < g->nstashed && evals > 0 && util_now() < deadline; i++, evals -= 2) {
        int t = g->stashed[i];
        if (md->colK[t] < 0) continue;
        Decision was = cur[t];
        for (int dd = DEC_KEEP; dd <= DEC_OFFLOAD; dd++) {
          if (dd == (int)was) continue;
          cur[t] = (Decision)dd;
          double before = best->objective;
          ilp_consider(md, best, cur, limit, x);
          if (best->objective < before - 1e-9) {
            was = cur[t];
            moved = true;
          }
        }
        cur[t] = was;
        memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
      }
    }
  } while (exchanges && evals > 0 && util_now() < deadline && exchange(md, best, limit, x, &evals, deadline));
  free(cur);
}

/* ------------------------------------------------------------ rounding and repair */

/* The point's fractions carried along the stashed (production) order,
 * bytes-weighted, so that consecutive half-offloads become every other
 * tensor offloaded and a window's copy bytes stay what the point spends
 * there, within a tensor. */
static void decisions_diffused(const Ilp *md, const double *x, Decision *dec) {
  const Graph *g = md->g;
  double carry[3] = {0, 0, 0};
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i];
    if (md->colK[t] < 0) {
      dec[t] = DEC_KEEP;
      continue;
    }
    double bytes = fmax(1, (double)g->tensors[t].bytes), v[3] = {x[md->colK[t]], x[md->colR[t]], x[md->colO[t]]};
    int pick = 0;
    double pick_score = -HUGE_VAL;
    for (int d = 0; d < 3; d++) {
      double score = v[d] + carry[d] / bytes;
      if (v[d] > 1e-6 && score > pick_score + 1e-9) pick = d, pick_score = score;
    }
    for (int d = 0; d < 3; d++) carry[d] += (v[d] - (d == pick)) * bytes;
    dec[t] = (Decision)(DEC_KEEP + pick);
  }
}

/* Decisions rounded from a point whose offloads overflow host memory: the
 * offloads the point takes least become re-runs (which free the same
 * device bytes) until the rest fit. */
static void fit_host(const Ilp *md, const double *cols, Decision *dec) {
  const Graph *g = md->g;
  while (!ilp_host_fits(md, dec)) {
    int pick = -1;
    for (int i = 0; i < g->nstashed; i++) {
      int t = g->stashed[i];
      if (dec[t] == DEC_OFFLOAD && md->colO[t] >= 0 && (pick < 0 || cols[md->colO[t]] < cols[md->colO[pick]])) pick = t;
    }
    if (pick < 0) return;
    dec[pick] = DEC_RECOMPUTE;
  }
}

/* Decisions rounded from a fractional point whose peak is over the limit:
 * the tensors the point keeps least go, one at a time, to the choice it
 * prefers after keep, while that lowers the peak, until it fits. One
 * evaluation per tensor at most, in the point's own order. */
static void repair(const Ilp *md, const double *cols, Decision *dec, int64_t limit, double *x) {
  const Graph *g = md->g;
  fit_host(md, cols, dec);
  int64_t peak;
  if (ilp_eval_within(md, dec, x, 0, INT64_MAX, &peak, NULL) < 0 || peak <= limit) return;
  int *order = util_xcalloc((size_t)g->nstashed + 1, sizeof(int)), n = 0;
  if (!order) return;
  for (int i = 0; i < g->nstashed; i++)
    if (md->colK[g->stashed[i]] >= 0 && dec[g->stashed[i]] == DEC_KEEP) order[n++] = g->stashed[i];
  for (int i = 1; i < n; i++) /* insertion sort by the point's K, ties by tensor: deterministic */
    for (int j = i; j > 0; j--) {
      int a = order[j - 1], b = order[j];
      if (cols[md->colK[a]] < cols[md->colK[b]] || (cols[md->colK[a]] == cols[md->colK[b]] && a < b)) break;
      order[j - 1] = b, order[j] = a;
    }
  for (int i = 0; i < n && peak > limit; i++) {
    int t = order[i];
    dec[t] = ilp_offload_allowed(md, t) && cols[md->colO[t]] > cols[md->colR[t]] ? DEC_OFFLOAD : DEC_RECOMPUTE;
    if (!ilp_host_fits(md, dec)) dec[t] = DEC_RECOMPUTE;
    int64_t pk;
    if (ilp_eval_within(md, dec, x, 0, peak - 1, &pk, NULL) == 1) peak = pk;
    else dec[t] = DEC_KEEP;
  }
  free(order);
}

/* ------------------------------------------------------------ pairs and kicks */

typedef struct Doubt {
  int t;
  Decision to;  /* the relaxation's choice among the other two */
  double pull;  /* its value there less its value at the plan's choice */
} Doubt;

static int cmp_doubt(const void *a, const void *b) {
  const Doubt *x = a, *y = b;
  if (x->pull != y->pull) return x->pull > y->pull ? -1 : 1;
  return x->t - y->t;
}

/* The tensors whose decision in best the relaxation's point does not take
 * whole, each with the choice the point prefers among the other two. */
static int doubts(const Ilp *md, const Candidate *best, const double *point, Doubt *out) {
  const Graph *g = md->g;
  int n = 0;
  for (int i = 0; i < g->nstashed; i++) {
    int t = g->stashed[i], at = best->dec[t] - DEC_KEEP, to = -1;
    if (md->colK[t] < 0) continue;
    double v[3] = {point[md->colK[t]], point[md->colR[t]], point[md->colO[t]]};
    if (v[at] >= 1 - 1e-6) continue;
    for (int d = 0; d < 3; d++)
      if (d != at && (d != DEC_OFFLOAD - DEC_KEEP || ilp_offload_allowed(md, t)) && (to < 0 || v[d] > v[to])) to = d;
    if (to >= 0) out[n++] = (Doubt){t, (Decision)(DEC_KEEP + to), v[to] - v[at]};
  }
  return n;
}

/* Every pair of the most doubted tensors moved together to the point's
 * choice, the best pair taken if it beats best. Neither change alone need
 * pay (the descent tried each) where the pair does: one tensor takes the
 * copy time or the memory the other gives up, which the exchanges (memory
 * only, for a change over the budget) do not try. unet at f = 0: the plan
 * recomputed d2.b1.conv.y (a 629 us convolution) and offloaded d2.b2.act.y;
 * each flip alone is slower or over the budget, the swap 1.5% faster. */
static bool pairs(const Ilp *md, Candidate *best, const double *point, int64_t limit, double *x, long *evals,
                  double deadline) {
  const Graph *g = md->g;
  Doubt *d = util_xcalloc((size_t)g->nstashed + 1, sizeof(Doubt));
  Decision *cur = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  bool improved = false;
  if (d && cur) {
    int n = doubts(md, best, point, d);
    qsort(d, (size_t)n, sizeof(Doubt), cmp_doubt);
    if (n > ILP_PAIR_TENSORS) n = ILP_PAIR_TENSORS;
    memcpy(cur, best->dec, (size_t)g->ntensors * sizeof(Decision));
    double top = best->objective;
    int pi = -1, pj = -1;
    for (int i = 0; i < n && *evals > 0 && util_now() < deadline; i++) {
      cur[d[i].t] = d[i].to;
      for (int j = i + 1; j < n && *evals > 0; j++) {
        cur[d[j].t] = d[j].to;
        int64_t pk;
        double obj;
        (*evals)--;
        if (ilp_eval_within(md, cur, x, top - 1e-9, limit, &pk, &obj) == 1 && admissible(md, cur))
          top = obj, pi = i, pj = j;
        cur[d[j].t] = best->dec[d[j].t];
      }
      cur[d[i].t] = best->dec[d[i].t];
    }
    if (pi >= 0) {
      cur[d[pi].t] = d[pi].to, cur[d[pj].t] = d[pj].to;
      ilp_consider(md, best, cur, limit, x);
      improved = true;
    }
  }
  free(d), free(cur);
  return improved;
}

/* Kicks guided by the relaxation (an iterated local search around the
 * best plan): where it is still more than ILP_PROOF_GAP above the bound,
 * ILP_KICK_TENSORS of the tensors whose decision in the best plan the LP's
 * point does not take whole move to the choice the point prefers among
 * the others; the result is repaired in the point's keep order and
 * polished with exchanges, and replaces the best plan if faster. The
 * descent cannot leave its local optimum by single changes and exchanges;
 * the point says which way to jump. The pair moves go first, until no
 * pair is faster. The doubted tensors are taken again from each new best
 * plan, as its decisions are what the next kick moves. Deterministic: a
 * fixed-seed generator. */
void ilp_kick(const Ilp *md, Candidate *best, const double *point, double bound, int64_t limit, double *x, double deadline,
              long evals) {
  const Graph *g = md->g;
  Decision *kicked = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Decision *polished = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
  Doubt *doubted = util_xcalloc((size_t)g->nstashed + 1, sizeof(Doubt));
  uint64_t seed = 0x9e3779b97f4a7c15u;
  for (long pair_evals = evals; (best->objective - bound) > ILP_PROOF_GAP * best->objective &&
                                pairs(md, best, point, limit, x, &pair_evals, deadline);)
    ilp_improve(md, best, limit, x, deadline, evals, true);
  for (int round = 0; kicked && polished && doubted && round < ILP_KICKS &&
                      (best->objective - bound) > ILP_PROOF_GAP * best->objective && util_now() < deadline;
       round++) {
    int ndoubted = doubts(md, best, point, doubted);
    if (!ndoubted) break;
    memcpy(kicked, best->dec, (size_t)g->ntensors * sizeof(Decision));
    for (int i = 0; i < ILP_KICK_TENSORS; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      const Doubt *k = &doubted[(seed >> 33) % (uint64_t)ndoubted];
      kicked[k->t] = k->to;
    }
    repair(md, point, kicked, limit, x);
    Candidate c = {.dec = polished};
    ilp_consider(md, &c, kicked, limit, x);
    if (!c.ok) continue;
    ilp_improve(md, &c, limit, x, deadline, evals, true);
    if (c.objective < best->objective - 1e-9) {
      memcpy(best->dec, c.dec, (size_t)g->ntensors * sizeof(Decision));
      best->objective = c.objective, best->peak = c.peak;
    }
  }
  free(kicked), free(polished), free(doubted);
}

/* ------------------------------------------------------------ the solver's hooks */

/* A candidate the pool does not hold yet, while it has room. */
void ilp_pool_add(Pool *pool, const Graph *g, const Candidate *k) {
  if (!pool || pool->n == ILP_POOL) return;
  for (int i = 0; i < pool->n; i++)
    if (!memcmp(pool->c[i].dec, k->dec, (size_t)g->ntensors * sizeof(Decision))) return;
  Candidate *pc = &pool->c[pool->n++];
  memcpy(pc->dec, k->dec, (size_t)g->ntensors * sizeof(Decision));
  pc->peak = k->peak;
  pc->objective = k->objective;
  pc->ok = true;
}

/* MilpOptions.search: the pair moves and kicks around the incumbent
 * before the proof tree, so that it proves the gap of the better plan. */
bool ilp_search_x(void *ctx, double *cols, const double *point, double bound) {
  Polish *p = ctx;
  Candidate *c = &p->searched;
  Decision *dec = util_xcalloc((size_t)p->md->g->ntensors + 1, sizeof(Decision));
  if (!dec) return false;
  ilp_decisions_from_x(p->md, cols, dec);
  c->ok = false;
  ilp_consider(p->md, c, dec, p->limit, p->x);
  free(dec);
  if (!c->ok) return false;
  double before = c->objective;
  ilp_kick(p->md, c, point, bound, p->limit, p->x, p->deadline, p->evals);
  int64_t pk;
  if (c->objective >= before - 1e-9) return false;
  ilp_pool_add(p->pool, p->md->g, c);
  return ilp_eval(p->md, c->dec, cols, &pk) == 0;
}

bool ilp_polish_x(void *ctx, double *cols) {
  Polish *p = ctx;
  Decision *dec = util_xcalloc((size_t)p->md->g->ntensors + 1, sizeof(Decision));
  if (!dec) return false;
  /* Both roundings, each repaired: the diffused one is the better start
   * where the point spreads offloads over many tensors (llama3-8b at the
   * midpoint: 588,114 us repaired against 607,785; polished, 0.25% and
   * 1.1% above the bound); on an integral point they agree. */
  p->c.ok = false;
  for (int diffused = 0; diffused < 2; diffused++) {
    if (diffused) decisions_diffused(p->md, cols, dec);
    else ilp_decisions_from_x(p->md, cols, dec);
    repair(p->md, cols, dec, p->limit, p->x);
    ilp_consider(p->md, &p->c, dec, p->limit, p->x);
  }
  free(dec);
  if (!p->c.ok) return false;
  ilp_improve(p->md, &p->c, p->limit, p->x, p->deadline, p->evals, true);
  p->exchanged = true;
  ilp_pool_add(p->pool, p->md->g, &p->c);
  int64_t pk;
  return ilp_eval(p->md, p->c.dec, cols, &pk) == 0;
}

/* ------------------------------------------------------------ public */

int plan_ilp_pair_step(const Graph *g, const Device *d, int64_t budget, const Decision *dec, const Decision *prefer,
                       Decision *out, double *objective, Err *e) {
  Ilp md;
  if (ilp_build(&md, g, d, budget, false, g->nops <= ILP_FULL_OPS ? 0 : ILP_DEPTH, e)) return -1;
  int nc = md.m.ncols, rc = -1;
  double *x = util_xcalloc((size_t)nc + 1, sizeof(double)), *point = util_xcalloc((size_t)nc + 1, sizeof(double));
  Candidate best = {.dec = out};
  if (!x || !point) {
    err_set(e, "%s: out of memory", g->path);
    goto out;
  }
  for (int t = 0; t < g->ntensors; t++)
    if (md.colK[t] >= 0)
      point[prefer[t] == DEC_KEEP ? md.colK[t] : prefer[t] == DEC_RECOMPUTE ? md.colR[t] : md.colO[t]] = 1;
  ilp_consider(&md, &best, dec, budget, x);
  if (!best.ok) {
    err_set(e, "%s: the decisions do not fit %lld bytes", g->path, (long long)budget);
    goto out;
  }
  long evals = LONG_MAX;
  pairs(&md, &best, point, budget, x, &evals, HUGE_VAL);
  *objective = best.objective;
  rc = 0;
out:
  free(x), free(point);
  ilp_free(&md);
  return rc;
}
