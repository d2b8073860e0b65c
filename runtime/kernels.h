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

/* Kernel registry: built-in CPU kernels are registered on first lookup;
 * custom op types can be added by name. */
int rt_kernel_register(const char *type, rt_KernelFn fn);
rt_KernelFn rt_kernel_find(const char *type);
double rt_attr(const rt_KernelArgs *a, const char *key, double dflt);

/* bf16 storage helpers (round to nearest even), shared by every kernel. */
float rt_bf16_to_f32(uint16_t h);
uint16_t rt_f32_to_bf16(float f);
float rt_load(const rt_View *v, int64_t i);
void rt_store(const rt_View *v, int64_t i, float x);

#endif
