# t_output_targets.sh - what an output path names is respected: a device, a
# FIFO or a terminal is written into and never replaced by a regular file;
# a replaced regular file keeps its mode; a symbolic link stays a link; a
# command that fails (a target that is a directory, an unwritable
# --timeline, a report file it cannot write) exits 2 and writes none of its
# outputs.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
M="model gpt2 --layers 1 --dim 8 --heads 1 --ffn 8 --vocab 16 --seq 4 --batch 1"
is_char() { [ -c "$1" ] && [ ! -L "$1" ]; }

# Device nodes of its own (as root), so that a writer that replaced its
# target could not break the system's /dev/null for anyone else.
if mknod "$tmp/null" c 1 3 2>/dev/null && mknod "$tmp/full" c 1 7 2>/dev/null; then
  $RATION $M -o "$tmp/null" >/dev/null 2>&1; st=$?
  if [ $st -eq 0 ] && is_char "$tmp/null"; then ok "-o a null device: written into, still a device"
  else fail "-o a null device: written into, still a device" "status $st; $(ls -l "$tmp/null")"; fi
  expect_fail "-o a full device: exit 2" "$tmp/full: cannot write: No space left on device" $RATION $M -o "$tmp/full"
  if is_char "$tmp/full"; then ok "-o a full device: still a device"; else fail "-o a full device: still a device" "$(ls -l "$tmp/full")"; fi
else
  ok "device nodes: not root, mknod refused; the FIFO and stdout cases stand for them (note)"
fi
mkfifo "$tmp/fifo"
timeout 20 cat "$tmp/fifo" >"$tmp/from-fifo" & reader=$!
$RATION $M -o "$tmp/fifo" >/dev/null 2>&1; st=$?
[ -p "$tmp/fifo" ] || kill $reader 2>/dev/null
wait $reader
if [ $st -eq 0 ] && [ -p "$tmp/fifo" ] && grep -q '"ration-graph/1"' "$tmp/from-fifo"; then ok "-o FIFO: the graph went through the FIFO, still a FIFO"
else fail "-o FIFO: the graph went through the FIFO, still a FIFO" "status $st; $(ls -l "$tmp")"; fi
ln -s /proc/self/fd/1 "$tmp/stdout"
out=$($RATION plan tests/data/mlp.json --device cpu --timeline "$tmp/stdout" -o "$tmp/p" 2>&1)
if printf '%s' "$out" | grep -q '^<svg' && [ -L "$tmp/stdout" ] && [ -f "$tmp/p.sched.c" ] &&
   [ -z "$(find "$tmp" -name '*.tmp*')" ]; then
  ok "--timeline to stdout (a link to /proc/self/fd/1): the SVG on stdout, the plan in its files"
else fail "--timeline to stdout (a link to /proc/self/fd/1): the SVG on stdout, the plan in its files" "$(printf '%s' "$out" | head -3)"; fi

chmod 640 "$tmp/p.sched.c"; chmod 600 "$tmp/p.plan.json"
ln -s p.sched.h "$tmp/link.h"; ln -s p.sched.h "$tmp/alias.h"
$RATION plan tests/data/mlp.json --device cpu --budget 1GiB -o "$tmp/p" >/dev/null 2>&1
modes=$(stat -c '%a' "$tmp/p.sched.c" "$tmp/p.plan.json" "$tmp/p.sched.h" | tr '\n' ' ')
if [ "$modes" = "640 600 644 " ] && grep -q 1073741824 "$tmp/p.sched.c"; then ok "a rewritten file keeps its mode"
else fail "a rewritten file keeps its mode" "$modes"; fi
$RATION $M -o "$tmp/link.h" >/dev/null 2>&1
if [ -L "$tmp/link.h" ] && grep -q '"ration-graph/1"' "$tmp/p.sched.h"; then ok "a symbolic link stays a link; its target is rewritten"
else fail "a symbolic link stays a link; its target is rewritten" "$(ls -l "$tmp")"; fi
expect_fail "the same file twice in one command" "cannot write: the same file as" \
  $RATION plan tests/data/mlp.json --device cpu --timeline "$tmp/alias.h" -o "$tmp/p"

# Failed commands write nothing.
mkdir "$tmp/f1" "$tmp/f1/out.plan.json"
expect_fail "OUT.plan.json a directory: exit 2" "$tmp/f1/out.plan.json: cannot write: Is a directory" \
  $RATION plan tests/data/mlp.json --device cpu -o "$tmp/f1/out"
if [ "$(ls -A "$tmp/f1")" = out.plan.json ]; then ok "OUT.plan.json a directory: no .sched.c, no .sched.h"
else fail "OUT.plan.json a directory: no .sched.c, no .sched.h" "$(ls -A "$tmp/f1")"; fi
mkdir "$tmp/f2"
expect_fail "unwritable --timeline: exit 2" "$tmp/none/t.svg: cannot write: No such file or directory" \
  $RATION plan tests/data/mlp.json --device cpu --timeline "$tmp/none/t.svg" -o "$tmp/f2/out"
if [ -z "$(ls -A "$tmp/f2")" ]; then ok "unwritable --timeline: no plan files"
else fail "unwritable --timeline: no plan files" "$(ls -A "$tmp/f2")"; fi
mkdir -p "$tmp/f3/r/report.csv"
expect_fail "report.csv a directory: exit 2" "$tmp/f3/r/report.csv: cannot write: Is a directory" \
  $RATION report tests/data/mlp.json --device cpu --points 1 --strategies keep-all -o "$tmp/f3/r"
if [ "$(ls -A "$tmp/f3/r")" = report.csv ]; then ok "report.csv a directory: no other report file"
else fail "report.csv a directory: no other report file" "$(ls -A "$tmp/f3/r")"; fi
expect_fail "report with a bad strategy: exit 2" '--strategies: unknown strategy "nope"' \
  $RATION report tests/data/mlp.json --device cpu --points 1 --strategies nope -o "$tmp/f4"
if [ ! -e "$tmp/f4" ]; then ok "a failed report leaves no directory"; else fail "a failed report leaves no directory"; fi
t_done
