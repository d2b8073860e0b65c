#!/bin/sh
# bench_runtime.sh - the planner's step-time prediction against the
# runtime's measured step on the CPU backend, measured so that the
# machine's drift cannot fake or hide the error. This VM's speed drifts by
# up to 1.5x between runs seconds apart (bench/RESULTS.md), more than the
# model errs, so a prediction is only judged against runs taken under the
# same conditions as its profile:
#
#   for gpt2-tiny and llama-tiny, at 1 and 2 kernel threads, for keep-all
#   and the ilp at the budget points m + f (k - m), f = 0, 0.25, 0.5, 0.75,
#   1 (m: the smallest budget the planner can meet, named by `ration plan
#   --budget 1`; k: the keep-all peak), each row
#   1. plans with the costs of the keep-all profile run just before it
#      (`train --profile`: op times only; keep-all has no copies, so no
#      copy thread polls beside the kernels' threads);
#   2. alternates the plan's run and keep-all profile runs, A B A B ... A
#      (PAIRS plan runs, each between two profile runs; a row's last A is
#      the next row's first);
#   3. predicts each plan run from the profiles on either side of it (the
#      mean of `ration simulate --costs` with each: the prediction the
#      planner makes from a profile taken under the run's conditions) and
#      reports the median and range of predicted / measured over the pairs.
#
# Columns: the plan's own predicted step (from the profile it was planned
# with), the median measured step of the plan runs (each the median of
# steps 2..STEPS), their ratio (what the old one-profile-then-one-run
# method reported, which the drift fakes), the neighbour-profile ratio (median [min-max] over the
# pairs), the simulator on the plan run's own op times over its measured
# step (the model's error with no drift at all; median over the pairs), the
# drift: the keep-all runs' spread in the row (slowest / fastest measured
# step of its profile runs), and the 1-minute load average when the row
# finished (the machine is shared: alternation is what makes figures taken
# under load comparable). Each block of rows (model, threads) ends with a
# line for all its keep-all profile runs: their median and spread.
# Usage (repo root, after make): sh bench/bench_runtime.sh [STEPS] [PAIRS]
#   MODELS, THREADS, FS (the f values) and STRATEGY (default ilp) narrow it.
set -e
BUILD=${BUILD:-build/rel}
R=bin/ration
STEPS=${1:-20}
PAIRS=${2:-${PAIRS:-3}}
MODELS=${MODELS:-gpt2-tiny llama-tiny}
THREADS=${THREADS:-1 2}
FS=${FS:-0 0.25 0.5 0.75 1}
STRATEGY=${STRATEGY:-ilp}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
DEV=budgets/cpu.json

build() { # schedule base path, output binary
  name=$(basename "$1"); id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '_')
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$(dirname "$1")" -DSCHED_HEADER="\"$name.sched.h\"" \
    -DSCHED_ENTRY="ration_schedule_$id" -o "$2" examples/train.c "$1.sched.c" "$BUILD/libration.a" -lm -lpthread
}
field() { grep -o "\"$1\": [^,}]*" "$2" | head -1 | sed 's/.*: //'; }
measured() { sed -n 's/^step time: .* measured \([0-9.]*\) ms.*/\1/p'; }
simulate_ms() { # graph, plan, costs
  $R simulate "$1" "$2" --device $DEV --costs "$3" | sed -n 's/^step_seconds \([0-9.e+-]*\) .*/\1/p' |
    awk '{ printf "%.3f", $1 * 1e3 }'
}
# A: a keep-all profile run; appends its measured step to $tmp/a.ms and
# leaves its profile in $tmp/a$na.json.
profile_run() {
  na=$((na + 1))
  "$tmp/train-k" --steps "$STEPS" --threads "$n" --sample 0 --profile "$tmp/a$na.json" | measured >>"$tmp/a.ms"
}
# Median, min and max of the numbers on stdin, "%.3f [%.3f-%.3f]".
stats() { sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
  printf "%.3f [%.3f-%.3f]", m, v[1], v[NR] }'; }
median() { stats | cut -d' ' -f1; }

plan_at() { # strategy; plans $g at $budget with the last profile's costs
  $R plan "$g" --device $DEV --costs "$tmp/a$na.json" --strategy "$1" --budget "$budget" --time-limit 20 \
    -o "$tmp/p" >/dev/null 2>"$tmp/err"
}
# One row: model, row name, budget (bytes or a percentage), strategy, and
# "smallest" where the budget is m.
row() {
  g=models/$1.json
  : >"$tmp/a.ms"; tail -1 "$tmp/all-a.ms" >"$tmp/a.ms"
  # m was found on the device file's costs; with the profile's the smallest
  # budget moves a little, and f = 0 means the smallest one these costs allow.
  budget=$3; planned=
  plan_at "$4" && planned=1
  if [ -z "$planned" ] && [ "$5" = smallest ]; then
    budget=$(sed -n 's/.*smallest budget planned is \([0-9]*\) bytes.*/\1/p' "$tmp/err")
    [ -n "$budget" ] && plan_at "$4" && planned=1
  fi
  if [ -z "$planned" ]; then
    echo "| $1 | $n | $2 | $3 | no plan: $(sed -n '1s/^[^:]*: //p' "$tmp/err" | cut -c1-100) | | | | | | $(cut -d' ' -f1 /proc/loadavg) |"
    return
  fi
  build "$tmp/p" "$tmp/train-p"
  : >"$tmp/b.ms"; : >"$tmp/ratio"; : >"$tmp/own"
  for i in $(seq "$PAIRS"); do
    before=$(simulate_ms "$g" "$tmp/p.plan.json" "$tmp/a$na.json")
    b=$("$tmp/train-p" --steps "$STEPS" --threads "$n" --sample 0 --profile "$tmp/b.json" | measured)
    profile_run
    after=$(simulate_ms "$g" "$tmp/p.plan.json" "$tmp/a$na.json")
    own=$(simulate_ms "$g" "$tmp/p.plan.json" "$tmp/b.json")
    echo "$b" >>"$tmp/b.ms"
    echo "$before $after $b" | awk '{ printf "%.4f\n", ($1 + $2) / 2 / $3 }' >>"$tmp/ratio"
    echo "$own $b" | awk '{ printf "%.4f\n", $1 / $2 }' >>"$tmp/own"
  done
  tail -n +2 "$tmp/a.ms" >>"$tmp/all-a.ms"
  pred=$(field step_seconds "$tmp/p.plan.json" | awk '{ printf "%.3f", $1 * 1e3 }')
  meas=$(median <"$tmp/b.ms")
  echo "| $1 | $n | $2 | $(field budget_bytes "$tmp/p.plan.json") | $pred | $meas |\
 $(echo "$pred $meas" | awk '{ printf "%.3f", $1 / $2 }') | $(stats <"$tmp/ratio") | $(median <"$tmp/own") | $(sort -g "$tmp/a.ms" | awk 'NR == 1 { lo = $1 } { hi = $1 }
  END { printf "%.2f", hi / lo }') | $(cut -d' ' -f1 /proc/loadavg) |"
}

echo "| model | threads | row | budget (bytes) | predicted ms (plan) | measured ms (median) | plan / measured | predicted (neighbour profiles) / measured | own times / measured | keep-all spread | load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for model in $MODELS; do
  g=models/$model.json
  $R plan "$g" --device $DEV --strategy keep-all --budget 200% -o "$tmp/k" >/dev/null
  k=$(field peak_live_bytes "$tmp/k.plan.json")
  m=$($R plan "$g" --device $DEV --budget 1 -o "$tmp/m" 2>&1 >/dev/null | sed -n 's/.*smallest budget planned is \([0-9]*\) bytes.*/\1/p')
  build "$tmp/k" "$tmp/train-k"
  for n in $THREADS; do
    na=0; : >"$tmp/a.ms"; profile_run; cp "$tmp/a.ms" "$tmp/all-a.ms"
    row "$model" keep-all 200% keep-all
    for f in $FS; do
      row "$model" "$STRATEGY f=$f" "$(awk -v m="$m" -v k="$k" -v f="$f" 'BEGIN { printf "%.0f", m + f * (k - m) }')" \
        "$STRATEGY" "$([ "$f" = 0 ] && echo smallest)"
    done
    echo "| $model | $n | keep-all runs of the block | | | $(median <"$tmp/all-a.ms") | | | | $(sort -g "$tmp/all-a.ms" |
      awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f", hi / lo }') | $(cut -d' ' -f1 /proc/loadavg) |"
  done
done
