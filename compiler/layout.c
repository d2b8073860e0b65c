/*
 * layout.c - static offsets for every buffer in one device arena and one
 * host arena. Greedy by size with best fit (the approach of TFLite's and
 * XLA's static planners): largest buffers first, each into the smallest gap
 * among the already placed buffers whose occupancy overlaps its own, or on
 * top. The result is checked against peak live bytes, its lower bound.
 */
#include "ration.h"

#include <stdlib.h>

#define LAYOUT_MAX_ARENA (1LL << 62)

typedef struct Item {
  int buf;
  int64_t bytes;
  int first, last;
} Item;

static int by_size_desc(const void *a, const void *b) {
  const Item *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  if (x->first != y->first) return x->first - y->first;
  return x->buf - y->buf;
}

static int by_offset(const void *a, const void *b, void *buffers) {
  const Buffer *bf = buffers;
  int x = *(const int *)a, y = *(const int *)b;
  if (bf[x].offset != bf[y].offset) return bf[x].offset < bf[y].offset ? -1 : 1;
  return x - y;
}

/* qsort_r is not C11; a tiny insertion into a sorted list keeps it portable. */
static void insert_sorted(int *list, int *n, int buf, const Buffer *bf) {
  int i = *n;
  while (i > 0 && by_offset(&list[i - 1], &buf, (void *)bf) > 0) {
    list[i] = list[i - 1];
    i--;
  }
  list[i] = buf;
  (*n)++;
}

static int64_t place_space(Plan *p, Space space, const int *first, const int *last, Item *items, int *placed,
                           int *scratch) {
  int n = 0;
  for (int b = 0; b < p->nbuffers; b++)
    if (p->buffers[b].space == space)
      items[n++] = (Item){b, p->buffers[b].bytes, first[b] < 0 ? 0 : first[b], first[b] < 0 ? 0 : last[b]};
  qsort(items, (size_t)n, sizeof *items, by_size_desc);
  int nplaced = 0;
  int64_t top = 0, align = p->alignment;
  for (int i = 0; i < n; i++) {
    Item *it = &items[i];
    int nov = 0;
    for (int k = 0; k < nplaced; k++) {
      int b = placed[k];
      int bf = first[b] < 0 ? 0 : first[b], bl = first[b] < 0 ? 0 : last[b];
      if (bf <= it->last && it->first <= bl) scratch[nov++] = b;
    }
    /* scratch is in offset order because placed is. */
    int64_t cursor = 0, best = -1, best_gap = INT64_MAX;
    for (int k = 0; k < nov; k++) {
      const Buffer *o = &p->buffers[scratch[k]];
      if (o->offset > cursor) {
        int64_t gap = o->offset - cursor;
        if (gap >= it->bytes && gap < best_gap) best = cursor, best_gap = gap;
      }
      int64_t end = util_align_up(o->offset + o->bytes, align);
      if (end > cursor) cursor = end;
    }
    p->buffers[it->buf].offset = best >= 0 ? best : cursor;
    insert_sorted(placed, &nplaced, it->buf, p->buffers);
    /* Every end so far is below 2^62, so the sum and the next alignment are exact. */
    int64_t end = p->buffers[it->buf].offset + it->bytes;
    if (end > LAYOUT_MAX_ARENA) return -1;
    if (end > top) top = end;
  }
  return top;
}

int layout_assign(Plan *p, const Graph *g, Err *e) {
  int n = p->nbuffers;
  int *first = util_xcalloc((size_t)n, sizeof(int)), *last = util_xcalloc((size_t)n, sizeof(int));
  int *placed = util_xcalloc((size_t)n, sizeof(int)), *scratch = util_xcalloc((size_t)n, sizeof(int));
  Item *items = util_xcalloc((size_t)n, sizeof(Item));
  int rc = -1;
  if (!first || !last || !placed || !scratch || !items) {
    err_set(e, "%s: out of memory in layout", g->path);
    goto out;
  }
  if (sim_occupancy(p, g, first, last)) {
    err_set(e, "%s: layout: the plan names an unknown buffer", g->path);
    goto out;
  }
  p->arena_bytes = place_space(p, SPACE_DEVICE, first, last, items, placed, scratch);
  p->host_bytes = place_space(p, SPACE_HOST, first, last, items, placed, scratch);
  if (p->arena_bytes < 0 || p->host_bytes < 0) {
    err_set(e, "%s: layout: an arena would be over 2^62 bytes", g->path);
    goto out;
  }
  rc = 0;
out:
  free(first);
  free(last);
  free(placed);
  free(scratch);
  free(items);
  return rc;
}
