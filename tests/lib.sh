# lib.sh - helpers for shell tests; each check prints ok/FAIL and the script
# ends with `t_done`, printing "RESULT passed failed" for tests/run.sh.
T_PASSED=0; T_FAILED=0
RATION=${RATION:-bin/ration}
ok()   { T_PASSED=$((T_PASSED+1)); echo "ok   $1"; }
fail() { T_FAILED=$((T_FAILED+1)); echo "FAIL $1"; [ -n "$2" ] && echo "  $2"; }
# expect_fail NAME EXPECTED_SUBSTRING CMD...: exit status 2, one stderr line containing it
expect_fail() {
  name=$1; want=$2; shift 2
  err=$("$@" 2>&1 >/dev/null); st=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ $st -eq 2 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -qF -- "$want"; then ok "$name"
  else fail "$name" "status $st, $lines lines, got: $err; want: $want"; fi
}
t_done() { echo "RESULT $T_PASSED $T_FAILED"; }
