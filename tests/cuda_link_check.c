/*
 * cuda_link_check.c - linked by tests/t_cuda_build.sh against
 * libration_cuda.a (only where nvcc exists): every CPU kernel type must
 * have a CUDA kernel, nothing else, custom types register, and creating the kernel context on a
 * machine without a GPU must fail with a message, not crash.
 */
#include "kernels.h"
#include "kernels_cuda.h"

#include <stdio.h>

int main(void) {
  int missing = 0, n = 0;
  for (const rt_KernelEntry *e = rt_cpu_kernels; e->type; e++, n++)
    if (!rt_cuda_kernel_find(e->type)) {
      printf("no CUDA kernel for %s\n", e->type);
      missing++;
    }
  if (rt_cuda_kernel_find("conv2d") || rt_cuda_kernel_find(NULL)) {
    printf("rt_cuda_kernel_find invents kernels\n");
    missing++;
  }
  rt_KernelFn gelu = rt_cuda_kernel_find("gelu");
  if (rt_cuda_kernel_register("my_op", gelu) != 0 || rt_cuda_kernel_find("my_op") != gelu ||
      rt_cuda_kernel_register("gelu", rt_cuda_kernel_find("add")) != 0 ||
      rt_cuda_kernel_find("gelu") != rt_cuda_kernel_find("add") || rt_cuda_kernel_register("", gelu) != -1) {
    printf("custom CUDA kernel registration is wrong\n");
    missing++;
  }
  char err[256] = "";
  rt_CudaKernelCtx *ctx = NULL;
  int rc = rt_cuda_kernel_ctx_create(&ctx, NULL, err, sizeof err);
  if (rc == 0) {
    printf("context: created (a GPU is present)\n");
    rt_cuda_kernel_ctx_destroy(ctx);
  } else if (rc != RT_KERNEL_EDEVICE || ctx || !err[0]) {
    printf("context: bad failure rc=%d\n", rc);
    missing++;
  } else {
    printf("context: %s\n", err);
  }
  printf("%d CPU kernel types, %d without a CUDA kernel\n", n, missing);
  return missing != 0;
}
