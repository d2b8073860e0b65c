# t_plan_monotone.sh - more memory never buys a slower plan: on graphs of
# several structures (bench/gen_graph.py: a chain, long skips, an
# encoder-decoder with cross-attention, a conditioning tensor read by every
# block, a random layered DAG), `ration report`'s ilp sweep (each plan the
# next budget's start) has a plan at every budget from the smallest planned
# to keep-all, with a predicted step time that never grows; and so do
# `ration plan` runs at rising budgets, each on its own. And gpt2-1558m
# within 1.5 MB of keep-all's arena, where the window of peaks any plan
# reaches (3.4 MB) is narrower than keep-all's layout overshoot (8 MB).
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dev=tests/data/gpu-small.json
# monotone CSV: "budget feasible step" lines in budget order -> ok or the first rise.
monotone() {
  awk 'BEGIN { prev = -1 }
       $2 != 1 { print "no plan at " $1; exit 1 }
       prev >= 0 && $3 > prev * (1 + 1e-12) { print "step " $3 " at " $1 " after " prev; exit 1 }
       { prev = $3 }' "$1"
}
# plan_steps GRAPH DEVICE BUDGET... -> "budget 1 step" (or "budget 0 0") per budget, `ration plan` alone at each.
plan_steps() {
  graph=$1 device=$2; shift 2
  for b in "$@"; do
    if $RATION plan "$graph" --device "$device" --budget "$b" -o "$tmp/p" >/dev/null 2>"$tmp/err"; then
      python3 -c 'import json,sys; print(sys.argv[2], 1, json.load(open(sys.argv[1]))["predicted"]["step_seconds"])' \
        "$tmp/p.plan.json" "$b"
    else echo "$b 0 0"; fi
  done
}
for s in chain skips encdec cond dag; do
  python3 bench/gen_graph.py $s --layers 4 --dim 32 --seed 3 -o "$tmp/$s.json" || fail "gen_graph.py $s"
  if $RATION report "$tmp/$s.json" --device $dev --strategies ilp --points 7 -o "$tmp/r-$s" >/dev/null 2>"$tmp/err"; then
    # budget_bytes, feasible, step_seconds (report.csv's columns 5, 7, 8)
    tail -n +2 "$tmp/r-$s/report.csv" | awk -F, '{ print $5, $7, $8 }' >"$tmp/r-$s.txt"
    if why=$(monotone "$tmp/r-$s.txt"); then ok "$s: report sweep, a plan at every budget, step time never rises"
    else fail "$s: report sweep, a plan at every budget, step time never rises" "$why"; fi
    plan_steps "$tmp/$s.json" $dev $(awk '{ print $1 }' "$tmp/r-$s.txt") >"$tmp/p-$s.txt"
    if why=$(monotone "$tmp/p-$s.txt"); then ok "$s: plan at each budget alone, step time never rises"
    else fail "$s: plan at each budget alone, step time never rises" "$why"; fi
  else fail "$s: report" "$(cat "$tmp/err")"; fi
done
plan_steps models/gpt2-1558m.json h100-sxm-80g 24986978099 24987130028 24987739755 >"$tmp/big.txt"
if why=$(monotone "$tmp/big.txt"); then ok "gpt2-1558m near keep-all's arena: plan at each budget alone, step time never rises"
else fail "gpt2-1558m near keep-all's arena: plan at each budget alone, step time never rises" "$why"; fi
t_done
