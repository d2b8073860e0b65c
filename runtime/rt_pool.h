/*
 * rt_pool.h - the CPU kernels' worker threads (internal to libration). A
 * kernel splits its work into tasks whose partition depends only on the
 * shapes, never on the thread count or on which thread runs a task, so
 * its outputs are bitwise the same however the tasks are scheduled. The
 * CPU backend hands the pool to its kernels as rt_KernelArgs.backend_ctx;
 * a NULL pool selects the reference kernels (kernels_cpu.c).
 */
#ifndef RT_POOL_H
#define RT_POOL_H

#include <stddef.h>
#include <stdint.h>

/* f32 scratch each thread owns, for kernels that stage blocks (attention
 * scores, bf16 operands converted for BLAS). */
#define RT_POOL_SCRATCH_FLOATS ((int64_t)1 << 21)

typedef struct rt_Pool rt_Pool;
/* Task TASK of a run; SCRATCH is the running thread's RT_POOL_SCRATCH_FLOATS. */
typedef void (*rt_PoolTask)(void *arg, int64_t task, float *scratch);

/* THREADS in all, the calling thread included (0: every core this
 * process may run on). 0, or -1 with the reason in err. */
int rt_pool_open(rt_Pool **out, int threads, char *err, size_t errlen);
void rt_pool_close(rt_Pool *p);
int rt_pool_threads(const rt_Pool *p);
/* The cores this process may run on (at least 1). */
int rt_pool_cores(void);
/* Runs FN(ARG, i, scratch) for every i in [0, NTASKS) on the pool's threads
 * and the caller's, and returns when all have finished. */
void rt_pool_run(rt_Pool *p, int64_t ntasks, rt_PoolTask fn, void *arg);
/* A partition of N items by shape alone: chunks of at least GRAIN items,
 * at most RT_POOL_MAX_TASKS of them, returned as the chunk size (>= 1). */
#define RT_POOL_MAX_TASKS 16
int64_t rt_pool_chunk(int64_t n, int64_t grain);

/* A kernel's work as ranges [i0, i1) of N items, chunks of rt_pool_chunk(N,
 * GRAIN) run on the pool: each by WITH_SCRATCH(CTX, i0, i1, scratch) where
 * it is given (the running thread's scratch), else by PLAIN(CTX, i0, i1). */
typedef void (*rt_PoolRange)(const void *ctx, int64_t i0, int64_t i1);
typedef void (*rt_PoolScratchRange)(const void *ctx, int64_t i0, int64_t i1, float *scratch);
void rt_pool_ranges(rt_Pool *p, int64_t n, int64_t grain, rt_PoolRange plain,
                    rt_PoolScratchRange with_scratch, const void *ctx);

#endif
