#!/bin/bash
# check.sh - `make gpu-check`: ration's CUDA backend on a real GPU, in one
# command, on a machine with nvcc, gcc and python3 (torch, numpy) only.
# `make gpu-prep` on a CPU machine planned every schedule into build/gpu/
# (carry it along); from the repository root:
#
#   make gpu-check OUT=DIR      (or: OUT=DIR bash gpu/check.sh)
#
# Stages, each under its own timeout; a failed stage is reported and the
# next one still runs:
#   1 build   libration, libration_cuda (sm_90) and the harnesses from
#             source (gpu/build.sh); a binary that fails to build here is
#             taken from build/gpu/bin, prebuilt by gpu-prep
#   2 kernels every CUDA kernel against the CPU reference kernel, f32 and
#             bf16, fresh random inputs, outputs poisoned first, and
#             run-to-run bitwise determinism (gpu/kernels_check.c); the
#             attention cases again with RATION_CUDA_ATTENTION=wmma, the
#             encoder and layernorm backward, gelu and add with
#             RATION_CUDA_KERNELS=next
#   3 tiny    gpt2-tiny and llama-tiny: one debug-mode step against PyTorch
#             float64 (tests/torch_step.py); keep-all vs the tight ilp (and
#             offload-all) plan for 20 steps: loss bits and every param,
#             grad and optimizer-state hash identical
#   4 g124    gpt2-124m, batch 8, bf16, T 1024 (vocabulary 50257 and padded
#             to 50304): keep-all, ilp at 60% of keep-all (or just above the
#             smallest budget it meets) and at 50% (optimizer state and
#             params host-homed); per schedule the
#             plan's peak vs what the runtime allocated (cudaMalloc
#             intercepted, cudaMemGetInfo around rt_open, nvidia-smi sampled)
#             vs the arena bytes a step wrote (canary), predicted vs measured
#             step time, bitwise agreement with keep-all; keep-all again
#             with the wmma attention (its losses next to mma's) and with
#             RATION_CUDA_KERNELS=next (gpu/KERNELS.md); then a
#             profile-guided re-plan with the op times measured here
#   5 torch   the same step in PyTorch eager, plain and checkpointed
#   6 summary one table of the numbers above, printed last
# Everything lands in $OUT: summary.txt env.txt build.log kernels.txt
# tiny.txt g124.txt torch.txt smi.csv. The re-plan takes the device profile of
# the card it finds (H100 or H200).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
G=build/gpu                      # schedules, prebuilt harnesses, planner: from gpu-prep
B=build/gpu-dev                  # ignored: build outputs here
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=$CUDA/bin/nvcc
CC=$(command -v gcc || command -v cc)
PY=$(command -v python3 || echo python3)
START=$SECONDS
BUDGET_S=${BUDGET_S:-420}         # stop starting stages after this many seconds
BACKEND=${BACKEND:-cuda}          # BACKEND=cpu: a dry run of stages 3-4 on a CPU machine
JOBS=$(nproc 2>/dev/null || echo 4)
S="$OUT/summary.txt"
: >"$S"
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$S"; }
left() { echo $((BUDGET_S - (SECONDS - START))); }
# stage NAME SECONDS FILE FUNCTION: runs FUNCTION under a timeout, output to FILE
stage() {
  local name=$1 limit=$2 file=$3 fn=$4
  if [ "$(left)" -lt 20 ]; then log "SKIP $name: out of time"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  log "stage $name (limit ${limit}s)"
  export -f "$fn" 2>/dev/null
  timeout --kill-after=5 "$limit" bash -c "$(declare -f); $fn" >>"$file" 2>&1
  local st=$?
  [ $st -eq 124 ] && log "TIMEOUT $name after ${limit}s" || log "end $name: exit $st"
}
# Schedules are planned by gpu-prep with the h100-sxm-80g profile; the
# profile-guided re-plan uses the profile of the card this runs on (an H200's
# memory is larger and faster), so its prediction is for this card.
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $GPU_NAME in
  *H200*) REPLAN_DEVICE=budgets/h200-141g.json ;;
  *) REPLAN_DEVICE=budgets/h100-sxm-80g.json ;;
esac
export OUT G B CUDA NVCC CC PY BACKEND JOBS REPLAN_DEVICE

# ---------------------------------------------------------------- 0 env
{
  date -u; uname -a; nproc; free -g | head -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm --format=csv 2>&1
  "$NVCC" --version 2>&1 | tail -2; $CC --version | head -1
  ldd --version | head -1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  "$PY" -c 'import numpy; print("numpy", numpy.__version__)' 2>&1 | tail -1
  ls -la $G $G/bin 2>&1
} >"$OUT/env.txt" 2>&1
if [ ! -d $G ]; then log "FAIL: no $G/ (run make gpu-prep on a CPU machine with GLPK first)"; exit 1; fi

# -------------------------------------------------------------- 1 build
build() {
  B=$B G=$G CUDA_HOME=$CUDA NVCC=$NVCC CC=$CC sh gpu/build.sh
  echo "build.sh: exit $?"
  for f in $G/bin/*; do
    [ -x "$B/bin/$(basename "$f")" ] || { echo "PREBUILT $(basename "$f")"; mkdir -p $B/bin; cp "$f" $B/bin/; }
  done
}
stage build 120 "$OUT/build.log" build
nbin=$(ls $B/bin 2>/dev/null | wc -l)
log "build: $nbin binaries in $B/bin, $(grep -c '^PREBUILT' "$OUT/build.log") of them prebuilt ($(grep -h '^build.sh:' "$OUT/build.log"))"

# ------------------------------------------------------------ 2 kernels
# The mma.sync flash attention (runtime/cuda/flash_mma.cuh) is the default; the
# wmma kernels it replaced stay selectable and checked.
kernels() {
  $B/bin/kernels_check
  RATION_CUDA_ATTENTION=wmma KCHECK_OPS="attention attention_backward" $B/bin/kernels_check |
    grep '^[A-Z]* attention' | sed 's/^/wmma /'
  # The opt-in kernels (RATION_CUDA_KERNELS=next, gpu/KERNELS.md), checked
  # beside the defaults until they pass here.
  RATION_CUDA_KERNELS=next KCHECK_OPS="encoder_backward embedding_backward layernorm_backward gelu gelu_backward add" \
    $B/bin/kernels_check | grep -E '^(PASS|FAIL)' | sed 's/^/next /'
}
[ "$BACKEND" = cuda ] && stage kernels 120 "$OUT/kernels.txt" kernels
[ -f "$OUT/kernels.txt" ] && log "kernels: $(grep -c '^PASS' "$OUT/kernels.txt") PASS, $(grep -c '^FAIL' "$OUT/kernels.txt") FAIL; $(grep '^FAIL' "$OUT/kernels.txt" | head -5 | tr '\n' ';')"
[ -f "$OUT/kernels.txt" ] && log "kernels, RATION_CUDA_KERNELS=next: $(grep -c '^next PASS' "$OUT/kernels.txt") PASS, $(grep -c '^next FAIL' "$OUT/kernels.txt") FAIL; $(grep '^next FAIL' "$OUT/kernels.txt" | head -3 | tr '\n' ';')"
[ -f "$OUT/kernels.txt" ] && log "kernels, wmma attention: $(grep -c '^wmma PASS' "$OUT/kernels.txt") PASS, $(grep -c '^wmma FAIL' "$OUT/kernels.txt") FAIL; $(grep '^wmma FAIL' "$OUT/kernels.txt" | head -3 | tr '\n' ';')"

# compare A B: every hash and loss bit of run A equals run B's
compare() {
  local a=$1 b=$2
  if ! grep -q '^state_hash' "$a" || ! grep -q '^state_hash' "$b"; then echo "bitwise $(basename "$b") vs $(basename "$a"): NO RESULT"; return; fi
  local d
  d=$(diff <(grep -E '^(hash|loss)' "$a" | sed 's/ [0-9.]* ms$//') <(grep -E '^(hash|loss)' "$b" | sed 's/ [0-9.]* ms$//') | grep -c '^>')
  echo "bitwise $(basename "$b" .txt) vs $(basename "$a" .txt): $([ "$d" -eq 0 ] && echo IDENTICAL || echo "$d lines DIFFER")"
}
export -f compare

# --------------------------------------------------------------- 3 tiny
tiny() {
  R=$OUT/runs; mkdir -p "$R"
  for m in gpt2-tiny llama-tiny; do
    echo "=== $m: one debug step on $BACKEND vs PyTorch float64 (tests/torch_step.py)"
    d=$(mktemp -d)
    if $B/bin/dump-$m-keep-all "$d" "$BACKEND" && "$PY" -c 'import numpy, torch' 2>/dev/null; then
      "$PY" tests/torch_step.py $G/$m.json "$d" >"$d/torch.out" 2>&1
      grep -E '^(FAIL|PASS whole|PASS loss)' "$d/torch.out" | head -12; grep -v '^PASS\|^FAIL' "$d/torch.out" | tail -3
      echo "torch_step $m: $(grep -c '^PASS' "$d/torch.out") PASS, $(grep -c '^FAIL' "$d/torch.out") FAIL"
    else echo "torch_step: not run (dump failed or no numpy/torch)"; fi
    rm -rf "$d"
    for sc in keep-all ilp offload-all; do
      [ -x $B/bin/step-$m-$sc ] || continue
      echo "=== $m-$sc: 20 steps"
      $B/bin/step-$m-$sc --backend "$BACKEND" --steps 20 >"$R/$m-$sc.txt" 2>&1
      grep -vE '^(hash|loss)' "$R/$m-$sc.txt"; grep '^loss' "$R/$m-$sc.txt" | sed -n '1p;$p'
      echo "=== $m-$sc: 3 steps, debug mode (random copy delays, NaN on death, occupancy checks)"
      $B/bin/step-$m-$sc --backend "$BACKEND" --steps 3 --debug >"$R/$m-$sc-debug.txt" 2>&1
      grep -E '^(error|state_hash|live_equals)' "$R/$m-$sc-debug.txt"
    done
    for sc in ilp offload-all; do
      [ -f "$R/$m-$sc.txt" ] || continue
      compare "$R/$m-keep-all.txt" "$R/$m-$sc.txt"
      compare "$R/$m-keep-all-debug.txt" "$R/$m-$sc-debug.txt"
    done
    echo "=== $m keep-all on the CPU backend, 3 steps: losses next to the GPU's"
    $B/bin/step-$m-keep-all --backend cpu --steps 3 >"$R/$m-cpu.txt" 2>&1
    paste <(grep '^loss' "$R/$m-cpu.txt" | awk '{print "cpu", $2, $3}') <(grep '^loss' "$R/$m-keep-all-debug.txt" | awk '{print "'"$BACKEND"'", $3}')
  done
}
stage tiny 90 "$OUT/tiny.txt" tiny
grep -E '^(bitwise|torch_step|error)' "$OUT/tiny.txt" | sed 's/^/  tiny: /' | tee -a "$S"

# --------------------------------------------------------------- 4 g124
G124_STEPS=${G124_STEPS:-4}
export G124_STEPS
g124() {
  R=$OUT/runs; mkdir -p "$R"
  for sc in v50257-keep-all -keep-all -ilp -homes; do
    n=g124$sc
    [ -x $B/bin/step-$n ] || { echo "no binary for $n"; continue; }
    echo "=== $n: $G124_STEPS steps, the first with the arena canary"
    echo "# $n" >>"$OUT/smi.csv"
    nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 100 >>"$OUT/smi.csv" 2>/dev/null & smi=$!
    $B/bin/step-$n --backend "$BACKEND" --steps "$G124_STEPS" --canary >"$R/$n.txt" 2>&1
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    grep -vE '^(hash)' "$R/$n.txt"
    echo "nvidia_smi_peak_mib $(awk -F', ' -v s="# $n" '$0==s{on=1;next} /^#/{on=0} on&&$2>m{m=$2} END{print m+0}' "$OUT/smi.csv")"
  done
  compare "$R/g124-keep-all.txt" "$R/g124-ilp.txt"
  compare "$R/g124-keep-all.txt" "$R/g124-homes.txt"
  if [ -x $B/bin/step-g124-keep-all ]; then
    echo "=== g124-keep-all-wmma: $G124_STEPS steps with RATION_CUDA_ATTENTION=wmma"
    RATION_CUDA_ATTENTION=wmma $B/bin/step-g124-keep-all --backend "$BACKEND" --steps "$G124_STEPS" >"$R/g124-keep-all-wmma.txt" 2>&1
    grep -E '^(error|measured|loss)' "$R/g124-keep-all-wmma.txt"
    echo "=== g124-keep-all-next: $G124_STEPS steps with RATION_CUDA_KERNELS=next"
    RATION_CUDA_KERNELS=next $B/bin/step-g124-keep-all --backend "$BACKEND" --steps "$G124_STEPS" >"$R/g124-keep-all-next.txt" 2>&1
    grep -E '^(error|measured|loss)' "$R/g124-keep-all-next.txt"
  fi
  # Profiled on keep-all: the CUDA backend syncs after each op in profile
  # mode, so an op after a prefetch wait would be charged the wait.
  mkdir -p $B && tar -C $B -xzf $G/planner.tar.gz 2>/dev/null
  P="/lib64/ld-linux-x86-64.so.2 --library-path $B/planner/lib $B/planner/ration"
  if [ -x $B/planner/ration ] && [ -x $B/bin/step-g124-keep-all ]; then
    echo "=== profile-guided: op times measured here (keep-all, 3 profiled steps), re-plan ilp at the same budget as g124-ilp, run"
    n=g124-pgo
    $B/bin/step-g124-keep-all --steps 3 --profile "$R/g124.costs.json" | grep -E '^(error|measured)'
    [ -s "$R/g124.costs.json" ] && "$PY" gpu/op_times.py $G/g124v50304.json "$R/g124.costs.json"
    if [ -s "$R/g124.costs.json" ] && $P plan $G/g124v50304.json --device "$REPLAN_DEVICE" \
         --costs "$R/g124.costs.json" --budget "$(awk '$1=="plan_budget_bytes"{print $2}' "$R/g124-ilp.txt")" -o $G/$n; then
      D="-I$G -DSCHED_HEADER=\"$n.sched.h\" -DSCHED_ENTRY=ration_schedule_${n//-/_}"
      CUL="-L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 -lcublasLt -lcudart -l:libstdc++.so.6 -lm -lpthread"
      $CC -O1 -std=c11 -Iruntime -I$G -c $G/$n.sched.c -o $B/$n.sched.o &&
      $CC -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I$CUDA/include $D -DWITH_CUDA -o $B/bin/step-$n gpu/step.c \
        $B/$n.sched.o -Wl,--wrap=cudaMalloc,--wrap=cudaMallocHost -Wl,--whole-archive $B/libration_cuda.a \
        -Wl,--no-whole-archive $B/libration.a $CUL &&
      $B/bin/step-$n --steps "$G124_STEPS" >"$R/$n.txt" 2>&1
      grep -E '^(error|strategy|plan_|live_|measured)' "$R/$n.txt"
      compare "$R/g124-keep-all.txt" "$R/$n.txt"
    else echo "profile-guided re-plan: not run (no costs or the plan failed)"; fi
  else echo "profile-guided re-plan: no carried planner ($G/planner.tar.gz)"; fi
}
[ "$BACKEND" = cuda ] && stage g124 200 "$OUT/g124.txt" g124

# -------------------------------------------------------------- 5 torch
torch_ref() {
  "$PY" gpu/torch_ref.py $G/g124v50304.json --mode plain --steps 6
  "$PY" gpu/torch_ref.py $G/g124v50304.json --mode ckpt --steps 6
  "$PY" gpu/torch_ref.py $G/g124v50257.json --mode plain --steps 6
}
[ "$BACKEND" = cuda ] && stage torch 100 "$OUT/torch.txt" torch_ref

# ------------------------------------------------------------ 6 summary
{
  echo
  echo "== device: ${GPU_NAME:-none}; schedules planned with budgets/h100-sxm-80g.json, g124-pgo re-planned with $REPLAN_DEVICE"
  echo "== memory and time per schedule (bytes; ms)"
  printf '%-22s %12s %12s %12s %12s %12s %12s %10s %9s %9s %s\n' schedule plan_peak live_hwm arena rt_cudaMalloc \
    memget_delta canary_top smi_MiB plan_ms meas_ms result
  echo "(plan_peak and arena include the plan's runtime bytes, the CUDA backend's status word and cuBLASLt"
  echo " workspace, on profiles that set runtime_bytes; rt_cudaMalloc is every byte libration cudaMalloc'd)"
  for f in "$OUT"/runs/*.txt; do
    [ -f "$f" ] || continue
    case $f in *-debug.txt|*-cpu.txt) continue;; esac
    v() { awk -v k="$1" '$1==k{print $2; exit}' "$f"; }
    n=$(basename "$f" .txt)
    smi=$(grep -A99999 "^=== $n:" "$OUT/g124.txt" 2>/dev/null | awk '$1=="nvidia_smi_peak_mib"{print $2; exit}')
    res=$(grep -q '^error' "$f" && grep -m1 '^error' "$f" | cut -c1-60 || echo ok)
    printf '%-22s %12s %12s %12s %12s %12s %12s %10s %9s %9s %s\n' "$n" "$(v plan_peak_live_bytes)" "$(v live_high_water)" \
      "$(v plan_arena_bytes)" "$(v rt_cudaMalloc_bytes)" "$(v memgetinfo_open_delta)" "$(v canary_top_offset)" \
      "${smi:--}" "$(v plan_step_ms)" "$(v measured_step_ms)" "$res"
  done
  grep -h '^bitwise' "$OUT/tiny.txt" "$OUT/g124.txt" 2>/dev/null
  grep -h 'canary_stray_blocks' "$OUT"/runs/*.txt 2>/dev/null | sort | uniq -c | sed 's/^/  /'
  echo "== PyTorch (same graph sizes)"
  grep -h '^torch ' "$OUT/torch.txt" 2>/dev/null
  echo "== total $((SECONDS - START)) s"
} >>"$S" 2>&1
grep -h '^op_time' "$OUT/g124.txt" >>"$S" 2>/dev/null
rm -rf "$OUT/runs"    # kept to 8 files; the per-run figures are in tiny.txt, g124.txt and summary.txt
sed -n '/^== memory/,$p' "$S"
