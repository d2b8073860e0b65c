#!/bin/sh
# run.sh - runs every test binary and test script, JOBS at a time (default:
# the machine's cores; the suite's time is mostly a few long tests, which
# run beside the rest), prints each one's output in the list's order, adds
# up their RESULT lines and ends with "N passed, N failed". A line
# "-- NAME done in S s" goes to stderr as each test ends, so a run cut
# short still shows how far it got.
BUILD=${BUILD:-build/rel}
export BUILD
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
passed=0; failed=0; broken=""
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
n=0
for t in "$BUILD"/tests/test_* tests/t_*.sh; do
  [ -e "$t" ] || continue
  case "$t" in *.d|*.o) continue;; esac
  n=$((n+1)); echo "$t" >"$tmp/$n.name"
done

# A worker takes the next test nobody has claimed (mkdir is atomic).
worker() {
  i=1
  while [ $i -le $n ]; do
    if mkdir "$tmp/$i.claim" 2>/dev/null; then
      t=$(cat "$tmp/$i.name"); start=$(date +%s)
      case "$t" in *.sh) sh "$t" >"$tmp/$i.out" 2>&1;; *) "$t" >"$tmp/$i.out" 2>&1;; esac
      echo $? >"$tmp/$i.status"
      echo "-- $(basename "$t") done in $(( $(date +%s) - start )) s" >&2
    fi
    i=$((i+1))
  done
}
w=0
while [ $w -lt "$JOBS" ]; do worker & w=$((w+1)); done
wait

i=1
while [ $i -le $n ]; do
  name=$(basename "$(cat "$tmp/$i.name")")
  echo "== $name"
  cat "$tmp/$i.out"
  st=$(cat "$tmp/$i.status" 2>/dev/null || echo 127)
  res=$(grep '^RESULT ' "$tmp/$i.out" | tail -1)
  i=$((i+1))
  if [ -z "$res" ]; then failed=$((failed+1)); broken="$broken $name(exit $st, no RESULT)"; continue; fi
  p=$(echo "$res" | cut -d' ' -f2); f=$(echo "$res" | cut -d' ' -f3)
  passed=$((passed+p)); failed=$((failed+f))
  if [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed+1)); broken="$broken $name(exit $st)"; fi
done
[ -n "$broken" ] && echo "broken:$broken"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
