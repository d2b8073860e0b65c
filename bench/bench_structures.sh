#!/bin/sh
# bench_structures.sh - the ilp strategy on graphs of structures it was not
# tuned on (bench/gen_graph.py), without --time-limit: per graph the wall
# time and the CPU time (user + system, /usr/bin/time: on a machine others
# load, the wall time is not the planner's) of `ration plan` at the budget
# points m + f (k - m) (m: the smallest budget planned, from the error at 1
# byte; k: the keep-all peak), its status and its gap to the bound.
# Markdown on stdout, for bench/RESULTS.md.
#   sh bench/bench_structures.sh [--device D] [--points "0 0.5 1"] [--seed S] [--layers "4 16"]
#        [--only "chain skips ..."] [--timeout S]
# --timeout S stops a solve, and the search for m, after S seconds (the row
# then says so).
# The tuning set is seed 1; a hold-out set is any other seed (--seed 2),
# which nothing in the planner was tuned on.
RATION=${RATION:-bin/ration}
device=h100-sxm-80g; points="0 0.5 1"; seed=1; layers="4 16"; only="chain skips encdec cond fanout dag"; timeout=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2;;
    --points) points=$2; shift 2;;
    --seed) seed=$2; shift 2;;
    --layers) layers=$2; shift 2;;
    --only) only=$2; shift 2;;
    --timeout) timeout=$2; shift 2;;
    *) echo "bench_structures.sh: unknown argument $1" >&2; exit 2;;
  esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v := v[k] for k in sys.argv[2:]]; print(v)' "$@"; }
now() { date +%s.%N; }
echo "| graph | ops | f | budget (bytes) | step / keep-all | status | gap | wall s | CPU s |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $layers; do
  for s in $only; do
    g="$tmp/$s-$n.json"
    python3 bench/gen_graph.py $s --layers "$n" --dim 256 --seed "$seed" -o "$g" || continue
    ops=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["ops"]))' "$g")
    $RATION plan "$g" --device "$device" --strategy keep-all --budget 1000% -o "$tmp/k" >/dev/null 2>&1 || continue
    k=$(field "$tmp/k.plan.json" predicted peak_live_bytes); base=$(field "$tmp/k.plan.json" predicted step_seconds)
    m=$(timeout "$timeout" $RATION plan "$g" --device "$device" --budget 1 -o "$tmp/m" 2>&1 >/dev/null |
        sed -n 's/.*smallest budget planned is \([0-9]*\) bytes.*/\1/p')
    [ -z "$m" ] && { echo "| $s-$n seed $seed | $ops | - | - | no smallest budget planned (or stopped after $timeout s) | | | | |"; continue; }
    for f in $points; do
      b=$(awk -v m="$m" -v k="$k" -v f="$f" 'BEGIN { printf "%.0f", m + f * (k - m) }')
      t0=$(now)
      rm -f "$tmp/p.plan.json"
      if /usr/bin/time -f "%U %S" -o "$tmp/cpu" timeout "$timeout" $RATION plan "$g" --device "$device" --budget "$b" -o "$tmp/p" \
           >/dev/null 2>"$tmp/err"; then
        t1=$(now); cpu=$(awk 'END { printf "%.2f", $1 + $2 }' "$tmp/cpu")
        awk -v n="$s-$n seed $seed" -v ops="$ops" -v f="$f" -v b="$b" -v st="$(field "$tmp/p.plan.json" predicted step_seconds)" \
            -v base="$base" -v status="$(field "$tmp/p.plan.json" solver status)" -v gap="$(field "$tmp/p.plan.json" solver gap)" \
            -v t0="$t0" -v t1="$t1" -v cpu="$cpu" \
            'BEGIN { printf "| %s | %s | %s | %s | %.4f | %s | %.2f%% | %.2f | %s |\n", n, ops, f, b, st / base, status, 100 * gap, t1 - t0, cpu }'
      else
        t1=$(now); cpu=$(awk 'END { printf "%.2f", $1 + $2 }' "$tmp/cpu")
        [ "$timeout" != 0 ] && [ ! -s "$tmp/err" ] && echo "$timeout s: stopped" >"$tmp/err"
        echo "| $s-$n seed $seed | $ops | $f | $b | no plan: $(head -c 120 "$tmp/err") | | | $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') | $cpu |"
      fi
    done
  done
done
