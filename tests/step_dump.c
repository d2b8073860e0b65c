/*
 * step_dump.c - runs one training step (or STEP_DUMP_STEPS) of an emitted schedule on the CPU
 * backend and dumps what tests/torch_step.py checks against PyTorch: every
 * param, master copy and input before the step, every param, grad and
 * optimizer state after it, and the loss. DIR/manifest.txt lists them as
 * "tensor NAME WHEN DTYPE FILE RANK DIMS...".
 *
 * Build: cc -DSCHED_HEADER='"NAME.sched.h"' -DSCHED_ENTRY=ration_schedule_NAME
 *        step_dump.c NAME.sched.c libration.a -lm -lpthread
 * Usage: step_dump DIR [cpu|cuda|auto]   (exit 3: the backend is unavailable)
 *        STEP_DUMP_STEPS=N in the environment: N steps on the same batch
 */
#include SCHED_HEADER
#include "ration.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtypes[] = {"f32", "bf16", "f16", "i32", "i64", "u8"};

static int dump(rt_Session *s, FILE *man, const char *dir, int t, const char *when) {
  const rt_SchedTensor *T = &rt_schedule(s)->tensors[t];
  char file[512], path[1024];
  snprintf(file, sizeof file, "%s.%s.bin", T->name, when);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  void *buf = malloc((size_t)T->bytes);
  int rc = buf ? rt_read(s, T->name, T->dtype, T->rank, T->shape, buf, (size_t)T->bytes) : RT_ENOMEM;
  FILE *f = rc == RT_OK ? fopen(path, "wb") : NULL;
  if (f) {
    if (fwrite(buf, 1, (size_t)T->bytes, f) != (size_t)T->bytes) rc = RT_EINVAL;
    if (fclose(f) != 0) rc = RT_EINVAL;
  } else if (rc == RT_OK) {
    rc = RT_EINVAL;
  }
  free(buf);
  fprintf(man, "tensor %s %s %s %s %d", T->name, when, dtypes[T->dtype], file, (int)T->rank);
  for (int d = 0; d < T->rank; d++) fprintf(man, " %lld", (long long)T->shape[d]);
  fprintf(man, "\n");
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: step_dump DIR [cpu|cuda|auto]\n");
    return 2;
  }
  const rt_Schedule *S = SCHED_ENTRY();
  rt_BackendKind kind = argc < 3 || !strcmp(argv[2], "cpu") ? RT_BACKEND_CPU
                        : !strcmp(argv[2], "cuda")          ? RT_BACKEND_CUDA
                                                            : RT_BACKEND_AUTO;
  rt_Options o = {.backend = kind, .flags = RT_OPEN_DEBUG, .seed = 1};
  rt_Session *s;
  char err[512], path[1024];
  int rc = rt_open(S, &o, &s, err, sizeof err);
  if (rc != RT_OK) {
    fprintf(stderr, "step_dump: %s: %s\n", rt_status_name(rc), err);
    return rc == RT_EUNAVAIL ? 3 : 1;
  }
  rt_Stats st;
  rt_stats(s, &st);
  printf("backend %s\n", st.backend);
  snprintf(path, sizeof path, "%s/manifest.txt", argv[1]);
  FILE *man = fopen(path, "w");
  if (!man || (rc = rt_init_params(s, 42, 0.02)) != RT_OK) {
    fprintf(stderr, "step_dump: %s\n", man ? rt_error(s) : "cannot write the manifest");
    return 1;
  }
  /* A weight that starts at zero (LoRA's B, as PEFT inits it) gets small
   * values instead, so that the step exercises every adapter gradient. */
  for (int t = 0; t < S->ntensors && rc == RT_OK; t++) {
    const rt_SchedTensor *T = &S->tensors[t];
    if (T->kind != 1 || T->rank != 2 || T->dtype != 0) continue;
    float *w = malloc((size_t)T->bytes);
    int64_t n = T->bytes / 4, zero = 0;
    rc = w ? rt_read(s, T->name, T->dtype, T->rank, T->shape, w, (size_t)T->bytes) : RT_ENOMEM;
    for (int64_t i = 0; rc == RT_OK && i < n; i++) zero += w[i] == 0.0f;
    for (int64_t i = 0; rc == RT_OK && zero == n && i < n; i++) w[i] = 0.001f * (float)((i * 7919) % 41 - 20);
    if (rc == RT_OK && zero == n) rc = rt_write(s, T->name, T->dtype, T->rank, T->shape, w, (size_t)T->bytes);
    free(w);
  }
  /* Inputs: token ids below every vocabulary they index. */
  uint64_t r = 0x853c49e6748fea9bull;
  for (int t = 0; t < S->ntensors && rc == RT_OK; t++) {
    const rt_SchedTensor *T = &S->tensors[t];
    if (T->kind != 0 || T->dtype != 3) continue;
    int32_t *v = malloc((size_t)T->bytes);
    for (int64_t i = 0; i < T->bytes / 4; i++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      v[i] = (int32_t)(r % 200); /* printable-ish bytes; every tiny vocab has >= 256 ids */
    }
    rc = rt_write(s, T->name, T->dtype, T->rank, T->shape, v, (size_t)T->bytes);
    free(v);
  }
  for (int t = 0; t < S->ntensors && rc == RT_OK; t++)
    if (S->tensors[t].kind <= 3) rc = dump(s, man, argv[1], t, "before");
  /* STEP_DUMP_STEPS=N: N steps on the same batch (default 1). */
  const char *ns = getenv("STEP_DUMP_STEPS");
  for (int i = 0, n = ns ? atoi(ns) : 1; i < n && rc == RT_OK; i++) rc = rt_step(s);
  for (int t = 0; t < S->ntensors && rc == RT_OK; t++)
    if ((S->tensors[t].kind >= 1 && S->tensors[t].kind <= 3) || S->tensors[t].is_output)
      rc = dump(s, man, argv[1], t, "after");
  if (fclose(man) != 0 && rc == RT_OK) rc = RT_EINVAL;
  if (rc != RT_OK) {
    fprintf(stderr, "step_dump: %s: %s\n", rt_status_name(rc), rt_error(s));
    return 1;
  }
  rt_close(s);
  return 0;
}
