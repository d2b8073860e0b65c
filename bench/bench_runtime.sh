#!/bin/sh
# bench_runtime.sh - the runtime against the planner's predictions on the CPU
# backend. For gpt2-tiny and llama-tiny, under every strategy at several
# budgets: profile STEPS keep-all steps (rt_write_profile), plan with those
# measured costs (--costs), build examples/train.c against the emitted
# schedule and run STEPS steps (profiled too). Prints a Markdown table: the
# plan's predicted step time (the simulator's, from the keep-all profile),
# the simulator's prediction for the same plan from the op times measured in
# the run itself (`ration simulate --costs`: the model's error without the
# machine's load drifting between two runs), the measured median step time
# (steps 2..STEPS), the ratios, and the executor's overhead (the calling
# thread's CPU time outside kernels) as a share of the step.
# Usage (repo root, after make): sh bench/bench_runtime.sh [STEPS]
set -e
BUILD=${BUILD:-build/rel}
R=bin/ration
STEPS=${1:-12}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
DEV=budgets/cpu.json
strategies=$($R 2>&1 | sed -n 's/^strategies: //p')

build() { # schedule base path, output binary
  name=$(basename "$1"); id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '_')
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$(dirname "$1")" -DSCHED_HEADER="\"$name.sched.h\"" \
    -DSCHED_ENTRY="ration_schedule_$id" -o "$2" examples/train.c "$1.sched.c" "$BUILD/libration.a" -lm -lpthread
}

echo "| model | strategy | budget (% of keep-all peak) | predicted ms (plan) | predicted ms (this run's op times) | measured ms | plan/measured | this run/measured | executor overhead |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in gpt2-tiny llama-tiny; do
  g=models/$model.json
  $R plan $g --device $DEV --budget 200% -o "$tmp/prof" >/dev/null
  build "$tmp/prof" "$tmp/train-prof"
  for s in $strategies; do
    for pct in 100 80 60 45; do
      [ "$s" = keep-all ] && [ $pct != 100 ] && continue
      b=$pct%; [ "$s" = keep-all ] && b=200%
      # Profile right before planning: the machine's load drifts.
      "$tmp/train-prof" --steps "$STEPS" --sample 0 --profile "$tmp/$model.costs.json" >/dev/null
      if ! $R plan $g --device $DEV --costs "$tmp/$model.costs.json" --strategy "$s" --budget $b --time-limit 20 \
           -o "$tmp/$model" >/dev/null 2>"$tmp/err"; then
        echo "| $model | $s | $pct | infeasible | | | | | |"; continue
      fi
      build "$tmp/$model" "$tmp/train"
      line=$("$tmp/train" --steps "$STEPS" --sample 0 --profile "$tmp/run.costs.json" | grep '^step time')
      pred=$(echo "$line" | sed -n 's/.*predicted \([0-9.]*\) ms.*/\1/p')
      meas=$(echo "$line" | sed -n 's/.*measured \([0-9.]*\) ms.*/\1/p')
      over=$(echo "$line" | sed -n 's/.*executor overhead \([0-9.]*%\).*/\1/p')
      same=$($R simulate $g "$tmp/$model.plan.json" --device $DEV --costs "$tmp/run.costs.json" |
             sed -n 's/^step_seconds \([0-9.e+-]*\) .*/\1/p' | awk '{ printf "%.3f", $1 * 1e3 }')
      echo "| $model | $s | $pct | $pred | $same | $meas | $(echo "$pred $meas" | awk '{ printf "%.3f", $1 / $2 }') |\
 $(echo "$same $meas" | awk '{ printf "%.3f", $1 / $2 }') | $over |"
    done
  done
done
