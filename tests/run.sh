#!/bin/sh
# run.sh - runs every test binary and test script, adds up their RESULT lines
# and ends with "N passed, N failed".
BUILD=${BUILD:-build/rel}
export BUILD
passed=0; failed=0; broken=""
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for t in "$BUILD"/tests/test_* tests/t_*.sh; do
  [ -e "$t" ] || continue
  case "$t" in *.d|*.o) continue;; esac
  name=$(basename "$t")
  echo "== $name"
  case "$t" in *.sh) sh "$t" >"$tmp/out" 2>&1;; *) "$t" >"$tmp/out" 2>&1;; esac
  st=$?
  cat "$tmp/out"
  res=$(grep '^RESULT ' "$tmp/out" | tail -1)
  if [ -z "$res" ]; then failed=$((failed+1)); broken="$broken $name(exit $st, no RESULT)"; continue; fi
  p=$(echo "$res" | cut -d' ' -f2); f=$(echo "$res" | cut -d' ' -f3)
  passed=$((passed+p)); failed=$((failed+f))
  if [ $st -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed+1)); broken="$broken $name(exit $st)"; fi
done
[ -n "$broken" ] && echo "broken:$broken"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
