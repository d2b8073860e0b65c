# t_gpu_check.sh - `make gpu-check`'s script (gpu/check.sh) cannot rot
# between the rare sessions with a GPU: its CPU-backend dry run (BACKEND=cpu:
# the harnesses built without CUDA, the tiny models' stage on the CPU
# backend, the GPU stages skipped) over schedules gpu/prep.sh plans here
# (PREP_SET=tiny), and the helpers that decide what its logs say
# (gpu/check_lib.sh): which next kernels passed, per-run time limits.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# ---- the helpers (bash: check.sh is a bash script)
cat >"$tmp/log" <<'EOF'
next layernorm PASS layernorm f32 [4,64,768]: ok
next layernorm PASS layernorm bf16 [4,64,768]: ok
part next-layernorm: exit 0, 2 s
next gelu PASS gelu f32 [4,64,384]: ok
next gelu FAIL gelu bf16 [4,64,384]: max 1e-1
part next-gelu: exit 1, 2 s
next add PASS add f32 [4,64,96]: ok
part next-add: exit 139, 1 s
next matmul PASS matmul f32 [1,64,768]: ok
part next-matmul: exit 124, 60 s, stopped at the part limit (60 s)
part next-encoder_backward: exit 0, 1 s
next layernorm_backward PASS layernorm_backward f32 [4,64,768]: ok
part next-layernorm_backward: exit 0, 3 s
EOF
got=$(bash -c '. gpu/check_lib.sh; next_passed "$1" layernorm gelu add matmul encoder_backward layernorm_backward rmsnorm' _ "$tmp/log")
if [ "$got" = "layernorm layernorm_backward" ]; then
  ok "next_passed: only ops with PASS lines, no FAIL, exit 0 (a FAIL, a crash, a time limit, no cases, no run each leave one out)"
else fail "next_passed" "got '$got', want 'layernorm layernorm_backward'"; fi

got=$(bash -c 'PART_S=1; . gpu/check_lib.sh; t0=$SECONDS; part hang "$1" sleep 30; echo "rc $? after $((SECONDS - t0))"' _ "$tmp/hang")
if echo "$got" | grep -q "^part hang: exit 124, [0-9]* s, stopped at the part limit (1 s)$" &&
   echo "$got" | grep -Eq "^rc 124 after [1-3]$" && grep -q '^part hang: exit 124' "$tmp/hang"; then
  ok "part: a hung run stops at PART_S, says so on stdout and in its log"
else fail "part stops a hung run" "$got"; fi
got=$(bash -c '. gpu/check_lib.sh; part crash "$1" sh -c "echo before; kill -SEGV \$\$"; echo "rc $?"' _ "$tmp/crash")
if echo "$got" | grep -q '^part crash: exit 139, ' && echo "$got" | grep -q '^rc 139$' && grep -q '^before$' "$tmp/crash"; then
  ok "part: a crashed run's output stays in its log, its exit status is reported"
else fail "part reports a crash" "$got; log: $(cat "$tmp/crash")"; fi

# ---- the dry run
if ! command -v bash >/dev/null || ! command -v timeout >/dev/null; then
  fail "gpu-check dry run" "needs bash and timeout"; t_done; exit 0
fi
G=$tmp/gpu
if G=$G PREP_SET=tiny RATION=$RATION sh gpu/prep.sh >"$tmp/prep.log" 2>&1; then
  ok "gpu/prep.sh PREP_SET=tiny plans the tiny schedules ($(ls $G/*.sched.c | wc -l) of them)"
else fail "gpu/prep.sh PREP_SET=tiny" "$(tail -5 "$tmp/prep.log")"; t_done; exit 0; fi
OUTD=$tmp/out
# Debian's python3-torch (the Makefile's DEB_PKGS), as the other torch tests use
# (limits for a loaded 2-core machine: the GPU machine's tiny stage takes 24-28 s)
BACKEND=cpu PY=/usr/bin/python3 G=$G B=$tmp/dev OUT=$OUTD BUDGET_S=900 TINY_S=800 PART_S=300 bash gpu/check.sh >"$tmp/check.log" 2>&1; st=$?
S=$OUTD/summary.txt
if [ $st -eq 0 ] && grep -q '^== total [0-9]* s$' "$S"; then ok "check.sh BACKEND=cpu runs to its summary"
else fail "check.sh BACKEND=cpu runs to its summary" "exit $st: $(tail -20 "$tmp/check.log")"; fi
files=$(cd "$OUTD" && ls | tr '\n' ' ')
if [ "$files" = "build.log env.txt summary.txt tiny.txt " ] && [ -z "$(find "$OUTD" -mindepth 1 ! -type f)" ]; then
  ok "OUT holds the stages' logs alone, plain files (a device call brings back 8): $files"
else fail "OUT holds the stages' logs alone" "got: $files; $(find "$OUTD" -mindepth 1 ! -type f)"; fi
if grep -q 'build.sh: exit 0' "$S" && grep -q ' 0 of them prebuilt' "$S" && [ -x $tmp/dev/bin/step-gpt2-tiny-ilp ] &&
   [ ! -e $tmp/dev/libration_cuda.a ]; then
  ok "build: gpu/build.sh WITH_CUDA=0 builds every harness without the CUDA backend"
else fail "build without CUDA" "$(grep build "$S"; tail -5 "$OUTD/build.log")"; fi
skips=$(grep -c '^\[[0-9]*s\] SKIP \(kernels\|g124\|torch\|replan\): BACKEND=cpu (a GPU stage)$' "$S")
if [ "$skips" -eq 4 ]; then ok "the four GPU stages say they were skipped"
else fail "the four GPU stages say they were skipped" "$skips lines: $(grep SKIP "$S")"; fi
for m in gpt2-tiny llama-tiny; do
  line=$(grep "tiny: torch_step $m:" "$S")
  p=$(echo "$line" | sed -n 's/.*: \([0-9]*\) PASS, \([0-9]*\) FAIL/\1/p'); f=$(echo "$line" | sed -n 's/.*, \([0-9]*\) FAIL/\1/p')
  if [ "${p:-0}" -gt 0 ] && [ "$f" = 0 ]; then ok "$m: one debug step on the CPU backend matches PyTorch float64 ($p checks)"
  else fail "$m: torch_step" "$line"; fi
done
n=$(grep -c '^  tiny: bitwise .*: IDENTICAL$' "$S")
if [ "$n" -eq 6 ] && ! grep -q 'DIFFER\|NO RESULT' "$S"; then
  ok "tiny: keep-all vs ilp and offload-all, 20 steps and 3 debug steps: 6 bitwise comparisons IDENTICAL"
else fail "tiny: bitwise comparisons" "$(grep bitwise "$S")"; fi
rows=0; bad=""
for sc in gpt2-tiny-keep-all gpt2-tiny-ilp gpt2-tiny-offload-all llama-tiny-keep-all llama-tiny-ilp; do
  r=$(awk -v n="$sc" '$1==n {print $2, $3, $NF}' "$S")   # plan_peak live_hwm result (the CUDA columns are empty)
  set -- $r
  if [ $# -eq 3 ] && [ "$1" = "$2" ] && [ "$1" -gt 0 ] && [ "$3" = ok ]; then rows=$((rows + 1)); else bad="$bad $sc:[$r]"; fi
done
if [ $rows -eq 5 ]; then ok "summary: a row per schedule, live high-water = the plan's peak, result ok"
else fail "summary rows" "$bad"; fi
t_done
