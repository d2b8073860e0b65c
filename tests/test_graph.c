/*
 * test_graph.c - the graph and device loaders: every bad-input fixture in
 * tests/bad/CASES gives exactly its expected one-line message, the limits
 * hold, and the derived liveness facts of a hand-made graph are right.
 */
#include "ration.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Loads FILE as KIND; returns the error message, or NULL when it loaded. */
static const char *load_as(const char *kind, const char *file, Err *e) {
  if (strcmp(kind, "graph") == 0) {
    Graph *g = graph_load(file, e);
    if (g) return graph_free(g), NULL;
    return e->msg;
  }
  if (strcmp(kind, "device") == 0) {
    Device *d = device_load(file, e);
    if (d) return device_free(d), NULL;
    return e->msg;
  }
  Graph *g = graph_load("tests/data/mlp.json", e);
  if (!g) return "tests/data/mlp.json does not load";
  const char *msg = NULL;
  if (strcmp(kind, "costs") == 0) {
    /* A rejected profile must leave every op time as it was. */
    double before[64];
    for (int i = 0; i < g->nops && i < 64; i++) before[i] = g->ops[i].time_us;
    if (cost_load_profile(g, NULL, file, e) != 0) {
      msg = e->msg;
      for (int i = 0; i < g->nops && i < 64; i++)
        if (g->ops[i].time_us != before[i]) msg = "profile half-applied";
    }
  } else if (strcmp(kind, "plan") == 0) {
    Plan *p = plan_load(file, g, e);
    if (p) plan_free(p);
    else msg = e->msg;
  } else {
    msg = "unknown kind in CASES";
  }
  graph_free(g);
  return msg;
}

static void run_cases(void) {
  FILE *f = fopen("tests/bad/CASES", "r");
  T_CASE("tests/bad/CASES readable") T_CHECK(f != NULL);
  if (!f) return;
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    line[strcspn(line, "\n")] = 0;
    char *kind = strtok(line, "\t"), *file = strtok(NULL, "\t"), *msg = strtok(NULL, "");
    if (!kind || !file || !msg) continue;
    Err e = {{0}};
    char path[512], want[1536];
    snprintf(path, sizeof path, "tests/bad/%s", file);
    snprintf(want, sizeof want, "%s: %s", path, msg);
    const char *got = load_as(kind, path, &e);
    if (got && !*got) continue;
    T_CASE(file) T_CHECKF(got && strcmp(got, want) == 0, "got \"%s\"\n  want \"%s\"", got ? got : "(loaded)", want);
  }
  fclose(f);
}

static void limits(void) {
  /* 1,000,001 tensors: refused by count before any of them is parsed. */
  size_t n = 1000001, cap = n * 2 + 128;
  char *text = malloc(cap);
  size_t len = (size_t)sprintf(text, "{\"format\": \"ration-graph/1\", \"ops\": [], \"tensors\": [");
  for (size_t i = 0; i < n; i++) {
    if (i) text[len++] = ',';
    text[len++] = '0';
  }
  len += (size_t)sprintf(text + len, "]}");
  Err e = {{0}};
  Graph *g = graph_parse("big.json", text, len, &e);
  T_CASE("over 1,000,000 tensors")
  T_CHECKF(!g && strcmp(e.msg, "big.json: tensors: more than 1000000 entries (the limit)") == 0, "%s", e.msg);
  graph_free(g);
  free(text);

  /* A sparse file just over 1 GiB: refused before it is read. */
  char tmp[] = "/tmp/ration-big-XXXXXX";
  int fd = mkstemp(tmp);
  bool made = fd >= 0 && ftruncate(fd, (1LL << 30) + 1) == 0;
  if (fd >= 0) close(fd);
  g = made ? graph_load(tmp, &e) : NULL;
  char want[256];
  snprintf(want, sizeof want, "%s: file is 1073741825 bytes, over the limit of 1073741824 bytes (1 GiB)", tmp);
  T_CASE("file over 1 GiB") T_CHECKF(made && !g && strcmp(e.msg, want) == 0, "%s", e.msg);
  graph_free(g);
  unlink(tmp);

  /* 2^53 bytes in all (JSON_MAX_BYTES, what a plan file can carry) loads;
   * a byte more does not. */
  const char *edge = "{\"format\": \"ration-graph/1\", \"tensors\": [{\"name\": \"t\", \"shape\": [67108864, "
                     "134217728], \"dtype\": \"u8\", \"kind\": \"param\"}], \"ops\": []}";
  g = graph_parse("edge.json", edge, strlen(edge), &e);
  T_CASE("2^53-byte tensor loads") T_CHECK(g && g->tensors[0].bytes == (1LL << 53));
  graph_free(g);
  const char *over = "{\"format\": \"ration-graph/1\", \"tensors\": [{\"name\": \"t\", \"shape\": [67108864, "
                     "134217728], \"dtype\": \"u8\", \"kind\": \"param\"}, {\"name\": \"b\", \"shape\": [1], "
                     "\"dtype\": \"u8\", \"kind\": \"param\"}], \"ops\": []}";
  g = graph_parse("over.json", over, strlen(over), &e);
  T_CASE("a byte over 2^53 in all is refused")
    T_CHECKF(!g && strstr(e.msg, "over.json: tensors[1].shape: the graph's tensors add up to more than 2^53 bytes"),
             "%s", e.msg);
  graph_free(g);
}

static void derived(void) {
  Err e = {{0}};
  Graph *g = graph_load("tests/data/mlp.json", &e);
  T_CASE("mlp.json loads") T_CHECKF(g != NULL, "%s", e.msg);
  if (!g) return;
  T_CASE("counts and names") {
    T_CHECK(g->ntensors == 16 && g->nops == 9);
    T_CHECK(strcmp(g->name, "mlp") == 0);
    T_CHECK(graph_find_tensor(g, "lse") == 12 && graph_find_tensor(g, "nope") == -1);
    T_CHECK(graph_find_op(g, "act_bw") == 6 && graph_find_op(g, "h") == -1);
  }
  T_CASE("bytes by dtype") {
    T_CHECK(g->tensors[graph_find_tensor(g, "x")].bytes == 32);
    T_CHECK(g->tensors[graph_find_tensor(g, "h")].bytes == 16);
    T_CHECK(g->tensors[graph_find_tensor(g, "tgt")].bytes == 8);
    T_CHECK(g->tensors[graph_find_tensor(g, "h")].kind == KIND_ACTIVATION);
  }
  T_CASE("stashed set in producer order") {
    const char *want[] = {"h", "a", "y", "lse"};
    T_CHECK(g->nstashed == 4);
    for (int i = 0; i < g->nstashed && i < 4; i++) T_CHECK(strcmp(g->tensors[g->stashed[i]].name, want[i]) == 0);
    for (int t = 0; t < g->ntensors; t++) {
      bool in = false;
      for (int i = 0; i < g->nstashed; i++) in |= g->stashed[i] == t;
      T_CHECKF(g->tensors[t].stashed == in, "%s", g->tensors[t].name);
    }
  }
  T_CASE("reads and producers") {
    const Tensor *h = &g->tensors[graph_find_tensor(g, "h")];
    T_CHECK(h->producer == 0 && h->first_read == 1 && h->last_read == 6);
    T_CHECK(h->last_fwd_read == 1 && h->first_bwd_read == 6);
    const Tensor *y = &g->tensors[graph_find_tensor(g, "y")];
    T_CHECK(y->producer == 2 && y->first_read == 3 && y->last_read == 4 && y->last_fwd_read == 3 && y->first_bwd_read == 4);
    const Tensor *lse = &g->tensors[graph_find_tensor(g, "lse")];
    T_CHECK(lse->producer == 3 && lse->first_read == 4 && lse->last_fwd_read == -1 && lse->first_bwd_read == 4);
    const Tensor *loss = &g->tensors[graph_find_tensor(g, "loss")];
    T_CHECK(loss->is_output && !loss->stashed && loss->first_read == -1 && loss->last_read == -1);
    const Tensor *w1 = &g->tensors[graph_find_tensor(g, "w1")];
    T_CHECK(w1->producer == -1 && w1->first_read == 0 && w1->last_read == 8 && w1->first_bwd_read == 7);
    T_CHECK(graph_is_resident(w1) && !graph_is_resident(h));
    const Tensor *dw1 = &g->tensors[graph_find_tensor(g, "dw1")];
    T_CHECK(dw1->producer == -1 && dw1->first_read == 8);
    /* Writes: the optimizer's in-place update is w1's last. */
    T_CHECK(w1->last_write == 8 && h->last_write == 0 && dw1->last_write == 7 && loss->last_write == 3 &&
            g->tensors[graph_find_tensor(g, "x")].last_write == -1);
    T_CHECK(!g->tensors[graph_find_tensor(g, "dy")].stashed && !g->tensors[graph_find_tensor(g, "dy")].is_output);
  }
  T_CASE("op fields and attrs") {
    const Op *act = &g->ops[1], *fc1 = &g->ops[0], *opt = &g->ops[8], *bw = &g->ops[5];
    T_CHECK(act->time_us == 2.5 && fc1->time_us < 0 && fc1->flops == 64 && fc1->bytes == 112);
    T_CHECK(bw->workspace == 64 && fc1->workspace == 0 && bw->phase == PHASE_BACKWARD);
    T_CHECK(opt->phase == PHASE_OPTIMIZER && opt->ninputs == 4 && opt->noutputs == 3);
    T_CHECK(graph_attr(opt, "lr", 0) == 0.001 && graph_attr(opt, "beta2", 0.999) == 0.999);
    T_CHECK(graph_attr(opt, "fused", 0) == 1 && graph_attr(opt, "mode", -1) == -1);
    T_CHECK(opt->nattrs == 4 && strcmp(opt->attrs[2].str, "decoupled") == 0);
  }
  T_CASE("sha256 of the file's bytes") {
    size_t len;
    char *text = util_read_file("tests/data/mlp.json", &len, &e), hex[65];
    util_sha256_hex(text, len, hex);
    T_CHECK(strcmp(hex, g->sha256) == 0 && strlen(g->sha256) == 64);
    free(text);
  }
  T_CASE("graph without a name takes the file's") {
    const char *t = "{\"format\": \"ration-graph/1\", \"tensors\": [], \"ops\": []}";
    Graph *g2 = graph_parse("dir/tiny.json", t, strlen(t), &e);
    T_CHECK(g2 && strcmp(g2->name, "tiny") == 0 && g2->nstashed == 0);
    graph_free(g2);
  }
  T_CASE("names in any script, a terminal escape and an escaped backslash before u0000 load as written") {
    const char *t = "{\"format\": \"ration-graph/1\", \"name\": \"\\\\u0000 \u03ba\u2082 \xf0\x9f\x98\x80 \\u001b[2J\",\n"
                    " \"tensors\": [], \"ops\": []}";
    Graph *g2 = graph_parse("names.json", t, strlen(t), &e);
    T_CHECKF(g2 && strcmp(g2->name, "\\u0000 \u03ba\u2082 \xf0\x9f\x98\x80 \x1b[2J") == 0, "%s", g2 ? g2->name : e.msg);
    graph_free(g2);
  }
  T_CASE("utf8: code points and the forms RFC 3629 forbids") {
    uint32_t cp = 0;
    T_CHECK(util_utf8_char("\xc2\xa0", 2, &cp) == 2 && cp == 0xA0);
    T_CHECK(util_utf8_char("\xf4\x8f\xbf\xbf", 4, &cp) == 4 && cp == 0x10FFFF);
    T_CHECK(util_utf8_char("\xf4\x90\x80\x80", 4, &cp) == 0); /* past U+10FFFF */
    T_CHECK(util_utf8_char("\xe0\x80\xaf", 3, &cp) == 0);     /* overlong */
    T_CHECK(util_utf8_char("\xed\xbf\xbf", 3, &cp) == 0);     /* a surrogate */
    T_CHECK(util_utf8_char("\xe2\x82\xac", 2, &cp) == 0);     /* cut short */
    T_CHECK(util_utf8_prefix("ab\xe2\x82\xac", 4) == 2);       /* never inside the euro sign */
    T_CHECK(util_utf8_prefix("ab\xe2\x82\xac", 5) == 5);
    T_CHECK(util_utf8_prefix("abc", 2) == 2 && util_utf8_prefix("", 9) == 0);
    T_CHECK(util_utf8_char("\x80", 1, &cp) == 0);             /* a continuation byte first */
  }
  T_CASE("terminal text: escape sequences and control characters go, the rest stays") {
    static const struct {
      const char *in, *want;
      bool one_line;
    } cases[] = {
        {"a\x1b[31mb\x1b[0m", "ab", false},                   /* CSI (SGR) */
        {"a\x1b[?1049;2hb", "ab", false},                       /* CSI, private parameters */
        {"a\x1b]0;title\x07" "b", "ab", false},                 /* OSC ended by BEL */
        {"a\x1b]8;;http://x/\x1b\\b", "ab", false},           /* OSC 8 link ended by ST */
        {"a\x1bP1$r\xc2\x9c" "b", "ab", false},                /* DCS ended by C1 ST */
        {"a\x1b]0;open\nb", "a0;open\nb", false},              /* left open: only its introducer */
        {"a\xc2\x9b" "2Jb\xc2\x85", "ab", false},             /* C1 CSI and NEL as UTF-8 */
        {"a\x1b" "cb\x1b(Bc\x1b", "abc", false},               /* two-byte, intermediate, cut off */
        {"t\tn\nr\rd\x7f" "b\x08" "z\x01", "t\tn\nrdbz", false}, /* C0 and DEL */
        {"t\tn\nl", "t n l", true},                             /* one line */
        {"\x80x\xff\xe2\x82", "?x???", false},                 /* not UTF-8: a ? a byte */
        {"caf\xc3\xa9 \xce\xba \xf0\x9f\x98\x80 \xc2\xa0", "caf\xc3\xa9 \xce\xba \xf0\x9f\x98\x80 \xc2\xa0", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      Buf b = {0};
      util_term_text(&b, cases[i].in, strlen(cases[i].in), cases[i].one_line);
      buf_printf(&b, "%s", "");
      T_CHECKF(b.data && strcmp(b.data, cases[i].want) == 0, "case %zu: got \"%s\"", i, b.data ? b.data : "");
      buf_free(&b);
    }
  }
  T_CASE("linear lookup on a hand-built graph") {
    Tensor ts[2] = {{.name = "a"}, {.name = "b"}};
    Graph hand = {.ntensors = 2, .tensors = ts};
    T_CHECK(graph_find_tensor(&hand, "b") == 1 && graph_find_tensor(&hand, "c") == -1);
  }
  graph_free(g);
}

/* A device file with only the required members and MEMBERS after them,
 * parsed as d.json. */
static Device *minimal_device_with(const char *members, Err *e) {
  char text[512];
  snprintf(text, sizeof text,
           "{\"format\": \"ration-device/1\", \"name\": \"d\", \"memory\": \"1TiB\", "
           "\"peak_tflops\": {\"f32\": 1}, \"hbm_gbps\": 1, \"h2d_gbps\": 1, \"d2h_gbps\": 1%s}",
           members);
  return device_parse("d.json", text, strlen(text), e);
}

static void device(void) {
  Err e = {{0}};
  Device *d = device_load("tests/data/dev.json", &e);
  T_CASE("dev.json loads") T_CHECKF(d != NULL, "%s", e.msg);
  if (!d) return;
  T_CASE("device fields") {
    T_CHECK(strcmp(d->name, "test-gpu") == 0);
    T_CHECK(d->memory == 1048576 && d->reserve == 4096 && d->host_memory == 16000000);
    T_CHECK(d->peak_tflops[DT_BF16] == 2e-6 && d->peak_tflops[DT_F32] == 1e-6 && d->peak_tflops[DT_F16] == 0);
    T_CHECK(d->hbm_gbps == 0.001 && d->h2d_gbps == 0.0005 && d->d2h_gbps == 0.00025 && d->launch_us == 1.5);
    T_CHECK(d->host_memory_gbps == 0.002 && d->host_cores == 2);
  }
  device_free(d);
  /* Host compute figures: both or neither, each > 0, whole cores; a
   * profile without them (every file before them) has no host compute. */
  static const struct {
    const char *members, *error;
  } host[] = {
      {"", NULL},
      {", \"host_memory_gbps\": 400, \"host_cores\": 112", NULL},
      {", \"host_memory_gbps\": 400", "d.json: host_cores: missing (host_memory_gbps needs it)"},
      {", \"host_cores\": 4", "d.json: host_memory_gbps: missing (host_cores needs it)"},
      {", \"host_memory_gbps\": 0, \"host_cores\": 4", "d.json: host_memory_gbps: must be > 0"},
      {", \"host_memory_gbps\": 1, \"host_cores\": 0", "d.json: host_cores: "},
      {", \"host_memory_gbps\": 1, \"host_cores\": 2.5", "d.json: host_cores: "},
      {", \"host_memory_gbps\": 1, \"host_cores\": 2000000", "d.json: host_cores: must be at most 1048576"},
  };
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
    e.msg[0] = 0;
    d = minimal_device_with(host[i].members, &e);
    T_CASE(host[i].members[0] ? host[i].members : "no host compute figures") {
      if (host[i].error) T_CHECKF(!d && strncmp(e.msg, host[i].error, strlen(host[i].error)) == 0, "%s", e.msg);
      else T_CHECKF(d && (i == 0 ? d->host_memory_gbps == 0 && d->host_cores == 0
                                 : d->host_memory_gbps == 400 && d->host_cores == 112), "%s", e.msg);
    }
    device_free(d);
  }
  /* Sizes as the device file states them. */
  static const struct {
    const char *json;
    int64_t bytes;
  } sizes[] = {
      {"1024", 1024},
      {"\"80GiB\"", 85899345920LL},
      {"\"512 MB\"", 512000000LL},
      {"\"1.5KiB\"", 1536},
      {"\"0.5GiB\"", 536870912LL},
      {"\"2TB\"", 2000000000000LL},
      {"\"3TiB\"", 3298534883328LL},
      {"\"7KB\"", 7000},
      {"0", 0},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char members[64];
    snprintf(members, sizeof members, ", \"host_memory\": %s", sizes[i].json);
    d = minimal_device_with(members, &e);
    T_CASE(sizes[i].json) T_CHECKF(d && d->host_memory == sizes[i].bytes, "%s", d ? "wrong value" : e.msg);
    device_free(d);
  }
}

/* Every cut of a valid file is reported as truncated (never loaded, never
 * a crash), and random byte damage gives either a graph or one line that
 * names the file. */
static void damage(void) {
  size_t len;
  Err e = {{0}};
  char *text = util_read_file("tests/data/mlp.json", &len, &e);
  T_CASE("mlp.json readable") T_CHECK(text != NULL);
  if (!text) return;
  int bad = 0;
  for (size_t cut = 1; cut < len - 1; cut++) {
    Graph *g = graph_parse("cut.json", text, cut, &e);
    if (g || strncmp(e.msg, "cut.json: truncated JSON: unexpected end of file at line ", 57) != 0) {
      if (bad++ < 3) printf("  cut at %zu: %s\n", cut, g ? "loaded" : e.msg);
    }
    graph_free(g);
  }
  T_CASE("every prefix is reported as truncated") T_CHECK(bad == 0);
  char *copy = malloc(len + 1);
  unsigned seed = 12345;
  int loaded = 0, one_line = 0, runs = 2000;
  for (int r = 0; r < runs; r++) {
    memcpy(copy, text, len + 1);
    for (int k = 0; k < 1 + r % 4; k++) {
      seed = seed * 1103515245u + 12345u;
      size_t at = (seed >> 8) % len;
      seed = seed * 1103515245u + 12345u;
      copy[at] = " \"{}[],:0123456789-.eEabcxyzfnt\\"[(seed >> 8) % 33];
    }
    Graph *g = graph_parse("dmg.json", copy, len, &e);
    if (g) loaded++;
    else if (strncmp(e.msg, "dmg.json: ", 10) == 0 && !strchr(e.msg, '\n')) one_line++;
    graph_free(g);
  }
  T_CASE("damaged files: a graph or a one-line error") T_CHECKF(loaded + one_line == runs, "%d %d", loaded, one_line);
  free(copy);
  free(text);
}

int main(void) {
  run_cases();
  damage();
  limits();
  derived();
  device();
  T_DONE();
}
