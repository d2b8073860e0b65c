/*
 * util.c - the small things every pass needs: errors, checked byte
 * arithmetic, size strings, whole-file reads, atomic writes, SHA-256 and a
 * growable output buffer.
 */
#define _GNU_SOURCE /* O_TMPFILE */
#include "ration.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <nettle/sha2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* A test hook, read once per write: RATION_TEST_FAIL_WRITE=K fails the K-th
 * file of a set (1-based) as a full disk would; RATION_TEST_WRITE_PAUSE_MS=M
 * sleeps after each file's bytes are down, so a test can kill the run there. */
static long test_env(const char *name) {
  const char *v = getenv(name);
  return v ? strtol(v, NULL, 10) : 0;
}

typedef struct TmpFile {
  int fd;
  char *named; /* the temporary's name when O_TMPFILE was not available */
} TmpFile;

/* An unnamed file in PATH's directory (O_TMPFILE), so that a run killed
 * while writing leaves nothing behind; else PATH.tmp.PID. */
static int open_tmp(const char *path, TmpFile *t, Err *e) {
  size_t plen = strlen(path);
  char *dir = malloc(plen + 32);
  if (!dir) return err_set(e, "%s: out of memory", path);
  const char *slash = strrchr(path, '/');
  if (slash) {
    memcpy(dir, path, (size_t)(slash - path) + 1);
    dir[slash - path + 1] = 0;
  } else {
    strcpy(dir, ".");
  }
  t->named = NULL;
  t->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (t->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    snprintf(dir, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    t->fd = open(dir, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    if (t->fd >= 0) {
      t->named = dir;
      return 0;
    }
  }
  free(dir);
  if (t->fd < 0) return err_set(e, "%s: cannot write: %s", path, strerror(errno));
  return 0;
}

static int write_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    data += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Gives an unnamed temporary the name PATH.tmp.PID, ready to rename. */
static int name_tmp(const char *path, TmpFile *t) {
  if (t->named) return 0;
  size_t plen = strlen(path);
  char proc[64], *name = malloc(plen + 32);
  if (!name) return -1;
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", t->fd);
  snprintf(name, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  unlink(name);
  if (linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW) != 0) {
    free(name);
    return -1;
  }
  t->named = name;
  return 0;
}

int util_write_files_atomic(const OutFile *files, int n, Err *e) {
  TmpFile *tmp = util_xcalloc((size_t)n, sizeof *tmp);
  if (!tmp) return err_set(e, "%s: out of memory", n ? files[0].path : "output");
  long fail_at = test_env("RATION_TEST_FAIL_WRITE"), pause_ms = test_env("RATION_TEST_WRITE_PAUSE_MS");
  int opened = 0, rc = 0;
  /* Every file's bytes are down and synced before any of them is renamed
   * into place, so a failure leaves the previous set as it was. */
  for (int i = 0; i < n && rc == 0; i++) {
    if (open_tmp(files[i].path, &tmp[i], e)) {
      rc = -1;
      break;
    }
    opened++;
    if (fail_at == i + 1) errno = ENOSPC;
    if (fail_at == i + 1 || write_all(tmp[i].fd, files[i].data, files[i].len) || fsync(tmp[i].fd))
      rc = err_set(e, "%s: cannot write: %s", files[i].path, strerror(errno));
    if (rc == 0 && pause_ms > 0) {
      struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  for (int i = 0; i < n && rc == 0; i++)
    if (name_tmp(files[i].path, &tmp[i])) rc = err_set(e, "%s: cannot write: %s", files[i].path, strerror(errno));
  /* Renames are each atomic; the set is as close as POSIX allows (a kill
   * between two renames leaves the earlier ones new, nothing partial). */
  for (int i = 0; i < n && rc == 0; i++) {
    if (rename(tmp[i].named, files[i].path) != 0) {
      rc = err_set(e, "%s: cannot write: %s", files[i].path, strerror(errno));
      break;
    }
    free(tmp[i].named);
    tmp[i].named = NULL;
  }
  for (int i = 0; i < opened; i++) {
    if (tmp[i].named) unlink(tmp[i].named);
    free(tmp[i].named);
    close(tmp[i].fd);
  }
  free(tmp);
  return rc;
}

int util_write_file_atomic(const char *path, const char *data, size_t len, Err *e) {
  OutFile f = {path, data, len};
  return util_write_files_atomic(&f, 1, e);
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
