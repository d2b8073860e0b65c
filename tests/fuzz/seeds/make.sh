#!/bin/sh
# make.sh - the schedule fuzz target's seeds: real emitted schedules of two
# micro graphs and tests/data/mlp.json under strategies that give copies,
# waits, recomputes, attributes, workspaces and host ops. Run from the repository
# root as `sh tests/fuzz/seeds/make.sh [DIR]` (default: this directory);
# tests/t_emit_c.sh regenerates them into a temporary directory and checks
# that the checked-in ones are what ration emits today.
set -e
R=${RATION:-bin/ration}
D=${1:-tests/fuzz/seeds}
CPU=budgets/cpu.json
$R model gpt2 --layers 1 --dim 16 --heads 2 --vocab 32 --seq 4 --batch 1 --dtype f32 -o "$D/gpt2-micro.json" >/dev/null
$R model llama --layers 1 --dim 16 --heads 2 --kv-heads 1 --ffn 32 --vocab 32 --seq 4 --batch 1 --dtype bf16 \
  -o "$D/llama-micro.json" >/dev/null
plan() { # GRAPH STRATEGY NAME
  $R plan "$1" --device $CPU --strategy "$2" -o "$D/$3" >/dev/null
  rm -f "$D/$3.plan.json" "$D/$3.sched.h"
}
plan "$D/gpt2-micro.json" offload-all gpt2-micro-offload-all
plan "$D/gpt2-micro.json" checkpoint-layers gpt2-micro-checkpoint-layers
plan "$D/llama-micro.json" offload-all llama-micro-offload-all
plan tests/data/mlp.json sqrt-n mlp-sqrt-n
# Host ops: gpt2-micro at half its keep-all peak on a device with copy
# engines and a fast host, where the ilp strategy puts 16 AdamW ops there.
$R plan "$D/gpt2-micro.json" --device tests/data/host-optimizer-dev.json --budget 50% \
  -o "$D/gpt2-micro-host-optimizer" >/dev/null
rm -f "$D/gpt2-micro-host-optimizer.plan.json" "$D/gpt2-micro-host-optimizer.sched.h"
