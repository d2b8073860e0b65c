/*
 * report.c - budget-vs-speed reports: plans every strategy at every budget
 * point and writes what a person needs to pick a budget: report.html (the
 * charts of report_chart.c, the answer in a few lines, every number in a
 * table), report.csv (every number, for tools) and report.md (the same
 * tables as text). Every output is a function of the graph, the device and
 * the options, except the solve seconds, which are measured.
 */
#include "ration.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void report_free(Report *r) {
  for (int j = 0; j < r->nstrategies; j++) free(r->strategies[j]);
  free(r->strategies);
  free(r->command);
  free(r->budgets);
  free(r->fractions);
  free(r->cells);
  plan_free(r->keep_all);
  plan_free(r->timeline);
  memset(r, 0, sizeof *r);
}

/* A strategy's error without the graph path its message starts with. */
static void set_note(ReportCell *c, const Graph *g, const char *msg) {
  size_t n = strlen(g->path);
  if (!strncmp(msg, g->path, n) && !strncmp(msg + n, ": ", 2)) msg += n + 2;
  size_t len = strlen(msg) < sizeof c->note - 1 ? strlen(msg) : sizeof c->note - 1;
  memcpy(c->note, msg, len);
  c->note[len] = 0;
}

/* m when the planner gives no number of its own: the smallest arena any of
 * the report's strategies reaches with no budget at all; note: GLPK's
 * failure when m is the ilp's and only the least found before it. */
static int64_t smallest_arena(const Report *r, const PlanOptions *base, char *note) {
  int64_t m = r->keep_all->arena_bytes;
  note[0] = 0;
  for (int j = 0; j < r->nstrategies; j++) {
    PlanOptions po = *base;
    po.strategy = r->strategies[j];
    po.budget_bytes = INT64_MAX;
    Err e;
    int64_t b = -1;
    char ilp_note[sizeof r->min_budget_note] = "";
    /* Without a budget the ilp keeps everything; its smallest is the
     * budget its memory-minimizing solve names. */
    if (!strcmp(po.strategy, "ilp")) {
      b = plan_ilp_min_budget(r->g, r->d, &po, ilp_note, &e);
    } else {
      Plan *p = plan_make(r->g, r->d, &po, &e);
      if (p) b = p->arena_bytes;
      plan_free(p);
    }
    if (b > 0 && b < m) m = b, memcpy(note, ilp_note, sizeof ilp_note);
  }
  return m;
}

int report_best(const Report *r, int point) {
  int best = -1;
  for (int j = 0; j < r->nstrategies; j++) {
    const ReportCell *c = &r->cells[point * r->nstrategies + j];
    if (c->feasible && (best < 0 || c->predicted.step_seconds <
                                        r->cells[point * r->nstrategies + best].predicted.step_seconds))
      best = j;
  }
  return best;
}

static int oom(Report *r, const Graph *g, Err *e) {
  report_free(r);
  return err_set(e, "%s: out of memory", g->path);
}

/* The plan the timeline shows: ilp where it has one, else the fastest. */
static int timeline_choice(const Report *r, int point) {
  for (int j = 0; j < r->nstrategies; j++)
    if (!strcmp(r->strategies[j], "ilp") && r->cells[point * r->nstrategies + j].feasible) return j;
  return report_best(r, point);
}

int report_sweep(Report *r, const Graph *g, const Device *d, const ReportOptions *o, Err *e) {
  memset(r, 0, sizeof *r);
  r->g = g;
  r->d = d;
  int ns = 0;
  if (o->strategies) {
    for (int j = 0; j < o->nstrategies; j++)
      if (!plan_find_strategy(o->strategies[j])) return err_set(e, "--strategies: unknown strategy \"%s\"", o->strategies[j]);
    ns = o->nstrategies;
  } else {
    while (plan_strategies[ns].name) ns++;
  }
  if (ns <= 0) return err_set(e, "--strategies: no strategy given");
  r->strategies = util_xcalloc((size_t)ns, sizeof *r->strategies);
  if (!r->strategies) return oom(r, g, e);
  r->nstrategies = ns;
  for (int j = 0; j < ns; j++)
    if (!(r->strategies[j] = util_strdup(o->strategies ? o->strategies[j] : plan_strategies[j].name))) return oom(r, g, e);
  if (o->command && !(r->command = util_strdup(o->command))) return oom(r, g, e);

  PlanOptions base = {.strategy = "keep-all", .solver = o->solver ? o->solver : "glpk", .budget_bytes = INT64_MAX,
                      .time_limit = o->time_limit, .quiet = true};
  if (!(r->keep_all = plan_make(g, d, &base, e))) {
    report_free(r);
    return -1;
  }
  /* k is a budget, and budgets bound arenas: keep-all's arena is its peak
   * on real models, a little more where alignment pads small tensors. */
  int64_t k = r->keep_all->arena_bytes > r->keep_all->predicted.peak_live_bytes ? r->keep_all->arena_bytes
                                                                               : r->keep_all->predicted.peak_live_bytes;
  r->keep_all_bytes = k;
  r->min_budget = smallest_arena(r, &base, r->min_budget_note);
  int64_t m = r->min_budget < k ? r->min_budget : k;

  int np = o->budgets ? o->nbudgets : o->npoints > 0 ? o->npoints : 11;
  if (np > 1000) {
    report_free(r);
    return err_set(e, "--points: %d points is more than 1000", np);
  }
  r->budgets = util_xcalloc((size_t)np, sizeof *r->budgets);
  r->fractions = util_xcalloc((size_t)np, sizeof *r->fractions);
  r->cells = util_xcalloc((size_t)np * (size_t)ns, sizeof *r->cells);
  if (!r->budgets || !r->fractions || !r->cells) return oom(r, g, e);
  r->npoints = np;
  for (int i = 0; i < np; i++) {
    if (o->budgets) {
      r->budgets[i] = o->budgets[i];
      r->fractions[i] = -1;
    } else {
      /* Integer arithmetic: the points are exact bytes on every machine. */
      r->budgets[i] = np == 1 ? k : m + (k - m) / (np - 1) * i + (k - m) % (np - 1) * i / (np - 1);
      r->fractions[i] = np == 1 ? 1.0 : (double)i / (np - 1);
    }
  }

  int mid = (np - 1) / 2;
  Plan **at_mid = util_xcalloc((size_t)ns, sizeof *at_mid);
  if (!at_mid) return oom(r, g, e);
  /* Each strategy's last plan starts the next, larger budget's solve, so
   * more memory never buys a slower ilp plan. */
  Decision **last = util_xcalloc((size_t)ns, sizeof *last);
  int64_t *last_budget = util_xcalloc((size_t)ns, sizeof *last_budget);
  if (!last || !last_budget) {
    free(last), free(last_budget), free(at_mid);
    return oom(r, g, e);
  }
  double t0 = now_seconds();
  bool shown = false;
  for (int i = 0; i < np; i++)
    for (int j = 0; j < ns; j++) {
      double elapsed = now_seconds() - t0;
      if (o->progress && elapsed >= 1.0) {
        char b1[32];
        fprintf(stderr, "\rreport: point %d of %d (%s), %-18s %6.1f s elapsed ", i + 1, np,
                util_fmt_bytes(r->budgets[i], b1, sizeof b1), r->strategies[j], elapsed);
        shown = true;
      }
      ReportCell *c = &r->cells[i * ns + j];
      PlanOptions po = base;
      po.strategy = r->strategies[j];
      po.budget_bytes = r->budgets[i];
      po.hint = last[j] && last_budget[j] <= po.budget_bytes ? last[j] : NULL;
      Err pe;
      double start = now_seconds();
      Plan *p = plan_make(g, d, &po, &pe);
      c->seconds = now_seconds() - start;
      if (!p) {
        set_note(c, g, pe.msg);
        continue;
      }
      if (!last[j]) last[j] = util_xcalloc((size_t)g->ntensors + 1, sizeof(Decision));
      if (last[j]) {
        memcpy(last[j], p->decisions, (size_t)g->ntensors * sizeof(Decision));
        last_budget[j] = po.budget_bytes;
      }
      c->feasible = true;
      c->predicted = p->predicted;
      c->arena_bytes = p->arena_bytes;
      c->host_bytes = p->host_bytes;
      c->solver = p->solver;
      if (i == mid) at_mid[j] = p;
      else plan_free(p);
    }
  if (shown) fprintf(stderr, "\rreport: %d points x %d strategies in %.1f s%40s\n", np, ns, now_seconds() - t0, "");
  for (int j = 0; j < ns; j++) free(last[j]);
  free(last), free(last_budget);

  /* The timeline: the middle point, else the nearest point with a plan. */
  r->timeline_point = -1;
  for (int step = 0; step < np && r->timeline_point < 0; step++)
    for (int sign = 1; sign >= -1; sign -= 2) {
      int i = mid + sign * step;
      if (i < 0 || i >= np || timeline_choice(r, i) < 0) continue;
      r->timeline_point = i;
      break;
    }
  int tj = r->timeline_point >= 0 ? timeline_choice(r, r->timeline_point) : -1;
  if (tj >= 0 && r->timeline_point == mid) {
    r->timeline = at_mid[tj];
    at_mid[tj] = NULL;
  } else if (tj >= 0) {
    PlanOptions po = base;
    po.strategy = r->strategies[tj];
    po.budget_bytes = r->budgets[r->timeline_point];
    r->timeline = plan_make(g, d, &po, e);
  }
  for (int j = 0; j < ns; j++) plan_free(at_mid[j]);
  free(at_mid);
  if (tj >= 0 && !r->timeline) {
    report_free(r);
    return -1;
  }
  return 0;
}

/* --------------------------------------------------------- formatting */

static double ms(double s) { return s * 1e3; }

static ReportUnit unit_of(const Report *r) {
  int64_t big = r->keep_all_bytes;
  for (int i = 0; i < r->npoints; i++)
    if (r->budgets[i] > big) big = r->budgets[i];
  return report_unit(big);
}

static double overhead_pct(const Report *r, double seconds) {
  return (seconds / r->keep_all->predicted.step_seconds - 1) * 100;
}

/* "0.50" for a swept point, "" when budgets were given by hand. */
static void fraction_str(const Report *r, int i, char *s, size_t n) {
  if (r->fractions[i] < 0) snprintf(s, n, "-");
  else snprintf(s, n, "%.2f", r->fractions[i]);
}

static void gap_str(const ReportCell *c, char *s, size_t n) {
  if (!strcmp(c->solver.status, "not_used")) snprintf(s, n, "-");
  else snprintf(s, n, "%.2f%%", c->solver.gap * 100);
}

/* The smallest swept budget whose fastest plan is within `pct` of keep-all. */
static int cheapest_within(const Report *r, double pct) {
  int found = -1;
  for (int i = 0; i < r->npoints; i++) {
    int b = report_best(r, i);
    if (b < 0 || overhead_pct(r, r->cells[i * r->nstrategies + b].predicted.step_seconds) > pct) continue;
    if (found < 0 || r->budgets[i] < r->budgets[found]) found = i;
  }
  return found;
}

static const double thresholds[] = {0.1, 1, 5, 10, 25, 50};
#define NTHRESHOLDS (int)(sizeof thresholds / sizeof thresholds[0])

/* Text from the inputs (names, notes) as Markdown that shows it as it is:
 * what could start markup, a link, an HTML tag or entity, or a table cell
 * is backslash-escaped, and a control character (a newline would start a
 * block of the name's choosing) becomes a space. */
static void md_text(Buf *o, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c == 0x7f) buf_printf(o, " ");
    else buf_printf(o, strchr("\\`*_[]<>&!~|", c) ? "\\%c" : "%c", c);
  }
}

/* The few sentences that answer "which budget, at what cost": shared by
 * the HTML (html = true) and the Markdown. */
static void answer(const Report *r, Buf *o, bool html) {
  ReportUnit u = unit_of(r);
  int ns = r->nstrategies;
  const Predicted *ka = &r->keep_all->predicted;
  int64_t usable = r->d->memory - r->d->reserve;
  const char *li = html ? "<li>" : "- ", *eli = html ? "</li>\n" : "\n";
  char dev[256];
  snprintf(dev, sizeof dev, "%s", r->d->name);
  buf_printf(o, "%s", html ? "<ul>\n" : "");
  buf_printf(o, "%sKeep-all (every stashed activation kept) needs %.2f %s and takes %.3f ms per step.%s", li,
             (double)r->keep_all_bytes / u.bytes, u.name, ms(ka->step_seconds), eli);
  buf_printf(o, "%sThe smallest budget the planner meets is %.2f %s (%.1f%% of keep-all).%s", li,
             (double)r->min_budget / u.bytes, u.name, 100.0 * (double)r->min_budget / (double)r->keep_all_bytes, eli);
  if (r->keep_all_bytes <= usable) {
    buf_printf(o, "%s", li);
    (html ? report_xml : md_text)(o, dev);
    buf_printf(o, " has %.2f %s usable, so keep-all fits; a smaller budget leaves room for a larger batch or model.%s",
               (double)usable / u.bytes, u.name, eli);
  } else {
    int fit = -1;
    for (int i = 0; i < r->npoints; i++)
      if (r->budgets[i] <= usable && report_best(r, i) >= 0 && (fit < 0 || r->budgets[i] > r->budgets[fit])) fit = i;
    buf_printf(o, "%s", li);
    (html ? report_xml : md_text)(o, dev);
    buf_printf(o, " has %.2f %s usable: keep-all does not fit.", (double)usable / u.bytes, u.name);
    if (fit >= 0) {
      const ReportCell *c = &r->cells[fit * ns + report_best(r, fit)];
      buf_printf(o, " At %.2f %s, the largest swept budget within it, the fastest plan is %s: %.3f ms (%+.1f%%).",
                 (double)r->budgets[fit] / u.bytes, u.name, r->strategies[report_best(r, fit)],
                 ms(c->predicted.step_seconds), overhead_pct(r, c->predicted.step_seconds));
    } else {
      buf_printf(o, " No swept budget within it has a plan.");
    }
    buf_printf(o, "%s", eli);
  }
  buf_printf(o, "%s", html ? "</ul>\n" : "\n");
  if (html)
    buf_printf(o, "<table class=\"answer\">\n<thead><tr><th>slowdown at most</th><th>smallest budget</th>"
                  "<th class=\"s\">strategy</th><th>step time</th><th>slowdown</th></tr></thead>\n<tbody>\n");
  else
    buf_printf(o, "| slowdown at most | smallest budget | strategy | step time | slowdown |\n|---:|---:|---|---:|---:|\n");
  for (int t = 0; t < NTHRESHOLDS; t++) {
    int i = cheapest_within(r, thresholds[t]);
    char lim[32];
    snprintf(lim, sizeof lim, "%g%%", thresholds[t]);
    if (i < 0) {
      if (html) buf_printf(o, "<tr><td>%s</td><td colspan=\"4\" class=\"s\">no swept budget</td></tr>\n", lim);
      else buf_printf(o, "| %s | no swept budget | | | |\n", lim);
      continue;
    }
    int b = report_best(r, i);
    const ReportCell *c = &r->cells[i * ns + b];
    if (html)
      buf_printf(o, "<tr><td>%s</td><td>%.2f %s</td><td class=\"s\">%s</td><td>%.3f ms</td><td>%+.2f%%</td></tr>\n", lim,
                 (double)r->budgets[i] / u.bytes, u.name, r->strategies[b], ms(c->predicted.step_seconds),
                 overhead_pct(r, c->predicted.step_seconds));
    else
      buf_printf(o, "| %s | %.2f %s | %s | %.3f ms | %+.2f%% |\n", lim, (double)r->budgets[i] / u.bytes, u.name,
                 r->strategies[b], ms(c->predicted.step_seconds), overhead_pct(r, c->predicted.step_seconds));
  }
  if (html) buf_printf(o, "</tbody>\n</table>\n");
}

/* --------------------------------------------------------------- csv */

int report_csv(const Report *r, Buf *o) {
  int ns = r->nstrategies;
  buf_printf(o, "graph,device,point,fraction,budget_bytes,strategy,feasible,step_seconds,compute_seconds,"
                "recompute_seconds,stall_seconds,overhead,peak_live_bytes,arena_bytes,host_bytes,solver,"
                "solver_status,gap,solve_seconds,note\n");
  for (int i = 0; i < r->npoints; i++)
    for (int j = 0; j < ns; j++) {
      const ReportCell *c = &r->cells[i * ns + j];
      char f[16];
      if (r->fractions[i] < 0) f[0] = 0;
      else snprintf(f, sizeof f, "%.2f", r->fractions[i]);
      util_csv_field(o, r->g->name);
      buf_printf(o, ",");
      util_csv_field(o, r->d->name);
      buf_printf(o, ",%d,%s,%" PRId64 ",", i, f, r->budgets[i]);
      util_csv_field(o, r->strategies[j]);
      if (!c->feasible) {
        buf_printf(o, ",0,,,,,,,,,,,,%.3f,", c->seconds);
        util_csv_field(o, c->note);
        buf_printf(o, "\n");
        continue;
      }
      const Predicted *p = &c->predicted;
      buf_printf(o, ",1,%.17g,%.17g,%.17g,%.17g,%.6f,%" PRId64 ",%" PRId64 ",%" PRId64 ",%s,%s,", p->step_seconds,
                 p->compute_seconds, p->recompute_seconds, p->stall_seconds,
                 p->step_seconds / r->keep_all->predicted.step_seconds - 1, p->peak_live_bytes, c->arena_bytes,
                 c->host_bytes, c->solver.name, c->solver.status);
      if (strcmp(c->solver.status, "not_used")) buf_printf(o, "%.6g", c->solver.gap);
      buf_printf(o, ",%.3f,\n", c->seconds);
    }
  return o->failed ? -1 : 0;
}

/* ---------------------------------------------------------- markdown */


int report_md(const Report *r, Buf *o) {
  ReportUnit u = unit_of(r);
  int ns = r->nstrategies;
  buf_printf(o, "# ration report: ");
  md_text(o, r->g->name);
  buf_printf(o, " on ");
  md_text(o, r->d->name);
  buf_printf(o, "\n\n");
  buf_printf(o, "Simulated training-step time of every planning strategy at every memory budget (ration %s; graph "
                "sha256 `%s`).",
             RATION_VERSION, r->g->sha256);
  if (r->command) {
    /* A code block shows its text as it is, up to a line break. */
    buf_printf(o, " Made by\n\n    ");
    for (const char *c = r->command; *c; c++) buf_printf(o, "%c", (unsigned char)*c < 0x20 ? ' ' : *c);
    buf_printf(o, "\n");
  }
  buf_printf(o, "\nThe same with explanations is in report.html; every number is in report.csv.\n\n"
                "## What budget, at what cost\n\n");
  answer(r, o, false);
  buf_printf(o, "\n## Charts\n\n![Step time against memory budget, one line per strategy](step-time.svg)\n\n"
                "![Where the time goes: the fastest plan at each budget](time-split.svg)\n");
  if (r->timeline)
    buf_printf(o, "\n![Memory timeline of the %s plan at point %d](timeline.svg)\n", r->timeline->strategy,
               r->timeline_point);
  buf_printf(o, "\n## The fastest plan at each budget\n\n"
                "| f | budget | strategy | step time | slowdown | compute | recompute | stall | peak live | arena | host |\n"
                "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < r->npoints; i++) {
    char f[16];
    fraction_str(r, i, f, sizeof f);
    int b = report_best(r, i);
    if (b < 0) {
      buf_printf(o, "| %s | %.2f %s | infeasible: no strategy has a plan | | | | | | | | |\n", f,
                 (double)r->budgets[i] / u.bytes, u.name);
      continue;
    }
    const ReportCell *c = &r->cells[i * ns + b];
    buf_printf(o, "| %s | %.2f %s | %s | %.3f ms | %+.2f%% | %.3f ms | %.3f ms | %.3f ms | %.2f %s | %.2f %s | %.2f %s |\n",
               f, (double)r->budgets[i] / u.bytes, u.name, r->strategies[b], ms(c->predicted.step_seconds),
               overhead_pct(r, c->predicted.step_seconds), ms(c->predicted.compute_seconds),
               ms(c->predicted.recompute_seconds), ms(c->predicted.stall_seconds),
               (double)c->predicted.peak_live_bytes / u.bytes, u.name, (double)c->arena_bytes / u.bytes, u.name,
               (double)c->host_bytes / u.bytes, u.name);
  }
  buf_printf(o, "\n## Every strategy at every budget\n\n"
                "| f | budget | strategy | step time | slowdown | peak live | arena | host | solver status | gap | solve s |\n"
                "|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
  for (int i = 0; i < r->npoints; i++)
    for (int j = 0; j < ns; j++) {
      const ReportCell *c = &r->cells[i * ns + j];
      char f[16], gap[32];
      fraction_str(r, i, f, sizeof f);
      buf_printf(o, "| %s | %.2f %s | %s | ", f, (double)r->budgets[i] / u.bytes, u.name, r->strategies[j]);
      if (!c->feasible) {
        buf_printf(o, "infeasible | | | | | ");
        md_text(o, c->note);
        buf_printf(o, " | | %.3f |\n", c->seconds);
        continue;
      }
      gap_str(c, gap, sizeof gap);
      buf_printf(o, "%.3f ms | %+.2f%% | %.2f %s | %.2f %s | %.2f %s | %s | %s | %.3f |\n", ms(c->predicted.step_seconds),
                 overhead_pct(r, c->predicted.step_seconds), (double)c->predicted.peak_live_bytes / u.bytes, u.name,
                 (double)c->arena_bytes / u.bytes, u.name, (double)c->host_bytes / u.bytes, u.name, c->solver.status, gap,
                 c->seconds);
    }
  buf_printf(o, "\nf is the point's place between the smallest plannable budget (0) and the keep-all peak (1). "
                "Slowdown is against keep-all's step time. Solve s is the wall-clock time of planning that point; it "
                "varies from run to run, and every other number here is the same on every run.\n");
  return o->failed ? -1 : 0;
}

/* -------------------------------------------------------------- html */

static const char css[] =
    "body{font-family:'DejaVu Sans','Liberation Sans',Helvetica,Arial,sans-serif;color:#111;max-width:940px;"
    "margin:24px auto;padding:0 16px;line-height:1.45;font-size:14px}\n"
    "h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #bbb;"
    "padding-bottom:3px}\n"
    "p.meta{color:#555;font-size:12px;margin-top:0}code{font-size:12px;background:#f3f3f3;padding:1px 4px}\n"
    "svg{display:block;max-width:100%;height:auto;margin:8px 0}\n"
    "table{border-collapse:collapse;font-size:12px;margin:8px 0;font-variant-numeric:tabular-nums}\n"
    "th,td{border:1px solid #c8c8c8;padding:3px 7px;text-align:right;vertical-align:top;white-space:nowrap}\n"
    "th{background:#eeeeee}.s{text-align:left}table.all{width:100%}\n"
    "tr.first td{border-top:2px solid #777}tr.best td{font-weight:bold}\n"
    "tr.infeasible td{color:#8a0015}td.note{font-size:11px;text-align:left;font-weight:normal;white-space:normal}\n"
    "p.note{color:#444;font-size:12px}\n"
    "@media print{body{max-width:none;margin:0;font-size:11px}section{break-inside:avoid}"
    "h2{break-after:avoid}tr{break-inside:avoid}}\n";

int report_html(const Report *r, Buf *o) {
  ReportUnit u = unit_of(r);
  int ns = r->nstrategies;
  char title[512];
  snprintf(title, sizeof title, "ration report: %s on %s", r->g->name, r->d->name);
  buf_printf(o, "<!DOCTYPE html>\n<html lang=\"en\" xmlns=\"http://www.w3.org/1999/xhtml\">\n<head>\n"
                "<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
                "<title>");
  report_xml(o, title);
  buf_printf(o, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>", css);
  report_xml(o, title);
  buf_printf(o, "</h1>\n<p class=\"meta\">Simulated training-step time of every planning strategy at every memory budget. "
                "ration %s, graph sha256 <code>%s</code>.",
             RATION_VERSION, r->g->sha256);
  if (r->command) {
    buf_printf(o, " Made by <code>");
    report_xml(o, r->command);
    buf_printf(o, "</code>.");
  }
  buf_printf(o, "</p>\n<section>\n<h2>What budget, at what cost</h2>\n");
  answer(r, o, true);
  buf_printf(o, "<p class=\"note\">A budget bounds the device bytes the plan may hold at once (its arena). "
                "Slowdown is against keep-all. Times are simulated on the device's roofline with copies on their own "
                "streams, not measured.</p>\n</section>\n");

  buf_printf(o, "<section>\n<h2>1. Step time against budget</h2>\n<p class=\"note\">One line per strategy; a line "
                "stops where the strategy has no plan within the budget, and the strip below the chart marks those "
                "budgets. Left of the smallest plannable budget nothing fits.</p>\n");
  report_chart_time(r, o);
  buf_printf(o, "</section>\n<section>\n<h2>2. Where the time goes</h2>\n<p class=\"note\">For each budget, the "
                "fastest strategy's step split into the original compute, the recomputation the plan adds and the "
                "stalls where compute waits for a copy.</p>\n");
  report_chart_split(r, o);
  buf_printf(o, "</section>\n<section>\n<h2>3. Memory over one step</h2>\n");
  if (r->timeline) {
    char f[16];
    fraction_str(r, r->timeline_point, f, sizeof f);
    buf_printf(o, "<p class=\"note\">The %s plan at point %d (f = %s): live device bytes at every step of the "
                  "schedule, stacked by what they hold. Stashed activations are the ones the backward pass needs; "
                  "the plan keeps, recomputes or offloads each of them.</p>\n",
               r->timeline->strategy, r->timeline_point, f);
    Err e;
    if (report_chart_timeline(r->timeline, r->g, false, o, &e)) return -1;
  } else {
    buf_printf(o, "<p>No strategy has a plan at any budget point, so there is no timeline to show.</p>\n");
  }
  buf_printf(o, "</section>\n<section>\n<h2>4. Every strategy at every budget</h2>\n"
                "<table class=\"all\">\n<thead><tr><th>f</th><th>budget</th><th class=\"s\">strategy</th>"
                "<th>step time</th><th>slowdown</th><th>peak live</th><th>arena</th><th>host</th><th class=\"s\">solver status</th>"
                "<th>gap</th><th>solve s</th></tr></thead>\n<tbody>\n");
  for (int i = 0; i < r->npoints; i++) {
    int best = report_best(r, i);
    for (int j = 0; j < ns; j++) {
      const ReportCell *c = &r->cells[i * ns + j];
      char f[16], gap[32];
      fraction_str(r, i, f, sizeof f);
      const char *cls = !c->feasible ? "infeasible" : j == best ? "best" : "";
      buf_printf(o, "<tr class=\"%s%s%s\"><td>%s</td><td>%.2f %s</td><td class=\"s\">%s</td>", j == 0 ? "first" : "",
                 j == 0 && *cls ? " " : "", cls, f, (double)r->budgets[i] / u.bytes, u.name, r->strategies[j]);
      if (!c->feasible) {
        buf_printf(o, "<td>infeasible</td><td colspan=\"6\" class=\"note\">");
        report_xml(o, c->note);
        buf_printf(o, "</td><td class=\"secs\">%.3f</td></tr>\n", c->seconds);
        continue;
      }
      gap_str(c, gap, sizeof gap);
      buf_printf(o, "<td>%.3f ms</td><td>%+.2f%%</td><td>%.2f %s</td><td>%.2f %s</td><td>%.2f %s</td>"
                    "<td class=\"s\">%s</td><td>%s</td><td class=\"secs\">%.3f</td></tr>\n",
                 ms(c->predicted.step_seconds), overhead_pct(r, c->predicted.step_seconds),
                 (double)c->predicted.peak_live_bytes / u.bytes, u.name, (double)c->arena_bytes / u.bytes, u.name,
                 (double)c->host_bytes / u.bytes, u.name, c->solver.status, gap, c->seconds);
    }
  }
  buf_printf(o, "</tbody>\n</table>\n<p class=\"note\">Bold: the fastest plan at that budget. f is the point's place "
                "between the smallest plannable budget (0) and the keep-all peak (1). Solve s is the wall-clock time "
                "of planning that point: it varies from run to run, and every other number on this page is the same "
                "on every run.</p>\n</section>\n</body>\n</html>\n");
  return o->failed ? -1 : 0;
}

/* ------------------------------------------------------------- files */

static int write_svg_time(const Report *r, Buf *o) {
  report_chart_time(r, o);
  return o->failed ? -1 : 0;
}

static int write_svg_split(const Report *r, Buf *o) {
  report_chart_split(r, o);
  return o->failed ? -1 : 0;
}

static int write_svg_timeline(const Report *r, Buf *o) {
  Err e;
  return report_chart_timeline(r->timeline, r->g, true, o, &e);
}

int report_write(const Report *r, const char *dir, Err *e) {
  static const struct {
    const char *name;
    int (*make)(const Report *, Buf *);
  } files[] = {{"report.html", report_html},     {"report.csv", report_csv},          {"report.md", report_md},
               {"step-time.svg", write_svg_time}, {"time-split.svg", write_svg_split}, {"timeline.svg", write_svg_timeline}};
  enum { NFILES = sizeof files / sizeof files[0] };
  char path[NFILES][4096];
  Buf text[NFILES] = {{0}};
  OutFile out[NFILES];
  int n = 0, rc = 0;
  /* Every file is made first and written as one set: a failure leaves the
   * previous report whole. */
  for (size_t k = 0; k < NFILES && rc == 0; k++) {
    if (files[k].make == write_svg_timeline && !r->timeline) continue;
    snprintf(path[n], sizeof path[n], "%s/%s", dir, files[k].name);
    if (files[k].make(r, &text[n])) rc = err_set(e, "%s: out of memory", path[n]);
    out[n] = (OutFile){path[n], text[n].data, text[n].len};
    n++;
  }
  if (rc == 0) rc = util_write_files_atomic(out, n, e);
  for (int k = 0; k < n; k++) buf_free(&text[k]);
  return rc;
}
