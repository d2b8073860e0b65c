#!/bin/sh
# bench_runtime.sh - the runtime against the planner's predictions on the CPU
# backend. For gpt2-tiny and llama-tiny, under every strategy at the budget
# points m + f (k - m), f = 0, 0.25, 0.5, 0.75, 1 (m: the smallest budget the
# planner can meet, named by `ration plan --budget 1`; k: the keep-all peak),
# each row:
#   1. profile STEPS steps of an offload-all schedule (every op once and every
#      copy the graph can have: op medians, copy bandwidths and the copies'
#      share of the compute stream, measured while compute runs);
#   2. plan with those costs (--costs), build examples/train.c against the
#      emitted schedule, run STEPS steps, profiled too.
# Prints a Markdown table: the plan's predicted step time (from the profiling
# run), the simulator's prediction for the same plan from the times measured
# in the run itself (`ration simulate --costs`: the model's error without the
# machine's load drifting between two runs), the measured median step time
# (steps 2..STEPS), the ratios, the executor's overhead (the calling thread's
# CPU time outside kernels) as a share of the step, and the 1-minute load
# average when the row finished (the machine is shared).
# Usage (repo root, after make): sh bench/bench_runtime.sh [STEPS]
set -e
BUILD=${BUILD:-build/rel}
R=bin/ration
STEPS=${1:-20}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
DEV=budgets/cpu.json
strategies=$($R 2>&1 | sed -n 's/^strategies: //p')

build() { # schedule base path, output binary
  name=$(basename "$1"); id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '_')
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$(dirname "$1")" -DSCHED_HEADER="\"$name.sched.h\"" \
    -DSCHED_ENTRY="ration_schedule_$id" -o "$2" examples/train.c "$1.sched.c" "$BUILD/libration.a" -lm -lpthread
}
field() { grep -o "\"$1\": [^,}]*" "$2" | head -1 | sed 's/.*: //'; }

# One row: model, strategy, f, budget (bytes or a percentage).
row() {
  g=models/$1.json
  # Profile right before planning: the machine's load drifts.
  "$tmp/train-prof" --steps "$STEPS" --sample 0 --profile "$tmp/prof.costs.json" >/dev/null
  if ! $R plan $g --device $DEV --costs "$tmp/prof.costs.json" --strategy "$2" --budget "$4" --time-limit 20 \
       -o "$tmp/$1" >/dev/null 2>"$tmp/err"; then
    echo "| $1 | $2 | $3 | $4 | no plan: $(sed -n '1s/^[^:]*: //p' "$tmp/err" | cut -c1-110) | | | | | | $(cut -d' ' -f1 /proc/loadavg) |"
    return
  fi
  build "$tmp/$1" "$tmp/train"
  line=$("$tmp/train" --steps "$STEPS" --sample 0 --profile "$tmp/run.costs.json" | grep '^step time')
  pred=$(echo "$line" | sed -n 's/.*predicted \([0-9.]*\) ms.*/\1/p')
  meas=$(echo "$line" | sed -n 's/.*measured \([0-9.]*\) ms.*/\1/p')
  over=$(echo "$line" | sed -n 's/.*executor overhead \([0-9.]*%\).*/\1/p')
  same=$($R simulate $g "$tmp/$1.plan.json" --device $DEV --costs "$tmp/run.costs.json" |
         sed -n 's/^step_seconds \([0-9.e+-]*\) .*/\1/p' | awk '{ printf "%.3f", $1 * 1e3 }')
  echo "| $1 | $2 | $3 | $(field budget_bytes "$tmp/$1.plan.json") | $pred | $same | $meas |\
 $(echo "$pred $meas" | awk '{ printf "%.3f", $1 / $2 }') | $(echo "$same $meas" | awk '{ printf "%.3f", $1 / $2 }') |\
 $over | $(cut -d' ' -f1 /proc/loadavg) |"
}

echo "| model | strategy | f | budget (bytes) | predicted ms (plan) | predicted ms (this run's times) | measured ms | plan/measured | this run/measured | executor overhead | load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for model in gpt2-tiny llama-tiny; do
  g=models/$model.json
  $R plan $g --device $DEV --strategy keep-all --budget 200% -o "$tmp/k" >/dev/null
  k=$(field peak_live_bytes "$tmp/k.plan.json")
  m=$($R plan $g --device $DEV --budget 1 -o "$tmp/m" 2>&1 >/dev/null | sed -n 's/.*smallest budget planned is \([0-9]*\) bytes.*/\1/p')
  $R plan $g --device $DEV --strategy offload-all --budget 200% -o "$tmp/prof" >/dev/null
  build "$tmp/prof" "$tmp/train-prof"
  row $model keep-all - 200%
  for s in $strategies; do
    [ "$s" = keep-all ] && continue
    for f in 0 0.25 0.5 0.75 1; do
      row $model "$s" $f "$(awk -v m="$m" -v k="$k" -v f="$f" 'BEGIN { printf "%.0f", m + f * (k - m) }')"
    done
  done
done
