/*
 * plan_read.c - reads a "ration-plan/1" file back into a Plan against the
 * graph it was made for. It rejects only what a Plan cannot represent
 * (another graph, unknown names and buffer ids, bad step kinds, the wrong
 * number of buffers for an op); whether the schedule is correct (occupancy,
 * overlaps, order) is sim_check's question.
 *
 * Required: format, graph.sha256, budget_bytes, arena_bytes, host_bytes,
 * buffers, steps. Optional: graph.name, device, strategy, alignment (256),
 * predicted (zeros), solver (not_used), decisions (none), a buffer's home
 * (false; a resident tensor without a host home has its first device
 * buffer as its home).
 */
#include "ration.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Ctx {
  const char *file;
  const Graph *g;
  Plan *p;
  Err *e;
  unsigned char *seen; /* per tensor: decided already */
} Ctx;

static int oom(Ctx *c) { return err_set(c->e, "%s: out of memory", c->file); }

/* A string into a fixed field of the Plan. */
static int fixed_string(Ctx *c, const JsonPath *p, const cJSON *item, char *out, size_t cap) {
  const char *s;
  if (json_string(c->file, p, item, &s, c->e)) return -1;
  if (strlen(s) >= cap) return json_err(c->e, c->file, p, "too long (at most %zu bytes)", cap - 1);
  memcpy(out, s, strlen(s) + 1);
  return 0;
}

static int opt_fixed_string(Ctx *c, const JsonPath *up, const cJSON *obj, const char *key, char *out, size_t cap) {
  const cJSON *it = json_get(obj, key);
  JsonPath p = {up, key, 0};
  return it ? fixed_string(c, &p, it, out, cap) : 0;
}

static int req_int(Ctx *c, const JsonPath *up, const cJSON *obj, const char *key, int64_t lo, int64_t *out) {
  JsonPath p = {up, key, 0};
  return json_int(c->file, &p, json_get(obj, key), lo, out, c->e);
}

static int opt_nonneg(Ctx *c, const JsonPath *up, const cJSON *obj, const char *key, double *out) {
  const cJSON *it = json_get(obj, key);
  JsonPath p = {up, key, 0};
  return it ? json_nonneg(c->file, &p, it, out, c->e) : 0;
}

static int opt_int(Ctx *c, const JsonPath *up, const cJSON *obj, const char *key, int64_t *out) {
  const cJSON *it = json_get(obj, key);
  JsonPath p = {up, key, 0};
  return it ? json_int(c->file, &p, it, 0, out, c->e) : 0;
}

static int parse_header(Ctx *c, const cJSON *root) {
  Plan *p = c->p;
  JsonPath pg = {NULL, "graph", 0}, ps = {&pg, "sha256", 0};
  const cJSON *graph = json_get(root, "graph");
  if (json_object(c->file, &pg, graph, c->e)) return -1;
  if (fixed_string(c, &ps, json_get(graph, "sha256"), p->graph_sha256, sizeof p->graph_sha256)) return -1;
  if (strcmp(p->graph_sha256, c->g->sha256) != 0)
    return json_err(c->e, c->file, &ps, "plan is for a graph with sha256 %s, but %s has sha256 %s", p->graph_sha256,
                    c->g->path, c->g->sha256);
  if (opt_fixed_string(c, &pg, graph, "name", p->graph_name, sizeof p->graph_name)) return -1;
  if (opt_fixed_string(c, NULL, root, "device", p->device, sizeof p->device)) return -1;
  if (opt_fixed_string(c, NULL, root, "strategy", p->strategy, sizeof p->strategy)) return -1;
  if (req_int(c, NULL, root, "budget_bytes", 0, &p->budget_bytes)) return -1;
  if (req_int(c, NULL, root, "arena_bytes", 0, &p->arena_bytes)) return -1;
  if (req_int(c, NULL, root, "host_bytes", 0, &p->host_bytes)) return -1;
  const cJSON *align = json_get(root, "alignment");
  JsonPath pa = {NULL, "alignment", 0};
  if (align && json_int(c->file, &pa, align, 1, &p->alignment, c->e)) return -1;

  const cJSON *pred = json_get(root, "predicted");
  JsonPath pp = {NULL, "predicted", 0};
  if (pred) {
    Predicted *pr = &p->predicted;
    if (json_object(c->file, &pp, pred, c->e)) return -1;
    if (opt_nonneg(c, &pp, pred, "step_seconds", &pr->step_seconds) ||
        opt_nonneg(c, &pp, pred, "compute_seconds", &pr->compute_seconds) ||
        opt_nonneg(c, &pp, pred, "recompute_seconds", &pr->recompute_seconds) ||
        opt_nonneg(c, &pp, pred, "stall_seconds", &pr->stall_seconds) ||
        opt_int(c, &pp, pred, "peak_live_bytes", &pr->peak_live_bytes) ||
        opt_int(c, &pp, pred, "keep_all_peak_bytes", &pr->keep_all_peak_bytes))
      return -1;
  }
  const cJSON *solver = json_get(root, "solver");
  JsonPath pv = {NULL, "solver", 0};
  if (solver) {
    SolverInfo *si = &p->solver;
    if (json_object(c->file, &pv, solver, c->e)) return -1;
    if (opt_fixed_string(c, &pv, solver, "name", si->name, sizeof si->name) ||
        opt_fixed_string(c, &pv, solver, "status", si->status, sizeof si->status))
      return -1;
    static const char *const statuses[] = {"optimal", "feasible", "time_limit", "not_used"};
    bool known = false;
    for (int k = 0; k < 4; k++) known |= strcmp(si->status, statuses[k]) == 0;
    JsonPath pst = {&pv, "status", 0};
    if (!known)
      return json_err(c->e, c->file, &pst, "unknown solver status \"%s\" (expected optimal feasible time_limit not_used)",
                      si->status);
    JsonPath po = {&pv, "objective", 0}, pb = {&pv, "bound", 0}, pgap = {&pv, "gap", 0};
    const cJSON *obj = json_get(solver, "objective"), *bound = json_get(solver, "bound"), *gap = json_get(solver, "gap");
    if ((obj && json_number(c->file, &po, obj, &si->objective, c->e)) ||
        (bound && json_number(c->file, &pb, bound, &si->bound, c->e)) ||
        (gap && json_nonneg(c->file, &pgap, gap, &si->gap, c->e)) || opt_nonneg(c, &pv, solver, "seconds", &si->seconds) ||
        opt_int(c, &pv, solver, "simplex_iterations", &si->simplex_iterations) || opt_int(c, &pv, solver, "nodes", &si->nodes))
      return -1;
  }
  return 0;
}

static int parse_decisions(Ctx *c, const cJSON *root) {
  const cJSON *dec = json_get(root, "decisions");
  JsonPath pd = {NULL, "decisions", 0};
  if (!dec) return 0;
  if (json_object(c->file, &pd, dec, c->e)) return -1;
  for (const cJSON *it = dec->child; it; it = it->next) {
    JsonPath pk = {&pd, it->string, 0};
    int t = graph_find_tensor(c->g, it->string);
    if (t < 0) return json_err(c->e, c->file, &pk, "unknown tensor \"%s\"", it->string);
    bool resident = graph_is_resident(&c->g->tensors[t]);
    if (!c->g->tensors[t].stashed && !resident)
      return json_err(c->e, c->file, &pk, "tensor \"%s\" is not stashed: there is nothing to decide", it->string);
    const char *s;
    if (json_string(c->file, &pk, it, &s, c->e)) return -1;
    Decision d = DEC_NONE;
    static const Decision known[] = {DEC_KEEP, DEC_RECOMPUTE, DEC_OFFLOAD, DEC_HOST, DEC_HOST_REFETCH, DEC_HOST_OPTIMIZER};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
      if (strcmp(s, plan_decision_name(known[k])) == 0) d = known[k];
    if (d == DEC_NONE)
      return json_err(c->e, c->file, &pk, "unknown decision \"%s\" (expected keep recompute offload host host-refetch host-optimizer)", s);
    /* A resident tensor is kept on the device (keep, or no decision) or
     * host-homed; a stashed one is never host-homed. */
    if (resident ? d != DEC_KEEP && !plan_home_allowed(c->g, t, d) : d == DEC_HOST || d == DEC_HOST_REFETCH || d == DEC_HOST_OPTIMIZER)
      return json_err(c->e, c->file, &pk, "tensor \"%s\" (%s) cannot take decision \"%s\"", it->string,
                      graph_kind_name(c->g->tensors[t].kind), s);
    if (resident && d == DEC_KEEP) d = DEC_NONE;
    if (c->seen[t]++) return json_err(c->e, c->file, &pk, "tensor \"%s\" is decided twice", it->string);
    c->p->decisions[t] = d;
  }
  return 0;
}

static int parse_buffer(Ctx *c, const JsonPath *p, const cJSON *obj, int index) {
  if (json_object(c->file, p, obj, c->e)) return -1;
  int64_t id, bytes, offset;
  if (req_int(c, p, obj, "id", 0, &id)) return -1;
  if (id != index) {
    JsonPath pi = {p, "id", 0};
    return json_err(c->e, c->file, &pi, "expected id %d (ids are the buffers' positions), got %lld", index,
                    (long long)id);
  }
  JsonPath pt = {p, "tensor", 0}, pw = {p, "workspace_of", 0}, ps = {p, "space", 0};
  const cJSON *tensor = json_get(obj, "tensor"), *ws = json_get(obj, "workspace_of");
  int t = -1, op = -1;
  const char *s;
  if (!tensor) return json_err(c->e, c->file, &pt, "missing (expected a tensor name, or null for workspace)");
  if (cJSON_IsNull(tensor)) {
    if (json_string(c->file, &pw, ws, &s, c->e)) return -1;
    if ((op = graph_find_op(c->g, s)) < 0) return json_err(c->e, c->file, &pw, "unknown op \"%s\"", s);
  } else {
    if (json_string(c->file, &pt, tensor, &s, c->e)) return -1;
    if ((t = graph_find_tensor(c->g, s)) < 0) return json_err(c->e, c->file, &pt, "unknown tensor \"%s\"", s);
    if (ws) return json_err(c->e, c->file, &pw, "a tensor's buffer cannot also be workspace");
  }
  if (req_int(c, p, obj, "bytes", 0, &bytes) || req_int(c, p, obj, "offset", 0, &offset)) return -1;
  if (json_string(c->file, &ps, json_get(obj, "space"), &s, c->e)) return -1;
  Space space;
  if (strcmp(s, "device") == 0)
    space = SPACE_DEVICE;
  else if (strcmp(s, "host") == 0)
    space = SPACE_HOST;
  else
    return json_err(c->e, c->file, &ps, "unknown space \"%s\" (expected device host)", s);
  const cJSON *home = json_get(obj, "home");
  JsonPath ph = {p, "home", 0};
  bool is_home = false;
  if (home && json_bool(c->file, &ph, home, &is_home, c->e)) return -1;
  /* A device home is implied (plan_mark_homes): only the host names one. */
  if (is_home && (space != SPACE_HOST || t < 0 || !graph_is_resident(&c->g->tensors[t])))
    return json_err(c->e, c->file, &ph, "only a host buffer of a param, grad, optimizer state or input is a home");
  int b = plan_add_buffer(c->p, t, op, bytes, space);
  if (b < 0) return oom(c);
  c->p->buffers[b].offset = offset;
  c->p->buffers[b].home = is_home;
  return 0;
}

static int buffer_id(Ctx *c, const JsonPath *p, const cJSON *item, int *out) {
  int64_t id;
  if (json_int(c->file, p, item, 0, &id, c->e)) return -1;
  if (id >= c->p->nbuffers)
    return json_err(c->e, c->file, p, "unknown buffer id %lld (the plan has %d buffers)", (long long)id,
                    c->p->nbuffers);
  *out = (int)id;
  return 0;
}

static int id_list(Ctx *c, const JsonPath *p, const cJSON *arr, const Op *op, bool inputs, int **out) {
  int n, want = inputs ? op->ninputs : op->noutputs;
  if (json_array(c->file, p, arr, &n, c->e)) return -1;
  if (n != want)
    return json_err(c->e, c->file, p, "op \"%s\" has %d %s, the step lists %d", op->name, want,
                    inputs ? "inputs" : "outputs", n);
  if (!(*out = util_xcalloc((size_t)n, sizeof **out))) return oom(c);
  int k = 0;
  for (const cJSON *it = arr->child; it; it = it->next, k++) {
    JsonPath pk = {p, NULL, k};
    if (buffer_id(c, &pk, it, &(*out)[k])) return -1;
  }
  return 0;
}

static int parse_step(Ctx *c, const JsonPath *p, const cJSON *obj) {
  if (json_object(c->file, p, obj, c->e)) return -1;
  JsonPath pd = {p, "do", 0};
  const char *s;
  if (json_string(c->file, &pd, json_get(obj, "do"), &s, c->e)) return -1;
  int kind = -1;
  for (int k = 0; k < STEP_KIND_COUNT; k++)
    if (strcmp(s, plan_step_kind_name((StepKind)k)) == 0) kind = k;
  if (kind < 0)
    return json_err(c->e, c->file, &pd,
                    "unknown step kind \"%s\" (expected compute offload offload_wait prefetch prefetch_wait zero "
                    "host_compute host_compute_wait)", s);
  Step *st = plan_add_step(c->p, (StepKind)kind);
  if (!st) return oom(c);
  JsonPath pf = {p, "from", 0}, pt = {p, "to", 0};
  JsonPath po = {p, "op", 0}, pi = {p, "inputs", 0}, pout = {p, "outputs", 0};
  if (kind == STEP_COMPUTE || kind == STEP_HOST_COMPUTE || kind == STEP_HOST_WAIT) {
    if (json_string(c->file, &po, json_get(obj, "op"), &s, c->e)) return -1;
    if ((st->op = graph_find_op(c->g, s)) < 0) return json_err(c->e, c->file, &po, "unknown op \"%s\"", s);
  }
  switch ((StepKind)kind) {
  case STEP_COMPUTE: {
    JsonPath pr = {p, "recompute", 0}, pw = {p, "workspace", 0};
    const Op *op = &c->g->ops[st->op];
    const cJSON *re = json_get(obj, "recompute"), *ws = json_get(obj, "workspace");
    if (re && json_bool(c->file, &pr, re, &st->recompute, c->e)) return -1;
    if (id_list(c, &pi, json_get(obj, "inputs"), op, true, &st->inputs)) return -1;
    if (id_list(c, &pout, json_get(obj, "outputs"), op, false, &st->outputs)) return -1;
    if (ws && !cJSON_IsNull(ws) && buffer_id(c, &pw, ws, &st->workspace)) return -1;
    return 0;
  }
  case STEP_OFFLOAD:
  case STEP_PREFETCH:
    return buffer_id(c, &pf, json_get(obj, "from"), &st->from) || buffer_id(c, &pt, json_get(obj, "to"), &st->to) ? -1 : 0;
  case STEP_OFFLOAD_WAIT:
    return buffer_id(c, &pf, json_get(obj, "from"), &st->from);
  case STEP_PREFETCH_WAIT:
  case STEP_ZERO:
    return buffer_id(c, &pt, json_get(obj, "to"), &st->to);
  case STEP_HOST_COMPUTE:
    return id_list(c, &pi, json_get(obj, "inputs"), &c->g->ops[st->op], true, &st->inputs) ||
                   id_list(c, &pout, json_get(obj, "outputs"), &c->g->ops[st->op], false, &st->outputs)
               ? -1
               : 0;
  case STEP_HOST_WAIT: return 0;
  case STEP_KIND_COUNT: break;
  }
  return 0;
}

static int parse_plan(Ctx *c, const cJSON *root) {
  if (parse_header(c, root) || parse_decisions(c, root)) return -1;
  JsonPath pb = {NULL, "buffers", 0}, ps = {NULL, "steps", 0};
  const cJSON *buffers = json_get(root, "buffers"), *steps = json_get(root, "steps");
  int nb, ns;
  if (json_array(c->file, &pb, buffers, &nb, c->e) || json_array(c->file, &ps, steps, &ns, c->e)) return -1;
  int i = 0;
  for (const cJSON *it = buffers->child; it; it = it->next, i++) {
    JsonPath pi = {&pb, NULL, i};
    if (parse_buffer(c, &pi, it, i)) return -1;
  }
  plan_mark_homes(c->p, c->g);
  i = 0;
  for (const cJSON *it = steps->child; it; it = it->next, i++) {
    JsonPath pi = {&ps, NULL, i};
    if (parse_step(c, &pi, it)) return -1;
  }
  return 0;
}

Plan *plan_parse(const char *path, const char *text, size_t len, const Graph *g, Err *e) {
  cJSON *root = json_parse(path, text, len, "ration-plan/1", e);
  if (!root) return NULL;
  Plan *p = plan_new(g);
  Ctx c = {path, g, p, e, util_xcalloc((size_t)g->ntensors + 1, 1)};
  int rc = p && c.seen && (p->path = util_strdup(path)) ? 0 : oom(&c);
  if (rc == 0) rc = parse_plan(&c, root);
  free(c.seen);
  cJSON_Delete(root);
  if (rc) {
    plan_free(p);
    return NULL;
  }
  return p;
}

Plan *plan_load(const char *path, const Graph *g, Err *e) {
  size_t len;
  char *text = json_read(path, &len, e);
  if (!text) return NULL;
  Plan *p = plan_parse(path, text, len, g, e);
  free(text);
  return p;
}

/* The plan's "device" alone ("" when absent), for a caller that needs the
 * device before it can load the plan against the graph: the device's
 * runtime bytes are a tensor of the graph the plan was made for. */
int plan_read_device(const char *path, char *out, size_t cap, Err *e) {
  size_t len;
  char *text = json_read(path, &len, e);
  if (!text) return -1;
  cJSON *root = json_parse(path, text, len, "ration-plan/1", e);
  free(text);
  if (!root) return -1;
  Ctx c = {path, NULL, NULL, e, NULL};
  out[0] = '\0';
  int rc = opt_fixed_string(&c, NULL, root, "device", out, cap);
  cJSON_Delete(root);
  return rc;
}
