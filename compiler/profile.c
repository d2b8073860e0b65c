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

/* The op times into us (-1 where the file names none), checked. */
static int read_op_times(const Graph *g, const char *path, const cJSON *root, double *us, Err *e) {
  JsonPath po = {NULL, "ops", 0};
  const cJSON *ops = json_get(root, "ops");
  if (json_object(path, &po, ops, e)) return -1;
  for (int i = 0; i < g->nops; i++) us[i] = -1;
  for (const cJSON *it = ops->child; it; it = it->next) {
    JsonPath pk = {&po, it->string, 0};
    int op = graph_find_op(g, it->string);
    if (op < 0) return json_err(e, path, &pk, "no op \"%s\" in graph %s (a profile of another graph?)", it->string, g->name);
    if (us[op] >= 0) return json_err(e, path, &pk, "op \"%s\" is listed twice", it->string);
    if (json_nonneg(path, &pk, it, &us[op], e)) return -1;
  }
  return 0;
}

/* The optional copy figures, starting from the device's own. */
static int read_links(const Device *d, const char *path, const cJSON *root, double v[3], Err *e) {
  static const char *const keys[] = {"d2h_gbps", "h2d_gbps", "copy_compute_share"};
  v[0] = d->d2h_gbps, v[1] = d->h2d_gbps, v[2] = d->copy_compute_share;
  for (int k = 0; k < 3; k++) {
    const cJSON *it = json_get(root, keys[k]);
    JsonPath pk = {NULL, keys[k], 0};
    if (!it) continue;
    if (json_nonneg(path, &pk, it, &v[k], e)) return -1;
    if (k < 2 && !(v[k] > 0)) return json_err(e, path, &pk, "must be > 0");
  }
  return 0;
}

int cost_load_profile(Graph *g, Device *d, const char *path, Err *e) {
  cJSON *root = read_costs(path, e);
  if (!root) return -1;
  double *us = util_xcalloc((size_t)g->nops + 1, sizeof *us), links[3];
  int rc = !us ? err_set(e, "%s: out of memory", path)
               : read_op_times(g, path, root, us, e) || (d && read_links(d, path, root, links, e)) ? -1 : 0;
  if (rc == 0) {
    for (int i = 0; i < g->nops; i++)
      if (us[i] >= 0) g->ops[i].time_us = us[i];
    if (d) d->d2h_gbps = links[0], d->h2d_gbps = links[1], d->copy_compute_share = links[2];
  }
  free(us);
  cJSON_Delete(root);
  return rc;
}
