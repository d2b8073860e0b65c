/*
 * ab_steps.c - two schedules of one graph (keep-all and a plan) trained in
 * one process, in alternating blocks of steps, each session profiled: the
 * machine's drift (this VM's speed moves by 1.1-1.6x between runs seconds
 * apart) is then common to both, so their op times can be compared op by
 * op. bench/bench_opcache.sh builds and runs it.
 *
 * Usage: ab_steps ROUNDS BLOCK THREADS A.costs.json B.costs.json
 *   Each round runs BLOCK steps of A then BLOCK of B. The first step of
 *   each block (the other session's data in the caches) and the first
 *   round are left out of the step medians printed; the profiles
 *   (rt_write_profile) are the runtime's own, over the last 64 steps.
 * Prints per schedule the median step wall and thread-CPU ms (1 thread:
 * the CPU time is all the kernels' work, much less disturbed by load).
 */
#include "ration.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const rt_Schedule *SCHED_A(void);
const rt_Schedule *SCHED_B(void);

static double thread_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s ROUNDS BLOCK THREADS A.costs.json B.costs.json\n", argv[0]);
    return 2;
  }
  int rounds = atoi(argv[1]), block = atoi(argv[2]), threads = atoi(argv[3]);
  if (rounds < 2 || block < 2) return fprintf(stderr, "ab_steps: ROUNDS and BLOCK must be >= 2\n"), 2;
  const rt_Schedule *sched[2] = {SCHED_A(), SCHED_B()};
  rt_Session *s[2] = {NULL, NULL};
  double *wall[2], *cpu[2];
  int n[2] = {0, 0}, rc = 0;
  char err[512];
  for (int v = 0; v < 2; v++) {
    rt_Options opt = {.backend = RT_BACKEND_CPU, .flags = RT_OPEN_PROFILE, .seed = 1, .threads = threads};
    wall[v] = calloc((size_t)(rounds * block), sizeof *wall[v]);
    cpu[v] = calloc((size_t)(rounds * block), sizeof *cpu[v]);
    if (!wall[v] || !cpu[v]) return fprintf(stderr, "ab_steps: out of memory\n"), 1;
    if (rt_open(sched[v], &opt, &s[v], err, sizeof err) != RT_OK || rt_init_params(s[v], 1, 0.02) != RT_OK)
      return fprintf(stderr, "ab_steps: %s: %s\n", sched[v]->name, s[v] ? rt_error(s[v]) : err), 1;
  }
  for (int r = 0; r < rounds && rc == 0; r++)
    for (int v = 0; v < 2 && rc == 0; v++)
      for (int b = 0; b < block && rc == 0; b++) {
        double c0 = thread_cpu_seconds();
        if (rt_step(s[v]) != RT_OK) {
          fprintf(stderr, "ab_steps: %s: %s\n", sched[v]->name, rt_error(s[v]));
          rc = 1;
          break;
        }
        double c1 = thread_cpu_seconds();
        rt_Stats st;
        rt_stats(s[v], &st);
        if (r > 0 && b > 0) wall[v][n[v]] = st.step_seconds, cpu[v][n[v]++] = c1 - c0;
      }
  for (int v = 0; v < 2; v++) {
    if (rc == 0) {
      printf("%s: step %.3f ms wall, %.3f ms thread CPU (medians of %d steps)\n", sched[v]->name,
             1e3 * median(wall[v], n[v]), 1e3 * median(cpu[v], n[v]), n[v]);
      if (rt_write_profile(s[v], argv[4 + v]) != RT_OK) fprintf(stderr, "ab_steps: %s\n", rt_error(s[v])), rc = 1;
    }
    rt_close(s[v]);
    free(wall[v]);
    free(cpu[v]);
  }
  return rc;
}
