/*
 * test_layout.c - the static layout (layout_pack, layout_lower_bound) on
 * generated interval sets:
 *   - every layout is valid: aligned offsets, no two items whose steps
 *     overlap share a byte, arena = max(offset + bytes);
 *   - the arena is never below the lower bound, never above what the
 *     previous layout (largest first, best fit; reimplemented here as the
 *     reference) gives, and the same inputs give the same offsets;
 *   - on laminar lifetimes (any two nested or disjoint, as a training
 *     step's stashes are) with aligned sizes the arena is the bound: start
 *     order with first fit puts each item at most at the sum of the items
 *     live at its start, one of the portfolio's candidates;
 *   - on tilings of a bytes x steps rectangle (a layout at the bound exists
 *     by construction, the greedy orders may miss it) never above the
 *     reference, and how often each meets the bound is printed;
 *   - the lower bound matches a brute-force count;
 *   - on a real plan (llama-tiny keep-all, 1.1% over its peak before) the
 *     arena is the peak;
 *   - a built plan's device lower bound (layout_device_lower_bound, which
 *     lets the ilp skip the layout of a plan that cannot fit) is at most
 *     the arena of the same decisions laid out, at least their peak live
 *     bytes, for random decision vectors on gpt2-tiny;
 *   - the memo of packs (layout_memo_enter/leave): the same offsets and
 *     arena from it as computed without it, one entry per list of items,
 *     none added for a list it holds, kept across a nested leave and gone
 *     after the outermost.
 */
#include "ration.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state;
static unsigned rnd(unsigned n) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned)((rng_state >> 33) % n);
}

/* The input order must not matter. */
static void shuffle(LayoutItem *it, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)rnd((unsigned)i + 1);
    LayoutItem t = it[i];
    it[i] = it[j], it[j] = t;
  }
}

static bool overlap(const LayoutItem *a, const LayoutItem *b) { return a->first <= b->last && b->first <= a->last; }

/* The layout this project used before the portfolio: largest first (ties
 * by first step, then index), each into the smallest gap among the placed
 * items it overlaps in time, else on top of them. */
static int64_t reference_pack(const LayoutItem *it, int n, int64_t align) {
  int *order = calloc((size_t)n, sizeof *order), *placed = calloc((size_t)n, sizeof *placed);
  int64_t *off = calloc((size_t)n, sizeof *off), top = 0;
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0; j--) {
      const LayoutItem *a = &it[order[j - 1]], *b = &it[order[j]];
      bool after = a->bytes < b->bytes || (a->bytes == b->bytes && a->first > b->first);
      if (!after) break;
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  for (int i = 0, np = 0; i < n; i++) {
    int x = order[i];
    int64_t cursor = 0, best = -1, best_gap = INT64_MAX;
    for (int k = 0; k < np; k++) { /* placed is in offset order */
      int b = placed[k];
      if (!overlap(&it[b], &it[x])) continue;
      if (off[b] > cursor && off[b] - cursor >= it[x].bytes && off[b] - cursor < best_gap)
        best = cursor, best_gap = off[b] - cursor;
      int64_t end = util_align_up(off[b] + it[b].bytes, align);
      if (end > cursor) cursor = end;
    }
    off[x] = best >= 0 ? best : cursor;
    if (off[x] + it[x].bytes > top) top = off[x] + it[x].bytes;
    int j = np++;
    for (; j > 0 && (off[placed[j - 1]] > off[x] || (off[placed[j - 1]] == off[x] && placed[j - 1] > x)); j--)
      placed[j] = placed[j - 1];
    placed[j] = x;
  }
  free(order);
  free(placed);
  free(off);
  return top;
}

/* "" when the layout is valid, else what is wrong. */
static const char *check_layout(const LayoutItem *it, int n, int64_t align, const int64_t *off, int64_t arena) {
  int64_t top = 0;
  for (int i = 0; i < n; i++) {
    if (off[i] < 0 || off[i] % align) return "an offset is negative or unaligned";
    if (off[i] + it[i].bytes > top) top = off[i] + it[i].bytes;
    for (int j = i + 1; j < n; j++)
      if (overlap(&it[i], &it[j]) && off[i] < off[j] + it[j].bytes && off[j] < off[i] + it[i].bytes)
        return "two items live at the same step share bytes";
  }
  return top == arena ? "" : "arena is not max(offset + bytes)";
}

/* Packs it in a shuffled order: true when the layout is valid. */
static bool shuffled_pack(LayoutItem *it, int n, int64_t *off, int64_t *arena) {
  shuffle(it, n);
  *arena = -1;
  return layout_pack(it, n, 256, off, arena) == 0 && !check_layout(it, n, 256, off, *arena)[0];
}

static int64_t brute_lower_bound(const LayoutItem *it, int n, int64_t align) {
  int64_t lb = 0;
  for (int s = 0; s < 64; s++) {
    int64_t sum = 0, pad = 0;
    for (int i = 0; i < n; i++)
      if (it[i].first <= s && s <= it[i].last) {
        int64_t a = util_align_up(it[i].bytes, align);
        sum += a;
        if (a - it[i].bytes > pad) pad = a - it[i].bytes;
      }
    if (sum - pad > lb) lb = sum - pad;
  }
  return lb;
}

static void random_sets(void) {
  enum { N = 120 };
  LayoutItem it[N];
  int64_t off[N], again[N];
  int worse = 0, invalid = 0, below = 0, unstable = 0, lb_wrong = 0, better = 0, at_bound = 0, sets = 0;
  for (unsigned seed = 1; seed <= 300; seed++) {
    rng_state = seed;
    int n = 1 + (int)rnd(N), steps = 2 + (int)rnd(62);
    int64_t align = seed % 3 == 0 ? 1 : 256;
    bool whole_items = seed % 2;
    for (int i = 0; i < n; i++) {
      /* sizes from 1 byte to 64 KiB, some unaligned; lifetimes short and long */
      int64_t bytes = seed % 5 == 0 ? 1 + rnd(70000) : (int64_t)(1 + rnd(16)) * 4096 - (rnd(4) == 0 ? rnd(200) : 0);
      int a = (int)rnd((unsigned)steps), b = rnd(3) == 0 ? (int)rnd((unsigned)steps) : a + (int)rnd(4);
      if (b >= steps) b = steps - 1;
      if (whole_items && rnd(4) == 0) a = 0, b = steps - 1;
      it[i] = (LayoutItem){bytes, a < b ? a : b, a < b ? b : a};
    }
    int64_t arena = -1, arena2 = -1, ref = reference_pack(it, n, align), lb = layout_lower_bound(it, n, align);
    int rc = layout_pack(it, n, align, off, &arena), rc2 = layout_pack(it, n, align, again, &arena2);
    sets++;
    const char *why = rc == 0 ? check_layout(it, n, align, off, arena) : "layout_pack failed";
    if (why[0]) {
      if (!invalid++) printf("  seed %u: %s\n", seed, why);
      continue;
    }
    worse += arena > ref;
    better += arena < ref;
    below += arena < lb;
    at_bound += arena == lb;
    lb_wrong += lb != brute_lower_bound(it, n, align);
    unstable += rc2 != 0 || arena2 != arena || memcmp(off, again, (size_t)n * sizeof *off) != 0;
  }
  T_CASE("random interval sets: valid, never above the previous layout, never below the bound, deterministic") {
    T_CHECKF(invalid == 0, "%d of %d layouts invalid", invalid, sets);
    T_CHECKF(worse == 0, "%d of %d arenas above the reference layout's", worse, sets);
    T_CHECKF(below == 0, "%d arenas below the lower bound", below);
    T_CHECKF(lb_wrong == 0, "%d lower bounds differ from the brute-force count", lb_wrong);
    T_CHECKF(unstable == 0, "%d packs gave different offsets on a second run", unstable);
    printf("  %d sets: smaller than the reference in %d, at the lower bound in %d\n", sets, better, at_bound);
  }
}

/* Cuts the rectangle [lo, lo + h) bytes x [t0, t1] steps into items: each
 * cut splits it in bytes (both parts over the same steps) or in steps. */
static void tile(LayoutItem *it, int *n, int cap, int64_t h, int t0, int t1, int depth) {
  bool can_bytes = h >= 512, can_steps = t1 > t0;
  if (*n + 2 > cap || depth == 0 || (!can_bytes && !can_steps) || rnd(5) == 0) {
    it[(*n)++] = (LayoutItem){h, t0, t1};
    return;
  }
  if (can_bytes && (!can_steps || rnd(2))) {
    int64_t cut = 256 * (1 + (int64_t)rnd((unsigned)(h / 256 - 1)));
    tile(it, n, cap, cut, t0, t1, depth - 1);
    tile(it, n, cap, h - cut, t0, t1, depth - 1);
  } else {
    int cut = t0 + (int)rnd((unsigned)(t1 - t0));
    tile(it, n, cap, h, t0, cut, depth - 1);
    tile(it, n, cap, h, cut + 1, t1, depth - 1);
  }
}

static void tilings(void) {
  enum { CAP = 400 }; /* splits stop at CAP; the pending halves (one per level, <= 16) may pass it */
  LayoutItem it[CAP + 16];
  int64_t off[CAP + 16];
  int missed = 0, invalid = 0, sets = 0, ref_missed = 0, lb_wrong = 0, worse = 0;
  for (unsigned seed = 1; seed <= 200; seed++) {
    rng_state = 1000 + seed;
    int n = 0, steps = 4 + (int)rnd(120);
    int64_t h = 256 * (int64_t)(8 + rnd(4000));
    tile(it, &n, CAP, h, 0, steps - 1, 4 + (int)rnd(12));
    int64_t arena;
    sets++;
    if (!shuffled_pack(it, n, off, &arena)) {
      invalid++;
      continue;
    }
    lb_wrong += layout_lower_bound(it, n, 256) != h;
    missed += arena != h;
    int64_t ref = reference_pack(it, n, 256);
    ref_missed += ref != h;
    worse += arena > ref;
  }
  T_CASE("tilings of a rectangle (optimum known): valid, never above the reference") {
    T_CHECKF(invalid == 0, "%d of %d invalid", invalid, sets);
    T_CHECKF(lb_wrong == 0, "%d lower bounds are not the rectangle's height", lb_wrong);
    T_CHECKF(worse == 0, "%d of %d above the reference layout's arena", worse, sets);
    printf("  %d tilings: at the optimum in %d (the reference layout in %d)\n", sets, sets - missed, sets - ref_missed);
  }
}

/* Items over [t0, t1], then children over disjoint sub-ranges. */
static void laminar(LayoutItem *it, int *n, int cap, int t0, int t1, int depth) {
  for (int k = 1 + (int)rnd(3); k > 0 && *n < cap; k--)
    it[(*n)++] = (LayoutItem){256 * (int64_t)(1 + rnd(64)), t0, t1};
  for (int t = t0; depth > 0 && t <= t1 && *n < cap;) {
    int len = 1 + (int)rnd((unsigned)(t1 - t + 1));
    if (rnd(3)) laminar(it, n, cap, t, t + len - 1, depth - 1);
    t += len;
  }
}

static void laminar_sets(void) {
  enum { CAP = 300 };
  LayoutItem it[CAP];
  int64_t off[CAP];
  int missed = 0, invalid = 0, sets = 0;
  for (unsigned seed = 1; seed <= 200; seed++) {
    rng_state = 5000 + seed;
    int n = 0;
    laminar(it, &n, CAP, 0, 10 + (int)rnd(200), 2 + (int)rnd(5));
    int64_t arena;
    sets++;
    if (!shuffled_pack(it, n, off, &arena)) {
      invalid++;
      continue;
    }
    int64_t lb = layout_lower_bound(it, n, 256);
    if (arena != lb && !missed++) printf("  seed %u: %d items, arena %lld, bound %lld\n", seed, n, (long long)arena, (long long)lb);
  }
  T_CASE("laminar lifetimes, aligned sizes: valid, arena at the lower bound") {
    T_CHECKF(invalid == 0, "%d of %d invalid", invalid, sets);
    T_CHECKF(missed == 0, "%d of %d above the bound", missed, sets);
  }
}

static void real_plan(void) {
  Err e;
  Graph *g = graph_load("models/llama-tiny.json", &e);
  Device *d = g ? device_load("budgets/h100-sxm-80g.json", &e) : NULL;
  T_CASE("llama-tiny keep-all: arena equals peak live bytes, plan valid") {
    T_CHECKF(d != NULL, "%s", e.msg);
    Decision *dec = g ? calloc((size_t)g->ntensors, sizeof *dec) : NULL;
    Plan *p = NULL;
    if (d && dec) {
      for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_KEEP;
      p = plan_from_decisions(g, d, dec, &e);
      T_CHECKF(p != NULL, "%s", e.msg);
    }
    if (p) {
      T_CHECKF(p->arena_bytes == p->predicted.peak_live_bytes, "arena %lld, peak %lld", (long long)p->arena_bytes,
               (long long)p->predicted.peak_live_bytes);
      p->budget_bytes = p->arena_bytes;
      T_CHECKF(sim_check(p, g, &e) == 0, "%s", e.msg);
    }
    plan_free(p);
    free(dec);
  }
  device_free(d);
  graph_free(g);
}

static void plan_bounds(void) {
  Err e;
  Graph *g = graph_load("models/gpt2-tiny.json", &e);
  Device *d = g ? device_load("budgets/h100-sxm-80g.json", &e) : NULL;
  T_CASE("gpt2-tiny, 200 random decision vectors: peak <= device lower bound <= arena") {
    T_CHECKF(d != NULL, "%s", e.msg);
    Decision *dec = d ? calloc((size_t)g->ntensors, sizeof *dec) : NULL;
    int bad = 0, tight = 0, n = 0;
    rng_state = 11;
    for (int k = 0; dec && k < 200; k++) {
      for (int t = 0; t < g->ntensors; t++) dec[t] = DEC_NONE;
      for (int i = 0; i < g->nstashed; i++) dec[g->stashed[i]] = (Decision)(DEC_KEEP + rnd(3));
      Plan *s = plan_schedule_decisions(g, d, dec, &e), *p = plan_from_decisions(g, d, dec, &e);
      if (s && p) {
        int64_t lb = layout_device_lower_bound(s, g);
        n++;
        bad += lb < p->predicted.peak_live_bytes || lb > p->arena_bytes;
        tight += lb == p->arena_bytes;
      }
      plan_free(s);
      plan_free(p);
    }
    T_CHECKF(n == 200 && bad == 0, "%d of %d plans built, %d outside [peak, arena]", n, 200, bad);
    printf("  %d of %d arenas at the bound\n", tight, n);
    free(dec);
  }
  device_free(d);
  graph_free(g);
}


static void memo_packs(void) {
  enum { N = 150, SETS = 200 };
  static LayoutItem it[SETS][N];
  static int64_t off[SETS][N], arena[SETS], again[N];
  static int count[SETS];
  int invalid = 0, differs = 0, count_wrong = 0;
  /* computed, outside any memo */
  for (int k = 0; k < SETS; k++) {
    rng_state = (uint64_t)(k + 1) * 7919;
    int n = count[k] = 2 + (int)rnd(N - 1), steps = 2 + (int)rnd(40);
    for (int i = 0; i < n; i++) {
      int64_t bytes = (int64_t)(1 + rnd(6)) * 4096 - (rnd(3) == 0 ? 100 : 0);
      int a = (int)rnd((unsigned)steps), b = a + (int)rnd(6);
      it[k][i] = (LayoutItem){bytes, a, b >= steps ? steps - 1 : b};
    }
    if (layout_pack(it[k], n, 256, off[k], &arena[k]) || check_layout(it[k], n, 256, off[k], arena[k])[0]) invalid++;
  }
  int outside = layout_memo_size();
  /* each set twice inside a nested memo: the first pack is remembered,
   * the second comes from the memo */
  layout_memo_enter();
  layout_memo_enter();
  for (int k = 0; k < SETS; k++) {
    int n = count[k], before = layout_memo_size();
    for (int pass = 0; pass < 2; pass++) {
      int64_t a = -1;
      memset(again, 0xff, sizeof again);
      int rc = layout_pack(it[k], n, 256, again, &a);
      differs += rc != 0 || a != arena[k] || memcmp(again, off[k], (size_t)n * sizeof *again) != 0;
      count_wrong += layout_memo_size() != before + 1;
    }
  }
  layout_memo_leave();
  int inner_left = layout_memo_size();
  layout_memo_leave();
  T_CASE("the memo of packs: the computed offsets, one entry per list, kept to the outermost leave") {
    T_CHECKF(invalid == 0, "%d of %d layouts failed or invalid", invalid, SETS);
    T_CHECKF(outside == 0, "%d packs remembered outside a memo", outside);
    T_CHECKF(differs == 0, "%d of %d packs inside the memo differ from the computed ones", differs, 2 * SETS);
    T_CHECKF(count_wrong == 0, "%d packs not remembered once", count_wrong);
    T_CHECKF(inner_left == SETS && layout_memo_size() == 0, "memo held %d packs after the inner leave (want %d), %d after the outer",
             inner_left, SETS, layout_memo_size());
  }
}

int main(void) {
  memo_packs();
  plan_bounds();
  random_sets();
  tilings();
  laminar_sets();
  real_plan();
  T_DONE();
}
