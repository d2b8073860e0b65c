#!/bin/sh
# bench_least.sh - whether `ration plan` is monotone across the ilp's
# smallest all-device budget m (bench/min_budget.c), where the homes rule
# takes over below it: the simulated step at m - 1, m and m + 1% for small
# llama and gpt2 configurations (LAYERS:DIM:SEQ:BATCH, bf16, vocab 512, 4
# heads) on a device, with each run's CPU seconds (user + system). A step
# that rises with the budget is marked "RISES". Markdown on stdout.
#   sh bench/bench_least.sh [--device D] [llama|gpt2:LAYERS:DIM:SEQ:BATCH ...]
RATION=${RATION:-bin/ration}
device=h100-sxm-80g
[ "$1" = --device ] && { device=$2; shift 2; }
[ $# -eq 0 ] && set -- llama:2:256:512:4 llama:3:192:512:4 gpt2:2:256:512:4 gpt2:3:128:1024:4
. bench/min_budget.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "| graph ($device) | m | step at m - 1, CPU s | at m | at m + 1% |"
echo "|---|---|---|---|---|"
for spec in "$@"; do
  IFS=: read -r family layers dim seq batch <<EOS
$spec
EOS
  g=$tmp/$family.json
  extra=""; [ "$family" = llama ] && extra="--kv-heads 4 --ffn $((dim * 3))"
  $RATION model "$family" --layers "$layers" --dim "$dim" --heads 4 $extra --vocab 512 --seq "$seq" --batch "$batch" \
    --dtype bf16 -o "$g" >/dev/null || { echo "| $spec | model failed | | | |"; continue; }
  m=$(build/min_budget "$g" "$device_file" 2>/dev/null)
  [ -z "$m" ] && { echo "| $spec | no smallest budget | | | |"; continue; }
  row="| $spec | $m"; prev=""
  for b in $((m - 1)) "$m" $((m + m / 100)); do
    /usr/bin/time -f "%U %S" "$RATION" plan "$g" --device "$device" --budget "$b" -o "$tmp/p" >/dev/null 2>"$tmp/err"
    step=$(sed -n 's/.*"step_seconds": \([0-9.e-]*\).*/\1/p' "$tmp/p.plan.json" | head -1)
    cpu=$(tail -1 "$tmp/err" | awk '{ printf "%.2f", $1 + $2 }')
    mark=$(awk -v s="$step" -v p="$prev" 'BEGIN { if (p != "" && s > p * (1 + 1e-12)) print " RISES" }')
    row="$row | $(awk -v s="$step" 'BEGIN { printf "%.1f us", s * 1e6 }'), $cpu$mark"
    prev=$step; rm -f "$tmp/p.plan.json"
  done
  echo "$row |"
done
