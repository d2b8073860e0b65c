/*
 * profile.c - reads a "ration-costs/1" file (written by libration's
 * rt_write_profile from measured runs) into a graph's per-op time_us, so
 * `ration plan --costs FILE` plans with measured rather than roofline op
 * times, and its optional measured copy figures ("d2h_gbps", "h2d_gbps",
 * "copy_compute_share") into the device. All or nothing: nothing is
 * changed unless the whole file is valid. Ops the file does not name keep
 * their modelled cost.
 */
#include "ration.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static cJSON *read_costs(const char *path, Err *e) {
  size_t len;
  char *text = json_read(path, &len, e);
  if (!text) return NULL;
  cJSON *root = json_parse(path, text, len, "ration-costs/1", e);
  free(text);
  return root;
}

int cost_load_profile(Graph *g, const char *path, Err *e) {
  cJSON *root = read_costs(path, e);
  if (!root) return -1;
  int rc = -1;
  double *us = util_xcalloc((size_t)g->nops + 1, sizeof *us);
  JsonPath po = {NULL, "ops", 0};
  const cJSON *ops = json_get(root, "ops");
  if (!us) {
    err_set(e, "%s: out of memory", path);
    goto done;
  }
  if (json_object(path, &po, ops, e)) goto done;
  for (int i = 0; i < g->nops; i++) us[i] = -1;
  for (const cJSON *it = ops->child; it; it = it->next) {
    JsonPath pk = {&po, it->string, 0};
    int op = graph_find_op(g, it->string);
    if (op < 0) {
      json_err(e, path, &pk, "no op \"%s\" in graph %s (a profile of another graph?)", it->string, g->name);
      goto done;
    }
    if (us[op] >= 0) {
      json_err(e, path, &pk, "op \"%s\" is listed twice", it->string);
      goto done;
    }
    if (json_nonneg(path, &pk, it, &us[op], e)) goto done;
  }
  for (int i = 0; i < g->nops; i++)
    if (us[i] >= 0) g->ops[i].time_us = us[i];
  rc = 0;
done:
  free(us);
  cJSON_Delete(root);
  return rc;
}

int cost_load_profile_links(Device *d, const char *path, Err *e) {
  cJSON *root = read_costs(path, e);
  if (!root) return -1;
  static const char *const keys[] = {"d2h_gbps", "h2d_gbps", "copy_compute_share"};
  double v[3] = {d->d2h_gbps, d->h2d_gbps, d->copy_compute_share};
  int rc = 0;
  for (int k = 0; k < 3 && rc == 0; k++) {
    const cJSON *it = json_get(root, keys[k]);
    JsonPath pk = {NULL, keys[k], 0};
    if (!it) continue;
    if (json_nonneg(path, &pk, it, &v[k], e)) rc = -1;
    else if (k < 2 && !(v[k] > 0)) rc = json_err(e, path, &pk, "must be > 0");
  }
  if (rc == 0) d->d2h_gbps = v[0], d->h2d_gbps = v[1], d->copy_compute_share = v[2];
  cJSON_Delete(root);
  return rc;
}
