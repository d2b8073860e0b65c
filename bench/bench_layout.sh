#!/bin/sh
# bench_layout.sh - arena / peak live bytes (fragmentation of the static
# layout) for every checked-in model under every strategy that fits, at
# a few budgets (percent of the keep-all peak; 1000% = unbounded), on the
# h100-sxm-80g profile. The ilp only on the small models (its solve
# dominates the run time elsewhere). Markdown on stdout.
#   sh bench/bench_layout.sh [RATION]     (default bin/ration)
set -e
R=${1:-bin/ration}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| model | strategy | budget | peak live B | arena B | arena / peak | step s |"
echo "|---|---|---|---|---|---|---|"
for m in models/*.json; do
  name=$(basename "$m" .json)
  strategies="keep-all checkpoint-layers sqrt-n offload-all knapsack"
  case "$name" in gpt2-tiny|llama-tiny) strategies="$strategies ilp" ;; esac
  for s in $strategies; do
    for b in 1000% 80% 60%; do
      [ "$s" = keep-all ] && [ "$b" != 1000% ] && continue
      "$R" plan "$m" --device budgets/h100-sxm-80g.json --strategy "$s" --budget "$b" -o "$out/p" >/dev/null 2>&1 || continue
      python3 - "$out/p.plan.json" "$name" "$s" "$b" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
pk, ar = p["predicted"]["peak_live_bytes"], p["arena_bytes"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {pk} | {ar} | {ar / pk:.4f} | {p['predicted']['step_seconds']:.6g} |")
PY
    done
  done
done
