/*
 * sched_text.h - reads the tables of an emitted NAME.sched.c back from its
 * text into heap memory, one allocation per table of exactly its rows, so
 * that a sanitizer sees any read past a table's end. The schedule fuzz
 * target feeds rt_open what a hand edit of a .sched.c could make of it;
 * tests/test_rt_schedule.c corrupts real schedules field by field.
 *
 * It reads the subset of C that emit_c.c writes (static const arrays of
 * brace-enclosed rows, string literals, integers, doubles, the RT_*
 * constants, RT_SCHED_LEN(table)) the way a C compiler would, and refuses
 * anything else. A schedule whose struct gives a table a length longer
 * than the table's array is refused too: C allows writing one, and no
 * reader of the struct could tell, so it lies outside rt_open's contract.
 */
#ifndef RATION_SCHED_TEXT_H
#define RATION_SCHED_TEXT_H

#include "../../runtime/ration.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { SV_NUM, SV_STR, SV_NULL, SV_IDENT, SV_LEN };
/* Rows a table may have: what a session allocates grows with them. */
enum { SCHED_TEXT_MAX_ROWS = 1 << 16 };

typedef struct SchedValue {
  int kind;      /* SV_*: a number, a string literal, 0 as a pointer, an identifier, RT_SCHED_LEN(x) */
  double num;    /* SV_NUM (integers exactly up to 2^53; int64 in inum) */
  int64_t inum;
  bool fits;     /* SV_NUM: inum holds it (a double too large for int64 does not) */
  char *text;    /* SV_STR: the literal's bytes; SV_IDENT, SV_LEN: the name */
} SchedValue;

/* A schedule read from text: the struct and every allocation behind it. */
typedef struct SchedText {
  rt_Schedule s;
  rt_SchedTensor *tensors;
  rt_SchedBuffer *buffers;
  rt_SchedOp *ops;
  rt_SchedAttr *attrs;
  rt_SchedStep *steps;
  int32_t *op_io, *step_io, *waits;
  int32_t len[8]; /* each table's array length, in the order of sched_tables */
  char **strings; /* every string the tables point to */
  int nstrings, capstrings;
} SchedText;

static const char *const sched_tables[8] = {"tensors", "buffers", "ops", "op_io", "attrs", "steps", "step_io", "waits"};

typedef struct Lexer {
  const char *p, *end;
} Lexer;

static void lex_skip(Lexer *lx) {
  for (;;) {
    while (lx->p < lx->end && isspace((unsigned char)*lx->p)) lx->p++;
    if (lx->end - lx->p >= 2 && lx->p[0] == '/' && lx->p[1] == '*') {
      const char *q = lx->p + 2;
      while (q + 1 < lx->end && !(q[0] == '*' && q[1] == '/')) q++;
      lx->p = q + 1 < lx->end ? q + 2 : lx->end;
    } else if (lx->p < lx->end && *lx->p == '#') { /* a preprocessor line */
      while (lx->p < lx->end && *lx->p != '\n') lx->p++;
    } else {
      return;
    }
  }
}

/* The next token is punctuation C. */
static bool lex_punct(Lexer *lx, char c) {
  lex_skip(lx);
  if (lx->p < lx->end && *lx->p == c) {
    lx->p++;
    return true;
  }
  return false;
}

/* An identifier into BUF (false when none or too long). */
static bool lex_ident(Lexer *lx, char *buf, size_t n) {
  lex_skip(lx);
  size_t k = 0;
  if (lx->p >= lx->end || !(isalpha((unsigned char)*lx->p) || *lx->p == '_')) return false;
  while (lx->p < lx->end && (isalnum((unsigned char)*lx->p) || *lx->p == '_')) {
    if (k + 1 >= n) return false;
    buf[k++] = *lx->p++;
  }
  buf[k] = '\0';
  return true;
}

/* A string literal after its opening quote: C's escapes, octal ones of up
 * to three digits. */
static char *lex_string(Lexer *lx) {
  size_t cap = 16, n = 0;
  char *out = malloc(cap);
  while (out && lx->p < lx->end && *lx->p != '"') {
    int c = (unsigned char)*lx->p++;
    if (c == '\n') break;
    if (c == '\\' && lx->p < lx->end) {
      c = (unsigned char)*lx->p++;
      if (c >= '0' && c <= '7') {
        int v = c - '0';
        for (int k = 0; k < 2 && lx->p < lx->end && *lx->p >= '0' && *lx->p <= '7'; k++) v = v * 8 + (*lx->p++ - '0');
        c = v & 0xff;
      } else if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
      else if (c == 'r') c = '\r';
      else if (c != '\\' && c != '"' && c != '\'' && c != '?') break;
    }
    if (c == 0) break; /* a NUL would end the C string early: not what emit_c writes */
    if (n + 2 > cap) {
      char *grown = realloc(out, cap *= 2);
      if (!grown) break;
      out = grown;
    }
    out[n++] = (char)c;
  }
  if (!out || lx->p >= lx->end || *lx->p != '"') {
    free(out);
    return NULL;
  }
  lx->p++;
  out[n] = '\0';
  return out;
}

static bool sched_value(Lexer *lx, SchedValue *v) {
  memset(v, 0, sizeof *v);
  lex_skip(lx);
  if (lx->p >= lx->end) return false;
  if (*lx->p == '"') {
    lx->p++;
    v->kind = SV_STR;
    return (v->text = lex_string(lx)) != NULL;
  }
  char id[64];
  if (lex_ident(lx, id, sizeof id)) {
    v->kind = SV_IDENT;
    if (!strcmp(id, "RT_SCHED_LEN")) {
      v->kind = SV_LEN;
      if (!lex_punct(lx, '(') || !lex_ident(lx, id, sizeof id) || !lex_punct(lx, ')')) return false;
    }
    return (v->text = strdup(id)) != NULL;
  }
  /* A number: strtod and strtoll read within a NUL-terminated copy. */
  char num[64];
  size_t k = 0;
  while (lx->p + k < lx->end && k + 1 < sizeof num && strchr("+-.0123456789eExX", lx->p[k])) num[k] = lx->p[k], k++;
  num[k] = '\0';
  if (k == 0) return false;
  char *e1, *e2;
  v->num = strtod(num, &e1);
  v->inum = strtoll(num, &e2, 10);
  if (e1 != num + k) return false;
  bool integral = e2 == num + k;
  /* A double in an integer field: C converts it, and so does this, when
   * it fits (a cast of one that does not is undefined). */
  v->fits = integral || fabs(v->num) < 9.2e18;
  if (!integral && v->fits) v->inum = (int64_t)v->num;
  lx->p += k;
  v->kind = v->inum == 0 && integral ? SV_NULL : SV_NUM; /* 0 may stand for a pointer */
  return true;
}

static void sched_values_free(SchedValue *v, int n) {
  for (int i = 0; i < n; i++) free(v[i].text);
  free(v);
}

/* The values of one initializer "{ ... }" (braces inside flattened), up to
 * the closing "};". */
static SchedValue *sched_initializer(Lexer *lx, int *n) {
  int cap = 64, depth = 0;
  SchedValue *v = malloc((size_t)cap * sizeof *v);
  *n = 0;
  if (!v || !lex_punct(lx, '{')) goto bad;
  for (;;) {
    if (lex_punct(lx, '{')) {
      if (++depth > 2) goto bad; /* rows, and a tensor row's shape */
      continue;
    }
    if (lex_punct(lx, '}')) {
      if (depth-- == 0) break;
      continue;
    }
    if (lex_punct(lx, ',')) continue;
    if (*n == cap) {
      SchedValue *grown = cap < (1 << 24) ? realloc(v, (size_t)(cap *= 2) * sizeof *v) : NULL;
      if (!grown) goto bad;
      v = grown;
    }
    if (!sched_value(lx, &v[*n])) {
      free(v[*n].text);
      goto bad;
    }
    (*n)++;
  }
  if (lex_punct(lx, ';')) return v;
bad:
  if (v) sched_values_free(v, *n);
  *n = 0;
  return NULL;
}

static char *sched_keep(SchedText *t, char *str) {
  if (!str) return NULL;
  if (t->nstrings == t->capstrings) {
    int cap = t->capstrings ? t->capstrings * 2 : 64;
    char **grown = realloc(t->strings, (size_t)cap * sizeof *grown);
    if (!grown) return NULL;
    t->strings = grown, t->capstrings = cap;
  }
  return t->strings[t->nstrings++] = str;
}

/* Value V as an integer: a number or a constant of the ABI block. */
static bool sched_int(const SchedValue *v, int64_t *out) {
  static const struct {
    const char *name;
    int value;
  } consts[] = {{"RT_SPACE_DEVICE", RT_SPACE_DEVICE}, {"RT_SPACE_HOST", RT_SPACE_HOST},
                {"RT_STEP_COMPUTE", RT_STEP_COMPUTE}, {"RT_STEP_OFFLOAD", RT_STEP_OFFLOAD},
                {"RT_STEP_OFFLOAD_WAIT", RT_STEP_OFFLOAD_WAIT}, {"RT_STEP_PREFETCH", RT_STEP_PREFETCH},
                {"RT_STEP_PREFETCH_WAIT", RT_STEP_PREFETCH_WAIT}, {"RT_STREAM_COMPUTE", RT_STREAM_COMPUTE},
                {"RT_STREAM_D2H", RT_STREAM_D2H}, {"RT_STREAM_H2D", RT_STREAM_H2D},
                {"RT_STEP_ZERO", RT_STEP_ZERO}, {"RT_STEP_HOST_COMPUTE", RT_STEP_HOST_COMPUTE},
                {"RT_STEP_HOST_WAIT", RT_STEP_HOST_WAIT},
                {"RT_STREAM_HOST", RT_STREAM_HOST}, {"RATION_SCHED_ABI", RATION_SCHED_ABI}};
  if (v->kind == SV_NUM || v->kind == SV_NULL) {
    *out = v->inum;
    return v->fits;
  }
  for (size_t i = 0; v->kind == SV_IDENT && i < sizeof consts / sizeof *consts; i++)
    if (!strcmp(v->text, consts[i].name)) return *out = consts[i].value, true;
  return false;
}

static bool sched_i32(const SchedValue *v, int32_t *out) {
  int64_t x;
  if (!sched_int(v, &x) || x < INT32_MIN || x > INT32_MAX) return false;
  *out = (int32_t)x;
  return true;
}

/* A string field: a literal (kept in T) or 0. */
static bool sched_str(SchedText *t, SchedValue *v, const char **out) {
  if (v->kind == SV_NULL) return *out = NULL, true;
  if (v->kind != SV_STR) return false;
  *out = sched_keep(t, v->text);
  v->text = NULL;
  return *out != NULL;
}

/* Row R of a table of WIDTH values per row into its struct. */
static bool sched_row(SchedText *t, int table, SchedValue *v, int r) {
  bool ok = true;
  switch (table) {
  case 0: {
    rt_SchedTensor *x = &t->tensors[r];
    ok = sched_str(t, &v[0], &x->name) && sched_i32(&v[1], &x->dtype) && sched_i32(&v[2], &x->kind) &&
         sched_i32(&v[3], &x->rank) && sched_i32(&v[4], &x->is_output) && sched_int(&v[13], &x->bytes);
    for (int d = 0; d < RT_SCHED_MAX_RANK && ok; d++) ok = sched_int(&v[5 + d], &x->shape[d]);
    break;
  }
  case 1: {
    rt_SchedBuffer *x = &t->buffers[r];
    ok = sched_i32(&v[0], &x->tensor) && sched_i32(&v[1], &x->workspace_of) && sched_i32(&v[2], &x->space) &&
         sched_i32(&v[3], &x->home) && sched_int(&v[4], &x->bytes) && sched_int(&v[5], &x->offset);
    break;
  }
  case 2: {
    rt_SchedOp *x = &t->ops[r];
    ok = sched_str(t, &v[0], &x->name) && sched_str(t, &v[1], &x->type) && sched_i32(&v[2], &x->phase) &&
         sched_i32(&v[3], &x->nin) && sched_i32(&v[4], &x->nout) && sched_i32(&v[5], &x->io0) &&
         sched_i32(&v[6], &x->nattr) && sched_i32(&v[7], &x->attr0) && sched_int(&v[8], &x->workspace);
    break;
  }
  case 4: {
    rt_SchedAttr *x = &t->attrs[r];
    ok = sched_str(t, &v[0], &x->key) && (v[1].kind == SV_NUM || v[1].kind == SV_NULL) && sched_str(t, &v[2], &x->str);
    x->num = v[1].num;
    break;
  }
  case 5: {
    rt_SchedStep *x = &t->steps[r];
    int32_t *f[11] = {&x->kind, &x->stream, &x->op, &x->recompute, &x->io0, &x->workspace,
                      &x->from, &x->to, &x->wait0, &x->nwait, &x->event};
    for (int k = 0; k < 11 && ok; k++) ok = sched_i32(&v[k], f[k]);
    break;
  }
  default: {
    int32_t *x = table == 3 ? t->op_io : table == 6 ? t->step_io : t->waits;
    ok = sched_i32(&v[0], &x[r]);
  }
  }
  return ok;
}

static const int sched_widths[8] = {14, 6, 9, 1, 3, 11, 1, 1};
static const size_t sched_sizes[8] = {sizeof(rt_SchedTensor), sizeof(rt_SchedBuffer), sizeof(rt_SchedOp), 4,
                                      sizeof(rt_SchedAttr), sizeof(rt_SchedStep), 4, 4};

static void **sched_slot(SchedText *t, int table) {
  void **slots[8] = {(void **)&t->tensors, (void **)&t->buffers, (void **)&t->ops, (void **)&t->op_io,
                     (void **)&t->attrs, (void **)&t->steps, (void **)&t->step_io, (void **)&t->waits};
  return slots[table];
}

/* "static const TYPE NAME[N] = {...};": table NAME of N rows (fewer given:
 * the rest zero, as in C). */
static bool sched_table(SchedText *t, Lexer *lx, const char *name) {
  int table = -1;
  for (int k = 0; k < 8; k++)
    if (!strcmp(name, sched_tables[k])) table = k;
  SchedValue dim;
  int64_t rows = -1;
  if (table < 0 || *sched_slot(t, table) || !lex_punct(lx, '[')) return false;
  if (!lex_punct(lx, ']')) {
    bool ok = sched_value(lx, &dim) && sched_int(&dim, &rows) && lex_punct(lx, ']');
    free(dim.text);
    if (!ok || rows < 1 || rows > SCHED_TEXT_MAX_ROWS) return false;
  }
  int n;
  SchedValue *v = lex_punct(lx, '=') ? sched_initializer(lx, &n) : NULL;
  int w = sched_widths[table];
  bool ok = v && n % w == 0 && n > 0 && n / w <= SCHED_TEXT_MAX_ROWS && (rows < 0 || n / w <= rows);
  if (ok) {
    if (rows < 0) rows = n / w;
    void *mem = calloc((size_t)rows, sched_sizes[table]);
    *sched_slot(t, table) = mem;
    t->len[table] = (int32_t)rows;
    ok = mem != NULL;
    for (int r = 0; ok && r < n / w; r++) ok = sched_row(t, table, v + (size_t)r * w, r);
  }
  if (v) sched_values_free(v, n);
  return ok;
}

/* The schedule struct's initializer, in rt_Schedule's order. */
static bool sched_struct(SchedText *t, Lexer *lx) {
  int n;
  SchedValue *v = lex_punct(lx, '=') ? sched_initializer(lx, &n) : NULL;
  rt_Schedule *s = &t->s;
  bool ok = v && n == 32 && sched_i32(&v[0], &s->abi);
  const char **strs[7] = {&s->name, &s->ration_version, &s->graph_name, &s->graph_sha256, &s->device, &s->strategy,
                          &s->solver_status};
  for (int k = 0; ok && k < 7; k++) ok = sched_str(t, &v[1 + k], strs[k]);
  if (ok) s->solver_gap = v[8].num, s->predicted_step_seconds = v[9].num;
  int64_t *bytes[5] = {&s->budget_bytes, &s->arena_bytes, &s->host_bytes, &s->alignment, &s->peak_live_bytes};
  for (int k = 0; ok && k < 5; k++) ok = sched_int(&v[10 + k], bytes[k]);
  /* Counts: ntensors, nbuffers, nops, nsteps (tables 0, 1, 2, 5), nevents;
   * lengths: nop_io, nattrs, nstep_io, nwaits (tables 3, 4, 6, 7). */
  int32_t *counts[9] = {&s->ntensors, &s->nbuffers, &s->nops, &s->nsteps, &s->nevents,
                        &s->nop_io, &s->nattrs, &s->nstep_io, &s->nwaits};
  const int of[9] = {0, 1, 2, 5, -1, 3, 4, 6, 7}, at[9] = {15, 16, 17, 18, 19, 28, 29, 30, 31};
  for (int k = 0; ok && k < 9; k++) {
    SchedValue *x = &v[at[k]];
    if (x->kind == SV_LEN) {
      ok = of[k] >= 0 && !strcmp(x->text, sched_tables[of[k]]) && *sched_slot(t, of[k]);
      if (ok) *counts[k] = t->len[of[k]];
    } else {
      ok = sched_i32(x, counts[k]) && (of[k] < 0 || *counts[k] <= t->len[of[k]]);
    }
  }
  const void **ptrs[8] = {(const void **)&s->tensors, (const void **)&s->buffers, (const void **)&s->ops,
                          (const void **)&s->op_io,   (const void **)&s->attrs,   (const void **)&s->steps,
                          (const void **)&s->step_io, (const void **)&s->waits};
  for (int k = 0; ok && k < 8; k++) {
    SchedValue *x = &v[20 + k];
    ok = x->kind == SV_NULL || (x->kind == SV_IDENT && !strcmp(x->text, sched_tables[k]) && *sched_slot(t, k));
    *ptrs[k] = x->kind == SV_NULL ? NULL : *sched_slot(t, k);
  }
  if (v) sched_values_free(v, n);
  return ok;
}

static void sched_text_free(SchedText *t) {
  for (int k = 0; k < 8; k++) free(*sched_slot(t, k));
  for (int i = 0; i < t->nstrings; i++) free(t->strings[i]);
  free(t->strings);
  memset(t, 0, sizeof *t);
}

/* Reads TEXT (LEN bytes, not NUL-terminated) into T; false when it is not
 * an emitted schedule's C (T then holds nothing). */
static bool sched_text_read(const char *text, size_t len, SchedText *t) {
  memset(t, 0, sizeof *t);
  Lexer lx = {text, text + len};
  bool ok = true, have_struct = false;
  char id[64], type[64], name[64];
  while (ok && (lex_skip(&lx), lx.p < lx.end)) {
    if (!lex_ident(&lx, id, sizeof id)) {
      ok = false;
    } else if (!strcmp(id, "static")) {
      ok = lex_ident(&lx, id, sizeof id) && !strcmp(id, "const") && lex_ident(&lx, type, sizeof type) &&
           lex_ident(&lx, name, sizeof name);
      if (ok && !strcmp(type, "rt_Schedule")) ok = !have_struct && !strcmp(name, "schedule") && sched_struct(t, &lx);
      else if (ok) ok = sched_table(t, &lx, name);
      have_struct |= ok && !strcmp(type, "rt_Schedule");
    } else {
      /* A declaration or the entry point: skip to its end. */
      int depth = 0;
      for (; lx.p < lx.end; lx.p++) {
        if (*lx.p == '{') depth++;
        else if (*lx.p == '}' && --depth <= 0) break;
        else if (*lx.p == ';' && depth == 0) break;
      }
      if (lx.p < lx.end) lx.p++;
      lex_punct(&lx, ';'); /* after a braced type, not after a function body */
    }
  }
  if (!ok || !have_struct) {
    sched_text_free(t);
    return false;
  }
  return true;
}

#endif
