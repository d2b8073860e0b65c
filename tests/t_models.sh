#!/bin/sh
# t_models.sh - every checked-in model is what the command in models/README.md
# makes, byte for byte, with the params/ops/stashed numbers the table states;
# three parameter counts are checked against the published models; every
# budget loads; bad arguments exit 2 with one line and write nothing.
. tests/lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

rows=$(grep '^| `' models/README.md | grep -F '`ration model ')
[ -n "$rows" ] && ok "README lists models" || fail "README lists models"
printf '%s\n' "$rows" > "$tmp/rows"
while IFS= read -r row; do
  file=$(printf '%s' "$row" | cut -d'|' -f2 | tr -d ' `')
  cmd=$(printf '%s' "$row" | cut -d'|' -f3 | sed 's/^ *`//; s/` *$//')
  want_params=$(printf '%s' "$row" | cut -d'|' -f4 | tr -d ' ,')
  want_ops=$(printf '%s' "$row" | cut -d'|' -f5 | tr -d ' ,')
  want_stashed=$(printf '%s' "$row" | cut -d'|' -f6 | tr -d ' ,')
  case "$cmd" in "ration model "*" -o $file") ;; *) fail "$file: command writes $file" "$cmd"; continue;; esac
  args=${cmd#ration model }; args=${args% -o $file}
  # shellcheck disable=SC2086
  line=$($RATION model $args -o "$tmp/$(basename "$file")") || { fail "$file: regenerates" "$line"; continue; }
  if cmp -s "$tmp/$(basename "$file")" "$file"; then ok "$file: byte-identical"; else fail "$file: byte-identical"; fi
  got=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) params, [0-9]* tensors, \([0-9]*\) ops, [0-9]* stashed tensors ([^,]*, \([0-9]*\) bytes).*/\1 \2 \3/p')
  if [ "$got" = "$want_params $want_ops $want_stashed" ]; then ok "$file: README numbers"
  else fail "$file: README numbers" "tool says '$got', README '$want_params $want_ops $want_stashed'"; fi
done < "$tmp/rows"

# Published parameter counts (GPT-2 small; Meta's Llama 3 8B and 3.2 1B).
count() { $RATION model "$@" -o "$tmp/c.json" | sed -n 's/.*: \([0-9]*\) params,.*/\1/p'; }
[ "$(count gpt2 --layers 12 --dim 768 --heads 12 --vocab 50257 --seq 1024)" = 124439808 ] \
  && ok "gpt2 124M: 124,439,808 params" || fail "gpt2 124M: 124,439,808 params"
[ "$(count llama --layers 32 --dim 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --seq 16)" = 8030261248 ] \
  && ok "llama3 8B: 8,030,261,248 params" || fail "llama3 8B: 8,030,261,248 params"
[ "$(count llama --layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --tied --seq 16)" = 1235814400 ] \
  && ok "llama3.2 1B: 1,235,814,400 params" || fail "llama3.2 1B: 1,235,814,400 params"

for b in budgets/*.json; do
  name=$(basename "$b" .json)
  if $RATION info models/gpt2-tiny.json --device "$b" 2>"$tmp/err" | grep -q "^device $name ($b)"; then
    ok "$b: loads as device $name"
  else fail "$b: loads as device $name" "$(cat "$tmp/err")"; fi
done

expect_fail "model: unknown family" "unknown family" $RATION model resnet -o "$tmp/x.json"
expect_fail "model: bad --heads" "--heads" $RATION model gpt2 --heads 7 -o "$tmp/x.json"
expect_fail "model: bad --dtype" "--dtype" $RATION model gpt2 --dtype f64 -o "$tmp/x.json"
expect_fail "model: unknown --lora-targets" "unknown target 'qkv'" $RATION model gpt2 --lora 4 --lora-targets q,qkv -o "$tmp/x.json"
expect_fail "model: gpt2 has no gate" "no gate" $RATION model gpt2 --lora 4 --lora-targets gate -o "$tmp/x.json"
expect_fail "model: --lora-alpha without --lora" "need --lora" $RATION model llama --lora-alpha 8 -o "$tmp/x.json"
expect_fail "model: --ema out of range" "--ema" $RATION model gpt2 --ema 1.5 -o "$tmp/x.json"
expect_fail "model: --loss-chunks not dividing" "does not divide" $RATION model gpt2 --seq 100 --batch 1 --loss-chunks 8 -o "$tmp/x.json"
expect_fail "model: no -o" "-o" $RATION model gpt2
expect_fail "model: unwritable -o" "cannot write" $RATION model gpt2 -o "$tmp/no/such/dir.json"
[ ! -e "$tmp/x.json" ] && ok "model: nothing written on error" || fail "model: nothing written on error"
t_done
