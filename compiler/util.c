/*
 * util.c - the small things every pass needs: errors, checked byte
 * arithmetic, size strings, whole-file reads, atomic writes, SHA-256, a
 * growable output buffer and a parallel loop.
 */
#define _GNU_SOURCE /* O_TMPFILE */
#include "ration.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

double util_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int util_threads(void) {
  const char *env = getenv("RATION_THREADS");
  long n = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > UTIL_MAX_THREADS ? UTIL_MAX_THREADS : (int)n;
}

typedef struct {
  int n;
  void (*fn)(void *ctx, int i);
  void *ctx;
  atomic_int next;
} Parallel;

static void *parallel_worker(void *arg) {
  Parallel *j = arg;
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) j->fn(j->ctx, i);
  return NULL;
}

void util_parallel_for(int n, void (*fn)(void *ctx, int i), void *ctx) {
  Parallel j = {.n = n, .fn = fn, .ctx = ctx};
  atomic_init(&j.next, 0);
  pthread_t th[UTIL_MAX_THREADS];
  int want = util_threads(), started = 0;
  if (want > n) want = n;
  /* A thread that cannot start leaves its share to the others. */
  while (started < want - 1 && pthread_create(&th[started], NULL, parallel_worker, &j) == 0) started++;
  parallel_worker(&j);
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
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
  /* The limit holds for what has no size to check first (a FIFO, a
   * device, standard input): reading stops one byte past it. */
  const size_t limit = (size_t)JSON_MAX_FILE_BYTES;
  size_t cap = 1 << 16, n = 0;
  char *data = malloc(cap);
  while (data) {
    n += fread(data + n, 1, cap - n - 1, f);
    if (n < cap - 1 || n > limit) break;
    size_t want = cap * 2 > limit + 2 ? limit + 2 : cap * 2;
    char *grown = realloc(data, want);
    if (!grown) {
      free(data);
      data = NULL;
      break;
    }
    data = grown;
    cap = want;
  }
  if (!data || ferror(f) || n > limit) {
    if (data && n > limit)
      err_set(e, "%s: more than %zu bytes, over the limit of %zu bytes (1 GiB)", path, limit, limit);
    else
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
 * sleeps after each file's bytes are down and RATION_TEST_COMMIT_PAUSE_MS=M
 * between two renames of the commit, so a test can kill the run there. */
static long test_env(const char *name) {
  const char *v = getenv(name);
  return v ? strtol(v, NULL, 10) : 0;
}

static void test_pause(long ms) {
  if (ms <= 0) return;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* One output of a set. A regular file (or a new one) is written to a
 * temporary beside it and renamed over it at commit; anything else (a
 * device, a FIFO, a terminal) is written in place and never replaced. */
typedef struct Target {
  int fd;
  bool stream, linked; /* linked: the temporary has its name already */
  char *dest;  /* PATH with its symbolic links resolved, so a link stays a link */
  char *named; /* the temporary's name: DEST.tmp.PID, from open or from commit */
} Target;

static int tmp_name(Target *t) {
  size_t n = strlen(t->dest) + 32;
  if (!(t->named = malloc(n))) return -1;
  snprintf(t->named, n, "%s.tmp.%ld", t->dest, (long)getpid());
  return 0;
}

/* The absolute name of a file not yet there: its directory resolved, so
 * that two names of one file compare equal. */
static char *new_dest(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? malloc((size_t)(slash - path) + 2) : util_strdup(".");
  if (!dir) return NULL;
  if (slash) {
    memcpy(dir, path, (size_t)(slash - path) + 1);
    dir[slash - path + 1] = 0;
  }
  char *real = realpath(dir, NULL), *dest = NULL;
  const char *base = slash ? slash + 1 : path;
  free(dir);
  if (real && (dest = malloc(strlen(real) + strlen(base) + 2)))
    sprintf(dest, "%s/%s", strcmp(real, "/") ? real : "", base);
  free(real);
  return dest;
}

/* Checks PATH and opens what its bytes go to: an unnamed file in the
 * directory of a regular target (O_TMPFILE, so that a run killed while
 * writing leaves nothing behind; else the named temporary), with the mode
 * (and, where permitted, the owner) of the file it will replace. */
static int open_target(const char *path, Target *t, Err *e) {
  struct stat st;
  bool exists = stat(path, &st) == 0;
  if (!exists && errno != ENOENT) return err_set(e, "%s: cannot write: %s", path, strerror(errno));
  if (exists && S_ISDIR(st.st_mode)) return err_set(e, "%s: cannot write: %s", path, strerror(EISDIR));
  if (exists && !S_ISREG(st.st_mode)) {
    t->stream = true;
    return 0;
  }
  if (!(t->dest = exists ? realpath(path, NULL) : new_dest(path)))
    return err_set(e, "%s: cannot write: %s", path, strerror(errno));
  char *slash = strrchr(t->dest, '/');
  *slash = 0;
  t->fd = open(slash == t->dest ? "/" : t->dest, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  *slash = '/';
  if (t->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    if (tmp_name(t)) return err_set(e, "%s: out of memory", path);
    t->fd = open(t->named, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    t->linked = t->fd >= 0;
    if (!t->linked) {
      free(t->named);
      t->named = NULL;
    }
  }
  if (t->fd < 0) return err_set(e, "%s: cannot write: %s", path, strerror(errno));
  if (exists) {
    if (fchmod(t->fd, st.st_mode & 07777)) return err_set(e, "%s: cannot write: %s", path, strerror(errno));
    /* Only root may give a file away; anyone else keeps the new file theirs. */
    if ((st.st_uid != geteuid() || st.st_gid != getegid()) && fchown(t->fd, st.st_uid, st.st_gid) && errno != EPERM)
      return err_set(e, "%s: cannot write: %s", path, strerror(errno));
  }
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

/* Names every temporary, then renames each over its target, so that a
 * failure to name one (the likelier failure) replaces nothing. Only calls
 * that are safe in a forked child; *failed is the file that failed. */
static int commit(const Target *t, int n, long pause_ms, int *failed) {
  char proc[64];
  for (int i = 0; i < n; i++) {
    if (t[i].stream || t[i].linked) continue;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", t[i].fd);
    unlink(t[i].named);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, t[i].named, AT_SYMLINK_FOLLOW) != 0) return *failed = i, errno;
  }
  for (int i = 0, renamed = 0; i < n; i++) {
    if (t[i].stream) continue;
    if (renamed++) test_pause(pause_ms);
    if (rename(t[i].named, t[i].dest) != 0) return *failed = i, errno;
  }
  return 0;
}

/* Whatever temporary is still named; a renamed one is gone already. */
static void remove_temps(const Target *t, int n) {
  for (int i = 0; i < n; i++)
    if (t[i].named) unlink(t[i].named);
}

/* The commit runs in a child that ignores the terminal's signals: a kill
 * of the command between two renames cannot leave half a new set, nor a
 * named temporary. Without a child (fork failed) it runs here. */
static int commit_whole(const Target *t, int n, long pause_ms, int *failed) {
  int pipefd[2] = {-1, -1};
  pid_t pid = pipe2(pipefd, O_CLOEXEC) == 0 ? fork() : -1;
  if (pid < 0) {
    if (pipefd[0] >= 0) close(pipefd[0]), close(pipefd[1]);
    int err = commit(t, n, pause_ms, failed);
    remove_temps(t, n);
    return err;
  }
  if (pid == 0) {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int res[2] = {0, 0};
    res[1] = commit(t, n, pause_ms, &res[0]);
    if (res[1]) remove_temps(t, n);
    _exit(write(pipefd[1], res, sizeof res) == sizeof res ? 0 : 1);
  }
  close(pipefd[1]);
  int res[2] = {0, EIO}, status;
  ssize_t got;
  do got = read(pipefd[0], res, sizeof res);
  while (got < 0 && errno == EINTR);
  close(pipefd[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) continue;
  if (got != sizeof res) res[0] = 0, res[1] = EIO;
  remove_temps(t, n);
  *failed = res[0];
  return res[1];
}

int util_write_files_atomic(const OutFile *files, int n, Err *e) {
  Target *t = util_xcalloc((size_t)n, sizeof *t);
  if (!t) return err_set(e, "%s: out of memory", n ? files[0].path : "output");
  for (int i = 0; i < n; i++) t[i].fd = -1;
  long fail_at = test_env("RATION_TEST_FAIL_WRITE"), pause_ms = test_env("RATION_TEST_WRITE_PAUSE_MS");
  int rc = 0;
  /* Every target is checked and every regular file's bytes are down and
   * synced before anything is written in place or renamed, so a failure
   * leaves the previous set as it was. */
  for (int i = 0; i < n && rc == 0; i++) {
    rc = open_target(files[i].path, &t[i], e);
    for (int k = 0; k < i && rc == 0; k++)
      if (t[i].dest && t[k].dest && !strcmp(t[i].dest, t[k].dest))
        rc = err_set(e, "%s: cannot write: the same file as %s, another output of this command", files[i].path,
                     files[k].path);
  }
  for (int i = 0; i < n && rc == 0; i++) {
    if (t[i].stream) continue;
    if (fail_at == i + 1) errno = ENOSPC;
    if (fail_at == i + 1 || write_all(t[i].fd, files[i].data, files[i].len) || fsync(t[i].fd))
      rc = err_set(e, "%s: cannot write: %s", files[i].path, strerror(errno));
    else
      test_pause(pause_ms);
  }
  for (int i = 0; i < n && rc == 0; i++) {
    if (!t[i].named && !t[i].stream && tmp_name(&t[i])) rc = err_set(e, "%s: out of memory", files[i].path);
  }
  /* What is not a regular file cannot be replaced as a whole; it is
   * written last of all, after every check that could fail the set. */
  for (int i = 0; i < n && rc == 0; i++) {
    if (!t[i].stream) continue;
    if (fail_at == i + 1) errno = ENOSPC;
    if (fail_at == i + 1 || (t[i].fd = open(files[i].path, O_WRONLY | O_CLOEXEC | O_NOCTTY)) < 0 ||
        write_all(t[i].fd, files[i].data, files[i].len))
      rc = err_set(e, "%s: cannot write: %s", files[i].path, strerror(errno));
  }
  int failed = 0, err = rc ? 0 : commit_whole(t, n, test_env("RATION_TEST_COMMIT_PAUSE_MS"), &failed);
  if (err) rc = err_set(e, "%s: cannot write: %s", files[failed].path, strerror(err));
  if (rc) remove_temps(t, n);
  for (int i = 0; i < n; i++) {
    if (t[i].fd >= 0) close(t[i].fd);
    free(t[i].dest);
    free(t[i].named);
  }
  free(t);
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

/* A cell that begins with = + - @ (or a tab or carriage return) is a
 * formula to a spreadsheet; a leading apostrophe makes it text. */
void util_csv_field(Buf *o, const char *s) {
  buf_printf(o, *s && strchr("=+-@\t\r", *s) ? "\"'" : "\"");
  for (; *s; s++) buf_printf(o, *s == '"' ? "\"\"" : "%c", *s);
  buf_printf(o, "\"");
}

size_t util_utf8_char(const char *s, size_t n, uint32_t *cp) {
  const unsigned char *u = (const unsigned char *)s;
  if (n == 0) return 0;
  if (u[0] < 0x80) return *cp = u[0], 1;
  size_t len;
  uint32_t c, least;
  if (u[0] >= 0xC2 && u[0] <= 0xDF) len = 2, c = u[0] & 0x1Fu, least = 0x80;
  else if ((u[0] & 0xF0) == 0xE0) len = 3, c = u[0] & 0x0Fu, least = 0x800;
  else if (u[0] >= 0xF0 && u[0] <= 0xF4) len = 4, c = u[0] & 0x07u, least = 0x10000;
  else return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((u[i] & 0xC0) != 0x80) return 0;
    c = c << 6 | (u[i] & 0x3Fu);
  }
  if (c < least || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

size_t util_utf8_prefix(const char *s, size_t max) {
  size_t i = 0, n = strlen(s);
  while (i < n) {
    uint32_t cp;
    size_t len = util_utf8_char(s + i, n - i, &cp);
    if (len == 0) len = 1; /* not UTF-8: one byte, which cannot split a character */
    if (i + len > max) break;
    i += len;
  }
  return i;
}

/* ECMA-48 sequences, each from just past its introducer (ESC X or the C1
 * character X + 0x40). A control sequence (CSI): parameter and intermediate
 * bytes, then one final byte. */
static size_t skip_csi(const char *s, size_t n, size_t i) {
  while (i < n && s[i] >= 0x20 && s[i] <= 0x3F) i++;
  return i < n && s[i] >= 0x40 && s[i] <= 0x7E ? i + 1 : i;
}

/* A command string (OSC, DCS, SOS, PM, APC) runs to BEL or a string
 * terminator (ESC \ or C1 ST). One left open on its line is not taken as
 * one, so that a name cannot hide the text that follows it: only its
 * introducer goes. Returns I unchanged then. */
static size_t skip_command_string(const char *s, size_t n, size_t i) {
  for (size_t j = i; j < n && s[j] != '\n'; j++) {
    if (s[j] == 0x07) return j + 1;
    bool st = j + 1 < n && ((s[j] == 0x1B && s[j + 1] == '\\') ||
                            ((unsigned char)s[j] == 0xC2 && (unsigned char)s[j + 1] == 0x9C));
    if (st) return j + 2;
  }
  return i;
}

/* The end of the sequence introduced by X (the byte after ESC, or a C1
 * code point less 0x40) whose body starts at I. */
static size_t skip_sequence(const char *s, size_t n, size_t i, unsigned x) {
  if (x == '[') return skip_csi(s, n, i);
  if (x == ']' || x == 'P' || x == 'X' || x == '^' || x == '_') return skip_command_string(s, n, i);
  if (x >= 0x20 && x <= 0x2F) { /* intermediates, then a final byte */
    while (i < n && s[i] >= 0x20 && s[i] <= 0x2F) i++;
    return i < n && s[i] >= 0x30 && s[i] <= 0x7E ? i + 1 : i;
  }
  return i;
}

void util_term_text(Buf *out, const char *s, size_t n, bool one_line) {
  size_t clean = 0; /* start of the run of bytes not yet copied */
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    uint32_t cp;
    size_t len = c < 0x80 ? 1 : util_utf8_char(s + i, n - i, &cp);
    bool ctl = c < 0x20 || c == 0x7F || len == 0 || (len == 2 && cp < 0xA0);
    if (!ctl) {
      i += len;
      continue;
    }
    if (i > clean) buf_printf(out, "%.*s", (int)(i - clean), s + clean);
    size_t next = i + (len ? len : 1);
    if (len == 0)
      buf_printf(out, "?");
    else if (c == '\n' || c == '\t')
      buf_printf(out, "%c", one_line ? ' ' : c);
    else if (c == 0x1B && next < n && (unsigned char)s[next] >= 0x20 && (unsigned char)s[next] <= 0x7E)
      next = skip_sequence(s, n, next + 1, (unsigned char)s[next]);
    else if (len == 2)
      next = skip_sequence(s, n, next, cp - 0x40);
    clean = i = next;
  }
  if (n > clean) buf_printf(out, "%.*s", (int)(n - clean), s + clean);
}
