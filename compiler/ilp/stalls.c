/*
 * stalls.c - copy stalls in the ILP: the window, queue and round-trip rows
 * that bound each copy stream's stalls, and a decision vector's stalls by
 * those rows and by the FIFO queues themselves (docs/PLANNING.md section 4).
 */
#include "ilp.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Groups items (windows or queue rows) by the op b they end at, a counting
 * sort: by_b[first[b] .. first[b+1]) are the indices of the items with that
 * b, in their original order. b is the int at b_offset in each item. */
static bool group_by_op(const void *items, int count, size_t stride, size_t b_offset, int nops, int **first,
                        int **by_b) {
  *first = util_xcalloc((size_t)nops + 2, sizeof(int));
  *by_b = util_xcalloc((size_t)count + 1, sizeof(int));
  int *fill = util_xcalloc((size_t)nops + 1, sizeof(int));
  bool ok = *first && *by_b && fill;
  if (ok) {
    const char *base = items;
    for (int i = 0; i < count; i++) (*first)[*(const int *)(base + (size_t)i * stride + b_offset) + 1]++;
    for (int b = 0; b < nops; b++) (*first)[b + 1] += (*first)[b];
    for (int i = 0; i < count; i++) {
      int b = *(const int *)(base + (size_t)i * stride + b_offset);
      (*by_b)[(*first)[b] + fill[b]++] = i;
    }
  }
  free(fill);
  return ok;
}

/* ------------------------------------------------------------ rows */

/* Copy stalls (docs/PLANNING.md, "Stalls"): s[b] >= 0 is the stall at op
 * b (the waits after it and in its prelude), Q[b] their running sum. A
 * window [a, b] of one copy stream: the copies issued in it and due in it
 * need their copy time, which the compute between a and b and the stalls
 * inside the window must cover (interval capacity of a FIFO queue). Each
 * window is a running sum C over b for one a. Windows reach as far as
 * every copy of the stream together could still be late, but only those
 * that no other window implies become rows: a busy queue spans layers
 * (llama3.2-1b: one MLP activation takes 5.4 ms to copy, 27 ops at the
 * model's mean op time), and 96-op windows let the LP spread offloads
 * the queues cannot carry. On graphs over ILP_WINDOW_GRAPH_OPS ops windows
 * stop at ILP_WINDOW_OPS: gpt2-1558m's short ops under 2 ms copies keep
 * 108,112 windows unbounded (35,188 within 96 ops), and its relaxation no
 * longer finishes within its count. Static approximations: prefetches are
 * timed for each tensor's first backward reader, re-runs add no time to
 * hide copies behind. */
#define ILP_FIFO 24
#define ILP_WINDOW_OPS 96
#define ILP_WINDOW_GRAPH_OPS 1000
/* A bound model's windows end at this many ops, evenly spaced in compute
 * time (ilp_build_home_windows): gpt2-124m's midpoint bound 11,809.0 us
 * without them, 11,879.9 with 8 to 32, 11,923.3 with 64 and 11,979.9
 * with 128, whose relaxation takes 0.87, 1.17 and 1.80 s. */
#define HOME_WINDOW_POINTS 32

static double t_before(const Ilp *md, int i) { return i > 0 ? md->t_end[i - 1] : 0; }

/* Stream 0 (D2H): issued after op p, due at the wait after op w. Stream 1
 * (H2D): issued at the start of op issue's group, due before op f. Times
 * are compute without stalls; the stalls before the issue (Q[a-1]) and by
 * the due op (Q[b]) add to them. */
int ilp_issue_op(const Ilp *md, int stream, int t) { return stream ? md->issue_at[t] : md->g->tensors[t].producer; }
int ilp_due_op(const Ilp *md, int stream, int t) { return stream ? md->g->tensors[t].first_bwd_read : md->wait_at[t]; }
static double issue_time(const Ilp *md, int stream, int a) { return stream ? t_before(md, a) : md->t_end[a]; }
static double due_time(const Ilp *md, int stream, int b) { return stream ? t_before(md, b) : md->t_end[b]; }

/* A round trip, offload after the producer and prefetch back before the
 * first backward reader: how far its two copies overrun the compute
 * between. */
static double round_trip_late(const Ilp *md, int t) {
  int p = md->g->tensors[t].producer, f = md->g->tensors[t].first_bwd_read;
  return md->copy_us[0][t] + md->copy_us[1][t] - (due_time(md, 1, f) - issue_time(md, 0, p));
}

static bool in_window(const Ilp *md, int stream, int t, int a, int b) {
  return ilp_issue_op(md, stream, t) >= a && ilp_due_op(md, stream, t) == b;
}

static void add_window(Ilp *md, int stream, int a, int b0, int b, int c, double cap) {
  if (!ilp_push((void **)&md->win, md->nwin, &md->cap_win, sizeof(Window))) {
    md->failed = true;
    return;
  }
  md->win[md->nwin++] = (Window){stream, a, b0, b, c, cap};
}

/* Whether window [a, b] of stream s (its copies' time SUM, its compute
 * CAP) is kept: only if no window implies it. One ending earlier (b')
 * does when copies(a, b) - copies(a, b') <= the compute from b' to b even
 * with every copy made, and one starting later (a') when copies(a, b) -
 * copies(a', b) <= the compute from a to a' (its Q[a'-1] is no less). So
 * the row must exceed *MOST, the most of copies - end time of the earlier
 * ends from a, and LATEST[b], the most of copies + start time of the
 * later starts to b (both updated here); and it must be able to bind at
 * all. The windows are walked with a falling, b rising from a. */
static bool window_kept(const Ilp *md, int s, int a, int b, double sum, double cap, double *most, double *latest) {
  double past_end = sum - due_time(md, s, b), before_start = sum + issue_time(md, s, a);
  bool keep = sum > cap && past_end > *most && before_start > latest[b];
  *most = fmax(*most, past_end);
  latest[b] = fmax(latest[b], before_start);
  return keep;
}

/* Window [a, b]'s capacity row, its running sum C in column c:
 * Q[b] - Q[a-1] - C >= -cap. */
static void window_row(Ilp *md, int a, int b, int c, double cap, int *cols, double *vals) {
  int k = 0;
  cols[k] = md->col_q[b], vals[k++] = 1;
  if (a) cols[k] = md->col_q[a - 1], vals[k++] = -1;
  cols[k] = c, vals[k++] = -1;
  if (milp_add_row(&md->m, -cap, HUGE_VAL, k, cols, vals) < 0) md->failed = true;
}

/* The windows in the order ilp_eval_stalls walks them (BY_B: grouped by
 * their end op, as group_by_op gives them), each with the index there of
 * the window before it in its group: every pass over them then reads one
 * array in order, where through BY_B each window was a cache miss
 * (ilp_eval_stalls, mostly its windows, was a third of llama3-8b's CPU at
 * its smallest budget, perf). */
static bool windows_by_end(Ilp *md, const int *by_b) {
  int nw = md->nwin;
  int *at = util_xcalloc((size_t)nw + 1, sizeof(int)); /* per window: its index in the order by end */
  md->win_b = util_xcalloc((size_t)nw + 1, sizeof(Window));
  md->win_b_prev = util_xcalloc((size_t)nw + 1, sizeof(int));
  bool ok = at && md->win_b && md->win_b_prev;
  for (int k = 0; ok && k < nw; k++) at[by_b[k]] = k;
  for (int k = 0; ok && k < nw; k++) {
    int i = by_b[k];
    const Window *w = &md->win[i];
    md->win_b[k] = *w;
    md->win_b_prev[k] = i > 0 && w[-1].a == w->a && w[-1].stream == w->stream ? at[i - 1] : -1;
  }
  free(at);
  return ok;
}

void ilp_build_stalls(Ilp *md) {
  const Graph *g = md->g;
  const Device *d = md->d;
  int n = g->nops, nt = g->ntensors;
  if (md->min_memory) return;
  md->t_end = util_xcalloc((size_t)n + 1, sizeof(double));
  md->col_q = util_xcalloc((size_t)n + 1, sizeof(int));
  md->wait_at = util_xcalloc((size_t)nt + 1, sizeof(int));
  md->issue_at = util_xcalloc((size_t)nt + 1, sizeof(int));
  md->copy_us[0] = util_xcalloc((size_t)nt + 1, sizeof(double));
  md->copy_us[1] = util_xcalloc((size_t)nt + 1, sizeof(double));
  int *cols = util_xcalloc((size_t)nt + 4, sizeof(int));
  double *vals = util_xcalloc((size_t)nt + 4, sizeof(double));
  int *due_of = util_xcalloc((size_t)nt + 1, sizeof(int)); /* per tensor, one stream's due op */
  if (!md->t_end || !md->col_q || !md->wait_at || !md->issue_at || !md->copy_us[0] || !md->copy_us[1] || !cols || !vals ||
      !due_of) {
    md->failed = true;
    goto out;
  }
  for (int i = 0; i < n; i++) md->t_end[i] = (i ? md->t_end[i - 1] : 0) + ilp_op_us(md, i);
  for (int t = 0; t < nt; t++) {
    if (md->colO[t] < 0) continue;
    md->wait_at[t] = plan_offload_wait_op(g, d, t);
    md->issue_at[t] = plan_prefetch_issue_op(g, d, t, g->tensors[t].first_bwd_read);
    md->copy_us[0][t] = cost_d2h_seconds(d, g->tensors[t].bytes) * 1e6;
    md->copy_us[1][t] = cost_h2d_seconds(d, g->tensors[t].bytes) * 1e6;
  }
  for (int stream = 0; stream < 2; stream++) {
    md->due_first[stream] = util_xcalloc((size_t)n + 2, sizeof(int));
    md->due_list[stream] = util_xcalloc((size_t)nt + 1, sizeof(int));
    if (!md->due_first[stream] || !md->due_list[stream]) {
      md->failed = true;
      goto out;
    }
    for (int t = 0; t < nt; t++)
      if (md->colO[t] >= 0) md->due_first[stream][ilp_due_op(md, stream, t) + 1]++;
    for (int b = 0; b < n; b++) md->due_first[stream][b + 1] += md->due_first[stream][b];
    int *fill = util_xcalloc((size_t)n + 1, sizeof(int));
    if (!fill) {
      md->failed = true;
      goto out;
    }
    for (int t = 0; t < nt; t++) {
      if (md->colO[t] < 0) continue;
      int b = ilp_due_op(md, stream, t);
      md->due_list[stream][md->due_first[stream][b] + fill[b]++] = t;
    }
    free(fill);
  }
  for (int b = 0; b < n; b++) {
    md->col_q[b] = ilp_new_col(md, 0, HUGE_VAL, b == n - 1 ? 1 : 0, false);
    if (b) { /* Q[b] >= Q[b-1]: s[b] = Q[b] - Q[b-1] >= 0 */
      cols[0] = md->col_q[b], vals[0] = 1, cols[1] = md->col_q[b - 1], vals[1] = -1;
      if (milp_add_row(&md->m, 0, HUGE_VAL, 2, cols, vals) < 0) md->failed = true;
    }
  }
  char *start = util_xcalloc((size_t)n + 1, 1), *due = util_xcalloc((size_t)n + 1, 1);
  double *latest = util_xcalloc((size_t)n + 1, sizeof(double)); /* per due op: the most of a later window start */
  if (!start || !due || !latest) {
    free(start), free(due), free(latest);
    md->failed = true;
    goto out;
  }
  /* A bound model's windows count the home copies too, which exist only
   * after ilp_build_homes (ilp_build_home_windows). */
  for (int stream = 0; stream < 2 && !md->bound_only; stream++) {
    memset(start, 0, (size_t)n);
    memset(due, 0, (size_t)n);
    for (int t = 0; t < nt; t++) {
      if (md->colO[t] < 0) continue;
      start[ilp_issue_op(md, stream, t)] = 1;
      due[ilp_due_op(md, stream, t)] = 1;
    }
    double total = 0;
    int reach = n > ILP_WINDOW_GRAPH_OPS ? ILP_WINDOW_OPS : n;
    for (int t = 0; t < nt; t++)
      if (md->colO[t] >= 0) total += md->copy_us[stream][t];
    for (int b = 0; b < n; b++) latest[b] = -HUGE_VAL;
    for (int a = n - 1; a >= 0; a--) {
      if (!start[a]) continue;
      int prev = -1, k = 0, b0 = a;
      double sum = 0, most = -HUGE_VAL;
      for (int b = a; b < n; b++) {
        if (!due[b]) continue;
        double cap = due_time(md, stream, b) - issue_time(md, stream, a);
        if (cap > total || b - a > reach) break; /* later ones cannot bind (cap over every copy together), or out of reach */
        int k0 = k;
        for (int i = md->due_first[stream][b]; i < md->due_first[stream][b + 1]; i++) {
          int t = md->due_list[stream][i];
          if (in_window(md, stream, t, a, b)) cols[k] = md->colO[t], vals[k] = -md->copy_us[stream][t], sum -= vals[k++];
        }
        if (k == k0 || !window_kept(md, stream, a, b, sum, cap, &most, latest)) continue;
        int c = ilp_new_col(md, 0, HUGE_VAL, 0, false);
        cols[k] = c, vals[k++] = 1;
        if (prev >= 0) cols[k] = prev, vals[k++] = -1;
        if (milp_add_row(&md->m, 0, 0, k, cols, vals) < 0) md->failed = true;
        prev = c;
        window_row(md, a, b, c, cap, cols, vals);
        add_window(md, stream, a, b0, b, c, cap);
        b0 = b + 1, k = 0;
      }
    }
  }
  free(start), free(due), free(latest);
  int *win_by_b = NULL;
  bool grouped = group_by_op(md->win, md->nwin, sizeof *md->win, offsetof(Window, b), n, &md->win_first, &win_by_b) &&
                 windows_by_end(md, win_by_b);
  free(win_by_b);
  if (!grouped) {
    md->failed = true;
    goto out;
  }
  /* Queue order: a copy finishes after every copy queued before it, even
   * those due later. For offloaded t and each start a within ILP_FIFO ops
   * before its issue: Q[due] - Q[a-1] >= copies queued from a up to t - the
   * compute in between, relaxed by big when t stays. big need only cover
   * the copies due after t (the others are bounded as in a window) and
   * what the queued copies exceed the compute by (the row is void below
   * 0): the smaller of the two, not the queue's whole copy time, keeps the
   * LP's row from vanishing at a fractional O_t (gpt2-tiny at its smallest
   * budget: LP bound 637.8 -> 642.9 us). Evaluated like the windows
   * (ilp_eval_stalls). */
  md->queue_rows[0] = md->m.nrows;
  int nnz0 = md->m.nnz;
  for (int stream = 0; stream < 2; stream++) {
    int *q = md->fifo[stream] = util_xcalloc((size_t)nt + 1, sizeof(int));
    if (!q) {
      md->failed = true;
      goto out;
    }
    for (int t = 0; t < nt; t++) due_of[t] = md->colO[t] >= 0 ? ilp_due_op(md, stream, t) : -1;
    int k = 0;
    for (int a = 0; a < n; a++) {
      int k0 = k;
      if (stream == 0) {
        const Op *op = &g->ops[a];
        for (int i = 0; i < op->noutputs; i++)
          if (md->colO[op->outputs[i]] >= 0) q[k++] = op->outputs[i];
      } else {
        for (int i = 0; i < g->nstashed; i++)
          if (md->colO[g->stashed[i]] >= 0 && md->issue_at[g->stashed[i]] == a) q[k++] = g->stashed[i];
      }
      plan_queue_order(q + k0, k - k0, due_of); /* as the schedule issues them */
    }
    md->nfifo[stream] = k;
    for (int it = 0; it < k; it++) {
      int t = q[it], issue = ilp_issue_op(md, stream, t), b = ilp_due_op(md, stream, t);
      for (int i0 = it; i0 >= 0; i0--) {
        int a = ilp_issue_op(md, stream, q[i0]);
        if (issue - a > ILP_FIFO) break;
        if (i0 > 0 && ilp_issue_op(md, stream, q[i0 - 1]) == a) continue;
        double cap = due_time(md, stream, b) - issue_time(md, stream, a), big = 0;
        int nn = 0;
        cols[nn] = md->col_q[b], vals[nn++] = 1;
        if (a) cols[nn] = md->col_q[a - 1], vals[nn++] = -1;
        double late = 0;
        for (int i = i0; i <= it; i++) {
          cols[nn] = md->colO[q[i]], vals[nn++] = -md->copy_us[stream][q[i]];
          if (i < it) big += md->copy_us[stream][q[i]];
          if (i < it && ilp_due_op(md, stream, q[i]) > b) late += md->copy_us[stream][q[i]];
        }
        if (big + md->copy_us[stream][t] <= cap) continue; /* never binds */
        big = fmin(late, fmax(0, big - cap));
        vals[nn - 1] -= big;
        if (milp_add_row(&md->m, -cap - big, HUGE_VAL, nn, cols, vals) < 0) md->failed = true;
        if (!ilp_push((void **)&md->frow, md->nfrow, &md->cap_frow, sizeof(Fifo))) {
          md->failed = true;
          goto out;
        }
        md->frow[md->nfrow++] = (Fifo){stream, i0, it, b, cap};
      }
    }
  }
  md->queue_rows[1] = md->m.nrows;
  md->queue_nnz = md->m.nnz - nnz0;
  if (!group_by_op(md->frow, md->nfrow, sizeof *md->frow, offsetof(Fifo, b), n, &md->frow_first, &md->frow_by_b)) {
    md->failed = true;
    goto out;
  }
  for (int t = 0; t < nt; t++) {
    if (md->colO[t] < 0) continue;
    int p = g->tensors[t].producer, f = g->tensors[t].first_bwd_read;
    double late = round_trip_late(md, t);
    /* Q[f] - Q[p-1] >= late * O: at O = 0 or 1 the same as >= copies * O -
     * cap, and at a fraction no weaker (the hull of the two points). */
    if (late <= 0) continue;
    int k = 0;
    cols[k] = md->col_q[f], vals[k++] = 1;
    if (p) cols[k] = md->col_q[p - 1], vals[k++] = -1;
    cols[k] = md->colO[t], vals[k++] = -late;
    if (milp_add_row(&md->m, 0, HUGE_VAL, k, cols, vals) < 0) md->failed = true;
  }
out:
  free(cols), free(vals), free(due_of);
}

/* ------------------------------------------------------------ a bound model's windows */

/* One copy of a stream in a bound model: issued at op `issue`, due at op
 * `due`, `us` long, made where sum c[i] * x[col[i]] is 1 and not where it
 * is 0: an offloaded activation's O; a home's copy that both homes have,
 * H + F, plus a grad's X for its copy to the host optimizer, less the X
 * that takes it away (HomeCopy.gone: X <= H + F makes the sum 0 or 1);
 * host-refetch's second prefetch, F. */
typedef struct Copy {
  int issue, due, n;
  int col[4];
  double c[4];
  double us;
} Copy;

static int stream_copies(const Ilp *md, int s, Copy *out) {
  int k = 0;
  for (int t = 0; t < md->g->ntensors; t++)
    if (md->colO[t] >= 0) out[k++] = (Copy){ilp_issue_op(md, s, t), ilp_due_op(md, s, t), 1, {md->colO[t]}, {1}, md->copy_us[s][t]};
  for (int i = 0; i < md->nhcopy[s]; i++) {
    const HomeCopy *h = &md->hcopy[s][i];
    Copy c = {.issue = h->issue, .due = h->due, .us = h->us};
    int on[3] = {h->refetch ? -1 : md->colH[h->t], md->colF[h->t], h->refetch ? -1 : md->colX[h->t]};
    for (int j = 0; j < 3; j++)
      if (on[j] >= 0) c.col[c.n] = on[j], c.c[c.n++] = 1;
    if (h->gone >= 0 && !h->refetch) c.col[c.n] = md->colX[h->gone], c.c[c.n++] = -1;
    out[k++] = c;
  }
  return k;
}

/* The copy-time sum of copies as one row's terms: acc per column, the
 * columns in it listed once in order of their first term. */
typedef struct Terms {
  double *acc;
  char *in;
  int *col, n;
} Terms;

static void terms_add(Terms *t, const Copy *c) {
  for (int i = 0; i < c->n; i++) {
    int col = c->col[i];
    if (!t->in[col]) t->in[col] = 1, t->col[t->n++] = col;
    t->acc[col] += c->c[i] * c->us;
  }
}

/* The terms, negated, into cols and vals from k on (a term that cancelled
 * left out); emptied. The new count. */
static int terms_take(Terms *t, int *cols, double *vals, int k) {
  for (int i = 0; i < t->n; i++) {
    int col = t->col[i];
    if (t->acc[col] != 0) cols[k] = col, vals[k++] = -t->acc[col];
    t->acc[col] = 0, t->in[col] = 0;
  }
  t->n = 0;
  return k;
}

/* Windows over copies cp (nc of them) of stream s, between the ops of a
 * grid (HOME_WINDOW_POINTS ops evenly spaced in compute time, *at): any
 * window is a valid row (the copies issued in it and due in it need
 * their time, which its compute and stalls must cover), and a window
 * whose ends are not copies' issue and due ops is only looser. Every
 * issue and due op as ends, as the activations' windows take them, gave
 * gpt2-124m's midpoint 33,160 rows of 307,812 nonzeros and a 5.1 s
 * relaxation. Pruned as ilp_build_stalls' windows (window_kept), by
 * maxima that count each copy once (every column at 1, the X that removes
 * a copy at 0), so a window left out is implied by one kept for every
 * vector. */
static void home_windows(Ilp *md, int s, const Copy *cp, int nc, Terms *tm, int *cols, double *vals, const char *point,
                         double *latest) {
  int n = md->g->nops, *first = NULL, *by_due = NULL;
  if (!group_by_op(cp, nc, sizeof *cp, offsetof(Copy, due), n, &first, &by_due)) {
    md->failed = true;
    goto out;
  }
  double total = 0;
  for (int i = 0; i < nc; i++) total += cp[i].us;
  for (int b = 0; b < n; b++) latest[b] = -HUGE_VAL;
  for (int a = n - 1; a >= 0; a--) {
    if (!point[a]) continue;
    int prev = -1;
    double sum = 0, most = -HUGE_VAL;
    bool added = false;
    for (int b = a; b < n; b++) {
      for (int j = first[b]; j < first[b + 1]; j++) {
        const Copy *c = &cp[by_due[j]];
        if (c->issue < a) continue;
        terms_add(tm, c);
        sum += c->us, added = true;
      }
      if (!point[b] || !added) continue;
      double cap = due_time(md, s, b) - issue_time(md, s, a);
      if (cap > total) break; /* later ones cannot bind */
      if (!window_kept(md, s, a, b, sum, cap, &most, latest)) continue;
      int c = ilp_new_col(md, 0, HUGE_VAL, 0, false), k = 0;
      cols[k] = c, vals[k++] = 1;
      if (prev >= 0) cols[k] = prev, vals[k++] = -1;
      k = terms_take(tm, cols, vals, k);
      if (milp_add_row(&md->m, 0, 0, k, cols, vals) < 0) md->failed = true;
      prev = c, added = false;
      window_row(md, a, b, c, cap, cols, vals);
    }
    terms_take(tm, cols, vals, 0); /* the copies after the last row kept */
  }
out:
  free(first), free(by_due);
}

/* The step is at least a stream's copies less the compute they can hide
 * under: every copy is issued at or after the first issue op a and due by
 * the last due op b, so the window [a, b] over them all holds, and Q[last]
 * >= Q[b] >= Q[b] - Q[a-1] (Q never falls and starts at 0). The windows'
 * reach (ILP_WINDOW_OPS) leaves that window out on large graphs. */
static void whole_stream(Ilp *md, int s, const Copy *cp, int nc, Terms *tm, int *cols, double *vals) {
  int n = md->g->nops, a = n, b = -1;
  double total = 0;
  for (int i = 0; i < nc; i++) {
    a = cp[i].issue < a ? cp[i].issue : a, b = cp[i].due > b ? cp[i].due : b;
    total += cp[i].us;
    terms_add(tm, &cp[i]);
  }
  int k = 0;
  cols[k] = md->col_q[n - 1], vals[k++] = 1;
  k = terms_take(tm, cols, vals, k);
  double cap = nc ? due_time(md, s, b) - issue_time(md, s, a) : 0;
  if (nc && total > cap && milp_add_row(&md->m, -cap, HUGE_VAL, k, cols, vals) < 0) md->failed = true;
}

/* The host stream (sim.c's): host op b starts once the compute stream
 * has reached it, after Q[b-1] of stalls, every re-run and the device
 * time of the earlier host ops less; the host ops from b on run one after
 * another; the step ends no earlier than they do. With the objective,
 * compute - sum c_j X_j + re-runs + Q[last] (c_j: op j's device time, h_j
 * its host time), the re-runs cancel and
 *   Q[last] - Q[b-1] - sum over j >= b of (c_j + h_j) X_j >= t_before(b) - t_end[last],
 * the sum a running one over b (column S_b = S_{b'} + (c_b + h_b) X_b, b'
 * the next host op). Left out (looser): the grad's copy a host op also
 * waits for (rows for it, behind every D2H copy queued before it, raised
 * no bound of bench_ilp's gpt2-tiny, unet or gpt2-124m points). */
static void host_rows(Ilp *md, int *cols, double *vals) {
  const Graph *g = md->g;
  int n = g->nops, next = -1;
  for (int b = n - 1; b >= 0; b--) {
    int gr = md->xgrad[b];
    if (gr < 0) continue;
    int sum = ilp_new_col(md, 0, HUGE_VAL, 0, false), k = 0;
    cols[k] = sum, vals[k++] = 1;
    if (next >= 0) cols[k] = next, vals[k++] = -1;
    cols[k] = md->colX[gr], vals[k++] = -(ilp_op_us(md, b) + cost_host_op_seconds(g, md->d, b) * 1e6);
    if (milp_add_row(&md->m, 0, 0, k, cols, vals) < 0) md->failed = true;
    next = sum, k = 0;
    cols[k] = md->col_q[n - 1], vals[k++] = 1;
    if (b) cols[k] = md->col_q[b - 1], vals[k++] = -1;
    cols[k] = sum, vals[k++] = -1;
    if (milp_add_row(&md->m, t_before(md, b) - md->t_end[n - 1], HUGE_VAL, k, cols, vals) < 0) md->failed = true;
  }
}

void ilp_build_home_windows(Ilp *md) {
  int n = md->g->nops, nc = md->g->ntensors + md->nhcopy[0] + md->nhcopy[1], ncols = md->m.ncols;
  if (md->min_memory || md->failed) return;
  Copy *cp = util_xcalloc((size_t)nc + 1, sizeof *cp);
  Terms tm = {.acc = util_xcalloc((size_t)ncols + 1, sizeof(double)), .in = util_xcalloc((size_t)ncols + 1, 1),
              .col = util_xcalloc((size_t)ncols + 1, sizeof(int))};
  int *cols = util_xcalloc((size_t)ncols + 3, sizeof(int));
  double *vals = util_xcalloc((size_t)ncols + 3, sizeof(double)), *latest = util_xcalloc((size_t)n + 1, sizeof(double));
  char *point = util_xcalloc((size_t)n + 1, 1);
  if (!cp || !tm.acc || !tm.in || !tm.col || !cols || !vals || !latest || !point) md->failed = true;
  for (int i = 0, k = 0; !md->failed && i < n; i++) /* the first op whose end reaches each k-th of the compute */
    for (; k < HOME_WINDOW_POINTS && md->t_end[i] > md->t_end[n - 1] * k / HOME_WINDOW_POINTS; k++) point[i] = 1;
  /* The exact model's windows end at every op: only their static
   * approximations are left between them and the queues. */
  for (int i = 0; md->bound_exact && i < n; i++) point[i] = 1;
  for (int s = 0; s < 2 && !md->failed; s++) {
    int k = stream_copies(md, s, cp);
    home_windows(md, s, cp, k, &tm, cols, vals, point, latest);
    whole_stream(md, s, cp, k, &tm, cols, vals);
  }
  if (!md->failed) host_rows(md, cols, vals);
  free(cp), free(tm.acc), free(tm.in), free(tm.col), free(cols), free(vals), free(latest), free(point);
}

/* ------------------------------------------------------------ a decision vector's stalls */

/* The offloaded tensors of one decision vector, per stream: by due op
 * (due_list's order: [due_first[b], due_first[b + 1]) of due) and in queue
 * order (the copy times of those before queue position k start at
 * queued_first[k]), so that the sums below walk only copies that happen,
 * in the order the full walks would add them. */
typedef struct Offloaded {
  int *due_first[2], *due[2];
  int *due_issue[2];    /* per entry of due: its issue op */
  double *due_us[2];    /* ... and its copy time */
  int *queued_first[2];
  double *queued_us[2];
} Offloaded;

static bool offloaded_of(const Ilp *md, const Decision *dec, Offloaded *o) {
  int n = md->g->nops;
  bool ok = true;
  for (int s = 0; s < 2; s++) {
    int nf = md->nfifo[s], nd = md->due_first[s][n];
    o->due_first[s] = util_xcalloc((size_t)n + 1, sizeof(int));
    o->due[s] = util_xcalloc((size_t)nd + 1, sizeof(int));
    o->due_issue[s] = util_xcalloc((size_t)nd + 1, sizeof(int));
    o->due_us[s] = util_xcalloc((size_t)nd + 1, sizeof(double));
    o->queued_first[s] = util_xcalloc((size_t)nf + 1, sizeof(int));
    o->queued_us[s] = util_xcalloc((size_t)nf + 1, sizeof(double));
    if (!o->due_first[s] || !o->due[s] || !o->due_issue[s] || !o->due_us[s] || !o->queued_first[s] || !o->queued_us[s]) {
      ok = false;
      continue;
    }
    int m = 0;
    for (int b = 0; b < n; b++) {
      o->due_first[s][b] = m;
      for (int k = md->due_first[s][b]; k < md->due_first[s][b + 1]; k++) {
        int t = md->due_list[s][k];
        if (dec[t] != DEC_OFFLOAD) continue;
        o->due_issue[s][m] = ilp_issue_op(md, s, t), o->due_us[s][m] = md->copy_us[s][t];
        o->due[s][m++] = t;
      }
    }
    o->due_first[s][n] = m;
    m = 0;
    for (int k = 0; k < nf; k++) {
      o->queued_first[s][k] = m;
      if (dec[md->fifo[s][k]] == DEC_OFFLOAD) o->queued_us[s][m++] = md->copy_us[s][md->fifo[s][k]];
    }
    o->queued_first[s][nf] = m;
  }
  return ok;
}

static void offloaded_free(Offloaded *o) {
  for (int s = 0; s < 2; s++) {
    free(o->due_first[s]), free(o->due[s]), free(o->due_issue[s]), free(o->due_us[s]);
    free(o->queued_first[s]), free(o->queued_us[s]);
  }
}

/* The copy streams as they run one decision vector: each stream's next
 * queue position among the offloaded activations and among the home
 * copies, when it is done with its queue so far, each copy's finish, and
 * the compute the copies issued so far took (copy_compute_share, charged
 * at each copy's issue as sim.c does: it moves every later op). */
typedef struct Streams {
  int next[2], hnext[2];
  double busy[2], shift, host; /* host: when the host stream is done with its ops so far */
  double *finish;     /* per stream and tensor: the offloaded activations' copies */
  double *hfinish[2]; /* per stream and home copy */
} Streams;

static bool home_copy_on(const HomeCopy *c, const Decision *dec) {
  if (c->gone >= 0 && dec[c->gone] == DEC_HOST_OPTIMIZER) return false;
  return dec[c->t] == DEC_HOST_OPTIMIZER || dec[c->t] == DEC_HOST_REFETCH || (dec[c->t] == DEC_HOST && !c->refetch);
}

/* Op b run on the host where dec says so (its grad's X), v the stalls so
 * far: it starts once the host stream is free, the compute stream has
 * reached it (re-runs come before, rerun_us) and its grad's copy has
 * landed, as sim.c runs it; its device time leaves the compute stream. */
static void host_op(const Ilp *md, const Decision *dec, int b, double v, double rerun_us, Streams *st) {
  int gr = md->xgrad ? md->xgrad[b] : -1;
  if (gr < 0 || dec[gr] != DEC_HOST_OPTIMIZER) return;
  double start = fmax(st->host, t_before(md, b) + v + st->shift + rerun_us);
  start = fmax(start, st->hfinish[0][md->xcopy[b]]);
  st->host = start + cost_host_op_seconds(md->g, md->d, b) * 1e6;
  st->shift -= ilp_op_us(md, b);
}

/* Runs stream s's copies issued at op b, v the stalls so far: the
 * offloaded activations' and the homes' merged by due op, the activations
 * first among equals (as the builder lists them before the homes' and
 * queues them by deadline, stably); each starts once the stream is free
 * and the compute stream has reached its issue, a prefetch also after its
 * own offload. */
static void issue_copies(const Ilp *md, const Decision *dec, int s, int b, double v, Streams *st) {
  int nt = md->g->ntensors;
  const int *fifo = md->fifo[s];
  const HomeCopy *hc = md->hcopy[s];
  for (;;) {
    bool act = st->next[s] < md->nfifo[s] && ilp_issue_op(md, s, fifo[st->next[s]]) == b;
    bool home = st->hnext[s] < md->nhcopy[s] && hc[st->hnext[s]].issue == b;
    if (!act && !home) return;
    if (act && home && ilp_due_op(md, s, fifo[st->next[s]]) > hc[st->hnext[s]].due) act = false;
    double start = fmax(st->busy[s], issue_time(md, s, b) + v + st->shift), us, *fin;
    if (act) {
      int t = fifo[st->next[s]++];
      if (dec[t] != DEC_OFFLOAD) continue;
      if (s) start = fmax(start, st->finish[t]);
      us = md->copy_us[s][t], fin = &st->finish[s * nt + t];
    } else {
      const HomeCopy *c = &hc[st->hnext[s]++];
      if (!home_copy_on(c, dec)) continue;
      us = c->us, fin = &st->hfinish[s][c - hc];
    }
    *fin = st->busy[s] = start + us;
    st->shift += md->d->copy_compute_share * us;
  }
}

/* v raised to the lateness of stream s's copies due at op b. */
static double wait_copies(const Ilp *md, const Decision *dec, const Offloaded *off, int s, int b, double v,
                          const Streams *st) {
  int nt = md->g->ntensors;
  double at = due_time(md, s, b) + st->shift;
  for (int k = off->due_first[s][b]; k < off->due_first[s][b + 1]; k++) v = fmax(v, st->finish[s * nt + off->due[s][k]] - at);
  for (int k = md->hdue_first[s][b]; k < md->hdue_first[s][b + 1]; k++) {
    const HomeCopy *c = &md->hcopy[s][md->hdue[s][k]];
    if (home_copy_on(c, dec)) v = fmax(v, st->hfinish[s][md->hdue[s][k]] - at);
  }
  return v;
}

/* Window k's running sum C (k in win_b's order): its group's (the windows
 * of one stream and start, in order of their end) up to the window before
 * it, plus the copies due from its b0 to its b, added in the order a
 * single running sum over the group would add them. SUM: the sums of the
 * windows before k in that order. */
static double window_sum(const Ilp *md, const Offloaded *off, int k, const double *sum) {
  const Window *w = &md->win_b[k];
  int before = md->win_b_prev[k], s = w->stream;
  double c = before >= 0 ? sum[before] : 0;
  /* Adding 0 for a copy issued before a leaves c as it is (c >= 0): no
   * branch on which ones count. */
  for (int j = off->due_first[s][w->b0]; j < off->due_first[s][w->b + 1]; j++)
    c += off->due_issue[s][j] >= w->a ? off->due_us[s][j] : 0;
  return c;
}

/* Window k's lateness by its row, Q[a-1] + C - cap (q: Q so far, wsum:
 * C). */
static double window_late(const Ilp *md, int k, const double *q, const double *wsum) {
  const Window *w = &md->win_b[k];
  return (w->a ? q[w->a - 1] : 0) + wsum[k] - w->cap;
}

static double larger(double a, double b) { return a > b ? a : b; }

/* v raised to the most the windows ending at op b are late by: four
 * running maxima over every fourth window, then the most of them, the
 * same value as one running maximum (none is NaN or -0) without a chain
 * of compares from one window to the next (the windows' rows were a
 * quarter of ilp_eval_stalls at llama3-8b's smallest budget, perf). */
static double windows_late(const Ilp *md, int b, const double *q, const double *wsum, double v) {
  double m0 = v, m1 = v, m2 = v, m3 = v;
  int k = md->win_first[b], end = md->win_first[b + 1];
  for (; k + 4 <= end; k += 4) {
    m0 = larger(window_late(md, k, q, wsum), m0);
    m1 = larger(window_late(md, k + 1, q, wsum), m1);
    m2 = larger(window_late(md, k + 2, q, wsum), m2);
    m3 = larger(window_late(md, k + 3, q, wsum), m3);
  }
  for (; k < end; k++) m0 = larger(window_late(md, k, q, wsum), m0);
  return larger(larger(m0, m1), larger(m2, m3));
}

/* Q for one decision vector: the least the rows allow (windows, round
 * trips and queue rows, each a bound of the FIFO streams), raised to what
 * the streams actually do: each runs its copies in queue order (the host
 * homes' copies among the offloaded activations'), a prefetch also waits
 * for its own offload, a copy's lateness at its due op is a stall there,
 * and each copy's share of the compute stream (copy_compute_share) moves
 * every later op. The rows are bounds, so the stalls the model reports
 * for a plan are the queues' own (docs/PLANNING.md 4); where copies take a
 * share of the compute stream the rows, which leave it out, are not
 * bounds of the queues and only the queues count. parts selects the rows,
 * the queues or both (the test hook compares the two). Returns Q at the
 * last op; Q never falls from one op to the next, so where it reaches
 * stop_at earlier the pass ends there and returns Q there, a lower bound
 * of the last op's, the later ops' columns left as they were (the
 * incremental evaluation's caller then knows the vector is no better than
 * its cap without the rest). */
double ilp_eval_stalls(const Ilp *md, const Decision *dec, const int *rerun, int parts, double stop_at, double *x) {
  const Graph *g = md->g;
  int n = g->nops, nt = g->ntensors;
  if (!md->col_q) return 0;
  double *q = util_xcalloc((size_t)n + 1, sizeof(double)), *finish = util_xcalloc(2 * (size_t)nt + 1, sizeof(double));
  double *hfinish = util_xcalloc((size_t)(md->nhcopy[0] + md->nhcopy[1]) + 1, sizeof(double));
  double *wsum = util_xcalloc((size_t)md->nwin + 1, sizeof(double)); /* per window in win_b's order: x at its column */
  Offloaded off = {0};
  if (!q || !finish || !hfinish || !wsum || !offloaded_of(md, dec, &off)) {
    free(q), free(finish), free(hfinish), free(wsum), offloaded_free(&off);
    return 0;
  }
  /* In step order within op b: prefetches issued, prefetches waited for
   * (its prelude), the op, offloads issued, offloads waited for. Then
   * Q[b] as the largest Q[a-1] + C - cap over the windows and round trips
   * ending at b (their sums C first). */
  Streams st = {.finish = finish, .hfinish = {hfinish, hfinish + md->nhcopy[0]}};
  double rerun_us = 0;
  for (int j = 0; rerun && j < n; j++)
    if (rerun[j] >= 0) rerun_us += ilp_op_us(md, j);
  double reached = 0;
  for (int b = 0; b < n; b++) {
    for (int k = md->win_first[b]; k < md->win_first[b + 1]; k++) x[md->win_b[k].col] = wsum[k] = window_sum(md, &off, k, wsum);
    double v = b ? q[b - 1] : 0;
    for (int s = 1; s >= 0 && (parts & STALL_QUEUES); s--) {
      if (s == 0) host_op(md, dec, b, v, rerun_us, &st);
      issue_copies(md, dec, s, b, v, &st);
      v = wait_copies(md, dec, &off, s, b, v, &st);
    }
    if ((parts & STALL_ROWS) && (!(parts & STALL_QUEUES) || md->d->copy_compute_share <= 0)) {
      v = windows_late(md, b, q, wsum, v);
      for (int k = off.due_first[1][b]; k < off.due_first[1][b + 1]; k++) {
        int t = off.due[1][k], p = g->tensors[t].producer;
        v = fmax(v, (p ? q[p - 1] : 0) + round_trip_late(md, t));
      }
      for (int i = md->frow_first[b]; i < md->frow_first[b + 1]; i++) {
        const Fifo *f = &md->frow[md->frow_by_b[i]];
        const int *fq = md->fifo[f->stream];
        if (dec[fq[f->it]] != DEC_OFFLOAD) continue;
        int a = f->stream ? md->issue_at[fq[f->i0]] : g->tensors[fq[f->i0]].producer;
        double sum = 0;
        for (int k = off.queued_first[f->stream][f->i0]; k < off.queued_first[f->stream][f->it + 1]; k++)
          sum += off.queued_us[f->stream][k];
        double base = a ? q[a - 1] : 0;
        if (base + sum - f->cap > v) v = base + sum - f->cap;
      }
    }
    q[b] = x[md->col_q[b]] = reached = v;
    if (v >= stop_at) break;
  }
  /* The step ends when the host ops are done too (sim.c's host waits):
   * where the pass ran to the last op. */
  double end = md->t_end[n - 1] + st.shift + rerun_us + q[n - 1];
  if (reached < stop_at && (parts & STALL_QUEUES) && st.host > end) x[md->col_q[n - 1]] = reached = q[n - 1] + st.host - end;
  free(q), free(finish), free(hfinish), free(wsum), offloaded_free(&off);
  return reached;
}
