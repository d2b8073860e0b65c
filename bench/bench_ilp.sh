#!/bin/sh
# bench_ilp.sh - the ilp strategy's solve time, status and gap per model at
# the budget points m + f (k - m) (m: the ilp's smallest budget with every
# resident tensor on the device, bench/min_budget.c, so that no point sends
# the planner to host-home params or optimizer state; k: the keep-all peak),
# with the simulated step time over keep-all's, the wall time of the whole
# `ration plan` run and its CPU time (user + system, /usr/bin/time: on a
# machine others load, the wall time is not the planner's). Markdown on
# stdout, for bench/RESULTS.md.
# --tight-bound passes `ration plan --tight-bound` (the bound over plans with
# homes from one more LP, counted in the CPU time).
#   sh bench/bench_ilp.sh [--device D] [--time-limit S] [--tight-bound] [--points "0 0.5 1"] [MODEL...]
RATION=${RATION:-bin/ration}
device=h100-sxm-80g; opts=""; points="0 0.5 1"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2;;
    --time-limit) opts="$opts --time-limit $2"; shift 2;;
    --tight-bound) opts="$opts --tight-bound"; shift;;
    --points) points=$2; shift 2;;
    *) break;;
  esac
done
[ $# -eq 0 ] && set -- models/gpt2-tiny.json models/llama-tiny.json models/unet.json models/gpt2-124m.json \
  models/llama3.2-1b.json models/llama3-8b.json models/gpt2-1558m.json
. bench/min_budget.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { grep -o "\"$1\": [^,}]*" "$2" | head -1 | sed 's/.*: //; s/"//g'; }
now() { date +%s.%N; }
echo "| model | f | budget (bytes) | step / keep-all | status | objective (us) | bound (us) | gap | solver s | wall s | CPU s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for g in "$@"; do
  name=$(basename "$g" .json)
  $RATION plan "$g" --device "$device" --strategy keep-all --budget 1000% -o "$tmp/k" >/dev/null 2>&1 || continue
  # k is a budget, and budgets bound arenas: keep-all's arena where
  # alignment pads it above its peak (as `ration report` takes k).
  k=$(field peak_live_bytes "$tmp/k.plan.json"); a=$(field arena_bytes "$tmp/k.plan.json")
  [ "$a" -gt "$k" ] && k=$a
  base=$(field step_seconds "$tmp/k.plan.json")
  m=$(build/min_budget "$g" "$device_file" 2>/dev/null)
  [ -z "$m" ] && { echo "| $name | - | - | no smallest budget named | | | | | | | |"; continue; }
  for f in $points; do
    b=$(awk -v m="$m" -v k="$k" -v f="$f" 'BEGIN { printf "%.0f", m + f * (k - m) }')
    t0=$(now)
    if /usr/bin/time -f "%U %S" -o "$tmp/cpu" $RATION plan "$g" --device "$device" $opts --budget "$b" -o "$tmp/p" \
         >/dev/null 2>"$tmp/err"; then
      t1=$(now); cpu=$(awk 'END { printf "%.2f", $1 + $2 }' "$tmp/cpu")
      awk -v n="$name" -v f="$f" -v b="$b" -v s="$(field step_seconds "$tmp/p.plan.json")" -v base="$base" \
          -v st="$(field status "$tmp/p.plan.json")" -v o="$(field objective "$tmp/p.plan.json")" \
          -v bd="$(field bound "$tmp/p.plan.json")" -v gap="$(field gap "$tmp/p.plan.json")" \
          -v sec="$(field seconds "$tmp/p.plan.json")" -v t0="$t0" -v t1="$t1" -v cpu="$cpu" \
          'BEGIN { printf "| %s | %s | %s | %.4f | %s | %.1f | %.1f | %.4f | %.2f | %.2f | %s |\n", n, f, b, s / base, st, o, bd, gap, sec, t1 - t0, cpu }'
    else
      echo "| $name | $f | $b | infeasible: $(head -c 120 "$tmp/err") | | | | | | | |"
    fi
  done
done
