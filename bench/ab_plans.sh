#!/bin/sh
# ab_plans.sh - two ration binaries side by side on the ilp strategy: per
# graph, m (the smallest budget B's refusal at 1 byte names) and k (keep-all's
# peak), then at each budget point m + f (k - m) both binaries plan at once
# (one per core), and the line says each one's step, its CPU seconds (user,
# /usr/bin/time) and whether the plans are the same: "identical" (the plan
# files but for solver.seconds, and sched.c), "same schedule" (sched.c only:
# the solver's counts differ) or "differ".
#   sh bench/ab_plans.sh [--device D] [--points "0 0.1"] A B GRAPH...
device=budgets/h100-sxm-80g.json; points="0 0.1 0.25"
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2;;
    --points) points=$2; shift 2;;
    *) break;;
  esac
done
[ $# -ge 3 ] || { echo "usage: sh bench/ab_plans.sh [--device D] [--points \"F...\"] A B GRAPH..." >&2; exit 2; }
A=$1 B=$2; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/A" "$tmp/B" # one output name for both: sched.c carries it
field() { python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [v := v[k] for k in sys.argv[2:]]; print(v)' "$@"; }
# the plan file without its wall-clock field
norm() { python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["solver"].pop("seconds",None); print(json.dumps(p,sort_keys=True))' "$1"; }
echo "| graph | f | budget (bytes) | A step (us) | A CPU s | B step (us) | B CPU s | plans |"
echo "|---|---|---|---|---|---|---|---|"
for g in "$@"; do
  name=$(basename "$g" .json)
  "$B" plan "$g" --device "$device" --strategy keep-all --budget 1000% -o "$tmp/k" >/dev/null 2>&1 || { echo "$name: keep-all failed" >&2; continue; }
  k=$(field "$tmp/k.plan.json" predicted peak_live_bytes)
  m=$("$B" plan "$g" --device "$device" --budget 1 -o "$tmp/m" 2>&1 >/dev/null |
      sed -n 's/.*smallest budget planned is \([0-9]*\) bytes.*/\1/p')
  [ -n "$m" ] || { echo "$name: no smallest budget named" >&2; continue; }
  for f in $points; do
    b=$(python3 -c "import sys; m, k, f = map(float, sys.argv[1:]); print(int(m + f * (k - m)))" "$m" "$k" "$f")
    /usr/bin/time -f "%U" -o "$tmp/ta" "$A" plan "$g" --device "$device" --budget "$b" -o "$tmp/A/p" >/dev/null 2>&1 &
    /usr/bin/time -f "%U" -o "$tmp/tb" "$B" plan "$g" --device "$device" --budget "$b" -o "$tmp/B/p" >/dev/null 2>&1
    wait
    if [ -f "$tmp/A/p.plan.json" ] && [ -f "$tmp/B/p.plan.json" ]; then
      sa=$(python3 -c 'import json,sys; print("%.3f" % (json.load(open(sys.argv[1]))["predicted"]["step_seconds"] * 1e6))' "$tmp/A/p.plan.json")
      sb=$(python3 -c 'import json,sys; print("%.3f" % (json.load(open(sys.argv[1]))["predicted"]["step_seconds"] * 1e6))' "$tmp/B/p.plan.json")
      if ! cmp -s "$tmp/A/p.sched.c" "$tmp/B/p.sched.c"; then same=differ
      elif [ "$(norm "$tmp/A/p.plan.json")" = "$(norm "$tmp/B/p.plan.json")" ]; then same=identical
      else same="same schedule"; fi
    else
      sa=-; sb=-; same="no plan"
    fi
    echo "| $name | $f | $b | $sa | $(cat "$tmp/ta") | $sb | $(cat "$tmp/tb") | $same |"
    rm -f "$tmp"/A/* "$tmp"/B/*
  done
done
