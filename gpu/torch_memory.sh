#!/bin/bash
# torch_memory.sh - the PyTorch bridge on a GPU (issue 28's comparison, the
# GPU half of bench/bench_torch_memory.sh): bench/torch_memory.py --cuda on
# the device machine, which has python3 with torch but no GLPK: ration plans
# there through the planner that `make gpu-prep` packed (planner.tar.gz, run
# by the dynamic loader with its own libraries). From the repository root,
# build/gpu carried:
#
#   OUT=DIR BUDGET_S=S bash gpu/torch_memory.sh
#
# Plans are for the card's profile (budgets/h200-141g.json on an H200, else
# h100-sxm-80g): a GPU profile, so ration offloads as well as recomputes.
# Each plan gets ration's --time-limit 10 (the best plan found in 10 s): without
# one, the ILP at 60% of the exported gpt2 ran over 10 minutes of CPU here.
# torch.compile rows run last and stop being started at 2/3 of BUDGET_S.
# Writes OUT/torch_memory.txt.
set -u
OUT=${OUT:-gpu_out}
BUDGET_S=${BUDGET_S:-200}
G=build/gpu
B=build/gpu-dev
mkdir -p "$OUT" $B
tar -C $B -xzf $G/planner.tar.gz || { echo "torch_memory: no $G/planner.tar.gz (make gpu-prep)"; exit 1; }
cat >$B/ration <<WRAP
#!/bin/sh
exec /lib64/ld-linux-x86-64.so.2 --library-path $PWD/$B/planner/lib $PWD/$B/planner/ration "\$@"
WRAP
chmod +x $B/ration
case $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) in
  *H200*) DEV=budgets/h200-141g.json ;;
  *) DEV=budgets/h100-sxm-80g.json ;;
esac
PYTHONUNBUFFERED=1 timeout --kill-after=5 "$BUDGET_S" python3 bench/torch_memory.py "$PWD/$B/ration" 3 $DEV --cuda \
  --plans checkpoint-layers,100%,60% --plan-time-limit 10 --compile-budgets 1.0,0.5,0.0 \
  --compile-after $((BUDGET_S * 2 / 3)) \
  gpt2 llama dit 2>&1 | grep --line-buffered -v -i -e warn -e '_conversion' | tee "$OUT/torch_memory.txt"
