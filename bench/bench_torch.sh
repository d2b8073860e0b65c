#!/bin/sh
# bench_torch.sh - ration's CPU backend against PyTorch eager on the same
# model, batch and thread count, side by side in one run: for gpt2-tiny,
# llama-tiny and gpt2-6l384 (6 layers, dim 384, seq 256, batch 4), at 1 and
# 2 threads, the median step of ration keep-all, of ration's ilp plan at 60%
# of the keep-all peak (or, where that is below the smallest budget the
# planner names, `ration plan --budget 1`, at that smallest budget: the
# "plan budget" column gives the budget as a share of keep-all and says
# which), and of bench/torch_model.py (PyTorch from PyPI, in
# a venv this script sets up in build/torch-venv: Debian's 1.13 has a
# generic BLAS and is not what users run). Every figure of a row is
# measured within a minute of the others; compare ratios, not runs.
# The plan is made from the op times of the keep-all run just before it
# (`train --profile` at the row's thread count), so its predicted overhead
# (plan predicted / keep-all predicted, both from that profile) stands
# beside its measured one (plan measured / keep-all measured, keep-all's
# the mean of its runs just before and just after the plan's). This VM's
# speed drifts by up to 1.5x between runs seconds apart, so the overhead is
# also measured with the drift removed: keep-all and the plan trained in ONE
# process in alternating blocks of 4 steps (bench/ab_steps.c, AB_ROUNDS
# rounds, default 8). "within" says whether that overhead is at most the
# predicted one plus 5% of the keep-all step.
# Usage (after `make`): sh bench/bench_torch.sh [STEPS]   (default 20)
#   MODELS (names, e.g. "gpt2-6l384") runs only those models' rows.
set -e
STEPS=${1:-20}
AB_ROUNDS=${AB_ROUNDS:-8}
R=bin/ration
BUILD=${BUILD:-build/rel}
. bench/ab_build.sh
DEV=budgets/cpu.json
VENV=build/torch-venv
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$R model gpt2 --layers 6 --dim 384 --heads 6 --vocab 256 --seq 256 --batch 4 --dtype f32 -o "$tmp/gpt2-6l384.json"

build() { # schedule base path, binary
  base=$(basename "$1")
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -I"$(dirname "$1")" -DSCHED_HEADER="\"$base.sched.h\"" \
    -DSCHED_ENTRY="ration_schedule_$(sched_id "$base")" -o "$2" examples/train.c "$1.sched.c" \
    "$BUILD/libration.a" -lm -lpthread
}
ms() { sed -n 's/^step time: .* measured \([0-9.]*\) ms.*/\1/p'; }
predicted_ms() { sed -n 's/^step time: predicted \([0-9.]*\) ms.*/\1/p'; }

echo "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'), $(nproc) cores, $STEPS steps after a warm-up one"
echo "| model | threads | ration keep-all ms | plan budget | ration plan (ilp) ms | PyTorch eager ms | keep-all / PyTorch | tokens/s keep-all | plan / keep-all predicted | plan / keep-all measured, separate runs | plan / keep-all measured, one process | within | load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for g in models/gpt2-tiny.json models/llama-tiny.json "$tmp/gpt2-6l384.json"; do
  m=$(basename "$g" .json)
  case " ${MODELS:-$m} " in *" $m "*) ;; *) continue ;; esac
  $R plan "$g" --device $DEV --strategy keep-all --budget 200% -o "$tmp/$m-k" >/dev/null
  # 60% of keep-all, or the smallest budget the planner names when 60% is below it.
  keep=$($R info "$g" --device $DEV | sed -n 's/^  keep-all .*(\([0-9]*\) bytes)$/\1/p')
  smallest=$($R plan "$g" --device $DEV --budget 1 -o "$tmp/$m-b1" 2>&1 >/dev/null |
    sed -n 's/.*the smallest budget planned is \([0-9]*\) bytes.*/\1/p')
  if [ -z "$keep" ] || [ -z "$smallest" ]; then echo "$m: no keep-all peak or smallest budget" >&2; exit 1; fi
  budget=$(echo "$keep $smallest" | awk '{ b = int($1 * 0.6); print (b < $2 ? $2 : b) }')
  share=$(echo "$budget $keep $smallest" | awk '{ printf "%.2f%s", $1 / $2, $1 == $3 ? " (smallest)" : " (60%)" }')
  build "$tmp/$m-k" "$tmp/$m-k.train"
  tokens=$(python3 -c "import json; t=[t for t in json.load(open('$g'))['tensors'] if t['name']=='tokens'][0]['shape']; print(t[0]*t[1])")
  for n in 1 2; do
    k1=$("$tmp/$m-k.train" --steps $((STEPS + 1)) --threads $n --sample 0 --profile "$tmp/$m-$n.costs.json" | ms)
    kp=$($R simulate "$g" "$tmp/$m-k.plan.json" --device $DEV --costs "$tmp/$m-$n.costs.json" |
         sed -n 's/^step_seconds \([0-9.e+-]*\) .*/\1/p' | awk '{ printf "%.3f", $1 * 1e3 }')
    # The smallest budget moves a little with the profile's costs: where the
    # row plans at the smallest, it takes the one these costs allow.
    b=$budget; s=$share
    if ! $R plan "$g" --device $DEV --costs "$tmp/$m-$n.costs.json" --budget "$b" --time-limit 20 -o "$tmp/$m-p" \
         >/dev/null 2>"$tmp/err"; then
      b=$(sed -n 's/.*the smallest budget planned is \([0-9]*\) bytes.*/\1/p' "$tmp/err")
      if [ "$budget" != "$smallest" ] || [ -z "$b" ]; then cat "$tmp/err" >&2; exit 1; fi
      $R plan "$g" --device $DEV --costs "$tmp/$m-$n.costs.json" --budget "$b" --time-limit 20 -o "$tmp/$m-p" >/dev/null
      s=$(echo "$b $keep" | awk '{ printf "%.2f (smallest)", $1 / $2 }')
    fi
    build "$tmp/$m-p" "$tmp/$m-p.train"
    out=$("$tmp/$m-p.train" --steps $((STEPS + 1)) --threads $n --sample 0)
    p=$(echo "$out" | ms); pp=$(echo "$out" | predicted_ms)
    k2=$("$tmp/$m-k.train" --steps $((STEPS + 1)) --threads $n --sample 0 | ms)
    k=$(echo "$k1 $k2" | awk '{ printf "%.3f", ($1 + $2) / 2 }')
    ab_build "$tmp/$m-k" "$tmp/$m-p" "$tmp/$m-ab"
    ab=$("$tmp/$m-ab" "$AB_ROUNDS" 4 $n "$tmp/ab-k.json" "$tmp/ab-p.json" |
         sed -n 's/.*step \([0-9.]*\) ms wall.*/\1/p' | tr '\n' ' ')
    t=$("$VENV/bin/python" bench/torch_model.py "$g" $n "$STEPS" | sed -n 's/^median_ms //p')
    echo "| $m | $n | $k | $s | $p | $t | $(echo "$k $t" | awk '{ printf "%.2f", $1 / $2 }') |\
 $(echo "$tokens $k" | awk '{ printf "%.0f", $1 / ($2 / 1e3) }') |\
 $(echo "$pp $kp $p $k $ab" | awk '{ pr = $1 / $2; ab = $6 / $5
       printf "%.3f | %.3f | %.3f | %s", pr, $3 / $4, ab, ab <= pr + 0.05 ? "yes" : "no" }') |\
 $(cut -d' ' -f1 /proc/loadavg) |"
  done
done
