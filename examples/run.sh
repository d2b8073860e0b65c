#!/bin/sh
# run.sh - `make run`: the whole pipeline on a small model, end to end.
#   1. generate gpt2-tiny (the command of models/README.md)
#   2. measure its op times and copies: an offload-all schedule (every op
#      once, every copy the graph can have), 5 profiled steps
#   3. plan it with those costs at the midpoint budget, halfway between the
#      smallest budget the strategy planned (the one its error names, or
#      found by bisection) and the keep-all peak, without a time limit (so
#      the same plan on a busy machine); then profile that plan's own run (5
#      steps) and plan again from its op times at the same budget (two-pass
#      profile-guided planning), and emit the C schedule
#   4. build examples/train.c against that schedule and libration (with the
#      CUDA backend when it was built; it is used when a GPU is present)
#   5. train on the bytes of the GPL-3 text: falling loss, a sample, the
#      live peak against the budget, predicted against measured step time
set -e
BUILD=${BUILD:-build/rel}
R=bin/ration
OUT=build/run
STEPS=${STEPS:-300}
DATA=/usr/share/common-licenses/GPL-3
mkdir -p $OUT

DEV=budgets/cpu.json
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then DEV=budgets/a100-80g.json; fi
STRATEGIES=$($R 2>&1 | sed -n 's/^strategies: //p')
STRATEGY=keep-all
for s in ilp checkpoint-layers knapsack; do
  case " $STRATEGIES " in *" $s "*) STRATEGY=$s; break;; esac
done

echo "== 1. generate gpt2-tiny"
$R model gpt2 --layers 4 --dim 64 --heads 4 --vocab 256 --seq 128 --batch 8 --dtype f32 --lr 0.001 \
  -o $OUT/gpt2-tiny.json

# The trainer, built against schedule $1 (base path, without .sched.c).
build_trainer() {
  name=$(basename "$1")
  id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '_')
  cuda=""
  if [ -f "$BUILD/libration_cuda.a" ]; then
    cuda="-Wl,--whole-archive $BUILD/libration_cuda.a -Wl,--no-whole-archive"
    cuda_libs="-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcudart -lstdc++"
  fi
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$(dirname "$1")" \
    -DSCHED_HEADER="\"$name.sched.h\"" -DSCHED_ENTRY="ration_schedule_$id" \
    -o "$2" examples/train.c "$1.sched.c" $cuda "$BUILD/libration.a" $cuda_libs -lm -lpthread
}

PROFILE=keep-all
case " $STRATEGIES " in *" offload-all "*) PROFILE=offload-all;; esac
echo "== 2. measure op times and copies ($PROFILE schedule, 5 profiled steps)"
$R plan $OUT/gpt2-tiny.json --device $DEV --strategy $PROFILE --budget 200% -o $OUT/profile >/dev/null
build_trainer $OUT/profile $OUT/train-profile
$OUT/train-profile --steps 5 --data $DATA --graph $OUT/gpt2-tiny.json --profile $OUT/gpt2-tiny.costs.json | tail -1

echo "== 3. plan at the midpoint budget ($STRATEGY)"
keep=$($R info $OUT/gpt2-tiny.json --device $DEV | sed -n 's/^  keep-all .*(\([0-9]*\) bytes)$/\1/p')
lo=$($R info $OUT/gpt2-tiny.json --device $DEV | sed -n 's/^  lower bound .*(\([0-9]*\) bytes)$/\1/p')
fits() { $R plan $OUT/gpt2-tiny.json --device $DEV --costs $OUT/gpt2-tiny.costs.json --strategy $STRATEGY \
           --budget "$1" -o $OUT/probe >/dev/null 2>&1; }
named=$($R plan $OUT/gpt2-tiny.json --device $DEV --costs $OUT/gpt2-tiny.costs.json --strategy $STRATEGY \
          --budget 1 -o $OUT/probe 2>&1 | sed -n 's/.*the smallest budget planned is \([0-9]*\) bytes.*/\1/p')
if [ "$STRATEGY" = keep-all ]; then
  min=$keep
elif [ -n "$named" ] && fits "$named"; then
  min=$named
else
  hi=$keep
  while ! fits $hi; do hi=$((hi + hi / 8)); done
  # smallest feasible budget to within 1% of keep-all
  while [ $((hi - lo)) -gt $((keep / 100)) ]; do
    mid=$(((lo + hi) / 2))
    if fits $mid; then hi=$mid; else lo=$mid; fi
  done
  min=$hi
fi
budget=$(((min + keep) / 2))
echo "keep-all peak $keep bytes, smallest feasible ~$min bytes, midpoint budget $budget bytes"
# No time limit: the plan is the same on an idle or a busy machine.
until $R plan $OUT/gpt2-tiny.json --device $DEV --costs $OUT/gpt2-tiny.costs.json --strategy $STRATEGY \
        --budget $budget -o $OUT/gpt2-tiny 2>/dev/null; do
  budget=$((budget + keep / 100))
done

# Second pass: a plan's ops need not run at the profiled schedule's speed
# (on a CPU a plan's smaller arena sits better in the caches), so profile
# the plan itself and plan again from its op times at the same budget.
echo "== 3b. profile the plan (5 steps) and plan again from its op times"
build_trainer $OUT/gpt2-tiny $OUT/train-first
$OUT/train-first --steps 5 --data $DATA --graph $OUT/gpt2-tiny.json --profile $OUT/gpt2-tiny.plan-costs.json | tail -1
$R plan $OUT/gpt2-tiny.json --device $DEV --costs $OUT/gpt2-tiny.plan-costs.json --strategy $STRATEGY \
  --budget $budget -o $OUT/gpt2-tiny

echo "== 4. build the trainer against $OUT/gpt2-tiny.sched.c"
build_trainer $OUT/gpt2-tiny $OUT/train

echo "== 5. train $STEPS steps on $DATA"
$OUT/train --steps "$STEPS" --data $DATA --graph $OUT/gpt2-tiny.json
