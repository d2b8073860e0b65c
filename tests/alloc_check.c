/*
 * alloc_check.c - linked by tests/t_no_alloc.sh with -Wl,--wrap for every
 * allocator entry point: counts allocations made by libration while
 * training steps run (after rt_open). The executor promises none.
 *
 * Build: cc -DSCHED_HEADER='"NAME.sched.h"' -DSCHED_ENTRY=ration_schedule_NAME
 *        -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign
 *        alloc_check.c NAME.sched.c libration.a -lm -lpthread
 * Usage: alloc_check [debug]   prints "allocations during N steps: K"
 */
#include SCHED_HEADER
#include "ration.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_long count;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n) { atomic_fetch_add(&count, 1); return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { atomic_fetch_add(&count, 1); return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { atomic_fetch_add(&count, 1); return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { atomic_fetch_add(&count, 1); return __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { atomic_fetch_add(&count, 1); return __real_posix_memalign(p, a, n); }

int main(int argc, char **argv) {
  const rt_Schedule *S = SCHED_ENTRY();
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = argc > 1 ? RT_OPEN_DEBUG : 0u, .seed = 3};
  rt_Session *s;
  char err[512];
  if (rt_open(S, &o, &s, err, sizeof err) != RT_OK || rt_init_params(s, 1, 0.02) != RT_OK) {
    fprintf(stderr, "alloc_check: %s\n", err);
    return 1;
  }
  long before = atomic_load(&count);
  int steps = 3;
  for (int i = 0; i < steps; i++)
    if (rt_step(s) != RT_OK) {
      fprintf(stderr, "alloc_check: %s\n", rt_error(s));
      return 1;
    }
  long during = atomic_load(&count) - before;
  printf("allocations during %d steps: %ld (%ld at open)\n", steps, during, before);
  rt_close(s);
  return 0;
}
