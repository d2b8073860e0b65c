# t_runtime_bytes.sh - a device profile's runtime_bytes (what libration's
# backend keeps on the device for the whole run: the CUDA backend's status
# word and cuBLASLt workspace) is planned as the resident input tensor
# "ration.runtime": every plan's peak grows by exactly those bytes, the
# budget and the smallest budget named count them, simulate finds them with
# or without --device, and the schedule runs. Bad values are refused.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
G=models/llama-tiny.json
R=33554432
# The same device with no runtime bytes, and with R of them.
/usr/bin/python3 -c "
import json
d = json.load(open('budgets/h100-sxm-80g.json'))
d.pop('runtime_bytes', None); d['name'] = 'bare'; json.dump(d, open('$tmp/bare.json', 'w'))
d['runtime_bytes'] = $R; d['name'] = 'rt'; json.dump(d, open('$tmp/rt.json', 'w'))
d['runtime_bytes'] = d['memory']; json.dump(d, open('$tmp/huge.json', 'w'))"
field() { /usr/bin/python3 -c "import json; print(json.load(open('$1'))$2)"; }
for s in keep-all ilp; do
  b=""; [ $s = ilp ] && b="--budget 80%"
  $RATION plan $G --device $tmp/bare.json --strategy $s $b -o $tmp/bare-$s >/dev/null 2>&1
  $RATION plan $G --device $tmp/rt.json --strategy $s $b -o $tmp/rt-$s >/dev/null 2>&1
  pb=$(field $tmp/bare-$s.plan.json "['predicted']['peak_live_bytes']" 2>/dev/null)
  pr=$(field $tmp/rt-$s.plan.json "['predicted']['peak_live_bytes']" 2>/dev/null)
  if [ $s = keep-all ]; then
    if [ -n "$pb" ] && [ "$pr" = "$((pb + R))" ]; then ok "keep-all: the peak grows by exactly runtime_bytes ($pb + $R)"
    else fail "keep-all: the peak grows by exactly runtime_bytes" "bare $pb, with runtime bytes $pr"; fi
  else
    budget=$(field $tmp/rt-$s.plan.json "['budget_bytes']" 2>/dev/null)
    if [ -n "$pr" ] && [ "$pr" -le "$budget" ] && [ "$pr" -gt "$R" ]; then ok "ilp at 80%: the peak with runtime bytes ($pr) is within the budget ($budget)"
    else fail "ilp at 80%: the peak with runtime bytes is within the budget" "peak $pr, budget $budget"; fi
  fi
done
n=$(/usr/bin/python3 -c "
import json
p = json.load(open('$tmp/rt-ilp.plan.json'))
print(sum(1 for b in p['buffers'] if b.get('tensor') == 'ration.runtime' and b['space'] == 'device' and b['bytes'] == $R))")
if [ "$n" = 1 ]; then ok "the plan holds one device buffer of $R bytes for ration.runtime"
else fail "the plan holds one device buffer for ration.runtime" "found $n"; fi
# The smallest budget the planner names counts the runtime bytes, and meets it.
min=$($RATION plan $G --device $tmp/rt.json --budget 1 -o $tmp/probe 2>&1 |
      sed -n 's/.*the smallest budget planned is \([0-9]*\) bytes.*/\1/p')
if [ -n "$min" ] && [ "$min" -gt $R ] && $RATION plan $G --device $tmp/rt.json --budget "$min" -o $tmp/min >/dev/null 2>&1
then ok "the smallest budget named ($min) is above the runtime bytes and plans"
else fail "the smallest budget named counts the runtime bytes and plans" "min $min"; fi
# simulate: with --device, and from the plan's own device name (a profile).
$RATION plan $G --device h100-sxm-80g --budget 80% -o $tmp/h100 >/dev/null 2>&1
for how in "--device $tmp/rt.json $tmp/rt-ilp.plan.json" "$tmp/h100.plan.json"; do
  if $RATION simulate $G $how >$tmp/out 2>&1 && grep -q '^valid:' $tmp/out; then ok "simulate finds the runtime tensor ($how)"
  else fail "simulate finds the runtime tensor ($how)" "$(cat $tmp/out)"; fi
done
# The schedule builds and trains a step on the CPU backend (which ignores the bytes).
id=rt_ilp
san=""; case "${BUILD:-}" in *san*) san="-fsanitize=address,undefined";; esac
if cc $san -std=c11 -O1 -Iruntime -I$tmp -DSCHED_HEADER="\"rt-ilp.sched.h\"" -DSCHED_ENTRY=ration_schedule_rt_ilp \
     -o $tmp/dump tests/step_dump.c $tmp/rt-ilp.sched.c ${BUILD:-build/rel}/libration.a -lm -lpthread >$tmp/log 2>&1 &&
   mkdir -p $tmp/d && $tmp/dump $tmp/d cpu >$tmp/out 2>&1; then ok "a schedule with runtime bytes runs a step"
else fail "a schedule with runtime bytes runs a step" "$(tail -n 3 $tmp/log $tmp/out)"; fi
expect_fail "runtime_bytes past memory less reserve" "huge.json: runtime_bytes: runtime_bytes" \
  $RATION plan $G --device $tmp/huge.json -o $tmp/x
/usr/bin/python3 -c "
import json
g = json.load(open('$G'))
g['tensors'].append({'name': 'ration.runtime', 'shape': [4], 'dtype': 'u8', 'kind': 'input'})
json.dump(g, open('$tmp/clash.json', 'w'))"
expect_fail "a graph may not name a tensor ration.runtime" "is reserved for the runtime" \
  $RATION plan $tmp/clash.json --device $tmp/rt.json -o $tmp/x
if ls $tmp/x.* >/dev/null 2>&1; then fail "refused plans leave no output" "$(ls $tmp/x.*)"; else ok "refused plans leave no output"; fi
t_done
