/*
 * test_rt_profile.c - what rt_op_seconds (and so a profile) reports for ops
 * whose times vary from step to step as on a loaded machine. A hand-written
 * three-op schedule of a custom "nap" kernel: in every step one of the ops
 * is slow (as a preemption lands in some op each step), so every step takes
 * the same time while each op's median is its fast time; and one step has
 * a spike far longer than the rest. The op times must add up to a typical
 * (median) step, and the spike must be left out.
 */
#include "test.h"

#include "../runtime/kernels.h"
#include "../runtime/ration.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { STEPS = 11, SPIKE_STEP = 6 };

static void nap_ms(double ms) {
  struct timespec ts = {0, (long)(ms * 1e6)};
  nanosleep(&ts, NULL);
}

/* Op "which" is slow (20 ms) in the steps where step % 3 == which, fast
 * (5 ms) in the others: every step naps 30 ms. Op 0 naps 500 ms in
 * SPIKE_STEP. Naps of several ms keep a loaded machine's oversleep (about
 * a millisecond a nap) inside the 10% the check allows. */
static int nap(const rt_KernelArgs *a, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  int which = (int)rt_attr(a, "which", 0);
  if (which == 0 && a->step == SPIKE_STEP) nap_ms(500);
  else nap_ms(a->step % 3 == which ? 20 : 5);
  return 0;
}

static const rt_SchedTensor tensors[] = {{"x", 0, 0, 1, 0, {1}, 4}};
static const rt_SchedBuffer buffers[] = {{0, -1, RT_SPACE_DEVICE, 1, 4, 0}};
static const rt_SchedAttr attrs[] = {{"which", 0, NULL}, {"which", 1, NULL}, {"which", 2, NULL}};
static const rt_SchedOp ops[] = {
    {"a", "nap", 0, 1, 0, 0, 1, 0, 0}, {"b", "nap", 0, 1, 0, 1, 1, 1, 0}, {"c", "nap", 0, 1, 0, 2, 1, 2, 0}};
static const int32_t op_io[] = {0, 0, 0};
static const rt_SchedStep steps[] = {{RT_STEP_COMPUTE, RT_STREAM_COMPUTE, 0, 0, 0, -1, -1, -1, 0, 0, -1},
                                     {RT_STEP_COMPUTE, RT_STREAM_COMPUTE, 1, 0, 1, -1, -1, -1, 0, 0, -1},
                                     {RT_STEP_COMPUTE, RT_STREAM_COMPUTE, 2, 0, 2, -1, -1, -1, 0, 0, -1}};
static const int32_t step_io[] = {0, 0, 0};
static const int32_t waits[] = {0};

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

int main(void) {
  const rt_Schedule sc = {RATION_SCHED_ABI, "naps", "test", "naps", "", "cpu", "hand", "not_used", 0, 0,
                          256, 256, 0, 256, 4, 1, 1, 3, 3, 0, tensors, buffers, ops, op_io, attrs, steps,
                          step_io, waits, 3, 3, 3, 0};
  rt_Session *s = NULL;
  char err[512] = "";
  rt_Options o = {.backend = RT_BACKEND_CPU, .flags = RT_OPEN_PROFILE, .seed = 1};
  int rc = rt_kernel_register("nap", nap) == 0 ? rt_open(&sc, &o, &s, err, sizeof err) : -1;
  double step_s[STEPS];
  for (int i = 0; i < STEPS && rc == RT_OK; i++) {
    rt_Stats st;
    if ((rc = rt_step(s)) == RT_OK) rt_stats(s, &st), step_s[i] = st.step_seconds;
  }
  T_CASE("a two-op schedule of a custom kernel runs") T_CHECKF(rc == RT_OK, "%d: %s", rc, s ? rt_error(s) : err);
  if (rc == RT_OK) {
    double a = rt_op_seconds(s, 0), b = rt_op_seconds(s, 1), c = rt_op_seconds(s, 2);
    qsort(step_s + 1, STEPS - 1, sizeof *step_s, cmp_double); /* the first step is left out */
    double typical = step_s[1 + (STEPS - 1) / 2];
    T_CASE("the op times add up to the median step, though each op's median is its fast time")
      T_CHECKF(fabs(a + b + c - typical) < 0.1 * typical, "a %.3f + b %.3f + c %.3f ms, median step %.3f ms",
               a * 1e3, b * 1e3, c * 1e3, typical * 1e3);
    T_CASE("a spike in one step is left out") T_CHECKF(a < 0.04, "a %.3f ms (the spike naps 500 ms)", a * 1e3);
  }
  rt_close(s);
  T_DONE();
}
