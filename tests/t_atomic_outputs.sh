# t_atomic_outputs.sh - `ration plan` writes OUT.plan.json, OUT.sched.c and
# OUT.sched.h as one set: a run that fails while writing (an injected full
# disk at each file) or is killed (SIGKILL while a file is written, between
# two renames of the commit, or at random points of a real run) leaves the
# previous set byte for byte, or a complete new one, never a partial file
# and never a temporary.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
set3() { for x in plan.json sched.c sched.h; do printf '%s ' "$1.$x"; done; }
same_set() { # same_set A B: the three files of A and B are identical
  for x in plan.json sched.c sched.h; do cmp -s "$1.$x" "$2.$x" || return 1; done
}
no_temps() { [ -z "$(find "$1" -name '*.tmp*')" ]; }

# Two reference sets that differ (the budget is in every file).
$RATION plan tests/data/mlp.json --device cpu -o "$tmp/ref1" >/dev/null 2>&1
$RATION plan tests/data/mlp.json --device cpu --budget 1GiB -o "$tmp/ref2" >/dev/null 2>&1
if same_set "$tmp/ref1" "$tmp/ref1" && ! cmp -s "$tmp/ref1.sched.c" "$tmp/ref2.sched.c" && no_temps "$tmp"; then
  ok "plan writes its three files and no temporary"
else fail "plan writes its three files and no temporary" "$(ls "$tmp")"; fi

for k in 1 2 3; do
  d="$tmp/fail$k"; mkdir "$d"
  for x in plan.json sched.c sched.h; do cp "$tmp/ref1.$x" "$d/out.$x"; done
  err=$(RATION_TEST_FAIL_WRITE=$k $RATION plan tests/data/mlp.json --device cpu --budget 1GiB -o "$d/out" 2>&1 >/dev/null)
  st=$?
  if [ $st -eq 2 ] && printf '%s' "$err" | grep -q "cannot write: No space left on device" && same_set "$d/out" "$tmp/ref1" &&
     no_temps "$d"; then ok "a failed write of file $k leaves the previous set untouched"
  else fail "a failed write of file $k leaves the previous set untouched" "status $st: $err; $(ls "$d")"; fi
done

# Killed while file K's bytes are down but nothing is renamed: no trace,
# in an empty directory and over a previous set.
for k in 1 2 3; do
  for prev in none old; do
    d="$tmp/kill$k$prev"; mkdir "$d"
    [ $prev = old ] && for x in plan.json sched.c sched.h; do cp "$tmp/ref1.$x" "$d/out.$x"; done
    RATION_TEST_WRITE_PAUSE_MS=400 $RATION plan tests/data/mlp.json --device cpu --budget 1GiB -o "$d/out" >/dev/null 2>&1 &
    pid=$!
    sleep "0.$((k * 4 - 2))"
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    if [ $prev = none ]; then left=$(ls "$d"); good=$([ -z "$left" ] && echo y)
    else left=$(ls "$d"); good=$(same_set "$d/out" "$tmp/ref1" && no_temps "$d" && echo y); fi
    if [ "$good" = y ]; then ok "SIGKILL while writing file $k ($prev set before): nothing half-written"
    else fail "SIGKILL while writing file $k ($prev set before): nothing half-written" "left: $left"; fi
  done
done

# Killed between two renames of the commit: the commit is finished all the
# same (it runs in a child of its own), so the new set is whole and no
# temporary is left.
mkdir "$tmp/newref"
$RATION plan tests/data/mlp.json --device cpu --budget 1GiB -o "$tmp/newref/out" >/dev/null 2>&1
for k in 1 2; do
  d="$tmp/commit$k"; mkdir "$d"
  for x in plan.json sched.c sched.h; do cp "$tmp/ref1.$x" "$d/out.$x"; done
  RATION_TEST_COMMIT_PAUSE_MS=600 $RATION plan tests/data/mlp.json --device cpu --budget 1GiB -o "$d/out" >/dev/null 2>&1 &
  pid=$!
  if [ $k = 1 ]; then sleep 0.35; else sleep 0.95; fi
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  for w in 1 2 3 4 5 6 7 8 9 10; do same_set "$d/out" "$tmp/newref/out" && no_temps "$d" && break; sleep 0.5; done
  if same_set "$d/out" "$tmp/newref/out" && no_temps "$d"; then ok "SIGKILL between renames $k and $((k + 1)): the new set whole, no temporary"
  else fail "SIGKILL between renames $k and $((k + 1)): the new set whole, no temporary" "$(ls "$d")"; fi
done

# A real run on a large model, killed at spread-out moments: every file
# present is the complete file of a finished run.
model=models/gpt2-1558m.json
$RATION plan $model --device h100-sxm-80g -o "$tmp/big" >/dev/null 2>&1
bad=""
for ms in 05 10 20 40 80 120 160 200 250 300 350 400 450; do
  d="$tmp/big$ms"; mkdir "$d"
  $RATION plan $model --device h100-sxm-80g -o "$d/big" >/dev/null 2>&1 &
  pid=$!
  sleep "0.$ms"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  for f in "$d"/*; do
    [ -e "$f" ] || continue
    case "$f" in *.tmp*) bad="$bad $f(temporary)"; continue;; esac
    cmp -s "$f" "$tmp/$(basename "$f")" || bad="$bad $f(partial)"
  done
done
if [ -z "$bad" ]; then ok "SIGKILL at 13 moments of a $model run: only complete files"
else fail "SIGKILL at 13 moments of a $model run: only complete files" "$bad"; fi
t_done
