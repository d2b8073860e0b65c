/*
 * fit.c - `ration fit`: the largest batch (or sequence) of a model family
 * that a device's budget holds within a slowdown. Each point is a whole
 * pipeline run: the family's graph at that size, its keep-all step (the
 * reference the slowdown is measured against) and a plan at the budget.
 * The search doubles (or halves) from the configuration's own value until
 * it brackets the boundary, then bisects; it assumes that a size which does
 * not fit is followed by none that does, which holds while the peak and the
 * step grow with the size.
 */
#include "ration.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The step between sizes: a unet's image side must halve evenly at every
 * resolution level. */
static int fit_quantum(const ModelConfig *c, bool seq) {
  return seq && c->family && !strcmp(c->family, "unet") ? 1 << (c->layers - 1) : 1;
}

static const char *item_unit(const ModelConfig *c) {
  return c->family && !strcmp(c->family, "unet") ? "images" : "tokens";
}

/* The family's graph at c; *refused when the model builder refused c. */
static Graph *fit_graph(const ModelConfig *c, const Device *d, bool *refused, Err *e) {
  Buf json = {0};
  Graph *g = NULL;
  *refused = model_build(c, &json, e) != 0;
  if (!*refused) {
    g = graph_parse(c->name ? c->name : c->family, json.data, json.len, e);
    if (g && graph_add_runtime_tensor(g, d->runtime_bytes, e)) {
      graph_free(g);
      g = NULL;
    }
  }
  buf_free(&json);
  return g;
}

/* One size: fills pt; a size that does not fit says why. False when the
 * model builder refused the configuration at this size. */
static bool fit_point(const ModelConfig *base, const Device *d, const FitOptions *o, int value, FitPoint *pt) {
  ModelConfig c = *base;
  *(o->vary_seq ? &c.seq : &c.batch) = value;
  *pt = (FitPoint){.value = value};
  Err why;
  bool refused;
  Graph *g = fit_graph(&c, d, &refused, &why);
  Plan *keep = NULL, *p = NULL;
  PlanOptions ko = {.strategy = "keep-all", .budget_bytes = INT64_MAX, .quiet = true};
  if (g && (keep = plan_make(g, d, &ko, &why))) {
    pt->keep_all_peak = keep->predicted.peak_live_bytes;
    pt->keep_all_seconds = keep->predicted.step_seconds;
    PlanOptions po = o->plan;
    po.budget_bytes = o->budget_bytes;
    po.quiet = true;
    p = plan_make(g, d, &po, &why);
  }
  if (!p) {
    snprintf(pt->why, sizeof pt->why, "%s", why.msg);
  } else {
    int64_t items = (int64_t)c.batch * (strcmp(item_unit(&c), "tokens") ? 1 : c.seq);
    pt->planned = true;
    pt->arena_bytes = p->arena_bytes;
    pt->peak_live_bytes = p->predicted.peak_live_bytes;
    pt->step_seconds = p->predicted.step_seconds;
    pt->slowdown = pt->step_seconds / pt->keep_all_seconds - 1;
    pt->items_per_second = (double)items / pt->step_seconds;
    /* A relative tolerance: a plan equal to keep-all must not fail 0% on
     * rounding. */
    pt->fits = o->max_slowdown < 0 || pt->slowdown <= o->max_slowdown + 1e-12;
    if (!pt->fits)
      snprintf(pt->why, sizeof pt->why, "%.2f%% slower than keep-all, over the %.2f%% allowed", 100 * pt->slowdown,
               100 * o->max_slowdown);
  }
  plan_free(p);
  plan_free(keep);
  graph_free(g);
  return !refused;
}

static int cmp_point(const void *a, const void *b) {
  const FitPoint *x = a, *y = b;
  return (x->value > y->value) - (x->value < y->value);
}

/* Evaluates k quanta, appending the point; -1 when out of memory, or when
 * the model refuses the search's first size: that is the user's own
 * configuration, so its error is the flags', not a size too large. */
static int fit_try(const ModelConfig *base, const Device *d, const FitOptions *o, int q, int k, FitResult *r,
                   bool *fits, Err *e) {
  FitPoint *more = realloc(r->points, (size_t)(r->npoints + 1) * sizeof *more);
  if (!more) return err_set(e, "fit: out of memory");
  r->points = more;
  FitPoint *pt = &r->points[r->npoints++];
  if (!fit_point(base, d, o, k * q, pt) && r->npoints == 1) return err_set(e, "%s", pt->why);
  if (!o->quiet) { /* on a terminal: the reason may quote a name */
    const char *what = pt->fits ? "fits" : pt->why;
    Buf line = {0};
    buf_printf(&line, "ration fit: %s %d: ", o->vary_seq ? "seq" : "batch", k * q);
    util_term_text(&line, what, strlen(what), true);
    if (!line.failed) fprintf(stderr, "%s\n", line.data);
    buf_free(&line);
  }
  *fits = pt->fits;
  return 0;
}

int fit_search(const ModelConfig *base, const Device *d, const FitOptions *o, FitResult *r, Err *e) {
  *r = (FitResult){.budget_bytes = o->budget_bytes, .best = -1, .unit = item_unit(base)};
  int q = fit_quantum(base, o->vary_seq);
  int start = o->vary_seq ? base->seq : base->batch;
  int k = start / q > 0 ? start / q : 1, lo = 0, hi = 0; /* lo fits, hi does not; 0: not yet known */
  bool fits;
  if (fit_try(base, d, o, q, k, r, &fits, e)) goto fail;
  if (fits) {
    lo = k;
    /* Doubling ends at the family's size limit, where the model refuses. */
    while (!hi) {
      if (k > INT32_MAX / 2 / q) break;
      k *= 2;
      if (fit_try(base, d, o, q, k, r, &fits, e)) goto fail;
      *(fits ? &lo : &hi) = k;
    }
  } else {
    hi = k;
    while (!lo && k > 1) {
      k /= 2;
      if (fit_try(base, d, o, q, k, r, &fits, e)) goto fail;
      *(fits ? &lo : &hi) = k;
    }
  }
  while (lo && hi && hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (fit_try(base, d, o, q, mid, r, &fits, e)) goto fail;
    *(fits ? &lo : &hi) = mid;
  }
  qsort(r->points, (size_t)r->npoints, sizeof *r->points, cmp_point);
  for (int i = 0; i < r->npoints; i++)
    if (lo && r->points[i].value == lo * q) r->best = i;
  return 0;
fail:
  fit_result_free(r);
  return -1;
}

void fit_result_free(FitResult *r) {
  free(r->points);
  r->points = NULL;
  r->npoints = 0;
}

void fit_csv(const FitResult *r, const FitOptions *o, Buf *out) {
  buf_printf(out, "%s,fits,keep_all_peak_bytes,arena_bytes,peak_live_bytes,keep_all_step_seconds,step_seconds,"
                  "slowdown,%s_per_second,why\n",
             o->vary_seq ? "seq" : "batch", r->unit);
  for (int i = 0; i < r->npoints; i++) {
    const FitPoint *pt = &r->points[i];
    buf_printf(out, "%d,%d,%" PRId64 ",", pt->value, pt->fits, pt->keep_all_peak);
    if (pt->planned)
      buf_printf(out, "%" PRId64 ",%" PRId64 ",%.9g,%.9g,%.6f,%.6g,", pt->arena_bytes, pt->peak_live_bytes,
                 pt->keep_all_seconds, pt->step_seconds, pt->slowdown, pt->items_per_second);
    else
      buf_printf(out, ",,%.9g,,,,", pt->keep_all_seconds);
    util_csv_field(out, pt->why);
    buf_printf(out, "\n");
  }
}
