/*
 * driver.c - the libFuzzer entry point, built once per target by `make fuzz`
 * with FUZZ_ONE naming a function of targets.h. A broken property aborts so
 * that libFuzzer saves the input like any crash.
 */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *why = FUZZ_ONE(data, size);
  if (why) {
    fprintf(stderr, "fuzz: property broken: %s\n", why);
    abort();
  }
  return 0;
}
