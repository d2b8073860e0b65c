/*
 * test_sim.c - the schedule family, the layout and the simulator on a graph
 * small enough to check by hand: exact live bytes per step for each
 * decision, and one hand-broken plan per rule of the plan semantics, each
 * rejected with its message.
 */
#include "ration.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>

/* x, w, gw: 16 B each, resident (gw from its zero step before b1, its
 * first user). a1 32 B, a2 64 B stashed; loss an output. */
static const char *tiny_graph =
    "{\"format\": \"ration-graph/1\", \"name\": \"tiny\", \"outputs\": [\"loss\"],"
    " \"tensors\": ["
    "  {\"name\": \"x\", \"shape\": [4], \"dtype\": \"f32\", \"kind\": \"input\"},"
    "  {\"name\": \"w\", \"shape\": [4], \"dtype\": \"f32\", \"kind\": \"param\"},"
    "  {\"name\": \"gw\", \"shape\": [4], \"dtype\": \"f32\", \"kind\": \"grad\"},"
    "  {\"name\": \"a1\", \"shape\": [8], \"dtype\": \"f32\"},"
    "  {\"name\": \"a2\", \"shape\": [16], \"dtype\": \"f32\"},"
    "  {\"name\": \"loss\", \"shape\": [1], \"dtype\": \"f32\"},"
    "  {\"name\": \"da2\", \"shape\": [16], \"dtype\": \"f32\"},"
    "  {\"name\": \"da1\", \"shape\": [8], \"dtype\": \"f32\"}],"
    " \"ops\": ["
    "  {\"name\": \"f1\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"x\", \"w\"], \"outputs\": [\"a1\"], \"flops\": 1e6, \"bytes\": 0},"
    "  {\"name\": \"f2\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"a1\"], \"outputs\": [\"a2\"], \"flops\": 1e6, \"bytes\": 0},"
    "  {\"name\": \"f3\", \"type\": \"t\", \"phase\": \"forward\", \"inputs\": [\"a2\"], \"outputs\": [\"loss\"], \"flops\": 1e6, \"bytes\": 0},"
    "  {\"name\": \"b3\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"a2\"], \"outputs\": [\"da2\"], \"flops\": 1e6, \"bytes\": 0},"
    "  {\"name\": \"b2\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"da2\", \"a1\"], \"outputs\": [\"da1\"], \"flops\": 1e6, \"bytes\": 0},"
    "  {\"name\": \"b1\", \"type\": \"t\", \"phase\": \"backward\", \"inputs\": [\"da1\", \"x\"], \"outputs\": [\"gw\"], \"flops\": 1e6, \"bytes\": 0},"
    "  {\"name\": \"opt\", \"type\": \"t\", \"phase\": \"optimizer\", \"inputs\": [\"w\", \"gw\"], \"outputs\": [\"w\"], \"flops\": 1e6, \"bytes\": 1000}]}";

/* 1 TFLOP/s: every op takes 1 us (plus 1 us launch); copies at 1 GB/s;
 * the host streams 1 GB/s, so opt (1000 bytes) takes 1 us there. */
static const char *tiny_device =
    "{\"format\": \"ration-device/1\", \"name\": \"tiny-dev\", \"memory\": \"1MiB\", \"reserve\": 0,"
    " \"peak_tflops\": {\"f32\": 1}, \"hbm_gbps\": 1000, \"h2d_gbps\": 1, \"d2h_gbps\": 1, \"launch_us\": 1,"
    " \"host_memory\": \"1GiB\", \"host_memory_gbps\": 1, \"host_cores\": 1}";

static Graph *g;
static Device *d;

static Plan *make(Decision a1, Decision a2) {
  Decision dec[8];
  for (int t = 0; t < 8; t++) dec[t] = DEC_NONE;
  dec[graph_find_tensor(g, "a1")] = a1;
  dec[graph_find_tensor(g, "a2")] = a2;
  Err e;
  Plan *p = plan_from_decisions(g, d, dec, &e);
  if (!p) printf("  plan_from_decisions: %s\n", e.msg);
  else p->budget_bytes = 1 << 20;
  return p;
}

static bool trace_is(Plan *p, const int64_t *want, int n) {
  SimResult r;
  Err e;
  if (sim_run(p, g, d, true, &r, &e)) {
    printf("  sim_run: %s\n", e.msg);
    return false;
  }
  bool same = r.nsteps == n;
  for (int s = 0; same && s < n; s++) same = r.live_bytes[s] == want[s];
  if (!same)
    for (int s = 0; s < r.nsteps; s++) printf("  step %d: %lld bytes\n", s, (long long)r.live_bytes[s]);
  sim_result_free(&r);
  return same;
}

static bool rejected(Plan *p, const char *want) {
  Err e;
  SimResult r;
  int rc = sim_run(p, g, d, false, &r, &e);
  if (rc == 0) {
    sim_result_free(&r);
    printf("  accepted a broken plan (want \"%s\")\n", want);
    return false;
  }
  if (!strstr(e.msg, want)) printf("  got \"%s\", want \"%s\"\n", e.msg, want);
  return strstr(e.msg, want) != NULL;
}

/* a1 and a2 kept; w and gw decided W and GW. */
static Plan *homed(Decision w, Decision gw, Err *e) {
  Decision dec[8];
  for (int t = 0; t < 8; t++) dec[t] = DEC_NONE;
  dec[graph_find_tensor(g, "a1")] = dec[graph_find_tensor(g, "a2")] = DEC_KEEP;
  dec[graph_find_tensor(g, "w")] = w;
  dec[graph_find_tensor(g, "gw")] = gw;
  return plan_from_decisions(g, d, dec, e);
}

static void swap_steps(Plan *p, int a, int b) {
  Step tmp = p->steps[a];
  p->steps[a] = p->steps[b];
  p->steps[b] = tmp;
}

static int find_step(Plan *p, StepKind kind) {
  for (int s = 0; s < p->nsteps; s++)
    if (p->steps[s].kind == kind) return s;
  return -1;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  Err e;
  g = graph_parse("tiny.json", tiny_graph, strlen(tiny_graph), &e);
  d = device_parse("tiny-dev.json", tiny_device, strlen(tiny_device), &e);
  if (!g || !d) {
    printf("FAIL setup: %s\nRESULT 0 1\n", e.msg);
    return 1;
  }
  T_CASE("stashed set is exactly {a1, a2}") {
    T_CHECK(g->nstashed == 2);
    T_CHECK(g->tensors[g->stashed[0]].name[1] == '1' && g->tensors[g->stashed[1]].name[1] == '2');
  }
  T_CASE("keep-all: live bytes per step by hand") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    /* f1 f2 f3 b3 b2 zero(gw) b1 opt: x and w (32 B) all step, gw from
     * its zero step; the peak at b3 (a1 a2 loss da2) holds no grad. */
    static const int64_t want[] = {64, 128, 132, 196, 164, 84, 84, 52};
    T_CHECK(p && trace_is(p, want, 8));
    T_CHECK(p && p->predicted.peak_live_bytes == 196);
    T_CHECK(p && p->arena_bytes >= 196);
    plan_free(p);
  }
  T_CASE("gw zeroed right before b1, its first user, in its home; nothing else zeroed") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    int zeros = 0;
    for (int s = 0; p && s < p->nsteps; s++) zeros += p->steps[s].kind == STEP_ZERO;
    T_CHECK(p && zeros == 1 && p->steps[5].kind == STEP_ZERO && p->steps[6].op == graph_find_op(g, "b1"));
    T_CHECK(p && p->steps[5].to == p->steps[6].outputs[0] && p->buffers[p->steps[5].to].home);
    plan_free(p);
  }
  T_CASE("recompute a2: freed after f3, f2 re-run before b3") {
    Plan *p = make(DEC_KEEP, DEC_RECOMPUTE);
    static const int64_t want[] = {64, 128, 132, 132, 196, 164, 84, 84, 52};
    T_CHECK(p && trace_is(p, want, 9));
    T_CHECK(p && p->steps[3].kind == STEP_COMPUTE && p->steps[3].recompute && p->steps[3].op == 1);
    plan_free(p);
  }
  T_CASE("recompute a1 and a2: f1 re-run feeds the f2 re-run, a1' dies after b2") {
    Plan *p = make(DEC_RECOMPUTE, DEC_RECOMPUTE);
    /* f1 f2 f3 | f1' f2' b3 b2 zero(gw) b1 opt */
    static const int64_t want[] = {64, 128, 100, 68, 132, 196, 164, 84, 84, 52};
    T_CHECK(p && trace_is(p, want, 10));
    T_CHECK(p && p->predicted.recompute_seconds > 0);
    plan_free(p);
  }
  T_CASE("offload a1: offload after f1, wait, prefetch, prefetch_wait before b2") {
    Plan *p = make(DEC_OFFLOAD, DEC_KEEP);
    T_CHECK(p != NULL);
    if (p) {
      int off = find_step(p, STEP_OFFLOAD), ow = find_step(p, STEP_OFFLOAD_WAIT);
      int pf = find_step(p, STEP_PREFETCH), pw = find_step(p, STEP_PREFETCH_WAIT);
      T_CHECK(off == 1 && ow > off && pf > ow && pw > pf);
      T_CHECK(p->host_bytes == 32);
      /* 32 ns copies hide behind 2 us ops: the prefetch is issued one op early. */
      T_CHECK(p->predicted.stall_seconds == 0);
      T_CHECK(p->steps[pf + 1].kind == STEP_COMPUTE && p->steps[pf + 1].op == graph_find_op(g, "b3"));
    }
    plan_free(p);
  }
  T_CASE("copy_compute_share: each copy costs the compute stream that share of its time, as stall") {
    Plan *p = make(DEC_OFFLOAD, DEC_KEEP);
    SimResult r0, r1;
    Err se;
    T_CHECK(p && sim_run(p, g, d, false, &r0, &se) == 0);
    d->copy_compute_share = 0.5;
    T_CHECK(p && sim_run(p, g, d, false, &r1, &se) == 0);
    d->copy_compute_share = 0;
    /* Two 32 ns copies (32 B at 1 GB/s), each hidden behind a 2 us op: half
     * of each lands on the compute stream. */
    T_CHECK(p && fabs(r1.step_seconds - r0.step_seconds - 32e-9) < 1e-15);
    T_CHECK(p && r0.stall_seconds == 0 && fabs(r1.stall_seconds - 32e-9) < 1e-15);
    T_CHECK(p && r1.compute_seconds == r0.compute_seconds);
    plan_free(p);
  }
  T_CASE("w host-homed: prefetched before f1, copied back after opt; its host home lives all step") {
    Plan *p = homed(DEC_HOST, DEC_NONE, &e);
    T_CHECKF(p != NULL, "%s", e.msg);
    if (p) {
      int n = p->nsteps;
      T_CHECK(p->steps[0].kind == STEP_PREFETCH && p->steps[1].kind == STEP_PREFETCH_WAIT);
      T_CHECK(p->buffers[p->steps[0].from].home && p->buffers[p->steps[0].from].space == SPACE_HOST);
      T_CHECK(p->steps[n - 2].kind == STEP_OFFLOAD && p->steps[n - 2].to == p->steps[0].from);
      T_CHECK(p->steps[n - 1].kind == STEP_OFFLOAD_WAIT);
      /* w is on the device over the keep-all peak (b3): the same peak. */
      T_CHECK(p->host_bytes == 16 && p->predicted.peak_live_bytes == 196);
    }
    plan_free(p);
  }
  T_CASE("w host-refetch: its device copy dropped after f1, prefetched again for opt: the peak 16 lower; gw on the device") {
    Plan *p = homed(DEC_HOST_REFETCH, DEC_NONE, &e);
    T_CHECKF(p != NULL, "%s", e.msg);
    int prefetches = 0;
    for (int s = 0; p && s < p->nsteps; s++) prefetches += p->steps[s].kind == STEP_PREFETCH;
    T_CHECK(p && prefetches == 2 && p->predicted.peak_live_bytes == 180);
    plan_free(p);
    T_CHECK(!homed(DEC_HOST_REFETCH, DEC_HOST, &e) && strstr(e.msg, "cannot take decision host")); /* nor a grad */
  }
  T_CASE("opt on the host: gw copied to its home after b1 and waited for, opt runs there, its wait ends the step") {
    Plan *p = homed(DEC_HOST, DEC_HOST_OPTIMIZER, &e);
    T_CHECKF(p != NULL, "%s", e.msg);
    if (p) {
      static const StepKind kinds[] = {STEP_PREFETCH, STEP_PREFETCH_WAIT, STEP_COMPUTE,      STEP_COMPUTE,  STEP_COMPUTE,
                                       STEP_COMPUTE,  STEP_COMPUTE,       STEP_ZERO,         STEP_COMPUTE,  STEP_OFFLOAD,
                                       STEP_OFFLOAD_WAIT, STEP_HOST_COMPUTE, STEP_HOST_WAIT};
      bool same = p->nsteps == 13;
      for (int s = 0; same && s < 13; s++) same = p->steps[s].kind == kinds[s];
      T_CHECK(same);
      int opt = graph_find_op(g, "opt"), w = graph_find_tensor(g, "w"), gw = graph_find_tensor(g, "gw");
      if (same) {
        const Step *hc = &p->steps[11];
        /* opt reads and writes the homes; gw's copy goes from the buffer b1 wrote. */
        T_CHECK(hc->op == opt && p->steps[12].op == opt);
        T_CHECK(p->buffers[hc->inputs[0]].home && p->buffers[hc->inputs[0]].tensor == w);
        T_CHECK(p->buffers[hc->inputs[1]].home && p->buffers[hc->inputs[1]].space == SPACE_HOST &&
                p->buffers[hc->inputs[1]].tensor == gw && p->steps[9].to == hc->inputs[1]);
        T_CHECK(hc->outputs[0] == hc->inputs[0] && p->steps[9].from == p->steps[8].outputs[0] &&
                p->steps[7].to == p->steps[9].from);
      }
      /* w's device copy lives over f1 only, gw's device buffer from its
       * zero step before b1 to its offload_wait: 16 below keep-all's 196 at b3. */
      static const int64_t want[] = {32, 32, 64, 112, 116, 180, 148, 68, 68, 36, 36, 20, 20};
      T_CHECK(trace_is(p, want, 13));
      T_CHECKF(p->host_bytes == PLAN_ALIGNMENT + 16 && p->predicted.peak_live_bytes == 180, "%lld", (long long)p->host_bytes);
      p->budget_bytes = 1 << 20;
      SimResult r;
      T_CHECK(sim_run(p, g, d, false, &r, &e) == 0);
      /* Six 2 us device ops, two 16 ns copies waited for, 1 us of host AdamW waited for at the end. */
      T_CHECKF(fabs(r.step_seconds - 13.032e-6) < 1e-15 && fabs(r.host_seconds - 1e-6) < 1e-15 &&
                   fabs(r.compute_seconds - 12e-6) < 1e-15 && fabs(r.stall_seconds - 1.032e-6) < 1e-15,
               "step %g host %g compute %g stall %g", r.step_seconds, r.host_seconds, r.compute_seconds, r.stall_seconds);
      sim_result_free(&r);
      /* ration-plan/1 carries the decision and the host steps: read back, the same plan. */
      Buf a = {0}, b = {0};
      Plan *q = emit_plan_json(p, g, &a) == 0 ? plan_parse("h.plan.json", a.data, a.len, g, &e) : NULL;
      T_CHECKF(q && emit_plan_json(q, g, &b) == 0 && a.len == b.len && memcmp(a.data, b.data, a.len) == 0, "%s", e.msg);
      T_CHECK(strstr(a.data, "\"gw\": \"host-optimizer\"") && strstr(a.data, "{\"do\": \"host_compute\", \"op\": \"opt\"") &&
              strstr(a.data, "{\"do\": \"host_compute_wait\", \"op\": \"opt\"}"));
      plan_free(q);
      buf_free(&a);
      buf_free(&b);
      /* Schedule ABI 4: opt on the host stream after the compute stream
       * reached it and gw's copy landed; the compute stream waits for it. */
      Buf c = {0};
      T_CHECKF(emit_c_source(p, g, "h", &c, &e) == 0, "%s", e.msg);
      T_CHECK(c.data && strstr(c.data, "{RT_STEP_HOST_COMPUTE, RT_STREAM_HOST, 6, 0, ") &&
              strstr(c.data, "{RT_STEP_HOST_WAIT, RT_STREAM_COMPUTE, 6, 0, -1, -1, -1, -1, "));
      buf_free(&c);
    }
    plan_free(p);
  }
  T_CASE("host-optimizer needs the optimizer's other operands host-homed and a device with host compute") {
    T_CHECK(!homed(DEC_NONE, DEC_HOST_OPTIMIZER, &e) && strstr(e.msg, "\"w\", which \"opt\" updates, is not host-homed"));
    Device none = *d;
    none.host_memory_gbps = 0;
    Decision dec[8];
    for (int t = 0; t < 8; t++) dec[t] = DEC_KEEP;
    dec[graph_find_tensor(g, "w")] = DEC_HOST;
    dec[graph_find_tensor(g, "gw")] = DEC_HOST_OPTIMIZER;
    T_CHECK(!plan_from_decisions(g, &none, dec, &e) && strstr(e.msg, "gives no host compute"));
    /* Only a grad read by one optimizer op takes it. */
    T_CHECK(plan_home_allowed(g, graph_find_tensor(g, "gw"), DEC_HOST_OPTIMIZER));
    T_CHECK(!plan_home_allowed(g, graph_find_tensor(g, "w"), DEC_HOST_OPTIMIZER));
  }
  T_CASE("rules of host ops") {
    Plan *p = homed(DEC_HOST, DEC_HOST_OPTIMIZER, &e);
    T_CHECK(p && p->nsteps == 13);
    if (p && p->nsteps == 13) {
      p->budget_bytes = 1 << 20;
      Step ow = p->steps[10], hc = p->steps[11];
      /* opt before gw's copy landed. */
      p->steps[10] = hc, p->steps[11] = ow;
      T_CHECK(rejected(p, "host_compute reads the home of \"gw\" before its copy landed"));
      p->steps[10] = ow, p->steps[11] = hc;
      /* opt reads gw's device buffer. */
      int home = hc.inputs[1];
      p->steps[11].inputs[1] = p->steps[9].from;
      T_CHECK(rejected(p, "must read and write the host homes of its operands (\"gw\")"));
      p->steps[11].inputs[1] = home;
      /* gw never copied to its home: opt would read last step's grad. */
      Step off = p->steps[9], hw = p->steps[12];
      p->steps[9] = hc, p->steps[10] = hw, p->nsteps = 11;
      T_CHECK(rejected(p, "before the value the device wrote is copied there"));
      p->steps[9] = off, p->steps[10] = ow, p->steps[11] = hc, p->steps[12] = hw, p->nsteps = 13;
      /* The wait missing, or for an op not on the host. */
      p->nsteps--;
      T_CHECK(rejected(p, "host_compute of \"opt\" is never waited for"));
      p->nsteps++;
      p->steps[12].op = graph_find_op(g, "b1");
      T_CHECK(rejected(p, "host_compute_wait for op 5, which has no host_compute in flight"));
      p->steps[12].op = graph_find_op(g, "opt");
      /* A prefetch of w from its home after opt updated it there. */
      int dev = plan_add_buffer(p, graph_find_tensor(g, "w"), -1, 16, SPACE_DEVICE);
      Step *pf = plan_add_step(p, STEP_PREFETCH);
      pf->from = hc.outputs[0], pf->to = dev;
      T_CHECK(rejected(p, "prefetch of \"w\" from its home after a host op updated it"));
      /* A copy of w back over the update. */
      pf->kind = STEP_OFFLOAD, pf->from = p->steps[0].to, pf->to = hc.outputs[0];
      T_CHECK(rejected(p, "copies \"w\" over the update a host op made in its home"));
    }
    plan_free(p);
  }
  T_CASE("rule: a host-homed tensor written but not copied back") {
    Plan *p = homed(DEC_HOST, DEC_NONE, &e);
    T_CHECK(p != NULL);
    if (p) {
      p->budget_bytes = 1 << 20;
      p->nsteps -= 2; /* the copy back and its wait */
      T_CHECK(rejected(p, "is written into buffer"));
      p->nsteps += 2;
      Step dup = p->steps[p->nsteps - 2];
      p->steps[p->nsteps - 1] = dup; /* the copy back twice, never waited for */
      T_CHECK(rejected(p, "back to its home a second time"));
      p->buffers[p->steps[0].from].home = false;
      T_CHECK(rejected(p, "has no home buffer"));
      p->buffers[p->steps[0].from].home = true;
      p->buffers[p->steps[0].to].home = true;
      T_CHECK(rejected(p, "buffers[" ) && rejected(p, "only one buffer of a resident tensor is its home"));
    }
    plan_free(p);
  }
  T_CASE("rule: a missing op") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    free(p->steps[2].inputs);
    free(p->steps[2].outputs);
    memmove(&p->steps[2], &p->steps[3], sizeof(Step) * (size_t)(p->nsteps - 3));
    p->nsteps--;
    T_CHECK(rejected(p, "runs \"b3\" before \"f3\": ops missing or out of graph order"));
    plan_free(p);
  }
  T_CASE("rule: an op run twice") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    p->steps[2].op = 1;
    T_CHECK(rejected(p, "runs \"f2\" a second time"));
    plan_free(p);
  }
  T_CASE("rule: ops out of order") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    swap_steps(p, 4, 6);
    T_CHECK(rejected(p, "runs \"b1\" before \"b2\""));
    plan_free(p);
  }
  T_CASE("rule: a grad written before its zero step, zeroed twice, a zero step on a non-grad") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    swap_steps(p, 5, 6);
    T_CHECK(rejected(p, "before its zero step"));
    plan_free(p);
    p = make(DEC_KEEP, DEC_KEEP);
    Step *z = plan_add_step(p, STEP_ZERO);
    z->to = p->steps[5].to;
    T_CHECK(rejected(p, "a second time"));
    z->to = p->steps[0].outputs[0]; /* a1 */
    T_CHECK(rejected(p, "not a grad's device buffer"));
    plan_free(p);
  }
  T_CASE("rule: a read of a buffer nothing wrote") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    int a2 = graph_find_tensor(g, "a2");
    p->steps[2].inputs[0] = plan_add_buffer(p, a2, -1, 64, SPACE_DEVICE);
    T_CHECK(rejected(p, "before anything wrote it"));
    plan_free(p);
  }
  T_CASE("rule: a read of a buffer after its offload_wait") {
    Plan *p = make(DEC_OFFLOAD, DEC_KEEP);
    int pw = find_step(p, STEP_PREFETCH_WAIT), off = find_step(p, STEP_OFFLOAD);
    /* b2 reads the original residency instead of the prefetched one. */
    p->steps[pw + 1].inputs[1] = p->steps[off].from;
    T_CHECK(rejected(p, "after its offload_wait"));
    plan_free(p);
  }
  T_CASE("rule: a read before the prefetch_wait") {
    Plan *p = make(DEC_OFFLOAD, DEC_KEEP);
    int pw = find_step(p, STEP_PREFETCH_WAIT);
    memmove(&p->steps[pw], &p->steps[pw + 1], sizeof(Step) * (size_t)(p->nsteps - pw - 1));
    p->nsteps--;
    T_CHECK(rejected(p, "before its prefetch_wait"));
    plan_free(p);
  }
  T_CASE("rule: a prefetch before its offload completed") {
    Plan *p = make(DEC_OFFLOAD, DEC_KEEP);
    int ow = find_step(p, STEP_OFFLOAD_WAIT), pf = find_step(p, STEP_PREFETCH);
    Step tmp = p->steps[pf];
    memmove(&p->steps[ow + 1], &p->steps[ow], sizeof(Step) * (size_t)(pf - ow));
    p->steps[ow] = tmp;
    T_CHECK(rejected(p, "before its offload completed"));
    plan_free(p);
  }
  T_CASE("rule: two occupied buffers overlapping in bytes") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    int a1 = p->steps[0].outputs[0], a2 = p->steps[1].outputs[0];
    p->buffers[a2].offset = p->buffers[a1].offset + 8;
    if (p->buffers[a2].offset + 64 > p->arena_bytes) p->arena_bytes = p->buffers[a2].offset + 64;
    T_CHECK(rejected(p, "overlap in device bytes while both are occupied"));
    plan_free(p);
  }
  T_CASE("rule: arena over the budget") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    p->budget_bytes = p->arena_bytes - 1;
    T_CHECK(rejected(p, "is over the budget"));
    plan_free(p);
  }
  T_CASE("rule: an offset past the arena") {
    Plan *p = make(DEC_KEEP, DEC_KEEP);
    p->buffers[0].offset = p->arena_bytes;
    T_CHECK(rejected(p, "past the arena"));
    plan_free(p);
  }
  T_CASE("rule: an offload never waited for") {
    Plan *p = make(DEC_OFFLOAD, DEC_KEEP);
    int ow = find_step(p, STEP_OFFLOAD_WAIT);
    p->steps[ow].kind = STEP_PREFETCH_WAIT;
    p->steps[ow].to = p->steps[ow].from;
    T_CHECK(rejected(p, "prefetch_wait for buffer"));
    plan_free(p);
  }
  T_CASE("sim_step_bound: at most the step laid out, equal with no prefetch, below where a prefetch waits for bytes") {
    /* gpt2-tiny on h100-sxm-80g with slow links, so that prefetches queue
     * and some wait for the bytes they overwrite. */
    Graph *m = graph_load("models/gpt2-tiny.json", &e);
    Device *slow = device_load("budgets/h100-sxm-80g.json", &e);
    T_CHECKF(m && slow, "%s", e.msg);
    if (m && slow) slow->d2h_gbps = slow->h2d_gbps = 2;
    Decision *dec = m ? calloc((size_t)m->ntensors, sizeof *dec) : NULL;
    int above = 0, unequal = 0, below = 0, with_prefetch = 0;
    srand(7);
    for (int it = 0; dec && slow && it < 200; it++) {
      for (int t = 0; t < m->ntensors; t++) dec[t] = DEC_NONE;
      bool offload = it % 4 != 0; /* a quarter with no offload, so no prefetch */
      for (int i = 0; i < m->nstashed; i++) dec[m->stashed[i]] = (Decision)(rand() % (offload ? 3 : 2));
      Plan *p = plan_schedule_decisions(m, slow, dec, &e);
      double bound = p ? sim_step_bound(p, m, slow) : -1;
      if (!p || plan_finish(p, m, slow, &e)) {
        T_CHECKF(0, "vector %d: %s", it, e.msg);
        plan_free(p);
        break;
      }
      bool prefetch = false;
      for (int s = 0; s < p->nsteps; s++) prefetch |= p->steps[s].kind == STEP_PREFETCH;
      double step = p->predicted.step_seconds;
      above += bound > step;
      unequal += !prefetch && bound != step;
      below += bound < step;
      with_prefetch += prefetch;
      plan_free(p);
    }
    T_CHECKF(above == 0 && unequal == 0, "%d bounds above the step, %d unequal with no prefetch", above, unequal);
    T_CHECKF(below > 0 && with_prefetch > 0, "no bound below its step (%d vectors with prefetches)", with_prefetch);
    printf("  %d of 200 vectors with prefetches, %d bounds below the step\n", with_prefetch, below);
    free(dec);
    graph_free(m);
    device_free(slow);
  }
  graph_free(g);
  device_free(d);
  T_DONE();
}
