/*
 * peak_malloc.c - an LD_PRELOAD shim that counts the bytes a process holds
 * on the heap and their high-water mark, for benchmarks that compare peak
 * memory on the CPU, where PyTorch has no max_memory_allocated. It wraps
 * malloc, calloc, realloc, posix_memalign, aligned_alloc and free (PyTorch's
 * CPU allocator and inductor's compiled code allocate through them) and
 * counts malloc_usable_size of each block. peak_malloc_reset() starts a new
 * high-water mark at the bytes held now; peak_malloc_peak() and
 * peak_malloc_current() read them (from Python through ctypes).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

static _Atomic int64_t held, high;
static void *(*real_malloc)(size_t), *(*real_calloc)(size_t, size_t), *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);

/* dlsym may itself call calloc: answer it from a static block until the
 * real functions are known. */
static char early[4096];
static size_t early_used;
static int resolving;

static void resolve(void) {
  if (real_malloc || resolving) return;
  resolving = 1;
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_free = dlsym(RTLD_NEXT, "free");
  real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  real_malloc = dlsym(RTLD_NEXT, "malloc");
  resolving = 0;
}

static int is_early(void *p) { return (char *)p >= early && (char *)p < early + sizeof early; }

static void count(void *p, int sign) {
  if (!p || is_early(p)) return;
  int64_t now = atomic_fetch_add(&held, sign * (int64_t)malloc_usable_size(p)) + sign * (int64_t)malloc_usable_size(p);
  for (int64_t h = atomic_load(&high); now > h && !atomic_compare_exchange_weak(&high, &h, now);) {
  }
}

void *malloc(size_t n) {
  resolve();
  void *p = real_malloc(n);
  count(p, 1);
  return p;
}

void *calloc(size_t k, size_t n) {
  if (!real_calloc) {
    if (resolving) {
      size_t at = (early_used + 15) & ~(size_t)15;
      if (n && k > (sizeof early - at) / n) return NULL;
      early_used = at + k * n;
      return early + at;
    }
    resolve();
  }
  void *p = real_calloc(k, n);
  count(p, 1);
  return p;
}

void *realloc(void *old, size_t n) {
  resolve();
  if (is_early(old)) return NULL;
  count(old, -1);
  void *p = real_realloc(old, n);
  count(p ? p : old, 1);
  return p;
}

void free(void *p) {
  if (!p || is_early(p)) return;
  resolve();
  count(p, -1);
  real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n) {
  resolve();
  int st = real_posix_memalign(out, align, n);
  if (!st) count(*out, 1);
  return st;
}

void *aligned_alloc(size_t align, size_t n) {
  resolve();
  void *p = real_aligned_alloc(align, n);
  count(p, 1);
  return p;
}

void *memalign(size_t align, size_t n) {
  void *p = NULL;
  return posix_memalign(&p, align, n) ? NULL : p;
}

void peak_malloc_reset(void) { atomic_store(&high, atomic_load(&held)); }
int64_t peak_malloc_peak(void) { return atomic_load(&high); }
int64_t peak_malloc_current(void) { return atomic_load(&held); }
