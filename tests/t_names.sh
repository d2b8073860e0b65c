#!/bin/sh
# t_names.sh - names that hold terminal escape sequences load and plan, and
# nothing the CLI prints for them (stdout or stderr, errors included)
# carries an ESC, a C1 control or a BEL: the sequences are removed whole,
# the printable rest of the name stays, and an error stays one line.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ESC=$(printf '\033'); BEL=$(printf '\007'); CSI1=$(printf '\302\233')
# clean NAME FILE: FILE has no ESC, BEL or C1 CSI byte sequence in it.
clean() {
  if grep -q "$ESC\|$BEL\|$CSI1" "$2"; then fail "$1: no escape sequence printed" "$(od -c "$2" | grep -m3 '033\|007\|302')"
  else ok "$1: no escape sequence printed"; fi
}
# The graph's name gets SGR, tensor h an OSC title and op fc1 a C1 CSI
# that clears the screen (JSON escapes: the file itself is plain ASCII).
sed -e 's/"name": "mlp"/"name": "mlp\\u001b[1mbold"/' \
    -e 's/"h"/"h\\u001b]0;pwned\\u0007"/g' \
    -e 's/"name": "fc1"/"name": "fc1\\u009b2J"/' tests/data/mlp.json >"$tmp/g.json"
sed 's/"test-gpu"/"dev\\u001b[5m"/' tests/data/dev.json >"$tmp/dev.json"

"$RATION" info "$tmp/g.json" --device "$tmp/dev.json" >"$tmp/info" 2>&1
clean "info" "$tmp/info"
if head -1 "$tmp/info" | grep -qxF "graph mlpbold ($tmp/g.json)" && grep -q "^device dev (" "$tmp/info"; then
  ok "info: the names' printable rest"
else fail "info: the names' printable rest" "$(head -1 "$tmp/info")"; fi

"$RATION" plan "$tmp/g.json" --device "$tmp/dev.json" --strategy offload-all -d -o "$tmp/p" >"$tmp/plan" 2>&1
clean "plan -d" "$tmp/plan"
if grep -q "^  h  *offload$" "$tmp/plan" && grep -q "compute  *fc1$" "$tmp/plan"; then ok "plan -d: decisions and steps by name"
else fail "plan -d: decisions and steps by name" "$(head -5 "$tmp/plan")"; fi

"$RATION" simulate "$tmp/g.json" "$tmp/p.plan.json" --device "$tmp/dev.json" --trace >"$tmp/sim" 2>&1
clean "simulate --trace" "$tmp/sim"
tab=$(printf '\t')
if grep -q "^0${tab}compute${tab}fc1${tab}" "$tmp/sim"; then ok "simulate --trace: the op's printable name in its column"
else fail "simulate --trace: the op's printable name in its column" "$(head -3 "$tmp/sim")"; fi

"$RATION" model gpt2 --layers 1 --dim 8 --heads 1 --vocab 16 --seq 4 --batch 1 \
  --name "tiny$(printf '\033[31m\033]8;;http://x/\033\\')red" -o "$tmp/m.json" >"$tmp/model" 2>&1
clean "model --name" "$tmp/model"
if grep -q "^$tmp/m.json: tinyred: " "$tmp/model"; then ok "model: the name's printable rest"
else fail "model: the name's printable rest" "$(cat "$tmp/model")"; fi

expect_fail "model: a graph name that is not UTF-8 (from -o) is refused" \
  "ration: the graph's name \"caf?\" is not UTF-8 (give one with --name)" \
  "$RATION" model gpt2 --layers 1 --dim 8 --heads 1 --vocab 16 --seq 4 --batch 1 -o "$tmp/caf$(printf '\351').json"
if ls "$tmp" | grep -q '^caf'; then fail "model: nothing written for it"; else ok "model: nothing written for it"; fi

# On a terminal too (fit's progress lines are printed only there).
script -qc "'$RATION' fit gpt2 --layers 1 --dim 32 --heads 2 --vocab 256 --seq 16 --batch 2 --device '$tmp/dev.json' \
  --vary batch --budget 2MiB --name 'fit$(printf '\033[31m')red'" /dev/null >"$tmp/tty" 2>&1
clean "fit on a terminal" "$tmp/tty"
if grep -q "^ration fit: batch 2: fits" "$tmp/tty" && grep -q "^fit fitred on dev, budget 2.00 MiB" "$tmp/tty"; then
  ok "fit on a terminal: progress and result by the name's printable rest"
else fail "fit on a terminal: progress and result by the name's printable rest" "$(head -3 "$tmp/tty")"; fi

# Errors: one line, sequences removed, a newline in a name a space.
sed -e 's/{"name": "w2"/{"name": "w1\\n\\u001b[2Jx"/' -e 's/{"name": "dw2"/{"name": "w1\\n\\u001b[2Jx"/' \
  tests/data/mlp.json >"$tmp/dup.json"
expect_fail "error naming a name with a newline and CSI: one line" \
  "$tmp/dup.json: tensors[5].name: duplicate tensor name \"w1 x\" (also tensors[3])" "$RATION" info "$tmp/dup.json"
"$RATION" info "$tmp/dup.json" >"$tmp/err" 2>&1
clean "error naming a name" "$tmp/err"
expect_fail "unknown option with CSI: sequence removed" "ration: info: unknown option --x" \
  "$RATION" info "--$(printf '\033[2J')x"
expect_fail "a path with a byte that is not UTF-8" "$tmp/a?b.json: cannot open: No such file or directory" \
  "$RATION" info "$tmp/a$(printf '\233')b.json"
"$RATION" info "$tmp/a$(printf '\233')b.json" >"$tmp/err" 2>&1
if grep -q "$(printf '\233')" "$tmp/err"; then fail "a path's raw C1 byte is not printed"; else ok "a path's raw C1 byte is not printed"; fi
t_done
