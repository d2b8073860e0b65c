# check_lib.sh - the parts of gpu/check.sh that decide what a log says,
# sourced by it and by tests/t_gpu_check.sh (bash).

# part NAME FILE CMD...: CMD under PART_S seconds, its output appended to
# FILE as it runs, then one line "part NAME: exit N, S s" to FILE and
# stdout (exit 124 or 137: stopped at the limit), so that a hang or a crash
# costs that part alone.
part() {
  local name=$1 file=$2 t0=$SECONDS st line; shift 2
  timeout --kill-after=5 "${PART_S:-60}" "$@" >>"$file" 2>&1; st=$?
  line="part $name: exit $st, $((SECONDS - t0)) s"
  if [ $st -eq 124 ] || [ $st -eq 137 ]; then line="$line, stopped at the part limit (${PART_S:-60} s)"; fi
  echo "$line" | tee -a "$file"
  return $st
}

# next_passed LOG OP...: the OPs whose next-kernel check in LOG passed: at
# least one "next OP PASS" line, no "next OP FAIL" line, and its part
# "next-OP" ended with exit 0 (not a crash, not the time limit).
next_passed() {
  local log=$1 op out=""; shift
  for op; do
    if grep -q "^next $op PASS " "$log" && ! grep -q "^next $op FAIL " "$log" &&
       grep -q "^part next-$op: exit 0," "$log"; then out="$out $op"; fi
  done
  echo "${out# }"
}

# compare A B: "bitwise B vs A: IDENTICAL" when every loss bit and state
# hash of run A equals run B's, else how many lines differ or NO RESULT.
compare() {
  local a=$1 b=$2 d
  if ! grep -q '^state_hash' "$a" 2>/dev/null || ! grep -q '^state_hash' "$b" 2>/dev/null; then
    echo "bitwise $(basename "$b" .txt) vs $(basename "$a" .txt): NO RESULT"; return
  fi
  d=$(diff <(grep -E '^(hash|loss)' "$a" | sed 's/ [0-9.]* ms$//') <(grep -E '^(hash|loss)' "$b" | sed 's/ [0-9.]* ms$//') | grep -c '^>')
  echo "bitwise $(basename "$b" .txt) vs $(basename "$a" .txt): $([ "$d" -eq 0 ] && echo IDENTICAL || echo "$d lines DIFFER")"
}

# ratio A B: A / B to 3 decimals, or "-" when either is missing.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.3f\n", a / b }'
}
