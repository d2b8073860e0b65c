/*
 * ration.h - the compiler's one internal header.
 *
 * Sections follow the pipeline: util, graph, device, cost, plan, layout,
 * sim, strategies, emit, model, report. Every exported symbol carries its
 * module's prefix. Library functions report errors through an Err and a
 * negative return; only main.c exits.
 */
#ifndef RATION_H
#define RATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RATION_VERSION "0.1.0"

/* ---------------------------------------------------------------- util */

/* One line, already prefixed with "FILE: JSON.PATH: " by whoever set it. */
typedef struct Err {
  char msg[1024];
} Err;

int err_set(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checked arithmetic on byte counts: false on overflow past INT64_MAX. */
bool util_mul_i64(int64_t a, int64_t b, int64_t *out);
bool util_add_i64(int64_t a, int64_t b, int64_t *out);
int64_t util_align_up(int64_t x, int64_t align);

/* "80GiB", "512 MB" or a plain JSON integer; false on a missing or bad unit. */
bool util_parse_size(const char *s, int64_t *out);
/* Human-readable size ("1.50 GiB") into buf. */
const char *util_fmt_bytes(int64_t bytes, char *buf, size_t n);
/* CLOCK_MONOTONIC seconds: for deadlines and reported wall times only. */
double util_now(void);
/* fn(ctx, i) once for every i in [0, n), on up to util_threads() threads,
 * the caller's among them; returns when all are done. The result is the
 * same on any number of threads wherever fn(ctx, i) writes only what
 * belongs to i and reads nothing another i writes. */
void util_parallel_for(int n, void (*fn)(void *ctx, int i), void *ctx);
/* $RATION_THREADS, else the online CPUs; 1 to UTIL_MAX_THREADS. */
#define UTIL_MAX_THREADS 16
int util_threads(void);

/* Whole file into a NUL-terminated malloc'd buffer; whatever PATH is (a
 * FIFO, a device, standard input), more than JSON_MAX_FILE_BYTES is an
 * error, found without holding more than that. */
char *util_read_file(const char *path, size_t *len, Err *e);
/* Write to a temporary then rename: never a half-written PATH. */
int util_write_file_atomic(const char *path, const char *data, size_t len, Err *e);
/* Several outputs as one set: every file is written and synced before any
 * is renamed into place, so a failure leaves the previous set untouched
 * and no temporary behind. A target that is not a regular file (a device,
 * a FIFO) is written into, never replaced; a directory is refused; a
 * replaced file keeps its mode. */
typedef struct OutFile {
  const char *path;
  const char *data;
  size_t len;
} OutFile;
int util_write_files_atomic(const OutFile *files, int n, Err *e);
void util_sha256_hex(const void *data, size_t len, char out[65]);

void *util_xcalloc(size_t n, size_t size); /* NULL on failure, never aborts */
char *util_strdup(const char *s);

/* A growable string for emitters. */
typedef struct Buf {
  char *data;
  size_t len, cap;
  bool failed; /* an allocation failed; the contents are incomplete */
} Buf;
void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(Buf *b);
/* One CSV field, quoted, with a leading formula character neutralized. */
void util_csv_field(Buf *o, const char *s);

/* The length (1 to 4) of the UTF-8 character at S, at most N bytes, and its
 * code point in *CP; 0 when S does not start one (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF, no sequence cut short). */
size_t util_utf8_char(const char *s, size_t n, uint32_t *cp);
/* The length of S's longest prefix of whole characters of at most MAX
 * bytes: where a name is cut to fit, it is cut between characters. */
size_t util_utf8_prefix(const char *s, size_t max);
/* S as a terminal may show it, appended to OUT: escape sequences (ESC and
 * C1 introduced: CSI, OSC, DCS, ...) and other control characters (C0, DEL,
 * C1) removed, each byte that is not UTF-8 replaced by '?'. Newlines and
 * tabs stay unless ONE_LINE, which turns each into a space. */
void util_term_text(Buf *out, const char *s, size_t n, bool one_line);

/* ---------------------------------------------------------------- json */

/* Validated reading of cJSON trees, shared by every loader. A JsonPath is
 * a chain of stack frames (a key or an array index) that is only turned
 * into text ("ops[12].inputs[1]") when an error is reported. */
struct cJSON;
typedef struct JsonPath {
  const struct JsonPath *up;
  const char *key; /* NULL for an array element */
  int index;
} JsonPath;

#define JSON_MAX_FILE_BYTES (1LL << 30)
#define JSON_MAX_ITEMS 1000000 /* tensors, ops, buffers, steps */
/* The largest byte count anything carries (a graph's tensors and workspaces
 * together, a device size, a budget): 2^53 = 8 PiB, exact as a JSON number,
 * so every plan written can be read back, and sums of a few such counts
 * never come near int64's limit. */
#define JSON_MAX_BYTES (1LL << 53)

/* "FILE: PATH: message" (or "FILE: message" at the root). Returns -1. */
int json_err(Err *e, const char *file, const JsonPath *p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void json_path_str(const JsonPath *p, char *buf, size_t n);
/* FILE's bytes (at most JSON_MAX_FILE_BYTES), NUL-terminated, malloc'd. */
char *json_read(const char *file, size_t *len, Err *e);
/* Parses text; the root must be an object whose "format" is want. */
struct cJSON *json_parse(const char *file, const char *text, size_t len, const char *want, Err *e);
/* Field readers: item is the value (NULL when absent; "missing" is an
 * error), p its path. */
int json_string(const char *file, const JsonPath *p, const struct cJSON *item, const char **out, Err *e);
int json_number(const char *file, const JsonPath *p, const struct cJSON *item, double *out, Err *e);
/* A finite number >= 0. */
int json_nonneg(const char *file, const JsonPath *p, const struct cJSON *item, double *out, Err *e);
/* An integral number in [lo, 2^53]. */
int json_int(const char *file, const JsonPath *p, const struct cJSON *item, int64_t lo, int64_t *out, Err *e);
int json_bool(const char *file, const JsonPath *p, const struct cJSON *item, bool *out, Err *e);
/* An array or object with at most JSON_MAX_ITEMS members; *n its size. */
int json_array(const char *file, const JsonPath *p, const struct cJSON *item, int *n, Err *e);
int json_object(const char *file, const JsonPath *p, const struct cJSON *item, Err *e);
/* A byte size: a JSON integer or a string with a unit (util_parse_size). */
int json_size(const char *file, const JsonPath *p, const struct cJSON *item, int64_t *out, Err *e);
/* The member named key of obj, or NULL. */
const struct cJSON *json_get(const struct cJSON *obj, const char *key);

/* --------------------------------------------------------------- graph */

typedef enum { DT_F32, DT_BF16, DT_F16, DT_I32, DT_I64, DT_U8, DT_COUNT } DType;
typedef enum { KIND_INPUT, KIND_PARAM, KIND_GRAD, KIND_OPTSTATE, KIND_ACTIVATION, KIND_COUNT } Kind;
typedef enum { PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_COUNT } Phase;

#define GRAPH_MAX_RANK 8

typedef struct Tensor {
  char *name;
  int rank;
  int64_t shape[GRAPH_MAX_RANK];
  DType dtype;
  Kind kind;
  int64_t bytes;
  /* Derived at load: */
  int producer;   /* op index of the (only) producer of an activation, else -1 */
  int first_read; /* first op reading it, -1 if none */
  int last_read;  /* last op reading it, -1 if none */
  int last_write; /* last op writing it, -1 if none */
  int last_fwd_read;  /* last forward-phase op reading it, -1 if none */
  int first_bwd_read; /* first non-forward op reading it, -1 if none */
  int first_use;  /* first op reading or writing it, -1 if none */
  bool frozen;    /* a param that does not train: no grad, no optimizer state (LoRA's base) */
  bool is_output; /* listed in the graph's "outputs": live to the end */
  bool stashed;   /* activation produced in forward, read after forward */
} Tensor;

typedef struct Attr {
  char *key;
  double num;
  char *str; /* non-NULL for a string attribute */
} Attr;

typedef struct Op {
  char *name;
  char *type;
  Phase phase;
  int ninputs, noutputs;
  int *inputs;  /* tensor indices */
  int *outputs; /* tensor indices */
  int nattrs;
  Attr *attrs;
  double flops, bytes;
  double time_us; /* measured; < 0 when absent */
  int64_t workspace;
} Op;

typedef struct Graph {
  char *path;
  char *name;
  char sha256[65];
  int ntensors, nops;
  Tensor *tensors;
  Op *ops;
  int *stashed; /* indices of stashed tensors, in producer order */
  int nstashed;
  struct GraphIndex *index; /* name lookup, private to graph.c; NULL = linear */
} Graph;

/* Load, validate and derive; NULL with e set on any problem. */
Graph *graph_load(const char *path, Err *e);
Graph *graph_parse(const char *path, const char *text, size_t len, Err *e);
void graph_free(Graph *g);
int graph_find_tensor(const Graph *g, const char *name);
int graph_find_op(const Graph *g, const char *name);
const char *graph_dtype_name(DType d);
const char *graph_kind_name(Kind k);
const char *graph_phase_name(Phase p);
int graph_dtype_size(DType d);
/* Numeric attribute, or dflt when absent. */
double graph_attr(const Op *op, const char *key, double dflt);
/* True for kinds resident for the whole step (input, param, grad, optstate). */
bool graph_is_resident(const Tensor *t);
/* A device's runtime_bytes as the input tensor GRAPH_RUNTIME_TENSOR (u8,
 * BYTES long; nothing when BYTES is 0). libration's CUDA backend finds it
 * by the same name (RT_RUNTIME_TENSOR) and keeps its workspace there. */
#define GRAPH_RUNTIME_TENSOR "ration.runtime"
int graph_add_runtime_tensor(Graph *g, int64_t bytes, Err *e);

/* -------------------------------------------------------------- device */

typedef struct Device {
  char *path;
  char *name;
  int64_t memory, reserve, host_memory;
  int64_t runtime_bytes; /* what the runtime keeps on the device beside the plan's tensors */
  /* Device and host are the same memory (the CPU backend's two arenas are
   * one RAM): the budget counts both arenas, and an offload saves nothing. */
  bool unified_memory;
  double peak_tflops[DT_COUNT]; /* 0 where the datasheet gives nothing */
  double hbm_gbps, h2d_gbps, d2h_gbps, launch_us;
  /* The share of a copy's time the compute stream loses when it issues the
   * copy: 0 for copy engines (every device file); measured on the CPU
   * backend, whose copy threads compete with compute for the cores
   * (a profile's "copy_compute_share"). */
  double copy_compute_share;
  /* Host compute (an optimizer update run on the host): the host's memory
   * bandwidth in GB/s and its cores; 0 where the profile gives none, and
   * then nothing runs on the host. */
  double host_memory_gbps;
  int host_cores;
} Device;

Device *device_load(const char *path, Err *e);
Device *device_parse(const char *path, const char *text, size_t len, Err *e);
void device_free(Device *d);

/* ---------------------------------------------------------------- cost */

/* Seconds: roofline (or measured time_us) plus launch overhead. */
double cost_op_seconds(const Graph *g, const Device *d, int op);
double cost_d2h_seconds(const Device *d, int64_t bytes);
double cost_h2d_seconds(const Device *d, int64_t bytes);
/* Seconds an op takes run on the host: its bytes over host_memory_gbps
 * (an optimizer update streams its state once and is memory-bound on any
 * number of cores); -1 on a device without host compute. */
double cost_host_op_seconds(const Graph *g, const Device *d, int op);
/* Overrides op times with a ration-costs/1 file ({"ops": {"name": us}}) and,
 * when d is given, the device's copy figures with the file's optional
 * measured "d2h_gbps", "h2d_gbps", "copy_compute_share". */
int cost_load_profile(Graph *g, Device *d, const char *path, Err *e);

/* ---------------------------------------------------------------- plan */

/* Stashed activations take keep, recompute or offload. A param or optimizer
 * state may instead be host-homed (DEC_HOST: its value lives in a host
 * buffer between steps, a device copy is prefetched before its first use
 * and, when the step writes it, copied back after its last write) and a
 * param read in the forward and again after it may also drop that copy
 * between the two (DEC_HOST_REFETCH: prefetched again for its backward
 * use). DEC_NONE on a resident tensor: on the device for the whole step.
 * DEC_HOST_OPTIMIZER on a grad: the optimizer op that reads it runs on the
 * host (its other operands host-homed), the grad's home is a host buffer
 * its device buffer is copied to after its last accumulation
 * (docs/PLANNING.md 1.4). */
typedef enum { DEC_KEEP, DEC_RECOMPUTE, DEC_OFFLOAD, DEC_NONE, DEC_HOST, DEC_HOST_REFETCH, DEC_HOST_OPTIMIZER } Decision;
typedef enum { SPACE_DEVICE, SPACE_HOST } Space;
/* STEP_ZERO fills a grad's device buffer with zeros right before the first
 * op that uses it: the buffer is occupied from there, not for the whole
 * step. STEP_HOST_COMPUTE runs an op on the host stream over host buffers;
 * STEP_HOST_WAIT makes the compute stream wait for it. */
typedef enum {
  STEP_COMPUTE, STEP_OFFLOAD, STEP_OFFLOAD_WAIT, STEP_PREFETCH, STEP_PREFETCH_WAIT, STEP_ZERO, STEP_HOST_COMPUTE,
  STEP_HOST_WAIT, STEP_KIND_COUNT
} StepKind;

typedef struct Buffer {
  int tensor;       /* -1 for workspace */
  int workspace_of; /* op index for workspace, else -1 */
  int64_t bytes;
  Space space;
  int64_t offset;
  /* The buffer that holds a resident tensor between steps (one per
   * resident tensor: its device buffer, or the host buffer of a host-homed
   * one): occupied for the whole step, read and written by rt_read/rt_write. */
  bool home;
} Buffer;

typedef struct Step {
  StepKind kind;
  int op;         /* compute, host_compute, host_compute_wait */
  bool recompute; /* compute */
  int *inputs, *outputs; /* compute, host_compute: buffer ids, op order */
  int workspace;  /* compute: buffer id or -1 */
  int from, to;   /* copies: buffer ids (from/to as in the JSON); zero: to */
} Step;

typedef struct SolverInfo {
  char name[16];
  char status[16]; /* optimal feasible time_limit not_used */
  double objective, bound, gap, seconds;
  /* The counted work of every solve behind the plan: simplex iterations
   * and branch-and-bound nodes (a function of the inputs and options, as
   * the plan is, without a time limit). */
  int64_t simplex_iterations, nodes;
  char note[640]; /* what went wrong on the way to a plan that still stands; not in the plan file */
  /* When the ilp found no plan: the smallest budget it planned on the way
   * (plan_ilp_min_budget's answer, from the same counted solve, so a
   * caller need not solve it again; < 0: none; plan_decide_ilp's
   * decisions are then that budget's plan); not in the plan file. */
  bool min_budget_known;
  int64_t min_budget;
  /* The ilp ran without the proof tree that would have raised its bound
   * (PlanOptions.defer_proof); not in the plan file. */
  bool proof_deferred;
} SolverInfo;

typedef struct Predicted {
  double step_seconds, compute_seconds, recompute_seconds, stall_seconds;
  int64_t peak_live_bytes, keep_all_peak_bytes;
} Predicted;

typedef struct Plan {
  char *path; /* file it was read from (malloc'd), NULL when made in memory */
  char graph_name[256];
  char graph_sha256[65];
  char device[128];
  char strategy[32];
  int64_t budget_bytes, arena_bytes, host_bytes, alignment;
  Predicted predicted;
  SolverInfo solver;
  Decision *decisions; /* per graph tensor; DEC_NONE for non-stashed */
  int nbuffers, nsteps;
  Buffer *buffers;
  Step *steps;
  int buffers_cap, steps_cap; /* allocation sizes of the two arrays */
} Plan;

/* Every buffer's offset in both arenas is a multiple of this. */
#define PLAN_ALIGNMENT 256

/* Steps and buffers a plan may hold: beyond it plan_add_* fail (sync and
 * the schedule tables count in int). */
#define PLAN_MAX_ENTRIES (1 << 26)

Plan *plan_new(const Graph *g);
void plan_free(Plan *p);
int plan_add_buffer(Plan *p, int tensor, int workspace_of, int64_t bytes, Space space);
Step *plan_add_step(Plan *p, StepKind kind);
const char *plan_decision_name(Decision d);
/* The step kind's name in ration-plan/1 ("compute", ..., "zero"). */
const char *plan_step_kind_name(StepKind k);
/* Whether resident tensor t may take decision d: DEC_NONE always; DEC_HOST
 * for params and optimizer state; DEC_HOST_REFETCH for params read in the
 * forward and used after it, never written in the forward. */
bool plan_home_allowed(const Graph *g, int t, Decision d);
/* The optimizer op that may run on the host with grad t (decision
 * DEC_HOST_OPTIMIZER), or -1: t is a grad read by exactly one op, an
 * optimizer op whose other operands are params and optimizer state that
 * no later op touches. */
int plan_host_optimizer_op(const Graph *g, int t);
/* Whether dec runs op on the host: an input of it is a grad decided
 * DEC_HOST_OPTIMIZER. */
bool plan_op_on_host(const Graph *g, const Decision *dec, int op);
/* Marks each resident tensor's home: its host buffer flagged home, else its
 * first device buffer (ration-plan/1 files before "home" name none). */
void plan_mark_homes(Plan *p, const Graph *g);

/* The schedule family: decisions (one per stashed tensor) -> steps and
 * buffers, offsets unassigned. Shared by every strategy so that a plan is a
 * function of its decisions. */
int plan_build_schedule(Plan *p, const Graph *g, const Device *d, Err *e);

/* Reads a ration-plan/1 file against its graph. */
Plan *plan_load(const char *path, const Graph *g, Err *e);
int plan_read_device(const char *path, char *out, size_t cap, Err *e);
Plan *plan_parse(const char *path, const char *text, size_t len, const Graph *g, Err *e);

/* -------------------------------------------------------------- layout */

/* Assigns offsets to every buffer (device and host arenas); sets
 * arena_bytes and host_bytes. */
int layout_assign(Plan *p, const Graph *g, Err *e);

/* One arena's problem: each item occupies its bytes over steps
 * [first, last] (0 <= first <= last). */
typedef struct LayoutItem {
  int64_t bytes;
  int first, last;
} LayoutItem;
/* Offsets (multiples of align) such that items whose steps overlap never
 * share a byte, and *arena = max(offset + bytes) as small as the search
 * finds (never above its first candidate, largest first with best fit).
 * Deterministic. 0, -1 out of memory, -2 the arena could pass 2^62 bytes. */
int layout_pack(const LayoutItem *items, int n, int64_t align, int64_t *offset, int64_t *arena);
/* No layout's arena is below this: at each step, the live items' aligned
 * sizes less the largest padding among them (the highest needs none);
 * -1 out of memory. */
int64_t layout_lower_bound(const LayoutItem *items, int n, int64_t align);
/* layout_lower_bound of a built plan's device arena (offsets not needed):
 * a plan whose arena must stay within a cap is over it, without a
 * layout's search, when this is; -1 out of memory. */
int64_t layout_device_lower_bound(const Plan *p, const Graph *g);
/* Between layout_memo_enter and its leave, layout_pack packs each list of
 * items once and remembers it (a planning run's searches lay out many
 * plans of the same buffers); the offsets are those it computes without.
 * One memo per process, shared by every thread, freed at the last leave;
 * layout_memo_size: how many packs it holds. */
void layout_memo_enter(void);
void layout_memo_leave(void);
int layout_memo_size(void);

/* ----------------------------------------------------------------- sim */

typedef struct SimResult {
  int64_t peak_live_bytes;
  int peak_step;
  int64_t peak_host_bytes;
  double step_seconds, compute_seconds, recompute_seconds, stall_seconds;
  double host_seconds; /* the host stream's busy time (ops run on the host) */
  int64_t *live_bytes; /* per step, nsteps entries; NULL unless asked */
  int nsteps;
} SimResult;

/* Occupancy of every buffer: first and last step index (DESIGN.md's plan
 * semantics). Arrays of nbuffers entries, filled by the caller's memory.
 * Workspace and resident buffers included. Returns -1 only on a plan that
 * references unknown buffers (sim_check reports those properly). */
int sim_occupancy(const Plan *p, const Graph *g, int *first, int *last);

/* Checks every rule of the plan semantics; e names the step and rule. */
int sim_check(const Plan *p, const Graph *g, Err *e);
/* Peak live bytes on the device and the host from the occupancy (offsets
 * play no part), and per-step device bytes into r->live_bytes when that is
 * not NULL; -1 when out of memory. */
int sim_live(const Plan *p, const int *first, const int *last, SimResult *r);
/* Live bytes and the three-stream time; with_trace keeps per-step bytes. */
int sim_run(const Plan *p, const Graph *g, const Device *d, bool with_trace, SimResult *r, Err *e);
void sim_result_free(SimResult *r);
/* At most the step sim_run finds for p however its buffers are laid out
 * (every time of the replay only grows with the waits for bytes a prefetch
 * overwrites, the one place offsets enter): so a plan built up to its
 * schedule can be judged before its layout is paid for. p is not checked;
 * -1 when out of memory or where a host op has no host compute. */
double sim_step_bound(const Plan *p, const Graph *g, const Device *d);

/* ---------------------------------------------------------- strategies */

typedef struct PlanOptions {
  const char *strategy; /* keep-all checkpoint-layers sqrt-n offload-all knapsack ilp exact */
  const char *solver;   /* glpk | cbc */
  int64_t budget_bytes;
  double time_limit;    /* seconds, a hard cap on the command; <= 0: none (every limit is counted work) */
  double deadline;      /* CLOCK_MONOTONIC seconds at which time_limit runs out (the command's start + it); 0: from the solve's start */
  bool quiet;           /* no progress lines on stderr */
  /* Decisions to start from, e.g. the same strategy's plan at a smaller
   * budget (which then bounds the answer: it fits here too), or NULL. */
  const Decision *hint;
  /* The ilp strategy keeps every resident tensor on the device (the
   * activation ilp alone, its own refusal where it finds no plan). */
  bool device_homes_only;
  /* The memory-minimizing plan of this graph (and its arena) from an
   * earlier ilp run on the same device with as much host memory or more
   * and no hint, or NULL: taken instead of that solve, the same one, where
   * its offloads fit this device's host memory (plan_homes.c asks the ilp
   * again at the smallest budget the first run named). */
  const Decision *least_plan;
  int64_t least_arena;
  /* The caller reports a bound of its own (plan_homes.c's activation
   * solves: plan_settle_solver replaces the ilp's): the ilp runs no tree
   * whose only task is to prove its gap. */
  bool no_proof;
  /* The caller may replace the bound (plan_homes.c, where a plan with
   * homes wins): the ilp leaves out the proof tree and says so in
   * SolverInfo.proof_deferred; the caller solves again without this where
   * the ilp's plan stands. */
  bool defer_proof;
  /* Where a plan with homes wins, its bound is also taken from the
   * relaxation of the model with homes (plan_ilp_homes_bound): a tighter
   * gap for one more LP, 0.1-11 s CPU on the checked-in models (`ration
   * plan --tight-bound`); otherwise the compute-only plan_homes_bound_us. */
  bool homes_bound;
} PlanOptions;

/* A strategy fills dec[] (one entry per graph tensor; only stashed tensors
 * are read) and may fill the solver info. It returns 0, or -1 with e set
 * (an infeasible budget is an error naming the smallest budget it can meet). */
typedef int (*PlanDecideFn)(const Graph *g, const Device *d, const PlanOptions *o,
                            Decision *dec, SolverInfo *si, Err *e);
/* A strategy whose schedules lie outside the family builds its plan itself
 * (laid out and simulated, budget not checked). */
typedef Plan *(*PlanBuildFn)(const Graph *g, const Device *d, const PlanOptions *o, SolverInfo *si, Err *e);
typedef struct PlanStrategy {
  const char *name;
  PlanDecideFn decide;
  PlanBuildFn build; /* NULL for strategies of the family */
} PlanStrategy;
/* NULL-terminated table of every strategy, in plan_strategies.c. */
extern const PlanStrategy plan_strategies[];
const PlanStrategy *plan_find_strategy(const char *name);
int plan_decide_keep_all(const Graph *g, const Device *d, const PlanOptions *o,
                         Decision *dec, SolverInfo *si, Err *e);
/* Baselines, in plan_baselines.c. */
int plan_decide_checkpoint_layers(const Graph *g, const Device *d, const PlanOptions *o,
                                  Decision *dec, SolverInfo *si, Err *e);
int plan_decide_sqrt_n(const Graph *g, const Device *d, const PlanOptions *o,
                       Decision *dec, SolverInfo *si, Err *e);
int plan_decide_offload_all(const Graph *g, const Device *d, const PlanOptions *o,
                            Decision *dec, SolverInfo *si, Err *e);
int plan_decide_knapsack(const Graph *g, const Device *d, const PlanOptions *o,
                         Decision *dec, SolverInfo *si, Err *e);
/* Checkmate's MILP over arbitrary recomputation, in plan_exact.c (CBC). */
Plan *plan_build_exact(const Graph *g, const Device *d, const PlanOptions *o, SolverInfo *si, Err *e);
/* The same MILP with budget_bytes bounding peak live bytes only (no layout
 * retry): the optimum that the family's gap is measured against. */
Plan *plan_exact_for_peak(const Graph *g, const Device *d, const PlanOptions *o, SolverInfo *si, Err *e);

/* The ILP (compiler/ilp/): decide, its model's peak for any decision vector
 * (equal to the simulator's), and the smallest arena it can reach. */
int plan_decide_ilp(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e);
/* The ilp strategy (plan_homes.c): the ilp with everything resident on the
 * device, or where it finds no plan, the fewest params and optimizer state
 * host-homed (by a fixed order) that let it meet the budget. */
int plan_decide_placed(const Graph *g, const Device *d, const PlanOptions *o, Decision *dec, SolverInfo *si, Err *e);
/* The peak below which no plan of the ilp strategy exists once host homes
 * are open to it (device not unified_memory, device_homes_only unset, some
 * param or optimizer state may be host-homed): the resident bytes that
 * cannot leave the device plus the largest working set of one op. -1 where
 * homes are closed (the all-device bounds then hold), or out of memory. */
int64_t plan_homes_least_peak(const Graph *g, const Device *d, const PlanOptions *o);
/* A bound on the step time, in us, of every plan the ilp strategy may
 * return once homes are open (docs/PLANNING.md 1.2): every op's device
 * time, less what moving optimizer ops to the host (where the device has
 * host compute) can take off the compute stream while the host stream
 * stays no longer. */
double plan_homes_bound_us(const Graph *g, const Device *d, const PlanOptions *o);
/* What plan_ilp_homes_bound is asked for and answers besides the bound. */
typedef struct HomesSolve {
  /* Not NULL: where the relaxation was solved, the decisions its point
   * rounds to (homes, host optimizers with their operands homed, stashed
   * decisions), and `rounded` set; they may not fit the budget. */
  Decision *point;
  bool rounded;
  /* Not NULL, on graphs of at most 200 ops: the exact model (its memory
   * rows the evaluated model's, every op a window end) is solved as a
   * MILP too, with counted work; where it found a solution, its
   * decisions are written here and `solved` set (they may not fit the
   * budget by layout), with its objective in the model, and `optimal`
   * where the tree closed. */
  Decision *integral;
  /* ... and where not NULL, its relaxation's point rounded as `point`,
   * `exact_rounded` set. */
  Decision *exact_point;
  bool exact_rounded, solved, optimal;
  double objective;
  /* The relaxation's bound and the MILP's (0: none claimed or not run). */
  double lp_bound, milp_bound;
  int64_t simplex_iterations, nodes; /* the work done, added to */
} HomesSolve;
/* A bound on the ilp model's objective (us) of every vector of the
 * family at a budget, homes and host optimizers and activations together:
 * the relaxation of the model with homes (ilp_build_homes_bound,
 * docs/PLANNING.md section 3, "The bound over homes"), or where hs has
 * the MILP run, the larger of the relaxation's and the MILP's bound; 0
 * where none is claimed (copies that take a share of the compute stream,
 * a home or host optimizer the model has no column for, a relaxation
 * unsolved). */
double plan_ilp_homes_bound(const Graph *g, const Device *d, int64_t budget, HomesSolve *hs);
int64_t plan_ilp_predicted_peak(const Graph *g, const Device *d, const Decision *dec, Err *e);
/* The ILP model's objective (us) for a decision vector, -1 outside the model:
 * what the solver minimizes; the plan reports the simulator's step. */
double plan_ilp_objective(const Graph *g, const Device *d, const Decision *dec);
/* The host bytes the ILP's host row counts for a decision vector (each
 * offloaded tensor and host home, aligned: plan_host_bound's), -1 outside
 * the model; at least the plan's host arena. */
int64_t plan_ilp_host_bytes(const Graph *g, const Device *d, const Decision *dec);
/* The ilp's search over host homes (host, host-refetch) jointly with the
 * stashed decisions, judged by the model with homes (compiler/ilp/homes.c):
 * from dec (every optimizer op on the device), single changes and
 * exchanges within budget and host memory, in counted evaluations (and
 * until deadline, CLOCK_MONOTONIC seconds). 1 when it found a vector the
 * model times faster (written to dec), 0 when not (dec outside the model
 * or over the budget included), -1 out of memory. */
int plan_ilp_homes_search(const Graph *g, const Device *d, int64_t budget, Decision *dec, double deadline);
/* The copy stalls (us) of one decision vector by the model's stall rows
 * alone and by its copy queues alone; the rows must be bounds of the
 * queues. With lp_us, also the rows' least stalls by the LP with the
 * decisions fixed, which the first must equal. */
int plan_ilp_stalls(const Graph *g, const Device *d, const Decision *dec, double *rows_us, double *queues_us,
                    double *lp_us, Err *e);
/* The tree's cuts at the budget's LP point and at the midpoints between it
 * and the first decision vectors (decs: ndecs * ntensors): how many, the
 * least any cuts its point off by (*cut_off), and the most any cut is
 * violated by the columns of a vector that fits the budget (*worst,
 * relative to the cut's right side; 1 if a row the cuts round is violated
 * at one of the first vectors; fits counts them). Cuts must cut their
 * point off and hold at every integral solution. */
int plan_ilp_cut_check(const Graph *g, const Device *d, int64_t budget, const Decision *decs, int ndecs, int *ncuts,
                       int *fits, double *cut_off, double *worst, Err *e);
/* note (a SolverInfo note's size): GLPK's failure inside the memory-minimizing
 * solve, when the budget returned is only the least found before it. */
int64_t plan_ilp_min_budget(const Graph *g, const Device *d, const PlanOptions *o, char *note, Err *e);
/* The ilp's models a check can evaluate in: the time model, the
 * memory-minimizing one, and the time model with the home columns (the
 * one plans are judged in). */
typedef enum { PLAN_ILP_TIME, PLAN_ILP_MEMORY, PLAN_ILP_WITH_HOMES } PlanIlpModel;
/* The ilp's incremental evaluation against its whole one (eval.c), over n
 * decision vectors (decs: n * ntensors) evaluated in turn in one model:
 * *differ counts the vectors whose peak, objective (bit for bit) or
 * answer at caps just below, at and just above them differ. */
int plan_ilp_eval_check(const Graph *g, const Device *d, PlanIlpModel model, const Decision *decs, int n, int *differ,
                        Err *e);
/* One round of the ilp's pair moves (docs/PLANNING.md 5 step 7) on dec, at
 * the budget, with a relaxation point that takes prefer whole: the best of
 * dec and every pair of tensors moved to prefer's decisions, into out, and
 * its model objective. -1 if dec does not fit. */
int plan_ilp_pair_step(const Graph *g, const Device *d, int64_t budget, const Decision *dec, const Decision *prefer,
                       Decision *out, double *objective, Err *e);
/* Between plan_ilp_bases_enter and its leave (on one thread), each ilp
 * run on a model with no tree starts its relaxation from the last optimal
 * basis of the same model (its shape and host memory) that an earlier run
 * there solved. */
void plan_ilp_bases_enter(void);
void plan_ilp_bases_leave(void);
/* The repair of a fragmentation round's answer (docs/PLANNING.md 5 step 7)
 * on dec, whose arena is ARENA, at the budget: single changes, each the
 * fastest by the simulator among those that fit, else among those that
 * lower the arena. The arena reached; dec is changed in place. Graphs with
 * more than 64 stashed tensors: ARENA, dec unchanged. */
int64_t plan_ilp_repair_arena(const Graph *g, const Device *d, int64_t budget, Decision *dec, int64_t arena);

/* Decisions -> schedule -> layout -> simulation, filling predicted. Does
 * not check the budget. */
Plan *plan_from_decisions(const Graph *g, const Device *d, const Decision *dec, Err *e);
/* The same built up to its schedule: offsets unassigned, predicted unset
 * (plan_finish completes it). */
Plan *plan_schedule_decisions(const Graph *g, const Device *d, const Decision *dec, Err *e);
/* A built plan's layout and simulation, filling predicted. */
int plan_finish(Plan *p, const Graph *g, const Device *d, Err *e);
/* Runs a strategy end to end and checks the result against the budget
 * and the device's host_memory. */
Plan *plan_make(const Graph *g, const Device *d, const PlanOptions *o, Err *e);
/* The relative gap to the bound within which a plan is "optimal" (the
 * ilp's branch and bound stops there too). */
#define PLAN_OPTIMAL_GAP 0.001
/* SI's objective, bound, gap and status for the plan returned, of step
 * STEP_SECONDS, against BOUND_US, a bound over every plan the strategy
 * covers: "optimal" only within PLAN_OPTIMAL_GAP of it, else "time_limit"
 * where TIMED_OUT, else "feasible". */
void plan_settle_solver(SolverInfo *si, double step_seconds, double bound_us, bool timed_out);
/* Adds from's counted work (simplex iterations, nodes) to to's. */
void plan_add_work(SolverInfo *to, const SolverInfo *from);
/* Whether o's --time-limit deadline (set: plan_make sets it) has passed. */
bool plan_past_deadline(const PlanOptions *o);
/* Whether a laid-out plan fits: its arena (with its host arena, on a
 * unified_memory device) within budget and its host arena within the
 * device's host_memory (0: no limit). */
bool plan_fits(const Plan *p, const Device *d, int64_t budget);
/* The host arena bytes that offloading the tensors dec offloads needs at
 * most: their sizes rounded up to the alignment, stacked (every offloaded
 * tensor is on the host at the turn from forward to backward, so the
 * layout is this less the top buffer's padding). */
int64_t plan_host_bound(const Graph *g, const Decision *dec);
/* Tensor t's part of that bound: its bytes rounded up to the alignment. */
int64_t plan_host_share(const Graph *g, int t);
/* The most host bytes plan_host_bound may reach on d so that the host
 * arena fits its host_memory; INT64_MAX where there is no limit, 0 on a
 * unified_memory device (an offload moves bytes within the same memory). */
int64_t plan_host_limit(const Device *d);
/* Keep-all peak live bytes of the graph (what every budget % refers to). */
int64_t plan_keep_all_peak(const Graph *g, const Device *d, Err *e);

/* Static positions of the family, shared by the schedule builder and any
 * strategy that models it (indices are graph op indices). */
/* The op before whose compute grad t's device home is zeroed (a STEP_ZERO),
 * which it occupies from there to the step's end: its first user. -1 for a
 * tensor occupied for the whole step (not a grad, or a grad no op uses). */
int plan_grad_start_op(const Graph *g, int tensor);
/* Appends the zero steps of the grads whose start op is op (in operand
 * order, before op's own compute step); home: tensor -> its device home.
 * -1 when out of memory. */
int plan_add_grad_zeros(Plan *p, const Graph *g, int op, const int *home);
int plan_offload_wait_op(const Graph *g, const Device *d, int tensor);
int plan_prefetch_issue_op(const Graph *g, const Device *d, int tensor, int need_op);
/* The op whose prelude issues a prefetch of BYTES needed at need_op: as late
 * as still hides the copy behind the ops before the need, never at or
 * before after_op (-1: from the step's start). */
int plan_prefetch_issue_after(const Graph *g, const Device *d, int64_t bytes, int need_op, int after_op);
/* A host-homed tensor's copies (schedule.c): the ops whose preludes need
 * its device windows and issue their prefetches (-1 for the second without
 * DEC_HOST_REFETCH: its backward window), its last write (-1: the step
 * never writes it, no copy back) and the op after which the copy back is
 * waited for. rerun_at as plan_family_positions gives it (re-runs of
 * forward ops read it too), or NULL for none. */
typedef struct HomeCopies {
  int need[2], issue[2], last_write, wait_op;
} HomeCopies;
void plan_home_copies(const Graph *g, const Device *d, const Decision *dec, const int *rerun_at, int t, HomeCopies *h);
/* Copies issued at one point queue on their stream by deadline: sorts
 * tensors[0..n) by due[tensor], ties kept in their order (stable). */
void plan_queue_order(int *tensors, int n, const int *due);
/* A forward-produced activation that is not a graph output: its residency
 * follows its decision (stashed) or ends after the forward (intermediate). */
bool plan_regenerable(const Graph *g, int tensor);
/* The family's dynamic positions for one decision vector: rerun_at[op] is
 * the op whose prelude re-runs that forward op (-1: never), need_op[tensor]
 * the op whose prelude first needs an offloaded tensor back (-1: never).
 * -1 when a stashed tensor has no decision. */
int plan_family_positions(const Graph *g, const Decision *dec, int *rerun_at, int *need_op);

/* ---------------------------------------------------------------- info */

/* A lower bound on the peak of any plan with every resident tensor on the
 * device: the most, over the ops, of the resident bytes at the op (every
 * resident byte but the grads whose start op comes later) plus its working
 * set (activation inputs and outputs and workspace); the op where that is. */
int info_lower_bound(const Graph *g, int64_t *resident, int64_t *working_set, int *at_op);
/* The `ration info` report; d may be NULL (then no compute time). */
int info_report(const Graph *g, const Device *d, Buf *out, Err *e);

/* ---------------------------------------------------------------- milp */

/* A solver-neutral mixed-integer program: minimize obj.x + obj_offset over
 * columns within [col_lb, col_ub] (integer where col_int) subject to
 * row_lb <= A x <= row_ub (+-HUGE_VAL for an open side). */
typedef struct MilpModel {
  int ncols, nrows, nnz;
  double *obj, *col_lb, *col_ub;
  bool *col_int;
  double *row_lb, *row_ub;
  int *nz_row, *nz_col; /* triplets */
  double *nz_val;
  double obj_offset;
  double *start; /* a feasible solution to start from (ncols entries), or NULL */
  bool failed;   /* an allocation failed while building */
  int cap_cols, cap_rows, cap_nz;
} MilpModel;

typedef struct MilpOptions {
  const char *solver; /* glpk | cbc */
  double time_limit;  /* seconds, <= 0: none */
  /* With a time limit: the wall time the caller took to build the model,
   * what GLPK's setup of the relaxation is estimated from (0: unknown) */
  double build_seconds;
  double mip_gap;     /* relative gap at which a solution counts as optimal */
  double good_gap;    /* ... and at which the costly steps (the neighbourhoods, the tree) are skipped */
  bool quiet;         /* no progress lines on stderr */
  bool lp_only;       /* solve the LP relaxation only */
  long node_limit;    /* branch-and-bound nodes, 0: none (counted work is deterministic) */
  long tree_iterations; /* ... and simplex iterations in them, 0: none */
  bool skip_tree;     /* the neighbourhoods' answer stands: no branch and bound */
  long neighbourhood_nodes; /* the same for the LP's neighbourhood (GLPK) */
  bool no_pump;             /* ... searched without GLPK's feasibility pump (its work is not counted) */
  int neighbourhoods;       /* ... searched: 0, 1 (around the LP) or 2 (then the LP and the incumbent) */
  long lp_iterations;       /* simplex iterations for the relaxation, 0: none */
  /* GLPK: column upper bounds of a looser problem (>= the real ones) whose
   * optimal basis warm-starts the dual simplex on the real one; NULL: the
   * primal simplex from scratch. */
  const double *loose_ub;
  /* GLPK: the row then column statuses of an optimal basis of the same
   * model's relaxation under other column bounds (an earlier solve's,
   * MilpResult.basis), or NULL: the relaxation goes on from it by the dual
   * simplex, as from loose_ub's (it stays dual feasible), every row in. */
  const int *warm_basis;
  /* GLPK: rows [lazy_first, lazy_end) stay out of the relaxation until its
   * point violates them (valid rows that rarely bind but cost the simplex
   * many pivots); all are in before any search. lazy_end 0: none. */
  int lazy_first, lazy_end;
  /* Makes x (all ncols values; a solution, or the LP relaxation's point)
   * a better solution in place, by the caller's exact evaluation (e.g.
   * rounding, repair and a descent); false when it has none to give. */
  bool (*polish)(void *ctx, double *x);
  void *polish_ctx;
  /* Cutting planes for the tree (GLPK): rows over the model's columns,
   * valid for every integral solution, that x (a node's LP point, ncols
   * values) violates, appended to cuts. NULL: none. */
  void (*separate)(void *ctx, const double *x, MilpModel *cuts);
  void *separate_ctx;
  double proof_gap;      /* ... used by a second tree, after the first, where it left a larger gap, */
  long proof_iterations; /* ... with this many simplex iterations (0: none counted) */
  double proof_reach;    /* ... and only where the first tree and the search leave at most this gap (0: any); */
  bool defer_proof;      /* ... or not at all: the result says where it would have run (proof_deferred) */
  double dive_gap;       /* the first tree stops once its incumbent is within this of its bound (0: at mip_gap) */
  /* GLPK: the first tree branches by Driebeck-Tomlin for at most this many
   * simplex iterations; where they run out before it closes the gap, it
   * starts again from the root on the most fractional column with the rest
   * of tree_iterations. 0: Driebeck-Tomlin only. */
  long dt_iterations;
  /* Before that tree: makes x (a solution, all ncols values) a better one
   * in place by the caller's own search around it, guided by lp_x (the
   * relaxation's point) and bound; false when it found none. The tree then
   * has less to prove. NULL: none. Called with polish_ctx. */
  bool (*search)(void *ctx, double *x, const double *lp_x, double bound);
} MilpOptions;

/* MILP_FAILED (GLPK, not lp_only): the solver failed inside; bound is what
 * it had proven by then (the columns' bounds alone if the relaxation,
 * lp_x, was not solved), failure says why, x is not set. */
typedef enum { MILP_OPTIMAL, MILP_FEASIBLE, MILP_TIME_LIMIT, MILP_INFEASIBLE, MILP_NO_SOLUTION, MILP_FAILED } MilpStatus;

typedef struct MilpResult {
  MilpStatus status;
  double *x;    /* ncols values when a solution exists */
  double *lp_x; /* the LP relaxation's values; lp_x[ncols] is NaN when it was not solved */
  int *basis;   /* GLPK: its optimal basis (nrows then ncols statuses, every row in), or NULL */
  double objective, bound, gap, seconds;
  bool out_of_time; /* the time limit stopped it, with a solution or without */
  bool proof_deferred; /* defer_proof left out a proof tree that would have run */
  int64_t simplex_iterations, nodes; /* the work it did */
  char failure[640];
} MilpResult;

/* Column or row index, -1 after an allocation failure (then m->failed). */
int milp_add_col(MilpModel *m, double lb, double ub, double obj, bool integer);
int milp_add_row(MilpModel *m, double lb, double ub, int n, const int *cols, const double *vals);
/* One more term of row (0, or -1 after an allocation failure). */
int milp_add_term(MilpModel *m, int row, int col, double val);
void milp_model_free(MilpModel *m);
/* Largest bound or row violation of x, relative to the row's bounds. */
double milp_violation(const MilpModel *m, const double *x);
/* obj . x + obj_offset. */
double milp_objective(const MilpModel *m, const double *x);
/* 0 with r filled (any status), -1 with e set on an internal failure. */
int milp_solve(const MilpModel *m, const MilpOptions *o, MilpResult *r, Err *e);
void milp_result_free(MilpResult *r);

/* --------------------------------------------------------------- emit */

/* NAME.plan.json text. */
int emit_plan_json(const Plan *p, const Graph *g, Buf *out);
/* A JSON string literal with escapes, for every emitter. */
void emit_json_string(Buf *out, const char *s);

/* --------------------------------------------------------------- model */

/* A transformer or unet configuration for `ration model`. For unet, layers is
 * the number of resolution levels, dim the base channel count and seq the
 * image side; heads, kv_heads, ffn and vocab are unused. */
typedef struct ModelConfig {
  const char *family; /* gpt2 | llama | unet */
  const char *name;   /* the graph's "name" */
  int layers, dim, heads, kv_heads, ffn, vocab, seq, batch;
  int vocab_pad; /* 0 or 1: none; else wte and the logits have vocab rounded up to a multiple */
  DType dtype; /* f32 or bf16: params, grads and activations */
  bool tied;   /* lm head shares wte (always for gpt2) */
  double eps, theta, lr, weight_decay;
  int lora_rank;         /* 0: every param trains; else base weights frozen, LoRA adapters of this rank train */
  double lora_alpha;     /* adapters add (alpha / rank) x A^T B^T; 0: alpha = rank */
  unsigned lora_targets; /* MODEL_LORA_* bits; 0: the default, q and v */
  double ema_decay;      /* 0: none; else an f32 EMA of every trained param, updated after its AdamW */
  int loss_chunks;       /* 0 or 1: one classifier; else logits, loss and their gradient in K row blocks */
} ModelConfig;

/* The projections a LoRA adapter can target (--lora-targets names). */
enum {
  MODEL_LORA_Q = 1 << 0,
  MODEL_LORA_K = 1 << 1,
  MODEL_LORA_V = 1 << 2,
  MODEL_LORA_O = 1 << 3,
  MODEL_LORA_GATE = 1 << 4,
  MODEL_LORA_UP = 1 << 5,
  MODEL_LORA_DOWN = 1 << 6,
};

typedef struct ModelStats {
  int64_t params, param_bytes, stashed_bytes;
  int ntensors, nops, nstashed;
} ModelStats;

/* The family's reference configuration (gpt2: 124M; llama: Llama-3-8B;
 * unet: 4 levels, 64 channels, 256x256). */
int model_defaults(const char *family, ModelConfig *c, Err *e);
/* The joint training graph as "ration-graph/1" JSON text, one tensor or op
 * per line; byte-identical for equal configs. */
int model_build(const ModelConfig *c, Buf *json_out, Err *e);
int model_stats(const ModelConfig *c, ModelStats *s, Err *e);
/* Parses a --lora-targets list ("q,v", names q k v o gate up down) into
 * MODEL_LORA_* bits. */
int model_lora_targets(const char *list, unsigned *bits, Err *e);
/* Parameter elements; -1 with e set on a bad config. */
int64_t model_param_count(const ModelConfig *c, Err *e);

/* ----------------------------------------------------------------- fit */

/* `ration fit`: the largest batch (or sequence) of a family that a budget
 * holds within a slowdown over keep-all at the same size (fit.c). */
typedef struct FitOptions {
  bool vary_seq;        /* vary the sequence (a unet's image side), else the batch */
  double max_slowdown;  /* a fraction over keep-all's step; < 0 allows any */
  int64_t budget_bytes; /* the budget every size is planned at */
  PlanOptions plan;     /* strategy, solver and time limit; its budget is ignored */
  bool quiet;           /* no progress lines on stderr */
} FitOptions;

typedef struct FitPoint {
  int value;    /* the batch or sequence */
  bool planned; /* a plan exists at the budget */
  bool fits;    /* planned, and within the slowdown */
  int64_t keep_all_peak, arena_bytes, peak_live_bytes;
  double keep_all_seconds, step_seconds, slowdown, items_per_second;
  char why[1024]; /* why it does not fit */
} FitPoint;

typedef struct FitResult {
  FitPoint *points; /* every size the search planned, by value */
  int npoints;
  int best;          /* index of the largest that fits, or -1 */
  int64_t budget_bytes;
  const char *unit;  /* what items_per_second counts: "tokens" or "images" */
} FitResult;

int fit_search(const ModelConfig *base, const Device *d, const FitOptions *o, FitResult *r, Err *e);
void fit_result_free(FitResult *r);
/* The curve, one row per point, for tools. */
void fit_csv(const FitResult *r, const FitOptions *o, Buf *out);

/* ---------------------------------------------------------------- sync */

/* Cross-stream waits of a plan, derived once (sync.c) and emitted into the
 * schedule tables; every backend honours exactly these. */
enum { SYNC_COMPUTE, SYNC_D2H, SYNC_H2D, SYNC_HOST, SYNC_STREAMS };
typedef struct SyncTable {
  int nsteps, nwaits, nevents;
  int *stream;     /* per step: SYNC_* */
  int *wait_start; /* nsteps + 1: step s waits for waits[wait_start[s] .. wait_start[s+1]) */
  int *waits;      /* step indices (on other streams) that must complete first */
  int *event;      /* per step: its event id when some step waits for it, else -1 */
} SyncTable;
int sync_step_stream(StepKind k);
int sync_derive(const Plan *p, const Graph *g, SyncTable *t, Err *e);
void sync_free(SyncTable *t);

/* ------------------------------------------------------------- emit_c */

/* NAME.sched.c and NAME.sched.h (NAME: the output's base name). */
int emit_c_source(const Plan *p, const Graph *g, const char *name, Buf *out, Err *e);
int emit_c_header(const Plan *p, const Graph *g, const char *name, Buf *out, Err *e);
/* The C identifier NAME maps to (entry point ration_schedule_<ident>). */
void emit_c_ident(const char *name, char *out, size_t n);
/* 0 when OLD equals NEW, else 1 with WHY naming what changed (provenance
 * fields, then the first differing step). */
int emit_c_compare(const char *old_text, const char *new_text, Buf *why);
/* Writes OUT.sched.c and OUT.sched.h (the schedule is named after OUT's
 * base name) and the NALSO files of ALSO, all as one set. */
int emit_c_write(const Plan *p, const Graph *g, const char *out, const OutFile *also, int nalso, Err *e);
/* Regenerates both in memory: 0 when the files at OUT are identical, 1 with
 * WHY naming each stale or missing file and what changed, -1 on error. */
int emit_c_check(const Plan *p, const Graph *g, const char *out, Buf *why, Err *e);

/* -------------------------------------------------------------- report */

/* What a memory timeline stacks, bottom to top. */
typedef enum {
  REPORT_PARAMS, REPORT_GRADS, REPORT_OPTSTATE, REPORT_INPUTS, REPORT_KEPT, REPORT_RECOMPUTED,
  REPORT_PREFETCHED, REPORT_IN_FLIGHT, REPORT_OTHER, REPORT_WORKSPACE, REPORT_KINDS
} ReportKind;
const char *report_kind_name(ReportKind k);
/* Live device bytes at every step split by kind: bytes[s * REPORT_KINDS + k]
 * (malloc'd, p->nsteps rows). Per step the kinds add up to sim_run's live
 * bytes. NULL with e set on failure. */
int64_t *report_timeline(const Plan *p, const Graph *g, Err *e);

/* One strategy at one budget. */
typedef struct ReportCell {
  bool feasible;
  char note[512];   /* why it is infeasible (the strategy's error) */
  Predicted predicted;
  int64_t arena_bytes, host_bytes;
  SolverInfo solver;
  double seconds;   /* wall clock of plan_make: the one field that varies run to run */
} ReportCell;

typedef struct ReportOptions {
  const char *const *strategies; /* NULL: every strategy of plan_strategies[] */
  int nstrategies;
  const int64_t *budgets;        /* NULL: npoints points from the smallest budget to keep-all */
  int nbudgets, npoints;
  const char *solver;            /* NULL: the default */
  double time_limit;             /* per plan; <= 0: each strategy's default */
  bool progress;                 /* a progress line on stderr once the sweep takes a while */
  const char *command;           /* how to reproduce it, shown on the page; may be NULL */
} ReportOptions;

typedef struct Report {
  const Graph *g;
  const Device *d;
  char *command;
  int nstrategies;
  char **strategies;
  int npoints;
  int64_t *budgets;
  double *fractions;     /* f of each point in m + f(k - m); negative when budgets were given */
  int64_t min_budget;    /* m: the smallest budget the planner can meet */
  /* GLPK's failure when m is only the least found before it, else empty */
  char min_budget_note[sizeof ((SolverInfo *)0)->note];
  Plan *keep_all;        /* keep-all with no budget: its step time is the reference */
  int64_t keep_all_bytes;/* k: the budget keep-all needs (its arena; the peak when that is larger) */
  ReportCell *cells;     /* npoints x nstrategies, row-major by point */
  Plan *timeline;        /* the plan drawn as the memory timeline, or NULL */
  int timeline_point;
} Report;

/* Plans every strategy at every budget point. Infeasible points are cells,
 * not errors; -1 only when the graph cannot be planned at all. */
int report_sweep(Report *r, const Graph *g, const Device *d, const ReportOptions *o, Err *e);
void report_free(Report *r);
/* The index of the fastest feasible strategy at a point, or -1. */
int report_best(const Report *r, int point);
/* Writes DIR/report.html, report.csv, report.md and the charts as SVG files
 * (step-time.svg, time-split.svg, timeline.svg), each atomically. */
int report_write(const Report *r, const char *dir, Err *e);
/* report.html, report.csv and report.md text; deterministic except for the
 * solve seconds. */
int report_html(const Report *r, Buf *out);
int report_csv(const Report *r, Buf *out);
int report_md(const Report *r, Buf *out);
/* The byte unit a report shows sizes in: GiB, MiB or KiB, by the largest. */
typedef struct ReportUnit {
  double bytes;
  const char *name;
} ReportUnit;
ReportUnit report_unit(int64_t largest);
/* Text escaped for XML/HTML content and attribute values. */
void report_xml(Buf *out, const char *s);
/* The charts, as inline <svg> elements (report_chart.c). */
void report_chart_time(const Report *r, Buf *out);
void report_chart_split(const Report *r, Buf *out);
int report_chart_timeline(const Plan *p, const Graph *g, bool standalone, Buf *out, Err *e);

#endif
