#!/bin/sh
# run.sh - `make fuzz`: runs each libFuzzer target named on the command line
# for FUZZ_SECONDS, its corpus in $FUZZ_BUILD/corpus/TARGET (kept between
# runs) seeded from tests/fuzz/SEEDS and tests/fuzz/regress/TARGET/. Prints
# one line per target (executions, corpus size) and fails on any finding,
# naming the saved input: copy it to tests/fuzz/regress/TARGET/ and fix.
FUZZ_BUILD=${FUZZ_BUILD:-build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
status=0
for t in "$@"; do
  bin="$FUZZ_BUILD/fuzz_$t"
  corpus="$FUZZ_BUILD/corpus/$t"; seeds="$FUZZ_BUILD/seeds/$t"; art="$FUZZ_BUILD/artifacts/$t"
  rm -rf "$seeds"; mkdir -p "$corpus" "$seeds" "$art"
  globs=$(awk -F'\t' -v t="$t" '$1 == t { print $2 }' tests/fuzz/SEEDS)
  for f in $globs tests/fuzz/regress/"$t"/*; do [ -f "$f" ] && cp "$f" "$seeds/"; done
  log="$FUZZ_BUILD/$t.log"
  # detect_leaks stays on: a leak on an error path is a finding too.
  "$bin" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict=tests/fuzz/json.dict -artifact_prefix="$art/" -print_final_stats=1 \
    "$corpus" "$seeds" >"$log" 2>&1
  st=$?
  execs=$(grep '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  secs=$(grep '^stat::average_exec_per_sec' "$log" | awk '{print $2}')
  n=$(ls "$corpus" | wc -l)
  found=$(ls "$art" | head -1)
  if [ $st -eq 0 ] && [ -z "$found" ]; then
    echo "fuzz $t: ${execs:-?} executions in ${FUZZ_SECONDS} s (${secs:-?}/s), corpus $n inputs, no findings"
  else
    status=1
    echo "fuzz $t: FINDING (exit $st) after ${execs:-?} executions: $art/$found"
    grep -E 'ERROR|fuzz: property broken|runtime error|SUMMARY' "$log" | head -5 | sed 's/^/  /'
    echo "  full log: $log; add the input to tests/fuzz/regress/$t/ and fix it"
  fi
done
exit $status
