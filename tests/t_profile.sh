# t_profile.sh - profile-guided planning end to end: a trainer linked with an
# emitted gpt2-tiny schedule writes measured op times (--profile, libration's
# rt_write_profile), `ration plan --costs` reads them, and the plan's
# predicted compute time is exactly the sum of the measured times.
. tests/lib.sh
BUILD=${BUILD:-build/rel}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
san=""; case "$BUILD" in *san*) san="-fsanitize=address,undefined";; esac
g=models/gpt2-tiny.json
if $RATION plan $g --device budgets/cpu.json --budget 200% -o "$tmp/s" >"$tmp/log" 2>&1 &&
   cc $san -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$tmp" -DSCHED_HEADER='"s.sched.h"' \
     -DSCHED_ENTRY=ration_schedule_s -o "$tmp/train" examples/train.c "$tmp/s.sched.c" "$BUILD/libration.a" \
     -lm -lpthread >>"$tmp/log" 2>&1 &&
   "$tmp/train" --steps 3 --sample 0 --profile "$tmp/costs.json" >>"$tmp/log" 2>&1; then
  ok "trainer writes a profile"
else
  fail "trainer writes a profile" "$(tail -5 "$tmp/log")"; t_done; exit 0
fi
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
t_done
