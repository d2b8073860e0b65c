# t_solver.sh - the solver strategies (ilp, exact: whichever the CLI lists)
# under a time limit: every run either writes a valid plan (ration simulate
# accepts it) with the solver's status, or fails with one clear line, and
# finishes near its limit. stderr is a terminal here (a pty), so progress
# output is on; stdout must still hold only ration's own summary line: a
# solver's own terminal output (GLPK's, CBC's) never reaches it.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
strategies=$($RATION 2>&1 | sed -n 's/^strategies: //p')
# run_pty OUTFILE ERRFILE CMD...: CMD with stdout to OUTFILE, stderr on a pty copied to ERRFILE.
run_pty() {
  /usr/bin/python3 - "$@" <<'EOF'
import os, pty, subprocess, sys
out, err, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
m, s = pty.openpty()
p = subprocess.Popen(cmd, stdout=open(out, "wb"), stderr=s, stdin=subprocess.DEVNULL)
os.close(s)
data = b""
while True:
    try:
        chunk = os.read(m, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
open(err, "wb").write(data)
sys.exit(p.wait())
EOF
}
n=0
for s in ilp exact; do
  case " $strategies " in *" $s "*) ;; *) continue;; esac
  for c in "models/gpt2-tiny.json 100% 5" "models/gpt2-tiny.json 80% 1" "models/llama-tiny.json 60% 0.5"; do
    set -- $c; graph=$1; budget=$2; limit=$3
    name="$s on $graph at $budget, --time-limit $limit"
    out="$tmp/p$n"; n=$((n+1))
    t0=$(date +%s%N)
    run_pty "$out.stdout" "$out.stderr" $RATION plan "$graph" --device cpu --strategy $s --budget $budget \
      --time-limit $limit -o "$out"
    st=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    lines=$(grep -c . "$out.stdout")
    if [ $st -eq 0 ]; then
      status=$(grep -o '"status": "[a-z_]*"' "$out.plan.json" | head -1 | cut -d'"' -f4)
      if [ "$lines" -eq 1 ] && grep -q "^$out.plan.json: $s on cpu" "$out.stdout" &&
         $RATION simulate "$graph" "$out.plan.json" --device cpu >/dev/null 2>"$out.sim" &&
         case $status in optimal|feasible|time_limit) true;; *) false;; esac; then
        ok "$name: valid plan, solver status $status, stdout only ration's line ($secs s)"
      else fail "$name: valid plan and clean stdout" "status '$status', stdout: $(head -c 600 "$out.stdout"); $(cat "$out.sim")"; fi
    elif [ $st -eq 2 ]; then
      last=$(tr -d '\r' <"$out.stderr" | grep . | tail -1)
      if [ "$lines" -eq 0 ] && printf '%s' "$last" | grep -q "^$graph: $s: " && [ ! -e "$out.plan.json" ]; then
        ok "$name: clear error, nothing written, stdout empty ($secs s): $last"
      else fail "$name: clear error" "stdout: $(head -c 600 "$out.stdout"); stderr: $last"; fi
    else
      fail "$name: exit 0 or 2" "exit $st: $(tail -c 600 "$out.stderr")"
    fi
    # Generous for a loaded 2-core machine; a solver that ignores its limit takes minutes.
    if awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s < l + 30) }'; then ok "$name: finished within its limit + 30 s"
    else fail "$name: finished within its limit + 30 s" "took $secs s"; fi
  done
done
# CBC (and the LAPACK and OpenBLAS it pulls in, whose worker threads cost
# every process about 0.1 s of CPU) loads only when a plan uses it.
libs() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -o 'file=[^ ]*' | sort -u; }
glpk_libs=$(libs $RATION plan models/gpt2-tiny.json --device cpu --budget 80% -o "$tmp/glpk")
if [ -n "$glpk_libs" ] && ! printf '%s\n' "$glpk_libs" | grep -qi 'cbc\|lapack\|blas'; then
  ok "a glpk plan loads no CBC, LAPACK or BLAS"
else fail "a glpk plan loads no CBC, LAPACK or BLAS" "$(printf '%s ' $glpk_libs)"; fi
cbc_libs=$(libs $RATION plan models/gpt2-tiny.json --device cpu --solver cbc --budget 80% --time-limit 5 -o "$tmp/cbc")
if printf '%s\n' "$cbc_libs" | grep -q 'file=libCbcSolver' && [ -s "$tmp/cbc.plan.json" ]; then
  ok "--solver cbc loads CBC at its first use and plans"
else fail "--solver cbc loads CBC at its first use and plans" "$(printf '%s ' $cbc_libs)"; fi
[ $n -eq 0 ] && ok "no solver strategy in this build (strategies: $strategies) (note)"
t_done
