# t_simulate.sh - `ration simulate` through the CLI: keep-all plans of every
# model are accepted; plan files broken by hand are rejected with exit 2 and
# one line naming the file, the step and the rule.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in models/*.json; do
  n=$(basename "$m" .json)
  if $RATION plan "$m" --device h100-sxm-80g --strategy keep-all --budget 1TiB -o "$tmp/$n" >/dev/null 2>"$tmp/err" &&
     $RATION simulate "$m" "$tmp/$n.plan.json" >"$tmp/out" 2>&1 && grep -q '^valid:' "$tmp/out"; then ok "simulate accepts keep-all of $n"
  else fail "simulate accepts keep-all of $n" "$(cat "$tmp/err" "$tmp/out")"; fi
done
P=$tmp/gpt2-tiny.plan.json; G=models/gpt2-tiny.json
# Each mutation edits the JSON with python's json module (the stdlib one).
mutate() { /usr/bin/python3 -c "import json,sys; p=json.load(open('$P')); $1; json.dump(p, open('$tmp/bad.json','w'))"; }
mutate "del p['steps'][5]"
expect_fail "simulate: a missing op" "bad.json: steps[5]: runs \"l0.ln2\" before \"l0.res1\": ops missing or out of graph order" $RATION simulate $G $tmp/bad.json
mutate "p['steps'][5], p['steps'][6] = p['steps'][6], p['steps'][5]"
expect_fail "simulate: reordered ops" "steps[5]: runs" $RATION simulate $G $tmp/bad.json
mutate "p['steps'].insert(6, p['steps'][5])"
expect_fail "simulate: a duplicated op" "a second time" $RATION simulate $G $tmp/bad.json
mutate "b=p['steps'][3]['outputs'][0]; p['buffers'][b]['offset']=p['buffers'][p['steps'][2]['outputs'][0]]['offset']"
expect_fail "simulate: overlapping buffers" "overlap in device bytes while both are occupied" $RATION simulate $G $tmp/bad.json
mutate "p['budget_bytes']=p['arena_bytes']-1"
expect_fail "simulate: arena over budget" "is over the budget" $RATION simulate $G $tmp/bad.json
mutate "p['buffers'][0]['offset']=p['arena_bytes']"
expect_fail "simulate: offset past the arena" "past the arena" $RATION simulate $G $tmp/bad.json
mutate "p['steps'][3]['inputs'][0]=p['steps'][10]['outputs'][0]"
expect_fail "simulate: input from the wrong tensor" "is not a buffer of" $RATION simulate $G $tmp/bad.json
t_done
