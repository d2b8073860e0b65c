/*
 * gpu_step.c - runs an emitted schedule for K training steps on libration
 * (CUDA or CPU backend) with a fixed data stream and reports, one
 * "key value" per line, what the device check compares:
 *
 *   memory: the plan's peak, the executor's live high-water mark, the arena,
 *     what the runtime itself cudaMalloc'd / cudaMallocHost'd (intercepted
 *     with -Wl,--wrap), cudaMemGetInfo before and after rt_open and after
 *     the steps; with --canary, the arena bytes a step really wrote: every
 *     non-resident byte is set to a canary before one step, and afterwards
 *     the highest written offset and any write outside every buffer's range
 *     are reported;
 *   time: the plan's predicted step, the measured median step (steps after
 *     the first);
 *   results: every step's loss as float bits, and an FNV-1a hash of every
 *     param, grad and optimizer state tensor after the last step, so that
 *     two schedules of one graph can be compared bitwise (grep '^hash').
 *
 * Build: gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I$CUDA/include -IDIR
 *          -DSCHED_HEADER='"NAME.sched.h"' -DSCHED_ENTRY=ration_schedule_NAME -DWITH_CUDA
 *          gpu/step.c DIR/NAME.sched.c
 *          -Wl,--wrap=cudaMalloc,--wrap=cudaMallocHost
 *          -Wl,--whole-archive BUILD/libration_cuda.a -Wl,--no-whole-archive BUILD/libration.a
 *          -L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 -lcublasLt -lcudart -lstdc++ -lm -lpthread
 *        (without -DWITH_CUDA, the wraps and the CUDA archive: a CPU-only build)
 * Usage: gpu_step [--backend cuda|cpu] [--steps K] [--debug] [--canary] [--profile COSTS.json]
 *                 [--data FILE] [--seed S]
 * --profile: per-op times (the CUDA backend syncs after every op) written as
 * a ration-costs/1 file for `ration plan --costs`.
 */
#include SCHED_HEADER
#include "ration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WITH_CUDA
#include <cuda_runtime_api.h>

/* The runtime's own allocations (rt_cuda.cu, runtime/cuda/). */
static size_t dev_allocs, dev_bytes, host_bytes_pinned;
static void *arena_ptr;
static size_t arena_size;
cudaError_t __real_cudaMalloc(void **p, size_t n);
cudaError_t __real_cudaMallocHost(void **p, size_t n);
cudaError_t __wrap_cudaMalloc(void **p, size_t n) {
  cudaError_t e = __real_cudaMalloc(p, n);
  if (e == cudaSuccess) {
    dev_allocs++, dev_bytes += n;
    if (!arena_ptr) arena_ptr = *p, arena_size = n; /* rt_cuda.cu allocates the arena first */
  }
  return e;
}
cudaError_t __wrap_cudaMallocHost(void **p, size_t n) {
  cudaError_t e = __real_cudaMallocHost(p, n);
  if (e == cudaSuccess) host_bytes_pinned += n;
  return e;
}
static long long used_now(void) {
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return -1;
  return (long long)(tot - fr);
}
#endif

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static int find_op(const rt_Schedule *S, const char *type) {
  for (int o = 0; o < S->nops; o++)
    if (!strcmp(S->ops[o].type, type)) return o;
  return -1;
}

#ifdef WITH_CUDA
/* --canary: every arena byte outside the resident buffers (params, grads,
 * optimizer state, inputs: kind != 4) becomes 0xA5, then one step runs and
 * the arena is read back: the highest 256-byte block written, the bytes
 * written, and blocks written outside every buffer of the schedule. */
static int canary_step(rt_Session *s, const rt_Schedule *S) {
  if (!arena_ptr || arena_size < (size_t)S->arena_bytes) {
    printf("canary_error no arena pointer intercepted\n");
    return 1;
  }
  size_t n = (size_t)S->arena_bytes;
  unsigned char *img = malloc(n), *in_buf = calloc(n / 256 + 1, 1), *res = calloc(n / 256 + 1, 1);
  if (!img || !in_buf || !res || cudaMemcpy(img, arena_ptr, n, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
  for (int b = 0; b < S->nbuffers; b++) {
    const rt_SchedBuffer *bf = &S->buffers[b];
    if (bf->space != RT_SPACE_DEVICE || bf->bytes == 0) continue;
    int resident = bf->home; /* holds its tensor across steps */
    for (size_t k = (size_t)bf->offset / 256; k <= (size_t)(bf->offset + bf->bytes - 1) / 256; k++) {
      in_buf[k] = 1;
      if (resident) res[k] = 1;
    }
  }
  for (size_t k = 0; k * 256 < n; k++)
    if (!res[k]) memset(img + k * 256, 0xA5, k * 256 + 256 <= n ? 256 : n - k * 256);
  if (cudaMemcpy(arena_ptr, img, n, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  int rc = rt_step(s);
  if (rc != RT_OK) {
    printf("canary_error step: %s\n", rt_error(s));
    return 1;
  }
  unsigned char *after = malloc(n);
  if (!after || cudaMemcpy(after, arena_ptr, n, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
  long long top = -1, written = 0, stray = 0;
  for (size_t k = 0; k * 256 < n; k++) {
    size_t len = k * 256 + 256 <= n ? 256 : n - k * 256;
    if (res[k] || !memcmp(img + k * 256, after + k * 256, len)) continue;
    written += (long long)len;
    top = (long long)(k * 256 + len);
    if (!in_buf[k]) stray++;
  }
  printf("canary_written_bytes %lld\ncanary_top_offset %lld\ncanary_stray_blocks %lld\n", written, top, stray);
  free(img), free(after), free(in_buf), free(res);
  return stray != 0;
}
#endif

int main(int argc, char **argv) {
  int steps = 10, debug = 0, canary = 0;
  unsigned seed = 1;
  const char *backend = "cuda", *data = NULL, *profile = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile = argv[++i];
    else if (!strcmp(argv[i], "--debug")) debug = 1;
    else if (!strcmp(argv[i], "--canary")) canary = 1;
    else {
      fprintf(stderr, "usage: gpu_step [--backend cuda|cpu] [--steps K] [--debug] [--canary] [--profile COSTS.json] "
                      "[--data F] [--seed S]\n");
      return 2;
    }
  }
  const rt_Schedule *S = SCHED_ENTRY();
  int enc = find_op(S, "encoder") >= 0 ? find_op(S, "encoder") : find_op(S, "embedding");
  int ce = find_op(S, "crossentropy");
  if (enc < 0 || ce < 0) {
    fprintf(stderr, "gpu_step: no embedding or crossentropy op\n");
    return 2;
  }
  const rt_SchedTensor *tokens = &S->tensors[S->op_io[S->ops[enc].io0]];
  const rt_SchedTensor *targets = &S->tensors[S->op_io[S->ops[ce].io0 + 1]];
  const rt_SchedTensor *loss = &S->tensors[S->op_io[S->ops[ce].io0 + S->ops[ce].nin]];
  int64_t ntok = tokens->bytes / 4, T = tokens->shape[tokens->rank - 1];
  /* Bytes of a text file, or pseudo-random bytes, as tokens. */
  static unsigned char text[1 << 22];
  size_t ntext = 0;
  if (data) {
    FILE *f = fopen(data, "rb");
    if (f) ntext = fread(text, 1, sizeof text, f), fclose(f);
  }
  if (ntext < (size_t)T + 2) {
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)(32 + rng_next() % 95);
    ntext = sizeof text;
  }
  rng_state ^= seed * 0x2545F4914F6CDD1Dull;

  printf("schedule %s\ngraph %s\nstrategy %s\nsolver_status %s\n", S->name, S->graph_name, S->strategy,
         S->solver_status);
  printf("plan_budget_bytes %lld\nplan_arena_bytes %lld\nplan_host_bytes %lld\nplan_peak_live_bytes %lld\n",
         (long long)S->budget_bytes, (long long)S->arena_bytes, (long long)S->host_bytes,
         (long long)S->peak_live_bytes);
  printf("plan_step_ms %.4f\n", 1e3 * S->predicted_step_seconds);
  for (int t = 0; t < S->ntensors; t++)
    if (!strcmp(S->tensors[t].name, RT_RUNTIME_TENSOR)) printf("plan_runtime_bytes %lld\n", (long long)S->tensors[t].bytes);
  rt_Options opt = {.backend = !strcmp(backend, "cpu") ? RT_BACKEND_CPU : RT_BACKEND_CUDA,
                    .flags = (debug ? RT_OPEN_DEBUG : 0u) | (profile ? RT_OPEN_PROFILE : 0u), .seed = seed};
#ifdef WITH_CUDA
  long long used0 = opt.backend == RT_BACKEND_CUDA ? used_now() : -1;
#endif
  rt_Session *s;
  char err[512];
  int rc = rt_open(S, &opt, &s, err, sizeof err);
  if (rc != RT_OK) {
    printf("error open: %s: %s\n", rt_status_name(rc), err);
    return 1;
  }
  rt_Stats st;
  rt_stats(s, &st);
  printf("backend %s\ndebug %d\n", st.backend, debug);
#ifdef WITH_CUDA
  long long used1 = opt.backend == RT_BACKEND_CUDA ? used_now() : -1;
  printf("rt_cudaMalloc_count %zu\nrt_cudaMalloc_bytes %zu\nrt_arena_alloc_bytes %zu\nrt_cudaMallocHost_bytes %zu\n",
         dev_allocs, dev_bytes, arena_size, host_bytes_pinned);
  printf("memgetinfo_used_before_open %lld\nmemgetinfo_used_after_open %lld\nmemgetinfo_open_delta %lld\n", used0,
         used1, used1 - used0);
#endif
  if ((rc = rt_init_params(s, 42, 0.02)) != RT_OK) {
    printf("error init: %s\n", rt_error(s));
    return 1;
  }
  int32_t *tok = malloc((size_t)tokens->bytes), *tgt = malloc((size_t)targets->bytes);
  double *times = calloc((size_t)steps + 1, sizeof *times);
  int timed = 0;
  for (int it = 1; it <= steps; it++) {
    for (int64_t b = 0; b < ntok / T; b++) {
      size_t at = (size_t)(rng_next() % (ntext - (size_t)T - 1));
      for (int64_t t = 0; t < T; t++) tok[b * T + t] = text[at + (size_t)t], tgt[b * T + t] = text[at + (size_t)t + 1];
    }
    if ((rc = rt_write(s, tokens->name, tokens->dtype, tokens->rank, tokens->shape, tok, (size_t)tokens->bytes)) !=
            RT_OK ||
        (rc = rt_write(s, targets->name, targets->dtype, targets->rank, targets->shape, tgt,
                       (size_t)targets->bytes)) != RT_OK) {
      printf("error write: %s\n", rt_error(s));
      return 1;
    }
#ifdef WITH_CUDA
    if (canary && it == 1 && opt.backend == RT_BACKEND_CUDA) rc = canary_step(s, S) ? RT_EBACKEND : RT_OK;
    else
#endif
      rc = rt_step(s);
    if (rc != RT_OK) {
      printf("error step %d: %s: %s\n", it, rt_status_name(rc), rt_error(s));
      return 1;
    }
    float l;
    uint32_t bits;
    rt_read(s, loss->name, loss->dtype, loss->rank, loss->shape, &l, sizeof l);
    memcpy(&bits, &l, 4);
    rt_stats(s, &st);
    printf("loss %d %.6f 0x%08x %.3f ms\n", it, l, bits, 1e3 * st.step_seconds);
    if (it > 1) times[timed++] = st.step_seconds;
  }
  rt_stats(s, &st);
  printf("live_high_water %lld\nlive_equals_plan %s\n", (long long)st.live_high_water,
         st.live_high_water == S->peak_live_bytes ? "yes" : "NO");
  if (timed) {
    qsort(times, (size_t)timed, sizeof *times, cmp_double);
    double med = timed % 2 ? times[timed / 2] : 0.5 * (times[timed / 2 - 1] + times[timed / 2]);
    printf("measured_step_ms %.4f\nmeasured_over_plan %.3f\n", 1e3 * med, med / S->predicted_step_seconds);
  }
#ifdef WITH_CUDA
  if (opt.backend == RT_BACKEND_CUDA) printf("memgetinfo_used_after_steps %lld\n", used_now());
#endif
  /* Hashes of the state a step leaves: identical across schedules of one
   * graph when the kernels are deterministic and the schedule is right. */
  uint64_t all = 0xcbf29ce484222325ull;
  for (int t = 0; t < S->ntensors; t++) {
    const rt_SchedTensor *T_ = &S->tensors[t];
    if (T_->kind < 1 || T_->kind > 3) continue;
    unsigned char *buf = malloc((size_t)T_->bytes);
    if (!buf || rt_read(s, T_->name, T_->dtype, T_->rank, T_->shape, buf, (size_t)T_->bytes) != RT_OK) {
      printf("error read %s\n", T_->name);
      return 1;
    }
    uint64_t h = fnv1a(buf, (size_t)T_->bytes);
    all = (all ^ h) * 0x100000001b3ull;
    printf("hash %s %016llx\n", T_->name, (unsigned long long)h);
    free(buf);
  }
  printf("state_hash %016llx\n", (unsigned long long)all);
  if (profile && rt_write_profile(s, profile) != RT_OK) printf("error profile: %s\n", rt_error(s));
  rt_close(s);
  free(tok), free(tgt), free(times);
  return 0;
}
