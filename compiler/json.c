/*
 * json.c - validated reading of JSON files for every loader (graph, device,
 * plan, cost profile). Each helper checks one value's type and range and, on
 * a problem, sets the one-line error "FILE: JSON.PATH: message" that the CLI
 * prints. Paths are built lazily from stack frames so the happy path of a
 * million-tensor graph formats no strings.
 */
#include "ration.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Integers above 2^53 cannot be told apart from their neighbours once cJSON
 * has turned them into doubles, so they are rejected rather than rounded. */
#define JSON_MAX_EXACT_INT 9007199254740992.0

static bool plain_key(const char *k) {
  if (!*k || isdigit((unsigned char)*k)) return false;
  for (; *k; k++)
    if (!isalnum((unsigned char)*k) && *k != '_') return false;
  return true;
}

void json_path_str(const JsonPath *p, char *buf, size_t n) {
  const JsonPath *chain[64];
  int depth = 0;
  for (; p && depth < 64; p = p->up) chain[depth++] = p;
  size_t len = 0;
  buf[0] = 0;
  for (int i = depth - 1; i >= 0 && len < n; i--) {
    const JsonPath *f = chain[i];
    int w;
    if (!f->key)
      w = snprintf(buf + len, n - len, "[%d]", f->index);
    else if (plain_key(f->key))
      w = snprintf(buf + len, n - len, "%s%s", len ? "." : "", f->key);
    else
      w = snprintf(buf + len, n - len, "[\"%s\"]", f->key);
    if (w < 0) break;
    len += (size_t)w;
  }
}

int json_err(Err *e, const char *file, const JsonPath *p, const char *fmt, ...) {
  char msg[768], path[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_path_str(p, path, sizeof path);
  if (path[0])
    return err_set(e, "%s: %s: %s", file, path, msg);
  return err_set(e, "%s: %s", file, msg);
}

static const char *type_name(const cJSON *v) {
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNull(v)) return "null";
  return "an invalid value";
}

const cJSON *json_get(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static void line_col(const char *text, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n')
      (*line)++, *col = 1;
    else
      (*col)++;
  }
}

/* Whether cJSON failed at off because the input ended: it points at the
 * last byte when it ran out, or into a string or literal that the end of
 * the file cut short. */
static bool runs_out(const char *text, size_t off, size_t len) {
  if (off + 1 >= len) return true;
  /* cJSON reports a bad string just after its opening quote. */
  size_t q = text[off] == '"' ? off : off > 0 && text[off - 1] == '"' ? off - 1 : len;
  if (q < len) {
    for (size_t i = q + 1; i < len; i++) {
      if (text[i] == '\\')
        i++;
      else if (text[i] == '"')
        return false;
    }
    return true;
  }
  static const char *const literals[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++)
    if (len - off < strlen(literals[k]) && strncmp(text + off, literals[k], len - off) == 0) return true;
  return false;
}

/* The first string in TEXT (keys and values, in document order) that holds
 * what no name may: a NUL, which cJSON would keep as the silent end of the
 * string (the escape \u0000 or a raw zero byte), or a byte that is not
 * UTF-8. Returns that string's ordinal, or -1 when every string is clean;
 * *at is the offending byte's offset. Only bytes inside strings are looked
 * at: cJSON has already refused anything else that is not ASCII. */
static long bad_string(const char *text, size_t len, size_t *at, bool *nul) {
  long ordinal = -1;
  bool in = false;
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)text[i];
    uint32_t cp;
    size_t n = 1;
    if (!in) {
      if (c == '"') in = true, ordinal++;
    } else if (c == '"') {
      in = false;
    } else if (c == '\\') {
      if (i + 5 < len && !memcmp(text + i + 1, "u0000", 5)) return *at = i, *nul = true, ordinal;
      n = 2;
    } else if (c == 0) {
      return *at = i, *nul = true, ordinal;
    } else if (c >= 0x80 && !(n = util_utf8_char(text + i, len - i, &cp))) {
      return *at = i, *nul = false, ordinal;
    }
    i += n;
  }
  return -1;
}

/* Sets the error for the string with ordinal *K under ITEM (at path P),
 * counting keys and string values in document order as bad_string does.
 * Returns 1 once it is found. */
static int blame_string(const char *file, const JsonPath *p, const cJSON *item, long *k, const char *why,
                        Err *e) {
  if (cJSON_IsString(item)) return (*k)-- == 0 ? json_err(e, file, p, "string %s", why), 1 : 0;
  int index = 0;
  for (const cJSON *c = item->child; c; c = c->next, index++) {
    bool member = cJSON_IsObject(item);
    if (member && (*k)-- == 0) return json_err(e, file, p, "key %s", why), 1;
    JsonPath cp = {p, member ? c->string : NULL, index};
    if (blame_string(file, &cp, c, k, why, e)) return 1;
  }
  return 0;
}

cJSON *json_parse(const char *file, const char *text, size_t len, const char *want, Err *e) {
  if (len > (size_t)JSON_MAX_FILE_BYTES)
    return json_err(e, file, NULL, "file is %zu bytes, over the limit of %lld bytes (1 GiB)", len,
                    JSON_MAX_FILE_BYTES),
           NULL;
  size_t start = 0;
  while (start < len && isspace((unsigned char)text[start])) start++;
  if (start == len) return json_err(e, file, NULL, "empty file, expected a JSON object"), NULL;
  /* cJSON's require_null_terminated misfires with an explicit length, so
   * trailing data is checked here. */
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  int line, col;
  if (!root) {
    size_t off = end && end >= text ? (size_t)(end - text) : 0;
    bool at_end = runs_out(text, off, len);
    if (at_end) off = len;
    line_col(text, off, &line, &col);
    if (at_end)
      json_err(e, file, NULL, "truncated JSON: unexpected end of file at line %d, column %d (byte %zu)",
               line, col, off);
    else
      json_err(e, file, NULL, "malformed JSON at line %d, column %d (byte %zu)", line, col, off);
    return NULL;
  }
  size_t off = (size_t)(end - text);
  while (off < len && isspace((unsigned char)text[off])) off++;
  if (off < len) {
    line_col(text, off, &line, &col);
    json_err(e, file, NULL, "malformed JSON: trailing data after the top-level value at line %d, column %d (byte %zu)",
             line, col, off);
    cJSON_Delete(root);
    return NULL;
  }
  size_t at;
  bool nul;
  long k = bad_string(text, off, &at, &nul);
  if (k >= 0) {
    char why[160];
    line_col(text, at, &line, &col);
    if (nul)
      snprintf(why, sizeof why, "contains NUL (\\u0000) at line %d, column %d (byte %zu)", line, col, at);
    else
      snprintf(why, sizeof why, "is not valid UTF-8: byte 0x%02x at line %d, column %d (byte %zu)",
               (unsigned char)text[at], line, col, at);
    blame_string(file, NULL, root, &k, why, e);
    cJSON_Delete(root);
    return NULL;
  }
  if (!cJSON_IsObject(root)) {
    json_err(e, file, NULL, "expected a JSON object at the top level, got %s", type_name(root));
    cJSON_Delete(root);
    return NULL;
  }
  JsonPath pf = {NULL, "format", 0};
  const cJSON *fmt = json_get(root, "format");
  if (!fmt) {
    json_err(e, file, &pf, "missing (expected \"%s\")", want);
  } else if (!cJSON_IsString(fmt)) {
    json_err(e, file, &pf, "expected the string \"%s\", got %s", want, type_name(fmt));
  } else if (strcmp(fmt->valuestring, want) != 0) {
    json_err(e, file, &pf, "unsupported format \"%s\" (expected \"%s\")", fmt->valuestring, want);
  } else {
    return root;
  }
  cJSON_Delete(root);
  return NULL;
}

char *json_read(const char *file, size_t *len, Err *e) {
  struct stat st;
  if (stat(file, &st) != 0) return err_set(e, "%s: cannot open: %s", file, strerror(errno)), NULL;
  /* Checked before reading so a huge file is refused without allocating. */
  if (S_ISREG(st.st_mode) && st.st_size > JSON_MAX_FILE_BYTES)
    return json_err(e, file, NULL, "file is %lld bytes, over the limit of %lld bytes (1 GiB)",
                    (long long)st.st_size, JSON_MAX_FILE_BYTES),
           NULL;
  return util_read_file(file, len, e);
}

int json_string(const char *file, const JsonPath *p, const cJSON *item, const char **out, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected a string)");
  if (!cJSON_IsString(item)) return json_err(e, file, p, "expected a string, got %s", type_name(item));
  *out = item->valuestring;
  return 0;
}

int json_number(const char *file, const JsonPath *p, const cJSON *item, double *out, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected a number)");
  if (!cJSON_IsNumber(item)) return json_err(e, file, p, "expected a number, got %s", type_name(item));
  if (!isfinite(item->valuedouble)) return json_err(e, file, p, "number out of range");
  *out = item->valuedouble;
  return 0;
}

int json_nonneg(const char *file, const JsonPath *p, const cJSON *item, double *out, Err *e) {
  if (json_number(file, p, item, out, e)) return -1;
  if (*out < 0) return json_err(e, file, p, "must be >= 0, got %g", *out);
  return 0;
}

int json_int(const char *file, const JsonPath *p, const cJSON *item, int64_t lo, int64_t *out, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected an integer)");
  if (!cJSON_IsNumber(item)) return json_err(e, file, p, "expected an integer, got %s", type_name(item));
  double v = item->valuedouble;
  if (!isfinite(v) || v != floor(v)) return json_err(e, file, p, "expected an integer, got %.17g", v);
  if (v < (double)lo) return json_err(e, file, p, "must be >= %" PRId64 ", got %.17g", lo, v);
  if (v > JSON_MAX_EXACT_INT) return json_err(e, file, p, "integer %.17g is over the limit of 2^53", v);
  *out = (int64_t)v;
  return 0;
}

int json_bool(const char *file, const JsonPath *p, const cJSON *item, bool *out, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected true or false)");
  if (!cJSON_IsBool(item)) return json_err(e, file, p, "expected true or false, got %s", type_name(item));
  *out = cJSON_IsTrue(item);
  return 0;
}

int json_array(const char *file, const JsonPath *p, const cJSON *item, int *n, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected an array)");
  if (!cJSON_IsArray(item)) return json_err(e, file, p, "expected an array, got %s", type_name(item));
  int64_t count = 0;
  for (const cJSON *c = item->child; c; c = c->next)
    if (++count > JSON_MAX_ITEMS)
      return json_err(e, file, p, "more than %d entries (the limit)", JSON_MAX_ITEMS);
  *n = (int)count;
  return 0;
}

int json_object(const char *file, const JsonPath *p, const cJSON *item, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected an object)");
  if (!cJSON_IsObject(item)) return json_err(e, file, p, "expected an object, got %s", type_name(item));
  return 0;
}

int json_size(const char *file, const JsonPath *p, const cJSON *item, int64_t *out, Err *e) {
  if (!item) return json_err(e, file, p, "missing (expected a size: bytes or a string like \"80GiB\")");
  if (cJSON_IsNumber(item)) return json_int(file, p, item, 0, out, e);
  if (!cJSON_IsString(item))
    return json_err(e, file, p, "expected a size (bytes or a string like \"80GiB\"), got %s", type_name(item));
  const char *s = item->valuestring;
  if (util_parse_size(s, out)) {
    if (*out > JSON_MAX_BYTES) return json_err(e, file, p, "size \"%s\" is over the limit of 2^53 bytes (8 PiB)", s);
    return 0;
  }
  char *rest;
  errno = 0;
  double v = strtod(s, &rest);
  if (rest != s && v < 0) return json_err(e, file, p, "size \"%s\" is negative", s);
  if (rest == s || !(v >= 0))
    return json_err(e, file, p, "size \"%s\" is not a number with a unit (KiB MiB GiB TiB KB MB GB TB)", s);
  while (*rest == ' ') rest++;
  if (!*rest) return json_err(e, file, p, "size \"%s\" has no unit (use KiB MiB GiB TiB KB MB GB TB)", s);
  /* Whether the unit itself is known decides between the two remaining
   * complaints: a bad unit, or a value util_parse_size cannot hold. */
  char probe[64];
  int64_t ignored;
  snprintf(probe, sizeof probe, "1%s", rest);
  if (strlen(rest) > 8 || !util_parse_size(probe, &ignored))
    return json_err(e, file, p, "size \"%s\" has a bad unit \"%s\" (use KiB MiB GiB TiB KB MB GB TB)", s, rest);
  return json_err(e, file, p, "size \"%s\" is not a whole number of bytes below 2^63", s);
}
