/*
 * test.h - the smallest test harness that works: each test binary calls
 * T_CHECK inside named cases and ends with T_DONE, which prints
 * "RESULT passed failed" for tests/run.sh to add up.
 */
#ifndef TEST_H
#define TEST_H
#include <stdio.h>
#include <string.h>

static int t_passed, t_failed, t_case_failed;
static const char *t_case;

#define T_CASE(name) for (t_case = (name), t_case_failed = 0; t_case; \
  (t_case_failed ? (t_failed++, printf("FAIL %s\n", t_case)) : (t_passed++, printf("ok   %s\n", t_case))), t_case = NULL)

#define T_CHECK(cond) do { if (!(cond)) { t_case_failed = 1; \
  printf("  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)

#define T_CHECKF(cond, ...) do { if (!(cond)) { t_case_failed = 1; \
  printf("  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); printf(__VA_ARGS__); printf("\n"); } } while (0)

#define T_DONE() do { printf("RESULT %d %d\n", t_passed, t_failed); return t_failed != 0; } while (0)
#endif
