/*
 * kernels.h - the kernel contract shared by the executor, the CPU reference
 * kernels and the CUDA kernels. One function per op type (docs/OPS.md),
 * outputs first in the argument structs as llm.c does it. Kernels never
 * allocate, never exit; they return 0 or a negative status with a message.
 */
#ifndef RATION_KERNELS_H
#define RATION_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Same order as the compiler's DType and the emitted schedules' tables. */
typedef enum { RT_F32, RT_BF16, RT_F16, RT_I32, RT_I64, RT_U8 } rt_DType;

#define RT_MAX_RANK 8

typedef struct rt_View {
  void *data;
  rt_DType dtype;
  int rank;
  int64_t shape[RT_MAX_RANK];
  int64_t numel;
} rt_View;

typedef struct rt_Attr {
  const char *key;
  double num;
} rt_Attr;

typedef struct rt_KernelArgs {
  const rt_View *out; /* outputs first */
  int nout;
  const rt_View *in;
  int nin;
  void *workspace;
  int64_t workspace_bytes;
  const rt_Attr *attrs;
  int nattrs;
  int64_t step; /* 1-based training step, for the optimizer's bias correction */
  void *backend_ctx; /* the CUDA backend's handles; NULL on the CPU */
} rt_KernelArgs;

typedef int (*rt_KernelFn)(const rt_KernelArgs *a, char *err, size_t errlen);

/* Status codes a kernel returns (0 is success). */
#define RT_KERNEL_EARGS (-1)   /* wrong arity, shapes or dtypes */
#define RT_KERNEL_EVALUE (-2)  /* bad data, e.g. a token id out of range */
#define RT_KERNEL_EDEVICE (-3) /* the backend failed (CUDA error) */

/* Kernel registry: built-in CPU kernels are registered on first lookup;
 * custom op types can be added by name (a later registration of the same
 * name replaces the earlier one, built-ins included). Register custom types
 * before steps run: lookups are not synchronized against registration.
 * rt_kernel_register returns 0, or -1 when the name is too long or the
 * table is full. */
#define RT_KERNEL_NAME_MAX 63
typedef struct rt_KernelEntry {
  const char *type;
  rt_KernelFn fn;
} rt_KernelEntry;
/* Every built-in op type, as X(name): each backend defines a kernel k_name
 * for each and builds its table of entries (RT_KERNEL_ENTRY) from this
 * list, so the backends cover the same op types. */
#define RT_BUILTIN_KERNELS(X) \
  X(encoder) X(encoder_backward) X(embedding) X(embedding_backward) X(layernorm) X(layernorm_backward) \
  X(rmsnorm) X(rmsnorm_backward) X(matmul) X(matmul_backward) X(attention) X(attention_backward) X(rope) \
  X(rope_backward) X(gelu) X(gelu_backward) X(swiglu) X(swiglu_backward) X(add) X(crossentropy) \
  X(crossentropy_backward) X(adamw) X(lora_add) X(lora_add_backward) X(ema) X(slice) X(concat_rows)
#define RT_KERNEL_ENTRY(op) {#op, k_##op},
/* The built-in CPU kernels (kernels_cpu.c), terminated by {NULL, NULL}. */
extern const rt_KernelEntry rt_cpu_kernels[];
int rt_kernel_register(const char *type, rt_KernelFn fn);
rt_KernelFn rt_kernel_find(const char *type);
/* libration's own, not for users: a table of registered kernels, CAP
 * slots, *N in use (the CPU registry's and the CUDA backend's custom
 * kernels). put replaces TYPE's function or appends it (0; -1 when TYPE is
 * empty or too long, FN is NULL or the table is full); find returns TYPE's
 * function or NULL. */
typedef struct rt_KernelSlot {
  char type[RT_KERNEL_NAME_MAX + 1];
  rt_KernelFn fn;
} rt_KernelSlot;
int rt_kernel_slot_put(rt_KernelSlot *slots, int *n, int cap, const char *type, rt_KernelFn fn);
rt_KernelFn rt_kernel_slot_find(const rt_KernelSlot *slots, int n, const char *type);
/* The value of attribute `key`, or dflt when the op does not carry it. */
double rt_attr(const rt_KernelArgs *a, const char *key, double dflt);
/* The outputs of a backward op that may leave some gradients out (a frozen
 * weight's, or a graph input's): attribute "grads" has bit k set when the
 * forward op's input k gets a gradient output, outputs in input order;
 * without it the outputs are the first nout of the n. sel[k] is input k's
 * gradient view or NULL. Returns 0, or -1 when "grads" and nout disagree. */
int rt_grad_outputs(const rt_KernelArgs *a, int n, const rt_View **sel);
/* crossentropy's vocabulary: attribute "vocab", the first columns of rows
 * LD long (a padded vocabulary), or LD without it; -1 when it is not an
 * integer in [1, LD]. */
static inline int64_t rt_vocab(const rt_KernelArgs *a, int64_t LD) {
  double v = rt_attr(a, "vocab", (double)LD);
  return v >= 1 && v <= (double)LD && v == (double)(int64_t)v ? (int64_t)v : -1;
}

/* crossentropy's mean: over attribute "mean_over" rows (a chunk of a
 * larger batch, `ration model --loss-chunks`), else over its own N; -1 when
 * that is not an integer >= 1. */
static inline int64_t rt_mean_over(const rt_KernelArgs *a, int64_t N) {
  double m = rt_attr(a, "mean_over", (double)N);
  return m >= 1 && m <= 9007199254740992.0 && m == (double)(int64_t)m ? (int64_t)m : -1;
}

/* Bytes per element of a dtype. */
static inline int64_t rt_dtype_size(rt_DType d) { return d == RT_F32 || d == RT_I32 ? 4 : d == RT_I64 ? 8 : d == RT_U8 ? 1 : 2; }

/* Storage helpers, shared by every kernel and inline so that the kernels'
 * inner loops do not pay a call per element. bf16 rounds to nearest even;
 * a NaN stays a (quiet) NaN. */
static inline float rt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t rt_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* IEEE half, for views that carry it (the kernels themselves take f32 and
 * bf16 storage). Round to nearest even, overflow to infinity. */
static inline float rt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13);
  else if (exp != 0) u = sign | ((exp + 112u) << 23) | (man << 13);
  else if (man == 0) u = sign;
  else { /* subnormal: normalize */
    exp = 113u;
    while (!(man & 0x400u)) { man <<= 1; exp--; }
    u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t rt_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (a < 0x38800000u) { /* f16 subnormal or zero: scale into the mantissa */
    int shift = 126 - (int)(a >> 23);
    if (shift > 24) return (uint16_t)sign;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t r = man >> shift, rest = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  a += 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
  return (uint16_t)(sign | (a >> 13));
}

/* Element i of a float view (f32, bf16 or f16; i32 reads as its value). */
static inline float rt_load(const rt_View *v, int64_t i) {
  switch (v->dtype) {
  case RT_F32: return ((const float *)v->data)[i];
  case RT_BF16: return rt_bf16_to_f32(((const uint16_t *)v->data)[i]);
  case RT_F16: return rt_f16_to_f32(((const uint16_t *)v->data)[i]);
  case RT_I32: return (float)((const int32_t *)v->data)[i];
  default: return 0.0f;
  }
}

static inline void rt_store(const rt_View *v, int64_t i, float x) {
  switch (v->dtype) {
  case RT_F32: ((float *)v->data)[i] = x; break;
  case RT_BF16: ((uint16_t *)v->data)[i] = rt_f32_to_bf16(x); break;
  case RT_F16: ((uint16_t *)v->data)[i] = rt_f32_to_f16(x); break;
  case RT_I32: ((int32_t *)v->data)[i] = (int32_t)x; break;
  default: break;
  }
}

#endif
