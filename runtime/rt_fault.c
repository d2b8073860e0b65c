/*
 * rt_fault.c - fault injection (the idea of Lua's ltests): tests make the
 * Nth event of a kind fail (an allocation, a copy or kernel failing when
 * issued or later on its stream, the device lost, a copy or kernel that
 * never completes, rt_write_profile stalled where a kill would hurt) and
 * check that every failure comes back as a status with a message, frees
 * what it took and leaves the parameters as they were. Always compiled in:
 * when nothing is armed it costs one relaxed atomic add per event.
 */
#include "rt_backend.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long counts[RT_FAULT_KINDS], armed[RT_FAULT_KINDS];

void rt_fault_arm(int kind, long nth) {
  if (kind < 0 || kind >= RT_FAULT_KINDS) return;
  atomic_store(&armed[kind], nth > 0 ? nth : 0);
  atomic_store(&counts[kind], 0);
}

long rt_fault_count(int kind) {
  return kind >= 0 && kind < RT_FAULT_KINDS ? atomic_load(&counts[kind]) : 0;
}

void rt_fault_inject(long alloc_nth, long copy_nth, long kernel_nth) {
  for (int k = 0; k < RT_FAULT_KINDS; k++) rt_fault_arm(k, 0);
  rt_fault_arm(RT_FAULT_ALLOC, alloc_nth);
  rt_fault_arm(RT_FAULT_COPY, copy_nth);
  rt_fault_arm(RT_FAULT_KERNEL, kernel_nth);
}

void rt_fault_counts(long *allocs, long *copies, long *kernels) {
  if (allocs) *allocs = rt_fault_count(RT_FAULT_ALLOC);
  if (copies) *copies = rt_fault_count(RT_FAULT_COPY);
  if (kernels) *kernels = rt_fault_count(RT_FAULT_KERNEL);
}

bool rt_fault_hit(int kind) {
  long n = atomic_fetch_add_explicit(&counts[kind], 1, memory_order_relaxed) + 1;
  return n == atomic_load_explicit(&armed[kind], memory_order_relaxed);
}

void *rt_calloc(size_t n, size_t size) {
  return rt_fault_hit(RT_FAULT_ALLOC) ? NULL : calloc(n, size);
}
