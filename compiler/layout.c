/*
 * layout.c - static offsets for every buffer in one device arena and one
 * host arena.
 *
 * Placing buffers with fixed lifetimes at offsets so that the arena is
 * smallest is dynamic storage allocation, NP-hard; its lower bound is the
 * peak of live bytes (here with alignment: layout_lower_bound). A single
 * greedy order leaves 1-4% over that bound on some plans, and a plan whose
 * arena is over the budget is rejected even when its live bytes fit. So
 * layout_pack runs a portfolio and keeps the smallest arena:
 *   1. greedy placements under several orders (size, size x lifetime,
 *      the busiest step a buffer is live at, lifetime, start) and two rules
 *      (best fit: the smallest gap that holds the buffer; first fit: the
 *      lowest). Size order with best fit, the approach of TFLite's and XLA's
 *      static planners, is the first and was this file's only candidate, so
 *      the result is never worse than it;
 *   2. then, while the best is above the bound, squeaky-wheel rounds on the
 *      best candidate's order: the buffers that ended above the bound move
 *      to the front (keeping their order) and the greedy runs again.
 * Every step stops once an arena equals the lower bound, and the total work
 * (gaps and buffers scanned) is capped by a count, not by a clock, so the
 * same inputs give the same offsets on any machine.
 *
 * Within one planning run (layout_memo_enter/leave) each list of items is
 * packed once: the searches around the ilp lay out thousands of plans, and
 * their changes of one decision meet the same buffers again.
 */
#include "ration.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LAYOUT_MAX_ARENA (1LL << 62)
/* Scanned entries over all rounds of one pack: about 20 ms on this machine
 * at most, and at most LAYOUT_WORK_PASSES times the first pass, so that
 * small plans (enumerated by the thousand in tests and searches) stay
 * cheap; a pack that meets the bound at once costs one greedy pass. */
#define LAYOUT_WORK_LIMIT 12000000LL
#define LAYOUT_WORK_PASSES 128
#define LAYOUT_SQUEAKY_ROUNDS 200

/* Byte ranges [lo, hi), sorted, disjoint; hi is aligned. */
typedef struct Span {
  int64_t lo, hi;
} Span;

typedef struct Packer {
  const LayoutItem *it;
  int n;
  int64_t align;
  int t0, t1;     /* every item lies within [t0, t1]; spanning it is "whole" */
  int peak_step;  /* a step where the aligned live total is largest */
  int64_t *key;   /* per item: the current order's primary key, larger first */
  int *order;
  int64_t *off;   /* offsets of the greedy pass in progress */
  /* Items placed so far that are not whole, by offset: their byte ranges
   * (hi aligned), and their steps in arrays of their own, followed by
   * PLACED_PAD entries that overlap nothing, so that the scan of which
   * ones an item overlaps reads whole blocks of packed ints (walk). */
  struct Placed {
    int64_t lo, hi;
  } *placed;
  int *placed_first, *placed_last;
  Span *whole;    /* merged ranges of whole items placed so far */
  Span *all;      /* merged ranges of every item placed so far, while a whole item is still to come */
  int64_t *aligned; /* per item: bytes aligned up */
  int nwhole_items;
  int64_t work;
} Packer;

/* walk's block of placed entries tested at once */
#define PLACED_PAD 64

static _Thread_local const Packer *sort_ctx; /* qsort has no context argument in C11 */

static int by_key(const void *a, const void *b) {
  const Packer *k = sort_ctx;
  int x = *(const int *)a, y = *(const int *)b;
  const LayoutItem *p = &k->it[x], *q = &k->it[y];
  if (k->key[x] != k->key[y]) return k->key[x] > k->key[y] ? -1 : 1;
  if (p->bytes != q->bytes) return p->bytes > q->bytes ? -1 : 1;
  if (p->first != q->first) return p->first < q->first ? -1 : 1;
  return x - y;
}

/* Adds [lo, hi) to a span list, merging what it overlaps or touches. */
static void span_add(Span *s, int *n, int64_t lo, int64_t hi) {
  int i = 0, top = *n;
  while (i < top) { /* first span whose end reaches lo */
    int mid = (i + top) / 2;
    if (s[mid].hi < lo) i = mid + 1;
    else top = mid;
  }
  int j = i;
  for (; j < *n && s[j].lo <= hi; j++) {
    if (s[j].lo < lo) lo = s[j].lo;
    if (s[j].hi > hi) hi = s[j].hi;
  }
  memmove(&s[i + 1], &s[j], (size_t)(*n - j) * sizeof *s);
  s[i] = (Span){lo, hi};
  *n += 1 - (j - i);
}

enum { RULE_BEST_FIT, RULE_FIRST_FIT };

/* A walk up the ranges one item overlaps, in offset order: gaps open
 * where the next range starts above everything below it (cursor). */
typedef struct Walk {
  int64_t cursor, best, best_gap, bytes;
  int rule;
} Walk;

/* Offers the next range [lo, hi): true when first fit takes the gap below
 * it, which ends the walk. */
static inline bool walk_offer(Walk *v, int64_t lo, int64_t hi) {
  if (lo > v->cursor && lo - v->cursor >= v->bytes) {
    if (v->rule == RULE_FIRST_FIT) {
      v->best = v->cursor;
      return true;
    }
    if (lo - v->cursor < v->best_gap) v->best = v->cursor, v->best_gap = lo - v->cursor;
  }
  if (hi > v->cursor) v->cursor = hi;
  return false;
}

/* Which of the PLACED_PAD entries with steps pf[i], pl[i] overlap steps
 * [first, last], as bit i. A fixed count of flags over packed ints, which
 * compilers turn into vector compares, then eight flags at a time into
 * bits by one multiply (flag j of x, at bit 8j, lands at bit 56 + j, and
 * no two partial products share a bit): twice as fast as shifting each
 * flag into place, which ran in a quarter of the CPU of gpt2-tiny at its
 * smallest budget (perf). */
static uint64_t overlap_mask(const int *pf, const int *pl, int first, int last) {
  unsigned char flag[PLACED_PAD];
  for (int i = 0; i < PLACED_PAD; i++) flag[i] = (unsigned char)((pf[i] <= last) & (first <= pl[i]));
  uint64_t mask = 0;
  for (int j = 0; j < PLACED_PAD / 8; j++) {
    const unsigned char *b = flag + 8 * j;
    uint64_t x = (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24 | (uint64_t)b[4] << 32 |
                 (uint64_t)b[5] << 40 | (uint64_t)b[6] << 48 | (uint64_t)b[7] << 56;
    mask |= ((x * 0x0102040810204080ull) >> 56) << (8 * j);
  }
  return mask;
}

/* Where item t goes among the placed entries pl (np of them, by offset,
 * their steps in pf and plast, each with PLACED_PAD more that overlap
 * nothing) and the ranges span (nspan, by offset) that hold what it
 * overlaps: walks the entries of pl t overlaps in time merged with span (a
 * span first where both start alike). Adds 1 + a + w to *work: a entries
 * of pl scanned (up to the one below the gap first fit takes, else all), w
 * spans. Which entries overlap t is found a block at a time into a bit
 * mask, without a branch: about half of them do, in no order a branch
 * predictor learns. */
static int64_t walk(const struct Placed *pl, const int *pf, const int *plast, int np, const Span *span, int nspan,
                    const LayoutItem *t, int rule, int64_t *work) {
  Walk v = {0, -1, INT64_MAX, t->bytes, rule};
  int first = t->first, last = t->last, a = np, w = 0;
  for (int base = 0; base < np; base += PLACED_PAD) {
    uint64_t overlap = overlap_mask(pf + base, plast + base, first, last);
    for (; overlap; overlap &= overlap - 1) {
      int p = base + __builtin_ctzll(overlap);
      for (; w < nspan && span[w].lo <= pl[p].lo; w++)
        if (walk_offer(&v, span[w].lo, span[w].hi)) {
          a = p, w++;
          goto found;
        }
      if (walk_offer(&v, pl[p].lo, pl[p].hi)) {
        a = p + 1;
        goto found;
      }
    }
  }
  for (; w < nspan; w++)
    if (walk_offer(&v, span[w].lo, span[w].hi)) {
      w++;
      goto found;
    }
found:
  *work += 1 + a + w;
  return v.best >= 0 ? v.best : v.cursor;
}

/* One greedy pass in k->order. Gives up (returning at least stop) once the
 * arena reaches stop: it could not be an improvement. */
static int64_t greedy(Packer *k, int rule, int64_t stop) {
  int nplaced = 0, nwhole = 0, nall = 0, wholes_left = k->nwhole_items;
  int64_t top = 0;
  for (int i = 0; i < k->n + PLACED_PAD; i++) k->placed_first[i] = INT_MAX, k->placed_last[i] = INT_MIN;
  for (int i = 0; i < k->n; i++) {
    int x = k->order[i];
    const LayoutItem *t = &k->it[x];
    bool is_whole = t->first <= k->t0 && t->last >= k->t1;
    /* A whole item overlaps everything placed, so the union of ranges
     * stands for all of it. */
    int64_t at = is_whole ? walk(k->placed, k->placed_first, k->placed_last, 0, k->all, nall, t, rule, &k->work)
                          : walk(k->placed, k->placed_first, k->placed_last, nplaced, k->whole, nwhole, t, rule, &k->work);
    k->off[x] = at;
    if (at + t->bytes > top) top = at + t->bytes;
    if (top >= stop) return top;
    /* at is aligned (every range ends aligned), so this is at + bytes aligned up */
    int64_t hi = at + k->aligned[x];
    wholes_left -= is_whole;
    if (wholes_left) span_add(k->all, &nall, at, hi); /* only whole items read it */
    if (is_whole) {
      span_add(k->whole, &nwhole, at, hi);
    } else {
      int lo = 0, up = nplaced; /* after every entry that starts at or below at */
      while (lo < up) {
        int mid = (lo + up) / 2;
        if (k->placed[mid].lo <= at) lo = mid + 1;
        else up = mid;
      }
      memmove(&k->placed[lo + 1], &k->placed[lo], (size_t)(nplaced - lo) * sizeof *k->placed);
      memmove(&k->placed_first[lo + 1], &k->placed_first[lo], (size_t)(nplaced - lo) * sizeof *k->placed_first);
      memmove(&k->placed_last[lo + 1], &k->placed_last[lo], (size_t)(nplaced - lo) * sizeof *k->placed_last);
      k->placed[lo] = (struct Placed){at, hi};
      k->placed_first[lo] = t->first, k->placed_last[lo] = t->last;
      nplaced++;
    }
  }
  return top;
}

typedef struct Pad {
  int64_t pad;
  int item;
} Pad;

static int by_pad_desc(const void *a, const void *b) {
  const Pad *x = a, *y = b;
  if (x->pad != y->pad) return x->pad > y->pad ? -1 : 1;
  return x->item - y->item;
}

int64_t layout_lower_bound(const LayoutItem *items, int n, int64_t align) {
  int steps = 1;
  for (int i = 0; i < n; i++)
    if (items[i].last + 1 > steps) steps = items[i].last + 1;
  int64_t *sum = util_xcalloc((size_t)steps + 1, sizeof *sum), *pad = util_xcalloc((size_t)steps, sizeof *pad);
  int *next = util_xcalloc((size_t)steps + 1, sizeof *next);
  Pad *pads = util_xcalloc((size_t)n + 1, sizeof *pads);
  int64_t lb = -1;
  if (!sum || !pad || !next || !pads) goto out;
  int npad = 0;
  for (int i = 0; i < n; i++) {
    int64_t a = util_align_up(items[i].bytes, align);
    sum[items[i].first] += a;
    sum[items[i].last + 1] -= a;
    if (a > items[i].bytes) pads[npad++] = (Pad){a - items[i].bytes, i};
  }
  /* The largest padding live at each step: paint steps in decreasing
   * padding order, skipping painted runs (next[] is a union-find). */
  qsort(pads, (size_t)npad, sizeof *pads, by_pad_desc);
  for (int s = 0; s <= steps; s++) next[s] = s;
  for (int i = 0; i < npad; i++) {
    const LayoutItem *x = &items[pads[i].item];
    for (int s = x->first;;) {
      int r = s;
      while (next[r] != r) r = next[r];
      while (next[s] != r) { /* path compression */
        int up = next[s];
        next[s] = r;
        s = up;
      }
      if (r > x->last) break;
      pad[r] = pads[i].pad;
      next[r] = r + 1;
      s = r + 1;
    }
  }
  /* At a step, every live buffer but the highest takes its aligned size. */
  int64_t live = 0;
  lb = 0;
  for (int s = 0; s < steps; s++) {
    live += sum[s];
    if (live - pad[s] > lb) lb = live - pad[s];
  }
out:
  free(sum);
  free(pad);
  free(next);
  free(pads);
  return lb;
}

/* The orders of the portfolio, most often best first (measured on the
 * checked-in models' plans and random decision vectors). */
enum { ORDER_SIZE, ORDER_AREA, ORDER_BUSIEST, ORDER_LIFETIME, ORDER_START, ORDER_PEAK, ORDER_PEAK_END, ORDER_COUNT };

/* The largest aligned live total over each item's lifetime, from a segment
 * tree of per-step totals. */
static int busiest_keys(Packer *k, int64_t *out) {
  int steps = k->t1 + 1;
  int64_t *tree = util_xcalloc(2 * (size_t)steps + 1, sizeof *tree);
  if (!tree) return -1;
  int64_t *leaf = tree + steps; /* leaf[s], s < steps; leaf[steps] takes the last difference */
  for (int i = 0; i < k->n; i++) {
    int64_t a = util_align_up(k->it[i].bytes, k->align);
    leaf[k->it[i].first] += a;
    leaf[k->it[i].last + 1] -= a;
  }
  for (int s = 1; s < steps; s++) leaf[s] += leaf[s - 1];
  k->peak_step = 0;
  for (int s = 1; s < steps; s++)
    if (leaf[s] > leaf[k->peak_step]) k->peak_step = s;
  for (int v = steps - 1; v >= 1; v--) tree[v] = tree[2 * v] > tree[2 * v + 1] ? tree[2 * v] : tree[2 * v + 1];
  for (int i = 0; i < k->n; i++) {
    int64_t m = 0;
    for (int l = k->it[i].first + steps, r = k->it[i].last + 1 + steps; l < r; l >>= 1, r >>= 1) {
      if (l & 1) m = tree[l] > m ? tree[l] : m, l++;
      if (r & 1) r--, m = tree[r] > m ? tree[r] : m;
    }
    out[i] = m;
  }
  free(tree);
  return 0;
}

static void sort_order(Packer *k, int which, const int64_t *busiest) {
  for (int i = 0; i < k->n; i++) {
    const LayoutItem *t = &k->it[i];
    int64_t len = (int64_t)t->last - t->first + 1;
    k->order[i] = i;
    switch (which) {
    case ORDER_SIZE: k->key[i] = 0; break; /* by_key falls through to size */
    /* bytes < 2^62 and len < 2^31: saturate rather than overflow */
    case ORDER_AREA: k->key[i] = t->bytes > INT64_MAX / len ? INT64_MAX : t->bytes * len; break;
    case ORDER_BUSIEST: k->key[i] = busiest[i]; break;
    case ORDER_LIFETIME: k->key[i] = len; break;
    /* What is live at the busiest step first, the longest-lived lowest
     * (those whose size is a multiple of the alignment below those padded
     * up to it, so that the top one may end unaligned), then the rest by
     * size: a keep-all step's grads, born in the backward and held to the
     * end, fill what its stashed tensors free from the top (llama-tiny
     * keep-all: 0.48% over the bound without this order, none with it). */
    case ORDER_PEAK:
      k->key[i] = t->first > k->peak_step || k->peak_step > t->last ? 0
                  : LAYOUT_MAX_ARENA + 1 + (t->bytes % k->align ? 0 : (int64_t)INT32_MAX + 1) + t->last;
      break;
    /* The same, each part by end (latest lowest), then start: a plan's
     * grads and its backward's buffers stack as they die (dag-6 of
     * test_exhaustive at its smallest peak: 5760 decision vectors fit it in
     * live bytes, 91 in arena without this order). Steps < 2^26. */
    case ORDER_PEAK_END: {
      int64_t when = ((int64_t)t->last << 27) - t->first;
      bool at_peak = t->first <= k->peak_step && k->peak_step <= t->last;
      k->key[i] = at_peak ? (1LL << 61) + (t->bytes % k->align ? 0 : 1LL << 60) + when : when;
      break;
    }
    default: k->key[i] = -(int64_t)t->first; break;
    }
  }
  sort_ctx = k;
  qsort(k->order, (size_t)k->n, sizeof *k->order, by_key);
}

static int pack(const LayoutItem *items, int n, int64_t align, int64_t *offset, int64_t *arena) {
  *arena = 0;
  if (n == 0) return 0;
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    /* A greedy arena is at most the sum of the aligned sizes. */
    if (items[i].bytes < 0 || items[i].bytes > LAYOUT_MAX_ARENA ||
        !util_add_i64(total, util_align_up(items[i].bytes, align), &total) || total > LAYOUT_MAX_ARENA)
      return -2;
  }
  Packer k = {.it = items, .n = n, .align = align, .t0 = items[0].first, .t1 = items[0].last};
  for (int i = 1; i < n; i++) {
    if (items[i].first < k.t0) k.t0 = items[i].first;
    if (items[i].last > k.t1) k.t1 = items[i].last;
  }
  k.key = util_xcalloc((size_t)n, sizeof *k.key);
  k.order = util_xcalloc((size_t)n, sizeof *k.order);
  k.off = util_xcalloc((size_t)n, sizeof *k.off);
  k.placed = util_xcalloc((size_t)n, sizeof *k.placed);
  k.placed_first = util_xcalloc((size_t)n + PLACED_PAD, sizeof *k.placed_first);
  k.placed_last = util_xcalloc((size_t)n + PLACED_PAD, sizeof *k.placed_last);
  k.whole = util_xcalloc((size_t)n + 1, sizeof *k.whole);
  k.all = util_xcalloc((size_t)n + 1, sizeof *k.all);
  k.aligned = util_xcalloc((size_t)n, sizeof *k.aligned);
  int64_t *busiest = util_xcalloc((size_t)n, sizeof *busiest);
  int *best_order = util_xcalloc((size_t)n, sizeof *best_order), *next_order = util_xcalloc((size_t)n, sizeof *next_order);
  int *saved_order = util_xcalloc((size_t)n, sizeof *saved_order);
  int rc = -1;
  if (!k.key || !k.order || !k.off || !k.placed || !k.placed_first || !k.placed_last || !k.whole || !k.all || !k.aligned || !busiest || !best_order || !next_order || !saved_order ||
      busiest_keys(&k, busiest))
    goto out;
  int64_t lb = layout_lower_bound(items, n, align);
  if (lb < 0) goto out;
  for (int i = 0; i < n; i++) {
    k.aligned[i] = util_align_up(items[i].bytes, align);
    k.nwhole_items += items[i].first <= k.t0 && items[i].last >= k.t1;
  }
  int64_t best = INT64_MAX;
  int best_rule = RULE_BEST_FIT;
  int64_t limit = LAYOUT_WORK_LIMIT;
  for (int c = 0; c < 2 * ORDER_COUNT && best > lb && k.work < limit; c++) {
    int rule = c % 2 ? RULE_FIRST_FIT : RULE_BEST_FIT;
    sort_order(&k, c / 2, busiest);
    int64_t top = greedy(&k, rule, best);
    if (c == 0 && k.work < limit / LAYOUT_WORK_PASSES) limit = k.work * LAYOUT_WORK_PASSES;
    if (top < best) {
      best = top, best_rule = rule;
      memcpy(offset, k.off, (size_t)n * sizeof *offset);
      memcpy(best_order, k.order, (size_t)n * sizeof *best_order);
    }
  }
  /* Squeaky wheel: what stuck out goes first next time. A round's order
   * is a function of the last one's alone (its offsets come from it), so
   * once an order repeats, every later round repeats one already run: the
   * rounds stop there (found as Brent's algorithm does, against an order
   * saved at rounds 1, 2, 4, 8, ...: on the tightest plans of
   * bench/gen_graph.py's graphs the rounds cycle in 46% of the packs that
   * miss the bound, from round 90 of 200 on average; the same arenas). */
  memcpy(k.order, best_order, (size_t)n * sizeof *k.order);
  memcpy(k.off, offset, (size_t)n * sizeof *k.off);
  memcpy(saved_order, best_order, (size_t)n * sizeof *saved_order);
  for (int r = 0, since_saved = 0, saved_span = 1; r < LAYOUT_SQUEAKY_ROUNDS && best > lb && k.work < limit; r++) {
    int m = 0;
    bool moved = false;
    for (int i = 0; i < n; i++)
      if (k.off[k.order[i]] + items[k.order[i]].bytes > lb) moved = moved || m != i, next_order[m++] = k.order[i];
    if (!moved) break; /* already first: the next pass would repeat this one */
    for (int i = 0; i < n; i++)
      if (k.off[k.order[i]] + items[k.order[i]].bytes <= lb) next_order[m++] = k.order[i];
    memcpy(k.order, next_order, (size_t)n * sizeof *k.order);
    if (!memcmp(k.order, saved_order, (size_t)n * sizeof *k.order)) break;
    if (++since_saved == saved_span) {
      memcpy(saved_order, k.order, (size_t)n * sizeof *saved_order);
      saved_span *= 2, since_saved = 0;
    }
    int64_t top = greedy(&k, best_rule, INT64_MAX);
    if (top < best) {
      best = top;
      memcpy(offset, k.off, (size_t)n * sizeof *offset);
    }
  }
  *arena = best;
  rc = 0;
out:
  free(k.key);
  free(k.order);
  free(k.off);
  free(k.placed);
  free(k.placed_first);
  free(k.placed_last);
  free(k.whole);
  free(k.all);
  free(k.aligned);
  free(busiest);
  free(best_order);
  free(next_order);
  free(saved_order);
  return rc;
}

/* ------------------------------------------------------------ packs remembered */

/* A planning run's packs by their items (align, then each item in order),
 * bounded in bytes: past LAYOUT_MEMO_BYTES nothing more is kept, and a
 * pack not found is computed, with the same offsets. */
#define LAYOUT_MEMO_BYTES (256LL << 20)

typedef struct MemoEntry {
  uint64_t hash;
  int n;
  int64_t align, arena;
  LayoutItem *items;
  int64_t *offset;
} MemoEntry;

typedef struct Memo {
  MemoEntry *slot; /* open addressing, linear probing; items NULL: empty */
  size_t cap, count;
  int64_t bytes;
  int depth;
} Memo;

/* One per process, from the first enter to the last leave, so that the
 * threads of a parallel loop (util_parallel_for) share it; what it holds
 * is a function of the items alone, whoever added it. */
static Memo *memo;
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

void layout_memo_enter(void) {
  pthread_mutex_lock(&memo_lock);
  if (!memo) memo = util_xcalloc(1, sizeof *memo);
  if (memo) memo->depth++;
  pthread_mutex_unlock(&memo_lock);
}

void layout_memo_leave(void) {
  pthread_mutex_lock(&memo_lock);
  if (memo && --memo->depth == 0) {
    for (size_t i = 0; i < memo->cap; i++) free(memo->slot[i].items), free(memo->slot[i].offset);
    free(memo->slot);
    free(memo);
    memo = NULL;
  }
  pthread_mutex_unlock(&memo_lock);
}

static uint64_t items_hash(const LayoutItem *items, int n, int64_t align) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)align;
  for (int i = 0; i < n; i++) {
    uint64_t v[3] = {(uint64_t)items[i].bytes, (uint64_t)items[i].first, (uint64_t)items[i].last};
    for (int k = 0; k < 3; k++) {
      h = (h ^ v[k]) * 0x100000001B3ull;
      h ^= h >> 29;
    }
  }
  return h;
}

static MemoEntry *memo_find(uint64_t hash, const LayoutItem *items, int n, int64_t align) {
  if (!memo || !memo->cap) return NULL;
  for (size_t i = hash & (memo->cap - 1);; i = (i + 1) & (memo->cap - 1)) {
    MemoEntry *m = &memo->slot[i];
    if (!m->items) return m;
    if (m->hash == hash && m->n == n && m->align == align && !memcmp(m->items, items, (size_t)n * sizeof *items)) return m;
  }
}

/* Remembers a pack; a failure to allocate only forgets it. */
static void memo_add(uint64_t hash, const LayoutItem *items, int n, int64_t align, const int64_t *offset, int64_t arena) {
  int64_t size = (int64_t)n * (int64_t)(sizeof *items + sizeof *offset);
  if (!memo || memo->bytes + size > LAYOUT_MEMO_BYTES) return;
  if (2 * (memo->count + 1) > memo->cap) {
    size_t cap = memo->cap ? 2 * memo->cap : 1024;
    MemoEntry *slot = util_xcalloc(cap, sizeof *slot);
    if (!slot) return;
    for (size_t i = 0; i < memo->cap; i++) {
      if (!memo->slot[i].items) continue;
      size_t j = memo->slot[i].hash & (cap - 1);
      while (slot[j].items) j = (j + 1) & (cap - 1);
      slot[j] = memo->slot[i];
    }
    free(memo->slot);
    memo->slot = slot, memo->cap = cap;
  }
  MemoEntry *m = memo_find(hash, items, n, align);
  LayoutItem *it = malloc((size_t)n * sizeof *it);
  int64_t *off = malloc((size_t)n * sizeof *off);
  if (!m || m->items || !it || !off) {
    free(it), free(off);
    return;
  }
  memcpy(it, items, (size_t)n * sizeof *it);
  memcpy(off, offset, (size_t)n * sizeof *off);
  *m = (MemoEntry){hash, n, align, arena, it, off};
  memo->count++, memo->bytes += size;
}

int layout_pack(const LayoutItem *items, int n, int64_t align, int64_t *offset, int64_t *arena) {
  uint64_t hash = items_hash(items, n, align);
  pthread_mutex_lock(&memo_lock);
  MemoEntry *m = n > 0 ? memo_find(hash, items, n, align) : NULL;
  bool found = m && m->items;
  if (found) {
    memcpy(offset, m->offset, (size_t)n * sizeof *offset);
    *arena = m->arena;
  }
  pthread_mutex_unlock(&memo_lock);
  if (found) return 0;
  int rc = pack(items, n, align, offset, arena);
  pthread_mutex_lock(&memo_lock);
  if (rc == 0 && n > 0) memo_add(hash, items, n, align, offset, *arena);
  pthread_mutex_unlock(&memo_lock);
  return rc;
}

int layout_memo_size(void) {
  pthread_mutex_lock(&memo_lock);
  int n = memo ? (int)memo->count : 0;
  pthread_mutex_unlock(&memo_lock);
  return n;
}

/* The buffers of one space as items (their indices into ids); how many. */
static int space_items(const Plan *p, Space space, const int *first, const int *last, LayoutItem *items, int *ids) {
  int n = 0;
  for (int b = 0; b < p->nbuffers; b++)
    if (p->buffers[b].space == space) {
      /* An unoccupied buffer still gets an offset: it sits at step 0. */
      items[n] = (LayoutItem){p->buffers[b].bytes, first[b] < 0 ? 0 : first[b], first[b] < 0 ? 0 : last[b]};
      ids[n++] = b;
    }
  return n;
}

static int place_space(Plan *p, Space space, const int *first, const int *last, LayoutItem *items, int *ids,
                       int64_t *offset, int64_t *arena) {
  int n = space_items(p, space, first, last, items, ids);
  int rc = layout_pack(items, n, p->alignment, offset, arena);
  if (rc == 0)
    for (int i = 0; i < n; i++) p->buffers[ids[i]].offset = offset[i];
  return rc;
}

int layout_assign(Plan *p, const Graph *g, Err *e) {
  int n = p->nbuffers;
  int *first = util_xcalloc((size_t)n, sizeof(int)), *last = util_xcalloc((size_t)n, sizeof(int));
  int *ids = util_xcalloc((size_t)n, sizeof(int));
  int64_t *offset = util_xcalloc((size_t)n, sizeof(int64_t));
  LayoutItem *items = util_xcalloc((size_t)n, sizeof(LayoutItem));
  int rc = -1;
  if (!first || !last || !ids || !offset || !items) {
    err_set(e, "%s: out of memory in layout", g->path);
    goto out;
  }
  if (sim_occupancy(p, g, first, last)) {
    err_set(e, "%s: layout: the plan names an unknown buffer", g->path);
    goto out;
  }
  int r = place_space(p, SPACE_DEVICE, first, last, items, ids, offset, &p->arena_bytes);
  if (r == 0) r = place_space(p, SPACE_HOST, first, last, items, ids, offset, &p->host_bytes);
  if (r == -2) err_set(e, "%s: layout: an arena would be over 2^62 bytes", g->path);
  else if (r) err_set(e, "%s: out of memory in layout", g->path);
  else rc = 0;
out:
  free(first);
  free(last);
  free(ids);
  free(offset);
  free(items);
  return rc;
}

int64_t layout_device_lower_bound(const Plan *p, const Graph *g) {
  int n = p->nbuffers;
  int *first = util_xcalloc((size_t)n + 1, sizeof(int)), *last = util_xcalloc((size_t)n + 1, sizeof(int));
  int *ids = util_xcalloc((size_t)n + 1, sizeof(int));
  LayoutItem *items = util_xcalloc((size_t)n + 1, sizeof(LayoutItem));
  int64_t lb = -1;
  if (first && last && ids && items && sim_occupancy(p, g, first, last) == 0)
    lb = layout_lower_bound(items, space_items(p, SPACE_DEVICE, first, last, items, ids), p->alignment);
  free(first);
  free(last);
  free(ids);
  free(items);
  return lb;
}
