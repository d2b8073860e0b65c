# t_valgrind.sh - libration running a small schedule, and `ration plan`, under
# valgrind: no invalid read or write, no use of uninitialized memory, no
# leak. The runtime part is test_rt_faults (every 9th fault of each kind),
# so the error paths that free what open took are checked too. Valgrind
# needs the release build (ASan and valgrind exclude each other).
. tests/lib.sh
REL=build/rel
if ! command -v valgrind >/dev/null 2>&1; then
  fail "valgrind installed" "the Makefile's DEB_PKGS installs valgrind"; t_done; exit 0
fi
case "${BUILD:-}" in
  *san*) ok "valgrind: runs in the release build's suite, not under ASan (note)"; t_done; exit 0;;
esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
VG="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes"
$VG $REL/tests/test_rt_faults --stride 9 >"$tmp/rt.log" 2>&1; st=$?
res=$(grep '^RESULT' "$tmp/rt.log")
if [ $st -eq 0 ] && [ "$res" = "RESULT 13 0" ]; then ok "a small offload schedule's steps and injected faults: valgrind clean"
else fail "a small offload schedule's steps and injected faults: valgrind clean" "exit $st, $res: $(grep '==' "$tmp/rt.log" | head -20)"; fi
$VG bin/ration plan models/gpt2-tiny.json --device cpu -o "$tmp/p" >"$tmp/plan.log" 2>&1; st=$?
if [ $st -eq 0 ] && [ -s "$tmp/p.sched.c" ]; then ok "ration plan on gpt2-tiny: valgrind clean"
else fail "ration plan on gpt2-tiny: valgrind clean" "exit $st: $(head -20 "$tmp/plan.log")"; fi
$VG bin/ration plan tests/bad/graph-cycle.json --device cpu -o "$tmp/q" >"$tmp/bad.log" 2>&1; st=$?
if [ $st -eq 2 ] && [ ! -e "$tmp/q.plan.json" ]; then ok "ration plan on a bad graph: exit 2, valgrind clean"
else fail "ration plan on a bad graph: exit 2, valgrind clean" "exit $st: $(head -20 "$tmp/bad.log")"; fi
t_done
