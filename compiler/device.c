/*
 * device.c - loads a "ration-device/1" device profile (files in budgets/):
 * memory and its reserve, the roofline figures the cost model needs, and the
 * host link speeds that price an offload.
 *
 * Required: name, memory, peak_tflops (with at least "f32", the fallback for
 * every dtype the datasheet does not list), hbm_gbps, h2d_gbps, d2h_gbps.
 * Optional: reserve (0), launch_us (0), host_memory (the bound on a plan's
 * host arena, plan_fits; 0: no limit given), runtime_bytes (0: what libration's backend keeps on the device for
 * the whole run, the CUDA backend's cuBLASLt workspace; planned as a
 * resident tensor, graph_add_runtime_tensor), unified_memory (false: true
 * where device and host are the same memory, so the budget counts both
 * arenas, plan_fits), host_memory_gbps and host_cores (0: absent, no host
 * compute: the host's memory bandwidth that prices an op run on the host,
 * cost_host_op_seconds, and the cores that reach it), source (datasheet
 * provenance, ignored). Other keys are ignored so that profiles can carry notes.
 */
#include "ration.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void device_free(Device *d) {
  if (!d) return;
  free(d->path);
  free(d->name);
  free(d);
}

/* A rate that divides a byte or flop count: must be > 0. */
static int rate(const char *file, const cJSON *root, const char *key, double *out, Err *e) {
  JsonPath p = {NULL, key, 0};
  if (json_nonneg(file, &p, json_get(root, key), out, e)) return -1;
  if (*out <= 0) return json_err(e, file, &p, "must be > 0");
  return 0;
}

static int opt_size(const char *file, const cJSON *root, const char *key, int64_t *out, Err *e) {
  JsonPath p = {NULL, key, 0};
  const cJSON *it = json_get(root, key);
  *out = 0;
  return it ? json_size(file, &p, it, out, e) : 0;
}

/* The optional host compute figures: both or neither, each > 0, the cores
 * a whole number. */
static int host_compute(Device *d, const char *file, const cJSON *root, Err *e) {
  const cJSON *bw = json_get(root, "host_memory_gbps"), *cores = json_get(root, "host_cores");
  if (!bw && !cores) return 0;
  JsonPath pb = {NULL, "host_memory_gbps", 0}, pc = {NULL, "host_cores", 0};
  if (!bw) return json_err(e, file, &pb, "missing (host_cores needs it)");
  if (!cores) return json_err(e, file, &pc, "missing (host_memory_gbps needs it)");
  if (rate(file, root, "host_memory_gbps", &d->host_memory_gbps, e)) return -1;
  int64_t n;
  if (json_int(file, &pc, cores, 1, &n, e)) return -1;
  if (n > 1 << 20) return json_err(e, file, &pc, "must be at most 1048576");
  d->host_cores = (int)n;
  return 0;
}

static int parse_device(Device *d, const char *file, const cJSON *root, Err *e) {
  JsonPath pn = {NULL, "name", 0};
  const char *name;
  if (json_string(file, &pn, json_get(root, "name"), &name, e)) return -1;
  if (!*name) return json_err(e, file, &pn, "empty name");
  if (!(d->name = util_strdup(name))) return err_set(e, "%s: out of memory", file);

  JsonPath pm = {NULL, "memory", 0};
  if (json_size(file, &pm, json_get(root, "memory"), &d->memory, e)) return -1;
  if (d->memory <= 0) return json_err(e, file, &pm, "must be > 0");
  if (opt_size(file, root, "reserve", &d->reserve, e)) return -1;
  if (d->reserve >= d->memory) {
    JsonPath pr = {NULL, "reserve", 0};
    return json_err(e, file, &pr, "reserve (%lld bytes) must be less than memory (%lld bytes)",
                    (long long)d->reserve, (long long)d->memory);
  }
  if (opt_size(file, root, "host_memory", &d->host_memory, e)) return -1;
  if (opt_size(file, root, "runtime_bytes", &d->runtime_bytes, e)) return -1;
  JsonPath pu = {NULL, "unified_memory", 0};
  const cJSON *unified = json_get(root, "unified_memory");
  if (unified && json_bool(file, &pu, unified, &d->unified_memory, e)) return -1;
  if (d->runtime_bytes >= d->memory - d->reserve) {
    JsonPath pr = {NULL, "runtime_bytes", 0};
    return json_err(e, file, &pr, "runtime_bytes (%lld bytes) must be less than memory less reserve (%lld bytes)",
                    (long long)d->runtime_bytes, (long long)(d->memory - d->reserve));
  }

  JsonPath pt = {NULL, "peak_tflops", 0};
  const cJSON *peak = json_get(root, "peak_tflops");
  if (json_object(file, &pt, peak, e)) return -1;
  for (const cJSON *it = peak->child; it; it = it->next) {
    JsonPath pk = {&pt, it->string, 0};
    int dt = -1;
    for (int k = 0; k < DT_COUNT; k++)
      if (strcmp(it->string, graph_dtype_name((DType)k)) == 0) dt = k;
    if (dt < 0)
      return json_err(e, file, &pk, "unknown dtype \"%s\" (expected f32 bf16 f16 i32 i64 u8)", it->string);
    if (json_nonneg(file, &pk, it, &d->peak_tflops[dt], e)) return -1;
  }
  if (!(d->peak_tflops[DT_F32] > 0))
    return json_err(e, file, &pt, "needs \"f32\" > 0 (the fallback for dtypes it does not list)");

  if (rate(file, root, "hbm_gbps", &d->hbm_gbps, e)) return -1;
  if (rate(file, root, "h2d_gbps", &d->h2d_gbps, e)) return -1;
  if (rate(file, root, "d2h_gbps", &d->d2h_gbps, e)) return -1;
  d->launch_us = 0;
  const cJSON *launch = json_get(root, "launch_us");
  JsonPath pl = {NULL, "launch_us", 0};
  if (launch && json_nonneg(file, &pl, launch, &d->launch_us, e)) return -1;
  return host_compute(d, file, root, e);
}

Device *device_parse(const char *path, const char *text, size_t len, Err *e) {
  cJSON *root = json_parse(path, text, len, "ration-device/1", e);
  if (!root) return NULL;
  Device *d = util_xcalloc(1, sizeof *d);
  int rc = d && (d->path = util_strdup(path)) ? parse_device(d, path, root, e)
                                              : err_set(e, "%s: out of memory", path);
  cJSON_Delete(root);
  if (rc) {
    device_free(d);
    return NULL;
  }
  return d;
}

Device *device_load(const char *path, Err *e) {
  size_t len;
  char *text = json_read(path, &len, e);
  if (!text) return NULL;
  Device *d = device_parse(path, text, len, e);
  free(text);
  return d;
}
