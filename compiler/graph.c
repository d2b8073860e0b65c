/*
 * graph.c - loads a "ration-graph/1" training graph, validates everything
 * the later passes rely on (names resolve, sizes fit in int64, every
 * activation has exactly one producer that runs before its readers) and
 * derives the liveness facts they need (producer, first/last reads, the
 * stashed set). A graph either loads completely or not at all.
 */
#include "ration.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_names[DT_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "u8"};
static const int dtype_sizes[DT_COUNT] = {4, 2, 2, 4, 8, 1};
static const char *const kind_names[KIND_COUNT] = {"input", "param", "grad", "optstate", "activation"};
static const char *const phase_names[PHASE_COUNT] = {"forward", "backward", "optimizer"};

const char *graph_dtype_name(DType d) { return d >= 0 && d < DT_COUNT ? dtype_names[d] : "?"; }
const char *graph_kind_name(Kind k) { return k >= 0 && k < KIND_COUNT ? kind_names[k] : "?"; }
const char *graph_phase_name(Phase p) { return p >= 0 && p < PHASE_COUNT ? phase_names[p] : "?"; }
int graph_dtype_size(DType d) { return d >= 0 && d < DT_COUNT ? dtype_sizes[d] : 0; }

bool graph_is_resident(const Tensor *t) { return t->kind != KIND_ACTIVATION; }

double graph_attr(const Op *op, const char *key, double dflt) {
  for (int i = 0; i < op->nattrs; i++)
    if (strcmp(op->attrs[i].key, key) == 0) return op->attrs[i].str ? dflt : op->attrs[i].num;
  return dflt;
}

static int lookup(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

/* ------------------------------------------------------------ name index */

/* Open addressing over index+1 (0 = empty slot); the tables stay at most
 * half full so probes stay short at a million names. */
typedef struct NameTable {
  int *slots;
  size_t mask;
} NameTable;

struct GraphIndex {
  NameTable tensors, ops;
};

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static int table_init(NameTable *t, int n) {
  size_t cap = 16;
  while (cap < (size_t)n * 2) cap *= 2;
  t->slots = util_xcalloc(cap, sizeof *t->slots);
  t->mask = cap - 1;
  return t->slots ? 0 : -1;
}

/* Returns the index already holding name, or -1 after inserting idx. */
static int table_put(NameTable *t, char *const *names, size_t stride, const char *name, int idx) {
  for (size_t h = name_hash(name) & t->mask;; h = (h + 1) & t->mask) {
    int s = t->slots[h];
    if (!s) {
      t->slots[h] = idx + 1;
      return -1;
    }
    const char *other = *(char *const *)((const char *)names + (size_t)(s - 1) * stride);
    if (strcmp(other, name) == 0) return s - 1;
  }
}

static int table_get(const NameTable *t, char *const *names, size_t stride, const char *name) {
  for (size_t h = name_hash(name) & t->mask;; h = (h + 1) & t->mask) {
    int s = t->slots[h];
    if (!s) return -1;
    const char *other = *(char *const *)((const char *)names + (size_t)(s - 1) * stride);
    if (strcmp(other, name) == 0) return s - 1;
  }
}

int graph_find_tensor(const Graph *g, const char *name) {
  if (g->index) return table_get(&g->index->tensors, &g->tensors[0].name, sizeof(Tensor), name);
  for (int i = 0; i < g->ntensors; i++)
    if (strcmp(g->tensors[i].name, name) == 0) return i;
  return -1;
}

int graph_find_op(const Graph *g, const char *name) {
  if (g->index) return table_get(&g->index->ops, &g->ops[0].name, sizeof(Op), name);
  for (int i = 0; i < g->nops; i++)
    if (strcmp(g->ops[i].name, name) == 0) return i;
  return -1;
}

void graph_free(Graph *g) {
  if (!g) return;
  for (int i = 0; i < g->ntensors; i++) free(g->tensors[i].name);
  for (int i = 0; i < g->nops; i++) {
    Op *op = &g->ops[i];
    free(op->name);
    free(op->type);
    free(op->inputs);
    free(op->outputs);
    for (int k = 0; k < op->nattrs; k++) {
      free(op->attrs[k].key);
      free(op->attrs[k].str);
    }
    free(op->attrs);
  }
  if (g->index) {
    free(g->index->tensors.slots);
    free(g->index->ops.slots);
    free(g->index);
  }
  free(g->tensors);
  free(g->ops);
  free(g->stashed);
  free(g->name);
  free(g->path);
  free(g);
}

/* ---------------------------------------------------------------- parse */

typedef struct Ctx {
  const char *file;
  Graph *g;
  Err *e;
  int64_t total_bytes; /* every tensor plus every workspace: at most JSON_MAX_BYTES */
} Ctx;

static int oom(Ctx *c) { return err_set(c->e, "%s: out of memory", c->file); }

static int name_field(Ctx *c, const JsonPath *p, const cJSON *obj, char **out) {
  JsonPath pn = {p, "name", 0};
  const char *s;
  if (json_string(c->file, &pn, json_get(obj, "name"), &s, c->e)) return -1;
  if (!*s) return json_err(c->e, c->file, &pn, "empty name");
  if (!(*out = util_strdup(s))) return oom(c);
  return 0;
}

static int enum_field(Ctx *c, const JsonPath *p, const cJSON *item, const char *what,
                      const char *const *names, int n, int *out) {
  const char *s;
  if (json_string(c->file, p, item, &s, c->e)) return -1;
  if ((*out = lookup(names, n, s)) >= 0) return 0;
  char all[128] = "";
  for (int i = 0; i < n; i++) {
    strcat(all, i ? " " : "");
    strcat(all, names[i]);
  }
  return json_err(c->e, c->file, p, "unknown %s \"%s\" (expected %s)", what, s, all);
}

static int parse_tensor(Ctx *c, const JsonPath *p, const cJSON *obj, Tensor *t) {
  Graph *g = c->g;
  int idx = (int)(t - g->tensors);
  if (json_object(c->file, p, obj, c->e)) return -1;
  if (name_field(c, p, obj, &t->name)) return -1;
  g->ntensors = idx + 1; /* from here on graph_free owns the name */
  int prev = table_put(&g->index->tensors, &g->tensors[0].name, sizeof(Tensor), t->name, idx);
  if (prev >= 0) {
    JsonPath pn = {p, "name", 0};
    return json_err(c->e, c->file, &pn, "duplicate tensor name \"%s\" (also tensors[%d])", t->name, prev);
  }
  int v;
  JsonPath pd = {p, "dtype", 0};
  if (enum_field(c, &pd, json_get(obj, "dtype"), "dtype", dtype_names, DT_COUNT, &v)) return -1;
  t->dtype = (DType)v;
  t->kind = KIND_ACTIVATION;
  const cJSON *kind = json_get(obj, "kind");
  if (kind) {
    JsonPath pk = {p, "kind", 0};
    if (enum_field(c, &pk, kind, "kind", kind_names, KIND_COUNT, &v)) return -1;
    t->kind = (Kind)v;
  }
  const cJSON *frozen = json_get(obj, "frozen");
  JsonPath pf = {p, "frozen", 0};
  if (frozen && json_bool(c->file, &pf, frozen, &t->frozen, c->e)) return -1;
  if (t->frozen && t->kind != KIND_PARAM) return json_err(c->e, c->file, &pf, "only a param can be frozen");
  JsonPath ps = {p, "shape", 0};
  const cJSON *shape = json_get(obj, "shape");
  int rank;
  if (json_array(c->file, &ps, shape, &rank, c->e)) return -1;
  if (rank > GRAPH_MAX_RANK)
    return json_err(c->e, c->file, &ps, "rank %d is over the limit of %d", rank, GRAPH_MAX_RANK);
  t->rank = rank;
  int64_t bytes = graph_dtype_size(t->dtype);
  bool overflow = false;
  int k = 0;
  for (const cJSON *d = shape->child; d; d = d->next, k++) {
    JsonPath pi = {&ps, NULL, k};
    if (!cJSON_IsNumber(d))
      return json_err(c->e, c->file, &pi, "dim must be a positive integer, got %s",
                      cJSON_IsString(d) ? "a string" : "a non-number");
    double dim = d->valuedouble;
    if (!(dim >= 1) || dim != floor(dim))
      return json_err(c->e, c->file, &pi, "dim must be a positive integer, got %.17g", dim);
    if (dim > 9007199254740992.0) return json_err(c->e, c->file, &pi, "dim %.17g is over the limit of 2^53", dim);
    t->shape[k] = (int64_t)d->valuedouble;
    if (!overflow && !util_mul_i64(bytes, t->shape[k], &bytes)) overflow = true;
  }
  if (overflow) return json_err(c->e, c->file, &ps, "tensor \"%s\" is over 2^63 bytes", t->name);
  t->bytes = bytes;
  if (!util_add_i64(c->total_bytes, bytes, &c->total_bytes) || c->total_bytes > JSON_MAX_BYTES)
    return json_err(c->e, c->file, &ps, "the graph's tensors add up to more than 2^53 bytes (8 PiB, the limit)");
  t->producer = t->first_read = t->last_read = t->last_write = t->last_fwd_read = t->first_bwd_read = t->first_use = -1;
  return 0;
}

static int parse_attrs(Ctx *c, const JsonPath *p, const cJSON *attrs, Op *op) {
  if (json_object(c->file, p, attrs, c->e)) return -1;
  int n = cJSON_GetArraySize(attrs);
  if (!(op->attrs = util_xcalloc((size_t)n, sizeof *op->attrs))) return oom(c);
  for (const cJSON *a = attrs->child; a; a = a->next) {
    JsonPath pa = {p, a->string, 0};
    Attr *at = &op->attrs[op->nattrs];
    if (!(at->key = util_strdup(a->string))) return oom(c);
    op->nattrs++;
    if (cJSON_IsNumber(a)) {
      if (json_number(c->file, &pa, a, &at->num, c->e)) return -1;
    } else if (cJSON_IsBool(a)) {
      at->num = cJSON_IsTrue(a);
    } else if (cJSON_IsString(a)) {
      if (!(at->str = util_strdup(a->valuestring))) return oom(c);
    } else {
      return json_err(c->e, c->file, &pa, "expected a number or a string");
    }
  }
  return 0;
}

static int parse_names(Ctx *c, const JsonPath *p, const cJSON *arr, int **out, int *n) {
  if (json_array(c->file, p, arr, n, c->e)) return -1;
  if (!(*out = util_xcalloc((size_t)*n, sizeof **out))) return oom(c);
  int k = 0;
  for (const cJSON *it = arr->child; it; it = it->next, k++) {
    JsonPath pi = {p, NULL, k};
    const char *s;
    if (json_string(c->file, &pi, it, &s, c->e)) return -1;
    int t = graph_find_tensor(c->g, s);
    if (t < 0) return json_err(c->e, c->file, &pi, "unknown tensor \"%s\"", s);
    (*out)[k] = t;
  }
  return 0;
}

static int opt_nonneg(Ctx *c, const JsonPath *p, const cJSON *obj, const char *key, double dflt, double *out) {
  const cJSON *it = json_get(obj, key);
  JsonPath pk = {p, key, 0};
  *out = dflt;
  return it ? json_nonneg(c->file, &pk, it, out, c->e) : 0;
}

static int parse_op(Ctx *c, const JsonPath *p, const cJSON *obj, Op *op) {
  Graph *g = c->g;
  int idx = (int)(op - g->ops);
  if (json_object(c->file, p, obj, c->e)) return -1;
  if (name_field(c, p, obj, &op->name)) return -1;
  g->nops = idx + 1;
  int prev = table_put(&g->index->ops, &g->ops[0].name, sizeof(Op), op->name, idx);
  if (prev >= 0) {
    JsonPath pn = {p, "name", 0};
    return json_err(c->e, c->file, &pn, "duplicate op name \"%s\" (also ops[%d])", op->name, prev);
  }
  JsonPath pt = {p, "type", 0};
  const char *type;
  if (json_string(c->file, &pt, json_get(obj, "type"), &type, c->e)) return -1;
  if (!*type) return json_err(c->e, c->file, &pt, "empty op type");
  if (!(op->type = util_strdup(type))) return oom(c);
  JsonPath pp = {p, "phase", 0};
  int v;
  if (enum_field(c, &pp, json_get(obj, "phase"), "phase", phase_names, PHASE_COUNT, &v)) return -1;
  op->phase = (Phase)v;
  JsonPath pi = {p, "inputs", 0}, po = {p, "outputs", 0};
  if (parse_names(c, &pi, json_get(obj, "inputs"), &op->inputs, &op->ninputs)) return -1;
  if (parse_names(c, &po, json_get(obj, "outputs"), &op->outputs, &op->noutputs)) return -1;
  const cJSON *attrs = json_get(obj, "attrs");
  JsonPath pa = {p, "attrs", 0};
  if (attrs && parse_attrs(c, &pa, attrs, op)) return -1;
  if (opt_nonneg(c, p, obj, "flops", 0, &op->flops)) return -1;
  if (opt_nonneg(c, p, obj, "bytes", 0, &op->bytes)) return -1;
  if (opt_nonneg(c, p, obj, "time_us", -1, &op->time_us)) return -1;
  op->workspace = 0;
  const cJSON *ws = json_get(obj, "workspace");
  JsonPath pw = {p, "workspace", 0};
  if (ws && json_int(c->file, &pw, ws, 0, &op->workspace, c->e)) return -1;
  if (!util_add_i64(c->total_bytes, op->workspace, &c->total_bytes) || c->total_bytes > JSON_MAX_BYTES)
    return json_err(c->e, c->file, &pw, "the graph's tensors and workspaces add up to more than 2^53 bytes (8 PiB, the limit)");
  /* Producers are assigned here, in op order, so a second producer is
   * reported at the op that repeats it. */
  for (int k = 0; k < op->noutputs; k++) {
    Tensor *t = &g->tensors[op->outputs[k]];
    if (t->kind != KIND_ACTIVATION) continue;
    if (t->producer >= 0) {
      JsonPath pk = {&po, NULL, k};
      if (t->producer == idx)
        return json_err(c->e, c->file, &pk, "activation \"%s\" is listed twice in this op's outputs", t->name);
      return json_err(c->e, c->file, &pk, "activation \"%s\" is already produced by ops[%d] \"%s\"", t->name,
                      t->producer, g->ops[t->producer].name);
    }
    t->producer = idx;
  }
  return 0;
}

/* True when op `from` depends (through activations) on op `target`. */
static bool depends_on(const Graph *g, int from, int target, char *seen) {
  int *stack = util_xcalloc((size_t)g->nops, sizeof *stack);
  if (!stack) return false;
  int top = 0;
  bool found = false;
  stack[top++] = from;
  seen[from] = 1;
  while (top && !found) {
    const Op *op = &g->ops[stack[--top]];
    for (int k = 0; k < op->ninputs && !found; k++) {
      int pr = g->tensors[op->inputs[k]].producer;
      if (pr < 0 || seen[pr]) continue;
      if (pr == target) found = true;
      seen[pr] = 1;
      stack[top++] = pr;
    }
  }
  free(stack);
  return found;
}

static int order_error(Ctx *c, int i, int k, int t) {
  Graph *g = c->g;
  const Tensor *ten = &g->tensors[t];
  JsonPath po = {NULL, "ops", 0}, pi = {&po, NULL, i}, pin = {&pi, "inputs", 0}, pk = {&pin, NULL, k};
  if (ten->producer == i)
    return json_err(c->e, c->file, &pk, "activation \"%s\" is also an output of this op", ten->name);
  char *seen = util_xcalloc((size_t)g->nops, 1);
  bool cycle = seen && depends_on(g, ten->producer, i, seen);
  free(seen);
  return json_err(c->e, c->file, &pk, "activation \"%s\" is read before it is produced by ops[%d] \"%s\" (%s)",
                  ten->name, ten->producer, g->ops[ten->producer].name,
                  cycle ? "the ops form a cycle" : "ops must be in topological order");
}

static int derive(Ctx *c) {
  Graph *g = c->g;
  for (int t = 0; t < g->ntensors; t++) {
    const Tensor *ten = &g->tensors[t];
    if (ten->kind == KIND_ACTIVATION && ten->producer < 0) {
      JsonPath pt = {NULL, "tensors", 0}, pi = {&pt, NULL, t};
      return json_err(c->e, c->file, &pi,
                      "activation \"%s\" has no producer (no op outputs it; an external tensor needs "
                      "\"kind\": \"input\")",
                      ten->name);
    }
  }
  for (int i = 0; i < g->nops; i++) {
    const Op *op = &g->ops[i];
    for (int k = 0; k < op->ninputs; k++) {
      Tensor *t = &g->tensors[op->inputs[k]];
      if (t->kind == KIND_ACTIVATION && t->producer >= i) return order_error(c, i, k, op->inputs[k]);
      if (t->first_read < 0) t->first_read = i;
      if (t->first_use < 0) t->first_use = i;
      t->last_read = i;
      if (op->phase == PHASE_FORWARD)
        t->last_fwd_read = i;
      else if (t->first_bwd_read < 0)
        t->first_bwd_read = i;
    }
    for (int k = 0; k < op->noutputs; k++) {
      Tensor *t = &g->tensors[op->outputs[k]];
      if (t->first_use < 0) t->first_use = i;
      t->last_write = i;
    }
  }
  int n = 0;
  for (int t = 0; t < g->ntensors; t++) {
    Tensor *ten = &g->tensors[t];
    ten->stashed = ten->kind == KIND_ACTIVATION && g->ops[ten->producer].phase == PHASE_FORWARD &&
                   ten->first_bwd_read >= 0;
    n += ten->stashed;
  }
  if (!(g->stashed = util_xcalloc((size_t)n, sizeof *g->stashed))) return oom(c);
  /* Producer order, then output order within a multi-output op. */
  for (int i = 0; i < g->nops; i++)
    for (int k = 0; k < g->ops[i].noutputs; k++) {
      Tensor *t = &g->tensors[g->ops[i].outputs[k]];
      if (t->stashed && t->producer == i) g->stashed[g->nstashed++] = g->ops[i].outputs[k];
    }
  return 0;
}

static int parse_outputs(Ctx *c, const cJSON *arr) {
  JsonPath p = {NULL, "outputs", 0};
  int *idx = NULL, n = 0;
  int rc = parse_names(c, &p, arr, &idx, &n);
  for (int k = 0; rc == 0 && k < n; k++) c->g->tensors[idx[k]].is_output = true;
  free(idx);
  return rc;
}

static char *default_name(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
  char *s = malloc(n + 1);
  if (s) {
    memcpy(s, base, n);
    s[n] = 0;
  }
  return s;
}

static int parse_graph(Ctx *c, const cJSON *root, const char *text, size_t len) {
  Graph *g = c->g;
  util_sha256_hex(text, len, g->sha256);
  const cJSON *name = json_get(root, "name");
  if (name) {
    JsonPath pn = {NULL, "name", 0};
    const char *s;
    if (json_string(c->file, &pn, name, &s, c->e)) return -1;
    if (!*s) return json_err(c->e, c->file, &pn, "empty name");
    g->name = util_strdup(s);
  } else {
    g->name = default_name(c->file);
  }
  if (!g->name) return oom(c);

  JsonPath pt = {NULL, "tensors", 0}, po = {NULL, "ops", 0};
  const cJSON *tensors = json_get(root, "tensors"), *ops = json_get(root, "ops");
  int nt, no;
  if (json_array(c->file, &pt, tensors, &nt, c->e)) return -1;
  if (json_array(c->file, &po, ops, &no, c->e)) return -1;
  if (!(g->index = util_xcalloc(1, sizeof *g->index))) return oom(c);
  if (!(g->tensors = util_xcalloc((size_t)nt, sizeof *g->tensors))) return oom(c);
  if (!(g->ops = util_xcalloc((size_t)no, sizeof *g->ops))) return oom(c);
  if (table_init(&g->index->tensors, nt) || table_init(&g->index->ops, no)) return oom(c);
  int i = 0;
  for (const cJSON *it = tensors->child; it; it = it->next, i++) {
    JsonPath pi = {&pt, NULL, i};
    if (parse_tensor(c, &pi, it, &g->tensors[i])) return -1;
  }
  i = 0;
  for (const cJSON *it = ops->child; it; it = it->next, i++) {
    JsonPath pi = {&po, NULL, i};
    if (parse_op(c, &pi, it, &g->ops[i])) return -1;
  }
  const cJSON *outs = json_get(root, "outputs");
  if (outs && parse_outputs(c, outs)) return -1;
  return derive(c);
}

Graph *graph_parse(const char *path, const char *text, size_t len, Err *e) {
  cJSON *root = json_parse(path, text, len, "ration-graph/1", e);
  if (!root) return NULL;
  Graph *g = util_xcalloc(1, sizeof *g);
  Ctx c = {path, g, e, 0};
  int rc = g && (g->path = util_strdup(path)) ? parse_graph(&c, root, text, len) : oom(&c);
  cJSON_Delete(root);
  if (rc) {
    graph_free(g);
    return NULL;
  }
  return g;
}

Graph *graph_load(const char *path, Err *e) {
  size_t len;
  char *text = json_read(path, &len, e);
  if (!text) return NULL;
  Graph *g = graph_parse(path, text, len, e);
  free(text);
  return g;
}

/* ------------------------------------------------------ runtime bytes */

/* The bytes a device's runtime holds for the whole run beside the planned
 * tensors (the CUDA backend's cuBLASLt workspace) become one more input
 * tensor, so that every strategy, budget and report counts them as it
 * counts any resident tensor and the layout gives them a place in the
 * arena, where the runtime finds them by name. */
int graph_add_runtime_tensor(Graph *g, int64_t bytes, Err *e) {
  if (bytes <= 0) return 0;
  if (graph_find_tensor(g, GRAPH_RUNTIME_TENSOR) >= 0)
    return err_set(e, "%s: the tensor name \"%s\" is reserved for the runtime's own bytes", g->path,
                   GRAPH_RUNTIME_TENSOR);
  Tensor *t = realloc(g->tensors, ((size_t)g->ntensors + 1) * sizeof *t);
  if (!t) return err_set(e, "%s: out of memory", g->path);
  g->tensors = t;
  t = &g->tensors[g->ntensors];
  memset(t, 0, sizeof *t);
  if (!(t->name = util_strdup(GRAPH_RUNTIME_TENSOR))) return err_set(e, "%s: out of memory", g->path);
  t->rank = 1;
  t->shape[0] = bytes;
  t->dtype = DT_U8;
  t->kind = KIND_INPUT;
  t->bytes = bytes;
  t->producer = t->first_read = t->last_read = t->last_write = t->last_fwd_read = t->first_bwd_read = t->first_use = -1;
  if (g->index) table_put(&g->index->tensors, &g->tensors[0].name, sizeof(Tensor), t->name, g->ntensors);
  g->ntensors++;
  return 0;
}
