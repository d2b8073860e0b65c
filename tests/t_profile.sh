# t_profile.sh - profile-guided planning end to end: a trainer linked with an
# emitted gpt2-tiny schedule writes measured op times (--profile, libration's
# rt_write_profile), `ration plan --costs` reads them, and the plan's
# predicted compute time is exactly the sum of the measured times; an
# offload-all run also writes its measured copy bandwidths and the copies'
# share of the compute stream, which the simulator's copy times then follow.
. tests/lib.sh
BUILD=${BUILD:-build/rel}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
san=""; case "$BUILD" in *san*) san="-fsanitize=address,undefined";; esac
g=models/gpt2-tiny.json
if $RATION plan $g --device budgets/cpu.json --budget 200% -o "$tmp/s" >"$tmp/log" 2>&1 &&
   cc $san -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$tmp" -DSCHED_HEADER='"s.sched.h"' \
     -DSCHED_ENTRY=ration_schedule_s -o "$tmp/train" examples/train.c "$tmp/s.sched.c" "$BUILD/libration.a" \
     -lm -lpthread >>"$tmp/log" 2>&1 &&
   "$tmp/train" --steps 3 --sample 0 --graph $g --profile "$tmp/costs.json" >>"$tmp/log" 2>&1; then
  ok "trainer writes a profile"
else
  fail "trainer writes a profile" "$(tail -5 "$tmp/log")"; t_done; exit 0
fi
# The trainer names the graph it expects: another one is a stale schedule.
if ! "$tmp/train" --steps 1 --sample 0 --graph models/llama-tiny.json >"$tmp/out" 2>&1 &&
   grep -q "stale schedule: schedule s was planned from graph sha256 $(sha256sum $g | cut -d' ' -f1), models/llama-tiny.json has" "$tmp/out"; then
  ok "train --graph with another graph: refused as a stale schedule"
else fail "train --graph with another graph: refused as a stale schedule" "$(cat "$tmp/out")"; fi
nops=$(grep -c '"type"' $g)
n=$(grep -c '^  "[^"]*": [0-9.]*,\?$' "$tmp/costs.json")
if grep -q '"format": "ration-costs/1"' "$tmp/costs.json" && [ "$n" -eq "$nops" ] &&
   ! grep -q ': 0.000,\?$' "$tmp/costs.json"; then
  ok "profile: ration-costs/1, a positive time for each of the $nops ops"
else fail "profile: ration-costs/1, a positive time for each of the $nops ops" "$n ops: $(head -3 "$tmp/costs.json")"; fi
if $RATION plan $g --device budgets/cpu.json --budget 200% --costs "$tmp/costs.json" -o "$tmp/p" >"$tmp/log" 2>&1; then
  sum=$(sed -n 's/^  "[^"]*": \([0-9.]*\),\?$/\1/p' "$tmp/costs.json" | awk '{ s += $1 } END { printf "%.6f", s / 1e6 }')
  got=$(sed -n 's/.*"compute_seconds": \([0-9.e+-]*\),.*/\1/p' "$tmp/p.plan.json" | awk '{ printf "%.6f", $1 }')
  if [ "$sum" = "$got" ]; then ok "plan --costs: predicted compute $got s = the profile's sum"
  else fail "plan --costs: predicted compute = the profile's sum" "plan $got s, profile $sum s"; fi
else fail "plan --costs reads the profile" "$(cat "$tmp/log")"; fi

# Copies: an offload-all schedule's profile carries the measured copy
# bandwidths, and the simulator's copy times follow them (200%: on the cpu
# profile, unified_memory, the budget counts the host arena too).
case " $($RATION 2>&1 | sed -n 's/^strategies: //p') " in *" offload-all "*)
  if $RATION plan $g --device budgets/cpu.json --strategy offload-all --budget 200% -o "$tmp/o" >"$tmp/log" 2>&1 &&
     cc $san -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$tmp" -DSCHED_HEADER='"o.sched.h"' \
       -DSCHED_ENTRY=ration_schedule_o -o "$tmp/train-o" examples/train.c "$tmp/o.sched.c" "$BUILD/libration.a" \
       -lm -lpthread >>"$tmp/log" 2>&1 &&
     "$tmp/train-o" --steps 2 --sample 0 --profile "$tmp/o.costs.json" >>"$tmp/log" 2>&1 &&
     grep -q '"d2h_gbps": [0-9]*\.[0-9]*[1-9]' "$tmp/o.costs.json" && grep -q '"h2d_gbps": [0-9]*\.[0-9]*[1-9]' "$tmp/o.costs.json"
  then ok "offload-all profile: measured d2h_gbps and h2d_gbps"
  else fail "offload-all profile: measured d2h_gbps and h2d_gbps" "$(tail -3 "$tmp/log"; tail -3 "$tmp/o.costs.json")"; fi
  sed 's/"h2d_gbps": [0-9.]*/"h2d_gbps": 0.001/; s/"d2h_gbps": [0-9.]*/"d2h_gbps": 0.001/' "$tmp/o.costs.json" >"$tmp/slow.json"
  fast=$($RATION simulate $g "$tmp/o.plan.json" --costs "$tmp/o.costs.json" | sed -n 's/^step_seconds \([0-9.e+-]*\) .*/\1/p')
  slow=$($RATION simulate $g "$tmp/o.plan.json" --costs "$tmp/slow.json" | sed -n 's/^step_seconds \([0-9.e+-]*\) .*/\1/p')
  if [ -n "$fast" ] && [ -n "$slow" ] && awk "BEGIN { exit !($slow > 10 * $fast) }"; then
    ok "simulate --costs: copy times follow the profile's bandwidths ($fast s, at 1 MB/s $slow s)"
  else fail "simulate --costs: copy times follow the profile's bandwidths" "fast '$fast', slow '$slow'"; fi
  sed 's/"h2d_gbps": [0-9.]*/"h2d_gbps": -2/' "$tmp/o.costs.json" >"$tmp/bad.json"
  expect_fail "plan --costs with a negative bandwidth" "$tmp/bad.json: h2d_gbps: must be >= 0, got -2" \
    $RATION plan $g --device budgets/cpu.json --costs "$tmp/bad.json" -o "$tmp/bad"
  sed 's/"copy_compute_share": [0-9.]*/"copy_compute_share": -0.5/' "$tmp/o.costs.json" >"$tmp/bad.json"
  expect_fail "simulate --costs with a negative copy_compute_share" \
    "$tmp/bad.json: copy_compute_share: must be >= 0, got -0.5" $RATION simulate $g "$tmp/o.plan.json" --costs "$tmp/bad.json";;
esac
t_done
