# t_cli.sh - `ration COMMAND --help` prints that command's usage on stdout
# and exits 0; --device NAME finds a profile from any directory: in
# $RATION_DEVICES first, then the installed profiles, then ./budgets; a
# plan over the device's host_memory is refused in one line, exit 2; info
# shows the device's host memory, a plan's summary its host bytes.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
R=$(cd "$(dirname "$RATION")" && pwd)/$(basename "$RATION")
for c in plan simulate info model report fit version; do
  out=$($R $c --help 2>"$tmp/err"); st=$?
  if [ $st -eq 0 ] && printf '%s\n' "$out" | grep -q "^  ration $c" && [ "$(printf '%s\n' "$out" | grep -c '^  ration ')" -eq 1 ] &&
     [ ! -s "$tmp/err" ]; then ok "ration $c --help: its usage alone, exit 0"
  else fail "ration $c --help: its usage alone, exit 0" "status $st: $out $(cat "$tmp/err")"; fi
done
out=$($R --help); st=$?
if [ $st -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c '^  ration ')" -eq 7 ]; then ok "ration --help: every command, exit 0"
else fail "ration --help: every command, exit 0" "status $st"; fi
err=$($R 2>&1 >/dev/null); st=$?
if [ $st -eq 2 ] && [ "$(printf '%s\n' "$err" | head -1)" = "usage: ration COMMAND ..." ]; then ok "no command: usage on stderr, exit 2"
else fail "no command: usage on stderr, exit 2" "status $st"; fi

mkdir "$tmp/devs" "$tmp/elsewhere"
sed 's/"test-gpu"/"from-env"/' tests/data/dev.json >"$tmp/devs/mine.json"
sed 's/"cpu"/"shadowed"/' budgets/cpu.json >"$tmp/devs/cpu.json"
G=$(pwd)/tests/data/mlp.json
out=$(cd "$tmp/elsewhere" && RATION_DEVICES="$tmp/none:$tmp/devs" $R info "$G" --device mine)
if printf '%s' "$out" | grep -q "device from-env ($tmp/devs/mine.json)"; then ok "--device NAME from \$RATION_DEVICES, in another directory"
else fail "--device NAME from \$RATION_DEVICES, in another directory" "$out"; fi
out=$(RATION_DEVICES="$tmp/devs" $R info "$G" --device cpu)
if printf '%s' "$out" | grep -q "device shadowed"; then ok "\$RATION_DEVICES comes before ./budgets"
else fail "\$RATION_DEVICES comes before ./budgets" "$out"; fi
out=$($R info "$G" --device cpu)
if printf '%s' "$out" | grep -q "(budgets/cpu.json)"; then ok "./budgets last"; else fail "./budgets last" "$out"; fi
sed 's/"host_memory": *"[^"]*"/"host_memory": "3MiB"/' budgets/h100-sxm-80g.json >"$tmp/small-host.json"
expect_fail "offload-all over host_memory: one line naming host_memory and the host bytes, exit 2" \
  "strategy offload-all needs a host arena of 18489344 bytes (17.63 MiB) but h100-sxm-80g's host_memory is 3145728 bytes" \
  $R plan models/gpt2-tiny.json --device "$tmp/small-host.json" --strategy offload-all -o "$tmp/host"
if [ -z "$(ls "$tmp" | grep '^host')" ]; then ok "offload-all over host_memory: nothing written"
else fail "offload-all over host_memory: nothing written" "$(ls "$tmp")"; fi
out=$($R info models/gpt2-tiny.json --device h100-sxm-80g; $R info models/gpt2-tiny.json --device cpu)
if printf '%s' "$out" | grep -q "budget 79.00 GiB, host memory 512.00 GiB$" &&
   printf '%s' "$out" | grep -q "budget 8.00 GiB, host memory the same (unified_memory)$"; then ok "info: the device's host memory"
else fail "info: the device's host memory" "$out"; fi
off=$($R plan models/gpt2-tiny.json --device h100-sxm-80g --strategy offload-all -o "$tmp/off")
keep=$($R plan models/gpt2-tiny.json --device h100-sxm-80g --strategy keep-all -o "$tmp/keep")
if printf '%s' "$off" | grep -q ", arena [0-9.]* MiB, host 17.63 MiB, step " && ! printf '%s' "$keep" | grep -q host &&
   grep -q '"host_bytes": 18489344' "$tmp/off.plan.json"; then ok "plan: the summary shows host bytes when there are any"
else fail "plan: the summary shows host bytes when there are any" "$off / $keep"; fi
expect_fail "plan --start with a strategy other than ilp: one line, exit 2" "ration: --start needs the ilp strategy, not keep-all" \
  $R plan models/gpt2-tiny.json --device h100-sxm-80g --strategy keep-all --start "$tmp/off.plan.json" -o "$tmp/start"
if [ -z "$(ls "$tmp" | grep '^start')" ]; then ok "plan --start refused: nothing written"
else fail "plan --start refused: nothing written" "$(ls "$tmp")"; fi
cd "$tmp/elsewhere"
expect_fail "an unknown profile, in another directory: where it was looked for" \
  'no file "nope" and no profile nope.json in $RATION_DEVICES' $R info "$G" --device nope
t_done
