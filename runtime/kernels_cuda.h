/*
 * kernels_cuda.h - the CUDA kernels' host interface, plain C so that the
 * executor can include it without CUDA headers. The kernels share the
 * contract of kernels.h; args->backend_ctx must point to an
 * rt_CudaKernelCtx, which holds the compute stream, the cuBLASLt handle and
 * the matmul plans (descriptors and algorithm, chosen once per shape).
 * Built into libration_cuda.a only when nvcc is present.
 */
#ifndef RATION_KERNELS_CUDA_H
#define RATION_KERNELS_CUDA_H

#include "kernels.h"

typedef struct rt_CudaKernelCtx rt_CudaKernelCtx;

/* stream is the cudaStream_t every kernel is launched on (NULL: the legacy
 * default stream). Makes the cuBLASLt handle; allocates no device memory.
 * Returns 0 or RT_KERNEL_EDEVICE with a message. */
int rt_cuda_kernel_ctx_create(rt_CudaKernelCtx **ctx, void *stream, char *err, size_t errlen);
void rt_cuda_kernel_ctx_destroy(rt_CudaKernelCtx *ctx);

/* The device bytes the kernels may keep for the whole run, given before the
 * first kernel: BYTES, N long (the plan's RT_RUNTIME_TENSOR). The first 256
 * hold the status word, the rest is the cuBLASLt workspace and the column
 * sums' scratch. With fewer than 256 (or none given), the first kernel
 * allocates a 4-byte status word of its own and cuBLASLt runs with no
 * workspace. */
int rt_cuda_kernel_ctx_set_runtime(rt_CudaKernelCtx *ctx, void *bytes, int64_t n, char *err, size_t errlen);
/* Makes the status word if no runtime bytes hold it; before each kernel. */
int rt_cuda_kernel_ctx_ready(rt_CudaKernelCtx *ctx, char *err, size_t errlen);

/* Kernels run asynchronously, so data errors that only the device sees (a
 * token or target outside [0, V)) are recorded in the context. After
 * synchronizing the stream, this returns RT_KERNEL_EVALUE with a message if
 * any kernel recorded one since the last call (and clears it), else 0. */
int rt_cuda_kernel_ctx_status(rt_CudaKernelCtx *ctx, char *err, size_t errlen);

/* The CUDA kernel for an op type of docs/OPS.md or a registered custom
 * type, or NULL. Registration follows rt_kernel_register's rules. */
rt_KernelFn rt_cuda_kernel_find(const char *type);
int rt_cuda_kernel_register(const char *type, rt_KernelFn fn);

#endif
