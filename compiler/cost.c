/*
 * cost.c - the cost model: how long an op or a host copy takes on a device.
 *
 * Op time, in seconds:
 *   measured (op->time_us >= 0):  time_us * 1e-6
 *       A measured time already contains the launch and every stall of the
 *       kernel, so it replaces the model entirely.
 *   otherwise (roofline):  max(flops / (peak_tflops[dt] * 1e12),
 *                              bytes / (hbm_gbps * 1e9)) + launch_us * 1e-6
 *       dt is the dtype of the op's first floating-point output (f32, bf16,
 *       f16), which is what the op's math runs at; an op without one (an
 *       integer-only op, an in-place update with no outputs) and a dtype the
 *       device lists no figure for fall back to f32, which every device has.
 * Copy time, in seconds: bytes / (h2d_gbps or d2h_gbps * 1e9). Copies run on
 * their own streams, so their launch cost overlaps compute and is left out,
 * except where a profile measured that it does not (copy_compute_share: the
 * CPU backend's copy threads take cores from compute), see sim.c.
 * Host op time (an op the plan runs on the host), in seconds:
 *   bytes / (host_memory_gbps * 1e9); a measured time_us is the device's
 *   and plays no part. An optimizer update does a few flops per byte it
 *   streams, so the host's cores (host_cores) are not its limit.
 * Measured times come from the graph or a ration-costs/1 profile
 * (profile.c).
 */
#include "ration.h"

#include <math.h>

static DType op_dtype(const Graph *g, const Op *op) {
  for (int k = 0; k < op->noutputs; k++) {
    DType dt = g->tensors[op->outputs[k]].dtype;
    if (dt == DT_F32 || dt == DT_BF16 || dt == DT_F16) return dt;
  }
  return DT_F32;
}

double cost_op_seconds(const Graph *g, const Device *d, int op) {
  const Op *o = &g->ops[op];
  if (o->time_us >= 0) return o->time_us * 1e-6;
  double peak = d->peak_tflops[op_dtype(g, o)];
  if (!(peak > 0)) peak = d->peak_tflops[DT_F32];
  double compute = o->flops / (peak * 1e12);
  double memory = o->bytes / (d->hbm_gbps * 1e9);
  return fmax(compute, memory) + d->launch_us * 1e-6;
}

double cost_d2h_seconds(const Device *d, int64_t bytes) { return (double)bytes / (d->d2h_gbps * 1e9); }

double cost_h2d_seconds(const Device *d, int64_t bytes) { return (double)bytes / (d->h2d_gbps * 1e9); }

double cost_host_op_seconds(const Graph *g, const Device *d, int op) {
  if (!(d->host_memory_gbps > 0)) return -1;
  return g->ops[op].bytes / (d->host_memory_gbps * 1e9);
}
