#!/bin/sh
# bench_copy_threads.sh - the executor overhead of copy-heavy schedules, this
# tree's CPU runtime against the runtime at REV, side by side. gpt2-tiny and
# llama-tiny planned offload-all (every copy the graph can have, about 120
# a step), one trainer (examples/train.c) linked with each runtime; ROUNDS
# rounds, each running every trainer for STEPS steps in turn. The machine
# is shared and the overhead of waking a copy thread depends on whether the
# other core is idle, so each run starts only once both cores have been
# more than 90% idle for 2 s, and reports the other processes' share of a
# core while it ran (the system's busy time minus the trainer's own CPU
# time; the kernel samples busy time at ticks, so a trainer whose copy
# threads sleep in short naps can make it read a little below 0).
# Per run: median step time, executor overhead (the calling thread's CPU
# time outside kernels, % of the step), the trainer's CPU seconds per step
# (all threads), the others' share.
# Usage (repo root, after make): sh bench/bench_copy_threads.sh [ROUNDS] [REV] [STEPS]
# (REV defaults to the commit before the copy threads polled.)
set -e
BUILD=${BUILD:-build/rel}
ROUNDS=${1:-3}
REV=${2:-19087e2^}
STEPS=${3:-20}
R=bin/ration
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

git archive "$REV" runtime | tar -x -C "$tmp"
for f in "$tmp"/runtime/*.c; do
  cc -D_POSIX_C_SOURCE=200809L -I"$tmp/runtime" -std=c11 -O2 -g -c "$f" -o "${f%.c}.o"
done
ar rcs "$tmp/old.a" "$tmp"/runtime/*.o

for m in gpt2-tiny llama-tiny; do
  $R plan models/$m.json --device budgets/cpu.json --strategy offload-all --budget 200% -o "$tmp/$m" >/dev/null
  id=$(echo "$m" | tr -c 'A-Za-z0-9\n' '_')
  for v in old new; do
    lib=$BUILD/libration.a; inc=runtime
    [ $v = old ] && lib=$tmp/old.a && inc=$tmp/runtime
    cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -I"$inc" -I"$tmp" -DSCHED_HEADER="\"$m.sched.h\"" \
      -DSCHED_ENTRY="ration_schedule_$id" -o "$tmp/train-$m-$v" examples/train.c "$tmp/$m.sched.c" "$lib" -lm -lpthread
  done
done

busy() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
idle_total() { awk '/^cpu /{ print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
quiet() {
  while :; do
    a=$(idle_total); sleep 2; b=$(idle_total)
    echo "$a $b" | awk '{ exit !(($3 - $1) >= 0.9 * ($4 - $2)) }' && return
  done
}

echo "| model | runtime | measured ms | executor overhead | trainer CPU s / step | others' share of a core |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
  for m in gpt2-tiny llama-tiny; do
    for v in old new; do
      quiet
      b0=$(busy); t0=$(date +%s.%N)
      out=$( { /usr/bin/time -f "cpu %U %S" "$tmp/train-$m-$v" --steps "$STEPS" --sample 0; } 2>&1)
      b1=$(busy); t1=$(date +%s.%N)
      meas=$(echo "$out" | sed -n 's/.*measured \([0-9.]*\) ms.*/\1/p')
      over=$(echo "$out" | sed -n 's/.*executor overhead \([0-9.]*%\).*/\1/p')
      cpu=$(echo "$out" | sed -n 's/^cpu //p')
      name=$v; [ $v = old ] && name="$REV"
      echo "$m $name $meas $over $cpu $b0 $b1 $t0 $t1 $STEPS" | awk '{ mine = $5 + $6; others = ($8 - $7) / 100 - mine;
        printf "| %s | %s | %s | %s | %.3f | %.0f%% |\n", $1, $2, $3, $4, mine / $11, 100 * others / ($10 - $9) }'
    done
  done
done
