/*
 * report_chart.c - the report's pictures as hand-written SVG: step time
 * against budget (one line per strategy), the time split of the fastest
 * plan at each budget, and the memory timeline of one plan stacked by what
 * the bytes are. No scripts and no external files, so a report is one file
 * that opens anywhere and prints. Every series differs by dash, marker or
 * fill pattern as well as by colour, so the charts survive greyscale.
 */
#include "ration.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FONT "font-family=\"DejaVu Sans, Liberation Sans, Helvetica, Arial, sans-serif\""
#define W 960  /* every chart is this wide (pixels of the viewBox) */
#define X0 120 /* left edge of every plot: room for strategy names */

void report_xml(Buf *out, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': buf_printf(out, "&amp;"); break;
    case '<': buf_printf(out, "&lt;"); break;
    case '>': buf_printf(out, "&gt;"); break;
    case '"': buf_printf(out, "&quot;"); break;
    default:
      /* Control characters are not allowed in XML at all. */
      buf_printf(out, "%c", (unsigned char)*s < 0x20 && *s != '\n' && *s != '\t' ? '?' : *s);
    }
  }
}

ReportUnit report_unit(int64_t largest) {
  if (largest >= (int64_t)1 << 30) return (ReportUnit){1073741824.0, "GiB"};
  if (largest >= (int64_t)1 << 20) return (ReportUnit){1048576.0, "MiB"};
  return (ReportUnit){1024.0, "KiB"};
}

/* ------------------------------------------------------------- axes */

typedef struct Axis {
  double lo, hi, step;
  int decimals;
  double px0, px1; /* pixels of lo and hi */
} Axis;

/* A round tick step (1, 2 or 5 times a power of ten) and bounds that are
 * multiples of it, about `ticks` ticks over [lo, hi]. */
static void axis_fit(Axis *a, double lo, double hi, int ticks, double px0, double px1) {
  if (!(hi > lo)) {
    double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
    lo -= pad, hi += pad;
  }
  double raw = (hi - lo) / ticks, mag = pow(10, floor(log10(raw))), m = raw / mag;
  a->step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * mag;
  a->lo = floor(lo / a->step + 1e-9) * a->step;
  a->hi = ceil(hi / a->step - 1e-9) * a->step;
  a->decimals = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
  a->px0 = px0, a->px1 = px1;
}

static int axis_ticks(const Axis *a) { return (int)floor((a->hi - a->lo) / a->step + 1e-6); }
static double axis_at(const Axis *a, int i) { return a->lo + i * a->step; }
static double axis_px(const Axis *a, double v) { return a->px0 + (v - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0); }

static void svg_open(Buf *o, int h, const char *label) {
  buf_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" " FONT
                " font-size=\"12\" aria-label=\"",
             W, h, W, h);
  report_xml(o, label);
  buf_printf(o, "\">\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, h);
}

static void text(Buf *o, double x, double y, const char *anchor, const char *attrs, const char *s) {
  buf_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s>", x, y, anchor, *attrs ? " " : "", attrs);
  report_xml(o, s);
  buf_printf(o, "</text>\n");
}

/* Grid, frame, tick labels and titles of an x/y plot. */
static void frame(Buf *o, const Axis *x, const Axis *y, const char *xtitle, const char *ytitle, bool xgrid) {
  char s[64];
  for (int i = 0; i <= axis_ticks(y); i++) {
    double py = axis_px(y, axis_at(y, i));
    buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", x->px0, py, x->px1, py);
    snprintf(s, sizeof s, "%.*f", y->decimals, axis_at(y, i));
    text(o, x->px0 - 6, py + 4, "end", "", s);
  }
  for (int i = 0; xgrid && i <= axis_ticks(x); i++) {
    double px = axis_px(x, axis_at(x, i));
    buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", px, y->px0, px, y->px1);
    snprintf(s, sizeof s, "%.*f", x->decimals, axis_at(x, i));
    text(o, px, y->px0 + 16, "middle", "", s);
  }
  buf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333333\"/>\n", x->px0,
             y->px1, x->px1 - x->px0, y->px0 - y->px1);
  text(o, (x->px0 + x->px1) / 2, y->px0 + 36, "middle", "font-size=\"13\"", xtitle);
  char rot[96];
  snprintf(rot, sizeof rot, "font-size=\"13\" transform=\"rotate(-90 %.1f %.1f)\"", x->px0 - 52, (y->px0 + y->px1) / 2);
  text(o, x->px0 - 52, (y->px0 + y->px1) / 2, "middle", rot, ytitle);
}

/* A vertical marker line across the plot with its label written along it. */
static void vline(Buf *o, const Axis *x, const Axis *y, double v, const char *stroke, const char *dash, const char *label) {
  double px = axis_px(x, v);
  buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"%s%s%s/>\n", px,
             y->px0, px, y->px1, stroke, *dash ? " stroke-dasharray=\"" : "", dash, *dash ? "\"" : "");
  char attrs[128];
  snprintf(attrs, sizeof attrs, "font-size=\"11\" fill=\"%s\" transform=\"rotate(-90 %.1f %.1f)\"", stroke, px - 4, y->px1 + 6);
  text(o, px - 4, y->px1 + 6, "end", attrs, label);
}

/* ------------------------------------------------------- strategies */

enum { M_CIRCLE, M_SQUARE, M_TRIANGLE, M_DIAMOND, M_DOWN, M_CROSS, M_PLUS, M_HEX };

typedef struct Style {
  const char *color, *dash;
  int marker;
} Style;

/* Colours from a colour-blind-safe set; dashes and markers tell the lines
 * apart where colour does not. */
static const Style styles[] = {
    {"#111111", "", M_CIRCLE},        {"#0072b2", "9 4", M_SQUARE},  {"#d55e00", "3 3", M_TRIANGLE},
    {"#009e73", "12 3 3 3", M_DIAMOND}, {"#cc79a7", "6 2", M_DOWN},  {"#7a5c00", "2 2 8 2", M_CROSS},
    {"#56b4e9", "1 3", M_PLUS},        {"#8a2be2", "14 4", M_HEX},
};
#define NSTYLES (int)(sizeof styles / sizeof styles[0])

/* A strategy keeps its look across reports: its place in the table. */
static const Style *style_of(const char *name) {
  int i = 0;
  for (const PlanStrategy *s = plan_strategies; s->name; s++, i++)
    if (!strcmp(s->name, name)) return &styles[i % NSTYLES];
  return &styles[NSTYLES - 1];
}

static void marker(Buf *o, int m, double x, double y, const char *color, bool hollow) {
  const char *fill = hollow ? "#ffffff" : color;
  switch (m) {
  case M_CIRCLE:
    buf_printf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", x, y, fill, color);
    break;
  case M_SQUARE:
    buf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
               x - 3.5, y - 3.5, fill, color);
    break;
  case M_TRIANGLE:
  case M_DOWN: {
    double s = m == M_TRIANGLE ? 1 : -1;
    buf_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", x,
               y - 5 * s, x + 4.5, y + 3.5 * s, x - 4.5, y + 3.5 * s, fill, color);
    break;
  }
  case M_DIAMOND:
    buf_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
               x, y - 5, x + 5, y, x, y + 5, x - 5, y, fill, color);
    break;
  case M_CROSS:
    buf_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", x - 4, y - 4,
               x + 4, y + 4, x - 4, y + 4, x + 4, y - 4, color);
    break;
  case M_PLUS:
    buf_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", x - 5, y, x + 5,
               y, x, y - 5, x, y + 5, color);
    break;
  default:
    buf_printf(o,
               "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"%s\" "
               "stroke-width=\"1.5\"/>\n",
               x - 2.5, y - 4.3, x + 2.5, y - 4.3, x + 5, y, x + 2.5, y + 4.3, x - 2.5, y + 4.3, x - 5, y, fill, color);
  }
}

static void legend_line(Buf *o, double x, double y, const Style *st, double width, const char *name) {
  buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s/>\n", x, y,
             x + 34, y, st->color, width, *st->dash ? " stroke-dasharray=\"" : "", st->dash, *st->dash ? "\"" : "");
  marker(o, st->marker, x + 17, y, st->color, false);
  text(o, x + 42, y + 4, "start", "", name);
}

/* ------------------------------------------ chart 1: time vs budget */

static double ms(double seconds) { return seconds * 1e3; }

/* Step times past twice keep-all would flatten every other line, so the
 * time axes stop at the largest time below that; anything above is drawn
 * at the top edge with its value written next to it. */
#define CLIP_FACTOR 2.0
static double time_top(double t_keep, const double *t, int n) {
  double top = t_keep;
  for (int i = 0; i < n; i++)
    if (t[i] > top && t[i] <= t_keep * CLIP_FACTOR) top = t[i];
  return top;
}

void report_chart_time(const Report *r, Buf *o) {
  int np = r->npoints, ns = r->nstrategies;
  int64_t k = r->keep_all_bytes, usable = r->d->memory - r->d->reserve;
  int64_t bmin = k, bmax = k;
  for (int i = 0; i < np; i++) {
    if (r->budgets[i] < bmin) bmin = r->budgets[i];
    if (r->budgets[i] > bmax) bmax = r->budgets[i];
  }
  /* The device line is drawn when it is near the swept range, else named. */
  double span = (double)(bmax - bmin);
  bool device_on = usable >= bmin - span * 0.05 && usable <= bmax + span * 0.3;
  if (device_on && usable > bmax) bmax = usable;
  if (device_on && usable < bmin) bmin = usable;
  ReportUnit u = report_unit(bmax);
  double t_keep = ms(r->keep_all->predicted.step_seconds), tlo = t_keep;
  double *times = util_xcalloc((size_t)np * ns + 1, sizeof(double));
  int nt = 0;
  bool clipped = false;
  for (int c = 0; c < np * ns && times; c++)
    if (r->cells[c].feasible) {
      double t = times[nt++] = ms(r->cells[c].predicted.step_seconds);
      if (t < tlo) tlo = t;
      clipped = clipped || t > t_keep * CLIP_FACTOR;
    }
  double thi = times ? time_top(t_keep, times, nt) : t_keep;
  free(times);
  if (clipped) thi += (thi - tlo) * 0.12 + t_keep * 0.02; /* headroom for the clipped values' labels */
  int top = 46, bottom = 330, strip = bottom + 62, h = strip + 20 + ns * 15 + 10;
  Axis x, y;
  double pad = (double)(bmax - bmin) * 0.03 / u.bytes;
  axis_fit(&x, (double)bmin / u.bytes - pad, (double)bmax / u.bytes + pad, 8, X0, W - 215);
  axis_fit(&y, tlo, thi, 6, bottom, top);
  char label[512], s[256], ux[64];
  snprintf(label, sizeof label, "Simulated step time of %s on %s against the memory budget, one line per strategy",
           r->g->name, r->d->name);
  svg_open(o, h, label);
  snprintf(s, sizeof s, "Step time against memory budget: %s on %s", r->g->name, r->d->name);
  text(o, x.px0, 24, "start", "font-size=\"15\" font-weight=\"bold\"", s);
  snprintf(ux, sizeof ux, "memory budget (%s)", u.name);
  frame(o, &x, &y, ux, "simulated step time (ms)", true);
  if (clipped) text(o, x.px1, 40, "end", "font-size=\"11\" fill=\"#555555\"",
                    "times past 2x keep-all: drawn at the top edge, value written");
  /* Right axis: the same ticks as slowdown against keep-all. */
  for (int i = 0; i <= axis_ticks(&y); i++) {
    double v = axis_at(&y, i), pct = (v / t_keep - 1) * 100;
    snprintf(s, sizeof s, "%+.*f%%", fabs(pct) < 10 && y.step / t_keep < 0.05 ? 1 : 0, pct);
    text(o, x.px1 + 6, axis_px(&y, v) + 4, "start", "font-size=\"11\" fill=\"#555555\"", s);
  }
  snprintf(s, sizeof s, "font-size=\"11\" fill=\"#555555\" transform=\"rotate(90 %.1f %.1f)\"", x.px1 + 46.0,
           (y.px0 + y.px1) / 2);
  text(o, x.px1 + 46, (y.px0 + y.px1) / 2, "middle", s, "slowdown vs keep-all");
  /* Reference lines: keep-all time, m, k and the device. */
  double py = axis_px(&y, t_keep);
  buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666666\" stroke-width=\"1.2\" "
                "stroke-dasharray=\"2 4\"/>\n", x.px0, py, x.px1, py);
  snprintf(s, sizeof s, "keep-all: %.3f ms", t_keep);
  text(o, x.px0 + 6, py - 5, "start", "font-size=\"11\" fill=\"#444444\"", s);
  snprintf(s, sizeof s, "smallest plannable budget %.2f %s", (double)r->min_budget / u.bytes, u.name);
  vline(o, &x, &y, (double)r->min_budget / u.bytes, "#666666", "4 3", s);
  snprintf(s, sizeof s, "keep-all needs %.2f %s", (double)k / u.bytes, u.name);
  vline(o, &x, &y, (double)k / u.bytes, "#666666", "4 3", s);
  if (device_on) {
    snprintf(s, sizeof s, "%s usable %.2f %s", r->d->name, (double)usable / u.bytes, u.name);
    vline(o, &x, &y, (double)usable / u.bytes, "#b00020", "", s);
  } else {
    snprintf(s, sizeof s, "%s: %.2f %s usable, %s the chart", r->d->name, (double)usable / u.bytes, u.name,
             usable > bmax ? "right of" : "left of");
    text(o, x.px1 - 6, y.px0 - 8, "end", "font-size=\"11\" fill=\"#b00020\"", s);
  }
  /* Lines: segments join consecutive feasible points only. */
  for (int j = 0; j < ns; j++) {
    const Style *st = style_of(r->strategies[j]);
    double wdt = strcmp(r->strategies[j], "ilp") ? 2 : 3;
    bool pen = false;
    for (int i = 0; i < np; i++) {
      const ReportCell *c = &r->cells[i * ns + j];
      if (!c->feasible) {
        pen = false;
        continue;
      }
      double t = ms(c->predicted.step_seconds);
      double px = axis_px(&x, (double)r->budgets[i] / u.bytes), pyy = axis_px(&y, t > y.hi ? y.hi : t);
      if (!pen)
        buf_printf(o, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s d=\"", st->color, wdt,
                   *st->dash ? " stroke-dasharray=\"" : "", st->dash, *st->dash ? "\"" : "");
      buf_printf(o, "%s%.1f %.1f", pen ? "L" : "M", px, pyy);
      bool next = i + 1 < np && r->cells[(i + 1) * ns + j].feasible;
      if (!next) buf_printf(o, "\"/>\n");
      pen = next;
    }
    double shown = -1;
    for (int i = 0; i < np; i++) {
      const ReportCell *c = &r->cells[i * ns + j];
      if (!c->feasible) continue;
      double t = ms(c->predicted.step_seconds), px = axis_px(&x, (double)r->budgets[i] / u.bytes);
      marker(o, st->marker, px, axis_px(&y, t > y.hi ? y.hi : t), st->color, false);
      if (t > y.hi && t != shown) {
        snprintf(s, sizeof s, "%s %.1f ms \u2191", r->strategies[j], t);
        text(o, px + 6, y.px1 + 14 + 12 * (j % 2), "start", "font-size=\"10\"", s);
        shown = t;
      }
    }
  }
  /* The infeasible strip: one row per strategy, hollow markers where it has no plan. */
  text(o, x.px0, strip, "start", "font-size=\"12\" font-weight=\"bold\"",
       "No plan within the budget (infeasible) at:");
  for (int j = 0; j < ns; j++) {
    const Style *st = style_of(r->strategies[j]);
    double ry = strip + 16 + j * 15;
    text(o, x.px0 - 8, ry + 4, "end", "font-size=\"11\"", r->strategies[j]);
    buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n", x.px0, ry, x.px1, ry);
    int nbad = 0;
    for (int i = 0; i < np; i++)
      if (!r->cells[i * ns + j].feasible) {
        marker(o, st->marker, axis_px(&x, (double)r->budgets[i] / u.bytes), ry, st->color, true);
        nbad++;
      }
    if (!nbad) text(o, x.px0 + 6, ry + 4, "start", "font-size=\"11\" fill=\"#777777\"", "(feasible at every budget)");
  }
  /* Legend. */
  double lx = x.px1 + 58, ly = top + 6;
  text(o, lx, ly, "start", "font-weight=\"bold\"", "strategy");
  for (int j = 0; j < ns; j++) legend_line(o, lx, ly + 18 + j * 20, style_of(r->strategies[j]),
                                           strcmp(r->strategies[j], "ilp") ? 2 : 3, r->strategies[j]);
  buf_printf(o, "</svg>\n");
}

/* -------------------------------------- chart 2: where the time goes */

/* Fill patterns: hatching and dots read in greyscale where hues do not. */
static void patterns(Buf *o, const char *prefix) {
  buf_printf(o,
             "<defs>\n"
             "<pattern id=\"%s-hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
             "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fbe3d3\"/>"
             "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d55e00\" stroke-width=\"3\"/></pattern>\n"
             "<pattern id=\"%s-dots\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\">"
             "<rect width=\"5\" height=\"5\" fill=\"#d8f0e6\"/><circle cx=\"2.5\" cy=\"2.5\" r=\"1.4\" fill=\"#00704f\"/>"
             "</pattern>\n"
             "<pattern id=\"%s-cross\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
             "<rect width=\"6\" height=\"6\" fill=\"#efe2f5\"/><path d=\"M0 0L6 6M6 0L0 6\" stroke=\"#7b3294\" "
             "stroke-width=\"1\"/></pattern>\n"
             "</defs>\n",
             prefix, prefix, prefix);
}

static void swatch(Buf *o, double x, double y, const char *fill, const char *name) {
  buf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"12\" fill=\"%s\" stroke=\"#333333\" stroke-width=\"0.6\"/>\n",
             x, y - 9, fill);
  text(o, x + 22, y + 1, "start", "", name);
}

void report_chart_split(const Report *r, Buf *o) {
  int np = r->npoints, ns = r->nstrategies;
  int64_t bmax = 0;
  for (int i = 0; i < np; i++)
    if (r->budgets[i] > bmax) bmax = r->budgets[i];
  ReportUnit u = report_unit(bmax);
  double t_keep = ms(r->keep_all->predicted.step_seconds), times[1000];
  int nt = 0;
  for (int i = 0; i < np && nt < 1000; i++) {
    int b = report_best(r, i);
    if (b >= 0) times[nt++] = ms(r->cells[i * ns + b].predicted.step_seconds);
  }
  double thi = time_top(t_keep, times, nt);
  int top = 64, bottom = 318, h = bottom + 118;
  Axis x = {.px0 = X0, .px1 = W - 215}, y;
  axis_fit(&y, 0, thi * 1.12, 6, bottom, top);
  char label[512], s[256];
  snprintf(label, sizeof label, "Step time split into compute, recompute and stalls of the fastest plan at each budget, %s on %s",
           r->g->name, r->d->name);
  svg_open(o, h, label);
  patterns(o, "split");
  text(o, x.px0, 24, "start", "font-size=\"15\" font-weight=\"bold\"",
       "Where the time goes: the fastest plan at each budget");
  frame(o, &x, &y, "", "simulated step time (ms)", false);
  snprintf(s, sizeof s, "memory budget (%s), fastest strategy", u.name);
  text(o, (x.px0 + x.px1) / 2, h - 8, "middle", "font-size=\"13\"", s);
  double slot = (x.px1 - x.px0) / np, bw = slot * 0.6 < 56 ? slot * 0.6 : 56;
  for (int i = 0; i < np; i++) {
    double cx = x.px0 + slot * (i + 0.5);
    snprintf(s, sizeof s, "%.2f", (double)r->budgets[i] / u.bytes);
    text(o, cx, bottom + 16, "middle", "font-size=\"11\"", s);
    int b = report_best(r, i);
    if (b < 0) {
      char rot[96];
      snprintf(rot, sizeof rot, "font-size=\"11\" fill=\"#b00020\" transform=\"rotate(-90 %.1f %.1f)\"", cx + 4, bottom - 8.0);
      text(o, cx + 4, bottom - 8, "start", rot, "infeasible: no plan");
      continue;
    }
    const ReportCell *c = &r->cells[i * ns + b];
    char rot[96];
    snprintf(rot, sizeof rot, "font-size=\"11\" transform=\"rotate(35 %.1f %.1f)\"", cx - 4, bottom + 30.0);
    text(o, cx - 4, bottom + 30, "start", rot, r->strategies[b]);
    double parts[3] = {ms(c->predicted.compute_seconds), ms(c->predicted.recompute_seconds), ms(c->predicted.stall_seconds)};
    static const char *fills[3] = {"#3a6ea5", "url(#split-hatch)", "url(#split-cross)"};
    double base = 0;
    for (int k = 0; k < 3; k++) {
      if (parts[k] <= 0 || base >= y.hi) continue;
      double end = base + parts[k] > y.hi ? y.hi : base + parts[k];
      double y0 = axis_px(&y, base), y1 = axis_px(&y, end);
      buf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#222222\" "
                    "stroke-width=\"0.6\"/>\n", cx - bw / 2, y1, bw, y0 - y1, fills[k]);
      base = end;
    }
    double total = ms(c->predicted.step_seconds);
    if (total > y.hi) {
      /* A break mark says the bar goes on past the axis. */
      double by = y.px1 + 10;
      buf_printf(o, "<path d=\"M%.1f %.1fl%.1f -5l%.1f 5l%.1f -5l%.1f 5V%.1fH%.1fZ\" fill=\"#ffffff\"/>\n",
                 cx - bw / 2 - 1, by, (bw + 2) / 4, (bw + 2) / 4, (bw + 2) / 4, (bw + 2) / 4, by + 5, cx - bw / 2 - 1);
      snprintf(s, sizeof s, "%.1f ms", total);
      text(o, cx, y.px1 - 16, "middle", "font-size=\"10\"", s);
      snprintf(s, sizeof s, "%+.0f%%", (total / t_keep - 1) * 100);
      text(o, cx, y.px1 - 4, "middle", "font-size=\"10\"", s);
      continue;
    }
    snprintf(s, sizeof s, "%+.1f%%", (total / t_keep - 1) * 100);
    text(o, cx, axis_px(&y, total > base ? total : base) - 4, "middle", "font-size=\"10\"", s);
  }
  double py = axis_px(&y, t_keep);
  buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\" stroke-width=\"1.2\" "
                "stroke-dasharray=\"2 4\"/>\n", x.px0, py, x.px1, py);
  double lx = x.px1 + 20, ly = top + 6;
  text(o, lx, ly, "start", "font-weight=\"bold\"", "time");
  swatch(o, lx, ly + 22, "#3a6ea5", "compute");
  swatch(o, lx, ly + 42, "url(#split-hatch)", "recompute");
  swatch(o, lx, ly + 62, "url(#split-cross)", "stall (waiting on copies)");
  buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\" stroke-width=\"1.2\" "
                "stroke-dasharray=\"2 4\"/>\n", lx, ly + 78, lx + 16, ly + 78);
  snprintf(s, sizeof s, "keep-all %.3f ms", t_keep);
  text(o, lx + 22, ly + 82, "start", "", s);
  text(o, lx, ly + 102, "start", "font-size=\"11\" fill=\"#555555\"", "label: slowdown vs keep-all");
  buf_printf(o, "</svg>\n");
}

/* ---------------------------------------- chart 3: memory timeline */

static const char *const kind_names[REPORT_KINDS] = {
    "params", "grads", "optimizer state", "inputs", "stashed, kept", "recomputed",
    "prefetched", "copies in flight", "other activations", "workspace"};

const char *report_kind_name(ReportKind k) { return k >= 0 && k < REPORT_KINDS ? kind_names[k] : "?"; }

/* Dark and light alternate up the stack; the planner's own kinds carry patterns. */
static const char *const kind_fills[REPORT_KINDS] = {
    "#24364d", "#5b7fa6", "#a9c1dc", "#e3e3e3", "#e69f00", "url(#tl-hatch)",
    "url(#tl-dots)", "url(#tl-cross)", "#8c8c8c", "#1a1a1a"};

int64_t *report_timeline(const Plan *p, const Graph *g, Err *e) {
  int nb = p->nbuffers, ns = p->nsteps;
  int *first = util_xcalloc((size_t)nb + 1, sizeof(int)), *last = util_xcalloc((size_t)nb + 1, sizeof(int));
  int *mid = util_xcalloc((size_t)nb + 1, sizeof(int));
  unsigned char *ka = util_xcalloc((size_t)nb + 1, 1), *kb = util_xcalloc((size_t)nb + 1, 1);
  int64_t *delta = util_xcalloc(((size_t)ns + 1) * REPORT_KINDS, sizeof(int64_t));
  int64_t *out = NULL;
  if (!first || !last || !mid || !ka || !kb || !delta) {
    err_set(e, "%s: out of memory", g->path);
    goto done;
  }
  if (sim_occupancy(p, g, first, last)) {
    err_set(e, "%s: the plan names a buffer or op that does not exist", g->path);
    goto done;
  }
  static const ReportKind resident[KIND_COUNT] = {
      [KIND_INPUT] = REPORT_INPUTS, [KIND_PARAM] = REPORT_PARAMS, [KIND_GRAD] = REPORT_GRADS,
      [KIND_OPTSTATE] = REPORT_OPTSTATE, [KIND_ACTIVATION] = REPORT_OTHER};
  for (int b = 0; b < nb; b++) {
    const Buffer *bf = &p->buffers[b];
    mid[b] = -1;
    if (bf->tensor < 0) ka[b] = REPORT_WORKSPACE;
    else if (graph_is_resident(&g->tensors[bf->tensor])) ka[b] = resident[g->tensors[bf->tensor].kind];
    else if (g->tensors[bf->tensor].stashed && p->decisions[bf->tensor] == DEC_KEEP) ka[b] = REPORT_KEPT;
    else ka[b] = REPORT_OTHER;
  }
  /* What the steps make of a buffer: a re-run's output, a prefetch target
   * (in flight until its wait), an offload source (in flight from its copy on). */
  for (int s = 0; s < ns; s++) {
    const Step *st = &p->steps[s];
    if (st->kind == STEP_COMPUTE && st->recompute) {
      for (int k = 0; k < g->ops[st->op].noutputs; k++) {
        int b = st->outputs[k];
        if (p->buffers[b].tensor >= 0 && !graph_is_resident(&g->tensors[p->buffers[b].tensor])) ka[b] = REPORT_RECOMPUTED;
      }
    } else if (st->kind == STEP_PREFETCH) {
      ka[st->to] = REPORT_IN_FLIGHT;
      kb[st->to] = REPORT_PREFETCHED;
    } else if (st->kind == STEP_PREFETCH_WAIT) {
      mid[st->to] = s;
    } else if (st->kind == STEP_OFFLOAD && p->buffers[st->from].space == SPACE_DEVICE) {
      mid[st->from] = s;
      kb[st->from] = REPORT_IN_FLIGHT;
    }
  }
  for (int b = 0; b < nb; b++) {
    if (first[b] < 0 || p->buffers[b].space != SPACE_DEVICE) continue;
    int64_t bytes = p->buffers[b].bytes;
    int split = mid[b] < 0 ? last[b] + 1 : mid[b] <= first[b] ? first[b] : mid[b] > last[b] ? last[b] + 1 : mid[b];
    if (split > first[b]) {
      delta[(size_t)first[b] * REPORT_KINDS + ka[b]] += bytes;
      delta[(size_t)split * REPORT_KINDS + ka[b]] -= bytes;
    }
    if (split <= last[b]) {
      delta[(size_t)split * REPORT_KINDS + kb[b]] += bytes;
      delta[((size_t)last[b] + 1) * REPORT_KINDS + kb[b]] -= bytes;
    }
  }
  out = util_xcalloc((size_t)ns * REPORT_KINDS + 1, sizeof(int64_t));
  if (!out) {
    err_set(e, "%s: out of memory", g->path);
    goto done;
  }
  for (int k = 0; k < REPORT_KINDS; k++) {
    int64_t run = 0;
    for (int s = 0; s < ns; s++) out[(size_t)s * REPORT_KINDS + k] = run += delta[(size_t)s * REPORT_KINDS + k];
  }
done:
  free(first);
  free(last);
  free(mid);
  free(ka);
  free(kb);
  free(delta);
  return out;
}

/* The phase a step belongs to: that of the next op in graph order (a
 * recompute or copy serves the op it precedes). */
static Phase *step_phases(const Plan *p, const Graph *g) {
  Phase *ph = util_xcalloc((size_t)p->nsteps + 1, sizeof *ph);
  if (!ph) return NULL;
  Phase next = PHASE_OPTIMIZER;
  for (int s = p->nsteps - 1; s >= 0; s--) {
    const Step *st = &p->steps[s];
    if (st->kind == STEP_COMPUTE && !st->recompute) next = g->ops[st->op].phase;
    ph[s] = next;
  }
  return ph;
}

/* One band of the stack as a step-shaped path: along its top edge left to
 * right, back along its bottom edge; only changes cost bytes. */
static void band(Buf *o, const Axis *x, const Axis *y, const double *lo, const double *hi, int ncols, const char *fill) {
  double colw = (x->px1 - x->px0) / ncols;
  buf_printf(o, "<path fill=\"%s\" d=\"M%.1f %.1f", fill, x->px0, axis_px(y, hi[0]));
  for (int c = 0; c < ncols; c++) {
    if (c && hi[c] != hi[c - 1]) buf_printf(o, "V%.1f", axis_px(y, hi[c]));
    if (c + 1 == ncols || hi[c + 1] != hi[c]) buf_printf(o, "H%.1f", x->px0 + colw * (c + 1));
  }
  buf_printf(o, "V%.1f", axis_px(y, lo[ncols - 1]));
  for (int c = ncols - 1; c >= 0; c--) {
    if (c + 1 < ncols && lo[c] != lo[c + 1]) buf_printf(o, "V%.1f", axis_px(y, lo[c]));
    if (c == 0 || lo[c - 1] != lo[c]) buf_printf(o, "H%.1f", x->px0 + colw * c);
  }
  buf_printf(o, "Z\"/>\n");
}

int report_chart_timeline(const Plan *p, const Graph *g, bool standalone, Buf *o, Err *e) {
  int ns = p->nsteps;
  if (ns <= 0) return err_set(e, "%s: the plan has no steps to draw", g->path);
  int64_t *tl = report_timeline(p, g, e);
  if (!tl) return -1;
  Phase *ph = step_phases(p, g);
  /* Columns: at most ~one per pixel; each shows its step of most live
   * bytes, so the peak is never averaged away. */
  int ncols = ns < 600 ? ns : 600;
  int *rep = util_xcalloc((size_t)ncols, sizeof(int));
  double *cum = util_xcalloc((size_t)(REPORT_KINDS + 1) * ncols, sizeof(double));
  if (!ph || !rep || !cum) {
    free(tl), free(ph), free(rep), free(cum);
    return err_set(e, "%s: out of memory", g->path);
  }
  int64_t peak = 0, at_peak[REPORT_KINDS] = {0};
  int peak_step = 0;
  bool used[REPORT_KINDS] = {false};
  for (int s = 0; s < ns; s++) {
    int64_t tot = 0;
    for (int k = 0; k < REPORT_KINDS; k++) {
      tot += tl[(size_t)s * REPORT_KINDS + k];
      if (tl[(size_t)s * REPORT_KINDS + k]) used[k] = true;
    }
    if (tot > peak) peak = tot, peak_step = s;
  }
  for (int k = 0; k < REPORT_KINDS; k++) at_peak[k] = tl[(size_t)peak_step * REPORT_KINDS + k];
  bool budget_on = p->budget_bytes <= peak + peak / 3;
  ReportUnit u = report_unit(budget_on && p->budget_bytes > peak ? p->budget_bytes : peak);
  for (int c = 0; c < ncols; c++) {
    int s0 = (int)((int64_t)c * ns / ncols), s1 = (int)((int64_t)(c + 1) * ns / ncols);
    int64_t best = -1;
    for (int s = s0; s < s1; s++) {
      int64_t tot = 0;
      for (int k = 0; k < REPORT_KINDS; k++) tot += tl[(size_t)s * REPORT_KINDS + k];
      if (tot > best) best = tot, rep[c] = s;
    }
    if (peak_step >= s0 && peak_step < s1) rep[c] = peak_step;
    double run = 0;
    for (int k = 0; k < REPORT_KINDS; k++) {
      cum[(size_t)k * ncols + c] = run;
      run += (double)tl[(size_t)rep[c] * REPORT_KINDS + k] / u.bytes;
    }
    cum[(size_t)REPORT_KINDS * ncols + c] = run;
  }
  int top = 72, bottom = 368, h = bottom + 50;
  Axis x, y;
  axis_fit(&x, 0, ns, 8, X0, W - 235);
  x.hi = ns; /* the data ends at the last step; ticks stop before it */
  double ymax = (double)(budget_on && p->budget_bytes > peak ? p->budget_bytes : peak) / u.bytes;
  axis_fit(&y, 0, ymax * 1.04, 6, bottom, top);
  char label[512], s[512], b1[32];
  snprintf(label, sizeof label, "Memory timeline of the %s plan of %s on %s: live device bytes at every step by kind",
           p->strategy, g->name, p->device);
  if (standalone) buf_printf(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  svg_open(o, h, label);
  patterns(o, "tl");
  if (p->budget_bytes < INT64_MAX)
    snprintf(s, sizeof s, "Memory timeline: %s at a budget of %.2f %s", p->strategy, (double)p->budget_bytes / u.bytes, u.name);
  else
    snprintf(s, sizeof s, "Memory timeline: %s", p->strategy);
  text(o, x.px0, 24, "start", "font-size=\"15\" font-weight=\"bold\"", s);
  snprintf(s, sizeof s, "%s on %s: peak live %.2f %s at step %d, arena %.2f %s, step time %.3f ms", g->name, p->device,
           (double)peak / u.bytes, u.name, peak_step, (double)p->arena_bytes / u.bytes, u.name,
           ms(p->predicted.step_seconds));
  text(o, x.px0, 42, "start", "font-size=\"12\" fill=\"#444444\"", s);
  /* Phase bands behind the data. */
  static const char *phase_fill[PHASE_COUNT] = {"#f3f6fa", "#fbf7ee", "#f0f0f0"};
  for (int s0 = 0; s0 < ns;) {
    int s1 = s0;
    while (s1 < ns && ph[s1] == ph[s0]) s1++;
    double a = axis_px(&x, s0), b = axis_px(&x, s1);
    buf_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", a, y.px1, b - a,
               y.px0 - y.px1, phase_fill[ph[s0]]);
    if (b - a > 60) text(o, (a + b) / 2, y.px1 - 5, "middle", "font-size=\"11\" fill=\"#666666\"", graph_phase_name(ph[s0]));
    s0 = s1;
  }
  snprintf(s, sizeof s, "live device bytes (%s)", u.name);
  frame(o, &x, &y, "step of the schedule (compute, recompute and copy steps, in order)", s, true);
  for (int k = 0; k < REPORT_KINDS; k++)
    if (used[k]) band(o, &x, &y, &cum[(size_t)k * ncols], &cum[(size_t)(k + 1) * ncols], ncols, kind_fills[k]);
  /* Peak and budget. */
  double colw = (x.px1 - x.px0) / ncols;
  int pc = (int)((int64_t)peak_step * ncols / ns);
  double px = x.px0 + colw * (pc + 0.5), py = axis_px(&y, (double)peak / u.bytes);
  buf_printf(o, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"#000000\"/>\n", px, py - 2, px - 5, py - 10, px + 5, py - 10);
  snprintf(s, sizeof s, "peak %s", util_fmt_bytes(peak, b1, sizeof b1));
  text(o, px > x.px1 - 80 ? px - 8 : px + 8, py - 8, px > x.px1 - 80 ? "end" : "start", "font-size=\"11\"", s);
  if (budget_on) {
    double by = axis_px(&y, (double)p->budget_bytes / u.bytes);
    buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#b00020\" stroke-width=\"2\" "
                  "stroke-dasharray=\"10 4\"/>\n", x.px0, by, x.px1, by);
    snprintf(s, sizeof s, "budget %s", util_fmt_bytes(p->budget_bytes, b1, sizeof b1));
    text(o, x.px0 + 6, by - 5, "start", "font-size=\"11\" fill=\"#b00020\"", s);
  } else if (p->budget_bytes < INT64_MAX) {
    snprintf(s, sizeof s, "budget %s: above the chart", util_fmt_bytes(p->budget_bytes, b1, sizeof b1));
    text(o, x.px1 - 6, y.px1 + 28, "end", "font-size=\"11\" fill=\"#b00020\"", s);
  }
  /* Legend, top of the stack first, with each kind's bytes at the peak. */
  double lx = x.px1 + 16, ly = top + 4;
  text(o, lx, ly, "start", "font-weight=\"bold\"", "live bytes (at the peak)");
  int row = 0;
  for (int k = REPORT_KINDS - 1; k >= 0; k--) {
    if (!used[k]) continue;
    snprintf(s, sizeof s, "%s (%s)", kind_names[k], util_fmt_bytes(at_peak[k], b1, sizeof b1));
    swatch(o, lx, ly + 22 + row * 20, kind_fills[k], s);
    row++;
  }
  buf_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#b00020\" stroke-width=\"2\" "
                "stroke-dasharray=\"10 4\"/>\n", lx, ly + 18 + row * 20, lx + 16, ly + 18 + row * 20);
  text(o, lx + 22, ly + 22 + row * 20, "start", "", "budget");
  buf_printf(o, "</svg>\n");
  free(tl), free(ph), free(rep), free(cum);
  if (o->failed) return err_set(e, "%s: out of memory", g->path);
  return 0;
}
