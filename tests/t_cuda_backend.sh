# t_cuda_backend.sh - libration's CUDA backend (runtime/rt_cuda.cu), wherever
# nvcc exists: a trainer-style program links libration_cuda.a whole, and
#  - without a GPU, rt_open(CUDA) fails cleanly (RT_EUNAVAIL with a message)
#    and rt_open(AUTO) falls back to the CPU backend;
#  - with a GPU, one gpt2-tiny and one llama-tiny step run on it in debug
#    mode and match PyTorch as the CPU backend does (tests/torch_step.py).
. tests/lib.sh
BUILD=${BUILD:-build/rel}
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then
  ok "CUDA backend: no nvcc on this machine, nothing to build (note)"
  t_done; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cuda_home=$(dirname "$(dirname "$NVCC")")
san=""; case "$BUILD" in *san*) san="-fsanitize=address,undefined";; esac
export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0
if ! make -s "$BUILD/libration_cuda.a" NVCC="$NVCC" >"$tmp/log" 2>&1; then
  fail "libration_cuda.a builds" "$(tail -5 "$tmp/log")"; t_done; exit 0
fi
gpu=no
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then gpu=yes; fi
for name in gpt2-tiny llama-tiny; do
  id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '_')
  mkdir -p "$tmp/$name" "$tmp/$name-auto"
  if ! $RATION plan models/$name.json --device budgets/cpu.json -o "$tmp/$name" >"$tmp/log" 2>&1 ||
     ! cc $san -O1 -std=c11 -Iruntime -I"$tmp" -DSCHED_HEADER="\"$name.sched.h\"" -DSCHED_ENTRY=ration_schedule_$id \
         -o "$tmp/dump-$name" tests/step_dump.c "$tmp/$name.sched.c" \
         -Wl,--whole-archive "$BUILD/libration_cuda.a" -Wl,--no-whole-archive "$BUILD/libration.a" \
         -L"$cuda_home/lib64" -Wl,-rpath,"$cuda_home/lib64" -lcublasLt -lcudart -lstdc++ -lm -lpthread >>"$tmp/log" 2>&1
  then
    fail "$name: a program links the CUDA backend" "$(tail -5 "$tmp/log")"; continue
  fi
  ok "$name: a program links the CUDA backend"
  "$tmp/dump-$name" "$tmp/$name" cuda >"$tmp/out" 2>&1; st=$?
  if [ $gpu = no ]; then
    if [ $st -eq 3 ] && grep -q "backend unavailable: CUDA backend: no CUDA device" "$tmp/out"; then
      ok "$name: no GPU here: rt_open(CUDA) says so ($(tail -1 "$tmp/out" | cut -c1-80))"
    else fail "$name: no GPU here: rt_open(CUDA) fails cleanly" "exit $st: $(cat "$tmp/out")"; fi
    "$tmp/dump-$name" "$tmp/$name-auto" auto >"$tmp/out" 2>&1; st=$?
    if [ $st -eq 0 ] && grep -q "^backend cpu" "$tmp/out"; then ok "$name: rt_open(AUTO) falls back to the CPU backend"
    else fail "$name: rt_open(AUTO) falls back to the CPU backend" "exit $st: $(cat "$tmp/out")"; fi
  else
    if [ $st -ne 0 ] || ! grep -q "^backend cuda" "$tmp/out"; then
      fail "$name: one step on the GPU" "exit $st: $(cat "$tmp/out")"; continue
    fi
    /usr/bin/python3 tests/torch_step.py models/$name.json "$tmp/$name" >"$tmp/torch" 2>&1
    if grep -q "^PASS whole step" "$tmp/torch" && ! grep -q "^FAIL" "$tmp/torch"; then
      ok "$name: one step on the GPU matches PyTorch"
    else fail "$name: one step on the GPU matches PyTorch" "$(grep -v '^PASS' "$tmp/torch" | head -5)"; fi
  fi
done
t_done
