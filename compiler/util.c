/*
 * util.c - the small things every pass needs: errors, checked byte
 * arithmetic, size strings, whole-file reads, atomic writes, SHA-256 and a
 * growable output buffer.
 */
#include "ration.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <nettle/sha2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int err_set(Err *e, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    /* The contract is one line: fold any newline a message picked up. */
    for (char *c = e->msg; *c; c++)
      if (*c == '\n' || *c == '\r') *c = ' ';
  }
  return -1;
}

bool util_mul_i64(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0) return false;
  if (a != 0 && b > INT64_MAX / a) return false;
  *out = a * b;
  return true;
}

bool util_add_i64(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0 || a > INT64_MAX - b) return false;
  *out = a + b;
  return true;
}

int64_t util_align_up(int64_t x, int64_t align) { return (x + align - 1) / align * align; }

static const struct {
  const char *unit;
  int64_t scale;
} size_units[] = {
    {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"TiB", 1LL << 40},
    {"KB", 1000LL},     {"MB", 1000000LL},  {"GB", 1000000000LL}, {"TB", 1000000000000LL},
};

bool util_parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno || !(v >= 0) || isinf(v)) return false;
  while (*end == ' ') end++;
  for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++) {
    if (strcmp(end, size_units[i].unit) == 0) {
      double bytes = v * (double)size_units[i].scale;
      if (bytes >= 9.2e18 || bytes != floor(bytes)) return false;
      *out = (int64_t)bytes;
      return true;
    }
  }
  return false;
}

const char *util_fmt_bytes(int64_t bytes, char *buf, size_t n) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0)
    snprintf(buf, n, "%" PRId64 " B", bytes);
  else
    snprintf(buf, n, "%.2f %s", v, units[u]);
  return buf;
}

char *util_read_file(const char *path, size_t *len, Err *e) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    err_set(e, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *data = malloc(cap);
  while (data) {
    n += fread(data + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *grown = realloc(data, cap * 2);
    if (!grown) {
      free(data);
      data = NULL;
      break;
    }
    data = grown;
    cap *= 2;
  }
  if (!data || ferror(f)) {
    err_set(e, "%s: cannot read: %s", path, data ? strerror(errno) : "out of memory");
    free(data);
    fclose(f);
    return NULL;
  }
  fclose(f);
  data[n] = 0;
  if (len) *len = n;
  return data;
}

int util_write_file_atomic(const char *path, const char *data, size_t len, Err *e) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 32);
  if (!tmp) return err_set(e, "%s: out of memory", path);
  snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    err_set(e, "%s: cannot write: %s", path, strerror(errno));
    free(tmp);
    return -1;
  }
  bool ok = fwrite(data, 1, len, f) == len;
  ok = (fflush(f) == 0) && ok;
  ok = (fsync(fileno(f)) == 0) && ok;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    err_set(e, "%s: cannot write: %s", path, strerror(errno));
    unlink(tmp);
    free(tmp);
    return -1;
  }
  free(tmp);
  return 0;
}

void util_sha256_hex(const void *data, size_t len, char out[65]) {
  struct sha256_ctx ctx;
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_init(&ctx);
  sha256_update(&ctx, len, data);
  sha256_digest(&ctx, sizeof digest, digest);
  for (int i = 0; i < SHA256_DIGEST_SIZE; i++) sprintf(out + 2 * i, "%02x", digest[i]);
  out[64] = 0;
}

void *util_xcalloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }

char *util_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

void buf_printf(Buf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->data ? b->data + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if ((size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap - b->len <= (size_t)n) cap *= 2;
    char *grown = realloc(b->data, cap);
    if (!grown) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->cap = cap;
  }
}

void buf_free(Buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}
