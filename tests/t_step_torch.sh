# t_step_torch.sh - one whole training step (three for the EMA and LoRA gpt2s) of gpt2-tiny, llama-tiny, a
# gpt2 with a padded vocabulary, LoRA fine-tunes of gpt2 and llama (frozen
# base weights, adapters on every target), a gpt2 with an EMA and a llama
# whose padded-vocabulary loss is computed in 4 row blocks (--loss-chunks),
# emitted as a C schedule and run on libration's CPU backend (debug mode),
# against PyTorch (Debian's python3-torch, installed by the Makefile): same
# initial weights and batch, compare the loss, every gradient, the AdamW
# moments and every updated weight within f32 tolerance (tests/torch_step.py).
. tests/lib.sh
BUILD=${BUILD:-build/rel}
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
san=""; case "$BUILD" in *san*) san="-fsanitize=address,undefined";; esac
if ! $PY -c 'import torch, numpy' 2>"$tmp/err"; then
  fail "torch importable by $PY" "$(tail -1 "$tmp/err") (the Makefile's DEB_PKGS installs python3-torch)"
  t_done; exit 0
fi
# gpt2-pad: a vocabulary of 250 padded to 256 (--vocab-pad), as llm.c pads GPT-2's.
$RATION model gpt2 --layers 2 --dim 64 --heads 4 --vocab 250 --vocab-pad 128 --seq 32 --batch 2 --dtype f32 --name gpt2-pad \
  -o "$tmp/gpt2-pad.json" >/dev/null
$RATION model gpt2 --layers 2 --dim 64 --heads 4 --vocab 256 --seq 32 --batch 2 --dtype f32 --lora 4 --lora-alpha 8 \
  --lora-targets q,k,v,o,up,down --ema 0.9 --name gpt2-lora -o "$tmp/gpt2-lora.json" >/dev/null
$RATION model llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 256 --seq 32 --batch 2 --dtype f32 \
  --theta 10000 --lora 4 --lora-targets q,k,v,o,gate,up,down --name llama-lora -o "$tmp/llama-lora.json" >/dev/null
$RATION model gpt2 --layers 2 --dim 64 --heads 4 --vocab 256 --seq 32 --batch 2 --dtype f32 --ema 0.99 --name gpt2-ema \
  -o "$tmp/gpt2-ema.json" >/dev/null
$RATION model llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 250 --vocab-pad 128 --seq 32 --batch 2 \
  --dtype f32 --theta 10000 --loss-chunks 4 --name llama-chunks -o "$tmp/llama-chunks.json" >/dev/null
for name in gpt2-tiny llama-tiny gpt2-pad gpt2-lora llama-lora gpt2-ema llama-chunks; do
  m=models/$name.json
  [ -f "$m" ] || m=$tmp/$name.json
  id=$(echo "$name" | tr -c 'A-Za-z0-9\n' '_')
  mkdir -p "$tmp/$name"
  # The EMA and LoRA gpt2s: 3 steps (the AdamW bias corrections, an EMA of
  # moving weights, adapters whose B has moved).
  steps=1; case $name in gpt2-ema|gpt2-lora) steps=3;; esac
  what="one step"; [ $steps -gt 1 ] && what="$steps steps"
  if ! $RATION plan $m --device budgets/cpu.json -o "$tmp/$name" >"$tmp/log" 2>&1 ||
     ! cc $san -O1 -std=c11 -Iruntime -I"$tmp" -DSCHED_HEADER="\"$name.sched.h\"" -DSCHED_ENTRY=ration_schedule_$id \
        -o "$tmp/dump-$name" tests/step_dump.c "$tmp/$name.sched.c" "$BUILD/libration.a" -lm -lpthread >>"$tmp/log" 2>&1 ||
     ! STEP_DUMP_STEPS=$steps "$tmp/dump-$name" "$tmp/$name" >>"$tmp/log" 2>&1; then
    fail "$name: plan, build and run $what" "$(tail -5 "$tmp/log")"; continue
  fi
  $PY tests/torch_step.py $m "$tmp/$name" $steps >"$tmp/out" 2>&1; st=$?
  n=0; bad=0
  while IFS= read -r line; do
    case "$line" in
      PASS\ whole*|FAIL\ whole*) ;;
      PASS\ *) n=$((n+1));;
      FAIL\ *) n=$((n+1)); bad=$((bad+1)); echo "  $line";;
    esac
  done <"$tmp/out"
  summary=$(grep "whole step" "$tmp/out")
  worst=$(grep -v whole "$tmp/out" | sed -n 's/.*max err \([^ ]*\) of max|torch| \([^ ,]*\).*/\1 \2/p' |
          awk '{ r = ($2 > 0) ? $1 / $2 : 0; if (r > w) w = r } END { printf "%.2g", w }')
  if [ $st -eq 0 ] && [ $bad -eq 0 ] && [ $n -gt 20 ] && echo "$summary" | grep -q "^PASS"; then
    ok "$name: $what vs PyTorch f64: loss, every grad, adam moments and updated weight ($n checks, worst err/max $worst)"
  else
    fail "$name: $what vs PyTorch f64" "exit $st, $n checks, $bad failed: $(tail -3 "$tmp/out")"
  fi
done
t_done
