/*
 * test_fuzz_replay.c - every fuzz seed (tests/fuzz/SEEDS) and every saved
 * finding (tests/fuzz/regress/TARGET/) through its fuzz target's body, in
 * the normal suite: a finding once fixed stays fixed, and under SAN=1 the
 * seeds get the sanitizers' scrutiny on every run.
 */
#include "fuzz/targets.h"
#include "test.h"

#include <glob.h>

typedef const char *(*TargetFn)(const uint8_t *, size_t);

static TargetFn target_fn(const char *name) {
  if (!strcmp(name, "graph")) return fuzz_graph_one;
  if (!strcmp(name, "device")) return fuzz_device_one;
  if (!strcmp(name, "pipeline")) return fuzz_pipeline_one;
  if (!strcmp(name, "plan")) return fuzz_plan_one;
  if (!strcmp(name, "schedule")) return fuzz_schedule_one;
  return NULL;
}

/* Runs FN on every file GLOB matches; returns how many. */
static int replay(const char *target, TargetFn fn, const char *pattern) {
  glob_t gl;
  if (glob(pattern, 0, NULL, &gl) != 0) return 0;
  int n = 0;
  for (size_t i = 0; i < gl.gl_pathc; i++) {
    Err e;
    size_t len;
    char *text = util_read_file(gl.gl_pathv[i], &len, &e);
    char name[600];
    snprintf(name, sizeof name, "%s: %s", target, gl.gl_pathv[i]);
    T_CASE(name) {
      T_CHECKF(text != NULL, "%s", e.msg);
      const char *why = text ? fn((const uint8_t *)text, len) : NULL;
      T_CHECKF(why == NULL, "%s", why);
    }
    free(text);
    n++;
  }
  globfree(&gl);
  return n;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  size_t len;
  Err e;
  char *seeds = util_read_file("tests/fuzz/SEEDS", &len, &e);
  T_CASE("tests/fuzz/SEEDS reads") T_CHECKF(seeds != NULL, "%s", e.msg);
  int total = 0, targets = 0;
  for (char *line = seeds ? strtok(seeds, "\n") : NULL; line; line = strtok(NULL, "\n")) {
    if (line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = 0;
    TargetFn fn = target_fn(line);
    T_CASE("tests/fuzz/SEEDS names a known target") T_CHECKF(fn != NULL, "%s", line);
    if (!fn) continue;
    targets++;
    char *save = NULL, *globs = tab + 1;
    for (char *pat = strtok_r(globs, " ", &save); pat; pat = strtok_r(NULL, " ", &save)) total += replay(line, fn, pat);
    char regress[128];
    snprintf(regress, sizeof regress, "tests/fuzz/regress/%s/*", line);
    total += replay(line, fn, regress);
  }
  free(seeds);
  T_CASE("seeds found for every target") T_CHECKF(targets == 5 && total >= 100, "%d targets, %d inputs", targets, total);
  T_DONE();
}
