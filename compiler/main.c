/*
 * main.c - the ration CLI. Thin: parse arguments, then the pipeline as a
 * flat list of calls (load, cost, plan, simulate, layout, emit). `-d` dumps
 * each phase to stderr. The only file that exits: status 2 for bad input or
 * an infeasible budget, 1 for a failed --check, 0 otherwise.
 */
#include "ration.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writing a plan's files over reading its inputs, wall time: 3-7x
 * measured on gpt2-124m at loads of 10 to 20 on 2 cores (the files are
 * synced). */
#define PLAN_WRITE_READS 6

/* Each command's usage: `ration COMMAND --help` prints its own. */
static const struct {
  const char *name, *text;
} commands[] = {
    {"plan", "  ration plan GRAPH --device D [--budget BYTES|P%] [--strategy S] [--time-limit SEC]\n"
             "                    [--solver glpk|cbc] [--costs FILE] [--timeline FILE.svg] [-d] [--check]\n"
             "                    [--tight-bound] [--start PLAN.json] -o OUT\n"
             "      writes OUT.plan.json, OUT.sched.c and OUT.sched.h; --check writes nothing and\n"
             "      exits 1 naming what changed when OUT.sched.c or OUT.sched.h is stale; --tight-bound\n"
             "      bounds a plan with host homes by one more LP (its gap tighter, the plan the same);\n"
             "      --start starts from a plan of GRAPH (at a smaller budget, say) and returns none\n"
             "      slower where it fits the budget\n"},
    {"simulate", "  ration simulate GRAPH PLAN [--device D] [--costs FILE] [--trace]\n"},
    {"info", "  ration info GRAPH [--device D]\n"},
    {"model", "  ration model gpt2|llama|unet [--layers N --dim N --heads N --kv-heads N --ffn N --vocab N --vocab-pad N\n"
              "                    --seq N --batch N --dtype f32|bf16 --tied --lr X --theta X --name S\n"
              "                    --lora RANK --lora-alpha X --lora-targets q,k,v,o,gate,up,down --ema DECAY\n"
              "                    --loss-chunks K] -o FILE\n"},
    {"report", "  ration report GRAPH --device D [--points N | --budgets LIST] [--strategies LIST]\n"
               "                    [--time-limit SEC] [--solver glpk|cbc] [--costs FILE] -o DIR\n"
               "      writes DIR/report.html, DIR/report.csv and DIR/report.md\n"},
    {"fit", "  ration fit gpt2|llama|unet [model flags] --device D --vary batch|seq [--max-slowdown P%]\n"
            "                    [--budget BYTES] [--strategy S] [--time-limit SEC] [--solver glpk|cbc] [-o FILE.csv]\n"
            "      the largest batch or sequence (a unet's image side) whose plan fits the budget (default: the\n"
            "      device's) within P% of keep-all's step at that size, by doubling and bisection; the curve to FILE.csv\n"},
    {"version", "  ration version\n"},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

/* Everything the CLI prints goes through these: names and paths come from
 * the user's files and may hold terminal escape sequences or control
 * characters, which util_term_text removes (ONE_LINE: an error's newlines
 * and tabs too, so that it stays one line). */
static void put_shown(FILE *f, const char *s, size_t n, bool one_line) {
  Buf shown = {0};
  util_term_text(&shown, s, n, one_line);
  if (shown.len) fwrite(shown.data, 1, shown.len, f);
  buf_free(&shown);
}

static void say(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(FILE *f, const char *fmt, ...) {
  char small[512], *text = small;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof small && (text = malloc((size_t)n + 1))) {
    va_start(ap, fmt);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  put_shown(f, text ? text : small, text ? (size_t)n : sizeof small - 1, false);
  if (text != small) free(text);
}

/* The usage of one command (or of all, ONLY NULL). */
static void usage(FILE *f, const char *only) {
  say(f, "usage: ration COMMAND ...\n");
  for (int i = 0; i < NCOMMANDS; i++)
    if (!only || !strcmp(only, commands[i].name)) say(f, "%s", commands[i].text);
  if (only && strcmp(only, "plan") && strcmp(only, "report")) return;
  say(f, "strategies:");
  for (const PlanStrategy *s = plan_strategies; s->name; s++) say(f, " %s", s->name);
  say(f, "\n--device D: a device file, or a profile name looked up in the directories of $RATION_DEVICES\n"
             "(colon-separated), then %s, then ./budgets\n",
          RATION_DATADIR);
}

static void die(const Err *e) {
  put_shown(stderr, e->msg, strlen(e->msg), true);
  fputc('\n', stderr);
  exit(2);
}

static void die_usage(const char *fmt, const char *arg) {
  Err e;
  char line[512];
  snprintf(line, sizeof line, fmt, arg);
  err_set(&e, "ration: %s", line);
  die(&e);
}

/* A device given as a file, or as a profile name: NAME.json in each
 * directory of RATION_DEVICES, then in the installed profiles, then in
 * ./budgets, so that a name works from any directory. */
static Device *load_device(const char *name, Err *e) {
  if (access(name, R_OK) == 0 || strchr(name, '/')) return device_load(name, e);
  const char *env = getenv("RATION_DEVICES");
  char dirs[4096], path[4096];
  snprintf(dirs, sizeof dirs, "%s%s%s:budgets", env && *env ? env : "", env && *env ? ":" : "", RATION_DATADIR);
  for (char *dir = dirs, *end; dir; dir = end ? end + 1 : NULL) {
    if ((end = strchr(dir, ':'))) *end = 0;
    if (!*dir) continue;
    int n = snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if (n > 0 && n < (int)sizeof path && access(path, R_OK) == 0) return device_load(path, e);
  }
  err_set(e, "--device: no file \"%s\" and no profile %s.json in $RATION_DEVICES, %s or budgets/", name, name,
          RATION_DATADIR);
  return NULL;
}

/* --budget: bytes (integer or with a unit) or a percentage of keep-all. */
static int64_t parse_budget(const char *arg, const Graph *g, const Device *d, Err *e) {
  size_t n = strlen(arg);
  int64_t bytes;
  if (n && arg[n - 1] == '%') {
    char *end;
    double pct = strtod(arg, &end);
    if (end != arg + n - 1 || !(pct > 0) || pct > 1e6) {
      err_set(e, "--budget: \"%s\" is not a percentage", arg);
      return -1;
    }
    int64_t peak = plan_keep_all_peak(g, d, e);
    if (peak < 0) return -1;
    double v = (double)peak * pct / 100.0;
    if (v > (double)JSON_MAX_BYTES) {
      err_set(e, "--budget: \"%s\" of the keep-all peak is over the limit of 2^53 bytes (8 PiB)", arg);
      return -1;
    }
    return (int64_t)v;
  }
  char *end;
  long long v = strtoll(arg, &end, 10);
  if (*end == 0 && end != arg && v > 0) bytes = (int64_t)v;
  else if (!util_parse_size(arg, &bytes) || bytes <= 0) bytes = -1;
  if (bytes > JSON_MAX_BYTES) {
    err_set(e, "--budget: \"%s\" is over the limit of 2^53 bytes (8 PiB)", arg);
    return -1;
  }
  if (bytes > 0) return bytes;
  err_set(e, "--budget: \"%s\" is not a size (bytes, a size with a unit, or P%%)", arg);
  return -1;
}

/* --time-limit: a positive number of seconds. */
static double parse_time_limit(const char *arg) {
  char *end;
  double v = strtod(arg, &end);
  if (*end || !(v > 0)) die_usage("--time-limit: \"%s\" is not a positive number of seconds", arg);
  return v;
}

/* What a step acts on, for the dumps: its op, else the tensor of the
 * buffer it fills (prefetch_wait, zero) or copies from. */
static const char *step_subject(const Plan *p, const Graph *g, const Step *st) {
  if (st->op >= 0) return g->ops[st->op].name;
  int b = st->kind == STEP_PREFETCH_WAIT || st->kind == STEP_ZERO ? st->to : st->from;
  return g->tensors[p->buffers[b].tensor].name;
}

static void dump_plan(const Plan *p, const Graph *g) {
  say(stderr, "== decisions\n");
  for (int i = 0; i < g->nstashed; i++)
    say(stderr, "  %-32s %s\n", g->tensors[g->stashed[i]].name, plan_decision_name(p->decisions[g->stashed[i]]));
  say(stderr, "== steps (%d) and buffers (%d)\n", p->nsteps, p->nbuffers);
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (st->op >= 0)
      say(stderr, "  %5d %-17s %s%s\n", s, plan_step_kind_name(st->kind), g->ops[st->op].name,
          st->recompute ? " (recompute)" : "");
    else
      say(stderr, "  %5d %-17s %s\n", s, plan_step_kind_name(st->kind), step_subject(p, g, st));
  }
  say(stderr, "== layout: arena %" PRId64 " bytes, host %" PRId64 " bytes\n", p->arena_bytes, p->host_bytes);
}

static int cmd_plan(int argc, char **argv) {
  const char *graph_path = NULL, *device_name = NULL, *budget = NULL, *out = NULL, *costs = NULL, *timeline = NULL,
             *start_path = NULL;
  PlanOptions o = {.strategy = "ilp", .solver = "glpk", .quiet = !isatty(2)};
  double start = util_now(); /* --time-limit caps the whole command from here */
  bool dump = false, check = false;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **val = !strcmp(a, "--device") ? &device_name : !strcmp(a, "--budget") ? &budget
                     : !strcmp(a, "-o") ? &out : !strcmp(a, "--strategy") ? &o.strategy
                     : !strcmp(a, "--solver") ? &o.solver : !strcmp(a, "--costs") ? &costs
                     : !strcmp(a, "--timeline") ? &timeline : !strcmp(a, "--start") ? &start_path : NULL;
    if (val) {
      if (i + 1 >= argc) die_usage("%s needs a value", a);
      *val = argv[++i];
    } else if (!strcmp(a, "--time-limit")) {
      if (i + 1 >= argc) die_usage("%s needs a value", a);
      o.time_limit = parse_time_limit(argv[++i]);
    } else if (!strcmp(a, "-d")) {
      dump = true;
    } else if (!strcmp(a, "--check")) {
      check = true;
    } else if (!strcmp(a, "--tight-bound")) {
      o.homes_bound = true;
    } else if (a[0] == '-') {
      die_usage("plan: unknown option %s", a);
    } else if (!graph_path) {
      graph_path = a;
    } else {
      die_usage("plan: unexpected argument %s", a);
    }
  }
  if (!graph_path || !device_name || !out) die_usage("%s", "plan needs GRAPH, --device D and -o OUT");
  Err e;
  Graph *g = graph_load(graph_path, &e);
  if (!g) die(&e);
  Device *d = load_device(device_name, &e);
  if (!d || graph_add_runtime_tensor(g, d->runtime_bytes, &e)) die(&e);
  if (costs && cost_load_profile(g, d, costs, &e)) die(&e);
  o.budget_bytes = budget ? parse_budget(budget, g, d, &e) : d->memory - d->reserve;
  if (o.budget_bytes < 0) die(&e);
  /* A plan of this graph at another budget (the same one at a smaller
   * budget, typically): the ilp starts from its decisions and returns
   * nothing slower where they fit (plan.c's judge_hint). */
  Plan *from = NULL;
  if (start_path) {
    if (strcmp(o.strategy, "ilp")) die_usage("--start needs the ilp strategy, not %s", o.strategy);
    if (!(from = plan_load(start_path, g, &e))) die(&e);
    o.hint = from->decisions;
  }
  /* Writing the plan and the schedule (synced) comes after the deadline:
   * the planner stops early enough for it, PLAN_WRITE_READS times what
   * reading the inputs took (so at the machine's present load). */
  if (o.time_limit > 0) o.deadline = start + o.time_limit - PLAN_WRITE_READS * (util_now() - start);
  Plan *p = plan_make(g, d, &o, &e);
  if (!p) die(&e);
  if (p->solver.note[0]) say(stderr, "ration: warning: %s; the plan is the best found before it\n", p->solver.note);
  if (dump) dump_plan(p, g);
  if (check) {
    Buf why = {0};
    int st = emit_c_check(p, g, out, &why, &e);
    if (st < 0) die(&e);
    if (st) say(stderr, "%s\n", why.data);
    else say(stdout, "%s.sched.c, %s.sched.h: up to date\n", out, out);
    buf_free(&why);
    exit(st);
  }
  Buf json = {0};
  char path[4096];
  snprintf(path, sizeof path, "%s.plan.json", out);
  if (emit_plan_json(p, g, &json)) {
    err_set(&e, "%s: out of memory", path);
    die(&e);
  }
  /* The timeline is one of the set: a plan is written with it or not at all. */
  OutFile also[2] = {{path, json.data, json.len}};
  Buf svg = {0};
  if (timeline) {
    if (report_chart_timeline(p, g, true, &svg, &e)) die(&e);
    also[1] = (OutFile){timeline, svg.data, svg.len};
  }
  if (emit_c_write(p, g, out, also, timeline ? 2 : 1, &e)) die(&e);
  buf_free(&svg);
  char b1[32], b2[32], b3[32], b4[32], host[48] = "";
  if (p->host_bytes > 0) snprintf(host, sizeof host, ", host %s", util_fmt_bytes(p->host_bytes, b4, sizeof b4));
  say(stdout, "%s: %s on %s, budget %s: peak live %s, arena %s%s, step %.6f s (compute %.6f, recompute %.6f, stall %.6f)\n",
         path, p->strategy, p->device, util_fmt_bytes(p->budget_bytes, b1, sizeof b1),
         util_fmt_bytes(p->predicted.peak_live_bytes, b2, sizeof b2), util_fmt_bytes(p->arena_bytes, b3, sizeof b3), host,
         p->predicted.step_seconds, p->predicted.compute_seconds, p->predicted.recompute_seconds,
         p->predicted.stall_seconds);
  buf_free(&json);
  plan_free(p);
  plan_free(from);
  device_free(d);
  graph_free(g);
  return 0;
}

static int cmd_info(int argc, char **argv) {
  const char *graph_path = NULL, *device_name = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--device")) {
      if (i + 1 >= argc) die_usage("%s needs a value", argv[i]);
      device_name = argv[++i];
    } else if (argv[i][0] == '-') {
      die_usage("info: unknown option %s", argv[i]);
    } else if (!graph_path) {
      graph_path = argv[i];
    } else {
      die_usage("info: unexpected argument %s", argv[i]);
    }
  }
  if (!graph_path) die_usage("%s", "info needs GRAPH");
  Err e;
  Graph *g = graph_load(graph_path, &e);
  if (!g) die(&e);
  Device *d = device_name ? load_device(device_name, &e) : NULL;
  if (device_name && (!d || graph_add_runtime_tensor(g, d->runtime_bytes, &e))) die(&e);
  Buf out = {0};
  if (info_report(g, d, &out, &e)) die(&e);
  put_shown(stdout, out.data, out.len, false);
  buf_free(&out);
  device_free(d);
  graph_free(g);
  return 0;
}

static int parse_int_opt(const char *opt, const char *arg) {
  char *end;
  long v = strtol(arg, &end, 10);
  if (end == arg || *end || v < 1 || v > INT32_MAX) die_usage("%s needs a positive integer", opt);
  return (int)v;
}

/* One of `ration model`'s flags at argv[i] into c: how many arguments it
 * took, or 0 when argv[i] is not a model flag. */
static int model_flag(ModelConfig *c, int argc, char **argv, int i) {
  static const char *const int_opts[] = {"--layers", "--dim", "--heads", "--kv-heads", "--ffn",
                                         "--vocab",  "--vocab-pad", "--seq", "--batch", "--lora", "--loss-chunks"};
  int *int_vals[] = {&c->layers, &c->dim,       &c->heads, &c->kv_heads, &c->ffn,       &c->vocab,
                     &c->vocab_pad, &c->seq, &c->batch, &c->lora_rank, &c->loss_chunks};
  const int nint = (int)(sizeof int_vals / sizeof int_vals[0]);
  const char *a = argv[i];
  if (!strcmp(a, "--tied")) {
    c->tied = true;
    return 1;
  }
  int k = 0;
  while (k < nint && strcmp(a, int_opts[k])) k++;
  static const char *const real_opts[] = {"--lr", "--theta", "--lora-alpha", "--ema"};
  double *real_vals[] = {&c->lr, &c->theta, &c->lora_alpha, &c->ema_decay};
  int r = 0;
  while (r < 4 && strcmp(a, real_opts[r])) r++;
  bool known = k < nint || r < 4 || !strcmp(a, "--dtype") || !strcmp(a, "--name") || !strcmp(a, "--lora-targets");
  if (!known) return 0;
  if (i + 1 >= argc) die_usage("%s needs a value", a);
  const char *v = argv[i + 1];
  if (k < nint) {
    *int_vals[k] = parse_int_opt(a, v);
  } else if (!strcmp(a, "--dtype")) {
    if (strcmp(v, "f32") && strcmp(v, "bf16")) die_usage("--dtype: \"%s\" is not f32 or bf16", v);
    c->dtype = strcmp(v, "f32") ? DT_BF16 : DT_F32;
  } else if (!strcmp(a, "--name")) {
    c->name = v;
  } else if (!strcmp(a, "--lora-targets")) {
    Err e;
    if (model_lora_targets(v, &c->lora_targets, &e)) die(&e);
  } else {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x > 0)) die_usage("%s needs a positive number", a);
    *real_vals[r] = x;
  }
  return 2;
}

/* A graph's name goes into its file, whose loader takes only UTF-8. */
static void need_utf8_name(const char *name) {
  uint32_t cp;
  for (size_t i = 0, n = strlen(name), len; i < n; i += len)
    if (!(len = util_utf8_char(name + i, n - i, &cp)))
      die_usage("the graph's name \"%s\" is not UTF-8 (give one with --name)", name);
}

static int cmd_model(int argc, char **argv) {
  if (argc < 1 || argv[0][0] == '-') die_usage("%s", "model needs FAMILY (gpt2, llama, unet)");
  Err e;
  ModelConfig c;
  if (model_defaults(argv[0], &c, &e)) die(&e);
  const char *out = NULL;
  for (int i = 1, n; i < argc; i += n) {
    if ((n = model_flag(&c, argc, argv, i))) continue;
    if (strcmp(argv[i], "-o")) die_usage(argv[i][0] == '-' ? "model: unknown option %s" : "model: unexpected argument %s",
                                         argv[i]);
    if (i + 1 >= argc) die_usage("%s needs a value", argv[i]);
    out = argv[i + 1];
    n = 2;
  }
  if (!out) die_usage("%s", "model needs -o FILE");
  /* The graph is named after its file unless --name says otherwise. */
  char base[256];
  if (!c.name) {
    const char *slash = strrchr(out, '/');
    snprintf(base, sizeof base, "%s", slash ? slash + 1 : out);
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".json")) base[n - 5] = 0;
    c.name = base;
  }
  need_utf8_name(c.name);
  Buf json = {0};
  ModelStats st;
  if (model_build(&c, &json, &e) || model_stats(&c, &st, &e) || util_write_file_atomic(out, json.data, json.len, &e))
    die(&e);
  char b1[32];
  say(stdout, "%s: %s: %" PRId64 " params, %d tensors, %d ops, %d stashed tensors (%s, %" PRId64 " bytes)\n", out, c.name,
         st.params, st.ntensors, st.nops, st.nstashed, util_fmt_bytes(st.stashed_bytes, b1, sizeof b1),
         st.stashed_bytes);
  buf_free(&json);
  return 0;
}

static int cmd_fit(int argc, char **argv) {
  if (argc < 1 || argv[0][0] == '-') die_usage("%s", "fit needs FAMILY (gpt2, llama, unet)");
  Err e;
  ModelConfig c;
  if (model_defaults(argv[0], &c, &e)) die(&e);
  const char *device_name = NULL, *vary = NULL, *budget = NULL, *slowdown = NULL, *out = NULL;
  FitOptions fo = {.max_slowdown = -1, .plan = {.strategy = "ilp", .solver = "glpk"}, .quiet = !isatty(2)};
  for (int i = 1, n; i < argc; i += n) {
    if ((n = model_flag(&c, argc, argv, i))) continue;
    const char *a = argv[i];
    const char **val = !strcmp(a, "--device") ? &device_name : !strcmp(a, "--vary") ? &vary
                     : !strcmp(a, "--budget") ? &budget : !strcmp(a, "--max-slowdown") ? &slowdown
                     : !strcmp(a, "--strategy") ? &fo.plan.strategy : !strcmp(a, "--solver") ? &fo.plan.solver
                     : !strcmp(a, "-o") ? &out : NULL;
    bool limit = !strcmp(a, "--time-limit");
    if (!val && !limit) die_usage(a[0] == '-' ? "fit: unknown option %s" : "fit: unexpected argument %s", a);
    if (i + 1 >= argc) die_usage("%s needs a value", a);
    n = 2;
    if (val) *val = argv[i + 1];
    else fo.plan.time_limit = parse_time_limit(argv[i + 1]);
  }
  if (c.name) need_utf8_name(c.name);
  if (!device_name || !vary) die_usage("%s", "fit needs FAMILY, --device D and --vary batch|seq");
  if (strcmp(vary, "batch") && strcmp(vary, "seq")) die_usage("--vary: \"%s\" is not batch or seq", vary);
  fo.vary_seq = !strcmp(vary, "seq");
  if (slowdown) {
    char *end;
    fo.max_slowdown = strtod(slowdown, &end) / 100;
    if (end == slowdown || strcmp(end, "%") || !(fo.max_slowdown >= 0) || fo.max_slowdown > 1e4)
      die_usage("--max-slowdown: \"%s\" is not a percentage (such as 10%%)", slowdown);
  }
  if (!plan_find_strategy(fo.plan.strategy)) die_usage("--strategy: unknown strategy \"%s\"", fo.plan.strategy);
  Device *d = load_device(device_name, &e);
  if (!d) die(&e);
  fo.budget_bytes = d->memory - d->reserve;
  if (budget) {
    /* A percentage would move with the size: only bytes mean one budget. */
    if (strchr(budget, '%')) die_usage("--budget: \"%s\": fit needs bytes, not a percentage of keep-all", budget);
    if ((fo.budget_bytes = parse_budget(budget, NULL, d, &e)) < 0) die(&e);
  }
  FitResult r;
  if (fit_search(&c, d, &fo, &r, &e)) die(&e);
  Buf csv = {0};
  if (out && r.best >= 0) {
    fit_csv(&r, &fo, &csv);
    if (csv.failed) {
      err_set(&e, "%s: out of memory", out);
      die(&e);
    }
    if (util_write_file_atomic(out, csv.data, csv.len, &e)) die(&e);
  }
  char b1[32], b2[32], b3[32];
  say(stdout, "fit %s on %s, budget %s, %s, %s\n", c.name ? c.name : c.family, d->name,
         util_fmt_bytes(r.budget_bytes, b1, sizeof b1), vary, slowdown ? "within the slowdown given" : "any slowdown");
  say(stdout, "%8s  %-12s  %-12s  %10s  %9s  %12s\n", vary, "keep-all", "arena", "step ms", "slowdown", r.unit);
  for (int i = 0; i < r.npoints; i++) {
    const FitPoint *pt = &r.points[i];
    say(stdout, "%8d  %-12s  ", pt->value, pt->keep_all_peak ? util_fmt_bytes(pt->keep_all_peak, b1, sizeof b1) : "-");
    if (pt->planned)
      say(stdout, "%-12s  %10.3f  %+8.2f%%  %10.0f/s%s\n", util_fmt_bytes(pt->arena_bytes, b2, sizeof b2),
             pt->step_seconds * 1e3, 100 * pt->slowdown, pt->items_per_second, pt->fits ? "" : "  (too slow)");
    else
      say(stdout, "%-12s  no plan at the budget\n", "-");
  }
  int status = 0;
  if (r.best < 0) {
    const FitPoint *least = &r.points[0];
    say(stderr, "ration: no %s fits: at %s %d: %s\n", vary, vary, least->value, least->why);
    status = 2;
  } else {
    const FitPoint *pt = &r.points[r.best];
    say(stdout, "largest %s: %d: arena %s of %s, step %.3f ms (%+.2f%% over keep-all), %.0f %s/s\n", vary, pt->value,
           util_fmt_bytes(pt->arena_bytes, b2, sizeof b2), util_fmt_bytes(r.budget_bytes, b3, sizeof b3),
           pt->step_seconds * 1e3, 100 * pt->slowdown, pt->items_per_second, r.unit);
  }
  buf_free(&csv);
  fit_result_free(&r);
  device_free(d);
  return status;
}

static int cmd_simulate(int argc, char **argv) {
  const char *graph_path = NULL, *plan_path = NULL, *device_name = NULL, *costs = NULL;
  bool trace = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--device") || !strcmp(argv[i], "--costs")) {
      if (i + 1 >= argc) die_usage("%s needs a value", argv[i]);
      *(!strcmp(argv[i], "--device") ? &device_name : &costs) = argv[i + 1];
      i++;
    } else if (!strcmp(argv[i], "--trace")) {
      trace = true;
    } else if (argv[i][0] == '-') {
      die_usage("simulate: unknown option %s", argv[i]);
    } else if (!graph_path) {
      graph_path = argv[i];
    } else if (!plan_path) {
      plan_path = argv[i];
    } else {
      die_usage("simulate: unexpected argument %s", argv[i]);
    }
  }
  if (!graph_path || !plan_path) die_usage("%s", "simulate needs GRAPH and PLAN");
  Err e;
  Graph *g = graph_load(graph_path, &e);
  if (!g) die(&e);
  char planned_on[256];
  if (!device_name && plan_read_device(plan_path, planned_on, sizeof planned_on, &e)) die(&e);
  Device *d = load_device(device_name ? device_name : planned_on, &e);
  if (!d || graph_add_runtime_tensor(g, d->runtime_bytes, &e)) die(&e);
  Plan *p = plan_load(plan_path, g, &e);
  if (!p) die(&e);
  if (costs && cost_load_profile(g, d, costs, &e)) die(&e);
  SimResult r;
  if (sim_run(p, g, d, trace, &r, &e)) die(&e);
  if (trace) {
    say(stdout, "step\tdo\twhat\tlive_bytes\n");
    for (int s = 0; s < p->nsteps; s++) {
      const Step *st = &p->steps[s];
      say(stdout, "%d\t%s%s\t%s\t%" PRId64 "\n", s, plan_step_kind_name(st->kind), st->recompute ? "(re)" : "",
          step_subject(p, g, st), r.live_bytes[s]);
    }
  }
  say(stdout, "valid: %d steps, %d buffers\n", p->nsteps, p->nbuffers);
  say(stdout, "peak_live_bytes %" PRId64 " at step %d\n", r.peak_live_bytes, r.peak_step);
  say(stdout, "arena_bytes %" PRId64 " (%.4f x peak), budget_bytes %" PRId64 "\n", p->arena_bytes,
         r.peak_live_bytes ? (double)p->arena_bytes / (double)r.peak_live_bytes : 0.0, p->budget_bytes);
  say(stdout, "step_seconds %.9g (compute %.9g, recompute %.9g, stall %.9g)\n", r.step_seconds, r.compute_seconds,
         r.recompute_seconds, r.stall_seconds);
  sim_result_free(&r);
  device_free(d);
  plan_free(p);
  graph_free(g);
  return 0;
}

/* Splits a comma-separated list in place. */
static int split_list(char *list, char **items, int max) {
  int n = 0;
  for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
    if (n == max) die_usage("list too long: more than %s items", "1000");
    items[n++] = tok;
  }
  return n;
}

/* The command as the report shows it: the output directory left out, so
 * that a report does not depend on where it was written. */
static char *report_command(int argc, char **argv) {
  Buf b = {0};
  buf_printf(&b, "ration report");
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      buf_printf(&b, " -o DIR");
      i++;
      continue;
    }
    bool plain = *argv[i] != 0;
    for (const char *c = argv[i]; *c; c++)
      if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./%,=:+-", *c)) plain = false;
    buf_printf(&b, plain ? " %s" : " '%s'", argv[i]);
  }
  return b.failed ? NULL : b.data;
}

static int cmd_report(int argc, char **argv) {
  const char *graph_path = NULL, *device_name = NULL, *out = NULL, *costs = NULL, *points = NULL;
  char *budgets = NULL, *strategies = NULL;
  ReportOptions ro = {.solver = "glpk", .progress = isatty(2)};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **val = !strcmp(a, "--device") ? &device_name : !strcmp(a, "-o") ? &out
                     : !strcmp(a, "--solver") ? &ro.solver : !strcmp(a, "--costs") ? &costs
                     : !strcmp(a, "--points") ? &points : NULL;
    char **list = !strcmp(a, "--budgets") ? &budgets : !strcmp(a, "--strategies") ? &strategies : NULL;
    if (val || list) {
      if (i + 1 >= argc) die_usage("%s needs a value", a);
      if (val) *val = argv[++i];
      else *list = argv[++i];
    } else if (!strcmp(a, "--time-limit")) {
      if (i + 1 >= argc) die_usage("%s needs a value", a);
      ro.time_limit = parse_time_limit(argv[++i]);
    } else if (a[0] == '-') {
      die_usage("report: unknown option %s", a);
    } else if (!graph_path) {
      graph_path = a;
    } else {
      die_usage("report: unexpected argument %s", a);
    }
  }
  if (!graph_path || !device_name || !out) die_usage("%s", "report needs GRAPH, --device D and -o DIR");
  if (points && budgets) die_usage("%s", "report: give --points or --budgets, not both");
  if (points) {
    char *end;
    long n = strtol(points, &end, 10);
    if (*end || n < 1 || n > 1000) die_usage("--points: \"%s\" is not a number of points from 1 to 1000", points);
    ro.npoints = (int)n;
  }
  char *command = report_command(argc, argv);
  ro.command = command;
  Err e;
  Graph *g = graph_load(graph_path, &e);
  if (!g) die(&e);
  Device *d = load_device(device_name, &e);
  if (!d || graph_add_runtime_tensor(g, d->runtime_bytes, &e)) die(&e);
  if (costs && cost_load_profile(g, d, costs, &e)) die(&e);
  static char *names[1000], *sizes[1000];
  static int64_t bytes[1000];
  if (strategies) {
    ro.nstrategies = split_list(strategies, names, 1000);
    if (!ro.nstrategies) die_usage("%s", "--strategies: an empty list");
    ro.strategies = (const char *const *)names;
  }
  if (budgets) {
    ro.nbudgets = split_list(budgets, sizes, 1000);
    if (!ro.nbudgets) die_usage("%s", "--budgets: an empty list");
    for (int i = 0; i < ro.nbudgets; i++)
      if ((bytes[i] = parse_budget(sizes[i], g, d, &e)) < 0) die(&e);
    ro.budgets = bytes;
  }
  Report r;
  if (report_sweep(&r, g, d, &ro, &e)) die(&e);
  /* Made only once there is a report to put in it, and removed again when
   * the report cannot be written: a failed run leaves nothing. */
  bool made = mkdir(out, 0777) == 0;
  if (!made && access(out, W_OK)) {
    err_set(&e, "%s: cannot create the output directory", out);
    die(&e);
  }
  if (report_write(&r, out, &e)) {
    if (made) rmdir(out);
    die(&e);
  }
  if (r.min_budget_note[0])
    say(stderr, "ration: warning: the smallest budget, %" PRId64 " bytes, is the least found before %s\n", r.min_budget,
            r.min_budget_note);
  for (int i = 0; i < r.npoints * r.nstrategies; i++)
    if (r.cells[i].feasible && r.cells[i].solver.note[0])
      say(stderr, "ration: warning: %s at %" PRId64 " bytes: %s; the plan is the best found before it\n",
              r.strategies[i % r.nstrategies], r.budgets[i / r.nstrategies], r.cells[i].solver.note);
  say(stdout, "%s/report.html, report.csv, report.md and the charts as SVG\n", out);
  report_free(&r);
  free(command);
  device_free(d);
  graph_free(g);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr, NULL);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout, NULL);
    return 0;
  }
  for (int i = 2; i < argc; i++)
    for (int k = 0; k < NCOMMANDS; k++)
      if (!strcmp(argv[i], "--help") && !strcmp(cmd, commands[k].name)) {
        usage(stdout, cmd);
        return 0;
      }
  if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
  if (!strcmp(cmd, "report")) return cmd_report(argc - 2, argv + 2);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
  if (!strcmp(cmd, "simulate")) return cmd_simulate(argc - 2, argv + 2);
  if (!strcmp(cmd, "model")) return cmd_model(argc - 2, argv + 2);
  if (!strcmp(cmd, "fit")) return cmd_fit(argc - 2, argv + 2);
  if (!strcmp(cmd, "version")) {
    say(stdout, "ration %s\n", RATION_VERSION);
    return 0;
  }
  usage(stderr, NULL);
  return 2;
}
