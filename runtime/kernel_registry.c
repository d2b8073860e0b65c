/*
 * kernel_registry.c - maps op type names to kernel functions: the built-in
 * CPU kernels plus any custom types a user registers, and the attribute
 * lookup every kernel uses.
 */
#include "kernels.h"

#include <pthread.h>
#include <string.h>

#define REGISTRY_CAP 256

static rt_KernelSlot registry[REGISTRY_CAP];
static int registry_n;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

int rt_kernel_slot_put(rt_KernelSlot *slots, int *n, int cap, const char *type, rt_KernelFn fn) {
  size_t len = type ? strlen(type) : 0;
  if (len == 0 || len > RT_KERNEL_NAME_MAX || !fn) return -1;
  for (int i = 0; i < *n; i++)
    if (strcmp(slots[i].type, type) == 0) {
      slots[i].fn = fn;
      return 0;
    }
  if (*n == cap) return -1;
  memcpy(slots[*n].type, type, len + 1);
  slots[*n].fn = fn;
  (*n)++;
  return 0;
}

rt_KernelFn rt_kernel_slot_find(const rt_KernelSlot *slots, int n, const char *type) {
  for (int i = 0; i < n; i++)
    if (strcmp(slots[i].type, type) == 0) return slots[i].fn;
  return NULL;
}

static int put(const char *type, rt_KernelFn fn) {
  return rt_kernel_slot_put(registry, &registry_n, REGISTRY_CAP, type, fn);
}

/* Built-ins go in first so that a custom registration of the same name,
 * which always comes later, replaces them. */
static void load_builtins(void) {
  for (const rt_KernelEntry *e = rt_cpu_kernels; e->type; e++) put(e->type, e->fn);
}

int rt_kernel_register(const char *type, rt_KernelFn fn) {
  if (!type) return -1;
  pthread_once(&builtins_once, load_builtins);
  return put(type, fn);
}

rt_KernelFn rt_kernel_find(const char *type) {
  if (!type) return NULL;
  pthread_once(&builtins_once, load_builtins);
  return rt_kernel_slot_find(registry, registry_n, type);
}

double rt_attr(const rt_KernelArgs *a, const char *key, double dflt) {
  for (int i = 0; i < a->nattrs; i++)
    if (a->attrs[i].key && strcmp(a->attrs[i].key, key) == 0) return a->attrs[i].num;
  return dflt;
}

int rt_grad_outputs(const rt_KernelArgs *a, int n, const rt_View **sel) {
  double m = rt_attr(a, "grads", -1.0);
  unsigned mask;
  if (m < 0) {
    if (a->nout > n) return -1;
    mask = (1u << a->nout) - 1u;
  } else {
    if (!(m < (double)(1u << n)) || m != (double)(unsigned)m) return -1;
    mask = (unsigned)m;
  }
  int k = 0;
  for (int i = 0; i < n; i++) sel[i] = mask >> i & 1u ? (k < a->nout ? &a->out[k++] : NULL) : NULL;
  return k == a->nout && __builtin_popcount(mask) == a->nout ? 0 : -1;
}
