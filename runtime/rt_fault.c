/*
 * rt_fault.c - fault injection (the idea of Lua's ltests): tests make the
 * Nth allocation, the Nth schedule copy or the Nth kernel launch fail, and
 * check that every failure comes back as a status with a message, frees
 * what it took and leaves the parameters as they were. Always compiled in:
 * when nothing is armed it costs one relaxed atomic add per event.
 */
#include "rt_backend.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long counts[RT_FAULT_KINDS], armed[RT_FAULT_KINDS];

void rt_fault_inject(long alloc_nth, long copy_nth, long kernel_nth) {
  long nth[RT_FAULT_KINDS] = {alloc_nth, copy_nth, kernel_nth};
  for (int k = 0; k < RT_FAULT_KINDS; k++) {
    atomic_store(&armed[k], nth[k] > 0 ? nth[k] : 0);
    atomic_store(&counts[k], 0);
  }
}

void rt_fault_counts(long *allocs, long *copies, long *kernels) {
  if (allocs) *allocs = atomic_load(&counts[RT_FAULT_ALLOC]);
  if (copies) *copies = atomic_load(&counts[RT_FAULT_COPY]);
  if (kernels) *kernels = atomic_load(&counts[RT_FAULT_KERNEL]);
}

bool rt_fault_hit(int kind) {
  long n = atomic_fetch_add_explicit(&counts[kind], 1, memory_order_relaxed) + 1;
  return n == atomic_load_explicit(&armed[kind], memory_order_relaxed);
}

void *rt_calloc(size_t n, size_t size) {
  return rt_fault_hit(RT_FAULT_ALLOC) ? NULL : calloc(n, size);
}
