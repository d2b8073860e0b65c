#!/bin/bash
# side_by_side.sh - gpt2-124m keep-all (batch 8, T 1024, bf16, V 50304)
# in ration's CUDA backend and in PyTorch eager, alternated ROUNDS times in
# one run, so that the ratio is not one lucky or unlucky sample of either
# (PyTorch's median step moved 10% between two gpu-check runs). Builds from
# source like gpu-check (gpu/build.sh); build/gpu carried. From the repo root:
#
#   OUT=DIR ROUNDS=N bash gpu/side_by_side.sh
#
# Writes OUT/side_by_side.txt: each round's two medians, then their medians.
set -u
OUT=${OUT:-gpu_out}
ROUNDS=${ROUNDS:-3}
G=build/gpu
B=build/gpu-dev
mkdir -p "$OUT"
F="$OUT/side_by_side.txt"
[ -x $B/bin/step-g124-keep-all ] || B=$B G=$G sh gpu/build.sh >"$OUT/side_by_side_build.log" 2>&1
for r in $(seq "$ROUNDS"); do
  ra=$($B/bin/step-g124-keep-all --steps 8 | awk '$1=="measured_step_ms"{print $2}')
  pt=$(python3 gpu/torch_ref.py $G/g124v50304.json --mode plain --steps 8 | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p')
  echo "round $r ration_ms $ra torch_ms $pt" | tee -a "$F"
done
med() { grep '^round' "$F" | awk -v k="$1" '{print $k}' | sort -n | awk '{a[NR]=$1} END{print (a[int((NR+1)/2)]+a[int(NR/2)+1])/2}'; }
ra=$(med 4); pt=$(med 6)
echo "median ration_ms $ra torch_ms $pt ratio $(awk -v a="$ra" -v b="$pt" 'BEGIN{printf "%.3f", a/b}')" | tee -a "$F"
