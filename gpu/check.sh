#!/bin/bash
# check.sh - `make gpu-check`: ration's CUDA backend on a real GPU, in one
# command, on a machine with nvcc, gcc and python3 (torch, numpy) only.
# `make gpu-prep` on a CPU machine planned every schedule into build/gpu/
# (carry it along); from the repository root:
#
#   BUDGET_S=370 make gpu-check OUT=DIR      (or: OUT=DIR bash gpu/check.sh)
#
# Stages, each under its own timeout, and within a stage every run
# (kernel check, step run, re-plan) under PART_S seconds; a failed, hung or
# crashed run is reported and the next one still runs:
#   1 build   libration, libration_cuda (sm_90) and the harnesses from
#             source (gpu/build.sh); a binary that fails to build here is
#             taken from build/gpu/bin, prebuilt by gpu-prep
#   2 kernels every CUDA kernel against the CPU reference kernel, f32 and
#             bf16, fresh random inputs, outputs poisoned first, run-to-run
#             bitwise determinism (gpu/kernels_check.c), the default set;
#             then each op type's next kernel (gpu/KERNELS.md) in a process
#             of its own (RATION_CUDA_KERNELS=OP): the ops whose cases all
#             pass make the list the step runs below use; then the wmma
#             attention
#   3 tiny    gpt2-tiny and llama-tiny: one debug-mode step against PyTorch
#             float64 (tests/torch_step.py); keep-all vs the ilp at 75% (and
#             offload-all) plan for 20 steps and 3 debug steps: loss bits and
#             every param, grad and optimizer-state hash identical; gpt2-tiny
#             again with the next kernels that passed
#   4 g124    gpt2-124m, batch 8, bf16, T 1024, V 50304 (--vocab-pad 128)
#             and 50257: keep-all, ilp at 60% and at 50% (host homes), each
#             with the arena canary: the plan's bytes vs what the runtime
#             allocated vs what a step wrote, predicted vs measured step,
#             bitwise agreement with keep-all; keep-all (both V) and the 60%
#             plan again with the next kernels that passed
#   5 torch   the same step in PyTorch eager, plain and checkpointed
#   6 replan  keep-all profiled (op times from CUDA events), a re-plan at
#             the 60% plan's budget with them, its run; keep-all with the
#             wmma attention
#   7 summary one table of the numbers above, printed last
# $OUT gets exactly 8 files, written as the stages run: summary.txt env.txt
# build.log kernels.txt tiny.txt g124.txt torch.txt replan.txt (a device
# call brings back 8). The re-plan takes the device profile of the card it
# finds (H100 or H200).
#
# BACKEND=cpu is the dry run on a CPU machine (tests/t_gpu_check.sh): the
# harnesses built without CUDA (WITH_CUDA=0), stage 3 on the CPU backend,
# the GPU stages skipped with a line saying so, the summary as on a GPU.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
G=${G:-build/gpu}                # schedules, prebuilt harnesses, planner: from gpu-prep
B=${B:-build/gpu-dev}            # ignored: build outputs here
R=$B/runs                        # one file per step run (OUT keeps 8 files)
K=$B/kernels                     # one file per kernel check run
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=$CUDA/bin/nvcc
CC=$(command -v gcc || command -v cc)
PY=${PY:-$(command -v python3 || echo python3)}   # with torch and numpy
START=$SECONDS
BUDGET_S=${BUDGET_S:-370}         # stop starting stages after this many seconds
PART_S=${PART_S:-60}              # one run's limit inside a stage
TINY_S=${TINY_S:-60}              # the tiny stage's limit (the dry run on a loaded CPU machine needs more)
BACKEND=${BACKEND:-cuda}          # BACKEND=cpu: the dry run
JOBS=$(nproc 2>/dev/null || echo 4)
# The op types that have a next kernel (gpu/KERNELS.md), checked one by one.
NEXT_OPS="layernorm layernorm_backward encoder_backward embedding_backward gelu gelu_backward add matmul matmul_backward"
S="$OUT/summary.txt"
: >"$S"
rm -rf "$R" "$K" "$B/next_ops"
mkdir -p "$R" "$K"
. gpu/check_lib.sh
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$S"; }
left() { echo $((BUDGET_S - (SECONDS - START))); }
# stage NAME SECONDS FILE FUNCTION: FUNCTION under a timeout, output to FILE
stage() {
  local name=$1 limit=$2 file=$3 fn=$4
  if [ "$(left)" -lt 20 ]; then log "SKIP $name: out of time (BUDGET_S=$BUDGET_S)"; return; fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  log "stage $name (limit ${limit}s)"
  timeout --kill-after=5 "$limit" bash -c "$(declare -f); $fn" >>"$file" 2>&1
  local st=$?
  if [ $st -eq 124 ] || [ $st -eq 137 ]; then log "TIMEOUT $name after ${limit}s"; else log "end $name: exit $st"; fi
}
# cuda_stage NAME ...: stage, on the GPU only
cuda_stage() {
  if [ "$BACKEND" = cuda ]; then stage "$@"; else log "SKIP $1: BACKEND=$BACKEND (a GPU stage)"; fi
}
# Schedules are planned by gpu-prep with the h100-sxm-80g profile; the
# profile-guided re-plan uses the profile of the card this runs on (an H200's
# memory is larger and faster), so its prediction is for this card.
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $GPU_NAME in
  *H200*) REPLAN_DEVICE=budgets/h200-141g.json ;;
  *) REPLAN_DEVICE=budgets/h100-sxm-80g.json ;;
esac
export OUT G B R K CUDA NVCC CC PY BACKEND JOBS REPLAN_DEVICE PART_S NEXT_OPS

# ---------------------------------------------------------------- 0 env
{
  date -u; uname -a; nproc; free -g | head -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm --format=csv 2>&1
  "$NVCC" --version 2>&1 | tail -2; $CC --version | head -1
  ldd --version | head -1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  "$PY" -c 'import numpy; print("numpy", numpy.__version__)' 2>&1 | tail -1
  ls -la "$G" "$G/bin" 2>&1
} >"$OUT/env.txt" 2>&1
if [ ! -d "$G" ]; then log "FAIL: no $G/ (run make gpu-prep on a CPU machine with GLPK first)"; exit 1; fi

# -------------------------------------------------------------- 1 build
build() {
  B=$B G=$G CUDA_HOME=$CUDA NVCC=$NVCC CC=$CC WITH_CUDA=$([ "$BACKEND" = cuda ] && echo 1 || echo 0) sh gpu/build.sh
  echo "build.sh: exit $?"
}
stage build 90 "$OUT/build.log" build
# What the build did not make (it failed, or ran out of time) comes from
# gpu-prep's prebuilt harnesses (CUDA ones: not for the dry run).
if [ "$BACKEND" = cuda ]; then
  for f in "$G"/bin/*; do
    [ -e "$f" ] || continue
    [ -x "$B/bin/$(basename "$f")" ] || { echo "PREBUILT $(basename "$f")" >>"$OUT/build.log"; mkdir -p $B/bin; cp "$f" $B/bin/; }
  done
fi
log "build: $(ls $B/bin 2>/dev/null | wc -l) binaries in $B/bin, $(grep -c '^PREBUILT' "$OUT/build.log") of them prebuilt ($(grep -h '^build.sh:' "$OUT/build.log"))"

# ------------------------------------------------------------ 2 kernels
# The default set in one process, then each op's next kernel in a process
# of its own (a crash or a hang there costs that op alone; its cases'
# lines are prefixed "next OP"), then the wmma attention (prefix "wmma").
kernels() {
  PART_S=120 part kernels "$OUT/kernels.txt" $B/bin/kernels_check >/dev/null
  for op in $NEXT_OPS; do
    part next-$op "$K/next-$op.txt" env RATION_CUDA_KERNELS=$op KCHECK_OPS=$op $B/bin/kernels_check >/dev/null
    grep -E '^(PASS|FAIL) ' "$K/next-$op.txt" | sed "s/^/next $op /"
    tail -1 "$K/next-$op.txt"
  done
  part wmma "$K/wmma.txt" env RATION_CUDA_ATTENTION=wmma KCHECK_OPS="attention attention_backward" \
    $B/bin/kernels_check >/dev/null
  grep -E '^(PASS|FAIL) ' "$K/wmma.txt" | sed 's/^/wmma /'
  tail -1 "$K/wmma.txt"
}
cuda_stage kernels 170 "$OUT/kernels.txt" kernels
if [ -f "$OUT/kernels.txt" ]; then
  kt=$OUT/kernels.txt
  log "kernels, default set: $(grep -c '^PASS' "$kt") PASS, $(grep -c '^FAIL' "$kt") FAIL ($(grep -m1 '^part kernels:' "$kt" || echo 'no part line: cut short')); $(grep '^FAIL' "$kt" | head -5 | tr '\n' ';')"
  log "kernels, wmma attention: $(grep -c '^wmma PASS' "$kt") PASS, $(grep -c '^wmma FAIL' "$kt") FAIL"
  for op in $NEXT_OPS; do
    log "  next $op: $(grep -c "^next $op PASS " "$kt") PASS, $(grep -c "^next $op FAIL " "$kt") FAIL, $(grep -m1 "^part next-$op:" "$kt" | cut -d: -f2- || true)"
  done
  NEXT_OK=$(next_passed "$kt" $NEXT_OPS)
  echo "$NEXT_OK" >"$B/next_ops"
  if [ -n "$NEXT_OK" ]; then
    log "NEXT: the step runs below use RATION_CUDA_KERNELS=\"$NEXT_OK\" (the next kernels that passed; every other op keeps its default kernel)"
  else
    log "NEXT: no next kernel passed: the next step runs are left out and every run uses the default set"
  fi
fi

# --------------------------------------------------------------- 3 tiny
# step_run NAME BIN ARGS...: one run into $R/NAME.txt, its lines but the
# per-tensor hashes (its part line last) to stdout.
step_run() {
  local name=$1; shift
  part "$name" "$R/$name.txt" "$@" >/dev/null
  grep -v '^hash' "$R/$name.txt"
}
tiny() {
  local nk; nk=$(cat "$B/next_ops" 2>/dev/null)
  for m in gpt2-tiny llama-tiny; do
    echo "=== $m: one debug step on $BACKEND vs PyTorch float64 (tests/torch_step.py)"
    d=$(mktemp -d)
    if part dump-$m "$d/dump.out" $B/bin/dump-$m-keep-all "$d" "$BACKEND" && "$PY" -c 'import numpy, torch' 2>/dev/null; then
      part torch_step-$m "$d/torch.out" "$PY" tests/torch_step.py $G/$m.json "$d"
      grep -E '^(FAIL|PASS whole|PASS loss)' "$d/torch.out" | head -12; grep -v '^PASS\|^FAIL\|^part' "$d/torch.out" | tail -3
      echo "torch_step $m: $(grep -c '^PASS' "$d/torch.out") PASS, $(grep -c '^FAIL' "$d/torch.out") FAIL"
    else echo "torch_step $m: not run (dump failed or no numpy/torch)"; fi
    rm -rf "$d"
    for sc in keep-all ilp offload-all; do
      [ -x $B/bin/step-$m-$sc ] || continue
      echo "=== $m-$sc: 20 steps"
      step_run $m-$sc $B/bin/step-$m-$sc --backend "$BACKEND" --steps 20 | grep -v '^loss'
      grep '^loss' "$R/$m-$sc.txt" | sed -n '1p;$p'
      echo "=== $m-$sc: 3 steps, debug mode (random copy delays, NaN on death, occupancy checks)"
      step_run $m-$sc-debug $B/bin/step-$m-$sc --backend "$BACKEND" --steps 3 --debug | grep -E '^(error|state_hash|live_equals|part)'
    done
    for sc in ilp offload-all; do
      [ -f "$R/$m-$sc.txt" ] || continue
      compare "$R/$m-keep-all.txt" "$R/$m-$sc.txt"
      compare "$R/$m-keep-all-debug.txt" "$R/$m-$sc-debug.txt"
    done
    echo "=== $m keep-all on the CPU backend, 3 steps: losses next to the $BACKEND backend's"
    step_run $m-cpu $B/bin/step-$m-keep-all --backend cpu --steps 3 | grep '^part'
    paste <(grep '^loss' "$R/$m-cpu.txt" | awk '{print "cpu", $2, $3}') <(grep '^loss' "$R/$m-keep-all-debug.txt" | awk '{print "'"$BACKEND"'", $3}')
  done
  if [ -n "$nk" ]; then
    for sc in keep-all ilp; do
      echo "=== gpt2-tiny-$sc: 20 steps with RATION_CUDA_KERNELS=\"$nk\""
      step_run gpt2-tiny-$sc-next env RATION_CUDA_KERNELS="$nk" $B/bin/step-gpt2-tiny-$sc --backend "$BACKEND" --steps 20 |
        grep -E '^(error|measured|state_hash|part)'
    done
    compare "$R/gpt2-tiny-keep-all-next.txt" "$R/gpt2-tiny-ilp-next.txt"
  fi
}
stage tiny "$TINY_S" "$OUT/tiny.txt" tiny
grep -E '^(bitwise|torch_step|error|part .*exit [1-9])' "$OUT/tiny.txt" | sed 's/^/  tiny: /' | tee -a "$S"

# --------------------------------------------------------------- 4 g124
G124_STEPS=${G124_STEPS:-4}
export G124_STEPS
# g124_run NAME SCHEDULE KERNELS [ARGS...]: G124_STEPS steps of SCHEDULE's
# harness with RATION_CUDA_KERNELS=KERNELS, the GPU's memory sampled by
# nvidia-smi every 100 ms (its peak printed).
g124_run() {
  local name=$1 bin=$B/bin/step-$2 nk=$3 smi; shift 3
  [ -x "$bin" ] || { echo "=== $name: no binary $bin"; return; }
  echo "=== $name: $G124_STEPS steps $*${nk:+ with RATION_CUDA_KERNELS=\"$nk\"}"
  echo "# $name" >>"$B/smi.csv"
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 100 >>"$B/smi.csv" 2>/dev/null & smi=$!
  step_run "$name" env RATION_CUDA_KERNELS="$nk" "$bin" --backend "$BACKEND" --steps "$G124_STEPS" "$@"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  echo "nvidia_smi_peak_mib $(awk -F', ' -v s="# $name" '$0==s{on=1;next} /^#/{on=0} on&&$2>m{m=$2} END{print m+0}' "$B/smi.csv")"
}
# Most telling first: the baseline, the next kernels' speed, the unpadded
# vocabulary, then the plans' bitwise agreement.
g124() {
  local nk; nk=$(cat "$B/next_ops" 2>/dev/null)
  rm -f "$B/smi.csv"
  g124_run g124-keep-all g124-keep-all "" --canary
  [ -n "$nk" ] && g124_run g124-keep-all-next g124-keep-all "$nk"
  g124_run g124v50257-keep-all g124v50257-keep-all "" --canary
  [ -n "$nk" ] && g124_run g124v50257-keep-all-next g124v50257-keep-all "$nk"
  g124_run g124-ilp g124-ilp "" --canary
  g124_run g124-homes g124-homes "" --canary
  [ -n "$nk" ] && g124_run g124-ilp-next g124-ilp "$nk"
  compare "$R/g124-keep-all.txt" "$R/g124-ilp.txt"
  compare "$R/g124-keep-all.txt" "$R/g124-homes.txt"
  [ -n "$nk" ] && compare "$R/g124-keep-all-next.txt" "$R/g124-ilp-next.txt"
  true
}
cuda_stage g124 150 "$OUT/g124.txt" g124

# -------------------------------------------------------------- 5 torch
torch_ref() {
  for args in "g124v50304 plain" "g124v50304 ckpt" "g124v50257 plain"; do
    set -- $args
    part "torch-$2-$1" "$K/torch-$2-$1.txt" "$PY" gpu/torch_ref.py $G/$1.json --mode "$2" --steps 6 >/dev/null
    grep -E '^torch |Error|error' "$K/torch-$2-$1.txt" | tail -3
    tail -1 "$K/torch-$2-$1.txt"
  done
}
cuda_stage torch 75 "$OUT/torch.txt" torch_ref

# ------------------------------------------------------------- 6 replan
# Profiled on keep-all (the CUDA backend syncs after each op in profile
# mode, so an op after a prefetch wait would be charged the wait), with the
# next kernels that passed, as the re-planned run then uses them.
replan() {
  local nk; nk=$(cat "$B/next_ops" 2>/dev/null)
  local n=g124-pgo base=g124-keep-all${nk:+-next}
  mkdir -p $B && tar -C $B -xzf $G/planner.tar.gz 2>/dev/null
  local P="/lib64/ld-linux-x86-64.so.2 --library-path $B/planner/lib $B/planner/ration"
  if [ -x $B/planner/ration ] && [ -x $B/bin/step-g124-keep-all ]; then
    echo "=== profile-guided: op times measured here (keep-all, 3 profiled steps${nk:+, RATION_CUDA_KERNELS=\"$nk\"}), re-plan ilp at g124-ilp's budget, run"
    part g124-profile "$K/profile.txt" env RATION_CUDA_KERNELS="$nk" $B/bin/step-g124-keep-all --steps 3 \
      --profile "$B/g124.costs.json" >/dev/null
    grep -E '^(error|measured|part)' "$K/profile.txt"
    [ -s "$B/g124.costs.json" ] && "$PY" gpu/op_times.py $G/g124v50304.json "$B/g124.costs.json"
    if [ -s "$B/g124.costs.json" ] &&
       PART_S=90 part g124-replan "$K/replan.txt" $P plan $G/g124v50304.json --device "$REPLAN_DEVICE" --costs "$B/g124.costs.json" \
         --budget "$(awk '$1=="plan_budget_bytes"{print $2}' "$R/g124-ilp.txt")" -o $G/$n >/dev/null; then
      local D="-I$G -DSCHED_HEADER=\"$n.sched.h\" -DSCHED_ENTRY=ration_schedule_${n//-/_}"
      local CUL="-L$CUDA/lib64 -Wl,-rpath,$CUDA/lib64 -lcublasLt -lcudart -l:libstdc++.so.6 -lm -lpthread"
      $CC -O1 -std=c11 -Iruntime -I$G -c $G/$n.sched.c -o $B/$n.sched.o &&
      $CC -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I$CUDA/include $D -DWITH_CUDA -o $B/bin/step-$n gpu/step.c \
        $B/$n.sched.o -Wl,--wrap=cudaMalloc,--wrap=cudaMallocHost -Wl,--whole-archive $B/libration_cuda.a \
        -Wl,--no-whole-archive $B/libration.a $CUL &&
      step_run $n env RATION_CUDA_KERNELS="$nk" $B/bin/step-$n --steps "$G124_STEPS" | grep -E '^(error|strategy|plan_|live_|measured|part)'
      compare "$R/$base.txt" "$R/$n.txt"
    else echo "profile-guided re-plan: not run (no costs or the plan failed: $(tail -2 "$K/replan.txt" 2>/dev/null | tr '\n' ' '))"; fi
  else echo "profile-guided re-plan: no carried planner ($G/planner.tar.gz)"; fi
  [ -x $B/bin/step-g124-keep-all ] || return 0
  echo "=== g124-keep-all-wmma: $G124_STEPS steps with RATION_CUDA_ATTENTION=wmma"
  step_run g124-keep-all-wmma env RATION_CUDA_ATTENTION=wmma $B/bin/step-g124-keep-all --steps "$G124_STEPS" |
    grep -E '^(error|measured|loss|part)'
}
cuda_stage replan 90 "$OUT/replan.txt" replan

# ------------------------------------------------------------ 7 summary
# v FILE KEY: the value a run printed for KEY
v() { awk -v k="$2" '$1==k{print $2; exit}' "$1" 2>/dev/null; }
{
  echo
  echo "== device: ${GPU_NAME:-none} (BACKEND=$BACKEND); schedules planned with budgets/h100-sxm-80g.json, g124-pgo re-planned with $REPLAN_DEVICE"
  echo "== next kernels that passed, used by the *-next runs: ${NEXT_OK:-none}"
  echo "== memory and time per schedule (bytes; ms)"
  printf '%-26s %12s %12s %12s %12s %12s %12s %8s %9s %9s %s\n' schedule plan_peak live_hwm arena rt_cudaMalloc \
    memget_delta canary_top smi_MiB plan_ms meas_ms result
  echo "(plan_peak and arena include the plan's runtime bytes, the CUDA backend's status word and cuBLASLt"
  echo " workspace, on profiles that set runtime_bytes; rt_cudaMalloc is every byte libration cudaMalloc'd)"
  for f in "$R"/*.txt; do
    [ -f "$f" ] || continue
    case $f in *-debug.txt|*-cpu.txt) continue;; esac
    n=$(basename "$f" .txt)
    smi=$(grep -A99999 "^=== $n:" "$OUT/g124.txt" 2>/dev/null | awk '$1=="nvidia_smi_peak_mib"{print $2; exit}')
    st=$(sed -n 's/^part .*: exit \([0-9]*\),.*/\1/p' "$f" | tail -1)
    if grep -q '^error' "$f"; then res=$(grep -m1 '^error' "$f" | cut -c1-60)
    elif [ "${st:-x}" != 0 ]; then res="exit ${st:-none}$(grep -q 'part limit' "$f" && echo ' (time limit)')"
    else res=ok; fi
    printf '%-26s %12s %12s %12s %12s %12s %12s %8s %9s %9s %s\n' "$n" "$(v "$f" plan_peak_live_bytes)" \
      "$(v "$f" live_high_water)" "$(v "$f" plan_arena_bytes)" "$(v "$f" rt_cudaMalloc_bytes)" \
      "$(v "$f" memgetinfo_open_delta)" "$(v "$f" canary_top_offset)" "${smi:--}" "$(v "$f" plan_step_ms)" \
      "$(v "$f" measured_step_ms)" "$res"
  done
  grep -h '^bitwise' "$OUT/tiny.txt" "$OUT/g124.txt" "$OUT/replan.txt" 2>/dev/null
  grep -h 'canary_stray_blocks' "$R"/*.txt 2>/dev/null | sort | uniq -c | sed 's/^/  /'
  echo "== PyTorch (same graph sizes)"
  grep -h '^torch ' "$OUT/torch.txt" 2>/dev/null
  tp() { grep "^torch mode=$1 " "$OUT/torch.txt" 2>/dev/null | grep "params=$2" | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' | head -1; }
  t04=$(tp plain 124475904); t57=$(tp plain 124439808)
  k04=$(v "$R/g124-keep-all.txt" measured_step_ms); n04=$(v "$R/g124-keep-all-next.txt" measured_step_ms)
  k57=$(v "$R/g124v50257-keep-all.txt" measured_step_ms); n57=$(v "$R/g124v50257-keep-all-next.txt" measured_step_ms)
  echo "== speed, gpt2-124m keep-all step (ms): V 50304 default ${k04:--}, next ${n04:--} ($(ratio "$n04" "$k04") of default), PyTorch ${t04:--}: ration/PyTorch default $(ratio "$k04" "$t04"), next $(ratio "$n04" "$t04")"
  echo "== speed, V 50257: default ${k57:--}, next ${n57:--} ($(ratio "$n57" "$k57") of default), PyTorch ${t57:--}: ration/PyTorch default $(ratio "$k57" "$t57"), next $(ratio "$n57" "$t57")"
  echo "== total $((SECONDS - START)) s"
} >>"$S" 2>&1
grep -h '^op_time' "$OUT/replan.txt" >>"$S" 2>/dev/null
sed -n '/^== device/,$p' "$S"
