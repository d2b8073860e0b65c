/*
 * emit_c.c - writes a plan as a C99 schedule (NAME.sched.c + NAME.sched.h)
 * that libration runs: a provenance header, static const tables of tensors,
 * buffers, ops, steps and the cross-stream waits (sync.c), and one entry
 * point returning them. Output is a pure function of the plan and graph
 * (no time stamps, no solver timings), so schedules can be checked in and
 * verified with `ration plan --check` (emit_c_compare).
 */
#include "ration.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The schedule ABI: identical to the block between the RATION-SCHED-ABI
 * markers in runtime/ration.h (tests/t_emit_c.sh holds them equal). */
static const char abi_block[] =
    "/* RATION-SCHED-ABI-BEGIN */\n"
    "#ifndef RATION_SCHED_ABI\n"
    "#define RATION_SCHED_ABI 4\n"
    "enum { RT_SCHED_MAX_RANK = 8 };\n"
    "enum { RT_SPACE_DEVICE = 0, RT_SPACE_HOST = 1 };\n"
    "/* RT_STEP_ZERO (to): fill a grad's device home with zeros before its\n"
    " * first use; a grad without one is zeroed at the step's start. */\n"
    "enum { RT_STEP_COMPUTE = 0, RT_STEP_OFFLOAD = 1, RT_STEP_OFFLOAD_WAIT = 2,\n"
    "       RT_STEP_PREFETCH = 3, RT_STEP_PREFETCH_WAIT = 4, RT_STEP_ZERO = 5,\n"
    "       RT_STEP_HOST_COMPUTE = 6, RT_STEP_HOST_WAIT = 7 };\n"
    "/* ABI 4: RT_STREAM_HOST runs host_compute steps (an op over host\n"
    " * buffers, io0 as a compute step's) on the host. */\n"
    "enum { RT_STREAM_COMPUTE = 0, RT_STREAM_D2H = 1, RT_STREAM_H2D = 2, RT_STREAM_HOST = 3 };\n"
    "/* kind: 0 input, 1 param, 2 grad, 3 optstate, 4 activation;\n"
    " * dtype: 0 f32, 1 bf16, 2 f16, 3 i32, 4 i64, 5 u8 */\n"
    "typedef struct rt_SchedTensor {\n"
    "  const char *name;\n"
    "  int32_t dtype, kind, rank, is_output;\n"
    "  int64_t shape[RT_SCHED_MAX_RANK];\n"
    "  int64_t bytes;\n"
    "} rt_SchedTensor;\n"
    "/* ABI 3: home is 1 on the buffer that holds a resident tensor between\n"
    " * steps (its device buffer, or the host buffer of a host-homed one). */\n"
    "typedef struct rt_SchedBuffer {\n"
    "  int32_t tensor, workspace_of, space, home;\n"
    "  int64_t bytes, offset;\n"
    "} rt_SchedBuffer;\n"
    "typedef struct rt_SchedAttr {\n"
    "  const char *key;\n"
    "  double num;\n"
    "  const char *str;\n"
    "} rt_SchedAttr;\n"
    "typedef struct rt_SchedOp {\n"
    "  const char *name, *type;\n"
    "  int32_t phase, nin, nout, io0, nattr, attr0;\n"
    "  int64_t workspace;\n"
    "} rt_SchedOp;\n"
    "/* A step runs on one stream after waiting for the steps waits[wait0 ..\n"
    " * wait0+nwait) (on other streams) to complete; event >= 0 marks a step that\n"
    " * some later step waits for. io0 indexes step_io: inputs then outputs. */\n"
    "typedef struct rt_SchedStep {\n"
    "  int32_t kind, stream, op, recompute, io0, workspace, from, to;\n"
    "  int32_t wait0, nwait, event;\n"
    "} rt_SchedStep;\n"
    "typedef struct rt_Schedule {\n"
    "  int32_t abi;\n"
    "  const char *name, *ration_version, *graph_name, *graph_sha256, *device;\n"
    "  const char *strategy, *solver_status;\n"
    "  double solver_gap, predicted_step_seconds;\n"
    "  int64_t budget_bytes, arena_bytes, host_bytes, alignment, peak_live_bytes;\n"
    "  int32_t ntensors, nbuffers, nops, nsteps, nevents;\n"
    "  const rt_SchedTensor *tensors;\n"
    "  const rt_SchedBuffer *buffers;\n"
    "  const rt_SchedOp *ops;\n"
    "  const int32_t *op_io;\n"
    "  const rt_SchedAttr *attrs;\n"
    "  const rt_SchedStep *steps;\n"
    "  const int32_t *step_io;\n"
    "  const int32_t *waits;\n"
    "  /* ABI 2: the lengths of the flat tables, so that every index in them is\n"
    "   * checked against the table it points into. */\n"
    "  int32_t nop_io, nattrs, nstep_io, nwaits;\n"
    "} rt_Schedule;\n"
    "#endif\n"
    "/* RATION-SCHED-ABI-END */\n";

void emit_c_ident(const char *name, char *out, size_t n) {
  size_t j = 0;
  for (const char *c = name; *c && j + 1 < n; c++) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
    out[j++] = ok ? *c : '_';
  }
  if (n) out[j] = '\0';
}

/* A C string literal; octal escapes are always three digits so a following
 * digit can never extend them. */
static void put_cstr(Buf *b, const char *s) {
  if (!s) {
    buf_printf(b, "0");
    return;
  }
  buf_printf(b, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') buf_printf(b, "\\%c", *c);
    else if (*c < 32 || *c >= 127 || *c == '?') buf_printf(b, "\\%03o", *c); /* '?' avoids trigraphs */
    else buf_printf(b, "%c", *c);
  }
  buf_printf(b, "\"");
}

/* Text inside a block comment, whatever bytes S holds: printable ASCII
 * only (anything else, newlines included, becomes '.'), a backslash becomes
 * '/', and no two emitted characters pair up as the end of the comment
 * ("*" "/"), a nested opening ("/" "*", which -Wcomment rejects) or the
 * start of a trigraph ("??", which -std=c99 would turn "??/" into a line
 * splice): the second of such a pair is written as '+' or '.'. */
static void put_comment_text(Buf *b, const char *s) {
  char prev = ' ';
  for (const char *c = s ? s : "(null)"; *c; c++) {
    char ch = (*c >= 32 && *c < 127) ? *c : '.';
    if (ch == '\\') ch = '/';
    if ((prev == '*' && ch == '/') || (prev == '/' && ch == '*')) ch = '+';
    else if (prev == '?' && ch == '?') ch = '.';
    buf_printf(b, "%c", ch);
    prev = ch;
  }
}

static int put_double(Buf *b, double x, Err *e, const char *what) {
  if (!isfinite(x)) return err_set(e, "emit: %s is not finite", what);
  buf_printf(b, "%.17g", x);
  return 0;
}

static void put_provenance(Buf *b, const Plan *p, const Graph *g, const char *file) {
  char tmp[64];
  buf_printf(b, "/*\n * ");
  put_comment_text(b, file);
  buf_printf(b, " - generated by ration; do not edit.\n");
  buf_printf(b, " * ration version: %s\n", RATION_VERSION);
  buf_printf(b, " * graph: ");
  put_comment_text(b, g->name);
  buf_printf(b, "\n * graph sha256: ");
  put_comment_text(b, p->graph_sha256);
  buf_printf(b, "\n * device: ");
  put_comment_text(b, p->device);
  buf_printf(b, "\n * budget bytes: %lld (%s)\n", (long long)p->budget_bytes,
             util_fmt_bytes(p->budget_bytes, tmp, sizeof tmp));
  buf_printf(b, " * strategy: ");
  put_comment_text(b, p->strategy);
  buf_printf(b, "\n * solver: ");
  put_comment_text(b, p->solver.name[0] ? p->solver.name : "none");
  buf_printf(b, ", status ");
  put_comment_text(b, p->solver.status[0] ? p->solver.status : "not_used");
  buf_printf(b, ", gap %.6g\n", isfinite(p->solver.gap) ? p->solver.gap : 0.0);
  buf_printf(b, " * predicted step seconds: %.9g\n",
             isfinite(p->predicted.step_seconds) ? p->predicted.step_seconds : 0.0);
  buf_printf(b, " * predicted peak live bytes: %lld\n", (long long)p->predicted.peak_live_bytes);
  buf_printf(b, " * arena bytes: %lld, host bytes: %lld\n", (long long)p->arena_bytes,
             (long long)p->host_bytes);
  buf_printf(b, " */\n");
}

int emit_c_header(const Plan *p, const Graph *g, const char *name, Buf *out, Err *e) {
  char ident[256], file[300];
  emit_c_ident(name, ident, sizeof ident);
  snprintf(file, sizeof file, "%s.sched.h", name);
  put_provenance(out, p, g, file);
  buf_printf(out, "#ifndef RATION_SCHEDULE_%s_H\n#define RATION_SCHEDULE_%s_H\n\n", ident, ident);
  buf_printf(out, "#include <stdint.h>\n\n%s\n", abi_block);
  buf_printf(out, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n");
  buf_printf(out, "/* The schedule's tables, for rt_open(). */\n");
  buf_printf(out, "const rt_Schedule *ration_schedule_%s(void);\n", ident);
  buf_printf(out, "#ifdef __cplusplus\n}\n#endif\n#endif\n");
  if (out->failed) return err_set(e, "emit: out of memory");
  return 0;
}

/* Steps whose operands are in step_io: compute and host_compute. */
static bool step_has_io(const Step *st) { return st->kind == STEP_COMPUTE || st->kind == STEP_HOST_COMPUTE; }

static const char *step_kind_macro(StepKind k) {
  switch (k) {
  case STEP_COMPUTE: return "RT_STEP_COMPUTE";
  case STEP_OFFLOAD: return "RT_STEP_OFFLOAD";
  case STEP_OFFLOAD_WAIT: return "RT_STEP_OFFLOAD_WAIT";
  case STEP_PREFETCH: return "RT_STEP_PREFETCH";
  case STEP_PREFETCH_WAIT: return "RT_STEP_PREFETCH_WAIT";
  case STEP_ZERO: return "RT_STEP_ZERO";
  case STEP_HOST_COMPUTE: return "RT_STEP_HOST_COMPUTE";
  case STEP_HOST_WAIT: return "RT_STEP_HOST_WAIT";
  case STEP_KIND_COUNT: break;
  }
  return "?";
}

static const char *stream_macro(int s) {
  return s == SYNC_D2H    ? "RT_STREAM_D2H"
         : s == SYNC_H2D  ? "RT_STREAM_H2D"
         : s == SYNC_HOST ? "RT_STREAM_HOST"
                          : "RT_STREAM_COMPUTE";
}

/* The step's comment: what --check prints when this step changed. */
static void put_step_comment(Buf *b, const Plan *p, const Graph *g, int s) {
  const Step *st = &p->steps[s];
  buf_printf(b, " /* %d ", s);
  switch (st->kind) {
  case STEP_COMPUTE:
  case STEP_HOST_COMPUTE: {
    const Op *op = &g->ops[st->op];
    buf_printf(b, "%s ", st->kind == STEP_HOST_COMPUTE ? "host_compute" : st->recompute ? "recompute" : "compute");
    put_comment_text(b, op->name);
    buf_printf(b, " in");
    for (int i = 0; i < op->ninputs; i++) buf_printf(b, "%s%d", i ? "," : " ", st->inputs[i]);
    buf_printf(b, " out");
    for (int i = 0; i < op->noutputs; i++) buf_printf(b, "%s%d", i ? "," : " ", st->outputs[i]);
    if (st->workspace >= 0) buf_printf(b, " ws %d", st->workspace);
    break;
  }
  case STEP_OFFLOAD: buf_printf(b, "offload %d -> %d", st->from, st->to); break;
  case STEP_OFFLOAD_WAIT: buf_printf(b, "offload_wait %d", st->from); break;
  case STEP_PREFETCH: buf_printf(b, "prefetch %d -> %d", st->from, st->to); break;
  case STEP_PREFETCH_WAIT: buf_printf(b, "prefetch_wait %d", st->to); break;
  case STEP_ZERO: buf_printf(b, "zero %d", st->to); break;
  case STEP_HOST_WAIT:
    buf_printf(b, "host_compute_wait ");
    put_comment_text(b, g->ops[st->op].name);
    break;
  case STEP_KIND_COUNT: break;
  }
  buf_printf(b, " */\n");
}

/* A table's length in the schedule struct: its array's (an empty table's
 * array holds one placeholder row and has length 0). */
static void put_length(Buf *b, const char *table, int n) {
  if (n > 0) buf_printf(b, "RT_SCHED_LEN(%s), ", table);
  else buf_printf(b, "0, ");
}

int emit_c_source(const Plan *p, const Graph *g, const char *name, Buf *out, Err *e) {
  char ident[256], file[300];
  emit_c_ident(name, ident, sizeof ident);
  snprintf(file, sizeof file, "%s.sched.c", name);
  /* The schedule ABI indexes its flat tables with int32: count in int64
   * first so that a huge plan is refused, not wrapped. */
  int64_t nio64 = 0, nsio64 = 0;
  for (int i = 0; i < g->nops; i++) nio64 += (int64_t)g->ops[i].ninputs + g->ops[i].noutputs + g->ops[i].nattrs;
  for (int s = 0; s < p->nsteps; s++)
    if (step_has_io(&p->steps[s])) nsio64 += (int64_t)g->ops[p->steps[s].op].ninputs + g->ops[p->steps[s].op].noutputs;
  if (nio64 > INT32_MAX || nsio64 > INT32_MAX)
    return err_set(e, "%s: the schedule's tables need more than 2^31 entries (the runtime's limit)", file);
  SyncTable sy;
  if (sync_derive(p, g, &sy, e) < 0) return -1;
  int rc = -1;
  put_provenance(out, p, g, file);
  /* Self-contained: the ABI block and the entry point's prototype, not an
   * #include of the header, whose name (OUT's) no escape could make safe
   * in an #include line (it takes no escape sequences). */
  buf_printf(out, "#include <stdint.h>\n\n%s\n", abi_block);
  buf_printf(out, "const rt_Schedule *ration_schedule_%s(void);\n\n", ident);
  buf_printf(out, "#define RT_SCHED_LEN(table) ((int32_t)(sizeof(table) / sizeof(table)[0]))\n\n");

  buf_printf(out, "/* name, dtype, kind, rank, is_output, shape, bytes */\n");
  buf_printf(out, "static const rt_SchedTensor tensors[%d] = {\n", g->ntensors);
  for (int i = 0; i < g->ntensors; i++) {
    const Tensor *t = &g->tensors[i];
    buf_printf(out, "  {");
    put_cstr(out, t->name);
    buf_printf(out, ", %d, %d, %d, %d, {", (int)t->dtype, (int)t->kind, t->rank, t->is_output ? 1 : 0);
    for (int d = 0; d < GRAPH_MAX_RANK; d++) buf_printf(out, "%s%lld", d ? ", " : "", d < t->rank ? (long long)t->shape[d] : 0LL);
    buf_printf(out, "}, %lld}, /* %d */\n", (long long)t->bytes, i);
  }
  buf_printf(out, "};\n\n");

  buf_printf(out, "/* tensor, workspace_of, space, home, bytes, offset */\n");
  buf_printf(out, "static const rt_SchedBuffer buffers[%d] = {\n", p->nbuffers > 0 ? p->nbuffers : 1);
  for (int i = 0; i < p->nbuffers; i++) {
    const Buffer *bf = &p->buffers[i];
    buf_printf(out, "  {%d, %d, %s, %d, %lld, %lld}, /* %d */\n", bf->tensor, bf->workspace_of,
               bf->space == SPACE_HOST ? "RT_SPACE_HOST" : "RT_SPACE_DEVICE", bf->home ? 1 : 0, (long long)bf->bytes,
               (long long)bf->offset, i);
  }
  if (p->nbuffers == 0) buf_printf(out, "  {-1, -1, RT_SPACE_DEVICE, 0, 0, 0}, /* none */\n");
  buf_printf(out, "};\n\n");

  /* op_io and attrs are flat arrays indexed from the op table. */
  int nio = 0, nattr = 0;
  for (int i = 0; i < g->nops; i++) {
    nio += g->ops[i].ninputs + g->ops[i].noutputs;
    nattr += g->ops[i].nattrs;
  }
  buf_printf(out, "/* per op: input tensors, then output tensors */\n");
  buf_printf(out, "static const int32_t op_io[%d] = {\n", nio > 0 ? nio : 1);
  for (int i = 0; i < g->nops; i++) {
    const Op *op = &g->ops[i];
    if (op->ninputs + op->noutputs == 0) continue;
    buf_printf(out, " ");
    for (int k = 0; k < op->ninputs; k++) buf_printf(out, " %d,", op->inputs[k]);
    for (int k = 0; k < op->noutputs; k++) buf_printf(out, " %d,", op->outputs[k]);
    buf_printf(out, " /* %d */\n", i);
  }
  if (nio == 0) buf_printf(out, "  -1 /* none */\n");
  buf_printf(out, "};\n\n");

  buf_printf(out, "static const rt_SchedAttr attrs[%d] = {\n", nattr > 0 ? nattr : 1);
  for (int i = 0; i < g->nops; i++) {
    const Op *op = &g->ops[i];
    for (int k = 0; k < op->nattrs; k++) {
      buf_printf(out, "  {");
      put_cstr(out, op->attrs[k].key);
      buf_printf(out, ", ");
      if (put_double(out, op->attrs[k].str ? 0.0 : op->attrs[k].num, e, "an attribute") < 0) goto done;
      buf_printf(out, ", ");
      put_cstr(out, op->attrs[k].str);
      buf_printf(out, "},\n");
    }
  }
  if (nattr == 0) buf_printf(out, "  {0, 0.0, 0} /* none */\n");
  buf_printf(out, "};\n\n");

  buf_printf(out, "/* name, type, phase, nin, nout, io0, nattr, attr0, workspace */\n");
  buf_printf(out, "static const rt_SchedOp ops[%d] = {\n", g->nops > 0 ? g->nops : 1);
  nio = nattr = 0;
  for (int i = 0; i < g->nops; i++) {
    const Op *op = &g->ops[i];
    buf_printf(out, "  {");
    put_cstr(out, op->name);
    buf_printf(out, ", ");
    put_cstr(out, op->type);
    buf_printf(out, ", %d, %d, %d, %d, %d, %d, %lld}, /* %d */\n", (int)op->phase, op->ninputs,
               op->noutputs, nio, op->nattrs, nattr, (long long)op->workspace, i);
    nio += op->ninputs + op->noutputs;
    nattr += op->nattrs;
  }
  if (g->nops == 0) buf_printf(out, "  {0, 0, 0, 0, 0, 0, 0, 0, 0} /* none */\n");
  buf_printf(out, "};\n\n");

  int nsio = 0;
  for (int s = 0; s < p->nsteps; s++)
    if (step_has_io(&p->steps[s])) nsio += g->ops[p->steps[s].op].ninputs + g->ops[p->steps[s].op].noutputs;
  buf_printf(out, "/* per compute step: input buffers, then output buffers */\n");
  buf_printf(out, "static const int32_t step_io[%d] = {\n", nsio > 0 ? nsio : 1);
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (!step_has_io(st)) continue;
    const Op *op = &g->ops[st->op];
    if (op->ninputs + op->noutputs == 0) continue;
    buf_printf(out, " ");
    for (int k = 0; k < op->ninputs; k++) buf_printf(out, " %d,", st->inputs[k]);
    for (int k = 0; k < op->noutputs; k++) buf_printf(out, " %d,", st->outputs[k]);
    buf_printf(out, " /* %d */\n", s);
  }
  if (nsio == 0) buf_printf(out, "  -1 /* none */\n");
  buf_printf(out, "};\n\n");

  buf_printf(out, "/* steps each waits for (on other streams) */\n");
  buf_printf(out, "static const int32_t waits[%d] = {\n", sy.nwaits > 0 ? sy.nwaits : 1);
  for (int s = 0; s < p->nsteps; s++) {
    if (sy.wait_start[s] == sy.wait_start[s + 1]) continue;
    buf_printf(out, " ");
    for (int k = sy.wait_start[s]; k < sy.wait_start[s + 1]; k++) buf_printf(out, " %d,", sy.waits[k]);
    buf_printf(out, " /* %d */\n", s);
  }
  if (sy.nwaits == 0) buf_printf(out, "  -1 /* none */\n");
  buf_printf(out, "};\n\n");

  buf_printf(out, "/* kind, stream, op, recompute, io0, workspace, from, to, wait0, nwait, event */\n");
  buf_printf(out, "static const rt_SchedStep steps[%d] = {\n", p->nsteps > 0 ? p->nsteps : 1);
  nsio = 0;
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    bool c = st->kind == STEP_COMPUTE, io = step_has_io(st), op = io || st->kind == STEP_HOST_WAIT;
    buf_printf(out, "  {%s, %s, %d, %d, %d, %d, %d, %d, %d, %d, %d},", step_kind_macro(st->kind),
               stream_macro(sy.stream[s]), op ? st->op : -1, c && st->recompute ? 1 : 0, io ? nsio : -1,
               c ? st->workspace : -1, op ? -1 : st->from, op ? -1 : st->to, sy.wait_start[s],
               sy.wait_start[s + 1] - sy.wait_start[s], sy.event[s]);
    put_step_comment(out, p, g, s);
    if (io) nsio += g->ops[st->op].ninputs + g->ops[st->op].noutputs;
  }
  if (p->nsteps == 0) buf_printf(out, "  {0, 0, -1, 0, -1, -1, -1, -1, 0, 0, -1} /* none */\n");
  buf_printf(out, "};\n\n");

  buf_printf(out, "static const rt_Schedule schedule = {\n");
  buf_printf(out, "  RATION_SCHED_ABI,\n  ");
  put_cstr(out, name);
  buf_printf(out, ", ");
  put_cstr(out, RATION_VERSION);
  buf_printf(out, ", ");
  put_cstr(out, g->name);
  buf_printf(out, ",\n  ");
  put_cstr(out, p->graph_sha256);
  buf_printf(out, ",\n  ");
  put_cstr(out, p->device);
  buf_printf(out, ", ");
  put_cstr(out, p->strategy);
  buf_printf(out, ", ");
  put_cstr(out, p->solver.status[0] ? p->solver.status : "not_used");
  buf_printf(out, ",\n  ");
  if (put_double(out, p->solver.gap, e, "the solver gap") < 0) goto done;
  buf_printf(out, ", ");
  if (put_double(out, p->predicted.step_seconds, e, "the predicted step time") < 0) goto done;
  buf_printf(out, ",\n  %lld, %lld, %lld, %lld, %lld,\n", (long long)p->budget_bytes, (long long)p->arena_bytes,
             (long long)p->host_bytes, (long long)p->alignment, (long long)p->predicted.peak_live_bytes);
  /* Every table's length is its array's, so that a hand edit that adds
   * or drops rows cannot leave a count that overruns the table. */
  buf_printf(out, "  ");
  put_length(out, "tensors", g->ntensors);
  put_length(out, "buffers", p->nbuffers);
  put_length(out, "ops", g->nops);
  put_length(out, "steps", p->nsteps);
  buf_printf(out, "%d,\n  tensors, buffers, ops, op_io, attrs, steps, step_io, waits,\n  ", sy.nevents);
  put_length(out, "op_io", nio);
  put_length(out, "attrs", nattr);
  put_length(out, "step_io", nsio);
  buf_printf(out, "%s\n};\n\n", sy.nwaits > 0 ? "RT_SCHED_LEN(waits)" : "0");
  buf_printf(out, "const rt_Schedule *ration_schedule_%s(void) {\n  return &schedule;\n}\n", ident);
  rc = 0;
done:
  sync_free(&sy);
  if (rc == 0 && out->failed) rc = err_set(e, "emit: out of memory");
  return rc;
}

/* ------------------------------------------------------------- compare */

/* Line [*pos, eol) of s, advancing *pos; false at the end. */
static bool next_line(const char *s, size_t *pos, const char **line, size_t *len) {
  if (!s[*pos]) return false;
  const char *l = s + *pos;
  const char *nl = strchr(l, '\n');
  *len = nl ? (size_t)(nl - l) : strlen(l);
  *line = l;
  *pos += *len + (nl ? 1 : 0);
  return true;
}

/* The value of provenance line " * KEY: value" (up to the end of line). */
static bool prov_field(const char *text, const char *key, char *val, size_t n) {
  size_t pos = 0, len, klen = strlen(key);
  const char *l;
  while (next_line(text, &pos, &l, &len)) {
    if (len >= 2 && l[0] == ' ' && l[1] == '*' && len > 3 + klen && !strncmp(l + 3, key, klen) &&
        l[3 + klen] == ':') {
      size_t vl = len - (4 + klen);
      const char *v = l + 4 + klen;
      while (vl && *v == ' ') v++, vl--;
      if (vl >= n) vl = n - 1;
      memcpy(val, v, vl);
      val[vl] = '\0';
      return true;
    }
    if (len == 3 && !strncmp(l, " */", 3)) break;
  }
  return false;
}

/* The steps table rows of text, one pointer per row start. */
static int step_rows(const char *text, const char ***rows) {
  const char *t = strstr(text, "static const rt_SchedStep steps[");
  int n = 0, cap = 0;
  *rows = NULL;
  if (!t) return 0;
  const char *nl = strchr(t, '\n');
  size_t pos = nl ? (size_t)(nl + 1 - text) : strlen(text), len;
  const char *l;
  while (next_line(text, &pos, &l, &len) && !(len >= 2 && !strncmp(l, "};", 2))) {
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      const char **r = realloc(*rows, (size_t)cap * sizeof *r);
      if (!r) break;
      *rows = r;
    }
    (*rows)[n++] = l;
  }
  return n;
}

static void put_row_desc(Buf *b, const char *row) {
  const char *c = strstr(row, "/* ");
  const char *nl = strchr(row, '\n');
  if (!c || (nl && c > nl)) {
    buf_printf(b, "(none)");
    return;
  }
  c += 3;
  while (*c >= '0' && *c <= '9') c++; /* the step index, said already */
  if (*c == ' ') c++;
  const char *end = strstr(c, " */");
  buf_printf(b, "%.*s", (int)(end ? end - c : 60), c);
}

int emit_c_compare(const char *old_text, const char *new_text, Buf *why) {
  if (!strcmp(old_text, new_text)) return 0;
  static const char *const keys[] = {"ration version", "graph sha256", "budget bytes", "device", "strategy"};
  int nsaid = 0;
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    char a[256], b[256];
    bool ha = prov_field(old_text, keys[k], a, sizeof a), hb = prov_field(new_text, keys[k], b, sizeof b);
    if (!ha) strcpy(a, "(missing)");
    if (!hb) strcpy(b, "(missing)");
    if (strcmp(a, b)) buf_printf(why, "%s%s was %s, now %s", nsaid++ ? "; " : "", keys[k], a, b);
  }
  const char **ro, **rn;
  int no = step_rows(old_text, &ro), nn = step_rows(new_text, &rn);
  int i = 0;
  for (; i < no && i < nn; i++) {
    const char *eo = strchr(ro[i], '\n'), *en = strchr(rn[i], '\n');
    size_t lo = eo ? (size_t)(eo - ro[i]) : strlen(ro[i]), ln = en ? (size_t)(en - rn[i]) : strlen(rn[i]);
    if (lo != ln || memcmp(ro[i], rn[i], lo)) break;
  }
  if (i < no || i < nn) {
    Buf was = {0}, now = {0};
    if (i < no) put_row_desc(&was, ro[i]);
    if (i < nn) put_row_desc(&now, rn[i]);
    bool same = was.data && now.data && !strcmp(was.data, now.data);
    /* Same description: the difference is in the table row itself. */
    if (same) {
      buf_free(&was);
      buf_free(&now);
      buf_printf(&was, "%.*s", (int)strcspn(ro[i], "\n"), ro[i]);
      buf_printf(&now, "%.*s", (int)strcspn(rn[i], "\n"), rn[i]);
    }
    buf_printf(why, "%sstep %d: was '%s', now '%s'", nsaid++ ? "; " : "", i, was.data ? was.data : "(no step)",
               now.data ? now.data : "(no step)");
    buf_free(&was);
    buf_free(&now);
  }
  free(ro);
  free(rn);
  if (!nsaid) {
    /* Same provenance and steps: name the first differing line. */
    size_t po = 0, pn = 0, lo, ln;
    const char *a, *b;
    int line = 1;
    for (;; line++) {
      bool ha = next_line(old_text, &po, &a, &lo), hb = next_line(new_text, &pn, &b, &ln);
      if (!ha || !hb || lo != ln || memcmp(a, b, lo)) break;
    }
    buf_printf(why, "line %d differs", line);
  }
  return 1;
}

/* ------------------------------------------------------- files at OUT */

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* Source (which = 0) or header text for OUT. */
static int emit_one(const Plan *p, const Graph *g, const char *out, int which, Buf *b, Err *e) {
  int rc = which == 0 ? emit_c_source(p, g, base_name(out), b, e) : emit_c_header(p, g, base_name(out), b, e);
  if (rc == 0 && b->failed) rc = err_set(e, "%s: out of memory", out);
  return rc;
}

int emit_c_write(const Plan *p, const Graph *g, const char *out, const OutFile *also, int nalso, Err *e) {
  static const char *const ext[] = {".sched.c", ".sched.h"};
  char path[2][4096];
  Buf b[2] = {{0}, {0}};
  OutFile *files = util_xcalloc(2 + (size_t)nalso, sizeof *files);
  if (!files) return err_set(e, "%s: out of memory", out);
  int n = 0, rc = 0;
  for (int which = 0; which < 2 && rc == 0; which++) {
    snprintf(path[which], sizeof path[which], "%s%s", out, ext[which]);
    rc = emit_one(p, g, out, which, &b[which], e);
    files[n++] = (OutFile){path[which], b[which].data, b[which].len};
  }
  for (int k = 0; k < nalso; k++) files[n++] = also[k];
  if (rc == 0) rc = util_write_files_atomic(files, n, e);
  free(files);
  buf_free(&b[0]);
  buf_free(&b[1]);
  return rc;
}

int emit_c_check(const Plan *p, const Graph *g, const char *out, Buf *why, Err *e) {
  static const char *const ext[] = {".sched.c", ".sched.h"};
  int stale = 0;
  for (int which = 0; which < 2; which++) {
    char path[4096];
    Buf b = {0}, diff = {0};
    snprintf(path, sizeof path, "%s%s", out, ext[which]);
    if (emit_one(p, g, out, which, &b, e)) {
      buf_free(&b);
      return -1;
    }
    Err re;
    size_t len;
    char *old = util_read_file(path, &len, &re);
    if (!old) {
      buf_printf(why, "%s%s: missing or unreadable", stale++ ? "\n" : "", path);
    } else if (strlen(old) != len || emit_c_compare(old, b.data, &diff)) {
      buf_printf(why, "%s%s: stale: %s", stale++ ? "\n" : "", path, diff.data ? diff.data : "binary contents");
    }
    free(old);
    buf_free(&diff);
    buf_free(&b);
  }
  return stale ? 1 : 0;
}
